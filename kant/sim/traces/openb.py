"""Alibaba ``cluster-trace-gpu-v2023`` ("openb"): pod lists and node lists.

- :func:`load_openb_pods`: checked :class:`OpenbPod` records (the FGD packing protocol);
- :func:`load_openb_jobs`: one pod-level, one-pod job per pod (the simulator);
- :func:`openb_nodes` / :func:`load_openb_nodes`: the node list
  (``openb_node_list_*.csv``) as a cluster description / a node list.

Column mappings: ``docs/traces.md``; errors: :mod:`kant.sim.traces.common`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from kant.errors import InvalidTraceError, ValidationError
from kant.model import (
    GPU_MODELS_REASON,
    MILLI,
    NAME_REASON,
    Job,
    JobKind,
    NodeSpec,
    Resources,
    Role,
    are_gpu_models,
    is_finite_number,
    is_int,
    is_name,
    name,
    number,
    satisfies,
    split_gpu_models,
    to_gpu_models,
)
from kant.sim.traces.common import (
    CsvFile,
    ErrorMode,
    JobTrace,
    PathLike,
    RowCollector,
    TraceReport,
    as_trace_error,
    check_errors,
    open_trace,
    parse_number,
    parse_uint,
    sorted_jobs,
    trace_path,
)
from kant.topology import ClusterDescription
from kant.topology.templates import openb_template_name

__all__ = [
    "OPENB_NODE_COLUMNS",
    "OPENB_OPTIONAL",
    "OPENB_REQUIRED",
    "OpenbPod",
    "OpenbPodList",
    "load_openb_jobs",
    "load_openb_nodes",
    "load_openb_pods",
    "openb_nodes",
]

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


def _time(v: Any) -> Any:
    """A finite real number as a float; anything else as given, for the validator."""
    return float(v) if is_finite_number(v) and type(v) is not float else v


_POD_NAME_REASON: Final = "must be a non-empty name without spaces around or '/'"
_COUNT: Final = number(InvalidTraceError, low=0, integer=True)
_TIME: Final = number(InvalidTraceError, low=0, finite=True, optional=True)
_LABEL: Final = satisfies(
    InvalidTraceError,
    lambda v: v is None or (isinstance(v, str) and bool(v)),
    "must be None or a non-empty string",
)


@attrs.frozen(kw_only=True)
class OpenbPod:
    """One row of an openb pod list, as the FGD packing protocol uses it.

    ``num_gpu``/``gpu_milli`` keep the trace's encoding (``gpu_milli`` is the per-GPU share;
    1000 for whole GPUs). Times are ``None`` when the file has no such column or the cell is
    empty (``scheduled_time`` of pending pods).

    A record is checked as the loader checks a file row, whether it comes from a file or is
    built by hand: a bad value raises :class:`~kant.errors.InvalidTraceError` naming the
    field and value (from a file, also ``where="<file>:<line>"``). ``name`` is a name
    (non-empty, no ``/``, no surrounding spaces); the counts are ints >= 0 (bools refused);
    ``gpu_milli`` is 0 exactly when ``num_gpu`` is, at most 1000, and below 1000 only with
    ``num_gpu == 1``; the request fits a node (:class:`~kant.model.Resources`); times are
    None or finite real numbers >= 0 (``int``, ``float``, NumPy's, ``Fraction``; stored as
    floats; a ``Decimal`` is refused), ``deletion_time`` and ``scheduled_time`` not
    before ``creation_time``; ``qos`` and ``phase`` None or non-empty strings; ``gpu_models``
    non-empty model names.
    """

    name: str = attrs.field(validator=name(InvalidTraceError, reason=_POD_NAME_REASON))
    cpu_milli: int = attrs.field(validator=_COUNT)
    memory_mib: int = attrs.field(validator=_COUNT)
    num_gpu: int = attrs.field(validator=_COUNT)
    gpu_milli: int = attrs.field(
        validator=number(InvalidTraceError, low=0, high=MILLI, high_inclusive=True, integer=True)
    )
    gpu_models: frozenset[str] = attrs.field(
        factory=frozenset,
        converter=to_gpu_models,
        validator=satisfies(InvalidTraceError, are_gpu_models, GPU_MODELS_REASON),
    )
    qos: str | None = attrs.field(default=None, validator=_LABEL)
    phase: str | None = attrs.field(default=None, validator=_LABEL)
    creation_time: float | None = attrs.field(default=None, converter=_time, validator=_TIME)
    deletion_time: float | None = attrs.field(default=None, converter=_time, validator=_TIME)
    scheduled_time: float | None = attrs.field(default=None, converter=_time, validator=_TIME)

    def __attrs_post_init__(self) -> None:
        n, milli = self.num_gpu, self.gpu_milli
        if n == 0 and milli:
            raise InvalidTraceError("gpu_milli", milli, "a pod without GPUs must have gpu_milli 0")
        if n and not milli:
            raise InvalidTraceError("gpu_milli", milli, f"num_gpu={n} needs gpu_milli > 0")
        if n > 1 and milli < MILLI:
            raise InvalidTraceError(
                "gpu_milli", milli, f"a share below 1000 must be on one GPU (num_gpu={n})"
            )
        created = self.creation_time
        if created is not None:
            for f in ("deletion_time", "scheduled_time"):
                t = getattr(self, f)
                if t is not None and t < created:
                    raise InvalidTraceError(f, t, f"is before creation_time={created:g}")
        try:
            self.resources  # noqa: B018 - the request must fit a node
        except ValidationError as e:
            field = {"gpus": "num_gpu"}.get(e.field, e.field)
            raise InvalidTraceError(field, e.value, e.reason) from e

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
        """Sum of the pods' GPU requests, in milli."""
        return sum(p.gpu_request_milli for p in self.pods)


