"""The result store of a sweep: a JSON-lines file, one record per run, appended as runs
finish (flushed and synced, so an interrupted sweep loses at most the line being written).

A record::

    {"key": "3f2a...", "kind": "packing", "params": {"pods": "pods.csv", "seed": 3, ...},
     "inputs": {"nodes": "9c41...", "pods": "e07b..."},
     "status": "ok", "metrics": {...}, "error": null, "wall_s": 12.3}

``status`` is ``ok`` or ``failed`` (``error``: the exception's type, message and where it was
raised; ``metrics``: null). ``inputs``: the SHA-256 (64 hex digits) of each input file the
run read, by parameter (``trace_file``, ``cluster``, ``pods``, ``nodes``; ``{}`` for a run of
no file, and a file that could not be read left out), which the key, naming the paths as the
grid writes them, does not tell apart (:mod:`kant.sweep.inputs`); a record written before
stores kept them has none. A run may appear more than once (it failed, then was run again):
the last record of a key is the one that counts, its ``inputs`` too. A line that starts
like a record but is not JSON (the half written line of an interrupted sweep) is skipped and
counted in :attr:`Store.unreadable`; any other line that is not a record means the file is
not a store, and it is refused (:class:`~kant.errors.InvalidStoreError`) before anything is
appended to it. So is a record the report could not read (an unknown kind or status, an
``ok`` run without the metrics of its kind, ``inputs`` that are not digests). An empty file
is an empty store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kant.errors import InvalidStoreError
from kant.model import is_int, is_number
from kant.sim.analysis import json_text
from kant.sim.packing import PERCENTS

__all__ = ["Store"]

_FIELDS = ("key", "kind", "params", "status")
_CURVE = len(PERCENTS)  # points of a packing run's alloc and frag curves


def _num(x: Any) -> bool:
    return x is None or is_number(x)


def _no_constant(name: str) -> Any:
    """A ``json.loads`` ``parse_constant``: ``NaN`` and the infinities are no JSON (a store
    kant wrote holds none: :func:`kant.sim.analysis.json_text`), so a record with one is
    refused, not read as a float no report can show."""
    raise ValueError(f"{name} is not a JSON number")


def _problem(rec: Mapping[str, Any]) -> str | None:
    """What is wrong with a record that has the fields of one, for the report that reads it
    (its kind, status, parameters and an ``ok`` run's metrics), or None."""
    p, m = rec["params"], rec.get("metrics")
    if not isinstance(rec["key"], str):
        return f"key {rec['key']!r} is not text"
    if rec["kind"] not in ("sim", "packing"):
        return f"kind {rec['kind']!r} is not sim or packing"
    if rec["status"] not in ("ok", "failed"):
        return f"status {rec['status']!r} is not ok or failed"
    if not isinstance(p, dict):
        return "params is not an object"
    inputs = rec.get("inputs")
    if inputs is not None and not (
        isinstance(inputs, dict) and all(isinstance(d, str) for d in inputs.values())
    ):
        return "inputs is not an object of parameter to digest (text)"
    if not _num(rec.get("wall_s")):
        return f"wall_s {rec.get('wall_s')!r} is not a number"
    if rec["status"] != "ok":
        # a failed run's parameters may be what made it fail: kept as they are; its error
        # is what the sweep and the report print
        if not isinstance(rec.get("error"), str):
            return f"a failed run's error {rec.get('error')!r} is not text"
        return None
    # (a threshold may be None: no threshold; a packing run always has an inflate)
    for name, check, what in (
        ("seed", is_int, "an int"),
        ("threshold", _num, "a number"),
        ("inflate", is_number, "a number"),
    ):
        if name in p and not check(p[name]):
            return f"params.{name} {p[name]!r} is not {what}"
    if not isinstance(m, dict):
        return f"an ok run's metrics are {m!r}, not an object"
    if rec["kind"] == "packing":
        for name in ("pods", "nodes"):
            if not isinstance(p.get(name), str):
                return f"an ok packing run has no params.{name}"
        for name in ("alloc", "frag"):
            c = m.get(name)
            if not (isinstance(c, list) and len(c) == _CURVE and all(_num(x) for x in c)):
                return f"metrics.{name} is not a curve of {_CURVE} numbers"
        return None
    for name in ("scenario", "queueing", "placement", "preemption"):
        if not isinstance(m.get(name), str):
            return f"an ok sim run's metrics have no {name!r}"
    for name in ("gar", "sor_median", "gfr"):
        if name not in m or not _num(m[name]):
            return f"metrics.{name} {m.get(name)!r} is not a number"
    if not is_int(m.get("preemptions")):
        return f"metrics.preemptions {m.get('preemptions')!r} is not an int"
    waits = m.get("waits")
    if not isinstance(waits, dict) or not all(
        isinstance(w, list) and len(w) == 2 and is_int(w[0]) and _num(w[1]) for w in waits.values()
    ):
        return "metrics.waits is not an object of [jobs, mean wait] pairs"
    return None


def link_to_nothing(path: Path, *, file: bool = False) -> Path | None:
    """The first of ``path`` and its parents, walking up to the first that exists, that is
    a symbolic link to nothing (to no file, or to a loop of links): what passes for a new
    name (it does not exist) yet can be neither written nor made. A ``file`` written through
    a link to a name that does not exist makes that name, so ``path`` itself is such a link
    only when it loops, or when the folder it points into does not exist. None if there is
    none. One ``lstat`` and one ``stat`` a step."""
    q = path.absolute()
    if file and q.is_symlink() and not q.exists():
        target = q.parent / os.readlink(q)
        if target.is_symlink() or not target.parent.is_dir():
            return q  # (a loop, a chain, or no folder to make the file in)
        q = q.parent
    while True:
        if q.is_symlink() and not q.exists():
            return q
        if q.exists() or q.parent == q:
            return None
        q = q.parent


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
                    rec = json.loads(line, parse_constant=_no_constant)
                except json.JSONDecodeError:
                    if not line.startswith("{"):
                        raise self._not_a_store(n, "is not a run record") from None
                    # the start of a record an interrupted sweep did not finish
                    self.unreadable += 1
                    continue
                except (ValueError, RecursionError) as e:  # an int of 5,000 digits, nesting
                    why = (
                        "nested too deeply"
                        if isinstance(e, RecursionError)
                        else (
                            "a number of more than 4,300 digits" if "digits" in str(e) else str(e)
                        )
                    )
                    raise self._not_a_store(n, f"is not a run record: {why}") from None
                if not isinstance(rec, dict) or any(k not in rec for k in _FIELDS):
                    raise self._not_a_store(
                        n, f"is not a run record (a JSON object with {', '.join(_FIELDS)})"
                    )
                problem = _problem(rec)
                if problem is not None:
                    raise self._not_a_store(n, f"is not a valid run record: {problem}")
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

    def done(
        self,
        *,
        retry_failed: bool = False,
        latest: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> set[str]:
        """The keys of the runs a re-run skips: every run with a record (``retry_failed``:
        only those whose last record is ``ok``). ``latest``: :meth:`latest`, read already."""
        if latest is None:
            latest = self.latest()
        if not retry_failed:
            return set(latest)
        return {k for k, r in latest.items() if r["status"] == "ok"}

    def check_writable(self) -> None:
        """Raise :class:`InvalidStoreError` naming the file unless records can be appended
        to it: an existing regular file kant may write, or a new file in a folder that exists
        or can be made (checked before any run, so a sweep never runs for a store it cannot
        write). Creates nothing."""
        p = self.path
        if "\0" in str(p):  # (the file system refuses it; Path.exists says False)
            raise InvalidStoreError("store", str(p), "a file name cannot hold a NUL character")
        try:
            link = link_to_nothing(p, file=True)
            if link is not None:
                why = f"cannot be made: {link} is a symbolic link to nothing"
                raise InvalidStoreError("store", str(p), why)
            if p.exists():
                if not p.is_file():
                    raise InvalidStoreError("store", str(p), "is not a regular file")
                if not os.access(p, os.W_OK):
                    raise InvalidStoreError("store", str(p), "cannot be written")
                return
            parent = p.absolute().parent
            while not parent.exists():
                parent = parent.parent
            if not parent.is_dir():
                raise InvalidStoreError("store", str(p), f"cannot be made: {parent} is a file")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InvalidStoreError("store", str(p), f"cannot be made: {parent} is read-only")
        except OSError as e:  # (a name too long, a name the file system refuses)
            raise InvalidStoreError("store", str(p), e.strerror or str(e)) from None

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record (a line of its own even after a half-written one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json_text(dict(record), sort_keys=True)
        with self.path.open("a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
            f.write(line.encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
