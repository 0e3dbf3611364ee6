"""An ``OpenbPod`` built by hand is checked as a pod-list row is: a bad value raises the
loader's ``InvalidTraceError`` naming the field and value, never a record that breaks later."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.errors import InvalidTraceError, KantError
from kant.sim.traces import OpenbPod, load_openb_pods

GOOD: dict[str, Any] = {
    "name": "p",
    "cpu_milli": 1000,
    "memory_mib": 1024,
    "num_gpu": 1,
    "gpu_milli": 500,
    "creation_time": 10.0,
    "deletion_time": 20.0,
    "scheduled_time": 12.0,
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": " p"}, "name"),
        ({"name": "a/b"}, "name"),
        ({"name": 7}, "name"),
        ({"cpu_milli": -5}, "cpu_milli"),
        ({"cpu_milli": 1.5}, "cpu_milli"),
        ({"cpu_milli": True}, "cpu_milli"),
        ({"memory_mib": -1}, "memory_mib"),
        ({"memory_mib": "1024"}, "memory_mib"),
        ({"num_gpu": -1, "gpu_milli": 1000}, "num_gpu"),
        ({"num_gpu": False, "gpu_milli": 0}, "num_gpu"),
        ({"gpu_milli": 2000}, "gpu_milli"),
        ({"gpu_milli": -1}, "gpu_milli"),
        ({"num_gpu": 0, "gpu_milli": 500}, "gpu_milli"),
        ({"num_gpu": 1, "gpu_milli": 0}, "gpu_milli"),
        ({"num_gpu": 2, "gpu_milli": 500}, "gpu_milli"),
        ({"num_gpu": 65, "gpu_milli": 1000}, "num_gpu"),
        ({"creation_time": math.nan}, "creation_time"),
        ({"deletion_time": math.inf}, "deletion_time"),
        ({"scheduled_time": -1.0}, "scheduled_time"),
        ({"creation_time": "10"}, "creation_time"),
        ({"creation_time": 30.0}, "deletion_time"),
        ({"creation_time": 15.0, "deletion_time": None}, "scheduled_time"),
        ({"qos": 3}, "qos"),
        ({"phase": ""}, "phase"),
        ({"gpu_models": frozenset({""})}, "gpu_models"),
        ({"gpu_models": [" A100"]}, "gpu_models"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else str(v),
)
def test_a_pod_record_built_with_a_bad_value_names_the_field(
    change: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidTraceError) as exc:
        OpenbPod(**{**GOOD, **change})
    assert exc.value.field == field
    assert f"'{field}'" in str(exc.value)


def test_the_example_of_a_hand_built_pod_with_negative_counts_is_refused() -> None:
    with pytest.raises(InvalidTraceError, match="field 'cpu_milli' = -5"):
        OpenbPod(name="p", cpu_milli=-5, memory_mib=0, num_gpu=-1, gpu_milli=2000)


def test_good_records_keep_their_values_and_times_become_floats() -> None:
    pod = OpenbPod(**{**GOOD, "creation_time": 10, "gpu_models": "A100|H100"})
    assert pod.creation_time == 10.0 and isinstance(pod.creation_time, float)
    assert pod.gpu_models == {"A100", "H100"}
    assert pod.resources.gpu_milli == 500
    whole = OpenbPod(name="w", cpu_milli=0, memory_mib=0, num_gpu=8, gpu_milli=1000)
    assert whole.resources.gpus == 8 and whole.runtime is None
    cpu_only = OpenbPod(name="c", cpu_milli=1, memory_mib=1, num_gpu=0, gpu_milli=0)
    assert cpu_only.gpu_request_milli == 0


def test_a_bad_file_row_keeps_the_loaders_message_with_its_line(tmp_path: Path) -> None:
    f = tmp_path / "pods.csv"
    f.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
        "p1,1000,1024,1,500,0,10\n"
        "p2,1000,1024,1,500,50,10\n"
    )
    with pytest.raises(InvalidTraceError) as exc:
        load_openb_pods(f)
    assert exc.value.where == f"{f}:3" and exc.value.field == "deletion_time"
    assert exc.value.value == "10" and "is before creation_time=50" in exc.value.reason


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=2000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
)


@given(
    name=st.one_of(st.sampled_from(["p", "", " p", "a/b"]), VALUES),
    cpu=VALUES,
    mem=VALUES,
    num_gpu=st.one_of(st.integers(min_value=-1, max_value=9), VALUES),
    milli=st.one_of(st.sampled_from([0, 250, 999, 1000, 1001]), VALUES),
    created=VALUES,
    deleted=VALUES,
)
def test_any_pod_record_either_holds_finite_in_range_values_or_raises_the_trace_error(
    name: Any, cpu: Any, mem: Any, num_gpu: Any, milli: Any, created: Any, deleted: Any
) -> None:
    try:
        pod = OpenbPod(
            name=name,
            cpu_milli=cpu,
            memory_mib=mem,
            num_gpu=num_gpu,
            gpu_milli=milli,
            creation_time=created,
            deletion_time=deleted,
        )
    except InvalidTraceError:
        return
    except KantError as e:  # pragma: no cover - the failure this test exists to catch
        pytest.fail(f"another KantError: {e!r}")
    for v in (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli):
        assert type(v) is int and v >= 0
    assert pod.gpu_milli <= 1000
    assert (pod.num_gpu == 0) == (pod.gpu_milli == 0)
    assert pod.num_gpu <= 1 or pod.gpu_milli == 1000
    for t in (pod.creation_time, pod.deletion_time):
        assert t is None or (type(t) is float and math.isfinite(t) and t >= 0)
    if pod.creation_time is not None and pod.deletion_time is not None:
        assert pod.deletion_time >= pod.creation_time
    pod.resources  # noqa: B018 - a constructed record always converts


COLUMNS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    row=st.tuples(
        st.sampled_from(["p", "pod-7"]),
        st.sampled_from(["0", "1", "1000", "64000"]),
        st.sampled_from(["0", "1", "1024"]),
        st.sampled_from(["0,0", "1,250", "1,999", "1,1000", "2,1000", "8,1000"]),
        st.sampled_from(["", "A100", "A100|H100"]),
        st.sampled_from(["", "LS", "BE"]),
        st.sampled_from(["", "Running"]),
        st.sampled_from(["", "0", "10"]),
        st.sampled_from(["", "10", "1e3", "5.5e2"]),
        st.sampled_from(["", "10", "1e3", "5.5e2"]),
    )
)
def test_a_loaded_record_is_the_one_the_checked_constructor_builds(
    tmp_path: Path, row: tuple[str, ...]
) -> None:
    # The loader builds its records from checked cells without re-running the validators:
    # the public constructor accepts each one and builds the same record (values and types).
    f = tmp_path / "pods.csv"
    f.write_text(f"{COLUMNS}\n{','.join(row)}\n")
    (pod,) = load_openb_pods(f).pods
    again = OpenbPod(**attrs.asdict(pod, recurse=False))
    assert again == pod and repr(again) == repr(pod) and hash(again) == hash(pod)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        pod.num_gpu = 2  # type: ignore[misc]
