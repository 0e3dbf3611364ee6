"""Named policies: one :class:`Registry` per extension point, and the context they are built in.

Every pluggable family (queueing policies, placement strategies, order keys, node filters,
victim rules) is a ``Registry`` of factories under unique names, so a config file, the
simulator or the command line picks a policy by name and nobody special-cases a family:

>>> from kant.registry import BuildContext, Registry
>>> r: Registry[str] = Registry("greeting")
>>> r.register("hello", lambda *, seed=0: f"hello #{seed}", uses=("seed",))
>>> r.build("hello", BuildContext(seed=7))
'hello #7'
>>> r.names()
['hello']

A factory declares which fields of the :class:`BuildContext` it takes (``uses``); the registry
passes exactly those as keyword arguments, plus the caller's options. A strategy that needs
nothing is registered as its class; one that needs the run's seed or the workload it will
face (the FGD baselines) says so, and every caller builds it the same way.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Generic, TypeVar

import attrs

from kant.errors import DuplicateError, InvalidConfigError, UnknownPolicyError

T = TypeVar("T")

CONTEXT_FIELDS = ("seed", "workload", "cluster")
"""What a :class:`BuildContext` carries; the names a factory may list in ``uses``."""


@attrs.frozen(kw_only=True)
class BuildContext:
    """What a policy may be built from, besides its own options.

    ``seed``: the run's seed (random tie rules); ``workload``: the jobs the run will see, as a
    sequence of :class:`kant.model.Job`, or a ready target such as
    :class:`kant.placement.FragmentationTarget` (policies that tune themselves to a target
    workload derive what they need from it); ``cluster``: the nodes, a sequence of
    :class:`kant.model.NodeSpec`. Fields nobody set are None (``seed`` 0)."""

    seed: int = 0
    workload: Any = None
    cluster: Any = None


def _check_options(
    kind: str, name: str, factory: Callable[..., Any], options: Mapping[str, Any]
) -> None:
    """Refuse (InvalidConfigError naming it) an option ``factory`` takes no keyword for,
    unless it takes any (``**kwargs``) or its signature cannot be read."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # (a builtin without a readable signature)
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    takes = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in options:
        if key not in takes:
            why = f"is no option of {kind} policy {name!r} (it takes: {', '.join(takes) or 'none'})"
            raise InvalidConfigError("option", key, why)


def _uses(uses: object) -> tuple[str, ...]:
    """``uses`` as a tuple of :data:`CONTEXT_FIELDS` names, or InvalidConfigError naming it
    (``uses``, as given) unless it is an iterable of them (a str is one name, not several)."""
    why = f"must be an iterable of context field names ({', '.join(CONTEXT_FIELDS)})"
    if isinstance(uses, str | bytes) or not isinstance(uses, Iterable):
        raise InvalidConfigError("uses", uses, why)
    wanted = tuple(uses)
    if not all(isinstance(f, str) and f in CONTEXT_FIELDS for f in wanted):
        raise InvalidConfigError("uses", uses, why)
    return wanted


@attrs.frozen
class _Entry(Generic[T]):
    factory: Callable[..., T]
    uses: tuple[str, ...]


NAME_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"
"""A registered name: up to 100 ASCII letters, digits, ``-``, ``_`` and ``.``, starting with a
letter or digit (no ``+`` or ``,``, which join names in policy set labels and lists)."""
_NAME = re.compile(NAME_PATTERN)
NAME_REASON: Final = (
    "must be a str of 1 to 100 ASCII letters, digits, '-', '_' or '.', starting with a letter "
    "or digit (a policy set label joins names with '+', a list of them with ',')"
)


class Registry(Generic[T]):
    """Factories of one extension point (``kind``, e.g. ``"placement"``) by unique name.

    Names are case-insensitive (stored lower-case). Registering a taken name raises
    :class:`~kant.errors.DuplicateError`; building an unknown one raises
    :class:`~kant.errors.UnknownPolicyError` listing the known names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, _Entry[T]] = {}

    def register(self, name: str, factory: Callable[..., T], *, uses: Iterable[str] = ()) -> None:
        """Add ``factory`` under ``name``; ``uses`` names the :class:`BuildContext` fields it
        takes as keyword arguments. A ``name`` that is not a registry name
        (:data:`NAME_PATTERN`: what a policy set's label, ``queueing+placement``, a list of
        them, a config file and the command line can all name) or a ``factory`` that is not
        callable, or ``uses`` that is not an iterable of context field names (a bare str
        included), raises :class:`~kant.errors.InvalidConfigError` naming it; the registry is
        then unchanged."""
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:
            raise InvalidConfigError("name", name, NAME_REASON)
        if not callable(factory):
            raise InvalidConfigError(
                "factory", factory, f"must be callable: it builds the {self.kind} policy {name!r}"
            )
        key = name.lower()
        if key in self._entries:
            raise DuplicateError(f"{self.kind} policy {name!r} is already registered")
        wanted = _uses(uses)
        self._entries[key] = _Entry(factory, wanted)

    def build(self, name: str, context: BuildContext | None = None, **options: Any) -> T:
        """A new instance of ``name``: its factory called with the context fields it uses
        (options given explicitly win) and ``options``. UnknownPolicyError for a ``name``
        not registered (or no string), InvalidConfigError naming an option its factory does
        not take (a misspelt one was a bare TypeError)."""
        try:
            entry = self._entries[name.lower()]
        except (KeyError, AttributeError):
            raise UnknownPolicyError(self.kind, name, self.names()) from None
        if options:
            _check_options(self.kind, name, entry.factory, options)
        ctx = context if context is not None else BuildContext()
        kwargs = {f: getattr(ctx, f) for f in entry.uses if f not in options}
        return entry.factory(**kwargs, **options)

    def uses(self, name: str) -> tuple[str, ...]:
        """The context fields the factory of ``name`` takes (UnknownPolicyError for a
        ``name`` not registered, or no string)."""
        try:
            return self._entries[name.lower()].uses
        except (KeyError, AttributeError):
            raise UnknownPolicyError(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._entries

    def as_mapping(self) -> Mapping[str, Callable[..., T]]:
        """A read-only view: name -> factory."""
        return {k: e.factory for k, e in sorted(self._entries.items())}
