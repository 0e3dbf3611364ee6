"""Reclaim victims: where a reclaim's units count (quota anywhere, room only on the nodes the
preemptor may use)."""

from __future__ import annotations

import pytest

from kant.admission import Quota
from kant.cycle import CycleResult
from kant.model import NodeSelector
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, scheduler

R0 = NodeSelector.labels(rack="r0")
R1 = NodeSelector.labels(rack="r1")


def _racks(r0_nodes: int = 2) -> Scheduler:
    """Rack r0 (leaf lf0) and rack r1 (leaf lf1, 2 nodes) of 8-GPU nodes; tenants a and b
    with 8 GPUs nominal each (one cohort of 16)."""
    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=r0_nodes, labels={"rack": "r0"})
        .leaf("lf1", nodes=2, labels={"rack": "r1"})
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)]
    return scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())


def _start(s: Scheduler, t: float, jid: str, **kw: object) -> None:
    s.submit(job(jid, submitted_at=t, **kw), now=t)  # type: ignore[arg-type]
    r = s.step(now=t)
    assert r.placed == (jid,), r.pending


def _victims(r: CycleResult) -> list[tuple[str, str, str]]:
    return [(v.job, v.reason.value, v.preemptor) for v in r.victims]


def _nodes(r: CycleResult, jid: str) -> set[str]:
    return {b.node for n in r.nominations if n.job == jid for b in n.bindings}


@pytest.mark.parametrize(
    ("r0_nodes", "victims"),
    [
        pytest.param(
            2, [("a-small", "reclaim", "p")],
            id="a reclaim held to one rack takes a small unit on another rack for quota "
            "alone rather than the large unit on its own rack",
        ),
        pytest.param(
            1, [("a-big", "reclaim", "p")],
            id="room still comes only from the nodes the preemptor may use: the unit on "
            "another rack frees quota but no room there, and is spared",
        ),
    ],
)  # fmt: skip
def test_a_reclaim_counts_units_anywhere_toward_quota_and_on_its_nodes_toward_room(
    r0_nodes: int, victims: list[tuple[str, str, str]]
) -> None:
    # b runs 4 GPUs on r1; a runs 2 GPUs on r1, an 8-GPU gang on r0 and, newest (first in
    # victim order), 2 more GPUs on r1: the cohort's 16 are in use, a borrows 4 (and still
    # does once its newest unit is gone). p (b, held to r0) needs 2 GPUs of quota; with two
    # r0 nodes the second has room for it, with one it has none
    s = _racks(r0_nodes)
    _start(s, 0, "b0", gpus=4, tenant="b", selector=R1)
    _start(s, 1, "a-old", gpus=2, tenant="a", selector=R1)
    _start(s, 2, "a-big", gpus=4, replicas=2, tenant="a", selector=R0)
    _start(s, 3, "a-small", gpus=2, tenant="a", selector=R1)
    s.submit(job("p", gpus=2, tenant="b", selector=R0, submitted_at=4), now=4)
    r = s.step(now=4)
    assert _victims(r) == victims
    assert _nodes(r, "p") <= {f"lf0-n{i}" for i in range(r0_nodes)}
    evict_victims(s, r, now=5)
    assert s.step(now=6).placed == ("p",)
    check_invariants(s)
