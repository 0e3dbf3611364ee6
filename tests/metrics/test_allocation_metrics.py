"""GAR and GFR against hand-computed clusters."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kant.errors import ValidationError
from kant.metrics import (
    fragmented_gpus,
    fragmented_gpus_by_node,
    gar,
    gfr,
    held_milli,
    node_fragmentation_degree,
)
from kant.model import Binding, PodId
from kant.state import ClusterState
from kant.testing import ClusterBuilder, node


def bind(
    st: ClusterState,
    job: str,
    node_name: str,
    gpus: tuple[int, ...],
    milli: int = 1000,
    index: int = 0,
) -> None:
    st.bind(
        Binding(
            pod=PodId(job=job, role="w", index=index), node=node_name, gpus=gpus, gpu_milli=milli
        )
    )


@pytest.fixture
def two_nodes() -> ClusterState:
    return ClusterBuilder().leaf("lf", nodes=2).build()


def test_two_8_gpu_nodes_with_3_and_8_allocated(two_nodes: ClusterState) -> None:
    bind(two_nodes, "a", "lf-n0", (0, 1, 2))
    bind(two_nodes, "b", "lf-n1", tuple(range(8)))
    assert gar(two_nodes) == pytest.approx(11 / 16)
    r = gfr(two_nodes)
    assert r.ratio == pytest.approx(1 / 2)
    assert r.degree == pytest.approx((5 / 8) / 2)
    assert (r.fragmented_nodes, r.gpu_nodes) == (1, 2)


def test_an_idle_cluster_and_a_full_cluster_are_not_fragmented(two_nodes: ClusterState) -> None:
    assert gar(two_nodes) == 0.0
    assert gfr(two_nodes).ratio == 0.0
    bind(two_nodes, "a", "lf-n0", tuple(range(8)))
    bind(two_nodes, "b", "lf-n1", tuple(range(8)))
    assert gar(two_nodes) == 1.0
    assert gfr(two_nodes).ratio == 0.0 and gfr(two_nodes).degree == 0.0


def test_a_fractional_share_counts_as_milli_for_gar_and_as_an_allocated_gpu_for_gfr(
    two_nodes: ClusterState,
) -> None:
    bind(two_nodes, "a", "lf-n0", (3,), milli=250)
    bind(two_nodes, "b", "lf-n0", (3,), milli=500)
    assert gar(two_nodes) == pytest.approx(0.75 / 16)
    r = gfr(two_nodes)
    assert r.ratio == pytest.approx(1 / 2)
    assert r.degree == pytest.approx((7 / 8) / 2)


def test_fewer_allocated_gpus_mean_a_higher_degree_at_the_same_ratio() -> None:
    st = ClusterBuilder().leaf("lf", nodes=2).build()
    bind(st, "a", "lf-n0", (0,))
    low_use = gfr(st).degree
    st.release(PodId(job="a", role="w", index=0))
    bind(st, "a", "lf-n0", tuple(range(7)))
    assert gfr(st).ratio == gfr(st).ratio == 0.5
    assert low_use == pytest.approx((7 / 8) / 2) and gfr(st).degree == pytest.approx((1 / 8) / 2)
    assert low_use > gfr(st).degree


def test_an_unhealthy_gpu_that_no_pod_holds_is_not_allocated(two_nodes: ClusterState) -> None:
    two_nodes.set_gpu_health("lf-n0", 0, False)
    assert two_nodes.columns.gpu_free[two_nodes.slot_of("lf-n0"), 0] == 0  # looks held
    assert gar(two_nodes) == 0.0
    assert gfr(two_nodes).ratio == 0.0


def test_a_pod_on_a_gpu_that_turned_unhealthy_still_holds_it(two_nodes: ClusterState) -> None:
    bind(two_nodes, "a", "lf-n0", (0, 1))
    two_nodes.set_gpu_health("lf-n0", 1, False)
    two_nodes.set_gpu_health("lf-n0", 5, False)
    assert gar(two_nodes) == pytest.approx(2 / 16)
    r = gfr(two_nodes)
    assert r.ratio == 0.5 and r.degree == pytest.approx((6 / 8) / 2)


def test_an_unhealthy_node_keeps_its_pods_in_gar_and_gfr(two_nodes: ClusterState) -> None:
    bind(two_nodes, "a", "lf-n1", (0, 1, 2, 3), milli=1000)
    two_nodes.set_node_health("lf-n1", False)
    assert gar(two_nodes) == pytest.approx(4 / 16)
    assert gfr(two_nodes).ratio == 0.5
    assert held_milli(two_nodes).sum() == 4000


def test_gar_and_gfr_can_be_read_for_one_node_pool() -> None:
    st = ClusterBuilder().leaf("h", nodes=2).leaf("a", nodes=2, model="A100").build()
    bind(st, "x", "a-n0", (0, 1, 2, 3))
    assert gar(st, "A100") == pytest.approx(4 / 16)
    assert gar(st, "H100") == 0.0
    assert gar(st) == pytest.approx(4 / 32)
    assert gfr(st, "A100").ratio == 0.5
    assert gfr(st, "H100").ratio == 0.0
    assert gfr(st).ratio == 0.25
    assert gar(st, "T4") == 0.0 and gfr(st, "T4").gpu_nodes == 0


def test_cpu_only_nodes_and_removed_nodes_are_not_gpu_nodes() -> None:
    st = ClusterState([node("c0", gpus=0), node("g0", gpus=4)])
    st.add_node(node("g1", gpus=4))
    bind(st, "a", "g0", (0,))
    st.remove_node("g1")
    assert gfr(st).gpu_nodes == 1 and gfr(st).ratio == 1.0
    assert gar(st) == pytest.approx(1 / 4)
    assert gfr(ClusterState()).ratio == 0.0 and gar(ClusterState()) == 0.0


def test_gar_from_held_milli_agrees_with_the_state_truth() -> None:
    rng = np.random.default_rng(3)
    st = ClusterBuilder().leaf("lf", nodes=6).build()
    k = 0
    for name in [f"lf-n{i}" for i in range(6)]:
        for g in range(8):
            if rng.random() < 0.5:
                bind(st, f"j{k}", name, (g,), milli=int(rng.integers(1, 1001)))
                k += 1
    st.set_gpu_health("lf-n2", 3, False)
    st.set_node_health("lf-n4", False)
    assert held_milli(st).sum() == st.allocated_milli()


def test_the_node_degree_rule_of_thumb() -> None:
    out = node_fragmentation_degree(np.array([0, 3, 8, 1, 0]), np.array([8, 8, 8, 2, 0]))
    assert out.tolist() == [0.0, 5 / 8, 0.0, 0.5, 0.0]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda st: gar(None), "state"),  # type: ignore[arg-type]
        (lambda st: gfr("cluster"), "state"),  # type: ignore[arg-type]
        (lambda st: held_milli([st]), "state"),  # type: ignore[list-item]
        (lambda st: fragmented_gpus(None, []), "state"),  # type: ignore[arg-type]
        (lambda st: fragmented_gpus_by_node(1, []), "state"),  # type: ignore[arg-type]
        (lambda st: gar(st, 123), "pool"),  # type: ignore[arg-type]
        (lambda st: gfr(st, ["H100"]), "pool"),  # type: ignore[arg-type]
        (lambda st: st.group_id("pool", ["H100"]), "name"),  # type: ignore[arg-type]
    ],
)
def test_the_allocation_metrics_name_a_state_or_pool_of_the_wrong_kind(
    call: Callable[[ClusterState], object], field: str
) -> None:
    st = ClusterBuilder().leaf("h", nodes=1).build()
    with pytest.raises(ValidationError, match=f"field '{field}' ="):
        call(st)
