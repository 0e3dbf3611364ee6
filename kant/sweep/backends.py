"""Where a sweep's runs execute: :class:`LocalPool` (worker processes on this machine, the
default) or :class:`RayCluster` (one Ray task per run, on a local Ray instance or an existing
cluster; ``pip install 'kant[ray]'``).

Both take the same tasks, ``(index, kind, shared, params)``, from an iterator (so the driver
builds each group's input only when its first run is submitted), keep at most ``2 x
workers`` submitted (``workers`` for Ray when asked for: a cluster runs as many as it has
free CPUs), and yield ``(index, outcome)`` as runs finish (:func:`kant.sweep.runs.
execute`'s outcome). :meth:`share` is how a group's input reaches the workers: the object
itself for the local pool (pickled with each task, as ``concurrent.futures`` does), an
object-store reference for Ray (``ray.put`` once; every task of the group passes the
reference and each node fetches the object once).
"""

from __future__ import annotations

import os
import re
import signal
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, Protocol

from kant.errors import BackendError
from kant.sweep.runs import execute

__all__ = ["Backend", "LocalPool", "RayCluster", "Task"]

Task = tuple[int, str, Any, Mapping[str, Any]]
"""``(index, kind, shared, params)``: one run for a back-end."""


class Backend(Protocol):
    """What the sweep runner needs of a back-end."""

    workers: int

    def __enter__(self) -> Backend: ...

    def __exit__(self, *exc: object) -> None: ...

    def share(self, obj: Any) -> Any:
        """A handle of ``obj`` that tasks pass instead of the object."""
        ...

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Run every task, yielding ``(index, outcome)`` as each finishes."""
        ...


def _crashed(e: BaseException) -> dict[str, Any]:
    return {
        "status": "failed",
        "metrics": None,
        "error": f"{type(e).__name__}: {e} (the worker did not return)",
        "wall_s": None,
    }


class LocalPool:
    """``workers`` processes on this machine (``workers=1``: in this process, no pool).

    A worker process that dies (killed, out of memory) breaks a ``ProcessPoolExecutor``:
    every run in flight comes back with ``BrokenProcessPool``, the one that killed it and
    the healthy ones alike. The pool is then started again and each of those runs is run
    again alone: one that breaks the pool alone comes back as a failed record (its worker
    did not return), the others' outcomes are theirs, and the sweep goes on."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers if workers is not None else self.default_workers())
        self._pool: ProcessPoolExecutor | None = None

    @staticmethod
    def default_workers() -> int:
        """The workers of a pool not told how many: up to 2, no more than this machine's
        CPUs."""
        return min(2, os.cpu_count() or 1)

    def __enter__(self) -> LocalPool:
        if self.workers > 1:
            self._pool = _new_pool(self.workers)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            stop = exc[0] if exc else None
            if isinstance(stop, type) and not issubclass(stop, Exception):
                # stopped (Ctrl-C, SIGINT to this process alone: ``kill -INT``, a notebook's
                # stop; SIGTERM, which the CLI raises as an exception that is no Exception;
                # sys.exit): the runs in flight are given up at once; waiting for them only
                # to drop their records took as long as the longest run
                _terminate_workers(self._pool)
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def share(self, obj: Any) -> Any:
        """The object itself."""
        return obj

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Run the tasks here (one worker) or in the pool (see the module docstring and the
        class's: a run whose worker dies is a failed record, the others complete)."""
        if self._pool is None:
            for index, kind, shared, params in tasks:
                yield index, execute(kind, shared, params)
            return
        pending: dict[Future[dict[str, Any]], int] = {}
        it = iter(tasks)
        held: dict[int, Task] = {}  # index -> the task, while it is in flight
        suspects: list[Task] = []  # in flight when the pool broke: each is run again alone

        def submit(task: Task) -> Future[dict[str, Any]]:
            held[task[0]] = task
            return self._submit(task)

        while _top_up(pending, it, 2 * self.workers, submit):
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            if any(_broke(f) for f in done):
                wait(pending)  # (a broken pool fails every run in flight at once)
                done = set(pending)
            for fut in sorted(done, key=lambda f: pending[f]):
                index = pending.pop(fut)
                task = held.pop(index)
                if _broke(fut):
                    suspects.append(task)
                    continue
                try:
                    yield index, fut.result()
                except Exception as e:  # the task could not be pickled, ...
                    yield index, _crashed(e)
            if suspects:
                self._restart()
                for task in suspects:
                    yield task[0], self._alone(task)
                suspects.clear()

    def _submit(self, task: Task) -> Future[dict[str, Any]]:
        """The task's future; a pool found broken on submit gives a future that holds the
        ``BrokenProcessPool`` (dealt with as the runs in flight are)."""
        assert self._pool is not None
        _index, kind, shared, params = task
        try:
            with _stops_held():  # (a submit may fork the workers)
                return self._pool.submit(execute, kind, shared, params)
        except BrokenProcessPool as e:
            fut: Future[dict[str, Any]] = Future()
            fut.set_exception(e)
            return fut

    def _restart(self) -> None:
        """A new pool in place of a broken one."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = _new_pool(self.workers)

    def _alone(self, task: Task) -> dict[str, Any]:
        """Run one task with nothing else in flight: its outcome, or a failed one if it
        breaks the pool (which is then started again)."""
        fut = self._submit(task)
        wait([fut])
        if _broke(fut):
            self._restart()
            return _died()
        try:
            return fut.result()
        except Exception as e:
            return _crashed(e)


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, initializer=_worker_signals)


_STOPS = {signal.SIGTERM, signal.SIGINT}


@contextmanager
def _stops_held() -> Iterator[None]:
    """SIGTERM and SIGINT held back from this thread meanwhile (delivered when it ends): a
    worker forked meanwhile starts with them held too, until :func:`_worker_signals` has
    put its own handlers in place of its parent's."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _worker_signals() -> None:
    """A worker leaves stopping to the sweep's process: SIGTERM ends it at once, as
    :func:`_terminate_workers` means it to, and SIGINT (a terminal's Ctrl-C reaches the
    whole process group) is ignored, the sweep's process terminating its workers itself.
    A forked worker would otherwise keep the handlers of the process that forked it (the
    CLI's, which turn SIGTERM into an exception): a worker stopped while it read its next
    task printed that exception's traceback under the sweep's one-line message. It is
    forked with both signals held (:func:`_stops_held`), so one sent before this ran (the
    pool terminating a worker just started) is acted on only now, by these handlers."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)


def _terminate_workers(pool: ProcessPoolExecutor) -> None:
    """Stop the pool's worker processes now (the executor has no public way before Python
    3.14's ``terminate_workers``; its process table is read, and nothing if it is gone)."""
    procs = getattr(pool, "_processes", None) or {}
    for proc in list(procs.values()):
        if proc.is_alive():
            proc.terminate()


def _broke(fut: Future[Any]) -> bool:
    """Whether a finished future failed because its pool broke (a worker process died)."""
    return not fut.cancelled() and isinstance(fut.exception(), BrokenProcessPool)


def _died() -> dict[str, Any]:
    return {
        "status": "failed",
        "metrics": None,
        "error": "BrokenProcessPool: the worker process died running this run alone (killed, "
        "out of memory, or exited; the worker did not return)",
        "wall_s": None,
    }


def _top_up(
    pending: dict[Any, int],
    tasks: Iterator[Task],
    limit: int,
    submit: Callable[[Task], Any],
) -> bool:
    """Submit tasks until ``limit`` are in flight (``pending``: handle -> task index) or the
    tasks run out; True while anything is in flight."""
    while len(pending) < limit:
        task = next(tasks, None)
        if task is None:
            break
        pending[submit(task)] = task[0]
    return bool(pending)


_PROBE_S = 3.0  # how long a Ray address given as host:port has to accept a connection
_HOST_PORT = re.compile(r"(?:ray://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(?P<port>\d+)")


_HOST = r"(?:\[[0-9A-Fa-f:.]+(?:%[^\s\]]+)?\]|[^\s:/\[\]]+)"
# ray://HOST[:PORT], HOST:PORT, or another client scheme Ray imports as a module
_ADDRESS = re.compile(rf"ray://{_HOST}(?::\d+)?|{_HOST}:\d+|(?!ray://)[A-Za-z][\w.+-]*://\S+")


def _check_address(address: str | None, named: str) -> None:
    """Raise :class:`BackendError` unless ``address`` is None or of a form Ray takes:
    ``auto``, ``local``, ``host:port`` (an IPv6 host in brackets, a zone id too),
    ``ray://host[:port]`` or another client scheme's ``module://...`` (Ray logs a traceback
    of its own for an empty host, then raises). ``named``: where the address came from."""
    if address is None or address in ("auto", "local"):
        return
    if _ADDRESS.fullmatch(address) is None:
        raise BackendError(
            f"Ray address {named} {address!r} is none of auto, local, HOST:PORT, ray://HOST[:PORT]"
        )


def _probe(address: str | None) -> None:
    """Raise :class:`BackendError` unless ``address``, when it is a plain ``host:port`` (or
    ``ray://host:port``), accepts a TCP connection within a few seconds: Ray itself retries
    an unreachable address for minutes, which looks like a hang. Other addresses (``auto``,
    none) are left to Ray."""
    m = _HOST_PORT.fullmatch(address or "")
    if m is None:
        return
    host, port = m["host"], int(m["port"])
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=_PROBE_S):
            pass
    except (OSError, OverflowError) as e:  # refused, timed out, unknown host; port > 65535
        raise BackendError(
            f"cannot start or reach Ray ({address}): cannot connect to {host}:{port} within "
            f"{_PROBE_S:g} s ({e})"
        ) from None


