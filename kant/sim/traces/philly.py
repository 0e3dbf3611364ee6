"""Microsoft Philly, the per-job table as extracted by Pollux
(``timestamp,duration,num_gpus,gpu_time,cluster``): :func:`load_philly_jobs`.

Column mapping: ``docs/traces.md``; errors: :mod:`kant.sim.traces.common`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Final

from kant.errors import InvalidTraceError, ValidationError
from kant.model import Job, JobKind, is_int
from kant.sim.traces.common import (
    CsvFile,
    ErrorMode,
    JobTrace,
    PathLike,
    RowCollector,
    as_trace_error,
    check_errors,
    check_pod_split,
    gang_roles,
    open_trace,
    parse_number,
    parse_uint,
    sorted_jobs,
    trace_path,
)

__all__ = ["PHILLY_COLUMNS", "load_philly_jobs"]

PHILLY_COLUMNS: Final = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
"""The columns a Philly table must have (found by header name)."""

_PHILLY_TS: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}")


def load_philly_jobs(
    path: PathLike,
    *,
    errors: ErrorMode = "raise",
    epoch: datetime | None = None,
    max_gpus_per_pod: int = 8,
    cpu_milli_per_gpu: int = 0,
    memory_mib_per_gpu: int = 0,
    limit: int | None = None,
) -> JobTrace:
    """Read the Philly per-job table (``timestamp,duration,num_gpus,gpu_time,cluster``).

    Each row is a gang training job: id ``philly-{k:05d}`` (``k`` = 0-based data row index, so ids
    do not depend on sorting), tenant = the virtual cluster (``cluster``), ``num_gpus`` split
    into pods of at most ``max_gpus_per_pod`` GPUs (:func:`gang_roles`), ``submitted_at`` =
    seconds from ``epoch`` (default: the earliest timestamp of the loaded rows, so the first
    job arrives at 0), ``runtime_estimate`` = ``duration``. ``limit`` reads only the first
    ``limit`` data rows.

    Every argument is checked before the file is opened (:class:`~kant.errors.ValidationError`
    naming it): ``epoch`` None or a naive ``datetime`` (the file's timestamps have no time
    zone), ``limit`` None or an int >= 0, and the pod split as :func:`check_pod_split` says.
    """
    p = trace_path(path)
    check_errors(errors)
    check_pod_split(max_gpus_per_pod, cpu_milli_per_gpu, memory_mib_per_gpu)
    if epoch is not None and (not isinstance(epoch, datetime) or epoch.utcoffset() is not None):
        raise ValidationError(
            "epoch",
            epoch,
            "must be None or a datetime without a time zone (the file's timestamps have none)",
        )
    if limit is not None and (not is_int(limit) or limit < 0):
        raise ValidationError("limit", limit, "must be None or an int >= 0")
    col = RowCollector(p, errors)
    parsed: list[tuple[int, int, datetime, float, int, str]] = []
    with open_trace(p) as f:
        reader = CsvFile(f, p, col, header=True)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in PHILLY_COLUMNS if c not in header]
        if missing:
            raise InvalidTraceError(
                "header", header, f"needs columns {list(PHILLY_COLUMNS)}", where=col.where(1)
            )
        twice = sorted({c for c in header if c and header.count(c) > 1})
        if twice:
            raise InvalidTraceError("header", header, f"names {twice} twice", where=col.where(1))
        ix = {c: header.index(c) for c in PHILLY_COLUMNS}
        for k, where, row in col.csv_rows(reader, len(header), limit):
            try:
                ts, dur, gpus, vc = _philly_row(row, ix, where)
            except InvalidTraceError as e:
                col.fail(e)
                continue
            parsed.append((k, reader.line_num, ts, dur, gpus, vc))
    base = epoch if epoch is not None else min((r[2] for r in parsed), default=None)
    jobs: list[Job] = []
    for k, line, ts, dur, gpus, vc in parsed:
        assert base is not None
        sub = (ts - base).total_seconds()
        where = col.where(line)
        if sub < 0:
            col.fail(InvalidTraceError("timestamp", str(ts), "is before the epoch", where=where))
            continue
        try:
            job = Job(
                id=f"philly-{k:05d}",
                tenant=vc,
                submitted_at=sub,
                kind=JobKind.TRAINING,
                gang=True,
                roles=gang_roles(
                    gpus,
                    max_gpus_per_pod=max_gpus_per_pod,
                    cpu_milli_per_gpu=cpu_milli_per_gpu,
                    memory_mib_per_gpu=memory_mib_per_gpu,
                ),
                runtime_estimate=dur,
            )
        except ValidationError as e:
            err = as_trace_error(e, where)
            if e.field in ("replicas", "roles"):
                # The roles are built from num_gpus: name the file's value, not the pod count.
                reason = f"as pods of at most {max_gpus_per_pod} GPUs, {e.field} {e.value!r}"
                err = InvalidTraceError("num_gpus", gpus, f"{reason} {e.reason}", where=where)
            col.fail(err)
            continue
        jobs.append(job)
    meta = {"epoch": base.isoformat(sep=" ")} if base is not None else {}
    return JobTrace(jobs=sorted_jobs(jobs), report=col.report(len(jobs)), meta=meta)


def _philly_row(
    row: list[str], ix: Mapping[str, int], where: str
) -> tuple[datetime, float, int, str]:
    """(timestamp, duration, GPUs, virtual cluster) of a data row, checked."""
    ts_text = row[ix["timestamp"]].strip()
    try:
        if not _PHILLY_TS.fullmatch(ts_text):
            raise ValueError(ts_text)
        ts = datetime.fromisoformat(ts_text)
    except ValueError:
        raise InvalidTraceError(
            "timestamp", ts_text, "must be 'YYYY-mm-dd HH:MM:SS'", where=where
        ) from None
    dur = parse_number("duration", row[ix["duration"]].strip(), where)
    if dur <= 0:
        raise InvalidTraceError("duration", dur, "must be > 0", where=where)
    gpus = parse_uint("num_gpus", row[ix["num_gpus"]].strip(), where)
    if gpus < 1:
        raise InvalidTraceError("num_gpus", gpus, "must be >= 1", where=where)
    parse_number("gpu_time", row[ix["gpu_time"]].strip(), where)
    vc = row[ix["cluster"]].strip()
    if not vc or "/" in vc:
        raise InvalidTraceError("cluster", vc, "must be a non-empty name without '/'", where=where)
    return ts, dur, gpus, vc
