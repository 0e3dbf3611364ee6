"""Cluster topology: the scale-out fabric (superspine → spine → leaf → node, plus HBDs) and
the inside of each node shape (GPUs, NVLink, PCIe switches, NUMA domains, NICs).

The networkx graphs (:func:`fabric_graph`, :meth:`NodeTemplate.to_graph`) are what users build
and inspect; the scheduler reads the arrays derived from them (:attr:`NodeTemplate.link_rank`,
:meth:`NodeTemplate.best_gpu_set`, :func:`shared_tier`). See ``docs/topology.md``.
"""

from kant.topology.fabric import (
    CLUSTER_FILE_VERSION,
    ClusterDescription,
    cluster_from_dict,
    cluster_to_dict,
    dump_cluster,
    fabric_graph,
    fat_tree,
    fat_tree_for_nodes,
    load_cluster,
    shared_tier,
)
from kant.topology.templates import (
    BUILTIN_TEMPLATES,
    GpuSlot,
    NicSlot,
    NodeTemplate,
    dgx_8gpu,
    get_template,
    openb_template_name,
    pcie_8gpu,
    pcie_node,
    register_template,
    templates,
)

__all__ = [
    "BUILTIN_TEMPLATES",
    "CLUSTER_FILE_VERSION",
    "ClusterDescription",
    "GpuSlot",
    "NicSlot",
    "NodeTemplate",
    "cluster_from_dict",
    "cluster_to_dict",
    "dgx_8gpu",
    "dump_cluster",
    "fabric_graph",
    "fat_tree",
    "fat_tree_for_nodes",
    "get_template",
    "load_cluster",
    "openb_template_name",
    "pcie_8gpu",
    "pcie_node",
    "register_template",
    "shared_tier",
    "templates",
]
