"""Requeue backoff after a failed binding or start (paper 3.2.4)."""

from __future__ import annotations

import attrs

from kant.errors import InvalidConfigError
from kant.model import finite_nonneg

_nonneg = finite_nonneg(InvalidConfigError)


@attrs.frozen(kw_only=True)
class Backoff:
    """Exponential requeue backoff after a failed binding or start.

    After the ``k``-th failure (``k >= 1``) the job waits ``min(cap, base * factor**(k-1))``
    seconds; the ``max_retries + 1``-th failure marks it FAILED.
    """

    base: float = attrs.field(default=10.0, validator=_nonneg)
    factor: float = attrs.field(default=2.0, validator=_nonneg)
    cap: float = attrs.field(default=600.0, validator=_nonneg)
    max_retries: int = attrs.field(default=5)

    def __attrs_post_init__(self) -> None:
        if self.factor < 1:
            raise InvalidConfigError("factor", self.factor, "must be >= 1")
        mr = self.max_retries
        if not isinstance(mr, int) or isinstance(mr, bool) or mr < 0:
            raise InvalidConfigError("max_retries", mr, "must be an int >= 0")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure."""
        if failures <= 0:
            return 0.0
        # cap the exponent: factor**k overflows floats long before it matters
        return float(min(self.cap, self.base * self.factor ** min(failures - 1, 64)))

    def exhausted(self, failures: int) -> bool:
        """Is ``failures`` past the retry limit (the job is FAILED)?"""
        return failures > self.max_retries
