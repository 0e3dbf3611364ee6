"""The self-checks are real: a derived structure corrupted on purpose (or state changed
behind the scheduler's back) makes ``kant.testing.check_invariants`` raise InvariantError
naming the structure, also under ``python -O``, which strips ``assert``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kant.errors import InvalidConfigError, InvariantError
from kant.queueing import Queue
from kant.scheduler import Scheduler
from kant.testing import check_invariants, job

from .conftest import nodes, scheduler


def running_scheduler() -> Scheduler:
    """Two 8-GPU nodes, a job of 4 GPUs running on them, a gang of 3 x 8 GPUs pending."""
    s = scheduler(nodes(2))
    s.submit(job("small", gpus=4), now=0.0)
    s.submit(job("huge", gpus=8, replicas=3), now=0.0)
    s.apply(s.schedule(0.0), 0.0)
    assert s.queue.status("small").running and not s.queue.status("huge").running
    check_invariants(s, s.cluster, s.cluster.snapshot(), s.queue, s.admitter)
    return s


def test_a_flipped_free_mask_bit_in_a_snapshot_is_reported_as_the_snapshot() -> None:
    s = running_scheduler()
    snap = s.cluster.snapshot()
    slot = s.cluster.slot_of("lf0-n0")
    snap.cols.free_mask[slot] ^= 1
    with pytest.raises(InvariantError, match=rf"^Snapshot: slot {slot}: free mask inconsistent"):
        check_invariants(snap)


def test_a_flipped_free_mask_bit_in_the_truths_columns_is_reported_as_the_cluster() -> None:
    s = running_scheduler()
    s.cluster.columns.free_mask[s.cluster.slot_of("lf0-n1")] ^= 1 << 7
    with pytest.raises(InvariantError, match=r"^ClusterState: columns differ from records"):
        check_invariants(s.cluster)
    with pytest.raises(InvariantError, match=r"^ClusterState: "):
        check_invariants(s)  # the scheduler checks its cluster too


def test_an_entry_removed_from_the_queues_order_index_is_reported_as_the_queue() -> None:
    s = running_scheduler()
    s.queue._order.remove(s.queue._order[0])  # only the order index, not the entry
    with pytest.raises(InvariantError, match=r"^Queue: global order index differs$"):
        check_invariants(s.queue)
    with pytest.raises(InvariantError, match=r"^Queue: global order index differs$"):
        check_invariants(s)


def test_usage_changed_behind_the_admitters_back_is_reported_as_the_admitter() -> None:
    s = running_scheduler()
    s.admitter._usage[("default", "H100")] += 1
    with pytest.raises(InvariantError, match=r"^Admitter: usage .* != recomputed"):
        check_invariants(s.admitter)


def test_a_pod_released_behind_the_schedulers_back_is_reported_as_the_scheduler() -> None:
    s = running_scheduler()
    (p,) = s.queue.status("small").running
    s.cluster.release(p)  # the cluster and the admitter are each consistent on their own
    check_invariants(s.cluster, s.admitter, s.queue)
    with pytest.raises(InvariantError, match=rf"^Scheduler: {p} assigned but not bound$"):
        check_invariants(s)


def test_check_invariants_names_what_it_cannot_check_and_checks_nothing_then() -> None:
    q = Queue()
    q.submit(job("a"))
    q._order.clear()  # would fail, but the bad argument is rejected first
    with pytest.raises(InvalidConfigError, match=r"objects\[1\].*not str"):
        check_invariants(nodes(1), "not a queue", q)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="at least one"):
        check_invariants()


def test_the_checks_still_raise_under_python_dash_o_which_strips_asserts() -> None:
    code = textwrap.dedent(
        """
        import sys
        assert False, "asserts are not stripped: this is not python -O"
        from kant.errors import InvariantError
        from kant.queueing import Queue
        from kant.testing import check_invariants, job

        q = Queue()
        q.submit(job("a"))
        q._order.remove(q._order[0])
        try:
            check_invariants(q)
        except InvariantError as e:
            print(sys.flags.optimize, e)
        else:
            sys.exit("check_invariants passed on a corrupted queue")
        """
    )
    out = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "1 Queue: global order index differs\n"
