"""The scale-out fabric and cluster descriptions.

A :class:`ClusterDescription` is the list of nodes (:class:`kant.model.NodeSpec`) and the
custom node templates they use. Each node names its place in the fabric — ``leaf`` (a
NodeNetGroup), ``spine``, ``superspine`` — and optionally a scale-up ``hbd`` domain; the fabric
is implied by those names, and :func:`fabric_graph` turns it into a networkx graph.

Builders: :func:`fat_tree` / :func:`fat_tree_for_nodes` (synthetic leaf/spine/superspine
clusters), :func:`load_cluster` / :func:`dump_cluster` (JSON or YAML cluster files, schema in
``docs/topology.md``). The Alibaba openb node list is a trace:
:func:`kant.sim.traces.openb_nodes` reads it.
"""

from __future__ import annotations

import codecs
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from kant.errors import (
    InvalidClusterFileError,
    InvalidNodeError,
    InvalidTopologyError,
    UnknownTemplateError,
    ValidationError,
)
from kant.model import NodeSpec, Taint, Tier
from kant.topology.names import FabricNames
from kant.topology.templates import (
    BUILTIN_TEMPLATES,
    GpuSlot,
    NicSlot,
    NodeTemplate,
    get_template,
)

if TYPE_CHECKING:  # (networkx is imported by the functions that make a graph)
    import networkx as nx

__all__ = [
    "CLUSTER_FILE_VERSION",
    "MAX_GROUP_NAME",
    "MAX_NODES",
    "ClusterDescription",
    "cluster_from_dict",
    "cluster_to_dict",
    "dump_cluster",
    "fabric_graph",
    "fat_tree",
    "fat_tree_for_nodes",
    "load_cluster",
    "shared_tier",
    "unique_key_loader",
    "unique_pairs",
]

MAX_NODES: Final = 250_000
"""The most nodes a built or loaded fabric may have (two million GPUs of 8-GPU nodes,
twenty times the paper's 100,000): more is a mistake (a count or a header gone wrong) that
would exhaust memory before any error."""

CLUSTER_FILE_VERSION: Final = 1

MAX_GROUP_NAME: Final = 253
"""The longest node name a ``groups`` entry of a cluster file may make (prefix and padded
number): Kubernetes' limit for a node name. A wider ``width`` or ``start`` is a mistake that
would make every node's name as long (a ``width`` of a million: a megabyte per node)."""

DEFAULT_CPU_MILLI: Final = 192_000
"""Default CPU of a synthetic 8-GPU node: 192 cores."""

DEFAULT_MEMORY_MIB: Final = 2 * 1024 * 1024
"""Default memory of a synthetic 8-GPU node: 2 TiB."""


# --------------------------------------------------------------------------- validation


