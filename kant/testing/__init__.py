"""Tools for tests, examples and experiments.

- builders (:mod:`kant.testing.builders`): keyword factories with readable names,
  :func:`node`, :func:`job` and the fluent :class:`ClusterBuilder`.

>>> c = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2, model="A100").build()
>>> sorted(n.gpu_model for n in c.nodes())
['A100', 'A100', 'H100', 'H100']
>>> job("train", gpus=8, replicas=4, tenant="team-a").num_pods
4
"""

from kant.testing.builders import DGX_CPU_MILLI, DGX_MEMORY_MIB, ClusterBuilder, job, node

__all__ = [
    "DGX_CPU_MILLI",
    "DGX_MEMORY_MIB",
    "ClusterBuilder",
    "job",
    "node",
]
