"""The Kubernetes shim: informer events feed the :class:`~kant.scheduler.Scheduler` facade,
and every cycle's decisions go back to the API server (bindings, evictions, conditions,
events, PodGroup status, and, when configured, start-time estimates on waiting pods).

One thread owns kant's state: :meth:`Shim.handle` (an informer event) and :meth:`Shim.cycle`
(one scheduling cycle and its writes) are called from :meth:`Shim.run`'s loop, or directly by
tests. Binding calls run on a small thread pool inside a cycle and are joined before it ends.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import queue as queue_mod
import threading
import time
from collections.abc import Callable, Container, Iterable, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

import attrs

from kant.config import KantConfig
from kant.cycle import CycleResult
from kant.errors import InvalidObjectError, KantError
from kant.estimates import EstimateStatus, StartEstimate
from kant.k8s.client import Api, ApiError, Obj
from kant.k8s.failures import FAILURES_ANNOTATION, format_failures, parse_failures, resume
from kant.k8s.nodes import NodeAdapter
from kant.k8s.pool import CallPool
from kant.k8s.settings import K8sSettings, parse_settings
from kant.k8s.translate import (
    KUEUE_GROUP_PREFIX,
    KUEUE_TOTAL_ANNOTATION,
    POD_ID_ANNOTATION,
    PREEMPTED_PREFIX,
    PREEMPTED_REASON,
    NamespaceIndex,
    NodeFacts,
    NodeNeed,
    PodFacts,
    PodState,
    annotations_of,
    binding_annotations,
    build_job,
    deletion_deadline,
    held_job,
    is_count,
    job_id,
    namespace_uses,
    node_facts,
    node_ready,
    pod_facts,
    pod_group_key,
    pod_group_min_member,
    pod_key,
    pod_resources,
    pod_state,
    recorded_binding,
    recorded_tenant,
    uid_of,
)
from kant.model import Binding, Job, NodeSpec, PodId, Reason, ReasonCode
from kant.preemption import PreemptionPolicy
from kant.queueing import FailureHistory, JobPhase
from kant.scheduler import EventReport, EvictionCause, Scheduler
from kant.state import ClusterState

log = logging.getLogger(__name__)

_Call = tuple[Binding, "Future[tuple[str | None, float]]"]
"""A binding call sent: the binding, and its answer to come (an error or None, and when)."""

_QUIET: dict[int, threading.Event] = {}
"""The threads running a shim made with a ``quiet`` event, each with that event."""


class _QuietOnceAbandoned(logging.Filter):
    """Turns what such a shim logs once its ``quiet`` event is set into debug records: a
    bench or demo cut short sets it and stops its API server under the shim, and what fails
    then is no news."""

    def filter(self, record: logging.LogRecord) -> bool:
        thread = record.thread if record.levelno > logging.DEBUG else None
        quiet = _QUIET.get(thread) if thread is not None else None
        if quiet is None or not quiet.is_set():
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return log.isEnabledFor(logging.DEBUG)


log.addFilter(_QuietOnceAbandoned())

PODGROUP_API = "scheduling.x-k8s.io/v1alpha1"
TERMINAL = ("Succeeded", "Failed")
_HELD = "external:"  # the job id prefix of the pods whose requests are held (see Shim._hold)


EXPECTED_START_ANNOTATION = "kant.io/expected-start"
"""On a waiting pod: when its job is expected to start (RFC 3339, UTC), or why there is no
time (``never``, ``unknown_end``, ``beyond_horizon``); see docs/kubernetes.md."""
EXPECTED_START_MADE_AT_ANNOTATION = "kant.io/expected-start-made-at"
"""On a waiting pod, with :data:`EXPECTED_START_ANNOTATION`: when that value was computed."""


EXPECTED_START_SLACK_SECONDS = 60.0
"""A pod's expected start is written again only when it moves by at least this, whatever
``estimateIntervalSeconds`` (see :func:`_steady`)."""


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339(t: float) -> str | None:
    """Time ``t`` (seconds since the Unix epoch, the shim's clock) as an RFC 3339 UTC time to
    the second (rounded down), ``2026-11-30T12:00:00Z``; None when no such time exists (past
    the year 9999, or not finite)."""
    try:
        return datetime.fromtimestamp(math.floor(t), UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def expected_start_value(est: StartEstimate) -> str:
    """The ``kant.io/expected-start`` value of an estimate: the expected start as
    :func:`rfc3339` writes it, else the status (``never``, ``unknown_end``,
    ``beyond_horizon``; an expected start past what RFC 3339 can write is beyond any
    horizon too)."""
    if est.status is EstimateStatus.EXPECTED and est.start is not None:
        return rfc3339(est.start) or EstimateStatus.BEYOND_HORIZON.value
    return est.status.value


@attrs.define
class _JobRecord:
    """A kant job and the pods its PodIds stand for."""

    base: str
    group: str | None
    pods: dict[PodId, str]
    bound: set[PodId] = attrs.field(factory=set)
    confirmed: set[PodId] = attrs.field(factory=set)


class Shim:
    """kant scheduling the pods of one cluster. ``config`` is the kant config (its
    ``kubernetes:`` section gives the :class:`~kant.k8s.settings.K8sSettings`).

    Hooks for a caller running the shim's loop (:meth:`run`) in its own process, called on
    the loop's thread: ``on_bound(pod key, when)`` for each binding the API server took,
    ``on_cycle(shim, result)`` at the end of each cycle, ``on_event(kind, event type,
    object)`` once each event is taken in (:meth:`handle`): each watch event, and each
    object of :meth:`sync`'s first list (as ``ADDED``). The object ``on_event`` gets is the
    one the shim keeps (no copy is made): the caller must not change it. An exception from
    any hook ends the loop (it propagates out of :meth:`run`, or of :meth:`sync`). A change
    the shim took in before a cycle began is one that cycle decided on: waiting for
    ``on_event`` to show the object's version, then for the end of the next cycle (and for
    :attr:`bindings_in_flight` to be 0), tells that the shim has looked at it, so that what
    it did not do, it decided not to do."""

    def __init__(
        self,
        api: Api,
        config: KantConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        on_bound: Callable[[str, float], None] | None = None,
        on_cycle: Callable[[Shim, CycleResult], None] | None = None,
        on_event: Callable[[str, str, Obj], None] | None = None,
        quiet: threading.Event | None = None,
    ) -> None:
        self.api = api
        # (what run() logs once this event is set is logged at debug level)
        self.quiet = quiet
        self.config = config if config is not None else KantConfig()
        self.settings: K8sSettings = parse_settings(
            self.config.kubernetes, source=self.config.source
        )
        self.scheduler: Scheduler = self.config.scheduler(ClusterState())
        self.nodes = NodeAdapter(self.scheduler)
        self.clock = clock
        self.on_bound = on_bound
        self.on_cycle = on_cycle
        self.on_event = on_event
        self._pods: dict[str, tuple[Obj, PodFacts | None]] = {}
        # namespace -> its labels (the watch of Namespaces): what pod affinity terms'
        # namespaceSelectors select among; and the pods whose terms have such a selector,
        # read again when a namespace is created, deleted or relabelled (_on_namespace)
        self._namespaces = NamespaceIndex()
        # what pod terms' namespace selectors read: the index, or None when the API server
        # refuses the shim the namespaces (an older ClusterRole): such selectors are unread
        self._ns_read: NamespaceIndex | None = self._namespaces
        self._groups: dict[str, int] = {}  # PodGroup key -> minMember
        self._bad_groups: dict[str, str] = {}  # PodGroup key -> why kant cannot read it
        # gang (or lone pod) -> why its pending pods are not submitted (message, code)
        self._gang_wait: dict[str, tuple[str, str]] = {}
        # gang (or lone pod) -> the failures of its last job, cancelled after failures (or
        # read from its object by a shim started anew): its next job carries them on (see
        # _cancel, _try_submit)
        self._failures: dict[str, FailureHistory] = {}
        # gang (or lone pod) -> the kant.io/failures value its PodGroup (or pod) holds, as
        # last read or written by this shim; and the values still to write there (None: the
        # annotation removed), see _note_history and _write_histories
        self._stored: dict[str, str] = {}
        self._store_due: dict[str, str | None] = {}
        self._group_uid: dict[str, str] = {}  # PodGroup key -> its metadata.uid
        self._jobs: dict[str, _JobRecord] = {}  # kant job id -> record
        # ended jobs the shim forgot, to acknowledge after the next cycle (see _acknowledge)
        self._ended: list[str] = []
        self._job_of_base: dict[str, str] = {}  # group or lone pod key -> kant job id
        # group or lone pod key -> the number of its last job, kept while a pod of it exists
        # (a job id is never given twice then: see _count_job, _drop_base)
        self._gen: dict[str, int] = {}
        self._bases_of: dict[str, set[str]] = {}  # pod key -> the bases its facts named
        self._base_pods: dict[str, int] = {}  # base -> how many pods named it (_bases_of)
        self._id_of: dict[str, tuple[str, PodId]] = {}  # pod key -> (job id, PodId)
        # pod key -> the PodId holding its requests: pods bound by others (see _hold)
        self._held: dict[str, PodId] = {}
        # pod key -> (node, the node's generation then): pods bound by others that found no
        # room there (its max_pods taken, e.g. by a pod of kant's the kubelet then rejects)
        # or found it taking no pods (not Ready, cordoned), or were held there in part (GPUs,
        # CPU or memory a pod of kant's held: the kubelet admitted them over it), held again
        # in full once something on that node has changed (see _hold_left_out)
        self._left_out: dict[str, tuple[str, int]] = {}
        self._dying: set[str] = set()  # pods kant released and asked to stop
        self._evict: dict[str, str] = {}  # victim pod key -> preemptor, until the call succeeds
        # victim pod key (in _evict) -> the refusal last said of its eviction, said again only
        # when it changes (the call is tried again every cycle, a second apart)
        self._evict_said: dict[str, str] = {}
        # victim pod key (in _evict) -> the message of its DisruptionTarget=True, written
        # again when the pod is seen without it (see _remark)
        self._mark: dict[str, str] = {}
        # pod key -> the DisruptionTarget condition still to write there (status, reason,
        # message): the last one meant, until the API server takes it (see _write_disruptions)
        self._disruption_due: dict[str, tuple[str, str, str]] = {}
        # pod key -> the PodScheduled condition written: (message, reason code, when)
        self._condition: dict[str, tuple[str, str, float]] = {}
        self._event_at: dict[str, float] = {}
        # condition and event writes left in this cycle (None: outside a cycle, no limit),
        # and whether a cycle left some for the next (statusWritesPerCycle)
        self._writes_left: int | None = None
        self.status_writes_due = False
        self._pg_status: dict[str, str] = {}
        self._waiting: dict[str, set[str]] = {}  # base -> pending pods not in a kant job
        self._alive: dict[str, bool] = {}  # node -> Ready when last seen
        self._on_node_pods: dict[str, set[str]] = {}  # node -> keys of the pods bound there
        # node -> what it is now, while kant's pods run there on what it was (see _on_node)
        self._changed: dict[str, NodeFacts] = {}
        # node -> why kant leaves it out (what node_facts refused: more than 64 GPUs...),
        # until an event finds it valid; one kant had taken leaves once its pods have ended
        self._bad_nodes: dict[str, str] = {}
        # node -> why the fabric refuses its place (its labels contradict the nodes taken:
        # its leaf under a second spine), while it is out of kant's cluster for that: said
        # once for each reason, not at each status update (see _take_node); and of a node
        # a starting shim took in out of the fabric only to count kant's pods there, the
        # fabric's refusal alone, until it reports itself (said when it leaves, not again
        # at its next event: _remove_left_out, _take_node)
        self._misplaced: dict[str, str] = {}
        # the left-out nodes still in kant's cluster while kant's pods run there (cordoned by
        # _leave_out), removed once those have ended: what _take_changed_nodes walks, never
        # every left-out node
        self._draining: set[str] = set()
        # the nodes taken in at a made-up reading, only to count kant's pods there
        # (:meth:`_take_left_out_with_kants_pods`), while kant knows them as that: whatever
        # they report next is a change, taken as it is once kant's pods there have ended
        # (see _take_node)
        self._made_up: set[str] = set()
        self._last_now = 0.0
        # (daemon threads: a run that gives up on its bindings exits without their answers)
        self._pool = CallPool(self.settings.bind_workers, name="kant-bind")
        self._inflight: list[_Call] = []
        # what another thread reads, in one assignment: the answers reap has taken off
        # _inflight, how many of them it has acted on, and _inflight
        self._calls: tuple[list[_Call], int, list[_Call]] = ([], 0, self._inflight)
        self.bound_total = 0
        self.cycles = 0
        # key -> (uid, until when it holds preemption back), see _hold_preemption
        self._inherited_victims: dict[str, tuple[str, float]] = {}
        self._preemption: PreemptionPolicy | None = None  # the config's, while it is off
        # pod key -> the kant.io/expected-start value the pod carries, as the watch last
        # showed it or this shim wrote it; the removals due (in order; those of the pods a
        # cycle binds are tried first by that cycle, outside statusWritesPerCycle), made
        # before the values due, (value, made at), in queue order (see _estimate,
        # _write_expected)
        self._expect_on: dict[str, str] = {}
        self._expect_gone: dict[str, None] = {}
        self._expect_stalled: set[str] = set()  # (writes that got no answer: tried last)
        # the pods whose last kant.io/expected-start write by this shim was a value: they
        # may carry it though the watch shows them without (an event older than the write)
        self._expect_wrote: set[str] = set()
        self._expect_due: dict[str, tuple[str, str]] = {}
        self._estimated_at: float | None = None  # the shim's time of the last estimates
        self.estimate_seconds = 0.0
        """What the last estimates cost, in seconds of the loop (wall clock)."""
        self.estimate_failures = 0
        """How many estimates passes in a row failed (0 once one works)."""
        self._estimated_ok_at: float | None = None  # the shim's time of the last that worked

    @property
    def bindings_in_flight(self) -> int:
        """How many binding calls the cycles sent are not fully dealt with: no answer yet,
        or an answer :meth:`reap` has not acted on yet (a failure's pod being looked up, its
        gang released, its pods deleted; a bound pod counted). Read from another thread, it
        is one consistent count (0: every binding sent so far is dealt with)."""
        taken, acted, inflight = self._calls
        return len(taken) - acted + len(inflight)

    @property
    def histories_due(self) -> int:
        """How many failure histories (``kant.io/failures``) are still to write on their
        PodGroups or pods (the writes not yet made, or not answered)."""
        return len(self._store_due)

    # ----------------------------------------------------------------- time

    def now(self) -> float:
        """The shim's clock, never going back."""
        self._last_now = max(self._last_now, float(self.clock()))
        return self._last_now

    # ----------------------------------------------------------------- sync and events

    def sync(self) -> None:
        """List namespaces, nodes, PodGroups and pods and take them in, adopting every binding
        a previous shim recorded on bound pods, cordoned nodes' too (a restart loses no
        binding and double-books nothing). Nodes are taken in the order :func:`_start_order`
        gives (those kant's pods run on first, then by name), not the order listed, one kant
        takes in only to count kant's pods there at its own turn
        (:meth:`_take_left_out_with_kants_pods`): which of two contradicting nodes joins the
        fabric does not depend on the API server. The pods are read once to find the nodes
        kant's pods run on (:func:`_kants_pods`)."""
        try:
            namespaces = self.api.get("/api/v1/namespaces").get("items", ())
        except ApiError as e:
            if e.status != 403:
                raise
            namespaces = ()
            if self._ns_read is not None:
                self._ns_read = None
                log.error(
                    "the API server refuses the shim the namespaces (%s): pods whose pod "
                    "affinity terms select namespaces by their labels are refused, and such "
                    "terms of pods kant holds are left out, until the shim is granted get, "
                    "list, watch on namespaces (its ClusterRole) and restarted", e.message
                )  # fmt: skip
        for ns in namespaces:
            self.handle("Namespace", "ADDED", ns)
        nodes = self.api.get("/api/v1/nodes").get("items", ())
        groups: Iterable[Obj] = ()
        if self.api.has(PODGROUP_API):
            groups = self.api.get(f"/apis/{PODGROUP_API}/podgroups").get("items", ())
        pods = self.api.get("/api/v1/pods").get("items", ())
        kants = _kants_pods(pods, self.settings)
        for n in _start_order(nodes, kants):
            self.handle("Node", "ADDED", n)
            # (at once, in that order: one taken in is in the fabric when its labels agree
            # with the nodes taken before it, and the nodes after it are refused by it)
            self._take_left_out_with_kants_pods(n, kants)
        for g in groups:
            self.handle("PodGroup", "ADDED", g)
        # victims a previous shim chose, still terminating: they are held until gone, and
        # no victim is chosen meanwhile (see _hold_preemption)
        self._inherited_victims = {
            pod_key(p): (uid_of(p), deletion_deadline(p) + VICTIM_MARGIN)
            for p in pods
            if _kant_victim(p, self.settings)
        }
        # a cordoned node keeps its pods: what runs there is taken in as on any node (kant's
        # jobs taken back and charged, others' pods held: a node that takes no new pods
        # takes no binding), and only then is the node cordoned again
        cordoned = [
            n.name
            for n in self.scheduler.cluster.nodes()
            if self._alive.get(n.name) and not self.nodes.schedulable(n.name)
        ]
        for name in cordoned:
            self.nodes.set_schedulable(name, True, self.now())
        restart = self.adopt(pods)
        for p in pods:
            self.handle("Pod", "ADDED", p)
        for name in cordoned:
            self.nodes.set_schedulable(name, False, self.now())
        for key in restart:  # (held until they are gone, like every pod kant stops)
            self._stop(key, "kant restarts its job: it could not be taken back whole at start")
        # running pods a previous shim marked as its victims and did not evict (a budget
        # held them; it stopped before writing False, or its write failed): which preemptor
        # each was for lived in that shim, so this one evicts none of them and tells them
        # they stay (its first cycle writes it, unless it chooses one again: True then).
        # Not the pods this shim stops (a gang started again whole: they go)
        for p in pods:
            key = pod_key(p)
            if key not in self._dying and _kant_spared(p, self.settings):
                self._disruption_due[key] = ("False", SPARED_REASON, RESTART_SPARED_MESSAGE)

    def _take_left_out_with_kants_pods(self, n: Obj, kants: Mapping[str, list[Obj]]) -> None:
        """At :meth:`sync`, right after node ``n`` is handled (in :func:`_start_order`; of
        ``kants``, node -> the pods a previous shim bound that run there,
        :func:`_kants_pods`): when kant did not take it, it is Ready and such pods run
        there, it is taken in cordoned, only to count them, whatever kant refused: a value
        of its object (:meth:`_leave_out`: more than ``MAX_GPUS_PER_NODE`` GPUs, the node
        grown past the limit under them as under a running shim; a malformed taint, an
        ``allocatable.pods`` of ``500m``), or its place in the fabric (its labels contradict
        the nodes taken before it, :meth:`_take_node`). It is read as
        ``node_facts(need=...)`` reads it: a value kant refuses as what kant's pods there
        need (:func:`_needs`, never past a limit), or left out (a malformed taint; an
        ``allocatable.pods`` kant refuses: no limit); in the fabric when its labels agree
        with the nodes taken before it (the nodes after it are refused by it, as by any node
        taken), else out of it (the fabric's reason kept in :attr:`_misplaced` when it is
        the only one, :meth:`_remove_left_out`). Those pods' jobs are taken back and charged
        to their tenants' quotas (:meth:`adopt`), others' pods there are held (on what is
        left of the node as read), nothing new is placed there, and the node leaves once
        kant's pods there have ended (:attr:`_draining`), as it would have under that shim;
        whatever it reports meanwhile is a change (:attr:`_made_up`). A value read as what
        they need adds no capacity that waiting pods would be told of (a running shim keeps
        such a node as it was); one kant takes counts as on any cordoned node. A node whose
        name or GPU model kant refuses cannot be read at all (nothing stands in for the
        name, nor for the model its pods' quota is charged on): it stays out, its pods not
        taken back. O(1), and O(kant's pods there) when it is taken in."""
        name = str((n.get("metadata") or {}).get("name"))
        mine = kants.get(name)
        if not mine or self.nodes.has(name) or not node_ready(n):
            return
        wanted = _Needs()
        for p in mine:
            wanted = _needs(p, self.settings, wanted)
        try:
            facts = node_facts(n, self.settings, need=wanted.need())
            placeless = self._add_to_count(facts.spec)
        except KantError as e:  # (its name or GPU model: nothing stands in for them)
            log.warning("node %s is left out and the pods kant bound there are not taken "
                        "back: %s", name, e)  # fmt: skip
            return
        why = self._bad_nodes.get(name)
        if why is None and placeless is not None:
            # refused by the fabric alone (_take_node): its reason stays where the fabric's
            # are kept, so that it is said once it leaves (_remove_left_out), not again at
            # its next event
            why = self._misplaced[name] = placeless
        self._alive[name] = True
        self.nodes.set_schedulable(name, False, self.now())
        self._draining.add(name)
        self._made_up.add(name)
        spec = self.nodes.spec(name)
        log.warning(
            "node %s is left out but kant's pods run there: it is taken in cordoned, read "
            "as %d GPUs and %d NICs%s, to count them, and leaves once they have ended: %s",
            name, spec.gpus, spec.rdma_nics,
            "" if placeless is None else ", out of the fabric", why,
        )  # fmt: skip

    def _add_to_count(self, spec: NodeSpec) -> str | None:
        """Add node ``spec``, only to count kant's pods there (see
        :meth:`_take_left_out_with_kants_pods`); out of the fabric (no leaf, spine,
        superspine or HBD) when the cluster refuses its place there. Returns why it refused
        that place, None when it did not; raises KantError when it refuses the node even
        so."""
        try:
            self.nodes.added(spec, self.now())
        except KantError as e:
            self.nodes.added(
                attrs.evolve(spec, leaf=None, spine=None, superspine=None, hbd=None), self.now()
            )
            return str(e)
        return None

    def adopt(self, pods: Iterable[Obj]) -> list[str]:
        """Rebuild kant's jobs from bound pods carrying kant's binding annotations
        (:meth:`Scheduler.restore`). A pod that cannot be taken back (its annotations are
        malformed or name a job of another namespace, or name a pod another pod already
        claims, or its job's recorded bindings no longer fit) is left to :meth:`handle`,
        which holds its requests on its node like a pod of another scheduler: it is never
        given to another pod while it runs. A gang bound in part (fewer pods bound than its
        PodGroup or Kueue count asks, while others of the group wait: the last shim stopped
        between its bindings) is not taken back: the keys of its bound pods are returned, to
        be stopped, so that the gang starts again whole. So is a gang a pod of which failed,
        or a pod of which a previous shim evicted and is still terminating
        (:func:`_kant_victim`: a budget held back the eviction of the others), or a pod of
        which runs on a node kant does not take now (not Ready, or deleted, while no shim
        ran; that pod is returned too, as is a lone pod there): with a shim up, each would
        have requeued the gang whole, and stopped the pods on the lost node."""
        # (a pod claimed twice: the first by key wins)
        states = [(p, pod_state(p, self.settings)) for p in sorted(pods, key=pod_key)]
        waiting_groups: set[str] = set()
        for p, st in states:
            if st.ours and st.node is None and st.phase not in TERMINAL and not st.deleting:
                g = pod_group_key(p)
                if g is not None:
                    waiting_groups.add(g)
        by_job: dict[str, dict[PodId, tuple[PodFacts, Binding]]] = {}
        known = self._known_nodes()
        restart: list[str] = []
        failed: set[str] = set()  # jobs a pod of which failed (while no shim ran, maybe)
        # jobs a pod of which a previous shim evicted and is still terminating (its others
        # were not evicted yet: a budget held them)
        preempted: set[str] = set()
        # jobs a pod of which runs on a node kant does not take now (not Ready, or deleted,
        # while no shim ran): with a shim up, the node's loss would have requeued them whole
        lost: set[str] = set()
        objs: dict[str, Obj] = {}  # the pods taken back, by key
        for p, st in states:
            if _kant_victim(p, self.settings):
                with contextlib.suppress(KantError):
                    got = recorded_binding(p)
                    if got is not None:
                        preempted.add(got[0].job)
            if st.ours and st.phase in TERMINAL:
                with contextlib.suppress(KantError):
                    got = recorded_binding(p)
                    if got is None:
                        continue
                    jid = got[0].job
                    if st.phase == "Failed":
                        failed.add(jid)
                    f = pod_facts(p, self.settings, namespaces=self._ns_read)
                    self._count_job(_base(f), jid)  # (never again)
            if (
                st.ours
                and st.node is not None
                and st.node not in known
                and st.node not in self._bad_nodes  # (not Ready, or deleted: not refused)
                and st.phase not in TERMINAL
                and not st.deleting
                and POD_ID_ANNOTATION in annotations_of(p)
            ):
                with contextlib.suppress(KantError):
                    got = recorded_binding(p)
                    # (a pod naming another namespace's job stops nothing of it)
                    if got is not None and _namespace_of(got[0].job) == _namespace_key(p):
                        lost.add(got[0].job)
                        restart.append(pod_key(p))
                continue
            if (
                not st.ours
                or st.node not in known
                or st.phase in TERMINAL
                or st.deleting
                or POD_ID_ANNOTATION not in annotations_of(p)
            ):
                continue  # (another scheduler's pod is never read for kant's annotations)
            try:
                f = pod_facts(p, self.settings, namespaces=self._ns_read)
                recorded = recorded_binding(p)
                if recorded is None or f.node is None:
                    continue
                pid, gpus, nics, milli = recorded
                if _namespace_of(pid.job) != f.namespace:
                    raise InvalidObjectError(
                        "kant.io/pod-id", str(pid), "names a job of another namespace",
                        where=f"Pod {f.key}",
                    )  # fmt: skip
                r = f.resources
                b = Binding(pod=pid, node=f.node, gpus=gpus, nics=nics, gpu_milli=milli,
                            cpu_milli=r.cpu_milli, memory_mib=r.memory_mib)  # fmt: skip
            except KantError as e:
                log.warning("cannot adopt %s: %s", pod_key(p), e)
                continue
            members = by_job.setdefault(pid.job, {})
            if pid in members:
                log.warning(
                    "cannot adopt %s: %s is claimed by %s too", f.key, pid, members[pid][0].key
                )
                continue
            members[pid] = (f, b)
            objs[f.key] = p
        now = self.now()
        # jobs that keep their tenant within its nominal quota are taken back first, the
        # others (quotas lowered while no shim ran) after, each in job id order: in job id
        # order alone, a borrower taken back first could take the cohort's lendable GPUs
        # and leave a job its tenant is guaranteed charged to no tenant
        later: list[str] = []
        deferred: set[str] = set()  # (later's jobs: each is deferred once)
        for jid in itertools.chain(sorted(by_job), later):
            if jid in self._jobs:
                continue
            members = by_job[jid]
            roles: dict[str, list[tuple[PodFacts, PodId]]] = {}
            for pid, (f, _) in members.items():
                roles.setdefault(pid.role, []).append((f, pid))
            lead = min((f for f, _ in members.values()), key=lambda f: f.name)
            if lead.group is not None and lead.group in waiting_groups:
                need = self._groups.get(lead.group) or max(
                    (f.min_member or 0 for f, _ in members.values()), default=0
                )
                if len(members) < need:
                    log.warning(
                        "not adopting %s: %d of its %d pods are bound, others wait",
                        jid, len(members), need,
                    )  # fmt: skip
                    restart.extend(f.key for f, _ in members.values())
                    continue
            if jid in failed or jid in preempted or jid in lost:
                # with a shim up, the gang would have been requeued whole (pod_evicted, or
                # its node lost): it starts again whole
                what = (
                    "failed"
                    if jid in failed
                    else "was evicted and is terminating"
                    if jid in preempted
                    else "runs on a node that is not Ready or was deleted"
                )
                log.warning("not adopting %s: a pod of it %s", jid, what)
                restart.extend(f.key for f, _ in members.values())
                continue
            bindings = tuple(b for _, b in members.values())
            # the tenant it was charged to when it was bound, whatever its queue label or
            # annotation says now (a pod bound by a kant that recorded none: what it says)
            tenant = recorded_tenant(objs[lead.key]) or lead.tenant
            if jid not in deferred and self._borrows(tenant, bindings):
                later.append(jid)
                deferred.add(jid)
                continue
            runtimes = [f.runtime for f, _ in members.values() if f.runtime is not None]
            # (its start: when its first pod started, as the last shim's bind was then)
            started = [f.started for f, _ in members.values() if f.started is not None]
            base = _base(lead)
            history = self._adopted_history(base, objs[lead.key], jid)
            try:
                job = Job(
                    id=jid, tenant=tenant, priority=lead.priority,
                    preemptible=lead.preemptible, kind=lead.kind,
                    submitted_at=max(0.0, lead.created),
                    runtime_estimate=max(runtimes) if runtimes else None,
                    roles=tuple(
                        ms[0][0].role(r, max(pid.index for _, pid in ms) + 1)
                        for r, ms in sorted(roles.items())
                    ),
                )  # fmt: skip
                # (a pod gone without a trace: it ended, or it was deleted, which only a
                # replacement waiting in its group tells, above)
                missing = [p for p in job.pods() if p not in members]
                start = min(min(started, default=now), now)
                self.scheduler.restore(
                    job, bindings, now, finished=missing, started_at=start, history=history
                )
            except KantError as e:
                log.warning("cannot adopt %s: %s", jid, e)
                continue
            self._failures.pop(base, None)  # (its job carries them now)
            self._count_job(base, jid)
            rec = _JobRecord(
                base=base,
                group=lead.group,
                pods={pid: f.key for pid, (f, _) in members.items()},
            )
            rec.bound = set(members)
            self._jobs[jid] = rec
            self._job_of_base[base] = jid
            for pid, (f, _) in members.items():
                self._id_of[f.key] = (jid, pid)
        return restart

    def _borrows(self, tenant: str, bindings: Iterable[Binding]) -> bool:
        """Would ``bindings``, taken back, take ``tenant`` above its nominal quota on a GPU
        model, with what was taken back before them? (:meth:`adopt` takes such jobs back
        last.) O(tenants x models + bindings)."""
        admitter, cluster = self.scheduler.admitter, self.scheduler.cluster
        if admitter.table.unlimited:
            return False
        ledger = admitter.ledger()
        for b in bindings:
            milli = b.total_milli
            model = cluster.node(b.node).gpu_model if milli and b.node in cluster else None
            if model is not None:
                if not ledger.within_nominal(tenant, model, milli):
                    return True
                ledger.add(tenant, model, milli)
        return False

    def _count_job(self, base: str, jid: str) -> None:
        """Job ``jid`` of ``base`` existed: the next job of ``base`` gets a later number (a
        job id is never given twice while a pod of the old job lingers, whose
        ``kant.io/pod-id`` names it, or kant's queue lists it)."""
        tail = jid.rsplit("#", 1)[1] if "#" in jid else ""
        self._gen[base] = max(self._gen.get(base, 0), int(tail) if is_count(tail) else 0)

    def _name_base(self, key: str, base: str) -> None:
        """Pod ``key``'s facts name ``base``: it counts for ``base`` until it is deleted (its
        ``kant.io/pod-id`` may name a job of each base it had)."""
        bases = self._bases_of.setdefault(key, set())
        if base not in bases:
            bases.add(base)
            self._base_pods[base] = self._base_pods.get(base, 0) + 1

    def _drop_base(self, base: str, *, pod: bool) -> None:
        """A pod that named ``base`` is deleted (``pod``), or its job ended: once no pod names
        it, no job of it runs and none of its pods waits, the shim forgets its job number
        and why its pods waited: a long-running shim keeps nothing for the pods and groups
        gone. A job of it made later starts from number 1 again, past the ids kant's queue
        still lists (:meth:`_try_submit`). The failures of a gang (its failed bindings and
        interruptions) are kept while its PodGroup exists: the pods its controller makes
        again carry them on, as a Volcano job's retries are counted across its restarts."""
        if pod:
            n = self._base_pods.get(base, 0) - 1
            if n > 0:
                self._base_pods[base] = n
                return
            self._base_pods.pop(base, None)
        if base in self._base_pods or base in self._job_of_base or self._waiting.get(base):
            return
        self._gen.pop(base, None)
        self._gang_wait.pop(base, None)
        if base.removeprefix("group:") not in self._groups:
            self._failures.pop(base, None)

    # ----------------------------------------------------------------- stored failures

    def _read_history(self, base: str, obj: Obj, where: str) -> FailureHistory | None:
        """The failures ``base``'s object ``obj`` (its PodGroup, or the lone pod) holds in
        its ``kant.io/failures`` annotation, as this shim carries them on
        (:func:`~kant.k8s.failures.resume`); None when it holds none, or nothing readable
        (a warning says why: its failures count from 0)."""
        ann = annotations_of(obj)
        text = ann.get(FAILURES_ANNOTATION) if isinstance(ann, Mapping) else None
        if not isinstance(text, str):
            return None
        self._stored[base] = text
        try:
            h = parse_failures(text, where=where)
        except KantError as e:
            log.warning("%s; ignored: its failures count from 0", e)
            return None
        h = resume(h, self.now(), self.scheduler.queue.backoff)
        return None if h.empty else h

    def _take_stored(self, base: str, obj: Obj, where: str) -> None:
        """``base``'s object, seen for the first time: the failures it holds are carried on
        by its next job, unless this shim has newer ones (its job runs or waits, or its
        failures are kept from an earlier object of that name)."""
        h = self._read_history(base, obj, where)
        if h is not None and base not in self._job_of_base and base not in self._failures:
            self._failures[base] = h

    def _adopted_history(self, base: str, obj: Obj, jid: str) -> FailureHistory | None:
        """The failures job ``jid`` (of ``base``), taken back at a start, carries on: those
        its PodGroup holds (read when the shim took it in) or its lone pod (``obj``) holds.
        Failures saying it failed are not taken (its pods run: a failed job's are deleted),
        with a warning."""
        if base.startswith("pod:"):
            h = self._read_history(base, obj, f"Pod {pod_key(obj)}")
        else:
            h = self._failures.get(base)
        if h is not None and h.failed:
            log.warning("%s runs, but %s says it failed (%s): taken back without its failures",
                        jid, FAILURES_ANNOTATION, h.reason)  # fmt: skip
            return None
        return h

    def _stores(self, base: str) -> str | None:
        """The path of the object ``base``'s failures are stored on: its PodGroup, or the
        lone pod; None when there is none (a Kueue group, a PodGroup gone or not yet seen, a
        pod gone)."""
        if base.startswith("group:"):
            key = base.removeprefix("group:")
            if key not in self._groups:
                return None
            ns, name = key.split("/", 1)
            return f"/apis/{PODGROUP_API}/namespaces/{ns}/podgroups/{name}"
        key = base.removeprefix("pod:")
        if key not in self._pods:
            return None
        ns, name = key.split("/", 1)
        return f"/api/v1/namespaces/{ns}/pods/{name}"

    def _note_history(self, base: str, h: FailureHistory | None) -> None:
        """``base``'s failures are now ``h`` (None: none): written on its object by the next
        cycle, when its object does not say so already (:meth:`_write_histories`)."""
        if self._stores(base) is None:
            return
        text = None if h is None or h.empty else format_failures(h)
        if text == self._stored.get(base):
            self._store_due.pop(base, None)
        else:
            self._store_due[base] = text

    def _write_histories(self, *, budget: bool) -> None:
        """Write the failures due on their objects (``budget``: within this cycle's
        ``statusWritesPerCycle``, the rest left for the next cycles). An object gone or
        replaced (404, 422) takes its failures with it, as does any write refused (logged); a
        write answered 429 or 5xx, or not answered, is tried again by the next cycle (and
        with ``budget=False``, the shim stopping, one not answered ends the writes)."""
        for base in sorted(self._store_due):
            path = self._stores(base)
            if path is None:
                del self._store_due[base]
                continue
            if budget and not self._may_write():
                return
            text = self._store_due[base]  # (due until written: counted while in flight)
            key = base.split(":", 1)[1]
            if base.startswith("group:"):
                uid = self._group_uid.get(key, "")
            else:
                uid = uid_of(self._pods[key][0])
            meta: dict[str, Any] = {"annotations": {FAILURES_ANNOTATION: text}}
            if uid:
                meta["uid"] = uid  # (refused on another object of that name)
            try:
                self.api.patch(path, {"metadata": meta})
            except ApiError as e:
                # (404: gone; 422: another object of that name, its uid is not ours)
                (log.info if e.status == 404 else log.warning)(
                    "storing the failures of %s: %s", key, e
                )
                if e.status == 429 or e.status >= 500:
                    self.status_writes_due = True  # (still due)
                else:
                    del self._store_due[base]
                continue
            except OSError as e:
                log.warning("storing the failures of %s: %s", key, e)
                self.status_writes_due = True  # (still due)
                if not budget:
                    return
                continue
            del self._store_due[base]
            if text is None:
                self._stored.pop(base, None)
            else:
                self._stored[base] = text

    def _hold_preemption(self) -> None:
        """No victim is chosen while victims a previous shim chose are still terminating:
        which preemptor each was for is not known (a nomination lives in the shim that made
        it), so a preemptor waiting for them would choose others too. kube-scheduler does
        the same for a pod whose nominated node still has terminating victims. Preemption
        is back as configured once each is gone, ended, replaced by a pod of the same name
        (another uid), or :data:`VICTIM_MARGIN` seconds past the end of its grace period
        (its ``deletionTimestamp``): a finalizer or a lost node can keep a pod terminating
        for ever, and the whole cluster would go without preemption."""
        if self._inherited_victims:
            now = self.now()
            for key, (uid, until) in list(self._inherited_victims.items()):
                got = self._pods.get(key)
                obj = got[0] if got is not None else None
                if (
                    obj is None
                    or uid_of(obj) != uid
                    or pod_state(obj, self.settings).phase in TERMINAL
                    or now > until
                ):
                    del self._inherited_victims[key]
        if self._inherited_victims and self._preemption is None:
            self._preemption = self.scheduler.preemption
            self.scheduler.preemption = attrs.evolve(
                self._preemption, priority=False, reclaim=False, backfill=False
            )
            log.info("%d victims of a previous shim are terminating: no preemption until "
                     "they are gone", len(self._inherited_victims))  # fmt: skip
        elif not self._inherited_victims and self._preemption is not None:
            self.scheduler.preemption, self._preemption = self._preemption, None

    def _known_nodes(self) -> set[str]:
        return {n.name for n in self.scheduler.cluster.nodes()}

    def handle(self, kind: str, kind_event: str, obj: Obj) -> None:
        """Take one informer event (``kind`` Node, Pod, PodGroup or Namespace; ``kind_event``
        ADDED, MODIFIED or DELETED), then call ``on_event`` with it (``obj`` itself, which the
        shim may keep: see :class:`Shim`)."""
        if kind == "Node":
            self._on_node(kind_event, obj)
        elif kind == "Namespace":
            self._on_namespace(kind_event, obj)
        elif kind == "PodGroup":
            key = pod_key(obj)
            base = f"group:{key}"
            if kind_event == "DELETED":
                self._groups.pop(key, None)
                self._bad_groups.pop(key, None)
                self._pg_status.pop(key, None)  # (one made again has no status yet)
                self._group_uid.pop(key, None)
                self._stored.pop(base, None)  # (the annotation went with it)
                self._store_due.pop(base, None)
                self._drop_base(base, pod=False)  # (its failures, when no pod is left)
                self._recheck_gang(base)
                self._try_submit(base)  # (its pods still waiting now wait for the group)
            else:
                uid, was = uid_of(obj), self._group_uid.get(key)
                # (another uid: deleted and made again while a watch was down, and what the
                # old one held went with it)
                renewed = bool(was and uid and was != uid)
                if renewed:
                    self._stored.pop(base, None)
                    self._store_due.pop(base, None)
                    self._pg_status.pop(key, None)  # (the new one has no status yet)
                if renewed or (key not in self._groups and key not in self._bad_groups):
                    self._take_stored(base, obj, f"PodGroup {key}")  # (first seen)
                self._group_uid[key] = uid
                try:
                    self._groups[key] = pod_group_min_member(obj)
                    self._bad_groups.pop(key, None)
                except KantError as e:
                    log.warning("%s", e)
                    self._groups.pop(key, None)
                    self._bad_groups[key] = str(e)
                self._recheck_gang(base)
                self._try_submit(base)
        elif kind == "Pod":
            self._on_pod(kind_event, obj)
        if self.on_event is not None:
            self.on_event(kind, kind_event, obj)

    def _on_namespace(self, ev: str, obj: Obj) -> None:
        """A namespace created, changed or deleted: when its labels are not what the shim
        knew (created, deleted, relabelled), the pods one of whose terms' namespace selectors
        selects it now and did not before, or the reverse (:class:`NamespaceIndex`), are
        read again (:meth:`_reread_namespaced`). O(1) for an event that changes no label,
        else O(distinct selectors + the pods read again)."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        index = self._namespaces
        if ev == "DELETED":
            if name not in index:
                return
            keys = index.update(name, None)
        else:
            lab = meta.get("labels") or {}
            labels = {str(k): str(v) for k, v in lab.items()} if isinstance(lab, Mapping) else {}
            if index.get(name) == labels:
                return
            keys = index.update(name, labels)
        if keys:
            self._reread_namespaced(keys)

    def _reread_namespaced(self, keys: Iterable[str]) -> None:
        """Read again, with the namespaces' labels as they are now, pods ``keys`` (sorted),
        whose pod affinity terms select namespaces by their labels: a pod of another
        scheduler kant holds is described again (:meth:`_describe_held`); a pending pod of
        kant's not in a job yet is taken as a changed pod; a kant job whose waiting pods'
        terms now read other namespaces is described again in place
        (:meth:`_describe_waiting`), and a running one is described again, so that its pods'
        anti-affinity keeps the pods of the namespaces selected now out of their domain.
        O(those pods)."""
        waiting: set[str] = set()
        running: set[str] = set()
        for key in keys:
            got = self._pods.get(key)
            if got is None:
                continue
            obj, old = got
            st = pod_state(obj, self.settings)
            if st.phase in TERMINAL:
                continue
            if not st.ours or old is None:
                if key in self._held:
                    self._describe_held(key, obj)
                continue
            try:
                new = pod_facts(obj, self.settings, namespaces=self._ns_read)
            except KantError:
                continue  # (what made it readable does not depend on namespaces)
            if _terms(new) == _terms(old):
                continue
            known = self._id_of.get(key)
            if known is None:
                if key in self._held:
                    self._pods[key] = (obj, new)
                    self._describe_held(key, obj)
                else:
                    self._on_pod("MODIFIED", obj)
                continue
            self._pods[key] = (obj, new)
            rec = self._jobs.get(known[0])
            if rec is not None:
                (running if rec.bound else waiting).add(known[0])
        for jid in sorted(waiting):
            self._describe_waiting(jid)
        for jid in sorted(running):
            self._describe_running(jid)

    def _describe_waiting(self, jid: str) -> None:
        """Describe waiting kant job ``jid`` again from its pods' facts now
        (:meth:`~kant.scheduler.Scheduler.redescribe`): it keeps its place in the order,
        its wait, its failures and its nomination. Pods that no longer make the same pods of
        it (two of its pods whose terms read the same namespaces before now read different
        ones, so they are two roles, or the reverse) make it a new job
        (:meth:`_cancel`)."""
        rec = self._jobs.get(jid)
        e = self.scheduler.queue.get(jid)
        if rec is None or e is None:
            return
        facts = [self._pods.get(key, ({}, None))[1] for _pid, key in sorted(rec.pods.items())]
        if e.phase is JobPhase.PENDING and all(f is not None for f in facts):
            job, ids = build_job([f for f in facts if f is not None], jid, e.job.submitted_at)
            if ids == rec.pods:
                try:
                    self.scheduler.redescribe(job)
                    return
                except KantError as err:  # (not expected: the same pods, pending)
                    log.warning("job %s cannot be described again (%s): submitted again",
                                jid, err)  # fmt: skip
        self._cancel(jid, self.now())

    def _describe_running(self, jid: str) -> None:
        """Describe kant job ``jid``, whose pods run, with the pod terms its pods' facts give
        now (each role's, from a pod of it), for the pods placed from now on."""
        cluster = self.scheduler.cluster
        job, rec = cluster.described(jid), self._jobs.get(jid)
        if job is None or rec is None:
            return
        facts: dict[str, PodFacts] = {}
        for pid, key in sorted(rec.pods.items()):
            f = self._pods.get(key, ({}, None))[1]
            if f is not None:
                facts.setdefault(pid.role, f)
        roles = tuple(
            attrs.evolve(r, pod_affinity=f.pod_affinity, pod_anti_affinity=f.pod_anti_affinity,
                         pod_preferences=f.pod_preferences)
            if (f := facts.get(r.name)) is not None
            else r
            for r in job.roles
        )  # fmt: skip
        if roles != job.roles:
            cluster.describe(attrs.evolve(job, roles=roles))

    def _on_node(self, ev: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        now = self.now()
        if ev == "DELETED":
            self._alive.pop(name, None)
            self._changed.pop(name, None)
            self._bad_nodes.pop(name, None)
            self._misplaced.pop(name, None)
            self._draining.discard(name)
            self._made_up.discard(name)
            if self.nodes.has(name):
                rep = self.nodes.removed(name, now)
                log.warning("node %s deleted: %d pods were on it", name, len(rep.released))
                self._after(rep, now, why=f"node {name} was deleted")
                self._drop_released_holds(name)
            return
        try:
            facts = node_facts(obj, self.settings)
        except KantError as e:
            self._leave_out(name, obj, str(e), now)
            return
        if self._bad_nodes.pop(name, None) is not None and name not in self._made_up:
            # (one taken in only to count kant's pods there stays cordoned: _take_node says so)
            log.info("node %s is valid again: taken as it is now", name)
        self._draining.discard(name)
        was = self._alive.get(name)
        self._alive[name] = facts.alive
        if not facts.alive:
            # (a change seen while kant's pods ran there is taken when it is Ready again,
            # as it is then: never now, which would make it take pods)
            self._changed.pop(name, None)
            if self.nodes.has(name) and was:
                self._after(self.nodes.not_ready(name, now), now, why=f"node {name} is not Ready")
                self._drop_released_holds(name)
            return
        self._take_node(name, facts, was=was)

    def _leave_out(self, name: str, obj: Obj, why: str, now: float) -> None:
        """Node ``name`` is one kant cannot take (``why``: what :func:`node_facts` refused,
        such as more than ``MAX_GPUS_PER_NODE`` GPUs): left out, with a warning the first
        time for each reason (not at every status update). One kant had taken is left out
        too, never kept as it was: at once when none of kant's pods runs there (what others
        run there is held again when it comes back), else it takes no new pod and leaves
        once they have ended (:meth:`_take_changed_nodes`); one that is not Ready loses its
        pods as any node does. The next event that finds it valid takes it as it is then.
        The log says which: left out, or cordoned until kant's pods there have ended (and
        its removal then, :meth:`_remove_left_out`). O(pods on the node)."""
        new = self._bad_nodes.get(name) != why
        self._bad_nodes[name] = why
        self._misplaced.pop(name, None)  # (refused by the fabric again: said again)
        self._changed.pop(name, None)
        if not self.nodes.has(name):
            self._draining.discard(name)
            self._made_up.discard(name)
        else:
            alive, was = node_ready(obj), self._alive.get(name)
            self._alive[name] = alive
            if not alive:
                if was:
                    self._after(self.nodes.not_ready(name, now), now,
                                why=f"node {name} is not Ready")  # fmt: skip
                    self._drop_released_holds(name)
            elif self._only_holds_on(name):
                self._remove_left_out(name, now, say=not new)
            else:
                self._draining.add(name)
                if self.nodes.schedulable(name):
                    self.nodes.set_schedulable(name, False, now)
                if new:
                    log.warning(
                        "node %s is cordoned: kant takes no new pod there, and it leaves "
                        "kant's cluster once kant's pods there have ended, until kant can "
                        "take it: %s", name, why,
                    )  # fmt: skip
                return
        if new:
            log.warning("node %s is left out until kant can take it: %s", name, why)

    def _take_node(self, name: str, facts: NodeFacts, *, was: bool | None) -> None:
        """Node ``name``, Ready, as ``facts`` say it is now (``was``: Ready when last seen,
        None: never seen): a node whose labels, taints or pod capacity alone changed is
        changed in place; one whose other capacity, model, fabric place or zone changed is
        taken afresh unless kant's pods run there (then it takes no new pod until they have ended,
        :meth:`_take_changed_nodes`); what runs
        on a node new, Ready again or uncordoned is held. A node the cluster refuses (its
        labels contradict the fabric of the nodes taken: a leaf under a second spine) is left
        out with a warning, once for each reason it is refused for (:attr:`_misplaced`), not
        at each status update. A node taken in at a made-up reading (:attr:`_made_up`) has
        changed whatever it reports, the very values it was read as too; once it is taken as
        it reports itself, a refusal by the fabric is said, the one it was counted out of the
        fabric for too (it leaves kant's cluster then). ``facts`` replace
        what :attr:`_changed` held of the node: the warning that it takes no new pods is
        logged only when they differ (not at each status update)."""
        before = self._changed.pop(name, None)
        made_up = name in self._made_up
        if self.nodes.has(name) and (made_up or self.nodes.spec(name) != facts.spec):
            old = self.nodes.spec(name)
            new = facts.spec
            same = attrs.evolve(old, labels=new.labels, taints=new.taints, max_pods=new.max_pods)
            if same == new and not made_up:
                # only its labels, taints or pod capacity (allocatable.pods): placements read
                # them from now on, what runs there stays (IgnoredDuringExecution; pods above
                # a lowered capacity too, none is added until they are below it)
                self.nodes.relabelled(facts.spec, self.now())
            elif not self._only_holds_on(name):
                # kant's pods run there on what kant knew: no new pod goes there until they
                # have ended and the node is taken as it is then (see _take_changed_nodes)
                self._changed[name] = facts
                self.nodes.set_schedulable(name, False, self.now())
                if facts == before:
                    return  # (said when it changed)
                if made_up:
                    log.warning(
                        "node %s, taken in only to count kant's pods there, takes no new pods "
                        "until they have ended, and is then taken as it reports itself, if "
                        "kant can take it", name,
                    )  # fmt: skip
                else:
                    log.warning(
                        "node %s changed (allocatable, model, fabric or zone labels): it takes "
                        "no new pods until kant's pods there have ended", name,
                    )  # fmt: skip
                return
            else:
                self.nodes.removed(name, self.now())  # nothing of kant's runs there:
                self._drop_released_holds(name)  # take it as it is now
                self._made_up.discard(name)
                # (the fabric's refusal a node taken in only to count kant's pods was
                # counted out of the fabric for: said again when refused again, as it leaves)
                self._misplaced.pop(name, None)
        added = not self.nodes.has(name)
        if added:
            try:
                self.nodes.added(facts.spec, self.now())
            except KantError as e:  # labels placing it where the fabric says it cannot be
                if self._misplaced.get(name) != str(e):
                    log.warning("node %s is left out: %s", name, e)
                self._misplaced[name] = str(e)
                return
            self._misplaced.pop(name, None)
        if added or was is False or (facts.schedulable and not self.nodes.schedulable(name)):
            # new, Ready again or uncordoned: what runs there and is not held yet is held
            # (taken while the node takes pods: a cordoned node's devices cannot be)
            self.nodes.set_schedulable(name, True, self.now())
            self._replay_bound(name)
        self.nodes.set_schedulable(name, facts.schedulable, self.now())

    def _only_holds_on(self, name: str) -> bool:
        """Whether every pod kant counts on node ``name`` is a held one (:attr:`_held`), none
        a kant job's."""
        return all(p.job.startswith(_HELD) for p in self.scheduler.cluster.pods_on(name))

    def _take_changed_nodes(self) -> None:
        """Nodes that changed while kant's pods ran there, taken as they are now once those
        pods have ended, and nodes left out (:meth:`_leave_out`) while kant's pods ran there
        removed once they have (before each cycle; O(such nodes), not O(nodes left out))."""
        for name in sorted(self._changed):
            if self.nodes.has(name) and self._only_holds_on(name):
                self._take_node(name, self._changed.pop(name), was=True)
        for name in sorted(self._draining):  # (left out while kant's pods ran there)
            if not self.nodes.has(name):
                self._draining.discard(name)
            elif self._alive.get(name) and self._only_holds_on(name):
                self._remove_left_out(name, self.now())

    def _remove_left_out(self, name: str, now: float, *, say: bool = True) -> None:
        """Node ``name``, left out (:meth:`_leave_out`; or taken in by a starting shim out of
        the fabric, only to count kant's pods there, :attr:`_misplaced`) with none of kant's
        pods there, leaves kant's cluster (what others run there is held again when it comes
        back); ``say``: logged, with the reason (not when :meth:`_leave_out` says it is left
        out). The fabric's reason stays in :attr:`_misplaced`: the next event that finds the
        node refused by the fabric for it says nothing more, nor that it is valid again."""
        if say:
            log.warning(
                "node %s left kant's cluster: none of kant's pods runs there; it comes back "
                "once kant can take it: %s", name,
                self._bad_nodes.get(name) or self._misplaced.get(name),
            )  # fmt: skip
        self._draining.discard(name)
        self._made_up.discard(name)
        self.nodes.removed(name, now)
        self._drop_released_holds(name)

    def _drop_released_holds(self, name: str) -> None:
        """Forget the holds on node ``name`` that a node event released (the node went away
        or offers nothing): they are held again when it comes back (:meth:`_replay_bound`).
        O(pods bound there)."""
        cluster = self.scheduler.cluster
        for key in self._on_node_pods.get(name, ()):
            pid = self._held.get(key)
            if pid is not None and not cluster.has_pod(pid):
                del self._held[key]

    def _replay_bound(self, name: str) -> None:
        """The pods bound to node ``name`` that kant knows of and does not hold, looked at
        again (the node was added, or is Ready again): those that run are held. O(pods
        bound there)."""
        for key in sorted(self._on_node_pods.get(name, ())):
            got = self._pods.get(key)
            if got is not None and key not in self._held and key not in self._id_of:
                self._on_pod("MODIFIED", got[0])

    def _unplace(self, key: str, obj: Obj) -> None:
        """Pod ``key`` (last seen as ``obj``) is gone: out of the index of pods by node."""
        node = pod_state(obj, self.settings).node
        if node is None:
            return
        keys = self._on_node_pods.get(node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._on_node_pods[node]

    def _on_pod(self, ev: str, obj: Obj) -> None:
        key = pod_key(obj)
        now = self.now()
        last = self._pods.get(key)
        was = "" if last is None else uid_of(last[0])
        if last is not None and was and uid_of(obj) not in ("", was):
            if ev == "DELETED":
                return  # (an incarnation kant no longer tracks)
            # deleted and created again under the same name while the watch was down (a
            # relist sees only the new one): the old pod is gone, this is a new one
            self._on_pod("DELETED", last[0])
        if ev == "DELETED":
            self._namespaces.watch(key, frozenset())
            old = self._pods.pop(key, None)
            self._stored.pop(f"pod:{key}", None)  # (a pod's failures go with it)
            self._store_due.pop(f"pod:{key}", None)
            if old is not None:
                self._unplace(key, old[0])
            if old is not None and old[1] is not None:
                self._unwait(key, _base(old[1]))
            self._gone(key, now, finished=False)
            for base in sorted(self._bases_of.pop(key, ())):
                self._drop_base(base, pod=True)
            return
        st = pod_state(obj, self.settings)
        self._namespaces.watch(key, namespace_uses(obj))
        if st.node is not None:
            self._on_node_pods.setdefault(st.node, set()).add(key)
        if key in self._evict:
            self._remark(key, obj, st)
        if not st.ours:  # (kant's annotations mean nothing on another scheduler's pod)
            self._pods[key] = (obj, None)
            if st.phase in TERMINAL:
                self._gone(key, now, finished=False)
            elif st.node is not None:
                self._hold(key, obj, st)
            return
        self._sync_expected(key, obj, st, first=key not in self._pods)
        try:
            f: PodFacts | None = pod_facts(obj, self.settings, namespaces=self._ns_read)
        except KantError as e:
            self._unwait(key)  # (from the facts last read of it)
            self._pods[key] = (obj, None)
            if st.phase in TERMINAL:
                self._gone(key, now, finished=st.phase == "Succeeded")
            elif key in self._id_of:
                self._known_pod(key, obj, st, now)  # later edits of its annotations: ignored
            elif st.node is not None:
                self._hold(key, obj, st)  # bound without kant: its requests are held
            else:
                self._set_unschedulable(key, f"kant: invalid: {e}", "invalid", now)
            return
        assert f is not None
        if (
            f.group is None
            and f.phase not in TERMINAL
            and key not in self._pods
            and key not in self._id_of
        ):
            self._take_stored(_base(f), obj, f"Pod {key}")  # (first seen, not adopted)
        prev = self._pods.get(key, ({}, None))[1]
        left = _base(prev) if prev is not None and key not in self._id_of else _base(f)
        if left != _base(f):
            # relabelled to another group (or out of one, or into one) while it waited: it
            # waits no more for the old one, whose pods say why they wait again now, and
            # its condition is written for the new one at once
            self._unwait(key, left)
            self._condition.pop(key, None)
        self._pods[key] = (obj, f)
        self._name_base(key, _base(f))
        if left != _base(f):
            self._try_submit(left)
        if f.phase in TERMINAL:
            self._unwait(key, _base(f))
            self._gone(key, now, finished=f.phase == "Succeeded")
            return
        if key in self._id_of:
            self._known_pod(key, obj, st, now)
            if prev is not None and f.node is None and prev.signature != f.signature:
                self._edited_while_waiting(key, f)
            return
        base = _base(f)
        if f.node is None and not f.deleting and key not in self._dying:
            if f.gated:
                # not to be scheduled until its gates are removed (a MODIFIED event then):
                # it neither waits nor counts toward its group (kube-scheduler, Volcano)
                if key in self._waiting.get(base, ()):
                    self._unwait(key, base)
                    self._try_submit(base)
                return
            self._waiting.setdefault(base, set()).add(key)
            self._try_submit(base)
            return
        self._unwait(key, base)
        if f.node is not None:
            # bound without kant (spec.nodeName, another binder), or released by kant and
            # still running until it is gone
            self._hold(key, obj, st)

    def _known_pod(self, key: str, obj: Obj, st: PodState, now: float) -> None:
        """A pod of a kant job changed: running where kant bound it, it is confirmed; bound by
        someone else while it waited, it leaves the job (submitted again without it) and its
        requests are held where it runs; deleted while it waited (terminating, a finalizer
        keeping it), it leaves the job as a pending pod deleted does (:meth:`_gone`)."""
        jid, pid = self._id_of[key]
        rec = self._jobs.get(jid)
        if rec is None:
            return
        if st.node is not None and pid not in rec.bound:
            log.warning("%s was bound to %s without kant", key, st.node)
            self._id_of.pop(key, None)
            rec.pods.pop(pid, None)
            self._cancel(jid, now)
            self._hold(key, obj, st)
            return
        if st.node is None and st.deleting and pid not in rec.bound:
            # deleted before kant bound it, kept terminating by a finalizer: it went away,
            # as a pending pod deleted has (kube-scheduler skips a pod being deleted too)
            self._id_of.pop(key, None)
            rec.pods.pop(pid, None)
            self._cancel(jid, now)
            return
        if (
            st.phase == "Running"
            and pid in rec.bound
            and pid not in rec.confirmed
            and st.node == self._bound_node(pid)
        ):
            rec.confirmed.add(pid)
            with contextlib.suppress(KantError):
                self.scheduler.confirm(pid, now)

    def _edited_while_waiting(self, key: str, f: PodFacts) -> None:
        """Pod ``key`` of a kant job that waits whole was edited in what places it (a
        toleration added, as Kubernetes allows on a pending pod): the job is described again
        from its pods' facts now (:meth:`_describe_waiting`), as kube-scheduler reads a
        pending pod again when it changes. A job some of whose pods run keeps the facts it
        was placed with."""
        known = self._id_of.get(key)
        rec = None if known is None else self._jobs.get(known[0])
        if known is None or rec is None or rec.bound or f.deleting:
            return
        self._describe_waiting(known[0])

    def _unwait(self, key: str, base: str | None = None) -> None:
        """The pod no longer waits to join a kant job (``base``: its gang or lone pod, when
        known; else from the facts last read of it, if any)."""
        if base is None:
            old = self._pods.get(key, ({}, None))[1]
            if old is None:
                return
            base = _base(old)
        keys = self._waiting.get(base)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._waiting[base]

    def _hold(self, key: str, obj: Obj, st: PodState) -> None:
        """Hold the requests of pod ``key``, bound to ``st.node`` by someone other than this
        shim (another scheduler, a user's ``spec.nodeName``, a binding kant lost), on that
        node (nothing while kant does not know the node: :meth:`_replay_bound` holds it when
        it does). Whole GPUs only when its ``gpu-fraction`` is not readable. Its labels and
        pod terms count for kant's pod affinity (:func:`held_job`), read again whenever the
        pod changes."""
        if st.node is None or st.phase in TERMINAL:
            return
        if key in self._held:
            self._describe_held(key, obj)
            return
        if key in self._left_out and self._left_out[key] == (st.node, self._generation(st.node)):
            return  # (left out there, and the node unchanged since: tried and said once)
        try:
            r = pod_resources(obj, self.settings)
        except KantError:
            try:
                r = pod_resources(obj, self.settings, shares=False)
            except KantError as e:
                log.warning("%s: its requests are not held: %s", key, e)
                return
        ns, name = key.split("/", 1)
        pid = PodId(job=f"{_HELD}{ns}..{name}", role="pod", index=0)
        self._left_out.pop(key, None)
        held, why = self.nodes.bind_foreign(pid, st.node, r.gpus, r.gpu_milli, r.cpu_milli,
                                            r.memory_mib)  # fmt: skip
        if held:
            self._held[key] = pid
            self._describe_held(key, obj)
        if why is not None and (gen := self._generation(st.node)) is not None:
            self._left_out[key] = (st.node, gen)  # (held again in full: _hold_left_out)
            log.warning("%s: its requests are not held %s: %s; they are once its node "
                        "changes (a pod there ends, it takes pods again)", key,
                        "in full" if held else "yet", why)  # fmt: skip

    def _generation(self, node: str) -> int | None:
        """The generation of ``node`` in the cluster (None: not there), which changes
        whenever something on it does."""
        cluster = self.scheduler.cluster
        return int(cluster.node_generation[cluster.slot_of(node)]) if node in cluster else None

    def _hold_left_out(self) -> None:
        """Hold again the pods bound by others that found no room on their node, or held
        there in part (:attr:`_left_out`), on the nodes where something changed since (a pod
        released: gone, a binding failed, evicted; the node changed), before a cycle places
        anything: node by node, every pod left out there (due or not), the parts given back
        first, then each pod held by pod key, and every pod still left out recorded with the
        node as it is after them (so that these changes do not make one due again). A node
        that takes no pod now (not Ready, cordoned, above its max_pods) keeps the parts held
        there. O(those pods)."""
        on: dict[str, list[str]] = {}  # node -> its pods left out, by key
        due: set[str] = set()
        for key, (node, gen) in sorted(self._left_out.items(), key=lambda kv: (kv[1][0], kv[0])):
            now = self._generation(node)
            if now is None:
                del self._left_out[key]  # (held when the node comes: _replay_bound)
                continue
            on.setdefault(node, []).append(key)
            if now != gen:
                due.add(node)
        cluster = self.scheduler.cluster
        for node in sorted(due):
            keys = on[node]  # (every pod left out there)
            cap = cluster.node(node).max_pods
            if cluster.is_healthy(node) and (cap is None or len(cluster.pods_on(node)) <= cap):
                parts = [self._held.pop(key) for key in keys if key in self._held]
                for part in parts:  # (held in part: given back, to be held again in full)
                    self.nodes.release_foreign(part)
                for key in keys:
                    del self._left_out[key]
                    got = self._pods.get(key)
                    if got is None:
                        continue
                    st = pod_state(got[0], self.settings)
                    if st.node == node:
                        self._hold(key, got[0], st)
            after = self._generation(node)
            for key in keys:
                if key in self._left_out and after is not None:
                    self._left_out[key] = (node, after)

    def _describe_held(self, key: str, obj: Obj) -> None:
        """Describe held pod ``key`` (last seen as ``obj``) to the cluster, for pod affinity,
        unless it is described as it is already."""
        pid = self._held[key]
        job, err = held_job(obj, pid.job, namespaces=self._ns_read)
        if self.scheduler.cluster.described(pid.job) == job:
            return
        if err is not None:
            log.warning("%s: what kant cannot read of it does not count for pod affinity: %s",
                        key, err)  # fmt: skip
        self.scheduler.cluster.describe(job)

    def _gone(self, key: str, now: float, *, finished: bool) -> None:
        """A pod ended (finished, failed or deleted)."""
        held = self._held.pop(key, None)
        if held is not None:
            self.nodes.release_foreign(held)
        self._left_out.pop(key, None)
        self._condition.pop(key, None)
        self._event_at.pop(key, None)
        self._drop_eviction(key)
        self._disruption_due.pop(key, None)
        self._expect_on.pop(key, None)
        self._expect_gone.pop(key, None)
        self._expect_due.pop(key, None)
        self._expect_stalled.discard(key)
        self._expect_wrote.discard(key)
        known = self._id_of.pop(key, None)
        if key in self._dying:
            self._dying.discard(key)
            return
        if known is None:
            return
        jid, pid = known
        rec = self._jobs.get(jid)
        if rec is None:
            return
        if pid not in rec.bound:  # a pending pod of a submitted job went away
            rec.pods.pop(pid, None)
            self._cancel(jid, now)
            return
        rec.bound.discard(pid)
        rec.pods.pop(pid, None)
        try:
            rep = (
                self.scheduler.pod_finished(pid, now)
                if finished
                else self.scheduler.pod_evicted(pid, now)
            )
        except KantError:
            return
        self._after(rep, now)
        if jid in rep.finished:
            if finished and rec.group is not None:
                # its next job counts from 0 (a lone pod that succeeded never runs again)
                self._note_history(rec.base, None)
            self._forget_job(jid)
            self._try_submit(rec.base)  # pods of its group that came meanwhile

    def _after(self, rep: EventReport, now: float, *, why: str = "") -> None:
        """Carry out an event's report: stop the pods kant released (the rest of a requeued
        gang, pods left on a lost node), and drop the kant job of a requeued gang whose pods
        are gone (it is submitted again when its controller has recreated them). ``why``: the
        event, for the pods' events (a node lost)."""
        cause = {ev.pod: ev.cause.value for ev in rep.evictions}
        because = f" ({why})" if why else ""
        for pid in rep.released:
            rec = self._jobs.get(pid.job)
            if rec is None:
                continue
            rec.bound.discard(pid)
            key = rec.pods.pop(pid, None)
            if key is None:
                continue
            self._id_of.pop(key, None)
            if key in self._pods:
                why = cause.get(pid, EvictionCause.GANG_REQUEUED.value)
                did = (
                    "failed the job"
                    if why == EvictionCause.JOB_FAILED.value
                    else "requeued the gang"
                )
                self._stop(key, f"kant {did}{because}: {why}")
        for jid in (*rep.requeued, *rep.failed):
            rec = self._jobs.get(jid)
            e = self.scheduler.queue.get(jid)
            if rec is not None and (e is None or len(rec.pods) < e.job.num_pods):
                self._cancel(jid, now)

    def _cancel(self, jid: str, now: float) -> None:
        """Drop kant job ``jid``, its pods no longer those it was made of (a pod of it went
        away or was bound by someone else, its binding failed, a requeued gang's pods were
        deleted): its pods still waiting are submitted again, as a new job that carries on
        its failures (its backoff, attempts and interruptions: a pod whose binding keeps
        failing is not bound again at once, and past the retry or interruption limit is
        left waiting, failed)."""
        rec = self._jobs.get(jid)
        if rec is None:
            return
        e = self.scheduler.queue.get(jid)
        if e is not None and (e.attempts or e.interruptions or e.phase is JobPhase.FAILED):
            # (its failures only, as the annotation keeps them: the new job waits afresh)
            h = attrs.evolve(FailureHistory.of(e), pending_since=None, evicted_at=None)
            self._failures[rec.base] = h
            self._note_history(rec.base, h)
        rep = self.scheduler.cancel(jid, now)
        for pid in rep.released:
            key = rec.pods.get(pid)
            if key is not None:
                self._stop(key, "kant cancelled the job")
        self._forget_job(jid)
        bases = {rec.base}
        for key in rec.pods.values():
            if key in self._pods and key not in self._dying:
                bases.add(self._rewait(key, rec.base))
        for base in sorted(bases):
            self._try_submit(base)
        for key in rec.pods.values():
            if self._carries(key) and key not in self._id_of and key not in self._dying:
                self._remove_expected(key)  # (waiting for no kant job now: nothing expected)

    def _rewait(self, key: str, base: str) -> str:
        """Pod ``key``, in a kant job of ``base`` that is dropped, waits again: for the group
        its labels name now (relabelled while it was in the job: only waiting now, it follows
        them), or ``base`` when kant cannot read it. Returns the base it waits for."""
        f = self._pods[key][1]
        if f is not None:
            base = _base(f)
        self._waiting.setdefault(base, set()).add(key)
        return base

    def _forget_job(self, jid: str) -> None:
        """Kant job ``jid`` ended (its last pod finished, or it was cancelled or failed): the
        shim drops its record, and no pod maps to it any more (its pods still terminating are
        held like another scheduler's, :meth:`_stop`). Its entry is acknowledged after the
        next cycle (:meth:`_acknowledge`)."""
        rec = self._jobs.pop(jid, None)
        if rec is None:
            return
        for key in rec.pods.values():
            if self._id_of.get(key, (None,))[0] == jid:
                self._id_of.pop(key, None)
        if self._job_of_base.get(rec.base) == jid:
            self._job_of_base.pop(rec.base)
        self._ended.append(jid)
        self._drop_base(rec.base, pod=False)

    def _acknowledge(self, jids: Iterable[str]) -> None:
        """Release the entries of ended jobs the shim has forgotten (``Scheduler.acknowledge``):
        nothing reads them any more. A group or pod made again under its name is a new job
        (:meth:`_try_submit` gives no id kant's queue still lists). Called after a cycle has
        read the queue since they ended: a job released from the books raises the queue's
        change-log floor (``Queue.changed_since``), and released before that cycle it would
        make the cycle derive its kept answers afresh. A job the queue's history released
        already is skipped."""
        for jid in jids:
            if self.scheduler.queue.get(jid) is None:
                continue
            try:
                self.scheduler.acknowledge(jid)
            except KantError as e:  # (a job not ended: refused, and kept)
                log.warning("not acknowledging %s: %s", jid, e)

    def _bound_node(self, pid: PodId) -> str | None:
        """The node kant bound ``pid`` to (None: it holds no binding)."""
        c = self.scheduler.cluster
        return c.binding(pid).node if c.has_pod(pid) else None

    def _key_of(self, pid: PodId) -> str | None:
        rec = self._jobs.get(pid.job)
        return rec.pods.get(pid) if rec is not None else None

    def _try_submit(self, base: str) -> None:
        """Submit the gang (or lone pod) ``base`` when enough of its pods are pending; else
        note why its pods wait (written by the next :meth:`cycle`)."""
        self._gang_wait.pop(base, None)
        if base in self._job_of_base:
            if self._waiting.get(base):
                jid = self._job_of_base[base]
                self._gang_wait[base] = (
                    f"kant: group_running: job {jid} of its group runs; the pod joins the "
                    "group's next job",
                    "group_running",
                )
            return
        pending = []
        for key in sorted(self._waiting.get(base, ())):
            f = self._pods[key][1] if key in self._pods else None
            if (
                f is not None
                and _base(f) == base  # (a pod relabelled to another group counts there)
                and key not in self._id_of
                and key not in self._dying
            ):
                pending.append(f)
        if not pending:
            return
        failed = self._failures.get(base)
        if failed is not None and failed.failed:
            # until its pods are deleted (or made again): see _drop_base
            why = failed.reason or Reason(code=ReasonCode.FAILED)
            self._gang_wait[base] = (f"kant: {why}", ReasonCode.FAILED.value)
            return
        group = pending[0].group
        if group is not None:
            need = self._need(group, pending)
            if need is None or len(pending) < need:
                self._gang_wait[base] = self._gang_reason(group, len(pending), need)
                return
        gen = self._gen.get(base, 0) + 1
        name = job_id(pending)
        while self.scheduler.queue.get(f"{name}#{gen}") is not None:  # (ended, listed still)
            gen += 1
        jid = f"{name}#{gen}"
        now = self.now()
        try:
            job, ids = build_job(pending, jid, max(f.created for f in pending))
            self.scheduler.submit(job, now, history=failed)
        except KantError as e:
            for f in pending:
                self._set_unschedulable(f.key, f"kant: invalid: {e}", "invalid", now)
            return
        self._failures.pop(base, None)
        self._gen[base] = gen
        self._jobs[jid] = _JobRecord(base=base, group=group, pods=ids)
        self._job_of_base[base] = jid
        for pid, key in ids.items():
            self._id_of[key] = (jid, pid)
            self._waiting[base].discard(key)

    def _need(self, group: str, facts: Iterable[PodFacts]) -> int | None:
        """How many pods gang ``group`` needs: its PodGroup's ``minMember``, else the largest
        Kueue total count its pods ``facts`` carry; None when neither says."""
        need = self._groups.get(group)
        if need is None:
            need = max((f.min_member or 0 for f in facts), default=0) or None
        return need

    def _recheck_gang(self, base: str) -> None:
        """The PodGroup of gang ``base`` changed, or was deleted: a kant job of it none of
        whose pods is bound yet, which its group no longer lets start (the group deleted or
        unreadable, or its ``minMember`` raised above the job's pods), is dropped
        (:meth:`_cancel`): its pods wait again for the group as it is now, and are submitted
        again once it lets them (the pods made since with them), as coscheduling reads the
        PodGroup at every attempt. A job some of whose pods are bound runs on."""
        jid = self._job_of_base.get(base)
        rec = None if jid is None else self._jobs.get(jid)
        if jid is None or rec is None or rec.group is None or rec.bound:
            return
        facts = [f for key in rec.pods.values() if (f := self._pods.get(key, ({}, None))[1])]
        need = self._need(rec.group, facts)
        if rec.group in self._bad_groups or need is None or len(rec.pods) < need:
            self._cancel(jid, self.now())

    def _gang_reason(self, group: str, have: int, need: int | None) -> tuple[str, str]:
        """Why the pending pods of ``group`` are not submitted (message, code): its PodGroup is
        unreadable or missing (with no Kueue total count on its pods either), or fewer pods
        than it needs exist."""
        bad = self._bad_groups.get(group)
        if bad is not None:
            return f"kant: invalid: {bad}", "invalid"
        if need is None:
            ns, name = group.split("/", 1)
            if name.startswith(KUEUE_GROUP_PREFIX):
                return (
                    f"kant: gang_incomplete: no pod of Kueue group {ns}/"
                    f"{name.removeprefix(KUEUE_GROUP_PREFIX)} has a {KUEUE_TOTAL_ANNOTATION} "
                    "annotation saying how many pods it has",
                    "gang_incomplete",
                )
            return (
                f"kant: gang_incomplete: PodGroup {group} does not exist (nor does a "
                f"{KUEUE_TOTAL_ANNOTATION} annotation on its pods say how many pods it has)",
                "gang_incomplete",
            )
        return (
            f"kant: gang_incomplete: {have} of the {need} pods of {group} exist",
            "gang_incomplete",
        )

    # ----------------------------------------------------------------- the cycle

    def cycle(self) -> CycleResult:
        """One cycle: schedule, apply, then write bindings, evictions, conditions, events.
        Binding calls run on the pool while the loop goes on; :meth:`reap` takes their
        answers (the loop calls it all the time)."""
        self.reap()
        if self._changed or self._draining:
            self._take_changed_nodes()
        if self._left_out:
            self._hold_left_out()
        now = self.now()
        self.cycles += 1
        self._hold_preemption()
        ended, self._ended = self._ended, []
        result = self.scheduler.schedule(now)
        report = self.scheduler.apply(result, now)
        self._acknowledge(ended)
        bound = set(report.bound)
        todo = [b for b in result.bindings if b.pod.job in bound]
        for b in todo:
            self._jobs[b.pod.job].bound.add(b.pod)
        binding = self._unexpect(self._jobs[b.pod.job].pods[b.pod] for b in todo)
        for b in todo:
            pkey = self._jobs[b.pod.job].pods[b.pod]
            obj = self._pods.get(pkey, ({}, None))[0]
            tenant = self.scheduler.queue.entry(b.pod.job).job.tenant  # (the one charged)
            call = self._pool.submit(self._bind, b, pkey, uid_of(obj), tenant)
            self._inflight.append((b, call))
        for jid in bound:
            self._pod_group_status(jid, "Scheduled")
        for v in result.victims:
            for pid in v.pods:
                key = self._key_of(pid)
                if key is not None and key not in self._evict:
                    self._evict[key] = v.preemptor
                    self._disrupt(key, v.preemptor, v.reason.value)
        self._spare_victims()
        self.status_writes_due = False
        answered = self._write_disruptions()
        if answered:
            for key in sorted(self._evict):
                # (its DisruptionTarget=True written first; a call not answered ends them)
                if key not in self._disruption_due and not self._try_evict(key):
                    self.status_writes_due = True
                    break
        if answered and binding:
            answered = self._write_expected(binding)  # (the pods bound just now)
        self._writes_left = self.settings.status_writes_per_cycle
        try:
            if self._store_due:
                self._write_histories(budget=True)
            for jid, reason in result.pending.items():  # (in queue order: the head first)
                rec = self._jobs.get(jid)
                if rec is None:
                    continue
                msg, code = f"kant: {reason}", reason.code.value  # (once for all its pods)
                for pid, key in rec.pods.items():  # (in the job's pod order)
                    if pid not in rec.bound and key in self._pods:
                        self._set_unschedulable(key, msg, code, now)
                self._pod_group_status(jid, "Pending")
            for base, (msg, code) in sorted(self._gang_wait.items()):  # (not kant jobs yet)
                for key in sorted(self._waiting.get(base, ())):
                    if key in self._pods and key not in self._id_of:
                        self._set_unschedulable(key, msg, code, now)
            # (after the evictions and conditions, which a long estimate would delay)
            self._estimate(now)
            if answered and (self._expect_gone or self._expect_due):
                self._write_expected(skip=binding)
        finally:
            self._writes_left = None
        if self.on_cycle is not None:
            self.on_cycle(self, result)
        return result

    def _estimate(self, now: float) -> None:
        """Every ``estimateIntervalSeconds`` (from the first cycle on; never when 0): the
        start-time estimates (:meth:`Scheduler.start_estimates`, on a copy of kant's state)
        of the first ``estimateMaxJobs`` waiting jobs in queue order, ``estimateHorizonSeconds``
        and ``estimateMaxCycles`` ahead at most, become the ``kant.io/expected-start`` writes
        due on their waiting pods, the values that changed only (a time by the slack or
        more, see :func:`_steady`); the pods that carry one and are not among them (bound,
        or their job no longer estimated) have it removed. An error in the estimates is
        logged (with the passes failed in a row) and changes nothing: scheduling goes on,
        and the pods keep the values they carry. Cost: the
        estimates' (a copy of the state plus the cycles played), and O(the pods annotated
        and the pods of the jobs estimated)."""
        s = self.settings
        if s.estimate_interval_seconds <= 0:
            return
        last = self._estimated_at
        if last is not None and now - last < s.estimate_interval_seconds:
            return
        self._estimated_at = now
        jobs: list[str] = []
        for e in self.scheduler.queue.candidates():  # (the global order: the head first)
            if len(jobs) >= s.estimate_max_jobs:
                break
            if e.phase is JobPhase.PENDING and e.id in self._jobs:
                jobs.append(e.id)
        t0 = time.monotonic()
        try:
            found: dict[str, StartEstimate] = {}
            if jobs:
                found = self.scheduler.start_estimates(
                    now, jobs=jobs, horizon=s.estimate_horizon_seconds,
                    max_cycles=s.estimate_max_cycles,
                )  # fmt: skip
        except Exception:  # (an estimate is advice: it never stops the scheduling)
            self.estimate_failures += 1
            last = self._estimated_ok_at
            log.exception(
                "start-time estimates failed (%d passes in a row; the last that worked: %s); "
                "scheduling goes on, the pods keep the kant.io/expected-start they carry",
                self.estimate_failures, "none" if last is None else rfc3339(last),
            )  # fmt: skip
            return
        finally:
            self.estimate_seconds = time.monotonic() - t0
        self.estimate_failures = 0
        self._estimated_ok_at = now
        if self.estimate_seconds > s.estimate_interval_seconds / 10:
            log.warning(
                "start-time estimates of %d jobs took %.1f s of the scheduling loop (every "
                "%g s): raise estimateIntervalSeconds or lower estimateMaxJobs or "
                "estimateMaxCycles", len(jobs), self.estimate_seconds,
                s.estimate_interval_seconds,
            )  # fmt: skip
        made = rfc3339(now) or ""
        want: dict[str, tuple[str, float | None]] = {}  # (in queue order, each job's pods
        # in its pod order: the value, and the time it says, if any)
        for jid, est in found.items():
            rec = self._jobs.get(jid)
            if rec is None or est.status not in _WRITTEN:
                continue
            value = expected_start_value(est)
            at = est.start if est.status is EstimateStatus.EXPECTED else None
            for pid, key in rec.pods.items():
                if pid not in rec.bound and key in self._pods:
                    want[key] = (value, at)
        for key in sorted(self._expect_on.keys() | self._expect_wrote):
            if key not in want:
                self._expect_gone.setdefault(key)
        due: dict[str, tuple[str, str]] = {}
        for key, (value, at) in want.items():
            self._expect_gone.pop(key, None)  # (it waits: its value, if any, is written)
            if not _steady(self._expect_on.get(key), value, at, now):
                due[key] = (value, made)
        self._expect_due = due

    def _unexpect(self, keys: Iterable[str]) -> list[str]:
        """Pods ``keys`` are being bound: the removal of the expected start they carry is due;
        those that carry one are returned, for this cycle to make their removals while the
        binding calls run, outside ``statusWritesPerCycle`` (these writes are bounded by the
        cycle's bindings): a running pod is not left saying when it should start. A removal
        that cycle could not make is one of the others (within the budget, ahead of the
        values)."""
        if not self._expect_on and not self._expect_wrote:
            return []
        binding: list[str] = []
        for key in keys:
            self._expect_due.pop(key, None)
            if self._carries(key):
                self._expect_gone.setdefault(key)
                binding.append(key)
        return binding

    def _sync_expected(self, key: str, obj: Obj, st: PodState, *, first: bool) -> None:
        """Pod ``key`` of kant's, as the watch delivers it (``first``: first seen, the shim
        starting or a pod made since): the ``kant.io/expected-start`` it carries is what
        this shim holds it carries (an earlier shim's value, a hand edit, this shim's own
        writes coming back), so that a removal is never skipped for a pod that carries one,
        nor a value taken as written that is not. A pod this shim last wrote a value on is
        held to carry one too (the event may be older than the write): it is removed when
        the pod stops waiting. A pod that carries one and is bound (by kant, another binder,
        its ``spec.nodeName``) has it removed by the next cycle, and so has any pod first
        seen while this shim makes no estimates; a pod that waits gets the value of this
        shim's estimates, when they differ. A pod terminating or ended is left alone: its
        annotations go with it."""
        if st.deleting or st.phase in TERMINAL:
            self._expect_on.pop(key, None)
            self._expect_gone.pop(key, None)
            self._expect_due.pop(key, None)
            self._expect_stalled.discard(key)
            self._expect_wrote.discard(key)
            return
        ann = annotations_of(obj)
        if isinstance(ann, Mapping) and (
            EXPECTED_START_ANNOTATION in ann or EXPECTED_START_MADE_AT_ANNOTATION in ann
        ):
            value = ann.get(EXPECTED_START_ANNOTATION)
            self._expect_on[key] = value if isinstance(value, str) else ""
        else:
            self._expect_on.pop(key, None)
            if key not in self._expect_wrote:
                self._expect_gone.pop(key, None)  # (a removal of annotations no longer there)
                return
        if st.node is not None or (first and self.settings.estimate_interval_seconds <= 0):
            self._remove_expected(key)  # (bound by anyone: kant, another binder, nodeName)

    def _carries(self, key: str) -> bool:
        """Whether pod ``key`` may carry a ``kant.io/expected-start``: the watch last showed
        one on it, or this shim's last write on it was a value."""
        return key in self._expect_on or key in self._expect_wrote

    def _remove_expected(self, key: str) -> None:
        """Pod ``key``, which carries a ``kant.io/expected-start``, no longer waits: its
        removal is due (ahead of the values due)."""
        self._expect_due.pop(key, None)
        self._expect_gone.setdefault(key)

    def _write_expected(self, binding: list[str] | None = None, skip: Iterable[str] = ()) -> bool:
        """Write what is due of ``kant.io/expected-start`` (and ``-made-at``): with
        ``binding``, the removals from the pods this cycle binds, outside
        ``statusWritesPerCycle`` (bounded by the bindings; the cycle makes them after its
        evictions); else the removals (but those of ``skip``, tried by this cycle already),
        then the values in queue order, within this cycle's ``statusWritesPerCycle`` (after
        the conditions and events), the rest left for the next cycles; the writes that got
        no answer last come after all the others (one pod that never answers holds the others
        back one cycle at most). Each is a merge
        patch of the pod's annotations carrying its uid (refused on another pod of that
        name), ``null`` to remove them. A value for a pod bound (or no
        longer in a waiting job) since it was computed is not written: the annotations are
        removed instead, if the pod carries them. Errors as for the ``DisruptionTarget``
        writes: a pod gone (404) or another pod of that name (422) drops the write and what
        the pod carried; a write refused for good (403, 400 and any other: logged) drops the
        write, the pod still carrying what it carried (the next estimates write again);
        :data:`RETRIED_STATUS` or 5xx keeps it due, in its place (removals stay ahead), for
        the next cycle (a removal of the pods bound, as one of the others); 429 (the server
        is busy) or no answer keeps it due and ends the pass (a server down would otherwise
        cost the client's timeout per pod): False then, a write not answered going behind
        the others."""
        budget = binding is None
        if binding is None:
            done_with = set(skip)
            keys = [key for key in self._expect_gone if key not in done_with]
            keys += self._expect_due
            if self._expect_stalled:
                keys.sort(key=self._expect_stalled.__contains__)  # (stable: in order)
        else:
            keys = binding
        for key in keys:
            want: tuple[str, str] | None = None
            if key not in self._expect_gone:
                got = self._expect_due.get(key)
                if got is None:
                    continue  # (done with since the pass began)
                if self._waits(key):
                    want = got
                else:
                    del self._expect_due[key]
                    if not self._carries(key):
                        continue
                    self._expect_gone[key] = None
            if budget and not self._may_write():
                return True
            done = self._patch_expected(key, want)
            if done != "done" and done != "again":  # (busy, or no answer: the pass ends)
                self.status_writes_due = True
                if done == "no answer" and (key in self._expect_gone or key in self._expect_due):
                    self._expect_stalled.add(key)  # (the others go first from now on)
                return False
            self._expect_stalled.discard(key)
            if done == "again":
                self.status_writes_due = True
                continue
            if want is None:
                self._expect_gone.pop(key, None)
            else:
                self._expect_due.pop(key, None)
        return True

    def _patch_expected(self, key: str, want: tuple[str, str] | None) -> str:
        """Write ``want`` (value, made at; None: remove both) on pod ``key``: ``"done"`` (made,
        or dropped: see :meth:`_write_expected`), ``"again"`` (to be tried again), ``"busy"``
        (429: to be tried again, the pass ends), ``"no answer"`` (the pass ends)."""
        ns, name = key.split("/", 1)
        ann: dict[str, str | None] = {
            EXPECTED_START_ANNOTATION: None if want is None else want[0],
            EXPECTED_START_MADE_AT_ANNOTATION: None if want is None else want[1],
        }
        meta: dict[str, Any] = {"annotations": ann}
        uid = uid_of(self._pods.get(key, ({}, None))[0])
        if uid:
            meta["uid"] = uid  # (refused on another pod of that name)
        try:
            self.api.patch(f"/api/v1/namespaces/{ns}/pods/{name}", {"metadata": meta})
        except ApiError as e:
            if e.status in RETRIED_STATUS or e.status >= 500:
                log.info("expected start on %s: %s; tried again by the next cycle", key, e)
                return "busy" if e.status == 429 else "again"
            # (404: gone; 422: another pod of that name, which carries nothing of this
            # shim's; 403 and any other: refused, the pod still carries what it carried,
            # and the next estimates, or the cycle that binds it, write again)
            (log.info if e.status == 404 else log.warning)("expected start on %s: %s", key, e)
            if e.status in (404, 422):
                self._expect_on.pop(key, None)
                self._expect_wrote.discard(key)
            return "done"
        except OSError as e:
            log.info("expected start on %s: %s; tried again by the next cycle", key, e)
            return "no answer"
        if want is None:
            self._expect_on.pop(key, None)
            self._expect_wrote.discard(key)
        else:
            self._expect_on[key] = want[0]
            self._expect_wrote.add(key)
        return "done"

    def _waits(self, key: str) -> bool:
        """Whether pod ``key`` is a pod of a kant job that kant has not bound."""
        known = self._id_of.get(key)
        if known is None or key not in self._pods:
            return False
        rec = self._jobs.get(known[0])
        return rec is not None and known[1] not in rec.bound

    def reap(self, *, wait: bool = False) -> None:
        """Take the answers of the binding calls made so far (all of them with ``wait``): count
        the bound pods, and ``binding_failed`` for each failure."""
        if not self._inflight:
            return
        done: list[_Call] = []
        still: list[_Call] = []
        for x in self._inflight:  # one look per call: a call ending meanwhile waits its turn
            (done if wait or x[1].done() else still).append(x)
        if not done:
            return
        self._calls = (done, 0, still)  # (one assignment: never counted in neither, or both)
        self._inflight = still
        now = self.now()
        try:
            for i, (b, fut) in enumerate(done, 1):
                err, t_done = fut.result()
                if err is None:
                    self._bound(b, t_done)
                else:
                    self._binding_failed(b, err, now)
                self._calls = (done, i, still)
        finally:
            # (an exception from a hook ends the loop: none is left to take)
            self._calls = ([], 0, self._inflight)

    def _bound(self, b: Binding, when: float) -> None:
        """Binding ``b`` was made (at ``when``, by the wall clock)."""
        self.bound_total += 1
        rec = self._jobs.get(b.pod.job)
        if self.on_bound is not None and rec is not None and b.pod in rec.pods:
            self.on_bound(rec.pods[b.pod], when)

    def _binding_failed(self, b: Binding, err: str, now: float) -> None:
        """A binding call failed: ``binding_failed`` (the gang's other pods are released and
        deleted); the pod itself, if it still waits, may join a new submission. A call whose
        answer was lost (a timeout, a broken connection) or that a retry of it found done
        (409) may have bound the pod: when the pod as the API server has it now runs on
        the binding's node with this binding's ``kant.io/pod-id``, the binding succeeded. A
        pod that went away meanwhile (deleted, or being deleted and not bound: the server
        refuses its binding) is no failure of its job: it is gone, as when its deletion is
        seen first (:meth:`_gone`)."""
        rec = self._jobs.get(b.pod.job)
        if rec is None or b.pod not in rec.bound:
            log.warning("%s", err)
            return
        key = rec.pods.get(b.pod)
        fresh, gone = self._look(key) if key is not None else (None, False)
        if fresh is not None and _bound_by(fresh, b, self.settings):
            log.warning("%s; but the pod is bound to %s as asked: bound", err, b.node)
            self._bound(b, time.time())
            return
        if key is not None and (gone or self._went_away(key, fresh)):
            log.info("%s; the pod was deleted meanwhile: no failure of its job", err)
            self._gone(key, now, finished=False)
            return
        log.warning("%s", err)
        rec.bound.discard(b.pod)
        rec.pods.pop(b.pod, None)
        waits: str | None = None  # the base the pod waits for again
        try:
            rep = self.scheduler.binding_failed(b.pod, now, err)
        except KantError:
            return
        if key is not None:
            self._id_of.pop(key, None)
            obj, f = self._pods.get(key, ({}, None))
            if f is not None and f.node is None and not f.deleting:
                st = pod_state(fresh or {}, self.settings)  # (its event may not have come)
                if fresh is not None and st.node is not None:
                    self._pods[key] = (fresh, f)
                    self._on_node_pods.setdefault(st.node, set()).add(key)
                    self._hold(key, fresh, st)  # someone else bound it meanwhile
                else:
                    waits = self._rewait(key, rec.base)
            elif key in self._pods:
                st = pod_state(obj, self.settings)
                if st.node is not None:
                    self._hold(key, obj, st)  # someone else bound it meanwhile
        self._after(rep, now)
        if waits is not None and waits != rec.base:
            self._try_submit(waits)  # (relabelled to another group meanwhile)

    def _read_pod(self, key: str) -> Obj | None:
        """The pod as the API server has it now (None: gone, or the server did not answer)."""
        return self._look(key)[0]

    def _look(self, key: str) -> tuple[Obj | None, bool]:
        """The pod as the API server has it now (None: gone, or no answer), and whether the
        server said it is gone (404)."""
        ns, name = key.split("/", 1)
        try:
            return self.api.get(f"/api/v1/namespaces/{ns}/pods/{name}"), False
        except ApiError as e:
            return None, e.status == 404
        except OSError:
            return None, False

    def _went_away(self, key: str, fresh: Obj | None) -> bool:
        """Whether pod ``key`` as the server has it now (``fresh``) went away since the shim
        took it in: another pod has its name now, or it is being deleted, bound nowhere."""
        if fresh is None:
            return False
        uid = uid_of(self._pods.get(key, ({}, None))[0])
        if uid and uid_of(fresh) not in ("", uid):
            return True
        st = pod_state(fresh, self.settings)
        return st.deleting and st.node is None

    def _bind(self, b: Binding, key: str, uid: str, tenant: str) -> tuple[str | None, float]:
        """One binding call (on the pool): (None or the error, when it was answered).
        ``tenant``: the one its job is charged to, recorded on the pod."""
        ns, name = key.split("/", 1)
        ann = binding_annotations(b.pod, b.gpus, b.nics, b.gpu_milli, tenant=tenant)
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "annotations": ann},
            "target": {"apiVersion": "v1", "kind": "Node", "name": b.node},
        }  # fmt: skip
        if uid:
            body["metadata"]["uid"] = uid
        try:
            self.api.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding", body)
        except ApiError as e:
            return f"binding {key} to {b.node}: {e.status} {e.message}", time.time()
        except OSError as e:
            return f"binding {key} to {b.node}: {e}", time.time()
        return None, time.time()

    def _disrupt(self, key: str, preemptor: str, why: str) -> None:
        """Tell the victim why it goes: a ``DisruptionTarget`` condition (written before the
        eviction is asked, see :meth:`_write_disruptions`) and an event."""
        msg = f"{PREEMPTED_PREFIX} {preemptor} ({why})"
        self._disruption_due[key] = ("True", PREEMPTED_REASON, msg)
        if key in self._evict:
            self._mark[key] = msg
        self._event(key, "Preempted", msg, "Normal")

    def _spare_victims(self) -> None:
        """Give up the evictions left (a PodDisruptionBudget refused them) whose preemptor no
        longer waits for them: its job was deleted, cancelled or bound by someone else, or it
        no longer waits for its nomination (``Entry.waits_for_nomination``, the test
        ``Scheduler.victims_spared`` makes: it has no pods left to place, a pod-level job
        running some of its pods and waiting for room for the others still waits, or its
        nomination ended), or its nomination no longer counts the victim (one made elsewhere
        replaced it). The victim runs on, charged as before (unless another waiting
        preemptor counts on it, or its gang goes: ``Scheduler.victims_spared``), and its
        ``DisruptionTarget`` condition is set back to False."""
        queue = self.scheduler.queue
        spared: list[tuple[str, str]] = []
        for key, preemptor in sorted(self._evict.items()):
            e = queue.get(preemptor)
            known = self._id_of.get(key)
            if (
                preemptor not in self._jobs
                or e is None
                or not e.waits_for_nomination
                or e.nomination is None
                # (its nomination replaced within a cycle by one elsewhere: cycle._preempt)
                or (known is not None and known[1] not in e.nomination.victims)
            ):
                spared.append((key, preemptor))
        if not spared:
            return
        ids = {key: known[1] for key, _ in spared if (known := self._id_of.get(key)) is not None}
        kept = set(self.scheduler.victims_spared(ids.values()))
        for key, preemptor in spared:
            if key in ids and ids[key] not in kept:
                continue  # (still to go: another preemptor waits for it, or its gang goes)
            self._drop_eviction(key)
            log.info("not evicting %s: its preemptor %s no longer waits for it", key, preemptor)
            self._undisrupt(key, preemptor)

    def _undisrupt(self, key: str, preemptor: str) -> None:
        """Tell a victim it no longer goes: its ``DisruptionTarget`` condition set to False
        (as Kubernetes' disruption controller does for a pod marked that was not deleted)."""
        msg = f"kant: eviction abandoned: {preemptor} no longer waits for it"
        self._disruption_due[key] = ("False", SPARED_REASON, msg)

    def _write_disruptions(self) -> bool:
        """Write the ``DisruptionTarget`` conditions due, in pod key order, each once per cycle: the
        last status meant for a pod (a victim spared before its True was written gets False)
        until the API server takes it. A write answered as :data:`RETRIED_STATUS` says (401,
        408, 409, 429) or 5xx, or not answered, stays due for the next cycle
        (``status_writes_due``: the loop comes back a second later), and a victim is not
        evicted meanwhile (kube-scheduler deletes a victim only once its condition is
        written: a Job's ``podFailurePolicy`` reads it to tell a preemption from a failure).
        A pod gone (404), or a write refused for good (no right to, 403; 400, 405 or any
        other answer), takes it away: logged, and the eviction goes on without it; another
        pod of that name (422) takes the eviction away too. The set holds one entry per pod
        at most, and a pod's leaves with the pod (:meth:`_gone`). A write not answered (a
        timeout, a connection refused or reset) ends the pass, the rest left due: a server
        down would otherwise cost the cycle the client's timeout once per write. False then
        (the cycle asks no eviction). These writes do not count against
        ``statusWritesPerCycle``: each victim's eviction waits for its ``True``, and the
        budget, spent first on the pending pods' conditions of a large backlog, would hold
        preemption back; their number is bounded by the victims chosen and spared, which a
        cycle's preemptions bound."""
        for key in sorted(self._disruption_due):
            status, reason, msg = self._disruption_due[key]
            done = self._disruption_target(key, status, reason, msg)
            if done == "no answer":
                self.status_writes_due = True
                return False
            if done is None:
                self.status_writes_due = True
                continue
            self._disruption_due.pop(key, None)
            if done == "replaced":
                # (another pod of that name: the victim is gone, and its eviction, asked by
                # name, would fall on the new pod)
                self._drop_eviction(key)
        return True

    def _disruption_target(self, key: str, status: str, reason: str, msg: str) -> str | None:
        """Set the pod's ``DisruptionTarget`` condition, carrying the pod's uid (refused on
        another pod of that name). Whether the write is done with: ``"done"`` made, or
        refused for good (logged), ``"replaced"`` refused because another pod has that name
        now (422); None when it is to be tried again (:data:`RETRIED_STATUS`, 5xx),
        ``"no answer"`` when none came (tried again too)."""
        ns, name = key.split("/", 1)
        cond = {"type": "DisruptionTarget", "status": status, "reason": reason,
                "message": msg, "lastTransitionTime": _now_iso()}  # fmt: skip
        body: dict[str, Any] = {"status": {"conditions": [cond]}}
        uid = uid_of(self._pods.get(key, ({}, None))[0])
        if uid:
            body["metadata"] = {"uid": uid}
        try:
            self.api.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", body, kind="strategic")
        except ApiError as e:
            if e.status in RETRIED_STATUS or e.status >= 500:
                log.info("condition on %s: %s; tried again by the next cycle", key, e)
                return None
            # (404: gone; 403: no right to; 422: another pod of that name; 400, 405 and any
            # other: a request this server will never take, dropped with a warning)
            (log.info if e.status == 404 else log.warning)("condition on %s: %s", key, e)
            return "replaced" if e.status == 422 else "done"
        except OSError as e:
            log.info("condition on %s: %s; tried again by the next cycle", key, e)
            return "no answer"
        return "done"

    def _try_evict(self, key: str) -> bool:
        """Ask the eviction of victim ``key`` (or delete it), carrying its uid as a
        precondition: a pod made again under its name since (a StatefulSet's) is not the
        victim, and the API server refuses the call (409) as it would for a victim gone
        (404): either way the victim is gone, and so is its eviction. False when the call
        got no answer (the server may be down: the cycle asks no more evictions).

        An eviction first reads the pod: one of another uid under the victim's name is not
        asked at all. kube-apiserver's eviction handler deletes a pod that may go without
        asking its budget (:func:`_budget_skipped`: pending, ended, or being deleted) and
        retries that delete for 10 s (20 times, half a second apart) when a precondition
        refuses it, unless the call names a resourceVersion; for any other pod it takes one
        disruption from the pod's budget *before* the delete checks the preconditions, so a
        delete refused then spends the budget without evicting (until Kubernetes' disruption
        controller forgets it, 2 minutes later). So the call carries the resourceVersion read
        only when the pod as read is one the handler deletes without its budget: a
        replacement made after the read is refused at once, and a victim of that kind changed
        after the read (``409`` on the resourceVersion) is tried again by the next cycle. A
        running victim's call carries its uid alone: a write to it after the read (its
        kubelet's status update) does not refuse the eviction."""
        ns, name = key.split("/", 1)
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        uid = uid_of(self._pods.get(key, ({}, None))[0])
        options: dict[str, Any] = {"preconditions": {"uid": uid}} if uid else {}
        try:
            if self.settings.eviction_mode == "delete":
                self.api.delete(path, options or None)
            else:
                if uid:
                    now = self.api.get(path)
                    if uid_of(now) != uid:
                        log.info("evicting %s: another pod has its name now; the victim is gone",
                                 key)  # fmt: skip
                        self._drop_eviction(key)
                        return True
                    rv = str((now.get("metadata") or {}).get("resourceVersion") or "")
                    if rv and _budget_skipped(now):
                        options["preconditions"]["resourceVersion"] = rv
                gv = self.api.policy_version()
                body: dict[str, Any] = {
                    "apiVersion": gv,
                    "kind": "Eviction",
                    "metadata": {"name": name, "namespace": ns},
                }
                if options:
                    body["deleteOptions"] = options
                self.api.post(f"{path}/eviction", body)
        except ApiError as e:
            if e.status == 404 or _uid_mismatch(e):
                log.info("evicting %s: %s; the victim is gone", key, e)
                self._drop_eviction(key)
            elif _version_mismatch(e):
                log.info("evicting %s: %s; changed since read, tried again", key, e)
            elif e.status != 429:  # a PodDisruptionBudget says not now: retry next cycle
                said = str(e)
                if self._evict_said.get(key) != said:
                    self._evict_said[key] = said
                    log.warning("evicting %s: %s (tried again every cycle, said again if the "
                                "answer changes)", key, e)  # fmt: skip
                else:
                    log.debug("evicting %s: %s", key, e)
            return True
        except OSError as e:
            log.warning("evicting %s: %s", key, e)
            return False
        self._drop_eviction(key)
        return True

    def _drop_eviction(self, key: str) -> None:
        """Victim ``key`` is evicted, gone or spared: no eviction of it is left to ask."""
        self._evict.pop(key, None)
        self._evict_said.pop(key, None)
        self._mark.pop(key, None)

    def _remark(self, key: str, obj: Obj, st: PodState) -> None:
        """Victim ``key``, still to be evicted, seen (``obj``) running without the
        ``DisruptionTarget=True`` kant wrote: Kubernetes' disruption controller sets it back
        to False on a pod not deleted within 2 minutes (a budget held it longer). True is
        written again, and the eviction waits for it as for any True."""
        msg = self._mark.get(key)
        if (
            msg is None
            or key in self._disruption_due
            or st.deleting
            or st.phase in TERMINAL
            or _kant_marked(obj)
        ):
            return
        log.info("%s no longer carries DisruptionTarget=True: written again", key)
        self._disruption_due[key] = ("True", PREEMPTED_REASON, msg)

    def _stop(self, key: str, why: str) -> None:
        """Stop a pod kant released (not a preemption victim): delete it. It runs until it
        is gone (its grace period): its requests are held meanwhile."""
        ns, name = key.split("/", 1)
        self._dying.add(key)
        obj = self._pods.get(key, ({}, None))[0]
        if obj:
            self._hold(key, obj, pod_state(obj, self.settings))
        try:
            self.api.delete(f"/api/v1/namespaces/{ns}/pods/{name}")
            self._event(key, "Killing", why, "Normal")
        except ApiError as e:
            if e.status != 404:
                log.warning("stopping %s: %s", key, e)
        except OSError as e:
            log.warning("stopping %s: %s", key, e)

    def _set_unschedulable(self, key: str, msg: str, code: str, now: float) -> None:
        """``PodScheduled=False/Unschedulable`` saying ``msg``: written when the pod has none
        from this shim yet or the reason ``code`` changed, and for new wording alone at most
        once per ``conditionIntervalSeconds`` (a message that names the GPUs free would
        otherwise rewrite every waiting pod at every cycle that moves a GPU); a
        ``FailedScheduling`` event at most once per ``eventIntervalSeconds``."""
        had = self._condition.get(key)
        if (
            had is None
            or (
                had[0] != msg
                and (had[1] != code or now - had[2] >= self.settings.condition_interval_seconds)
            )
        ) and self._may_write():
            ns, name = key.split("/", 1)
            cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": msg, "lastTransitionTime": _now_iso()}  # fmt: skip
            try:
                self.api.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status",
                               {"status": {"conditions": [cond]}}, kind="strategic")  # fmt: skip
                self._condition[key] = (msg, code, now)
            except (ApiError, OSError) as e:
                log.info("condition on %s: %s", key, e)
        last = self._event_at.get(key)
        if (
            last is None or now - last >= self.settings.event_interval_seconds
        ) and self._may_write():
            self._event_at[key] = now
            self._event(key, "FailedScheduling", msg, "Warning")

    def _may_write(self) -> bool:
        """Whether this cycle may make one more condition, event or failures write (it counts it);
        when not, the write is left for the next cycle (``status_writes_due``)."""
        if self._writes_left is None:
            return True
        if self._writes_left > 0:
            self._writes_left -= 1
            return True
        self.status_writes_due = True
        return False

    def _event(self, key: str, reason: str, msg: str, kind: str) -> None:
        ns, name = key.split("/", 1)
        ts = _now_iso()
        obj = self._pods.get(key, ({}, None))[0]
        body = {
            "metadata": {"generateName": f"{name}.", "namespace": ns},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": name,
                               "uid": uid_of(obj)},
            "reason": reason, "message": msg[:1024], "type": kind,
            "source": {"component": self.settings.scheduler_name},
            "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
            "reportingComponent": self.settings.scheduler_name,
        }  # fmt: skip
        try:
            self.api.post(f"/api/v1/namespaces/{ns}/events", body)
        except (ApiError, OSError) as e:
            log.info("event on %s: %s", key, e)

    def _pod_group_status(self, jid: str, phase: str) -> None:
        rec = self._jobs.get(jid)
        if rec is None or rec.group is None or rec.group not in self._groups:
            return
        if self._pg_status.get(rec.group) == phase:
            return
        ns, name = rec.group.split("/", 1)
        status: dict[str, Any] = {"phase": phase}
        if phase == "Scheduled":
            status["scheduled"] = len(rec.bound)
        try:
            self.api.patch(f"/apis/{PODGROUP_API}/namespaces/{ns}/podgroups/{name}/status",
                           {"status": status})  # fmt: skip
            self._pg_status[rec.group] = phase
        except (ApiError, OSError) as e:
            log.info("PodGroup %s status: %s", rec.group, e)

    # ----------------------------------------------------------------- the loop

    def run(self, stop: threading.Event, *, ready: threading.Event | None = None) -> None:
        """List, then watch and schedule until ``stop`` is set: a cycle runs once events have
        been gathered for ``debounceSeconds`` (and at least every 5 s, for backoffs and
        evictions to retry; every second while evictions or status writes are left). A shim
        made with a ``quiet`` event logs what happens in this thread once that event is set
        at debug level (a run cut short: the failures of a server stopped under it)."""
        me = threading.get_ident()
        if self.quiet is not None:
            _QUIET[me] = self.quiet
        try:
            self._run(stop, ready)
        finally:
            _QUIET.pop(me, None)

    def _run(self, stop: threading.Event, ready: threading.Event | None) -> None:
        self.sync()
        events: queue_mod.Queue[tuple[str, str, Obj]] = queue_mod.Queue()
        # what sync took in: an object gone before a watcher's first list is DELETED then
        nodes = {f"default/{n.name}": {"metadata": {"name": n.name}} for n in
                 self.scheduler.cluster.nodes()}  # fmt: skip
        pods = {k: obj for k, (obj, _f) in self._pods.items()}
        namespaces = {f"default/{n}": {"metadata": {"name": n}} for n in self._namespaces}
        groups: dict[str, Obj] = {}
        for k in (*self._groups, *self._bad_groups):
            ns, name = k.split("/", 1)
            groups[k] = {"metadata": {"namespace": ns, "name": name}}
        watchers = [
            Watcher(self.api, "Node", "/api/v1/nodes", events, stop, seen=nodes),
            Watcher(self.api, "Pod", "/api/v1/pods", events, stop, seen=pods),
        ]
        if self._ns_read is not None:  # (else refused: see sync)
            path = "/api/v1/namespaces"
            watchers.append(Watcher(self.api, "Namespace", path, events, stop, seen=namespaces))
        # (watched whether the CRD is served now or not: installed later, it is listed then)
        watchers.append(
            Watcher(
                self.api,
                "PodGroup",
                f"/apis/{PODGROUP_API}/podgroups",
                events,
                stop,
                seen=groups,
                optional=True,
            )
        )
        for w in watchers:
            w.start()
        if ready is not None:
            ready.set()
        debounce = self.settings.debounce_seconds
        dirty_since: float | None = time.monotonic()
        last_cycle = 0.0
        try:
            while not stop.is_set():
                try:
                    kind, ev, obj = events.get(timeout=min(0.05, debounce) or 0.01)
                    self.handle(kind, ev, obj)
                    if dirty_since is None:
                        dirty_since = time.monotonic()
                    while True:  # drain what is there
                        kind, ev, obj = events.get_nowait()
                        self.handle(kind, ev, obj)
                except queue_mod.Empty:
                    pass
                self.reap()
                t = time.monotonic()
                due = dirty_since is not None and t - dirty_since >= debounce
                retry = self._evict or self.status_writes_due  # (a second apart)
                if due or t - last_cycle >= 5.0 or (retry and t - last_cycle >= 1.0):
                    self.cycle()
                    last_cycle = time.monotonic()
                    dirty_since = None
        finally:
            for w in watchers:
                w.stop()
            self.reap(wait=True)
            self._write_histories(budget=False)  # (what the last events changed)
            self._pool.shutdown(wait=True)


