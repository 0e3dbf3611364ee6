"""What every ``kant`` command shares about its options: a parser whose mistakes are one line,
typed option values checked while parsing (before any work starts), and :class:`UsageError`
for options that do not go together.

A mistake is reported as ``kant simulate: argument --seed: must be an int >= 0 (got '-1')``
on stderr, exit code 2, never a traceback (:func:`kant.cli.main`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "KantArgumentParser",
    "UsageError",
    "existing_file",
    "image_file",
    "number",
    "out_dir",
    "out_file",
    "readable_input",
    "refuse_own_input",
    "writing",
]


class UsageError(Exception):
    """Options that do not go together, or a value only checkable after parsing; the message
    names the options and values. :func:`kant.cli.main` prints it on one line, exit code 2."""


@contextlib.contextmanager
def writing(option: str, path: str | os.PathLike[str], *, after_run: bool = True) -> Iterator[None]:
    """Report an ``OSError`` raised while writing the output the user named with ``option``
    as a :class:`UsageError` naming the option and ``path`` (one line, exit 2; the options'
    check cannot see every failure, e.g. a full disk or a path the system refuses). With
    ``after_run`` the message says the run itself finished. A closed stdout is not such a
    failure: ``BrokenPipeError`` passes through."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as e:
        logging.getLogger("kant").debug("%s %s: %s", option, path, e, exc_info=True)
        done = " (the run finished; its results are printed above)" if after_run else ""
        raise UsageError(
            f"{option} {os.fspath(path)}: cannot write: {e.strerror or e}{done}"
        ) from None


def refuse_own_input(
    option: str,
    given: str | os.PathLike[str],
    outputs: Iterable[str | os.PathLike[str]],
    inputs: Iterable[tuple[str, str | os.PathLike[str] | None]],
) -> None:
    """Raise :class:`UsageError` when a file the command would write, replace or remove
    (``outputs``: the paths the output ``option`` ``given`` leads to) is the same file as one
    of its ``inputs`` (option, path; None: not given): a hard link or a symbolic link to it
    too (``os.path.samefile``). A report would otherwise replace the trace, cluster or config
    file it was made from. Only ``stat`` calls: checked before any work.

    Conservative: a symbolic link inside the output folder that points at an input is
    refused too, though the report would not write through it (``os.replace`` replaces the
    link, not its target)."""
    named = [(opt, p) for opt, p in inputs if p is not None]
    if not named:
        return
    for out in outputs:
        for opt, p in named:
            try:
                same = os.path.samefile(out, p)
            except OSError:  # (no such output yet: it is no input)
                continue
            if same:
                part = Path(out).relative_to(given) if Path(out) != Path(given) else None
                what = f"its {part}" if part is not None else "it"
                raise UsageError(
                    f"{option} {os.fspath(given)}: writing {what} would replace {opt} "
                    f"{os.fspath(p)}, the run's own input; write to another {option}"
                )


class KantArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that reports a mistake on one line (no usage block), exit 2, and
    shows every option's default in ``--help``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print ``prog: message (see prog --help)`` on one line of stderr and exit 2."""
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


class _HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to every option with a default the help does not state."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        h = action.help or ""
        if "default" in h or action.default in (None, False, argparse.SUPPRESS):
            return h
        if action.option_strings and action.nargs != 0:
            return f"{h} (default: %(default)s)" if h else "(default: %(default)s)"
        return h


def number(
    kind: type[int] | type[float],
    *,
    low: float | None = None,
    low_inclusive: bool = True,
    high: float | None = None,
    high_inclusive: bool = True,
    allow_inf: bool = False,
) -> Callable[[str], Any]:
    """An argparse ``type``: an int or a finite float (``allow_inf``: ``inf`` too) at least
    ``low`` (above it unless ``low_inclusive``) and at most ``high`` (below it unless
    ``high_inclusive``)."""
    what = "an int" if kind is int else "a number"

    def show(v: float) -> str:
        return str(int(v)) if kind is int else f"{v:g}"

    bounds = []
    if low is not None:
        bounds.append(f"{'>=' if low_inclusive else '>'} {show(low)}")
    if high is not None:
        bounds.append(f"{'<=' if high_inclusive else '<'} {show(high)}")
    bound = f" {' and '.join(bounds)}" if bounds else ""

    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}{bound} (got {text!r})") from None
        bad = isinstance(v, float) and (math.isnan(v) or (math.isinf(v) and not allow_inf))
        if low is not None and not bad:
            bad = v < low or (v == low and not low_inclusive)
        if high is not None and not bad:
            bad = v > high or (v == high and not high_inclusive)
        if bad:
            raise argparse.ArgumentTypeError(f"must be {what}{bound} (got {text!r})")
        return v

    parse.__name__ = kind.__name__
    return parse


