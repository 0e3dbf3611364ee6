"""RSCH placement: the :class:`Placer` and its strategies (see ``docs/placement.md``)."""

from kant.placement.baselines import (
    FGD,
    BestFit,
    DotProd,
    FGDPlusPlus,
    FirstFit,
    GpuClustering,
    GpuPacking,
    PackingBaseline,
    RandomPlacement,
)
from kant.placement.context import PodContext, PodRequest, fit_count, fits
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
    "FGD",
    "BaseStrategy",
    "BestFit",
    "Binpack",
    "DotProd",
    "EBinpack",
    "ESpread",
    "FGDPlusPlus",
    "FirstFit",
    "GpuClustering",
    "GpuPacking",
    "PackingBaseline",
    "PlacementResult",
    "Placer",
    "PodContext",
    "PodRequest",
    "RandomPlacement",
    "Spread",
    "Strategy",
    "Topology",
    "fit_count",
    "fits",
    "make_strategy",
    "register_strategy",
    "strategy_names",
]
