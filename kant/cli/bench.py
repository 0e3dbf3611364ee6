"""``kant bench <name>``: the argument parsing of every benchmark of :mod:`kant.bench`.

Each subcommand calls one ``bench_*`` function (imported when it runs) and prints its dict
of figures with :func:`kant.cli.print_result`; with ``--json`` the last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

from kant.cli import print_result
from kant.cli.options import UsageError, number
from kant.model import MAX_PODS_PER_JOB
from kant.placement import STRATEGIES, strategy_names
from kant.queueing import policy_names
from kant.sim.scenarios import MAX_JOBS, MAX_TICK

__all__ = ["add_bench_parser", "run_bench_command"]


def add_bench_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``kant bench`` and its benchmarks (``cycle``, ``soak``, ``place``, ``gang``,
    ``snapshot``)
    to the top-level sub-command parsers and return the ``bench`` parser."""
    bench: argparse.ArgumentParser = sub.add_parser(
        "bench", help="benchmarks of the scheduler's hot paths"
    )
    bsub = bench.add_subparsers(dest="bench", required=True)
    _add_cycle(bsub)
    _add_soak(bsub)
    _add_place(bsub)
    _add_snapshot(bsub)
    _add_k8s(bsub)
    for p in bsub.choices.values():
        p.add_argument("--json", action="store_true", help="last line: one JSON object")
        p.set_defaults(func=run_bench_command)
    return bench


def run_bench_command(args: argparse.Namespace) -> int:
    """Run the chosen benchmark (``args.run``) and print its figures; 0."""
    print_result(args.run(args), args.json)
    return 0


_STRATEGY_HELP = "placement strategy (not fgd or fgdpp: they need a target workload; kant packing)"


def _strategies() -> list[str]:
    """The placement strategies a benchmark builds by name: every registered one but those
    that tune themselves to a target workload (fgd, fgdpp), which the benchmarks have none
    to give (``kant packing`` measures them)."""
    return [n for n in strategy_names() if "workload" not in STRATEGIES.uses(n)]


def _steady_state_arguments(
    p: argparse.ArgumentParser, *, nodes: int, pending: int, cycles: int, least_cycles: int = 1
) -> None:
    """The options ``kant bench cycle`` and ``kant bench soak`` share (their set-up)."""
    pos = number(int, low=1)
    p.add_argument("--nodes", type=pos, default=nodes, help=f"8-GPU nodes (default {nodes})")
    p.add_argument(
        "--pending",
        type=number(int, low=1, high=MAX_JOBS),
        default=pending,
        help=f"waiting jobs, at most {MAX_JOBS:,} (default {pending})",
    )
    p.add_argument(
        "--cycles",
        type=number(int, low=least_cycles),
        default=cycles,
        help=f"measured cycles (default {cycles}, at least {least_cycles})",
    )
    p.add_argument(
        "--policy",
        default="backfill",
        type=str.lower,
        choices=policy_names(),
        help="queueing policy",
    )
    p.add_argument(
        "--strategy", default="ebinpack", type=str.lower, choices=_strategies(), help=_STRATEGY_HELP
    )
    p.add_argument(
        "--interval",
        type=number(float, low=0, low_inclusive=False, high=MAX_TICK),
        default=10.0,
        help=f"simulated seconds per cycle, at most a day: {MAX_TICK:g} (default 10)",
    )
    p.add_argument("--seed", type=number(int, low=0), default=7, help="workload seed (default 7)")
    p.add_argument(
        "--no-gc-freeze",
        dest="gc_freeze",
        action="store_false",
        help="leave the set-up's objects to the garbage collector (default: frozen, as a "
        "long-running scheduler does after start-up)",
    )


def _add_cycle(sub: Any) -> None:
    p = sub.add_parser("cycle", help="scheduling cycles with J pending mixed jobs")
    _steady_state_arguments(p, nodes=5000, pending=1000, cycles=50)
    p.add_argument(
        "--no-preemption", dest="preemption", action="store_false", help="disable preemption"
    )
    p.set_defaults(run=_run_cycle)


def _run_cycle(a: argparse.Namespace) -> dict[str, Any]:
    from kant.bench.cycle import bench_cycle

    return _forward(bench_cycle, a)


def _add_soak(sub: Any) -> None:
    p = sub.add_parser("soak", help="many cycles with churn: is a cycle's cost flat?")
    _steady_state_arguments(p, nodes=12500, pending=3000, cycles=300, least_cycles=3)
    pos = number(int, low=1)
    p.add_argument("--node-loss-every", type=pos, default=10, help="cycles between node losses")
    p.add_argument("--node-down-cycles", type=pos, default=20, help="cycles a lost node is away")
    p.add_argument("--gpu-fault-every", type=pos, default=10, help="cycles between GPU faults")
    p.add_argument("--gpu-down-cycles", type=pos, default=15, help="cycles a GPU stays faulty")
    p.add_argument(
        "--bind-fail-one-in",
        type=number(int, low=0),
        default=50,
        help="one new binding in N fails (0: none)",
    )
    p.set_defaults(run=_run_soak)


def _run_soak(a: argparse.Namespace) -> dict[str, Any]:
    from kant.bench.soak import bench_soak

    return _forward(bench_soak, a)


def _forward(bench: Callable[..., dict[str, Any]], a: argparse.Namespace) -> dict[str, Any]:
    """Call ``bench`` with the parsed options named like its parameters."""
    names = inspect.signature(bench).parameters
    return bench(**{n: getattr(a, n) for n in names if hasattr(a, n)})


