"""What every trace reader shares: the load report, the job list, the row-error collector,
field parsers, :func:`gang_roles` and :func:`trace_dir`.

**Errors.** A malformed row raises :class:`kant.errors.InvalidTraceError` naming the field,
the value and ``where="<file>:<line>"`` (1-based physical line numbers, the header being line
1). With ``errors="skip"`` bad rows are left out instead and collected, in file order, in the
result's :class:`TraceReport`; every good row is still loaded. A bad *header* (missing
columns) makes the whole file unusable and raises in both modes, and so does a file that is
corrupt below the row level (a quote left open to the end of the file, named at its row's
line; a field over the CSV field limit; a truncated or corrupt gzip stream), naming the file
and the line reached. A line that is not
UTF-8 text is a bad row (skipped with ``errors="skip"``), except a header, which raises in
both modes; a CSV file that is gzip-compressed raises naming it (only SWF logs are read
compressed). Blank lines are ignored. A file that
cannot be opened (missing, a folder, unreadable) raises :class:`~kant.errors.InvalidTraceError`
naming it (field ``file``), not ``OSError``.
"""

from __future__ import annotations

import csv
import functools
import math
import os
import re
from codecs import BOM_UTF8
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal

import attrs

from kant.errors import InvalidTraceError, ValidationError
from kant.model import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    MILLI,
    Job,
    Resources,
    Role,
    is_int,
)

__all__ = [
    "GZIP_MAGIC",
    "CsvFile",
    "ErrorMode",
    "JobTrace",
    "PathLike",
    "RowCollector",
    "TraceReport",
    "as_trace_error",
    "check_errors",
    "check_pod_split",
    "gang_roles",
    "open_trace",
    "parse_number",
    "parse_scaled",
    "parse_uint",
    "read_error",
    "sorted_jobs",
    "trace_dir",
    "trace_path",
]

ErrorMode = Literal["raise", "skip"]
"""``"raise"``: the first bad row raises; ``"skip"``: bad rows are collected in the report."""

PathLike = str | os.PathLike[str]
"""A trace file path."""


# --------------------------------------------------------------------------- results


@attrs.frozen(kw_only=True)
class TraceReport:
    """What a loader read: ``rows`` data rows (blank and comment lines excluded), of which
    ``loaded`` became records, and the ``errors`` of the rows it skipped (only non-empty with
    ``errors="skip"``)."""

    path: str
    rows: int
    loaded: int
    errors: tuple[InvalidTraceError, ...] = ()

    @property
    def skipped(self) -> int:
        """How many rows were skipped (``len(errors)``)."""
        return len(self.errors)

    @property
    def ok(self) -> bool:
        """True when no row was skipped."""
        return not self.errors

    def summary(self) -> str:
        """One line of counts, then (if any) the first 20 skipped rows' errors."""
        head = f"{self.path}: {self.loaded} of {self.rows} rows loaded"
        if not self.errors:
            return head
        lines = [f"{head}, {self.skipped} skipped:"]
        lines += [f"  {e}" for e in self.errors[:20]]
        if self.skipped > 20:
            lines.append(f"  ... and {self.skipped - 20} more")
        return "\n".join(lines)


@attrs.frozen(kw_only=True, eq=False)
class JobTrace:
    """Jobs loaded from a trace, sorted by submit time (ties in file order), with the load
    report and the trace's header facts (``meta``, e.g. SWF ``MaxProcs``)."""

    jobs: tuple[Job, ...]
    report: TraceReport
    meta: Mapping[str, str] = attrs.field(factory=dict)

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)

    @property
    def total_gpus(self) -> float:
        """Sum of the jobs' GPU requests (GPUs; shares count as milli / 1000)."""
        return sum(j.total_milli for j in self.jobs) / MILLI


# --------------------------------------------------------------------------- arguments
#
# A loader checks every argument before it opens the file: an argument no row could be read
# with (a pod of 0 GPUs, a negative CPU per GPU) would otherwise make every row of a good
# file a bad row, skipped with errors="skip" (an empty trace, no error) or blamed on the
# first row with errors="raise".


def trace_path(path: object) -> Path:
    """``path`` (a ``str`` or ``os.PathLike``) as a :class:`Path`, else
    :class:`ValidationError` naming ``path``."""
    if isinstance(path, str | os.PathLike):
        try:
            return Path(path)
        except TypeError:  # (a PathLike of bytes)
            pass
    raise ValidationError("path", path, "must be a file path (a str or an os.PathLike of str)")


