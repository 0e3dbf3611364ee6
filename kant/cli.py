"""The ``kant`` command line.

``kant simulate`` and ``kant compare`` run the simulator (:mod:`kant.sim.commands`);
``kant bench <name>`` runs a benchmark from :mod:`kant.bench` (every module there with an
``add_parser(subparsers)`` function is a subcommand). Every command prints a readable report;
with ``--json`` its last line is one JSON object, so scripts can ``tail -n1`` it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any


def print_result(result: dict[str, Any], as_json: bool) -> None:
    """Print ``result`` as aligned ``key  value`` lines, then (``as_json``) one JSON line."""
    width = max((len(k) for k in result), default=0)
    for k, v in result.items():
        if isinstance(v, dict):
            v = json.dumps(v)
        print(f"{k:<{width}}  {v}")
    if as_json:
        print(json.dumps(result))


def _run_bench(args: argparse.Namespace) -> int:
    print_result(args.run(args), args.json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kant", description="Kant: a unified scheduler for large AI GPU clusters."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    from kant.sim.commands import add_compare_parser, add_simulate_parser

    add_simulate_parser(sub)
    add_compare_parser(sub)

    from kant.packing import add_packing_parser

    add_packing_parser(sub)

    bench = sub.add_parser("bench", help="benchmarks of the scheduler's hot paths")
    bsub = bench.add_subparsers(dest="bench", required=True)
    import kant.bench as bench_pkg

    for info in sorted(pkgutil.iter_modules(bench_pkg.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"kant.bench.{info.name}")
        add = getattr(mod, "add_parser", None)
        if add is not None:
            add(bsub)
    for p in bsub.choices.values():
        p.add_argument("--json", action="store_true", help="last line: one JSON object")
        p.set_defaults(func=_run_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
