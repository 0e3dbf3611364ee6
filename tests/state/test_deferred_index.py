"""A snapshot's sorted index of nodes by free GPUs (``best_fit``) answers the same whether it
follows every row change at once or, within ``deferred_index``, only when read."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from kant.state import ClusterState, Snapshot
from kant.testing import ClusterBuilder

_OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["take", "take", "give", "give", "read", "begin", "commit", "rollback", "defer", "end"]
        ),
        st.integers(0, 5),  # node (the first three H100, the others A100)
        st.integers(1, 255),  # GPU mask
    ),
    max_size=60,
)


def _cluster() -> ClusterState:
    return (
        ClusterBuilder().leaf("a", nodes=3, model="H100").leaf("b", nodes=3, model="A100").build()
    )


def _answers(snap: Snapshot, pools: list[int]) -> list[list[int]]:
    return [list(snap.best_fit(p, g)) for p in pools for g in range(9)]


@settings(max_examples=120, deadline=None)
@given(ops=_OPS)
def test_a_deferred_index_answers_as_one_that_follows_every_change(
    ops: list[tuple[str, int, int]],
) -> None:
    eager, lazy = _cluster(), _cluster()
    ops = [("defer", 0, 1), ("begin", 0, 1), *ops]  # (most changes under both)
    snaps = (eager.snapshot(), lazy.snapshot())
    pools = [eager.group_id("pool", m) for m in ("H100", "A100")]
    txs: list[list[Any]] = [[], []]
    deferred: list[Any] = []  # the lazy side's open deferrals
    for op, node, mask in ops:
        if op == "defer":
            d = snaps[1].deferred_index()
            d.__enter__()
            deferred.append(d)
        elif op == "end" and deferred:
            deferred.pop().__exit__(None, None, None)
        elif op == "begin":
            for side, snap in enumerate(snaps):
                txs[side].append(snap.transaction())
        elif op in ("commit", "rollback") and txs[0]:
            for side in (0, 1):
                getattr(txs[side].pop(), op)()
        elif op in ("take", "give") and txs[0]:
            free = int(snaps[0].cols.free_mask[node])
            part = (free & mask) if op == "take" else (~free & mask & 0xFF)
            for snap in snaps:
                if op == "take":
                    snap.allocate(node, part)
                else:
                    snap.release(node, part)
        elif op == "read":
            assert _answers(snaps[1], pools) == _answers(snaps[0], pools)
    while deferred:
        deferred.pop().__exit__(None, None, None)
    while txs[0]:
        for side in (0, 1):
            txs[side].pop().rollback()
    assert _answers(snaps[1], pools) == _answers(snaps[0], pools)
    for snap in snaps:
        snap.check_invariants()


def _snapshot_and_pool() -> tuple[Snapshot, int]:
    """A fresh snapshot of :func:`_cluster` and the id of its H100 pool."""
    cluster = _cluster()
    return cluster.snapshot(), cluster.group_id("pool", "H100")


def test_a_row_changed_twice_before_a_read_moves_once_in_the_index() -> None:
    snap, h100 = _snapshot_and_pool()
    with snap.deferred_index(), snap.transaction():
        snap.allocate(0, 0b1)
        snap.allocate(0, 0b10)
        assert list(snap.best_fit(h100, 1)) == [0, 1, 2]  # node 0: 6 free, the others 8
        snap.release(0, 0b11)
    assert list(snap.best_fit(h100, 1)) == [0, 1, 2]
    snap.check_invariants()


def test_a_copy_made_inside_a_deferral_follows_every_change_at_once() -> None:
    snap, h100 = _snapshot_and_pool()
    with snap.deferred_index(), snap.transaction():
        snap.allocate(0, 0b1)
        clone = copy.deepcopy(snap)
    with clone.transaction():
        clone.allocate(1, 0b11)
        assert list(clone.best_fit(h100, 7)) == [0, 2]  # node 1 has 6 free now
    clone.check_invariants()
    snap.check_invariants()


def test_copying_a_snapshot_inside_a_deferral_leaves_the_original_as_it_was() -> None:
    # the rows changed while deferred move in the copy's index (settled as it is made), not
    # in the original's, which moves them at its next read as it would have without a copy
    snap, h100 = _snapshot_and_pool()
    with snap.deferred_index(), snap.transaction():
        snap.allocate(0, 0b1)
        groups = snap._groups
        before = (dict(groups._was), dict(groups._now), groups.deferred)
        assert before[0]  # (a move is pending)
        clones = [copy.deepcopy(snap), pickle.loads(pickle.dumps(snap))]
        assert (dict(groups._was), dict(groups._now), groups.deferred) == before
        for clone in clones:
            assert not clone._groups._was and not clone._groups.deferred
            assert list(clone.best_fit(h100, 8)) == [1, 2]  # node 0 has 7 free
            clone.check_invariants()
        assert list(snap.best_fit(h100, 8)) == [1, 2]
    snap.check_invariants()
