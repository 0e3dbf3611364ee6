"""Every invalid field of a job, a role, resources, a node or a binding is rejected with a
typed error that names the field and the value."""

from __future__ import annotations

import math
import pickle
from decimal import Decimal
from fractions import Fraction
from typing import Any

import attrs
import numpy as np
import pytest

from kant.errors import (
    InvalidBindingError,
    InvalidConfigFileError,
    InvalidJobError,
    InvalidNodeError,
    InvalidResourcesError,
    KantError,
    UnknownNodeError,
    ValidationError,
)
from kant.model import Binding, Job, JobKind, NodeSpec, PodId, Resources, Role, Tier, TopologyWish


def _job(**kw: Any) -> Job:
    base: dict[str, Any] = {"id": "j1", "roles": (Role(resources=Resources(gpus=1)),)}
    base.update(kw)
    return Job(**base)


def _node(**kw: Any) -> NodeSpec:
    base: dict[str, Any] = {"name": "n1", "gpu_model": "H100", "gpus": 8}
    base.update(kw)
    return NodeSpec(**base)


BAD_RESOURCES = [
    ("a negative GPU count is rejected", {"gpus": -1}, "gpus"),
    ("a float GPU count is rejected", {"gpus": 1.5}, "gpus"),
    ("a bool is not a GPU count", {"gpus": True}, "gpus"),
    ("a GPU share of a whole GPU or more is rejected", {"gpu_milli": 1000}, "gpu_milli"),
    (
        "a GPU share combined with whole GPUs is rejected",
        {"gpus": 1, "gpu_milli": 500},
        "gpu_milli",
    ),
    ("negative CPU is rejected", {"cpu_milli": -5}, "cpu_milli"),
    ("negative memory is rejected", {"memory_mib": -1}, "memory_mib"),
    ("negative NICs are rejected", {"rdma_nics": -2}, "rdma_nics"),
    ("more GPUs than a node can have is rejected", {"gpus": 65}, "gpus"),
]


@pytest.mark.parametrize(("case", "kw", "field"), BAD_RESOURCES, ids=[c[0] for c in BAD_RESOURCES])
def test_bad_resources(case: str, kw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidResourcesError) as err:
        Resources(**kw)
    assert err.value.field == field
    assert field in str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, KantError)


BAD_JOBS = [
    ("an empty job id is rejected", {"id": ""}, "id"),
    ("a job id with a slash is rejected", {"id": "a/b"}, "id"),
    ("a non-string tenant is rejected", {"tenant": 3}, "tenant"),
    ("a string priority is rejected", {"priority": "high"}, "priority"),
    ("a negative submit time is rejected", {"submitted_at": -1.0}, "submitted_at"),
    ("an infinite submit time is rejected", {"submitted_at": float("inf")}, "submitted_at"),
    ("an unknown job kind is rejected", {"kind": "batch"}, "kind"),
    ("a job without roles is rejected", {"roles": ()}, "roles"),
    (
        "two roles with one name are rejected",
        {"roles": (Role(name="w"), Role(name="w"))},
        "roles",
    ),
    ("a non-bool gang flag is rejected", {"gang": 1}, "gang"),
    ("a zero runtime estimate is rejected", {"runtime_estimate": 0}, "runtime_estimate"),
    ("a non-bool preemptible flag is rejected", {"preemptible": "yes"}, "preemptible"),
]


@pytest.mark.parametrize(("case", "kw", "field"), BAD_JOBS, ids=[c[0] for c in BAD_JOBS])
def test_bad_jobs(case: str, kw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidJobError) as err:
        _job(**kw)
    assert err.value.field == field
    assert repr(kw[field]) in str(err.value)


BAD_ROLES = [
    ("zero replicas are rejected", {"replicas": 0}, "replicas"),
    ("a role name with spaces around it is rejected", {"name": " w"}, "name"),
    ("resources must be a Resources", {"resources": {"gpus": 1}}, "resources"),
    ("an empty GPU model name is rejected", {"gpu_models": ["H100", ""]}, "gpu_models"),
    ("a list of GPU models inside the list is rejected", {"gpu_models": [["H100"]]}, "gpu_models"),
    ("a set of GPU models holding a dict is rejected", {"gpu_models": ("H100", {})}, "gpu_models"),
    ("a topology wish must be a TopologyWish", {"topology": "leaf"}, "topology"),
    (
        "a role cannot spread replicas it requires on one node",
        {"replicas": 2, "spread": True, "topology": TopologyWish(tier=Tier.NODE, required=True)},
        "spread",
    ),
]


