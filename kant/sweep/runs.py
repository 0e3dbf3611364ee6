"""What one run of a sweep does, in two halves: :func:`prepare` builds the input a group of
runs shares (a scenario; a packing trace and node list), once, where the sweep is driven;
:func:`execute` runs one run on it, wherever a back-end puts it, and never raises: a run
that raises comes back as ``{"status": "failed", "error": ...}``.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from typing import Any

import attrs

from kant.errors import ValidationError
from kant.sim.analysis import run_metrics
from kant.sim.scenarios import (
    SCENARIO_OPTIONS,
    PolicySet,
    Scenario,
    run_scenario,
    scenario_from_options,
)

__all__ = ["PackingInput", "execute", "prepare", "scenario_from_params"]


def scenario_from_params(params: Mapping[str, Any]) -> Scenario:
    """The scenario a ``sim`` run's parameters name, built as ``kant simulate`` builds it
    from its options (:func:`kant.sim.scenarios.scenario_from_options`; the run's policy
    parameters are not the scenario's). Raises :class:`~kant.errors.ValidationError` on
    options that do not go together or bad values."""
    return scenario_from_options({k: v for k, v in params.items() if k in SCENARIO_OPTIONS})


@attrs.frozen
class PackingInput:
    """A packing trace's pods and its node list, loaded once for every run on them."""

    nodes: tuple[Any, ...]
    pods: tuple[Any, ...]


def prepare(kind: str, params: Mapping[str, Any]) -> Scenario | PackingInput:
    """The input the runs of ``params``' group share (see :attr:`RunSpec.group`)."""
    if kind == "sim":
        return scenario_from_params(params)
    from kant.sim.traces import load_openb_pods, openb_nodes

    for name in ("pods", "nodes"):
        if name not in params:
            raise ValidationError(name, None, "a packing run needs pods and nodes (openb CSVs)")
    return PackingInput(
        nodes=tuple(openb_nodes(params["nodes"]).nodes),
        pods=tuple(load_openb_pods(params["pods"]).pods),
    )


def _policy(scenario: Scenario, params: Mapping[str, Any]) -> PolicySet:
    base = scenario.default_policy
    return PolicySet(
        queueing=params.get("queueing", base.queueing),
        placement=params.get("placement", base.placement),
        preemption=params.get("preemption", "auto"),
        threshold=params.get("threshold"),
    )


def _run(kind: str, shared: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "sim":
        pol = _policy(shared, params)
        return run_metrics(shared, pol, run_scenario(shared, pol))
    from kant.sim.packing import run_packing

    run = run_packing(
        shared.nodes,
        shared.pods,
        str(params.get("policy", "fgd")).lower(),
        seed=params.get("seed", 42),
        inflate=params.get("inflate", 1.3),
    )
    return {
        "arrivals": run.arrivals,
        "placed": run.placed,
        "failed": run.failed,
        "alloc": [None if x != x else x for x in run.alloc],  # NaN as None (strict JSON)
        "frag": [None if x != x else x for x in run.frag],
    }


def execute(kind: str, shared: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """Run one run and return its outcome: ``status`` (``ok`` / ``failed``), ``metrics``,
    ``error`` (the exception's type and message, and where it was raised) and ``wall_s``.
    Never raises (an ``Exception``): a failed run is a value, so the others go on."""
    t0 = time.perf_counter()
    try:
        metrics = _run(kind, shared, params)
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        return {
            "status": "failed",
            "metrics": None,
            "error": f"{type(e).__name__}: {e} (at {where.filename}:{where.lineno})",
            "wall_s": round(time.perf_counter() - t0, 3),
        }
    return {
        "status": "ok",
        "metrics": metrics,
        "error": None,
        "wall_s": round(time.perf_counter() - t0, 3),
    }