def _to_tuple(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _check(
    nodes: Sequence[NodeSpec],
    templates: Sequence[NodeTemplate],
    node_at: Callable[[int], str],
    template_at: Callable[[int], str],
) -> None:
    """Validate a description; ``node_at(i)``/``template_at(i)`` name entry ``i`` in errors."""
    known: dict[str, NodeTemplate] = {}
    for i, t in enumerate(templates):
        if not isinstance(t, NodeTemplate):
            raise InvalidClusterFileError(
                "templates", t, "must be a NodeTemplate", where=template_at(i)
            )
        if t.name in known:
            raise InvalidClusterFileError(
                "name", t.name, "another template has this name", where=template_at(i)
            )
        builtin = BUILTIN_TEMPLATES.get(t.name)
        if builtin is not None and builtin != t:
            raise InvalidClusterFileError(
                "name",
                t.name,
                "differs from the built-in template of that name",
                where=template_at(i),
            )
        known[t.name] = t

    fabric = FabricNames()  # the nodes' fabric names, consistent (as a ClusterState keeps)
    seen: dict[str, None] = {}  # the node names so far
    for i, node in enumerate(nodes):
        where = node_at(i)
        if not isinstance(node, NodeSpec):
            raise InvalidClusterFileError("nodes", node, "must be a NodeSpec", where=where)
        if node.name in seen:
            raise InvalidClusterFileError(
                "name", node.name, "another node has this name", where=where
            )
        try:
            fabric.add(node, seen)
        except InvalidNodeError as e:
            raise InvalidClusterFileError(e.field, e.value, e.reason, where=where) from None
        seen[node.name] = None
        if node.template is not None:
            tmpl = known.get(node.template) or BUILTIN_TEMPLATES.get(node.template)
            if tmpl is None:
                raise InvalidClusterFileError(
                    "template",
                    node.template,
                    f"unknown template; list it under templates (built-ins: "
                    f"{sorted(BUILTIN_TEMPLATES)})",
                    where=where,
                )
            if node.gpus != tmpl.num_gpus:
                raise InvalidClusterFileError(
                    "gpus",
                    node.gpus,
                    f"template {tmpl.name!r} has {tmpl.num_gpus} GPUs",
                    where=where,
                )
            if node.rdma_nics != tmpl.num_nics:
                raise InvalidClusterFileError(
                    "rdma_nics",
                    node.rdma_nics,
                    f"template {tmpl.name!r} has {tmpl.num_nics} NICs",
                    where=where,
                )


@attrs.frozen(kw_only=True)
class ClusterDescription:
    """The nodes of a cluster and the custom templates they use.

    Invariants (checked at construction, :class:`~kant.errors.InvalidClusterFileError` with
    ``where="nodes[i]"`` or ``"templates[i]"`` otherwise):

    - node names are unique; template names are unique, and a listed template named like a
      built-in must equal it;
    - a node's ``template`` is built-in or listed in ``templates`` (the description is
      self-contained: templates only registered at run time must be listed), and then
      ``gpus == len(template.gpus)`` and ``rdma_nics == len(template.nics)``;
    - each leaf is under one spine (or none), each spine under one superspine (or none);
    - a name used for a node, leaf, spine, superspine or HBD names nothing else.

    HBDs may span leaves; nothing else is required of them.
    """

    nodes: tuple[NodeSpec, ...] = attrs.field(converter=_to_tuple)
    templates: tuple[NodeTemplate, ...] = attrs.field(default=(), converter=_to_tuple)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.nodes, tuple):
            raise InvalidClusterFileError("nodes", self.nodes, "must be a tuple of NodeSpec")
        if not isinstance(self.templates, tuple):
            raise InvalidClusterFileError(
                "templates", self.templates, "must be a tuple of NodeTemplate"
            )
        _check(self.nodes, self.templates, lambda i: f"nodes[{i}]", lambda i: f"templates[{i}]")

    def template(self, name: str) -> NodeTemplate:
        """The listed or built-in template ``name``; raises
        :class:`~kant.errors.UnknownTemplateError`."""
        for t in self.templates:
            if t.name == name:
                return t
        builtin = BUILTIN_TEMPLATES.get(name)
        if builtin is None:
            raise UnknownTemplateError(name)
        return builtin

    @property
    def total_gpus(self) -> int:
        """GPUs over all described nodes. O(nodes)."""
        return sum(n.gpus for n in self.nodes)


# --------------------------------------------------------------------------- builders


def _require(field: str, value: Any, ok: bool, reason: str) -> None:
    if not ok:
        raise InvalidTopologyError(field, value, reason)


def _pos(field: str, value: Any) -> None:
    _require(
        field,
        value,
        isinstance(value, int) and not isinstance(value, bool) and value >= 1,
        "must be an int >= 1",
    )


