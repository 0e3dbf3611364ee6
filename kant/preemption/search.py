"""The minimal victim search.

:func:`find_victims` removes candidates in victim order on the snapshot, inside a what-if
scope, until the preemptor's quota, readiness and **real placement** (topology included)
succeed; then it puts back every victim it can do without (newest choice first), so the set is
minimal: no victim can be spared. If even all candidates together do not make the job fit,
nothing is evicted (conservative). Everything happens in rolled-back scopes; only the answer
leaves the search.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kant.contracts import WhatIf
from kant.model import Binding, VictimReason
from kant.preemption.rules import VictimUnit


def find_victims(
    candidates: Iterable[VictimUnit],
    eligible: Callable[[VictimUnit, Sequence[VictimUnit]], VictimReason | None],
    whatif: WhatIf,
) -> tuple[list[tuple[VictimUnit, VictimReason]], tuple[Binding, ...]] | None:
    """The minimal victim set (see the module docstring) and the placement it yields.

    ``candidates`` are in victim order; ``eligible(unit, chosen)`` re-checks a candidate given
    the victims chosen before it (a borrower stops being one once enough of it is evicted).

    1. Greedy: remove candidates in victim order; once the cheap check (quota + readiness)
       passes, try the real placement at geometrically spaced points (after 1, 2, 4...
       further removals) and once more with every candidate removed. No fit: None.
    2. Minimise: the victims on nodes the found placement does not use are spared at once if
       the job still fits without them; then the others are spared where possible, newest
       choice first, in halving chunks (a whole chunk when the job still fits without it,
       else each half). Every victim left is needed: sparing any one of them breaks the fit.
       A reclaim makes the fit harder (the preemptor must then end within its nominal
       quota), so when a reclaim was spared the others are tried again, and when none is
       left the victims without reclaims are minimised afresh (a lower-priority victim
       spared under that rule may do alone).

    Cost: O(k) removals and O(log k) placements for step 1, O(m log k) placements for step 2
    (k candidates tried, m victims kept), plus, once a reclaim is spared, one placement per
    kept victim for each pass that spares another reclaim, and one minimisation afresh."""
    chosen = _greedy(candidates, eligible, whatif)
    if chosen is None:
        return None
    return _minimise(*chosen, whatif)


Chosen = list[tuple[VictimUnit, VictimReason]]


def _greedy(
    candidates: Iterable[VictimUnit],
    eligible: Callable[[VictimUnit, Sequence[VictimUnit]], VictimReason | None],
    whatif: WhatIf,
) -> tuple[Chosen, tuple[Binding, ...]] | None:
    """Step 1 of :func:`find_victims`: the victims removed until the job fits, and its fit."""
    with whatif.scope():
        chosen: Chosen = []
        units: list[VictimUnit] = []
        fit: tuple[Binding, ...] | None = None
        checked_at = 0
        next_check = 1
        for c in candidates:
            why = eligible(c, units)
            if why is None:
                continue
            whatif.remove(c)
            chosen.append((c, why))
            units.append(c)
            if len(units) < next_check or not whatif.ready():
                continue
            checked_at = len(units)
            fit = whatif.place()
            if fit is not None:
                break
            next_check = 2 * len(units)
        if fit is None and chosen and checked_at < len(units) and whatif.ready():
            fit = whatif.place()
    return None if fit is None else (chosen, fit)


def _minimise(
    chosen: Chosen, fit: tuple[Binding, ...], whatif: WhatIf
) -> tuple[Chosen, tuple[Binding, ...]] | None:
    """Step 2 of :func:`find_victims`: spare every victim the job can do without."""
    # 2. Minimise. Victims on nodes the found placement does not use are likely not needed:
    #    first see whether the others alone suffice; then spare what can be spared.
    used = {b.node for b in fit}
    order = list(range(len(chosen) - 1, -1, -1))
    near = [i for i in order if any(b.node in used for b in chosen[i][0].bindings)]
    away = [i for i in order if not any(b.node in used for b in chosen[i][0].bindings)]
    spared: set[int] = set()

    def spare(first: list[int], first_known_bad: bool) -> None:
        # Spare ``first`` whole if the job still fits without it (unless it is known not
        # to), else each half in turn, depth first. (A loop over a stack: a recursive
        # closure would refer to itself, a reference cycle left to the garbage collector.)
        stack = [(first, first_known_bad)]
        while stack:
            idxs, known_bad = stack.pop()
            if not idxs:
                continue
            if not known_bad:
                with whatif.scope() as s:
                    for i in idxs:
                        whatif.restore(chosen[i][0])
                    if whatif.ready() and whatif.place() is not None:
                        s.commit()
                        spared.update(idxs)
                        continue
            if len(idxs) > 1:
                mid = len(idxs) // 2
                stack.append((idxs[mid:], False))  # after the first half and its halves
                stack.append((idxs[:mid], False))

    with whatif.scope():
        for i in near:
            whatif.remove(chosen[i][0])
        if away and not (whatif.ready() and whatif.place() is not None):
            for i in away:
                whatif.remove(chosen[i][0])
            spare(away, True)
        else:
            spared.update(away)
        spare(near, len(spared) == len(away))
        # Sparing a reclaim victim lifts the rule its eviction imposed (the preemptor must
        # end within its nominal quota), so a victim kept before may be spared now; without
        # such a rule the fit only gets easier with more removed, and a victim kept once
        # stays needed. Again until nothing more is spared.
        lifted = getattr(whatif, "needs_nominal", None)
        fresh = set(spared)  # spared since the kept victims were last tried
        while lifted is not None and any(lifted(chosen[i][0]) for i in fresh):
            before = set(spared)
            for i in order:
                if i not in spared:
                    spare([i], False)
            fresh = spared - before
        bindings = whatif.place() if whatif.ready() else None
    if bindings is None:  # cannot happen: the same set fitted above
        return None
    kept = [cw for i, cw in enumerate(chosen) if i not in spared]
    if lifted is not None and not any(lifted(u) for u, _w in kept):
        # No reclaim is left, but the victims were spared under its rule: a lower-priority
        # victim spared then may do where a higher one was kept. Minimise again over the
        # victims without the reclaims (they include the set kept, and without the rule the
        # fit only gets easier with more removed, so they fit).
        rest = [cw for cw in chosen if not lifted(cw[0])]
        if len(rest) < len(chosen):
            with whatif.scope():
                for u, _w in rest:
                    whatif.remove(u)
                fit2 = whatif.place() if whatif.ready() else None
            if fit2 is not None:
                return _minimise(rest, fit2, whatif)
    return kept, bindings
