"""A strategy that keeps some pods off some nodes (E-Spread's inference zone) says so to the
never-fits test: a job only those nodes could hold is ``UNSATISFIABLE``, not ``NO_FIT``, and
never blocks a Strict FIFO queue."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant import Scheduler
from kant.errors import ValidationError
from kant.model import Job, JobKind, ReasonCode
from kant.placement import BaseStrategy, Placer, make_strategy
from kant.state import ClusterState
from kant.testing import ClusterBuilder, job


def _zone_has_the_big_nodes() -> ClusterState:
    """An inference zone of two 8-GPU nodes; the general nodes have 4 GPUs each."""
    return (
        ClusterBuilder()
        .leaf("z", nodes=2, gpus=8, zone="inference")
        .leaf("g", nodes=2, gpus=4)
        .build()
    )


def _strict(strategy: str | BaseStrategy) -> Scheduler:
    return Scheduler(_zone_has_the_big_nodes(), placer=Placer(strategy), policy="strict-fifo")


def test_a_training_pod_only_the_inference_zone_could_hold_is_unsatisfiable_under_espread() -> None:
    s = _strict("espread")
    s.submit(job("big", gpus=8), now=0)
    s.submit(job("small", gpus=2), now=1)
    r = s.step(now=2)
    assert r.placed == ("small",)  # the queue's head never blocks it
    why = r.pending["big"]
    assert why.code is ReasonCode.UNSATISFIABLE, why
    assert "espread" in why.message and "8 GPUs" in why.message, why.message


def test_the_same_pod_runs_in_the_zone_under_a_strategy_without_one() -> None:
    s = _strict("ebinpack")
    s.submit(job("big", gpus=8), now=0)
    assert s.step(now=1).placed == ("big",)


def test_an_inference_pod_as_large_as_a_zone_node_and_larger_than_any_general_one_never_fits() -> (
    None
):
    # a zone node takes only inference pods smaller than itself
    s = _strict("espread")
    s.submit(job("whole", gpus=8, kind=JobKind.INFERENCE), now=0)
    s.submit(job("svc", gpus=2, kind=JobKind.INFERENCE), now=1)
    r = s.step(now=2)
    assert r.placed == ("svc",)
    assert r.pending["whole"].code is ReasonCode.UNSATISFIABLE


def test_a_small_inference_pod_may_still_use_the_zone_and_is_never_called_unsatisfiable() -> None:
    # 4 replicas of 6 GPUs: only the zone's two 8-GPU nodes could take one each, the
    # general 4-GPU nodes none; two run, two wait as NO_FIT (capacity may come back)
    s = _strict("espread")
    s.submit(job("svc", gpus=6, replicas=4, gang=False, kind=JobKind.INFERENCE), now=0)
    r = s.step(now=1)
    assert len(r.bindings) == 2 and {b.node for b in r.bindings} == {"z-n0", "z-n1"}
    assert r.pending["svc"].code is not ReasonCode.UNSATISFIABLE


def test_a_gang_needing_more_than_the_general_nodes_hold_is_unsatisfiable_under_espread() -> None:
    s = _strict("espread")
    s.submit(job("gang", gpus=4, replicas=3), now=0)  # 12 GPUs; the general nodes hold 8
    s.submit(job("small", gpus=4), now=1)
    r = s.step(now=2)
    assert r.placed == ("small",)
    assert r.pending["gang"].code is ReasonCode.UNSATISFIABLE, r.pending["gang"]


def test_a_zone_no_node_has_leaves_every_node_general() -> None:
    s = Scheduler(
        _zone_has_the_big_nodes(), placer=Placer("espread", zone="serving"), policy="strict-fifo"
    )
    s.submit(job("big", gpus=8), now=0)
    assert s.step(now=1).placed == ("big",)


class _OddNodesOnly(BaseStrategy):
    """A user's strategy that places on odd slots only, and says so."""

    name = "odd-nodes-only"

    def candidate_sets(self, ctx, slots):  # type: ignore[no-untyped-def]
        return ((slots[slots % 2 == 1], self),)

    def reach(self, job, role):  # type: ignore[no-untyped-def]
        return _Odd()


class _Odd:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Odd)

    def __hash__(self) -> int:
        return 1

    def __str__(self) -> str:
        return "the odd nodes"

    def allows(self, snap):  # type: ignore[no-untyped-def]
        import numpy as np

        return np.arange(len(snap.cols.gpus)) % 2 == 1


@pytest.mark.parametrize("gpus", [4, 8])
def test_a_users_strategy_names_the_nodes_it_may_use_through_its_reach_hook(gpus: int) -> None:
    # slots: z-n0 (8), z-n1 (8), g-n0 (4), g-n1 (4): the odd ones hold 8 + 4 GPUs
    st = ClusterBuilder().leaf("z", nodes=2, gpus=8).leaf("g", nodes=2, gpus=4).build()
    s = Scheduler(st, placer=Placer(_OddNodesOnly()), policy="strict-fifo")
    s.submit(job("gang", gpus=gpus, replicas=2), now=0)
    s.submit(job("small", gpus=1), now=1)
    r = s.step(now=2)
    if gpus == 8:  # two 8-GPU pods: only z-n1 is odd and has 8
        assert r.placed == ("small",)
        assert r.pending["gang"].code is ReasonCode.UNSATISFIABLE
        assert "the odd nodes" in r.pending["gang"].message
    else:  # two 4-GPU pods fit z-n1 and g-n1
        assert set(r.placed) == {"gang", "small"}


class _Reaching(_OddNodesOnly):
    """A user's strategy whose reach (or its nodes) is of the wrong kind."""

    def __init__(self, reach: object) -> None:
        self.reach_given = reach

    def reach(self, job, role):  # type: ignore[no-untyped-def]
        return self.reach_given