def _fat_tree_nodes(
    *,
    limit: int,
    superspines: int,
    spines_per_superspine: int,
    leaves_per_spine: int,
    nodes_per_leaf: int,
    gpu_model: str,
    template: str | NodeTemplate,
    cpu_milli: int,
    memory_mib: int,
    hbd_size: int | None,
    zone_nodes: int,
    zone: str,
) -> ClusterDescription:
    for field, value in (
        ("superspines", superspines),
        ("spines_per_superspine", spines_per_superspine),
        ("leaves_per_spine", leaves_per_spine),
        ("nodes_per_leaf", nodes_per_leaf),
    ):
        _pos(field, value)
    _require("nodes", limit, limit <= MAX_NODES, f"a fabric has at most {MAX_NODES:,} nodes")
    if hbd_size is not None:
        _pos("hbd_size", hbd_size)
    _require(
        "zone_nodes",
        zone_nodes,
        isinstance(zone_nodes, int) and not isinstance(zone_nodes, bool) and zone_nodes >= 0,
        "must be an int >= 0",
    )
    tmpl = template if isinstance(template, NodeTemplate) else get_template(template)
    listed = () if BUILTIN_TEMPLATES.get(tmpl.name) == tmpl else (tmpl,)
    total = superspines * spines_per_superspine * leaves_per_spine * nodes_per_leaf
    width = max(6, len(str(min(limit, total) - 1)))
    nodes: list[NodeSpec] = []
    hbd_count = 0

    def leaves() -> Iterator[tuple[str, str, str]]:
        for s in range(superspines):
            ss = f"ss{s}"
            for p in range(spines_per_superspine):
                sp = f"{ss}-sp{p}"
                for lf in range(leaves_per_spine):
                    yield ss, sp, f"{sp}-lf{lf}"

    for ss, sp, leaf in leaves():
        for j in range(nodes_per_leaf):
            if len(nodes) >= limit:
                break
            hbd = None
            if hbd_size is not None:
                if j % hbd_size == 0:
                    hbd_count += 1
                hbd = f"hbd-{hbd_count - 1}"
            i = len(nodes)
            nodes.append(
                NodeSpec(
                    name=f"n{i:0{width}d}",
                    gpu_model=gpu_model if tmpl.num_gpus else None,
                    gpus=tmpl.num_gpus,
                    cpu_milli=cpu_milli,
                    memory_mib=memory_mib,
                    rdma_nics=tmpl.num_nics,
                    template=tmpl.name,
                    leaf=leaf,
                    spine=sp,
                    superspine=ss,
                    hbd=hbd,
                    zone=zone if i < zone_nodes else None,
                )
            )
    return ClusterDescription(nodes=tuple(nodes), templates=listed)


def fat_tree(
    *,
    superspines: int = 1,
    spines_per_superspine: int = 2,
    leaves_per_spine: int = 4,
    nodes_per_leaf: int = 32,
    gpu_model: str = "H100",
    template: str | NodeTemplate = "dgx-8gpu",
    cpu_milli: int = DEFAULT_CPU_MILLI,
    memory_mib: int = DEFAULT_MEMORY_MIB,
    hbd_size: int | None = None,
    zone_nodes: int = 0,
    zone: str = "inference",
) -> ClusterDescription:
    """A full fat tree of identical nodes.

    Names are deterministic: superspine ``ss<s>``, spine ``ss<s>-sp<p>``, leaf
    ``ss<s>-sp<p>-lf<l>``, node ``n<i>`` with ``i`` the global index zero-padded to 6 digits
    (``n000123``), nodes numbered leaf by leaf. With ``hbd_size`` every run of ``hbd_size``
    consecutive nodes inside a leaf forms an HBD ``hbd-<k>`` (``k`` global; the last group of
    a leaf may be smaller). The first ``zone_nodes`` nodes get ``zone``. ``template`` is a
    registered name or a template (listed in the description unless built-in); GPU and NIC
    counts come from it. Bad arguments raise :class:`~kant.errors.InvalidTopologyError`.
    """
    return _fat_tree_nodes(
        limit=superspines * spines_per_superspine * leaves_per_spine * nodes_per_leaf,
        superspines=superspines,
        spines_per_superspine=spines_per_superspine,
        leaves_per_spine=leaves_per_spine,
        nodes_per_leaf=nodes_per_leaf,
        gpu_model=gpu_model,
        template=template,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        hbd_size=hbd_size,
        zone_nodes=zone_nodes,
        zone=zone,
    )