ABSENT_RESOURCE_RETRY_SECONDS = 10.0
"""How often a :class:`Watcher` of an optional resource the API server does not serve (a CRD
not installed) looks for it again."""


class Watcher(threading.Thread):
    """List + watch one resource, pushing ``(kind, event type, object)``; a relist on a
    ``410 Gone`` or a broken stream (objects seen again come as MODIFIED, objects gone as
    DELETED). An ``optional`` resource (a CRD's) the server does not serve (404) has no
    objects: those seen come as DELETED, and it is looked for again every
    :data:`ABSENT_RESOURCE_RETRY_SECONDS`, its objects listed once it is served."""

    def __init__(
        self,
        api: Api,
        kind: str,
        path: str,
        out: queue_mod.Queue[tuple[str, str, Obj]],
        stop: threading.Event,
        *,
        seen: Mapping[str, Obj] | None = None,
        optional: bool = False,
    ) -> None:
        """``seen``: the objects the shim's own list took in (by :func:`pod_key`); one gone by
        the watcher's first list comes as DELETED."""
        super().__init__(daemon=True, name=f"kant-watch-{kind}")
        self.api, self.kind, self.path, self.out, self._stop_ev = api, kind, path, out, stop
        self.optional = optional
        self._absent: int | None = None  # (the status said once, until it is listed)
        self._seen: dict[str, Obj] = dict(seen or {})
        self._lock = threading.Lock()
        self._close: Callable[[], None] | None = None  # closes the stream being read

    def stop(self) -> None:
        """Stop, closing the stream being read: an open watch would otherwise last until
        its timeout (and an API server being stopped waits for its open watches)."""
        self._stop_ev.set()
        with self._lock:
            close = self._close
        if close is not None:
            close()

    def _opened(self, close: Callable[[], None]) -> None:
        with self._lock:
            self._close = close
            stopped = self._stop_ev.is_set()
        if stopped:  # (stopped while this stream was being opened)
            close()

    def _relist(self) -> str:
        doc = self.api.get(self.path)
        self._absent = None
        fresh = {pod_key(o): o for o in doc.get("items", ())}
        for k in sorted(set(self._seen) - set(fresh)):
            self.out.put((self.kind, "DELETED", self._seen[k]))
        for k in sorted(fresh):
            self.out.put((self.kind, "MODIFIED", fresh[k]))
        self._seen = fresh
        return str((doc.get("metadata") or {}).get("resourceVersion", ""))

    def run(self) -> None:
        rv = ""
        first = True
        while not self._stop_ev.is_set():
            try:
                if first or not rv:
                    # the shim's sync() took the first list; start from its resourceVersion
                    rv = self._relist() if not first else self._list_quiet()
                    first = False
                for ev in self.api.watch(self.path, rv, timeout=60, opened=self._opened):
                    if self._stop_ev.is_set():
                        return
                    typ, obj = ev.get("type"), ev.get("object") or {}
                    if typ == "ERROR":
                        rv = ""
                        break
                    rv = str((obj.get("metadata") or {}).get("resourceVersion", rv))
                    if typ == "BOOKMARK":
                        continue
                    k = pod_key(obj)
                    if typ == "DELETED":
                        self._seen.pop(k, None)
                    else:
                        self._seen[k] = obj
                    self.out.put((self.kind, str(typ), obj))
            except Exception as e:  # (an API error, a broken stream, a bad document)
                if self._stop_ev.is_set():
                    return
                rv = ""
                if self.optional and isinstance(e, ApiError) and e.status in (403, 404):
                    self._not_served(e)
                    self._stop_ev.wait(ABSENT_RESOURCE_RETRY_SECONDS)
                    continue
                log.info("watch %s: %s; relisting", self.path, e)
                time.sleep(0.5)

    def _not_served(self, e: ApiError) -> None:
        """The resource is not served (404: its CRD is not installed, or was deleted), or the
        shim may not read it (403: its ClusterRole, written for a cluster without the CRD):
        none of its objects exists for the shim."""
        if self._absent != e.status:
            self._absent = e.status
            why = ("not served (its CRD is not installed)" if e.status == 404 else
                   f"the shim may not list it ({e.message}: its ClusterRole)")  # fmt: skip
            (log.info if e.status == 404 else log.warning)(
                "watch %s: %s; looked for again every %g s", self.path, why,
                ABSENT_RESOURCE_RETRY_SECONDS,
            )  # fmt: skip
        for k in sorted(self._seen):
            self.out.put((self.kind, "DELETED", self._seen[k]))
        self._seen = {}

    def _list_quiet(self) -> str:
        doc = self.api.get(self.path)
        self._absent = None
        fresh = {pod_key(o): o for o in doc.get("items", ())}
        for k in sorted(set(self._seen) - set(fresh)):  # gone since the shim's list
            self.out.put((self.kind, "DELETED", self._seen[k]))
        self._seen = fresh
        # anything that changed between the shim's list and this one comes as MODIFIED
        for k in sorted(self._seen):
            self.out.put((self.kind, "MODIFIED", self._seen[k]))
        return str((doc.get("metadata") or {}).get("resourceVersion", ""))