def check_errors(errors: object) -> None:
    """:class:`ValidationError` unless ``errors`` is an :data:`ErrorMode`."""
    if not isinstance(errors, str) or errors not in ("raise", "skip"):
        raise ValidationError("errors", errors, "must be 'raise' or 'skip'")


def check_pod_split(max_gpus_per_pod: int, cpu_milli_per_gpu: int, memory_mib_per_gpu: int) -> None:
    """The arguments of :func:`gang_roles` a loader passes on, checked: ``max_gpus_per_pod``
    an int in [1, MAX_GPUS_PER_NODE] (a pod runs on one node), the CPU and memory per GPU
    ints >= 0 that a pod of ``max_gpus_per_pod`` GPUs may ask (``MAX_CPU_MILLI``,
    ``MAX_MEMORY_MIB``); else :class:`ValidationError` naming the argument."""
    if not is_int(max_gpus_per_pod) or not 1 <= max_gpus_per_pod <= MAX_GPUS_PER_NODE:
        raise ValidationError(
            "max_gpus_per_pod",
            max_gpus_per_pod,
            f"must be an int in [1, {MAX_GPUS_PER_NODE}] (a pod runs on one node)",
        )
    for field, v, cap in (
        ("cpu_milli_per_gpu", cpu_milli_per_gpu, MAX_CPU_MILLI),
        ("memory_mib_per_gpu", memory_mib_per_gpu, MAX_MEMORY_MIB),
    ):
        most = cap // max_gpus_per_pod
        if not is_int(v) or not 0 <= v <= most:
            raise ValidationError(
                field,
                v,
                f"must be an int in [0, {most}] (a pod of max_gpus_per_pod={max_gpus_per_pod} "
                f"GPUs asks at most {cap})",
            )


# --------------------------------------------------------------------------- helpers


class RowCollector:
    """Raises or collects the row errors of one file (``errors`` mode) and counts its data
    rows (``rows``) for the :class:`TraceReport`."""

    def __init__(self, path: Path, errors: ErrorMode) -> None:
        check_errors(errors)
        self.path = path
        self.mode = errors
        self.errors: list[InvalidTraceError] = []
        self.rows = 0

    def where(self, line: int) -> str:
        """``"<file>:<line>"``."""
        return f"{self.path}:{line}"

    def fail(self, err: InvalidTraceError) -> None:
        """Raise ``err`` (mode ``"raise"``) or keep it (mode ``"skip"``)."""
        if self.mode == "raise":
            raise err
        self.errors.append(err)

    def report(self, loaded: int) -> TraceReport:
        """The report of this file, ``loaded`` rows having become records."""
        return TraceReport(
            path=str(self.path), rows=self.rows, loaded=loaded, errors=tuple(self.errors)
        )

    def csv_rows(
        self, reader: Any, width: int, limit: int | None = None
    ) -> Iterator[tuple[int, str, list[str]]]:
        """``(k, where, cells)`` of the data rows of a CSV ``reader`` (``k``: 0-based index
        among non-blank rows; at most ``limit`` of them), counted in ``rows``. Blank lines are
        skipped; a row without ``width`` cells is failed here and not yielded. Nothing past
        the ``limit``-th row is read (a row after it that is not UTF-8 or not CSV was an
        error)."""
        k = -1
        rows = iter(reader)
        while limit is None or k + 1 < limit:
            row = next(rows, None)
            if row is None:
                return
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            k += 1
            self.rows += 1
            where = self.where(reader.line_num)
            if len(row) != width:
                self.fail(
                    InvalidTraceError(
                        "row", row, f"has {len(row)} columns, the header {width}", where=where
                    )
                )
                continue
            yield k, where, row


