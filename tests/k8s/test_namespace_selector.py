"""Pod affinity terms with a ``namespaceSelector``: a term is about the pods of the namespaces
it lists and of those whose labels its selector matches (kube-scheduler's InterPodAffinity),
read as the set of namespaces it selects now; a namespace created, deleted or relabelled has
the pods whose terms read namespaces' labels read again (kant's waiting pods and the pods it
holds for other schedulers), so the next cycle places by the new set.

The test API server (1.20) drops ``namespaceSelector`` (the field came in 1.21): the
integration scenarios read the cluster through a view of it that gives the pods they name
the term they were created with, as a newer server would store it. Namespaces, their labels,
their watch and the bindings are the real server's."""

from __future__ import annotations

import copy
import string
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kant.config import parse_config
from kant.errors import InvalidObjectError
from kant.k8s.client import Api, ApiError
from kant.k8s.settings import K8sSettings
from kant.k8s.shim import Shim
from kant.k8s.translate import (
    NAMESPACE_LABEL,
    NamespaceIndex,
    PodFacts,
    held_job,
    namespace_selectors,
    namespace_uses,
    pod_facts,
    reads_namespace_labels,
)
from kant.model import NodeRequirement, PodAffinityTerm
from kant.queueing import JobPhase

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

HOST = "kubernetes.io/hostname"
S = K8sSettings()
NAMESPACES = {
    "red": {"team": "x", "tier": "prod"},
    "blue": {"team": "x"},
    "green": {"team": "y"},
    "bare": {},
}


def _term(nsel: Any = None, *, names: list[str] | None = None, **labels: str) -> dict[str, Any]:
    t: dict[str, Any] = {"labelSelector": {"matchLabels": labels or {"app": "db"}},
                         "topologyKey": HOST}  # fmt: skip
    if nsel is not None:
        t["namespaceSelector"] = nsel
    if names is not None:
        t["namespaces"] = names
    return t


