"""ClusterState (the truth) and Snapshot (the incremental, transactional view a cycle works on).

- :mod:`kant.state.columns`: :class:`NodeColumns`, the dense numpy rows (one per node slot)
  of static node facts and allocatable capacity.
- :mod:`kant.state.cluster`: :class:`ClusterState`, the mutable truth, and its change feed
  (:meth:`ClusterState.take_changes`).
- :mod:`kant.state.snapshot`: :class:`Snapshot`, refreshed in O(changed nodes), and
  :class:`Transaction`, its nestable unit of tentative change.
"""

from kant.state.cluster import ClusterState
from kant.state.columns import LEVELS, NodeColumns
from kant.state.snapshot import Snapshot, Transaction

__all__ = ["LEVELS", "ClusterState", "NodeColumns", "Snapshot", "Transaction"]
