"""XREAD and XREADGROUP (one implementation, as in Redis's ``xreadCommand``).

Theory of operation
-------------------
Parsing resolves every stream's ID once: ``$`` becomes the stream's last
generated ID, ``+`` the ID just below its last entry, ``>`` a sentinel meaning
"after the group's cursor".  Serving then walks the streams in order and
answers with every stream that has something.  When nothing is available and
BLOCK was given, the command returns a :class:`Blocked` whose ``retry`` serves
again with the *same resolved IDs* (so ``$`` keeps meaning "after what existed
when I blocked"); a blocked XREADGROUP whose key vanished (DEL, UNLINK,
FLUSHALL/FLUSHDB, RENAME away, or a delete replicated from another region) or
whose group was destroyed is answered with NOGROUP, as Redis 8 re-running the
command would; a blocked XREAD keeps waiting for its key to come back.

MAXCOUNT and MAXSIZE (Redis 8.10) budget the whole reply, over every stream:
streams are served in the order given, each entry is asked of a
:class:`ReplyBudget` before it is handed out (``take``, which the consumer-group
reads in :mod:`crdt.groups` call before they touch the PEL), and once the
budget is spent the remaining streams are skipped (no consumer is created in
them).  MAXCOUNT caps the number of entries.  MAXSIZE is a soft cap on the
reply's bytes: the size counted is the RESP encoding of the entries (ID,
fields and values with their headers) and of the stream keys; an entry is
refused only once the reply already holds at least one entry and has reached
MAXSIZE, so the entry that crosses the cap is returned (a single entry larger
than MAXSIZE is still returned: a reader always makes progress).  A read with
nothing to return stays empty (nil, or it blocks), and a blocked read is
served with the same caps.  CLAIM's two counters are not counted in the size.

Only what changes state moves the change counter (``rdb_changes_since_last_save``)
as in Redis: a consumer created, and each stream a ``>`` read (or CLAIM)
delivered entries from.  A history read (an explicit ID) counts nothing, but
when it returned pending entries it updated their delivery counts and times,
so it is still logged (it marks ``Database.local_change``) for an exact replay;
one that returned nothing logs nothing (XREADGROUP is logged only when it
changed state: ``LOGGED_IF_CHANGED`` in node/commands/__init__.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crdt import groups as cg
from crdt.ids import MAX_ID, MIN_ID, InvalidID, StreamID, decr, incr, parse_id
from node.commands import command
from node.commands.entryreply import first_entry, range_entries
from node.commands.util import ERR_SYNTAX, parse_int, parse_timeout_ms, string2ll
from node.region.blocking import Blocked
from node.resp.encoder import NULL_ARRAY, Entries, ReplyError

if TYPE_CHECKING:
    from node.region.session import Session

GT_GROUP = MAX_ID  # the '>' sentinel, as Redis encodes it


@dataclass(slots=True)
class ReadArgs:
    group: bytes | None = None
    consumer: bytes | None = None
    count: int = 0
    timeout: int = -1
    noack: bool = False
    min_idle: int = -1
    maxcount: int = 0  # 0: no cap (MAXCOUNT/MAXSIZE take positive values only)
    maxsize: int = 0
    keys: list[bytes] = field(default_factory=list)
    idargs: list[bytes] = field(default_factory=list)
    # the IDs resolved, when no stream's state changes them (every ID argument is '>' with
    # GROUP, or a valid ID): reads repeating the command (see _parse_memo) take them as they are
    fixed_ids: list | None = None
    # a consumer's usual read: one stream, '>', no CLAIM, MAXCOUNT or MAXSIZE (_serve_one_new)
    one_new: bool = False


def _parse(argv: list[bytes], xreadgroup: bool, fullname: str, now_ms: int = 0) -> ReadArgs:
    a = ReadArgs()
    argc = len(argv)
    streams_arg = 0
    i = 1
    while i < argc:
        more = argc - i - 1
        o = argv[i].lower()
        if o == b"claim" and more:
            if not xreadgroup:
                raise ReplyError("ERR The CLAIM option is only supported by XREADGROUP. You called XREAD instead.")
            i += 1
            v = string2ll(argv[i])
            if v is None:
                raise ReplyError("ERR min-idle-time is not an integer or out of range")
            if v < 0:
                raise ReplyError("ERR min-idle-time must be a positive integer")
            a.min_idle = v
        elif o == b"block" and more:
            i += 1
            a.timeout = parse_timeout_ms(argv[i], now_ms)
        elif o == b"count" and more:
            i += 1
            a.count = max(parse_int(argv[i]), 0)
        elif o == b"maxcount" and more:
            i += 1
            a.maxcount = _parse_positive(argv[i], "MAXCOUNT")
        elif o == b"maxsize" and more:
            i += 1
            a.maxsize = _parse_positive(argv[i], "MAXSIZE")
        elif o == b"streams" and more:
            streams_arg = i + 1
            n = argc - streams_arg
            if n % 2:
                symbol = "ID or '>'" if xreadgroup else "ID, '+', or '$'"
                raise ReplyError(f"ERR Unbalanced '{fullname}' list of streams: for each stream key an {symbol} must "
                                 f"be specified.")
            a.keys = argv[streams_arg:streams_arg + n // 2]
            a.idargs = argv[streams_arg + n // 2:]
            break
        elif o == b"group" and more >= 2:
            if not xreadgroup:
                raise ReplyError("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.")
            a.group, a.consumer = argv[i + 1], argv[i + 2]
            i += 2
        elif o == b"noack":
            if not xreadgroup:
                raise ReplyError("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.")
            a.noack = True
        else:
            raise ReplyError(ERR_SYNTAX)
        i += 1
    if not streams_arg:
        raise ReplyError(ERR_SYNTAX)
    if xreadgroup and a.group is None:
        raise ReplyError("ERR Missing GROUP option for XREADGROUP")
    if a.maxcount and a.count and a.maxcount < a.count:
        raise ReplyError("ERR MAXCOUNT must be greater than or equal to COUNT")
    a.fixed_ids = _fixed_ids(a)
    a.one_new = (a.group is not None and len(a.keys) == 1 and a.fixed_ids == [GT_GROUP] and a.min_idle == -1
                 and not a.maxcount and not a.maxsize)
    return a


def _fixed_ids(a: ReadArgs) -> list | None:
    """The resolved IDs when they depend on no stream (see ``ReadArgs.fixed_ids``), else None
    (``$`` and ``+`` name a stream's state; an invalid ID is reported by _resolve_ids, in order
    with the other streams' errors)."""
    ids = []
    for arg in a.idargs or ():
        if arg == b">" and a.group is not None:
            ids.append(GT_GROUP)
        elif arg in (b"$", b"+", b">"):
            return None
        else:
            try:
                ids.append(parse_id(arg, 0, strict=True)[0])
            except InvalidID:
                return None
    return ids


# The arguments of recent reads, parsed, by the exact arguments: a consumer sends one command
# (XREADGROUP GROUP g c COUNT 10 STREAMS s >) again and again for as long as it runs, and
# parsing it each time was a tenth of such a read's cost.  A memo of a pure function (not
# state): a ReadArgs is never changed once parsed, a parse that fails is not kept, nor one
# whose BLOCK timeout is so large that its check depends on the clock (see _parse_timeout),
# nor a long command (many keys, long names: the memo's memory stays small).
_PARSED: dict[tuple, ReadArgs] = {}
PARSED_KEPT = 1024  # the memo starts afresh when it holds this many
PARSED_BYTES_KEPT = 1024  # and keeps no command longer than this (it holds at most ~1 MB)


def _parse_memo(argv: list[bytes], xreadgroup: bool, fullname: str, now_ms: int) -> ReadArgs:
    key = (xreadgroup, *argv)
    a = _PARSED.get(key)
    if a is None:
        a = _parse(argv, xreadgroup, fullname, now_ms)
        if a.timeout < 1 << 40 and len(argv) <= 64 and sum(map(len, argv)) <= PARSED_BYTES_KEPT:
            if len(_PARSED) >= PARSED_KEPT:
                _PARSED.clear()
            _PARSED[key] = a
    return a


def _parse_positive(arg: bytes, name: str) -> int:
    """MAXCOUNT / MAXSIZE: an integer from 1 to LLONG_MAX, in Redis's strict spelling."""
    v = string2ll(arg)
    if v is None or v < 1:
        raise ReplyError(f"ERR {name} must be a positive integer")
    return v




def _group_error(key: bytes, group: bytes) -> ReplyError:
    return ReplyError(f"NOGROUP No such key '{key.decode('utf-8', 'replace')}' or consumer group "
                      f"'{group.decode('utf-8', 'replace')}' in XREADGROUP with GROUP option")


def _resolve_ids(db, a: ReadArgs) -> list[StreamID]:
    if a.fixed_ids is not None:  # only the groups are to be checked (shared: never changed)
        if a.group is not None:
            for key in a.keys:
                s = db.keys.get(key)
                if s is None or a.group not in s.groups:
                    raise _group_error(key, a.group)
        return a.fixed_ids
    ids = []
    for key, arg in zip(a.keys, a.idargs, strict=True):
        s = db.keys.get(key)
        if a.group is not None and (s is None or a.group not in s.groups):
            raise _group_error(key, a.group)
        if arg == b"$":
            if a.group is not None:
                raise ReplyError("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the "
                                 "history of this consumer by specifying a proper ID, or use the > ID to get new "
                                 "messages. The $ ID would just return an empty result set.")
            ids.append(s.last_id if s is not None else MIN_ID)
        elif arg == b"+":
            if a.group is not None:
                raise ReplyError("ERR The + ID is meaningless in the context of XREADGROUP: you want to read the "
                                 "history of this consumer by specifying a proper ID, or use the > ID to get new "
                                 "messages. The + ID would just return an empty result set.")
            if s is not None and s.length:
                ids.append(decr(s.top_id()) or MIN_ID)
            else:
                ids.append(MIN_ID)
        elif arg == b">":
            if a.group is None:
                raise ReplyError("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> "
                                 "<consumer> option.")
            ids.append(GT_GROUP)
        else:
            try:
                ids.append(parse_id(arg, 0, strict=True)[0])
            except InvalidID as e:
                raise ReplyError(str(e)) from None
    return ids


def _entries(rows: list) -> Entries:
    return Entries([[b"%d-%d" % id_, flat if flat is not None else NULL_ARRAY] for id_, flat in rows])


class ReplyBudget:
    """MAXCOUNT / MAXSIZE over a whole XREAD / XREADGROUP reply (see the theory above)."""

    __slots__ = ("left", "maxsize", "size", "entries")

    def __init__(self, maxcount: int, maxsize: int) -> None:
        self.left = maxcount or -1  # entries MAXCOUNT still allows (-1: no MAXCOUNT)
        self.maxsize = maxsize
        self.size = 4  # bytes counted so far: the reply's own header, then keys and entries
        self.entries = 0

    def spent(self) -> bool:
        return self.left == 0 or bool(self.maxsize and self.entries and self.size >= self.maxsize)

    def take(self, id_: StreamID, flat: list | None) -> bool:
        """May one more entry be handed out?  Counts it when it may."""
        if self.spent():
            return False
        if self.left > 0:
            self.left -= 1
        self.entries += 1
        if self.maxsize:
            self.size += entry_size(id_, flat)
        return True

    def count(self, count: int) -> int:
        """A stream's COUNT (0: all), lowered to what MAXCOUNT still allows."""
        if self.left < 0:
            return count
        return min(count, self.left) if count else self.left

    def served(self, key: bytes) -> None:
        """A stream is in the reply: its key and its [key, entries] headers count."""
        self.size += _bulk_size(len(key)) + 8


def _bulk_size(n: int) -> int:
    return len(str(n)) + n + 5  # $<n>\r\n<data>\r\n


def entry_size(id_: StreamID, flat: list | None) -> int:
    """Bytes of one entry in a reply: [id, [field, value, ...]] (a deleted entry's fields: nil)."""
    size = 4 + _bulk_size(len(str(id_[0])) + 1 + len(str(id_[1])))
    if flat is None:
        return size + 5
    size += len(str(len(flat))) + 3
    for x in flat:
        size += len(str(len(x))) + len(x) + 5
    return size


def _serve(client: Session, a: ReadArgs, ids: list[StreamID]) -> list | dict | None:
    """Serve every stream that has data now; None when none has."""
    server = client.region
    db = server.db
    now = server.now_ms()
    min_idle = a.min_idle
    budget = ReplyBudget(a.maxcount, a.maxsize) if a.maxcount or a.maxsize else None
    take = budget.take if budget is not None else None
    count = a.count
    served = []  # [key, entries] per stream, the RESP2 reply as it is
    for key, gt in zip(a.keys, ids, strict=True):
        if budget is not None:
            if budget.spent():
                break  # MAXCOUNT / MAXSIZE reached: the remaining streams are skipped
            count = budget.count(a.count)
        s = db.keys.get(key)
        if s is None:
            continue
        if a.group is None:
            if s.length and s.top_id() > gt:
                if take is None:  # readers of the same new entries share their encodings
                    served.append([key, range_entries(s, _after(gt), MAX_ID, count)])
                else:
                    rows = list(_accepted(s.range(_after(gt), MAX_ID, count), take))
                    served.append([key, _entries(rows)])
                if budget is not None:
                    budget.served(key)
            continue
        g = s.groups[a.group]
        claimable = False
        if min_idle != -1:
            claimable, _ = cg.first_claimable(s, g, min_idle, now)
        history = gt != GT_GROUP
        sync = history
        if not history and db.keys.active_active:
            sync = cg.has_new_per_origin(s, g)
        elif not history and s.length and s.top_id() > g.last_id:
            sync = True
            gt = g.last_id
        assert a.consumer is not None  # (given with GROUP)
        consumer, created = g.consumer(a.consumer, now)
        consumer.seen_time = now
        if created:
            db.dirty += 1
        claimed_only = False
        if history:
            min_idle = -1  # CLAIM does not apply to history reads (and, as in Redis, to later keys)
        elif not sync and claimable:
            sync = claimed_only = True
        if not sync:
            continue
        rows, delivered = _group_rows(s, g, consumer, gt, a, count, min_idle, history, claimed_only, now, take)
        served.append([key, rows])
        if budget is not None:
            budget.served(key)
        if history:
            if delivered:  # their delivery counts and times moved: Redis counts no change, the log needs it
                db.local_change = True
        elif delivered:
            db.dirty += 1
    if not served:
        return None
    if client.resp3:
        return {k: v for k, v in served}
    return served


def _accepted(rows: list, take):
    for id_, flat in rows:
        if not take(id_, flat):
            return
        yield id_, flat


def _after(id_: StreamID) -> StreamID:
    """Range start strictly after ``id_`` (MAX_ID wraps like Redis's streamIncrID)."""
    return incr(id_) or MIN_ID


def _group_rows(s, g, consumer, gt, a: ReadArgs, count: int, min_idle: int, history: bool,
                claimed_only: bool, now: int, take) -> tuple[list, bool]:
    """A group's entries for one stream, and whether any was delivered (which changes state)."""
    if history:
        read = cg.read_history(s, g, consumer, gt, count, now, take)
        return _entries(read), any(flat is not None for _id, flat in read)
    rows: list = Entries()
    if min_idle != -1:
        for id_, flat, idle, dcount in cg.claim_idle(s, g, consumer, min_idle, count, now, take):
            rows.append([b"%d-%d" % id_, flat, idle, dcount])
        if claimed_only or (count and len(rows) >= count):
            return rows, bool(rows)
    left = count - len(rows) if count else 0
    if min_idle == -1 and take is None and len(s.logs) == 1:
        # the usual read: the reply straight from the blocks' memos, then the bookkeeping; in
        # Active-Active (gt is '>') after the one origin log's own cursor, as
        # cg.read_new_per_origin reads it when the stream holds a single log
        origin = next(iter(s.logs))
        start = incr(g.cursor(origin) if gt == GT_GROUP else gt)
        if start is None:
            return rows, False
        ids: list = []
        one = first_entry(s.logs[origin], start, MAX_ID, ids) if left == 1 else None
        rows = one if one is not None else range_entries(s, start, MAX_ID, left, ids)
        if gt == GT_GROUP and ids:
            g.cursors[origin] = ids[-1]
        cg.deliver_new(s, g, consumer, ids, a.noack, now)
        return rows, bool(rows)
    if gt == GT_GROUP:  # Active-Active: each origin log after its own cursor
        new = cg.read_new_per_origin(s, g, consumer, left, a.noack, now, take)
    else:
        new = cg.read_new(s, g, consumer, gt, left, a.noack, now, take)
    for id_, flat in new:
        rows.append([b"%d-%d" % id_, flat, 0, 0] if min_idle != -1 else [b"%d-%d" % id_, flat])
    return rows, bool(rows)


# _serve_one_new's answer when the read is not the case it serves (the general path serves it)
_GENERAL = object()


def _serve_one_new(client: Session, a: ReadArgs) -> list | dict | None | object:
    """``_resolve_ids`` then ``_serve`` for a consumer's usual read (``ReadArgs.one_new``: one
    stream, '>') of a single region's stream, with the same checks, state changes and reply,
    in one call; ``_GENERAL`` (nothing checked or changed) when the stream has several origin
    logs or the keyspace is Active-Active.  A consumer taking one entry at a time runs this for
    every entry, and the general path's loops over streams and options were a third of it."""
    server = client.region
    db = server.db
    keys = db.keys
    key = a.keys[0]
    group = a.group
    s = keys.get(key)
    if s is None or group not in s.groups:
        assert group is not None  # (one_new: given with GROUP)
        raise _group_error(key, group)
    if keys.active_active or len(s.logs) != 1:
        return _GENERAL
    g = s.groups[group]
    now = server.now_ms()
    assert a.consumer is not None  # (given with GROUP)
    consumer, created = g.consumer(a.consumer, now)
    consumer.seen_time = now
    if created:
        db.dirty += 1
    last = g.last_id
    if not (s.length and s.top_id() > last):
        return None
    rows: Entries | None
    start = incr(last)
    if start is None:
        rows = Entries()
    else:
        count = a.count
        ids: list = []
        rows = first_entry(next(iter(s.logs.values())), start, MAX_ID, ids) if count == 1 else None
        if rows is None:
            rows = range_entries(s, start, MAX_ID, count, ids)
        cg.deliver_new(s, g, consumer, ids, a.noack, now)
        if rows:
            db.dirty += 1
    if client.resp3:
        return {key: rows}
    return [[key, rows]]


def _read(client: Session, argv: list[bytes], xreadgroup: bool):
    a = _parse_memo(argv, xreadgroup, "xreadgroup" if xreadgroup else "xread", client.region.now_ms())
    db = client.region.db
    reply = _serve_one_new(client, a) if a.one_new else _GENERAL
    if reply is _GENERAL:
        ids = _resolve_ids(db, a)
        reply = _serve(client, a, ids)
    else:
        ids = a.fixed_ids  # type: ignore[assignment]  # (one_new: the IDs are fixed)
    if reply is not None:
        return reply
    if a.timeout == -1 or client.in_exec:
        return NULL_ARRAY

    def retry():
        if a.group is not None:
            for key in a.keys:
                s = db.keys.get(key)
                if s is None or a.group not in s.groups:
                    return _group_error(key, a.group)  # as Redis 8 running the command again
        return _serve(client, a, ids)

    server = client.region
    next_wake = (lambda: _claimable_at(db, a, server.now_ms())) if a.min_idle != -1 else None
    return Blocked(list(dict.fromkeys(a.keys)), a.timeout, retry, NULL_ARRAY, next_wake_ms=next_wake,
                   unblock_on_nokey=a.group is not None)


def _claimable_at(db, a: ReadArgs, now: int) -> int | None:
    """With CLAIM: when the oldest pending entry of these streams turns idle enough.

    Redis wakes such a client at that moment even if nothing is added; with no
    pending entry it retries after min-idle-time from now.
    """
    if a.group is None or a.min_idle == -1:
        return None
    oldest = None
    for key in a.keys:
        s = db.keys.get(key)
        if s is None or a.group not in s.groups:
            continue
        _ok, t = cg.first_claimable(s, s.groups[a.group], a.min_idle, now)
        if t is not None and (oldest is None or t < oldest):
            oldest = t
    return (oldest if oldest is not None else now) + a.min_idle


@command("xread")
def xread(client: Session, argv: list[bytes]):
    return _read(client, argv, xreadgroup=False)


@command("xreadgroup")
def xreadgroup(client: Session, argv: list[bytes]):
    return _read(client, argv, xreadgroup=True)
