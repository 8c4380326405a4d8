"""Choosing the ID of a new entry (XADD ``*``, ``<ms>``, ``<ms>-*``, ``<ms>-<seq>``).

Theory of operation
-------------------
``liberal`` is Redis's own rule (and a standalone region's default): ``*``
takes ``max(now, top.ms)`` and the next sequence; an explicit ID must be above
the stream's top.  The multi-region modes (``strict``, ``semi-strict``) are
added by the Active-Active work and live here too, so that the rule for every
mode is in one place.  ``now_ms`` is an argument: this module reads no clock.
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
