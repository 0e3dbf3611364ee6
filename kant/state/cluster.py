"""ClusterState: the truth about nodes, devices and running pods.

``ClusterState`` holds what the orchestrator reported: nodes with their devices and health,
and the pods running on them with exactly which GPUs (and milli shares), NICs, CPU and memory
each holds. Every change to a node bumps that node's *generation* and records it as changed.

Next to the Python records it keeps a dense :class:`NodeColumns` table (numpy arrays indexed by
node *slot*) of what is **allocatable** on every node: free milli per GPU, the bitmask of whole
free GPUs, free CPU, memory and NICs. Unhealthy GPUs and unhealthy nodes count as not
allocatable, so readers never need to consult health separately.
"""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeVar

import attrs
import numpy as np
import numpy.typing as npt

from kant.bits import mask_of as _bits_to_mask
from kant.bits import popcount as _popcount
from kant.errors import (
    AllocationConflictError,
    DuplicateError,
    InvalidJobError,
    InvalidNodeError,
    InvalidTopologyError,
    InvariantError,
    TransactionError,
    UnknownNodeError,
    UnknownPodError,
    UnknownTemplateError,
    ValidationError,
)
from kant.model import (
    MILLI,
    Binding,
    Job,
    NodeSpec,
    PodAffinityTerm,
    PodId,
    Role,
    Taint,
    flag,
    is_int,
)
from kant.state.columns import (
    LEVELS,
    NO_POD_LIMIT,
    IntArray,
    NodeColumns,
    gpu_counts,
    unknown_level,
)
from kant.state.snapshot import Snapshot
from kant.topology.names import FabricNames
from kant.topology.templates import BUILTIN_TEMPLATES, NodeTemplate, get_template

BoolArray = npt.NDArray[np.bool_]
_T = TypeVar("_T")
_V = TypeVar("_V")
_STATE_TOKENS: Final = itertools.count()  # ClusterState.token
_ALLOWED_KEPT = 256
"""At most this many (selector, tolerations) keep their :meth:`ClusterState.allowed_slots`
(and as many (preferred terms, tolerations) their :meth:`ClusterState.preference_levels`)."""
MAX_PREFERENCE_LEVELS = 4
"""How many sets of preferred nodes :meth:`ClusterState.preference_levels` gives at most,
before the whole: a role's nodes past its four best levels of preference are tried together
with all the others."""
_BARE_NODE = NodeSpec(name="-")
"""What a node without labels or taints is to a node selector that reads no names."""

# --------------------------------------------------------------------------- node records


@attrs.define(eq=False)
class _NodeRecord:
    """Mutable truth about one node (internal)."""

    spec: NodeSpec
    slot: int
    healthy: bool = True
    gpu_healthy: int = 0  # bitmask
    nic_healthy: int = 0  # bitmask
    gpu_used: list[int] = attrs.field(factory=list)  # milli held per GPU
    nic_used: int = 0  # bitmask
    cpu_used: int = 0
    mem_used: int = 0
    pods: set[PodId] = attrs.field(factory=set)
    added: int = 0  # the membership version right after it was added
    # pods above max_pods when it was lowered (set_max_pods): they stay, none is added
    over: int = 0


def _check_template(spec: NodeSpec, tmpl: NodeTemplate) -> None:
    """Raise InvalidNodeError if the node's GPU count is not its template's (``tmpl``) or it
    has more NICs than the template lays out: the placer picks devices by the template's
    slots. Fewer NICs are allowed (NICs not reported, as in packing studies): they are the
    template's first ones."""
    if spec.gpus != tmpl.num_gpus:
        raise InvalidNodeError(
            "gpus", spec.gpus, f"template {tmpl.name!r} has {tmpl.num_gpus} GPUs"
        )
    if spec.rdma_nics > tmpl.num_nics:
        raise InvalidNodeError(
            "rdma_nics", spec.rdma_nics, f"template {tmpl.name!r} has {tmpl.num_nics} NICs"
        )


def _own_templates(templates: Iterable[NodeTemplate]) -> dict[str, NodeTemplate]:
    """``templates`` by name, checked (see :class:`ClusterState`)."""
    if isinstance(templates, str | NodeTemplate) or not isinstance(templates, Iterable):
        raise InvalidTopologyError("templates", templates, "must be an iterable of NodeTemplate")
    out: dict[str, NodeTemplate] = {}
    for t in templates:
        if not isinstance(t, NodeTemplate):
            raise InvalidTopologyError("templates", t, "must be a NodeTemplate")
        known = out.get(t.name, BUILTIN_TEMPLATES.get(t.name))
        if known is not None and known != t:
            raise DuplicateError(f"two different node templates named {t.name!r}")
        out[t.name] = t
    return out


# --------------------------------------------------------------------------- cluster state


