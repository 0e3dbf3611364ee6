"""The ``kant`` command line: ``kant bench ...`` (and, as they land, simulate/compare/packing).

Every command prints a human-readable report; with ``--json`` its last line is one JSON
object, so scripts can ``tail -n1`` it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any


def _print_result(result: dict[str, Any], as_json: bool) -> None:
    width = max(len(k) for k in result)
    for k, v in result.items():
        print(f"{k:<{width}}  {v}")
    if as_json:
        print(json.dumps(result, sort_keys=False))


def _cmd_bench_snapshot(args: argparse.Namespace) -> int:
    from kant.bench import bench_snapshot

    res = bench_snapshot(args.nodes, args.changed, repeats=args.repeats, seed=args.seed)
    _print_result(res, args.json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kant", description="Kant: a unified scheduler for large AI GPU clusters."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="micro-benchmarks of the scheduler's hot paths")
    bsub = bench.add_subparsers(dest="bench", required=True)

    snap = bsub.add_parser("snapshot", help="incremental snapshot refresh vs a full deep copy")
    snap.add_argument("--nodes", type=int, default=12500, help="8-GPU nodes (default 12500)")
    snap.add_argument("--changed", type=int, default=100, help="nodes changed per refresh")
    snap.add_argument("--repeats", type=int, default=50)
    snap.add_argument("--seed", type=int, default=7)
    snap.add_argument("--json", action="store_true", help="last line: one JSON object")
    snap.set_defaults(func=_cmd_bench_snapshot)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
