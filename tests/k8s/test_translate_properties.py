"""Properties of the translation: any group of pods becomes one job whose PodIds stand for its
pods one to one, and any binding's annotations read back as the same binding."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kant.k8s.settings import K8sSettings
from kant.k8s.translate import binding_annotations, build_job, job_id, pod_facts, recorded_binding
from kant.model import MILLI, PodId

S = K8sSettings()


def _pod(i: int, gpus: int, cpu: int, model: str | None, group: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "kant",
        "containers": [{"name": "c", "resources": {"requests": {
            "nvidia.com/gpu": str(gpus), "cpu": f"{cpu}m", "memory": "1Gi"}}}],
    }  # fmt: skip
    if model:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": model}
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    return {"metadata": {"name": f"p-{i}", "namespace": "ns", "labels": labels}, "spec": spec}


shapes = st.lists(
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([100, 500]),
              st.sampled_from([None, "H100", "A100"])),
    min_size=1, max_size=12,
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(shapes)
def test_a_group_becomes_one_job_whose_pod_ids_stand_for_its_pods_one_to_one(
    pods: list[tuple[int, int, str | None]],
) -> None:
    facts = [pod_facts(_pod(i, g, c, m, "grp"), S) for i, (g, c, m) in enumerate(pods)]
    jid = job_id(facts) + "#1"
    job, ids = build_job(facts, jid, 0.0)
    assert set(ids) == set(job.pods())
    assert sorted(ids.values()) == sorted(f.key for f in facts)
    by_key = {f.key: f for f in facts}
    for pid, key in ids.items():
        role = job.role(pid.role)
        assert role.resources == by_key[key].resources
        assert role.gpu_models == by_key[key].gpu_models
    assert job.num_pods == len(pods)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 63), unique=True, min_size=1, max_size=8),
    st.lists(st.integers(0, 63), unique=True, max_size=8),
    st.integers(1, MILLI),
    st.integers(0, 99),
)
def test_binding_annotations_read_back_as_the_same_binding(
    gpus: list[int], nics: list[int], milli: int, index: int
) -> None:
    if milli < MILLI:
        gpus = gpus[:1]
    pid = PodId(job="ns.g#3", role="worker-1", index=index)
    pod = {"metadata": {"name": "p", "namespace": "ns",
                        "annotations": binding_annotations(pid, gpus, nics, milli)}}  # fmt: skip
    assert recorded_binding(pod) == (pid, tuple(gpus), tuple(nics), milli)
