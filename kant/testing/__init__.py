"""Tools for tests, examples, experiments and debugging.

- builders (:mod:`kant.testing.builders`): keyword factories with readable names,
  :func:`node`, :func:`job` and the fluent :class:`ClusterBuilder`;
- :func:`check_invariants` (:mod:`kant.testing.invariants`): recompute every derived
  structure of a scheduler, cluster state, snapshot, queue or admitter from the truth and
  raise :class:`~kant.errors.InvariantError` on any difference;
- Hypothesis strategies (:mod:`kant.testing.strategies`): random clusters and jobs. That
  module imports ``hypothesis`` (a dev dependency); importing ``kant.testing`` does not.

>>> c = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2, model="A100").build()
>>> sorted(n.gpu_model for n in c.nodes())
['A100', 'A100', 'H100', 'H100']
>>> job("train", gpus=8, replicas=4, tenant="team-a").num_pods
4
>>> check_invariants(c)
"""

from kant.testing.builders import (
    DGX_CPU_MILLI,
    DGX_MEMORY_MIB,
    ClusterBuilder,
    job,
    node,
    partly_used,
)
from kant.testing.invariants import check_invariants

__all__ = [
    "DGX_CPU_MILLI",
    "DGX_MEMORY_MIB",
    "ClusterBuilder",
    "check_invariants",
    "job",
    "node",
    "partly_used",
]
