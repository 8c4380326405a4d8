"""Argument helpers shared by command modules (Redis's exact error texts)."""

from __future__ import annotations

from crdt.ids import U64, InvalidID, StreamID, decr, incr, parse_id, parse_interval_id, string2ll

from ..resp.encoder import ReplyError

ERR_SYNTAX = "ERR syntax error"
ERR_NOT_INT = "ERR value is not an integer or out of range"
ERR_TIMEOUT_NEG = "ERR timeout is negative"


def parse_int(arg: bytes, error: str = ERR_NOT_INT) -> int:
    v = string2ll(arg)
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
        start = incr(start)
        if start is None:
            raise ReplyError("ERR invalid start ID for the interval")
    if end_ex:
        end = decr(end)
        if end is None:
            raise ReplyError("ERR invalid end ID for the interval")
    return start, end


def fmt_entries(entries) -> list:
    """[(id, flat), ...] -> Redis's [[b"ms-seq", [f, v, ...]], ...]."""
    return [[b"%d-%d" % eid, flat] for eid, flat in entries]


def lower(arg: bytes) -> bytes:
    return arg.lower()
