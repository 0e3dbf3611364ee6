"""Device sets as int bit masks (bit ``i`` = device ``i``): the few helpers every layer uses."""

from __future__ import annotations

from collections.abc import Iterable

_SMALL = 1 << 16
_BITS: dict[int, tuple[int, ...]] = {}


def bits(mask: int) -> tuple[int, ...]:
    """Indices of the set bits of ``mask``, ascending. O(popcount); a mask below 2**16 (the
    devices of a node of up to 16) is computed once and then read from a table."""
    hit = _BITS.get(mask)
    if hit is not None:
        return hit
    if mask < 0:  # (its bits never end)
        raise ValueError(f"a mask is never negative: {mask}")
    out = _bits(int(mask))
    if 0 <= mask < _SMALL and type(mask) is int:
        _BITS[mask] = out
    return out


def _bits(m: int) -> tuple[int, ...]:
    out = []
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
