"""A reservation is made in the cycle's walk order, where a job that would borrow is walked
after the jobs within their tenant's nominal quota. A job walked after the reserved head that
is back within nominal quota at the reserved start is walked before it then: it is no
backfilled job, and it takes the devices first. The start estimates play the later cycles'
order and say so (docs/qsch.md, "Reservations and the walk order")."""

from __future__ import annotations

import pytest

from kant.admission import Admitter, Quota
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import job, node


@pytest.mark.parametrize("policy", ["easy-backfill", "conservative-backfill"])
def test_a_borrower_back_within_nominal_at_the_reserved_start_goes_first_as_the_estimate_says(
    policy: str,
) -> None:
    cl = ClusterState([node("n0", model="H100", leaf="l0"), node("n1", model="A100", leaf="l0")])
    s = Scheduler(
        cl,
        policy=policy,
        admitter=Admitter([Quota.gpus(t, m, 8) for t in "ab" for m in ("H100", "A100")]),
        preemption=PreemptionPolicy(priority=False, reclaim=False, backfill=False),
    )
    s.submit(job("j0", gpus=8, replicas=2, tenant="a", runtime=60), now=0)
    s.step(0)  # tenant a holds 8 H100 + 8 A100 until 60
    s.submit(job("j1", gpus=8, tenant="a", models="A100", runtime=100), now=5)
    s.step(5)
    s.submit(job("j3", gpus=2, tenant="b", models="A100", runtime=10), now=10)
    r = s.step(10)
    # j1 would borrow now, so j3 is walked first and reserved the A100 node at 60 ...
    assert r.reservations[0].job == "j3" and r.reservations[0].start == 60.0
    assert r.pending["j3"].message.endswith("reserved to start at 60")
    # ... and the estimates, which play the cycles to come, see j1 walked first at 60
    est = s.start_estimates(10, jobs=["j1", "j3"])
    assert (est["j1"].start, est["j3"].start) == (60.0, 160.0)
    s.pods_finished(cl.job_pods("j0"), 60)
    assert s.step(60).placed == ("j1",)  # a within nominal again: j1 is walked before j3
    s.pods_finished(cl.job_pods("j1"), 160)
    assert s.step(160).placed == ("j3",)
    s.check_invariants()