@pytest.mark.parametrize(("case", "kw", "field"), BAD_ROLES, ids=[c[0] for c in BAD_ROLES])
def test_bad_roles(case: str, kw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidJobError) as err:
        Role(**kw)
    assert err.value.field == field


BAD_NODES = [
    ("an empty node name is rejected", {"name": ""}, "name"),
    ("negative GPUs are rejected", {"gpus": -8}, "gpus"),
    ("GPUs without a model are rejected", {"gpu_model": None}, "gpu_model"),
    ("a model without GPUs is rejected", {"gpus": 0}, "gpus"),
    ("negative CPU is rejected", {"cpu_milli": -1}, "cpu_milli"),
    ("a spine without a leaf is rejected", {"spine": "s0"}, "leaf"),
    ("a superspine without a spine is rejected", {"leaf": "l0", "superspine": "x"}, "spine"),
    ("too many NICs are rejected", {"rdma_nics": 65}, "rdma_nics"),
]


@pytest.mark.parametrize(("case", "kw", "field"), BAD_NODES, ids=[c[0] for c in BAD_NODES])
def test_bad_nodes(case: str, kw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidNodeError) as err:
        _node(**kw)
    assert err.value.field == field


POD = PodId(job="j", role="w", index=0)
BAD_BINDINGS = [
    ("a repeated GPU id is rejected", {"gpus": (1, 1)}, "gpus"),
    ("a GPU id past 63 is rejected", {"gpus": (64,)}, "gpus"),
    ("a share over one GPU is rejected", {"gpus": (0,), "gpu_milli": 1001}, "gpu_milli"),
    ("a share split over two GPUs is rejected", {"gpus": (0, 1), "gpu_milli": 500}, "gpus"),
    ("a zero share is rejected", {"gpus": (0,), "gpu_milli": 0}, "gpu_milli"),
    ("a pod id must be a PodId", {"pod": "j/w/0"}, "pod"),
    # (each raised TypeError from the converter: 'int' object is not iterable)
    ("GPU ids that are one int are rejected", {"gpus": 3}, "gpus"),
    ("GPU ids that are None are rejected", {"gpus": None}, "gpus"),
    ("NIC ids that are a float are rejected", {"nics": 1.5}, "nics"),
]


