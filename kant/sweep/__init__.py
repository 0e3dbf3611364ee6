"""Policy sweeps: one grid format for ``simulate``, ``compare`` and ``packing`` runs, one
runner, one result store per sweep (``docs/sweeps.md``; the command line is ``kant sweep``,
:mod:`kant.cli.sweep`).

- :mod:`kant.sweep.grid`: the grid file and its runs (:class:`Grid`, :class:`RunSpec`);
- :mod:`kant.sweep.runs`: what one run does (:func:`prepare` its shared input, :func:`execute`
  it, a failure returned as a value);
- :mod:`kant.sweep.store`: the JSON-lines result store (:class:`Store`), which makes a sweep
  resumable;
- :mod:`kant.sweep.inputs`: the digests of the runs' input files a store keeps, which a sweep
  compares with the files before it takes a stored run as done;
- :mod:`kant.sweep.backends`: local processes (:class:`LocalPool`) or Ray
  (:class:`RayCluster`, ``pip install 'kant[ray]'``);
- :mod:`kant.sweep.runner`: :func:`run_sweep`;
- :mod:`kant.sweep.progress`: the progress bar with its ETA;
- :mod:`kant.sweep.report`: the tables and plots of a store, with confidence intervals.
"""

from kant.sweep.backends import Backend, LocalPool, RayCluster
from kant.sweep.grid import Grid, RunSpec, load_grid
from kant.sweep.progress import ProgressBar
from kant.sweep.runner import SweepSummary, run_sweep
from kant.sweep.store import Store

__all__ = [
    "Backend",
    "Grid",
    "LocalPool",
    "ProgressBar",
    "RayCluster",
    "RunSpec",
    "Store",
    "SweepSummary",
    "load_grid",
    "run_sweep",
]
