"""Two-tier admission: readiness before placement, pools, cross-pool joint admission,
job-level for gangs and pod-level otherwise."""

from __future__ import annotations

import pytest

from kant.admission import Quota
from kant.model import Binding, Job, NodeSpec, PodId, ReasonCode, Resources, Role, Tier
from kant.queueing import JobPhase
from kant.testing import ClusterBuilder, job, node

from .conftest import nodes, pod, scheduler


def _cross_pool(id: str, *, prefill: int, decode: int, tenant: str = "default") -> Job:
    return Job(
        id=id,
        tenant=tenant,
        kind="inference",
        roles=(
            Role(name="prefill", replicas=prefill, resources=Resources(gpus=8), gpu_models="H100"),
            Role(name="decode", replicas=decode, resources=Resources(gpus=8), gpu_models="A100"),
        ),
    )


def _mixed() -> ClusterBuilder:
    return ClusterBuilder().leaf("h", nodes=2, model="H100").leaf("a", nodes=1, model="A100")


def test_an_unknown_gpu_model_is_a_no_pool_reason_not_a_crash() -> None:
    s = scheduler(nodes(1), policy="strict-fifo")
    s.submit(job("ghost", gpus=1, models="B200"), now=0)
    s.submit(job("real", gpus=1, submitted_at=1), now=1)
    r = s.step(now=2)
    assert r.pending["ghost"].code is ReasonCode.NO_POOL
    assert "B200" in r.pending["ghost"].message
    assert r.placed == ("real",)  # unresolvable jobs do not block even Strict FIFO


@pytest.mark.parametrize(
    ("request_gpus", "replicas", "code"),
    [
        pytest.param(8, 2, ReasonCode.INSUFFICIENT_CAPACITY, id="not enough free GPUs in the pool"),
        pytest.param(8, 1, ReasonCode.NO_FIT, id="free GPUs but no node with room for one pod"),
    ],
)
def test_readiness_rejects_before_any_placement_is_tried(
    request_gpus: int, replicas: int, code: ReasonCode
) -> None:
    cluster = nodes(2)
    for k in range(2):  # half of each node is held by something kant does not schedule
        cluster.bind(Binding(pod=PodId(job="other", role="w", index=k), node=f"lf0-n{k}",
                             gpus=(0, 1, 2, 3)))  # fmt: skip
    s = scheduler(cluster)
    s.submit(job("big", gpus=request_gpus, replicas=replicas), now=0)
    r = s.step(now=1)
    assert r.pending["big"].code is code
    assert r.stats.placement_attempts == 0


def test_a_required_leaf_wish_needs_one_leaf_with_room() -> None:
    cluster = nodes(6, leaves=2)
    for k in range(2):  # one node of each leaf is held by something kant does not schedule
        cluster.bind(Binding(pod=PodId(job="other", role="w", index=k), node=f"lf{k}-n0",
                             gpus=tuple(range(8))))  # fmt: skip
    s = scheduler(cluster)
    s.submit(job("tight", gpus=8, replicas=3, tier=Tier.LEAF, required=True), now=0)
    r = s.step(now=1)
    assert r.pending["tight"].code is ReasonCode.TOPOLOGY
    assert r.stats.placement_attempts == 0
    s.submit(job("loose", gpus=8, replicas=3, tier=Tier.SPINE, required=True), now=2)
    assert s.step(now=3).placed == ("loose",)


def test_a_cross_pool_job_is_admitted_for_all_roles_or_none() -> None:
    cluster = _mixed().build()
    other = PodId(job="other", role="w", index=0)
    cluster.bind(Binding(pod=other, node="a-n0", gpus=(0,)))  # the A100 node is not all free
    s = scheduler(cluster)
    s.submit(_cross_pool("too-much-decode", prefill=2, decode=1), now=0)
    r = s.step(now=1)
    assert (
        r.bindings == () and r.pending["too-much-decode"].code is ReasonCode.INSUFFICIENT_CAPACITY
    )
    s.cancel("too-much-decode", now=2)
    cluster.release(other)
    s.submit(_cross_pool("fits", prefill=2, decode=1, tenant="t"), now=2)
    r = s.step(now=3)
    assert r.placed == ("fits",)
    models = {b.pod.role: s.cluster.node(b.node).gpu_model for b in r.bindings}
    assert models == {"prefill": "H100", "decode": "A100"}


