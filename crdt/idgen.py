"""Choosing the ID of a new entry (XADD ``*``, ``<ms>``, ``<ms>-*``, ``<ms>-<seq>``).

Theory of operation
-------------------
``liberal`` is Redis's own rule (and a standalone region's default): ``*``
takes ``max(now, top.ms)`` and the next sequence; an explicit ID must be above
the stream's top.

``strict`` (Redis Active-Active's, the default of a multi-region database) lets two regions
never mint the same ID: the milliseconds are ``max(now, top.ms)`` (or the
milliseconds the client gave), and the sequence is the smallest number above
the top sequence *in that millisecond* that is congruent to the region's number
modulo ``stride`` (a cluster constant larger than every region number).  So
region 1 mints ``110-1``, region 2 ``115-2``; several IDs in one millisecond
step by the stride (``7-1``, ``7-17``, ``7-33`` with stride 16), and two
regions' sequences are disjoint residue classes, so they cannot collide even
under clock skew.  Full IDs are refused.  ``semi-strict`` is ``strict`` that
also accepts full IDs (which may then collide across regions).

``now_ms`` is an argument: this module reads no clock.
"""

from __future__ import annotations

from .ids import U64, StreamID, incr

LIBERAL, SEMI_STRICT, STRICT = "liberal", "semi-strict", "strict"

ERR_TOO_SMALL = "ERR The ID specified in XADD is equal or smaller than the target stream top item"
ERR_EXHAUSTED = "ERR The stream has exhausted the last possible ID, unable to add more items"
ERR_ZERO = "ERR The ID specified in XADD must be greater than 0-0"


class IdError(ValueError):
    pass


def next_auto(last: StreamID, now_ms: int) -> StreamID:
    """``streamNextID``: the ID for ``*``."""
    if now_ms > last[0]:
        return (now_ms, 0)
    nxt = incr(last)
    if nxt is None:
        raise IdError(ERR_EXHAUSTED)
    return nxt


def explicit(last: StreamID, wanted: StreamID, seq_given: bool) -> StreamID:
    """The ID for an explicit ``<ms>-<seq>`` or ``<ms>-*`` argument."""
    if seq_given:
        new = wanted
    elif last[0] == wanted[0]:
        if last[1] == U64:
            raise IdError(ERR_TOO_SMALL)
        new = (last[0], last[1] + 1)
    else:
        new = wanted
    if new <= last:
        raise IdError(ERR_TOO_SMALL)
    return new


ERR_STRICT_FULL_ID = ("ERR strict ID mode: XADD accepts '*' or a milliseconds-only ID; full IDs "
                      "need crdt_xadd_id_uniqueness_mode semi-strict or liberal")


def regional_seq(floor: int, region: int, stride: int) -> int:
    """The smallest sequence > ``floor`` congruent to ``region`` modulo ``stride``."""
    first = floor + 1
    return first + (region - first) % stride


def strict(last: StreamID, now_ms: int, region: int, stride: int,
           wanted_ms: int | None = None) -> StreamID:
    """A region-unique ID for ``*`` (``wanted_ms`` None) or a milliseconds-only ID."""
    if not 0 <= region < stride:
        raise ValueError(f"region number {region} must be below the stride {stride}")
    if wanted_ms is None:
        ms = max(now_ms, last[0])
    else:
        if wanted_ms < last[0]:
            raise IdError(ERR_TOO_SMALL)
        ms = wanted_ms
    seq = regional_seq(last[1] if ms == last[0] else -1, region, stride)
    if seq > U64:
        if wanted_ms is not None or ms == U64:
            raise IdError(ERR_EXHAUSTED if wanted_ms is None else ERR_TOO_SMALL)
        ms, seq = ms + 1, region
    new = (ms, seq)
    if new <= last:
        raise IdError(ERR_TOO_SMALL)
    return new


def choose(mode: str, last: StreamID, now_ms: int, region: int, stride: int,
           wanted: StreamID | None, seq_given: bool) -> StreamID:
    """The ID XADD uses under ``mode``; ``wanted`` None means ``*``."""
    if mode == LIBERAL:
        return next_auto(last, now_ms) if wanted is None else explicit(last, wanted, seq_given)
    if wanted is not None and seq_given:
        if mode == STRICT:
            raise IdError(ERR_STRICT_FULL_ID)
        return explicit(last, wanted, True)
    return strict(last, now_ms, region, stride, None if wanted is None else wanted[0])
