"""The simulator with a grace period: a nominated preemptor allowed on several GPU models
starts on what its victims freed, though quota would now send it to another model."""

from __future__ import annotations

from kant.admission import Admitter, Quota
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Queue
from kant.scheduler import Scheduler
from kant.sim import SimConfig, Simulator
from kant.testing import ClusterBuilder, job


def _scheduler(h100_nodes: int, quotas: list[Quota]) -> Scheduler:
    """One 4-GPU A100 node and ``h100_nodes`` 8-GPU H100 nodes under ``quotas``, with
    preemption."""
    cluster = (
        ClusterBuilder()
        .leaf("lfa", nodes=1, model="A100", gpus=4)
        .leaf("lfh", nodes=h100_nodes, model="H100", gpus=8)
        .build()
    )
    return Scheduler(cluster, queue=Queue(), admitter=Admitter(quotas),
                     placer=Placer("ebinpack"), preemption=PreemptionPolicy())  # fmt: skip


def test_a_multi_model_preemptor_starts_when_its_victims_are_gone_and_evicts_each_once() -> None:
    # The scenario of tests/qsch/test_nomination_models.py, simulated with victims keeping
    # their GPUs 30 s: p (priority 10, 8 pods on A100|H100) evicts lo's 4 A100 pods at 10;
    # c1's reclaim of 8 of b1's H100 pods at 20 leaves a room to borrow 8 H100 GPUs, none
    # free. Before, p, sent to H100 by quota, gave up the A100 GPUs at 40, lo started again
    # there and p evicted it a second time, then waited until 3000 (b1 and lo ending); now p
    # starts 4 pods at 40 on the GPUs lo freed and lo is evicted once.
    quotas = [
        Quota.gpus("d", "A100", 4),
        Quota.gpus("b", "H100", 8),
        Quota.gpus("c", "H100", 16, lending_limit=8),
    ]
    s = _scheduler(h100_nodes=2, quotas=quotas)
    jobs = [
        job("b1", gpus=1, replicas=16, gang=False, tenant="b", models="H100", runtime=3000),
        job("lo", gpus=1, replicas=4, gang=False, tenant="a", models="A100", runtime=3000),
        job("p", gpus=1, replicas=8, gang=False, tenant="a", priority=10, models="A100|H100",
            submitted_at=10, runtime=500),
        job("c1", gpus=1, replicas=8, gang=False, tenant="c", models="H100", submitted_at=20,
            runtime=3000),
    ]  # fmt: skip
    res = Simulator(s, jobs, SimConfig(tick=0.0, grace_period=30.0)).run()
    assert res.record("lo").preempted == 1
    assert res.record("p").started_at == 40.0
    assert res.summary.evicted_pods == 4 + 8  # lo's pods once, 8 of b1's for c1
    assert res.summary.jobs["finished"] == 4


def test_a_multi_model_preemptor_starts_at_once_where_quota_chooses_when_gpus_free_up() -> None:
    # One 4-GPU A100 node, one 8-GPU H100 node; d lends 4 A100 GPUs, a has 8 H100 nominal.
    # p (a, priority 10, 8 pods on A100|H100) evicts a's lo from the A100 GPUs at 10, while
    # a's h holds the H100 node; h ends at 20, lo's pods go at 40. p starts all 8 pods on
    # H100 at 20, within a's nominal quota, and d's dj later reclaims its A100 GPUs from lo,
    # never from p. Holding p on its nominated A100 GPUs instead left the H100 GPUs idle
    # until 40, started half of p borrowed on A100, and dj's reclaim evicted p there.
    s = _scheduler(h100_nodes=1, quotas=[Quota.gpus("d", "A100", 4), Quota.gpus("a", "H100", 8)])
    jobs = [
        job("h", gpus=1, replicas=8, gang=False, tenant="a", models="H100", priority=10,
            runtime=20),
        job("lo", gpus=1, replicas=4, gang=False, tenant="a", models="A100", runtime=3000),
        job("p", gpus=1, replicas=8, gang=False, tenant="a", priority=10, models="A100|H100",
            submitted_at=10, runtime=500),
        job("dj", gpus=1, replicas=4, gang=False, tenant="d", models="A100", submitted_at=100,
            runtime=100),
    ]  # fmt: skip
    res = Simulator(s, jobs, SimConfig(tick=0.0, grace_period=30.0)).run()
    assert res.record("p").started_at == 20.0 and res.record("p").preempted == 0
    assert res.record("lo").preempted == 2  # by p at 10, by dj's reclaim at 100
    assert res.summary.jobs["finished"] == 4
