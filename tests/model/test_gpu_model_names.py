"""A GPU model's name is written joined by ``|`` wherever its string form is used (a role's
``gpu_models`` given as a string, the openb ``gpu_spec`` cell): ``"A100|H100"`` is two models. So a name holding
``|`` (or empty, or space-padded) is refused with a typed error naming it, wherever a model
name enters: a role's or task class's set of models, an openb record, a node, a quota, a
config or cluster file, a node list of a trace, the Kubernetes settings and pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.admission import Quota
from kant.config import load_config_text
from kant.errors import (
    InvalidClusterFileError,
    InvalidConfigError,
    InvalidConfigFileError,
    InvalidJobError,
    InvalidNodeError,
    InvalidObjectError,
    InvalidTraceError,
    KantError,
    ValidationError,
)
from kant.k8s.settings import K8sSettings, parse_settings
from kant.k8s.translate import pod_facts
from kant.model import NodeSpec, Resources, Role, is_gpu_model, split_gpu_models
from kant.placement.fragmentation import TaskClass
from kant.sim.traces.inference import load_pai_machines, load_spot_nodes
from kant.sim.traces.openb import OpenbPod, load_openb_nodes
from kant.topology.fabric import cluster_from_dict

PIPED = ["A|B", "A100|", "|", "a | b"]
PADDED = ["", " A100", "A100 "]


@pytest.mark.parametrize("models", [{"A|B"}, ("A100|H100",), ["H100", "A|B"], frozenset({"|"})])
def test_a_set_of_models_holding_a_name_with_a_pipe_is_refused_by_every_model_object(
    models: Any,
) -> None:
    # {"A|B"} used to be kept as one model "A|B", which any string form reads back as two.
    with pytest.raises(InvalidJobError) as exc:
        Role(gpu_models=models)
    assert exc.value.field == "gpu_models" and "|" in str(exc.value)
    with pytest.raises(ValidationError, match="gpu_models"):
        TaskClass(resources=Resources(gpus=1), gpu_models=models)
    with pytest.raises(InvalidTraceError, match="gpu_models"):
        OpenbPod(name="p", cpu_milli=0, memory_mib=0, num_gpu=1, gpu_milli=1000,
                 gpu_models=models)  # fmt: skip


@pytest.mark.parametrize("model", PIPED + PADDED)
def test_a_node_whose_gpu_model_has_a_pipe_or_is_padded_is_refused_naming_it(model: str) -> None:
    with pytest.raises(InvalidNodeError) as exc:
        NodeSpec(name="n0", gpu_model=model, gpus=8)
    assert exc.value.field == "gpu_model" and exc.value.value == model


@pytest.mark.parametrize("model", PIPED + PADDED)
def test_a_quota_on_a_gpu_model_with_a_pipe_is_refused_naming_it(model: str) -> None:
    with pytest.raises(InvalidConfigError) as exc:
        Quota(tenant="a", gpu_model=model, nominal=1000)
    assert exc.value.field == "gpu_model" and exc.value.value == model


def test_a_config_file_quota_on_a_piped_model_is_refused_at_its_key_path() -> None:
    text = "tenants:\n  - name: a\n    quotas:\n      'A100|H100': {nominalQuota: 8}\n"
    with pytest.raises(InvalidConfigFileError, match=r"tenants\[0\]\.quotas\.A100\|H100"):
        load_config_text(text)


def test_a_cluster_file_node_of_a_piped_model_is_refused_at_its_entry() -> None:
    doc = {"version": 1, "nodes": [{"name": "a", "gpu_model": "A100|H100", "gpus": 8}]}
    with pytest.raises(InvalidClusterFileError, match=r"nodes\[0\].*gpu_model"):
        cluster_from_dict(doc)


def test_trace_node_lists_refuse_a_piped_model_by_file_and_line(tmp_path: Path) -> None:
    openb = tmp_path / "nodes.csv"
    openb.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,96000,1024,8,V100|P100\n")
    with pytest.raises(InvalidTraceError, match=r"nodes\.csv:2: .*model"):
        load_openb_nodes(openb)
    pai = tmp_path / "pai.csv"
    pai.write_text("m0,V100M32,96,384,8\nm1,V100|T4,96,384,8\n")
    with pytest.raises(InvalidTraceError, match=r"pai\.csv:2: .*gpu_type"):
        load_pai_machines(pai)
    spot = tmp_path / "spot.csv"
    spot.write_text("gpu_model,gpu_capacity_num,cpu_num,node_name\nA10|T4,1,8,n0\n")
    with pytest.raises(InvalidTraceError, match=r"spot\.csv:2: .*gpu_model"):
        load_spot_nodes(spot)


def test_the_kubernetes_default_gpu_model_with_a_pipe_is_refused() -> None:
    with pytest.raises(InvalidConfigFileError, match="defaultGpuModel"):
        parse_settings({"defaultGpuModel": "gpu|other"})


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"schedulerName": "kant", "containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}], **spec},
    }  # fmt: skip


def test_a_pod_selecting_a_piped_gpu_model_is_an_invalid_object() -> None:
    s = K8sSettings()
    by_selector = _pod({"nodeSelector": {s.gpu_model_label: "A100|H100"}})
    by_affinity = _pod({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": s.gpu_model_label, "operator": "In",
                                   "values": ["A100|H100"]}]}]}}}})  # fmt: skip
    for pod in (by_selector, by_affinity):
        with pytest.raises(InvalidObjectError, match=r"A100\|H100"):
            pod_facts(pod, s)


def test_valid_model_names_and_sets_are_kept() -> None:
    assert NodeSpec(name="n", gpu_model="NVIDIA-H100-80GB-HBM3", gpus=8).gpu_model
    assert Role(gpu_models={"A100", "H100"}).gpu_models == {"A100", "H100"}
    assert Role(gpu_models="A100|H100").gpu_models == {"A100", "H100"}
    assert Quota(tenant="a", gpu_model="H100", nominal=1).gpu_model == "H100"


NAMES = st.text(alphabet="AB1 |/-", max_size=6)


@given(models=st.frozensets(NAMES, max_size=4))
def test_a_set_of_models_a_role_keeps_reads_back_the_same_from_its_string_form(
    models: frozenset[str],
) -> None:
    try:
        role = Role(gpu_models=models)
    except KantError:
        assert not all(is_gpu_model(m, slash=True) for m in models)
        return
    assert split_gpu_models("|".join(sorted(role.gpu_models))) == role.gpu_models == models


@given(model=NAMES)
def test_a_node_model_is_kept_exactly_when_it_is_one_model_in_the_string_form(model: str) -> None:
    try:
        spec = NodeSpec(name="n", gpu_model=model, gpus=1)
    except InvalidNodeError:
        assert split_gpu_models(model) != {model} or "/" in model
        return
    assert split_gpu_models(spec.gpu_model or "") == {model}


def test_trace_inventories_keep_a_model_with_a_slash_as_before(tmp_path: Path) -> None:
    # (a vendor-prefixed name, NVIDIA/A10, was always taken there; only '|' is refused)
    pai = tmp_path / "pai.csv"
    pai.write_text("m0,NVIDIA/A10,96,384,8\n")
    assert [s.model for s in load_pai_machines(pai).shapes] == ["NVIDIA/A10"]
    spot = tmp_path / "spot.csv"
    spot.write_text("gpu_model,gpu_capacity_num,cpu_num,node_name\nNVIDIA/A10,1,8,n0\n")
    assert [s.model for s in load_spot_nodes(spot).shapes] == ["NVIDIA/A10"]
