"""kant logs through the standard ``logging`` module, one logger per module named after it,
and the library itself never prints."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from kant import Scheduler
from kant.queueing import Backoff, Queue
from kant.testing import ClusterBuilder, job

KANT = Path(__file__).resolve().parents[1] / "kant"


def _modules() -> list[Path]:
    return sorted(p for p in KANT.rglob("*.py"))


def test_the_library_never_prints_outside_the_command_line() -> None:
    for path in _modules():
        if "cli" in path.relative_to(KANT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "print", f"{path}:{node.lineno} prints"


def test_every_logger_is_named_after_its_module() -> None:
    found = 0
    for path in _modules():
        if "cli" in path.relative_to(KANT).parts:
            continue  # the command line configures the package's logger; it logs nothing
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger"
            ):
                found += 1
                args = node.args
                assert len(args) == 1 and isinstance(args[0], ast.Name), f"{path}:{node.lineno}"
                assert args[0].id == "__name__", f"{path}:{node.lineno}"
    assert found >= 3


def test_a_lost_node_and_a_failed_job_are_logged_by_their_modules(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kant")
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=2).build(), queue=Queue(backoff=Backoff(max_retries=0))
    )
    s.submit(job("a", gpus=8), now=0)
    r = s.step(now=1)
    s.binding_failed(r.bindings[0].pod, now=2, message="image pull failed")
    s.node_lost(r.bindings[0].node, now=3)
    by = {(rec.name, rec.levelname) for rec in caplog.records}
    assert ("kant.queueing.queue", "WARNING") in by  # the job FAILED
    assert ("kant.scheduler", "WARNING") in by  # the node was lost
    assert any("image pull failed" in rec.getMessage() for rec in caplog.records)


def test_the_library_is_silent_until_the_application_configures_logging() -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("kant").handlers)
