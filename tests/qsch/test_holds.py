"""Holds: a reservation or nomination held on the snapshot holds exactly the free part of its
bindings, whichever way it is summed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kant.admission.holds import Hold, free_part
from kant.model import Binding, PodId
from kant.state import Snapshot
from kant.testing import check_invariants

from .conftest import nodes

_NODES = 3


def _rows(snap: Snapshot) -> list[tuple[object, ...]]:
    c = snap.cols
    return [
        (tuple(int(v) for v in c.gpu_free[s]), int(c.nic_mask[s]), int(c.cpu_free[s]),
         int(c.mem_free[s]))
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
)
def test_a_hold_takes_what_taking_each_bindings_free_part_in_turn_takes(
    busy: list[tuple[int, set[int], int, set[int], int, int]],
    held: list[tuple[int, set[int], int, set[int], int, int]],
    disjoint: bool,
    meanwhile: list[tuple[int, set[int], int, set[int], int, int]],
) -> None:
    """... and gives back what releasing each allocation it took gives back, whether its
    rows are as it left them (their usage before is put back) or something took more of
    them meanwhile (``meanwhile``: then they are released)."""
    cluster = nodes(_NODES)
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
            part = free_part(snap, b)  # something else holds part of the devices
            if part is not None:
                part.take(snap)
        before = _rows(snap)
        with snap.transaction():
            for b in bindings:  # the reference: each binding's free part in turn
                part = free_part(snap, b)
                if part is not None:
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
                part = free_part(snap, b)
                if part is not None:
                    part.take(snap)
            with snap.transaction():
                for a in reversed(h.taken):  # the reference: release each allocation
                    a.give(snap)
                released = _rows(snap)
            h.give_back(snap)
            assert _rows(snap) == released
            check_invariants(snap)
