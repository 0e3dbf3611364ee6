"""The shim's binding calls run on :class:`CallPool`: a thread pool whose threads never hold
the process up at exit.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits, and
they first run every call still queued: a ``kant k8s run`` that gives up on an API server
answering nothing (its shutdown grace over, see :mod:`kant.k8s.shutdown`) would then wait
for each of its bindings' timeouts all the same, 30 s per call, 16 at a time."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class CallPool:
    """Up to ``workers`` daemon threads (started as calls come) running the calls
    :meth:`submit` queues, in order; each call's :class:`~concurrent.futures.Future` holds its
    result or exception. A process may exit while calls run or wait: they are dropped."""

    def __init__(self, workers: int, *, name: str = "kant-call") -> None:
        self._workers = workers
        self._name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(*args)``; raises ``RuntimeError`` once :meth:`shutdown` was called."""
        fut: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            self._queue.put((fut, fn, args))
            if len(self._threads) < self._workers:
                t = threading.Thread(
                    target=self._work, daemon=True, name=f"{self._name}-{len(self._threads)}"
                )
                self._threads.append(t)
                t.start()
        return fut

    def shutdown(self, wait: bool = True) -> None:
        """Take no more calls; the calls queued still run. ``wait``: return once they have."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
            for _ in threads:
                self._queue.put(None)
        if wait:
            for t in threads:
                t.join()

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as e:
                fut.set_exception(e)
            else:
                fut.set_result(result)
            del item, fut, fn, args
