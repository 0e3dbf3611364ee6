"""The FGD expected fragmentation amount, by hand and against a plain reference."""

from __future__ import annotations

import numpy as np
import pytest

from kant.errors import ValidationError
from kant.metrics import (
    TaskClass,
    compile_workload,
    fragmented_gpus,
    fragmented_gpus_by_node,
    node_fragmentation,
    node_fragmentation_by_class,
    workload_from_jobs,
)
from kant.model import Binding, PodId, Resources
from kant.testing import ClusterBuilder, job

ONE = Resources(gpus=1, cpu_milli=1000)
FOUR = Resources(gpus=4, cpu_milli=1000)
SHARE_600 = Resources(gpu_milli=600, cpu_milli=1000)
SHARE_400 = Resources(gpu_milli=400, cpu_milli=1000)
CPU_ONLY = Resources(cpu_milli=1000)

# One 4-GPU node: GPUs with 1000, 1000, 500 and 0 milli free; 8 CPUs and 64 GiB free.
ROW = (np.array([[1000, 1000, 500, 0]]), np.array([8000]), np.array([65536]), np.array([0]))


def frag_of(res: Resources, models: frozenset[str] = frozenset(), row=ROW) -> float:
    cw = compile_workload([TaskClass(resources=res, gpu_models=models)], ["H100"])
    return float(node_fragmentation(*row, cw)[0])


@pytest.mark.parametrize(
    ("res", "expected"),
    [
        (ONE, 500),
        (SHARE_600, 500),
        (SHARE_400, 0),
        (FOUR, 2500),
        (CPU_ONLY, 2500),
        (Resources(gpus=2, cpu_milli=9000), 2500),
        (Resources(gpus=1, memory_mib=70000), 2500),
        (Resources(gpus=2), 500),
    ],
    ids=[
        "a whole-GPU task cannot use the half-free GPU",
        "a 0.6 share cannot use the half-free GPU either",
        "a 0.4 share can use every GPU with free milli",
        "a 4-GPU task cannot run at all so every free milli is a fragment",
        "a CPU-only task cannot use any GPU",
        "a task short of CPU cannot run",
        "a task short of memory cannot run",
        "a task without CPU or memory needs is limited by GPUs only",
    ],
)
def test_fragment_of_one_task_class_on_a_node(res: Resources, expected: float) -> None:
    assert frag_of(res) == expected


def test_a_task_restricted_to_another_gpu_model_sees_every_free_gpu_as_fragment() -> None:
    assert frag_of(ONE, frozenset({"A100"})) == 2500
    assert frag_of(ONE, frozenset({"A100", "H100"})) == 500
    assert frag_of(ONE, frozenset({"NOPE"})) == 2500


def test_the_node_amount_weights_classes_by_popularity() -> None:
    cw = compile_workload([(ONE, 3.0), (FOUR, 1.0)], ["H100"])
    assert cw.weight.tolist() == [0.75, 0.25]
    assert node_fragmentation(*ROW, cw).tolist() == [0.75 * 500 + 0.25 * 2500]
    by = node_fragmentation_by_class(*ROW, cw)
    assert by.tolist() == [[500.0, 2500.0]]


def test_idle_and_full_nodes_hold_no_fragment_for_a_task_that_fits() -> None:
    cw = compile_workload([(ONE, 1.0)], ["H100"])
    rows = (
        np.array([[1000] * 8, [0] * 8]),
        np.array([8000, 8000]),
        np.array([1, 1]),
        np.array([0, 0]),
    )
    assert node_fragmentation(*rows, cw).tolist() == [0.0, 0.0]


def test_hypothetical_rows_need_not_come_from_a_cluster_and_model_minus_one_is_no_model() -> None:
    cw = compile_workload([(ONE, 1.0, "A100"), (ONE, 1.0)], ["H100", "A100"])
    rows = (
        np.array([[700, 1000], [700, 1000], [700, 1000]]),
        np.array([1000, 1000, 1000]),
        np.array([0, 0, 0]),
        np.array([1, 0, -1]),
    )
    # class 0 runs only on A100 (model 1); class 1 anywhere
    assert node_fragmentation_by_class(*rows, cw).tolist() == [
        [700, 700],
        [1700, 700],
        [1700, 700],
    ]


