"""Trace loaders: real workload traces as :class:`kant.model.Job` lists.

Supported traces (see ``docs/traces.md`` for the column mappings):

- Alibaba ``cluster-trace-gpu-v2023`` ("openb") pod lists: :func:`load_openb_jobs` (one
  pod-level, one-pod job per row) and :func:`load_openb_pods` (light :class:`OpenbPod` records
  for the FGD packing protocol); the node lists via :func:`load_openb_nodes`.
- Microsoft Philly, per-job table as extracted by Pollux: :func:`load_philly_jobs`.
- Standard Workload Format logs of the Parallel Workloads Archive (plain or gzip):
  :func:`load_swf_jobs`.

**Errors.** A malformed row raises :class:`kant.errors.InvalidTraceError` naming the field,
the value and ``where="<file>:<line>"`` (1-based physical line numbers, the header being line
1). With ``errors="skip"`` bad rows are left out instead and collected, in file order, in the
result's :class:`TraceReport`; every good row is still loaded. A bad *header* (missing
columns) makes the whole file unusable and raises in both modes. Blank lines are ignored.
"""

from __future__ import annotations

import csv
import functools
import gzip
import math
import os
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Final, Literal

import attrs

from kant.errors import InvalidTraceError, ValidationError
from kant.model import MILLI, Job, JobKind, NodeSpec, Resources, Role

ErrorMode = Literal["raise", "skip"]

PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------- results


@attrs.frozen(kw_only=True)
class TraceReport:
    """What a loader read: ``rows`` data rows (blank and comment lines excluded), of which
    ``loaded`` became records, and the ``errors`` of the rows it skipped (only non-empty with
    ``errors="skip"``)."""

    path: str
    rows: int
    loaded: int
    errors: tuple[InvalidTraceError, ...] = ()

    @property
    def skipped(self) -> int:
        return len(self.errors)

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        head = f"{self.path}: {self.loaded} of {self.rows} rows loaded"
        if not self.errors:
            return head
        lines = [f"{head}, {self.skipped} skipped:"]
        lines += [f"  {e}" for e in self.errors[:20]]
        if self.skipped > 20:
            lines.append(f"  ... and {self.skipped - 20} more")
        return "\n".join(lines)


@attrs.frozen(kw_only=True, eq=False)
class JobTrace:
    """Jobs loaded from a trace, sorted by submit time (ties in file order), with the load
    report and the trace's header facts (``meta``, e.g. SWF ``MaxProcs``)."""

    jobs: tuple[Job, ...]
    report: TraceReport
    meta: Mapping[str, str] = attrs.field(factory=dict)

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)

    @property
    def total_gpus(self) -> float:
        """Sum of the jobs' GPU requests (GPUs; shares count as milli / 1000)."""
        return sum(j.total_milli for j in self.jobs) / MILLI


# --------------------------------------------------------------------------- helpers


class _Collector:
    """Raise or collect row errors; keeps the counts for the report."""

    def __init__(self, path: Path, errors: ErrorMode) -> None:
        if errors not in ("raise", "skip"):
            raise ValidationError("errors", errors, "must be 'raise' or 'skip'")
        self.path = path
        self.mode = errors
        self.errors: list[InvalidTraceError] = []
        self.rows = 0

    def where(self, line: int) -> str:
        return f"{self.path}:{line}"

    def fail(self, err: InvalidTraceError) -> None:
        if self.mode == "raise":
            raise err
        self.errors.append(err)

    def report(self, loaded: int) -> TraceReport:
        return TraceReport(
            path=str(self.path), rows=self.rows, loaded=loaded, errors=tuple(self.errors)
        )

    def csv_rows(
        self, reader: Any, width: int, limit: int | None = None
    ) -> Iterator[tuple[int, str, list[str]]]:
        """``(k, where, cells)`` of the data rows of a CSV ``reader`` (``k``: 0-based index
        among non-blank rows; at most ``limit`` of them), counted in ``rows``. Blank lines are
        skipped; a row without ``width`` cells is failed here and not yielded."""
        k = -1
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            k += 1
            if limit is not None and k >= limit:
                return
            self.rows += 1
            where = self.where(reader.line_num)
            if len(row) != width:
                self.fail(
                    InvalidTraceError(
                        "row", row, f"has {len(row)} columns, the header {width}", where=where
                    )
                )
                continue
            yield k, where, row


