"""FabricNames: the fabric names of a set of nodes, kept consistent as nodes come and go.

A fabric must not contradict itself: a leaf under two spines, a spine under two superspines,
one name for two kinds of things (a leaf and a spine, a fabric name and a node). A
:class:`kant.topology.ClusterDescription` checks its nodes with it, and a
:class:`~kant.state.ClusterState` keeps one for the nodes present as it grows node by node, in
O(1) per node: a node in a leaf already known under the same spine and superspine costs two
dictionary look-ups (its leaf, its HBD), and only a node naming a new leaf is checked level by
level.

Each name is counted by what is under it: a leaf by its nodes, a spine by its leaves, a
superspine by its spines, an HBD by its nodes. When the count falls to zero the name is
dropped, so a leaf emptied of its nodes may come back under another spine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from kant.errors import InvalidNodeError
from kant.model import NodeSpec

_CHAIN = ("leaf", "spine", "superspine")
"""The levels with parents, narrowest first (a node with a spine has a leaf, and so on)."""

_OWN = "fabric and node names must differ"


@attrs.define(eq=False)
class _Name:
    """What a fabric name names: its ``level``, the names above it (``up``: a leaf's spine and
    superspine, a spine's superspine; empty for a superspine or an HBD, which may span
    leaves) and how many things under it are present (``count``)."""

    level: str
    up: tuple[str | None, ...]
    count: int = 0


def _chain(spec: NodeSpec) -> tuple[tuple[str, str | None, tuple[str | None, ...]], ...]:
    """``(level, name, names above it)`` of node ``spec``'s leaf, spine and superspine."""
    return (
        ("leaf", spec.leaf, (spec.spine, spec.superspine)),
        ("spine", spec.spine, (spec.superspine,)),
        ("superspine", spec.superspine, ()),
    )


class FabricNames:
    """The leaf, spine, superspine and HBD names of the nodes present, what each names and
    what it is under (see the module docstring)."""

    def __init__(self) -> None:
        self._names: dict[str, _Name] = {}

    def add(self, spec: NodeSpec, nodes: Mapping[str, object]) -> None:
        """Count node ``spec`` in, or raise :class:`~kant.errors.InvalidNodeError` (naming the
        field) and change nothing unless it agrees with the names known and the node names
        ``nodes``: its leaf is known under its spine and superspine, or is new; its spine
        under its superspine, or is new; no name of it names another kind of thing, a node
        included (its own name). O(1)."""
        names = self._names
        taken = names.get(spec.name)
        if taken is not None:
            raise InvalidNodeError("name", spec.name, f"already names a {taken.level}; {_OWN}")
        leaf = None
        if spec.leaf is not None:
            leaf = names.get(spec.leaf)
            if leaf is None or leaf.level != "leaf" or leaf.up != (spec.spine, spec.superspine):
                self._add_new(spec, nodes)  # (a new leaf, or a wrong one)
                return
        # no leaf, or a known one whose spine and superspine are known to agree (and count it)
        hbd = None
        if spec.hbd is not None:
            hbd = names.get(spec.hbd)
            if hbd is None:  # new: it cannot be this node's leaf, spine or superspine (known)
                if spec.hbd in nodes or spec.hbd == spec.name:
                    raise InvalidNodeError("hbd", spec.hbd, f"already names a node; {_OWN}")
                hbd = names[spec.hbd] = _Name("hbd", ())
            elif hbd.level != "hbd":
                raise InvalidNodeError("hbd", spec.hbd, f"already names a {hbd.level}; {_OWN}")
            hbd.count += 1
        if leaf is not None:
            leaf.count += 1

    def _add_new(self, spec: NodeSpec, nodes: Mapping[str, object]) -> None:
        """:meth:`add` of a node naming something new (or something wrong)."""
        self._check_each(spec, nodes)
        self._enter(spec)

    def _check_each(self, spec: NodeSpec, nodes: Mapping[str, object]) -> None:
        """:meth:`add`'s check, level by level."""
        mine = {"leaf": spec.leaf, "spine": spec.spine, "superspine": spec.superspine,
                "hbd": spec.hbd}  # fmt: skip
        for level, value in mine.items():
            if value is None:
                continue
            known = self._names.get(value)
            if known is not None:
                kind = known.level
            elif value in nodes or value == spec.name:
                kind = "node"
            else:  # a new name: not one of this node's others
                kind = next(lv for lv, v in mine.items() if v == value)
            if kind != level:
                raise InvalidNodeError(level, value, f"already names a {kind}; {_OWN}")
            if known is not None and known.up and known.up[0] != self._parent(spec, level):
                above = _CHAIN[_CHAIN.index(level) + 1]
                raise InvalidNodeError(
                    above,
                    self._parent(spec, level),
                    f"{level} {value!r} is already under {above} {known.up[0]!r}",
                )

    @staticmethod
    def _parent(spec: NodeSpec, level: str) -> str | None:
        """The name node ``spec`` gives the parent of its ``level`` (None above a spine)."""
        return spec.spine if level == "leaf" else spec.superspine if level == "spine" else None

    def _enter(self, spec: NodeSpec) -> None:
        """Count node ``spec`` in (checked). O(1)."""
        names = self._names
        for level, value, up in _chain(spec):
            if value is None:
                break
            known = names.get(value)
            if known is not None:
                known.count += 1
                break  # (what is above it counts it already)
            names[value] = _Name(level, up, 1)
        if spec.hbd is not None:
            known = names.get(spec.hbd)
            if known is None:
                known = names[spec.hbd] = _Name("hbd", ())
            known.count += 1

    def remove(self, spec: NodeSpec) -> None:
        """Count node ``spec`` out (it was counted in): a name nothing is under any more is
        dropped. O(1)."""
        names = self._names
        for _level, value, _up in _chain(spec):
            if value is None:
                break
            known = names[value]
            known.count -= 1
            if known.count:
                break
            del names[value]
        if spec.hbd is not None:
            known = names[spec.hbd]
            known.count -= 1
            if not known.count:
                del names[spec.hbd]

    def differs_from(self, specs: Iterable[NodeSpec]) -> bool:
        """Whether these names are not exactly those of the nodes ``specs``, counted afresh
        (a self-check). O(nodes)."""
        fresh = FabricNames()
        for spec in specs:
            fresh._enter(spec)
        mine = {k: (n.level, n.up, n.count) for k, n in self._names.items()}
        return mine != {k: (n.level, n.up, n.count) for k, n in fresh._names.items()}
