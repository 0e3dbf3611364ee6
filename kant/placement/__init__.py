"""RSCH placement: the :class:`Placer` and its strategies (see ``docs/placement.md``)."""

from kant.placement.context import PodContext, PodRequest, fit_count
from kant.placement.placer import PlacementResult, Placer
from kant.placement.strategies import (
    BaseStrategy,
    Binpack,
    EBinpack,
    ESpread,
    Spread,
    Strategy,
    Topology,
    make_strategy,
    register_strategy,
    strategy_names,
)

__all__ = [
    "BaseStrategy",
    "Binpack",
    "EBinpack",
    "ESpread",
    "PlacementResult",
    "Placer",
    "PodContext",
    "PodRequest",
    "Spread",
    "Strategy",
    "Topology",
    "fit_count",
    "make_strategy",
    "register_strategy",
    "strategy_names",
]
