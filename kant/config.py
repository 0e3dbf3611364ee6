"""One YAML file for a scheduler's settings: tenants and their quotas per GPU model, the
queueing policy, the placement strategy and the preemption options (``docs/config.md``).

>>> cfg = load_config_text('''
... tenants:
...   - name: team-a
...     quotas:
...       H100: {nominalQuota: 64, borrowingLimit: 32}
... queueing: {policy: strict-fifo}
... ''')
>>> cfg.quotas[0].nominal, cfg.quotas[0].borrowing_limit, cfg.queueing.policy
(64000, 32000, 'strict-fifo')

Quota keys use the names a Kueue user knows (a tenant is a ClusterQueue, a GPU model a
ResourceFlavor of ``nvidia.com/gpu``): ``nominalQuota``, ``borrowingLimit``, ``lendingLimit``, in
GPUs. Every mistake raises :class:`~kant.errors.InvalidConfigFileError` naming the key path
(``tenants[2].quotas.A100.nominalQuota``), before anything is built; unknown and repeated keys
are mistakes too. An optional top-level ``kubernetes:`` mapping is kept as given
(:attr:`KantConfig.kubernetes`) for the Kubernetes integration to validate.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from kant.admission.quota import ISOLATED_LIMITS, Admitter, Quota, QuotaMode
from kant.errors import InvalidConfigFileError, KantError, ValidationError
from kant.model import MILLI, NAME_REASON, Job, Resources, Role, is_name
from kant.placement import STRATEGIES, Placer
from kant.preemption.policy import PreemptionPolicy
from kant.queueing import ORDER_KEYS, POLICIES, Backoff, Queue
from kant.queueing.queue import REQUEUE_TIMESTAMPS
from kant.registry import BuildContext, Registry
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.topology.fabric import safe_loader

__all__ = [
    "DEFAULT_PLACEMENT",
    "DEFAULT_QUEUEING",
    "KantConfig",
    "PlacementConfig",
    "QueueingConfig",
    "TenantConfig",
    "load_config",
    "load_config_text",
    "parse_config",
]

DEFAULT_QUEUEING: Final = "best-effort-fifo"
"""The library's queueing policy when a config file names none (that of :class:`Scheduler`)."""
DEFAULT_PLACEMENT: Final = "ebinpack"
"""The placement strategy when a config names none (as :class:`~kant.placement.Placer`)."""

_TOP: Final = ("tenants", "defaultMode", "queueing", "placement", "preemption", "kubernetes")
_TENANT: Final = ("name", "mode", "quotas")
_QUOTA: Final = ("nominalQuota", "borrowingLimit", "lendingLimit")

MAX_QUOTA_GPUS: Final = 10**12
"""The most GPUs a quota names: their milli stay exact as floats (below 2**53), where a YAML
number such as ``1e16`` is read."""
_QUEUEING: Final = ("policy", "options", "order", "requeuing")
_REQUEUING: Final = (
    "backoffBaseSeconds",
    "backoffFactor",
    "backoffMaxSeconds",
    "backoffLimitCount",
    "interruptionLimitCount",
    "timestamp",
)
_QUOTA_FIELDS: Final = {
    "nominal": "nominalQuota",
    "borrowing_limit": "borrowingLimit",
    "lending_limit": "lendingLimit",
}
"""The file's key of each :class:`~kant.admission.Quota` amount (a bad GPU model name is
reported at the quota's own path)."""
_PLACEMENT: Final = ("strategy", "options", "groupProbe", "seed")
_PREEMPTION: Final = {
    "priority": "priority",
    "reclaim": "reclaim",
    "backfill": "backfill",
    "minRuntimeSeconds": "min_runtime",
    "maxPreemptorsPerCycle": "max_preemptors_per_cycle",
    "maxSearchesPerCycle": "max_searches_per_cycle",
    "maxCandidates": "max_candidates",
    "borrowWithinCohort": "borrow_within_cohort",
    "borrowPriorityThreshold": "borrow_priority_threshold",
    "reclaimOthersFirst": "reclaim_others_first",
    "cascadeWindowSeconds": "cascade_window",
}


