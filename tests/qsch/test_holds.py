"""Holds: a reservation or nomination held on the snapshot holds exactly the free part of its
bindings, whichever way it is summed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.admission.holds import Hold, Holds, free_parts
from kant.model import Binding, PodId, ReasonCode
from kant.state import Snapshot
from kant.testing import ClusterBuilder, check_invariants, job, node

from .conftest import evict_victims, nodes, scheduler

_NODES = 3


def _rows(snap: Snapshot) -> list[tuple[object, ...]]:
    c = snap.cols
    return [
        (tuple(int(v) for v in c.gpu_free[s]), int(c.nic_mask[s]), int(c.cpu_free[s]),
         int(c.mem_free[s]), int(c.pod_free[s]))
        for s in range(snap.num_slots)
    ]  # fmt: skip


_BINDING = st.tuples(
    st.integers(0, _NODES - 1),  # node
    st.sets(st.integers(0, 7), min_size=0, max_size=4),  # GPUs
    st.sampled_from([1000, 1000, 1000, 500]),  # milli each
    st.sets(st.integers(0, 7), max_size=2),  # NICs
    st.integers(0, 120_000),  # CPU milli (a node has 192,000)
    st.integers(0, 1_500_000),  # memory MiB (a node has 2,097,152)
)


@settings(max_examples=60, deadline=None)
@given(
    busy=st.lists(_BINDING, max_size=6),
    held=st.lists(_BINDING, min_size=1, max_size=10),
    disjoint=st.booleans(),
    meanwhile=st.lists(_BINDING, max_size=3),
    max_pods=st.sampled_from([None, 1, 3]),
)
def test_a_hold_takes_what_taking_each_bindings_free_part_in_turn_takes(
    busy: list[tuple[int, set[int], int, set[int], int, int]],
    held: list[tuple[int, set[int], int, set[int], int, int]],
    disjoint: bool,
    meanwhile: list[tuple[int, set[int], int, set[int], int, int]],
    max_pods: int | None,
) -> None:
    """... and gives back what releasing each allocation it took gives back, whether its
    rows are as it left them (their usage before is put back) or something took more of
    them meanwhile (``meanwhile``: then they are released). Pod slots alike, on nodes with
    a pod limit (``max_pods``): a binding's free part holds its pod's slot while one is
    free."""
    cluster = ClusterBuilder().leaf("lf0", nodes=_NODES, max_pods=max_pods).build()
    names = sorted(cluster.slot_names)
    snap = cluster.snapshot()

    def binding(i: int, spec: tuple[int, set[int], int, set[int], int, int]) -> Binding:
        n, gpus, milli, nics, cpu, mem = spec
        if milli < 1000:  # a share is held on one GPU
            gpus = {min(gpus, default=0)}
        return Binding(
            pod=PodId(job="j", role="w", index=i), node=names[n], gpus=tuple(sorted(gpus)),
            gpu_milli=milli, nics=tuple(sorted(nics)), cpu_milli=cpu, memory_mib=mem,
        )  # fmt: skip

    bindings = [binding(i, b) for i, b in enumerate(held)]
    if disjoint:  # a placement's bindings: whole GPUs, none twice on a node
        seen: set[tuple[str, int]] = set()
        kept = []
        for b in bindings:
            mine = {(b.node, g) for g in b.gpus}
            if b.gpu_milli == 1000 and not mine & seen:
                seen |= mine
                kept.append(b)
        bindings = kept or bindings[:1]
    with snap.transaction():
        for b in (binding(100 + i, x) for i, x in enumerate(busy)):
            for part in free_parts(snap, b):  # something else holds part of the devices
                part.take(snap)
        before = _rows(snap)
        with snap.transaction():
            for b in bindings:  # the reference: each binding's free part in turn
                for part in free_parts(snap, b):
                    part.take(snap)
            want = _rows(snap)
        assert _rows(snap) == before
        for _ in range(2):  # the second take reads the bindings summed by the first
            with snap.transaction():
                h = Hold(bindings)
                h.take(snap)
                assert _rows(snap) == want
                assert bool(h) == (want != before)
                check_invariants(snap)
                h.give_back(snap)
                assert _rows(snap) == before
        with snap.transaction():
            h = Hold(bindings)
            h.take(snap)
            for b in (binding(200 + i, x) for i, x in enumerate(meanwhile)):
                for part in free_parts(snap, b):
                    part.take(snap)
            with snap.transaction():
                for a in reversed(h.taken):  # the reference: release each allocation
                    a.give(snap)
                released = _rows(snap)
            h.give_back(snap)
            assert _rows(snap) == released
            check_invariants(snap)


@settings(max_examples=80, deadline=None)
@given(
    busy=st.lists(_BINDING, max_size=6),
    held=st.lists(_BINDING, min_size=1, max_size=8),
    on=st.sets(st.integers(0, _NODES - 1), min_size=1),
    max_pods=st.sampled_from([None, 1, 3]),
)
def test_a_hold_is_whole_on_nodes_where_each_of_its_bindings_was_wholly_free_in_turn(
    busy: list[tuple[int, set[int], int, set[int], int, int]],
    held: list[tuple[int, set[int], int, set[int], int, int]],
    on: set[int],
    max_pods: int | None,
) -> None:
    """``Hold.whole_on`` says whether a hold waits for nothing on some nodes: each of its
    bindings there, taken in turn, found every GPU share, NIC, CPU, memory and pod slot it
    names free."""
    cluster = ClusterBuilder().leaf("lf0", nodes=_NODES, max_pods=max_pods).build()
    names = sorted(cluster.slot_names)
    snap = cluster.snapshot()

    def binding(i: int, spec: tuple[int, set[int], int, set[int], int, int]) -> Binding:
        n, gpus, milli, nics, cpu, mem = spec
        if milli < 1000:
            gpus = {min(gpus, default=0)}
        return Binding(
            pod=PodId(job="j", role="w", index=i), node=names[n], gpus=tuple(sorted(gpus)),
            gpu_milli=milli, nics=tuple(sorted(nics)), cpu_milli=cpu, memory_mib=mem,
        )  # fmt: skip

    bindings = [binding(i, b) for i, b in enumerate(held)]
    nodes = {names[i] for i in on}
    with snap.transaction():
        for b in (binding(100 + i, x) for i, x in enumerate(busy)):
            for part in free_parts(snap, b):
                part.take(snap)
        with snap.transaction():  # the reference: each binding's free part in turn
            want = True
            for b in bindings:
                parts = free_parts(snap, b)
                for part in parts:
                    part.take(snap)
                if b.node not in nodes:
                    continue
                got = [(g, p.milli) for p in parts for g in range(8) if p.gpu_mask >> g & 1]
                whole = (
                    sorted(got) == sorted((g, b.gpu_milli) for g in b.gpus)
                    and sum(p.nic_mask for p in parts) == sum(1 << i for i in b.nics)
                    and sum(p.cpu for p in parts) == b.cpu_milli
                    and sum(p.mem for p in parts) == b.memory_mib
                    and sum(p.pods for p in parts) == 1
                )
                want = want and whole
        h = Hold(bindings)
        h.take(snap)
        assert h.whole_on(snap, nodes) == want


@pytest.mark.parametrize("shares", [True, False], ids=["shares", "whole GPUs"])
def test_a_preemptors_nomination_holds_the_free_part_of_a_gpu_its_victim_shares(
    shares: bool,
) -> None:
    """h (800 milli) preempts a (600) on one GPU; while a terminates, x (300) would fit in the
    400 free: it must wait, or h finds 700 free when a is gone and preempts for ever. With
    whole GPUs (h asks the GPU a's share is on, and a free one) the same."""
    b = ClusterBuilder()
    b.add(node("n0", gpus=1 if shares else 2, leaf="lf0", spine="sp0", superspine="ss0"))
    s = scheduler(b.build())
    big = {"gpu_milli": 800} if shares else {"gpus": 2}
    s.submit(job("a", gpu_milli=600), now=0)
    s.step(0)
    s.submit(job("h", priority=5, **big), now=1)
    r = s.step(1)
    assert [v.job for v in r.victims] == ["a"]
    s.submit(job("x", gpu_milli=300), now=2)
    assert s.step(2).bindings == ()  # a's GPU is h's
    evict_victims(s, r, 3)
    assert s.step(3).placed == ("h",)
    assert s.status("x").reason is not None
    check_invariants(s)


@pytest.mark.parametrize("policy", ["easy-backfill", "conservative-backfill"])
def test_a_reservation_holds_the_free_part_of_a_gpu_its_head_waits_for(policy: str) -> None:
    """a (600 milli) runs until 100 on the one GPU; the head h (800) is reserved from 100; x
    (300, 1000 s) fits in the 400 free now but would delay h: it waits."""
    b = ClusterBuilder()
    b.add(node("n0", gpus=1, leaf="lf0", spine="sp0", superspine="ss0"))
    s = scheduler(b.build(), policy=policy)
    s.submit(job("a", gpu_milli=600, runtime=100), now=0)
    s.step(0)
    s.submit(job("h", gpu_milli=800, runtime=100, submitted_at=1), now=1)
    s.submit(job("x", gpu_milli=300, runtime=1000, submitted_at=2), now=2)
    r = s.step(2)
    assert r.bindings == () and r.pending["x"].code is ReasonCode.RESERVED


@settings(max_examples=60, deadline=None)
@given(
    busy=st.lists(_BINDING, max_size=6),
    reservations=st.lists(
        st.tuples(st.integers(0, 4), st.lists(_BINDING, min_size=1, max_size=4)),
        min_size=1,
        max_size=5,
    ),
    until=st.integers(0, 5),
    placed=st.lists(_BINDING, max_size=2),
)
def test_a_job_ending_by_t_gets_back_what_no_reservation_starting_before_t_holds(
    busy: list[tuple[int, set[int], int, set[int], int, int]],
    reservations: list[tuple[int, list[tuple[int, set[int], int, set[int], int, int]]]],
    until: int,
    placed: list[tuple[int, set[int], int, set[int], int, int]],
) -> None:
    """Reservations held in any order (each with its start) hold together the free part of
    every binding; those a job ending at ``until`` may not use (starting before it) hold
    exactly what taking their bindings' free parts soonest start first holds; and after the
    job is placed on what it got back, the others are held again on what is still free."""
    cluster = nodes(_NODES)
    names = sorted(cluster.slot_names)
    snap = cluster.snapshot()
    n = iter(range(10_000))

    def binding(spec: tuple[int, set[int], int, set[int], int, int]) -> Binding:
        node, gpus, milli, nics, cpu, mem = spec
        if milli < 1000:  # a share is held on one GPU
            gpus = {min(gpus, default=0)}
        return Binding(
            pod=PodId(job="j", role="w", index=next(n)), node=names[node],
            gpus=tuple(sorted(gpus)), gpu_milli=milli, nics=tuple(sorted(nics)),
            cpu_milli=cpu, memory_mib=mem,
        )  # fmt: skip

    booked = [(start, [binding(b) for b in bs]) for start, bs in reservations]
    mine = [binding(b) for b in placed]
    by_start = sorted(booked, key=lambda r: r[0])  # (stable: ties in the order reserved)

    def take_in_turn(bs: list[Binding]) -> None:
        for b in bs:
            for part in free_parts(snap, b):
                part.take(snap)

    with snap.transaction():
        take_in_turn([binding(b) for b in busy])  # something else holds part of the devices
        before = _rows(snap)
        with snap.transaction():  # the references
            take_in_turn([b for _s, bs in by_start for b in bs])
            everything = _rows(snap)
        with snap.transaction():
            take_in_turn([b for s, bs in by_start if s < until for b in bs])
            closed = _rows(snap)
            take_in_turn(mine)
            take_in_turn([b for s, bs in by_start if s >= until for b in bs])
            after = _rows(snap)
        holds = Holds(snap)
        for start, bs in booked:
            holds.reserve(bs, start)
        assert _rows(snap) == everything
        opens = holds.opens(until)
        if all(s < until for s, _b in booked):
            assert opens is False
        elif all(s >= until for s, _b in booked):
            assert opens is True
        else:
            assert isinstance(opens, tuple)
        with snap.transaction():
            assert holds.reserved is not None
            holds.reserved.give_back(snap)
            assert _rows(snap) == before
        opened = holds.open_for("x", reserved=holds.opening(opens) if opens else None)
        assert _rows(snap) == closed
        take_in_turn(mine)  # the job's placement, on what it got back
        holds.placed("x", opened)
        assert _rows(snap) == after
        check_invariants(snap)
