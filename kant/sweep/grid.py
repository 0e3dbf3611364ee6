"""The sweep grid: one format for ``simulate``, ``compare`` and ``packing`` runs.

A grid names a command and its options, each a value or a list of values; the runs are every
combination (the Cartesian product), in a fixed order::

    command: compare            # simulate | compare | packing
    store: paper.jsonl          # optional: the result store, relative to the grid file
    options:
      scenario: paper-training
      jobs: 2000
      load: [0.8, 0.95]
      seeds: 0-9                # seeds as kant compare takes them, or a list
      sets: [strict-fifo+ebinpack, backfill+ebinpack]

Option names are those of the command's long options (``trace-file`` or ``trace_file``);
options that only shape the output (``--out``, ``--workers``, ``--json``...) belong to
``kant sweep`` itself, not to a run. ``seeds`` (compare, packing) is read like the command's
``--seeds`` (``0-9``, ``1,4``) and becomes one run per seed (a packing grid with neither
``seed`` nor ``seeds``: ``kant packing``'s own, :data:`kant.sim.packing.SEEDS`); ``sets``
(compare) becomes one
run per policy set (default: the scenario's own, as ``kant compare`` runs them:
:func:`kant.sim.scenarios.compare_sets_for`). A compare run and a
simulate run with the same options are the same run (kind ``sim``): one scenario under one
policy set.

``kant sweep`` also gives every run's options to its command's own parser and checks before
any run starts (:func:`kant.cli.sweep.check_grid`): a grid takes no value the command refuses.

The order puts runs that share an input next to each other (a scenario: every option but the
policy's; a packing trace: ``pods`` and ``nodes``), so a back-end builds or ships it once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from kant.errors import InvalidGridError, KantError, ValidationError
from kant.model import is_int, is_number
from kant.sim.packing import MAX_INFLATE
from kant.sim.packing import SEEDS as PACKING_SEEDS
from kant.sim.scenarios import (
    LOAD_RANGE,
    MAX_JOBS,
    MAX_SEEDS,
    MAX_TICK,
    PolicySet,
    canonical_preemption,
    compare_sets_for,
    parse_seeds,
    parse_sets,
)
from kant.sim.simulator import MAX_RESTART_LIMIT, UNBOUNDED_RESTART, restarts_unbounded
from kant.topology.fabric import unique_key_loader, unique_pairs

__all__ = [
    "COMMANDS",
    "POLICY_OPTIONS",
    "Grid",
    "RunSpec",
    "load_grid",
]

SCENARIO_OPTIONS: Final = (
    "scenario", "trace", "trace_file", "cluster", "jobs", "load", "tick", "grace",
    "on_interrupt", "mtbf", "mttr", "horizon", "max_interruptions", "seed",
)  # fmt: skip
"""What makes a simulation's scenario (``kant simulate`` / ``kant compare`` options)."""

POLICY_OPTIONS: Final = ("queueing", "placement", "preemption", "threshold")
_NAMES: Final = ("queueing", "placement", "preemption", "policy")
"""The options that name a policy: lower-cased when runs are made, so ``EBinpack`` and
``ebinpack`` are one run with one key."""
"""What makes a simulation's policy set."""

PACKING_OPTIONS: Final = ("pods", "nodes", "inflate", "policy", "seed")

COMMANDS: Final[Mapping[str, tuple[str, ...]]] = {
    "simulate": (*SCENARIO_OPTIONS, *POLICY_OPTIONS),
    "compare": (*SCENARIO_OPTIONS, "seeds", "sets"),
    "packing": (*PACKING_OPTIONS, "seeds"),
}
"""The options a grid of each command may name (``seeds`` and ``sets`` expand into ``seed``
and the policy options)."""

_KIND: Final = {"simulate": "sim", "compare": "sim", "packing": "packing"}
_PATHS: Final = ("trace_file", "cluster", "pods", "nodes")
_SCALAR: Final = (str, int, float, bool)