def _add_place(sub: Any) -> None:
    p = sub.add_parser("place", help="pods placed one at a time: pods/s and latency")
    p.add_argument("--nodes", type=number(int, low=1), default=5000, help="8-GPU nodes")
    p.add_argument(
        "--pods",
        type=number(int, low=1, high=MAX_JOBS),
        default=10000,
        help=f"one-pod jobs placed, at most {MAX_JOBS:,}",
    )
    p.add_argument(
        "--strategy", default="ebinpack", type=str.lower, choices=_strategies(), help=_STRATEGY_HELP
    )
    p.add_argument("--mixed", action="store_true", help="1/2/4/8-GPU pods instead of 1-GPU")
    p.add_argument("--seed", type=number(int, low=0), default=3, help="pod size seed")
    p.set_defaults(run=_run_place, check=_check_place)
    g = sub.add_parser("gang", help="8-GPU gang jobs with leaf-or-spine locality: ms per gang")
    g.add_argument("--nodes", type=number(int, low=1), default=5000, help="8-GPU nodes")
    g.add_argument(
        "--replicas",
        type=number(int, low=1, high=MAX_PODS_PER_JOB),
        default=64,
        help=f"8-GPU pods of each gang, at most {MAX_PODS_PER_JOB:,}",
    )
    g.add_argument("--gangs", type=number(int, low=1), default=30, help="gangs placed")
    g.add_argument(
        "--strategy", default="ebinpack", type=str.lower, choices=_strategies(), help=_STRATEGY_HELP
    )
    g.add_argument(
        "--fill",
        type=number(float, low=0, high=1, high_inclusive=False),
        default=0.5,
        help="share of GPUs busy before the gangs, from 0 to below 1",
    )
    g.add_argument("--seed", type=number(int, low=0), default=5, help="fill seed")
    g.set_defaults(run=_run_gang, check=_check_gang)


def _check_place(a: argparse.Namespace) -> None:
    if not a.mixed and a.pods > 8 * a.nodes:  # (mixed sizes: bench_place checks their sum)
        raise UsageError(f"--pods {a.pods}: --nodes {a.nodes} hold at most {8 * a.nodes} pods")


def _check_gang(a: argparse.Namespace) -> None:
    if a.replicas > a.nodes:
        raise UsageError(
            f"--replicas {a.replicas}: a gang of 8-GPU pods takes a node each; --nodes "
            f"{a.nodes} can never hold one"
        )


def _run_place(a: argparse.Namespace) -> dict[str, Any]:
    from kant.bench.place import bench_place

    return bench_place(a.nodes, a.pods, strategy=a.strategy, mixed=a.mixed, seed=a.seed)


def _run_gang(a: argparse.Namespace) -> dict[str, Any]:
    from kant.bench.place import bench_gang

    return bench_gang(
        a.nodes, a.replicas, gangs=a.gangs, strategy=a.strategy, fill=a.fill, seed=a.seed
    )


def _add_snapshot(sub: Any) -> None:
    p = sub.add_parser("snapshot", help="incremental snapshot refresh vs a full deep copy")
    p.add_argument(
        "--nodes", type=number(int, low=1), default=12500, help="8-GPU nodes (default 12500)"
    )
    p.add_argument(
        "--changed", type=number(int, low=1), default=100, help="nodes changed per refresh"
    )
    p.add_argument("--repeats", type=number(int, low=1), default=50, help="refreshes measured")
    p.add_argument("--seed", type=number(int, low=0), default=7, help="allocation seed")
    p.set_defaults(run=_run_snapshot, check=_check_snapshot)


def _check_snapshot(a: argparse.Namespace) -> None:
    if a.changed > a.nodes:
        raise UsageError(
            f"--changed {a.changed} is more than --nodes {a.nodes}: each change is on a "
            "distinct node"
        )


def _run_snapshot(a: argparse.Namespace) -> dict[str, Any]:
    from kant.bench.snapshot import bench_snapshot

    return bench_snapshot(a.nodes, a.changed, repeats=a.repeats, seed=a.seed)


def _add_k8s(sub: Any) -> None:
    p = sub.add_parser(
        "k8s", help="pods bound per second through a real API server, and creation-to-binding p99"
    )
    pos = number(int, low=1)
    p.add_argument("--pods", type=pos, default=1000, help="pods created (default 1000)")
    p.add_argument("--nodes", type=pos, default=500, help="fake 8-GPU nodes (default 500)")
    p.add_argument(
        "--pod-gpus", type=number(int, low=1, high=8), default=2, help="GPUs per pod (default 2)"
    )
    p.add_argument("--creators", type=pos, default=8, help="threads creating pods (default 8)")
    p.set_defaults(run=_run_k8s, check=_check_k8s)


def _check_k8s(a: argparse.Namespace) -> None:
    room = a.nodes * (8 // a.pod_gpus)
    if a.pods > room:  # (each phase waits for every pod to be bound)
        raise UsageError(
            f"--pods {a.pods}: --nodes {a.nodes} hold at most {room} pods of --pod-gpus "
            f"{a.pod_gpus}"
        )


def _run_k8s(a: argparse.Namespace) -> dict[str, Any]:
    from kant.k8s.demo import bench_k8s

    return bench_k8s(pods=a.pods, nodes=a.nodes, pod_gpus=a.pod_gpus, creators=a.creators)
