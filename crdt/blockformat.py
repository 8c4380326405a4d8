"""The bytes of a block of entries: its flags, varints, and what a listpack would take.

The layout of a block's buffer is drawn in crdt/blocks.py.  This module holds what reads
or sizes those bytes without a :class:`~crdt.blocks.Block`: the entry flags
(:data:`DELETED`, :data:`SAMEFIELDS`), the varint writers, Redis's listpack size
arithmetic (:func:`lp_int_size`, :func:`lp_str_size`: ``lp_base``, which decides when a
new block opens, as ``streamAppendItem`` decides a new node), and the walk over packed
entries (:func:`entry_starts`, which the Spark source uses on blocks it was sent).
Compiled with crdt/blocks.py (setup.py's COMPILED), pure like the rest of crdt/.
"""

from __future__ import annotations

from .ids import string2ll

# An entry's flags byte (the layout: crdt/blocks.py)
DELETED = 1
SAMEFIELDS = 2

LISTPACK_MAX_SIZE = 1 << 30  # STREAM_LISTPACK_MAX_SIZE
_LP_EMPTY = 7  # listpack header (6) + end byte (1)
_U64 = (1 << 64) - 1


# ---------------------------------------------------------------- listpack sizes
def _lp_int_enclen(v: int) -> int:
    if 0 <= v <= 127:
        return 1
    if -4096 <= v <= 4095:
        return 2
    if -32768 <= v <= 32767:
        return 3
    if -8388608 <= v <= 8388607:
        return 4
    if -2147483648 <= v <= 2147483647:
        return 5
    return 9


def _lp_backlen(n: int) -> int:
    if n <= 127:
        return 1
    if n < 16383:
        return 2
    if n < 2097151:
        return 3
    if n < 268435455:
        return 4
    return 5


def lp_int_size(v: int) -> int:
    """Bytes an integer element takes in a listpack, back-length included."""
    n = _lp_int_enclen(v)
    return n + _lp_backlen(n)


def lp_str_size(s: bytes) -> int:
    """Bytes a string element takes in a listpack (integers are packed)."""
    if len(s) <= 20 and s and (s[0] == 45 or 48 <= s[0] <= 57):  # starts with "-" or a digit
        v = string2ll(s)
        if v is not None:
            return lp_int_size(v)
    n = len(s)
    enc = n + (1 if n < 64 else 2 if n < 4096 else 5)
    return enc + _lp_backlen(enc)


def _s64(v: int) -> int:
    """Wrap to a signed 64-bit value, as C's int64_t arithmetic does."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


# ---------------------------------------------------------------- varints
def _put_uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _put_bytes(out: bytearray, b: bytes) -> None:
    n = len(b)
    if n < 0x80:
        out.append(n)
    else:
        _put_uvarint(out, n)
    out += b


# ---------------------------------------------------------------- walking packed entries
def _uvarint_tail(buf: bytes | bytearray, i: int, first: int) -> tuple[int, int]:
    v = first & 0x7F
    shift = 7
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, i
        shift += 7


def _skip_values(buf: bytes | bytearray, i: int, flags: int, nfields: int) -> int:
    """The index past an entry's field names (when it has its own) and values, which start
    at ``i``: what walking packed entries without building them skips."""
    if flags & SAMEFIELDS:
        values = nfields
    else:
        n = buf[i]
        i += 1
        if n >= 0x80:
            n, i = _uvarint_tail(buf, i, n)
        values = 2 * n
    for _ in range(values):  # each value takes at least one byte: bounded by the buffer
        n = buf[i]
        i += 1
        if n >= 0x80:
            n, i = _uvarint_tail(buf, i, n)
        i += n
    return i


def entry_starts(buf: bytes, nfields: int, base: int, out: list[int]) -> int:
    """Append to ``out`` where each entry of a block's packed bytes starts (deleted entries
    included), plus ``base``; return how many entries there are.  ``nfields`` is the
    number of the block's master fields.

    The one step of reading packed bytes that must go entry by entry: a reader that
    cuts many blocks into columns at once (the Spark source) finds the entries here,
    in compiled code, and reads their IDs and values with whole-array operations."""
    i, end, count = 0, len(buf), 0
    while i < end:
        out.append(base + i)
        count += 1
        flags = buf[i]
        i += 1
        for _ in range(2):  # the ms and seq deltas
            v = buf[i]
            i += 1
            while v >= 0x80:
                v = buf[i]
                i += 1
        i = _skip_values(buf, i, flags, nfields)
    return count