_WRITTEN = frozenset({EstimateStatus.EXPECTED, EstimateStatus.NEVER,
                      EstimateStatus.UNKNOWN_END, EstimateStatus.BEYOND_HORIZON})  # fmt: skip
"""The statuses written on a waiting pod (a job asked for is PENDING: never RUNNING nor
ENDED)."""


def _steady(carried: str | None, value: str, at: float | None, now: float) -> bool:
    """Whether a pod that carries ``carried`` keeps it, the estimates of time ``now`` giving
    ``value`` (time ``at``, None for a status): the same value; or both times, the new one
    less than the slack (:data:`EXPECTED_START_SLACK_SECONDS`) from the carried one, either
    way; or the carried time past while the new one is less than the slack ahead of now (the
    estimate says "now": a job waiting on pods that run past their expected end is expected
    "now" again at every estimates). A change of the slack or more, or to or from a status,
    is written."""
    slack = EXPECTED_START_SLACK_SECONDS
    if carried == value:
        return True
    if carried is None or at is None:
        return False
    try:
        was = datetime.fromisoformat(carried).timestamp()
    except ValueError:
        return False  # (not a time: a status, or a hand edit)
    if abs(at - was) < slack:
        return True
    return was <= now and at < now + slack


def _base(f: PodFacts) -> str:
    """The key of what becomes one kant job: a gang, or a lone pod."""
    return f"group:{f.group}" if f.group is not None else f"pod:{f.key}"


