"""Job size buckets used by JWTD and JTTED (Kant paper, section 4.4/4.5 and figures 4, 8, 9).

A job's size is its total GPU request. A fractional job (a share of one GPU) counts as one GPU,
and so does a CPU-only job (0 GPUs); a non-integral total above one GPU (several fractional
pods) is rounded up.
"""

from __future__ import annotations

import math
import numbers
from typing import Final

from kant.errors import ValidationError

BUCKETS: Final[tuple[str, ...]] = ("1", "2-8", "9-64", "65-256", "257-1024", ">1024")
"""Bucket labels, smallest first. Every mapping keyed by bucket follows this order."""

_UPPER: Final[tuple[int, ...]] = (1, 8, 64, 256, 1024)


def size_bucket(gpus: float) -> str:
    """The bucket label of a job requesting ``gpus`` GPUs in total: a real number >= 0
    (NumPy's too), else a ValidationError naming ``gpus``.

    >>> [size_bucket(g) for g in (0.25, 1, 2, 8, 9, 64, 65, 256)]
    ['1', '1', '2-8', '2-8', '9-64', '9-64', '65-256', '65-256']
    >>> [size_bucket(g) for g in (257, 1024, 1025, 2048)]
    ['257-1024', '257-1024', '>1024', '>1024']
    """
    why = "must be a number >= 0"
    plain = type(gpus) is float or type(gpus) is int  # (else NumPy's numbers too, no bool)
    if not plain and (isinstance(gpus, bool) or not isinstance(gpus, numbers.Real)):
        raise ValidationError("gpus", gpus, why)
    if not gpus >= 0:
        raise ValidationError("gpus", gpus, why)
    if math.isinf(gpus):
        return BUCKETS[-1]
    n = max(1, math.ceil(gpus))
    for label, upper in zip(BUCKETS, _UPPER, strict=False):
        if n <= upper:
            return label
    return BUCKETS[-1]
