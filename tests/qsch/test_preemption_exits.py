"""Preemption's cheap exits (``Preemption.closed``) turn a waiting job away only when the full
path of ``Preemption.preempt`` would find nothing for it either: over random sequences of
submissions, cycles, finishes, evictions, node losses and GPU faults, under every queueing
policy and random preemption options, each job they turn away (past the per-cycle caps and the
no-cascade rule, which are limits, not answers) is run through the full path as well, with the
exits open, and must come back with nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import kant.cycle
from kant.admission.quota import QuotaDecision
from kant.preemption import PreemptionPolicy
from kant.preemption.preemptor import LIGHT_CHECKS_PER_SEARCH, Preemption
from kant.queueing import Entry
from kant.state import ClusterState
from kant.testing import check_invariants, job

from .test_incremental_cycle import _Pair, alike_scenarios, drive_alike


class _Checked(Preemption):
    """:meth:`closed`, and for every job it turns away, the full path with the exits open."""

    turned_away = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checking = False

    def closed(self, e: Entry, dec: QuotaDecision, may_backfill: bool) -> bool:
        if self.checking:
            return False
        shut = super().closed(e, dec, may_backfill)
        pol = self.policy
        cap = pol.max_searches_per_cycle
        capped = cap is not None and (
            self.searches >= cap or self.light_checks >= LIGHT_CHECKS_PER_SEARCH * cap
        )
        cascade = (
            e.evicted_at is not None and self.now - e.evicted_at < pol.cascade_window
        ) or self._being_evicted(e)
        if shut and not capped and not cascade:
            role_models = self.pools.role_models(e.job)[0]
            # the full path counts its checks and remembers hopeless requests: put them
            # back, so that the rest of the cycle runs as without this check
            kept = (self.light_checks, self.searches, set(self.hopeless))
            self.checking = True
            try:
                found = self.preempt(e, dec, role_models, may_backfill, epoch=(object(),))
            finally:
                self.checking = False
                self.light_checks, self.searches, self.hopeless = kept
            assert found is None, f"{e.id}: turned away, but the full path preempts for it"
            _Checked.turned_away += 1
        return shut


@pytest.fixture(autouse=True)
def _checked_preemption(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kant.cycle, "Preemption", _Checked)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@alike_scenarios
def test_a_job_the_cheap_exits_turn_away_finds_no_victims_on_the_full_path(
    state: ClusterState,
    policy: str,
    quotas: bool,
    preemption: PreemptionPolicy,
    ops: list[tuple[str, int]],
    specs: Sequence[tuple[int, int, bool, int]],
) -> None:
    pair = _Pair(state, policy, quotas, preemption)
    drive_alike(pair, ops, specs, bursts=3, priorities=3)
    check_invariants(pair.inc)


def test_the_property_above_turns_jobs_away() -> None:
    """(The check is not vacuous: a cluster full of priority-1 jobs, priority preemption on,
    a priority-0 job and a priority-1 job waiting: both are turned away.)"""
    from .conftest import nodes, scheduler

    s = scheduler(nodes(1), preemption=PreemptionPolicy(reclaim=False, backfill=False))
    s.submit(job("run", gpus=8, priority=1), now=0)
    s.step(now=1)
    before = _Checked.turned_away
    s.submit(job("low", gpus=8, priority=0), now=2)
    s.submit(job("same", gpus=8, priority=1), now=2)
    r = s.step(now=3)
    assert not r.victims and r.stats.preemption_searches == 0
    assert _Checked.turned_away - before >= 2