class ClusterState:
    """The mutable truth about nodes, devices and running pods.

    Every mutating method validates completely before it changes anything: a rejected call
    (unknown node, conflicting binding, ...) raises a :class:`kant.errors.KantError` and
    leaves the state untouched.

    (About 70 of its lines are the self-check :meth:`check_invariants`, for tests and
    debugging; the rest is one record store, not split so binds stay one call.)
    """

    def __init__(
        self, nodes: Iterable[NodeSpec] = (), *, templates: Iterable[NodeTemplate] = ()
    ) -> None:
        """A state holding ``nodes`` (healthy, empty; :meth:`add_node` each) and no pods.
        ``templates``: node templates of this cluster's own (a cluster file's,
        :attr:`kant.topology.ClusterDescription.templates`), read before the built-in and
        registered ones (:meth:`template`), so two clusters in one process may each have
        their own template of one name. Raises InvalidNodeError if ``nodes`` is not an
        iterable, InvalidTopologyError for a template that is no NodeTemplate, DuplicateError
        for two different templates of one name or one named like a different built-in, or
        what :meth:`add_node` raises."""
        if not isinstance(nodes, Iterable):
            raise InvalidNodeError("nodes", nodes, "must be an iterable of NodeSpec")
        self._templates = _own_templates(templates)
        # unique per cluster state object, each copy its own (see __setstate__): what caches
        # outside it key on, as id() is reused once a state is freed and the next state's
        # counts (membership_version, generations) start over
        self.token = next(_STATE_TOKENS)
        self._records: dict[str, _NodeRecord] = {}
        self._slot_names: list[str | None] = []
        self._free_slots: list[int] = []  # reusable slots, kept sorted (lowest first)
        self._pods: dict[PodId, Binding] = {}
        self._job_pods: dict[str, set[PodId]] = {}
        self._allocated = 0  # GPU milli held by pods
        self._ids: dict[str, dict[str, int]] = {lv: {} for lv in LEVELS}
        self._id_names: dict[str, list[str]] = {lv: [] for lv in LEVELS}
        self._fabric = FabricNames()  # the nodes' leaves, spines, ... (kept consistent)
        self.columns = NodeColumns()
        self.generation = 0
        self.node_generation = np.zeros(self.columns.capacity, dtype=np.int64)
        self._changed: set[int] = set()
        self._membership_version = 0
        self._health_version = 0
        self._degraded: set[str] = set()  # nodes unhealthy or with an unhealthy GPU
        self._nic_degraded: set[str] = set()  # nodes with an unhealthy NIC
        self._marked: dict[str, NodeSpec] = {}  # nodes with labels or taints
        self._hard_tainted = 0  # nodes with a NoSchedule or NoExecute taint
        self._soft_tainted = 0  # nodes with a PreferNoSchedule taint
        self._pod_capped = 0  # nodes with a pod limit (NodeSpec.max_pods)
        # allowed_slots, by (selector, tolerations)
        self._allowed: dict[tuple[Any, ...], BoolArray] = {}
        self._allowed_version = -1
        # preference_levels, by (preferred terms, tolerations), with allowed_slots' version
        self._levels: dict[tuple[Any, ...], tuple[BoolArray, ...]] = {}
        # jobs with pods here whose roles have labels or pod terms (describe), and a number
        # that changes whenever they or their pods do
        self._described: dict[str, Job] = {}
        # the anti-affinity terms, and the preferred and required affinity terms, of the
        # described jobs' roles (how many roles hold each): what may select a pod placed
        self._anti_terms: Counter[PodAffinityTerm] = Counter()
        self._soft_terms: Counter[PodAffinityTerm] = Counter()
        self._pod_terms_version = 0
        self._snapshot: Snapshot | None = None
        self._removal_listeners: list[Callable[[str, tuple[Binding, ...]], None]] = []
        for spec in nodes:
            self.add_node(spec)

    def on_remove(self, listener: Callable[[str, tuple[Binding, ...]], None]) -> None:
        """Call ``listener(node, bindings)`` after every :meth:`remove_node`, with the bindings
        that were released with the node, so that whoever charged or tracks those pods (the
        :class:`kant.scheduler.Scheduler` registers itself) releases them too, whichever door
        the removal came through."""
        self._removal_listeners.append(listener)

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the :meth:`on_remove` listeners: a copy (``copy.deepcopy``,
        pickling) belongs to no one yet, and the listeners would tell the original's owner
        of the copy's removals. Whoever takes the copy registers its own."""
        return {**self.__dict__, "_removal_listeners": []}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy is a state of its own: it gets a :attr:`token` of its own."""
        self.__dict__.update(state)
        self.token = next(_STATE_TOKENS)

    # ----------------------------------------------------------------- queries

    def template(self, name: str) -> NodeTemplate:
        """The node template ``name``: the cluster's own (given at construction), else the
        built-in or registered one (:func:`kant.topology.get_template`); raises
        :class:`~kant.errors.UnknownTemplateError`."""
        own = self._templates.get(name) if isinstance(name, str) else None
        return own if own is not None else get_template(name)

    @property
    def templates(self) -> tuple[NodeTemplate, ...]:
        """The cluster's own node templates, as given at construction."""
        return tuple(self._templates.values())

    def __len__(self) -> int:
        """Number of nodes."""
        return len(self._records)

    def __contains__(self, name: object) -> bool:
        """Whether a node of that name exists, O(1)."""
        return name in self._records

    @property
    def num_slots(self) -> int:
        """Slots in use or freed (the extent of every per-slot array that matters)."""
        return len(self._slot_names)

    def node(self, name: str) -> NodeSpec:
        """The spec of node ``name``. Raises UnknownNodeError."""
        return self._record(name).spec

    def nodes(self) -> Iterator[NodeSpec]:
        """Nodes in slot order (deterministic)."""
        for name in self._slot_names:
            if name is not None:
                yield self._records[name].spec

    def marked_nodes(self) -> list[tuple[int, NodeSpec]]:
        """(slot, spec) of the nodes with labels or taints, in slot order: the only nodes a
        node selector or a toleration tells apart from a node without either (besides its
        name). O(marked nodes)."""
        recs = self._records
        return sorted((recs[n].slot, spec) for n, spec in self._marked.items())

    def allowed_slots(self, role: Role) -> BoolArray | None:
        """Per slot, whether ``role`` may run on the node there by its labels and taints
        (:meth:`~kant.model.Role.can_run_on`; a free slot may be True), or None when nothing
        restricts the role (no node selector, and no node has a ``NoSchedule`` or
        ``NoExecute`` taint). Nodes without labels or taints answer as one; a selector that
        reads names asks every node. Kept per (selector, tolerations) until nodes come, go or
        are relabelled (the last 256 or so): read it, never change it. O(slots + marked nodes)
        the first time."""
        sel = role.node_selector
        if sel is None and not self._hard_tainted:
            return None
        return self._kept(self._allowed, (sel, role.tolerations), lambda: self._allowed_of(role))

    def _allowed_of(self, role: Role) -> BoolArray:
        """:meth:`allowed_slots` of ``role``, computed."""
        sel = role.node_selector
        bare, told = self._ask_nodes(role.can_run_on, sel is not None and sel.reads_names)
        out = np.full(self.num_slots, bool(bare), dtype=bool)
        for slot, ok in told:
            out[slot] = ok
        out.flags.writeable = False
        return out

    def preference_levels(self, role: Role) -> tuple[BoolArray, ...]:
        """The nodes ``role`` prefers (:meth:`~kant.model.Role.preference`), best first, as
        growing sets: per slot, whether the node is at the best level, then at one of the
        two best, and so on up to :data:`MAX_PREFERENCE_LEVELS` sets, never the set of all
        nodes. Empty when every node is alike to the role (no preferred terms and no
        ``PreferNoSchedule`` taint, or one level over all nodes). Which nodes the role may
        run on is not read here (:meth:`allowed_slots`). Kept per (preferred terms,
        tolerations) until nodes come, go or are relabelled: read them, never change them.
        O(slots + marked nodes) the first time."""
        if not role.preferred and not self._soft_tainted:
            return ()
        key = (role.preferred, role.tolerations)
        return self._kept(self._levels, key, lambda: self._levels_of(role))

    def _levels_of(self, role: Role) -> tuple[BoolArray, ...]:
        """:meth:`preference_levels` of ``role``, computed."""
        n = self.num_slots
        by_name = any(r.field for t in role.preferred for r in t.requirements)
        bare, answers = self._ask_nodes(role.preference, by_name)
        told = dict(answers)
        kinds = sorted({*told.values()} | ({bare} if bare is not None else set()))
        if len(kinds) < 2:
            return ()
        rank_of = {k: i for i, k in enumerate(kinds)}
        rank = np.full(n, len(kinds), dtype=np.int64)  # (free slots: never preferred)
        if bare is not None:
            rank[self.columns.alive[:n]] = rank_of[bare]
        for slot, k in told.items():
            rank[slot] = rank_of[k]
        levels = []
        for i in range(min(len(kinds) - 1, MAX_PREFERENCE_LEVELS)):
            mask = rank <= i
            mask.flags.writeable = False
            levels.append(mask)
        return tuple(levels)

    def _ask_nodes(
        self, ask: Callable[[NodeSpec], _T], by_name: bool
    ) -> tuple[_T | None, Iterator[tuple[int, _T]]]:
        """What ``ask`` answers for the nodes, as (the answer of a node without labels or
        taints, (slot, answer) of the nodes told apart from it, as they are asked): those
        with labels or taints, or, ``by_name`` (the question reads node names), every node
        and no common answer. O(nodes told apart)."""
        if by_name:
            return None, ((rec.slot, ask(rec.spec)) for rec in self._records.values())
        return ask(_BARE_NODE), ((slot, ask(spec)) for slot, spec in self.marked_nodes())

    def _kept(self, store: dict[Any, _V], key: Any, make: Callable[[], _V]) -> _V:
        """``store[key]``, made by ``make`` if missing: what :meth:`allowed_slots` and
        :meth:`preference_levels` keep per question, all forgotten once nodes came, went or
        were relabelled, and at most :data:`_ALLOWED_KEPT` per store (selectors naming hosts
        are many)."""
        if self._allowed_version != self._membership_version:
            self._allowed.clear()
            self._levels.clear()
            self._allowed_version = self._membership_version
        hit = store.get(key)
        if hit is None:
            if len(store) >= _ALLOWED_KEPT:
                store.clear()
            hit = store[key] = make()
        return hit

    @property
    def pod_capped_nodes(self) -> int:
        """How many nodes have a pod limit (``NodeSpec.max_pods``), O(1): while none does,
        placement never reads the pod columns."""
        return self._pod_capped

    @property
    def hard_tainted_nodes(self) -> int:
        """How many nodes have a ``NoSchedule`` or ``NoExecute`` taint (O(1)): while none does,
        only a node selector restricts where a role may run."""
        return self._hard_tainted

    def slot_of(self, name: str) -> int:
        """The slot (row in :attr:`columns`) of node ``name``, O(1). Raises UnknownNodeError."""
        return self._record(name).slot

    def name_of(self, slot: int) -> str:
        """The node in ``slot``, O(1). Raises UnknownNodeError for a free or unknown slot (or
        one that is not an int)."""
        try:
            name = self._slot_names[slot] if 0 <= slot < len(self._slot_names) else None
        except TypeError:  # (not a number: no slot)
            name = None
        if name is None:
            raise UnknownNodeError(f"<slot {slot!r}>")
        return name

    def is_healthy(self, name: str) -> bool:
        """Whether node ``name`` is schedulable. Raises UnknownNodeError."""
        return self._record(name).healthy

    def gpu_healthy_mask(self, name: str) -> int:
        """Bitmask of the healthy GPUs of node ``name``. Raises UnknownNodeError."""
        return self._record(name).gpu_healthy

    def health_masks(self, name: str) -> tuple[bool, int, int]:
        """``(node healthy, healthy-GPU bitmask, healthy-NIC bitmask)`` of node ``name``, O(1).
        Raises UnknownNodeError."""
        rec = self._record(name)
        return rec.healthy, rec.gpu_healthy, rec.nic_healthy

    def degraded_nodes(self) -> list[str]:
        """The nodes that are unhealthy or have an unhealthy GPU, sorted: the only rows whose
        columns show a device "0 free" that a pod may not hold. O(such nodes), kept as
        health changes."""
        return sorted(self._degraded)

    @property
    def all_healthy(self) -> bool:
        """Whether every node, GPU and NIC is healthy, O(1)."""
        return not self._degraded and not self._nic_degraded

    def pods_on(self, name: str) -> tuple[PodId, ...]:
        """Pods running on node ``name``, sorted. Raises UnknownNodeError."""
        return tuple(sorted(self._record(name).pods))

    def binding(self, pod: PodId) -> Binding:
        """The binding of running pod ``pod``, O(1). Raises UnknownPodError."""
        try:
            return self._pods[pod]
        except (KeyError, TypeError):  # (TypeError: not hashable, so no pod's id)
            raise UnknownPodError(pod) from None

    def runs_job(self, job: str) -> bool:
        """Whether a pod of job ``job`` is running (bound) here. O(1)."""
        return job in self._job_pods

    def job_pods(self, job: str) -> tuple[PodId, ...]:
        """Running pods of job ``job`` (sorted; empty if none). Raises InvalidJobError for a
        ``job`` that cannot be a job id (not hashable)."""
        try:
            return tuple(sorted(self._job_pods.get(job, ())))
        except TypeError:
            raise InvalidJobError("job", job, "must be a job id (a str)") from None

    def describe(self, job: Job) -> None:
        """Keep ``job``'s roles (their pod labels and pod terms) while pods of it run here,
        for pod affinity and anti-affinity: a pod bound without its job described has no
        labels and no terms. The Scheduler describes every job it binds; call it for pods
        bound directly. A job without labels or pod terms is not kept. Raises
        :class:`~kant.errors.InvalidJobError`, changing nothing, for a job to keep when a pod
        of its id runs here that is not one of its pods (a role it lacks, an index past the
        role's replicas). O(roles + running pods of a job newly kept)."""
        if type(job) is not Job and not isinstance(job, Job):
            raise ValidationError("job", job, "must be a kant.Job")
        keep = job.labelled
        if not keep and not self._described:
            return  # (the usual case: nothing to keep or forget)
        was = self._described.get(job.id)
        if keep and was is not job:  # (the pods bound since it was described are checked)
            _check_owns(job, self._job_pods.get(job.id, ()), "runs here")
            self._undescribe(job.id)
            self._described[job.id] = job
            self._count_terms(job, +1)
            self._pod_terms_version += 1
        elif not keep and was is not None:
            self._undescribe(job.id)

    def _undescribe(self, job: str) -> None:
        was = self._described.pop(job, None)
        if was is not None:
            self._count_terms(was, -1)
            self._pod_terms_version += 1

    def _count_terms(self, job: Job, sign: int) -> None:
        """Count ``job``'s roles' terms in (``sign`` 1) or out of (-1) the kept terms (a
        Counter's ``+=`` / ``-=`` keep the positive counts only)."""
        if not job.pod_terms:
            return
        anti = Counter(t for r in job.roles for t in r.pod_anti_affinity)
        soft = Counter(t for r in job.roles for t in r.scoring_terms)
        if sign > 0:
            self._anti_terms += anti
            self._soft_terms += soft
        else:
            self._anti_terms -= anti
            self._soft_terms -= soft

    def kept_terms(self, *, anti: bool) -> Collection[PodAffinityTerm]:
        """The distinct anti-affinity terms (``anti``), else preferred and required affinity
        terms, of the described jobs: those that may select a pod being placed (read-only)."""
        return (self._anti_terms if anti else self._soft_terms).keys()

    def described(self, job: str) -> Job | None:
        """The job :meth:`describe` keeps under id ``job``, if any."""
        return self._described.get(job)

    @property
    def pod_terms_kept(self) -> bool:
        """Whether any job with labels or pod terms is described (:meth:`describe`)."""
        return bool(self._described)

    @property
    def anti_terms_kept(self) -> bool:
        """Whether a described job has a pod anti-affinity term."""
        return bool(self._anti_terms)

    @property
    def soft_terms_kept(self) -> bool:
        """Whether a described job has preferred pod terms or required affinity terms (which
        weigh in the score of the pods they select)."""
        return bool(self._soft_terms)

    @property
    def pod_terms_version(self) -> int:
        """A number that changes whenever the described jobs or their running pods do."""
        return self._pod_terms_version

    def described_pods(self) -> Iterator[tuple[Job, PodId, str]]:
        """Every running pod of a described job: (its job, its id, its node), by job id and
        pod id. O(such pods)."""
        for jid in sorted(self._described):
            job = self._described[jid]
            for pod in sorted(self._job_pods.get(jid, ())):
                yield job, pod, self._pods[pod].node

    def has_pod(self, pod: PodId) -> bool:
        """Whether ``pod`` is running (bound), O(1). Raises InvalidJobError for a ``pod`` that
        cannot be a PodId (not hashable)."""
        try:
            return pod in self._pods
        except TypeError:
            raise InvalidJobError("pod", pod, "must be a kant.model.PodId") from None

    def bindings(self) -> Iterator[Binding]:
        """The binding of every running pod, sorted by pod id."""
        for pod in sorted(self._pods):
            yield self._pods[pod]

    def pods(self) -> Iterator[Binding]:
        """The same as :meth:`bindings` (the older name: it yields bindings, not PodIds)."""
        return self.bindings()

    @property
    def num_pods(self) -> int:
        """Number of running pods."""
        return len(self._pods)

    def bindings_view(self) -> Mapping[PodId, Binding]:
        """Every running pod's binding, as a read-only live view (O(1), unsorted): for hot
        loops that look pods up by id; :meth:`pods` is the sorted, deterministic iteration."""
        return MappingProxyType(self._pods)

    @property
    def health_version(self) -> int:
        """Bumped by every health change of a node, GPU or NIC (kept forecasts compare it)."""
        return self._health_version

    @property
    def membership_version(self) -> int:
        """Bumped whenever a node is added or removed (not on binds or health changes):
        caches keyed on the node set compare it."""
        return self._membership_version

    def incarnation(self, name: str) -> int:
        """The :attr:`membership_version` right after node ``name`` was added or last
        relabelled (:meth:`relabel`): a node removed and added again under the same name, or
        given other labels or taints, has a higher one than any decision taken before
        (:func:`kant.apply.apply` refuses such a decision's bindings). Raises
        UnknownNodeError."""
        return self._record(name).added

    def group_id(self, level: str, name: str) -> int:
        """Interned id of a group (``level`` in :data:`LEVELS`), -1 if unknown. Raises
        ValidationError for a ``level`` not in :data:`LEVELS` or a ``name`` that is no
        string."""
        try:
            ids = self._ids[level]
        except (KeyError, TypeError):
            raise unknown_level(level) from None
        if not isinstance(name, str):
            raise ValidationError("name", name, f"must be a {level} name (a string)")
        return ids.get(name, -1)

    def group_names(self, level: str) -> list[str]:
        """Names of the groups interned at ``level``, indexed by group id (a copy). Raises
        ValidationError for a ``level`` not in :data:`LEVELS`."""
        try:
            return list(self._id_names[level])
        except (KeyError, TypeError):
            raise unknown_level(level) from None

    def group_count(self, level: str) -> int:
        """Groups interned so far at ``level`` (ids are ``0 .. group_count - 1``), O(1).
        Raises ValidationError for a ``level`` not in :data:`LEVELS`."""
        try:
            return len(self._id_names[level])
        except (KeyError, TypeError):
            raise unknown_level(level) from None

    @property
    def slot_names(self) -> Sequence[str | None]:
        """Node name per slot (``None``: a freed slot), indexed by slot, ``num_slots`` long.
        A live read-only view (O(1), no copy): it changes as nodes come and go; copy it to
        keep it."""
        return self._slot_names

    def total_gpus(self) -> int:
        """GPU devices on all nodes, healthy or not. O(slots)."""
        return int(self.columns.gpus[: self.num_slots].sum())

    def allocated_milli(self) -> int:
        """GPU milli held by running pods (a running total, O(1))."""
        return self._allocated

    def _record(self, name: str) -> _NodeRecord:
        try:
            return self._records[name]
        except (KeyError, TypeError):
            raise UnknownNodeError(str(name)) from None

    # ----------------------------------------------------------------- node mutations

    def add_node(self, spec: NodeSpec) -> None:
        """Register a node (healthy, empty) in the lowest free slot. Raises InvalidNodeError
        for a non-NodeSpec, a GPU count other than its template's or more NICs than it has, a
        place in the fabric that contradicts the nodes present (its leaf under another spine,
        its spine under another superspine, a name naming two kinds of things:
        :class:`~kant.topology.names.FabricNames`), UnknownTemplateError for a template that is
        neither the cluster's own nor built in nor registered
        (:func:`kant.topology.register_template`),
        DuplicateError if the name exists; nothing changes then. O(1) amortised."""
        if not isinstance(spec, NodeSpec):
            raise InvalidNodeError("spec", spec, "must be a NodeSpec")
        if spec.template is not None:
            try:
                tmpl = self.template(spec.template)
            except UnknownTemplateError:
                raise UnknownTemplateError(spec.template, node=spec.name) from None
            _check_template(spec, tmpl)
        if spec.name in self._records:
            raise DuplicateError(f"node {spec.name!r} already exists")
        self._fabric.add(spec, self._records)  # (nothing after it fails)
        if self._free_slots:
            slot = self._free_slots.pop(0)
            self._slot_names[slot] = spec.name
        else:
            slot = len(self._slot_names)
            self._slot_names.append(spec.name)
        self.columns.ensure(slot + 1, max(spec.gpus, 1))
        if self.node_generation.shape[0] < self.columns.capacity:
            g = np.zeros(self.columns.capacity, dtype=np.int64)
            g[: self.node_generation.shape[0]] = self.node_generation
            self.node_generation = g
        rec = _NodeRecord(
            spec=spec,
            slot=slot,
            gpu_healthy=(1 << spec.gpus) - 1,
            nic_healthy=(1 << spec.rdma_nics) - 1,
            gpu_used=[0] * spec.gpus,
        )
        self._records[spec.name] = rec
        if spec.labels or spec.taints:
            self._mark(spec)
        cols = self.columns
        cols.alive[slot] = True
        cols.gpus[slot] = spec.gpus
        cols.gpu_cap_mask[slot] = (1 << spec.gpus) - 1
        cols.cpu_cap[slot] = spec.cpu_milli
        cols.mem_cap[slot] = spec.memory_mib
        cols.nics[slot] = spec.rdma_nics
        cols.pod_cap[slot] = NO_POD_LIMIT if spec.max_pods is None else spec.max_pods
        self._pod_capped += spec.max_pods is not None
        for lv in LEVELS:
            value = spec.gpu_model if lv == "pool" else getattr(spec, lv)
            getattr(cols, f"{lv}_id")[slot] = -1 if value is None else self._intern(lv, value)
        self._membership_version += 1
        rec.added = self._membership_version
        self._refresh_row(rec)

    def remove_node(self, name: str) -> tuple[Binding, ...]:
        """Remove a node (decommissioned or lost). Returns the bindings of the pods that were
        on it, which are released; the caller requeues their jobs. Its slot is freed for
        reuse; the :meth:`on_remove` listeners are told. Raises UnknownNodeError."""
        rec = self._record(name)
        lost = tuple(self._pods[p] for p in sorted(rec.pods))
        for b in lost:
            self._forget(b.pod)
        del self._records[name]
        self._pod_capped -= rec.spec.max_pods is not None
        self._degraded.discard(name)
        self._nic_degraded.discard(name)
        self._unmark(name)
        self._fabric.remove(rec.spec)
        slot = rec.slot
        self._slot_names[slot] = None
        self._free_slots.append(slot)
        self._free_slots.sort()
        self.columns.clear_row(slot)
        self._membership_version += 1
        self._touch(slot)
        for listener in self._removal_listeners:
            listener(name, lost)
        return lost

    def relabel(
        self, name: str, *, labels: Mapping[str, str], taints: Iterable[Taint] = ()
    ) -> bool:
        """Give node ``name`` these labels and taints in place of its own: what runs there
        stays (selectors and tolerations are read when a pod is placed, as Kubernetes'
        ``IgnoredDuringExecution``); placements from now on read the new ones. Returns
        whether anything changed. Raises UnknownNodeError, or InvalidNodeError for a bad
        label or taint; nothing changes then. Counts as a change of the nodes
        (:attr:`membership_version`) for what caches per node set, though no node came or
        went. O(labels + taints)."""
        rec = self._record(name)
        if isinstance(taints, str | bytes) or not isinstance(taints, Iterable):
            raise InvalidNodeError("taints", taints, "must be a tuple of Taints")
        spec = attrs.evolve(rec.spec, labels=labels, taints=tuple(taints))  # (validates)
        old = rec.spec
        if spec == old:
            return False
        self._unmark(name)
        rec.spec = spec
        if spec.labels or spec.taints:
            self._mark(spec)
        self._membership_version += 1
        rec.added = self._membership_version  # (a decision taken before read other labels)
        return True

    def set_max_pods(self, name: str, max_pods: int | None) -> bool:
        """Give node ``name`` this pod capacity (``NodeSpec.max_pods``, None: no limit) in
        place of its own: what runs there stays, pods above a lowered capacity included
        (none is added until the pods there are below it: its free slots are
        ``max(0, max_pods - pods)``); placements from now on read it. Returns whether
        anything changed. Raises UnknownNodeError, or InvalidNodeError for a bad value;
        nothing changes then. Counts as a change of the nodes (:attr:`membership_version`)
        for what caches static capacity. O(1) plus the row's refresh."""
        rec = self._record(name)
        spec = attrs.evolve(rec.spec, max_pods=max_pods)  # (validates)
        old = rec.spec
        if spec == old:
            return False
        self._pod_capped += (spec.max_pods is not None) - (old.max_pods is not None)
        rec.spec = spec
        rec.over = max(0, len(rec.pods) - (NO_POD_LIMIT if max_pods is None else max_pods))
        if name in self._marked:
            self._marked[name] = spec
        self.columns.pod_cap[rec.slot] = NO_POD_LIMIT if max_pods is None else max_pods
        self._membership_version += 1
        self._refresh_row(rec)
        return True

    def _mark(self, spec: NodeSpec) -> None:
        """Index a node with labels or taints (:meth:`marked_nodes`) and count its taints."""
        self._marked[spec.name] = spec
        self._hard_tainted += spec.hard_tainted
        self._soft_tainted += spec.soft_tainted

    def _unmark(self, name: str) -> None:
        """Undo :meth:`_mark` of node ``name``, if it was marked."""
        old = self._marked.pop(name, None)
        if old is not None:
            self._hard_tainted -= old.hard_tainted
            self._soft_tainted -= old.soft_tainted

    def set_node_health(self, name: str, healthy: bool) -> None:
        """Mark a whole node (un)schedulable. Running pods stay; nothing new lands on it.
        Raises UnknownNodeError, or ValidationError for a ``healthy`` that is no bool
        (``"false"`` would be taken as true), changing nothing."""
        rec = self._record(name)
        rec.healthy = flag(healthy, "healthy")
        self._health_version += 1
        self._note_degraded(rec)
        self._refresh_row(rec)

    def set_gpu_health(self, name: str, gpu: int, healthy: bool) -> None:
        """Mark one GPU device (un)healthy. A pod holding it keeps it until released. Raises
        UnknownNodeError, or InvalidNodeError for a GPU index the node does not have or that
        is not an int (a bool included), ValidationError for a ``healthy`` that is no bool
        (changing nothing)."""
        rec = self._record(name)
        if not (is_int(gpu) and 0 <= gpu < rec.spec.gpus):
            raise InvalidNodeError("gpu", gpu, f"node {name!r} has GPUs 0..{rec.spec.gpus - 1}")
        if flag(healthy, "healthy"):
            rec.gpu_healthy |= 1 << gpu
        else:
            rec.gpu_healthy &= ~(1 << gpu)
        self._health_version += 1
        self._note_degraded(rec)
        self._refresh_row(rec)

    def set_nic_health(self, name: str, nic: int, healthy: bool) -> None:
        """Mark one RDMA NIC (un)healthy: an unhealthy NIC leaves the allocatable NIC mask; a
        pod holding it keeps it until released. Raises UnknownNodeError, or InvalidNodeError
        for a NIC index the node does not have or that is not an int, ValidationError for a
        ``healthy`` that is no bool (changing nothing)."""
        rec = self._record(name)
        if not (is_int(nic) and 0 <= nic < rec.spec.rdma_nics):
            raise InvalidNodeError(
                "nic", nic, f"node {name!r} has NICs 0..{rec.spec.rdma_nics - 1}"
            )
        if flag(healthy, "healthy"):
            rec.nic_healthy |= 1 << nic
        else:
            rec.nic_healthy &= ~(1 << nic)
        if not _nic_degraded(rec):
            self._nic_degraded.discard(name)
        else:
            self._nic_degraded.add(name)
        self._health_version += 1
        self._refresh_row(rec)

    # ----------------------------------------------------------------- pod mutations

    def check_binding(self, b: Binding) -> None:
        """Raise unless ``b`` can be bound now (node exists and is healthy, devices exist,
        are healthy and free enough, CPU/memory fit, pod not already bound, a pod of its job
        if the job is described): UnknownNodeError, DuplicateError, AllocationConflictError
        or InvalidJobError. Changes nothing."""
        if not isinstance(b, Binding):
            raise AllocationConflictError(f"not a Binding: {b!r}")
        if b.pod in self._pods:
            raise DuplicateError(f"pod {b.pod} is already bound to {self._pods[b.pod].node!r}")
        rec = self._record(b.node)
        _check_fits(rec, b)
        described = self._described.get(b.pod.job)
        if described is not None:
            _check_owns(described, (b.pod,), "is bound")

    def bind(self, b: Binding) -> None:
        """Record that pod ``b.pod`` holds the devices and capacity in ``b``. Raises what
        :meth:`check_binding` raises (changing nothing). O(devices of ``b``)."""
        self.check_binding(b)
        rec = self._records[b.node]
        _hold(rec, b, +1)
        self._pods[b.pod] = b
        self._allocated += b.total_milli
        self._job_pods.setdefault(b.pod.job, set()).add(b.pod)
        if b.pod.job in self._described:
            self._pod_terms_version += 1
        self._refresh_row(rec)

    def release(self, pod: PodId) -> Binding:
        """Free what ``pod`` holds and forget it. Returns its binding. Raises UnknownPodError.
        O(devices of the binding)."""
        b = self.binding(pod)
        rec = self._records[b.node]
        _hold(rec, b, -1)
        self._forget(pod)
        self._refresh_row(rec)
        return b

    def bind_many(self, bindings: Iterable[Binding], *, running: bool = False) -> None:
        """:meth:`bind` every binding of ``bindings``, all or none: each is checked as if
        those before it were bound (the same errors :meth:`check_binding` raises, for the
        first that does not fit or is not a pod of its described job, changing nothing),
        then each node's record and row is updated once. ``bindings`` may be any iterable
        (a generator is read once); ValidationError for one that is not. ``running``: the
        pods already run there (an orchestrator taking them back after a restart), so a
        node, GPU or NIC unhealthy now does not refuse them, nor a node's ``max_pods``
        lowered below its pods: they hold what they hold, as the pods there when it failed
        or was lowered do (no pod is added there until they are below it; devices, CPU and
        memory are checked). O(devices of the bindings + nodes they touch)."""
        flag(running, "running")
        bindings = _sequence(bindings, "bindings", "kant.model.Binding")
        pod_ids = [b.pod for b in bindings] if all(type(b) is Binding for b in bindings) else []
        if self._described and pod_ids:
            by_job: dict[str, list[PodId]] = {}
            for pod in pod_ids:
                by_job.setdefault(pod.job, []).append(pod)
            for jid, pods in by_job.items():
                described = self._described.get(jid)
                if described is not None:
                    _check_owns(described, pods, "is bound")
        # the usual call: Bindings of new pods, each once (checked at once; otherwise each
        # binding is checked in turn, so the first one wrong is named)
        fresh = len(pod_ids) == len(bindings) and len(set(pod_ids)) == len(pod_ids)
        fresh = fresh and self._pods.keys().isdisjoint(pod_ids)
        if fresh and self._bind_whole(bindings):
            self._index_bound(bindings)
            return
        scratch: dict[str, _NodeRecord] = {}
        seen: set[PodId] = set()
        for b in bindings:
            if not fresh:
                if not isinstance(b, Binding):
                    raise AllocationConflictError(f"not a Binding: {b!r}")
                if b.pod in self._pods:
                    bound = self._pods[b.pod].node
                    raise DuplicateError(f"pod {b.pod} is already bound to {bound!r}")
                if b.pod in seen:
                    raise DuplicateError(f"pod {b.pod} is bound twice in one call")
                seen.add(b.pod)
            tmp = scratch.get(b.node)
            if tmp is None:
                rec = self._record(b.node)
                # (a node with a pod limit starts from its pods: _check_fits counts them)
                tmp = scratch[b.node] = _NodeRecord(
                    spec=rec.spec, slot=rec.slot, healthy=rec.healthy,
                    gpu_healthy=rec.gpu_healthy, nic_healthy=rec.nic_healthy,
                    gpu_used=list(rec.gpu_used), nic_used=rec.nic_used, cpu_used=rec.cpu_used,
                    mem_used=rec.mem_used,
                    pods=set() if rec.spec.max_pods is None else set(rec.pods),
                )  # fmt: skip
            _check_fits(tmp, b, running)
            _hold(tmp, b, +1)
        for name, tmp in scratch.items():
            rec = self._records[name]
            rec.gpu_used = tmp.gpu_used
            rec.nic_used, rec.cpu_used, rec.mem_used = tmp.nic_used, tmp.cpu_used, tmp.mem_used
            rec.pods |= tmp.pods
            cap = rec.spec.max_pods
            if running and cap is not None:  # (pods above it that run there stay)
                rec.over = max(rec.over, len(rec.pods) - cap)
            self._refresh_row(rec)
        self._index_bound(bindings)

    def _bind_whole(self, bindings: Sequence[Binding]) -> bool:
        """:meth:`bind_many`'s usual case, new pods holding whole GPUs and no NICs on healthy
        nodes, checked and held node by node without a scratch record per node; False,
        changing nothing, when a binding is not of that kind or does not fit (the general
        path then names the first one wrong). O(devices of the bindings + nodes)."""
        by_node: dict[str, list[Binding]] = {}
        for b in bindings:
            if b.gpu_milli != MILLI or b.nics:
                return False
            got = by_node.get(b.node)
            if got is None:
                by_node[b.node] = [b]
            else:
                got.append(b)
        records = self._records
        held: list[tuple[_NodeRecord, list[int], int, int, list[Binding]]] = []
        for node, bs in by_node.items():
            rec = records.get(node) if type(node) is str else None
            if rec is None or not rec.healthy:
                return False
            n, healthy = rec.spec.gpus, rec.gpu_healthy
            used = list(rec.gpu_used)
            cpu, mem = rec.cpu_used, rec.mem_used
            for b in bs:
                for g in b.gpus:
                    if g >= n or not healthy >> g & 1 or used[g]:
                        return False
                    used[g] = MILLI
                cpu += b.cpu_milli
                mem += b.memory_mib
            if cpu > rec.spec.cpu_milli or mem > rec.spec.memory_mib:
                return False
            cap = rec.spec.max_pods
            if cap is not None and len(rec.pods) + len(bs) > cap:
                return False
            held.append((rec, used, cpu, mem, bs))
        for rec, used, cpu, mem, bs in held:
            rec.gpu_used, rec.cpu_used, rec.mem_used = used, cpu, mem
            rec.pods.update([b.pod for b in bs])
            self._refresh_row(rec)
        return True

    def _index_bound(self, bindings: Sequence[Binding]) -> None:
        """Add the pods of ``bindings``, just held on their nodes, to the pod indexes."""
        pods = self._pods
        job_pods = self._job_pods
        mine: set[PodId] | None = None
        job = ""
        added = 0
        for b in bindings:
            pod = b.pod
            pods[pod] = b
            added += b.total_milli
            if mine is None or pod.job != job:
                job = pod.job
                mine = job_pods.setdefault(job, set())
                if job in self._described:
                    self._pod_terms_version += 1
            mine.add(pod)
        self._allocated += added

    def release_many(self, pods: Iterable[PodId]) -> tuple[Binding, ...]:
        """:meth:`release` every pod of ``pods``, all or none (UnknownPodError, changing
        nothing, if one is not running or is named twice); each node's row is updated once.
        ``pods`` may be any iterable (a generator is read once); ValidationError for one that
        is not. Returns their bindings, in order. O(devices of the bindings + nodes they
        touch)."""
        pods = _sequence(pods, "pods", "kant.model.PodId")
        try:
            out = tuple(map(self._pods.__getitem__, pods))
        except (KeyError, TypeError):
            out = tuple(self.binding(p) for p in pods)  # raises, naming the pod
        if len({b.pod for b in out}) != len(out):
            raise UnknownPodError(next(p for i, p in enumerate(pods) if p in pods[:i]))
        touched: dict[str, _NodeRecord] = {}
        records = self._records
        for b in out:
            rec = touched.get(b.node)
            if rec is None:
                rec = touched[b.node] = records[b.node]
            if b.nics:
                _hold(rec, b, -1)
                continue
            # (_hold, inlined for the usual binding: no NICs)
            used, milli = rec.gpu_used, b.gpu_milli
            for g in b.gpus:
                used[g] -= milli
            rec.pods.discard(b.pod)
            rec.cpu_used -= b.cpu_milli
            rec.mem_used -= b.memory_mib
        self._forget_many(out)
        for rec in touched.values():
            self._refresh_row(rec)
        return out

    def _forget_many(self, out: Sequence[Binding]) -> None:
        """:meth:`_forget` the pod of every binding of ``out`` (running pods, each once)."""
        pods = self._pods
        freed = 0
        by_job: dict[str, list[PodId]] = {}
        for b in out:
            del pods[b.pod]
            freed += b.total_milli
            by_job.setdefault(b.pod.job, []).append(b.pod)
        self._allocated -= freed
        described = self._described
        for job, mine in by_job.items():
            left = self._job_pods[job]
            left.difference_update(mine)
            if job in described:
                self._pod_terms_version += 1
                if not left:
                    self._undescribe(job)
            if not left:
                del self._job_pods[job]

    def _forget(self, pod: PodId) -> None:
        self._forget_many((self._pods[pod],))

    # ----------------------------------------------------------------- snapshots

    def snapshot(self) -> Snapshot:
        """The state's snapshot, refreshed to the current truth in O(changed nodes).

        There is one snapshot per state, refreshed in place from :meth:`take_changes`; it
        must not have an open transaction (TransactionError, checked before the change feed
        is taken: the changes wait for the next call). Rows a previous cycle changed
        tentatively are re-synced too. The first call builds it in O(cluster).
        """
        snap = self._snapshot
        if snap is None:
            self._changed.clear()
            snap = self._snapshot = Snapshot(self)
        elif snap.in_transaction:
            raise TransactionError("snapshot refreshed while a transaction is open")
        else:
            snap.refresh(self.take_changes())
        return snap

    def full_snapshot(self) -> Snapshot:
        """A brand-new snapshot built from scratch (O(cluster)); for tests and checks."""
        return Snapshot(self)

    def take_changes(self) -> IntArray:
        """The change feed: slots whose rows in :attr:`columns` changed since the previous
        call (bind, release, health, node added or removed), sorted, each once; the feed is
        then empty. O(k log k) for k changed slots.

        Its one consumer is :meth:`snapshot`, which passes the slots to
        :meth:`Snapshot.refresh`: a slot taken anywhere else is missing from the next refresh
        (the snapshot would keep a stale row), so other readers watch
        :attr:`node_generation` instead.
        """
        idx = np.fromiter(sorted(self._changed), dtype=np.int64, count=len(self._changed))
        self._changed.clear()
        return idx

    # ----------------------------------------------------------------- internals

    def _intern(self, level: str, name: str) -> int:
        ids = self._ids[level]
        gid = ids.get(name)
        if gid is None:
            gid = len(ids)
            ids[name] = gid
            self._id_names[level].append(name)
        return gid

    def _touch(self, slot: int) -> None:
        self.generation += 1
        self.node_generation[slot] = self.generation
        self._changed.add(slot)

    def _note_degraded(self, rec: _NodeRecord) -> None:
        """Keep :meth:`degraded_nodes` after a health change of ``rec``."""
        if _degraded(rec):
            self._degraded.add(rec.spec.name)
        else:
            self._degraded.discard(rec.spec.name)

    def _refresh_row(self, rec: _NodeRecord) -> None:
        """Recompute the allocatable columns of one node from its record."""
        _write_allocatable(self.columns, rec)
        self._touch(rec.slot)

    # ----------------------------------------------------------------- self-check

    def check_invariants(self) -> None:
        """Recompute every derived structure (pod indexes, per-node usage, the columns, slot
        bookkeeping) from the records and raise :class:`~kant.errors.InvariantError` listing
        every difference, one ``"ClusterState: ..."`` line each.

        O(everything): for tests and debugging (:func:`kant.testing.check_invariants`)."""
        errors: list[str] = []
        used: dict[str, list[int]] = {n: [0] * r.spec.gpus for n, r in self._records.items()}
        nic: dict[str, int] = dict.fromkeys(self._records, 0)
        cpu: dict[str, int] = dict.fromkeys(self._records, 0)
        mem: dict[str, int] = dict.fromkeys(self._records, 0)
        pods_by_node: dict[str, set[PodId]] = {n: set() for n in self._records}
        by_job: dict[str, set[PodId]] = {}
        for pod in self._pods:
            by_job.setdefault(pod.job, set()).add(pod)
        if self._allocated != sum(b.total_milli for b in self._pods.values()):
            errors.append("allocated milli total differs from the pods")
        marked = {n: r.spec for n, r in self._records.items() if r.spec.labels or r.spec.taints}
        if marked != self._marked:
            errors.append("the index of nodes with labels or taints differs from the nodes")
        if self._hard_tainted != sum(s.hard_tainted for s in marked.values()):
            errors.append("the count of hard-tainted nodes differs from the nodes")
        if self._soft_tainted != sum(s.soft_tainted for s in marked.values()):
            errors.append("the count of soft-tainted nodes differs from the nodes")
        if self._pod_capped != sum(r.spec.max_pods is not None for r in self._records.values()):
            errors.append("the count of nodes with a pod limit differs from the nodes")
        if by_job != self._job_pods:
            errors.append("job -> pods index differs from the pods")
        for pod, b in self._pods.items():
            if b.pod != pod:
                errors.append(f"pod key {pod} holds binding of {b.pod}")
            if b.node not in self._records:
                errors.append(f"pod {pod} on missing node {b.node}")
                continue
            for g in b.gpus:
                used[b.node][g] += b.gpu_milli
            m = _bits_to_mask(b.nics)
            if nic[b.node] & m:
                errors.append(f"NIC allocated twice on {b.node}")
            nic[b.node] |= m
            cpu[b.node] += b.cpu_milli
            mem[b.node] += b.memory_mib
            pods_by_node[b.node].add(pod)
        fresh = NodeColumns(self.columns.capacity, self.columns.width)
        for name, rec in self._records.items():
            if self._slot_names[rec.slot] != name:
                errors.append(f"slot {rec.slot} names {self._slot_names[rec.slot]}, not {name}")
            if rec.gpu_used != used[name]:
                errors.append(f"{name}: gpu_used {rec.gpu_used} != {used[name]}")
            if any(u > MILLI for u in used[name]):
                errors.append(f"{name}: a GPU is over-allocated: {used[name]}")
            if rec.nic_used != nic[name]:
                errors.append(f"{name}: nic_used {rec.nic_used:b} != {nic[name]:b}")
            if (rec.cpu_used, rec.mem_used) != (cpu[name], mem[name]):
                errors.append(f"{name}: cpu/mem used mismatch")
            if rec.cpu_used > rec.spec.cpu_milli or rec.mem_used > rec.spec.memory_mib:
                errors.append(f"{name}: CPU or memory over-allocated")
            if rec.pods != pods_by_node[name]:
                errors.append(f"{name}: pod set mismatch")
            cap = rec.spec.max_pods
            if cap is not None and len(pods_by_node[name]) > cap + rec.over:
                errors.append(f"{name}: {len(pods_by_node[name])} pods, above its max_pods {cap}")
            fresh.alive[rec.slot] = True
            fresh.gpus[rec.slot] = rec.spec.gpus
            fresh.gpu_cap_mask[rec.slot] = (1 << rec.spec.gpus) - 1
            fresh.cpu_cap[rec.slot] = rec.spec.cpu_milli
            fresh.mem_cap[rec.slot] = rec.spec.memory_mib
            fresh.nics[rec.slot] = rec.spec.rdma_nics
            fresh.pod_cap[rec.slot] = NO_POD_LIMIT if cap is None else cap
            for lv in LEVELS:
                value = rec.spec.gpu_model if lv == "pool" else getattr(rec.spec, lv)
                getattr(fresh, f"{lv}_id")[rec.slot] = -1 if value is None else self._ids[lv][value]
            _write_allocatable(fresh, rec)
        if self._degraded != {n for n, r in self._records.items() if _degraded(r)}:
            errors.append("degraded-node index differs from the records")
        if self._nic_degraded != {n for n, r in self._records.items() if _nic_degraded(r)}:
            errors.append("the index of nodes with an unhealthy NIC differs from the records")
        if self._fabric.differs_from(r.spec for r in self._records.values()):
            errors.append("fabric names differ from the nodes'")
        bad = fresh.rows_equal(self.columns, self.num_slots)
        if bad:
            errors.append(f"columns differ from records: {bad}")
        live = {s for s, n in enumerate(self._slot_names) if n is not None}
        if set(self._free_slots) & live or len(live) != len(self._records):
            errors.append("slot bookkeeping is inconsistent")
        if errors:
            raise InvariantError("\n".join(f"ClusterState: {e}" for e in errors))


