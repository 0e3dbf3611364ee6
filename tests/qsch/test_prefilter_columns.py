"""The pre-filter's vectorised form of the built-in victim rules (over the victim index's
columns) picks exactly the candidates, in the same order and with the same GPU milli held, as
asking :func:`kant.preemption.rules.builtin_reason` of every candidate in victim order (the
path a policy with user rules takes; a rule that always defers leaves the built-in answer)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

import hypothesis.strategies as st
from hypothesis import given, settings

from kant.model import PodId
from kant.preemption import PreemptionPolicy
from kant.preemption.candidates import VictimColumns, VictimRef, victim_order
from kant.preemption.preemptor import Preemption
from kant.preemption.rules import Preemptor

TENANTS = ("a", "b", "c")
MODELS = ("H100", "A100")
PRIORITIES = st.one_of(st.integers(-3, 3), st.sampled_from([-(2**70), 2**70]))


class _Index:
    """The two things the pre-filter reads of a :class:`VictimIndex`."""

    def __init__(self, refs: list[VictimRef]) -> None:
        self.tenants = sorted({r.tenant for r in refs})
        self._refs = refs
        self._cols: VictimColumns | None = None

    def refs(self) -> list[VictimRef]:
        return self._refs

    def columns(self) -> VictimColumns:
        if self._cols is None:
            self._cols = VictimColumns(self._refs, self.tenants)
        return self._cols


@st.composite
def _refs(draw: Any) -> tuple[list[VictimRef], list[Any]]:
    refs: list[VictimRef] = []
    entries = []
    for seq in range(draw(st.integers(0, 12))):
        jid = f"j{seq}"
        entry = SimpleNamespace(
            id=jid,
            seq=seq,
            job=SimpleNamespace(tenant=draw(st.sampled_from(TENANTS))),
            key=(draw(st.integers(-2, 2)), draw(st.integers(0, 3)), seq),
        )
        entries.append(entry)
        prio = draw(PRIORITIES)
        gang = draw(st.booleans())
        n = draw(st.integers(1, 3))
        pods = [PodId(job=jid, role="w", index=i) for i in range(n)]
        groups = [tuple(pods)] if gang else [(p,) for p in pods]
        for g in groups:
            started = float(draw(st.integers(0, 6)))
            usage = ((draw(st.sampled_from(MODELS)), 1000 * len(g)),)
            slots = tuple((draw(st.integers(0, 5)), 1) for _ in g)
            order = victim_order(prio, started, seq, g[0])
            refs.append(VictimRef(order, cast(Any, entry), g, 1000 * len(g), usage, slots))
    refs.sort(key=lambda r: r.order)
    return refs, entries


def _defer(_pre: object, _unit: object, _borrowing: object) -> None:
    return None


@settings(max_examples=60, deadline=None)
@given(
    data=_refs(),
    tenant=st.sampled_from(TENANTS),
    priority=PRIORITIES,
    pending_since=st.integers(0, 6),
    order_key=st.tuples(st.integers(-2, 2), st.integers(0, 3), st.integers(-1, 13)),
    threshold=st.one_of(st.none(), PRIORITIES),
    borrowers=st.sets(st.tuples(st.sampled_from(TENANTS), st.sampled_from(MODELS))),
    models=st.sets(st.sampled_from(MODELS), min_size=1),
    which=st.integers(0, 20),
    taken=st.sets(st.integers(0, 40), max_size=4),
    preempting=st.sets(st.integers(0, 12), max_size=3),
    max_candidates=st.one_of(st.none(), st.integers(1, 5)),
)
def test_the_vectorised_prefilter_picks_what_the_rules_pick_one_by_one(
    data: tuple[list[VictimRef], list[Any]],
    tenant: str,
    priority: int,
    pending_since: int,
    order_key: tuple[int, int, int],
    threshold: int | None,
    borrowers: set[tuple[str, str]],
    models: set[str],
    which: int,
    taken: set[int],
    preempting: set[int],
    max_candidates: int | None,
) -> None:
    refs, entries = data
    # the preemptor: one of the running jobs (its own records are never candidates) or not
    e = entries[which % len(entries)] if entries and which < 10 else SimpleNamespace(id="p", seq=99)
    ledger = SimpleNamespace(borrowing=lambda t, m: (t, m) in borrowers)
    victim_pods = {p for i, r in enumerate(refs) if i in taken for p in r.pods}
    # jobs preempting in the cycle: none of their records is a candidate either
    nominated = {entries[i].id: entries[i].seq for i in preempting if i < len(entries)}

    def picked(policy: PreemptionPolicy, pre: Preemptor) -> tuple[Sequence[VictimRef], int, Any]:
        p = Preemption.__new__(Preemption)
        p.policy, p.ledger, p.index = policy, cast(Any, ledger), cast(Any, _Index(refs))
        p.victim_pods = set(victim_pods)
        p.preempting = dict(nominated)
        return p._prefilter(pre, cast(Any, e), refs, models, only_priority=False)

    # every combination of the policy's switches and the preemptor's flags
    for flags in itertools.product((False, True), repeat=8):
        prio_on, reclaim_on, backfill_on, bwc, within, may_backfill, borrowing, cascade = flags
        kw: dict[str, Any] = dict(
            priority=prio_on, reclaim=reclaim_on, backfill=backfill_on,
            borrow_within_cohort=bwc, borrow_priority_threshold=threshold,
            max_candidates=max_candidates,
        )  # fmt: skip
        pre = Preemptor(
            job=e.id, tenant=tenant, priority=priority, within_nominal=within,
            backfill=may_backfill, pending_since=float(pending_since), order_key=order_key,
            borrowing=borrowing, cascade=cascade,
        )  # fmt: skip
        fast = picked(PreemptionPolicy(**kw), pre)
        one_by_one = picked(PreemptionPolicy(rules=(cast(Any, _defer),), **kw), pre)
        assert [r.pods for r in fast[0]] == [r.pods for r in one_by_one[0]], flags
        assert fast[1] == one_by_one[1], flags
        assert [refs[i] for i in fast[2].tolist()] == list(fast[0]), flags  # their positions
        assert not any(r.job in nominated for r in fast[0]), flags
