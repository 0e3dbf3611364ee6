"""A reclaimer holding its nomination is placed where its what-if placed it: on the GPU
models where its tenant stays within its nominal quota. Placed on every model quota
admits, it started wherever placement preferred, on a model where its tenant borrows too:
its victims were evicted for nothing, the borrowers took their GPUs back, and the reclaimer
was reclaimed in turn."""

from __future__ import annotations

from collections import Counter

from kant.admission import Quota
from kant.model import MILLI, PodId
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, finish, scheduler


def _borrowed_h100(h100_gpus: int, *, a100_jobs: tuple[int, ...]) -> Scheduler:
    """One H100 node of ``h100_gpus`` GPUs, one 8-GPU A100 node. ``a`` has 8 H100 GPUs
    nominal, ``d`` 16 A100 (it lends what it does not use); ``c`` has no quota and borrows.
    ``c``'s ``cb`` (one 1-GPU pod per H100 GPU) borrows a's H100 share, ``d``'s jobs of
    ``a100_jobs`` GPUs fill the A100 node."""
    cluster = (
        ClusterBuilder()
        .leaf("lfh", nodes=1, model="H100", gpus=h100_gpus)
        .leaf("lfa", nodes=1, model="A100", gpus=8)
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("d", "A100", 16)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("cb", gpus=1, replicas=h100_gpus, gang=False, tenant="c", models="H100"), now=0)
    for k, gpus in enumerate(a100_jobs):
        s.submit(job(f"d{k}", gpus=gpus, tenant="d", models="A100"), now=0)
    s.step(now=0)
    assert len(s.queue.status("cb").running) == 8
    return s


def test_a_reclaimer_waits_for_its_victims_rather_than_start_borrowing_where_gpus_free_up() -> None:
    # p (a, 4 GPUs, H100|A100) reclaims 4 of cb's pods on H100, within a's nominal quota.
    # d's job ends while cb's pods still terminate: quota would let a borrow A100 GPUs, and
    # they are free. Before, p started there at once: cb's 4 pods were evicted for nothing
    # and started again on the H100 GPUs they left, and d's next job reclaimed p's A100
    # GPUs. p now waits for its victims and starts on H100, where the reclaim was for.
    s = _borrowed_h100(8, a100_jobs=(8,))
    s.submit(job("p", gpus=4, tenant="a", models="H100|A100", submitted_at=1), now=1)
    r1 = s.step(now=1)
    assert {(v.job, v.reason.value) for v in r1.victims} == {("cb", "reclaim")}
    (nom,) = r1.nominations
    assert nom.reclaim and {b.node for b in nom.bindings} == {"lfh-n0"}
    finish(s, "d0", now=2)
    r = s.step(now=2)
    assert r.placed == () and r.pending["p"].code.value == "preempting", r.pending
    evict_victims(s, r1, now=3)
    r = s.step(now=3)
    assert r.placed == ("p",) and {b.node for b in r.bindings} == {"lfh-n0"}
    assert s.admitter.used("a", "H100") == 4 * MILLI and s.admitter.used("a", "A100") == 0
    evicted: Counter[PodId] = Counter(p for v in r1.victims for p in v.pods)
    s.submit(job("d9", gpus=8, tenant="d", models="A100", submitted_at=4), now=4)
    for t in range(4, 10):
        r = s.step(now=t)
        assert "p" not in {v.job for v in r.victims}  # nobody reclaims from p
        evicted.update(p for v in r.victims for p in v.pods)
    assert max(evicted.values()) == 1 and len(evicted) == 4  # cb's pods, once
    assert len(s.queue.status("p").running) == 1
    check_invariants(s)


def test_a_reclaimer_starts_where_its_victims_left_room_though_placement_prefers_a_borrowed_model() -> (
    None
):
    # A 16-GPU H100 node: cb runs 16 pods, 8 of them borrowed from a. p reclaims 4 of them.
    # When they are gone, d's 4-GPU job has just ended too: the A100 node (4 GPUs free) is
    # the fuller one, and E-Binpack prefers it. Before, p started there, borrowed, and the 4
    # H100 GPUs its victims freed went back to cb. It now starts on H100, within nominal.
    s = _borrowed_h100(16, a100_jobs=(4, 4))
    s.submit(job("p", gpus=4, tenant="a", models="H100|A100", submitted_at=1), now=1)
    r1 = s.step(now=1)
    assert {(v.job, v.reason.value) for v in r1.victims} == {("cb", "reclaim")}
    finish(s, "d1", now=2)
    evict_victims(s, r1, now=2)
    r = s.step(now=2)
    assert r.placed == ("p",) and {b.node for b in r.bindings} == {"lfh-n0"}
    assert s.admitter.used("a", "A100") == 0
    check_invariants(s)