def _checked_pod(
    name: str,
    cpu_milli: int,
    memory_mib: int,
    num_gpu: int,
    gpu_milli: int,
    gpu_models: frozenset[str],
    qos: str | None,
    phase: str | None,
    creation_time: float | None,
    deletion_time: float | None,
    scheduled_time: float | None,
) -> OpenbPod:
    """An :class:`OpenbPod` from values :func:`_parse_openb_row` has already checked (the
    name, the counts, the GPU encoding, the times as floats, the models, qos and phase),
    built without running the record's validators again. Only the loader uses it; any other
    record goes through the checked constructor."""
    pod = object.__new__(OpenbPod)
    put = object.__setattr__
    put(pod, "name", name)
    put(pod, "cpu_milli", cpu_milli)
    put(pod, "memory_mib", memory_mib)
    put(pod, "num_gpu", num_gpu)
    put(pod, "gpu_milli", gpu_milli)
    put(pod, "gpu_models", gpu_models)
    put(pod, "qos", qos)
    put(pod, "phase", phase)
    put(pod, "creation_time", creation_time)
    put(pod, "deletion_time", deletion_time)
    put(pod, "scheduled_time", scheduled_time)
    return pod


def _parse_openb_row(cells: Mapping[str, str], where: str) -> OpenbPod:
    name = cells["name"]
    if not name or name.strip() != name or "/" in name:
        raise InvalidTraceError(
            "name", name, "must be a non-empty name without spaces around or '/'", where=where
        )
    cpu = parse_uint("cpu_milli", cells["cpu_milli"], where)
    mem = parse_uint("memory_mib", cells["memory_mib"], where) if "memory_mib" in cells else 0
    num_gpu, milli = _openb_gpus(cells, where)
    created, deleted, scheduled = _openb_times(cells, where)
    spec = cells.get("gpu_spec", "")
    models = split_gpu_models(spec)
    if models is None:
        parts = spec.split("|")
        why = (
            "model names must not have spaces"
            if all(parts)
            else "model names must not be empty (an empty cell means any model)"
        )
        raise InvalidTraceError("gpu_spec", spec, why, where=where)
    # Every field is checked above (qos and phase: a stripped cell, None when empty), so the
    # record is built without its validators; only the request is left to check.
    pod = _checked_pod(
        name,
        cpu,
        mem,
        num_gpu,
        milli,
        models,
        cells.get("qos") or None,
        cells.get("pod_phase") or None,
        created,
        deleted,
        scheduled,
    )
    try:
        pod.resources  # noqa: B018 - validates the request (e.g. more GPUs than a node has)
    except ValidationError as e:
        raise as_trace_error(e, where, {"gpus": "num_gpu"}) from e
    return pod


def _openb_gpus(cells: Mapping[str, str], where: str) -> tuple[int, int]:
    """(``num_gpu``, ``gpu_milli``) of a row, checked together."""
    num_gpu = parse_uint("num_gpu", cells["num_gpu"], where)
    milli = parse_uint("gpu_milli", cells["gpu_milli"], where)
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
    return num_gpu, milli


