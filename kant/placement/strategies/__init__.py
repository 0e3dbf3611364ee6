"""Placement strategies, by family, and the registry that names them.

- :mod:`~kant.placement.strategies.base`: the :class:`Strategy` protocol and
  :class:`BaseStrategy`, the defaults of the optional hooks;
- :mod:`~kant.placement.strategies.kant`: kant's own (``binpack``, ``ebinpack``, ``spread``,
  ``espread``, ``topology``; section 3.3 of the Kant paper);
- :mod:`~kant.placement.strategies.baselines`: the FGD paper's heuristics (``random``,
  ``firstfit``, ``bestfit``, ``dotprod``, ``gpupacking``, ``gpuclustering``);
- :mod:`~kant.placement.strategies.fgd`: ``fgd`` and ``fgdpp``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kant.contracts import Strategy
from kant.errors import DuplicateError, UnknownPolicyError
from kant.placement.strategies.base import BaseStrategy, StrategyHooks, adapt_strategy
from kant.placement.strategies.baselines import (
    BestFit,
    DotProd,
    FirstFit,
    GpuClustering,
    GpuPacking,
    PackingBaseline,
    RandomPlacement,
)
from kant.placement.strategies.fgd import FGD, FGDPlusPlus
from kant.placement.strategies.kant import Binpack, EBinpack, ESpread, Spread, Topology

__all__ = [
    "FGD",
    "PACKING_STRATEGIES",
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
    "RandomPlacement",
    "Spread",
    "Strategy",
    "StrategyHooks",
    "Topology",
    "adapt_strategy",
    "make_strategy",
    "register_strategy",
    "strategy_names",
]


StrategyFactory = Callable[..., BaseStrategy]
_REGISTRY: dict[str, StrategyFactory] = {}


def register_strategy(name: str, factory: StrategyFactory) -> None:
    """Add a strategy under ``name``. Refuses a name already taken (DuplicateError)."""
    if name in _REGISTRY:
        raise DuplicateError(f"placement strategy {name!r} is already registered")
    _REGISTRY[name] = factory


def make_strategy(name: str, **kwargs: Any) -> BaseStrategy:
    """A new strategy instance by registered name (case-insensitive)."""
    key = name.lower()
    try:
        factory = _REGISTRY[key]
    except KeyError:
        raise UnknownPolicyError("placement", name, sorted(_REGISTRY)) from None
    return factory(**kwargs)


def strategy_names() -> list[str]:
    return sorted(_REGISTRY)


for _cls in (Binpack, EBinpack, Spread, ESpread, Topology):
    register_strategy(_cls.name, _cls)


PACKING_STRATEGIES: Final[tuple[type[PackingBaseline], ...]] = (
    RandomPlacement,
    FirstFit,
    BestFit,
    DotProd,
    GpuClustering,
    GpuPacking,
    FGD,
    FGDPlusPlus,
)
"""The packing policies, in the paper's order then kant's; their factories take ``seed``,
``ties`` and ``workload`` keywords."""

for _pcls in PACKING_STRATEGIES:
    register_strategy(_pcls.name, _pcls)