@attrs.frozen(kw_only=True)
class TenantConfig:
    """One tenant: its ``name``, quota ``mode`` (None: the config's ``defaultMode``) and its
    :class:`~kant.admission.Quota` per GPU model (in GPU milli, as the admitter keeps them)."""

    name: str
    mode: QuotaMode | None
    quotas: tuple[Quota, ...]


@attrs.frozen(kw_only=True)
class QueueingConfig:
    """The queueing policy by registered name with its ``options``, the global order key by
    name, the requeue backoff, and where a job evicted by preemption goes back in the order
    (``requeue_timestamp``: :class:`~kant.queueing.Queue`'s)."""

    policy: str = DEFAULT_QUEUEING
    options: Mapping[str, Any] = attrs.field(factory=dict)
    order: str = "paper"
    backoff: Backoff = attrs.field(factory=Backoff)
    requeue_timestamp: str = "submission"


@attrs.frozen(kw_only=True)
class PlacementConfig:
    """The placement strategy by registered name with its ``options``, the Placer's
    ``group_probe`` and the ``seed`` of strategies with a random tie rule."""

    strategy: str = DEFAULT_PLACEMENT
    options: Mapping[str, Any] = attrs.field(factory=dict)
    group_probe: int = 4
    seed: int = 0


@attrs.frozen(kw_only=True)
class KantConfig:
    """A validated configuration (see the module docstring); :meth:`scheduler` builds a
    :class:`~kant.scheduler.Scheduler` from it.

    ``tenants`` is None when the file has no ``tenants`` section: no static quota check
    (every tenant unlimited). ``kubernetes`` is the raw ``kubernetes:`` mapping, or None."""

    tenants: tuple[TenantConfig, ...] | None = None
    default_mode: QuotaMode = QuotaMode.SHARED
    queueing: QueueingConfig = attrs.field(factory=QueueingConfig)
    placement: PlacementConfig = attrs.field(factory=PlacementConfig)
    preemption: PreemptionPolicy = attrs.field(factory=PreemptionPolicy)
    kubernetes: Mapping[str, Any] | None = None
    source: str = "<config>"

    @property
    def quotas(self) -> tuple[Quota, ...] | None:
        """Every tenant's quotas, in file order; None without a ``tenants`` section."""
        if self.tenants is None:
            return None
        return tuple(q for t in self.tenants for q in t.quotas)

    def admitter(self) -> Admitter:
        """A fresh :class:`~kant.admission.Admitter` with the tenants' quotas and modes."""
        modes = {t.name: t.mode for t in self.tenants or () if t.mode is not None}
        return Admitter(self.quotas, modes=modes, default_mode=self.default_mode)

    def queue(self) -> Queue:
        """A fresh empty :class:`~kant.queueing.Queue` with the order key, backoff and requeue
        timestamp."""
        q = self.queueing
        return Queue(order=q.order, backoff=q.backoff, requeue_timestamp=q.requeue_timestamp)

    def placer(self, context: BuildContext | None = None) -> Placer:
        """A fresh :class:`~kant.placement.Placer`; ``context`` gives the strategies that tune
        themselves to a workload or cluster what they use. The seed is the context's when it
        gives one (not 0, its default), else the configured ``placement.seed``, as a run of
        the simulator on this config is built."""
        if context is None:
            ctx = BuildContext(seed=self.placement.seed)
        elif context.seed == 0:
            ctx = attrs.evolve(context, seed=self.placement.seed)
        else:
            ctx = context
        strategy = STRATEGIES.build(self.placement.strategy, ctx, **self.placement.options)
        return Placer(strategy, group_probe=self.placement.group_probe)

    def scheduler(self, cluster: ClusterState, context: BuildContext | None = None) -> Scheduler:
        """A :class:`~kant.scheduler.Scheduler` for ``cluster`` with every configured part."""
        return Scheduler(
            cluster,
            queue=self.queue(),
            admitter=self.admitter(),
            placer=self.placer(context),
            policy=POLICIES.build(self.queueing.policy, **self.queueing.options),
            preemption=self.preemption,
        )


# --------------------------------------------------------------------------- loading


