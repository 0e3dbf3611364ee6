"""The columns' memoryviews read and write the same arrays as numpy does, as Python ints,
and follow the arrays when they grow; the snapshot's row-by-row refresh gives the rows,
aggregates and index a refresh in numpy gives."""

from __future__ import annotations

import copy
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

import kant.state.snapshot as snapshot_module
from kant.bench import settled
from kant.model import MILLI, Binding
from kant.state import ClusterState
from kant.state.columns import NodeColumns
from kant.testing.builders import job
from kant.topology import fat_tree_for_nodes


def test_a_write_through_the_views_is_seen_by_the_arrays_as_python_ints() -> None:
    cols = NodeColumns(capacity=4, width=8)
    v = cols.views()
    v.gpu_free[1, 2] = 500
    v.free_mask[0] = (1 << 63) | 1
    v.alive[2] = True
    assert cols.gpu_free[1].tolist() == [0, 0, 500, 0, 0, 0, 0, 0]
    assert int(cols.free_mask[0]) == (1 << 63) | 1 and cols.alive.tolist()[2] is True
    assert type(v.gpus[0]) is int and type(v.gpu_free[1, 2]) is int and v.alive[2] is True


def test_views_taken_after_the_table_grows_see_the_new_arrays() -> None:
    cols = NodeColumns(capacity=2, width=4)
    old = cols.views()
    assert cols.views() is old  # kept while nothing grows
    cols.ensure(2, 4)
    assert cols.views() is old  # a no-op ensure keeps them
    cols.ensure(10, 8)
    new = cols.views()
    assert new is not old
    new.gpu_free[9, 7] = MILLI
    new.free_gpus[9] = 3
    assert int(cols.gpu_free[9, 7]) == MILLI and int(cols.free_gpus[9]) == 3


def test_a_table_with_views_pickles_and_deep_copies_without_them() -> None:
    cols = NodeColumns(capacity=3, width=2)
    cols.views().cpu_free[1] = 7
    for twin in (pickle.loads(pickle.dumps(cols)), copy.deepcopy(cols)):
        assert int(twin.cpu_free[1]) == 7
        twin.views().cpu_free[1] = 8
        assert int(twin.cpu_free[1]) == 8 and int(cols.cpu_free[1]) == 7


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=39), min_size=1, max_size=40), st.booleans())
def test_a_refresh_row_by_row_equals_a_refresh_in_numpy(touched: list[int], few: bool) -> None:
    """Whichever way a refresh goes (the row-by-row threshold set to everything or to
    nothing), the snapshot equals a full rebuild."""
    state = ClusterState(fat_tree_for_nodes(40, nodes_per_leaf=8).nodes)
    snap = state.snapshot()
    names = [spec.name for spec in state.nodes()]
    keep = snapshot_module._FEW_ROWS
    snapshot_module._FEW_ROWS = 10**6 if few else 0
    try:
        pods = job("j", gpus=1, replicas=len(touched)).pods()
        used: dict[str, int] = {}
        bindings = []
        for p, slot in zip(pods, touched, strict=True):
            n = names[slot]
            g = used.get(n, 0)
            if g >= 8:
                continue
            used[n] = g + 1
            bindings.append(Binding(pod=p, node=n, gpus=(g,)))
        state.bind_many(bindings)
        state.set_node_health(names[touched[0]], False)
        snap = state.snapshot()
        assert snap.same_as(state.full_snapshot()) == []
        snap.check_invariants()
    finally:
        snapshot_module._FEW_ROWS = keep


def test_the_benchmarks_freeze_the_set_up_only_while_they_measure() -> None:
    import gc

    before = gc.get_freeze_count()
    with settled(True):
        assert gc.get_freeze_count() > before
    assert gc.get_freeze_count() == before
    with settled(False):
        assert gc.get_freeze_count() == before