def open_trace(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes; a file that cannot be opened (missing, a folder,
    unreadable) raises :class:`InvalidTraceError` naming it, so a trace folder without a file
    a reader needs is reported as such, not as an ``OSError``."""
    try:
        return path.open("rb")
    except OSError as e:
        raise read_error(path, e) from None


def read_error(path: Path, e: OSError, line: int | None = None) -> InvalidTraceError:
    """The :class:`InvalidTraceError` of a read of ``path`` that failed (at ``line``, if
    known) with ``e``: the file named, not an ``OSError`` without a name."""
    why = " ".join((e.strerror or str(e)).split())
    return InvalidTraceError(
        "file", str(path), f"cannot be read: {why}",
        where=None if line is None else f"{path}:{line}",
    )  # fmt: skip


GZIP_MAGIC: Final = b"\x1f\x8b"
"""The first two bytes of a gzip stream."""

_END: Final = "\ufffe\uffffkant-end-of-file"
"""The line :class:`CsvFile` gives its reader after the file's last: two Unicode
noncharacters and a name, which no trace holds. Read as a row of its own, the file ended
between rows; read inside a row's last field, a quote ran to the end of the file."""


class CsvFile:
    """A ``csv.reader`` over the lines of a binary file that reports corruption as
    :class:`InvalidTraceError`: a line that is not UTF-8 is a bad row of ``col`` (raised, or
    skipped and collected; with no collector it raises), and a CSV error (a field over the
    limit) or a quote left open to the end of the file (which the reader would return as one
    row of every line after it) raises naming the file and line, the quote's row's. Iterate
    it for rows; ``line_num`` is the physical line reached.

    The open quote is found at no cost per line: after the file's last line the reader is
    given one more, :data:`_END`, and the row it comes back in tells whether a quote was
    open.

    A file that starts as a gzip stream does (a compressed trace: only SWF logs are read
    compressed) raises naming it, in both modes; so does a first line that is not UTF-8 when
    it is the file's ``header`` (no row could be read without it)."""

    def __init__(
        self,
        lines: Iterable[bytes],
        path: Path,
        col: RowCollector | None,
        *,
        header: bool = False,
    ) -> None:
        self.path = path
        self.col = col
        self.header = header
        self._n = 0
        self._ended = False
        self._newline = True  # (the last line ends with one)
        self.reader = csv.reader(self._decode(lines))

    def _decode(self, lines: Iterable[bytes]) -> Iterator[str]:
        raw = b"\n"
        try:
            for raw in lines:
                self._n += 1
                if self._n == 1 and raw.startswith(GZIP_MAGIC):
                    raise InvalidTraceError(
                        "file", str(self.path),
                        "is gzip-compressed: CSV traces are read uncompressed (gunzip it; "
                        "only SWF logs are read compressed)",
                        where=f"{self.path}:1",
                    )  # fmt: skip
                # (a byte order mark starting the file is no part of its first line, though
                # a bad byte's offset counts it: it is the byte's place in the file's line)
                mark = len(BOM_UTF8) if self._n == 1 and raw.startswith(BOM_UTF8) else 0
                try:
                    yield raw[mark:].decode("utf-8") if mark else raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    head = self.header and self._n == 1
                    err = InvalidTraceError(
                        "header" if head else "line", raw[:40],
                        f"is not UTF-8 text ({e.reason} at byte {mark + e.start})",
                        where=f"{self.path}:{self._n}",
                    )  # fmt: skip
                    if self.col is None or head:  # (no row can be read without the header)
                        raise err from None
                    self.col.rows += 1
                    self.col.fail(err)
                    raw = b"\n"  # (what the reader got: the last line's end is this one's)
                    yield "\n"  # a blank line in its place keeps the line numbers
        except OSError as e:  # (a read that fails: a device error, a file that is no file)
            raise read_error(self.path, e, self._n + 1) from e
        self._ended = True
        self._newline = raw.endswith(b"\n")
        yield _END

    @property
    def line_num(self) -> int:
        """Physical lines read so far."""
        return min(self.reader.line_num, self._n)

    def __iter__(self) -> Iterator[list[str]]:
        return self

    def __next__(self) -> list[str]:
        try:
            row = next(self.reader)
        except csv.Error as e:
            why = str(e)
            if why.startswith("new-line character seen in unquoted field"):
                # (lines are split at LF, so the only such character is a CR alone: Python's
                # hint about opening the file says nothing of the file)
                why = (
                    "a bare carriage return (a CR not followed by LF) outside quotes: a file "
                    "saved for classic Mac OS ends its lines so; save it with LF or CRLF ends"
                )
            raise InvalidTraceError(
                "file", str(self.path), f"not valid CSV: {why}",
                where=f"{self.path}:{max(1, self.line_num)}",
            ) from None  # fmt: skip
        if self._ended:  # (the row _END came in: one check a row)
            if row == [_END]:
                raise StopIteration
            if row and row[-1].endswith(_END):
                # the quote's row began as many lines before _END as its fields hold line
                # ends (the file's last line, without one, was joined to _END)
                ends = sum(c.count("\n") for c in row) + (not self._newline)
                first = self._n + 1 - ends
                raise InvalidTraceError(
                    "file", str(self.path),
                    "not valid CSV: a quote opened in this row is never closed (it runs to "
                    "the end of the file)",
                    where=f"{self.path}:{first}",
                )  # fmt: skip
        return row


_UINT: Final = re.compile(r"[0-9]+")
_NUMBER: Final = re.compile(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?")


MAX_DIGITS: Final = 18
"""Integer cells have at most this many digits (counts, ids; more is a broken row)."""


def parse_uint(field: str, text: str, where: str) -> int:
    """``text`` as an int >= 0 (digits only, at most :data:`MAX_DIGITS`), else
    :class:`InvalidTraceError`."""
    if not _UINT.fullmatch(text) or len(text) > MAX_DIGITS:
        raise InvalidTraceError(
            field, text, f"must be an int >= 0 of at most {MAX_DIGITS} digits", where=where
        )
    return int(text)


def parse_scaled(field: str, text: str, where: str, scale: float) -> int:
    """``text`` (:func:`parse_number`) times ``scale``, rounded: an int below 2**62, else
    :class:`InvalidTraceError`."""
    v = parse_number(field, text, where) * scale
    if not v < 2.0**62:
        raise InvalidTraceError(field, text, "is too large", where=where)
    return round(v)


def parse_number(field: str, text: str, where: str) -> float:
    """``text`` as a finite float >= 0 (no sign, optional exponent), else
    :class:`InvalidTraceError`."""
    if not _NUMBER.fullmatch(text):
        raise InvalidTraceError(field, text, "must be a finite number >= 0", where=where)
    v = float(text)
    if not math.isfinite(v):
        raise InvalidTraceError(field, text, "must be a finite number >= 0", where=where)
    return v


def as_trace_error(
    e: ValidationError, where: str, names: Mapping[str, str] | None = None
) -> InvalidTraceError:
    """A model validation error re-raised as a trace error located at ``where`` (``names``
    maps model field names to trace column names)."""
    field = (names or {}).get(e.field, e.field)
    return InvalidTraceError(field, e.value, e.reason, where=where)


@functools.lru_cache(maxsize=1024)
def gang_roles(
    gpus: int,
    *,
    max_gpus_per_pod: int = 8,
    cpu_milli_per_gpu: int = 0,
    memory_mib_per_gpu: int = 0,
) -> tuple[Role, ...]:
    """Roles for a job of ``gpus`` whole GPUs split into pods of at most ``max_gpus_per_pod``.

    Up to ``max_gpus_per_pod`` GPUs: one pod. Above: the fewest pods of equal size when that
    divides evenly (16 -> 2 x 8, 12 -> 2 x 6, 24 -> 3 x 8), otherwise ``worker`` pods of
    ``max_gpus_per_pod`` plus one ``rest`` pod with the remainder (9 -> 1 x 8 + 1 x 1).
    Each pod asks ``cpu_milli_per_gpu`` and ``memory_mib_per_gpu`` per GPU it holds.
    Results are cached (roles are immutable values, shared between jobs)."""
    if gpus < 1 or max_gpus_per_pod < 1:
        raise ValidationError("gpus", gpus, "must be >= 1 (and max_gpus_per_pod >= 1)")

    def res(n: int) -> Resources:
        return Resources(gpus=n, cpu_milli=n * cpu_milli_per_gpu, memory_mib=n * memory_mib_per_gpu)

    pods = -(-gpus // max_gpus_per_pod)  # (integer ceil: any int, no float overflow)
    if gpus % pods == 0:
        return (Role(name="worker", replicas=pods, resources=res(gpus // pods)),)
    full, rest = divmod(gpus, max_gpus_per_pod)
    return (
        Role(name="worker", replicas=full, resources=res(max_gpus_per_pod)),
        Role(name="rest", replicas=1, resources=res(rest)),
    )


def sorted_jobs(jobs: list[Job]) -> tuple[Job, ...]:
    """``jobs`` by submit time, ties in list order."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submitted_at, i))
    return tuple(jobs[i] for i in order)


def trace_dir() -> Path | None:
    """The shared trace folder: ``$KANT_TRACES`` if set, else ``<repo>/../shared/traces``
    next to a source checkout. ``None`` if it does not exist."""
    env = os.environ.get("KANT_TRACES")
    p = Path(env) if env else Path(__file__).resolve().parents[3].parent / "shared" / "traces"
    return p if p.is_dir() else None


def no_trace_dir() -> str:
    """Why :func:`trace_dir` found none, for an error message: ``$KANT_TRACES`` names no
    folder, or it is not set and no shared folder is next to the checkout."""
    env = os.environ.get("KANT_TRACES")
    if env:
        return f"$KANT_TRACES={env!r} is not a folder"
    return "no trace folder found: set $KANT_TRACES"
