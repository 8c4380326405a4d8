"""Argument helpers shared by command modules (Redis's exact error texts).

Numbers are parsed as Redis parses them, one helper per Redis function, so that
every spelling Redis accepts is accepted and every one it refuses is refused
with its error:

- :func:`parse_int` is ``getLongLongFromObjectOrReply``: ``string2ll``'s strict
  spelling only (no spaces, no ``+``, no leading zeros, no ``-0``, no decimals or
  exponents, at most 20 characters, within a signed 64-bit integer);
- :func:`parse_range_long` is ``getRangeLongFromObjectOrReply`` (and
  ``getIntFromObjectOrReply`` with the bounds of a C int): the same, then bounds,
  with one message for both failures when the command gives one;
- :func:`parse_positive_long` is ``getPositiveLongFromObjectOrReply``;
- :func:`parse_unsigned` is ``string2ull`` (SCAN's cursor, IDs' parts): what
  ``string2ll`` takes if not negative, else ``strtoull``'s lenient spelling
  (leading spaces, a sign, leading zeros), read up to a NUL as C reads a string.

Memory values (``1gb``) are ``memtoull``: :func:`node.region.config.parse_memory`.
"""

from __future__ import annotations

from crdt.ids import U64, InvalidID, StreamID, decr, incr, parse_id, parse_interval_id, string2ll, string2ull
from node.resp.encoder import Entries, ReplyError

ERR_SYNTAX = "ERR syntax error"
ERR_NOT_INT = "ERR value is not an integer or out of range"
ERR_TIMEOUT_NEG = "ERR timeout is negative"
ERR_NOT_POSITIVE = "ERR value is out of range, must be positive"

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1  # a C long on the 64-bit platforms Redis runs on
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1

__all__ = ["ERR_NOT_INT", "ERR_NOT_POSITIVE", "ERR_SYNTAX", "ERR_TIMEOUT_NEG", "INT_MAX", "INT_MIN",
           "LONG_MAX", "LONG_MIN", "fmt_entries", "lower", "parse_int", "parse_interval",
           "parse_positive_long", "parse_range_long", "parse_stream_id", "parse_timeout_ms", "parse_unsigned",
           "string2ll", "string2ull"]


def parse_int(arg: bytes, error: str = ERR_NOT_INT) -> int:
    """``getLongLongFromObjectOrReply`` (``error``: the command's own message)."""
    v = string2ll(arg)
    if v is None:
        raise ReplyError(error)
    return v


def parse_range_long(arg: bytes, lo: int, hi: int, error: str | None = None) -> int:
    """``getRangeLongFromObjectOrReply``: an integer within [lo, hi].  With ``error`` that is
    the reply to both a bad spelling and a value out of range, as in Redis."""
    v = string2ll(arg)
    if v is None:
        raise ReplyError(error or ERR_NOT_INT)
    if not lo <= v <= hi:
        raise ReplyError(error or f"ERR value is out of range, value must between {lo} and {hi}")
    return v


def parse_positive_long(arg: bytes, error: str | None = None) -> int:
    """``getPositiveLongFromObjectOrReply``: an integer >= 0."""
    if error is not None:
        return parse_range_long(arg, 0, LONG_MAX, error)
    v = parse_int(arg)
    if v < 0:
        raise ReplyError(ERR_NOT_POSITIVE)
    return v


def parse_timeout_ms(arg: bytes, now_ms: int) -> int:
    """``getTimeoutFromObjectOrReply`` in milliseconds (0 = forever): an integer in Redis's
    strict spelling only (``1.5``, ``1e3``, ``+5``, `` 5``, ``-0`` are not one), not negative,
    and not so large that the deadline (now + timeout) would overflow a long long."""
    v = string2ll(arg)
    if v is None:
        raise ReplyError("ERR timeout is not an integer or out of range")
    if v < 0:
        raise ReplyError(ERR_TIMEOUT_NEG)
    if v > 0 and v > LONG_MAX - now_ms:
        raise ReplyError("ERR timeout is out of range")
    return v


def parse_unsigned(arg: bytes, error: str) -> int:
    """``string2ull`` (an unsigned 64-bit integer, in its lenient spelling), else ``error``."""
    v = string2ull(arg)
    if v is None:
        raise ReplyError(error)
    return v


def parse_stream_id(arg: bytes, missing_seq: int = 0, *, strict: bool = False) -> StreamID:
    try:
        return parse_id(arg, missing_seq, strict=strict)[0]
    except InvalidID as e:
        raise ReplyError(str(e)) from None


def parse_interval(start_arg: bytes, end_arg: bytes) -> tuple[StreamID, StreamID]:
    """XRANGE's bounds (``-``, ``+``, incomplete IDs, ``(`` exclusive) as an inclusive
    interval, with XRANGE's errors (``xrangeGenericCommand``)."""
    try:
        start, start_ex = parse_interval_id(start_arg, 0)
        end, end_ex = parse_interval_id(end_arg, U64)
    except InvalidID as e:
        raise ReplyError(str(e)) from None
    if start_ex:
        after = incr(start)
        if after is None:
            raise ReplyError("ERR invalid start ID for the interval")
        start = after
    if end_ex:
        before = decr(end)
        if before is None:
            raise ReplyError("ERR invalid end ID for the interval")
        end = before
    return start, end


def fmt_entries(entries) -> Entries:
    """[(id, flat), ...] -> Redis's [[b"ms-seq", [f, v, ...]], ...] (encoded in one join)."""
    return Entries([[b"%d-%d" % eid, flat] for eid, flat in entries])


def lower(arg: bytes) -> bytes:
    return arg.lower()


def _clip(b: bytes, n: int = 128) -> str:
    return b[:n].decode("utf-8", "replace")


def unknown_command_error(argv: list[bytes]) -> ReplyError:
    """Redis's reply to a command it does not know (the arguments quoted, up to 128 bytes)."""
    args = ""
    for a in argv[1:]:
        if len(args) >= 128:
            break
        args += "'" + a[: 128 - len(args)].decode("utf-8", "replace") + "' "
    return ReplyError(f"ERR unknown command '{_clip(argv[0])}', with args beginning with: {args}")


def unknown_subcommand_error(container: str, sub: bytes) -> ReplyError:
    return ReplyError(f"ERR unknown subcommand '{_clip(sub)}'. Try {container.upper()} HELP.")
