"""Order keys: the global queue order (paper 3.2.2: priority, submission time, job size).

An order key is any :class:`kant.contracts.OrderKey`: ``key(job, seq)``, lower first, ending
with the unique submission sequence number ``seq`` so the order is total and deterministic.
``Queue(order=...)`` takes one; :data:`ORDER_KEYS` holds the built-ins by name.
"""

from __future__ import annotations

from typing import Any

from kant.model import Job
from kant.registry import Registry


def paper_order(job: Job, seq: int) -> tuple[Any, ...]:
    """Priority (higher first), then submission time (earlier first), then job size in GPU
    milli (**smaller first**: among equally urgent jobs submitted together, the small ones are
    likelier to fit now and cost the least to wait for), then ``seq``."""
    return (-job.priority, job.submitted_at, job.total_milli, seq)


def larger_first_order(job: Job, seq: int) -> tuple[Any, ...]:
    """As :func:`paper_order`, but larger jobs first among equal priority and submit time."""
    return (-job.priority, job.submitted_at, -job.total_milli, seq)


ORDER_KEYS: Registry[Any] = Registry("order key")
"""Built-in order keys by name (``paper``, ``larger-first``); register your own here."""
ORDER_KEYS.register("paper", lambda: paper_order)
ORDER_KEYS.register("larger-first", lambda: larger_first_order)