class RayCluster:
    """One Ray task per run. ``address``: an existing cluster (``auto``, ``ray://host:10001``;
    None: the one Ray is already connected to, else ``$RAY_ADDRESS``, else a new local
    instance with ``workers`` CPUs). ``workers``: runs in flight at once (default: the
    cluster's CPUs), each task asking one CPU."""

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        self.address = address
        self.workers = workers or 0
        self._asked = workers
        self._started = False
        self._ray: Any = None
        self._remote: Any = None

    def __enter__(self) -> RayCluster:
        try:
            import ray
        except ImportError:
            raise BackendError(
                "the Ray back-end needs Ray: pip install 'kant[ray]' (or pip install ray)"
            ) from None
        self._ray = ray
        if not ray.is_initialized():
            kw: dict[str, Any] = {"log_to_driver": False}
            if self.address:
                kw["address"] = self.address
            elif not os.environ.get("RAY_ADDRESS"):
                kw["include_dashboard"] = False
                if self._asked:
                    kw["num_cpus"] = self._asked
            if self.address:
                _check_address(self.address, "--ray")
            else:
                _check_address(os.environ.get("RAY_ADDRESS") or None, "$RAY_ADDRESS")
            _probe(self.address or os.environ.get("RAY_ADDRESS"))
            try:
                ray.init(**kw)
            except Exception as e:  # connection refused, bad address, ...
                raise BackendError(f"cannot start or reach Ray ({self.address}): {e}") from None
            self._started = True
        if not self.workers:
            cpus = ray.cluster_resources().get("CPU", 1)  # type: ignore[no-untyped-call]
            self.workers = max(1, int(cpus))
        self._remote = ray.remote(num_cpus=1, max_retries=0)(execute)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False

    def share(self, obj: Any) -> Any:
        """``ray.put(obj)``: in the object store once, passed by reference."""
        return self._ray.put(obj)

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Submit the tasks and yield each outcome as its task finishes (``ray.wait``). In
        flight: ``workers`` tasks when asked for (a cluster's free CPUs would run more), else
        twice the cluster's CPUs, so that Ray always has the next run queued."""
        ray = self._ray
        remote = self._remote
        pending: dict[Any, int] = {}
        it = iter(tasks)
        limit = self.workers if self._asked else 2 * self.workers
        while _top_up(pending, it, limit, lambda t: remote.remote(t[1], t[2], dict(t[3]))):
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index = pending.pop(ref)
                try:
                    yield index, ray.get(ref)
                except Exception as e:  # the worker died (RayTaskError, WorkerCrashedError)
                    yield index, _crashed(e)