def _degraded(rec: _NodeRecord) -> bool:
    """Is the node of ``rec`` unhealthy, or one of its GPUs?"""
    return not rec.healthy or rec.gpu_healthy != (1 << rec.spec.gpus) - 1


def _nic_degraded(rec: _NodeRecord) -> bool:
    """Is one of the NICs of the node of ``rec`` unhealthy?"""
    return rec.nic_healthy != (1 << rec.spec.rdma_nics) - 1


def _conflict(b: Binding, spec: NodeSpec, what: str) -> AllocationConflictError:
    return AllocationConflictError(f"binding of {b.pod} on {spec.name!r}: {what}")


def _sequence(given: Iterable[_V], field: str, what: str) -> Sequence[_V]:
    """``given`` as a sequence: a list or tuple as it is (the usual call, O(1)), another
    iterable read once into a tuple; ValidationError for a str or what is not iterable."""
    if type(given) is list or type(given) is tuple:
        return given
    if isinstance(given, str | bytes) or not isinstance(given, Iterable):
        raise ValidationError(field, given, f"must be an iterable of {what}")
    return given if isinstance(given, Sequence) else tuple(given)


def _check_owns(job: Job, pods: Iterable[PodId], doing: str) -> None:
    """Raise :class:`~kant.errors.InvalidJobError` for the first of ``pods`` that is not one
    of ``job``'s pods (:meth:`Job.has_pod`)."""
    for pod in pods:
        if not job.has_pod(pod):
            raise InvalidJobError(
                "pod", str(pod), f"pod {pod} {doing} and is not a pod of job {job.id!r}"
            )


