"""Stream IDs.

Theory of operation: an entry ID is ``<ms>-<seq>``, two unsigned 64-bit
integers.  In Braid an ID is the plain tuple ``(ms, seq)``: tuples order
exactly as Redis orders IDs, hash cheaply, and need no wrapper class on the hot
path.  The parsers below reproduce Redis's ``streamGenericParseIDOrReply`` and
``string2ull`` (including their leniencies, e.g. ``strtoull`` accepting
leading zeros) so that every ID a Redis server accepts is accepted here and
every one it rejects is rejected with the same error.
"""

from __future__ import annotations

U64 = (1 << 64) - 1
MIN_ID = (0, 0)
MAX_ID = (U64, U64)

StreamID = tuple[int, int]

ERR_INVALID_ID = "ERR Invalid stream ID specified as stream command argument"


class InvalidID(ValueError):
    """An ID argument Redis would reject; ``str()`` is the reply error."""

    def __init__(self, message: str = ERR_INVALID_ID) -> None:
        super().__init__(message)


def string2ll(s: bytes) -> int | None:
    """Redis's strict integer parser: no spaces, no '+', no leading zeros."""
    n = len(s)
    if n == 0 or n > 20:
        return None
    if s == b"0":
        return 0
    neg = s[0] == 0x2D  # '-'
    digits = s[1:] if neg else s
    if not digits or not digits.isdigit() or digits[0] == 0x30 or not digits.isascii():
        return None
    v = int(digits)
    if neg:
        v = -v
        return v if v >= -(1 << 63) else None
    return v if v < (1 << 63) else None


def _strtoull(s: bytes) -> int | None:
    """C ``strtoull(s, &end, 10)`` requiring the whole string to be consumed."""
    i, n = 0, len(s)
    while i < n and s[i] in b" \t\n\v\f\r":
        i += 1
    neg = False
    if i < n and s[i] in b"+-":
        neg = s[i] == 0x2D
        i += 1
    digits = s[i:]
    if not digits or not digits.isdigit() or not digits.isascii():
        return None
    v = int(digits)
    if v > U64:
        return None  # ERANGE
    return (-v) & U64 if neg else v


def c_string(s: bytes) -> bytes:
    """What C code reading the argument as a NUL-terminated string sees: up to the first NUL."""
    nul = s.find(b"\0")
    return s if nul < 0 else s[:nul]


def string2ull(s: bytes) -> int | None:
    """Redis's ``string2ull``: ``string2ll`` when that works (negative: refused), else
    ``strtoull`` (leading spaces, a sign, leading zeros, up to 2**64-1).  It reads a C
    string, so a NUL ends the number."""
    s = c_string(s)
    ll = string2ll(s)
    if ll is not None:
        return ll if ll >= 0 else None
    return _strtoull(s)


def parse_id(
    arg: bytes,
    missing_seq: int = 0,
    *,
    strict: bool = False,
    allow_seq_star: bool = False,
) -> tuple[StreamID, bool]:
    """Parse an ID argument.  Returns ``(id, seq_given)``.

    ``strict`` refuses the ``-`` / ``+`` shorthands; ``allow_seq_star`` accepts
    ``<ms>-*`` (then ``seq_given`` is False and the sequence is 0).
    """
    if len(arg) > 127:
        raise InvalidID()
    # Redis copies the argument into a C string and parses that: a NUL ends it ("5\0x" is 5)
    arg = c_string(arg)
    if arg == b"-" or arg == b"+":
        if strict:
            raise InvalidID()
        return (MIN_ID if arg == b"-" else MAX_ID), True
    ms_part, dash, seq_part = arg.partition(b"-")
    ms = string2ull(ms_part)
    if ms is None:
        raise InvalidID()
    if not dash:
        return (ms, missing_seq), True
    if allow_seq_star and seq_part == b"*":
        return (ms, 0), False
    seq = string2ull(seq_part)
    if seq is None:
        raise InvalidID()
    return (ms, seq), True


def parse_interval_id(arg: bytes, missing_seq: int) -> tuple[StreamID, bool]:
    """An XRANGE / XPENDING bound: ``(`` marks an exclusive bound."""
    if len(arg) > 1 and arg[0] == 0x28:  # '('
        return parse_id(arg[1:], missing_seq, strict=True)[0], True
    return parse_id(arg, missing_seq)[0], False


def incr(id_: StreamID) -> StreamID | None:
    """The next ID, or None past the maximum."""
    ms, seq = id_
    if seq < U64:
        return (ms, seq + 1)
    if ms < U64:
        return (ms + 1, 0)
    return None


def decr(id_: StreamID) -> StreamID | None:
    ms, seq = id_
    if seq > 0:
        return (ms, seq - 1)
    if ms > 0:
        return (ms - 1, U64)
    return None


def fmt(id_: StreamID) -> bytes:
    return b"%d-%d" % id_
