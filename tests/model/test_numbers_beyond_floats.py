"""An int too large for a float (``10**400``: ``math.isfinite`` raises OverflowError on it)
given where a finite number is expected is refused with a typed KantError naming the
argument, never an OverflowError, and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from kant.admission.quota import Quota
from kant.errors import InvalidConfigError, InvalidConfigFileError, KantError, ValidationError
from kant.k8s.settings import parse_settings
from kant.model import is_finite_number
from kant.queueing import Queue
from kant.scheduler import Scheduler
from kant.sim.packing import arrival_order
from kant.sim.simulator import SimConfig
from kant.sim.traces import OpenbPod
from kant.sim.workloads import paper_training_workload
from kant.testing import ClusterBuilder, check_invariants, job

HUGE = 10**400
PODS = [OpenbPod(name="p", cpu_milli=1000, memory_mib=0, num_gpu=1, gpu_milli=1000)]


def _waiting() -> Scheduler:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    s.submit(job("a", gpus=8, runtime=100), now=0)
    s.submit(job("b", gpus=8), now=0)
    s.step(1)
    return s


@pytest.mark.parametrize("arg", ["horizon", "grace_period", "default_runtime", "tick"])
def test_a_start_estimate_asked_with_seconds_beyond_the_floats_is_refused_naming_them(
    arg: str,
) -> None:
    s = _waiting()
    with pytest.raises(ValidationError) as e:
        s.start_estimates(2, **{arg: HUGE})
    assert e.value.field == arg
    assert s.start_estimates(2)["b"].start == 101.0
    check_invariants(s)


DOORS: list[tuple[str, Callable[[], Any], str]] = [
    ("a queue's submit time", lambda: Queue().submit(job("a"), HUGE), "now"),
    ("a quota's nominal GPUs", lambda: Quota.gpus("t", "H100", HUGE), "nominal"),
    (
        "a quota's borrowing limit",
        lambda: Quota.gpus("t", "H100", 1, borrowing_limit=HUGE),
        "borrowing_limit",
    ),
    ("a simulated failure's time", lambda: SimConfig(failures=((HUGE, "n0"),)), "failures"),
    (
        "the packing protocol's inflation",
        lambda: arrival_order(PODS, seed=0, capacity_milli=1000, inflate=HUGE),
        "inflate",
    ),
    (
        "a Kubernetes setting's seconds",
        lambda: parse_settings({"debounceSeconds": HUGE}),
        "kubernetes.debounceSeconds",
    ),
    ("a training workload's load", lambda: paper_training_workload(10, load=HUGE), "load"),
]


@pytest.mark.parametrize(("door", "call", "field"), DOORS, ids=[d[0] for d in DOORS])
def test_a_number_beyond_the_floats_is_refused_with_a_typed_error_naming_its_field(
    door: str, call: Callable[[], Any], field: str
) -> None:
    with pytest.raises(KantError) as e:
        call()
    assert getattr(e.value, "field", None) == field, door


def test_the_packing_protocol_refuses_an_inflation_that_is_not_a_number() -> None:
    with pytest.raises(ValidationError, match="inflate"):
        arrival_order(PODS, seed=0, capacity_milli=1000, inflate="1.3")  # type: ignore[arg-type]


def test_a_kubernetes_setting_beyond_the_floats_in_a_config_file_names_its_key() -> None:
    with pytest.raises(InvalidConfigFileError, match="debounceSeconds"):
        parse_settings({"leaseDurationSeconds": 15, "debounceSeconds": -HUGE})


@pytest.mark.parametrize(
    ("v", "finite"),
    [(1, True), (1.5, True), (2**1023, True), (HUGE, False), (-HUGE, False),
     (2**1000, True), (-(2**1000), True), (2**1000 - 1, True), (2**1024, False), (-(2**1024), False),
     (float("nan"), False), (float("inf"), False), (True, False), ("1", False), (None, False),
     (np.float32(1.3), True), (np.int64(1), True), (np.float64("nan"), False),
     (np.float32("inf"), False), (np.bool_(True), False), (Fraction(13, 10), True),
     (Fraction(HUGE, 1), False), (Fraction(1, HUGE), True), (1 + 0j, False)],
)  # fmt: skip
def test_is_finite_number_says_whether_a_value_is_a_finite_real_number(
    v: object, finite: bool
) -> None:
    assert is_finite_number(v) is finite


@pytest.mark.parametrize("inflate", [np.float32(1.3), np.int64(1), Fraction(13, 10), 1.3], ids=repr)
def test_the_packing_protocol_takes_an_inflation_of_any_real_number_type(inflate: Any) -> None:
    want = arrival_order(PODS, seed=0, capacity_milli=1000, inflate=float(inflate))
    assert arrival_order(PODS, seed=0, capacity_milli=1000, inflate=inflate) == want


@pytest.mark.parametrize("seconds", [np.float32(50), np.int64(50), Fraction(50)], ids=repr)
def test_a_start_estimate_takes_seconds_of_any_real_number_type_as_floats(seconds: Any) -> None:
    s = _waiting()
    got = s.start_estimates(2, horizon=seconds, default_runtime=seconds, tick=seconds)
    want = s.start_estimates(2, horizon=50.0, default_runtime=50.0, tick=50.0)
    assert got == want
    assert all(type(e.start) is float for e in got.values() if e.start is not None)


def test_a_simulated_failure_time_of_any_real_number_type_is_kept_as_a_float() -> None:
    cfg = SimConfig(failures=((np.float32(5), "n0"), (Fraction(7, 2), "n1"), (3, "n2")))
    assert cfg.failures == ((5.0, "n0"), (3.5, "n1"), (3, "n2"))
    assert [type(t) for t, _n in cfg.failures] == [float, float, int]


NUMPY_GPUS = [
    *(t(100) for t in (np.int8, np.int16, np.int32, np.int64)),
    *(t(100) for t in (np.uint8, np.uint16, np.uint32, np.uint64)),
    np.int16(70), np.uint8(8), np.int32(5_000_000), np.float16(100), np.float32(0.5),
]  # fmt: skip
LIMITS = ["nominal", "borrowing_limit", "lending_limit"]


def _quota(field: str, gpus: Any) -> Quota:
    """A quota whose ``field`` is ``gpus`` GPUs (the nominal 10**7 GPUs when it is a limit)."""
    if field == "nominal":
        return Quota.gpus("t", "H100", gpus)
    return Quota.gpus("t", "H100", 10**7, **{field: gpus})


@pytest.mark.parametrize("gpus", NUMPY_GPUS, ids=repr)
@pytest.mark.parametrize("field", LIMITS)
def test_a_quota_in_gpus_of_a_small_numpy_type_is_that_number_of_gpus_in_milli(
    gpus: Any, field: str
) -> None:
    # the milli are counted on the number, not in its NumPy type (np.int16(70) * 1000 wraps
    # around to 4464, np.uint8(8) * 1000 overflows)
    got = getattr(_quota(field, gpus), field)
    assert got == round(float(gpus) * 1000)
    assert type(got) is int


@pytest.mark.parametrize("gpus", [1e306, -1e306, np.float64(1e306), 10**306], ids=repr)
@pytest.mark.parametrize("field", LIMITS)
def test_a_quota_whose_gpus_in_milli_are_beyond_the_floats_is_refused_naming_the_field(
    gpus: Any, field: str
) -> None:
    # (a negative one is said to be below 0, in the GPUs given, before its milli are counted)
    said = "must be a number of GPUs >= 0" if gpus < 0 else "must be a finite number of GPUs"
    _assert_quota_refused(field, gpus, said)


def _assert_quota_refused(field: str, gpus: Any, said: str) -> None:
    """A quota of ``gpus`` in ``field`` is refused, saying ``said`` and naming the field."""
    with pytest.raises(InvalidConfigError, match=said) as e:
        _quota(field, gpus)
    assert e.value.field == field


TINY = Fraction(1, 10**400)  # > 0, but its float is 0.0


@pytest.mark.parametrize("field", ["horizon", "default_runtime"])
def test_a_positive_number_of_seconds_whose_float_is_zero_is_refused_as_zero_is(
    field: str,
) -> None:
    s = _waiting()
    for zero in (0.0, TINY):
        with pytest.raises(ValidationError, match=r"must be None or a finite number") as e:
            s.start_estimates(2, **{field: zero})
        assert (e.value.field, e.value.value) == (field, zero)  # (the value given, named)
    assert s.start_estimates(2, **{field: Fraction(1, 10)}) == s.start_estimates(2, **{field: 0.1})


@pytest.mark.parametrize("field", ["grace_period", "tick"])
def test_a_number_of_seconds_that_may_be_zero_takes_one_whose_float_is_zero_as_zero(
    field: str,
) -> None:
    s = _waiting()
    assert s.start_estimates(2, **{field: TINY}) == s.start_estimates(2, **{field: 0.0})


def test_an_inflation_whose_float_is_zero_is_refused_naming_the_value_given() -> None:
    with pytest.raises(ValidationError, match=r"must be a number in \(0, 10\]") as e:
        arrival_order(PODS, seed=0, capacity_milli=1000, inflate=TINY)
    assert (e.value.field, e.value.value) == ("inflate", TINY)


def test_an_inflation_just_above_the_largest_whose_float_is_the_largest_is_taken_as_it() -> None:
    want = arrival_order(PODS, seed=0, capacity_milli=1000, inflate=10.0)
    assert arrival_order(PODS, seed=0, capacity_milli=1000, inflate=10 + TINY) == want


@pytest.mark.parametrize("gpus", [0.0004, 1.0005, 2.5e-4, np.float32(0.0001)], ids=repr)
@pytest.mark.parametrize("field", LIMITS)
def test_a_quota_in_gpus_finer_than_a_milli_gpu_is_refused_not_rounded(
    gpus: Any, field: str
) -> None:
    # (0.0004 GPUs was a quota of 0, 1.0005 one of 1 GPU, silently)
    _assert_quota_refused(field, gpus, "whole number of milli-GPUs")


@pytest.mark.parametrize(
    ("gpus", "milli"),
    [(0.3, 300), (0.001, 1), (1.7, 1700), (2.25, 2250), (12.345, 12345), (1e6, 10**9),
     (np.float32(0.1), 100), (np.float32(12.345), 12345), (np.float16(0.1), 100),
     (np.float64(0.7), 700)],
    ids=repr,
)  # fmt: skip
def test_a_quota_in_gpus_of_whole_milli_given_as_a_float_is_those_milli(
    gpus: Any, milli: int
) -> None:
    assert Quota.gpus("t", "H100", gpus).nominal == milli
