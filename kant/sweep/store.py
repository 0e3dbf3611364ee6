"""The result store of a sweep: a JSON-lines file, one record per run, appended as runs
finish (flushed and synced, so an interrupted sweep loses at most the line being written).

A record::

    {"key": "3f2a...", "kind": "sim", "params": {"scenario": "inference", "seed": 3, ...},
     "status": "ok", "metrics": {...}, "error": null, "wall_s": 12.3}

``status`` is ``ok`` or ``failed`` (``error``: the exception's type, message and where it was
raised; ``metrics``: null). A run may appear more than once (it failed, then was run again):
the last record of a key is the one that counts. A line that starts like a record but is not
JSON (the half written line of an interrupted sweep) is skipped and counted in
:attr:`Store.unreadable`; any other line that is not a record means the file is not a store,
and it is refused (:class:`~kant.errors.InvalidStoreError`) before anything is appended to
it. An empty file is an empty store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kant.errors import InvalidStoreError

__all__ = ["Store"]

_FIELDS = ("key", "kind", "params", "status")


class Store:
    """The store at ``path`` (created on the first :meth:`append`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.unreadable = 0

    def records(self) -> list[dict[str, Any]]:
        """Every readable record, in file order. Raises :class:`InvalidStoreError` naming
        the file and line when the file is not a store (see the module docstring)."""
        self.unreadable = 0
        if not self.path.exists():
            return []
        if self.path.is_dir():
            raise InvalidStoreError("store", str(self.path), "is a folder, not a JSON-lines file")
        out = []
        with self.path.open("rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    line = raw.decode().strip()
                except UnicodeDecodeError:
                    raise self._not_a_store(n, "is not text (UTF-8)") from None
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    if not line.startswith("{"):
                        raise self._not_a_store(n, "is not a run record") from None
                    # the start of a record an interrupted sweep did not finish
                    self.unreadable += 1
                    continue
                if not isinstance(rec, dict) or any(k not in rec for k in _FIELDS):
                    raise self._not_a_store(
                        n, f"is not a run record (a JSON object with {', '.join(_FIELDS)})"
                    )
                out.append(rec)
        return out

    def _not_a_store(self, line: int, reason: str) -> InvalidStoreError:
        return InvalidStoreError(
            "store",
            str(self.path),
            f"is not a sweep store: line {line} {reason}",
            where=f"{self.path}:{line}",
        )

    def latest(self) -> dict[str, dict[str, Any]]:
        """key -> the last record of that run."""
        return {r["key"]: r for r in self.records()}

    def done(self, *, retry_failed: bool = False) -> set[str]:
        """The keys of the runs a re-run skips: every run with a record (``retry_failed``:
        only those whose last record is ``ok``)."""
        latest = self.latest()
        if not retry_failed:
            return set(latest)
        return {k for k, r in latest.items() if r["status"] == "ok"}

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record (a line of its own even after a half-written one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(dict(record), sort_keys=True, allow_nan=False)
        with self.path.open("a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
            f.write(line.encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