def _anti(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def _pod(affinity: dict[str, Any], *, ns: str = "ns1", node: str | None = None,
         scheduler: str = "kant", name: str = "p") -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {"schedulerName": scheduler, "affinity": affinity, "containers": [
        {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}  # fmt: skip
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": ns, "labels": {"app": "x"}}, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}  # fmt: skip


def _facts(affinity: dict[str, Any], namespaces: Any = NAMESPACES) -> PodFacts:
    return pod_facts(_pod(affinity), S, namespaces=namespaces)


def _namespaces_of(term: PodAffinityTerm) -> tuple[str, ...] | None:
    """The namespaces a term reads (None: every namespace; () none)."""
    reqs = [r for r in term.selector if r.key == NAMESPACE_LABEL]
    if not reqs:
        return None
    (r,) = reqs
    return r.values if r.operator.value == "In" else ()


# --------------------------------------------------------------------------- translation


def test_a_namespace_selector_reads_the_namespaces_whose_labels_it_matches_now() -> None:
    f = _facts(_anti(_term({"matchLabels": {"team": "x"}})))
    assert _namespaces_of(f.pod_anti_affinity[0]) == ("blue", "red")
    expr = {"matchExpressions": [{"key": "team", "operator": "In", "values": ["x", "y"]},
                                 {"key": "tier", "operator": "DoesNotExist"}]}  # fmt: skip
    assert _namespaces_of(_facts(_anti(_term(expr))).pod_anti_affinity[0]) == ("blue", "green")
    notin = {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]}
    assert _namespaces_of(_facts(_anti(_term(notin))).pod_anti_affinity[0]) == ("bare", "green")
    exists = {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}
    assert _namespaces_of(_facts(_anti(_term(exists))).pod_anti_affinity[0]) == ("red",)


def test_the_listed_namespaces_and_the_selected_ones_are_read_together_and_not_its_own() -> None:
    both = _term({"matchLabels": {"team": "y"}}, names=["elsewhere"])
    assert _namespaces_of(_facts(_anti(both)).pod_anti_affinity[0]) == ("elsewhere", "green")
    # (the pod's own namespace, ns1, is read only when the term names neither)
    assert _namespaces_of(_facts(_anti(_term())).pod_anti_affinity[0]) == ("ns1",)
    assert _namespaces_of(_facts(_anti(_term({}))).pod_anti_affinity[0]) is None


def test_a_selector_that_matches_no_namespace_and_lists_none_selects_no_pod() -> None:
    (t,) = _facts(_anti(_term({"matchLabels": {"team": "nobody"}}))).pod_anti_affinity
    assert not t.selects({"app": "db", NAMESPACE_LABEL: "ns1"})
    assert not t.selects({"app": "db", NAMESPACE_LABEL: "red"})
    # (no namespace known: the same, never "every namespace")
    (t,) = _facts(_anti(_term({"matchLabels": {"team": "x"}})), {}).pod_anti_affinity
    assert not t.selects({"app": "db", NAMESPACE_LABEL: "red"})


def test_preferred_terms_and_a_held_pods_terms_read_namespace_selectors_too() -> None:
    soft = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": _term({"matchLabels": {"team": "y"}})}]}}  # fmt: skip
    (p,) = _facts(soft).pod_preferences
    assert _namespaces_of(p.term) == ("green",)
    pod = _pod(_anti(_term({"matchLabels": {"team": "x"}})), node="n0",
               scheduler="default-scheduler")  # fmt: skip
    job, err = held_job(pod, "external:ns1..p", namespaces=NAMESPACES)
    assert err is None
    assert _namespaces_of(job.roles[0].pod_anti_affinity[0]) == ("blue", "red")


_BAD = [
    ({"matchExpressions": [{"key": "team", "operator": "Gt", "values": ["1"]}]},
     "namespaceSelector.matchExpressions[0].operator"),
    ({"matchExpressions": [{"key": "team", "operator": "Near", "values": ["x"]}]},
     "namespaceSelector.matchExpressions[0].operator"),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": []}]},
     "namespaceSelector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "team", "operator": "In"}]},
     "namespaceSelector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["x"]}]},
     "namespaceSelector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": [1]}]},
     "namespaceSelector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": "x"}]},
     "namespaceSelector.matchExpressions[0].values"),
    ({"matchExpressions": ["team"]}, "namespaceSelector.matchExpressions[0]"),
    ({"matchExpressions": {"key": "team"}}, "namespaceSelector.matchExpressions"),
    ({"matchLabels": {"team": 7}}, "namespaceSelector.matchLabels"),
    ({"matchLabels": ["team"]}, "namespaceSelector.matchLabels"),
    ("team=x", "namespaceSelector"),
]  # fmt: skip


@pytest.mark.parametrize(("nsel", "names"), _BAD)
def test_a_malformed_namespace_selector_refuses_the_pod_naming_the_field(
    nsel: Any, names: str
) -> None:
    with pytest.raises(InvalidObjectError) as e:
        _facts(_anti(_term(nsel)))
    assert names in str(e.value), str(e.value)
    assert "podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]." in str(e.value)


def test_a_held_pods_malformed_namespace_selector_is_left_out_with_the_error() -> None:
    bad = _term({"matchExpressions": [{"key": "team", "operator": "Near", "values": ["x"]}]})
    pod = _pod(_anti(bad), node="n0", scheduler="default-scheduler")
    job, err = held_job(pod, "external:ns1..p", namespaces=NAMESPACES)
    assert isinstance(err, InvalidObjectError) and "namespaceSelector" in str(err)
    assert not job.roles[0].pod_anti_affinity


def test_only_pods_with_a_namespace_selector_with_requirements_read_namespaces_labels() -> None:
    assert reads_namespace_labels(_pod(_anti(_term({"matchLabels": {"team": "x"}}))))
    soft = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": _term({"matchExpressions": [
            {"key": "team", "operator": "Exists"}]})}]}}  # fmt: skip
    assert reads_namespace_labels(_pod(soft))
    assert not reads_namespace_labels(_pod(_anti(_term({}), _term(names=["a"]))))
    assert not reads_namespace_labels(_pod({}))
    assert not reads_namespace_labels({"spec": {"affinity": {"podAffinity": "x"}}})


