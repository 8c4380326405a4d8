"""Consumer groups: cursors, the pending entries list (PEL) and consumers.

Theory of operation
-------------------
The consumer groups of Redis Streams.  A group has a "last delivered" cursor; reading with ``>``
hands out the entries after it and moves it.  Every entry handed out (unless
NOACK) gets a NACK in the group's PEL - consumer, last delivery time, delivery
count - and the same NACK object sits in that consumer's own PEL, so the group
PEL is the disjoint union of the consumers' PELs.  XACK removes NACKs; XCLAIM,
XAUTOCLAIM and XREADGROUP CLAIM move them between consumers.  Reading with an
explicit ID replays the consumer's own PEL (its "history"), returning deleted
entries with nil fields.

XNACK (Redis 8.8) releases pending entries without acknowledging them: the
NACK loses its consumer (it stays in the group PEL only), its delivery time
becomes 0 and its delivery count changes by the mode - SILENT takes one off
(never below 0), FAIL keeps it, FATAL sets it to LLONG_MAX, and RETRYCOUNT n
sets it to n whatever the mode.  With FORCE an ID that is not pending but is
an entry of the stream gets a new unowned NACK, counted from 0 (so SILENT and
FAIL give 0, FATAL LLONG_MAX, RETRYCOUNT n).  Released entries form the "NACK
zone" at the head of the time-ordered PEL, in the order they were released:
:meth:`ConsumerGroup.by_delivery_time` puts every unowned NACK before every
owned one, so XREADGROUP CLAIM serves them first, and with a delivery time of
0 they are idle for "now" milliseconds - claimable at once by CLAIM, XCLAIM
and XAUTOCLAIM (which, as in Redis, skip the idle check for an unowned NACK).
Any claim or re-delivery gives the NACK an owner again and moves it out of the
zone.  A NACK without a consumer *is* a released one: nothing else leaves a
NACK unowned (XCLAIM FORCE assigns the NACK it creates at once), which is also
how a snapshot keeps the zone (consumer -1, delivery time 0, its stamp).
Delivery counts saturate at LLONG_MAX, as Redis's do.

``entries_read`` counts how many entries the group has consumed since the
stream's first ever entry, so that ``lag`` = entries-added − entries-read; it
is exact while no deletion happened in between and estimated (or unknown, -1)
otherwise, following Redis's ``streamEstimateDistanceFromFirstEverEntry``.

The reads take an optional ``take`` callback asked before each entry is handed
out (and before it touches the PEL): XREAD/XREADGROUP MAXCOUNT and MAXSIZE keep
one budget over every stream of a command this way.

Consumers and the PEL are local to a region (as in Redis Active-Active); group existence is
replicated through :mod:`crdt.ops`.  Everything here is pure: times come in as
``now`` (milliseconds).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from .blocks import tagged
from .copying import copy_attributes
from .ids import MAX_ID, MIN_ID, decr, incr
from .pel import PendingMap

# An entry ID here is the Python tuple ``(ms, seq)`` the caller holds, passed on as it is: IDs
# move between the stream, the PELs and the replies, and typed as ``StreamID`` (a fixed-length
# tuple) mypyc would unbox each one on entry and build a new tuple object each time it is
# stored in a PEL or returned (three per delivery).
ID = Any

ENTRIES_READ_UNKNOWN = -1  # Redis's SCG_INVALID_ENTRIES_READ
DELIVERIES_MAX = (1 << 63) - 1  # LLONG_MAX: where a delivery count stops (and XNACK FATAL puts it)

# XNACK modes: how releasing an entry changes its delivery count
SILENT, FAIL, FATAL = "silent", "fail", "fatal"


class Nack:
    __slots__ = ("consumer", "delivery_time", "delivery_count", "stamp")

    def __init__(self, consumer: Consumer | None, delivery_time: int, delivery_count: int = 1,
                 stamp: int = 0) -> None:
        self.consumer = consumer
        self.delivery_time = delivery_time
        self.delivery_count = delivery_count
        self.stamp = stamp  # orders equal delivery times, as Redis's time-ordered PEL list

    def __deepcopy__(self, memo: dict) -> Nack:
        return copy_attributes(self, Nack(None, 0), ('consumer', 'delivery_time', 'delivery_count', 'stamp'), memo)

    @property
    def released(self) -> bool:
        """In the NACK zone: released by XNACK and not claimed or delivered since."""
        return self.consumer is None

    def delivered_again(self) -> None:
        """One more delivery (saturating at LLONG_MAX, as Redis's counter)."""
        if self.delivery_count < DELIVERIES_MAX:
            self.delivery_count += 1


def released_count(count: int, mode: str, retrycount: int = -1) -> int:
    """The delivery count XNACK leaves (Redis's ``nackSetDeliveryCount``)."""
    if retrycount >= 0:
        return retrycount
    if mode == SILENT:
        return count - 1 if count > 0 else count
    if mode == FATAL:
        return DELIVERIES_MAX
    return count


class Consumer:
    __slots__ = ("name", "seen_time", "active_time", "pel")

    def __init__(self, name: bytes, now: int) -> None:
        self.name = name
        self.seen_time = now
        self.active_time = -1  # never active yet
        self.pel = PendingMap()  # ID -> Nack (shared with the group)

    def __deepcopy__(self, memo: dict) -> Consumer:
        return copy_attributes(self, Consumer(self.name, 0), ('seen_time', 'active_time', 'pel'), memo)


class ConsumerGroup:
    __slots__ = ("name", "last_id", "entries_read", "pel", "consumers", "_stamps",
                 "created_deps", "created_dot", "floor", "cursors", "watermarks", "acked_sent")

    def __init__(self, name: bytes, last_id: ID = MIN_ID,
                 entries_read: int = ENTRIES_READ_UNKNOWN) -> None:
        self.name = name
        self.last_id = last_id
        self.entries_read = entries_read
        self.pel = PendingMap()  # ID -> Nack
        self.consumers: dict[bytes, Consumer] = {}
        self._stamps = 0
        # multi-region: the creation's dependencies and dot (delete-wins, see crdt/ops.py)
        self.created_deps: dict | None = None
        self.created_dot: tuple | None = None
        # multi-region: "last delivered" is a cursor per origin log, starting at
        # ``floor`` (the ID given at creation or SETID); ``watermarks`` are the
        # replicated XACK watermarks (everything up to them was read and acked
        # at some region); ``acked_sent`` what this region already replicated.
        self.floor: ID = last_id
        self.cursors: dict[int, ID] = {}
        self.watermarks: dict[int, ID] = {}
        self.acked_sent: dict[int, ID] = {}

    def __deepcopy__(self, memo: dict) -> ConsumerGroup:
        return copy_attributes(self, ConsumerGroup(self.name),
                               ('last_id', 'entries_read', 'pel', 'consumers', '_stamps', 'created_deps',
                                'created_dot', 'floor', 'cursors', 'watermarks', 'acked_sent'), memo)

    def cursor(self, origin: int) -> ID:
        """Where ``>`` resumes in one origin log: after local reads and replicated acks."""
        c = self.cursors.get(origin, self.floor)
        w = self.watermarks.get(origin)
        return w if w is not None and w > c else c

    def set_id(self, id_: ID, entries_read: int) -> None:
        """XGROUP SETID (region-local): every origin log restarts after ``id_``."""
        self.last_id = self.floor = id_
        self.entries_read = entries_read
        self.cursors.clear()
        self.watermarks.clear()

    # ------------------------------------------------------------ consumers
    def consumer(self, name: bytes, now: int) -> tuple[Consumer, bool]:
        """The named consumer, created if missing; second value: created."""
        c = self.consumers.get(name)
        if c is not None:
            return c, False
        c = self.consumers[name] = Consumer(name, now)
        return c, True

    def delete_consumer(self, name: bytes) -> int:
        """DELCONSUMER: drop the consumer and its pending entries; returns how many."""
        c = self.consumers.pop(name, None)
        if c is None:
            return 0
        for id_ in c.pel:
            self.pel.pop(id_, None)
        return len(c.pel)

    def sorted_consumers(self) -> list[Consumer]:
        return [self.consumers[k] for k in sorted(self.consumers)]

    # ------------------------------------------------------------ PEL
    def _stamp(self) -> int:
        self._stamps += 1
        return self._stamps

    def deliver(self, id_: ID, consumer: Consumer, now: int) -> Nack:
        """Record a delivery of ``id_`` to ``consumer`` (a fresh read: count 1)."""
        nack = self.pel.get(id_)
        if nack is None:
            nack = self.pel[id_] = Nack(consumer, now, 1, self._stamp())
            consumer.pel[id_] = nack
            return nack
        self.assign(id_, nack, consumer)
        nack.delivery_count = 1
        nack.delivery_time = now
        nack.stamp = self._stamp()
        return nack

    def assign(self, id_: ID, nack: Nack, consumer: Consumer) -> None:
        if nack.consumer is not consumer:
            if nack.consumer is not None:
                nack.consumer.pel.pop(id_, None)
            nack.consumer = consumer
            consumer.pel[id_] = nack

    def touch(self, nack: Nack, when: int) -> None:
        nack.delivery_time = when
        nack.stamp = self._stamp()

    def ack(self, id_: ID) -> bool:
        nack = self.pel.pop(id_, None)
        if nack is None:
            return False
        if nack.consumer is not None:
            nack.consumer.pel.pop(id_, None)
        return True

    def release(self, id_: ID, mode: str, retrycount: int = -1, force: bool = False,
                exists: bool = False) -> bool:
        """XNACK of one ID: move its NACK to the end of the NACK zone; True if released.

        An ID that is not pending is released only with ``force`` and if it is an
        entry of the stream (``exists``): it gets a new unowned NACK counted from 0.
        """
        nack = self.pel.get(id_)
        if nack is None:
            if not (force and exists):
                return False
            nack = self.pel[id_] = Nack(None, 0, 0)
        elif nack.consumer is not None:
            nack.consumer.pel.pop(id_, None)
            nack.consumer = None
        nack.delivery_count = released_count(nack.delivery_count, mode, retrycount)
        self.touch(nack, 0)  # a fresh stamp: last in the zone, released ones keep their order
        return True

    def nacked_count(self) -> int:
        """XINFO's ``nacked-count``: the entries in the NACK zone."""
        return sum(1 for nack in self.pel.values() if nack.consumer is None)

    def by_delivery_time(self) -> list[tuple[ID, Nack]]:
        """PEL entries in Redis's time-ordered PEL list: the NACK zone first (in the order
        the entries were released), then the owned ones, oldest delivery first."""
        return sorted(self.pel.items(),
                      key=lambda kv: (kv[1].consumer is not None, kv[1].delivery_time, kv[1].stamp))


# ---------------------------------------------------------------- counters
def range_has_tombstones(s, start: ID | None, end: ID | None = None) -> bool:
    if not s.length or s.max_deleted_id == MIN_ID:
        return False
    lo = start if start is not None else MIN_ID
    hi = end if end is not None else MAX_ID
    return lo <= s.max_deleted_id <= hi


def estimate_distance(s, id_: ID) -> int:
    """``streamEstimateDistanceFromFirstEverEntry``: entries up to ``id_``, or -1."""
    if not s.entries_added:
        return 0
    if not s.length and id_ <= s.last_id:
        return s.entries_added
    if id_ != MIN_ID and id_ < s.max_deleted_id:
        return ENTRIES_READ_UNKNOWN
    if id_ == s.last_id:
        return s.entries_added
    if id_ > s.last_id:
        return ENTRIES_READ_UNKNOWN
    if s.max_deleted_id == MIN_ID or s.max_deleted_id < s.first_id:
        if id_ < s.first_id:
            return s.entries_added - s.length
        if id_ == s.first_id:
            return s.entries_added - s.length + 1
    return ENTRIES_READ_UNKNOWN


def lag(s, g: ConsumerGroup) -> int | None:
    """``streamReplyWithCGLag``: entries the group has not read yet, None if unknown."""
    if not s.entries_added or not s.length:
        return 0
    if g.last_id < s.first_id and s.max_deleted_id < s.first_id:
        return s.length
    if g.entries_read != ENTRIES_READ_UNKNOWN and not range_has_tombstones(s, g.last_id):
        return s.entries_added - g.entries_read
    read = estimate_distance(s, g.last_id)
    return None if read == ENTRIES_READ_UNKNOWN else s.entries_added - read


def advance(s, g: ConsumerGroup, id_: ID) -> None:
    """Move the group's cursor to a newly delivered ID, keeping entries_read."""
    if (g.entries_read != ENTRIES_READ_UNKNOWN and g.last_id >= s.first_id
            and not range_has_tombstones(s, g.last_id)):
        g.entries_read += 1
    elif s.entries_added:
        g.entries_read = estimate_distance(s, id_)
    g.last_id = id_


# ---------------------------------------------------------------- reads
# A read's ``take(id, fields)``, when given, is asked before each entry is handed out (and
# counts it): False ends the read there.  XREAD/XREADGROUP MAXCOUNT and MAXSIZE, whose
# budget spans every stream of the command, are kept by the caller this way.
Take = Callable[[ID, "list | None"], bool]


def _taken(entries: list, take: Take) -> list:
    """The leading entries ``take`` accepts."""
    for i, (id_, flat) in enumerate(entries):
        if not take(id_, flat):
            return entries[:i]
    return entries


def read_new(s, g: ConsumerGroup, consumer: Consumer, after: ID, count: int,
             noack: bool, now: int, take: Take | None = None) -> list:
    """XREADGROUP ``>``: entries after ``after`` (the group cursor). [(id, flat)]"""
    start = incr(after)
    if start is None:
        return []
    out = s.range(start, MAX_ID, count)
    if take is not None:
        out = _taken(out, take)
    deliver_new(s, g, consumer, [id_ for id_, _flat in out], noack, now)
    return out


def deliver_new(s, g: ConsumerGroup, consumer: Consumer, ids: list[ID], noack: bool,
                now: int) -> None:
    """What handing out ``ids`` (ascending, after the group's cursor) to ``consumer`` changes:
    the cursor and entries-read, and the PEL unless NOACK.  ``read_new`` calls it; a reader
    that takes the entries itself (the reply made from the blocks' memos) calls it too."""
    for id_ in ids:
        if id_ > g.last_id:
            advance(s, g, id_)
        if not noack:
            g.deliver(id_, consumer, now)
            consumer.active_time = now


def read_history(s, g: ConsumerGroup, consumer: Consumer, after: ID, count: int,
                 now: int, take: Take | None = None) -> list:
    """XREADGROUP with an ID: the consumer's own pending entries after it.

    Deleted entries come back as ``(id, None)``; each returned live entry counts
    as a new delivery.
    """
    start = incr(after)
    if start is None:
        return []
    out: list = []
    for id_ in consumer.pel.irange(start, MAX_ID):
        if count and len(out) >= count:
            break
        flat = s.get(id_)
        if take is not None and not take(id_, flat):
            break
        if flat is None:
            out.append((id_, None))
            continue
        nack = consumer.pel[id_]
        nack.delivered_again()
        g.touch(nack, now)
        out.append((id_, flat))
    return out


def first_claimable(s, g: ConsumerGroup, min_idle: int, now: int) -> tuple[bool, int | None]:
    """For XREADGROUP CLAIM: (is an entry idle enough?, oldest delivery time)."""
    for id_, nack in g.by_delivery_time():
        if s.get(id_) is None:
            continue
        return now - nack.delivery_time >= min_idle, nack.delivery_time
    return False, None


def claim_idle(s, g: ConsumerGroup, consumer: Consumer, min_idle: int, count: int,
               now: int, take: Take | None = None) -> list:
    """XREADGROUP CLAIM: idle pending entries, oldest first, moved to ``consumer``.

    Released (XNACKed) entries come first, reported idle for ``now`` milliseconds
    (their delivery time is 0), as Redis reports them.
    Returns [(id, flat, idle_ms, delivery_count_before)].
    """
    out = []
    for id_, nack in g.by_delivery_time():
        idle = now - nack.delivery_time
        if idle < min_idle:
            break
        flat = s.get(id_)
        if flat is None:
            continue
        if take is not None and not take(id_, flat):
            break
        out.append((id_, flat, idle, nack.delivery_count))
        g.assign(id_, nack, consumer)
        nack.delivered_again()
        g.touch(nack, now)
        consumer.active_time = now
        if count and len(out) >= count:
            break
    return out


# ---------------------------------------------------------------- multi-region reads
def read_new_per_origin(s, g: ConsumerGroup, consumer: Consumer, count: int, noack: bool,
                        now: int, take: Take | None = None) -> list:
    """XREADGROUP ``>`` over several origin logs: after each log's own cursor.

    An entry that reaches this region late from another region (with an ID below
    what the group already delivered from other logs) is still above its own
    log's cursor, so it is delivered: ``>`` never skips an entry.
    """
    its = []
    for origin, log in sorted(s.logs.items()):
        start = incr(g.cursor(origin))
        if start is not None:
            its.append(tagged(origin, log.range(start, MAX_ID)))
    out: list = []
    for eid, origin, flat in heapq.merge(*its, key=lambda e: (e[0], e[1])):
        if count and len(out) >= count or take is not None and not take(eid, flat):
            break
        g.cursors[origin] = eid
        if eid > g.last_id:
            advance(s, g, eid)
        if not noack:
            g.deliver(eid, consumer, now)
            consumer.active_time = now
        out.append((eid, flat))
    return out


def has_new_per_origin(s, g: ConsumerGroup) -> bool:
    """Does any origin log hold a live entry after the group's cursor for it?"""
    for origin, log in s.logs.items():
        top = log.last_live()
        if top is not None and top > g.cursor(origin):
            return True
    return False


def ack_watermark(s, g: ConsumerGroup, origin: int) -> ID | None:
    """The new XACK watermark of one origin log, if it moved (Redis Active-Active's rule).

    Everything the group read from the log below its oldest pending entry of that
    log has been acknowledged; that point is worth replicating only when it moved
    past what was already sent.
    """
    log = s.logs.get(origin)
    cursor = g.cursors.get(origin)
    if log is None or cursor is None:
        return None
    pending = [i for i in g.pel.irange(MIN_ID, cursor) if log.get(i) is not None]
    mark: ID = cursor if not pending else decr(pending[0])
    if mark is None or mark <= g.acked_sent.get(origin, g.floor):
        return None
    g.acked_sent[origin] = mark
    return mark