def test_cross_pool_quota_admits_all_roles_or_none() -> None:
    s = scheduler(
        _mixed().build(),
        quotas=[Quota.gpus("t", "H100", 16), Quota.gpus("t", "A100", 8)],
        modes={"t": "isolated"},
    )
    s.submit(job("fill", gpus=4, models="A100", tenant="t"), now=0)
    s.step(now=0)
    s.submit(_cross_pool("x", prefill=1, decode=1, tenant="t"), now=0)
    r = s.step(now=1)
    assert r.bindings == ()
    assert r.pending["x"].code is ReasonCode.QUOTA_EXCEEDED and "A100" in r.pending["x"].message
    assert s.admitter.usage() == {("t", "A100"): 4000}


def test_a_pod_level_job_is_admitted_and_placed_pod_by_pod() -> None:
    s = scheduler(nodes(1))
    s.submit(job("svc", gpus=4, replicas=4, gang=False, kind="inference"), now=0)
    r = s.step(now=1)
    assert len(r.bindings) == 2 and r.placed == ("svc",)
    assert r.pending["svc"].code in (ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.NO_FIT)
    st = s.queue.status("svc")
    assert st.phase is JobPhase.RUNNING and len(st.running) == 2
    # the remaining pods wait in the queue and go when room appears
    s.pod_finished(st.running[0], now=2)
    assert len(s.step(now=3).bindings) == 1


def test_pod_level_quota_admits_as_many_pods_as_fit() -> None:
    s = scheduler(nodes(2), quotas=[Quota.gpus("t", "H100", 8)], modes={"t": "isolated"})
    s.submit(job("svc", gpus=4, replicas=4, gang=False, tenant="t"), now=0)
    r = s.step(now=1)
    assert len(r.bindings) == 2
    assert r.pending["svc"].code is ReasonCode.QUOTA_EXCEEDED


def test_a_gang_is_admitted_whole_or_not_at_all() -> None:
    s = scheduler(nodes(3), quotas=[Quota.gpus("t", "H100", 16)], modes={"t": "isolated"})
    s.submit(job("first", gpus=4, tenant="t"), now=0)
    s.step(now=0)
    s.submit(job("g", gpus=4, replicas=4, tenant="t"), now=0)
    r = s.step(now=1)
    assert r.bindings == () and r.pending["g"].code is ReasonCode.QUOTA_EXCEEDED


def test_a_role_open_to_any_model_stays_open_when_quota_admits_every_live_model() -> None:
    """Narrowing it to every live model would give the same candidate nodes: the job is not
    copied. Admitted on only some of them (or with the live models unknown), it is narrowed."""
    from kant.admission.pools import restricted
    from kant.admission.quota import QuotaDecision
    from kant.testing.builders import job as make_job

    j = make_job("any", gpus=1, replicas=2)
    role = j.roles[0].name

    def dec(*models: str) -> QuotaDecision:
        return QuotaDecision(ok=True, pods=j.pods(), models={role: models}, within_nominal=True)

    assert restricted(j, dec("A", "B"), {"A": 0, "B": 1}) is j
    narrowed = restricted(j, dec("A"), {"A": 0, "B": 1})
    assert narrowed.roles[0].gpu_models == frozenset({"A"})
    assert restricted(j, dec("A", "B")).roles[0].gpu_models == frozenset({"A", "B"})
    picky = make_job("picky", gpus=1, models="A")
    picky_dec = QuotaDecision(
        ok=True, pods=picky.pods(), models={picky.roles[0].name: ("A",)}, within_nominal=True
    )
    assert restricted(picky, picky_dec, {"A": 0}) is picky


