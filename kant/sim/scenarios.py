"""Scenarios (a cluster, a workload, quotas) and policy sets (queueing + placement +
preemption) for the simulator, and the glue that runs one on the other.

Built-in scenarios, by name (:func:`make_scenario`):

``paper-training``  the Kant paper's 8,000-GPU training cluster (section 5.1): 1,000 DGX-like
                    8-GPU nodes on a leaf / spine / superspine fat tree (32 nodes per leaf,
                    8 leaves per spine, 2 spines per superspine) and
                    :func:`~kant.sim.workloads.paper_training_workload` (20,000 jobs of 1 to
                    2,048 GPUs by default). The default scenario of ``kant simulate``.
``inference``       the multi-tenant heterogeneous inference cluster (section 5.2): 24 L40 and
                    12 A100 nodes, :func:`~kant.sim.workloads.inference_workload` (2,000
                    pod-level services), per-tenant shared quotas per GPU model
                    (:func:`~kant.sim.workloads.tenant_quotas`; borrowing allowed, so lent
                    quota can be reclaimed).

Trace scenarios (:func:`trace_scenario`): ``philly``, ``openb`` or ``swf`` jobs from the
shared trace folder (or a given file), on a cluster file (``--cluster``) or a default cluster:
openb's own node list; an SWF log that names its ``MaxProcs`` on its own machine (exactly
that many GPUs, 8 per node, the last node holding the rest: :func:`swf_machine`; whole
8-GPU nodes when a job's pods cannot all run at once on those; resizing is explicit:
``load=``, ``kant simulate --trace swf --load L``);
Philly (and an SWF log without ``MaxProcs``) a fat tree of 8-GPU nodes sized so that the
largest job fits and the offered load is about 0.8.

A :class:`PolicySet` names a queueing policy (:func:`kant.queueing.make_policy`), a placement
strategy (:data:`kant.placement.STRATEGIES`, the FGD baselines included) and a preemption
mode. Preemption ``auto`` follows the paper: only the Backfill policy preempts (its head,
past the threshold, evicts jobs that backfilled past it), Strict and Best-Effort FIFO never
do (the paper's baseline has no preemption), and where tenants have quotas a tenant within
its nominal quota reclaims what others borrowed. Priority preemption is off unless asked.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, Final

import attrs

from kant.admission import Admitter, Quota, QuotaMode
from kant.config import KantConfig
from kant.errors import ValidationError
from kant.model import MILLI, Job, NodeSpec, Role, is_int, is_number, registered
from kant.placement import STRATEGIES, Placer, Strategy, strategy_names
from kant.preemption import PreemptionPolicy
from kant.queueing import POLICIES, Backoff, Queue, make_policy, policy_names
from kant.registry import BuildContext
from kant.scheduler import Scheduler
from kant.sim.simulator import DEFAULT_RUNTIME, SimConfig, SimResult, Simulator, check_span
from kant.state import ClusterState
from kant.topology import ClusterDescription, fat_tree_for_nodes, load_cluster
from kant.topology.fabric import MAX_NODES
from kant.topology.templates import NodeTemplate

__all__ = [
    "COMPARE_SETS",
    "LOAD_RANGE",
    "MAX_JOBS",
    "MAX_SEEDS",
    "MAX_TICK",
    "PREEMPTION_KINDS",
    "PREEMPTION_MODES",
    "SCENARIOS",
    "TRACES",
    "UNDER_LOAD_ADVICE",
    "PolicySet",
    "Scenario",
    "busy_window",
    "canonical_preemption",
    "check_preemption",
    "cluster_for_jobs",
    "load_note",
    "make_scenario",
    "observation_window",
    "offered_load",
    "placement_names",
    "preemption_name",
    "run_scenario",
    "scenario_from_options",
    "swf_machine",
    "trace_scenario",
    "trace_warmup",
    "zone_note",
]

PREEMPTION_MODES: Final = ("auto", "none", "backfill", "priority", "reclaim", "all")
TRACES: Final = ("philly", "openb", "swf")


MAX_SEEDS: Final = 100_000
"""The most seeds :func:`parse_seeds` takes (``--seeds``, a sweep grid's ``seeds``)."""

LOAD_RANGE: Final = (0.01, 10.0)
"""The offered loads ``--load`` accepts: a lower load stretches the arrivals (or, for a trace,
grows the cluster) by its inverse, so a run at 1e-6 would practically never end."""

MAX_JOBS: Final = 10_000_000
"""The most jobs ``--jobs`` may ask for: 500 times the paper's 20,000-job workload, far past
what fits in memory as a generated workload (and past numpy's sizes)."""

MAX_TICK: Final = 86400.0
"""The longest ``--tick`` (one day): the run samples its metrics every 600 simulated seconds
up to its end, which a tick of years would push out without bound."""


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"42-51"``, ``"42,45"`` or a mix (``"42-44,50"``) -> the seeds, in order given; at
    most :data:`MAX_SEEDS` of them (more is refused before any list of them is made). An
    empty item (``"1,,2"``, ``"0-9,"``) is refused rather than dropped: it may be a seed left
    out by mistake, which dropping it would hide."""
    out: list[int] = []
    if not text.strip():
        raise ValidationError("seeds", text, "expected at least one seed")
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValidationError("seeds", text, "an empty item (two commas, or one at an end)")
        lo, sep, hi = part.partition("-")
        like = "expected seeds like 42-51 or 42,43"
        lo, hi = (lo.strip(), hi.strip()) if sep else (part, part)
        # (ASCII digits only: int() also takes other scripts' digits and "4_2")
        if not all(x.isascii() and x.isdigit() and len(x) <= 18 for x in (lo, hi)):
            raise ValidationError("seeds", text, like)
        a, b = int(lo), int(hi)
        if b < a:
            raise ValidationError("seeds", text, like)
        if len(out) + b - a + 1 > MAX_SEEDS:
            raise ValidationError("seeds", text, f"at most {MAX_SEEDS:,} seeds")
        out.extend(range(a, b + 1))
    return tuple(out)


def parse_sets(text: str) -> list[PolicySet]:
    """``"backfill+ebinpack,strict-fifo+spread"`` -> the policy sets (:meth:`PolicySet.parse`
    each), in order given. An empty item (``"a,,b"``, ``"a,"``) is refused rather than
    dropped, as :func:`parse_seeds` refuses one."""
    if not text.strip():
        raise ValidationError("sets", text, "expected at least one policy set")
    out = []
    for part in text.split(","):
        if not part.strip():
            raise ValidationError("sets", text, "an empty item (two commas, or one at an end)")
        out.append(PolicySet.parse(part))
    return out


def placement_names() -> list[str]:
    """Every registered placement strategy (the FGD-paper baselines included: importing
    :mod:`kant.placement` registers them)."""
    return strategy_names()


_queueing = registered("queueing", policy_names)
_placement = registered("placement", placement_names, fold_case=True)
PREEMPTION_KINDS: Final = ("priority", "reclaim", "backfill")


def check_preemption(value: Any) -> None:
    """Refuse, with a :class:`ValidationError` naming ``preemption``, what is neither a mode of
    :data:`PREEMPTION_MODES` nor distinct kinds of :data:`PREEMPTION_KINDS` joined by ``+``
    (``reclaim+backfill``, as :func:`preemption_name` writes them), in lower case."""
    if isinstance(value, str) and value in PREEMPTION_MODES:
        return
    if _kinds(value) is None:
        raise ValidationError(
            "preemption",
            value,
            f"must be one of {', '.join(PREEMPTION_MODES)} or kinds joined by '+' "
            "(e.g. reclaim+backfill)",
        )


def _kinds(value: Any) -> list[str] | None:
    """The kinds of ``value`` when it is distinct kinds of :data:`PREEMPTION_KINDS` joined by
    ``+``, in lower case; else None."""
    parts = value.split("+") if isinstance(value, str) else []
    if not parts or any(p not in PREEMPTION_KINDS for p in parts) or len(set(parts)) < len(parts):
        return None
    return parts


def _preemption(_inst: Any, _attr: Any, value: Any) -> None:
    check_preemption(value)


def preemption_name(policy: PreemptionPolicy) -> str:
    """How a report names the kinds ``policy`` has on: ``none``, ``all``, or the kinds joined
    by ``+`` in the order priority, reclaim, backfill (``reclaim+backfill``)."""
    kinds = [k for k in PREEMPTION_KINDS if getattr(policy, k)]
    if not kinds:
        return "none"
    return "all" if len(kinds) == len(PREEMPTION_KINDS) else "+".join(kinds)


def _lower(v: Any) -> Any:
    """A name as the registries read it (case-insensitive): lower-case."""
    return v.lower() if isinstance(v, str) else v


def canonical_preemption(value: Any) -> Any:
    """One name per preemption: lower-case, and distinct kinds joined by ``+`` in the order
    priority, reclaim, backfill (``all`` for the three), as :func:`preemption_name` writes
    them, so ``backfill+reclaim`` and ``reclaim+backfill`` are one set (its label, its pairs in
    the experiments, its sweep key). What is no preemption is returned lower-cased, for the
    check to refuse."""
    value = _lower(value)
    parts = None if value in PREEMPTION_MODES else _kinds(value)
    if parts is None:
        return value
    if len(parts) == len(PREEMPTION_KINDS):
        return "all"
    return "+".join(k for k in PREEMPTION_KINDS if k in parts)


def _threshold(inst: Any, _attr: Any, value: Any) -> None:
    """None, or Backfill's threshold: a number >= 0 (``inf``: never preempt), under the
    ``backfill`` queueing policy only (``--threshold`` is refused with another policy)."""
    if value is None:
        return
    if not is_number(value) or math.isnan(value) or value < 0:
        raise ValidationError("threshold", value, "must be a number >= 0 (seconds) or None")
    if inst.queueing != "backfill":
        raise ValidationError(
            "threshold", value, f"is Backfill's; queueing {inst.queueing!r} has none"
        )


@attrs.frozen(kw_only=True)
class PolicySet:
    """A queueing policy, a placement strategy and a preemption mode, by name (any case,
    kept lower-case, as the registries and config files read names).

    ``threshold``: the Backfill head's preemption threshold in seconds (None: the policy's
    default, 3,600 s). ``label``: how tables and plots name it (default
    ``"<queueing>+<placement>"``, then ``"+<preemption>"`` unless it is ``auto``).
    """

    queueing: str = attrs.field(default="backfill", converter=_lower, validator=_queueing)
    placement: str = attrs.field(default="ebinpack", converter=_lower, validator=_placement)
    preemption: str = attrs.field(
        default="auto", converter=canonical_preemption, validator=_preemption
    )
    threshold: float | None = attrs.field(default=None, validator=_threshold)
    name: str | None = None
    config: KantConfig | None = attrs.field(default=None, hash=False)

    @classmethod
    def from_config(cls, config: KantConfig, name: str | None = None) -> PolicySet:
        """The policies of a config file (``kant simulate --config``): its queueing policy,
        order and backoff, its placement strategy, group probe and seed, and its preemption
        options, each with its options; ``preemption`` names the kinds it has on."""
        return cls(
            queueing=config.queueing.policy,
            placement=config.placement.strategy,
            preemption=preemption_name(config.preemption),
            name=name,
            config=config,
        )

    @property
    def label(self) -> str:
        """How tables and plots name it: ``name``, else ``"<queueing>+<placement>"`` with
        ``"+<preemption>"`` when that is not ``auto`` (``backfill+spread+none``): what
        :meth:`parse` reads back, so two sets of a comparison differ in their labels."""
        if self.name:
            return self.name
        label = f"{self.queueing}+{self.placement}"
        return label if self.preemption == "auto" else f"{label}+{self.preemption}"

    @classmethod
    def parse(cls, text: str) -> PolicySet:
        """``"backfill+ebinpack"`` (queueing + placement, optional ``+preemption``: a mode or
        kinds joined by ``+``, ``backfill+spread+reclaim+backfill``); reads a :attr:`label`
        back."""
        parts = [p.strip() for p in text.split("+")]
        if len(parts) < 2 or not all(parts):
            raise ValidationError(
                "policy set",
                text,
                "must be QUEUEING+PLACEMENT[+PREEMPTION], e.g. backfill+ebinpack",
            )
        kw: dict[str, Any] = {"queueing": parts[0], "placement": parts[1]}
        if len(parts) > 2:
            kw["preemption"] = "+".join(parts[2:])
        return cls(**kw)

    def preemption_policy(self, has_quotas: bool) -> PreemptionPolicy:
        """The :class:`~kant.preemption.PreemptionPolicy` the mode means: ``"auto"`` reclaims when
        the scenario has quotas and backfill-preempts under the Backfill policy, never by
        priority; ``"none"`` nothing; ``"all"`` every rule; otherwise that rule only."""
        if self.config is not None:
            return self.config.preemption
        mode = self.preemption
        if mode == "auto":
            return PreemptionPolicy(
                priority=False, reclaim=has_quotas, backfill=self.queueing == "backfill"
            )
        kinds = PREEMPTION_KINDS if mode == "all" else mode.split("+")
        return PreemptionPolicy(
            priority="priority" in kinds, reclaim="reclaim" in kinds, backfill="backfill" in kinds
        )


COMPARE_SETS: Final = (
    PolicySet(queueing="strict-fifo", placement="ebinpack"),
    PolicySet(queueing="backfill", placement="ebinpack"),
    PolicySet(queueing="best-effort-fifo", placement="ebinpack"),
    PolicySet(queueing="backfill", placement="spread"),
)
"""``kant compare``'s default: the paper's Backfill experiment (Strict FIFO vs Backfill vs
Best-Effort FIFO, all with E-Binpack) and its E-Binpack experiment (E-Binpack vs the
spread-like baseline, both with Backfill)."""

INFERENCE_PAPER_SETS: Final = (
    PolicySet(queueing="backfill", placement="espread"),
    PolicySet(queueing="backfill", placement="ebinpack"),
    PolicySet(queueing="backfill", placement="spread"),
)
"""The ``inference-paper`` scenario's own comparison: E-Spread against E-Binpack and spread,
all under Backfill."""


def compare_sets_for(scenario: str | None) -> tuple[PolicySet, ...]:
    """The policy sets ``kant compare`` runs by default on the built-in scenario ``scenario``
    (its :attr:`Scenario.compare_sets`, known without building it), :data:`COMPARE_SETS` for
    any other name or None (a trace). The sweep's compare grids read it too."""
    return INFERENCE_PAPER_SETS if scenario == "inference-paper" else COMPARE_SETS


