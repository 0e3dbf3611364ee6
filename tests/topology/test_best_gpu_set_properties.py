"""Property tests: best_gpu_set against brute force."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kant.model import LinkKind
from kant.topology import GpuSlot, NodeTemplate, dgx_8gpu, pcie_8gpu, pcie_node


def rank(a: GpuSlot, b: GpuSlot, *, nvlink: bool = True) -> int:
    """Link kind between two distinct GPUs, straight from the definition."""
    if nvlink and a.nvlink_domain is not None and a.nvlink_domain == b.nvlink_domain:
        return LinkKind.NVLINK
    if a.numa != b.numa:
        return LinkKind.CROSS_NUMA
    return LinkKind.PCIE_SWITCH if a.pcie_switch == b.pcie_switch else LinkKind.NUMA


def pair_ranks(t: NodeTemplate, gpus: tuple[int, ...], *, nvlink: bool = True) -> list[int]:
    return [rank(t.gpus[a], t.gpus[b], nvlink=nvlink) for a, b in itertools.combinations(gpus, 2)]


def brute_force(t: NodeTemplate, free_mask: int, k: int) -> int:
    """The documented objective, scored literally over every k-subset."""
    free = [g for g in range(t.num_gpus) if free_mask >> g & 1]

    def key(combo: tuple[int, ...]) -> tuple[int, ...]:
        rest = tuple(g for g in free if g not in combo)
        inner = pair_ranks(t, combo)
        return (
            max(inner, default=0),
            sum(inner),
            sum(pair_ranks(t, combo, nvlink=False)),
            -sum(LinkKind.CROSS_NUMA + 1 - r for r in pair_ranks(t, rest)),
            -sum(LinkKind.CROSS_NUMA + 1 - r for r in pair_ranks(t, rest, nvlink=False)),
            sum(1 << g for g in combo),
        )

    best = min(itertools.combinations(free, k), key=key)
    return sum(1 << g for g in best)


gpu_slots = st.builds(
    GpuSlot,
    numa=st.integers(0, 1),
    pcie_switch=st.integers(0, 2),
    nvlink_domain=st.none() | st.integers(0, 1),
)
random_eight_gpu_templates = st.lists(gpu_slots, min_size=8, max_size=8).map(
    lambda gpus: NodeTemplate(name="random-8gpu", gpus=tuple(gpus))
)
eight_gpu_templates = st.sampled_from([dgx_8gpu(), pcie_8gpu()]) | random_eight_gpu_templates


@settings(max_examples=150, deadline=None)
@given(t=eight_gpu_templates, free_mask=st.integers(0, 0xFF), k=st.integers(0, 8))
def test_best_gpu_set_on_eight_gpus_is_a_free_subset_and_matches_brute_force(t, free_mask, k):
    got = t.best_gpu_set(free_mask, k)
    if free_mask.bit_count() < k:
        assert got is None
        return
    assert got is not None
    assert got & ~free_mask == 0
    assert got.bit_count() == k
    want = brute_force(t, free_mask, k)
    chosen = tuple(g for g in range(8) if got >> g & 1)
    optimal = tuple(g for g in range(8) if want >> g & 1)
    assert max(pair_ranks(t, chosen), default=0) == max(pair_ranks(t, optimal), default=0)
    assert got == want


def nested_sixteen_gpu_template(nvlink_per_numa: bool) -> NodeTemplate:
    return NodeTemplate(
        name="nested-16gpu",
        gpus=tuple(
            GpuSlot(
                numa=g // 8,
                pcie_switch=g // 2,
                nvlink_domain=g // 8 if nvlink_per_numa else None,
            )
            for g in range(16)
        ),
    )


@settings(max_examples=40, deadline=None)
@given(
    nvlink=st.booleans(),
    busy=st.sets(st.integers(0, 15), max_size=6),  # many free GPUs: the greedy search runs
    k=st.integers(1, 16),
)
def test_best_gpu_set_on_sixteen_nested_gpus_reaches_the_best_worst_link(nvlink, busy, k):
    t = nested_sixteen_gpu_template(nvlink)
    free_mask = 0xFFFF & ~sum(1 << g for g in busy)
    got = t.best_gpu_set(free_mask, k)
    free = [g for g in range(16) if free_mask >> g & 1]
    if len(free) < k:
        assert got is None
        return
    assert got is not None and got & ~free_mask == 0 and got.bit_count() == k
    chosen = tuple(g for g in range(16) if got >> g & 1)
    assert max(pair_ranks(t, chosen), default=0) == best_reachable_worst_link(t, free, k)


def nvlink_pairs_of_switches() -> NodeTemplate:
    """16 GPUs: 2 NUMA domains of 4 PCIe switches (2 GPUs each), an NVLink domain per pair
    of switches."""
    return NodeTemplate(
        name="nvlink-pairs-16gpu",
        gpus=tuple(
            GpuSlot(numa=g // 8, pcie_switch=(g % 8) // 2, nvlink_domain=g // 4) for g in range(16)
        ),
    )


nested_sixteen_gpu_templates = st.sampled_from(
    [
        pcie_node("pcie-16gpu", 16),
        nested_sixteen_gpu_template(True),
        nested_sixteen_gpu_template(False),
        nvlink_pairs_of_switches(),
    ]
)


@settings(max_examples=60, deadline=None)
@given(t=nested_sixteen_gpu_templates, busy=st.sets(st.integers(0, 15), max_size=6), data=st.data())
def test_best_gpu_set_on_sixteen_nested_gpus_is_the_exhaustive_answer_beyond_512_sets(
    t: NodeTemplate, busy: set[int], data: st.DataObject
) -> None:
    free = [g for g in range(16) if g not in busy]
    k = data.draw(st.integers(1, len(free)))
    free_mask = sum(1 << g for g in free)
    # every documented criterion, the mask included, whichever search answers
    assert t.best_gpu_set(free_mask, k) == t._exhaustive_gpu_set(free, k)


@settings(max_examples=150, deadline=None)
@given(t=eight_gpu_templates, free_mask=st.integers(0, 0xFF), data=st.data())
def test_the_search_over_a_link_hierarchy_matches_brute_force_on_any_nested_template(
    t: NodeTemplate, free_mask: int, data: st.DataObject
) -> None:
    # (on 8 GPUs best_gpu_set never needs it: asked directly, on every shape that nests)
    tree = t._derived.tree
    free = [g for g in range(8) if free_mask >> g & 1]
    if tree is None or len(free) < 2:
        return
    k = data.draw(st.integers(1, len(free) - 1))
    assert t._tree_gpu_set(tree, free, k) == brute_force(t, free_mask, k)


def test_a_template_whose_links_do_not_nest_still_gets_a_free_set_of_the_size_asked() -> None:
    # NVLink islands straddling the NUMA domains: no link hierarchy, the greedy search runs
    t = NodeTemplate(
        name="straddling-16gpu",
        gpus=tuple(
            GpuSlot(numa=g // 8, pcie_switch=g // 2, nvlink_domain=(g + 4) // 8 % 2)
            for g in range(16)
        ),
    )
    assert t._derived.tree is None
    got = t.best_gpu_set(0xFFFF & ~0b1001, 6)
    assert got is not None and got.bit_count() == 6 and got & 0b1001 == 0


def best_reachable_worst_link(t: NodeTemplate, free: list[int], k: int) -> int:
    """On nested (ultrametric) ranks, the GPUs linked to ``g`` at rank <= r are all linked to
    each other at rank <= r, so the best worst link is the smallest r for which some free GPU
    has k - 1 free GPUs within rank r."""
    if k == 1:
        return 0

    def within(g: int, r: int) -> int:
        return sum(1 for h in free if h == g or rank(t.gpus[g], t.gpus[h]) <= r)

    return min(r for r in range(1, LinkKind.CROSS_NUMA + 1) if any(within(g, r) >= k for g in free))


@settings(max_examples=100, deadline=None)
@given(
    t=eight_gpu_templates,
    free_mask=st.integers(0, 0xFF),
    k=st.integers(1, 8),
    count=st.integers(1, 8),
)
def test_the_sets_for_several_pods_are_best_gpu_set_asked_pod_after_pod(t, free_mask, k, count):
    # a gang's pods filling a node in one step take what one pod after the other would take
    got = t.best_gpu_sets(free_mask, k, count)
    free, sets = free_mask, []
    for _ in range(count):
        chosen = t.best_gpu_set(free, k)
        if chosen is None:
            assert got is None
            return
        sets.append(chosen)
        free &= ~chosen
    assert got == (tuple(sets), free_mask & ~free)
    assert t.best_gpu_sets(free_mask, k, count) == got  # the memo answers the same
