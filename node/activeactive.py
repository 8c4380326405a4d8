"""This region's part in an Active-Active database.

It owns the region's causal log (crdt/causal.py) and replication hub
(node/transport/replication.py), publishes every replicated operation the region applies,
and holds what the multi-region resolver (crdt/resolve.py) reads: the ID mode, the
region's number and stride, and the causal log's version vector.  It sees the region
only through the keyspace (``Database``) and the settings: applying another region's
operation, and installing a full-resync image, are the region core's
(node/core.py), which it reaches through the hub's ``on_apply`` / ``on_apply_run`` /
``install_image``.

Membership (crdt/membership.py holds the rules).  The region keeps the agreed member
list (``membership``) and records every change in its cluster file.  It is the
replication hub's gate (:class:`MembershipGate`): the handshake carries the epoch and
the list; a peer with a newer list is believed (every epoch was agreed by every
live member) and its list adopted; a peer that is not a member at this region's
epoch, or was removed, is refused (logged, counted as ``membership_refused``); an
operation of a removed region past its frozen point is dropped - as it arrives, and
when it was already waiting in the causal log for its dependencies (at a promise, a
change, an installed image): applied later, it would bypass the gate - and one from
a region this list does not know restarts the link (the handshake brings the newer list).
A change - agreed here, or adopted - restarts every link, so both ends of each
handshake again at the new epoch.  Writes are taken only while this region is
``active``; a ``joining`` region, once it holds everything its peers held when it
connected (``caught_up``), has itself activated (``node/membership_change.py``).

Taking back its own operations at every start.  A region's data folder may hold less of
its own history than its peers do: operations leave once their log records reached the
OS (node/persistence/oplog.py), so a crashed machine may have lost some that peers hold;
and an operator may start a region from an older copy of its folder (a backup, a
snapshot of a VM, a copy taken while it ran), which no mark file can tell.  Minting
those numbers again would give two operations one dot.  So after *every* start the
region takes no writes until every live member has handshaken with it and it holds
every operation of its own that any of them held at that handshake (they send them
back as any operation a peer lacks, or a full resync brings them):
:meth:`ActiveActive.recovered`.  A member that stays unreachable keeps the region
read-only (``LOADING``) until it comes back or is removed from the database.  Client writes are the
only way this region mints dots, so refusing them (LOADING) is enough.  A peer's
handshake counts what it *applied*; one of this region's operations that waited there
for its dependencies is forgotten by that handshake (``ReplicationHub.handshook``), so
no region keeps a lost operation beside the one minted again under its dot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable

from crdt import ops
from crdt.causal import CausalLog, Envelope
from crdt.groups import ENTRIES_READ_UNKNOWN
from crdt.join import RegionState, join
from crdt.membership import ABORT, ACTIVATE, ACTIVE, ADOPT, COMMIT, FORCE_REMOVE, JOINING, LEAVING, LIVE, \
    REMOVE, REMOVED, WAIT, Change, Membership, MembershipError, Promise, Proposal, Settlement, Standing
from crdt.pel import PendingMap
from crdt.sync import LinkState

from . import opcodec
from .cluster_config import DB_SETTINGS, ClusterConfig, RegionSpec, membership_from_blob
from .membership_change import Connect, MembershipChangeError, agree_with_regions, commit_to_regions, member_lists, \
    standings_from_regions
from .lone_writes import LoneStep, LoneWrites
from .persistence import snapshot
from .persistence.promise import proposal_from_dict, proposal_to_dict
from .transport.admin_types import FlushNotReady
from .transport.replication import ReplicationHub, Transport
from .transport.tls import LinkCredentials

log = logging.getLogger("braid.activeactive")

# Operations other regions must see; the rest (XSETID, consumers, the PEL) stay local.
# a promise whose coordinator neither commits nor aborts it lapses after this long, and its
# voters settle it among themselves (ActiveActive.left_promise)
PROMISE_TIMEOUT_S = 30.0
# what an operation in the backlog costs in memory besides its bytes (backlog_memory)
BACKLOG_OP_BYTES = 300
# a voter settling such a promise asks the other voters again this often until it ends
SETTLE_EVERY_S = 5.0
# a region with no link up asks its peers for their member lists this often
LEARN_EVERY_S = 5.0

REPLICATED = (ops.AddEntry, ops.Trim, ops.DeleteEntries, ops.DeleteKey, ops.CreateGroup,
              ops.DestroyGroup, ops.AckWatermark, ops.ConfigureIdmp, ops.RecordIdmp, ops.FlushKeys)


class ActiveActive:
    def __init__(self, db, config, cluster: ClusterConfig, me: RegionSpec) -> None:
        """``db``: the region's Database (node/db.py); ``config``: its settings."""
        self.db = db
        self.config = config
        self.cluster = cluster
        self.me = me
        # read for every XADD's ID (crdt/resolve.py): attributes, not properties; neither changes
        self.region: int = me.number
        self.stride: int = cluster.stride
        self.mode = cluster.id_mode
        self.membership: Membership = cluster.membership()
        self.active = self.membership.status(me.number) == ACTIVE  # kept with the list (writable)
        self.membership_refused = 0   # handshakes refused: the peer is not a member (or was removed)
        self.membership_dropped = 0   # operations of removed regions past their frozen point, dropped
        self.activation: asyncio.Task | None = None
        self.learning: asyncio.Task | None = None
        self._promised_at = 0.0  # when the promise held now was made (monotonic seconds)
        self.promise_store = None  # where the promise is kept across restarts (the server's data dir)
        self._held_links: set[int] = set()  # links cut while a forced removal of that peer is held
        self._learn_soon = True   # ask the peers for their member lists (at start, after a refusal)
        self.on_purge: Callable[[], None] = lambda: None  # the server wipes its files and stops
        self.admin_tls = None  # set by start(): what this region presents to other regions' admin service
        # set by start(): opens clients of other regions' admin service (node.transport.admin.clients);
        # until then no region is reachable that way
        self.admin_connect: Connect = _no_admin_clients
        self.causal = CausalLog(me.number)
        c = cluster
        tls = None
        if c.tls is not None:  # TlsConfigError (a ValueError) names a file that cannot be used
            tls = LinkCredentials(c.tls.ca, *c.tls.region_pair(me))
        # the region core sets on_apply, on_apply_run and install_image (node/core.py)
        self.hub = ReplicationHub(me.number, c.cluster_id, c.database, c.token, self.causal, _not_attached,
                                  config, tls=tls, names={r.number: r.name for r in c.regions})
        self.hub.gate = MembershipGate(self)
        # (operation-log record, causal-log length once it is safe): links send an
        # operation only after the record that holds it reached the OS (see durable())
        self._unsafe: deque[tuple[int, int]] = deque()
        self.hub.make_image = lambda digests=True: self.resync_image(int(time.time() * 1000), digests)
        # a database setting tuned here that is also a server setting (appendfsync)
        self.on_setting: Callable[[str, str], None] = lambda name, value: None
        # FLUSHALL run by the region core as a client's (logged, replicated); returns how many
        # keys it removed; ValueError: not run (see flush_when_caught_up)
        self.flush_database: Callable[[], int] = _no_flush
        # a snapshot of the region's state taken now, and the log record it holds the state
        # after (the region core's SAVE serialisation: braid-admin backup); set by the core
        self.snapshot_now: Callable[[], tuple[bytes, int]] | None = None
        self.flushes_waiting = 0  # cluster-wide flushes waiting for operations (INFO crdt)
        # the backlog's size in bytes, counted as operations join it (see backlog_bytes)
        self._backlog_bytes = 0
        self._counted = (0, 0, None)  # (causal.base, causal.end, log[0]) when last counted
        # set after a start that may have lost operations peers hold (see recover_own_operations)
        self.recovering = False
        self.machine_crash = False  # the start that recovers followed a crash of the machine
        self._on_recovered: Callable[[], None] = lambda: None
        self.lone = LoneWrites()  # writes taken alone (crdt-lone-writes-after-ms; node/lone_writes.py)

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str, services: Iterable[Callable[[ActiveActive], object]] = (),
                    connect: Connect | None = None, transport: Transport | None = None) -> None:
        """Listen on ``host`` (where the RESP port listens) and dial the peers.  ``transport``:
        what carries the replication links (``GrpcLinks()``, node/transport/grpc_links.py);
        ``services``: the gRPC services served beside them, each made for this region (the
        server gives the admin service, node/transport/admin.py); ``connect``: how this region
        reaches other regions' admin service (membership: learning, activating, settling).
        All are given by the caller (node/server.py) so this module does not import gRPC."""
        if connect is not None:
            self.admin_connect = connect
        if transport is not None:
            self.hub.transport = transport
        await self.hub.serve(host, self.me.repl_port, extra=[make(self) for make in services])
        if self.hub.tls is not None:  # a joining region asks the others to activate it, as braid-admin would
            m = self.hub.tls.material
            self.admin_tls = (m.ca, m.cert, m.key)
        if self.hub.tls is None:
            log.warning("links between regions and the admin service are PLAIN TEXT (tls = false in the "
                        "cluster file): the cluster token and every operation cross the network in clear; "
                        "use a [tls] table anywhere but a loopback playground")
        try:  # SIGHUP re-reads the certificate, key and CA bundle (as braid-admin tls reload does)
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._reload_on_signal)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (InProcessServer) or no signals here
        if self.membership.status(self.region) == REMOVED:
            self.hub.retire()
        self._dial_peers()
        self._watch_join()
        self.hub.on_denied = self._denied
        self.learning = asyncio.get_running_loop().create_task(self._keep_learning())
        self.settling = asyncio.get_running_loop().create_task(self._keep_settling())

    def _denied(self) -> None:
        """A peer refused this region's handshake: perhaps it was removed meanwhile; ask."""
        self._learn_soon = True

    async def _keep_learning(self) -> None:
        """Ask the peers for their member lists at start, after a peer refused this region, and
        every LEARN_EVERY_S while no link is up: a region removed while it was down or cut off
        learns it even from peers that never dial it (and then stops taking writes)."""
        last = -LEARN_EVERY_S
        while not self.hub.retired:
            now = time.monotonic()
            if self._learn_soon or (not self.hub.links and now - last >= LEARN_EVERY_S):
                self._learn_soon = False
                last = now
                await self._learn_membership()
            await asyncio.sleep(0.2)  # how often the conditions above are looked at

    async def _learn_membership(self) -> None:
        """Ask every peer's admin service for its member list and adopt a newer one."""
        try:
            lists = await asyncio.to_thread(member_lists, self.admin_connect, self.cluster,
                                            [p.number for p in self.peers()], self.admin_tls)
        except Exception as e:  # a peer's odd answer must not stop the region
            log.warning("could not ask the peers for their member lists: %s", e)
            return
        for blob in sorted(lists, key=lambda b: -json.loads(b)["epoch"])[:1]:
            try:
                self.adopt(blob)
            except ValueError as e:
                log.warning("a peer's member list was refused: %s", e)

    def _dial_peers(self) -> None:
        """Dial every live member with a higher number (the lower number dials); a removed
        region dials nobody, nor does a region driven without an event loop (the simulations
        deliver operations themselves: a dial task there would never run)."""
        if self.membership.status(self.region) in (None, REMOVED):
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        for peer in self.peers():
            if peer.number > self.me.number:
                self.hub.dial(peer.number, f"{peer.host}:{peer.repl_port}")

    def peers(self) -> list[RegionSpec]:
        """The other live members (active, joining, leaving)."""
        return [r for r in self.cluster.regions if r.number != self.region and
                self.membership.status(r.number) in LIVE]

    async def stop(self) -> None:
        for task in (self.activation, self.learning, self.settling):
            if task is not None:
                task.cancel()
        try:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
        await self.hub.stop()

    def reload_tls(self) -> dict:
        """Re-read this region's certificate, key and CA bundle; links handshake again.
        ValueError (TlsConfigError too): nothing changed."""
        return self.hub.reload_tls()

    def _reload_on_signal(self) -> None:
        try:
            self.reload_tls()
        except ValueError as e:
            log.error("SIGHUP: TLS credentials not reloaded (the ones in use stay): %s", e)

    @property
    def paused(self) -> bool:
        return self.hub.paused

    def peer(self, name: str) -> RegionSpec:
        """Another region of the database, by name (ValueError names the known ones)."""
        spec = self.cluster.region(name)
        if spec.number == self.region:
            raise ValueError(f"{name!r} is this region, not a peer")
        return spec

    def pause(self, peer: str | None = None) -> None:
        """Stop all syncing of this region, or only its link to ``peer`` (writes stay local until resume)."""
        self.hub.pause(None if peer is None else self.peer(peer).number)

    def resume(self, peer: str | None = None) -> None:
        """Resume all links (``peer`` None) or the link to one peer."""
        self.hub.resume(None if peer is None else self.peer(peer).number)

    # ------------------------------------------------------------ the operation log
    def log_started(self) -> None:
        """Everything in the causal log now came from the loaded file: safe to send."""
        self._unsafe.clear()
        self.hub.sendable = self.causal.end

    def logged(self, record: int, end: int | None = None) -> None:
        """Record ``record`` of the operation log holds what the causal log has now (or up to
        absolute position ``end``: an operation of another region is logged before the causal
        log counts it)."""
        end = self.causal.end if end is None else end
        if self._unsafe and self._unsafe[-1][1] > end:
            end = self._unsafe[-1][1]  # a later record never holds less (a reader served inside an apply)
        if end > self.hub.sendable_upto():
            self._unsafe.append((record, end))

    def fsync_interval(self) -> float:
        """Seconds between the fsyncs that follow writes (crdt-repl-fsync-interval-ms)."""
        return int(self.config["crdt-repl-fsync-interval-ms"]) / 1000

    def durable(self, record: int) -> None:
        """Records up to ``record`` reached the OS (node/persistence/oplog.py says when records
        count as safe to send): their operations may leave."""
        unsafe, upto = self._unsafe, None
        while unsafe and unsafe[0][0] <= record:
            upto = unsafe.popleft()[1]
        if upto is not None:
            trace = self.hub.trace
            if trace is not None:
                causal = self.causal
                for e in causal.log[max(0, self.hub.sendable_upto() - causal.base):upto - causal.base]:
                    trace.mark("logged", 0, e.origin, e.n)
            self.hub.sendable = upto
            self.hub.wake()

    # ------------------------------------------------------------ backlog and full resync
    def trim_backlog(self, max_bytes: int, ttl_s: float, now: float, link_positions: list[int] | None = None) -> int:
        """Drop the oldest operations every peer acknowledged, and any past the backlog's size or age.

        A peer that still lacked one of the latter gets a full resync when it comes back.
        Never drops what has not left yet, nor what a connected link has not sent
        (``link_positions``: absolute causal-log positions of the running links; default
        the hub's).  Returns how many were dropped.
        """
        peers = [p.number for p in self.peers()]  # a removed region is waited for no more
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
        if self.lone.alone:  # it would carry operations that may not leave yet (node/lone_writes.py)
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
        img = snapshot.decode(data)
        if not any(self.causal.vv.get(o, 0) < n for o, n in img.causal.floor.items()):
            log.info("refusing a full-resync image: nothing it holds is missing from the backlog")
            return None
        if LinkState.image_loses(img.causal.vv, self.causal.floor):
            # dropped here since the handshake: installing it would lose them (crdt/sync.py)
            log.error("refusing a full-resync image that lacks operations this region dropped from its "
                      "backlog (image %s, floor %s)", img.causal.vv, self.causal.floor)
            return None
        old_keys, old_log = self.db.keys, self.causal.log + list(self.causal.pending.values())
        new_keys = img.keys
        _keep_local_groups(new_keys, old_keys)
        for key, floor in old_keys.id_floor.items():  # never mint an ID this region minted before
            if floor > new_keys.id_floor.get(key, (0, 0)):
                new_keys.id_floor[key] = floor
        for key, tops in old_keys.highest_added.items():  # what this region received stays received
            mine = new_keys.highest_added.setdefault(key, {})
            for origin, top in tops.items():
                if top > mine.get(origin, (0, 0)):
                    mine[origin] = top
        self.db.keys = new_keys
        self.causal.take(img.causal)
        self._drop_refused_pending()  # the sender's waiting operations came along
        # and the rest of them go too: their own senders send them here in time, and one
        # kept could be an operation its origin lost in a crash of its machine and minted
        # again since (ReplicationHub.handshook); this region's own waiting ones are in
        # the returned log, delivered again
        self.causal.drop_pending()
        self._unsafe.clear()
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
        img = snapshot.decode(data)
        mine = RegionState(self.db.keys, dict(self.causal.vv))
        joined = join(mine, RegionState(img.keys, dict(img.causal.vv)), self.db.limits)
        self.db.keys = joined.keys
        waiting = self.causal.absorb(img.causal)
        self._unsafe.clear()
        self.hub.joined(dict(img.causal.vv))
        return [env for env in waiting if env.n > self.causal.vv.get(env.origin, 0)]

    # ------------------------------------------------------------ operations
    def publish(self, op: ops.Op) -> Envelope | None:
        """Send an operation this region applied; returns its envelope (None: it stays here).
        The operation log records the envelope's bytes: encoded once, for the wire and the file."""
        if isinstance(op, REPLICATED):
            return self.hub.issue(opcodec.encode(op))
        return None

    def publish_add(self, key: bytes, origin: int, id_: tuple[int, int], fields: list) -> Envelope:
        """:meth:`publish` of ``AddEntry(key, origin, id_, fields)`` (an XADD without IDMP), given
        its parts (node/db.py: ``Database.add_plain``)."""
        return self.hub.issue(opcodec.encode_plain_add(key, origin, id_, fields))

    # ------------------------------------------------------------ database settings
    def tune(self, database: str, name: str, value: str) -> None:
        """Change a database setting here and in this region's cluster file (ValueError if invalid)."""
        if database != self.cluster.database:
            raise ValueError(f"no database named {database!r} (this cluster's database is "
                             f"{self.cluster.database!r})")
        if name not in DB_SETTINGS:
            raise ValueError(f"unknown database setting {name!r} (known: {', '.join(DB_SETTINGS)})")
        attr, check = DB_SETTINGS[name]
        try:
            value = check(value)
        except ValueError as e:
            raise ValueError(f"{name} {e}") from None
        before = getattr(self.cluster, attr)
        setattr(self.cluster, attr, value)
        try:
            self.cluster.save()  # first on disk, so that the setting survives a restart
        except OSError as e:
            setattr(self.cluster, attr, before)
            raise ValueError(f"cannot record the setting in {self.cluster.path}: {e.strerror}") from None
        if name == "crdt_xadd_id_uniqueness_mode":
            self.mode = value
        else:
            self.on_setting(name, value)

    # ------------------------------------------------------------ the cluster-wide flush
    async def flush_when_caught_up(self, database: str, context: dict[int, int], timeout_s: float,
                                   poll_s: float = 0.01) -> tuple[int, dict[int, int]]:
        """braid-admin flush: wait until this region has applied every operation ``context``
        counts (braid-admin sends the pointwise maximum of every region's version vector), then
        flush as a FLUSHALL sent here would.  Every entry acknowledged at any region before
        braid-admin read the vectors is then removed everywhere; writes concurrent with the
        flush survive (observed-remove).  Returns (keys removed, version vector after).
        ValueError: another database; FlushNotReady: still lacking operations at the deadline
        (nothing flushed)."""
        if database != self.cluster.database:
            raise ValueError(f"no database named {database!r} (this cluster's database is "
                             f"{self.cluster.database!r})")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if self.missing(context):
            self.flushes_waiting += 1
            try:
                while self.missing(context):
                    if loop.time() >= deadline:
                        raise FlushNotReady(f"nothing flushed: after {timeout_s:g}s region {self.me.name} still "
                                            f"lacks {self.describe_missing(context)}"
                                            + (" (its replication is paused)" if self.paused else ""))
                    await asyncio.sleep(poll_s)  # polled: operations arrive on this loop, between polls
            finally:
                self.flushes_waiting -= 1
        removed = self.flush_database()
        return removed, dict(self.causal.vv)

    def missing(self, context: dict[int, int]) -> dict[int, tuple[int, int]]:
        """Per origin: (operations applied here, operations ``context`` counts) where fewer."""
        vv = self.causal.vv
        return {o: (vv.get(o, 0), n) for o, n in context.items() if vv.get(o, 0) < n}

    def describe_missing(self, context: dict[int, int]) -> str:
        names = {r.number: r.name for r in self.cluster.regions}
        return ", ".join(f"operations {have + 1}..{want} of {names.get(o, f'region {o}')}"
                         for o, (have, want) in sorted(self.missing(context).items()))

    def cluster_toml(self) -> str:
        """The cluster file this region runs with, token left out."""
        return "\n".join(line for line in self.cluster.to_toml().splitlines() if not line.startswith("token"))

    # ------------------------------------------------------------ status (INFO crdt, braid-admin)
    def unstable_ops(self) -> dict[int, int]:
        """Per other region: how many operations applied here it is not yet known to have
        applied (crdt/causal.py's ``seen``).  Causal stability waits for the largest of
        these, and with it IDMP maps past their size and delete contexts (both kept until
        every region has applied what they guard)."""
        vv = self.causal.vv
        out = {}
        for r in self.peers():
            view = self.causal.view(r.number, self.hub.peer_reported.get(r.number))
            out[r.number] = sum(max(n - view.get(o, 0), 0) for o, n in vv.items())
        return out

    def peer_lag(self, number: int, now: float) -> tuple[int, float]:
        """(operations held here that region ``number`` has not acknowledged, age in ms of the
        oldest of them), whatever its link's state: a running link's own count, else what the
        peer last acknowledged (kept across reconnections) against the backlog, so the lag of
        a paused or lost peer keeps growing (metrics, node/metrics.py).  Operations already
        trimmed from the backlog are not counted (the peer will get a full resync)."""
        link = self.hub.links.get(number)
        if link is not None and not self.hub.is_cut(number):
            return link.lag(now)
        acked = self.hub.peer_acked.get(number, {})
        log_, arrivals = self.causal.log, self.hub.arrivals
        behind, oldest = 0, None
        for i, e in enumerate(log_):
            if e.origin != number and e.n > acked.get(e.origin, 0):
                behind += 1
                if oldest is None:
                    oldest = i
        return behind, (now - arrivals[oldest]) * 1000 if oldest is not None else 0.0

    def metadata_sizes(self) -> dict:
        """What waits for causal stability: IDMP maps (keys holding them, producers, iids,
        dropped keys' maps included) and delete contexts."""
        keys = self.db.keys
        maps = [s.idmp for k in keys.idmp_keys() if (s := keys.get(k)) is not None and s.idmp.producers]
        maps += list(keys.idmp_kept.values())
        return {"idmp_keys": len(maps), "idmp_producers": sum(m.pids_tracked for m in maps),
                "idmp_iids_tracked": sum(m.iids_tracked for m in maps),
                "delete_contexts": len(keys.key_contexts) + len(keys.group_contexts)}

    def status(self) -> dict:
        """This region's replication state; field names are admin.proto's RegionStatus."""
        now = time.monotonic()
        unstable = self.unstable_ops()
        links = []
        for peer in self.peers():
            link = self.hub.links.get(peer.number)
            state = ("paused" if self.hub.is_cut(peer.number) else "fork" if peer.number in self.hub.forks
                     else "down" if link is None else "merging" if link.merging
                     else "conflict" if link.conflict else "up")
            behind, age_ms = self.peer_lag(peer.number, now)  # a paused or lost peer's lag keeps growing
            links.append({"peer": peer.name, "number": peer.number, "state": state,
                          "lag_ops": behind, "lag_ms": age_ms, "unstable_ops": unstable[peer.number],
                          "peer_own_ops": self.hub.peer_acked.get(peer.number, {}).get(peer.number, 0)})
        held, target = self.catch_up_progress()
        members = [{"name": r.name, "number": r.number, "status": r.status, "host": r.host, "port": r.port,
                    "repl_port": r.repl_port, "frozen": r.frozen} for r in self.cluster.regions]
        return {
            "name": self.me.name, "number": self.region, "cluster_id": self.cluster.cluster_id,
            "database": self.cluster.database, "id_mode": self.mode, "paused": self.paused,
            "vv": dict(self.causal.vv), "pending": len(self.causal.pending), "links": links,
            "keys": len(self.db.keys), "refused_handshakes": self.hub.refused,
            "resp_address": f"{self.me.host}:{self.me.port}",
            "backlog_ops": len(self.causal.log), "backlog_trimmed": self.causal.base,
            "resyncs_sent": self.hub.resyncs_sent, "resyncs_received": self.hub.resyncs_received,
            "backlog_bytes": self.backlog_bytes(), **self.metadata_sizes(),
            "stability_held_by": [r.name for r in self.peers() if unstable.get(r.number)],
            "epoch": self.membership.epoch, "members": members, "writable": self.writable,
            "catch_up_held": held, "catch_up_target": target, "membership_refused": self.membership_refused,
            "membership_dropped": self.membership_dropped,
            "heads": self.causal.held_heads(), "history_forks": self.hub.history_forks,
            "state_joins": self.hub.joins,
        }

    def info_lines(self) -> list[str]:
        st = self.status()
        lines = [
            f"crdt_region:{st['number']}",
            f"crdt_region_name:{st['name']}",
            f"crdt_cluster_id:{st['cluster_id']}",
            f"crdt_xadd_id_uniqueness_mode:{st['id_mode']}",
            f"crdt_replication:{'paused' if st['paused'] else 'active'}",
            "crdt_vv:" + ",".join(f"{o}={n}" for o, n in sorted(st["vv"].items())),
            "crdt_history:" + ",".join(f"{o}={d:016x}" for o, d in sorted(st["heads"].items())),
            f"crdt_history_forks:{st['history_forks']}",
            f"crdt_pending:{st['pending']}",
            f"crdt_refused_handshakes:{st['refused_handshakes']}",
            f"crdt_link_tls:{'mutual' if self.hub.tls is not None else 'off'}",
            f"crdt_denied_handshakes:{self.hub.denied}",
            f"crdt_backlog_ops:{st['backlog_ops']}",
            f"crdt_backlog_trimmed:{st['backlog_trimmed']}",
            f"crdt_backlog_bytes:{st['backlog_bytes']}",
            f"crdt_full_resyncs_sent:{st['resyncs_sent']}",
            f"crdt_full_resyncs_received:{st['resyncs_received']}",
            f"crdt_state_joins:{st['state_joins']}",
            f"crdt_link_protocol_errors:{self.hub.protocol_errors}",
            f"crdt_link_stalls:{self.hub.stalls}",
            f"crdt_relayed_ops:{self.hub.relayed}",
            f"crdt_duplicate_ops:{self.hub.duplicates}",
            f"crdt_forgotten_waiting_ops:{self.hub.forgotten_at_handshake}",
            f"crdt_frames_sent:{self.hub.frames_sent}",
            f"crdt_frames_received:{self.hub.frames_received}",
            f"crdt_delete_contexts:{st['delete_contexts']}",
            f"crdt_idmp_keys:{st['idmp_keys']}",
            f"crdt_idmp_producers:{st['idmp_producers']}",
            f"crdt_idmp_iids_tracked:{st['idmp_iids_tracked']}",
            f"crdt_stability_held_by:{','.join(st['stability_held_by'])}",
            f"crdt_membership_epoch:{st['epoch']}",
            f"crdt_member_status:{self.membership.status(self.region) or 'none'}",
            f"crdt_membership_refused:{st['membership_refused']}",
            f"crdt_membership_dropped_ops:{st['membership_dropped']}",
            f"crdt_flushes_waiting:{self.flushes_waiting}",
            f"crdt_recovering:{int(self.recovering and not self.recovered())}",
            *self.lone.info_lines(),
        ]
        if self.membership.status(self.region) == JOINING:
            lines.append(f"crdt_catch_up:{st['catch_up_held']}/{st['catch_up_target']}")
        for link in st["links"]:
            line = f"crdt_peer_{link['number']}:name={link['peer']},link={link['state']}"
            if link["state"] == "up":
                line += f",lag_ops={link['lag_ops']},lag_ms={link['lag_ms']:.0f}"
            line += f",unstable_ops={link['unstable_ops']}"
            lines.append(line)
        return lines


    # ------------------------------------------------------------ recovery after a machine crash
    def recover_own_operations(self, on_recovered: Callable[[], None], machine_crash: bool = False) -> None:
        """At every start, its peers may hold operations of this region its folder lacks (a
        crash of the machine lost the unsynced tail, ``machine_crash``; or the folder is an
        older copy of itself); minting their dots again would give two operations one dot.
        So the region takes no writes until every live member handshook with it and it
        holds every operation of its own any of them held then (they send them back, as any
        operation a peer lacks; or a full resync brings them): :meth:`recovered`.  A peer
        that stays unreachable keeps it read-only (``LOADING``) until it comes back or is
        removed from the database.  ``on_recovered`` is told once (the log's mark)."""
        self.recovering = True
        self.machine_crash = machine_crash
        self._on_recovered = on_recovered
        if machine_crash:
            log.warning("region %s may have lost operations in a crash of its machine: it takes writes again "
                        "once every peer has told it the last of its own operations it holds, and it holds them",
                        self.me.name)
        elif self.peers():
            log.info("region %s takes writes once every peer has told it the last of its own operations it "
                     "holds, and it holds them", self.me.name)

    def recovery_waits_for(self) -> list[RegionSpec]:
        """The live members this region has not yet heard from since it started."""
        return [p for p in self.peers() if p.number not in self.hub.handshake_vv]

    def recovered(self) -> bool:
        """Has a recovering region heard from every live member and taken back its own operations?"""
        if not self.recovering:
            return True
        if self.recovery_waits_for():
            return False
        if self.causal.vv.get(self.region, 0) < self.own_held_elsewhere() or self.own_history_forked():
            return False
        self.recovering = False
        log.log(logging.WARNING if self.machine_crash else logging.INFO,
                "region %s holds its own operations its peers held (up to %d): it takes writes",
                self.me.name, self.causal.vv.get(self.region, 0))
        self._on_recovered()
        return True

    def own_held_elsewhere(self) -> int:
        """The most of this region's own operations any live member held at its latest handshake."""
        live = {p.number for p in self.peers()}
        return max((vv.get(self.region, 0) for p, vv in self.hub.last_handshake_vv.items() if p in live),
                   default=0)

    def lone_step(self, now_ms: int) -> LoneStep | None:
        """What to do about writes taken alone now (node/lone_writes.py)."""
        after_ms = int(self.config["crdt-lone-writes-after-ms"])
        if after_ms <= 0 and not self.lone.alone:
            return None  # (and the start gate is left to the writes that ask it, as without the setting)
        held = self.own_held_elsewhere()
        return self.lone.step(now_ms, after_ms,
                              self.recovering and not self.recovered(), bool(self.recovery_waits_for()),
                              self.causal.vv.get(self.region, 0) < held, held, bool(self.own_history_forked()))

    def begin_alone(self, image: bytes | None) -> None:
        """Take writes alone from now on (``image``: the state now; None: resuming a period
        a replay reopened); what is applied from now on stays here until confirmed."""
        lone = self.lone
        if image is not None:
            lone.confirmed = self.causal.vv.get(self.region, 0)
            lone.image = image
            lone.ops, lone.first_minted = [], None
            lone.periods += 1
            self.hub.hold_at = self.causal.end
        self.recovering = False
        lone.waiting_since = None
        held = ", ".join(p.name for p in self.recovery_waits_for())
        log.warning("region %s takes writes alone (crdt-lone-writes-after-ms): %s did not answer. Its writes stay "
                    "here until every member has answered; one that holds operations of this region above %d "
                    "makes it withdraw them and issue them again under new numbers", self.me.name, held or "a member",
                    lone.confirmed)

    def end_alone(self) -> None:
        """Every member answered and none held more of this region's operations: what was held
        leaves.  Or one held more and nothing was minted alone: the region takes those back
        before it writes again."""
        lone = self.lone
        if lone.first_minted is None and self.own_held_elsewhere() > lone.confirmed:
            log.warning("region %s: a member holds operations of its own above %d, and it sent none alone: it "
                        "takes them back before it takes writes again", self.me.name, lone.confirmed)
            self.recovering = True
        else:
            log.warning("region %s: every member answered and none holds operations of its own above %d: the %d "
                        "operations it took alone leave for the other regions", self.me.name, lone.confirmed,
                        len(lone.ops))
        lone.confirmed, lone.image, lone.ops, lone.first_minted = None, None, [], None
        self.hub.hold_at = None
        self.hub.refuse_own = False
        self.hub.wake()

    def withdraw_alone(self) -> list[Envelope]:
        """Go back to the state this region had when it began to take writes alone: its own
        operations since then wait to be issued again (``lone.reissue``); returns the other
        regions' operations it applied since, for the caller to apply again on top (none of
        them depends on a withdrawn one: nothing held left).  Consumer groups keep their
        region-local state where the group is the same (same creation), as with an image."""
        lone = self.lone
        img = snapshot.decode(lone.image)
        since = self.causal.log[self.hub.hold_at - self.causal.base:]
        # in this region's own log each group goes back where it was: the operations taken
        # back put entries below those read alone, and `>` must not skip them
        _keep_local_groups(img.keys, self.db.keys, back_in=self.region)
        self.db.keys = img.keys
        self.causal.take(img.causal)
        self.causal.drop_pending()  # their senders send them again
        self.hub.arrivals = [time.monotonic()] * len(self.causal.log)
        log.warning("region %s withdraws the %d operations it took alone: region(s) %s hold operations of this "
                    "region above %d; it takes those back, then issues its own again under new numbers",
                    self.me.name, len(lone.ops),
                    ", ".join(str(p) for p, vv in sorted(self.hub.last_handshake_vv.items())
                              if vv.get(self.region, 0) > lone.confirmed) or "another", lone.confirmed)
        lone.reissue, lone.reissue_base = lone.ops, lone.confirmed
        lone.withdrawals += 1
        lone.withdrawn_ops += len(lone.ops)
        lone.confirmed, lone.image, lone.ops, lone.first_minted = None, None, [], None
        self.hub.hold_at = None
        self.hub.refuse_own = False
        self.drop_own_forks()
        self.recovering = True
        return [env for env in since if env.origin != self.region]

    def note_lone(self, own: list) -> None:
        """Operations this region applied while alone (``(op, envelope or None, sent)`` as a
        command resolved them), noted to be withdrawn if need be; once one was sent (stamped
        with a number), the peers' operations of this region's origin are another history."""
        lone = self.lone
        lone.ops.extend(op if type(op) is bytes else opcodec.encode(op) for op, _env, _sent in own)
        if lone.first_minted is None:
            minted = next((env.n for _op, env, _sent in own if env is not None), None)
            if minted is not None:
                lone.first_minted = minted
                self.hub.refuse_own = True

    def drop_own_forks(self) -> None:
        """Forget the forks links found in this region's own history (it withdrew what forked)."""
        for peer, found in list(self.hub.forks.items()):
            rest = [f for f in found if f.origin != self.region]
            if rest:
                self.hub.forks[peer] = rest
            else:
                del self.hub.forks[peer]

    def own_history_forked(self) -> list:
        """The forks a link found in this region's own history (crdt/causal.py): a peer holds
        other operations under numbers this region minted - e.g. a folder restored from a copy
        taken before a salvage cut what the copy holds.  Minting on would only deepen it."""
        if not self.hub.forks:
            return []
        return [f for found in self.hub.forks.values() for f in found if f.origin == self.region]

    # ------------------------------------------------------------ membership
    @property
    def writable(self) -> bool:
        """May clients write here?  Only an active member (a joining one once it caught up),
        and after a crash of its machine only once it recovered.  Asked before every write
        command: the common case is two attributes."""
        if self.recovering and not self.recovered():
            return False
        if self.hub.forks and self.own_history_forked():
            return False
        if self.lone.alone and self.own_held_elsewhere() > self.lone.confirmed:
            return False  # withdrawing what it took alone (the cron's next step)
        if self.active:
            return True
        return self.membership.status(self.region) == JOINING and self.caught_up()

    def write_refusal(self) -> str:
        """The error a write gets while this region may not take writes."""
        status = self.membership.status(self.region)
        forked = self.own_history_forked()
        lone = self.lone
        if (forked or lone.reissue or (lone.alone and self.own_held_elsewhere() > lone.confirmed)) \
                and (lone.alone or lone.reissue) and status in (ACTIVE, JOINING):
            return ("LOADING this region took writes alone and another region holds operations of this region "
                    "it lacks: it takes them back, then issues its own writes again under new numbers "
                    f"({len(lone.reissue) or len(lone.ops)} operations)")
        if forked and status in (ACTIVE, JOINING):
            f = forked[0]
            return (f"READONLY another region holds other operations of this region under its numbers (from "
                    f"operation {f.n}): this region takes no writes until an operator resolves it (see "
                    "docs/active-active.md, 'Histories and forks')")
        if self.recovering and status in (ACTIVE, JOINING):  # a leaving or removed one takes none anyway
            waiting = ", ".join(p.name for p in self.recovery_waits_for())
            why = "restarted after a crash of its machine" if self.machine_crash else "is starting"
            return (f"LOADING this region {why} and is taking back its own operations from its peers" +
                    (f" (waiting for {waiting})" if waiting else "") +
                    ": it accepts writes once every peer answered")
        if status == JOINING:
            held, target = self.catch_up_progress()
            return (f"LOADING this region is joining the database and catching up ({held} of {target} "
                    "operations): it accepts writes once it holds everything its peers had")
        if status == LEAVING:
            return "READONLY this region is leaving the database: write to another region"
        return (f"READONLY this region was removed from the database (membership epoch {self.membership.epoch}): "
                "write to another region")

    def caught_up(self) -> bool:
        """A joining region holds everything each live peer held when they first handshook."""
        held, target = self.catch_up_progress()
        waiting = [p.number for p in self.peers() if self.membership.status(p.number) in (ACTIVE, LEAVING)]
        if any(p not in self.hub.handshake_vv for p in waiting):
            return False
        return held >= target

    def catch_up_progress(self) -> tuple[int, int]:
        """(operations held, operations to hold) of what the peers held at their handshakes."""
        target: dict[int, int] = {}
        for p, vv in self.hub.handshake_vv.items():
            for o, n in vv.items():
                if o != self.region and n > target.get(o, 0):
                    target[o] = n
        vv = self.causal.vv
        return sum(min(vv.get(o, 0), n) for o, n in target.items()), sum(target.values())

    # the clock promises are timed by (monotonic seconds; the simulation sets its virtual one)
    membership_clock: Callable[[], float] = staticmethod(time.monotonic)
    settling: asyncio.Task | None = None  # settles promises their coordinators left (start)
    _settle_soon = False  # a coordinator's abort came for a promise reported to a settling voter

    def promise(self, p: Proposal, now: float | None = None) -> Promise:
        """A voter's answer to a proposed change (crdt/membership.py); a removal also says
        how far this region holds the removed region's operations.  A promise left behind by
        a coordinator that never came back lapses after PROMISE_TIMEOUT_S when another
        proposal comes (safe: a commit needs the promise it commits), and is settled with
        the other voters meanwhile (:meth:`left_promise`)."""
        now = self.membership_clock() if now is None else now
        held_promise = self.membership.promised
        if held_promise is not None and held_promise != p and now - self._promised_at > PROMISE_TIMEOUT_S:
            log.warning("the promise for epoch %d (%s of region %d) lapsed: its coordinator never committed "
                        "nor aborted it (a forced removal's hold on that region's operations stays until its "
                        "voters settle it or an epoch does)", held_promise.epoch, held_promise.change.kind,
                        held_promise.change.number)
            self.membership.lapse(held_promise)  # a forced removal's hold stays (crdt/membership.py)
        held = self.causal.vv.get(p.change.number, 0)
        answer = self.membership.promise(p, held)
        if answer.ok and held_promise != p:
            self._promised_at = now
        self._store_promise()  # on disk before the answer leaves (a lapse, a promise)
        if answer.ok and p.change.kind == FORCE_REMOVE:
            self._hold_link(p.change.number)
            self._drop_refused_pending()
        return answer

    def _hold_link(self, number: int) -> None:
        """Cut the link to a region being force-removed: take nothing more of it (the gate also
        drops its operations relayed by others past the hold)."""
        self._held_links.add(number)
        self.hub.pause(number)

    def _release_links(self) -> None:
        """Links cut for holds no longer in force come back (the removal was aborted, or another
        change made the epoch)."""
        for number in list(self._held_links):
            if number not in self.membership.holding:
                self._held_links.discard(number)
                if self.membership.status(number) in LIVE:
                    self.hub.resume(number)

    def abort(self, p: Proposal, settled: bool = False) -> None:
        """Give ``p`` up: its coordinator aborted it, or (``settled``) this region's settlement
        did.  A promise this region reported to a settling voter is not given up on its
        coordinator's word: it is settled with the voters at once instead."""
        ended = self.membership.abort(p, settled)
        self._store_promise()
        self._release_links()
        if not ended:
            log.warning("the abort of the %s of region %d (epoch %d) came after this region told a voter "
                        "settling it that it holds its promise: it settles it with the voters instead",
                        p.change.kind, p.change.number, p.epoch)
            self._settle_soon = True

    # ------------------------------------------------------------ settling a promise its coordinator left
    def left_promise(self, now: float | None = None) -> Proposal | None:
        """The proposal to settle with the other voters now, if any: the promise held, once its
        coordinator had PROMISE_TIMEOUT_S to commit or abort it (from the promise, or from this
        region's start), or at once after a coordinator's abort this region could not take;
        backing none, a promise that lapsed here (its hold stays until it is settled)."""
        m = self.membership
        p = m.left_promise()
        if p is None:
            return None
        now = self.membership_clock() if now is None else now
        if p == m.promised and not self._settle_soon and now - self._promised_at <= PROMISE_TIMEOUT_S:
            return None
        return p

    def standing(self, p: Proposal) -> Standing:
        """Where this region stands on ``p``, asked by a voter settling it (itself included);
        what the answer binds it to (crdt/membership.py) is on disk before the answer leaves."""
        m = self.membership
        if m.promised is not None and m.promised.change.kind == REMOVE and not m.answered:
            # kept by a version that did not keep ``answered``: a graceful removal's voter answers
            # every operation of the leaver it holds, and a leaver takes no writes
            m.answered = self.causal.vv.get(m.promised.change.number, 0)
        before = self._promise_state()
        answer = m.standing(p)
        if self._promise_state() != before:
            self._store_promise()
        return answer

    def settle(self, p: Proposal, standings: dict[int, Standing]) -> Settlement:
        """Decide ``p`` from where its voters stand (``standings``: voter -> its answer, this
        region's own among them) and apply the outcome here: commit it, abort it, or ask the
        peers for the newer list a voter holds.  The caller sends a commit on to the other
        voters."""
        m = self.membership
        if m.promised != p:
            return Settlement(WAIT, reason="this region no longer holds its promise")
        settlement = m.settle(p, standings)
        what = f"the {p.change.kind} of region {p.change.number} for epoch {p.epoch}"
        if settlement.outcome == COMMIT:
            log.warning("settled %s with its voters: every one holds its promise, so it is committed%s", what,
                        f" (frozen at {settlement.frozen})" if p.change.kind in (REMOVE, FORCE_REMOVE) else "")
            self.commit(p, settlement.frozen)
        elif settlement.outcome == ABORT:
            log.warning("settled %s with its voters: aborted (%s)", what, settlement.reason)
            self.abort(p, settled=True)
        elif settlement.outcome == ADOPT:
            log.warning("settling %s: %s; this region takes the newer list", what, settlement.reason)
            self._learn_soon = True  # the learning task asks the peers for their lists
        else:
            log.info("cannot settle %s yet: %s", what, settlement.reason)
        if settlement.outcome != WAIT:
            self._settle_soon = False
        return settlement

    async def _keep_settling(self) -> None:
        """Settle a promise its coordinator left (:meth:`left_promise`) with the other voters,
        asking again every SETTLE_EVERY_S until it ends."""
        while not self.hub.retired:
            p = self.left_promise()
            if p is None:
                await asyncio.sleep(0.5)  # how often a promise is looked at
                continue
            try:
                await self._settle_with_voters(p)
            except Exception as e:  # a peer's odd answer must not stop the region
                log.warning("could not settle the membership promise for epoch %d: %s", p.epoch, e)
            await asyncio.sleep(SETTLE_EVERY_S)

    async def _settle_with_voters(self, p: Proposal) -> None:
        others = [n for n in self.membership.voters(p.change) if n != self.region]
        mine = self.standing(p)
        theirs = await asyncio.to_thread(standings_from_regions, self.admin_connect, self.cluster, p, others,
                                         self.admin_tls)
        settlement = self.settle(p, {**theirs, self.region: mine})
        if settlement.outcome == COMMIT:
            unreached = await asyncio.to_thread(commit_to_regions, self.admin_connect, self.cluster, p,
                                                settlement.frozen, others, self.admin_tls)
            if unreached:
                log.info("the settled commit of epoch %d did not reach %s: each settles it itself or takes the "
                         "list at its next handshake", p.epoch, "; ".join(unreached))

    # ------------------------------------------------------------ the promise on disk
    def attach_promise_store(self, store) -> None:
        """Keep the promise in ``store`` (``save(state | None)``, ``load()``), and take back the
        one stored before a restart (node/persistence/promise.py)."""
        self.promise_store = store
        state = store.load()
        if not state or int(state.get("epoch", 0)) != self.membership.epoch:
            return  # none, or the membership moved on meanwhile: the outcome is known
        m = self.membership
        m.holding = {int(o): int(n) for o, n in state.get("holding", {}).items()}
        if state.get("promised"):
            m.promised = proposal_from_dict(state["promised"])
            # settled with the other voters PROMISE_TIMEOUT_S after the restart, if its coordinator
            # has not ended it by then
            self._promised_at = self.membership_clock()
            # (a file written before ``answered`` was kept: a forced removal's voter answered its
            # hold; a graceful removal's answer is read when a settling voter asks, see standing)
            m.answered = int(state.get("answered", m.holding.get(m.promised.change.number, 0)))
            m.reported = bool(state.get("reported", False))
        m.lapsed = {q.ballot: (q, int(x["answered"]), bool(x["reported"]))
                    for x in state.get("lapsed", ()) for q in (proposal_from_dict(x["proposal"]),)}
        m.refusing = {(int(b[0]), int(b[1])) for b in state.get("refusing", ())}
        for number in m.holding:
            self._hold_link(number)
        log.warning("restarted with a membership promise (%s) and holds %s", m.promised, m.holding)

    def _promise_state(self) -> dict | None:
        """What the promise store keeps (None: nothing)."""
        m = self.membership
        if m.promised is None and not m.holding and not m.lapsed and not m.refusing:
            return None
        return {"epoch": m.epoch,
                "promised": None if m.promised is None else proposal_to_dict(m.promised),
                "answered": m.answered, "reported": m.reported,
                "holding": {str(o): n for o, n in m.holding.items()},
                "lapsed": [{"proposal": proposal_to_dict(q), "answered": answered, "reported": reported}
                           for q, answered, reported in m.lapsed.values()],
                "refusing": [list(b) for b in sorted(m.refusing)]}

    def _store_promise(self) -> None:
        if self.promise_store is not None:
            self.promise_store.save(self._promise_state())

    def commit(self, p: Proposal, frozen: int) -> None:
        """Apply an agreed change (MembershipError: this region did not promise it)."""
        before = Membership(self.membership.stride, self.membership.epoch, dict(self.membership.members),
                            dict(self.membership.frozen))
        endpoint = {p.change.number: p.change.endpoint} if p.change.endpoint else {}
        self.membership.commit(p, frozen)
        log.warning("membership epoch %d: %s of region %d%s", p.epoch, p.change.kind, p.change.number,
                    f" ({p.change.name})" if p.change.name else "")
        self._membership_changed(before, endpoint)

    def adopt(self, blob: bytes) -> bool:
        """Take a peer's newer member list (from a handshake, or braid-admin); returns whether it
        was newer.  ValueError: it cannot be this database's list."""
        other, endpoints = membership_from_blob(blob, self.membership.stride)
        before = Membership(self.membership.stride, self.membership.epoch, dict(self.membership.members),
                            dict(self.membership.frozen))
        if not self.membership.adopt(other):
            return False
        log.warning("adopted membership epoch %d from a peer (this region was at epoch %d)", other.epoch, before.epoch)
        self._membership_changed(before, endpoints)
        return True

    def _membership_changed(self, before: Membership, endpoints: dict[int, tuple]) -> None:
        """Record the new list, follow it with the links (dial new members, drop removed ones,
        handshake again with everyone at the new epoch) and, once removed, stop syncing."""
        m = self.membership
        self.active = m.status(self.region) == ACTIVE
        self._store_promise()  # a newer epoch: no promise or hold is left
        self._drop_refused_pending()
        self.cluster.take_membership(m, endpoints)
        self.hub.names = {r.number: r.name for r in self.cluster.regions}
        try:
            self.cluster.save()
        except OSError as e:
            log.error("cannot record membership epoch %d in %s: %s (it is kept in memory; peers "
                      "bring it again at the next handshake)", m.epoch, self.cluster.path, e)
        if m.status(self.region) == REMOVED:
            log.warning("this region was removed from the database at epoch %d: it syncs no more and "
                        "refuses writes; purge it (braid-admin region purge) to add it again", m.epoch)
            self.hub.retire()
            return
        for number in [n for n in self.hub.peer_numbers() if m.status(n) not in LIVE]:
            self.hub.forget(number)
        self._release_links()
        self.hub.relink()
        self._dial_peers()
        self._watch_join()

    def _drop_refused_pending(self) -> None:
        """The list now refuses operations of a region removed (or being removed) by force past
        its frozen point: envelopes of it that wait here for their dependencies go, with those
        that depend on one.  Left waiting, one would be applied past the frozen point as soon
        as what it waits for arrives from a member (or wait for good), and this region would
        hold what the others never accept.  Dropping a waiting envelope is safe (crdt/causal.py):
        a peer sends again what this region lacks."""
        m = self.membership
        self.membership_dropped += self.causal.drop_pending(
            lambda e: not m.accepts(e.origin, e.n) or not all(m.accepts(o, n) for o, n in e.deps))

    def purge(self, blob: bytes) -> None:
        """Wipe this region's data so that it can be added again as a new member: only once it
        is removed (``blob``: a member's list, which may say so); ValueError otherwise."""
        if blob:
            self.adopt(blob)
        status = self.membership.status(self.region)
        if status != REMOVED:
            raise ValueError(f"region {self.me.name} is {status or 'not a member'} at membership epoch "
                             f"{self.membership.epoch}: only a removed region can be purged")
        self.on_purge()

    def _watch_join(self) -> None:
        """While this region is joining, have it activated once it caught up."""
        if self.membership.status(self.region) != JOINING or (self.activation and not self.activation.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not serving (the simulation drives activation itself)
        self.activation = loop.create_task(self._activate_when_caught_up())

    async def _activate_when_caught_up(self) -> None:
        delay = 0.05
        while self.membership.status(self.region) == JOINING:
            if self.caught_up():
                try:
                    m = self.membership
                    await asyncio.to_thread(agree_with_regions, self.admin_connect, self.cluster,
                                            Membership(m.stride, m.epoch, dict(m.members), dict(m.frozen)),
                                            Change(ACTIVATE, self.region), (self.region, time.time_ns()),
                                            self.admin_tls)
                    continue
                except (MembershipChangeError, MembershipError) as e:
                    log.info("not activated yet: %s", e)
            await asyncio.sleep(delay * (0.5 + random.random()))  # retry with backoff and jitter
            delay = min(delay * 2, 2.0)


class MembershipGate:
    """What the replication hub asks at handshakes and per operation (see the module's theory)."""

    def __init__(self, aa: ActiveActive) -> None:
        self.aa = aa

    def hello(self) -> tuple[int, bytes]:
        """(epoch, member list) this region's Hello or Welcome carries."""
        return self.aa.membership.epoch, self.aa.cluster.membership_blob()

    def check_peer(self, peer: int, epoch: int, blob: bytes) -> str:
        """At a handshake: '' to go on, else why the peer is refused (a newer list is adopted first)."""
        aa = self.aa
        if epoch > aa.membership.epoch and blob:
            try:
                aa.adopt(blob)
            except ValueError as e:
                return f"region {peer} sent {e}"
        m = aa.membership
        if m.status(aa.region) == REMOVED:
            return f"region {aa.me.name} was removed from the database at membership epoch {m.epoch}"
        status = m.status(peer)
        if status == REMOVED:
            spec = aa.cluster.by_number(peer)
            name = spec.name if spec else str(peer)
            return (f"region {peer} ({name}) was removed from the database (membership epoch {m.epoch}): "
                    f"purge it (braid-admin region purge --region {name}) and add it again")
        if status is None:
            return f"region {peer} is not a member of the database at membership epoch {m.epoch}"
        return ""

    def refused(self) -> None:
        self.aa.membership_refused += 1

    def admits_all(self, envs: list[Envelope]) -> bool:
        """Whether :meth:`admits` would say '' (apply it) of every one of ``envs``."""
        return self.aa.membership.admits_all(envs)

    def admits(self, env: Envelope) -> str:
        """'' apply it; 'drop': an operation of a removed region past its frozen point (or of one
        being force-removed past what this region held); 'behind': a region this list does
        not know (the peer has a newer list)."""
        m = self.aa.membership
        if m.admits(env.origin, env.n, env.deps):
            return ""
        if m.status(env.origin) is not None and all(m.status(o) is not None for o, _ in env.deps):
            self.aa.membership_dropped += 1
            return "drop"
        return "behind"


def _no_admin_clients(cfg, numbers, tls, timeout) -> dict:
    return {}  # not started: no way to reach another region's admin service


def _no_flush() -> int:
    raise ValueError("no region core runs commands for this region")


def _not_attached(env: Envelope) -> None:
    raise RuntimeError("no region core applies operations for this hub")


def _keep_local_groups(new_keys, old_keys, back_in: int | None = None) -> None:
    """Every group of ``new_keys`` (an image's) keeps its region-local half from the same group
    (same creation) in ``old_keys``; in origin log ``back_in``, if given, its cursor and
    watermark stay the image's."""
    for key, s in new_keys.items():
        old = old_keys.get(key)
        for name, g in s.groups.items():
            og = old.groups.get(name) if old is not None else None
            cursor, mark = (g.cursors.get(back_in), g.watermarks.get(back_in)) if back_in is not None else (None, None)
            _keep_local_group_state(g, og if og is not None and og.created_dot == g.created_dot else None)
            if back_in is None:
                continue
            g.cursors, g.watermarks = dict(g.cursors), dict(g.watermarks)
            for table, value in ((g.cursors, cursor), (g.watermarks, mark)):
                if value is None:
                    table.pop(back_in, None)
                else:
                    table[back_in] = value


def _keep_local_group_state(g, old) -> None:
    """A group from a resync image: its local half (consumers, PEL, cursors) is this region's."""
    if old is None:  # new here: nobody read it in this region yet
        g.pel, g.consumers, g.cursors, g.acked_sent, g._stamps = PendingMap(), {}, {}, {}, 0
        g.last_id, g.entries_read = g.floor, ENTRIES_READ_UNKNOWN
        return
    g.pel, g.consumers, g.cursors, g.acked_sent, g._stamps = old.pel, old.consumers, old.cursors, old.acked_sent, old._stamps
    g.last_id, g.entries_read, g.floor = old.last_id, old.entries_read, old.floor
    for origin, mark in old.watermarks.items():
        if mark > g.watermarks.get(origin, (0, 0)):
            g.watermarks[origin] = mark
