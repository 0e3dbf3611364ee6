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

from collections.abc import Callable, Iterable
from typing import Any, Final

from kant.contracts import Strategy
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
from kant.registry import Registry

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


STRATEGIES: Registry[Strategy] = Registry("placement")
"""Every placement strategy by name. Strategies that need nothing are registered as their
class; the FGD-paper heuristics take the run's ``seed`` (their tie rule) and ``fgd`` /
``fgdpp`` also the ``workload`` (see :class:`~kant.placement.strategies.fgd.FGD`) from the
:class:`~kant.registry.BuildContext`: ``STRATEGIES.build(name, BuildContext(seed=...,
workload=...))`` builds any of them, with no special case."""


def register_strategy(
    name: str, factory: Callable[..., Strategy], *, uses: Iterable[str] = ()
) -> None:
    """Add a strategy factory under ``name`` (case-insensitive); ``uses`` names the
    :class:`~kant.registry.BuildContext` fields it takes as keywords (``"seed"``,
    ``"workload"``, ``"cluster"``). Refuses a name already taken
    (:class:`~kant.errors.DuplicateError`)."""
    STRATEGIES.register(name, factory, uses=uses)


def make_strategy(name: str, **kwargs: Any) -> Strategy:
    """A new strategy by registered name (case-insensitive), built with ``kwargs`` and, for
    the context fields it uses that ``kwargs`` do not give, an empty
    :class:`~kant.registry.BuildContext` (seed 0, no workload). Unknown names raise
    :class:`~kant.errors.UnknownPolicyError` listing the known ones."""
    return STRATEGIES.build(name, **kwargs)


def strategy_names() -> list[str]:
    """Every registered strategy name, sorted."""
    return STRATEGIES.names()


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
``ties`` and (``fgd``, ``fgdpp``) ``workload`` keywords."""

for _kcls in (Binpack, EBinpack, Spread, ESpread, Topology):
    register_strategy(_kcls.name, _kcls)
for _hcls in PACKING_STRATEGIES[:6]:  # the heuristics: a seeded tie rule
    register_strategy(_hcls.name, _hcls, uses=("seed",))
for _fcls in (FGD, FGDPlusPlus):  # and a target workload
    register_strategy(_fcls.name, _fcls, uses=("seed", "workload"))
