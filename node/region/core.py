"""A region's core: what a region does, without sockets, timers or threads.

Theory of operation
-------------------
A :class:`RegionCore` is one region's state and rules: the keyspace, the command
table's dispatch (arity, the ACL check of node/security/acl.py, MULTI queueing, the
handlers), what a command or an
operation of another region leaves in the operation log, when a reply may
leave, the once-a-second work, fail-stop, and full-resync images.  It performs
no I/O of its own: bytes reach it as arguments (``call`` for a client's
command, ``apply_remote`` for another region's operation, via the causal log)
and what it did comes back as effects a driver acts on:

* the reply value (encoding it and writing it to a socket is the driver's);
* records appended to the operation log object it was given
  (:meth:`attach_log`) - the driver's end of turn hands them to the disk
  (:meth:`end_turn`), and a reply leaves once :meth:`may_release` says the
  records it depends on are durable enough (:meth:`reply_needs`);
* envelopes stamped into the causal log: links send them once their record
  reached the OS (``ActiveActive.durable``; node/persistence/oplog.py);
* keys made ready for blocked readers (``db.ready``): :meth:`keys_ready` is
  the driver's hook to serve them;
* ``failed``: set when the region fail-stopped (node/region/supervision.py); the
  driver's :meth:`on_fail_stop` closes what it owns.

The one command that talks to another server, MIGRATE, does it through a port the
driver provides (``migrate_transport``, node/commands/migrate.py); without one it
answers an error.

Every command's run time is counted (``Stats``, INFO's commandstats) and, for
the commands a driver registered in ``latency`` (node/runtime/metrics.py does for XADD,
XREADGROUP and XACK), put in a :class:`LatencyHistogram`: plain counters, no I/O,
read by whoever drives the core, on its thread.  The same time, compared with one
bound (``slow_ns``), fills the slow log and the latency monitor (node/region/slowlog.py:
SLOWLOG, LATENCY); the cron's steps, a turn's write of the append-only file, other
regions' operations and full-resync images are timed for LATENCY only while
``latency-monitor-threshold`` is set (:meth:`latency_start`).

Two drivers run it.  :class:`node.runtime.server.Server` is the asyncio one: it holds
a core, passing itself as the core's :class:`~node.region.driver.Driver`, and adds the
client sockets, blocking reads with their timers, the worker threads for
fsync and BGSAVE, the cron task and the gRPC links.  The deterministic
simulation (chaos/sim/region.py) drives the same class on a virtual clock and
a simulated disk, so the rules above exist once.

The clock commands see is pinned for the length of a command (and of its
replay): every ``now_ms()`` inside one command answers the same.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import secrets
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crdt import ops, resolve
from crdt.causal import Envelope
from node import commands as cmdtable
from node.activeactive.region import ActiveActive
from node.commands.server import command_keys, routed_keys
from node.commands.transactions import abort_exec, discard_transaction
from node.commands.util import unknown_command_error, unknown_subcommand_error
from node.persistence import aofformat, snapshot
from node.region.blocking import Blocked, BlockingRegistry
from node.region.config import Config
from node.region.db import Database
from node.region.driver import Driver
from node.region.lone import LoneWritesObserver, LoneWritesSteps
from node.region.memory import MemoryAccount
from node.region.remote import apply_run
from node.region.resync import FullResync
from node.region.routing import ShardRouting
from node.region.session import Session
from node.region.slicing import Sliced
from node.region.slowlog import LatencyMonitor, SlowLog, redacted, slow_bounds
from node.region.stats import LatencyHistogram, Stats
from node.region.supervision import (
    EXIT_FAIL_STOP,
    ApplyFailed,
    RegionStopped,
    Supervisor,
    oom_detail,
    ran_out_of_memory,
    release_memory_reserve,
)
from node.resp.encoder import ReplyError
from node.security.acl import AccessControl

if TYPE_CHECKING:
    from node.commands.migrate import MigrateTransport
    from node.persistence.oplog import OperationLog
    from node.persistence.replay import LoadReport
    from node.security.tls import ClientTls

log = logging.getLogger("braid.server")

OOM_ERROR = "OOM command not allowed when used memory > 'maxmemory'."

_perf_ns = time.perf_counter_ns
NEVER_NS = 1 << 63  # a command's time execute() never reaches: neither SLOWLOG nor LATENCY records


class RegionCore:
    """One region's state and rules (see the module's theory of operation).  Holds no
    process-wide singletons: a shard is just a core owning some keys, and several can
    live in one process (tests and the simulation do)."""

    def __init__(self, config: Config | None = None, region: int = 1, cluster=None,
                 clock: Callable[[], int] | None = None, lone_observer: LoneWritesObserver | None = None,
                 driver: Driver | None = None, offer_cpu: Callable[[], object] | None = None,
                 startup_memory: int = 0) -> None:
        """``cluster``: (ClusterConfig, RegionSpec) when this region belongs to one.
        ``clock``: the wall clock in milliseconds (default: the system's).  ``lone_observer``:
        who hears of writes taken alone withdrawn and issued again (node/region/lone.py).
        ``driver``: who runs the core (:class:`Driver`; None: a bare core).  ``offer_cpu``: what
        lets other processes run on this region's CPU a moment (the server's ``os.sched_yield``;
        see apply_remote_run).  ``startup_memory``: what the process held before any data was
        loaded (the server measures it; part of used memory)."""
        self.driver = driver
        self.config = config or Config()
        self.region = region  # this region's origin number in every entry log
        # what INFO server says of this run: when it began, a random id, the client port
        # (a core has no socket: the setting; the server puts the port it listens on)
        self.start_time = time.time()
        self.run_id = secrets.token_hex(20)
        self.port = int(self.config["port"])
        self.shutdown_requested = False  # SHUTDOWN ran (a driver stops the region; see shutdown())
        self.db = Database(self._limits(), active_active=cluster is not None)
        self.aa: ActiveActive | None = None  # this region's Active-Active part (None: standalone)
        self.routing: ShardRouting | None = None  # a shard's slots and its siblings (node/region/routing.py)
        self.system_ms: Callable[[], int] = clock if clock is not None else system_ms  # (the simulation's: virtual)
        if cluster is not None:
            cfg, me = cluster
            self.region = me.number
            self.routing = cfg.routing(me)
            # this core is the region's side: its hub applies, installs and joins through it (activeactive/region.py)
            aa = self.aa = ActiveActive(self.db, self.config, cfg, me, self, on_setting=self._db_setting_changed)
            self.db.publish_to(aa)  # what commands change leaves for the other regions through it
            self.db.resolver = resolve.ActiveActive(aa)
        self.stats = Stats()
        # command name -> LatencyHistogram of its run time (node/runtime/metrics.py's; empty without metrics)
        self.latency: dict[str, LatencyHistogram] = {}
        # SLOWLOG and LATENCY (node/region/slowlog.py): note_slow, latency_start/latency_end
        self.slowlog = SlowLog()
        self.latency_events = LatencyMonitor()
        self._set_slow_bounds()
        self._set_write_cap()
        # used memory and maxmemory (node/region/memory.py)
        self.clients: dict[int, Session] = {}
        self.memory = MemoryAccount(self._held_memory, self.clients.values, startup_memory)
        self.memory.set_limit(int(self.config["maxmemory"]))
        self.offer_cpu = offer_cpu
        self.apply_yield_ops = int(self.config["crdt-repl-apply-yield-ops"])
        self.blocking = BlockingRegistry()
        self._client_ids = itertools.count(1)
        self.oplog: OperationLog | None = None  # the operation log (node/persistence/oplog.py, or the simulation's)
        self.replaying = False     # loading the log: nothing is logged again
        self.loading_report: tuple[LoadReport, float] | None = None  # what loading the log found, how long
        self.saving = False        # a BGSAVE is writing its file
        self.last_bgsave_ok = True
        self.last_save = int(time.time())
        self.dirty_at_save = 0
        self.log_base_size = 0     # log size just after the last snapshot (auto snapshots grow from it)
        self._clock: int | None = None
        self.clock_offset_ms = 0   # DEBUG CLOCK-OFFSET: a skewed region (chaos tests)
        self.apply_faults = 0      # DEBUG APPLY-FAIL: operations of other regions still to fail to apply
        self.failed: str | None = None  # why the region fail-stopped (node/region/supervision.py)
        self.supervisor = Supervisor(self)
        self.lone_steps = LoneWritesSteps(self, lone_observer)  # writes taken alone (node/region/lone.py)
        self.resync = FullResync(self)  # a peer's image taken or joined (node/region/resync.py)
        cmdtable.load_all()
        self.acl = AccessControl(self.config)  # users and permissions (per region, not replicated)
        # the TLS client port: the server's (node/security/tls.py); a core has no port
        self.tls: ClientTls | None = None
        # MIGRATE's connections (node/commands/migrate.py): the driver's; without them MIGRATE answers an error
        self.migrate_transport: MigrateTransport | None = None

    def next_client_id(self) -> int:
        """The id of a new client (CLIENT ID): 1, 2, ... for this run."""
        return next(self._client_ids)

    def member(self) -> ActiveActive:
        """This region's Active-Active part, for what only a cluster's member does (resync, writes taken alone)."""
        aa = self.aa
        if aa is None:
            raise RuntimeError(f"region {self.region} is standalone: it belongs to no cluster")
        return aa

    # ------------------------------------------------------------ settings
    def _limits(self) -> ops.Limits:
        c = self.config
        return ops.Limits(int(c["stream-node-max-entries"]), int(c["stream-node-max-bytes"]),
                          int(c["stream-idmp-duration"]), int(c["stream-idmp-maxsize"]))

    def config_changed(self) -> None:
        self.db.limits = self._limits()
        self._set_slow_bounds()
        self._set_write_cap()
        self.memory.set_limit(int(self.config["maxmemory"]))
        self.apply_yield_ops = int(self.config["crdt-repl-apply-yield-ops"])
        if self.oplog is not None:
            self.oplog.policy = self.config["appendfsync"]
        if self.driver is not None:
            self.driver.settings_changed()

    def _db_setting_changed(self, name: str, value: str) -> None:
        """A database setting braid-admin tuned that is also a server setting (appendfsync)."""
        self.config.set(name, value)
        self.config_changed()

    def flush_database(self) -> int:
        """FLUSHALL run by the region itself (braid-admin flush db): exactly as a client's,
        logged and replicated, with a session of its own that no ACL rule applies to.
        Returns how many keys it removed; ValueError with the reply when it did not run."""
        session = Session(self)
        session.user, session.authenticated = None, True  # the region's own command, not a user's
        before = len(self.db.keys)
        reply = self.call(session, [b"FLUSHALL"])
        if reply != "OK":
            raise ValueError(reply.message if type(reply) is ReplyError else f"region {self.region} has stopped")
        self.records_appended()  # written at the end of this turn, as a client's command would be
        self.keys_ready()        # readers blocked on a removed key
        return before - len(self.db.keys)

    def _set_slow_bounds(self) -> None:
        """The settings of SLOWLOG and LATENCY, read once per change (node/region/slowlog.py's
        ``slow_bounds``): ``slowlog_us``, ``latency_ms`` and ``slow_ns``."""
        self.slowlog_us, self.latency_ms, self.slow_ns = slow_bounds(self.config, self.slowlog, NEVER_NS)

    def _set_write_cap(self) -> None:
        """The largest write command whose log record is sure to fit (node/persistence/aof.py):
        a record holds a command's arguments and its operations, each about as large as the
        command.  With the default query-buffer limit (1 GB) every command fits and nothing
        is checked; only a limit raised past about 2 GB makes the check (``call``) run."""
        cap = aofformat.MAX_PAYLOAD // 2 - (1 << 16)  # (read here: a test lowers it)
        self.write_cap = cap if int(self.config["client-query-buffer-limit"]) > cap else None

    # ------------------------------------------------------------ memory
    def _held_memory(self) -> int:
        """What the region's data holds in memory: the keyspace and the replication backlog."""
        aa = self.aa
        return self.db.memory() + (aa.backlog_memory() if aa is not None else 0)

    # ------------------------------------------------------------ the clock
    def wall_ms(self) -> int:
        """This region's wall clock in milliseconds: the driver's clock moved by
        ``clock_offset_ms`` (``DEBUG CLOCK-OFFSET``, used by the chaos suite to skew a
        region or jump it backwards)."""
        return self.system_ms() + self.clock_offset_ms

    def skew_clock(self, offset_ms: int) -> None:
        """DEBUG CLOCK-OFFSET: this region's wall clock runs ``offset_ms`` from the system's."""
        self.clock_offset_ms = offset_ms

    def now_ms(self) -> int:
        """The clock commands see: pinned for the length of a command (and of its replay)."""
        return self._clock if self._clock is not None else self.wall_ms()

    @contextlib.contextmanager
    def clock_pinned(self, now_ms: int | None = None):
        """Pin ``now_ms()`` (to the current time by default); nested pins keep the outer one."""
        if self._clock is not None:
            yield self._clock
            return
        self._clock = self.wall_ms() if now_ms is None else now_ms
        try:
            yield self._clock
        finally:
            self._clock = None

    def loaded(self, report: LoadReport, seconds: float) -> None:
        """What loading the append-only file found, and how long it took (INFO persistence)."""
        self.loading_report = (report, seconds)

    def state_on_disk(self) -> bool:
        """Is everything the region holds on disk?  Not while a full-resync image it took waits
        for its snapshot (node/region/resync.py)."""
        return self.oplog is None or self.oplog.unsaved_image is None

    def listening_on(self, port: int) -> None:
        """The driver's client port is bound (to ``port``: the setting's, or any free one for 0)."""
        self.port = port
        self.config.set("port", port)

    def attach_ports(self, tls: ClientTls | None = None, migrate: MigrateTransport | None = None) -> None:
        """The driver's ports the commands reach: the TLS client port (CONFIG SET of its
        settings, INFO's counters) and MIGRATE's connections to other servers."""
        self.tls = tls
        self.migrate_transport = migrate

    # ------------------------------------------------------------ the operation log
    def attach_log(self, oplog) -> None:
        """Append to ``oplog`` from now on: everything loaded so far is in it (and may leave)."""
        self.oplog = oplog
        self.log_base_size = oplog.size
        # what commands resolve into, for the log (log_command); without a log nothing is kept
        self.db.own_ops = []
        aa = self.aa
        if aa is not None:
            aa.log_started()
            oplog.replicate(aa.durable, aa.fsync_interval, aa.synced)
            # at every start: this folder may be an older copy of itself (a backup, a VM snapshot),
            # or the machine lost the unsynced tail; either way peers may hold more of its own
            aa.recover_own_operations(self.lone_steps.took_back_own_operations,
                                      machine_crash=getattr(oplog, "may_have_lost", False))
        elif hasattr(oplog, "recovered"):
            oplog.recovered()  # a lone region has no peers to take anything back from: the log is its truth
        self.db.dirty = 0
        self.stats.reset()

    def log_command(self, client: Session, cmd: cmdtable.Command | None, argv: list[bytes],
                     changed: bool, reply: Any) -> None:
        """Append what a command did (node/persistence/oplog.py): the operations it applied
        when they are all it did (``RESOLVED`` commands), else the command with them, if it
        changed state or is a write that did not fail (``LOGGED_IF_CHANGED`` writes: only if
        they changed state, counted or region-local)."""
        db = self.db
        own = db.own_ops
        if own:
            db.own_ops = []  # the next command's start here
            aa = self.aa
            if aa is not None:
                client.wrote_upto = aa.causal.vv.get(self.region, 0)  # what WAIT waits for (commands/waits.py)
                if aa.lone.alone and not self.replaying:
                    aa.note_lone(own)
        if db.local_change:
            db.local_change = False
            changed = True
        oplog = self.oplog
        write = cmd is not None and cmd.is_write and not cmd.logged_if_changed
        if oplog is None or self.replaying or not (own or changed or (write and type(reply) is not ReplyError)):
            return
        now = self.now_ms()  # (pinned for the command)
        if cmd is not None and cmd.resolved:
            if own:
                oplog.log_own(own)
                if self.aa is not None:
                    self.aa.logged(oplog.last_record)  # its operations leave once it is durable
            elif not changed:
                return  # applied nothing, changed nothing
            elif cmd.name == "xadd":  # answered from the IDMP map: it counted a duplicate
                oplog.log_idmp_duplicate(now, argv[1])
            else:
                self._append_command(now, argv)
        else:
            self._append_command(now, argv, own or [])
        client.logged_upto = oplog.last_record  # its reply waits for this record (see reply_needs)

    def _append_command(self, now: int, argv: list[bytes], own: list | None = None) -> None:
        aa, oplog = self.aa, self.oplog
        assert oplog is not None  # (only called with a log)
        oplog.log_command(now, argv, None if aa is None else aa.mode, own or [])
        if aa is not None:
            aa.logged(oplog.last_record)  # its operations leave once it is durable

    def log_settings(self, argv: list[bytes]) -> None:
        """A CONFIG SET that changes how streams are laid out (see LAYOUT_SETTINGS)."""
        if self.oplog is not None and not self.replaying:
            self._append_command(self.now_ms(), argv)

    # ------------------------------------------------------------ the end of a turn
    def end_turn(self) -> bool:
        """Hand this turn's records to the OS (before any reply leaves); returns whether an
        fsync should start now: ``always`` (replies wait for it) and ``everysec`` in a
        cluster (paced, so a crash of the machine loses little that peers may hold)."""
        oplog = self.oplog
        if oplog is None or self.failed is not None:
            return False
        t0 = self.latency_start()
        oplog.write_out()
        if t0:
            self.latency_end("aof-write", t0)
        return oplog.policy == "always" or (oplog.replicating and oplog.policy == "everysec")

    def reply_needs(self, client: Session) -> int:
        """The last record a reply to ``client`` may depend on.  Under ``always`` any record
        so far (a read can show another client's write, so it waits for all of them to be
        on disk); otherwise the records its own commands appended - a failed write (a full
        disk) holds the writer's reply, not every reader's."""
        oplog = self.oplog
        if oplog is None:
            return 0
        return oplog.last_record if oplog.policy == "always" else client.logged_upto

    def may_release(self, needs: int) -> bool:
        """May a reply that depends on records up to ``needs`` leave now?"""
        oplog = self.oplog
        return oplog is None or (oplog.written >= needs and oplog.durable(needs))

    # ------------------------------------------------------------ snapshots
    def snapshot_now(self) -> tuple[bytes, int]:
        """Serialise the state after the log's last record; the log rolls so that record ends a segment.
        A region taking writes alone takes none (node/activeactive/lone_writes.py): its log must keep the point
        where it began, to withdraw what followed; the writes it withdrew and has not issued again
        are logged again after the snapshot's record."""
        if self.oplog is None:
            raise ReplyError("ERR snapshots are the base of the append-only file: this region runs with appendonly no")
        record = self.oplog.last_record
        aa = self.aa
        if aa is not None and aa.lone.alone:
            raise ReplyError("ERR this region takes writes alone until every member has answered: no snapshot "
                             "until then (INFO crdt: crdt_lone_writes)")
        data = snapshot.encode(self.db.keys, aa.causal if aa is not None else None, record,
                               self.system_ms(), aa is not None, self.region)
        try:
            self.oplog.roll()
        except OSError as e:
            if getattr(self.oplog, "unsaved_image", None) is not None:  # the log holds every record after it
                raise ReplyError(f"ERR snapshot failed: the snapshot of a full-resync image must be written first, "
                                 f"and it cannot be: {e.strerror or e}") from None
            raise ReplyError(f"ERR snapshot failed: cannot start a new log segment: {e.strerror}") from None
        self.lone_steps.log_withdrawn_again()
        return data, record

    def save(self, force: bool = False) -> None:
        """SAVE: write a snapshot now, then compact the log.

        ``force``: even while a BGSAVE runs (a full resync replaced the state: the
        older snapshot being written cannot be the base any more).
        """
        if self.saving and not force:
            raise ReplyError("ERR Background save already in progress")
        data, record = self.snapshot_now()
        assert self.oplog is not None  # (snapshot_now refuses without one)
        try:
            self.oplog.write_snapshot(data, record)
        except OSError as e:
            self.saved(record, e)
            raise ReplyError(f"ERR snapshot failed: {e.strerror}") from None
        self.saved(record, None)

    def begin_background_save(self) -> tuple[bytes, int]:
        """A BGSAVE's start (the driver writes the snapshot in a thread, then calls
        :meth:`saved`): the state now, and the record it follows."""
        data, record = self.snapshot_now()
        self.saving = True
        return data, record

    def bgsave(self) -> None:
        """BGSAVE: the driver's (the asyncio server writes the snapshot in a thread); a core
        without one has no worker thread, so the snapshot is written at once."""
        if self.driver is not None:
            self.driver.bgsave()
        else:
            self.save()

    def shutdown(self) -> None:
        """SHUTDOWN: noted (``shutdown_requested``); the driver stops the region (the asyncio
        server once the turn is done)."""
        self.shutdown_requested = True
        if self.driver is not None:
            self.driver.shutdown()

    def saved(self, record: int, error: BaseException | None) -> None:
        """A snapshot of the state after ``record`` was written (or failed): the log before it goes."""
        self.saving = False
        self.last_bgsave_ok = error is None
        if error is not None:
            log.error("snapshot at record %d failed: %s", record, error)
            return
        self.last_save = int(time.time())
        self.dirty_at_save = self.db.dirty
        if self.oplog is not None:
            self.oplog.drop_before_snapshot(record)
            self.log_base_size = self.oplog.size

    # ------------------------------------------------------------ fail-stop
    def fail_next_applies(self, n: int) -> None:
        """DEBUG APPLY-FAIL: the next ``n`` operations of other regions fail to apply."""
        self.apply_faults = n

    def fail_stop(self, reason: str, exc: BaseException | None = None) -> None:
        """Stop the region now: its state may be wrong (node/region/supervision.py).

        Nothing more is applied, logged, replicated or answered: this turn's records
        not yet handed to the OS and the replies not yet sent are dropped (no client
        was told about them; peers resend what was never acknowledged).  The driver
        closes what it owns (:meth:`on_fail_stop`); a process exits with EXIT_FAIL_STOP.
        """
        if self.failed is not None:
            return
        if ran_out_of_memory(exc):  # said so; the reserve goes first: what follows allocates
            release_memory_reserve()
            if not reason.startswith("out of memory"):
                reason = f"out of memory: {reason}"
        self.failed = reason
        try:
            log.critical("FAIL-STOP: region %d stops: %s. Nothing more is applied, replicated, logged or "
                         "answered. Restart the region: it replays its append-only file and catches up from "
                         "its peers (exit status %d).", self.region, reason, EXIT_FAIL_STOP, exc_info=exc)
        finally:  # (even if logging it ran out of memory)
            if self.aa is not None:
                self.aa.hub.pause()  # nothing more crosses a link
            self.on_fail_stop()

    def on_fail_stop(self) -> None:
        """The driver's part of a fail-stop (the server closes clients, links and its port)."""
        if self.driver is not None:
            self.driver.fail_stopped()

    # ------------------------------------------------------------ dispatch
    def call(self, client: Session, argv: list[bytes]) -> Any:
        """Run one command for a client; returns the reply value."""
        user = client.user
        if user is not None and not user.unrestricted:  # what AccessControl.deny lets through at once
            denied = self.acl.deny(self, client, argv)  # ACL: NOPERM before queueing or running
            if denied is not None:
                return self._reject(denied)
        name = argv[0]
        cmd = cmdtable.SPELLINGS.get(name)  # the command's name as clients send it, else any case
        if cmd is None:
            cmd = cmdtable.COMMANDS.get(name.lower())
        if client.multi is not None and (cmd is None or cmd.name not in _RUN_IN_MULTI):
            return self._queue(client, cmd, argv)
        if cmd is None:
            return self._reject(unknown_command_error(argv))
        if cmd.subcommands and len(argv) >= 2:
            sub = cmd.subcommands.get(argv[1].lower())
            if sub is None:
                return self._reject(unknown_subcommand_error(cmd.name, argv[1]))
            cmd = sub
        argc = len(argv)
        if argc < cmd.min_argc or argc > cmd.max_argc:  # Command.check_arity, inlined
            return self._reject(self._exec_abort(client, cmd, f"ERR wrong number of arguments for '{cmd.fullname}' "
                                                              f"command"))
        if not client.authenticated and client.needs_auth() and cmd.name not in ("auth", "hello", "quit", "reset"):
            return self._reject(self._exec_abort(client, cmd, "NOAUTH Authentication required."))
        if self.failed is not None:
            return cmdtable.CLOSE_WITHOUT_REPLY
        if self.routing is not None and not self.replaying:  # a key of another shard, or of two slots
            refused = self.routing.check(routed_keys(client.multi, cmd, argv), client)
            if refused is not None:
                if cmd.name == "exec":
                    discard_transaction(client)
                elif client.multi is not None:  # WATCH inside MULTI: the transaction fails, as in Redis Cluster
                    client.multi_error = True
                return self._reject(refused)
        if self.memory.limit and (cmd.denyoom or (cmd.name == "exec" and client.queued_denyoom())) \
                and not self.replaying and self.memory.out_of_memory():  # (a replay runs what was taken)
            return self._reject(self._exec_abort(client, cmd, OOM_ERROR))
        if cmd.is_write:
            aa = self.aa
            if aa is not None and not aa.writable and not self.replaying and not self.lone_steps.let_through_now():
                return self._reject(ReplyError(aa.write_refusal()))  # joining, leaving or removed
            if self.oplog is not None and self.oplog.error is not None:
                return self._reject(ReplyError(f"MISCONF Errors writing to the AOF file: {self.oplog.error}"))
            if self.write_cap is not None and sum(map(len, argv)) > self.write_cap:
                return self._reject(ReplyError(f"ERR command of more than {self.write_cap} bytes: too large for "
                                               "the append-only file (lower client-query-buffer-limit)"))
        return self.execute(client, cmd, argv)

    def execute(self, client: Session, cmd: cmdtable.Command, argv: list[bytes]) -> Any:
        stats = self.stats
        stats.total_commands_processed += 1
        t0 = _perf_ns()
        db = self.db
        dirty = db.dirty
        outermost = self._clock is None  # clock_pinned(), inlined: every command passes here
        if outermost:
            self._clock = self.system_ms() + self.clock_offset_ms  # wall_ms(), inlined
        try:
            try:
                reply = cmd.handler(client, argv)  # type: ignore[misc]  # (load_all: every command has one)
            except ReplyError as e:
                reply = e
            except Exception as e:
                reply = self.handler_failed(cmd.fullname, e, db.dirty != dirty, outermost)
            if cmd.is_write and db.own_ops is None and self.aa is not None:  # (with a log: log_command)
                client.wrote_upto = self.aa.causal.vv.get(self.region, 0)  # what WAIT waits for
            if cmd.reads_entries:  # (what it decoded counts in the keys' memory)
                db.changed.update(command_keys(cmd, argv))
            # what log_command may log or reset (it does nothing else: a read that changed
            # nothing, or any command without a log, need not call it)
            if (db.own_ops or db.local_change
                    or (self.oplog is not None and (cmd.always_logged or db.dirty != dirty))):
                # EXEC's commands are logged one by one; a sliced command when it runs again
                if cmd.name != "exec" and self.failed is None and type(reply) is not Sliced:
                    self.log_command(client, cmd, argv, db.dirty != dirty, reply)
        finally:
            if outermost:
                self._clock = None
        elapsed = _perf_ns() - t0
        name = cmd.fullname
        rec = stats.command_calls.get(name)
        if rec is None:
            rec = stats.command_calls[name] = [0, 0, 0, 0]
        kind = type(reply)
        if kind is Blocked or kind is Sliced:  # a call once it ends (the server counts it; run again), as in Redis
            stats.total_commands_processed -= 1
        else:
            rec[0] += 1
        rec[1] += elapsed // 1000
        if self.latency:  # empty unless metrics are on (node/runtime/metrics.py)
            timed = self.latency.get(name)
            if timed is not None:  # LatencyHistogram.observe_ns, inlined: this runs for every XADD
                timed.counts[bisect_left(timed.bounds_ns, elapsed)] += 1
                timed.sum_ns += elapsed
        if elapsed >= self.slow_ns:  # slow enough for SLOWLOG or LATENCY: nothing else is done below it
            self.note_slow(client, cmd, argv, elapsed, reply)
        if kind is ReplyError:
            rec[3] += 1
            self.count_error(reply)
        return reply

    # ------------------------------------------------------------ SLOWLOG and LATENCY
    def note_slow(self, client: Session, cmd: cmdtable.Command, argv: list[bytes], elapsed_ns: int,
                  reply: Any) -> None:
        """A command that ran at least ``slow_ns``, as Redis's ``call`` records it: a latency
        sample (``fast-command`` for a command flagged fast, else ``command``), and an entry of
        the slow log - unless it is flagged ``skip_slowlog`` (EXEC: its commands are logged one
        by one), it blocked (logged when it ends: ``_count_unblocked``), or it is a replay."""
        if self.replaying:
            return
        ms = elapsed_ns // 1_000_000
        if self.latency_ms and ms >= self.latency_ms:
            self.latency_events.add("fast-command" if "fast" in cmd.flags else "command", ms, self.system_ms() // 1000)
        us = elapsed_ns // 1000
        if type(reply) is Blocked:
            reply.ran_us = us
        elif type(reply) is Sliced:
            pass  # the slow log shows the command once, when it completes
        elif self.slowlog_us is not None and us >= self.slowlog_us and "skip_slowlog" not in cmd.flags:
            self.slowlog_push(client, cmd, argv, us)

    def slowlog_push(self, client: Session, cmd: cmdtable.Command, argv: list[bytes], us: int) -> None:
        self.slowlog.push(redacted(cmd.fullname, argv), us, self.system_ms() // 1000, client.addr.encode(),
                          client.name)

    def latency_start(self) -> int:
        """Redis's ``latencyStartMonitor``: the time now (ns) when the latency monitor is on and
        this is no replay, else 0 - and no clock is read."""
        return _perf_ns() if self.latency_ms and not self.replaying else 0

    def latency_end(self, event: str, t0: int) -> None:
        """``latencyEndMonitor`` and ``latencyAddSampleIfNeeded``: a sample of ``event`` if the time
        since ``t0`` (from :meth:`latency_start`; 0: not timed) reaches the threshold."""
        if t0 and self.latency_ms:
            ms = (_perf_ns() - t0) // 1_000_000
            if ms >= self.latency_ms:
                self.latency_events.add(event, ms, self.system_ms() // 1000)

    def handler_failed(self, name: str, e: Exception, changed: bool, outermost: bool) -> Any:
        """A handler raised (a bug).  Having changed nothing, it is answered with an error and
        counted; after a change (the dirty counter moved: issuing an operation moves it too,
        see Database.apply), or inside a transaction that made one, the region fail-stops:
        the command is neither logged nor answered, and nothing after it runs.  Running out of
        memory stops the region whether or not the counter moved (node/region/supervision.py)."""
        oom = ran_out_of_memory(e)
        if not changed and not oom and self.failed is None:
            log.exception("command %s failed (it changed nothing: answered with an error)", name)
            self.stats.command_internal_errors += 1
            return ReplyError(f"ERR internal error running '{name}': {type(e).__name__}")
        if self.replaying:  # the log does not replay as it ran: a load error (node/persistence/replay.py)
            if oom:
                raise e  # not a record that cannot be replayed: the start says it ran out of memory
            raise ValueError(f"{name} failed after it changed state: {type(e).__name__}: {e}") from e
        self.fail_stop(f"out of memory while running command {name}: {oom_detail(e)}" if oom else
                       f"command {name} failed after it changed state: {type(e).__name__}: {e}", e)
        if not outermost:
            raise RegionStopped(self.failed) from e  # out of EXEC: nothing after it runs
        return cmdtable.CLOSE_WITHOUT_REPLY

    @staticmethod
    def _exec_abort(client: Session, cmd: cmdtable.Command, message: str) -> ReplyError:
        """A refusal; a refused EXEC also discards the transaction (Redis's ``rejectCommand``)."""
        if cmd.name == "exec":
            return abort_exec(client, message)
        return ReplyError(message)

    def _reject(self, err: ReplyError) -> ReplyError:
        self.count_error(err)
        return err

    def count_error(self, err: ReplyError) -> None:
        self.stats.total_error_replies += 1
        code = err.message.split(" ", 1)[0]
        self.stats.error_codes[code] = self.stats.error_codes.get(code, 0) + 1

    def _queue(self, client: Session, cmd: cmdtable.Command | None, argv: list[bytes]) -> Any:
        if cmd is None:
            client.multi_error = True
            return self._reject(unknown_command_error(argv))
        target = cmd
        if cmd.subcommands and len(argv) >= 2:
            target = cmd.subcommands.get(argv[1].lower(), cmd)
        if not target.check_arity(len(argv)):
            client.multi_error = True
            return self._reject(ReplyError(f"ERR wrong number of arguments for '{target.fullname}' command"))
        # a key of another shard, or of two slots: before any other refusal, as outside MULTI
        # (and as Redis Cluster redirects before it checks memory or writability)
        if self.routing is not None and (refused := self.routing.check(command_keys(target, argv), client)):
            client.multi_error = True
            return self._reject(refused)
        if target.is_write and self.aa is not None and not self.aa.writable:
            client.multi_error = True
            return self._reject(ReplyError(self.aa.write_refusal()))
        if target.denyoom and self.memory.limit and not self.replaying and self.memory.out_of_memory():
            client.multi_error = True
            return self._reject(ReplyError(OOM_ERROR))
        assert client.multi is not None
        client.multi.append(argv)
        return "QUEUED"


    def keys_ready(self) -> None:
        """Serve readers blocked on the keys in ``db.ready`` (without a driver nothing blocks)."""
        if self.driver is not None:
            self.driver.keys_ready()
        else:
            self.db.ready.clear()

    # ------------------------------------------------------------ other regions' operations
    def apply_remote(self, env: Envelope) -> None:
        """Apply and log an operation of another region; the causal log counts it (and relays
        it) only once this returns.  One that cannot be decoded or applied stops the region
        (fail-stop, node/region/supervision.py): skipping it would leave this region diverged."""
        self.apply_remote_run([env])

    def apply_remote_run(self, run: list[Envelope]) -> None:
        """:meth:`apply_remote` of each of ``run`` in turn (envelopes the causal log found ready
        in order), with one log write for them all.  Whatever fails - decoding or applying one,
        logging them, serving the readers - stops the region; ``ApplyFailed.applied`` says how
        many of the run count as applied (those logged before the failure).

        Every ``crdt-repl-apply-yield-ops`` operations the region offers its core to other
        runnable processes (``offer_cpu``; and before each frame, :meth:`peer_frame_arrives`):
        a peer's batch of a few hundred operations takes a few milliseconds to apply, and where
        regions share cores with each other or with their clients (a local cluster, a busy
        host), what waits behind that burst is another process's request - the kernel does not
        preempt a region for a process that woke after it.  With nothing else runnable the
        offer returns at once (a system call every sixteen operations by default); never while
        replaying the log at start."""
        if self.failed is not None:
            raise ApplyFailed(f"region {self.region} has fail-stopped: {self.failed}")
        t0 = self.latency_start()
        try:
            apply_run(self, run)
        finally:
            if t0:
                self.latency_end("crdt-apply", t0)

    def peer_frame_arrives(self) -> None:
        """A link is about to handle a frame of a peer's operations: offer the core to other
        runnable processes first, as between slices of a batch (:meth:`apply_remote_run`): the
        peer's clients, whose replies left with the frame, go first where they share this core."""
        if self.offer_cpu is not None and self.apply_yield_ops:
            self.offer_cpu()

    def remote_batch_applied(self) -> None:
        """A link applied a batch of other regions' operations: serve the readers blocked on
        the keys they touched, once (a reader then gets the whole batch in one reply).  A
        failure here stops the region, as one while applying would."""
        if self.failed is not None:
            return
        try:
            self.keys_ready()
            self.replication_progressed()  # (BRAID.WAITFOR waits for what this region applied)
        except Exception as e:
            reason = f"cannot serve the readers of operations of other regions: {type(e).__name__}: {e}"
            self.fail_stop(reason, e)
            raise ApplyFailed(reason) from e

    def replication_progressed(self) -> None:
        """Serve the clients waiting in WAIT, WAITAOF or BRAID.WAITFOR that can be now."""
        if self.blocking.on_progress and self.driver is not None:
            self.driver.serve_progress_waiters()

    def records_appended(self) -> None:
        """Records were appended outside a client's command (the driver schedules its end of turn)."""
        if self.driver is not None:
            self.driver.records_appended()

    # ------------------------------------------------------------ full resync
    def resync_image(self) -> tuple[bytes, dict]:
        """This region's whole state and backlog, for a peer that lacks trimmed operations."""
        return self.member().resync_image(self.system_ms())

    def install_image(self, data: bytes) -> bool:
        """Take a peer's full-resync image as this region's state (node/region/resync.py).
        False: refused (nothing changed)."""
        return self.resync.install(data)

    def join_image(self, data: bytes) -> bool:
        """Join a peer's image into this region's state (node/region/resync.py).  False:
        refused (nothing changed)."""
        return self.resync.join(data)


# what runs at once inside MULTI rather than being queued (Redis's processCommand)
_RUN_IN_MULTI = frozenset({"exec", "discard", "multi", "watch", "quit", "reset"})


def system_ms() -> int:
    """The system's wall clock in milliseconds."""
    return time.time_ns() // 1_000_000
