"""The optional hooks of a strategy: their defaults (:class:`BaseStrategy`) and the adapter
that gives any :class:`~kant.contracts.Strategy` all of them (:func:`adapt_strategy`).

A strategy needs only ``name`` and ``score`` (see :class:`kant.contracts.Strategy`); the
Placer reads every other hook from the :class:`StrategyHooks` the adapter builds, so a plain
object, a :class:`BaseStrategy` subclass and a strategy returned by ``candidate_sets`` are
treated alike, and nothing compares methods by identity.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from kant.contracts import PodView, Reach, Strategy
from kant.errors import ValidationError
from kant.model import MILLI, Job, Role, Tier
from kant.placement.context import FloatArray, IntArray

if TYPE_CHECKING:
    from kant.contracts import BoolArray
    from kant.state import Snapshot

CandidateSets = Callable[[PodView, IntArray], Sequence[tuple[IntArray, Strategy]]]
"""The ``candidate_sets`` hook: node sets to try in turn, each with the strategy scoring it."""


def default_group_key(free_milli: IntArray, in_use: IntArray) -> tuple[IntArray, ...]:
    """Default ``group_key`` (packing): NodeNetGroups already in use first, then the fewest
    free GPU milli. Keys in ``np.lexsort`` order (last primary), lower first."""
    return (free_milli, 1 - in_use)


def default_domain_key(capacity: IntArray) -> IntArray:
    """Default ``domain_key`` (best fit): the topology domain with the least room (in pods)
    first, keeping big domains whole."""
    return capacity


def best_fit_share(ctx: PodView, slot: int) -> int:
    """Default ``share_device``: the GPU of node ``slot`` with the least free share that
    still fits the fractional pod (keep whole GPUs whole), lowest index on ties. O(GPUs)."""
    row = ctx.snap.cols.gpu_free[slot, : int(ctx.snap.cols.gpus[slot])]
    fits = row >= ctx.req.milli
    best = np.where(fits, row, MILLI + 1)
    return int(np.argmin(best))


class BaseStrategy:
    """Defaults for the optional hooks; subclass and override what differs.

    - ``score``: binpack, the least GPU left after the pod (``-ctx.gpu_after``).
    - ``two_level``: for single pods, rank NodeNetGroups (leaves) by their aggregates with
      :meth:`group_key` and look for a node inside the best groups before any wider search.
    - ``topology_default``: the preferred tier for multi-pod gang roles that state no
      topology wish (``None`` = no tier search unless the job asks for one).
    - ``fill_partly_used_first``: in the two-level search, a whole-GPU pod first takes the
      fullest partly used node of its pools that fits (the per-pool best-fit index), and
      only opens a wholly free node, chosen by the group level, when none does.
    - ``fills_node_first``: the score is a pure function of the node's row and the job's
      pods there (no random draws, no side effects) and placing one more of the pod's kind
      on a node never lowers that node's score. Then identical pods fill the best node
      before the next, and the Placer places them in bulk (one score pass, one update per
      node). False by default: a subclass that changes ``score`` must say it again.
    - ``candidate_sets`` is not defined here: without it the Placer scores all candidates
      with this strategy (and fills gangs incrementally). Define it to try node sets in turn
      (:class:`~kant.placement.strategies.kant.ESpread` does).
    """

    name: ClassVar[str] = "base"
    two_level: ClassVar[bool] = False
    topology_default: ClassVar[Tier | None] = None
    fill_partly_used_first: ClassVar[bool] = False
    fills_node_first: bool = False  # a class default; an instance may say otherwise

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """Binpack: higher for less GPU left after the pod. O(len(slots))."""
        return -ctx.gpu_after(slots)

    def group_key(self, free_milli: IntArray, in_use: IntArray) -> Any:
        """Sort key (np.lexsort order, last key primary) for candidate groups; lower first.
        Called once per single pod in the two-level search. Default:
        :func:`default_group_key`."""
        return default_group_key(free_milli, in_use)

    def domain_key(self, capacity: IntArray) -> IntArray:
        """Order of topology domains that can hold a role, by their capacity in pods; lower
        first. Called once per tier of a gang role. Default: :func:`default_domain_key`."""
        return default_domain_key(capacity)

    def share_device(self, ctx: PodView, slot: int) -> int:
        """GPU index for a fractional pod on node ``slot``. Called once per fractional pod,
        after the node is chosen. Default: :func:`best_fit_share`."""
        return best_fit_share(ctx, slot)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@attrs.frozen(eq=False)
class StrategyHooks:
    """One strategy with every hook filled in: what the Placer reads.

    ``strategy`` is the object adapted; ``score``, ``group_key``, ``domain_key`` and
    ``share_device`` are its bound methods or the defaults; ``candidate_sets`` is None when
    the strategy has none (all candidates, scored by ``score``), and ``reach`` when it has
    none (every node in reach). Built once per strategy by
    :func:`adapt_strategy`; immutable."""

    strategy: Strategy
    name: str
    score: Callable[[PodView, IntArray], FloatArray]
    two_level: bool
    topology_default: Tier | None
    fill_partly_used_first: bool
    fills_node_first: bool
    group_key: Callable[[IntArray, IntArray], Any]
    domain_key: Callable[[IntArray], IntArray]
    share_device: Callable[[PodView, int], int]
    candidate_sets: CandidateSets | None
    reach: Callable[[Job, Role], Reach | None] | None


def adapt_strategy(strategy: Strategy | StrategyHooks) -> StrategyHooks:
    """Any strategy as :class:`StrategyHooks`: each optional hook the object has, else the
    default of :class:`BaseStrategy` (see :class:`kant.contracts.Strategy`). Hooks are read
    now, once; an adapted strategy is returned as is. Raises
    :class:`~kant.errors.ValidationError` for an object without ``name`` and ``score``. O(1)."""
    if isinstance(strategy, StrategyHooks):
        return strategy
    if not isinstance(strategy, Strategy):
        raise ValidationError(
            "strategy", strategy, "must have a name and a score(ctx, slots) method"
        )
    group_key = getattr(strategy, "group_key", None)
    domain_key = getattr(strategy, "domain_key", None)
    share_device = getattr(strategy, "share_device", None)
    topology_default = getattr(strategy, "topology_default", None)
    if topology_default is not None and not isinstance(topology_default, Tier):
        raise ValidationError("topology_default", topology_default, "must be a Tier or None")
    name = str(strategy.name)
    # kant's own strategies answer right by construction: their hooks are asked directly
    own = type(strategy).__module__.partition(".")[0] == "kant"

    def asked(checked: Callable[[str, Any], Any], hook: Any) -> Any:
        return hook if own else checked(name, hook)

    sets = getattr(strategy, "candidate_sets", None)
    reach = getattr(strategy, "reach", None)
    return StrategyHooks(
        strategy=strategy,
        name=name,
        score=strategy.score,
        two_level=bool(getattr(strategy, "two_level", False)),
        topology_default=topology_default,
        fill_partly_used_first=bool(getattr(strategy, "fill_partly_used_first", False)),
        fills_node_first=bool(getattr(strategy, "fills_node_first", False)),
        group_key=default_group_key if group_key is None else asked(_checked_group_key, group_key),
        domain_key=(
            default_domain_key if domain_key is None else asked(_checked_domain_key, domain_key)
        ),
        share_device=best_fit_share
        if share_device is None
        else asked(_checked_share, share_device),
        candidate_sets=None if sets is None else asked(_checked_sets, sets),
        reach=None if reach is None else asked(_checked_reach, reach),
    )


# The hooks of a strategy from outside kant are asked through these: an answer of the wrong
# kind is a ValidationError naming the strategy and the hook, not an error of NumPy's or
# Python's deep in the Placer (nor a wrong placement). The defaults, and kant's own
# strategies' hooks, are asked directly.


def _wrong(name: str, hook: str, got: object, want: str) -> ValidationError:
    return ValidationError("strategy", name, f"{hook} returned {got!r}: it must return {want}")


def _checked_group_key(
    name: str, hook: Callable[[IntArray, IntArray], Any]
) -> Callable[[IntArray, IntArray], Any]:
    def group_key(free_milli: IntArray, in_use: IntArray) -> Any:
        keys = hook(free_milli, in_use)
        want = f"a tuple of np.lexsort keys, each of {free_milli.shape[0]} numbers"
        try:
            arrays = [np.asarray(k) for k in keys]
        except TypeError:  # (no iterable)
            raise _wrong(name, "group_key", keys, want) from None
        if not arrays or any(
            a.shape != free_milli.shape or a.dtype.kind not in "fiub" for a in arrays
        ):
            raise _wrong(name, "group_key", keys, want)
        return keys

    return group_key


def _checked_domain_key(
    name: str, hook: Callable[[IntArray], IntArray]
) -> Callable[[IntArray], IntArray]:
    def domain_key(capacity: IntArray) -> IntArray:
        key = hook(capacity)
        arr = np.asarray(key) if key is not None else None
        if arr is None or arr.shape != capacity.shape or arr.dtype.kind not in "fiub":
            raise _wrong(name, "domain_key", key, f"{capacity.shape[0]} numbers")
        return arr

    return domain_key


def _checked_share(name: str, hook: Callable[[PodView, int], int]) -> Callable[[PodView, int], int]:
    def share_device(ctx: PodView, slot: int) -> int:
        g = hook(ctx, slot)
        cols = ctx.snap.cols
        if isinstance(g, np.integer):
            g = int(g)
        if (
            type(g) is not int
            or not 0 <= g < int(cols.gpus[slot])
            or cols.gpu_free[slot, g] < ctx.req.milli
        ):
            want = f"a GPU of node {ctx.snap.name_of(slot)} with {ctx.req.milli} milli free"
            raise _wrong(name, "share_device", g, want)
        return g

    return share_device


def _checked_reach(
    name: str, hook: Callable[[Job, Role], Reach | None]
) -> Callable[[Job, Role], Reach | None]:
    def reach(job: Job, role: Role) -> Reach | None:
        got = hook(job, role)
        if got is None:
            return None
        if not callable(getattr(got, "allows", None)) or not isinstance(got, Hashable):
            raise _wrong(name, "reach", got, "None or a hashable Reach (with allows(snap))")
        return _CheckedReach(name, got)

    return reach


class _CheckedReach:
    """A reach of a strategy from outside kant, its ``allows`` answer checked (one bool per
    slot of the snapshot, or more); equal, hashed and worded as the reach it wraps."""

    __slots__ = ("name", "reach")

    def __init__(self, name: str, reach: Reach) -> None:
        self.name, self.reach = name, reach

    def allows(self, snap: Snapshot) -> BoolArray:
        got = self.reach.allows(snap)
        arr = np.asarray(got) if got is not None else None
        n = snap.num_slots
        if arr is None or arr.ndim != 1 or arr.shape[0] < n or arr.dtype.kind != "b":
            raise _wrong(self.name, "reach(...).allows", got, f"one bool per node slot ({n})")
        return arr

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _CheckedReach):
            other = other.reach
        return bool(self.reach == other)

    def __hash__(self) -> int:
        return hash(self.reach)

    def __str__(self) -> str:
        return str(self.reach)


def _checked_sets(name: str, hook: CandidateSets) -> CandidateSets:
    def candidate_sets(ctx: PodView, slots: IntArray) -> Sequence[tuple[IntArray, Strategy]]:
        sets = hook(ctx, slots)
        want = "a sequence of (node slots, strategy) pairs"
        try:
            out = [(np.asarray(part), strat) for part, strat in sets]
        except (TypeError, ValueError):  # (no iterable, or no pairs)
            raise _wrong(name, "candidate_sets", sets, want) from None
        for part, _strat in out:
            if part.dtype.kind not in "iu" and part.size:
                raise _wrong(name, "candidate_sets", sets, want + " (slots as ints)")
        return out

    return candidate_sets