def _terms(f: PodFacts) -> tuple[Any, ...]:
    """The pod terms of a pod's facts: what the namespaces' labels change."""
    return (f.pod_affinity, f.pod_anti_affinity, f.pod_preferences)


SPARED_REASON = "PreemptionAbandoned"
"""The ``reason`` of a victim's ``DisruptionTarget`` condition set back to False: kant gave
its eviction up (:meth:`Shim._spare_victims`)."""

RETRIED_STATUS: frozenset[int] = frozenset({401, 408, 409, 429})
"""The answers below 500 to a ``DisruptionTarget`` write that leave it due, tried again by the
next cycle: 401 (the request was not authenticated: an authentication webhook down, a token
being rotated; every call fails then, and the write waits with the rest), 408 (a timeout), 409
(a conflict), 429 (the server is busy). Every 5xx too; any other answer drops the write
(404, 403, 422, and with a warning 400, 405 and the rest: a request the server will not
take however often it is sent)."""

VICTIM_MARGIN: float = 30.0
"""Seconds past the end of a previous shim's victim's grace period after which a restarted
shim stops holding preemption back for it (:meth:`Shim._hold_preemption`)."""


RESTART_SPARED_MESSAGE = "kant: eviction abandoned: the scheduler restarted and does not evict it"
"""The message of the ``DisruptionTarget=False`` a shim starting writes on a running pod a
previous shim marked as its victim and did not evict (:meth:`Shim.sync`)."""