def _openb_times(
    cells: Mapping[str, str], where: str
) -> tuple[float | None, float | None, float | None]:
    """(creation, deletion, scheduled) times of a row (None: no column or an empty cell)."""
    times: dict[str, float | None] = {}
    for f in ("creation_time", "deletion_time", "scheduled_time"):
        text = cells.get(f, "")
        times[f] = parse_number(f, text, where) if text else None
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
    return created, deleted, scheduled


def _read_openb(path: PathLike, errors: ErrorMode) -> tuple[list[OpenbPod], RowCollector]:
    p = trace_path(path)
    col = RowCollector(p, errors)
    pods: list[OpenbPod] = []
    seen: set[str] = set()
    with open_trace(p) as f:
        reader = CsvFile(f, p, col, header=True)
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

    Every argument is checked before the file is opened (:class:`~kant.errors.ValidationError`
    naming it): ``tenant`` a name (non-empty, no ``/``, no surrounding spaces), ``kind`` a
    :class:`~kant.model.JobKind` or its value, ``qos_priority`` None or a mapping of ``str``
    to ``int``.
    """
    trace_path(path)
    check_errors(errors)
    if not is_name(tenant):
        raise ValidationError("tenant", tenant, NAME_REASON)
    if isinstance(kind, str) and kind in JobKind._value2member_map_:
        kind = JobKind(kind)
    if not isinstance(kind, JobKind):
        raise ValidationError("kind", kind, f"must be one of {[k.value for k in JobKind]}")
    if qos_priority is not None and (
        not isinstance(qos_priority, Mapping)
        or not all(isinstance(q, str) and is_int(v) for q, v in qos_priority.items())
    ):
        raise ValidationError(
            "qos_priority", qos_priority, "must be None or a mapping of qos (str) to priority (int)"
        )
    pods, col = _read_openb(path, errors)
    jobs: list[Job] = []
    for pod in pods:
        prio = (qos_priority or {}).get(pod.qos or "", 0)
        jobs.append(pod.to_job(tenant=tenant, kind=kind, priority=prio))
    return JobTrace(jobs=sorted_jobs(jobs), report=col.report(len(jobs)))


def load_openb_nodes(path: PathLike) -> list[NodeSpec]:
    """The nodes of an openb node list (``sn,cpu_milli,memory_mib,gpu,model``), as
    :func:`openb_nodes` reads them."""
    return list(openb_nodes(path).nodes)


OPENB_NODE_COLUMNS: Final = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
"""The columns of an openb node list, in order."""


def openb_nodes(path: PathLike) -> ClusterDescription:
    """Read an Alibaba openb node list (``sn,cpu_milli,memory_mib,gpu,model``).

    Each row becomes a :class:`~kant.model.NodeSpec` named ``sn`` with the template from
    :func:`~kant.topology.templates.openb_template_name` (CPU-only rows: no model, no
    template), no NICs and no fabric placement. Blank lines are skipped. A bad header or row
    raises :class:`~kant.errors.InvalidTraceError` with the field and ``where="<file>:<line>"``.
    """
    p = trace_path(path)
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    with open_trace(p) as f:
        reader = CsvFile(f, p, None, header=True)
        header = next(reader, None)
        columns = list(OPENB_NODE_COLUMNS)
        if header != columns:
            raise InvalidTraceError("header", header, f"expected columns {columns}", where=f"{p}:1")
        for row in reader:
            where = f"{p}:{reader.line_num}"
            if not row or (len(row) == 1 and not row[0].strip()):  # (blank, or spaces only)
                continue
            if len(row) != len(columns):
                raise InvalidTraceError("row", row, f"expected {len(columns)} columns", where=where)
            sn, cpu, mem, gpu, model = (c.strip() for c in row)
            values: dict[str, int] = {}
            for field, text in (("cpu_milli", cpu), ("memory_mib", mem), ("gpu", gpu)):
                values[field] = parse_uint(field, text, where)
            if sn in seen:
                raise InvalidTraceError("sn", sn, "duplicate node name", where=where)
            seen.add(sn)
            try:
                template = openb_template_name(values["gpu"])
                node = NodeSpec(
                    name=sn,
                    gpu_model=model or None,
                    gpus=values["gpu"],
                    cpu_milli=values["cpu_milli"],
                    memory_mib=values["memory_mib"],
                    template=template,
                )
            except ValidationError as e:
                field = {"name": "sn", "gpus": "gpu", "gpu_model": "model"}.get(e.field, e.field)
                raise InvalidTraceError(field, e.value, e.reason, where=where) from e
            nodes.append(node)
    return ClusterDescription(nodes=tuple(nodes))