def test_the_live_pools_follow_nodes_that_come_and_go_between_cycles() -> None:
    s = scheduler(nodes(1))
    s.submit(job("on-b200", gpus=8, models="B200"), now=0)
    assert s.step(now=1).pending["on-b200"].code is ReasonCode.NO_POOL
    # a node of a new model: the next cycle sees its pool (what the cycles keep about the
    # pools holds only while no node comes or goes)
    s.cluster.add_node(NodeSpec(name="b0", gpus=8, gpu_model="B200", leaf="lb"))
    assert s.step(now=2).placed == ("on-b200",)
    s.pod_finished(PodId(job="on-b200", role="worker", index=0), now=3)
    s.submit(job("again", gpus=8, models="B200"), now=4)
    s.cluster.remove_node("b0")  # the pool's only node: no such pool any more
    assert s.step(now=5).pending["again"].code is ReasonCode.NO_POOL


def _two_hbds(*, plain: int = 0) -> ClusterBuilder:
    """Two HBDs of four DGX nodes (``h<k>-<i>``, HBD ``hbd<k>`` in leaf ``lf<k>``), and
    ``plain`` nodes outside any HBD in leaf ``lfp``."""
    b = ClusterBuilder()
    for k in range(2):
        for i in range(4):
            b.add(node(f"h{k}-{i}", leaf=f"lf{k}", spine="sp0", superspine="ss0", hbd=f"hbd{k}"))
    for i in range(plain):
        b.add(node(f"p{i}", leaf="lfp", spine="sp0", superspine="ss0"))
    return b


def test_a_job_requiring_hbds_but_larger_than_one_hbd_is_scheduled_on_two_whole_hbds() -> None:
    s = scheduler(_two_hbds().build())
    s.submit(job("ep", gpus=8, replicas=6, tier=Tier.HBD, required=True), now=0)
    r = s.step(now=1)
    assert r.placed == ("ep",)
    assert {s.cluster.node(b.node).hbd for b in r.bindings} == {"hbd0", "hbd1"}


def test_a_pod_level_job_requiring_an_hbd_takes_another_hbd_when_its_own_is_full() -> None:
    """Four 8-GPU pods, pod by pod, on two HBDs of two nodes and two plain nodes: the first
    HBD first, then the second (as a gang takes several whole HBDs), never a plain node."""
    b = ClusterBuilder()
    for k in range(2):
        for i in range(2):
            b.add(node(f"h{k}-{i}", leaf=f"lf{k}", spine="sp0", superspine="ss0", hbd=f"hbd{k}"))
    for i in range(2):
        b.add(node(f"p{i}", leaf="lfp", spine="sp0", superspine="ss0"))
    s = scheduler(b.build())
    s.submit(job("pl", gpus=8, replicas=4, gang=False, tier=Tier.HBD, required=True), now=0)
    r = s.step(now=1)
    where = {bb.pod.index: bb.node for bb in r.bindings}
    assert where == {0: "h0-0", 1: "h0-1", 2: "h1-0", 3: "h1-1"}
    # and in a later cycle: the first HBD is full, the second busy until "other" ends
    cluster = b.build()
    for k, name in enumerate(("h1-0", "h1-1")):
        cluster.bind(Binding(pod=pod("other", k), node=name, gpus=tuple(range(8))))
    s = scheduler(cluster)
    s.submit(job("pl", gpus=8, replicas=4, gang=False, tier=Tier.HBD, required=True), now=0)
    assert {bb.node for bb in s.step(now=1).bindings} == {"h0-0", "h0-1"}
    cluster.release_many([pod("other", 0), pod("other", 1)])  # not the scheduler's pods
    assert {bb.node for bb in s.step(now=3).bindings} == {"h1-0", "h1-1"}


def test_a_job_requiring_hbds_waits_for_room_in_the_hbds_not_in_one_hbd() -> None:
    cluster = _two_hbds(plain=2).build()  # the pool has room for 7 pods, its HBDs for 5
    for k, name in enumerate(("h0-0", "h1-0", "h1-1")):
        cluster.bind(Binding(pod=PodId(job="other", role="w", index=k), node=name,
                             gpus=tuple(range(8))))  # fmt: skip
    s = scheduler(cluster)
    s.submit(job("ep", gpus=8, replicas=6, tier=Tier.HBD, required=True), now=0)
    r = s.step(now=1)
    assert r.pending["ep"].code is ReasonCode.TOPOLOGY
    assert r.stats.placement_attempts == 0  # readiness says so: 40 GPUs free in the HBDs
    s.submit(job("ep5", gpus=8, replicas=5, tier=Tier.HBD, required=True), now=2)
    r = s.step(now=3)
    assert r.placed == ("ep5",)
    assert all(s.cluster.node(b.node).hbd is not None for b in r.bindings)