@attrs.frozen
class _Needs:
    """What kant's pods bound to a node need of it, as :func:`_needs` adds them up: one more
    than the highest GPU and NIC index their bindings recorded (``gpu_index``,
    ``nic_index``), and the GPUs, NICs, CPU milli and memory MiB they request together."""

    gpu_index: int = 0
    nic_index: int = 0
    gpus: int = 0
    nics: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0

    def need(self) -> NodeNeed:
        """Of each device, the larger of the index and the request: the devices a binding
        recorded (where it is taken back), and room for what they all request (a pod whose
        binding cannot be taken back is held with its requests); CPU and memory, what they
        request."""
        return NodeNeed(gpus=max(self.gpu_index, self.gpus), nics=max(self.nic_index, self.nics),
                        cpu_milli=self.cpu_milli, memory_mib=self.memory_mib)  # fmt: skip


def _needs(pod: Obj, settings: K8sSettings, so_far: _Needs) -> _Needs:
    """``so_far`` with pod ``pod``, one of kant's bound to a node a restarted shim takes in
    only to count them (:meth:`Shim._take_left_out_with_kants_pods`): its recorded devices
    and its requests (a shared GPU counted as one). What is not readable adds nothing.
    Never raises."""
    gpu_index, nic_index = so_far.gpu_index, so_far.nic_index
    try:
        rec = recorded_binding(pod)
    except KantError:
        rec = None
    if rec is not None:
        gpu_index = max([gpu_index, *(g + 1 for g in rec[1])])
        nic_index = max([nic_index, *(n + 1 for n in rec[2])])
    so_far = attrs.evolve(so_far, gpu_index=gpu_index, nic_index=nic_index)
    try:
        r = pod_resources(pod, settings, shares=False)
    except KantError:
        return so_far
    return attrs.evolve(so_far, gpus=so_far.gpus + r.gpus, nics=so_far.nics + r.rdma_nics,
                        cpu_milli=so_far.cpu_milli + r.cpu_milli,
                        memory_mib=so_far.memory_mib + r.memory_mib)  # fmt: skip


