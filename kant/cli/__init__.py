"""The ``kant`` command line: every ``argparse`` parser of the project lives in this package.

- ``kant simulate`` (:mod:`kant.cli.simulate`) and ``kant compare`` (:mod:`kant.cli.compare`)
  run the simulator (:mod:`kant.sim`);
- ``kant packing`` (:mod:`kant.cli.packing`) runs the FGD packing protocol
  (:mod:`kant.sim.packing`);
- ``kant bench <name>`` (:mod:`kant.cli.bench`) runs a benchmark of :mod:`kant.bench`;
- ``kant k8s run`` / ``kant k8s demo`` (:mod:`kant.cli.k8s`) run kant as a Kubernetes
  scheduler (:mod:`kant.k8s`).

Every command prints a readable report; with ``--json`` its last line is one JSON object, so
scripts can ``tail -n1`` it. The subcommand modules are imported when the parser is built,
so ``import kant.cli`` stays light.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main", "print_result"]


def print_result(result: dict[str, Any], as_json: bool) -> None:
    """Print ``result`` as aligned ``key  value`` lines, then (``as_json``) one JSON line."""
    width = max((len(k) for k in result), default=0)
    for k, v in result.items():
        if isinstance(v, dict):
            v = json.dumps(v)
        print(f"{k:<{width}}  {v}")
    if as_json:
        print(json.dumps(result))


def build_parser() -> argparse.ArgumentParser:
    """The ``kant`` parser with every subcommand; each sets ``func`` (args -> exit code)."""
    parser = argparse.ArgumentParser(
        prog="kant", description="Kant: a unified scheduler for large AI GPU clusters."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    from kant.cli.bench import add_bench_parser
    from kant.cli.compare import add_compare_parser
    from kant.cli.k8s import add_k8s_parser
    from kant.cli.packing import add_packing_parser
    from kant.cli.simulate import add_simulate_parser

    add_simulate_parser(sub)
    add_compare_parser(sub)
    add_packing_parser(sub)
    add_bench_parser(sub)
    add_k8s_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