@pytest.mark.parametrize(("case", "kw", "field"), BAD_BINDINGS, ids=[c[0] for c in BAD_BINDINGS])
def test_bad_bindings(case: str, kw: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {"pod": POD, "node": "n1"}
    base.update(kw)
    with pytest.raises(InvalidBindingError) as err:
        Binding(**base)
    assert err.value.field == field


def test_a_job_lists_its_pods_role_by_role_and_sums_its_gpus() -> None:
    job = Job(
        id="serve",
        kind="inference",
        gang=False,
        roles=(
            Role(name="prefill", replicas=2, resources=Resources(gpus=4), gpu_models="H100"),
            Role(name="decode", replicas=3, resources=Resources(gpu_milli=500), gpu_models="L40"),
        ),
    )
    assert job.kind is JobKind.INFERENCE
    assert [str(p) for p in job.pods()] == [
        "serve/prefill/0", "serve/prefill/1", "serve/decode/0", "serve/decode/1", "serve/decode/2",
    ]  # fmt: skip
    assert job.total_milli == 2 * 4000 + 3 * 500
    assert job.gpu_models == {"H100", "L40"}
    assert job.role("decode").resources.is_shared


def test_asking_a_job_whether_something_that_is_not_a_pod_id_is_its_pod_names_it() -> None:
    j = _job()
    assert j.has_pod(PodId(job="j1", role="worker", index=0))
    assert not j.has_pod(PodId(job="j1", role="worker", index=1))
    for bad in ("j1/worker/0", None, ("j1", "worker", 0)):
        with pytest.raises(InvalidJobError, match="field 'pod'"):
            j.has_pod(bad)  # type: ignore[arg-type]


def test_gpu_models_accept_the_openb_pipe_syntax() -> None:
    assert Role(gpu_models="V100M16|V100M32").gpu_models == {"V100M16", "V100M32"}


def test_value_objects_are_frozen_and_evolve_into_variants() -> None:
    job = _job(priority=1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        job.priority = 5  # type: ignore[misc]
    assert attrs.evolve(job, priority=5).priority == 5
    with pytest.raises(InvalidJobError):
        attrs.evolve(job, priority="5")


def test_spread_goes_with_a_preferred_node_wish_or_a_single_replica_required_on_one_node() -> None:
    node = TopologyWish(tier=Tier.NODE, required=True)
    assert Role(replicas=1, spread=True, topology=node).spread
    assert Role(replicas=3, spread=True, topology=TopologyWish(tier=Tier.NODE)).spread
    assert Role(replicas=3, spread=True, topology=TopologyWish(tier=Tier.LEAF, required=True))


def test_topology_wish_orders_tiers_from_closest_to_farthest() -> None:
    assert Tier.NODE < Tier.HBD < Tier.LEAF < Tier.SPINE < Tier.SUPERSPINE < Tier.CLUSTER
    assert TopologyWish(tier=Tier.LEAF, required=True).required
    with pytest.raises(InvalidJobError):
        TopologyWish(tier="leaf")  # type: ignore[arg-type]


def test_error_messages_name_field_value_and_location() -> None:
    err = InvalidJobError("priority", "x", "must be an int", where="jobs.csv:3")
    assert str(err) == "jobs.csv:3: invalid job: field 'priority' = 'x': must be an int"


def test_an_int_too_long_for_python_to_print_is_refused_naming_its_type_not_printing_it() -> None:
    with pytest.raises(InvalidNodeError, match="'cpu_milli' = <int too large to print>"):
        NodeSpec(name="a", cpu_milli=10**5000)  # (the error's repr raised ValueError)


@pytest.mark.parametrize(
    "err",
    [
        InvalidJobError("priority", "x", "must be an int", where="jobs.csv:3"),
        InvalidConfigFileError("tenants[0].name", "kant.yaml", "must be a string", value=3),
        UnknownNodeError("n9"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_error_raised_in_a_worker_process_reaches_the_parent_as_itself(err: KantError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err) and vars(back) == vars(err)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"job": "", "role": "w", "index": 0}, "job"),
        ({"job": "a/b", "role": "w", "index": 0}, "job"),
        ({"job": "j", "role": " w", "index": 0}, "role"),
        ({"job": "j", "role": "w", "index": -1}, "index"),
        ({"job": "j", "role": "w", "index": 1.0}, "index"),
        ({"job": "j", "role": "w", "index": True}, "index"),
    ],
)
def test_a_pod_id_with_a_bad_field_is_refused_naming_it(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidJobError) as got:
        PodId(**fields)
    assert got.value.field == field


def test_a_pod_id_missing_a_field_or_given_an_unknown_one_says_which() -> None:
    with pytest.raises(TypeError, match=r"missing \['index'\]"):
        PodId(job="j", role="w")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unknown \['pod'\]"):
        PodId(job="j", role="w", index=0, pod=1)  # type: ignore[call-arg]


def test_pod_ids_sort_by_job_role_index_and_survive_pickling_and_copies() -> None:
    import copy
    import pickle

    pods = [PodId(job=j, role=r, index=i) for j in ("b", "a") for r in ("w", "ps") for i in (10, 2)]
    assert [tuple(p) for p in sorted(pods)] == sorted(tuple(p) for p in pods)
    p = PodId(job="j", role="w", index=3)
    for back in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p), copy.copy(p)):
        assert back == p and type(back) is PodId and hash(back) == hash(p)
    assert str(p) == "j/w/3" and repr(p) == "PodId(job='j', role='w', index=3)"
    job_id, role, index = p
    assert (job_id, role, index) == (p.job, p.role, p.index)


@pytest.mark.parametrize(
    "v",
    [
        0,
        -3,
        1.5,
        2**1000,
        2**1024,
        -(10**400),
        math.nan,
        math.inf,
        -math.inf,
        True,
        False,
        "1",
        None,
        Fraction(1, 3),
        Decimal("1"),
        np.float64(2.0),
        np.float64(math.nan),
        np.int64(7),
    ],
)
def test_a_time_and_a_metric_number_accept_and_refuse_the_same_values(v: object) -> None:
    # (finite_time and finite_number were two copies of one check, free to drift apart)
    from kant.errors import InvalidTimeError
    from kant.model import finite_number, finite_time

    try:
        want: float | None = finite_number(v, "x")
    except ValidationError:
        want = None
    if want is None:
        with pytest.raises(
            InvalidTimeError,
            match=r"^invalid time: field .now. = .*: step: must be a finite number of seconds$",
        ):
            finite_time(v, "step")
    else:
        got = finite_time(v, "step")
        assert type(got) is float and got == want
