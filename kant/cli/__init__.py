"""The ``kant`` command line: every ``argparse`` parser of the project lives in this package.

- ``kant simulate`` (:mod:`kant.cli.simulate`) and ``kant compare`` (:mod:`kant.cli.compare`)
  run the simulator (:mod:`kant.sim`);
- ``kant packing`` (:mod:`kant.cli.packing`) runs the FGD packing protocol
  (:mod:`kant.sim.packing`);
- ``kant bench <name>`` (:mod:`kant.cli.bench`) runs a benchmark of :mod:`kant.bench`;
- ``kant sweep GRID`` and ``kant sweep report STORE`` (:mod:`kant.cli.sweep`) run a grid of
  those runs, locally or on Ray, and report on its store (:mod:`kant.sweep`);
- ``kant k8s run`` / ``kant k8s demo`` (:mod:`kant.cli.k8s`) run kant as a Kubernetes
  scheduler (:mod:`kant.k8s`).

Every command prints a readable report; with ``--json`` its last line is one JSON object, so
scripts can ``tail -n1`` it. The subcommand modules are imported when the parser is built,
so ``import kant.cli`` stays light.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["build_parser", "main", "print_result"]


def print_result(result: dict[str, Any], as_json: bool) -> None:
    """Print ``result`` as aligned ``key  value`` lines, then (``as_json``) one JSON line."""
    from kant.sim.analysis import json_text

    width = max((len(k) for k in result), default=0)
    for k, v in result.items():
        if isinstance(v, dict):
            v = json_text(v)
        print(f"{k:<{width}}  {v}")
    if as_json:
        print(json_text(result))


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of each record."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


_HANDLER = _StderrHandler()
_HANDLER.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))


def _log_to_stderr(level: str) -> None:
    """Show the ``kant`` loggers' records of ``level`` and above on stderr (the command line's
    choice; the library itself only has a NullHandler)."""
    lg = logging.getLogger("kant")
    lg.setLevel(level.upper())
    if _HANDLER not in lg.handlers:
        lg.addHandler(_HANDLER)


def build_parser() -> argparse.ArgumentParser:
    """The ``kant`` parser with every subcommand; each sets ``func`` (args -> exit code) and
    may set ``check`` (args -> None, raising :class:`~kant.cli.options.UsageError`)."""
    from kant import __version__
    from kant.cli.options import KantArgumentParser

    parser = KantArgumentParser(
        prog="kant", description="Kant: a unified scheduler for large AI GPU clusters."
    )
    parser.add_argument("--version", action="version", version=f"kant {__version__}")
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=None,
        help="show kant's log records of this level and above on stderr (default: warning; "
        "error for simulate, compare and sweep, whose lost nodes and failed jobs are "
        "simulated events the summary counts)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    from kant.cli.bench import add_bench_parser
    from kant.cli.compare import add_compare_parser
    from kant.cli.k8s import add_k8s_parser
    from kant.cli.packing import add_packing_parser
    from kant.cli.simulate import add_simulate_parser
    from kant.cli.sweep import add_sweep_parser

    add_simulate_parser(sub)
    add_compare_parser(sub)
    add_packing_parser(sub)
    add_bench_parser(sub)
    add_sweep_parser(sub)
    add_k8s_parser(sub)
    return parser


class _Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C, so what a command started (the local etcd and
    kube-apiserver of ``kant k8s demo`` and ``kant bench k8s``, worker pools) is stopped on
    the way out instead of outliving it."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), check the options, run the subcommand and
    return its exit code. A mistake in the options (a bad value, a missing or unreadable
    file, an unwritable output, options that do not go together) is one line on stderr and
    exit code 2, before any work starts; so is a :class:`~kant.errors.KantError` the command
    raises. Output cut short by a closed pipe (``kant ... | head``) ends quietly; a stdout
    that cannot be written (a full disk) is one line and exit code 2, as is any other
    ``OSError`` the command meets (naming its path). Ctrl-C is one line and exit code 130,
    SIGTERM one line and exit code 143 (both after what the command started is stopped). A
    path the file system allows and UTF-8 does not (bytes Python decodes as surrogates) is
    printed escaped, not a crash after the run: stdout and stderr escape such characters
    while it runs, and are as they were after. So is the
    ``kant`` logger (its level and handlers: a caller that runs a command in its own process,
    a notebook or a test, keeps its logging as it set it)."""
    closed = sys.stdout is None  # (kant ... >&-: Python would drop what is printed)
    if closed:
        sys.stdout = _ClosedStdout()
    streams = [(f, f.errors) for f in (sys.stdout, sys.stderr) if isinstance(f, io.TextIOWrapper)]
    for f, _ in streams:
        f.reconfigure(errors="backslashreplace")
    logger = logging.getLogger("kant")
    level, handlers = logger.level, list(logger.handlers)
    try:
        return _main(argv)
    finally:
        if closed:
            sys.stdout = None
        for f, errors in streams:
            with contextlib.suppress(ValueError):  # (a stream closed meanwhile)
                f.reconfigure(errors=errors)
        logger.setLevel(level)
        logger.handlers[:] = handlers