_UINT: Final = re.compile(r"[0-9]+")
_NUMBER: Final = re.compile(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?")


def _uint(field: str, text: str, where: str) -> int:
    if not _UINT.fullmatch(text):
        raise InvalidTraceError(field, text, "must be an int >= 0", where=where)
    return int(text)


def _number(field: str, text: str, where: str) -> float:
    if not _NUMBER.fullmatch(text):
        raise InvalidTraceError(field, text, "must be a finite number >= 0", where=where)
    v = float(text)
    if not math.isfinite(v):
        raise InvalidTraceError(field, text, "must be a finite number >= 0", where=where)
    return v


def _as_trace_error(
    e: ValidationError, where: str, names: Mapping[str, str] | None = None
) -> InvalidTraceError:
    """A model validation error re-raised as a trace error located at ``where`` (``names``
    maps model field names to trace column names)."""
    field = (names or {}).get(e.field, e.field)
    return InvalidTraceError(field, e.value, e.reason, where=where)


@functools.lru_cache(maxsize=1024)
def gang_roles(
    gpus: int,
    *,
    max_gpus_per_pod: int = 8,
    cpu_milli_per_gpu: int = 0,
    memory_mib_per_gpu: int = 0,
) -> tuple[Role, ...]:
    """Roles for a job of ``gpus`` whole GPUs split into pods of at most ``max_gpus_per_pod``.

    Up to ``max_gpus_per_pod`` GPUs: one pod. Above: the fewest pods of equal size when that
    divides evenly (16 -> 2 x 8, 12 -> 2 x 6, 24 -> 3 x 8), otherwise ``worker`` pods of
    ``max_gpus_per_pod`` plus one ``rest`` pod with the remainder (9 -> 1 x 8 + 1 x 1).
    Each pod asks ``cpu_milli_per_gpu`` and ``memory_mib_per_gpu`` per GPU it holds.
    Results are cached (roles are immutable values, shared between jobs)."""
    if gpus < 1 or max_gpus_per_pod < 1:
        raise ValidationError("gpus", gpus, "must be >= 1 (and max_gpus_per_pod >= 1)")

    def res(n: int) -> Resources:
        return Resources(gpus=n, cpu_milli=n * cpu_milli_per_gpu, memory_mib=n * memory_mib_per_gpu)

    pods = math.ceil(gpus / max_gpus_per_pod)
    if gpus % pods == 0:
        return (Role(name="worker", replicas=pods, resources=res(gpus // pods)),)
    full, rest = divmod(gpus, max_gpus_per_pod)
    return (
        Role(name="worker", replicas=full, resources=res(max_gpus_per_pod)),
        Role(name="rest", replicas=1, resources=res(rest)),
    )


def _sorted_jobs(jobs: list[Job]) -> tuple[Job, ...]:
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submitted_at, i))
    return tuple(jobs[i] for i in order)


def trace_dir() -> Path | None:
    """The shared trace folder: ``$KANT_TRACES`` if set, else ``<repo>/../shared/traces``
    next to a source checkout. ``None`` if it does not exist."""
    env = os.environ.get("KANT_TRACES")
    p = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "traces"
    return p if p.is_dir() else None


# --------------------------------------------------------------------------- openb

OPENB_REQUIRED: Final = ("name", "cpu_milli", "num_gpu", "gpu_milli")
OPENB_OPTIONAL: Final = (
    "memory_mib",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)


def _models(v: Any) -> frozenset[str]:
    if isinstance(v, str):
        return frozenset(p for p in v.split("|") if p)
    return frozenset(v)


@attrs.frozen(kw_only=True)
class OpenbPod:
    """One row of an openb pod list, as the FGD packing protocol uses it.

    ``num_gpu``/``gpu_milli`` keep the trace's encoding (``gpu_milli`` is the per-GPU share;
    1000 for whole GPUs). Times are ``None`` when the file has no such column or the cell is
    empty (``scheduled_time`` of pending pods).
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_models: frozenset[str] = attrs.field(factory=frozenset, converter=_models)
    qos: str | None = None
    phase: str | None = None
    creation_time: float | None = None
    deletion_time: float | None = None
    scheduled_time: float | None = None

    @property
    def resources(self) -> Resources:
        """The pod's request: a share (``num_gpu == 1``, ``gpu_milli < 1000``), whole GPUs
        (``gpu_milli == 1000``) or none."""
        if self.num_gpu == 1 and self.gpu_milli < MILLI:
            return Resources(
                gpu_milli=self.gpu_milli, cpu_milli=self.cpu_milli, memory_mib=self.memory_mib
            )
        return Resources(gpus=self.num_gpu, cpu_milli=self.cpu_milli, memory_mib=self.memory_mib)

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU request in milli (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli

    @property
    def runtime(self) -> float | None:
        """``deletion_time - (scheduled_time or creation_time)`` when positive, else None."""
        begin = self.scheduled_time if self.scheduled_time is not None else self.creation_time
        if self.deletion_time is None or begin is None:
            return None
        d = self.deletion_time - begin
        return d if d > 0 else None

    def to_job(
        self,
        *,
        id: str | None = None,
        tenant: str = "openb",
        kind: JobKind = JobKind.INFERENCE,
        priority: int = 0,
        submitted_at: float | None = None,
    ) -> Job:
        """A one-pod, pod-level job (``gang=False``) for this pod. ``id`` defaults to the
        pod name, ``submitted_at`` to ``creation_time`` (or 0)."""
        sub = submitted_at if submitted_at is not None else (self.creation_time or 0.0)
        return Job(
            id=self.name if id is None else id,
            tenant=tenant,
            priority=priority,
            submitted_at=sub,
            kind=kind,
            gang=False,
            roles=(
                Role(name="pod", replicas=1, resources=self.resources, gpu_models=self.gpu_models),
            ),
            runtime_estimate=self.runtime,
        )


@attrs.frozen(kw_only=True, eq=False)
class OpenbPodList:
    """Pods of an openb pod list in file order, with the load report."""

    pods: tuple[OpenbPod, ...]
    report: TraceReport

    def __len__(self) -> int:
        return len(self.pods)

    def __iter__(self) -> Iterator[OpenbPod]:
        return iter(self.pods)

    @property
    def total_gpu_milli(self) -> int:
        return sum(p.gpu_request_milli for p in self.pods)


def _parse_openb_row(cells: Mapping[str, str], where: str) -> OpenbPod:
    name = cells["name"]
    if not name or name.strip() != name or "/" in name:
        raise InvalidTraceError(
            "name", name, "must be a non-empty name without spaces around or '/'", where=where
        )
    cpu = _uint("cpu_milli", cells["cpu_milli"], where)
    mem = _uint("memory_mib", cells["memory_mib"], where) if "memory_mib" in cells else 0
    num_gpu = _uint("num_gpu", cells["num_gpu"], where)
    milli = _uint("gpu_milli", cells["gpu_milli"], where)
    if milli > MILLI:
        raise InvalidTraceError("gpu_milli", cells["gpu_milli"], "must be <= 1000", where=where)
    if num_gpu == 0 and milli:
        raise InvalidTraceError(
            "gpu_milli",
            cells["gpu_milli"],
            "a pod without GPUs must have gpu_milli 0",
            where=where,
        )
    if num_gpu and not milli:
        raise InvalidTraceError(
            "gpu_milli",
            cells["gpu_milli"],
            f"num_gpu={num_gpu} needs gpu_milli > 0",
            where=where,
        )
    if num_gpu > 1 and milli < MILLI:
        raise InvalidTraceError(
            "gpu_milli",
            cells["gpu_milli"],
            f"a share below 1000 must be on one GPU (num_gpu={num_gpu})",
            where=where,
        )
    times: dict[str, float | None] = {}
    for f in ("creation_time", "deletion_time", "scheduled_time"):
        text = cells.get(f, "")
        times[f] = _number(f, text, where) if text else None
    created, deleted, scheduled = (
        times["creation_time"],
        times["deletion_time"],
        times["scheduled_time"],
    )
    if created is not None and deleted is not None and deleted < created:
        raise InvalidTraceError(
            "deletion_time",
            cells["deletion_time"],
            f"is before creation_time={created:g}",
            where=where,
        )
    if created is not None and scheduled is not None and scheduled < created:
        raise InvalidTraceError(
            "scheduled_time",
            cells["scheduled_time"],
            f"is before creation_time={created:g}",
            where=where,
        )
    spec = cells.get("gpu_spec", "")
    models = frozenset(p for p in spec.split("|") if p)
    if any(m.strip() != m for m in models):
        raise InvalidTraceError("gpu_spec", spec, "model names must not have spaces", where=where)
    try:
        pod = OpenbPod(
            name=name,
            cpu_milli=cpu,
            memory_mib=mem,
            num_gpu=num_gpu,
            gpu_milli=milli,
            gpu_models=models,
            qos=cells.get("qos") or None,
            phase=cells.get("pod_phase") or None,
            creation_time=created,
            deletion_time=deleted,
            scheduled_time=scheduled,
        )
        pod.resources  # noqa: B018 - validates the request (e.g. more GPUs than a node has)
    except ValidationError as e:
        raise _as_trace_error(e, where, {"gpus": "num_gpu"}) from e
    return pod


def _read_openb(path: PathLike, errors: ErrorMode) -> tuple[list[OpenbPod], _Collector]:
    p = Path(path)
    col = _Collector(p, errors)
    pods: list[OpenbPod] = []
    seen: set[str] = set()
    with p.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in OPENB_REQUIRED if c not in header]
        if missing or len(set(header)) != len(header):
            raise InvalidTraceError(
                "header",
                header,
                f"needs columns {list(OPENB_REQUIRED)} (optional {list(OPENB_OPTIONAL)}), "
                "each once",
                where=col.where(1),
            )
        for _, where, row in col.csv_rows(reader, len(header)):
            try:
                pod = _parse_openb_row(
                    {h: c.strip() for h, c in zip(header, row, strict=True)}, where
                )
                if pod.name in seen:
                    raise InvalidTraceError("name", pod.name, "duplicate pod name", where=where)
            except InvalidTraceError as e:
                col.fail(e)
                continue
            seen.add(pod.name)
            pods.append(pod)
    return pods, col


def load_openb_pods(path: PathLike, *, errors: ErrorMode = "raise") -> OpenbPodList:
    """Read an openb pod list (11-column, 10-column "nomem" or 5-column "multigpu" variant)
    into :class:`OpenbPod` records, in file order. Columns are found by header name."""
    pods, col = _read_openb(path, errors)
    return OpenbPodList(pods=tuple(pods), report=col.report(len(pods)))


def load_openb_jobs(
    path: PathLike,
    *,
    errors: ErrorMode = "raise",
    tenant: str = "openb",
    kind: JobKind = JobKind.INFERENCE,
    qos_priority: Mapping[str, int] | None = None,
) -> JobTrace:
    """Read an openb pod list as one-pod, pod-level jobs (see :meth:`OpenbPod.to_job`).

    Job id = pod name; ``submitted_at`` = ``creation_time`` (0 in the 5-column variants);
    ``runtime_estimate`` = ``deletion_time - scheduled_time`` (``creation_time`` for pods never
    scheduled) when positive, else None; ``gpu_spec`` -> the role's ``gpu_models``.
    ``qos_priority`` maps the ``qos`` column to priorities (default: all 0).
    """
    pods, col = _read_openb(path, errors)
    jobs: list[Job] = []
    for pod in pods:
        prio = (qos_priority or {}).get(pod.qos or "", 0)
        jobs.append(pod.to_job(tenant=tenant, kind=kind, priority=prio))
    return JobTrace(jobs=_sorted_jobs(jobs), report=col.report(len(jobs)))


def load_openb_nodes(path: PathLike) -> list[NodeSpec]:
    """The nodes of an openb node list (``sn,cpu_milli,memory_mib,gpu,model``); delegates to
    :func:`kant.topology.openb_nodes`, which also returns them as a cluster description."""
    from kant.topology import openb_nodes  # local: topology is heavier than traces need

    return list(openb_nodes(path).nodes)


# --------------------------------------------------------------------------- Philly

PHILLY_COLUMNS: Final = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
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

    Each row is a gang training job: id ``philly-<k>`` (``k`` = 0-based data row index, so ids
    do not depend on sorting), tenant = the virtual cluster (``cluster``), ``num_gpus`` split
    into pods of at most ``max_gpus_per_pod`` GPUs (:func:`gang_roles`), ``submitted_at`` =
    seconds from ``epoch`` (default: the earliest timestamp of the loaded rows, so the first
    job arrives at 0), ``runtime_estimate`` = ``duration``. ``limit`` reads only the first
    ``limit`` data rows.
    """
    p = Path(path)
    col = _Collector(p, errors)
    parsed: list[tuple[int, int, datetime, float, int, str]] = []
    with p.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in PHILLY_COLUMNS if c not in header]
        if missing:
            raise InvalidTraceError(
                "header", header, f"needs columns {list(PHILLY_COLUMNS)}", where=col.where(1)
            )
        ix = {c: header.index(c) for c in PHILLY_COLUMNS}
        for k, where, row in col.csv_rows(reader, len(header), limit):
            try:
                ts_text = row[ix["timestamp"]].strip()
                try:
                    if not _PHILLY_TS.fullmatch(ts_text):
                        raise ValueError(ts_text)
                    ts = datetime.fromisoformat(ts_text)
                except ValueError:
                    raise InvalidTraceError(
                        "timestamp", ts_text, "must be 'YYYY-mm-dd HH:MM:SS'", where=where
                    ) from None
                dur = _number("duration", row[ix["duration"]].strip(), where)
                if dur <= 0:
                    raise InvalidTraceError("duration", dur, "must be > 0", where=where)
                gpus = _uint("num_gpus", row[ix["num_gpus"]].strip(), where)
                if gpus < 1:
                    raise InvalidTraceError("num_gpus", gpus, "must be >= 1", where=where)
                _number("gpu_time", row[ix["gpu_time"]].strip(), where)
                vc = row[ix["cluster"]].strip()
                if not vc or "/" in vc:
                    raise InvalidTraceError(
                        "cluster", vc, "must be a non-empty name without '/'", where=where
                    )
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
        jobs.append(
            Job(
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
        )
    meta = {"epoch": base.isoformat(sep=" ")} if base is not None else {}
    return JobTrace(jobs=_sorted_jobs(jobs), report=col.report(len(jobs)), meta=meta)


# --------------------------------------------------------------------------- SWF

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

_SWF_INT: Final = re.compile(r"-?[0-9]+")
_SWF_NUM: Final = re.compile(r"-?[0-9]+(\.[0-9]*)?")


def _open_text(p: Path) -> IO[str]:
    with p.open("rb") as raw:
        magic = raw.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(p, "rt", encoding="utf-8", errors="replace")
    return p.open(encoding="utf-8", errors="replace")


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
    log start); ``runtime_estimate`` = run time, raised to ``min_runtime`` when 0 (jobs shorter
    than the log's 1 s resolution), None when -1 (unknown). Tenant: ``user-<id>``,
    ``group-<id>`` or ``swf`` (``tenant_by``); -1 ids give ``user-unknown``. Header comment
    lines (``; Key: value``) fill ``meta``.
    """
    p = Path(path)
    col = _Collector(p, errors)
    meta: dict[str, str] = {}
    jobs: list[Job] = []
    seen: set[str] = set()
    with _open_text(p) as f:
        for line_no, line in enumerate(f, start=1):
            text = line.strip()
            if not text:
                continue
            if text.startswith(";"):
                key, sep, value = text[1:].partition(":")
                if sep and key.strip() and " " not in key.strip():
                    meta.setdefault(key.strip(), value.strip())
                continue
            col.rows += 1
            where = col.where(line_no)
            try:
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
    return JobTrace(jobs=_sorted_jobs(jobs), report=col.report(len(jobs)), meta=meta)


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
            raise InvalidTraceError(name, v[name], "must be an integer", where=where)
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
            runtime_estimate=runtime if runtime and runtime > 0 else None,
        )
    except ValidationError as e:
        raise _as_trace_error(e, where) from e
