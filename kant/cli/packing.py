"""``kant packing``: argument parsing and the command (the protocol is
:mod:`kant.sim.packing`; ``docs/packing.md``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Final

from kant.cli.options import (
    UsageError,
    existing_file,
    image_file,
    number,
    refuse_own_input,
    writing,
)
from kant.errors import KantError
from kant.placement import strategy_names
from kant.sim.analysis import json_text
from kant.sim.packing import (
    MAX_INFLATE,
    PAPER_POLICIES,
    SEEDS,
    format_result,
    packing,
    seed_text,
)
from kant.sim.report.plots import plot_curves
from kant.sim.scenarios import parse_seeds

__all__ = ["add_packing_parser", "run_packing_command"]

_KIND: Final = {
    **{name: "FGD paper baseline" for name in PAPER_POLICIES},
    "firstfit": "packing baseline (not in the paper)",
    "fgdpp": "kant packing policy (FGD + informed ties)",
}


def add_packing_parser(sub: Any) -> None:
    """Add ``kant packing`` to the top-level sub-command parsers."""
    p = sub.add_parser(
        "packing",
        help="the FGD packing protocol on an openb trace (allocation ratio vs arrived load)",
        description=(
            "Shuffle the pods with each seed, clone pods until the GPU request is INFLATE x "
            "the cluster's GPUs, place them one at a time with no departures, and report the "
            "GPU allocation ratio and fragmented GPUs (% of capacity) against arrived load, "
            "as seed means. See docs/packing.md."
        ),
    )
    p.add_argument("--pods", type=existing_file, help="openb pod list CSV (required)")
    p.add_argument(
        "--nodes",
        type=existing_file,
        help="openb node list CSV, e.g. openb_node_list_gpu_node.csv (required)",
    )
    p.add_argument(
        "--policy",
        default="fgd",
        help="placement policy, see --list-policies (default: fgd, the FGD paper's)",
    )
    p.add_argument(
        "--seeds",
        default=seed_text(SEEDS),
        help=f"seeds: 42-51, 42,43 or a mix (default: {seed_text(SEEDS)})",
    )
    p.add_argument(
        "--inflate",
        type=number(float, low=0, low_inclusive=False, high=MAX_INFLATE),
        default=1.3,
        help=f"target GPU request / capacity, at most {MAX_INFLATE:g}",
    )
    p.add_argument(
        "--workers",
        type=number(int, low=1),
        default=min(2, os.cpu_count() or 1),
        help="processes over seeds (default: the CPUs, at most 2)",
    )
    p.add_argument(
        "--plot",
        metavar="PNG",
        type=image_file,
        help="also save the allocation curve as a PNG (or another format by its extension: "
        "pdf, svg, ...)",
    )
    p.add_argument("--list-policies", action="store_true", help="list the policy names")
    p.add_argument("--json", action="store_true", help="last line: one JSON object")
    p.set_defaults(func=run_packing_command, check=check_packing_args)


def check_packing_args(args: Any) -> None:
    """``--pods`` and ``--nodes`` unless ``--list-policies``; ``--seeds`` well-formed, each
    seed once, and ``--policy`` known (:class:`UsageError`), before any work."""
    if args.list_policies:
        return
    for opt, v in (("--pods", args.pods), ("--nodes", args.nodes)):
        if v is None:
            raise UsageError(f"{opt} FILE is required (or --list-policies)")
    try:
        seeds = parse_seeds(args.seeds)
    except KantError as e:
        raise UsageError(f"--seeds {args.seeds!r}: {getattr(e, 'reason', e)}") from None
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds {args.seeds!r}: name each seed once")
    if args.policy.lower() not in strategy_names():
        raise UsageError(f"--policy {args.policy!r}: unknown; known: {', '.join(strategy_names())}")
    if args.plot is not None:
        refuse_own_input(
            "--plot", args.plot, [args.plot], [("--pods", args.pods), ("--nodes", args.nodes)]
        )


def run_packing_command(args: Any) -> int:
    """``kant packing``: print the table (and the JSON line). A bad value in the options or
    the files they name raises :class:`~kant.errors.KantError` (:func:`kant.cli.main` prints
    it on one line, exit 2)."""
    if args.list_policies:
        kinds = {name: _KIND.get(name, "kant strategy") for name in strategy_names()}
        for name, kind in kinds.items():
            print(f"{name:<14} {kind}")
        if args.json:
            print(json_text({"policies": kinds}))
        return 0
    seeds = parse_seeds(args.seeds)
    try:
        result = packing(
            args.pods,
            args.nodes,
            args.policy,
            seeds=seeds,
            inflate=args.inflate,
            workers=max(1, args.workers),
        )
    except OSError as e:  # a file that became unreadable after the options' check
        print(f"kant packing: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(format_result(result))
    if args.plot:
        with writing("--plot", args.plot):
            # (the check before the run allowed folders still to be made, as --out's)
            Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
            plot_curves([result], args.plot)
        print(f"plot: {args.plot}")
    if args.json:
        print(json_text(result.to_json()))
    return 0