def test_bad_rows_are_rejected() -> None:
    cw = compile_workload([(ONE, 1.0)], ["H100"])
    with pytest.raises(ValidationError):
        node_fragmentation(np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(3), cw)
    with pytest.raises(ValidationError):
        node_fragmentation(np.zeros((2, 2)), np.zeros(3), np.zeros(2), np.zeros(2), cw)
    with pytest.raises(ValidationError):
        node_fragmentation(np.zeros((1, 2)), np.zeros(1), np.zeros(1), np.array([1]), cw)
    with pytest.raises(ValidationError):
        compile_workload([], ["H100"])
    with pytest.raises(ValidationError):
        compile_workload([(ONE, 0.0)], ["H100"])
    with pytest.raises(ValidationError):
        compile_workload([ONE], ["H100"])  # type: ignore[list-item]


def _reference(gf, cpu, mem, mid, classes, names) -> list[float]:
    """A plain per-node, per-class transcription of the FGD definition."""
    w = np.array([c.weight for c in classes], dtype=float)
    w /= w.sum()
    out = []
    for n in range(len(cpu)):
        free = [int(x) for x in gf[n]]
        total = sum(free)
        acc = 0.0
        for c, p in zip(classes, w, strict=True):
            r = c.resources
            if r.total_milli == 0:
                f = total
            else:
                unit = r.gpu_milli if r.is_shared else 1000
                k = 1 if r.is_shared else r.gpus
                model = names[mid[n]] if mid[n] >= 0 else None
                can = (
                    sum(1 for x in free if x >= unit) >= k
                    and cpu[n] >= r.cpu_milli
                    and mem[n] >= r.memory_mib
                    and (not c.gpu_models or model in c.gpu_models)
                )
                f = sum(x for x in free if x < unit) if can else total
            acc += p * f
        out.append(acc)
    return out


def test_the_vectorised_amount_matches_a_plain_transcription_on_random_rows() -> None:
    rng = np.random.default_rng(7)
    names = ["H100", "A100"]
    classes = [
        TaskClass(resources=ONE, weight=5),
        TaskClass(resources=FOUR, weight=1, gpu_models="H100"),
        TaskClass(resources=SHARE_400, weight=3),
        TaskClass(resources=Resources(gpu_milli=250, memory_mib=1000), weight=2),
        TaskClass(resources=CPU_ONLY, weight=1),
        TaskClass(resources=Resources(gpus=8, cpu_milli=4000), weight=1, gpu_models="A100"),
    ]
    cw = compile_workload(classes, names)
    n = 300
    gf = rng.choice([0, 100, 250, 400, 500, 750, 1000], size=(n, 8))
    gf[rng.random((n, 8)) < 0.2] = 1000
    cpu = rng.integers(0, 5000, size=n)
    mem = rng.integers(0, 3000, size=n)
    mid = rng.integers(-1, 2, size=n)
    got = node_fragmentation(gf, cpu, mem, mid, cw)
    assert got.tolist() == pytest.approx(_reference(gf, cpu, mem, mid, classes, names))


def test_the_cluster_amount_sums_the_nodes_in_gpus() -> None:
    st = ClusterBuilder().leaf("lf", nodes=2).leaf("lf-a", nodes=1, model="A100").build()
    st.bind(Binding(pod=PodId(job="a", role="w", index=0), node="lf-n0", gpus=(0,), gpu_milli=500))
    st.bind(Binding(pod=PodId(job="b", role="w", index=0), node="lf-n1", gpus=tuple(range(8))))
    workload = [(Resources(gpus=1), 1.0, "H100")]
    # lf-n0: the half-free GPU 0 is a fragment; lf-n1 is full; the A100 node is useless to it
    assert fragmented_gpus(st, workload) == pytest.approx(0.5 + 8.0)
    assert fragmented_gpus_by_node(st, workload) == {"lf-n0": 0.5, "lf-a-n0": 8.0}
    cw = compile_workload(workload, st.group_names("pool"))
    assert fragmented_gpus(st, cw) == pytest.approx(8.5)


def test_a_workload_can_be_derived_from_jobs_with_a_popularity_cutoff() -> None:
    jobs = [
        job("a", gpus=1, replicas=6),
        job("b", gpu_milli=500, replicas=3),
        job("c", gpus=0, cpu_milli=1000),
    ]
    full = workload_from_jobs(jobs)
    assert [(c.resources.total_milli, round(c.weight, 3)) for c in full] == [
        (1000, 0.6),
        (500, 0.3),
        (0, 0.1),
    ]
    top = workload_from_jobs(jobs, popularity=0.85)
    assert [c.resources.total_milli for c in top] == [1000, 500]
    gpu_only = workload_from_jobs(jobs, include_cpu_only=False)
    assert len(gpu_only) == 2 and gpu_only[0].weight == pytest.approx(6 / 9)