def _check_fits(rec: _NodeRecord, b: Binding, running: bool = False) -> None:
    """Raise AllocationConflictError unless binding ``b`` fits node ``rec`` now (the message
    is built only then); ``running``: a pod that runs there already, which the health of the
    node and its devices does not refuse."""
    spec = rec.spec
    if not rec.healthy and not running:
        raise _conflict(b, spec, "node is unhealthy")
    for g in b.gpus:
        if g >= spec.gpus:
            raise _conflict(b, spec, f"node has no GPU {g} (has {spec.gpus})")
        if not rec.gpu_healthy >> g & 1 and not running:
            raise _conflict(b, spec, f"GPU {g} is unhealthy")
        if rec.gpu_used[g] + b.gpu_milli > MILLI:
            free = MILLI - rec.gpu_used[g]
            raise _conflict(b, spec, f"GPU {g} has {free} milli free, needs {b.gpu_milli}")
    for n in b.nics:
        if n >= spec.rdma_nics:
            raise _conflict(b, spec, f"node has no NIC {n}")
        if not rec.nic_healthy >> n & 1 and not running:
            raise _conflict(b, spec, f"NIC {n} is unhealthy")
        if rec.nic_used >> n & 1:
            raise _conflict(b, spec, f"NIC {n} is already allocated")
    if rec.cpu_used + b.cpu_milli > spec.cpu_milli:
        free = spec.cpu_milli - rec.cpu_used
        raise _conflict(b, spec, f"needs {b.cpu_milli} CPU milli, {free} free")
    if rec.mem_used + b.memory_mib > spec.memory_mib:
        free = spec.memory_mib - rec.mem_used
        raise _conflict(b, spec, f"needs {b.memory_mib} MiB, {free} free")
    if spec.max_pods is not None and len(rec.pods) >= spec.max_pods and not running:
        raise _conflict(b, spec, f"runs {len(rec.pods)} pods, its max_pods is {spec.max_pods}")


