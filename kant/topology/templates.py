"""Intra-node topology: node templates, GPU/NIC link ranks and the choice of devices.

A :class:`NodeTemplate` describes the inside of one node shape: where each GPU and each RDMA
NIC sits (NUMA domain, PCIe switch, NVLink/NVSwitch domain). Many nodes share a template, so
everything derived from it (the link-rank matrices and the answers of :meth:`best_gpu_set` and
:meth:`best_nics`) is computed once per template and memoised on it.

Link kinds (:class:`kant.model.LinkKind`) are ordered, lower is better::

    SELF < NVLINK < PCIE_SWITCH < NUMA < CROSS_NUMA

A PCIe switch is identified by the pair ``(numa, pcie_switch)``; two devices share a switch only
if both numbers are equal.

Device sets are bit masks: bit ``g`` of a GPU mask stands for GPU ``g`` (at most 64 GPUs and 64
NICs per node, see :data:`kant.model.MAX_GPUS_PER_NODE`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import attrs
import numpy as np
import numpy.typing as npt

from kant.bits import bits as _bits
from kant.bits import mask_of as _mask_of
from kant.errors import (
    DuplicateError,
    InvalidTopologyError,
    InvariantError,
    UnknownTemplateError,
)
from kant.model import MAX_GPUS_PER_NODE, MAX_NICS_PER_NODE, LinkKind, is_int, name, number

if TYPE_CHECKING:  # (networkx is imported by the functions that make a graph)
    import networkx as nx

__all__ = [
    "BUILTIN_TEMPLATES",
    "GpuSlot",
    "NicSlot",
    "NodeTemplate",
    "dgx_8gpu",
    "get_template",
    "openb_template_name",
    "pcie_8gpu",
    "pcie_node",
    "register_template",
    "templates",
]

_EXHAUSTIVE_LIMIT: Final = 512
"""best_gpu_set enumerates every candidate set when there are at most this many (always the
case for templates of up to 8 GPUs, C(8, 4) = 70); beyond it a dynamic program over the link
hierarchy (links that nest) or a greedy search is used."""

_MEMO_LIMIT: Final = 1 << 16
"""A memo table is cleared when it reaches this many entries, bounding memory on 64-GPU
templates; 8-GPU templates never get near it for best_gpu_set."""

_WORST: Final = int(LinkKind.CROSS_NUMA)

_KEY_FIELD: Final = 16
"""Bits per field of :meth:`NodeTemplate._tree_gpu_set`'s packed key (link sum, host sum and
the row terms stay below 2**16 for 64 GPUs)."""


# --------------------------------------------------------------------------- validators


_nonneg_int = number(InvalidTopologyError, low=0, integer=True)
_opt_nonneg_int = attrs.validators.optional(_nonneg_int)
_template_name = name(InvalidTopologyError)


def _slots_of(kind: type[Any], limit: int) -> Callable[[object, attrs.Attribute[Any], Any], None]:
    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, tuple) or not all(isinstance(s, kind) for s in value):
            raise InvalidTopologyError(attribute.name, value, f"must be a tuple of {kind.__name__}")
        if len(value) > limit:
            raise InvalidTopologyError(attribute.name, len(value), f"at most {limit} per node")

    return check


def _to_tuple(v: Any) -> Any:
    """Accept a list where a tuple is expected; anything else goes to the validator."""
    return tuple(v) if isinstance(v, list) else v


# --------------------------------------------------------------------------- slots


@attrs.frozen(kw_only=True)
class GpuSlot:
    """Where one GPU sits: NUMA domain, PCIe switch (within that NUMA domain) and, if it has
    NVLink/NVSwitch, the scale-up domain it shares with other GPUs of the node."""

    numa: int = attrs.field(validator=_nonneg_int)
    pcie_switch: int = attrs.field(validator=_nonneg_int)
    nvlink_domain: int | None = attrs.field(default=None, validator=_opt_nonneg_int)


@attrs.frozen(kw_only=True)
class NicSlot:
    """Where one RDMA NIC sits: NUMA domain and PCIe switch (within that NUMA domain)."""

    numa: int = attrs.field(validator=_nonneg_int)
    pcie_switch: int = attrs.field(validator=_nonneg_int)


# --------------------------------------------------------------------------- derived data


class _Derived:
    """Everything computed from a template's slots, plus the memo tables.

    Lives in a private field of the frozen template, excluded from equality and hashing.
    """

    __slots__ = (
        "dev_memo",
        "gpu_memo",
        "host_rank",
        "host_rows",
        "link_rank",
        "link_rows",
        "nic_memo",
        "nic_rank",
        "nic_rows",
        "nic_switch_gpus",
        "run_memo",
        "tree",
    )

    def __init__(self, gpus: tuple[GpuSlot, ...], nics: tuple[NicSlot, ...]) -> None:
        n_gpu, n_nic = len(gpus), len(nics)
        link = np.empty((n_gpu, n_gpu), dtype=np.int8)
        host = np.empty((n_gpu, n_gpu), dtype=np.int8)
        for a, ga in enumerate(gpus):
            for b, gb in enumerate(gpus):
                h = _host_kind(ga.numa, ga.pcie_switch, gb.numa, gb.pcie_switch)
                if a == b:
                    link[a, b] = host[a, b] = LinkKind.SELF
                    continue
                host[a, b] = h
                same_nvl = ga.nvlink_domain is not None and ga.nvlink_domain == gb.nvlink_domain
                link[a, b] = LinkKind.NVLINK if same_nvl else h
        nic = np.empty((n_gpu, n_nic), dtype=np.int8)
        for a, ga in enumerate(gpus):
            for j, nj in enumerate(nics):
                nic[a, j] = _host_kind(ga.numa, ga.pcie_switch, nj.numa, nj.pcie_switch)
        for arr in (link, host, nic):
            arr.setflags(write=False)
        self.link_rank: npt.NDArray[np.int8] = link
        self.host_rank: npt.NDArray[np.int8] = host
        self.nic_rank: npt.NDArray[np.int8] = nic
        # Plain Python rows: the exhaustive search indexes them far faster than numpy.
        self.link_rows: list[list[int]] = link.tolist()
        self.host_rows: list[list[int]] = host.tolist()
        self.nic_rows: list[list[int]] = nic.tolist()
        # For each NIC, the mask of GPUs behind the same PCIe switch.
        self.nic_switch_gpus: list[int] = [
            sum(
                1 << g
                for g, gs in enumerate(gpus)
                if (gs.numa, gs.pcie_switch) == (nj.numa, nj.pcie_switch)
            )
            for nj in nics
        ]
        self.tree = _link_tree(self.link_rows, self.host_rows)
        self.gpu_memo: dict[tuple[int, int], int | None] = {}
        self.run_memo: dict[tuple[int, int, int], tuple[tuple[int, ...], int] | None] = {}
        self.nic_memo: dict[tuple[int, int, int], int | None] = {}
        self.dev_memo: dict[tuple[int, int, int, int], tuple[int, int] | None] = {}


_Tree = tuple[tuple[int, tuple[int, ...], int, int], ...]
"""A template's link hierarchy (:func:`_link_tree`): nodes in post-order (children before
their parent, the root last), each ``(gpu, children, link, host)``: a leaf is one GPU
(``gpu`` >= 0, no children); a group (``gpu`` = -1) joins its children, any two GPUs of two
different children being linked at exactly ``link`` and ``host`` rank."""


def _link_tree(link: list[list[int]], host: list[list[int]]) -> _Tree | None:
    """The GPUs' link hierarchy when their links nest, else None.

    Links nest when, ranking pairs by (link rank, host rank), the GPUs closer than some rank
    to one GPU are all that close to each other (an ultrametric: PCIe switches inside NUMA
    domains, NVLink islands made of whole switches or inside one, ...): the GPUs then form a
    tree of groups, every pair of GPUs from two sibling groups linked alike.
    O(G² · depth) once per template."""
    nodes: list[tuple[int, tuple[int, ...], int, int]] = []

    def dist(a: int, b: int) -> int:
        return link[a][b] * 8 + host[a][b]  # (link, host) in lexicographic order

    def build(members: list[int]) -> int | None:
        if len(members) == 1:
            nodes.append((members[0], (), 0, 0))
            return len(nodes) - 1
        top = max(dist(a, b) for a, b in itertools.combinations(members, 2))
        groups: list[list[int]] = []
        for g in members:
            for group in groups:
                if dist(g, group[0]) < top:
                    group.append(g)
                    break
            else:
                groups.append([g])
        for i, group in enumerate(groups):
            if any(dist(a, b) >= top for a, b in itertools.combinations(group, 2)):
                return None
            for other in groups[i + 1 :]:
                if any(dist(a, b) != top for a in group for b in other):
                    return None
        children = []
        for group in groups:
            child = build(group)
            if child is None:
                return None
            children.append(child)
        nodes.append((-1, tuple(children), top // 8, top % 8))
        return len(nodes) - 1

    if not link or build(list(range(len(link)))) is None:
        return None
    return tuple(nodes)


def _host_kind(numa_a: int, sw_a: int, numa_b: int, sw_b: int) -> int:
    if numa_a != numa_b:
        return int(LinkKind.CROSS_NUMA)
    return int(LinkKind.PCIE_SWITCH if sw_a == sw_b else LinkKind.NUMA)


# --------------------------------------------------------------------------- template


@attrs.frozen(kw_only=True)
class NodeTemplate:
    """The inside of a node shape: GPU slots and RDMA NIC slots, indexed from 0.

    Equality and hashing use ``name``, ``gpus`` and ``nics`` only. Derived arrays are computed
    once at construction (O(G² + G·NIC)) and are read-only.

    Raises :class:`kant.errors.InvalidTopologyError` for a bad name, a non-slot entry, or more
    than 64 GPUs or NICs.
    """

    name: str = attrs.field(validator=_template_name)
    gpus: tuple[GpuSlot, ...] = attrs.field(
        converter=_to_tuple, validator=_slots_of(GpuSlot, MAX_GPUS_PER_NODE)
    )
    nics: tuple[NicSlot, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_slots_of(NicSlot, MAX_NICS_PER_NODE)
    )
    _derived: _Derived = attrs.field(init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_derived", _Derived(self.gpus, self.nics))

    # ----------------------------------------------------------------- shape

    @property
    def num_gpus(self) -> int:
        """Number of GPU slots."""
        return len(self.gpus)

    @property
    def num_nics(self) -> int:
        """Number of RDMA NIC slots."""
        return len(self.nics)

    @property
    def all_gpus_mask(self) -> int:
        """Mask with one bit per GPU of the template."""
        return (1 << len(self.gpus)) - 1

    @property
    def all_nics_mask(self) -> int:
        """Mask with one bit per NIC of the template."""
        return (1 << len(self.nics)) - 1

    @property
    def link_rank(self) -> npt.NDArray[np.int8]:
        """``[G, G]`` read-only int8 matrix of :class:`~kant.model.LinkKind` values.

        ``SELF`` on the diagonal; ``NVLINK`` when both GPUs have the same non-None
        ``nvlink_domain``; else ``PCIE_SWITCH`` for the same (numa, pcie_switch), ``NUMA`` for
        the same numa, ``CROSS_NUMA`` otherwise. Symmetric.
        """
        return self._derived.link_rank

    @property
    def host_rank(self) -> npt.NDArray[np.int8]:
        """Like :attr:`link_rank` but ignoring NVLink: the distance over the host PCIe/NUMA
        fabric (what GPU-NIC and GPU-CPU traffic crosses). Equal to ``link_rank`` on a
        PCIe-only template."""
        return self._derived.host_rank

    @property
    def nic_rank(self) -> npt.NDArray[np.int8]:
        """``[G, NIC]`` read-only int8 matrix: ``PCIE_SWITCH`` when GPU and NIC share a switch
        (same numa and pcie_switch), ``NUMA`` for the same numa, ``CROSS_NUMA`` otherwise."""
        return self._derived.nic_rank

    # ----------------------------------------------------------------- GPU choice

    def best_gpu_set(self, free_mask: int, k: int) -> int | None:
        """Choose ``k`` of the free GPUs (set bits of ``free_mask``) with the best links.

        Returns the chosen mask (a subset of ``free_mask`` with ``k`` bits), ``0`` for
        ``k == 0``, or ``None`` when fewer than ``k`` GPUs are free. Among candidate sets the
        winner is the lexicographic minimum of:

        1. the worst (max) pairwise :attr:`link_rank` inside the set;
        2. the sum of pairwise link ranks inside the set;
        3. the sum of pairwise :attr:`host_rank` inside the set (only breaks ties on NVLink
           templates: GPUs under one PCIe switch also share its NICs);
        4. the sum of pairwise link ranks among the GPUs left free, then 5. the same with host
           ranks — i.e. keep the remaining free GPUs best connected (with a fixed number of
           remaining pairs this is the same as maximising the sum of ``CROSS_NUMA + 1 - rank``
           over them), so a lone GPU is taken before a well-connected group is broken up;
        6. the mask value.

        Exact (every candidate set is scored) when there are at most 512 candidate sets, which
        is always the case for templates of up to 8 GPUs. Beyond that, exact too when the
        template's links nest (:func:`_link_tree`): a dynamic program over its link hierarchy,
        O(G · k) (:meth:`_tree_gpu_set`). Otherwise a greedy search grows a set from every
        free seed GPU, adding the GPU with the best links to the set so far, and keeps the
        best grown set by the same criteria: O(F² · k) with F free GPUs, vectorised, not
        exact. Results are memoised per ``(free_mask, k)``, so a repeated question costs one
        dict lookup.

        Raises :class:`~kant.errors.InvalidTopologyError` if ``free_mask`` has bits beyond the
        template's GPUs or ``k`` is negative.
        """
        memo = self._derived.gpu_memo
        key = (free_mask, k)
        hit = memo.get(key, -1)
        if hit != -1:
            return hit
        result = self._compute_gpu_set(free_mask, k)
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = result
        return result

    def best_gpu_sets(
        self, free_mask: int, k: int, count: int
    ) -> tuple[tuple[int, ...], int] | None:
        """The sets :meth:`best_gpu_set` picks for ``count`` pods of ``k`` GPUs placed one
        after the other from ``free_mask`` (each pod's set leaves the next one's free mask),
        and their union; None when they do not all fit. Memoised per ``(free_mask, k,
        count)``: the pods of a gang filling a node in one step cost one dict lookup. Raises
        as :meth:`best_gpu_set` does."""
        memo = self._derived.run_memo
        key = (free_mask, k, count)
        if key in memo:
            return memo[key]
        sets: list[int] = []
        free = free_mask
        for _ in range(count):
            chosen = self.best_gpu_set(free, k)
            if chosen is None:
                break
            sets.append(chosen)
            free &= ~chosen
        result = (tuple(sets), free_mask & ~free) if len(sets) == count else None
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = result
        return result

    def _compute_gpu_set(self, free_mask: int, k: int) -> int | None:
        if not is_int(free_mask) or free_mask < 0 or free_mask >> len(self.gpus):
            raise InvalidTopologyError(
                "free_mask", free_mask, f"must be a mask of the {len(self.gpus)} GPUs"
            )
        if not is_int(k) or k < 0:
            raise InvalidTopologyError("k", k, "must be an int >= 0")
        free = _bits(free_mask)
        if k > len(free):
            return None
        if k == 0:
            return 0
        if k == len(free):
            return free_mask
        if math.comb(len(free), k) <= _EXHAUSTIVE_LIMIT:
            return self._exhaustive_gpu_set(free, k)
        tree = self._derived.tree
        if tree is not None:
            return self._tree_gpu_set(tree, free, k)
        return self._greedy_gpu_set(free, k)

    def _exhaustive_gpu_set(self, free: Sequence[int], k: int) -> int:
        best = min(self._gpu_set_keys(free, k), default=None)
        if best is None:  # 1 <= k < len(free): at least one combination
            raise InvariantError(f"NodeTemplate {self.name}: no {k}-GPU set of {free} tried")
        return best[5]

    def _gpu_set_keys(
        self, free: Sequence[int], k: int
    ) -> Iterator[tuple[int, int, int, int, int, int]]:
        """:meth:`best_gpu_set`'s key (smaller is better, the mask last) of every ``k``-GPU
        set of ``free``."""
        link, host = self._derived.link_rows, self._derived.host_rows
        link_row = {g: sum(link[g][h] for h in free) for g in free}
        host_row = {g: sum(host[g][h] for h in free) for g in free}
        link_total = sum(link_row.values()) // 2
        host_total = sum(host_row.values()) // 2
        for combo in itertools.combinations(free, k):
            worst = link_sum = host_sum = 0
            for i, a in enumerate(combo):
                la, ha = link[a], host[a]
                for b in combo[i + 1 :]:
                    r = la[b]
                    link_sum += r
                    host_sum += ha[b]
                    if r > worst:
                        worst = r
            # Pairs among the remaining GPUs = all free pairs - pairs touching the set;
            # sum over the set of its row sums counts inner pairs twice and cross pairs once.
            link_left = link_total + link_sum - sum(link_row[c] for c in combo)
            host_left = host_total + host_sum - sum(host_row[c] for c in combo)
            yield (worst, link_sum, host_sum, link_left, host_left, _mask_of(combo))

    def _tree_gpu_set(self, tree: _Tree, free: Sequence[int], k: int) -> int:
        """:meth:`best_gpu_set`'s exact answer on a template whose links nest, by dynamic
        programming over its link hierarchy: per group, the best key of taking ``j`` of its
        free GPUs, for every ``j <= k``, from its children's (two children's parts add up,
        plus ``a * b`` pairs across them at the group's ranks). The key is packed in one int
        that adds up over disjoint parts: link sum, host sum, the two row-sum terms of
        criteria 4 and 5 (with the link and host sums fixed, fewer ranks left among the
        other free GPUs = larger row sums taken), the mask. The worst link of a set is the
        rank of the lowest group holding it, so each group's best is a candidate with the
        group's link rank first (a set inside one child is also that child's candidate,
        with its lower rank). O(G · k) additions."""
        link, host = self._derived.link_rows, self._derived.host_rows
        free_set = set(free)
        w = _KEY_FIELD
        row_cap = _WORST * len(link) + 1  # > any row sum
        mask_bits = MAX_GPUS_PER_NODE
        tables: list[list[int]] = []
        best: tuple[int, int] | None = None
        for gpu, children, link_at, host_at in tree:
            if gpu >= 0:
                if gpu not in free_set:
                    table = [0]
                else:
                    lrow = sum(link[gpu][h] for h in free)
                    hrow = sum(host[gpu][h] for h in free)
                    leaf = ((((row_cap - lrow) << w) + row_cap - hrow) << mask_bits) + (1 << gpu)
                    table = [0, leaf]
                    if k == 1 and (best is None or (0, leaf) < best):
                        best = (0, leaf)  # (one GPU: no link at all)
                tables.append(table)
                continue
            cross = ((link_at << w) + host_at) << (2 * w + mask_bits)
            table = tables[children[0]]
            for c in children[1:]:
                other = tables[c]
                size = min(k, len(table) + len(other) - 2)
                merged: list[int | None] = [None] * (size + 1)
                for a, ka in enumerate(table):
                    for b in range(min(len(other) - 1, size - a) + 1):
                        v = ka + other[b] + a * b * cross
                        cur = merged[a + b]
                        if cur is None or v < cur:
                            merged[a + b] = v
                table = [v for v in merged if v is not None]
            tables.append(table)
            if len(table) > k and (best is None or (link_at, table[k]) < best):
                best = (link_at, table[k])
        if best is None:  # (1 < k < free GPUs: the root holds k)
            raise InvariantError(f"NodeTemplate {self.name}: no {k}-GPU set of {free} found")
        return best[1] & ((1 << mask_bits) - 1)

    def _greedy_gpu_set(self, free: Sequence[int], k: int) -> int:
        idx = np.asarray(free, dtype=np.intp)
        n = len(free)
        link = self._derived.link_rank[np.ix_(idx, idx)].astype(np.int64)
        host = self._derived.host_rank[np.ix_(idx, idx)].astype(np.int64)
        link_row = link.sum(axis=1)
        host_row = host.sum(axis=1)
        link_total = int(link_row.sum()) // 2
        host_total = int(host_row.sum()) // 2
        # Growth key, smaller is better: worst link to the set, link sum to the set, host sum
        # to the set, then prefer the GPU least connected to the other free GPUs (taking it
        # fragments least), then position. Packed into one int64 (ranks <= 4, sums <= 252).
        tail = ((link_row.max(initial=0) - link_row) * 1024 + (1023 - host_row)) * 64
        tail = tail + np.arange(n, dtype=np.int64)
        taken_key = np.iinfo(np.int64).max
        best: tuple[int, int, int, int, int, int] | None = None
        seen: set[int] = set()
        for seed in range(n):
            worst_to = link[seed].copy()
            link_to = link[seed].copy()
            host_to = host[seed].copy()
            taken = np.zeros(n, dtype=bool)
            taken[seed] = True
            chosen = [seed]
            for _ in range(k - 1):
                key = ((worst_to * 256 + link_to) * 256 + host_to) * (1 << 24) + tail
                key[taken] = taken_key
                j = int(np.argmin(key))
                taken[j] = True
                chosen.append(j)
                np.maximum(worst_to, link[j], out=worst_to)
                link_to += link[j]
                host_to += host[j]
            mask = _mask_of([free[c] for c in chosen])
            if mask in seen:
                continue
            seen.add(mask)
            sel = np.asarray(chosen, dtype=np.intp)
            link_sum = int(link_to[sel].sum()) // 2
            host_sum = int(host_to[sel].sum()) // 2
            cand = (
                int(worst_to[sel].max()),
                link_sum,
                host_sum,
                link_total + link_sum - int(link_row[sel].sum()),
                host_total + host_sum - int(host_row[sel].sum()),
                mask,
            )
            if best is None or cand < best:
                best = cand
        if best is None:  # at least one seed
            raise InvariantError(f"NodeTemplate {self.name}: no {k}-GPU set of {free} tried")
        return best[5]

    # ----------------------------------------------------------------- GPUs and NICs

    def best_devices(
        self, free_mask: int, k: int, free_nic_mask: int, n: int
    ) -> tuple[int, int] | None:
        """``k`` free GPUs and ``n`` free NICs for one pod, chosen together: the GPU
        combinations with the best interconnect, paired with the NICs on the best path
        (the paper's intra-node rule). Of the GPU sets linked as well as the one
        :meth:`best_gpu_set` picks (the same worst and summed pairwise link rank), the one
        whose :meth:`best_nics` are nearest to it (the summed rank of each NIC to its
        nearest chosen GPU, then more of the chosen GPUs with a NIC on their own PCIe
        switch, then more of them behind the NICs' switches), then
        :meth:`best_gpu_set`'s order. So a NIC already taken on a switch moves the pod to
        an equally linked set on a switch whose NICs are free; the GPU links never get
        worse for it.

        Returns ``(gpu_mask, nic_mask)``, or None when fewer than ``k`` GPUs or ``n`` NICs
        are free. With ``k == 0`` or ``n == 0``, or more than 512 candidate sets,
        :meth:`best_gpu_set`'s choice and its :meth:`best_nics`. Memoised per argument
        quadruple. Raises as :meth:`best_gpu_set` and :meth:`best_nics` do."""
        memo = self._derived.dev_memo
        key = (free_mask, k, free_nic_mask, n)
        hit = memo.get(key, -1)
        if hit != -1:
            return hit  # type: ignore[return-value]
        result = self._compute_devices(free_mask, k, free_nic_mask, n)
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = result
        return result

    def _compute_devices(
        self, free_mask: int, k: int, free_nic_mask: int, n: int
    ) -> tuple[int, int] | None:
        gpus = self.best_gpu_set(free_mask, k)
        if gpus is None:
            return None
        nics = self.best_nics(gpus, free_nic_mask, n)
        if nics is None:
            return None
        free = _bits(free_mask)
        if not k or not n or k == len(free) or math.comb(len(free), k) > _EXHAUSTIVE_LIMIT:
            return gpus, nics
        links = self.link_key(gpus)
        best: tuple[tuple[int, int, int], tuple[int, ...], int] | None = None
        for key in self._gpu_set_keys(free, k):
            if (key[0], key[1]) != links:
                continue
            got = self.best_nics(key[5], free_nic_mask, n)
            assert got is not None  # (as many NICs are free as for gpus)
            cand = (self._nic_cost(key[5], got), key, got)
            if best is None or cand < best:
                best = cand
        assert best is not None  # (gpus itself is one of the sets)
        return best[1][5], best[2]

    def link_key(self, gpu_mask: int) -> tuple[int, int]:
        """The worst and the summed pairwise link rank of the GPUs of ``gpu_mask`` (smaller
        is better linked; what :meth:`best_gpu_set` ranks sets by first)."""
        link = self._derived.link_rows
        combo = _bits(gpu_mask)
        worst = total = 0
        for i, a in enumerate(combo):
            for b in combo[i + 1 :]:
                r = link[a][b]
                total += r
                worst = max(worst, r)
        return worst, total

    def _nic_cost(self, gpu_mask: int, nic_mask: int) -> tuple[int, int, int]:
        """How far the NICs of ``nic_mask`` are from the GPUs of ``gpu_mask`` (smaller is
        nearer): the summed rank of each NIC to its nearest GPU, then minus how many of the
        GPUs have a NIC on their own PCIe switch, then minus how many of the GPUs share each
        NIC's PCIe switch."""
        rows, local = self._derived.nic_rows, self._derived.nic_switch_gpus
        gpus = _bits(gpu_mask)
        rank = near = covered = 0
        for j in _bits(nic_mask):
            rank += min((rows[g][j] for g in gpus), default=_WORST)
            here = local[j] & gpu_mask
            near += here.bit_count()
            covered |= here
        return rank, -covered.bit_count(), -near

    # ----------------------------------------------------------------- NIC choice

    def best_nics(self, gpu_mask: int, free_nic_mask: int, n: int) -> int | None:
        """Choose ``n`` free NICs (set bits of ``free_nic_mask``) nearest the GPUs of
        ``gpu_mask``.

        NICs are taken one at a time, each the best by: its best :attr:`nic_rank` to any
        chosen GPU; then, for a NIC on a chosen GPU's PCIe switch, how many NICs were taken
        on that switch already (fewer first: a switch of the chosen GPUs with no NIC yet
        gets one before a second NIC goes to one switch); then how many chosen GPUs sit
        behind its switch (more first); then its index. Returns the
        NIC mask, ``0`` for ``n == 0``, or ``None`` when fewer than ``n`` NICs are free. With
        an empty ``gpu_mask`` the lowest free NICs are taken. Memoised per argument triple;
        O(NIC · (G + n)) on a miss.

        Raises :class:`~kant.errors.InvalidTopologyError` for masks with bits beyond the
        template's devices or a negative ``n``.
        """
        memo = self._derived.nic_memo
        key = (gpu_mask, free_nic_mask, n)
        hit = memo.get(key, -1)
        if hit != -1:
            return hit
        result = self._compute_nics(gpu_mask, free_nic_mask, n)
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = result
        return result

    def _compute_nics(self, gpu_mask: int, free_nic_mask: int, n: int) -> int | None:
        if not is_int(gpu_mask) or gpu_mask < 0 or gpu_mask >> len(self.gpus):
            raise InvalidTopologyError(
                "gpu_mask", gpu_mask, f"must be a mask of the {len(self.gpus)} GPUs"
            )
        if not is_int(free_nic_mask) or free_nic_mask < 0 or free_nic_mask >> len(self.nics):
            raise InvalidTopologyError(
                "free_nic_mask", free_nic_mask, f"must be a mask of the {len(self.nics)} NICs"
            )
        if not is_int(n) or n < 0:
            raise InvalidTopologyError("n", n, "must be an int >= 0")
        free = _bits(free_nic_mask)
        if n > len(free):
            return None
        if n == 0:
            return 0
        gpus = _bits(gpu_mask)
        rows = self._derived.nic_rows
        local = self._derived.nic_switch_gpus
        # per free NIC: its rank to the nearest chosen GPU, and the chosen GPUs behind its
        # switch (0 when none; distinct switches hold distinct GPUs, so it names the switch)
        left = [
            (min((rows[g][j] for g in gpus), default=_WORST), local[j] & gpu_mask, j) for j in free
        ]
        taken: dict[int, int] = {}  # a chosen GPUs' switch -> NICs taken on it so far

        def rank(c: tuple[int, int, int]) -> tuple[int, int, int, int]:
            return c[0], taken.get(c[1], 0), -c[1].bit_count(), c[2]

        mask = 0
        for _ in range(n):
            best = min(left, key=rank)
            left.remove(best)
            if best[1]:  # (NICs off the chosen GPUs' switches are not counted)
                taken[best[1]] = taken.get(best[1], 0) + 1
            mask |= 1 << best[2]
        return mask

    # ----------------------------------------------------------------- graph

    def to_graph(self) -> nx.Graph:
        """The template as an undirected networkx graph (a fresh copy each call).

        Vertices (attribute ``kind`` on every vertex):

        - ``("gpu", i)``: kind ``"gpu"``; ``index``, ``numa``, ``pcie_switch``,
          ``nvlink_domain`` (int or None).
        - ``("nic", j)``: kind ``"nic"``; ``index``, ``numa``, ``pcie_switch``.
        - ``("pcie_switch", numa, s)``: kind ``"pcie_switch"``; ``numa``, ``pcie_switch``.
        - ``("numa", n)``: kind ``"numa"``; ``numa``.
        - ``("nvlink", d)``: kind ``"nvlink_domain"``; ``nvlink_domain`` (the NVSwitch or
          NVLink island the GPUs with that domain share).

        Edges, attribute ``link`` = a :class:`~kant.model.LinkKind` name: GPU–nvlink domain
        ``"NVLINK"``; GPU–switch and NIC–switch ``"PCIE_SWITCH"``; switch–NUMA ``"NUMA"``;
        NUMA–NUMA (every pair) ``"CROSS_NUMA"``. ``graph.graph["name"]`` is the template
        name. :meth:`from_graph` reads such a graph back.
        """
        import networkx as nx  # (imported when first used: it is a fifth of kant's start-up)

        g = nx.Graph(name=self.name)
        numas = sorted({s.numa for s in self.gpus} | {s.numa for s in self.nics})
        for n in numas:
            g.add_node(("numa", n), kind="numa", numa=n)
        for a, b in itertools.combinations(numas, 2):
            g.add_edge(("numa", a), ("numa", b), link=LinkKind.CROSS_NUMA.name)

        def switch(numa: int, sw: int) -> tuple[str, int, int]:
            vid = ("pcie_switch", numa, sw)
            if vid not in g:
                g.add_node(vid, kind="pcie_switch", numa=numa, pcie_switch=sw)
                g.add_edge(vid, ("numa", numa), link=LinkKind.NUMA.name)
            return vid

        for i, s in enumerate(self.gpus):
            gid = ("gpu", i)
            g.add_node(
                gid,
                kind="gpu",
                index=i,
                numa=s.numa,
                pcie_switch=s.pcie_switch,
                nvlink_domain=s.nvlink_domain,
            )
            g.add_edge(gid, switch(s.numa, s.pcie_switch), link=LinkKind.PCIE_SWITCH.name)
            if s.nvlink_domain is not None:
                did = ("nvlink", s.nvlink_domain)
                g.add_node(did, kind="nvlink_domain", nvlink_domain=s.nvlink_domain)
                g.add_edge(gid, did, link=LinkKind.NVLINK.name)
        for j, t in enumerate(self.nics):
            nid = ("nic", j)
            g.add_node(nid, kind="nic", index=j, numa=t.numa, pcie_switch=t.pcie_switch)
            g.add_edge(nid, switch(t.numa, t.pcie_switch), link=LinkKind.PCIE_SWITCH.name)
        return g

    @classmethod
    def from_graph(cls, graph: nx.Graph, *, name: str | None = None) -> NodeTemplate:
        """Build a template from a graph shaped like :meth:`to_graph`'s output.

        GPUs and NICs are the vertices of kind ``"gpu"``/``"nic"``, ordered by their ``index``
        attribute (which must be 0..n-1). Each is attached to exactly one ``"pcie_switch"``
        vertex, whose ``numa`` and ``pcie_switch`` attributes place it; a GPU attached to an
        ``"nvlink_domain"`` vertex gets that vertex's ``nvlink_domain``. ``name`` defaults to
        ``graph.graph["name"]``. Raises :class:`~kant.errors.InvalidTopologyError`.
        """
        gpus: dict[int, GpuSlot] = {}
        nics: dict[int, NicSlot] = {}
        for vid, data in graph.nodes(data=True):
            kind = data.get("kind")
            if kind not in ("gpu", "nic"):
                continue
            index = data.get("index")
            if not is_int(index) or index < 0:
                raise InvalidTopologyError("index", index, f"vertex {vid!r} needs an int index")
            switches = [w for w in graph[vid] if graph.nodes[w].get("kind") == "pcie_switch"]
            if len(switches) != 1:
                raise InvalidTopologyError(
                    "pcie_switch", len(switches), f"vertex {vid!r} must link to one PCIe switch"
                )
            sw = graph.nodes[switches[0]]
            numa, pcie = sw.get("numa"), sw.get("pcie_switch")
            if kind == "nic":
                target: dict[int, Any] = nics
                slot: GpuSlot | NicSlot = NicSlot(numa=numa, pcie_switch=pcie)
            else:
                domains = [
                    graph.nodes[w].get("nvlink_domain")
                    for w in graph[vid]
                    if graph.nodes[w].get("kind") == "nvlink_domain"
                ]
                if len(domains) > 1 or None in domains:
                    raise InvalidTopologyError(
                        "nvlink_domain", domains, f"GPU {vid!r} needs at most one numbered domain"
                    )
                target = gpus
                slot = GpuSlot(
                    numa=numa, pcie_switch=pcie, nvlink_domain=domains[0] if domains else None
                )
            if index in target:
                raise InvalidTopologyError("index", index, f"two {kind} vertices share it")
            target[index] = slot
        for kind, found in (("gpu", gpus), ("nic", nics)):
            if sorted(found) != list(range(len(found))):
                raise InvalidTopologyError(
                    "index", sorted(found), f"{kind} indices must be 0..{len(found) - 1}"
                )
        return cls(
            name=graph.graph.get("name") if name is None else name,
            gpus=tuple(gpus[i] for i in range(len(gpus))),
            nics=tuple(nics[i] for i in range(len(nics))),
        )


# --------------------------------------------------------------------------- builders


def pcie_node(name: str, gpus: int, nics: int = 0) -> NodeTemplate:
    """A PCIe-only node: two GPUs per PCIe switch (``ceil(gpus / 2)`` switches); with 4 or
    more GPUs the switches are split over two NUMA domains (first half on NUMA 0), otherwise
    all on NUMA 0. NIC ``j`` sits on switch ``j * switches // nics`` (one NIC per GPU puts
    each NIC next to its GPU pair). ``1 <= gpus <= 64``, ``0 <= nics <= 64``."""
    if not is_int(gpus) or not 1 <= gpus <= MAX_GPUS_PER_NODE:
        raise InvalidTopologyError("gpus", gpus, f"must be an int in 1..{MAX_GPUS_PER_NODE}")
    if not is_int(nics) or not 0 <= nics <= MAX_NICS_PER_NODE:
        raise InvalidTopologyError("nics", nics, f"must be an int in 0..{MAX_NICS_PER_NODE}")
    n_switch = (gpus + 1) // 2

    def numa_of(sw: int) -> int:
        return sw * 2 // n_switch if gpus >= 4 else 0

    return NodeTemplate(
        name=name,
        gpus=tuple(GpuSlot(numa=numa_of(g // 2), pcie_switch=g // 2) for g in range(gpus)),
        nics=tuple(
            NicSlot(numa=numa_of(j * n_switch // nics), pcie_switch=j * n_switch // nics)
            for j in range(nics)
        ),
    )


def pcie_8gpu(name: str = "pcie-8gpu") -> NodeTemplate:
    """8 PCIe GPUs and 8 NICs: 4 PCIe switches each holding 2 GPUs and 2 NICs (switch ``s``
    holds GPUs and NICs ``2s, 2s+1``); switches 0, 1 on NUMA 0 and 2, 3 on NUMA 1. No NVLink."""
    return pcie_node(name, 8, 8)


def dgx_8gpu(name: str = "dgx-8gpu") -> NodeTemplate:
    """A DGX-like node: the :func:`pcie_8gpu` layout with all 8 GPUs in one NVSwitch domain
    (``nvlink_domain=0``)."""
    base = pcie_8gpu(name)
    return attrs.evolve(base, gpus=tuple(attrs.evolve(s, nvlink_domain=0) for s in base.gpus))


_OPENB_SHAPES: Final = (1, 2, 4, 8)


def openb_template_name(gpus: int) -> str | None:
    """Template name for an Alibaba openb node with ``gpus`` GPUs: ``"openb-<n>gpu"`` for 1,
    2, 4 or 8 GPUs, ``None`` for a CPU-only node (0). Any other count raises
    :class:`~kant.errors.InvalidTopologyError`."""
    if not is_int(gpus) or (gpus != 0 and gpus not in _OPENB_SHAPES):
        raise InvalidTopologyError("gpus", gpus, f"openb nodes have 0 or {_OPENB_SHAPES} GPUs")
    return f"openb-{gpus}gpu" if gpus else None


# --------------------------------------------------------------------------- registry


def _builtins() -> dict[str, NodeTemplate]:
    out = [dgx_8gpu(), pcie_8gpu()]
    for g in _OPENB_SHAPES:
        name = openb_template_name(g)
        if name is None:
            raise InvariantError(f"templates: no openb template name for {g} GPUs")
        out.append(pcie_node(name, g))
    return {t.name: t for t in out}


BUILTIN_TEMPLATES: Final[Mapping[str, NodeTemplate]] = MappingProxyType(_builtins())
"""The built-in templates by name (read-only): ``dgx-8gpu``, ``pcie-8gpu`` and
``openb-1gpu``/``2gpu``/``4gpu``/``8gpu`` (PCIe-only, no NICs)."""

_registry: dict[str, NodeTemplate] = dict(BUILTIN_TEMPLATES)


def get_template(name: str) -> NodeTemplate:
    """The built-in or registered template called ``name``; raises
    :class:`~kant.errors.UnknownTemplateError`."""
    try:
        return _registry[name]
    except KeyError:
        raise UnknownTemplateError(name) from None


def register_template(template: NodeTemplate) -> NodeTemplate:
    """Make ``template`` available to :func:`get_template` and return it.

    Registering a template equal to the one already under its name is a no-op; a different
    template under a taken name raises :class:`~kant.errors.DuplicateError`.
    """
    if not isinstance(template, NodeTemplate):
        raise InvalidTopologyError("template", template, "must be a NodeTemplate")
    known = _registry.get(template.name)
    if known is not None and known != template:
        raise DuplicateError(
            f"a different node template named {template.name!r} is already registered"
        )
    _registry.setdefault(template.name, template)
    return _registry[template.name]


def templates() -> list[str]:
    """Names of all built-in and registered templates, sorted."""
    return sorted(_registry)
