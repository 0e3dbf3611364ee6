"""Real data for the inference experiment (section 5.2 of the Kant paper):

- :func:`load_dlrm_instances`: Alibaba ``cluster-trace-gpu-v2025`` DLRM inference instances
  (``disaggregated_DLRM_trace.csv``: one row per instance, with its app, requests,
  ``max_instance_per_node`` and creation / deletion times);
- :func:`load_pai_machines`: the node shapes of Alibaba PAI 2020 (``pai_machine_spec.csv``,
  no header: ``machine, gpu_type, cap_cpu, cap_mem, cap_gpu``);
- :func:`load_spot_nodes`: the node shapes of Alibaba's 2026 spot-GPU cluster
  (``node_info_df.csv``: ``gpu_model, gpu_capacity_num, cpu_num, node_name``);
- :func:`load_vc_gpus`: GPUs per virtual cluster on one day of Helios Earth
  (``helios_earth_vc_gpu_number.csv``), a real per-tenant quota split.

Each reader gives :class:`~kant.errors.InvalidTraceError` naming the field, the value and
``file:line`` for a bad row (``errors="skip"`` collects them in the report instead), like
the other readers of :mod:`kant.sim.traces`. Column mappings: ``docs/traces.md``.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import date
from typing import Final

import attrs

from kant.errors import InvalidTraceError, ValidationError
from kant.model import (
    GPU_MODEL_SLASH_REASON,
    MAX_CPU_MILLI,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    NAME_REASON,
    is_gpu_model,
    is_name,
)
from kant.sim.traces.common import (
    CsvFile,
    ErrorMode,
    PathLike,
    RowCollector,
    TraceReport,
    open_trace,
    parse_number,
    parse_scaled,
    parse_uint,
    trace_path,
)

__all__ = [
    "DLRM_COLUMNS",
    "DlrmInstance",
    "DlrmTrace",
    "NodeInventory",
    "NodeShape",
    "load_dlrm_instances",
    "load_pai_machines",
    "load_spot_nodes",
    "load_vc_gpus",
]

DLRM_COLUMNS: Final = (
    "instance_sn",
    "role",
    "app_name",
    "cpu_request",
    "gpu_request",
    "rdma_request",
    "memory_request",
    "max_instance_per_node",
    "creation_time",
    "deletion_time",
)
"""The columns :func:`load_dlrm_instances` reads (found by header name; others are ignored)."""

SPOT_COLUMNS: Final = ("gpu_model", "gpu_capacity_num", "cpu_num", "node_name")
"""The columns of the spot-GPU node list."""

_GIB: Final = 1024
_DAY: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


@attrs.frozen(kw_only=True)
class DlrmInstance:
    """One DLRM inference instance. ``created`` / ``deleted``: seconds from the trace start,
    None when outside the trace window (existing before it / still alive after it).
    ``max_per_node``: the app's per-node instance limit, None for no limit (``-1``)."""

    name: str
    app: str
    role: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    rdma_percent: int
    max_per_node: int | None
    created: float | None
    deleted: float | None


@attrs.frozen(kw_only=True)
class DlrmTrace:
    """The instances read, in file order, and the load report."""

    instances: tuple[DlrmInstance, ...]
    report: TraceReport


@attrs.frozen(kw_only=True)
class NodeShape:
    """``count`` nodes of one shape: GPU model, GPUs, CPU (milli) and memory (MiB; None when
    the source does not give it)."""

    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int | None
    count: int


@attrs.frozen(kw_only=True)
class NodeInventory:
    """Node shapes of a real cluster, largest count first (ties by model, GPUs), and the
    load report."""

    shapes: tuple[NodeShape, ...]
    report: TraceReport

    def shape(self, model: str, gpus: int) -> NodeShape:
        """The most common shape of ``model`` with ``gpus`` GPUs. Raises
        :class:`~kant.errors.InvalidTraceError` when the inventory has none."""
        for s in self.shapes:
            if s.model == model and s.gpus == gpus:
                return s
        raise InvalidTraceError(
            "gpu model", model, f"has no {gpus}-GPU node in the inventory", where=self.report.path
        )


