"""The one sweep runner: the runs a store does not hold yet, on a back-end, each record
appended to the store as its run finishes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from kant.sweep.backends import Backend, Task
from kant.sweep.grid import RunSpec
from kant.sweep.inputs import InputDigests, check_inputs
from kant.sweep.runs import prepare
from kant.sweep.store import Store

__all__ = ["SweepSummary", "run_sweep"]


@attrs.frozen(kw_only=True)
class SweepSummary:
    """What one call of :func:`run_sweep` did: ``total`` runs in the grid, ``skipped``
    (already in the store), ``ran`` now, of which ``failed``; ``left`` (not run:
    ``max_runs`` reached); its wall time."""

    total: int
    skipped: int
    ran: int
    failed: int
    left: int
    wall_s: float


def run_sweep(
    specs: Sequence[RunSpec],
    store: Store,
    backend: Backend,
    *,
    max_runs: int | None = None,
    on_done: Callable[[RunSpec, dict[str, Any]], None] | None = None,
    strict_prepare: bool = False,
    retry_failed: bool = False,
) -> SweepSummary:
    """Run every run of ``specs`` that ``store`` holds no record of (``retry_failed``: no
    ``ok`` record of; at most ``max_runs`` of them) on ``backend`` (entered here), appending
    one record per run as it finishes and calling ``on_done(spec, record)``. Each record
    carries the SHA-256 of every input file its run reads (``inputs``), each distinct file
    read once per call.

    Before any run, the runs it skips (in the store already) are compared with their input
    files as they are now (:func:`kant.sweep.inputs.check_inputs`): a file whose content
    differs from that the run's last record was made from raises
    :class:`~kant.errors.ChangedInputError` and nothing runs. The runs ``retry_failed`` runs
    again are not compared: their new record replaces the old.

    Each group's shared input (:func:`kant.sweep.runs.prepare`) is built once, when its first
    run is submitted, and handed to the back-end's ``share``. If building it raises, every run
    of the group is recorded as failed with that error (``strict_prepare``: the error is
    raised instead, for a command that checks its options this way)."""
    t0 = time.perf_counter()
    latest = store.latest()
    done = store.done(retry_failed=retry_failed, latest=latest)
    digests = InputDigests()
    check_inputs([s for s in specs if s.key in done], latest, digests, str(store.path))
    todo = [s for s in specs if s.key not in done]
    skipped = len(specs) - len(todo)
    order: dict[tuple[Any, ...], int] = {}
    for s in todo:
        order.setdefault(s.group, len(order))
    todo.sort(key=lambda s: order[s.group])  # stable: grid order within a group
    left = 0
    if max_runs is not None and len(todo) > max_runs:
        left = len(todo) - max_runs
        todo = todo[:max_runs]
    failed = 0

    def record(spec: RunSpec, outcome: dict[str, Any]) -> None:
        nonlocal failed
        rec = {
            "key": spec.key,
            "kind": spec.kind,
            "params": dict(spec.params),
            "inputs": digests.of(spec),
            **outcome,
        }
        failed += rec["status"] != "ok"
        store.append(rec)
        if on_done is not None:
            on_done(spec, rec)

    def tasks(b: Backend) -> Iterator[Task]:
        group: tuple[Any, ...] | None = None
        shared: Any = None
        error: str | None = None
        for i, spec in enumerate(todo):
            if spec.group != group:
                group, shared, error = spec.group, None, None
                digests.of(spec)  # (the group's files, as prepare reads them: one digest each)
                try:
                    shared = b.share(prepare(spec.kind, spec.inputs))
                except Exception as e:
                    if strict_prepare:
                        raise
                    error = f"{type(e).__name__}: {e} (while building the run's input)"
            if error is not None:
                record(spec, {"status": "failed", "metrics": None, "error": error, "wall_s": 0.0})
                continue
            yield i, spec.kind, shared, spec.inputs

    with backend as b:
        for i, outcome in b.run(tasks(b)):
            record(todo[i], outcome)
    return SweepSummary(
        total=len(specs),
        skipped=skipped,
        ran=len(todo),
        failed=failed,
        left=left,
        wall_s=time.perf_counter() - t0,
    )
