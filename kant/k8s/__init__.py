"""kant as a Kubernetes scheduler (docs/kubernetes.md).

- :mod:`kant.k8s.translate`: Pods, Nodes and PodGroups (JSON) to kant's values, and back to
  binding annotations; pure functions;
- :mod:`kant.k8s.settings`: the ``kubernetes:`` section of the kant config file;
- :mod:`kant.k8s.shim`: the :class:`~kant.k8s.shim.Shim` (informers, cycles, writes);
- :mod:`kant.k8s.leader`: leader election through a Lease;
- :mod:`kant.k8s.shutdown`: ``kant k8s run``'s way out, bounded by ``shutdownGraceSeconds``;
  :mod:`kant.k8s.pool`: the binding calls' threads, which never hold the process up at exit;
- :mod:`kant.k8s.client`: a thin JSON client over the kubeconfig the official client reads;
- :mod:`kant.k8s.kubeconfig`: the checks of a kubeconfig before that client reads it;
- :mod:`kant.k8s.testenv`, :mod:`kant.k8s.kubelet`: a real API server on loopback and a fake
  kubelet, for tests, the benchmark and ``kant k8s demo``.

Importing this package does not import the ``kubernetes`` package; only reading a kubeconfig
does (``pip install 'kant[k8s]'``).
"""

from kant.k8s.settings import K8sSettings, parse_settings

__all__ = ["K8sSettings", "parse_settings"]