def _header(col: RowCollector, reader: object, want: tuple[str, ...]) -> dict[str, int]:
    header = next(iter(reader), None)  # type: ignore[call-overload]
    if header is None:
        raise InvalidTraceError("header", None, "the file is empty", where=col.where(1))
    where: dict[str, int] = {}
    for i, name in enumerate(header):
        first = where.setdefault(name.strip(), i)
        if first != i:  # (a {name: index} would keep one: every row one column too many)
            raise InvalidTraceError(
                "header", header,
                f"names the column {name.strip()!r} twice (columns {first + 1} and {i + 1}): "
                "each column once",
                where=col.where(1),
            )  # fmt: skip
    missing = [c for c in want if c not in where]
    if missing:
        raise InvalidTraceError("header", header, f"lacks columns {missing}", where=col.where(1))
    return where


def _opt_time(field: str, text: str, where: str) -> float | None:
    return None if not text.strip() else parse_number(field, text.strip(), where)


def load_dlrm_instances(path: PathLike, *, errors: ErrorMode = "raise") -> DlrmTrace:
    """Read the DLRM instance table. Memory is in GiB (kept as MiB), CPU in cores (kept as
    milli-cores), ``rdma_request`` in percent of one NIC. A row whose deletion precedes its
    creation is an error."""
    p = trace_path(path)
    col = RowCollector(p, errors)
    out: list[DlrmInstance] = []
    with open_trace(p) as f:
        reader = CsvFile(f, p, col, header=True)
        idx = _header(col, reader, DLRM_COLUMNS)
        width = len(idx)
        for _k, where, row in col.csv_rows(reader, width):
            try:
                cell = {c: row[idx[c]].strip() for c in DLRM_COLUMNS}
                name = cell["instance_sn"]
                if not name:
                    raise InvalidTraceError("instance_sn", name, "must not be empty", where=where)
                app = cell["app_name"]
                if not is_name(app):  # (it names the app's jobs: f"{app}-...")
                    raise InvalidTraceError("app_name", app, NAME_REASON, where=where)
                mpn_text = cell["max_instance_per_node"]
                if mpn_text == "-1":
                    mpn = None
                else:
                    mpn = parse_uint("max_instance_per_node", mpn_text, where)
                    if mpn < 1:
                        raise InvalidTraceError(
                            "max_instance_per_node", mpn_text, "must be -1 or >= 1", where=where
                        )
                created = _opt_time("creation_time", cell["creation_time"], where)
                deleted = _opt_time("deletion_time", cell["deletion_time"], where)
                if created is not None and deleted is not None and deleted < created:
                    raise InvalidTraceError(
                        "deletion_time", deleted, f"is before creation_time {created}", where=where
                    )
                out.append(
                    DlrmInstance(
                        name=name,
                        app=app,
                        role=cell["role"],
                        gpus=_node_gpus("gpu_request", cell["gpu_request"], where),
                        cpu_milli=parse_scaled("cpu_request", cell["cpu_request"], where, 1000),
                        memory_mib=parse_scaled(
                            "memory_request", cell["memory_request"], where, _GIB
                        ),
                        rdma_percent=parse_uint("rdma_request", cell["rdma_request"], where),
                        max_per_node=mpn,
                        created=created,
                        deleted=deleted,
                    )
                )
            except InvalidTraceError as e:
                col.fail(e)
    return DlrmTrace(instances=tuple(out), report=col.report(len(out)))


def _node_gpus(field: str, text: str, where: str) -> int:
    """``text`` as GPUs one node holds: an int in 0..:data:`MAX_GPUS_PER_NODE`, else
    InvalidTraceError (999999 was read, and its instances silently left out of a sample)."""
    return _bounded(field, text, where, 1, MAX_GPUS_PER_NODE)


def _bounded(field: str, text: str, where: str, scale: int, most: int) -> int:
    """``text`` as an int >= 0 times ``scale``, at most ``most``, else InvalidTraceError."""
    v = parse_uint(field, text, where) * scale
    if v > most:
        why = f"is more than one node holds (at most {most // scale:,})"
        raise InvalidTraceError(field, text, why, where=where)
    return v


def _inventory(col: RowCollector, found: list[tuple[str, int, int, int | None]]) -> NodeInventory:
    counts = Counter(found)
    shapes = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
    return NodeInventory(
        shapes=tuple(
            NodeShape(model=m, gpus=g, cpu_milli=c, memory_mib=mem, count=n)
            for (m, g, c, mem), n in shapes
        ),
        report=col.report(len(found)),
    )