_label_values = st.sampled_from(["x", "y", "z"])
_ns_labels = st.dictionaries(st.sampled_from(["team", "tier"]), _label_values, max_size=2)
_namespaces = st.dictionaries(
    st.text(string.ascii_lowercase, min_size=1, max_size=3), _ns_labels, max_size=5
)
_expr = st.one_of(
    st.builds(lambda k, op, vs: {"key": k, "operator": op, "values": vs},
              st.sampled_from(["team", "tier"]), st.sampled_from(["In", "NotIn"]),
              st.lists(_label_values, min_size=1, max_size=2)),
    st.builds(lambda k, op: {"key": k, "operator": op},
              st.sampled_from(["team", "tier"]), st.sampled_from(["Exists", "DoesNotExist"])),
)  # fmt: skip
_selector = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": st.dictionaries(st.sampled_from(["team", "tier"]), _label_values,
                                       max_size=2),
        "matchExpressions": st.lists(_expr, max_size=2),
    },
)  # fmt: skip


def _kube_selects(nsel: dict[str, Any] | None, names: list[str], own: str, ns: str,
                  labels: dict[str, str]) -> bool:  # fmt: skip
    """kube-scheduler's rule for the namespace of a pod a term is about (AffinityTerm.Matches
    with the selector unrolled over the namespaces that exist): listed, or matched by the
    selector (an empty one matches all, a null one none); with neither, the pod's own."""
    if nsel is None and not names:
        return ns == own
    if ns in names:
        return True
    if nsel is None:
        return False
    for k, v in (nsel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in nsel.get("matchExpressions") or ():
        have = labels.get(e["key"])
        op = e["operator"]
        if op == "In" and have not in e["values"]:
            return False
        if op == "NotIn" and have in e["values"]:
            return False
        if op == "Exists" and have is None:
            return False
        if op == "DoesNotExist" and have is not None:
            return False
    return True


@settings(max_examples=150, deadline=None)
@given(
    _namespaces,
    st.one_of(st.none(), _selector),
    st.lists(st.text(string.ascii_lowercase, min_size=1, max_size=3), max_size=2),
)
def test_a_term_is_about_the_pods_of_exactly_the_namespaces_kube_scheduler_reads(
    namespaces: dict[str, dict[str, str]], nsel: dict[str, Any] | None, names: list[str]
) -> None:
    (t,) = _facts(_anti(_term(nsel, names=names)), namespaces).pod_anti_affinity
    for ns in sorted({*namespaces, *names, "ns1"}):
        want = _kube_selects(nsel, names, "ns1", ns, namespaces.get(ns, {}))
        if ns not in namespaces and nsel is not None and ns not in names:
            # a namespace the shim has not seen: only an empty selector reads it (kant
            # selects among the namespaces it knows; kube-scheduler would read its labels
            # as none, which a NotIn or DoesNotExist selector matches)
            want = not (nsel.get("matchLabels") or nsel.get("matchExpressions"))
        assert t.selects({"app": "db", NAMESPACE_LABEL: ns}) == want, (ns, nsel, names)


_events = st.lists(
    st.one_of(
        st.tuples(st.just("ns"), st.sampled_from(["a", "b", "c", "d"]),
                  st.one_of(st.none(), _ns_labels)),
        st.tuples(st.just("pod"), st.sampled_from(["p", "q", "r"]),
                  st.lists(_selector, max_size=2)),
    ),
    max_size=14,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(_namespaces, _events, st.lists(st.sampled_from(["a", "x"]), max_size=2))
@example(  # two selectors of one pod trade their choices: the pod's terms changed
    start={},
    events=[
        ("ns", "a", {"team": "y"}),
        ("pod", "p", [{"matchLabels": {"team": "x"}}, {"matchLabels": {"team": "y"}}]),
        ("ns", "a", {"team": "x"}),
    ],
    names=[],
)
def test_the_namespace_index_keeps_each_selectors_choice_and_names_exactly_the_pods_it_changes(
    start: dict[str, dict[str, str]], events: list[tuple[str, str, Any]], names: list[str]
) -> None:
    index = NamespaceIndex()
    for n, labels in start.items():
        assert index.update(n, labels) == []  # (no pod watched yet)
    uses: dict[str, frozenset[Any]] = {}  # pod -> its selectors
    listed: dict[str, frozenset[Any]] = {}  # pod -> its uses (selector, names listed)

    def brute(need: Any, listed: list[str]) -> NodeRequirement:  # (by a scan)
        return held_requirement(need, listed, dict(index))

    def choices() -> dict[str, dict[Any, NodeRequirement]]:  # (each selector's own choice)
        # (by selector: two selectors of a pod trading their choices, one namespace relabelled
        # from one's labels to the other's, is a change to the pod's terms, though the sorted
        # choices alone are the same)
        return {k: {n: brute(n, []) for n in needs} for k, needs in uses.items()}

    for kind, name, arg in events:
        if kind == "pod":
            nsels = [sel for sel in arg if sel.get("matchLabels") or sel.get("matchExpressions")]
            pod = _pod(_anti(*(_term(sel, names=names[: i % 2 + 1]) for i, sel in
                               enumerate(nsels))))  # fmt: skip
            index.watch(name, namespace_uses(pod))
            needs = namespace_selectors(pod)
            if needs:
                uses[name] = needs
                listed[name] = namespace_uses(pod)
            else:
                uses.pop(name, None)
                listed.pop(name, None)
            assert index.pods() == sorted(uses)
        else:
            before = choices()
            got = index.update(name, arg)
            after = choices()
            assert got == sorted(k for k in uses if before[k] != after[k]), (name, arg)
        for needs in uses.values():
            for need in needs:
                assert index.requirement(need, names) == brute(need, names)
        for pod_uses in listed.values():
            for need, names_of in pod_uses:
                assert index.requirement(need, names_of) == brute(need, list(names_of))
        # (kept: at most one per distinct use of the pods watched, whatever was asked)
        assert index.kept() <= len(set().union(*listed.values()))


def test_the_namespace_index_keeps_a_requirement_only_while_a_pod_watched_has_that_term() -> None:
    """Short-lived pods whose terms list other namespaces beside a selector leave nothing
    behind: the requirements kept follow the terms of the pods watched, not every list of
    names ever seen."""
    index = NamespaceIndex()
    for i in range(50):
        index.update(f"ns{i}", {"team": "y"})
    sel = {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]}

    def take(name: str, names: list[str] | None) -> PodAffinityTerm:
        pod = _pod(_anti(_term(sel, names=names)), name=name)
        index.watch(name, namespace_uses(pod))
        (t,) = pod_facts(pod, S, namespaces=index).pod_anti_affinity
        return t

    assert len(_namespaces_of(take("keeper", None)) or ()) == 50
    assert index.kept() == 1
    for i in range(20):
        assert len(_namespaces_of(take(f"p{i}", [f"other{i}"])) or ()) == 51
        assert index.kept() == 2
        index.watch(f"p{i}", frozenset())  # (the pod is gone)
        assert index.kept() == 1
    # two pods with the same term share one requirement, kept until the last of them goes
    a, b = take("a", ["x1"]), take("b", ["x1"])
    assert a.selector[-1] is b.selector[-1] and index.kept() == 2
    index.watch("a", frozenset())
    assert index.kept() == 2
    index.watch("b", frozenset())
    assert index.kept() == 1
    index.watch("keeper", frozenset())
    assert index.kept() == 0 and index.pods() == []


def held_requirement(need: Any, names: list[str], namespaces: dict[str, Any]) -> NodeRequirement:
    """The namespace requirement of a term with selector ``need``, read from a plain mapping
    of the namespaces (a scan of them all)."""
    nsel = {"matchExpressions": [
        {"key": r.key, "operator": r.operator.value, "values": list(r.values)} for r in need
    ]}  # fmt: skip
    (t,) = _facts(_anti(_term(nsel, names=names)), namespaces).pod_anti_affinity
    (req,) = [r for r in t.selector if r.key == NAMESPACE_LABEL]
    return req


def test_a_namespace_event_reads_again_only_the_pods_whose_selectors_choice_it_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kant.k8s.shim as shim_module

    shim = _shim()
    try:
        shim.handle("Namespace", "ADDED", _ns("red", team="x"))
        shim.handle("Pod", "ADDED", _pod(_anti(_term({"matchLabels": {"team": "x"}})), name="x"))
        shim.handle("Pod", "ADDED", _pod(_anti(_term({"matchLabels": {"team": "y"}})), name="y"))
        notin = {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["z"]}]}
        shim.handle("Pod", "ADDED", _pod(_anti(_term(notin)), name="n"))
        read: list[str] = []
        real = shim_module.pod_facts

        def spy(pod: Any, *a: Any, **kw: Any) -> PodFacts:
            read.append(pod["metadata"]["name"])
            return real(pod, *a, **kw)

        monkeypatch.setattr(shim_module, "pod_facts", spy)
        shim.handle("Namespace", "MODIFIED", _ns("red", team="y"))  # (x loses it, y gains it)
        assert read == ["x", "y"]
        read.clear()
        shim.handle("Namespace", "ADDED", _ns("blue", team="w"))  # (only n's NotIn selects it)
        assert read == ["n"]
        read.clear()
        shim.handle("Namespace", "MODIFIED", _ns("blue", team="v"))  # (no choice changes)
        assert read == []
    finally:
        shim._pool.shutdown()


