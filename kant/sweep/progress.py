"""The progress bar of a sweep: runs done of runs to do, failures, and an ETA from the pace of
the runs since the first one finished (so a back-end's start-up does not inflate it; wall
clock, read only here, to pace the display)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar", "format_eta"]


def format_eta(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class ProgressBar:
    """``[#####.....] 12/40 runs  1 failed  elapsed 1m02s  ETA 2m24s`` on ``stream``:
    rewritten in place on a terminal, a new line at most every ``every_s`` seconds (and at
    the end) otherwise."""

    def __init__(
        self, total: int, label: str = "sweep", stream: TextIO = sys.stderr, every_s: float = 5.0
    ) -> None:
        self.total = total
        self.label = label
        self.stream = stream
        self.tty = stream.isatty()
        self.every = 0.0 if self.tty else every_s
        self.t0 = time.perf_counter()
        self.last = -1e9
        self.done = 0
        self.failed = 0
        self.first: float | None = None

    def text(self, now: float) -> str:
        """The bar as it reads ``now`` (a ``perf_counter`` time)."""
        width = 24
        fill = width * self.done // max(self.total, 1)
        elapsed = now - self.t0
        left = self.total - self.done
        # the pace since the first run finished (start-up, e.g. a new Ray instance, left out)
        if self.done >= 2 and self.first is not None:
            eta = format_eta((now - self.first) / (self.done - 1) * left)
        else:
            eta = format_eta(elapsed / self.done * left) if self.done else "?"
        failed = f"  {self.failed} failed" if self.failed else ""
        return (
            f"{self.label} [{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} runs"
            f"{failed}  elapsed {format_eta(elapsed)}  ETA {eta}"
        )

    def update(self, ok: bool) -> None:
        """One more run finished (``ok`` or failed)."""
        self.done += 1
        self.failed += 0 if ok else 1
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        if self.done < self.total and now - self.last < self.every:
            return
        self.last = now
        if self.tty:
            self.stream.write("\r" + self.text(now))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(self.text(now) + "\n")
        self.stream.flush()
