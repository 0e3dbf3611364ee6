"""The content of a sweep's input files, which a run's key does not name.

A run's key hashes its file parameters (``trace_file``, ``cluster``, ``pods``, ``nodes``) as
the grid writes them, so that a store resumes from any folder and on any machine the grid's
folder is copied to (:attr:`~kant.sweep.grid.RunSpec.key`). So the key names a file, not its
content: two grids whose ``pods.csv`` are different files, or a trace replaced under the same
name, give the same keys. Each record a sweep appends therefore carries ``inputs``: the
SHA-256 of every input file the run reads, by parameter (:attr:`RunSpec.files
<kant.sweep.grid.RunSpec.files>`), and before running anything a sweep compares the runs it
would skip, as in the store already, with the files as they are now (:func:`check_inputs`):
a difference is refused (:class:`~kant.errors.ChangedInputError`).

Each distinct file is read once per sweep (:class:`InputDigests`), whatever the number of
runs that share it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from typing import Any

from kant.errors import ChangedInputError
from kant.sweep.grid import RunSpec

__all__ = ["InputDigests", "check_inputs", "file_digest"]


def file_digest(path: str | os.PathLike[str]) -> str | None:
    """The SHA-256 of the bytes of the regular file at ``path``, as 64 hex digits, read in
    chunks; None when it is no regular file that can be read (missing, a folder, a pipe a
    digest would empty, no permission): the run that reads it fails with its own error, or
    reads what no digest could pin, and there is nothing to compare."""
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            return hashlib.file_digest(f, "sha256").hexdigest()
    except (OSError, ValueError):  # (ValueError: a NUL in the name)
        return None


class InputDigests:
    """The digests of a sweep's input files, each file read once, when a run first names it
    (by its absolute path: the same file named from two folders is one)."""

    def __init__(self) -> None:
        self._by_path: dict[str, str | None] = {}

    def of(self, spec: RunSpec) -> dict[str, str]:
        """The run's input files' digests by parameter (a file that cannot be read as one
        left out: :func:`file_digest`)."""
        out: dict[str, str] = {}
        for name, path in spec.files.items():
            where = os.path.abspath(path)
            if where not in self._by_path:
                self._by_path[where] = file_digest(where)
            digest = self._by_path[where]
            if digest is not None:
                out[name] = digest
        return out


def check_inputs(
    skipped: Iterable[RunSpec],
    latest: Mapping[str, Mapping[str, Any]],
    digests: InputDigests,
    store: str,
) -> None:
    """Raise :class:`~kant.errors.ChangedInputError` if a run of ``skipped`` (runs the sweep
    will not run, as the store ``store`` holds them) has a last record in ``latest`` whose
    ``inputs`` digest of some file differs from that file's now: the error names the first
    such parameter and its path as the grid writes it, and how many of the runs' records
    were made from other content.

    The last record of a run is the one compared, as it is the one that counts for its
    status and metrics: an earlier record's digests are those of a result it replaced. A
    record without ``inputs`` (written before stores kept them) has nothing to compare, nor
    has a file that cannot be read now (its digest is None), and is taken as before."""
    changed: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for spec in skipped:
        rec = latest.get(spec.key)
        recorded = rec.get("inputs") if rec is not None else None
        if rec is None or not recorded:
            continue
        current = digests.of(spec)
        for name, was in recorded.items():
            if name in current and current[name] != was:
                written = str(spec.params[name])
                changed.setdefault((name, written), []).append((current[name], was, rec["status"]))
    if not changed:
        return
    (name, written), found = next(iter(changed.items()))
    now, was, _status = found[0]
    runs = f"{len(found)} record{'s' if len(found) > 1 else ''}"
    reason = (
        f"its content is not that of the file the store's {runs} of this grid's runs were "
        f"made from (sha256 {now[:12]} now, {was[:12]} there): those runs would be taken as "
        "done, with the other file's results; start a new store, or give the changed file a "
        "name of its own"
    )
    if all(status != "ok" for _n, _w, status in found):
        reason += " (or, as those runs failed, run them again with --retry-failed)"
    raise ChangedInputError(name, written, reason, where=store)