def fat_tree_for_nodes(
    n_nodes: int,
    *,
    nodes_per_leaf: int = 32,
    leaves_per_spine: int = 8,
    spines_per_superspine: int = 8,
    gpu_model: str = "H100",
    template: str | NodeTemplate = "dgx-8gpu",
    cpu_milli: int = DEFAULT_CPU_MILLI,
    memory_mib: int = DEFAULT_MEMORY_MIB,
    hbd_size: int | None = None,
    zone_nodes: int = 0,
    zone: str = "inference",
) -> ClusterDescription:
    """A fat tree of exactly ``n_nodes`` nodes, filled leaf by leaf with the naming of
    :func:`fat_tree` (as many superspines as needed; the last leaf, spine and superspine may
    be partial, and only leaves holding nodes exist)."""
    _pos("n_nodes", n_nodes)
    for field, value in (
        ("nodes_per_leaf", nodes_per_leaf),
        ("leaves_per_spine", leaves_per_spine),
        ("spines_per_superspine", spines_per_superspine),
    ):
        _pos(field, value)
    per_superspine = nodes_per_leaf * leaves_per_spine * spines_per_superspine
    return _fat_tree_nodes(
        limit=n_nodes,
        superspines=-(-n_nodes // per_superspine),
        spines_per_superspine=spines_per_superspine,
        leaves_per_spine=leaves_per_spine,
        nodes_per_leaf=nodes_per_leaf,
        gpu_model=gpu_model,
        template=template,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        hbd_size=hbd_size,
        zone_nodes=zone_nodes,
        zone=zone,
    )


# --------------------------------------------------------------------------- graph & tiers


def fabric_graph(desc: ClusterDescription) -> nx.DiGraph:
    """The scale-out fabric as a directed networkx graph (a fresh graph each call).

    Vertex ids are the plain names from the description (unique across kinds by the
    description's invariants). Every vertex has ``kind`` in ``{"superspine", "spine",
    "leaf", "node", "hbd"}``; node vertices also carry every :class:`~kant.model.NodeSpec`
    field as an attribute (``name``, ``gpu_model``, ``gpus``, ``cpu_milli``, ``memory_mib``,
    ``rdma_nics``, ``max_pods``, ``template``, ``leaf``, ``spine``, ``superspine``, ``hbd``,
    ``zone``).

    Edges point from the wider element to the narrower one: superspine → spine, spine →
    leaf, leaf → node, and hbd → node. Each edge has ``tier``, the name of the
    :class:`~kant.model.Tier` its source stands for (``"SUPERSPINE"``, ``"SPINE"``,
    ``"LEAF"``, ``"HBD"``). Nodes without a leaf are isolated vertices.
    """
    import networkx as nx  # (imported when first used: it is a fifth of kant's start-up)

    g = nx.DiGraph()
    for node in desc.nodes:
        g.add_node(node.name, kind="node", **attrs.asdict(node))
    for node in desc.nodes:
        chain = [
            (node.superspine, "superspine", Tier.SUPERSPINE),
            (node.spine, "spine", Tier.SPINE),
            (node.leaf, "leaf", Tier.LEAF),
        ]
        for (parent, pkind, tier), (child, _ckind, _t) in itertools.pairwise(chain):
            if parent is not None and child is not None:
                g.add_node(parent, kind=pkind)
                g.add_edge(parent, child, tier=tier.name)
        if node.leaf is not None:
            g.add_node(node.leaf, kind="leaf")
            g.add_edge(node.leaf, node.name, tier=Tier.LEAF.name)
        if node.hbd is not None:
            g.add_node(node.hbd, kind="hbd")
            g.add_edge(node.hbd, node.name, tier=Tier.HBD.name)
    return g


def shared_tier(a: NodeSpec, b: NodeSpec) -> Tier:
    """The lowest tier containing both nodes: ``NODE`` (same name), ``HBD`` (same non-None
    hbd), ``LEAF``, ``SPINE``, ``SUPERSPINE`` (same non-None name at that level), else
    ``CLUSTER``. A ``None`` at any level matches nothing. O(1)."""
    if a.name == b.name:
        return Tier.NODE
    if a.hbd is not None and a.hbd == b.hbd:
        return Tier.HBD
    if a.leaf is not None and a.leaf == b.leaf:
        return Tier.LEAF
    if a.spine is not None and a.spine == b.spine:
        return Tier.SPINE
    if a.superspine is not None and a.superspine == b.superspine:
        return Tier.SUPERSPINE
    return Tier.CLUSTER


# --------------------------------------------------------------------------- cluster files

_NODE_FIELDS: Final = tuple(f.name for f in attrs.fields(NodeSpec))
_NODE_DEFAULTS: Final = {f.name: f.default for f in attrs.fields(NodeSpec)}
_GROUP_ONLY: Final = ("count", "prefix", "start", "width")
_GROUP_KEYS: Final = (*_GROUP_ONLY, *(f for f in _NODE_FIELDS if f != "name"))
_TOP_KEYS: Final = ("version", "templates", "nodes", "groups")
_TEMPLATE_KEYS: Final = ("name", "gpus", "nics")
_GPU_KEYS: Final = ("numa", "pcie_switch", "nvlink_domain")
_NIC_KEYS: Final = ("numa", "pcie_switch")
_TAINT_KEYS: Final = ("key", "value", "effect")


def _fail(field: str, value: Any, reason: str, where: str) -> InvalidClusterFileError:
    return InvalidClusterFileError(field, value, reason, where=where)


def _mapping(value: Any, allowed: Sequence[str], field: str, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(field, value, "must be a mapping", where)
    for key in value:
        if key not in allowed:
            raise _fail(str(key), value[key], f"unknown key; allowed: {list(allowed)}", where)
    return value


def _list(value: Any, field: str, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(field, value, "must be a list", where)
    return value


def _int(value: Any, field: str, where: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _fail(field, value, f"must be an int >= {minimum}", where)
    return value


def _build(cls: type[Any], fields: Mapping[str, Any], where: str) -> Any:
    """Construct an attrs value object from a checked mapping, re-raising a missing field or
    its validation error as :class:`~kant.errors.InvalidClusterFileError` at ``where``."""
    for f in attrs.fields(cls):
        if f.init and f.default is attrs.NOTHING and f.name not in fields:
            raise _fail(f.name, None, "required", where)
    try:
        return cls(**fields)
    except ValidationError as e:
        raise _fail(e.field, e.value, e.reason, where) from e


def _parse_template(raw: Any, where: str) -> NodeTemplate:
    entry = _mapping(raw, _TEMPLATE_KEYS, "templates", where)
    for key in ("name", "gpus"):
        if key not in entry:
            raise _fail(key, None, "required", where)
    gpus = []
    for j, g in enumerate(_list(entry["gpus"], "gpus", where)):
        w = f"{where}.gpus[{j}]"
        gpus.append(_build(GpuSlot, _mapping(g, _GPU_KEYS, "gpus", w), w))
    nics = []
    for j, n in enumerate(_list(entry.get("nics", []), "nics", where)):
        w = f"{where}.nics[{j}]"
        nics.append(_build(NicSlot, _mapping(n, _NIC_KEYS, "nics", w), w))
    t: NodeTemplate = _build(
        NodeTemplate, {"name": entry["name"], "gpus": tuple(gpus), "nics": tuple(nics)}, where
    )
    return t


def cluster_from_dict(data: Any, *, source: str = "<dict>") -> ClusterDescription:
    """Build a description from the parsed cluster-file document ``data``.

    ``source`` prefixes every error location: errors are
    :class:`~kant.errors.InvalidClusterFileError` with ``where="<source>:nodes[3]"`` (or
    ``templates[i]``, ``templates[i].gpus[j]``, ``groups[i]``) and the offending field. Unknown
    keys are errors. Explicit ``nodes`` come first, then the nodes of each group in order.
    """
    top = _mapping(data, _TOP_KEYS, "document", source)
    if "version" not in top:
        raise _fail("version", None, f"required (use {CLUSTER_FILE_VERSION})", source)
    if top["version"] != CLUSTER_FILE_VERSION or isinstance(top["version"], bool):
        raise _fail("version", top["version"], f"only version {CLUSTER_FILE_VERSION}", source)

    templates = [
        _parse_template(raw, f"{source}:templates[{i}]")
        for i, raw in enumerate(_list(top.get("templates", []), "templates", source))
    ]
    nodes: list[NodeSpec] = []
    origins: list[str] = []
    for i, raw in enumerate(_list(top.get("nodes", []), "nodes", source)):
        where = f"{source}:nodes[{i}]"
        entry = _taints_read(_mapping(raw, _NODE_FIELDS, "nodes", where), where)
        nodes.append(_build(NodeSpec, entry, where))
        origins.append(where)
    for i, raw in enumerate(_list(top.get("groups", []), "groups", source)):
        where = f"{source}:groups[{i}]"
        entry = _taints_read(_mapping(raw, _GROUP_KEYS, "groups", where), where)
        for key in ("count", "prefix"):
            if key not in entry:
                raise _fail(key, None, "required", where)
        count = _int(entry["count"], "count", where, 1)
        if len(nodes) + count > MAX_NODES:
            raise _fail("count", count, f"the cluster would have more than {MAX_NODES:,} nodes",
                        where)  # fmt: skip
        start = _int(entry.get("start", 0), "start", where, 0)
        width = _int(entry.get("width", 0), "width", where, 0)
        prefix = entry["prefix"]
        if not isinstance(prefix, str):
            raise _fail("prefix", prefix, "must be a string", where)
        _check_group_names(prefix, start, count, width, where)
        shared = {k: v for k, v in entry.items() if k not in _GROUP_ONLY}
        for j in range(count):
            name = f"{prefix}{start + j:0{width}d}"
            nodes.append(_build(NodeSpec, {"name": name, **shared}, where))
            origins.append(f"{where} (node {name!r})")
    _check(nodes, templates, origins.__getitem__, lambda i: f"{source}:templates[{i}]")
    return ClusterDescription(nodes=tuple(nodes), templates=tuple(templates))


def _taints_read(entry: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """``entry`` with its ``taints`` (a list of ``{key, value, effect}`` mappings) read as
    :class:`~kant.model.Taint` values."""
    if "taints" not in entry:
        return entry
    taints = tuple(
        _build(Taint, _mapping(t, _TAINT_KEYS, "taints", f"{where}.taints[{i}]"),
               f"{where}.taints[{i}]")
        for i, t in enumerate(_list(entry["taints"], "taints", where))
    )  # fmt: skip
    return {**entry, "taints": taints}


def _node_dict(n: NodeSpec) -> dict[str, Any]:
    """A node's cluster-file entry: its fields that differ from the defaults."""
    out: dict[str, Any] = {}
    for f in _NODE_FIELDS:
        v = getattr(n, f)
        if f == "labels":
            if v:
                out[f] = dict(v)
        elif f == "taints":
            if v:
                out[f] = [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in v]
        elif f == "name" or v != _NODE_DEFAULTS[f]:
            out[f] = v
    return out


def _check_group_names(prefix: str, start: int, count: int, width: int, where: str) -> None:
    """Raise unless a group's node names, ``prefix`` and the numbers from ``start`` on
    (``count`` of them) padded to ``width`` digits, have at most :data:`MAX_GROUP_NAME`
    characters, before any name is made. O(1)."""
    room = MAX_GROUP_NAME - len(prefix)
    last = start + count - 1
    digits = len(str(last)) if last < 10**MAX_GROUP_NAME else MAX_GROUP_NAME + 1
    if max(width, digits) > room:
        blame: tuple[str, object] = (
            ("width", width) if width >= digits
            else ("start", start) if digits >= MAX_GROUP_NAME
            else ("prefix", prefix)
        )  # fmt: skip
        raise _fail(
            *blame,
            f"the group's node names would be longer than {MAX_GROUP_NAME} characters "
            f"(its prefix has {len(prefix)})",
            where,
        )


def cluster_to_dict(desc: ClusterDescription) -> dict[str, Any]:
    """The cluster-file document for ``desc`` (explicit ``nodes``; node fields equal to the
    :class:`~kant.model.NodeSpec` default and ``nvlink_domain: null`` are left out).
    ``cluster_from_dict(cluster_to_dict(d)) == d``."""

    def gpu(s: GpuSlot) -> dict[str, Any]:
        out: dict[str, Any] = {"numa": s.numa, "pcie_switch": s.pcie_switch}
        if s.nvlink_domain is not None:
            out["nvlink_domain"] = s.nvlink_domain
        return out

    return {
        "version": CLUSTER_FILE_VERSION,
        "templates": [
            {
                "name": t.name,
                "gpus": [gpu(s) for s in t.gpus],
                "nics": [{"numa": s.numa, "pcie_switch": s.pcie_switch} for s in t.nics],
            }
            for t in desc.templates
        ],
        "nodes": [_node_dict(n) for n in desc.nodes],
    }


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


def _yaml(path: Path) -> Any:
    try:
        import yaml
    except ImportError as e:
        raise _fail(
            "path", str(path), "YAML cluster files need pyyaml (pip install pyyaml)", str(path)
        ) from e
    return yaml


MAX_CLUSTER_BYTES = 1 << 30
"""The largest cluster file read (1 GiB: a million nodes of 1,000 bytes each)."""


def load_cluster(path: str | os.PathLike[str]) -> ClusterDescription:
    """Read a cluster file: YAML if the suffix is ``.yaml``/``.yml``, JSON otherwise (a
    ``.csv`` is refused as no cluster file).

    Raises :class:`~kant.errors.InvalidClusterFileError` for a syntax error
    (``where="<file>:<line>"``), a value the parser cannot make (an integer of more than
    4,300 digits), a file larger than :data:`MAX_CLUSTER_BYTES`, a missing pyyaml, or any
    malformed entry (``where="<file>:nodes[3]"`` and the field); ``OSError`` if the file
    cannot be read.
    """
    p = Path(path)
    if p.suffix.lower() == ".csv":  # (read as JSON, it was "not valid JSON: Expecting value")
        why = (
            "a CSV, not a cluster file (YAML, .yaml or .yml, or JSON); an openb nodes CSV "
            "is read with the openb trace"
        )
        raise _fail("document", str(p), why, str(p))
    with p.open("rb") as f:
        raw = f.read(MAX_CLUSTER_BYTES + 1)  # (bounded: a device or a pipe may never end)
    if len(raw) > MAX_CLUSTER_BYTES:
        raise _fail(
            "document", str(p), f"larger than {MAX_CLUSTER_BYTES:,} bytes: not a cluster file",
            str(p),
        )  # fmt: skip
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        text = raw[bom:].decode("utf-8")  # (a byte order mark starting the file is skipped)
    except UnicodeDecodeError as e:
        at = bom + e.start
        bad_line = raw.count(b"\n", 0, at) + 1
        raise _fail(
            "document", str(p), f"not UTF-8 text (byte {at}: {e.reason})", f"{p}:{bad_line}"
        ) from None
    try:
        if _is_yaml(p):
            yaml = _yaml(p)
            try:
                data = yaml.load(text, Loader=unique_key_loader(yaml))
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                line = f":{mark.line + 1}" if mark is not None else ""
                raise _fail("document", str(p), f"not valid YAML: {e}", f"{p}{line}") from e
        else:
            try:
                data = json.loads(text, object_pairs_hook=lambda kv: _unique_pairs(kv, p))
            except json.JSONDecodeError as e:
                raise _fail(
                    "document", str(p), f"not valid JSON: {e.msg}", f"{p}:{e.lineno}"
                ) from e
    except RecursionError:
        raise _fail("document", str(p), "nested too deeply", str(p)) from None
    except InvalidClusterFileError:
        raise
    except ValueError as e:  # a value the parser cannot make: an int of 5,000 digits, a
        kind = "YAML" if _is_yaml(p) else "JSON"  # YAML date of month 13
        raise _fail("document", str(p), f"not valid {kind}: {e}", str(p)) from e
    return cluster_from_dict(data, source=str(p))


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A ``json.loads`` ``object_pairs_hook``: the object as a dict, or ``ValueError`` naming a
    key given twice in it (``json`` would keep the last silently). Kant's files (cluster
    files, sweep grids) are read with it."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} is given twice in one object")
        out[k] = v
    return out


_YAML12_FLOAT = re.compile(
    r"""^(?:[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)[eE][-+]?[0-9]+
         |[-+]\.[0-9][0-9_]*)$""",
    re.VERBOSE,
)
"""The floats of YAML 1.2 (its core schema) and JSON that PyYAML's YAML 1.1 rules read as
strings: a number with an exponent whose sign is left out or whose mantissa has no dot or
nothing before or after it (``1e9``, ``5E-3``, ``1.5e3``, ``1.e3``, ``.5e3``), and a signed
one that starts with its dot (``-.5``). The digits may hold ``_`` as YAML 1.1 allows (not
the exponent's). The floats YAML 1.1 reads already (``1.5``, ``.5``, ``1.5e+3``, ``.inf``)
are its own resolver's; a quoted scalar is never resolved: ``'1e3'`` stays a string."""


_YAML12_INT = re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7]+|0x[0-9a-fA-F]+)$")
"""The ints of YAML 1.2's core schema: decimal (``010`` is ten), ``0o`` octal, ``0x`` hex;
the decimal digits may hold ``_`` as YAML 1.1 allows (``1_000``), as in kant's floats
(:data:`_YAML12_FLOAT`). YAML 1.1, PyYAML's rules, read ``010`` as eight, ``1:30`` as
ninety and ``0b11`` as three; YAML 1.2 reads the last two as strings."""

_YAML12_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
"""The bools of YAML 1.2's core schema; YAML 1.1 also reads ``yes``, ``no``, ``on``, ``off``
(any case) and ``y``/``n`` as bools."""

_INT_TAG = "tag:yaml.org,2002:int"
_BOOL_TAG = "tag:yaml.org,2002:bool"


def safe_loader(yaml: Any) -> Any:
    """``yaml.SafeLoader`` reading numbers and bools as YAML 1.2 (its core schema) and JSON
    write them, for every file kant reads: every float (:data:`_YAML12_FLOAT`: ``1e9``,
    ``1.5e3``, ``.5e3``, which YAML 1.1 reads as strings), ints as :data:`_YAML12_INT` says
    (``010`` is ten, not eight; ``1:30`` and ``0b11`` are strings), and only ``true`` and
    ``false`` as bools (``yes``, ``on`` are strings)."""

    class Loader(yaml.SafeLoader):  # type: ignore[misc]
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in rules if tag not in (_INT_TAG, _BOOL_TAG)]
        for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(_INT_TAG, _YAML12_INT, list("-+0123456789"))
    Loader.add_implicit_resolver(_BOOL_TAG, _YAML12_BOOL, list("tTfF"))

    def construct_int(loader: Any, node: Any) -> int:
        # (an int scalar as YAML 1.2 reads it, ``!!int`` given explicitly too)
        text = str(loader.construct_scalar(node))
        if not _YAML12_INT.match(text):  # (Python's int() takes " 12" and "1__0" too)
            raise yaml.constructor.ConstructorError(
                None, None, f"{text!r} is no int of YAML 1.2", node.start_mark
            )
        sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text.removeprefix("+"))
        base = {"0o": 8, "0x": 16}.get(digits[:2], 10)
        return sign * int(digits[2:] if base != 10 else digits.replace("_", ""), base)

    Loader.add_constructor(_INT_TAG, construct_int)
    return _with_yaml12_floats(Loader)