# --------------------------------------------------------------------------- the shim


def _shim() -> Shim:
    return Shim(None, parse_config({}))  # type: ignore[arg-type]  # (no call reaches the API)


def _ns(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_a_namespace_relabelled_has_a_held_pods_terms_read_again() -> None:
    shim = _shim()
    try:
        shim.handle("Namespace", "ADDED", _ns("red", team="x"))
        shim.handle("Namespace", "ADDED", _ns("blue"))
        shim.handle("Node", "ADDED", _node("n0"))
        pod = _pod(_anti(_term({"matchLabels": {"team": "x"}})), node="n0",
                   scheduler="default-scheduler")  # fmt: skip
        shim.handle("Pod", "ADDED", pod)
        pid = shim._held["ns1/p"]

        def read() -> tuple[str, ...] | None:
            job = shim.scheduler.cluster.described(pid.job)
            assert job is not None
            return _namespaces_of(job.roles[0].pod_anti_affinity[0])

        assert read() == ("red",)
        shim.handle("Namespace", "MODIFIED", _ns("blue", team="x"))
        assert read() == ("blue", "red")
        shim.handle("Namespace", "DELETED", _ns("red", team="x"))
        assert read() == ("blue",)
        shim.handle("Namespace", "ADDED", _ns("new", team="x"))
        assert read() == ("blue", "new")
    finally:
        shim._pool.shutdown()


def test_a_namespace_event_reads_again_only_the_pods_whose_terms_read_namespaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kant.k8s.shim as shim_module

    shim = _shim()
    try:
        shim.handle("Namespace", "ADDED", _ns("red", team="x"))
        shim.handle("Pod", "ADDED", _pod(_anti(_term({"matchLabels": {"team": "x"}})), name="s"))
        for i in range(5):
            shim.handle("Pod", "ADDED", _pod(_anti(_term()), name=f"plain-{i}"))
        assert shim._namespaces.pods() == ["ns1/s"]
        read: list[str] = []
        real = shim_module.pod_facts

        def spy(pod: Any, *a: Any, **kw: Any) -> PodFacts:
            read.append(pod["metadata"]["name"])
            return real(pod, *a, **kw)

        monkeypatch.setattr(shim_module, "pod_facts", spy)
        shim.handle("Namespace", "MODIFIED", _ns("red", team="y"))
        assert read == ["s"]
        read.clear()
        # (a namespace event that changes no label, such as its status, reads none again)
        shim.handle("Namespace", "MODIFIED", {**_ns("red", team="y"), "status": {"phase": "x"}})
        assert read == []
        shim.handle("Pod", "DELETED", _pod({}, name="s"))
        assert not shim._namespaces.pods()
    finally:
        shim._pool.shutdown()


def test_a_waiting_job_is_described_again_in_place_with_the_namespaces_its_selector_reads_now() -> (
    None
):
    shim = _shim()
    try:
        shim.handle("Namespace", "ADDED", _ns("red", team="x"))
        shim.handle("Pod", "ADDED", _pod(_anti(_term({"matchLabels": {"team": "x"}}))))
        jid, _ = shim._id_of["ns1/p"]
        e = shim.scheduler.queue.entry(jid)
        seq, since = e.seq, e.pending_since
        (t,) = e.job.roles[0].pod_anti_affinity
        assert _namespaces_of(t) == ("red",)
        shim.handle("Namespace", "ADDED", _ns("blue", team="x"))
        # the same job, its place and its wait kept: a new job would start its wait again
        assert shim._id_of["ns1/p"][0] == jid
        e = shim.scheduler.queue.entry(jid)
        assert (e.seq, e.pending_since, e.phase) == (seq, since, JobPhase.PENDING)
        (t,) = e.job.roles[0].pod_anti_affinity
        assert _namespaces_of(t) == ("blue", "red")
        # (a change that leaves the set as it was changes nothing)
        version = e.version
        shim.handle("Namespace", "ADDED", _ns("green", team="y"))
        assert shim._id_of["ns1/p"][0] == jid and e.version == version
    finally:
        shim._pool.shutdown()


def test_a_waiting_pod_whose_namespaces_change_keeps_its_place_before_a_pod_of_the_same_second() -> (
    None
):
    shim = Shim(None, parse_config({"queueing": {"policy": "strict-fifo"}}))  # type: ignore[arg-type]
    try:
        shim.handle("Namespace", "ADDED", _ns("ns1"))
        shim.handle("Node", "ADDED", _node("n0"))
        first = _pod(_anti(_term({"matchLabels": {"team": "x"}})), name="a")
        second = _pod({}, name="b")  # (created in the same second: a is first by arrival)
        shim.handle("Pod", "ADDED", first)
        shim.handle("Pod", "ADDED", second)
        shim.handle("Namespace", "ADDED", _ns("new", team="x"))
        order = [e.id for e in shim.scheduler.queue.candidates()]
        assert order == [shim._id_of["ns1/a"][0], shim._id_of["ns1/b"][0]]
    finally:
        shim._pool.shutdown()


def test_a_backfill_head_reading_namespaces_by_notin_keeps_its_wait_as_namespaces_come() -> None:
    config = {"queueing": {"policy": "backfill", "options": {"threshold": 600}}}
    clock = [1000.0]
    shim = Shim(None, parse_config(config), clock=lambda: clock[0])  # type: ignore[arg-type]
    try:
        shim.handle("Namespace", "ADDED", _ns("ns1"))
        notin = {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]}
        shim.handle("Pod", "ADDED", _pod(_anti(_term(notin))))
        jid, _ = shim._id_of["ns1/p"]
        since = shim.scheduler.queue.entry(jid).pending_since
        for i in range(1, 6):  # (a namespace made every 300 s, as CI does)
            clock[0] = 1000.0 + 300 * i
            shim.handle("Namespace", "ADDED", _ns(f"ci-{i}"))
            assert shim._id_of["ns1/p"][0] == jid
            assert shim.scheduler.queue.entry(jid).pending_since == since
    finally:
        shim._pool.shutdown()


