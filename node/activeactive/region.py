"""This region's part in an Active-Active database: the object the region core holds.

It owns the region's causal log (crdt/causal.py) and replication hub
(node/activeactive/hub.py), publishes every replicated operation the region applies,
and holds what the multi-region resolver (crdt/resolve.py) reads: the ID mode, the
region's number and stride, and the causal log's version vector.  It sees the region
only through the keyspace (``Database``), the settings and the region's side
(:class:`RegionCommands`, the region core, node/region/core.py, which builds it with itself):
applying another region's operation and installing or joining a full-resync image are the
core's, which the hub calls directly (it is handed the same side when it is built here); a
cluster-wide flush and a backup's snapshot are the core's too.

Its parts, each an object it holds and builds with what that part needs, in a module of
its own:

- ``changes`` (node/activeactive/membership.py, :class:`MembershipChanges`): changes of the
  member list, promises, following a change with the links; the hub's ``gate``
  (:class:`MembershipGate`) counts into :class:`MembershipCounts`;
- ``recovery`` (node/activeactive/recovery.py, :class:`Recovery`): taking back its own
  operations at every start, writes taken alone;
- ``backlog`` (node/activeactive/backlog.py, :class:`Backlog`): the replication backlog and
  full-resync images;
- ``report`` (node/activeactive/status.py, :class:`Status`): the status braid-admin reads and
  INFO crdt's lines, read through :class:`~node.activeactive.status.Reported` (this object).

The hub is built first, with everything it calls given at once (the side, the gate, how to
make this region's image, whom to tell of a refusal); the parts are built after it, and what
the hub is given of them are this object's methods, which reach the parts only when called.
Callers (the region core, the admin service, the metrics, the simulation) use this object's
methods, each of which hands the call to the part that does it.

This module holds the rest: starting and stopping the links, when operations may leave
(the operation log), publishing operations, database settings, the cluster-wide flush, and
whether clients may write here (:attr:`ActiveActive.writable`, which asks every part).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from crdt import ops
from crdt.causal import CausalLog, Envelope
from crdt.membership import ACTIVE, JOINING, LEAVING, REMOVED, Membership, Promise, Proposal, Settlement, Standing
from node.activeactive import opcodec
from node.activeactive.backlog import Backlog
from node.activeactive.cluster_config import DB_SETTINGS, ClusterConfig, RegionSpec
from node.activeactive.coordinator import Connect
from node.activeactive.hub import RegionSide, ReplicationHub, Transport
from node.activeactive.lone_writes import LoneStep, LoneWrites
from node.activeactive.membership import (
    PROMISE_TIMEOUT_S,
    SETTLE_EVERY_S,
    MembershipChanges,
    MembershipCounts,
    MembershipGate,
    PromiseStore,
)
from node.activeactive.recovery import Recovery
from node.activeactive.status import Status
from node.transport.admin_types import FlushNotReady
from node.transport.tls import LinkCredentials

if TYPE_CHECKING:
    from node.region.db import Database
    from node.region.session import Session
    from node.security.acl import AccessControl

# PROMISE_TIMEOUT_S and SETTLE_EVERY_S live in node/activeactive/membership.py; named here too
# because the tests and the simulation (chaos/sim/membership.py) read them here
__all__ = ["ActiveActive", "MembershipGate", "FlushNotReady", "REPLICATED", "PROMISE_TIMEOUT_S", "SETTLE_EVERY_S",
           "RegionCommands"]

log = logging.getLogger("braid.activeactive")

# records waiting for an fsync whose causal-log positions are kept one by one; past that the
# newest stands for those after it (an fsync that covers it covers them all)
UNSYNCED_KEPT = 4096

# Operations other regions must see; the rest (XSETID, consumers, the PEL) stay local.
REPLICATED = (ops.AddEntry, ops.Trim, ops.DeleteEntries, ops.DeleteKey, ops.CreateGroup,
              ops.DestroyGroup, ops.AckWatermark, ops.ConfigureIdmp, ops.RecordIdmp, ops.FlushKeys)


class RegionCommands(RegionSide, Protocol):
    """The region's side as this object sees it (node/region/core.py's ``RegionCore``): what the
    hub calls, and the commands braid-admin's calls run as the region's own."""

    # the region's users and its client sessions: braid-admin acl changes them (node/transport/admin.py)
    acl: AccessControl
    clients: dict[int, Session]

    def flush_database(self) -> int:
        """FLUSHALL run as a client's (logged, replicated); returns how many keys it removed;
        ValueError: not run (see :meth:`ActiveActive.flush_when_caught_up`)."""

    def snapshot_now(self) -> tuple[bytes, int]:
        """A snapshot of the region's state taken now, and the log record it holds the state
        after (the region core's SAVE serialisation: braid-admin backup)."""

    def state_on_disk(self) -> bool:
        """Is everything the region holds on disk?  False while a full-resync image it took
        waits for its snapshot (a full disk): a restart would start from the older log."""


def _no_setting(name: str, value: Any) -> None:
    pass


class ActiveActive:
    """This region's part in the Active-Active database (see the module's docstring)."""

    def __init__(self, db: Database, config: Any, cluster: ClusterConfig, me: RegionSpec, side: RegionCommands, *,
                 on_setting: Callable[[str, Any], None] = _no_setting) -> None:
        """``db``: the region's Database (node/region/db.py); ``config``: its settings
        (node/region/config.py); ``side``: the region core, which applies what the hub receives;
        ``on_setting``: told of a database setting tuned here that is also a server setting
        (appendfsync, maxmemory), with its value as checked (node/activeactive/cluster_config.py)."""
        self.db = db
        self.config = config
        self.cluster = cluster
        self.me = me
        self.side = side
        self.on_setting = on_setting
        # read for every XADD's ID (crdt/resolve.py): attributes, not properties; neither changes
        self.region: int = me.number
        self.stride: int = cluster.stride
        self.mode: str = cluster.id_mode
        self.membership: Membership = cluster.membership()
        # braid-admin backup (node/transport/admin.py): the region core's snapshot
        self.snapshot_now: Callable[[], tuple[bytes, int]] | None = side.snapshot_now
        self.causal = CausalLog(me.number)
        c = cluster
        tls = None
        if c.tls is not None:  # LinkTlsError (a ValueError) names a file that cannot be used
            tls = LinkCredentials(c.tls.ca, *c.tls.region_pair(me))
        self.counts = MembershipCounts()  # what the gate and the membership part count
        self.hub = ReplicationHub(me.number, c.cluster_id, c.database, c.token, self.causal, side, config,
                                  tls=tls, names={r.number: r.name for r in c.regions},
                                  gate=MembershipGate(me, cluster, self.membership, self.counts, self.adopt),
                                  make_image=self._make_image, on_denied=self._denied,
                                  shard=c.shard, slot_map=c.shards.digest())
        # (operation-log record, causal-log length once it is safe): links send an
        # operation only after the record that holds it reached the OS (see durable())
        self._unsafe: deque[tuple[int, int]] = deque()
        # ... and once it is on disk (what acks say in Ack.synced, for WAITAOF at other regions)
        self._unsynced: deque[tuple[int, int]] = deque()
        self._image_end = 0  # where the state a held full-resync image's snapshot holds ends (image_held)
        self.flushes_waiting = 0  # cluster-wide flushes waiting for operations (INFO crdt)
        self.lone = LoneWrites()  # writes taken alone (crdt-lone-writes-after-ms; node/activeactive/lone_writes.py)
        self.changes = MembershipChanges(me, cluster, self.membership, self.causal, self.hub, self.counts,
                                         side.state_on_disk)
        self.recovery = Recovery(me, self.causal, self.hub, db, config, self.lone, self.changes.peers)
        self.backlog = Backlog(me.number, self.causal, self.hub, db, self.membership, self.lone, self.changes,
                               self._unsafe.clear)
        self.report = Status(self)

    def _make_image(self, digests: bool = True) -> tuple[bytes, dict[int, int]]:
        """The hub's ``make_image``: this region's image now, for a peer that lacks trimmed operations."""
        return self.resync_image(int(time.time() * 1000), digests)

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str, services: Iterable[Callable[[ActiveActive], object]] = (),
                    connect: Connect | None = None, transport: Transport | None = None) -> None:
        """Listen on ``host`` (where the RESP port listens) and dial the peers.  ``transport``:
        what carries the replication links (``GrpcLinks()``, node/transport/grpc_links.py);
        ``services``: the gRPC services served beside them, each made for this region (the
        server gives the admin service, node/transport/admin.py); ``connect``: how this region
        reaches other regions' admin service (membership: learning, activating, settling).
        All are given by the caller (node/runtime/server.py) so this module does not import gRPC."""
        self.changes.reach_admin(connect)
        await self.hub.serve(host, self.me.repl_port, extra=[make(self) for make in services], transport=transport)
        if self.hub.tls is not None:  # a joining region asks the others to activate it, as braid-admin would
            m = self.hub.tls.material
            self.changes.reach_admin(tls=(m.ca, m.cert, m.key))
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
        self.changes.start()

    def _denied(self) -> None:
        """The hub's ``on_denied``: a peer refused this region's handshake (perhaps it was
        removed meanwhile: the membership part asks)."""
        self.changes.learn_soon()

    def peers(self) -> list[RegionSpec]:
        """The other live members (active, joining, leaving)."""
        return self.changes.peers()

    async def stop(self) -> None:
        self.changes.stop()
        try:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
        await self.hub.stop()

    def reload_tls(self) -> dict:
        """Re-read this region's certificate, key and CA bundle; links handshake again.
        ValueError (LinkTlsError too): nothing changed."""
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
        self._unsynced.clear()
        self.hub.logged_upto(self.causal.end)
        self.hub.synced_upto(self.causal.end)

    def image_held(self, old_log_held: dict[int, int], end: int) -> None:
        """The snapshot of a full-resync image just taken (the state up to causal-log position
        ``end``) could not be written.  Until :meth:`image_saved`, acks say this region holds
        what its log before the image holds (``old_log_held``; the state holds all of it) - a
        process that ends first starts again from that log - and nothing of the image counts as
        on disk.  The image's operations may be sent on, as after a saved image."""
        self.hub.ack_cap = dict(old_log_held)
        self._image_end = end
        while self._unsafe and self._unsafe[0][1] <= end:  # (records the image's state holds)
            self._unsafe.popleft()
        self.hub.logged_upto(end)

    def image_saved(self) -> None:
        """The held image's snapshot is on disk: acks say what the state up to it holds, and
        that it is on disk; the records that waited behind it count as they are written and
        fsynced."""
        self.hub.ack_cap = None
        end = self._image_end
        while self._unsynced and self._unsynced[0][1] <= end:  # (records the snapshot holds)
            self._unsynced.popleft()
        self.hub.synced_upto(end)
        self.hub.wake()

    def logged(self, record: int, end: int | None = None) -> None:
        """Record ``record`` of the operation log holds what the causal log has now (or up to
        absolute position ``end``: an operation of another region is logged before the causal
        log counts it)."""
        end = self.causal.end if end is None else end
        if self._unsafe and self._unsafe[-1][1] > end:
            end = self._unsafe[-1][1]  # a later record never holds less (a reader served inside an apply)
        if end > self.hub.sendable_upto():
            self._unsafe.append((record, end))
        unsynced = self._unsynced
        if end > self.hub.synced_at:
            if len(unsynced) >= UNSYNCED_KEPT:  # (appendfsync no: a later fsync covers them all)
                unsynced.pop()
            unsynced.append((record, end))

    def synced(self, record: int) -> None:
        """Records up to ``record`` are on disk: the acks say so from now on."""
        unsynced, upto = self._unsynced, None
        while unsynced and unsynced[0][0] <= record:
            upto = unsynced.popleft()[1]
        if upto is not None:
            self.hub.synced_upto(upto)

    def regions_holding(self, n: int, on_disk: bool = False) -> int:
        """How many other regions hold this region's operations up to its ``n``-th (WAIT), or
        have them on disk (``on_disk``: WAITAOF): active members whose link is up and not paused
        whose acks since the link started said so (node/commands/waits.py).  A leaving region
        does not count: its graceful removal waits only until the others hold its own
        operations, not everything it holds."""
        return len(self.holders(n, on_disk))

    def holders(self, n: int, on_disk: bool = False) -> list[int]:
        """The regions :meth:`regions_holding` counts (the simulation records which)."""
        hub, me, membership = self.hub, self.region, self.membership
        held = hub.peer_synced if on_disk else hub.peer_said
        return [peer for peer in membership.live()
                if peer != me and membership.status(peer) == ACTIVE and peer in hub.links and not hub.is_cut(peer)
                and held.get(peer, {}).get(me, 0) >= n]

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
            self.hub.logged_upto(upto)
            self.hub.wake()

    # ------------------------------------------------------------ operations
    def publish(self, op: ops.Op) -> Envelope | None:
        """Send an operation this region applied; returns its envelope (None: it stays here).
        The operation log records the envelope's bytes: encoded once, for the wire and the file."""
        if isinstance(op, REPLICATED):
            return self.hub.issue(opcodec.encode(op))
        return None

    def publish_add(self, key: bytes, origin: int, id_: tuple[int, int], fields: list) -> Envelope:
        """:meth:`publish` of ``AddEntry(key, origin, id_, fields)`` (an XADD without IDMP), given
        its parts (node/region/db.py: ``Database.add_plain``)."""
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
            checked = check(value)
        except ValueError as e:
            raise ValueError(f"{name} {e}") from None
        before = getattr(self.cluster, attr)
        setattr(self.cluster, attr, checked)
        try:
            self.cluster.save()  # first on disk, so that the setting survives a restart
        except OSError as e:
            setattr(self.cluster, attr, before)
            raise ValueError(f"cannot record the setting in {self.cluster.path}: {e.strerror}") from None
        if name == "crdt_xadd_id_uniqueness_mode":
            self.mode = str(checked)
        else:
            self.on_setting(name, checked)

    def run_in_mode(self, mode: str | None = None) -> None:
        """Choose XADD's IDs under ``mode`` from now on: a replay runs each logged command under
        the mode it ran with; None: the cluster's setting in force now."""
        self.mode = self.cluster.id_mode if mode is None else mode

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
        removed = self.side.flush_database()
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

    # ------------------------------------------------------------ may clients write here
    @property
    def writable(self) -> bool:
        """May clients write here?  Only an active member (a joining one once it caught up),
        and after a crash of its machine only once it recovered.  Asked before every write
        command: the common case is two attributes."""
        if self.recovering and not self.recovered():
            return False
        if self.hub.forks and self.own_history_forked():
            return False
        confirmed = self.lone.confirmed  # not None: alone
        if confirmed is not None and self.own_held_elsewhere() > confirmed:
            return False  # withdrawing what it took alone (the cron's next step)
        if self.changes.active:
            return True
        return self.membership.status(self.region) == JOINING and self.caught_up()

    def write_refusal(self) -> str:
        """The error a write gets while this region may not take writes."""
        status = self.membership.status(self.region)
        forked = self.own_history_forked()
        lone = self.lone
        if (forked or lone.reissue or (lone.confirmed is not None and self.own_held_elsewhere() > lone.confirmed)) \
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

    # ------------------------------------------------------------ the membership part's (self.changes)
    @property
    def active(self) -> bool:
        """Is this region an active member (kept with the list by the membership part)?"""
        return self.changes.active

    @property
    def membership_refused(self) -> int:
        """Handshakes refused: the peer is not a member (or was removed)."""
        return self.counts.refused

    @property
    def membership_dropped(self) -> int:
        """Operations of removed regions past their frozen point, dropped."""
        return self.counts.dropped

    @property
    def membership_clock(self) -> Callable[[], float]:
        """The clock promises are timed by (monotonic seconds; the simulation sets its virtual one)."""
        return self.changes.clock

    @membership_clock.setter
    def membership_clock(self, clock: Callable[[], float]) -> None:
        self.changes.time_by(clock)

    @property
    def on_purge(self) -> Callable[[], None]:
        """What wipes this region's files and stops it once it is purged (the server sets it)."""
        return self.changes.on_purge

    @on_purge.setter
    def on_purge(self, on_purge: Callable[[], None]) -> None:
        self.changes.when_purged(on_purge)

    @property
    def promise_store(self) -> PromiseStore | None:
        """Where the promise is kept across restarts (see :meth:`attach_promise_store`)."""
        return self.changes.promise_store

    def attach_promise_store(self, store: PromiseStore) -> None:
        self.changes.attach_promise_store(store)

    def caught_up(self) -> bool:
        return self.changes.caught_up()

    def catch_up_progress(self) -> tuple[int, int]:
        return self.changes.catch_up_progress()

    def promise(self, p: Proposal, now: float | None = None) -> Promise:
        return self.changes.promise(p, now)

    def abort(self, p: Proposal, settled: bool = False) -> None:
        self.changes.abort(p, settled)

    def left_promise(self, now: float | None = None) -> Proposal | None:
        return self.changes.left_promise(now)

    def standing(self, p: Proposal) -> Standing:
        return self.changes.standing(p)

    def settle(self, p: Proposal, standings: dict[int, Standing]) -> Settlement:
        return self.changes.settle(p, standings)

    def commit(self, p: Proposal, frozen: int) -> None:
        self.changes.commit(p, frozen)

    def adopt(self, blob: bytes) -> bool:
        return self.changes.adopt(blob)

    def purge(self, blob: bytes) -> None:
        self.changes.purge(blob)

    # ------------------------------------------------------------ the recovery part's (self.recovery)
    @property
    def recovering(self) -> bool:
        """Set after a start that may have lost operations peers hold (see recover_own_operations)."""
        return self.recovery.recovering

    @property
    def machine_crash(self) -> bool:
        return self.recovery.machine_crash

    def recover_own_operations(self, on_recovered: Callable[[], None], machine_crash: bool = False) -> None:
        self.recovery.recover_own_operations(on_recovered, machine_crash)

    def recovery_waits_for(self) -> list[RegionSpec]:
        return self.recovery.recovery_waits_for()

    def recovered(self) -> bool:
        return self.recovery.recovered()

    def own_held_elsewhere(self) -> int:
        return self.recovery.own_held_elsewhere()

    def own_history_forked(self) -> list:
        return self.recovery.own_history_forked()

    def lone_step(self, now_ms: int) -> LoneStep | None:
        return self.recovery.lone_step(now_ms)

    def begin_alone(self, image: bytes | None) -> None:
        self.recovery.begin_alone(image)

    def end_alone(self) -> None:
        self.recovery.end_alone()

    def withdraw_alone(self) -> list[Envelope]:
        return self.recovery.withdraw_alone()

    def note_lone(self, own: list) -> None:
        self.recovery.note_lone(own)

    # ------------------------------------------------------------ the backlog part's (self.backlog)
    def trim_backlog(self, max_bytes: int, ttl_s: float, now: float, link_positions: list[int] | None = None) -> int:
        return self.backlog.trim_backlog(max_bytes, ttl_s, now, link_positions)

    def backlog_memory(self) -> int:
        return self.backlog.backlog_memory()

    def backlog_bytes(self) -> int:
        return self.backlog.backlog_bytes()

    def stable(self) -> dict[int, int]:
        return self.backlog.stable()

    def collect_garbage(self) -> int:
        return self.backlog.collect_garbage()

    def resync_image(self, now_ms: int, digests: bool = True) -> tuple[bytes, dict[int, int]]:
        return self.backlog.resync_image(now_ms, digests)

    def adopt_image(self, data: bytes) -> list[Envelope] | None:
        return self.backlog.adopt_image(data)

    def join_image(self, data: bytes) -> list[Envelope] | None:
        return self.backlog.join_image(data)

    # ------------------------------------------------------------ the status part's (self.report)
    def unstable_ops(self) -> dict[int, int]:
        return self.report.unstable_ops()

    def peer_lag(self, number: int, now: float) -> tuple[int, float]:
        return self.report.peer_lag(number, now)

    def metadata_sizes(self) -> dict:
        return self.report.metadata_sizes()

    def status(self) -> dict:
        return self.report.status()

    def info_lines(self) -> list[str]:
        return self.report.info_lines()
