"""The structure of kant cannot decay silently: its declared layers hold (import-linter
contracts in pyproject.toml), no module of kant reads another module's private names (ruff's
SLF001), and the whole package type-checks under mypy --strict."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def _tool(name: str) -> str:
    exe = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(exe).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return exe


def test_every_module_imports_only_from_the_layers_below_it() -> None:
    out = _run(_tool("lint-imports"), "--no-cache")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_no_module_of_kant_reads_another_modules_private_names() -> None:
    out = _run(_tool("ruff"), "check", "--select", "SLF001", "--output-format", "concise", "kant")
    assert out.returncode == 0, out.stdout[-3000:]


def test_the_package_type_checks_strictly() -> None:
    out = _run(sys.executable, "-m", "mypy", "--no-incremental")
    assert out.returncode == 0, out.stdout[-3000:]


def test_kant_and_its_command_line_start_without_importing_networkx() -> None:
    # networkx is only for the graphs a user asks for (fabric_graph, NodeTemplate.to_graph):
    # imported at start-up it was a fifth of every kant command's start (about 0.2 s)
    code = "import sys, kant, kant.cli; print(sorted(m for m in sys.modules if 'networkx' in m))"
    out = _run(sys.executable, "-c", code)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout[-500:] + out.stderr