def safe_dumper(yaml: Any) -> Any:
    """``yaml.SafeDumper`` that quotes every string :func:`safe_loader` would read as a float
    or an int (``'1e3'``, ``'-.5'``, ``'0o10'``: YAML 1.1's dumper leaves them bare), so what
    it writes reads back as written."""

    class Dumper(yaml.SafeDumper):  # type: ignore[misc]
        pass

    Dumper.add_implicit_resolver(_INT_TAG, _YAML12_INT, list("-+0123456789"))
    return _with_yaml12_floats(Dumper)


def _with_yaml12_floats(cls: Any) -> Any:
    """``cls`` (a loader or dumper class of its own) resolving :data:`_YAML12_FLOAT` as floats."""
    cls.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+.0123456789"))
    return cls


def _unique_pairs(pairs: list[tuple[str, Any]], p: Path) -> dict[str, Any]:
    try:
        return unique_pairs(pairs)
    except ValueError as e:
        raise _fail("document", str(p), str(e), str(p)) from None


def unique_key_loader(yaml: Any) -> Any:
    """A :func:`safe_loader` that refuses a key given twice in one mapping (the last would
    silently win), naming the key and its line. Kant's YAML files (cluster files, sweep
    grids) are read with it. A merge key (``<<: *anchor``) is no key given: the anchor's
    fields are merged as YAML reads them, and a field given beside it wins over the
    anchor's (the base loader's merge)."""

    class UniqueKeyLoader(safe_loader(yaml)):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            self._unique(node, deep)
            return super().construct_mapping(node, deep=deep)

        def _unique(self, node: Any, deep: bool) -> None:
            """Refuse a key given twice in ``node``, the merge key ``<<`` too, and in the
            mappings a merge key gives inline (an anchored one is checked where it is)."""
            seen: set[Any] = set()
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    key: Any = "<<"
                    merged = value_node.value if value_node.id == "sequence" else [value_node]
                    for sub in merged:
                        if sub.id == "mapping":
                            self._unique(sub, deep)
                else:
                    key = self.construct_object(key_node, deep=deep)
                try:
                    dup = key in seen
                except TypeError:
                    continue  # an unhashable key: the base loader reports it
                if dup:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found the key {key!r} twice", key_node.start_mark,
                    )  # fmt: skip
                seen.add(key)

    return UniqueKeyLoader


def dump_cluster(desc: ClusterDescription, path: str | os.PathLike[str]) -> None:
    """Write ``desc`` as a cluster file (YAML for ``.yaml``/``.yml``, JSON otherwise) that
    :func:`load_cluster` reads back equal."""
    p = Path(path)
    data = cluster_to_dict(desc)
    if _is_yaml(p):
        yaml = _yaml(p)
        text = yaml.dump(data, Dumper=safe_dumper(yaml), sort_keys=False)
    else:
        text = json.dumps(data, indent=2) + "\n"
    p.write_text(text, encoding="utf-8")