def _opt_count(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not (is_int(value) and value >= 0):
        raise ValidationError(attribute.name, value, "must be None or an int >= 0")


def _template_tuple(templates: Iterable[NodeTemplate]) -> tuple[NodeTemplate, ...]:
    return tuple(templates)


@attrs.frozen(kw_only=True)
class Scenario:
    """A cluster, a workload and (optionally) quotas, plus the simulation settings that suit
    them. ``quotas=None``: no static quota check. ``max_interruptions``: the queue's limit of
    interruptions per job (:attr:`Backoff.max_interruptions`; None: the policy set's own,
    no limit unless its config file sets one)."""

    name: str
    description: str
    nodes: tuple[NodeSpec, ...]
    jobs: tuple[Job, ...]
    quotas: tuple[Quota, ...] | None = None
    modes: tuple[tuple[str, QuotaMode], ...] = ()
    default_mode: QuotaMode = QuotaMode.SHARED
    config: SimConfig = attrs.field(factory=SimConfig)
    default_policy: PolicySet = attrs.field(factory=PolicySet)
    compare_sets: tuple[PolicySet, ...] = COMPARE_SETS
    max_interruptions: int | None = attrs.field(default=None, validator=_opt_count)
    # the node templates of the scenario's own (a cluster file's) its nodes name
    templates: tuple[NodeTemplate, ...] = attrs.field(default=(), converter=_template_tuple)

    @property
    def total_gpus(self) -> int:
        """GPUs over all the scenario's nodes. O(nodes)."""
        return sum(n.gpus for n in self.nodes)

    def with_tenants(self, config: KantConfig) -> Scenario:
        """The scenario with ``config``'s tenants: its quotas and quota modes replace the
        scenario's when the file has a ``tenants`` section (without one the scenario's quotas
        stay), and its ``defaultMode`` applies to the tenants it does not list. Raises
        :class:`~kant.errors.ValidationError` for a quota on a GPU model none of the
        scenario's nodes has (a typo, or another cluster's model: the tenant's jobs would
        wait to the end of the run)."""
        if config.tenants is None:
            return attrs.evolve(self, default_mode=config.default_mode)
        have = {n.gpu_model for n in self.nodes if n.gpus}
        for q in config.quotas or ():
            if q.gpu_model not in have:
                known = ", ".join(sorted(m for m in have if m is not None)) or "none"
                raise ValidationError(
                    f"tenants.{q.tenant}.quotas", q.gpu_model,
                    f"no node of the scenario has this GPU model (it has: {known})",
                    where=config.source,
                )  # fmt: skip
        modes = tuple((t.name, t.mode) for t in config.tenants if t.mode is not None)
        return attrs.evolve(
            self,
            description=f"{self.description}; tenants and quotas replaced by {config.source}'s",
            quotas=config.quotas,
            modes=modes,
            default_mode=config.default_mode,
        )

    def scheduler(self, policy: PolicySet | None = None) -> Scheduler:
        """A fresh scheduler for this scenario under ``policy`` (default: the scenario's);
        a policy set from a config file (:meth:`PolicySet.from_config`) brings its tenants
        (:meth:`with_tenants`) and every setting of its queueing, placement and preemption
        sections."""
        pol = policy if policy is not None else self.default_policy
        if pol.config is not None:
            return self._configured(pol.config)
        qopts: dict[str, Any] = {}
        if pol.threshold is not None and pol.queueing == "backfill":
            qopts["threshold"] = pol.threshold
        return Scheduler(
            ClusterState(self.nodes, templates=self.templates),
            queue=Queue(backoff=self.backoff(), history=None),
            admitter=self.admitter(),
            placer=Placer(self._strategy(pol.placement)),
            policy=make_policy(pol.queueing, **qopts),
            preemption=pol.preemption_policy(self.quotas is not None),
        )

    def admitter(self) -> Admitter:
        """A fresh admitter with the scenario's quotas and quota modes."""
        return Admitter(self.quotas, modes=dict(self.modes), default_mode=self.default_mode)

    def backoff(self, base: Backoff | None = None) -> Backoff:
        """The requeue backoff a run of this scenario uses: ``base`` (a config file's; None:
        the library's) with the scenario's :attr:`max_interruptions` when it sets one (it
        overrides the file's ``interruptionLimitCount``)."""
        backoff = Backoff() if base is None else base
        if self.max_interruptions is None:
            return backoff
        return attrs.evolve(backoff, max_interruptions=self.max_interruptions)

    def _configured(self, cfg: KantConfig) -> Scheduler:
        """The scheduler of a config file on this scenario: the simulator keeps every ended
        job (``history=None``, for its records); the placement strategy is built with the
        file's seed and the scenario's jobs and nodes (what FGD tunes itself to)."""
        q = cfg.queueing
        context = BuildContext(seed=cfg.placement.seed, workload=self.jobs, cluster=self.nodes)
        return Scheduler(
            ClusterState(self.nodes, templates=self.templates),
            queue=Queue(
                order=q.order,
                backoff=self.backoff(q.backoff),
                history=None,
                requeue_timestamp=q.requeue_timestamp,
            ),
            admitter=self.with_tenants(cfg).admitter(),
            placer=cfg.placer(context),
            policy=POLICIES.build(q.policy, **q.options),
            preemption=cfg.preemption,
        )

    def _strategy(self, name: str) -> Strategy:
        """The placement strategy ``name``, built from the scenario: its seed (the tie rule
        of the FGD-paper baselines), its jobs (the target workload of ``fgd`` / ``fgdpp``)
        and its nodes; each strategy takes what it is registered to use."""
        context = BuildContext(seed=self.config.seed, workload=self.jobs, cluster=self.nodes)
        return STRATEGIES.build(name, context)

    def with_jobs(self, n: int | None) -> Scenario:
        """The scenario with only its first ``n`` jobs (by arrival); None: all."""
        if n is not None:
            _check_jobs(n)
        if n is None or n >= len(self.jobs):
            return self
        return attrs.evolve(self, jobs=self.jobs[:n])


def run_scenario(
    scenario: Scenario,
    policy: PolicySet | None = None,
    config: SimConfig | None = None,
    *,
    progress: Callable[..., None] | None = None,
) -> SimResult:
    """Simulate ``scenario`` under ``policy`` (default: the scenario's) and ``config``
    (default: the scenario's)."""
    sim = Simulator(
        scenario.scheduler(policy),
        scenario.jobs,
        config if config is not None else scenario.config,
        progress=progress,
    )
    return sim.run()


# --------------------------------------------------------------------------- built-ins


def paper_training(
    jobs: int = 20_000,
    seed: int = 0,
    *,
    nodes: int = 1000,
    nodes_per_leaf: int = 32,
    load: float = 0.95,
) -> Scenario:
    """The paper's 8,000-GPU training cluster with its workload (see the module docstring).

    ``load`` is the offered load of the workload (GPU-time asked / GPU-time available over
    the arrival span)."""
    from kant.sim.workloads import paper_training_workload

    desc = fat_tree_for_nodes(
        nodes, nodes_per_leaf=nodes_per_leaf, leaves_per_spine=8, spines_per_superspine=2
    )
    gpus = desc.total_gpus
    work = paper_training_workload(jobs, seed, cluster_gpus=gpus, load=load)
    return Scenario(
        name="paper-training",
        description=(
            f"{gpus:,}-GPU training cluster: {nodes:,} DGX-like 8-GPU nodes, "
            f"{nodes_per_leaf} per leaf; {len(work):,} jobs of 1-2048 GPUs, offered load {load:g}"
        ),
        nodes=desc.nodes,
        jobs=tuple(work),
        config=SimConfig(
            tick=60.0, grace_period=30.0, sample_interval=600.0, warmup=0.2, seed=seed
        ),
        default_policy=PolicySet(queueing="backfill", placement="ebinpack"),
    )


def inference(jobs: int = 2000, seed: int = 0, *, load: float = 0.9) -> Scenario:
    """The multi-tenant heterogeneous inference cluster (see the module docstring)."""
    from kant.sim.workloads import (
        inference_cluster_nodes,
        inference_workload,
        tenant_quotas,
    )

    nodes = inference_cluster_nodes()
    quotas = tuple(
        Quota.gpus(t, m, q) for t, per in tenant_quotas().items() for m, q in sorted(per.items())
    )
    work = inference_workload(jobs, seed, load=load)
    gpus = sum(n.gpus for n in nodes)
    return Scenario(
        name="inference",
        description=(
            f"{gpus}-GPU heterogeneous inference cluster (L40 + A100), {len(quotas)} tenant "
            f"quotas; {len(work):,} pod-level services, offered load {load:g}"
        ),
        nodes=tuple(nodes),
        jobs=tuple(work),
        quotas=quotas,
        config=SimConfig(
            tick=30.0, grace_period=30.0, sample_interval=600.0, warmup=0.2, seed=seed
        ),
        default_policy=PolicySet(queueing="backfill", placement="ebinpack"),
        compare_sets=compare_sets_for("inference"),
    )


def inference_paper(
    jobs: int | None = None,
    seed: int = 0,
    *,
    load: float = 0.95,
    size: str = "i2",
    zone: bool = True,
    host_resources: bool = True,
    caps: bool = True,
    traces: str | Path | None = None,
) -> Scenario:
    """The paper's inference experiment on real data (:mod:`kant.sim.inference_paper`):
    DLRM services and large distributed inference jobs on a two-model cluster of real node
    shapes, Helios tenant quotas; ``size`` in ``i7``, ``i2``, ``a10``; ``zone=False``
    without the E-Spread inference zone; ``caps=False`` without the apps' per-node instance
    caps; ``host_resources=False`` without their CPU and memory requests. Needs the shared
    trace folder (``traces`` or ``$KANT_TRACES``). Backfill + E-Spread, one cycle per 30 s.
    Checks ``jobs``, ``seed`` and ``load`` as :func:`make_scenario` does, and the other
    arguments, before reading anything: :class:`~kant.errors.ValidationError` naming the
    argument; a service or job no node of the cluster could hold is refused as a trace's
    is (``ValidationError`` naming it)."""
    from kant.sim.inference_paper import (
        inference_paper_cluster,
        inference_paper_workload,
        pools_of,
        quotas_for,
        tenant_shares,
    )
    from kant.sim.traces.common import no_trace_dir, trace_dir

    _check_seed(seed)
    if jobs is not None:
        _check_jobs(jobs)
    _check_load(load)
    for flag, v in (("zone", zone), ("host_resources", host_resources), ("caps", caps)):
        if not isinstance(v, bool):
            raise ValidationError(flag, v, "must be True or False")
    if traces is not None and not isinstance(traces, str | PathLike):
        raise ValidationError("traces", traces, "must be the path of the shared trace folder")
    base = Path(traces) if traces is not None else trace_dir()
    if base is None:
        raise ValidationError(
            "scenario", "inference-paper", f"needs the shared trace folder: {no_trace_dir()}"
        )
    if not base.is_dir():
        raise ValidationError("traces", str(traces), "is not a folder (the shared trace folder)")
    nodes = inference_paper_cluster(base, size, zone=zone)
    shares = tenant_shares(base)
    pools = pools_of(nodes)
    work = inference_paper_workload(
        base, nodes, shares, seed=seed, load=load, host_resources=host_resources, caps=caps
    )
    if jobs is not None:
        work = work[:jobs]
    _check_every_job_fits(work, nodes, f"the inference cluster {size} of {base}")
    gpus = sum(pools.values())
    big = sum(1 for j in work if j.gang)
    pool_text = ", ".join(f"{m} {g}" for m, g in pools.items())
    return Scenario(
        name="inference-paper",
        description=(
            f"{gpus}-GPU inference cluster {size} ({pool_text} GPUs, real node shapes), "
            f"{len(shares)} Helios tenants; {len(work) - big:,} DLRM services (2 days of the "
            f"Alibaba 2025 trace) + {big} 2 x 8-GPU gangs, peak load {load:g}"
        ),
        nodes=nodes,
        jobs=tuple(work),
        quotas=quotas_for(pools, shares),
        config=SimConfig(
            tick=30.0, grace_period=30.0, sample_interval=300.0, warmup=0.2, seed=seed
        ),
        default_policy=PolicySet(queueing="backfill", placement="espread"),
        compare_sets=compare_sets_for("inference-paper"),
    )


SCENARIOS: Final[Mapping[str, Callable[..., Scenario]]] = {
    "paper-training": paper_training,
    "inference": inference,
    "inference-paper": inference_paper,
}


def make_scenario(
    name: str, *, jobs: int | None = None, seed: int = 0, load: float | None = None
) -> Scenario:
    """A built-in scenario by name; ``jobs`` and ``load`` (offered load) override its
    defaults."""
    try:
        build = SCENARIOS[name]
    except KeyError:
        raise ValidationError("scenario", name, f"must be one of {sorted(SCENARIOS)}") from None
    _check_seed(seed)
    kw: dict[str, Any] = {"seed": seed}
    if jobs is not None:
        _check_jobs(jobs)
        kw["jobs"] = jobs
    if load is not None:
        _check_load(load)
        kw["load"] = load
    return build(**kw)


def _check_seed(seed: Any) -> None:
    if not is_int(seed) or seed < 0:
        raise ValidationError("seed", seed, "must be an int >= 0")


def _check_jobs(jobs: Any) -> None:
    if not is_int(jobs) or jobs < 1:
        raise ValidationError("jobs", jobs, "must be an int >= 1")


def _check_load(load: Any) -> None:
    if not is_number(load) or not load > 0:
        raise ValidationError("load", load, "must be a number > 0")


SCENARIO_OPTIONS: Final = (
    "scenario", "trace", "trace_file", "cluster", "jobs", "seed", "load",
    "tick", "grace", "on_interrupt", "mtbf", "mttr", "horizon", "max_interruptions",
)  # fmt: skip
"""The options :func:`scenario_from_options` reads (``kant simulate``'s workload, cluster and
simulation options, by their ``argparse`` names)."""

_SIM_CHANGES: Final = {
    "tick": "tick",
    "grace": "grace_period",
    "on_interrupt": "on_interrupt",
    "mtbf": "mtbf",
    "mttr": "mttr",
    "horizon": "horizon",
}


def scenario_from_options(options: Mapping[str, Any]) -> Scenario:
    """The scenario ``kant simulate``'s options name, as ``kant simulate``, ``kant compare``
    and a sweep's ``sim`` runs build it: a built-in ``scenario`` (default
    ``paper-training``) or a ``trace`` (with its ``trace_file``, ``cluster``), its ``jobs``,
    ``seed`` (default 0) and ``load``, and the simulation settings ``tick``, ``grace``,
    ``on_interrupt``, ``mtbf``, ``mttr``, ``horizon`` over the scenario's own, and the
    queue's ``max_interruptions`` (:attr:`Scenario.max_interruptions`). A missing or
    None option takes its default; an unknown one, options that do not go together, bad
    values and times beyond kant's limits (:func:`kant.sim.simulator.check_span`) raise
    :class:`~kant.errors.ValidationError`."""
    for k in options:
        if k not in SCENARIO_OPTIONS:
            known = ", ".join(SCENARIO_OPTIONS)
            raise ValidationError(k, options[k], f"not a scenario option (known: {known})")
    o = {k: v for k, v in options.items() if v is not None}
    seed = o.get("seed", 0)
    if "trace" in o:
        if "scenario" in o:
            raise ValidationError("scenario", o["scenario"], f"and trace {o['trace']}: pick one")
        if "load" in o and "cluster" in o:
            raise ValidationError(
                "load", o["load"], "sizes a trace's own cluster, not the one cluster gives"
            )
        sc = trace_scenario(
            o["trace"], path=o.get("trace_file"), cluster=o.get("cluster"), jobs=o.get("jobs"),
            seed=seed, load=o.get("load"),
        )  # fmt: skip
    else:
        for name in ("cluster", "trace_file"):
            if name in o:
                raise ValidationError(name, o[name], "goes with a trace")
        sc = make_scenario(
            o.get("scenario", "paper-training"), jobs=o.get("jobs"), seed=seed, load=o.get("load")
        )
    changes = {field: o[k] for k, field in _SIM_CHANGES.items() if k in o}
    if changes:
        sc = attrs.evolve(sc, config=attrs.evolve(sc.config, **changes))
    if "max_interruptions" in o:
        sc = attrs.evolve(sc, max_interruptions=o["max_interruptions"])
    # (a broken time is refused here, before a note is printed or a sweep's worker runs)
    check_span(sorted(sc.jobs, key=lambda j: j.submitted_at), sc.config)
    return sc


# --------------------------------------------------------------------------- traces

_TRACE_FILES: Final = {
    "philly": "philly-pollux-jobs/philly.csv",
    "openb": "alibaba-openb-v2023/openb_pod_list_default.csv",
    "swf": "pwa-nasa-ipsc-1993/NASA-iPSC-1993-3.1-cln.swf.gz",
}
_OPENB_NODES: Final = "alibaba-openb-v2023/openb_node_list_all_node.csv"

TARGET_LOAD: Final = 0.8


BUSY_SHARE: Final = 0.9
"""The share of a trace's arrivals (the middle ones) whose stretch sizes its cluster and starts
its observation window: a trace's sparse lead-in or tail does not dilute the load."""


def busy_window(jobs: Sequence[Job], share: float = BUSY_SHARE) -> tuple[float, float]:
    """The stretch of arrivals from the ``(1 - share) / 2`` quantile to the ``(1 + share) / 2``
    one (by job count): where the middle ``share`` of the jobs arrive."""
    if not jobs:
        raise ValidationError("jobs", jobs, "needs at least one job")
    times = sorted(j.submitted_at for j in jobs)
    n = len(times)
    lo = times[min(n - 1, math.floor((1 - share) / 2 * (n - 1)))]
    hi = times[min(n - 1, math.ceil((1 + share) / 2 * (n - 1)))]
    return lo, hi


def offered_load(
    jobs: Sequence[Job],
    gpus: int,
    t0: float,
    t1: float,
    *,
    default_runtime: float = DEFAULT_RUNTIME,
) -> float:
    """GPU-time the jobs ask for inside ``[t0, t1]`` if each ran from its arrival for its
    ``runtime_estimate`` (``default_runtime`` when it has none, as the simulator runs it),
    over ``gpus * (t1 - t0)``: the load a cluster of ``gpus`` is offered in that window (0
    for an empty window or cluster)."""
    if t1 <= t0 or gpus <= 0:
        return 0.0
    work = 0.0
    for j in jobs:
        end = j.submitted_at + (j.runtime_estimate or default_runtime)
        overlap = min(end, t1) - max(j.submitted_at, t0)
        if overlap > 0:
            work += j.gpu_units * overlap
    return work / (gpus * (t1 - t0))


def observation_window(scenario: Scenario) -> tuple[float, float]:
    """The window the simulator measures GAR, SOR and GFR over (arrivals, warm-up excluded),
    as :class:`~kant.sim.simulator.Simulator` computes it, before the run ends: empty (its
    start at its end) when every job arrives at once, as the simulator then measures to the
    run's end."""
    if not scenario.jobs:
        return 0.0, 0.0
    times = [j.submitted_at for j in scenario.jobs]
    w0, w1 = min(times), max(times)
    return w0 + scenario.config.warmup * (w1 - w0), w1


UNDER_LOAD_ADVICE: Final = (
    "with few jobs their arrivals span less than their runtimes: use more jobs or a higher load"
)
"""What :func:`load_note` advises for a run under its target load, unless told otherwise: a
built-in scenario's (its ``jobs`` and ``load`` make its workload)."""


def load_note(scenario: Scenario, target: float, *, advice: str = UNDER_LOAD_ADVICE) -> str | None:
    """A warning when the load the scenario's cluster is offered over its observation window
    (:func:`offered_load`) is far from ``target``: under two thirds of it, or over 1.5 times.
    The figures of such a run say little about contention. None when it is close. ``advice``
    ends a warning of too little load: what would give the run more (a trace on a cluster
    of its own takes no ``load``: the command line says what it does take). None too when
    every job arrives at once (an openb ``multigpu`` pod list): the simulator then measures
    from the arrivals to the run's end, which no one knows before the run."""
    w0, w1 = observation_window(scenario)
    if w1 <= w0:
        return None
    load = offered_load(
        scenario.jobs, scenario.total_gpus, w0, w1, default_runtime=scenario.config.default_runtime
    )
    if target * 2 / 3 <= load <= target * 1.5:
        return None
    if load < target:
        return (
            f"the offered load over the observation window is {load:.2f}, well under the "
            f"target {target:g}: the run is barely contended (few jobs wait long); {advice}"
        )
    return (
        f"the offered load over the observation window is {load:.2f}, well over the target "
        f"{target:g}: the queue only grows, and waits show the overload more than the policy"
    )


def zone_note(scenario: Scenario, policy: PolicySet) -> str | None:
    """A warning when the policy's placement keeps a dedicated zone (E-Spread's ``zone``)
    that no node of the scenario's cluster is in: every pod then goes to the general nodes
    as E-Binpack places it, and the run says nothing of E-Spread. None otherwise."""
    placer = scenario.scheduler(policy).placer
    zone = getattr(getattr(placer, "strategy", None), "zone", None)
    if not isinstance(zone, str) or any(n.zone == zone for n in scenario.nodes):
        return None
    return (
        f"placement {policy.placement}: no node of the cluster is in its zone {zone!r}, so "
        "every pod is placed on the general nodes as by ebinpack: the run is no E-Spread one "
        "(give nodes that zone in a cluster file, or name the zone the nodes have)"
    )


def cluster_for_jobs(
    jobs: Sequence[Job], *, load: float = TARGET_LOAD, min_gpus: int = 0, nodes_per_leaf: int = 32
) -> ClusterDescription:
    """A fat tree of DGX-like 8-GPU nodes for ``jobs``: big enough for the largest job and
    ``min_gpus``, and for an offered load of about ``load`` over the stretch where the
    middle 90% of the jobs arrive (:func:`busy_window`; a sparse lead-in does not dilute it),
    counting the GPU-time each job asks for inside that stretch (:func:`offered_load`; a job
    without a ``runtime_estimate`` runs for the simulator's default runtime)."""
    if not jobs:
        raise ValidationError("jobs", jobs, "needs at least one job")
    biggest = max(j.gpu_units for j in jobs)
    t0, t1 = busy_window(jobs)
    need = max(biggest, float(min_gpus), offered_load(jobs, 1, t0, t1) / load if t1 > t0 else 0.0)
    nodes = max(1, math.ceil(need / 8))
    return fat_tree_for_nodes(nodes, nodes_per_leaf=min(nodes_per_leaf, nodes))


def swf_machine(procs: int, *, nodes_per_leaf: int = 32) -> ClusterDescription:
    """An SWF log's own machine of ``procs`` processors: exactly ``procs`` GPUs, one per
    processor, as the fat tree of DGX-like 8-GPU nodes :func:`cluster_for_jobs` builds, its
    last node holding the rest when ``procs`` is no multiple of 8 (``MaxProcs`` 100: 12 nodes
    of 8 and one of 4, in the same leaf). That node has as many NICs as GPUs and no node
    template (a template is per node shape, and a shape made for one log would have to be
    registered in every process that runs it): placement sees its GPUs without their links."""
    if not is_int(procs) or procs < 1:
        raise ValidationError("MaxProcs", procs, "must be an int >= 1")
    n = -(-procs // 8)
    desc = fat_tree_for_nodes(n, nodes_per_leaf=min(nodes_per_leaf, n))
    rest = procs % 8
    if not rest:
        return desc
    last = attrs.evolve(desc.nodes[-1], gpus=rest, rdma_nics=rest, template=None)
    return ClusterDescription(nodes=(*desc.nodes[:-1], last), templates=desc.templates)


def trace_warmup(jobs: Sequence[Job], warmup: float = 0.1) -> float:
    """The warm-up share of a trace's arrival span that starts its observation window
    ``warmup`` of the way from the start of its busy stretch (:func:`busy_window`) to its
    last arrival (the window's end), so a sparse lead-in is not measured; at most 0.9."""
    times = [j.submitted_at for j in jobs]
    first, last = min(times), max(times)
    if last <= first:
        return warmup
    lo, _hi = busy_window(jobs)
    start = lo + warmup * (last - lo)
    return min((start - first) / (last - first), 0.9)


def _max_procs(meta: Mapping[str, str], where: str | None = None) -> int:
    """An SWF header's ``MaxProcs``: 0 when absent, empty or ``-1`` (SWF's "unknown"), else a
    positive integer written in ASCII digits. ValidationError for any other value (``0``,
    ``-5``, ``abc``, ``1.5``: the log's machine cannot be known, and guessing one would
    replay the log on another machine without a word) and when the machine it gives has
    more than :data:`~kant.topology.fabric.MAX_NODES` 8-GPU nodes."""
    text = meta.get("MaxProcs", "").strip()
    if text in ("", "-1"):
        return 0
    if not (text.isascii() and text.isdigit()) or not text.strip("0"):
        raise ValidationError(
            "MaxProcs", text, "must be a positive integer, or -1 when the log's machine is unknown",
            where=where,
        )  # fmt: skip
    if len(text) > 12 or int(text) > 8 * MAX_NODES:
        raise ValidationError(
            "MaxProcs", text, f"the log's machine would have more than {MAX_NODES:,} nodes",
            where=where,
        )  # fmt: skip
    return int(text)


_NodeShape = tuple[int, int, int, int]
"""A node's GPUs, CPU milli, memory MiB and NICs."""


def _room(role: Role, have: _NodeShape) -> int:
    """At most how many pods of ``role`` one node of ``have`` holds at once, counting its
    GPUs (a GPU share: that many shares per GPU), CPU, memory and NICs; -1 when the pod asks
    none of them (no bound)."""
    r = role.resources
    bounds = [
        h // w for h, w in zip(have[1:], (r.cpu_milli, r.memory_mib, r.rdma_nics), strict=True) if w
    ]
    if r.gpus:
        bounds.append(have[0] // r.gpus)
    elif r.gpu_milli:
        bounds.append(have[0] * (MILLI // r.gpu_milli))
    return min(bounds) if bounds else -1


def _why_never_fits(
    job: Job, shapes: Mapping[str | None, Counter[_NodeShape]], where: str
) -> str | None:
    """Why ``job`` could never start on the nodes of ``shapes`` (by GPU model: each node
    shape with its count), or None when it may. Refused: a role none of whose nodes can hold
    one pod; for a gang, whose pods must all run at once, a role with more pods than its
    nodes can hold together (each node holding :func:`_room` of them), or more GPUs than the
    nodes its roles may use have. Only certain misfits: a job these counts let through may
    still wait for its topology, labels or the other roles on the same nodes."""
    pool: set[str | None] = set()
    for role in job.roles:
        r = role.resources
        models = [m for m in shapes if not role.gpu_models or m in role.gpu_models]
        pool.update(models)
        rooms = [(_room(role, shape), k) for m in models for shape, k in shapes[m].items()]
        of = f" of model {'/'.join(sorted(role.gpu_models))}" if role.gpu_models else ""
        size = (f"{r.gpus or r.gpu_milli / 1000:g} GPUs, {r.cpu_milli} CPU milli, "
                f"{r.memory_mib} MiB, {r.rdma_nics} NICs")  # fmt: skip
        if not any(room for room, _ in rooms):
            return f"no node{of} of the cluster ({where}) can hold one of its pods ({size})"
        if job.gang and role.replicas > 1 and all(room >= 0 for room, _ in rooms):
            most = sum(room * k for room, k in rooms)
            if most < role.replicas:
                return (
                    f"its {role.replicas} {role.name} pods ({size}) must run at once, and the "
                    f"nodes{of} of the cluster ({where}) hold at most {most} of them"
                )
    if job.gang:
        gpus = sum(shape[0] * k for m in pool for shape, k in shapes[m].items())
        if job.total_milli > gpus * MILLI:
            return (
                f"its pods ask {job.gpu_units:g} GPUs at once; the nodes of the GPU models they "
                f"may use ({where}) have {gpus}"
            )
    return None


def _first_misfit(
    jobs: Sequence[Job], nodes: Sequence[NodeSpec], where: str
) -> tuple[Job, str] | None:
    """The first of ``jobs`` that could never start on ``nodes`` (described as ``where``),
    and why; None when there is none. Each distinct job shape is judged once
    (:func:`_why_never_fits`): O(distinct job shapes x their roles x distinct node shapes +
    jobs)."""
    shapes: dict[str | None, Counter[_NodeShape]] = {}
    for n in nodes:
        shapes.setdefault(n.gpu_model, Counter())[
            (n.gpus, n.cpu_milli, n.memory_mib, n.rdma_nics)
        ] += 1
    total = sum(n.gpus for n in nodes)
    verdict: dict[tuple[Any, ...], str | None] = {}
    for job in jobs:
        if job.gpu_units > total:
            return job, f"it asks {job.gpu_units:g} GPUs; the cluster ({where}) has {total}"
        key = (job.gang, *((r.name, r.replicas, r.gpu_models, r.resources) for r in job.roles))
        if key not in verdict:
            verdict[key] = _why_never_fits(job, shapes, where)
        why = verdict[key]
        if why is not None:
            return job, why
    return None


def _check_every_job_fits(jobs: Sequence[Job], nodes: Sequence[NodeSpec], where: str) -> None:
    """Refuse a trace with a job that could never start on ``nodes`` (described as
    ``where``): a pod no node of its GPU models can hold (a model the cluster lacks, more
    GPUs, CPU, memory or NICs than any such node has), more GPUs than the cluster has, or a
    gang whose pods the nodes cannot hold all at once (:func:`_why_never_fits`). A run would
    keep it waiting to the end, its wait counted in JWTD."""
    misfit = _first_misfit(jobs, nodes, where)
    if misfit is not None:
        job, why = misfit
        raise ValidationError("trace", job.id, f"job {job.id} could never start: {why}")


def trace_scenario(
    kind: str,
    *,
    path: str | Path | None = None,
    cluster: str | Path | None = None,
    jobs: int | None = None,
    seed: int = 0,
    load: float | None = None,
) -> Scenario:
    """A trace-driven scenario: ``kind`` in :data:`TRACES`, the jobs from ``path`` (default:
    the shared trace folder's file), the first ``jobs`` of them (by arrival; all if None),
    on the cluster file ``cluster`` (for openb also its node list, a ``.csv`` file in any
    case, as ``.YAML`` is YAML; default:
    see the module docstring).

    ``load``: size the default fat tree for that offered load (never smaller than the
    largest job, nor than an SWF log's ``MaxProcs``). None: an SWF log that names its
    ``MaxProcs`` is replayed on its own machine, whatever its load: :func:`swf_machine`, or
    when ``MaxProcs`` is no multiple of 8 and a job's pods cannot all run at once on those
    nodes (MaxProcs 21: 8 + 8 + 5 GPUs, and a 21-processor job is 3 pods of 7), the same
    machine rounded up to whole 8-GPU nodes, the description saying so and naming the job. (On
    that machine the loader's pods, all equal or 8s and one rest, fit exactly when
    :func:`_why_never_fits` finds no misfit.) Other traces are sized for :data:`TARGET_LOAD`.
    Not with ``cluster``, nor for openb (its node list)."""
    if load is not None:
        if isinstance(load, bool) or not isinstance(load, int | float) or not load > 0:
            raise ValidationError("load", load, "must be a number > 0")
        if cluster is not None:
            raise ValidationError("load", load, "sizes the default cluster: not with a cluster")
        if kind == "openb":
            raise ValidationError("load", load, "openb runs on its own node list: not with a load")
    from kant.sim.traces import (
        load_openb_jobs,
        load_philly_jobs,
        load_swf_jobs,
        openb_nodes,
        trace_dir,
    )
    from kant.sim.traces.common import no_trace_dir

    if kind not in TRACES:
        raise ValidationError("trace", kind, f"must be one of {list(TRACES)}")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValidationError("jobs", jobs, "must be None (all) or an int >= 1")
    base = trace_dir()
    if path is None:
        if base is None:
            raise ValidationError("trace", kind, f"{no_trace_dir()}, or give a trace file")
        path = base / _TRACE_FILES[kind]
    meta: Mapping[str, str] = {}
    if kind == "philly":
        trace = load_philly_jobs(path)
    elif kind == "openb":
        trace = load_openb_jobs(path)
    else:
        trace = load_swf_jobs(path)
        meta = trace.meta
    work = list(trace.jobs)
    if jobs is not None:
        work = work[:jobs]
    if not work:
        raise ValidationError("trace", str(path), "holds no jobs")
    if cluster is not None and kind == "openb" and Path(cluster).suffix.lower() == ".csv":
        desc = openb_nodes(cluster)  # (openb's own node list)
        where = str(cluster)
    elif cluster is not None:
        desc = load_cluster(cluster)
        where = str(cluster)
    elif kind == "openb":
        if base is None:
            raise ValidationError("cluster", None, "openb needs its node list: give --cluster")
        desc = openb_nodes(base / _OPENB_NODES)
        where = "openb node list"
    else:
        procs = _max_procs(meta, str(path)) if kind == "swf" else 0
        if procs and load is None:
            big = max(work, key=lambda j: j.gpu_units)
            if big.gpu_units > procs:
                raise ValidationError(
                    "MaxProcs", procs,
                    f"job {big.id} asks {big.gpu_units:g} processors, more than the log's "
                    "machine has (size a cluster for the log with a load, or give a cluster)",
                    where=str(path),
                )  # fmt: skip
            desc = swf_machine(procs)
            where = "the log's own machine, MaxProcs"
            misfit = _first_misfit(work, desc.nodes, where) if procs % 8 else None
            if misfit is not None:  # (a job's pods do not pack onto exactly MaxProcs GPUs)
                desc = swf_machine(-(-procs // 8) * 8)
                where = (
                    f"the log's own machine, MaxProcs {procs} rounded up to whole 8-GPU nodes: "
                    f"on exactly {procs} GPUs job {misfit[0].id} could never start"
                )
        else:
            target = TARGET_LOAD if load is None else float(load)
            desc = cluster_for_jobs(work, load=target, min_gpus=procs)
            where = f"fat tree sized for load {target:g} over the busiest 90% of its arrivals"
    gpus = desc.total_gpus
    if gpus <= 0:  # (no job could start: a run would end at once, every wait "0 s")
        raise ValidationError("cluster", where, "has no GPUs: no job of the trace can run")
    _check_every_job_fits(work, desc.nodes, where)
    name = Path(path).name
    return Scenario(
        name=kind,
        description=f"{kind} trace {name}: {len(work):,} jobs on {gpus:,} GPUs ({where})",
        nodes=desc.nodes,
        templates=desc.templates,
        jobs=tuple(work),
        config=SimConfig(
            tick=60.0,
            grace_period=30.0,
            sample_interval=600.0,
            warmup=trace_warmup(work),
            seed=seed,
        ),
        default_policy=PolicySet(queueing="backfill", placement="ebinpack"),
    )
