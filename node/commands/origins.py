"""Reads of one origin log: XORIGINS, XRANGEORIGIN, XSPLITORIGIN (Braid's own).

Theory of operation
-------------------
A key holds one entry log per origin region (``crdt/stream.py``), and every
Redis read merges them by ID.  A merged read cannot resume exactly: an entry
minted at region 2 with a *lower* ID than region 1's entries already read may
reach this region later ("late arrival", Redis Active-Active's XREAD caveat), and a
cursor of one ID would skip it.  Each origin log on its own, though, only ever
grows at its top: its origin appends with increasing IDs and replication
delivers one origin's operations in order.  So "the entries of origin ``o``
after ID ``c``" is a cursor that never skips and never repeats; the Spark
source (``pipeline/source.py``) keeps one per key and origin.

- ``XORIGINS key`` lists the key's origin logs (number, live entries, first
  live ID, highest ID stored): what a reader needs to know how far to read.
- ``XRANGEORIGIN key origin start end [COUNT n]`` is XRANGE on one origin log,
  with XRANGE's bounds (``-``, ``+``, ``(`` exclusive, incomplete IDs), COUNT
  rules and reply.
- ``XRANGEORIGIN ... PACKED`` answers the log's blocks that hold the range
  instead of its entries: ``[[first-id, [master fields], bytes], ...]``, whole
  blocks (``crdt/blocks.py``'s format, deleted entries and entries outside the
  range included), until they hold COUNT live entries.  The region copies
  bytes instead of formatting every entry; the reader (the Spark source, which
  decodes them with the same ``crdt.blocks`` code) drops what is outside the
  range and deleted, and resumes after the last block's last ID.
- ``XSPLITORIGIN key origin start end size`` cuts that range into consecutive
  runs of ``size`` live entries and answers each run's last ID and length
  (``[[id, n], ...]``; the last run may be shorter).  Whole blocks are counted
  from their live-entry counter without decoding, so planning a read of
  millions of entries costs a walk over the blocks, not a read of the entries.

A standalone region has one origin log, numbered by ``region`` (1 by default).
Every key is a stream, so there is no WRONGTYPE; a missing key or origin answers
an empty array.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import islice
from typing import TYPE_CHECKING

from crdt.blocks import EntryLog
from crdt.ids import StreamID, fmt
from node.commands import command
from node.commands.util import (
    ERR_NOT_INT,
    ERR_NOT_POSITIVE,
    ERR_SYNTAX,
    fmt_entries,
    parse_int,
    parse_interval,
    parse_positive_long,
)
from node.resp.encoder import NULL_ARRAY, ReplyError

if TYPE_CHECKING:
    from node.region.session import Session


def _origin_log(client: Session, key: bytes, origin_arg: bytes) -> EntryLog | None:
    origin = parse_positive_long(origin_arg)
    s = client.region.db.keys.get(key)
    return None if s is None else s.logs.get(origin)


@command("xorigins")
def xorigins(client: Session, argv: list[bytes]):
    s = client.region.db.keys.get(argv[1])
    if s is None:
        return []
    out = []
    for origin, log in sorted(s.logs.items()):
        first, last = log.first_live(), log.last_any()
        out.append({b"origin": origin, b"length": log.length,
                    b"first-entry-id": fmt(first or (0, 0)), b"last-id": fmt(last or (0, 0))})
    return out


@command("xrangeorigin")
def xrangeorigin(client: Session, argv: list[bytes]):
    start, end = parse_interval(argv[3], argv[4])
    count = -1
    packed = False
    j = 5
    while j < len(argv):
        if argv[j].lower() == b"count" and j + 1 < len(argv):
            count = parse_int(argv[j + 1], ERR_NOT_INT)
            count = max(count, 0)
            j += 2
        elif argv[j].lower() == b"packed":
            packed = True
            j += 1
        else:
            raise ReplyError(ERR_SYNTAX)
    log = _origin_log(client, argv[1], argv[2])
    if log is None:
        return []
    if count == 0:
        return NULL_ARRAY  # as XRANGE ... COUNT 0
    if packed:
        return packed_blocks(log, start, end, count)
    entries = log.range(start, end)
    return fmt_entries(entries if count < 0 else islice(entries, count))


def packed_blocks(log: EntryLog, start: StreamID, end: StreamID, count: int) -> list:
    """The blocks holding live entries in [start, end], whole, until they hold ``count`` of them
    (every such block when ``count`` < 0): ``[[first-id, [fields], bytes], ...]``."""
    out: list = []
    if start > end:
        return out
    blocks, firsts = log.blocks, log.firsts
    live = 0
    for k in range(max(bisect_right(firsts, start) - 1, 0), bisect_right(firsts, end)):
        block = blocks[k]
        if block.last < start or not block.live:
            continue
        out.append([fmt(block.first), list(block.fields), bytes(block.buf)])
        live += block.live
        if 0 <= count <= live:
            break
    return out


@command("xsplitorigin")
def xsplitorigin(client: Session, argv: list[bytes]):
    start, end = parse_interval(argv[3], argv[4])
    size = parse_int(argv[5])
    if size <= 0:
        raise ReplyError(ERR_NOT_POSITIVE)
    log = _origin_log(client, argv[1], argv[2])
    if log is None or start > end:
        return []
    return [[fmt(last), n] for last, n in split_runs(log, start, end, size)]


def split_runs(log: EntryLog, start: StreamID, end: StreamID, size: int) -> list[tuple[StreamID, int]]:
    """Consecutive runs of ``size`` live entries in [start, end]: (last ID, length) each.

    A block lying wholly inside the range whose live entries all fit in the
    current run is added by its counter; only blocks where a run ends, or
    that the range cuts, are read entry by entry.  A run may end on a block's
    last ID even when that entry is deleted: a boundary only has to order the
    live entries, not be one.
    """
    runs: list[tuple[StreamID, int]] = []
    n, last = 0, None
    blocks = log.blocks
    first_block = max(bisect_right(log.firsts, start) - 1, 0)
    for block in blocks[first_block:bisect_right(log.firsts, end)]:
        if block.last < start:
            continue
        inside = start <= block.first and block.last <= end
        if inside and n + block.live < size:
            n += block.live
            last = block.last
            continue
        for eid, _flat in log.range(max(start, block.first), min(end, block.last)):
            n += 1
            last = eid
            if n == size:
                runs.append((last, n))
                n = 0
        if inside:
            last = block.last
    if n:
        assert last is not None  # (set with every entry counted)
        runs.append((last, n))
    return runs
