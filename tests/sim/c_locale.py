"""Run the ``kant`` command in a subprocess under the C locale, without Python's UTF-8 mode or
locale coercion: what a file written in the locale's encoding (not UTF-8) would show."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


def kant_in_c_locale(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m kant ARGS`` under ``LC_ALL=C`` (no coercion, no UTF-8 mode), this checkout
    first on the path."""
    env = {
        **os.environ,
        "PYTHONPATH": str(_ROOT),
        "LC_ALL": "C",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONUTF8": "0",
    }
    cmd = [sys.executable, "-m", "kant", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