MAX_CONFIG_CHARS = 16 << 20
"""The longest config file read (16 Mi characters; a real one has a few hundred lines)."""


def load_config(path: str | os.PathLike[str]) -> KantConfig:
    """Read and validate a YAML (or JSON) config file. A missing or unreadable file, one that
    is not UTF-8 text, one longer than :data:`MAX_CONFIG_CHARS`, bad YAML, and every invalid
    key or value raise :class:`~kant.errors.InvalidConfigFileError`."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as f:
            text = f.read(MAX_CONFIG_CHARS + 1)  # (bounded: --config /dev/zero never ends)
    except OSError as e:
        raise InvalidConfigFileError("", where, f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise InvalidConfigFileError(
            "", where, f"not UTF-8 text (byte {e.start}), not a YAML config"
        ) from None
    if len(text) > MAX_CONFIG_CHARS:
        raise InvalidConfigFileError(
            "", where, f"longer than {MAX_CONFIG_CHARS:,} characters: not a config file"
        )
    return load_config_text(text, source=where)


def load_config_text(text: str, *, source: str = "<config>") -> KantConfig:
    """Validate the YAML ``text`` (see :func:`load_config`); ``source`` names it in errors."""
    if not isinstance(text, str | bytes):
        raise InvalidConfigFileError("", source, "the config text must be a str (or bytes)")
    return parse_config(_load_yaml(text, source), source=source)


def parse_config(data: Any, *, source: str = "<config>") -> KantConfig:
    """Validate an already parsed mapping (e.g. from JSON or a Kubernetes ConfigMap)."""
    return _Parser(source).top(data)


def _load_yaml(text: str, source: str) -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml ships with kant[cli]
        raise InvalidConfigFileError(
            "", source, "reading YAML needs PyYAML: pip install 'kant[cli]'"
        ) from None
    try:
        loader = safe_loader(yaml)(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_repeated(node, "", source, set(), set())
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except RecursionError:
        raise InvalidConfigFileError("", source, "nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}" if mark is not None else "?"
        problem = getattr(e, "problem", None) or str(e)
        raise InvalidConfigFileError(at, source, f"not valid YAML: {problem}") from None
    except KantError:
        raise  # (a repeated key: named by _check_repeated)
    except ValueError as e:  # a value PyYAML cannot make: an int of 5,000 digits, a date
        why = "a number of more than 4,300 digits" if "digits" in str(e) else str(e)
        raise InvalidConfigFileError("", source, f"not valid YAML: {why}") from None


def _check_repeated(node: Any, path: str, source: str, done: set[int], open_: set[int]) -> None:
    """Refuse a key given twice in one mapping (PyYAML would keep the last silently), and an
    alias inside the node it names (a document that contains itself). ``done``: the nodes
    checked already (an alias to one is not walked again: a file of aliases of aliases
    costs its size, not their expansion); ``open_``: the nodes being walked."""
    import yaml

    if id(node) in open_:
        raise InvalidConfigFileError(path or "(top level)", source, "contains itself (an alias)")
    if id(node) in done or not isinstance(node, yaml.MappingNode | yaml.SequenceNode):
        return
    open_.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            key = str(k.value)
            sub = _join(path, key)
            if key in seen:
                raise InvalidConfigFileError(
                    sub, source, f"key given twice (line {k.start_mark.line + 1})"
                )
            seen.add(key)
            _check_repeated(v, sub, source, done, open_)
    else:
        for i, v in enumerate(node.value):
            _check_repeated(v, f"{path}[{i}]", source, done, open_)
    open_.discard(id(node))
    done.add(id(node))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_GPU_TEXT: Final = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?m?\Z")
"""A GPU amount as a Kubernetes quantity string: a decimal number, an exponent if any, then
``m`` for milli (``"8"``, ``"0.5"``, ``"500m"``, ``"1e3"``)."""


class _Parser:
    """Walks the parsed document, checking every key, and raising with its path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, value: Any, reason: str) -> InvalidConfigFileError:
        return InvalidConfigFileError(path, self.source, reason, value=value)

    def mapping(self, v: Any, path: str, allowed: Sequence[str]) -> dict[str, Any]:
        if not isinstance(v, Mapping):
            raise self.fail(path or "(top level)", v, "must be a mapping")
        for k in v:
            if not isinstance(k, str) or k not in allowed:
                raise self.fail(
                    _join(path, str(k)), v[k], f"unknown key (known: {', '.join(allowed)})"
                )
        return dict(v)

    def top(self, data: Any) -> KantConfig:
        d = self.mapping({} if data is None else data, "", _TOP)
        tenants = None
        if "tenants" in d:
            tenants = self.tenants(d["tenants"])
        default_mode = self.mode(d.get("defaultMode", "shared"), "defaultMode")
        for i, t in enumerate(tenants or ()):
            self.isolated_limits(t, i, default_mode, d["tenants"][i])
        k8s = d.get("kubernetes")
        if k8s is not None and not isinstance(k8s, Mapping):
            raise self.fail("kubernetes", k8s, "must be a mapping")
        return KantConfig(
            tenants=tenants,
            default_mode=default_mode,
            queueing=self.queueing(d.get("queueing", {})),
            placement=self.placement(d.get("placement", {})),
            preemption=self.preemption(d.get("preemption", {})),
            kubernetes=dict(k8s) if k8s is not None else None,
            source=self.source,
        )

    def tenants(self, v: Any) -> tuple[TenantConfig, ...]:
        if not isinstance(v, list):
            raise self.fail("tenants", v, "must be a list of tenants")
        out: list[TenantConfig] = []
        names: set[str] = set()
        for i, t in enumerate(v):
            path = f"tenants[{i}]"
            d = self.mapping(t, path, _TENANT)
            if "name" not in d:
                raise self.fail(f"{path}.name", None, "is required")
            name = d["name"]
            if not is_name(name):  # ('/' too: a job's tenant cannot hold one)
                raise self.fail(f"{path}.name", name, NAME_REASON)
            if name in names:
                raise self.fail(f"{path}.name", name, "names a tenant already listed")
            names.add(name)
            mode = self.mode(d["mode"], f"{path}.mode") if "mode" in d else None
            quotas = self.quotas(d.get("quotas", {}), f"{path}.quotas", name)
            out.append(TenantConfig(name=name, mode=mode, quotas=quotas))
        return tuple(out)

    def isolated_limits(
        self, t: TenantConfig, i: int, default_mode: QuotaMode, raw: Mapping[str, Any]
    ) -> None:
        """An isolated tenant (its own mode, or ``defaultMode``) neither borrows nor lends: a
        ``borrowingLimit`` or ``lendingLimit`` on it is refused, as Kueue refuses both on a
        ClusterQueue without a cohort (it was accepted and then ignored)."""
        if (t.mode or default_mode) is not QuotaMode.ISOLATED:
            return
        why = ISOLATED_LIMITS + ("" if t.mode is not None else " (defaultMode: isolated)")
        for q in t.quotas:
            for key, value in (
                ("borrowingLimit", q.borrowing_limit),
                ("lendingLimit", q.lending_limit),
            ):
                if value is not None:
                    path = f"tenants[{i}].quotas.{q.gpu_model}.{key}"
                    raise self.fail(path, raw["quotas"][q.gpu_model][key], why)

    def mode(self, v: Any, path: str) -> QuotaMode:
        try:
            return QuotaMode(v)
        except ValueError:
            raise self.fail(path, v, "must be 'shared' or 'isolated'") from None

    def quotas(self, v: Any, path: str, tenant: str) -> tuple[Quota, ...]:
        if not isinstance(v, Mapping):
            raise self.fail(path, v, "must map GPU models to quotas")
        out = []
        for model, q in v.items():
            qpath = f"{path}.{model}"
            if not isinstance(model, str) or not model.strip():
                raise self.fail(qpath, model, "a GPU model must be a non-empty name")
            d = self.mapping(q, qpath, _QUOTA)
            if "nominalQuota" not in d:
                raise self.fail(f"{qpath}.nominalQuota", None, "is required")
            nominal = self.gpus(d["nominalQuota"], f"{qpath}.nominalQuota")
            borrow = self.gpus(d.get("borrowingLimit"), f"{qpath}.borrowingLimit", optional=True)
            lend = self.gpus(d.get("lendingLimit"), f"{qpath}.lendingLimit", optional=True)
            if lend is not None and nominal is not None and lend > nominal:
                raise self.fail(
                    f"{qpath}.lendingLimit", d["lendingLimit"], "cannot exceed nominalQuota"
                )
            assert nominal is not None
            try:
                quota = Quota(
                    tenant=tenant,
                    gpu_model=model,
                    nominal=nominal,
                    borrowing_limit=borrow,
                    lending_limit=lend,
                )
            except ValidationError as e:  # (what Quota refuses beyond the checks above)
                key = _QUOTA_FIELDS.get(e.field)
                raise self.fail(
                    f"{qpath}.{key}" if key else qpath, d.get(key) if key else model, e.reason
                ) from None
            out.append(quota)
        return tuple(out)

    def gpus(self, v: Any, path: str, *, optional: bool = False) -> int | None:
        """GPUs as a number (``8``, ``0.5``) or a Kubernetes quantity string (``"8"``,
        ``"500m"``), returned in GPU milli."""
        if v is None and optional:
            return None
        milli: float | None = None
        if isinstance(v, int | float) and not isinstance(v, bool):
            milli = float(v) * MILLI if abs(v) < 1e300 else math.inf  # (an int beyond floats)
        elif isinstance(v, str) and _GPU_TEXT.match(s := v.strip()):
            # (only the quantity's digits: float() also reads "1_000", and "8 m" as 8 milli)
            milli = float(s[:-1]) if s.endswith("m") else float(s) * MILLI
        if milli is None or not math.isfinite(milli) or not 0 <= milli <= MAX_QUOTA_GPUS * MILLI:
            raise self.fail(
                path,
                v,
                f"must be a number of GPUs in [0, {MAX_QUOTA_GPUS:.0e}] (e.g. 8, 0.5 or '500m')",
            )
        if abs(milli - round(milli)) > 1e-6:
            raise self.fail(path, v, "must be a whole number of GPU milli (1/1000 GPU)")
        return round(milli)

    def queueing(self, v: Any) -> QueueingConfig:
        d = self.mapping(v, "queueing", _QUEUEING)
        policy = self.one_of("queueing.policy", d.get("policy", DEFAULT_QUEUEING), POLICIES)
        options = self.options(d.get("options", {}), "queueing.options")
        try:
            POLICIES.build(policy, **options)
        except (KantError, TypeError) as e:
            raise self.fail("queueing.options", options, _why(e, policy)) from None
        order = self.one_of("queueing.order", d.get("order", "paper"), ORDER_KEYS)
        requeuing = d.get("requeuing", {})
        backoff = self.backoff(requeuing)
        timestamp = requeuing.get("timestamp", "submission")
        if not isinstance(timestamp, str) or timestamp.lower() not in REQUEUE_TIMESTAMPS:
            raise self.fail(
                "queueing.requeuing.timestamp", timestamp, "must be submission or eviction"
            )
        return QueueingConfig(
            policy=policy.lower(),
            options=options,
            order=order.lower(),
            backoff=backoff,
            requeue_timestamp=timestamp.lower(),
        )

    def one_of(self, path: str, name: Any, registry: Registry[Any]) -> str:
        """``name`` if it names an entry of ``registry`` (as the registry matches names)."""
        if not isinstance(name, str) or name not in registry:
            raise self.fail(path, name, f"must be one of {', '.join(registry.names())}")
        return name

    def backoff(self, v: Any) -> Backoff:
        d = self.mapping(v, "queueing.requeuing", _REQUEUING)
        names = {
            "backoffBaseSeconds": "base",
            "backoffFactor": "factor",
            "backoffMaxSeconds": "cap",
            "backoffLimitCount": "max_retries",
            "interruptionLimitCount": "max_interruptions",
        }
        d.pop("timestamp", None)  # (the queue's, read by queueing)
        kw = {names[k]: x for k, x in d.items()}
        for k, x in d.items():
            if x is None and k == "interruptionLimitCount":
                continue  # no limit, the default
            if isinstance(x, bool) or not isinstance(x, int | float):
                raise self.fail(f"queueing.requeuing.{k}", x, "must be a number")
        try:
            return Backoff(**kw)
        except KantError as e:
            bad = next((k for k, n in names.items() if n == getattr(e, "field", "")), "")
            raise self.fail(
                f"queueing.requeuing.{bad}" if bad else "queueing.requeuing",
                getattr(e, "value", v),
                getattr(e, "reason", str(e)),
            ) from None

    def placement(self, v: Any) -> PlacementConfig:
        d = self.mapping(v, "placement", _PLACEMENT)
        strategy = self.one_of(
            "placement.strategy", d.get("strategy", DEFAULT_PLACEMENT), STRATEGIES
        )
        options = self.options(d.get("options", {}), "placement.options")
        probe = d.get("groupProbe", 4)
        if isinstance(probe, bool) or not isinstance(probe, int) or probe < 1:
            raise self.fail("placement.groupProbe", probe, "must be an int >= 1")
        seed = d.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise self.fail("placement.seed", seed, "must be an int >= 0")
        # (a strategy that tunes itself to the workload, fgd, gets it where the scheduler is
        # built, kant simulate's jobs: its options are checked against a stand-in)
        stand_in = _STAND_IN if "workload" in STRATEGIES.uses(strategy) else None
        try:
            STRATEGIES.build(strategy, BuildContext(seed=seed, workload=stand_in), **options)
        except (KantError, TypeError) as e:
            raise self.fail("placement.options", options, _why(e, strategy)) from None
        return PlacementConfig(
            strategy=strategy.lower(), options=options, group_probe=probe, seed=seed
        )

    def options(self, v: Any, path: str) -> dict[str, Any]:
        if not isinstance(v, Mapping):
            raise self.fail(path, v, "must be a mapping of option names to values")
        for k in v:
            if not isinstance(k, str) or not k.isidentifier():
                raise self.fail(f"{path}.{k}", v[k], "must be an option name")
        return dict(v)

    def preemption(self, v: Any) -> PreemptionPolicy:
        d = self.mapping(v, "preemption", tuple(_PREEMPTION))
        for k in ("priority", "reclaim", "backfill", "borrowWithinCohort", "reclaimOthersFirst"):
            if k in d and not isinstance(d[k], bool):
                raise self.fail(f"preemption.{k}", d[k], "must be true or false")
        for k in ("maxPreemptorsPerCycle", "maxSearchesPerCycle", "maxCandidates"):
            x = d.get(k)
            if x is not None and (isinstance(x, bool) or not isinstance(x, int) or x < 1):
                raise self.fail(f"preemption.{k}", x, "must be an int >= 1, or null for no cap")
        x = d.get("borrowPriorityThreshold")
        if x is not None and (isinstance(x, bool) or not isinstance(x, int)):
            raise self.fail(
                "preemption.borrowPriorityThreshold", x, "must be an int, or null for any lower"
            )
        x = d.get("minRuntimeSeconds", 0)
        if isinstance(x, bool) or not isinstance(x, int | float) or not (0 <= x < math.inf):
            raise self.fail("preemption.minRuntimeSeconds", x, "must be a finite number >= 0")
        try:
            return PreemptionPolicy(**{_PREEMPTION[k]: x for k, x in d.items()})
        except ValidationError as e:  # (what PreemptionPolicy refuses beyond the checks above)
            key = next((k for k, f in _PREEMPTION.items() if f == e.field), "")
            raise self.fail(
                f"preemption.{key}" if key else "preemption", d.get(key, e.value), e.reason
            ) from None


_STAND_IN: Final = (Job(id="stand-in", roles=(Role(resources=Resources(gpus=1)),)),)
"""A workload of one 1-GPU job: what a strategy that takes the workload is built with to
check its options (:class:`~kant.registry.BuildContext` ``workload``)."""


def _why(e: BaseException, name: str) -> str:
    if isinstance(e, TypeError):
        return f"not options {name} takes ({e})"
    return str(e)
