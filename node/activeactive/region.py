"""This region's part in an Active-Active database: the object the region core holds.

It owns the region's causal log (crdt/causal.py) and replication hub
(node/activeactive/hub.py), publishes every replicated operation the region applies,
and holds what the multi-region resolver (crdt/resolve.py) reads: the ID mode, the
region's number and stride, and the causal log's version vector.  It sees the region
only through the keyspace (``Database``) and the settings: applying another region's
operation, and installing a full-resync image, are the region core's
(node/region/core.py), which it reaches through the hub's ``on_apply`` / ``on_apply_run`` /
``install_image``.

Its parts (each a class :class:`ActiveActive` is made of, in a module of its own):

- node/activeactive/membership.py: changes of the member list, promises, the hub's gate;
- node/activeactive/recovery.py: taking back its own operations at every start, writes
  taken alone;
- node/activeactive/backlog.py: the replication backlog and full-resync images;
- node/activeactive/status.py: the status braid-admin reads and INFO crdt's lines.

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

from crdt import ops
from crdt.causal import CausalLog, Envelope
from crdt.membership import ACTIVE, JOINING, LEAVING, LIVE, REMOVED, Membership
from node.activeactive import opcodec
from node.activeactive.backlog import ActiveActiveBacklog
from node.activeactive.cluster_config import DB_SETTINGS, ClusterConfig, RegionSpec
from node.activeactive.coordinator import Connect
from node.activeactive.hub import ReplicationHub, Transport
from node.activeactive.lone_writes import LoneWrites
from node.activeactive.membership import PROMISE_TIMEOUT_S, SETTLE_EVERY_S, ActiveActiveMembership, MembershipGate
from node.activeactive.recovery import ActiveActiveRecovery
from node.activeactive.status import ActiveActiveStatus
from node.transport.admin_types import FlushNotReady
from node.transport.tls import LinkCredentials

# PROMISE_TIMEOUT_S and SETTLE_EVERY_S live in node/activeactive/membership.py; named here too
# because the tests and the simulation (chaos/sim/membership.py) read them here
__all__ = ["ActiveActive", "MembershipGate", "FlushNotReady", "REPLICATED", "PROMISE_TIMEOUT_S", "SETTLE_EVERY_S"]

log = logging.getLogger("braid.activeactive")

# Operations other regions must see; the rest (XSETID, consumers, the PEL) stay local.
REPLICATED = (ops.AddEntry, ops.Trim, ops.DeleteEntries, ops.DeleteKey, ops.CreateGroup,
              ops.DestroyGroup, ops.AckWatermark, ops.ConfigureIdmp, ops.RecordIdmp, ops.FlushKeys)


class ActiveActive(ActiveActiveMembership, ActiveActiveRecovery, ActiveActiveBacklog, ActiveActiveStatus):
    """This region's part in the Active-Active database (see the module's docstring)."""

    def __init__(self, db, config, cluster: ClusterConfig, me: RegionSpec) -> None:
        """``db``: the region's Database (node/region/db.py); ``config``: its settings."""
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
        # the region core sets on_apply, on_apply_run and install_image (node/region/core.py)
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
        self.lone = LoneWrites()  # writes taken alone (crdt-lone-writes-after-ms; node/activeactive/lone_writes.py)

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str, services: Iterable[Callable[[ActiveActive], object]] = (),
                    connect: Connect | None = None, transport: Transport | None = None) -> None:
        """Listen on ``host`` (where the RESP port listens) and dial the peers.  ``transport``:
        what carries the replication links (``GrpcLinks()``, node/transport/grpc_links.py);
        ``services``: the gRPC services served beside them, each made for this region (the
        server gives the admin service, node/transport/admin.py); ``connect``: how this region
        reaches other regions' admin service (membership: learning, activating, settling).
        All are given by the caller (node/runtime/server.py) so this module does not import gRPC."""
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


def _no_admin_clients(cfg, numbers, tls, timeout) -> dict:
    return {}  # not started: no way to reach another region's admin service


def _no_flush() -> int:
    raise ValueError("no region core runs commands for this region")


def _not_attached(env: Envelope) -> None:
    raise RuntimeError("no region core applies operations for this hub")