class _OldRole:
    """An API server whose ClusterRole for the shim predates namespaces: 403 on them (no
    call other than the lists sync makes and the condition writes reaches it)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.writes: list[tuple[str, Any]] = []

    def has(self, api: str) -> bool:
        return False

    def policy_version(self) -> str:
        return "v1"

    def get(self, path: str, **query: Any) -> Any:
        if path == "/api/v1/namespaces":
            body = '{"reason": "Forbidden", "message": "namespaces is forbidden"}'
            raise ApiError(403, "GET", path, body)
        if path == "/api/v1/nodes":
            return {"items": [_node("n0")]}
        if path == "/api/v1/pods":
            return {"items": self.pods}
        return {"items": []}

    def patch(self, path: str, body: Any = None, **kw: Any) -> Any:
        self.writes.append((path, body))
        return {}

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        self.writes.append((path, body))
        return {}


def test_a_shim_refused_the_namespaces_starts_and_reads_no_namespace_selector(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sel = _anti(_term({"matchLabels": {"team": "x"}}))
    held = _pod(sel, name="held", node="n0", scheduler="default-scheduler")
    held["metadata"]["labels"] = {"app": "cache"}
    api = _OldRole([_pod(sel, name="selects"), _pod({}, name="plain"), held])
    shim = Shim(api, parse_config({}))  # type: ignore[arg-type]
    try:
        with caplog.at_level("WARNING", logger="kant.k8s.shim"):
            shim.sync()  # (before: ApiError 403, and the shim did not start)
            shim.sync()
        errors = [r for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and "get, list, watch on namespaces" in errors[0].getMessage()
        # a kant pod whose term selects namespaces by their labels is refused, saying why
        assert "ns1/selects" not in shim._id_of
        shim.cycle()
        shim.reap(wait=True)
        written = [str(body) for path, body in api.writes if "/pods/selects/" in path]
        assert any("kant: invalid:" in w and "the shim may not list namespaces: grant get, "
                   "list, watch on namespaces" in w for w in written), written  # fmt: skip
        # the others are scheduled as ever; the held pod's term is left out, with a warning
        assert "ns1/plain" in shim._id_of
        job = shim.scheduler.cluster.described(shim._held["ns1/held"].job)
        assert job is not None and not job.roles[0].pod_anti_affinity
        assert any("ns1/held" in r.getMessage() for r in caplog.records
                   if r.levelname == "WARNING")  # fmt: skip
    finally:
        shim._pool.shutdown()


def _node(name: str) -> dict[str, Any]:
    from kant.k8s.kubelet import node_object

    return node_object(name)


# --------------------------------------------------------------------------- integration


class _Newer:
    """The cluster's Api as a 1.21+ server, which keeps a pod's ``namespaceSelector``: the
    pods named in ``affinity`` are read (listed, watched, got) with that affinity."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.affinity: dict[str, dict[str, Any]] = {}  # pod name -> its spec.affinity

    def _fix(self, obj: Any) -> Any:
        if isinstance(obj, dict) and obj.get("kind", "Pod") == "Pod":
            aff = self.affinity.get((obj.get("metadata") or {}).get("name"))
            if aff is not None and isinstance(obj.get("spec"), dict):
                obj["spec"]["affinity"] = copy.deepcopy(aff)
        return obj

    def get(self, path: str, **query: Any) -> Any:
        doc = self.api.get(path, **query)
        for p in doc.get("items") or (doc,):
            self._fix(p)
        return doc

    def watch(self, path: str, rv: str, **kw: Any) -> Any:
        for ev in self.api.watch(path, rv, **kw):
            self._fix(ev.get("object"))
            yield ev

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


