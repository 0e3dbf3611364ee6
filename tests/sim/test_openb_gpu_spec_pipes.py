"""An openb ``gpu_spec`` with an empty model name between pipes is a bad row, and an
``OpenbPod`` given such a string is refused, as a job's ``gpu_models`` is."""

from __future__ import annotations

from pathlib import Path

import pytest

from kant.errors import InvalidTraceError
from kant.sim.traces import OpenbPod, load_openb_pods

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


@pytest.mark.parametrize("spec", ["|", "A100||H100", "A100|"])
def test_a_gpu_spec_cell_with_an_empty_model_name_names_file_line_and_field(
    tmp_path: Path, spec: str
) -> None:
    f = tmp_path / "pods.csv"
    f.write_text(HEADER + "p1,1000,0,1,1000,A100\n" + f"p2,1000,0,1,1000,{spec}\n")
    with pytest.raises(InvalidTraceError) as exc:
        load_openb_pods(f)
    assert exc.value.field == "gpu_spec" and exc.value.where == f"{f}:3"


def test_an_empty_gpu_spec_cell_still_means_any_model(tmp_path: Path) -> None:
    f = tmp_path / "pods.csv"
    f.write_text(HEADER + "p1,1000,0,1,1000,\np2,1000,0,1,1000,A100|H100\n")
    pods = load_openb_pods(f).pods
    assert pods[0].gpu_models == frozenset() and pods[1].gpu_models == {"A100", "H100"}


@pytest.mark.parametrize("text", ["|", " | ", "A100||H100"])
def test_a_hand_built_pod_with_such_a_string_is_refused(text: str) -> None:
    with pytest.raises(InvalidTraceError, match="gpu_models"):
        OpenbPod(name="p", cpu_milli=0, memory_mib=0, num_gpu=1, gpu_milli=1000, gpu_models=text)
