"""Device sets as int bit masks (bit ``i`` = device ``i``): the few helpers every layer uses."""

from __future__ import annotations

from collections.abc import Iterable


def bits(mask: int) -> tuple[int, ...]:
    """Indices of the set bits of ``mask``, ascending. O(popcount)."""
    out = []
    m = int(mask)
    while m:
        low = m & -m
        out.append(low.bit_length() - 1)
        m ^= low
    return tuple(out)


def mask_of(indices: Iterable[int]) -> int:
    """The mask with exactly the bits ``indices`` set."""
    m = 0
    for i in indices:
        m |= 1 << i
    return m


def lowest_bits(mask: int, k: int) -> int:
    """The ``k`` lowest set bits of ``mask`` (fewer if it has fewer)."""
    out = 0
    m = int(mask)
    for _ in range(k):
        if not m:
            break
        low = m & -m
        out |= low
        m ^= low
    return out


def popcount(mask: int) -> int:
    """Number of set bits in ``mask`` (an int or a numpy integer). O(1)."""
    return int(mask).bit_count()