def load_pai_machines(path: PathLike, *, errors: ErrorMode = "raise") -> NodeInventory:
    """Read PAI 2020's machine spec (no header; ``machine, gpu_type, cap_cpu, cap_mem,
    cap_gpu``, memory in GB kept as GiB x 1024 MiB) as node shapes. CPU-only machines
    (``cap_gpu`` 0) are kept with model ``CPU``."""
    p = trace_path(path)
    col = RowCollector(p, errors)
    found: list[tuple[str, int, int, int | None]] = []
    with open_trace(p) as f:
        for _k, where, row in col.csv_rows(CsvFile(f, p, col), 5):
            try:
                model = row[1].strip()
                if not is_gpu_model(model, slash=True):  # ('/' as before: NVIDIA/A10)
                    raise InvalidTraceError("gpu_type", model, GPU_MODEL_SLASH_REASON, where=where)
                cpu = _bounded("cap_cpu", row[2].strip(), where, 1000, MAX_CPU_MILLI)
                mem = _bounded("cap_mem", row[3].strip(), where, _GIB, MAX_MEMORY_MIB)
                gpus = _node_gpus("cap_gpu", row[4].strip(), where)
                if (model == "CPU") != (gpus == 0):  # (the file's CPU machines have none)
                    why = "contradicts gpu_type " + repr(model) + " (CPU: 0 GPUs, else some)"
                    raise InvalidTraceError("cap_gpu", gpus, why, where=where)
                found.append((model, gpus, cpu, mem))
            except InvalidTraceError as e:
                col.fail(e)
    return _inventory(col, found)


def load_spot_nodes(path: PathLike, *, errors: ErrorMode = "raise") -> NodeInventory:
    """Read the spot-GPU cluster's node list (``gpu_model, gpu_capacity_num, cpu_num,
    node_name``) as node shapes; the file gives no memory (``memory_mib`` None)."""
    p = trace_path(path)
    col = RowCollector(p, errors)
    found: list[tuple[str, int, int, int | None]] = []
    with open_trace(p) as f:
        reader = CsvFile(f, p, col, header=True)
        idx = _header(col, reader, SPOT_COLUMNS)
        for _k, where, row in col.csv_rows(reader, len(idx)):
            try:
                model = row[idx["gpu_model"]].strip()
                if not is_gpu_model(model, slash=True):  # ('/' as before: NVIDIA/A10)
                    raise InvalidTraceError("gpu_model", model, GPU_MODEL_SLASH_REASON, where=where)
                gpus = _node_gpus("gpu_capacity_num", row[idx["gpu_capacity_num"]].strip(), where)
                cpu = _bounded("cpu_num", row[idx["cpu_num"]].strip(), where, 1000, MAX_CPU_MILLI)
                found.append((model, gpus, cpu, None))
            except InvalidTraceError as e:
                col.fail(e)
    return _inventory(col, found)


def load_vc_gpus(path: PathLike, *, day: str | None = None) -> dict[str, int]:
    """GPUs per virtual cluster on ``day`` (``YYYY-MM-DD``; default: the first row) of the
    Helios Earth VC table (``date, <vc>..., total``), VCs with 0 GPUs left out, the
    ``total`` column dropped. Raises :class:`~kant.errors.InvalidTraceError` at
    ``file:line`` for a bad cell, or when ``day`` is not in the file; ``day`` is checked
    before the file is opened (:class:`~kant.errors.ValidationError` for anything but None
    or a date ``YYYY-MM-DD``)."""
    p = trace_path(path)
    if day is not None:
        try:
            if not isinstance(day, str) or not _DAY.fullmatch(day):
                raise ValueError(day)
            date.fromisoformat(day)
        except ValueError:
            raise ValidationError("day", day, "must be None or a date 'YYYY-MM-DD'") from None
    col = RowCollector(p, "raise")
    with open_trace(p) as f:
        reader = CsvFile(f, p, col, header=True)
        idx = _header(col, reader, ("date",))
        names = [n for n in idx if n not in ("date", "total")]
        if "" in names:  # (it became a tenant "t-" with the column's GPUs)
            why = f"column {idx[''] + 1} has no name (a virtual cluster's)"
            raise InvalidTraceError("header", "", why, where=col.where(1))
        for _k, where, row in col.csv_rows(reader, len(idx)):
            if day is not None and row[idx["date"]].strip() != day:
                continue
            gpus = {n: parse_uint(n, row[idx[n]].strip(), where) for n in names}
            return {n: g for n, g in gpus.items() if g > 0}
    raise InvalidTraceError("date", day, "is not in the file", where=str(p))