class _Allows(_Odd):
    def __init__(self, mask: object) -> None:
        self.mask = mask

    def allows(self, snap):  # type: ignore[no-untyped-def]
        return self.mask


@pytest.mark.parametrize(
    "reach",
    [
        ["the odd nodes"],  # (no allows, and unhashable)
        "the odd nodes",  # (no allows)
        _Allows(None),
        _Allows([True]),  # (one node of four)
        _Allows([1, 0, 1, 0]),  # (not bools)
    ],
)
def test_a_users_reach_of_the_wrong_kind_is_refused_naming_the_strategy(reach: object) -> None:
    # each was a TypeError, AttributeError or IndexError deep in the never-fits test
    st = ClusterBuilder().leaf("z", nodes=2, gpus=8).leaf("g", nodes=2, gpus=4).build()
    s = Scheduler(st, placer=Placer(_Reaching(reach)))
    s.submit(job("gang", gpus=8, replicas=3), now=0)  # (never fits: its reach is read)
    with pytest.raises(ValidationError, match="odd-nodes-only") as err:
        s.step(now=1)
    assert err.value.field == "strategy" and "reach" in str(err.value)
    assert s.cluster.num_pods == 0 and s.clock == 0


def test_a_job_never_fitting_one_strategy_runs_once_the_placer_takes_another() -> None:
    placer = Placer("espread")
    s = Scheduler(_zone_has_the_big_nodes(), placer=placer, policy="strict-fifo")
    s.submit(job("big", gpus=8), now=0)
    assert s.step(now=1).pending["big"].code is ReasonCode.UNSATISFIABLE
    placer.strategy = make_strategy("ebinpack")
    assert s.step(now=2).placed == ("big",)


def test_a_job_fitting_one_strategy_never_fits_once_the_placer_takes_another() -> None:
    placer = Placer("ebinpack")
    s = Scheduler(_zone_has_the_big_nodes(), placer=placer, policy="strict-fifo")
    s.submit(job("a", gpus=8), now=0)
    s.submit(job("b", gpus=8), now=0)
    assert len(s.step(now=1).placed) == 2  # the zone's two nodes
    s.submit(job("big", gpus=8), now=2)
    assert s.step(now=3).pending["big"].code is ReasonCode.NO_FIT
    placer.strategy = make_strategy("espread")
    assert s.step(now=4).pending["big"].code is ReasonCode.UNSATISFIABLE


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=3),  # zone nodes' GPUs
    st.lists(st.sampled_from([2, 4, 8]), min_size=0, max_size=3),  # general nodes' GPUs
    st.lists(
        st.tuples(st.sampled_from([0, 1, 2, 4, 6, 8]), st.integers(1, 4), st.booleans(),
                  st.sampled_from([JobKind.TRAINING, JobKind.INFERENCE])),
        min_size=1, max_size=5,
    ),
)  # fmt: skip
def test_what_espread_calls_unsatisfiable_it_cannot_place_even_on_the_empty_cluster(
    zone: list[int], general: list[int], specs: list[tuple[int, int, bool, JobKind]]
) -> None:
    b = ClusterBuilder()
    for i, g in enumerate(zone):
        b.leaf(f"z{i}", nodes=1, gpus=g, zone="inference")
    for i, g in enumerate(general):
        b.leaf(f"g{i}", nodes=1, gpus=g)
    state = b.build()
    s = Scheduler(state, placer=Placer("espread"), policy="strict-fifo")
    jobs = []
    for i, (gpus, replicas, gang, kind) in enumerate(specs):
        for copy in "ab":  # (the first copy, when it runs, leaves the second to never-fits)
            j = job(f"j{i}{copy}", gpus=gpus, cpu_milli=0 if gpus else 1000, replicas=replicas,
                    gang=gang or replicas == 1, kind=kind)  # fmt: skip
            jobs.append(j)
            s.submit(j, now=0)
    r = s.step(now=1)
    empty = ClusterState(state.nodes())
    for j in jobs:
        why = r.pending.get(j.id)
        if why is not None and why.code is ReasonCode.UNSATISFIABLE:
            res = Placer("espread").place(j if j.gang else _one_pod(j), empty.snapshot())
            assert not res.ok, (j, why)


def _one_pod(j: Job) -> Job:
    """A pod-level job's first pod alone (never-fits asks whether one pod of it fits)."""
    return attrs.evolve(j, roles=(attrs.evolve(j.roles[0], replicas=1),))


def test_two_jobs_alike_but_for_their_kind_get_their_own_answers_after_the_strategy_changes() -> (
    None
):
    # under ebinpack a training and an inference job of one role shape were one never
    # shape; after the switch to espread the training job's answer (the zone is out of its
    # reach) was given to the inference job too, which the zone could hold
    st = ClusterBuilder().leaf("z", nodes=1, gpus=8, zone="inference").leaf("g", nodes=1, gpus=2)
    placer = Placer("ebinpack")
    s = Scheduler(st.build(), placer=placer)
    s.submit(job("fill", gpus=8, kind=JobKind.INFERENCE), now=0)
    assert s.step(now=1).placed == ("fill",)
    s.submit(job("T", gpus=4), now=2)
    s.submit(job("I", gpus=4, kind=JobKind.INFERENCE), now=2)
    s.step(now=3)
    placer.strategy = make_strategy("espread")
    r = s.step(now=4)
    assert r.pending["T"].code is ReasonCode.UNSATISFIABLE
    assert r.pending["I"].code is not ReasonCode.UNSATISFIABLE, r.pending["I"]