def _kants_node(pod: Obj, settings: K8sSettings) -> str | None:
    """The node pod ``pod`` runs on when it is a pod kant bound (it carries kant's binding
    annotations) that has not ended and is not being deleted: one a starting shim takes
    back (:meth:`Shim.adopt`; or holds, when it cannot); else None."""
    st = pod_state(pod, settings)
    if (
        st.ours
        and st.node is not None
        and st.phase not in TERMINAL
        and not st.deleting
        and POD_ID_ANNOTATION in annotations_of(pod)
    ):
        return st.node
    return None


def _kants_pods(pods: Iterable[Obj], settings: K8sSettings) -> dict[str, list[Obj]]:
    """Node -> the pods of ``pods`` kant bound that run there (:func:`_kants_node`), as
    listed: what a starting shim orders nodes by (:func:`_start_order`) and reads a node it
    takes in only to count them as (:meth:`Shim._take_left_out_with_kants_pods`), worked
    out once. O(pods)."""
    out: dict[str, list[Obj]] = {}
    for p in pods:
        node = _kants_node(p, settings)
        if node is not None:
            out.setdefault(node, []).append(p)
    return out


def _start_order(nodes: Iterable[Obj], ran: Container[str]) -> list[Obj]:
    """Nodes ``nodes`` in the order a starting shim takes them in (:meth:`Shim.sync`): those
    named in ``ran``, where pods kant bound run (:func:`_kants_pods`), first, then the
    others, each by name, whatever order the API server listed them in. Of two nodes whose
    labels contradict each other (one leaf under two spines), the first is taken into the
    fabric and the other refused (:meth:`Shim._take_node`; counted out of the fabric,
    cordoned, while kant's pods run there, :meth:`Shim._take_left_out_with_kants_pods`), the
    first even when kant takes it in only to count kant's pods there (past 64 GPUs): the
    node kant's pods run on is one a shim before had taken, and placed them by; keeping it
    keeps them where they were placed, and leaves out a node none of kant's pods needs.
    The order is also that of the nodes' slots and of the fabric's ids (leaves, spines...,
    as the nodes taken first name them), which placement breaks ties by. O(nodes log
    nodes)."""

    def key(n: Obj) -> tuple[bool, str]:
        name = str((n.get("metadata") or {}).get("name"))
        return name not in ran, name

    return sorted(nodes, key=key)