def _main(argv: Sequence[str] | None) -> int:
    from kant.cli.options import UsageError
    from kant.errors import KantError

    parser = build_parser()
    args = parser.parse_args(argv)
    prog = " ".join(p for p in ("kant", args.command, getattr(args, "bench", None)) if p)
    _log_to_stderr(args.log_level or getattr(args, "log_default", "warning"))
    installed = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if installed else None
    try:
        check = getattr(args, "check", None)
        if check is not None:
            check(args)
        code: int = args.func(args)
        sys.stdout.flush()
    except (UsageError, KantError) as e:
        msg = " ".join(str(e).split())
        print(f"{prog}: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # (Ctrl-C: the user's choice, not a failure to explain)
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print(f"{prog}: terminated", file=sys.stderr)
        return 143
    except _StdoutClosedError:  # (before OSError: it is one)
        if sys.stderr is not None:  # (closed too: nowhere to say it)
            print(f"{prog}: cannot write the output: standard output is closed", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (| head): say nothing, and keep Python from complaining when
        # it flushes stdout at exit
        _drop_stdout()
        return 141
    except OSError as e:
        # what no option's check could see: a full disk or a failing device behind stdout
        # (kant ... > /dev/full; a file the command writes is named by its option, see
        # kant.cli.options.writing), or a file system error; --log-level debug shows where
        logging.getLogger("kant").debug("%s: %s", prog, e, exc_info=True)
        why = e.strerror or str(e)
        if e.filename is None and e.errno in _WRITE_ERRNOS and _stdout_fails():
            if sys.stdout is sys.__stdout__:  # (not a caller's own stream)
                _drop_stdout()  # (its unwritten buffer would fail again at exit)
            print(f"{prog}: cannot write the output: {why}", file=sys.stderr)
        else:
            where = "" if e.filename is None else f"{os.fsdecode(e.filename)}: "
            print(f"{prog}: {where}{' '.join(why.split())}", file=sys.stderr)
        return 2
    finally:
        if installed:  # (not the main thread: an embedding's own handling applies)
            signal.signal(signal.SIGTERM, previous)
    return code


class _StdoutClosedError(OSError):
    """A command wrote to a stdout that was closed when kant started."""


class _ClosedStdout(io.TextIOBase):
    """Stands for a stdout that was closed when kant started (Python's ``sys.stdout`` is
    None then, and ``print`` drops what it is given): a command that prints ends with one
    line and exit code 2, as one whose stdout cannot be written; one that prints nothing
    runs as usual."""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        raise _StdoutClosedError(errno.EBADF, "standard output is closed")


_WRITE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""The errors of a write to a stream (stdout) that no path names: a full disk or quota, a
file too large, a failing device."""


def _stdout_fails() -> bool:
    """Whether flushing stdout fails (again): the ``OSError`` at hand was stdout's, not an
    input's read error or a file's that happens to carry no name."""
    try:
        sys.stdout.flush()
    except OSError:
        return True
    except ValueError:  # (closed)
        return False
    return False


def _drop_stdout() -> None:
    """Point stdout's file descriptor at the null device, so that Python's flush of what is
    left in its buffer, at exit, neither fails nor prints a complaint (a stdout that is no
    file, a test's capture, is left as it is)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # (io.UnsupportedOperation is an OSError)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