@attrs.frozen
class RunSpec:
    """One run: its ``kind`` (``sim`` or ``packing``) and its parameters (option -> value,
    options left at their default absent). ``key`` names it in a store: a hash of both."""

    kind: str
    params: Mapping[str, Any]
    base: str | None = attrs.field(default=None, eq=False)
    """The grid file's folder (absolute), which relative file paths of ``params`` are read
    from (None: the current folder)."""

    @property
    def inputs(self) -> Mapping[str, Any]:
        """``params`` with their relative file paths (traces, clusters, pods, nodes) taken
        from :attr:`base`: what the run reads. The key and the store keep the paths as the
        grid wrote them, so a run's key is the same from whichever folder the sweep starts,
        and on any machine the grid's folder is copied to."""
        if self.base is None:
            return self.params
        out = dict(self.params)
        for name in _PATHS:
            v = out.get(name)
            if isinstance(v, str) and not Path(v).is_absolute():
                out[name] = os.path.join(self.base, v)
        return out

    @property
    def files(self) -> dict[str, str]:
        """The input files the run reads, parameter -> path (from :attr:`base`, as in
        :attr:`inputs`): its ``trace_file``, ``cluster``, ``pods`` and ``nodes``. A store
        records their content's digests (:mod:`kant.sweep.inputs`), which the key, naming
        the paths as the grid writes them, does not tell apart."""
        inputs = self.inputs
        return {n: inputs[n] for n in _PATHS if isinstance(self.params.get(n), str)}

    @property
    def key(self) -> str:
        """16 hex digits of the SHA-256 of the kind and parameters (canonical JSON): file
        parameters as the grid writes them, not their content (see :attr:`files`)."""
        text = json.dumps({"kind": self.kind, "params": dict(self.params)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def group(self) -> tuple[tuple[str, Any], ...]:
        """What the run shares with others: its scenario's options (``sim``) or its trace
        and node list (``packing``)."""
        keep = ("pods", "nodes") if self.kind == "packing" else SCENARIO_OPTIONS
        return tuple(sorted((k, v) for k, v in self.params.items() if k in keep))


@attrs.frozen
class Grid:
    """A command, its options (each a value or a list of values) and, optionally, the path of
    its store. :meth:`runs` expands it."""

    command: str
    options: Mapping[str, Any] = attrs.field(factory=dict)
    store: str | None = None
    base: str | None = None
    """The folder relative file paths are read from (:attr:`RunSpec.base`)."""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.command, str) or self.command not in COMMANDS:
            raise InvalidGridError("command", self.command, f"must be one of {list(COMMANDS)}")
        if not isinstance(self.options, Mapping):  # (options: [] ran the default scenario)
            raise InvalidGridError("options", self.options, "must be a mapping of option to value")
        if self.store is not None and not isinstance(self.store, str):
            raise InvalidGridError("store", self.store, "must be a file name")
        allowed = COMMANDS[self.command]
        named: dict[str, str] = {}
        for name, value in self.options.items():
            if not isinstance(name, str):
                raise InvalidGridError("options", name, "option names must be text (quote them)")
            if _norm(name) in named:
                raise InvalidGridError(name, value, f"the same option as {named[_norm(name)]!r}")
            named[_norm(name)] = name
            if _norm(name) not in allowed:
                raise InvalidGridError(
                    name, value, f"not an option of a {self.command} run; known: {list(allowed)}"
                )
            for v in _values(value):
                if v is not None and not isinstance(v, _SCALAR):
                    raise InvalidGridError(name, v, "must be a value or a list of values")
                if isinstance(v, float) and not math.isfinite(v):
                    # a run's parameters are stored as strict JSON, which has no NaN or inf
                    raise InvalidGridError(name, v, "must be a finite number")
            if isinstance(value, list) and not value:
                raise InvalidGridError(name, value, "an empty list leaves no run")
        if "seed" in self.options and "seeds" in self.options:
            raise InvalidGridError("seeds", self.options["seeds"], "give seed or seeds, not both")
        opts = {_norm(k): v for k, v in self.options.items()}
        for name in _PATHS:  # (a number was handed to the run as is: a TypeError there)
            for v in _values(opts.get(name)):
                if v is not None and not isinstance(v, str):
                    raise InvalidGridError(name, v, "must be a file name (text)")
        for name in _NUMBERS:  # a run would refuse any other value, or take a bool as 0 or 1
            for v in _values(opts.get(name)):
                if v is not None and not is_number(v):
                    raise InvalidGridError(name, v, "must be a number")
        for name, (lo, hi, lo_in) in _BOUNDS.items():  # as the command line bounds them
            for v in _values(opts.get(name)):
                if is_number(v) and not ((lo <= v if lo_in else lo < v) and v <= hi):
                    span = f"{'[' if lo_in else '('}{lo:g}, {hi:g}]"
                    raise InvalidGridError(name, v, f"must be in {span}")
        for name in ("seed", "max_interruptions"):
            for v in _values(opts.get(name)):
                if v is not None and not _seed(v):
                    raise InvalidGridError(name, v, "must be an int >= 0")
        # as the simulator: work restarted after random failures needs a bound
        bounds = ("on_interrupt", "mtbf", "horizon", "max_interruptions")
        if any(
            restarts_unbounded(*run)
            for run in itertools.product(*(_values(opts.get(k)) for k in bounds))
        ):
            raise InvalidGridError(
                "on_interrupt",
                "restart",
                "with mtbf needs horizon, or max_interruptions of at most "
                f"{MAX_RESTART_LIMIT:,}, in every run: {UNBOUNDED_RESTART}",
            )
        # as kant simulate: a repair time goes with failures
        repairs = [t for t in _values(opts.get("mttr")) if t is not None]
        if repairs and not [t for t in _values(opts.get("mtbf")) if t is not None]:
            raise InvalidGridError("mttr", repairs[0], "goes with mtbf (without it no node fails)")
        # as kant simulate: the threshold is the Backfill policy's (the scenarios' default)
        thresholds = [t for t in _values(opts.get("threshold")) if t is not None]
        # (None leaves queueing out: the scenario's own, Backfill; names in any case, as
        # kant simulate reads them)
        others = [
            q
            for q in _values(opts.get("queueing"))
            if q is not None and str(q).lower() != "backfill"
        ]
        if thresholds and others:
            raise InvalidGridError(
                "threshold", thresholds[0], f"is Backfill's; queueing {others[0]} has none"
            )

    def runs(self) -> list[RunSpec]:
        """Every run of the grid, in order (see the module docstring); each once."""
        opts = {_norm(k): v for k, v in self.options.items()}
        dims: list[tuple[str, list[Any]]] = []
        policy: list[dict[str, Any]] = [{}]
        for name in COMMANDS[self.command]:
            if name not in opts:
                continue
            values = opts[name] if isinstance(opts[name], list) else [opts[name]]
            if name == "seeds":
                dims.append(("seed", _seeds(values)))
            elif name == "sets":
                policy = _sets(values)
            elif name == "preemption":  # (kinds in any order too, as PolicySet reads them)
                dims.append((name, [canonical_preemption(v) for v in values]))
            elif name in _NAMES:  # (names in any case, as the commands read them: one key)
                dims.append((name, [v.lower() if isinstance(v, str) else v for v in values]))
            else:
                dims.append((name, values))
        if self.command == "packing" and "seed" not in opts and "seeds" not in opts:
            dims.append(("seed", list(PACKING_SEEDS)))  # (kant packing's own)
        own_sets = self.command == "compare" and "sets" not in opts  # (per scenario)
        # scenario dimensions outermost, policy dimensions innermost: runs sharing a
        # scenario are adjacent
        dims.sort(key=lambda d: d[0] in POLICY_OPTIONS)
        out: dict[str, RunSpec] = {}
        names = [n for n, _v in dims]
        for combo in itertools.product(*(v for _n, v in dims)):
            scenario = dict(zip(names, combo, strict=True))
            if own_sets:
                which = scenario.get("scenario")
                sets = compare_sets_for(which if isinstance(which, str) else None)
                policy = [_policy_params(p) for p in sets]
            for pol in policy:
                params = {**scenario, **pol}
                params = {k: v for k, v in params.items() if v is not None}
                spec = RunSpec(_KIND[self.command], dict(sorted(params.items())), self.base)
                out.setdefault(spec.key, spec)
        return list(out.values())

    def resolved(self, base: Path) -> Grid:
        """The grid whose relative file paths (traces, clusters, pods, nodes, the store) are
        read from the folder ``base``, made absolute: the runs' inputs
        (:attr:`RunSpec.inputs`), and the store."""
        where = os.path.abspath(base)
        store = self.store
        if store is not None and not Path(store).is_absolute():
            store = os.path.join(where, store)
        return attrs.evolve(self, store=store, base=where)


def _norm(name: str) -> str:
    return name.replace("-", "_")


_BOUNDS: Final = {
    "load": (*LOAD_RANGE, True),
    "tick": (0.0, MAX_TICK, True),
    "jobs": (1, MAX_JOBS, True),
    "inflate": (0.0, MAX_INFLATE, False),
}
"""(lowest, highest, lowest allowed itself) of the numeric options a grid bounds as the
command line does (a run past them would not end or would not fit in memory); a value that is
not a number is refused before (:data:`_NUMBERS`)."""


_NUMBERS: Final = (
    "load",
    "tick",
    "jobs",
    "threshold",
    "inflate",
    "grace",
    "mtbf",
    "mttr",
    "horizon",
)
"""The options whose values are numbers (None: left out)."""


def _values(value: Any) -> list[Any]:
    """An option's values: the list it is, or the one value."""
    return value if isinstance(value, list) else [value]


def _seed(v: Any) -> bool:
    return is_int(v) and v >= 0


def _seeds(values: Sequence[Any]) -> list[int]:
    out: list[int] = []
    for v in values:
        if not (_seed(v) or isinstance(v, str)):
            raise InvalidGridError("seeds", v, "seeds are ints >= 0 or text like 0-9")
        try:
            out.extend(parse_seeds(v) if isinstance(v, str) else [v])
        except ValidationError as e:
            raise InvalidGridError("seeds", v, e.reason) from None
        if len(out) > MAX_SEEDS:
            raise InvalidGridError("seeds", values, f"at most {MAX_SEEDS:,} seeds")
    if len(set(out)) != len(out):
        raise InvalidGridError("seeds", values, "name each seed once")
    return out


def _policy_params(p: PolicySet) -> dict[str, Any]:
    return {"queueing": p.queueing, "placement": p.placement, "preemption": p.preemption}


def _sets(values: Sequence[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for v in values:
        if not isinstance(v, str):
            raise InvalidGridError("sets", v, "a policy set is text like backfill+ebinpack")
        try:
            out.extend(_policy_params(p) for p in parse_sets(v))
        except KantError as e:
            raise InvalidGridError("sets", v, getattr(e, "reason", str(e))) from None
    if len({json.dumps(p, sort_keys=True) for p in out}) != len(out):
        raise InvalidGridError("sets", values, "the policy sets must differ")
    return out


def _problem(e: Exception) -> str:
    """A YAML error as its line and problem (``line 2: found the key 'jobs' twice``), without
    the excerpts of the text around it; any other error as its message."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or not problem:
        return str(e)
    return f"line {mark.line + 1}: {problem}"


def load_grid(path: str | Path) -> Grid:
    """Read a grid file (YAML or JSON, see the module docstring); relative paths in it are
    taken from its folder, and the store defaults to the grid file with ``.jsonl``."""
    if path == "":  # (Path("") is ".", the folder)
        raise InvalidGridError("file", "", "an empty path names no grid file")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")  # (a byte order mark starting it is skipped)
    except OSError as e:
        raise InvalidGridError("file", str(p), f"cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InvalidGridError("file", str(p), "is not a text file (YAML or JSON)") from None
    try:
        # a key given twice is refused, as in cluster files (the last would silently win)
        if p.suffix == ".json":
            doc = json.loads(text, object_pairs_hook=unique_pairs)
        else:
            import yaml

            doc = yaml.load(text, Loader=unique_key_loader(yaml))
    except Exception as e:  # yaml / json syntax errors: one message naming the file
        raise InvalidGridError(
            "file", str(p), f"is not valid YAML or JSON: {_problem(e)}"
        ) from None
    if not isinstance(doc, dict):
        raise InvalidGridError("file", str(p), "must hold a mapping with command and options")
    extra = sorted((k for k in doc if k not in ("command", "options", "store")), key=str)
    if extra:
        raise InvalidGridError(
            str(extra[0]), doc[extra[0]], "unknown key (command, options, store)"
        )
    command: Any = doc.get("command")  # (Grid refuses one that is not a command's name)
    options = doc.get("options")  # (left out or empty: no options)
    grid = Grid(command, {} if options is None else options, doc.get("store"))
    grid = grid.resolved(p.parent)
    if grid.store is None:
        grid = attrs.evolve(grid, store=str(p.with_suffix(".jsonl")))
    return grid
