"""Every command and code sample in README.md and docs/ runs and exits 0.

Python samples run in order, one namespace per page (docs/extending.md has its own test,
``test_extending_docs.py``). Commands (lines of ``bash`` and plain code blocks that start with
``kant`` or ``python benchmarks/``, and the ``kant ...`` commands quoted in tables of
figures) run with small sizes appended, so the whole page runs in seconds: the options
appended come last and argparse keeps the last value. Outputs go to a temporary folder, never
into the checkout. Commands that read the public traces skip when the trace folder is absent,
and the ``k8s`` commands when there is no kube-apiserver to start (scripts/kube-testenv).
``kant sweep`` commands run on a small grid of their own (``grid.yaml`` in the temporary
folder); those with ``--ray`` are left to ``tests/sweep``, which starts its own Ray instance.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kant.k8s.testenv import find_binaries
from kant.sim.traces import trace_dir

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

SMALL = {
    ("kant", "simulate"): ["--jobs", "200", "--no-plots", "--quiet"],
    ("kant", "compare"): ["--jobs", "100", "--no-plots", "--quiet", "--workers", "1"],
    ("bench", "cycle"): ["--nodes", "64", "--pending", "40", "--cycles", "2"],
    ("bench", "place"): ["--nodes", "64", "--pods", "100"],
    ("bench", "gang"): ["--nodes", "64", "--replicas", "4", "--gangs", "2"],
    ("bench", "snapshot"): ["--nodes", "128", "--changed", "8", "--repeats", "2"],
    ("kant", "packing"): ["--seeds", "42", "--workers", "1", "--inflate", "0.3"],
    ("kant", "k8s"): ["--nodes", "4", "--jobs", "3", "--speed", "100"],
    ("bench", "k8s"): ["--pods", "20", "--nodes", "10"],
    ("benchmarks/packing_sweep.py", ""): ["--seeds", "42", "--workers", "1",
                                         "--policies", "fgd", "--traces", "default"],
}  # fmt: skip

SMALL_GRID = """\
command: compare
options:
  scenario: inference
  jobs: 60
  seeds: 0-1
  sets: [strict-fifo+ebinpack, backfill+spread]
"""


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def _commands(page: Path) -> list[str]:
    text = page.read_text()
    out: list[str] = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        if lang not in ("", "bash", "sh"):
            continue
        body = body.replace("\\\n", " ")
        for line in body.splitlines():
            cmd = line.split("  #")[0].strip()
            if cmd.startswith(("kant ", "python benchmarks/", "T=")) or cmd == "kant":
                out.append(cmd)
            if cmd.startswith("pip install") and "&& kant" in cmd:
                out.append(cmd.split("&&", 1)[1].strip())
    for row in re.findall(r"^\|[^\n]*$", text, flags=re.M):  # commands with figures
        out += [
            c
            for c in re.findall(r"`(kant [^`]+)`", row)
            if c.split()[1] == "bench" and "..." not in c
        ]
    return out


PY_CASES = [(p.name, p) for p in PAGES if p.name != "extending.md" and _python_blocks(p)]
CMD_CASES = [(p.name, p) for p in PAGES if _commands(p)]


@pytest.mark.parametrize("page", [p for _, p in PY_CASES], ids=[n for n, _ in PY_CASES])
def test_every_python_sample_of_the_page_runs(page: Path) -> None:
    module = types.ModuleType(f"docs_{page.stem}")
    sys.modules[module.__name__] = module  # dataclasses in a sample look their module up
    ns = module.__dict__
    for i, code in enumerate(_python_blocks(page)):
        name = f"{page.name} python block {i + 1}"
        if code.lstrip().startswith(">>>"):  # an interactive session: its output must match
            test = doctest.DocTestParser().get_doctest(code, ns, name, str(page), 0)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
            with contextlib.redirect_stdout(io.StringIO()) as out:
                runner.run(test)
            assert runner.failures == 0, out.getvalue()
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, name, "exec"), ns)


def _small(cmd: str, tmp: Path) -> list[str] | None:
    argv = shlex.split(cmd)
    if argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
        key = (argv[1], "")
    else:
        argv = [sys.executable, "-m", "kant", *argv[1:]]
        key = ("bench", argv[4]) if argv[3:4] == ["bench"] else ("kant", argv[3])
    extra = list(SMALL.get(key, []))
    if key == ("kant", "packing") and "--list-policies" in argv:
        extra = []
    if "--seeds" in argv and key == ("kant", "compare"):
        argv[argv.index("--seeds") + 1] = "0-1"
    if key[1] in ("simulate", "compare") or "--out" in argv:
        extra += ["--out", str(tmp / "out")]
    if "--plot" in argv:
        argv[argv.index("--plot") + 1] = str(tmp / "plot.png")
    return argv + extra


@pytest.mark.parametrize("page", [p for _, p in CMD_CASES], ids=[n for n, _ in CMD_CASES])
def test_every_command_of_the_page_exits_0(page: Path, tmp_path: Path) -> None:
    env = dict(os.environ)
    topology = re.search(r"```yaml\n(.*?)```", (ROOT / "docs" / "topology.md").read_text(), re.S)
    assert topology is not None
    (tmp_path / "my-cluster.yaml").write_text(topology.group(1))
    (tmp_path / "grid.yaml").write_text(SMALL_GRID)
    for cmd in _commands(page):
        if cmd.startswith("T="):
            env["T"] = str(ROOT / cmd[2:])
            continue
        if cmd.startswith("kant sweep") and "--ray" in cmd:
            continue
        cmd = cmd.replace("my-cluster.yaml", str(tmp_path / "my-cluster.yaml"))
        cmd = cmd.replace("grid.yaml", str(tmp_path / "grid.yaml"))
        cmd = cmd.replace("grid.jsonl", str(tmp_path / "grid.jsonl"))
        cmd = os.path.expandvars(cmd.replace("$T", env.get("T", "$T")))
        needs_traces = "--trace " in cmd or ("packing" in cmd and "--list-policies" not in cmd)
        if needs_traces and trace_dir() is None:
            continue
        if " k8s" in cmd and None in find_binaries()[:2]:  # no local API server to drive
            continue
        argv = _small(cmd, tmp_path)
        assert argv is not None
        r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
        assert "Traceback" not in r.stderr, cmd
