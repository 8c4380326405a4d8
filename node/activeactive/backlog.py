"""A region's replication backlog and full-resync images: trimming the backlog (by what every
peer acknowledged, its size and its age), what it costs in memory, causal stability, and the
images a peer that lacks trimmed operations gets, installs or joins into its own state.

:class:`Backlog` is a part :class:`node.activeactive.region.ActiveActive` holds (``aa.backlog``),
given the causal log, the hub, the keyspace, the member list, the writes-alone state and,
as a :class:`Members`, the membership part (which peers are live; dropping what waits
from regions the list refuses); ``forget_unlogged`` forgets which causal-log positions
still wait for their operation-log records to reach the OS (ActiveActive's; an image that
replaced the causal log makes them moot).  An image replaces the replicated state but not
what is this region's own: a consumer group keeps its region-local half (consumers, PEL,
cursors) when the image holds the same group (the same creation), :func:`keep_local_groups`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

from crdt import ops
from crdt.causal import CausalLog, Envelope
from crdt.groups import ENTRIES_READ_UNKNOWN
from crdt.join import RegionState, join
from crdt.membership import Membership
from crdt.ops import Keyspace
from crdt.pel import PendingMap
from crdt.sync import LinkState
from node.activeactive.cluster_config import RegionSpec
from node.activeactive.lone_writes import LoneWrites
from node.persistence import snapshot

if TYPE_CHECKING:
    from node.activeactive.hub import ReplicationHub
    from node.region.db import Database

log = logging.getLogger("braid.activeactive")

# what an operation in the backlog costs in memory besides its bytes (backlog_memory)
BACKLOG_OP_BYTES = 300


class Members(Protocol):
    """What the backlog asks of the membership part (node/activeactive/membership.py)."""

    def peers(self) -> list[RegionSpec]:
        """The other live members."""

    def drop_refused_pending(self) -> None:
        """Drop the envelopes waiting here that the member list no longer accepts."""


class Backlog:
    """The backlog and full-resync part of :class:`node.activeactive.region.ActiveActive`."""

    def __init__(self, region: int, causal: CausalLog, hub: ReplicationHub, db: Database, membership: Membership,
                 lone: LoneWrites, members: Members, forget_unlogged: Callable[[], None]) -> None:
        self.region = region
        self.causal = causal
        self.hub = hub
        self.db = db
        self.membership = membership
        self.lone = lone
        self.members = members
        self.forget_unlogged = forget_unlogged
        # the backlog's size in bytes, counted as operations join it (see backlog_bytes)
        self._backlog_bytes = 0
        self._counted: tuple[int, int, Envelope | None] = (0, 0, None)  # (causal.base, causal.end, log[0])

    def trim_backlog(self, max_bytes: int, ttl_s: float, now: float, link_positions: list[int] | None = None) -> int:
        """Drop the oldest operations every peer acknowledged, and any past the backlog's size or age.

        A peer that still lacked one of the latter gets a full resync when it comes back.
        Never drops what has not left yet, nor what a connected link has not sent
        (``link_positions``: absolute causal-log positions of the running links; default
        the hub's).  Returns how many were dropped.
        """
        peers = [p.number for p in self.members.peers()]  # a removed region is waited for no more
        acked = [self.hub.peer_acked.get(p, {}) for p in peers]
        log_, arrivals = self.causal.log, self.hub.arrivals
        size = self.backlog_bytes()
        positions = [link.position for link in self.hub.links.values()] if link_positions is None else link_positions
        # never what has not left yet, nor what a connected peer has not been sent
        stop = min([len(log_), self.hub.sendable_upto() - self.causal.base,
                    *(p - self.causal.base for p in positions)])
        # per origin, the least every peer acknowledged (None: no peer, everything is acknowledged
        # by all of them); worked out once, not once per operation
        by_all = {o: min(a.get(o, 0) for a in acked) for o in set().union(*acked)} if acked else None
        # what every peer acknowledged goes first, counted by the (compiled) causal log; past
        # it, the backlog's size and age may drop more
        k, acked_bytes = self.causal.acked_prefix(by_all, stop)
        size -= acked_bytes
        while k < stop:
            e = log_[k]
            if not (by_all is None or by_all.get(e.origin, 0) >= e.n or (max_bytes and size > max_bytes)
                    or (ttl_s and now - arrivals[k] > ttl_s)):
                break
            size -= len(e.op)
            k += 1
        if k:
            self.hub.trim(k)
            log_ = self.causal.log
            self._backlog_bytes = size
            self._counted = (self.causal.base, self.causal.end, log_[0] if log_ else None)
        return k

    def backlog_memory(self) -> int:
        """What the replication backlog holds in memory: its operations' bytes and, per
        operation, its envelope, its place in the causal log and its arrival time (calibrated
        against ``tracemalloc``)."""
        return self.backlog_bytes() + len(self.causal.log) * BACKLOG_OP_BYTES

    def backlog_bytes(self) -> int:
        """Bytes of the operations in the backlog.  Counted as they join it (each call adds
        the operations appended since the last), not summed over the whole backlog every
        second; counted again only when the log was trimmed or replaced elsewhere (a full
        resync, a snapshot load)."""
        causal = self.causal
        log_, base, end = causal.log, causal.base, causal.end
        counted_base, counted_end, first = self._counted
        if base != counted_base or end < counted_end or (counted_end > base and log_[0] is not first):
            counted_end, self._backlog_bytes = base, 0
        if counted_end < end:
            self._backlog_bytes += sum(len(e.op) for e in log_[counted_end - base:])
        self._counted = (base, end, log_[0] if log_ else None)
        return self._backlog_bytes

    def stable(self) -> dict[int, int]:
        """What every live member has applied (crdt/causal.py: causal stability); a removed
        region holds it back no more."""
        m = self.membership
        return m.stable_past_removals(self.causal.stable(m.stability_regions(), self.hub.peer_reported))

    def collect_garbage(self) -> int:
        """Drop delete contexts every region has seen (crdt/ops.py: collect_garbage)."""
        return ops.collect_garbage(self.db.keys, self.stable())

    def resync_image(self, now_ms: int, digests: bool = True) -> tuple[bytes, dict]:
        """This region's whole state and backlog, for a peer that lacks trimmed operations
        (``digests``: with the histories' digests; an older peer refuses an image holding them)."""
        if self.lone.alone:  # it would carry operations that may not leave yet (node/activeactive/lone_writes.py)
            raise ConnectionAbortedError("this region takes writes alone: a peer that needs a full resync from "
                                         "it gets one once every member answered")
        data = snapshot.encode(self.db.keys, self.causal, 0, now_ms, True, self.region, digests)
        return data, dict(self.causal.vv)

    def adopt_image(self, data: bytes) -> list[Envelope] | None:
        """Take a peer's image as this region's replicated state; keep what is this region's own.

        An image is taken only while this region lacks operations its sender trimmed:
        when two peers send one at once, the second finds nothing missing and is
        refused (None), so the link starts again and catches up from the backlog
        instead of replacing what the first image brought.

        Consumer groups keep their region-local state (consumers, PEL, cursors) when the
        image has the same group (same creation).  Returns the operations this region held
        (its own among them): the caller applies again on top those the image lacks, so
        nothing is lost (``RegionCore.install_image``).
        """
        if self.lone.alone:  # the base of the log would hold operations that may have to be withdrawn
            log.info("refusing a full-resync image while this region takes writes alone")
            return None
        img_keys, img_causal = image_parts(snapshot.decode(data))
        if not any(self.causal.vv.get(o, 0) < n for o, n in img_causal.floor.items()):
            log.info("refusing a full-resync image: nothing it holds is missing from the backlog")
            return None
        if LinkState.image_loses(img_causal.vv, self.causal.floor):
            # dropped here since the handshake: installing it would lose them (crdt/sync.py)
            log.error("refusing a full-resync image that lacks operations this region dropped from its "
                      "backlog (image %s, floor %s)", img_causal.vv, self.causal.floor)
            return None
        old_keys, old_log = self.db.keys, self.causal.log + list(self.causal.pending.values())
        new_keys = img_keys
        keep_local_groups(new_keys, old_keys)
        for key, floor in old_keys.id_floor.items():  # never mint an ID this region minted before
            if floor > new_keys.id_floor.get(key, (0, 0)):
                new_keys.id_floor[key] = floor
        for key, tops in old_keys.highest_added.items():  # what this region received stays received
            mine = new_keys.highest_added.setdefault(key, {})
            for origin, top in tops.items():
                if top > mine.get(origin, (0, 0)):
                    mine[origin] = top
        self.db.replace_keys(new_keys)
        self.causal.take(img_causal)
        self.members.drop_refused_pending()  # the sender's waiting operations came along
        # and the rest of them go too: their own senders send them here in time, and one
        # kept could be an operation its origin lost in a crash of its machine and minted
        # again since (ReplicationHub.handshook); this region's own waiting ones are in
        # the returned log, delivered again
        self.causal.drop_pending()
        self.forget_unlogged()
        self.hub.log_replaced()
        return old_log

    def join_image(self, data: bytes) -> list[Envelope] | None:
        """Join a peer's image into this region's state (crdt/join.py): both regions dropped
        from their backlogs operations the other lacks, so neither image may replace the
        other's state; this region ends holding every operation either held, its own
        region-local state (consumers, PELs, cursors) kept.  Its causal log stays, raised
        to the operations the image brought (``CausalLog.absorb``).  Returns the envelopes
        that waited here for their dependencies, for the caller to deliver again (the join
        may have brought what they wait for); None: refused (nothing changed)."""
        if self.lone.alone:  # the join would carry held operations out with the next image
            log.info("refusing to join a peer's state while this region takes writes alone")
            return None
        img_keys, img_causal = image_parts(snapshot.decode(data))
        mine = RegionState(self.db.keys, dict(self.causal.vv))
        joined = join(mine, RegionState(img_keys, dict(img_causal.vv)), self.db.limits)
        self.db.replace_keys(joined.keys)
        waiting = self.causal.absorb(img_causal)
        self.forget_unlogged()
        self.hub.joined(dict(img_causal.vv))
        return [env for env in waiting if env.n > self.causal.vv.get(env.origin, 0)]


def image_parts(img: snapshot.Snapshot) -> tuple[Keyspace, CausalLog]:
    """An Active-Active image's keyspace and causal log (node/persistence/snapshot.py's
    ``Snapshot`` holds them as ``object``: a standalone region's snapshot has no causal log)."""
    return cast(Keyspace, img.keys), cast(CausalLog, img.causal)


def keep_local_groups(new_keys: Keyspace, old_keys: Keyspace, back_in: int | None = None) -> None:
    """Every group of ``new_keys`` (an image's) keeps its region-local half from the same group
    (same creation) in ``old_keys``; in origin log ``back_in``, if given, its cursor and
    watermark stay the image's."""
    for key, s in new_keys.items():
        old = old_keys.get(key)
        for name, g in s.groups.items():
            og = old.groups.get(name) if old is not None else None
            cursor, mark = (g.cursors.get(back_in), g.watermarks.get(back_in)) if back_in is not None else (None, None)
            keep_local_group_state(g, og if og is not None and og.created_dot == g.created_dot else None)
            if back_in is None:
                continue
            g.cursors, g.watermarks = dict(g.cursors), dict(g.watermarks)
            for table, value in ((g.cursors, cursor), (g.watermarks, mark)):
                if value is None:
                    table.pop(back_in, None)
                else:
                    table[back_in] = value


def keep_local_group_state(g, old) -> None:
    """A group from a resync image: its local half (consumers, PEL, cursors) is this region's."""
    if old is None:  # new here: nobody read it in this region yet
        g.pel, g.consumers, g.cursors, g.acked_sent, g._stamps = PendingMap(), {}, {}, {}, 0
        g.last_id, g.entries_read = g.floor, ENTRIES_READ_UNKNOWN
        return
    g.pel, g.consumers, g.cursors = old.pel, old.consumers, old.cursors
    g.acked_sent, g._stamps = old.acked_sent, old._stamps
    g.last_id, g.entries_read, g.floor = old.last_id, old.entries_read, old.floor
    for origin, mark in old.watermarks.items():
        if mark > g.watermarks.get(origin, (0, 0)):
            g.watermarks[origin] = mark
