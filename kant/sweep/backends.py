"""Where a sweep's runs execute: :class:`LocalPool` (worker processes on this machine, the
default) or :class:`RayCluster` (one Ray task per run, on a local Ray instance or an existing
cluster; ``pip install 'kant[ray]'``).

Both take the same tasks, ``(index, kind, shared, params)``, from an iterator (so the driver
builds each group's input only when its first run is submitted), keep at most ``2 x
workers`` in flight, and yield ``(index, outcome)`` as runs finish (:func:`kant.sweep.runs.
execute`'s outcome). :meth:`share` is how a group's input reaches the workers: the object
itself for the local pool (pickled with each task, as ``concurrent.futures`` does), an
object-store reference for Ray (``ray.put`` once; every task of the group passes the
reference and each node fetches the object once).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
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
    """``workers`` processes on this machine (``workers=1``: in this process, no pool)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers if workers is not None else min(2, os.cpu_count() or 1))
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> LocalPool:
        if self.workers > 1:
            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def share(self, obj: Any) -> Any:
        """The object itself."""
        return obj

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Run the tasks here (one worker) or in the pool (see the module docstring)."""
        if self._pool is None:
            for index, kind, shared, params in tasks:
                yield index, execute(kind, shared, params)
            return
        pool = self._pool
        pending: dict[Future[dict[str, Any]], int] = {}
        it = iter(tasks)
        while _top_up(
            pending, it, 2 * self.workers, lambda k, sh, pa: pool.submit(execute, k, sh, pa)
        ):
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f]):
                index = pending.pop(fut)
                try:
                    yield index, fut.result()
                except Exception as e:  # the process died or the task could not be pickled
                    yield index, _crashed(e)


def _top_up(
    pending: dict[Any, int],
    tasks: Iterator[Task],
    limit: int,
    submit: Callable[[str, Any, Mapping[str, Any]], Any],
) -> bool:
    """Submit tasks until ``limit`` are in flight (``pending``: handle -> task index) or the
    tasks run out; True while anything is in flight."""
    while len(pending) < limit:
        task = next(tasks, None)
        if task is None:
            break
        index, kind, shared, params = task
        pending[submit(kind, shared, params)] = index
    return bool(pending)


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
        """Submit the tasks (at most ``2 x workers`` in flight) and yield each outcome as its
        task finishes (``ray.wait``)."""
        ray = self._ray
        remote = self._remote
        pending: dict[Any, int] = {}
        it = iter(tasks)
        while _top_up(
            pending, it, 2 * self.workers, lambda k, sh, pa: remote.remote(k, sh, dict(pa))
        ):
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index = pending.pop(ref)
                try:
                    yield index, ray.get(ref)
                except Exception as e:  # the worker died (RayTaskError, WorkerCrashedError)
                    yield index, _crashed(e)
