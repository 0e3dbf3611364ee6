"""A copy of a cluster state (``copy.deepcopy``, pickling) belongs to no one: the node
removal listeners of the original (its scheduler's) are not copied, so a node removed from
the copy is never reported to the original's scheduler."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import pytest

from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job


def _running() -> Scheduler:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    s.submit(job("a", gpus=8, runtime=100), now=0)
    s.step(0)
    return s


def test_removing_a_node_from_a_copy_leaves_the_original_scheduler_as_it_was() -> None:
    s = _running()
    node = s.cluster.binding(next(iter(s.queue.entry("a").assigned))).node
    clone = copy.deepcopy(s.cluster)
    clone.remove_node(node)  # before: the original scheduler released and requeued "a"
    check_invariants(s)
    assert s.status("a").phase.value == "running"
    assert s.admitter.is_charged(next(iter(s.queue.entry("a").assigned)))
    assert node in s.cluster and node not in clone


def test_a_cluster_state_owned_by_a_scheduler_can_be_pickled() -> None:
    s = _running()
    clone = pickle.loads(pickle.dumps(s.cluster))  # before: its listener could not be
    assert clone.num_pods == s.cluster.num_pods
    clone.check_invariants()


def _pickled(s: Scheduler) -> Scheduler:
    out = pickle.loads(pickle.dumps(s))
    assert isinstance(out, Scheduler)
    return out


@pytest.mark.parametrize("how", [copy.deepcopy, _pickled], ids=["deepcopy", "pickle"])
@pytest.mark.parametrize("event", ["node_lost", "node_removed"])
def test_a_copied_scheduler_works_on_its_own_and_leaves_the_original_as_it_was(
    how: Callable[[Scheduler], Scheduler], event: str
) -> None:
    # a whole scheduler copied (deep copy, pickle round trip) hears its own cluster's node
    # removals: before, the copy's cluster had no listener, so losing a node left the
    # copy's pods assigned but unbound ("a/worker/0 assigned but not bound")
    s = _running()
    s.submit(job("b", gpus=8, replicas=2, runtime=100), now=1)
    s.step(1)
    pod = next(iter(s.queue.entry("a").assigned))
    node = s.cluster.binding(pod).node
    twin = how(s)
    check_invariants(twin)
    getattr(twin, event)(node, 5)
    check_invariants(twin)
    assert twin.status("a").phase.value == "pending"  # released and requeued
    assert not twin.admitter.is_charged(pod)
    assert node not in twin.cluster
    twin.step(6)
    check_invariants(twin)
    # the original heard nothing of it
    check_invariants(s)
    assert s.status("a").phase.value == "running"
    assert s.admitter.is_charged(pod)
    assert node in s.cluster
    s.node_lost(node, 7)  # and still hears its own cluster, once
    check_invariants(s)
    assert s.status("a").phase.value == "pending"


@pytest.mark.parametrize(
    "how", [copy.deepcopy, lambda c: pickle.loads(pickle.dumps(c))], ids=["deepcopy", "pickle"]
)
def test_a_copy_of_a_cluster_state_has_a_token_of_its_own_for_the_caches_keyed_on_it(
    how: Callable[[object], object],
) -> None:
    # caches outside the state (a placer's pool candidates) key on its token: a copy that
    # goes its own way must not be taken for its original
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    twin = how(st)
    assert isinstance(twin, type(st))
    assert twin.token != st.token and how(twin).token not in (st.token, twin.token)