def _kant_victim(pod: Obj, settings: K8sSettings) -> bool:
    """Whether ``pod`` is a kant pod a kant shim preempted that is still terminating (its
    ``DisruptionTarget`` condition says so, :meth:`Shim._disrupt`)."""
    st = pod_state(pod, settings)
    return st.ours and st.deleting and st.phase not in TERMINAL and _kant_marked(pod)


def _kant_spared(pod: Obj, settings: K8sSettings) -> bool:
    """Whether ``pod`` is a kant pod that a kant shim marked as its victim
    (``DisruptionTarget=True``) and that runs on, not being deleted."""
    st = pod_state(pod, settings)
    return st.ours and not st.deleting and st.phase not in TERMINAL and _kant_marked(pod)


def _kant_marked(pod: Obj) -> bool:
    """Whether ``pod``'s ``DisruptionTarget`` condition is True as kant writes it for a
    victim (:meth:`Shim._disrupt`)."""
    return any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") == PREEMPTED_REASON
        and str(c.get("message", "")).startswith(PREEMPTED_PREFIX)
        for c in (pod.get("status") or {}).get("conditions") or ()
        if isinstance(c, Mapping)
    )


def _budget_skipped(pod: Obj) -> bool:
    """Whether kube-apiserver's eviction handler deletes ``pod`` (as read) without asking its
    PodDisruptionBudget: its phase is Pending, Succeeded or Failed, or it has a
    deletionTimestamp. Only for such a pod does the handler retry a refused delete, and
    only for it is a resourceVersion precondition free: for any other pod the handler spends
    the budget before the delete checks the preconditions."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    return phase in ("Pending", "Succeeded", "Failed") or bool(deleting)


def _uid_mismatch(e: ApiError) -> bool:
    """Whether ``e`` refuses a call whose uid precondition names another pod than the one
    under that name now (409: the pod was deleted and made again)."""
    return _precondition_refused(e, "uid")


def _version_mismatch(e: ApiError) -> bool:
    """Whether ``e`` refuses a call whose resourceVersion precondition names another version
    of the object than the one stored now (409: it changed since it was read)."""
    return _precondition_refused(e, "resourceversion")


def _precondition_refused(e: ApiError, field: str) -> bool:
    """Whether ``e`` is the API server's 409 for a ``field`` precondition (``uid`` or
    ``resourceversion``) that the object does not meet. Its registry words it "the UID in
    the precondition (...) does not match the UID in record (...)", its storage layer
    "Precondition failed: UID in precondition: ...": a name merely containing the field's
    name (a pod called ``fluid-0``) is not read as one."""
    msg = e.message.lower()
    return e.status == 409 and (
        f"{field} in the precondition" in msg or f"{field} in precondition" in msg
    )


def _bound_by(pod: Obj, b: Binding, settings: K8sSettings) -> bool:
    """Whether ``pod`` (as the API server has it) is bound by binding ``b``: on its node,
    carrying its ``kant.io/pod-id``, not ended."""
    st = pod_state(pod, settings)
    return (
        st.node == b.node
        and st.phase not in TERMINAL
        and annotations_of(pod).get(POD_ID_ANNOTATION) == str(b.pod)
    )


def _namespace_key(pod: Obj) -> str:
    """The namespace of ``pod`` (as in its key, ``namespace/name``)."""
    return pod_key(pod).split("/", 1)[0]


def _namespace_of(job: str) -> str:
    """The namespace in a kant job id (``namespace.group#n`` or ``namespace..name#n``: a
    namespace has no dot)."""
    return job.split(".", 1)[0]


def shim_for(api: Api, config: KantConfig | None = None, **kw: Any) -> Shim:
    """A :class:`Shim` (a convenience for scripts)."""
    return Shim(api, config, **kw)


__all__ = ["PODGROUP_API", "Shim", "Watcher", "shim_for"]