@contextlib.contextmanager
def _path_errors(text: str) -> Iterator[Path]:
    """The path ``text`` names, for a check in the block: an empty name, or an ``OSError``
    the check raises (a name too long, a name the file system refuses), becomes an argparse
    error naming the path."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    try:
        yield Path(text)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e.strerror or e}") from None


def _no_other_than_a_file(p: Path, text: str) -> None:
    """Refuse a path there that is a folder or no regular file (a device, a pipe), as such."""
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file")
    if p.exists() and not p.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular file (a device, a pipe)")


def existing_file(text: str) -> str:
    """An argparse ``type``: a regular file that exists and can be read."""
    with _path_errors(text) as p:
        if not p.exists():
            raise argparse.ArgumentTypeError(f"no such file: {text!r}")
        _no_other_than_a_file(p, text)
        if not os.access(p, os.R_OK):
            raise argparse.ArgumentTypeError(f"cannot read {text!r}")
    return text


def readable_input(text: str) -> str:
    """An argparse ``type``: anything there to be read that is not a folder: a file, a pipe
    (``--config <(...)``, ``/dev/stdin``), a device. (:func:`existing_file` wants a file.)"""
    with _path_errors(text) as p:
        if not p.exists():
            raise argparse.ArgumentTypeError(f"no such file: {text!r}")
        if p.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file")
        if not os.access(p, os.R_OK):
            raise argparse.ArgumentTypeError(f"cannot read {text!r}")
    return text


def out_dir(text: str) -> str:
    """An argparse ``type``: a folder kant may create or write into (checked before any
    work; nothing is created here)."""
    with _path_errors(text) as p:
        _writable(p, folder=True, text=text)
    return text


def out_file(text: str) -> str:
    """An argparse ``type``: a file kant may create or overwrite."""
    with _path_errors(text) as p:
        _writable(p, folder=False, text=text)
    return text


def image_file(text: str) -> str:
    """An argparse ``type``: a file kant may create or overwrite (:func:`out_file`) whose
    extension is an image format matplotlib writes; a name without one gets ``.png``, the
    file matplotlib would write for it (so the path kant reports is the file written), unless
    the name is that of a folder or of something else than a file (``/dev/null``), refused
    as such (``plots.png`` beside the folder ``plots`` was written instead)."""
    if text.endswith(("/", os.sep)) or (os.altsep and text.endswith(os.altsep)):
        raise argparse.ArgumentTypeError(f"{text!r} names a folder (it ends with a slash)")
    with _path_errors(text) as p:
        _no_other_than_a_file(p, text)
    if not Path(text).suffix:
        text += ".png"
    from matplotlib.backend_bases import FigureCanvasBase

    # (pgf is left out: matplotlib writes it only with a TeX installation at hand)
    formats = {f for f in FigureCanvasBase.get_supported_filetypes() if f != "pgf"}
    suffix = Path(text).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise argparse.ArgumentTypeError(
            f"{text!r}: cannot save a plot as .{suffix} (known: {', '.join(sorted(formats))})"
        )
    return out_file(text)


def _writable(p: Path, *, folder: bool, text: str) -> None:
    from kant.sweep.store import link_to_nothing

    link = link_to_nothing(p, file=not folder)
    if link is not None:
        where = "" if link == p.absolute() else f"{str(link)!r}, on its path, "
        raise argparse.ArgumentTypeError(f"{text!r}: {where}is a symbolic link to nothing")
    if p.exists():
        if folder and not p.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} exists and is not a folder")
        if not folder and p.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a folder")
        if not os.access(p if folder else p.parent, os.W_OK):
            raise argparse.ArgumentTypeError(f"cannot write to {text!r}")
        return
    parent = p.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create {text!r}: {str(parent)!r} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot create {text!r}: {str(parent)!r} is not writable")
