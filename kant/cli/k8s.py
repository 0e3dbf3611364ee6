"""``kant k8s run`` (the scheduler, with leader election) and ``kant k8s demo`` (kant driving
a local API server); ``kant bench k8s`` is registered in :mod:`kant.cli.bench`.
docs/kubernetes.md describes both."""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import socket
import sys
import threading
from typing import Any

from kant.cli import print_result
from kant.cli.options import number
from kant.errors import KantError

DEMO_MAX_NODES = 1000
"""The most fake nodes ``kant k8s demo --nodes`` creates in its local API server."""

DEMO_MAX_JOBS = 10_000
"""The most jobs ``kant k8s demo --jobs`` replays (they all arrive within about 20 s)."""

__all__ = ["add_k8s_parser"]


def add_k8s_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``kant k8s`` with ``run``, ``demo`` and ``server``; returns the ``k8s`` parser."""
    k8s: argparse.ArgumentParser = sub.add_parser("k8s", help="kant as a Kubernetes scheduler")
    ksub = k8s.add_subparsers(dest="k8s", required=True)
    run = ksub.add_parser("run", help="schedule the pods of a cluster (spec.schedulerName: kant)")
    run.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG)")
    run.add_argument("--context", default=None, help="kubeconfig context")
    run.add_argument("--config", default=None, help="the kant config file (YAML)")
    run.add_argument("--identity", default=None, help="leader-election identity (default: host)")
    run.add_argument("--no-leader-elect", action="store_true", help="do not take the Lease")
    run.add_argument(
        "--shutdown-grace",
        type=number(float, low=0),
        default=None,
        metavar="SECONDS",
        help="once stopped (SIGTERM, Ctrl-C), at most this long for the bindings sent to be "
        "answered, the failure histories written and the Lease released, then exit "
        "(default: the config's kubernetes.shutdownGraceSeconds, 10)",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="log every decision")
    run.set_defaults(func=_run)
    demo = ksub.add_parser("demo", help="start a local API server and watch kant schedule it")
    demo.add_argument(
        "--nodes",
        type=number(int, low=1, high=DEMO_MAX_NODES),
        default=16,
        help=f"fake 8-GPU nodes, 1 to {DEMO_MAX_NODES:,} (default 16)",
    )
    demo.add_argument(
        "--jobs",
        type=number(int, low=1, high=DEMO_MAX_JOBS),
        default=40,
        help=f"jobs replayed, 1 to {DEMO_MAX_JOBS:,} (default 40)",
    )
    demo.add_argument("--seed", type=number(int, low=0), default=0, help="an int >= 0")
    demo.add_argument(
        "--speed",
        type=number(float, low=0, low_inclusive=False),
        default=1.0,
        help="time compression, a finite number >= 0.001 (default 1)",
    )
    demo.add_argument("--config", default=None, help="the kant config file (YAML)")
    demo.add_argument("--json", action="store_true", help="last line: one JSON object")
    demo.set_defaults(func=_demo)
    srv = ksub.add_parser("server", help="start a local etcd + kube-apiserver until interrupted")
    srv.set_defaults(func=_server)
    return k8s


def _server(args: argparse.Namespace) -> int:
    del args
    import time

    from kant.k8s.testenv import KubeTestEnv

    try:
        with KubeTestEnv() as env:
            print(f"kubeconfig: {env.kubeconfig}", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    except KantError as e:
        print(f"kant k8s server: {e}", file=sys.stderr)
        return 2
    return 0


def _config(path: str | None) -> Any:
    from kant.config import KantConfig, load_config

    return load_config(path) if path else KantConfig()


def _shim_can_build(cfg: Any) -> None:
    """Refuse (:class:`~kant.errors.InvalidConfigFileError`) a placement strategy the shim
    cannot build: it builds its scheduler with no target workload, which fgd and fgdpp
    need (a file may name them for ``kant simulate --config``)."""
    from kant.errors import InvalidConfigFileError

    try:
        cfg.placer()
    except KantError as e:
        raise InvalidConfigFileError(
            "placement.strategy",
            cfg.source,
            f"the Kubernetes shim cannot build it: {getattr(e, 'reason', e)}",
            value=cfg.placement.strategy,
        ) from None


def _log_with_times(verbose: bool) -> None:
    """``kant k8s run`` logs kant's records once each, on stderr, each with its time (a
    scheduler's log); ``-v``: its decisions too (INFO), unless ``--log-level`` shows more.
    :func:`kant.cli.main` puts the ``kant`` logger back as it was afterwards."""
    from kant.cli import _StderrHandler

    lg = logging.getLogger("kant")
    if verbose and not lg.isEnabledFor(logging.INFO):
        lg.setLevel(logging.INFO)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    lg.handlers[:] = [handler]  # (not also the root logger's: each record once)


def _run(args: argparse.Namespace) -> int:
    _log_with_times(args.verbose)
    try:
        from kant.k8s.client import Api
        from kant.k8s.leader import LeaderElector
        from kant.k8s.settings import parse_settings
        from kant.k8s.shim import Shim
        from kant.k8s.shutdown import SignalRelay, serve

        cfg = _config(args.config)
        parse_settings(cfg.kubernetes, source=cfg.source)  # config mistakes before connecting
        _shim_can_build(cfg)
    except KantError as e:
        print(f"kant k8s run: {e}", file=sys.stderr)
        return 2
    try:
        api = Api.from_kubeconfig(args.kubeconfig, args.context)
        # the server must answer at start (a wrong address, or credentials it refuses, is
        # said at once); once running, the shim rides out an outage, trying again
        api.groups()
        # (quiet: what it meets once its way out has been given up is no news)
        shim = Shim(api, cfg, quiet=threading.Event())
    except (KantError, OSError) as e:
        print(f"kant k8s run: {e}", file=sys.stderr)
        return 2
    stop, lost, hurry = threading.Event(), threading.Event(), threading.Event()
    relay = SignalRelay(stop, hurry)  # (a second signal: what is left is given up at once)
    signals = relay.signals
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, relay.handler)
    s = shim.settings
    grace = s.shutdown_grace_seconds if args.shutdown_grace is None else args.shutdown_grace
    elector = None
    if not args.no_leader_elect:
        identity = args.identity or f"{socket.gethostname()}-{os.getpid()}"
        elector = LeaderElector(api, name=s.lease_name, namespace=s.lease_namespace,
                                identity=identity, duration=s.lease_duration_seconds)  # fmt: skip
        elector.hold(stop, lost)
        if stop.is_set():
            return 0

    def release(timeout: float) -> bool:
        return elector is not None and not lost.is_set() and elector.release(timeout=timeout)

    def expires() -> float:  # (renewed meanwhile; once lost, the way out ends by then)
        return math.inf if elector is None else elector.expires

    try:
        held = elector is not None
        stopped = serve(shim, stop, grace=grace, hurry=hurry, release=release if held else None,
                        lease_expires=expires if held else None)  # fmt: skip
    except KantError as e:
        print(f"kant k8s run: {e}", file=sys.stderr)
        return 1
    finally:
        if elector is not None:
            elector.abandon()  # (the renewals end, released or not)
    if not stopped.in_time:
        logging.getLogger("kant.k8s").warning("%s", stopped.abandoned())
    if lost.is_set() or stopped.lease_expired:
        return 3
    if not stopped.in_time:
        # (cut short, as every kant command a signal cuts short: 130 after Ctrl-C, 143 after
        # SIGTERM)
        return 130 if signals and signals[0] == signal.SIGINT else 143
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        from kant.k8s.demo import demo

        cfg = None
        if args.config:  # (read and checked as `run` reads it, before anything starts)
            cfg = _config(args.config)
            _shim_can_build(cfg)
        result = demo(nodes=args.nodes, jobs=args.jobs, seed=args.seed, speed=args.speed,
                      config=cfg)  # fmt: skip
    except (KantError, OSError) as e:
        print(f"kant k8s demo: {e}", file=sys.stderr)
        return 2
    print_result(result, args.json)
    return 0
