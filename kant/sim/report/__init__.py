"""What ``kant simulate`` and ``kant compare`` show of simulation results:

- :mod:`kant.sim.report.text`: the printed tables (``format_*``);
- :mod:`kant.sim.report.files`: the report folder (JSON, text, CSV and the plots);
- :mod:`kant.sim.report.plots`: the PNG plots (matplotlib, imported only when plotting).

The figures themselves are computed in :mod:`kant.sim.analysis`.
"""

from kant.sim.report.files import (
    COMPARE_FILES,
    PLOT_NAMES,
    REPORT_FILES,
    clear_seed_sweep_report,
    staged,
    write_compare_report,
    write_report,
    write_seed_sweep_report,
)
from kant.sim.report.plots import (
    MATPLOTLIB_HINT,
    write_compare_plots,
    write_plots,
    write_seed_sweep_plots,
)
from kant.sim.report.text import (
    format_compare,
    format_duration,
    format_seed_sweep,
    format_summary,
)

__all__ = [
    "COMPARE_FILES",
    "MATPLOTLIB_HINT",
    "PLOT_NAMES",
    "REPORT_FILES",
    "clear_seed_sweep_report",
    "format_compare",
    "format_duration",
    "format_seed_sweep",
    "format_summary",
    "staged",
    "write_compare_plots",
    "write_compare_report",
    "write_plots",
    "write_report",
    "write_seed_sweep_plots",
    "write_seed_sweep_report",
]