def _hold(rec: _NodeRecord, b: Binding, sign: int) -> None:
    """Add (sign=+1) or take back (-1) what binding ``b`` holds to/from record ``rec`` (the
    one place a record's usage moves)."""
    milli = sign * b.gpu_milli
    used = rec.gpu_used
    for g in b.gpus:
        used[g] += milli
    if sign > 0:
        if b.nics:
            rec.nic_used |= _bits_to_mask(b.nics)
        rec.pods.add(b.pod)
    else:
        if b.nics:
            rec.nic_used &= ~_bits_to_mask(b.nics)
        rec.pods.discard(b.pod)
    rec.cpu_used += sign * b.cpu_milli
    rec.mem_used += sign * b.memory_mib


_GpuColumns = tuple["array[int]", int, int, int, int]
_GPU_COLUMNS: dict[tuple[tuple[int, ...] | None, int, int, int, str], _GpuColumns] = {}
_GPU_COLUMNS_KEEP = 1 << 14


def _gpu_columns(
    used: tuple[int, ...] | None, healthy: int, n: int, width: int, fmt: str
) -> _GpuColumns:
    """A node row's GPU columns from its GPUs' usage (``used``, milli held per GPU; None:
    the node is unhealthy) and health mask: the ``width`` free-milli values (devices beyond
    the node's ``n`` at 0), the wholly-free mask, the whole free GPUs, the free milli and
    the largest free share. Remembered per distinct input (a node's usage takes few
    distinct values: the whole-GPU ones are its subsets of GPUs), up to a bound."""
    key = (used, healthy, n, width, fmt)
    hit = _GPU_COLUMNS.get(key)
    if hit is not None:
        return hit
    if used is None:
        vals = [0] * n
    elif healthy == (1 << n) - 1:
        vals = [MILLI - u for u in used]
    else:
        vals = [MILLI - used[g] if healthy >> g & 1 else 0 for g in range(n)]
    row = array(fmt, vals + [0] * (width - n) if width > n else vals)
    out = (row, *gpu_counts(vals))
    if len(_GPU_COLUMNS) >= _GPU_COLUMNS_KEEP:
        _GPU_COLUMNS.clear()
    _GPU_COLUMNS[key] = out
    return out


