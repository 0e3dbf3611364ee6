"""Node filters: which candidate nodes a pod may use at all (``Placer(filters=[...])``).

A filter is any callable ``filter(ctx, slots) -> bool mask`` (:class:`kant.contracts.NodeFilter`).
:class:`NodeFilters` is how the :class:`~kant.placement.Placer` applies a sequence of them: in
order, each asked only about the nodes the previous ones kept, and it remembers which filter
left a pod no node, so the pod's ``NO_FIT`` reason can name it.

>>> import numpy as np
>>> def not_n0(ctx, slots):
...     return slots != 0
>>> NodeFilters([not_n0]).keep(None, np.array([0, 1, 2]))
array([1, 2])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.contracts import NodeFilter, PodView
from kant.errors import InvalidConfigError, ValidationError
from kant.placement.context import IntArray

BoolArray = npt.NDArray[np.bool_]


def filter_name(f: Any) -> str:
    """How messages name a filter: its ``name``, else its ``__name__``, else its repr."""
    name = getattr(f, "name", None) or getattr(f, "__name__", None)
    return str(name) if name else repr(f)


class MaxPerNode:
    """The built-in node filter of a role's ``max_per_node``: drops the nodes that already
    hold that many pods of the role (running, or placed earlier in this placement). Keeps
    every node for a role without the cap. The Placer adds it after the user's filters for
    the roles that have a cap only, so other roles pay nothing. O(len(slots) + nodes the
    role is on)."""

    name = "max_per_node"

    def __call__(self, ctx: PodView, slots: IntArray) -> BoolArray:
        cap = ctx.role.max_per_node
        if cap is None:
            return np.ones(slots.shape[0], dtype=np.bool_)
        return ctx.role_pods_on(slots) < cap


class NodeFilters:
    """The node filters of one Placer, combined with AND, in order.

    :attr:`blocked` is the name of the filter that last left a pod no node although some
    fitted (set by :meth:`mask`, :meth:`keep` and :meth:`restrict_room`; the Placer clears it
    before each role and reads it to explain a failure). Without filters :attr:`active` is
    False and the Placer skips every call: no cost without filters."""

    def __init__(self, filters: Iterable[NodeFilter] = ()) -> None:
        if (
            callable(filters)
            or isinstance(filters, str | bytes)
            or not isinstance(filters, Iterable)
        ):
            raise InvalidConfigError(
                "filters", filters, "must be a sequence of node filters (one filter goes in a list)"
            )
        self.filters = tuple(filters)
        for i, f in enumerate(self.filters):
            if not callable(f):
                raise InvalidConfigError(f"filters[{i}]", f, "a node filter must be callable")
        self.names = tuple(filter_name(f) for f in self.filters)
        self.active = bool(self.filters)  # a plain attribute: the Placer checks it per pod
        self.blocked: str | None = None

    def __bool__(self) -> bool:
        return self.active

    def __repr__(self) -> str:
        return f"NodeFilters({list(self.names)})"

    def _ask(self, f: NodeFilter, name: str, ctx: PodView, slots: IntArray) -> BoolArray:
        mask = np.asarray(f(ctx, slots))
        if mask.dtype != np.bool_:  # (kept slots' indices, cast, would drop slot 0)
            raise ValidationError(
                "filters", name,
                f"returned {mask.dtype} values: it must return one bool per slot (True: keep)",
            )  # fmt: skip
        if mask.shape != slots.shape:
            raise ValidationError(
                "filters", name, f"returned {mask.shape} for {slots.shape[0]} slots"
            )
        return mask

    def mask(self, ctx: PodView, slots: IntArray) -> BoolArray:
        """True for the slots every filter keeps. Each filter sees only the slots the ones
        before it kept; when none is left, the filter that dropped the last is
        :attr:`blocked`. O(len(slots)) numpy per filter, plus the filters' own work."""
        keep = np.ones(slots.shape[0], dtype=np.bool_)
        if not slots.shape[0]:
            return keep
        for f, name in zip(self.filters, self.names, strict=True):
            idx = np.flatnonzero(keep)
            keep[idx[~self._ask(f, name, ctx, slots[idx])]] = False
            if not keep.any():
                self.blocked = name
                break
        return keep

    def keep(self, ctx: PodView, slots: IntArray) -> IntArray:
        """The slots every filter keeps (see :meth:`mask`)."""
        return slots[self.mask(ctx, slots)]

    def rejected_by(self, ctx: PodView, slot: int) -> str | None:
        """The name of the first filter that drops node ``slot``, None when all keep it.
        (Does not set :attr:`blocked`: one node turned down is not a pod left without any.)"""
        one = np.array([slot], dtype=np.int64)
        for f, name in zip(self.filters, self.names, strict=True):
            if not self._ask(f, name, ctx, one)[0]:
                return name
        return None

    def restrict_room(self, ctx: PodView, slots: IntArray, room: IntArray, n: int) -> None:
        """Zero, in place, the ``room`` (pods each node can take) of the nodes a filter
        drops; only nodes with room are asked. When the room left falls below the ``n`` pods
        of a gang role although it was enough before, the filter that made it fall is
        :attr:`blocked`."""
        enough = int(room.sum()) >= n
        for f, name in zip(self.filters, self.names, strict=True):
            idx = np.flatnonzero(room > 0)
            if not idx.shape[0]:
                break
            room[idx[~self._ask(f, name, ctx, slots[idx])]] = 0
            if enough and int(room.sum()) < n:
                self.blocked = name
                enough = False