def _start(cluster: Cluster) -> tuple[Shim, _Newer]:
    import threading

    api = _Newer(cluster.api)
    shim = Shim(api, parse_config({"kubernetes": {"debounceSeconds": 0.05}}))  # type: ignore[arg-type]
    stop, ready = threading.Event(), threading.Event()
    t = threading.Thread(target=shim.run, args=(stop,), kwargs={"ready": ready}, daemon=True)
    t.start()
    assert ready.wait(30)
    cluster._stops.append((stop, t))
    return shim, api


def _foreign(cluster: Cluster, ns: str, name: str, node: str) -> None:
    """A pod of another scheduler labelled ``app: db``, bound to ``node``."""
    body = {"metadata": {"name": name, "namespace": ns, "labels": {"app": "db"}},
            "spec": {"schedulerName": "default-scheduler", "nodeName": node,
                     "containers": [{"name": "c", "image": "x",
                                     "resources": {"requests": {"cpu": "1"}}}]}}  # fmt: skip
    cluster.api.post(f"/api/v1/namespaces/{ns}/pods", body)


def _kant_pod(cluster: Cluster, api: _Newer, name: str, team: str) -> None:
    """A kant pod with required anti-affinity (by hostname) to the ``app: db`` pods of the
    namespaces labelled ``team``."""
    api.affinity[name] = _anti(_term({"matchLabels": {"team": team}}))
    body = {"metadata": {"name": name, "namespace": cluster.ns},
            "spec": {"schedulerName": "kant", "containers": [{"name": "c", "image": "x",
                     "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"},
                                   "limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip
    cluster.api.post(f"/api/v1/namespaces/{cluster.ns}/pods", body)


def _reason(cluster: Cluster, name: str) -> str:
    for c in cluster.get(name).get("status", {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return str(c.get("message", ""))
    return ""


def _namespace(cluster: Cluster, suffix: str, labels: dict[str, str]) -> str:
    name = f"{cluster.ns}{suffix}"
    cluster.api.post("/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})
    return name


def _relabel(cluster: Cluster, name: str, labels: dict[str, Any]) -> None:
    cluster.api.patch(f"/api/v1/namespaces/{name}", {"metadata": {"labels": labels}})


def test_a_pod_stays_off_the_node_of_a_pod_of_a_selected_namespace_and_a_later_one_follows_the_labels(
    cluster: Cluster,
) -> None:
    team = f"x-{cluster.ns}"  # (the test API server is shared: a value of this test's own)
    cluster.node("n0")
    cluster.node("n1")
    red = _namespace(cluster, "red", {"team": team})
    blue = _namespace(cluster, "blue", {})
    try:
        _foreign(cluster, red, "db", "n0")
        _foreign(cluster, blue, "db", "n1")
        shim, api = _start(cluster)
        _kant_pod(cluster, api, "first", team)
        # (E-Binpack alone takes n0, the first node: the db pod of red keeps it off)
        assert wait_for(lambda: cluster.node_of("first"), what="first bound") == "n1"
        _relabel(cluster, red, {"team": None})
        _relabel(cluster, blue, {"team": team})
        wait_for(lambda: shim._namespaces.get(blue) == {"team": team}
                 and shim._namespaces.get(red) == {}, what="the shim sees the new labels")  # fmt: skip
        _kant_pod(cluster, api, "later", team)
        assert wait_for(lambda: cluster.node_of("later"), what="later bound") == "n0"
        assert cluster.node_of("first") == "n1"  # (IgnoredDuringExecution)
        # a db pod of blue, with no terms of its own: the running pods' anti-affinity, read
        # with the new labels (first's too), keeps it off both nodes
        body = {"metadata": {"name": "db2", "namespace": blue, "labels": {"app": "db"}},
                "spec": {"schedulerName": "kant", "containers": [{"name": "c", "image": "x",
                         "resources": {"requests": {"nvidia.com/gpu": "1"},
                                       "limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip
        cluster.api.post(f"/api/v1/namespaces/{blue}/pods", body)
        path = f"/api/v1/namespaces/{blue}/pods/db2"

        def says() -> str:
            for c in cluster.api.get(path).get("status", {}).get("conditions") or ():
                if c.get("type") == "PodScheduled":
                    return str(c.get("message", ""))
            return ""

        wait_for(lambda: "pod_affinity" in says(), what="db2's reason")
        assert not cluster.api.get(path)["spec"].get("nodeName")
    finally:
        for ns in (red, blue):
            cluster.api.delete(f"/api/v1/namespaces/{ns}/pods", {"gracePeriodSeconds": 0})


def test_a_waiting_pod_binds_once_the_namespace_that_kept_it_off_is_relabelled(
    cluster: Cluster,
) -> None:
    team = f"x-{cluster.ns}"
    cluster.node("n0")
    red = _namespace(cluster, "red", {"team": team})
    try:
        _foreign(cluster, red, "db", "n0")
        _, api = _start(cluster)
        _kant_pod(cluster, api, "waits", team)
        wait_for(lambda: "pod_affinity" in _reason(cluster, "waits"), what="its reason")
        assert cluster.node_of("waits") is None
        _relabel(cluster, red, {"team": "other"})
        assert wait_for(lambda: cluster.node_of("waits"), what="waits bound") == "n0"
    finally:
        cluster.api.delete(f"/api/v1/namespaces/{red}/pods", {"gracePeriodSeconds": 0})
