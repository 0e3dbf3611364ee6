"""Requeue backoff after a failed binding or start (paper 3.2.4), and the limit of
interruptions a job may take from the cluster."""

from __future__ import annotations

import attrs

from kant.errors import InvalidConfigError
from kant.model import finite_nonneg

_nonneg = finite_nonneg(InvalidConfigError)


@attrs.frozen(kw_only=True)
class Backoff:
    """Exponential requeue backoff after a failed binding or start, and how many
    interruptions a job may take.

    After the ``k``-th failure (``k >= 1``) the job waits ``min(cap, base * factor**(k-1))``
    seconds; the ``max_retries + 1``-th failure marks it FAILED.

    An interruption is the cluster taking running pods from a job: a node lost, removed or
    unhealthy, or a GPU or NIC failing under it (one per job per event; preemption is never
    one). It requeues the job at once, with no backoff. ``max_interruptions``: the
    ``max_interruptions + 1``-th marks the job FAILED; None (the default) never does.
    """

    base: float = attrs.field(default=10.0, validator=_nonneg)
    factor: float = attrs.field(default=2.0, validator=_nonneg)
    cap: float = attrs.field(default=600.0, validator=_nonneg)
    max_retries: int = attrs.field(default=5)
    max_interruptions: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.factor < 1:
            raise InvalidConfigError("factor", self.factor, "must be >= 1")
        for name in ("max_retries", "max_interruptions"):
            n = getattr(self, name)
            if n is None and name == "max_interruptions":
                continue
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise InvalidConfigError(name, n, "must be an int >= 0")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure."""
        if failures <= 0 or not self.base:
            return 0.0
        # the exponent capped: factor**k overflows floats long before it matters, and a
        # factor large enough to overflow sooner is at the cap anyway
        try:
            d = self.base * self.factor ** min(failures - 1, 64)
        except OverflowError:
            return float(self.cap)
        return float(min(self.cap, d))

    def exhausted(self, failures: int) -> bool:
        """Is ``failures`` past the retry limit (the job is FAILED)?"""
        return failures > self.max_retries

    def interruptions_exhausted(self, interruptions: int) -> bool:
        """Is ``interruptions`` past the interruption limit (the job is FAILED)?"""
        return self.max_interruptions is not None and interruptions > self.max_interruptions
