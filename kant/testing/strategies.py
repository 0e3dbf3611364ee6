"""Hypothesis strategies shared by the property tests: small random clusters and jobs.

Importing this module imports ``hypothesis`` (a dev dependency); ``import kant.testing``
does not import it.

>>> from hypothesis import given
>>> @given(clusters(), jobs(0))
... def test(state, j):
...     assert len(state) >= 1 and j.id == "j0"
>>> test()
"""

from __future__ import annotations

from collections.abc import Sequence

import hypothesis.strategies as st

from kant.model import Job, Resources, Role, Tier, TopologyWish
from kant.state import ClusterState
from kant.testing.builders import node

MODELS = ("H100", "A100")


@st.composite
def clusters(
    draw: st.DrawFn,
    *,
    max_nodes: int = 8,
    models: Sequence[str] = MODELS,
    pod_caps: bool = False,
) -> ClusterState:
    """A :class:`~kant.state.ClusterState` of 1 to ``max_nodes`` nodes named ``n<i>``, each
    of 2, 4 or 8 GPUs of one of ``models`` (8-GPU nodes: the DGX template with 8 NICs; the
    others: the openb PCIe templates without NICs), 64 cores and 256,000 MiB each.

    Fabric: node ``i`` is on leaf ``lf<i % 3>`` (leaves 0 and 1 under spine ``sp0``, leaf 2
    under ``sp1``), HBD ``h<i // 2>``, superspine ``ss0``; node ``n0`` is in zone
    ``inference``. No pods; about one GPU in ten and one node in fifteen are unhealthy.
    ``pod_caps``: each node may also have a pod limit (``max_pods`` of 0 to 5, or none).
    """
    n = draw(st.integers(1, max_nodes))
    specs = []
    for i in range(n):
        gpus = draw(st.sampled_from([2, 4, 8]))
        specs.append(
            node(
                f"n{i}",
                gpus=gpus,
                model=draw(st.sampled_from(list(models))),
                template="dgx-8gpu" if gpus == 8 else f"openb-{gpus}gpu",
                nics=8 if gpus == 8 else 0,
                cpu_milli=64000,
                memory_mib=256000,
                leaf=f"lf{i % 3}",
                spine=f"sp{i % 3 // 2}",
                superspine="ss0",
                hbd=f"h{i // 2}",
                zone="inference" if i == 0 else None,
                max_pods=draw(st.sampled_from([None, None, 0, 1, 2, 3, 5])) if pod_caps else None,
            )
        )
    state = ClusterState(specs)
    for spec in specs:
        for g in range(spec.gpus):
            if draw(st.integers(0, 9)) == 0:
                state.set_gpu_health(spec.name, g, False)
        if draw(st.integers(0, 14)) == 0:
            state.set_node_health(spec.name, False)
    return state


@st.composite
def jobs(draw: st.DrawFn, idx: int, *, capped: bool = False) -> Job:
    """A one-role :class:`~kant.model.Job` with id ``j<idx>``: training or inference, gang
    or not, 1 to 5 replicas each asking 0 to 8 whole GPUs (or, about one time in four, a
    100-900 milli share of one), some CPU, memory and 0 to 2 NICs, optionally restricted
    to a GPU model (``B200`` matches no node of :func:`clusters`) and optionally with a
    topology wish (node, HBD, leaf or spine; required or preferred). ``capped``: the role
    also gets a ``max_per_node`` of 1 to 3 (unless it requires one node for more pods)."""
    shared = draw(st.booleans()) and draw(st.booleans())
    res = Resources(
        gpus=0 if shared else draw(st.integers(0, 8)),
        gpu_milli=draw(st.sampled_from([100, 250, 500, 900])) if shared else 0,
        cpu_milli=draw(st.sampled_from([0, 1000, 16000])),
        memory_mib=draw(st.sampled_from([0, 1024])),
        rdma_nics=draw(st.integers(0, 2)),
    )
    tier = draw(st.sampled_from([None, Tier.NODE, Tier.HBD, Tier.LEAF, Tier.SPINE]))
    wish = None if tier is None else TopologyWish(tier=tier, required=draw(st.booleans()))
    replicas = draw(st.integers(1, 5))
    cap = draw(st.integers(1, 3)) if capped else None
    if cap is not None and wish is not None and wish.required and wish.tier is Tier.NODE:
        cap = max(cap, replicas)
    return Job(
        id=f"j{idx}",
        kind=draw(st.sampled_from(["training", "inference"])),
        gang=draw(st.booleans()),
        roles=(
            Role(
                replicas=replicas,
                resources=res,
                gpu_models=draw(st.sampled_from([frozenset(), {"H100"}, {"A100"}, {"B200"}])),
                topology=wish,
                max_per_node=cap,
            ),
        ),
    )


def standalone_placement_strategies() -> list[str]:
    """The built-in placement strategies that need no target workload (the FGD-style ones
    need one and are covered by the packing tests)."""
    from kant.errors import ValidationError
    from kant.placement import make_strategy, strategy_names

    out = []
    for name in strategy_names():
        try:
            make_strategy(name)
        except ValidationError:
            continue
        out.append(name)
    return out
