"""SOR from bind/release/capacity events, and the GAR/SOR/GFR time series."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kant.errors import ValidationError
from kant.metrics import SorCollector, TimeSeries
from kant.model import Binding, PodId
from kant.testing import ClusterBuilder


def test_a_pod_level_job_counts_from_each_pods_binding() -> None:
    sor = SorCollector(total_gpus=8)
    sor.on_pods_bound("inf", 4000, 0, gang=False, job_complete=False)
    sor.on_pods_bound("inf", 2000, 5, gang=False, job_complete=False)
    sor.on_pods_released("inf", 6000, 10)
    # 4 GPUs x 10 s + 2 GPUs x 5 s over 8 GPUs x 20 s
    assert sor.sor(until=20) == pytest.approx(50 / 160)
    assert sor.gpu_seconds(20) == pytest.approx((50.0, 160.0))


def test_a_gang_job_counts_only_from_its_full_binding() -> None:
    sor = SorCollector(total_gpus=16)
    sor.on_pods_bound("g", 8000, 0, gang=True, job_complete=False)
    assert sor.allocated_gpus == 0
    sor.on_pods_bound("g", 8000, 5, gang=True, job_complete=True)
    assert sor.allocated_gpus == 16
    sor.on_pods_released("g", [8000, 8000], 15)
    assert sor.sor(until=20) == pytest.approx(16 * 10 / (16 * 20))


def test_a_gang_job_released_before_completing_its_binding_never_counts() -> None:
    sor = SorCollector(total_gpus=16)
    sor.on_pods_bound("g", 8000, 0, gang=True, job_complete=False)
    sor.on_pods_released("g", 8000, 7)
    assert sor.sor(until=10) == 0.0
    assert sor.jobs_counted() == {}


def test_capacity_changes_weigh_the_denominator_over_time() -> None:
    sor = SorCollector(total_gpus=8)
    sor.on_pods_bound("a", 8000, 0, gang=True, job_complete=True)
    sor.on_capacity(16, 10)
    assert sor.sor(until=20) == pytest.approx(160 / (80 + 160))
    assert sor.total_gpus == 16


def test_sor_over_a_window_uses_only_that_window() -> None:
    sor = SorCollector(start=100, total_gpus=10)
    sor.on_pods_bound("a", 5000, 100, gang=False, job_complete=False)
    sor.on_pods_released("a", 5000, 110)
    sor.on_pods_bound("b", 10000, 120, gang=False, job_complete=False)
    assert sor.sor(until=130, since=110) == pytest.approx(100 / 200)
    assert sor.sor(until=130) == pytest.approx(150 / 300)
    assert sor.sor(until=105) == pytest.approx(0.5)
    assert sor.now == 120


def test_a_fractional_share_occupies_its_milli() -> None:
    sor = SorCollector(total_gpus=1)
    sor.on_pods_bound("s", 500, 0, gang=False, job_complete=False)
    assert sor.sor(until=10) == pytest.approx(0.5)


def test_events_out_of_order_or_over_release_are_rejected_and_change_nothing() -> None:
    sor = SorCollector(total_gpus=4)
    sor.on_pods_bound("a", 1000, 10, gang=False, job_complete=False)
    with pytest.raises(ValidationError, match="back in time"):
        sor.on_pods_bound("b", 1000, 5, gang=False, job_complete=False)
    with pytest.raises(ValidationError, match="holds only"):
        sor.on_pods_released("a", 2000, 11)
    with pytest.raises(ValidationError):
        sor.on_pods_bound("a", -1, 12, gang=False, job_complete=False)
    with pytest.raises(ValidationError):
        sor.gpu_seconds(-1)
    assert sor.allocated_gpus == 1 and sor.now == 10
    assert SorCollector().sor() == 0.0


def test_the_time_series_samples_gar_sor_and_gfr_between_events() -> None:
    st = ClusterBuilder().leaf("lf", nodes=2).build()
    sor = SorCollector(total_gpus=st.total_gpus())
    ts = TimeSeries(sor, interval=10)
    # event at t=15: a 4-GPU pod-level pod is bound
    assert ts.advance(st, 15) == 2  # samples at 0 and 10 see the idle cluster
    st.bind(Binding(pod=PodId(job="a", role="w", index=0), node="lf-n0", gpus=(0, 1, 2, 3)))
    sor.on_pods_bound("a", 4000, 15, gang=False, job_complete=False)
    assert ts.advance(st, 30, inclusive=True) == 2  # 20 and 30
    cols = ts.arrays()
    assert cols["t"].tolist() == [0, 10, 20, 30]
    assert cols["gar"].tolist() == [0, 0, 0.25, 0.25]
    assert cols["gfr"].tolist() == [0, 0, 0.5, 0.5]
    assert cols["gfr_degree"].tolist() == [0, 0, 0.25, 0.25]
    assert cols["sor"][2] == pytest.approx(4 * 5 / (16 * 20))
    assert cols["sor"][3] == pytest.approx(4 * 15 / (16 * 30))


def test_a_time_series_with_explicit_times_and_no_sor_collector() -> None:
    st = ClusterBuilder().leaf("lf", nodes=1).build()
    ts = TimeSeries(times=[5, 1])
    assert ts.advance(st, 100) == 2
    assert [s.t for s in ts.samples] == [1, 5]
    assert math.isnan(ts.samples[0].sor)
    assert ts.advance(st, 200) == 0
    with pytest.raises(ValidationError):
        TimeSeries()
    with pytest.raises(ValidationError):
        TimeSeries(interval=0)


NOT_FINITE = [math.inf, -math.inf, math.nan, 10**400, "10", None, True]


@pytest.mark.parametrize(
    "bad", NOT_FINITE, ids=["inf", "-inf", "nan", "10**400", "str", "None", "bool"]
)
def test_a_time_or_amount_that_is_no_finite_number_is_refused_naming_it_and_changes_nothing(
    bad: object,
) -> None:
    # (accepted before: a collector of inf GPUs read SOR 0, a sample interval of inf recorded
    # a sample at t=nan, a NaN sample time was kept, sor(until=nan) read 0)
    st = ClusterBuilder().leaf("lf", nodes=1).build()
    sor = SorCollector(total_gpus=8)
    sor.on_pods_bound("a", 8000, 10, gang=False, job_complete=False)
    calls: list[tuple[str, object]] = [
        ("total_gpus", lambda: SorCollector(total_gpus=bad)),
        ("start", lambda: SorCollector(start=bad)),
        ("total_gpus", lambda: sor.on_capacity(bad, 20)),
        ("t", lambda: sor.on_capacity(4, bad)),
        ("until", lambda: sor.gpu_seconds(bad)),
        ("until", lambda: sor.sor(until=bad)),
        ("since", lambda: sor.sor(until=10, since=bad)),
        ("interval", lambda: TimeSeries(interval=bad)),
        ("start", lambda: TimeSeries(interval=10, start=bad)),
        ("times", lambda: TimeSeries(times=[0.0, bad, 50.0])),
    ]
    if bad is not None:  # (None: the default, no bound)
        calls.append(("t", lambda: TimeSeries(sor, interval=10).advance(st, bad)))
        calls.append(("t", lambda: TimeSeries(sor, interval=10).sample(st, bad)))
    for field, call in calls:
        if bad is None and field in ("until", "since"):
            continue  # (None: the latest event / the start)
        with pytest.raises(ValidationError) as exc:
            call()  # type: ignore[operator]
        assert exc.value.field == field, (field, exc.value)
    assert sor.total_gpus == 8 and sor.now == 10 and sor.sor(until=20) == 0.5


def test_a_time_series_refuses_a_sample_time_that_is_no_number_before_recording_any() -> None:
    with pytest.raises(ValidationError) as exc:
        TimeSeries(times=[0.0, math.nan, 50.0])
    assert exc.value.field == "times" and math.isnan(exc.value.value)


def test_a_bind_event_of_the_wrong_kind_is_refused_before_the_clock_moves() -> None:
    # job=["j"] raised TypeError after the clock had moved to 50: a later event at 10 was
    # refused; np.int64(1000), what a column read gives, raised TypeError
    s = SorCollector(total_gpus=16)
    for job, milli in ((["j"], 1000), ("j", "1000"), ("j", None), ("j", [1000, -1]), ("j", 2.5)):
        with pytest.raises(ValidationError):
            s.on_pods_bound(job, milli, 50.0, gang=False, job_complete=True)  # type: ignore[arg-type]
    s.on_pods_bound("j", np.int64(1000), 10.0, gang=False, job_complete=True)
    s.on_pods_bound("k", [np.int64(500), 500], 10.0, gang=False, job_complete=True)
    s.on_pods_released("j", 1000, 20.0)
    assert s.sor(until=20.0) == pytest.approx((1000 * 10 + 1000 * 10) / (16000 * 20))


def test_a_window_that_ends_before_it_starts_is_refused() -> None:
    sor = SorCollector(start=0.0, total_gpus=8)
    sor.on_pods_bound("a", 8000, 0.0, gang=True, job_complete=True)
    sor.on_capacity(8, 100.0)
    assert sor.sor(until=50.0, since=50.0) == 0.0  # (an empty window: no GPU-time)
    with pytest.raises(ValidationError, match="field 'since' ="):
        sor.sor(until=10.0, since=90.0)  # (read 0.0: as if the window were empty)


@pytest.mark.parametrize(
    "milli",
    [b"12", bytearray(b"12"), "12", {500: "a"}, {500, 1000}],
    ids=["bytes", "bytearray", "str", "mapping", "set"],
)
def test_a_pods_milli_of_bytes_text_a_mapping_or_a_set_is_refused_naming_it_and_changes_nothing(
    milli: object,
) -> None:
    # (b"12" counted as the ints 49 and 50, 99 milli; a dict counted its keys, a set lost
    # pods of equal milli)
    s = SorCollector(total_gpus=16)
    s.on_pods_bound("a", 1000, 10.0, gang=False, job_complete=True)
    for call in (
        lambda: s.on_pods_bound("x", milli, 50.0, gang=False, job_complete=True),  # type: ignore[arg-type]
        lambda: s.on_pods_released("a", milli, 50.0),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError) as exc:
            call()
        assert exc.value.field == "pods_gpu_milli"
    assert s.now == 10.0 and s.jobs_counted() == {"a": 1000}


@pytest.mark.parametrize(
    ("field", "gang", "complete"),
    [
        ("gang", "no", False),
        ("gang", 1, True),
        ("job_complete", True, "yes"),
        ("job_complete", False, None),
    ],
)
def test_a_gang_or_job_complete_that_is_no_bool_is_refused_naming_it_before_the_clock_moves(
    field: str, gang: object, complete: object
) -> None:
    # (gang="no" was taken as a gang: its milli waited for a completion that never came)
    s = SorCollector(total_gpus=16)
    with pytest.raises(ValidationError) as exc:
        s.on_pods_bound("y", 4000, 50.0, gang=gang, job_complete=complete)  # type: ignore[arg-type]
    assert exc.value.field == field
    s.on_pods_bound("y", 4000, 10.0, gang=False, job_complete=False)
    assert s.now == 10.0 and s.jobs_counted() == {"y": 4000}


@pytest.mark.parametrize("bad", [5, "sor", SorCollector, [SorCollector()]])
def test_a_time_series_given_a_sor_that_is_no_collector_is_refused_naming_it(bad: object) -> None:
    # (TimeSeries(sor=5) was taken, and its first sample raised AttributeError)
    with pytest.raises(ValidationError) as exc:
        TimeSeries(bad, interval=60)  # type: ignore[arg-type]
    assert exc.value.field == "sor"
