"""RSCH placement: the :class:`Placer`, its strategies and node filters (``docs/placement.md``).

- :class:`Placer` places a job's pods on a snapshot (``placer.py``; where it looks:
  ``search.py``); :class:`PodContext` is the question a strategy answers (``context.py``).
- Strategies (``strategies/``) are chosen by name from :data:`STRATEGIES`
  (:class:`kant.registry.Registry`); any object with ``name`` and ``score`` is one
  (:class:`kant.contracts.Strategy`), :class:`BaseStrategy` gives the optional hooks'
  defaults and :func:`adapt_strategy` fills them in for any strategy.
- Node filters (:class:`kant.contracts.NodeFilter`) restrict the nodes a pod may use:
  ``Placer(filters=[...])``, applied by :class:`NodeFilters` (``filters.py``); a role's
  ``max_per_node`` cap is the built-in one, :class:`MaxPerNode`.
- ``fragmentation.py`` (FGD's expected-fragmentation kernels) and ``score_cache.py`` (a
  per-node-row score cache) serve the FGD strategies; :mod:`kant.metrics` re-exports the
  former.
"""

from kant.contracts import NodeFilter, PodView
from kant.placement.context import PodContext, PodRequest, fit_count, fits
from kant.placement.filters import MaxPerNode, NodeFilters
from kant.placement.fragmentation import FragmentationTarget
from kant.placement.placer import PlacementResult, Placer
from kant.placement.strategies import (
    FGD,
    PACKING_STRATEGIES,
    STRATEGIES,
    BaseStrategy,
    BestFit,
    Binpack,
    DotProd,
    EBinpack,
    ESpread,
    FGDPlusPlus,
    FirstFit,
    GpuClustering,
    GpuPacking,
    PackingBaseline,
    RandomPlacement,
    Spread,
    Strategy,
    StrategyHooks,
    Topology,
    adapt_strategy,
    make_strategy,
    register_strategy,
    strategy_names,
)

__all__ = [
    "FGD",
    "PACKING_STRATEGIES",
    "STRATEGIES",
    "BaseStrategy",
    "BestFit",
    "Binpack",
    "DotProd",
    "EBinpack",
    "ESpread",
    "FGDPlusPlus",
    "FirstFit",
    "FragmentationTarget",
    "GpuClustering",
    "GpuPacking",
    "MaxPerNode",
    "NodeFilter",
    "NodeFilters",
    "PackingBaseline",
    "PlacementResult",
    "Placer",
    "PodContext",
    "PodRequest",
    "PodView",
    "RandomPlacement",
    "Spread",
    "Strategy",
    "StrategyHooks",
    "Topology",
    "adapt_strategy",
    "fit_count",
    "fits",
    "make_strategy",
    "register_strategy",
    "strategy_names",
]
