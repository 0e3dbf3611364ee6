"""Standard Workload Format logs of the Parallel Workloads Archive (plain or gzip):
:func:`load_swf_jobs`.

Field mapping: ``docs/traces.md``; errors: :mod:`kant.sim.traces.common`.
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from pathlib import Path
from typing import IO, Final, Literal

from kant.errors import InvalidTraceError, ValidationError
from kant.model import Job, JobKind, is_int, is_number
from kant.sim.traces.common import (
    GZIP_MAGIC,
    ErrorMode,
    JobTrace,
    PathLike,
    RowCollector,
    as_trace_error,
    check_errors,
    check_pod_split,
    gang_roles,
    open_trace,
    read_error,
    sorted_jobs,
    trace_path,
)

__all__ = ["SWF_FIELDS", "load_swf_jobs"]

SWF_FIELDS: Final = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_processors",
    "average_cpu_time",
    "used_memory",
    "requested_processors",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)
"""The 18 fields of a Standard Workload Format (v2.2) record, in order."""

_TENANT_BY: Final = ("user", "group", "none")
_SWF_INT: Final = re.compile(r"-?[0-9]{1,18}")  # (more digits: a broken row)
_SWF_NUM: Final = re.compile(r"-?[0-9]+(\.[0-9]*)?")


def _open_text(p: Path) -> IO[str]:
    with open_trace(p) as raw:
        magic = raw.read(2)
    if magic == GZIP_MAGIC:
        return gzip.open(p, "rt", encoding="utf-8-sig", errors="replace")
    return p.open(encoding="utf-8-sig", errors="replace")  # (a byte order mark is skipped)


_READ_KEYS: Final = frozenset({"MaxProcs"})
"""The header keys kant reads (a log that gives one twice, two ways, is refused: which one
names the log's machine cannot be known)."""


def load_swf_jobs(
    path: PathLike,
    *,
    errors: ErrorMode = "raise",
    gpus_per_processor: int = 1,
    max_gpus_per_pod: int = 8,
    tenant_by: Literal["user", "group", "none"] = "user",
    min_runtime: float = 1.0,
    cpu_milli_per_gpu: int = 0,
    memory_mib_per_gpu: int = 0,
) -> JobTrace:
    """Read a Standard Workload Format log (plain or gzip-compressed).

    Each record is a gang job ``swf-<job number>``: processors (allocated, or requested when
    allocated is -1) times ``gpus_per_processor`` GPUs, split into pods of at most
    ``max_gpus_per_pod`` (:func:`gang_roles`): with the defaults one processor is one GPU and
    a 128-processor job is 16 pods x 8 GPUs. ``submitted_at`` = submit time (seconds from the
    log start); ``runtime_estimate`` = run time, raised to ``min_runtime`` (a finite number
    > 0, else :class:`~kant.errors.ValidationError`) when shorter (jobs shorter than the
    log's 1 s resolution), None when -1 (unknown). Tenant: ``user-<id>``, ``group-<id>`` or
    ``swf`` (``tenant_by``); -1 ids give ``user-unknown``. Header comment lines
    (``; Key: value``) fill ``meta``.

    Every argument is checked before the file is opened (:class:`~kant.errors.ValidationError`
    naming it): ``gpus_per_processor`` an int >= 1, ``tenant_by`` one of ``"user"``,
    ``"group"``, ``"none"``, and the pod split as :func:`check_pod_split` says.
    """
    p = trace_path(path)
    check_errors(errors)
    if not is_int(gpus_per_processor) or gpus_per_processor < 1:
        raise ValidationError("gpus_per_processor", gpus_per_processor, "must be an int >= 1")
    check_pod_split(max_gpus_per_pod, cpu_milli_per_gpu, memory_mib_per_gpu)
    if not isinstance(tenant_by, str) or tenant_by not in _TENANT_BY:
        raise ValidationError("tenant_by", tenant_by, f"must be one of {list(_TENANT_BY)}")
    if not is_number(min_runtime) or not 0 < min_runtime < math.inf:
        raise ValidationError(
            "min_runtime",
            min_runtime,
            "must be a finite number > 0: the runtime of a job the log says ran 0 s "
            "(an unknown runtime is the log's -1)",
        )
    col = RowCollector(p, errors)
    meta: dict[str, str] = {}
    jobs: list[Job] = []
    seen: set[str] = set()
    line_no = 0
    try:
        with _open_text(p) as f:
            for line_no, line in enumerate(f, start=1):
                text = line.strip()
                if not text:
                    continue
                if text.startswith(";"):
                    key, sep, value = text[1:].partition(":")
                    key, value = key.strip(), value.strip()
                    if sep and key and " " not in key:
                        if key in _READ_KEYS and meta.get(key, value) != value:
                            raise ValidationError(
                                key, value, f"is given twice, first as {meta[key]!r}",
                                where=f"{p}:{line_no}",
                            )  # fmt: skip
                        meta.setdefault(key, value)
                    continue
                col.rows += 1
                where = col.where(line_no)
                try:
                    if "\ufffd" in text:  # (read with errors="replace": bytes not UTF-8)
                        raise InvalidTraceError("line", text, "is not UTF-8 text", where=where)
                    job = _swf_job(
                        text.split(),
                        where,
                        gpus_per_processor,
                        max_gpus_per_pod,
                        tenant_by,
                        min_runtime,
                        cpu_milli_per_gpu,
                        memory_mib_per_gpu,
                    )
                    if job.id in seen:
                        raise InvalidTraceError(
                            "job_number",
                            job.id.removeprefix("swf-"),
                            "duplicate job number",
                            where=where,
                        )
                except InvalidTraceError as e:
                    col.fail(e)
                    continue
                seen.add(job.id)
                jobs.append(job)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise InvalidTraceError(
            "file", str(p), f"truncated or corrupt compressed data: {e}",
            where=col.where(line_no + 1),
        ) from None  # fmt: skip
    except OSError as e:  # (a read that fails: a device error, a file that is no file)
        raise read_error(p, e, line_no + 1) from e
    return JobTrace(jobs=sorted_jobs(jobs), report=col.report(len(jobs)), meta=meta)


def _swf_job(
    cells: list[str],
    where: str,
    gpus_per_processor: int,
    max_gpus_per_pod: int,
    tenant_by: str,
    min_runtime: float,
    cpu_milli_per_gpu: int,
    memory_mib_per_gpu: int,
) -> Job:
    if len(cells) != len(SWF_FIELDS):
        raise InvalidTraceError(
            "row", " ".join(cells), f"has {len(cells)} fields, SWF has 18", where=where
        )
    v = dict(zip(SWF_FIELDS, cells, strict=True))
    for name in (
        "job_number",
        "allocated_processors",
        "requested_processors",
        "user_id",
        "group_id",
    ):
        if not _SWF_INT.fullmatch(v[name]):
            raise InvalidTraceError(
                name, v[name], "must be an integer of at most 18 digits", where=where
            )
    for name in ("submit_time", "run_time"):
        if not _SWF_NUM.fullmatch(v[name]):
            raise InvalidTraceError(name, v[name], "must be a number", where=where)
    number = int(v["job_number"])
    if number < 0:
        raise InvalidTraceError("job_number", v["job_number"], "must be >= 0", where=where)
    submit = float(v["submit_time"])
    if submit < 0:
        raise InvalidTraceError("submit_time", v["submit_time"], "must be >= 0", where=where)
    procs = int(v["allocated_processors"])
    field = "allocated_processors"
    if procs <= 0:
        procs = int(v["requested_processors"])
        field = "requested_processors"
    if procs <= 0:
        raise InvalidTraceError(
            field,
            v[field],
            "no processor count (allocated and requested are unknown)",
            where=where,
        )
    run = float(v["run_time"])
    if run < 0 and run != -1:
        raise InvalidTraceError("run_time", v["run_time"], "must be >= 0 or -1", where=where)
    runtime = None if run == -1 else max(run, min_runtime)
    if tenant_by == "none":
        tenant = "swf"
    else:
        ident = int(v["user_id" if tenant_by == "user" else "group_id"])
        tenant = f"{tenant_by}-{ident if ident >= 0 else 'unknown'}"
    try:
        return Job(
            id=f"swf-{number}",
            tenant=tenant,
            submitted_at=submit,
            kind=JobKind.TRAINING,
            gang=True,
            roles=gang_roles(
                procs * gpus_per_processor,
                max_gpus_per_pod=max_gpus_per_pod,
                cpu_milli_per_gpu=cpu_milli_per_gpu,
                memory_mib_per_gpu=memory_mib_per_gpu,
            ),
            runtime_estimate=runtime,
        )
    except ValidationError as e:
        raise as_trace_error(e, where) from e