def _write_allocatable(cols: NodeColumns, rec: _NodeRecord) -> None:
    """Write the allocatable columns of ``rec``'s row from the record (unhealthy: nothing)."""
    s = rec.slot
    spec = rec.spec
    ok = rec.healthy
    v = cols.views()
    w = cols.width
    gpus = _gpu_columns(
        tuple(rec.gpu_used) if ok else None, rec.gpu_healthy, spec.gpus, w, v.gpu_flat.format
    )
    row, free_mask, free_gpus, free_milli, max_share = gpus
    v.gpu_flat[s * w : s * w + w] = row  # (the row in one write)
    nic_mask = ((1 << spec.rdma_nics) - 1) & rec.nic_healthy & ~rec.nic_used if ok else 0
    v.ready[s] = ok
    v.free_mask[s] = free_mask
    v.free_gpus[s] = free_gpus
    v.free_milli[s] = free_milli
    v.max_share[s] = max_share
    v.cpu_free[s] = spec.cpu_milli - rec.cpu_used if ok else 0
    v.mem_free[s] = spec.memory_mib - rec.mem_used if ok else 0
    v.nic_mask[s] = nic_mask
    v.free_nics[s] = _popcount(nic_mask)
    cap = spec.max_pods
    # (pods above a lowered max_pods stay: pod_free is below 0 by as many, and no slot is
    # free until as many have gone, in the truth and in a snapshot's what-if alike)
    v.pod_free[s] = (NO_POD_LIMIT if cap is None else cap) - len(rec.pods) if ok else 0