def test_a_job_requiring_an_hbd_on_a_pool_without_hbd_nodes_can_never_fit() -> None:
    s = scheduler(nodes(2))
    for replicas in (1, 2):
        ep = job(f"ep{replicas}", gpus=4, replicas=replicas, tier=Tier.HBD, required=True)
        s.submit(ep, now=0)
    r = s.step(now=1)
    assert r.placed == ()  # never on a plain node
    for jid in ("ep1", "ep2"):
        assert r.pending[jid].code is ReasonCode.UNSATISFIABLE, jid


def test_a_pod_requiring_an_hbd_but_larger_than_any_hbd_node_can_never_fit() -> None:
    """HBD nodes of 4 GPUs, plain nodes of 8: an 8-GPU pod (or a gang of two) that must stay
    on HBD nodes can never run, and does not hold Strict FIFO's line."""
    b = ClusterBuilder()
    for i in range(4):
        b.add(node(f"h{i}", gpus=4, leaf="lf0", spine="sp0", superspine="ss0", hbd="hbd0"))
    for i in range(4):
        b.add(node(f"p{i}", gpus=8, leaf="lf1", spine="sp0", superspine="ss0"))
    s = scheduler(b.build(), policy="strict-fifo")
    s.submit(job("ep", gpus=8, tier=Tier.HBD, required=True), now=0)
    s.submit(job("ep2", gpus=8, replicas=2, tier=Tier.HBD, required=True), now=0)
    s.submit(job("small", gpus=1, submitted_at=1), now=1)
    r = s.step(now=2)
    for jid in ("ep", "ep2"):
        assert r.pending[jid].code is ReasonCode.UNSATISFIABLE, r.pending[jid]
        assert "hbd" in r.pending[jid].message
    assert r.placed == ("small",)


def test_a_job_requiring_an_hbd_is_not_ready_while_only_another_pools_hbd_is_free() -> None:
    """The H100 HBD is full and an A100 HBD free: the H100 job waits (TOPOLOGY) without a
    placement attempt."""
    b = ClusterBuilder()
    for i in range(2):
        b.add(node(f"h{i}", leaf="lf0", spine="sp0", superspine="ss0", hbd="hbdH"))
        b.add(node(f"a{i}", leaf="lf1", spine="sp0", superspine="ss0", hbd="hbdA", model="A100"))
        b.add(node(f"p{i}", leaf="lf2", spine="sp0", superspine="ss0"))
    cluster = b.build()
    for i in range(2):
        cluster.bind(Binding(pod=PodId(job="r", role="w", index=i), node=f"h{i}",
                             gpus=tuple(range(8))))  # fmt: skip
    s = scheduler(cluster)
    s.submit(job("ep", gpus=8, replicas=2, tier=Tier.HBD, required=True, models="H100"), now=0)
    r = s.step(now=1)
    assert r.pending["ep"].code is ReasonCode.TOPOLOGY
    assert r.stats.placement_attempts == 0


def test_a_job_requiring_an_hbd_waits_with_a_topology_reason_while_its_hbds_are_full() -> None:
    cluster = _two_hbds(plain=1).build()
    for k in range(2):
        for i in range(4):
            cluster.bind(Binding(pod=PodId(job="busy", role="w", index=4 * k + i),
                                 node=f"h{k}-{i}", gpus=tuple(range(8))))  # fmt: skip
    s = scheduler(cluster)
    s.submit(job("ep", gpus=4, tier=Tier.HBD, required=True), now=0)
    r = s.step(now=1)
    assert r.placed == () and r.pending["ep"].code is ReasonCode.TOPOLOGY  # p0 is free
