"""A copy of a cluster state (``copy.deepcopy``, pickling) belongs to no one: the node
removal listeners of the original (its scheduler's) are not copied, so a node removed from
the copy is never reported to the original's scheduler."""

from __future__ import annotations

import copy
import pickle

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
