"""Candidate domains at the leaf tier and above (:func:`kant.placement.search.domains`): the
leaves that hold the pods, roomiest first (the strategy's key here), ties by leaf id; above the
leaf, per parent (spine, superspine, or the whole cluster), the fewest leaves of that parent
that hold the pods, roomiest first, ties by leaf id, the leafless nodes (one group) after
every leaf; options by fewest leaves, then the strategy's key, then parent id. Checked against
that definition read literally, one parent at a time, on random fabrics (leafless nodes and
parentless leaves included), with and without the candidates' kept :class:`Layout`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, assume, given, settings

from kant.model import Tier
from kant.placement import Placer
from kant.placement.search import LEVEL, Layout, domains, fewest_hbds
from kant.state import ClusterState, Snapshot
from kant.testing import job, node


def _by_definition(
    snap: Snapshot, slots: np.ndarray, room: np.ndarray, tier: Tier, n: int, probe: int
) -> Iterator[np.ndarray]:
    cols = snap.cols
    leaf = cols.leaf_id[slots]
    if tier is Tier.LEAF:  # the leaves that hold the pods, roomiest first, ties by leaf id
        held = {int(x): int(room[leaf == x].sum()) for x in leaf if x >= 0}
        ranked = sorted((x for x in held if held[x] >= n), key=lambda x: (-held[x], x))
        for x in ranked[:probe]:
            yield slots[leaf == x]
        return
    leafless = int(leaf.max(initial=0)) + 1
    leaf = np.where(leaf >= 0, leaf, leafless)  # leafless nodes: one group, after every leaf
    caps_of = np.bincount(leaf, weights=room).astype(np.int64)
    if tier is Tier.CLUSTER:
        parent_of = np.zeros(slots.shape[0], dtype=np.int64)
    else:
        parent_of = getattr(cols, f"{LEVEL[tier]}_id")[slots]
    options = []
    for parent in sorted({int(p) for p in parent_of if p >= 0}):
        lids = sorted({int(x) for x in leaf[parent_of == parent]})
        ranked = sorted(lids, key=lambda x: (x == leafless, -int(caps_of[x]), x))
        if sum(int(caps_of[x]) for x in lids) < n:
            continue
        got, chosen = 0, []
        for x in ranked:
            chosen.append(x)
            got += int(caps_of[x])
            if got >= n:
                break
        options.append((len(chosen), -got, parent, chosen))
    options.sort(key=lambda o: (o[0], o[1], o[2]))
    for _k, _g, parent, chosen in options[:probe]:
        yield slots[np.isin(leaf, chosen) & (parent_of == parent)]


@settings(max_examples=200, deadline=None)
@given(
    leaves=st.lists(st.integers(-1, 6), min_size=1, max_size=24),
    spine_of_leaf=st.lists(st.integers(-1, 3), min_size=7, max_size=7),
    superspine_of_spine=st.lists(st.integers(-1, 1), min_size=4, max_size=4),
    rooms=st.lists(st.integers(0, 4), min_size=24, max_size=24),
    n=st.integers(1, 20),
    probe=st.integers(1, 5),
    tier=st.sampled_from([Tier.LEAF, Tier.SPINE, Tier.SUPERSPINE, Tier.CLUSTER]),
    every=st.booleans(),
)
def test_domains_at_the_leaf_and_above_are_the_fewest_leaves_of_one_parent(
    leaves: list[int],
    spine_of_leaf: list[int],
    superspine_of_spine: list[int],
    rooms: list[int],
    n: int,
    probe: int,
    tier: Tier,
    every: bool,
) -> None:
    specs = []
    for i, lf in enumerate(leaves):
        sp = spine_of_leaf[lf] if lf >= 0 else -1
        ss = superspine_of_spine[sp] if sp >= 0 else -1
        specs.append(
            node(
                f"n{i}",
                leaf=None if lf < 0 else f"lf{lf}",
                spine=None if sp < 0 else f"sp{sp}",
                superspine=None if ss < 0 else f"ss{ss}",
            )
        )
    snap = ClusterState(specs).snapshot()
    slots = np.arange(snap.num_slots, dtype=np.int64)
    if not every:
        slots = slots[::2]
    room = np.minimum(np.array(rooms[: slots.shape[0]], dtype=np.int64), n)

    def key(caps: np.ndarray) -> np.ndarray:
        return -caps  # roomiest first

    got = [s.tolist() for s in domains(snap, slots, room, tier, n, key, probe)]
    want = [s.tolist() for s in _by_definition(snap, slots, room, tier, n, probe)]
    assert got == want
    # the same from the candidates' kept layout (the Placer's cached candidates pass it)
    laid = Layout(snap, slots, tier)
    for _ in range(2):  # (a layout is read, never changed: the same again)
        assert [s.tolist() for s in domains(snap, slots, room, tier, n, key, probe, laid)] == want


def test_a_gang_takes_whole_leaves_before_nodes_whose_place_in_the_network_is_unknown() -> None:
    specs = [node(f"{lf}{i}", leaf=f"lf{lf}") for lf in "ab" for i in range(2)]
    specs += [node(f"x{i}") for i in range(4)]  # four leafless nodes: one group of room 4
    st_ = ClusterState(specs)
    res = Placer("ebinpack").place(job("J", gpus=8, replicas=4), st_.snapshot())
    assert sorted(b.node for b in res.bindings) == ["a0", "a1", "b0", "b1"]
    res = Placer("ebinpack").place(job("K", gpus=8, replicas=6), st_.snapshot())
    assert sorted(b.node for b in res.bindings) == ["a0", "a1", "b0", "b1", "x0", "x1"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    places=st.lists(st.tuples(st.integers(-1, 3), st.integers(-1, 4)), min_size=2, max_size=14),
    spine_of_leaf=st.lists(st.integers(-1, 2), min_size=4, max_size=4),
    rooms=st.lists(st.integers(0, 3), min_size=14, max_size=14),
    data=st.data(),
)
def test_several_hbds_are_the_fewest_and_share_the_tightest_domain_any_such_choice_could(
    places: list[tuple[int, int]], spine_of_leaf: list[int], rooms: list[int], data: st.DataObject
) -> None:
    specs = []
    for i, (lf, h) in enumerate(places):
        sp = spine_of_leaf[lf] if lf >= 0 else -1
        specs.append(
            node(
                f"n{i}",
                leaf=None if lf < 0 else f"lf{lf}",
                spine=None if sp < 0 else f"sp{sp}",
                superspine=None if sp < 0 else "ss0",
                hbd=None if h < 0 else f"h{h}",
            )
        )
    snap = ClusterState(specs).snapshot()
    slots = np.arange(snap.num_slots, dtype=np.int64)
    room = np.array(rooms[: slots.shape[0]], dtype=np.int64)
    hbd = snap.cols.hbd_id[slots]
    valid = hbd >= 0
    caps = np.bincount(hbd[valid], weights=room[valid], minlength=5).astype(np.int64)
    assume(int((caps > 0).sum()) >= 2)  # (then more than one HBD's room exists)
    n = data.draw(st.integers(int(caps.max()) + 1, int(caps.sum())), label="n")  # several

    def tightest(chosen: tuple[int, ...]) -> int:  # 0 leaf, 1 spine, 2 superspine, 3 none
        with_room = (room > 0) & np.isin(hbd, chosen)
        for level, name in enumerate(("leaf", "spine", "superspine")):
            ids = set(getattr(snap.cols, f"{name}_id")[slots[with_room]].tolist())
            if len(ids) == 1 and min(ids) >= 0:
                return level
        return 3

    fits = [
        c
        for k in range(2, len(caps) + 1)
        for c in itertools.combinations(range(len(caps)), k)
        if caps[list(c)].sum() >= n
    ]
    fewest = min(len(c) for c in fits)
    got = tuple(sorted(fewest_hbds(snap, slots, room, hbd, caps, n, lambda c: c).tolist()))
    assert len(got) == fewest and caps[list(got)].sum() >= n
    assert tightest(got) == min(tightest(c) for c in fits if len(c) == fewest)
