"""One entry point to every self-check: :func:`check_invariants`.

>>> from kant.testing import ClusterBuilder, check_invariants
>>> cluster = ClusterBuilder().leaf("lf0", nodes=2).build()
>>> check_invariants(cluster, cluster.snapshot())
"""

from __future__ import annotations

from kant.admission import Admitter
from kant.errors import InvalidConfigError
from kant.queueing import Queue
from kant.scheduler import Scheduler
from kant.state import ClusterState, Snapshot

CHECKED_TYPES = (Scheduler, ClusterState, Snapshot, Queue, Admitter)


def check_invariants(*objects: Scheduler | ClusterState | Snapshot | Queue | Admitter) -> None:
    """Check every object's internal consistency, in the order given.

    Accepts any mix of :class:`~kant.Scheduler` (which checks its cluster, queue and
    admitter too, and how they agree), :class:`~kant.ClusterState`,
    :class:`~kant.Snapshot`, :class:`~kant.Queue` and :class:`~kant.Admitter`, and calls
    each one's ``check_invariants()``: it recomputes every derived structure from the truth
    and raises :class:`~kant.errors.InvariantError` on any difference, its message naming
    the structure and what differs (``"Queue: global order index differs"``). These are
    explicit checks, not ``assert``: ``python -O`` keeps them.

    O(everything): for tests and debugging, not for a scheduling loop. Returns nothing.

    Raises :class:`~kant.errors.InvalidConfigError` (before checking anything) if no object
    is given or one is of any other type.
    """
    if not objects:
        raise InvalidConfigError("objects", objects, "give at least one object to check")
    for i, obj in enumerate(objects):
        if not isinstance(obj, CHECKED_TYPES):
            names = ", ".join(t.__name__ for t in CHECKED_TYPES)
            raise InvalidConfigError(
                f"objects[{i}]", obj, f"must be one of {names}, not {type(obj).__name__}"
            )
    for obj in objects:
        obj.check_invariants()
