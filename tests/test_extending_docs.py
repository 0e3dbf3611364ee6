"""Every example in docs/extending.md runs, in order, as one program (each is a test of an
extension point added from outside the package)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def test_every_extension_example_in_the_docs_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 7, "the page lost its examples"
    ns: dict[str, object] = {"__name__": "extending_docs"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{DOC.name} block {i + 1}", "exec"), ns)
