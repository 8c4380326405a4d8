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

Two drivers run it.  :class:`node.runtime.server.Server` is the asyncio one: it adds
the client sockets, blocking reads with their timers, the worker threads for
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
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import msgspec

from crdt import ops, resolve
from crdt.causal import Envelope
from crdt.reissue import Reissue
from node import commands as cmdtable
from node.activeactive import opcodec
from node.activeactive.lone_writes import LoneStep
from node.activeactive.region import ActiveActive
from node.commands.server import command_keys
from node.commands.transactions import abort_exec
from node.persistence import aofformat, snapshot
from node.region.blocking import Blocked, BlockingRegistry
from node.region.config import Config
from node.region.db import Database
from node.region.slicing import Sliced
from node.region.slowlog import LatencyMonitor, SlowLog, redacted
from node.region.supervision import (
    EXIT_FAIL_STOP,
    ApplyFailed,
    InjectedFault,
    RegionStopped,
    Supervisor,
    oom_detail,
    ran_out_of_memory,
    release_memory_reserve,
)
from node.resp.encoder import ReplyError
from node.security.acl import AccessControl

log = logging.getLogger("braid.server")

OOM_ERROR = "OOM command not allowed when used memory > 'maxmemory'."

_perf_ns = time.perf_counter_ns
NEVER_NS = 1 << 63  # a command's time execute() never reaches: neither SLOWLOG nor LATENCY records


class Stats:
    def __init__(self) -> None:
        self.reset()
        self.total_connections_received = 0
        self.rejected_connections = 0
        self.client_qbuf_limit_disconnections = 0  # clients closed for their input (query buffer)
        self.client_outbuf_limit_disconnections = 0  # and for replies they did not read

    def reset(self) -> None:
        self.total_commands_processed = 0
        self.total_error_replies = 0
        self.unexpected_error_replies = 0
        self.command_internal_errors = 0  # handlers that raised having changed nothing (answered ERR)
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.command_calls: dict[str, list[int]] = {}  # name -> [calls, usec, rejected, failed]
        self.error_codes: dict[str, int] = {}


class LatencyHistogram:
    """Durations counted into fixed buckets (upper bounds in nanoseconds), as a Prometheus
    histogram reads them (node/runtime/metrics.py).  Kept here, with no lock and no label
    lookup, because a command's own time is taken on its way out of :meth:`RegionCore.execute`:
    one bisect and two additions per call; whoever reads it runs on the same thread."""

    __slots__ = ("bounds_ns", "counts", "sum_ns")

    def __init__(self, bounds_s: tuple[float, ...]) -> None:
        self.bounds_ns = tuple(round(b * 1e9) for b in bounds_s)
        self.counts = [0] * (len(bounds_s) + 1)  # the last one: above every bound (+Inf)
        self.sum_ns = 0

    def observe_ns(self, ns: int) -> None:
        self.counts[bisect_left(self.bounds_ns, ns)] += 1
        self.sum_ns += ns


class Session:
    """One client's session state, without a connection: the protocol version, its name,
    authentication, a MULTI queue, watched keys, a blocked read.  The server's
    :class:`node.runtime.server.ClientConnection` adds the socket; a replay and the simulation
    use a bare session (their replies go nowhere or to the simulated client)."""

    # whether a long command may be prepared in slices while this client waits (node/region/slicing.py):
    # a bare session gets every reply at once
    may_slice = False

    def __init__(self, server: RegionCore) -> None:
        self.server = server
        self.id = next(server._client_ids)
        self.resp3 = False
        self.name: bytes = b""
        self.lib_name: bytes = b""
        self.lib_ver: bytes = b""
        self.user = server.acl.default  # as Redis: authenticated at once when default needs no password
        self.authenticated = not server.acl.auth_required()
        self.multi: list[list[bytes]] | None = None
        self.multi_error = False
        self.watched: dict[bytes, int] = {}
        self.blocked: Blocked | None = None
        self.closing = False
        self.created = time.time()
        self.last_interaction = self.created
        self.last_command = b"NULL"
        self.addr = "?:0"
        self.laddr = "?:0"
        self.in_exec = False
        # a long command's value prepared in slices, for its run again: (its argv, the value)
        self.prepared: tuple[list[bytes], Any] | None = None
        self.logged_upto = 0        # the last operation-log record this client's own commands appended

    @property
    def db(self) -> Database:
        return self.server.db

    def needs_auth(self) -> bool:
        return not self.authenticated and self.server.acl.auth_required()


class RegionCore:
    """One region's state and rules (see the module's theory of operation).  Holds no
    process-wide singletons: a shard is just a core owning some keys, and several can
    live in one process (tests and the simulation do)."""

    def __init__(self, config: Config | None = None, region: int = 1, cluster=None,
                 clock: Callable[[], int] | None = None) -> None:
        """``cluster``: (ClusterConfig, RegionSpec) when this region belongs to one.
        ``clock``: the wall clock in milliseconds (default: the system's)."""
        self.config = config or Config()
        self.region = region  # this region's origin number in every entry log
        self.db = Database(self._limits(), active_active=cluster is not None)
        if clock is not None:
            self.system_ms = clock
        if cluster is not None:
            cfg, me = cluster
            self.region = me.number
            # this core is the region's side: its hub applies, installs and joins through it, and
            # braid-admin's flush and backup run as its own commands (node/activeactive/region.py)
            aa = self.db.aa = ActiveActive(self.db, self.config, cfg, me, self, on_setting=self._db_setting_changed)
            self.db.resolver = resolve.ActiveActive(aa)
        self.stats = Stats()
        # command name -> LatencyHistogram of its run time: filled by node/runtime/metrics.py when
        # the region exports metrics, else empty (execute() then only looks it up)
        self.latency: dict[str, LatencyHistogram] = {}
        # SLOWLOG and LATENCY (node/region/slowlog.py): execute() hands them a command that ran at
        # least slow_ns (note_slow); latency_start/latency_end time the region's other stalls
        self.slowlog = SlowLog()
        self.latency_events = LatencyMonitor()
        self._set_slow_bounds()
        self._set_write_cap()
        # Memory (maxmemory, INFO memory): what the process held when it began (the driver
        # measures it; nothing in the simulation), what its clients' buffers hold (the driver
        # counts them once a second), and whether used memory was past maxmemory when last
        # looked at (a crossing is logged)
        self.startup_memory = 0
        self.clients_memory = 0
        self.over_maxmemory = False
        self.memory_peak = 0
        self.maxmemory = 0
        self._set_memory_limit()
        # what lets other processes run on this region's core a moment (the server sets
        # os.sched_yield; a core in the simulation or a test has none): see apply_remote_run
        self.offer_cpu: Callable[[], object] | None = None
        self.apply_yield_ops = int(self.config["crdt-repl-apply-yield-ops"])
        self.blocking = BlockingRegistry()
        self.clients: dict[int, Session] = {}
        self._client_ids = itertools.count(1)
        self.oplog = None          # the operation log (node/persistence/oplog.py, or the simulation's)
        self.replaying = False     # loading the log: nothing is logged again
        self.loading_report = None
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
        cmdtable.load_all()
        self.acl = AccessControl(self.config)  # users and permissions (per region, not replicated)
        self.tls = None  # the TLS client port: the server's (node/security/tls.py); a core has no port
        # MIGRATE's connections to other servers: a port the driver gives (node/commands/migrate.py);
        # a core has none, and MIGRATE answers an error
        self.migrate_transport = None

    @property
    def aa(self):
        """This region's Active-Active part (node/activeactive/region.py), None when standalone."""
        return self.db.aa

    # ------------------------------------------------------------ settings
    def _limits(self) -> ops.Limits:
        c = self.config
        return ops.Limits(int(c["stream-node-max-entries"]), int(c["stream-node-max-bytes"]),
                          int(c["stream-idmp-duration"]), int(c["stream-idmp-maxsize"]))

    def config_changed(self) -> None:
        self.db.limits = self._limits()
        self._set_slow_bounds()
        self._set_write_cap()
        self._set_memory_limit()
        self.apply_yield_ops = int(self.config["crdt-repl-apply-yield-ops"])
        if self.oplog is not None:
            self.oplog.policy = self.config["appendfsync"]

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
        """The settings of SLOWLOG and LATENCY, read once per change: ``slowlog_us`` (None: the
        slow log is off - ``slowlog-log-slower-than`` -1 or ``slowlog-max-len`` 0, as Redis 8),
        ``latency_ms`` (0: off) and ``slow_ns``, the least time of a command either records.
        A shorter ``slowlog-max-len`` trims the log at once (Redis trims it when the CONFIG SET
        that shortened it is itself logged)."""
        c = self.config
        slower, max_len = int(c["slowlog-log-slower-than"]), int(c["slowlog-max-len"])
        self.slowlog.max_len = max_len
        self.slowlog_us = slower if slower >= 0 and max_len > 0 else None
        if self.slowlog_us is not None:
            self.slowlog.trim()
        self.latency_ms = int(c["latency-monitor-threshold"])
        bounds = [b for b in (None if self.slowlog_us is None else self.slowlog_us * 1000,
                              self.latency_ms * 1_000_000 if self.latency_ms else None) if b is not None]
        self.slow_ns = min(bounds, default=NEVER_NS)

    def _set_write_cap(self) -> None:
        """The largest write command whose log record is sure to fit (node/persistence/aof.py):
        a record holds a command's arguments and its operations, each about as large as the
        command.  With the default query-buffer limit (1 GB) every command fits and nothing
        is checked; only a limit raised past about 2 GB makes the check (``call``) run."""
        cap = aofformat.MAX_PAYLOAD // 2 - (1 << 16)  # (read here: a test lowers it)
        self.write_cap = cap if int(self.config["client-query-buffer-limit"]) > cap else None

    # ------------------------------------------------------------ memory
    def _set_memory_limit(self) -> None:
        limit = int(self.config["maxmemory"])
        if limit and limit != self.maxmemory:
            used = self.used_memory()
            if used > limit:  # (Redis's warning)
                log.warning("WARNING: the new maxmemory value set via CONFIG SET (%d) is smaller than the current "
                            "memory usage (%d): commands that add data are refused until it is lower", limit, used)
        self.maxmemory = limit
        if not limit and self.over_maxmemory:
            self.over_maxmemory = False
            log.info("maxmemory is off: commands that add data are taken again")

    def used_memory(self) -> int:
        """What the region holds in memory, in bytes (INFO memory's ``used_memory``, what
        maxmemory limits): the process as it began, the keyspace, the replication backlog and
        the clients' buffers, each counted as it changes rather than measured."""
        used = self.startup_memory + self.db.memory() + self.clients_memory
        aa = self.db.aa
        if aa is not None:
            used += aa.backlog_memory()
        if used > self.memory_peak:
            self.memory_peak = used
        return used

    def out_of_memory(self) -> bool:
        """Is used memory past maxmemory (set)?  A crossing either way is logged once."""
        used = self.used_memory()
        over = used > self.maxmemory
        if over != self.over_maxmemory:
            self.over_maxmemory = over
            if over:
                log.warning("used memory (%d bytes) is over maxmemory (%d): commands that add data are refused "
                            "with OOM until it is lower; operations of other regions are still applied, and may "
                            "take it further past the limit", used, self.maxmemory)
            else:
                log.info("used memory (%d bytes) is under maxmemory (%d) again: commands that add data are taken",
                         used, self.maxmemory)
        return over

    def _queued_denyoom(self, client: Session) -> bool:
        """Does ``client``'s transaction hold a command that adds data (EXEC is refused then)?"""
        for argv in client.multi or ():
            cmd = cmdtable.COMMANDS.get(argv[0].lower())
            if cmd is not None and cmd.subcommands and len(argv) >= 2:
                cmd = cmd.subcommands.get(argv[1].lower(), cmd)
            if cmd is not None and cmd.denyoom:
                return True
        return False

    # ------------------------------------------------------------ the clock
    @staticmethod
    def system_ms() -> int:
        return time.time_ns() // 1_000_000

    def wall_ms(self) -> int:
        """This region's wall clock in milliseconds: the driver's clock moved by
        ``clock_offset_ms`` (``DEBUG CLOCK-OFFSET``, used by the chaos suite to skew a
        region or jump it backwards)."""
        return self.system_ms() + self.clock_offset_ms

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

    # ------------------------------------------------------------ the operation log
    def attach_log(self, oplog) -> None:
        """Append to ``oplog`` from now on: everything loaded so far is in it (and may leave)."""
        self.oplog = oplog
        self.log_base_size = oplog.size
        # what commands resolve into, for the log (_log_command); without a log nothing is kept
        self.db.own_ops = []
        aa = self.db.aa
        if aa is not None:
            aa.log_started()
            oplog.on_durable = aa.durable
            oplog.replicating = True
            oplog.replication_fsync_interval = aa.fsync_interval
            # at every start: this folder may be an older copy of itself (a backup, a VM snapshot),
            # or the machine lost the unsynced tail; either way peers may hold more of its own
            aa.recover_own_operations(self._took_back_own_operations,
                                      machine_crash=getattr(oplog, "may_have_lost", False))
        elif hasattr(oplog, "recovered"):
            oplog.recovered()  # a lone region has no peers to take anything back from: the log is its truth
        self.db.dirty = 0
        self.stats.reset()

    def _log_command(self, client: Session, cmd: cmdtable.Command | None, argv: list[bytes],
                     changed: bool, reply: Any) -> None:
        """Append what a command did (node/persistence/oplog.py): the operations it applied
        when they are all it did (``RESOLVED`` commands), else the command with them, if it
        changed state or is a write that did not fail (``LOGGED_IF_CHANGED`` writes: only if
        they changed state, counted or region-local)."""
        db = self.db
        own = db.own_ops
        if own:
            db.own_ops = []  # the next command's start here
            if db.aa is not None and db.aa.lone.alone and not self.replaying:
                db.aa.note_lone(own)
        if db.local_change:
            db.local_change = False
            changed = True
        oplog = self.oplog
        write = cmd is not None and cmd.is_write and not cmd.logged_if_changed
        if oplog is None or self.replaying or not (own or changed or (write and type(reply) is not ReplyError)):
            return
        if cmd is not None and cmd.resolved:
            if own:
                oplog.log_own(own)
                if db.aa is not None:
                    db.aa.logged(oplog.last_record)  # its operations leave once it is durable
            elif not changed:
                return  # applied nothing, changed nothing
            elif cmd.name == "xadd":  # answered from the IDMP map: it counted a duplicate
                oplog.log_idmp_duplicate(self._clock, argv[1])
            else:
                self._append_command(self._clock, argv)
        else:
            self._append_command(self._clock, argv, own or ())
        client.logged_upto = oplog.last_record  # its reply waits for this record (see reply_needs)

    def _append_command(self, now: int, argv: list[bytes], own: list | tuple = ()) -> None:
        aa = self.db.aa
        self.oplog.log_command(now, argv, None if aa is None else aa.mode, own)
        if aa is not None:
            aa.logged(self.oplog.last_record)  # its operations leave once it is durable

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
        aa = self.db.aa
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
        self._log_withdrawn_again()
        return data, record

    def _log_withdrawn_again(self) -> None:
        """After a new base of the log: the writes withdrawn and not yet issued again, listed again."""
        aa = self.db.aa
        if aa is not None and aa.lone.reissue:
            self.oplog.log_lone(b"w", aa.lone.reissue_base, aa.lone.reissue)
            self.records_appended()

    def save(self, force: bool = False) -> None:
        """SAVE: write a snapshot now, then compact the log.

        ``force``: even while a BGSAVE runs (a full resync replaced the state: the
        older snapshot being written cannot be the base any more).
        """
        if self.saving and not force:
            raise ReplyError("ERR Background save already in progress")
        data, record = self.snapshot_now()
        try:
            self.oplog.write_snapshot(data, record)
        except OSError as e:
            self.saved(record, e)
            raise ReplyError(f"ERR snapshot failed: {e.strerror}") from None
        self.saved(record, None)

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

    # ------------------------------------------------------------ the once-a-second work
    def expire_idmp(self, now: int, stable: dict[int, int] | None = None) -> int:
        """IDMP's time-based expiry (idmp-duration) over every stream; returns how many iids went.
        ``stable`` (a region of a cluster): only adds every region has applied go, and
        the size window is kept here too (crdt/idmp.py)."""
        dropped = 0
        keys = self.db.keys
        index = keys.idmp_keys()  # only the keys that hold maps: not a walk over every key
        for key in list(index):
            s = keys.get(key)
            if s is not None and s.idmp.producers:
                dropped += s.idmp.expire(now, stable)
            if s is None or not s.idmp.producers:
                index.discard(key)
        kept = keys.idmp_kept  # maps of dropped keys expire too, then go
        for key in list(kept):
            dropped += kept[key].expire(now, stable)
            if not kept[key].producers:
                del kept[key]
        return dropped

    def cron_expire_idmp(self) -> int:
        """IDMP expiry with this region's clock and stable vector, logged as it ran."""
        with self.clock_pinned() as now:
            stable = self.db.aa.stable() if self.db.aa is not None else None
            dropped = self.expire_idmp(now, stable)
            if dropped and self.oplog is not None:
                self.oplog.log_idmp_expiry(now, stable)
        return dropped

    def cron_trim_backlog(self, now: float, link_positions: list[int] | None = None) -> int:
        """Trim the replication backlog per ``crdt-repl-backlog-size`` / ``-ttl``."""
        aa = self.db.aa
        if aa is None:
            return 0
        return aa.trim_backlog(int(self.config["crdt-repl-backlog-size"]), int(self.config["crdt-repl-backlog-ttl"]),
                               now, link_positions)

    def cron_collect_garbage(self) -> int:
        return self.db.aa.collect_garbage() if self.db.aa is not None else 0

    def cron_steps(self, now: float, link_positions: list[int] | None = None) -> list[tuple[str, Callable[[], Any], bool]]:
        """The cron's steps that change the region's state, in order, as (name, step,
        changes state): each driver runs them once a second under the supervisor."""
        steps: list[tuple[str, Callable[[], Any], bool]] = [("idmp-expiry", self.cron_expire_idmp, True)]
        if self.db.aa is not None:
            steps.append(("backlog-trim", lambda: self.cron_trim_backlog(now, link_positions), True))
            steps.append(("gc", self.cron_collect_garbage, True))
            steps.append(("lone-writes", lambda: self.cron_lone_writes(self.system_ms()), True))
        return steps

    # ------------------------------------------------------------ writes taken alone
    def cron_lone_writes(self, now_ms: int) -> None:
        """Begin, confirm or withdraw writes taken alone (node/activeactive/lone_writes.py); ``now_ms`` the
        driver's clock (the simulation's virtual one)."""
        step = self.db.aa.lone_step(now_ms)
        if step is LoneStep.ALONE:
            self._begin_alone()
        elif step is LoneStep.CONFIRM:
            self._confirm_alone()
        elif step is LoneStep.WITHDRAW:
            self._withdraw_alone()

    def _lone_writes_now(self) -> bool:
        """A write the region would refuse: whether writes taken alone let it through now (their
        time came, or they were just confirmed) - decided at once, not at the next cron."""
        aa = self.db.aa
        if not (aa.lone.alone or aa.recovering) or int(self.config["crdt-lone-writes-after-ms"]) <= 0:
            return False
        self.cron_lone_writes(self.system_ms())
        return aa.writable

    def _begin_alone(self) -> None:
        aa = self.db.aa
        if aa.lone.alone:  # a period a replay reopened: take writes again
            aa.begin_alone(None)
            return
        image = snapshot.encode(self.db.keys, aa.causal, 0, self.system_ms(), True, self.region)
        if self.oplog is not None:
            self.oplog.log_lone(b"a", aa.causal.vv.get(self.region, 0))
            self.records_appended()
        aa.begin_alone(image)
        if aa.lone.reissue:  # withdrawn before: issued again first, held with the rest
            self._reissue_withdrawn()

    def _confirm_alone(self) -> None:
        """The ``k`` record is on disk before anything held leaves: a replay that found the
        period still open would take the peers' copies of those operations for another history."""
        aa = self.db.aa
        if self.oplog is not None:
            self.oplog.log_lone(b"k", aa.lone.confirmed)
            try:
                self.oplog.roll()
            except OSError as e:  # the record waits in the buffer; the cron tries again
                log.error("cannot confirm the writes taken alone yet: the append-only file cannot be written: %s",
                          e.strerror or e)
                return
        aa.end_alone()

    def _withdraw_alone(self) -> None:
        """Go back to the state before the writes taken alone, apply again the other regions'
        operations since, and handshake again (node/activeactive/lone_writes.py).  The ``w`` record is on
        disk first: a replay then skips the withdrawn operations and waits to issue them again."""
        aa = self.db.aa
        lone = aa.lone
        if self.oplog is not None:
            self.oplog.log_lone(b"w", lone.confirmed, lone.ops)
            try:
                self.oplog.roll()
            except OSError as e:
                log.error("cannot withdraw the writes taken alone yet: the append-only file cannot be written: %s",
                          e.strerror or e)
                return
        again = aa.withdraw_alone()
        self.replaying = True  # they are in the file already
        try:
            for env in again:
                aa.hub.deliver(env)
        finally:
            self.replaying = False
        aa.log_started()  # everything the causal log holds is on disk
        aa.hub.relink()  # the peers learn what this region holds now
        self.db.ready.update(self.db.keys)
        self.keys_ready()

    def _took_back_own_operations(self) -> None:
        """Every live member answered and this region holds its own operations they held: the
        writes it withdrew are issued again before any other (node/activeactive/lone_writes.py)."""
        if self.db.aa.lone.reissue:
            self._reissue_withdrawn()
        if self.oplog is not None:
            self.oplog.recovered()

    def _reissue_withdrawn(self) -> None:
        """Issue the withdrawn writes again, in order, as one record of this region's own
        operations (the first after the ``w`` record: a replay knows them by that)."""
        db, aa = self.db, self.db.aa
        lone = aa.lone
        reissue = Reissue(self.region, aa.stride, lone.reissue_base)
        collected, db.own_ops = db.own_ops, []
        try:
            with self.clock_pinned() as now:
                for data in lone.reissue:
                    op = reissue.make(opcodec.decode(data), db.keys, aa.causal.vv, now)
                    if op is not None:
                        db.apply(op)
            own = db.own_ops
        finally:
            db.own_ops = collected
        if lone.alone:
            aa.note_lone(own)
        if own and self.oplog is not None:
            self.oplog.log_own(own)
            aa.logged(self.oplog.last_record)
            self.records_appended()
        log.warning("issued again the %d writes taken alone it withdrew (%d entries under new IDs: their old "
                    "ones were taken)", len(lone.reissue), reissue.renamed)
        lone.reissued_ops += len(lone.reissue)
        lone.renamed_entries += reissue.renamed
        lone.reissue = []
        db.ready.update(db.keys)
        self.keys_ready()

    # ------------------------------------------------------------ fail-stop
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
            if self.db.aa is not None:
                self.db.aa.hub.pause()  # nothing more crosses a link
            self.on_fail_stop()

    def on_fail_stop(self) -> None:
        """The driver's part of a fail-stop (the server closes clients, links and its port)."""

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
        if client.multi is not None and (cmd is None or cmd.name not in ("exec", "discard", "multi", "watch", "quit", "reset")):
            return self._queue(client, cmd, argv)
        if cmd is None:
            return self._reject(unknown_command_error(argv))
        if cmd.subcommands and len(argv) >= 2:
            sub = cmd.subcommands.get(argv[1].lower())
            if sub is None:
                return self._reject(ReplyError(
                    f"ERR unknown subcommand '{_clip(argv[1])}'. Try {cmd.name.upper()} HELP."))
            cmd = sub
        argc = len(argv)
        if argc < cmd.min_argc or argc > cmd.max_argc:  # Command.check_arity, inlined
            return self._reject(self._exec_abort(client, cmd, f"ERR wrong number of arguments for '{cmd.fullname}' command"))
        if not client.authenticated and client.needs_auth() and cmd.name not in ("auth", "hello", "quit", "reset"):
            return self._reject(self._exec_abort(client, cmd, "NOAUTH Authentication required."))
        if self.failed is not None:
            return cmdtable.CLOSE_WITHOUT_REPLY
        if self.maxmemory and (cmd.denyoom or (cmd.name == "exec" and self._queued_denyoom(client))) \
                and not self.replaying and self.out_of_memory():  # (a replay runs what was taken)
            return self._reject(self._exec_abort(client, cmd, OOM_ERROR))
        if cmd.is_write:
            aa = self.db.aa
            if aa is not None and not aa.writable and not self.replaying and not self._lone_writes_now():
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
                reply = cmd.handler(client, argv)  # type: ignore[misc]
            except ReplyError as e:
                reply = e
            except Exception as e:
                reply = self._handler_failed(cmd.fullname, e, db.dirty != dirty, outermost)
            if cmd.reads_entries:  # (what it decoded counts in the keys' memory)
                db.changed.update(command_keys(cmd, argv))
            # what _log_command may log or reset (it does nothing else: a read that changed
            # nothing, or any command without a log, need not call it)
            if (db.own_ops or db.local_change
                    or (self.oplog is not None and (cmd.always_logged or db.dirty != dirty))):
                # EXEC's commands are logged one by one; a sliced command when it runs again
                if cmd.name != "exec" and self.failed is None and type(reply) is not Sliced:
                    self._log_command(client, cmd, argv, db.dirty != dirty, reply)
        finally:
            if outermost:
                self._clock = None
        elapsed = _perf_ns() - t0
        name = cmd.fullname
        rec = stats.command_calls.get(name)
        if rec is None:
            rec = stats.command_calls[name] = [0, 0, 0, 0]
        kind = type(reply)
        if kind is Blocked or kind is Sliced:  # a call once it ends (count_unblocked; run again), as in Redis
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
            self._count_error(reply)
        return reply

    # ------------------------------------------------------------ SLOWLOG and LATENCY
    def note_slow(self, client: Session, cmd: cmdtable.Command, argv: list[bytes], elapsed_ns: int,
                  reply: Any) -> None:
        """A command that ran at least ``slow_ns``, as Redis's ``call`` records it: a latency
        sample (event ``fast-command`` for a command flagged fast, else ``command``), and an
        entry of the slow log - unless the command is flagged ``skip_slowlog`` (EXEC: its
        commands are logged one by one), or it blocked (it is logged when it ends,
        :meth:`count_unblocked`), or it is a replay of the log."""
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
            self._slowlog_push(client, cmd, argv, us)

    def _slowlog_push(self, client: Session, cmd: cmdtable.Command, argv: list[bytes], us: int) -> None:
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

    def count_unblocked(self, argv: list[bytes], reply: Any, client: Session | None = None,
                        ran_us: int = 0) -> None:
        """A blocked command ended (served, timed out, or with an error such as NOGROUP when
        its key or group went away): one call now, and a failed call if it ended with an
        error (INFO commandstats, errorstats), as Redis counts a command it runs again; and,
        as Redis 8 logs it then, an entry of the slow log for ``client`` if the time it ran
        before it blocked (``ran_us``) reaches the threshold."""
        stats = self.stats
        stats.total_commands_processed += 1
        cmd = cmdtable.lookup(argv)
        name = cmd.fullname if cmd is not None else argv[0].decode("utf-8", "replace").lower()
        rec = stats.command_calls.get(name)
        if rec is None:
            rec = stats.command_calls[name] = [0, 0, 0, 0]
        rec[0] += 1
        if type(reply) is ReplyError:
            rec[3] += 1
            self._count_error(reply)
        if (client is not None and cmd is not None and self.slowlog_us is not None and ran_us >= self.slowlog_us
                and not self.replaying):
            self._slowlog_push(client, cmd, argv, ran_us)

    def _handler_failed(self, name: str, e: Exception, changed: bool, outermost: bool) -> Any:
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
        self._count_error(err)
        return err

    def _count_error(self, err: ReplyError) -> None:
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
        if target.is_write and self.db.aa is not None and not self.db.aa.writable:
            client.multi_error = True
            return self._reject(ReplyError(self.db.aa.write_refusal()))
        if target.denyoom and self.maxmemory and not self.replaying and self.out_of_memory():
            client.multi_error = True
            return self._reject(ReplyError(OOM_ERROR))
        assert client.multi is not None
        client.multi.append(argv)
        return "QUEUED"

    def keys_ready(self) -> None:
        """Serve readers blocked on the keys in ``db.ready`` (the server's; nothing blocks here)."""
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
            self._apply_run(run)
        finally:
            if t0:
                self.latency_end("crdt-apply", t0)

    def _apply_run(self, run: list[Envelope]) -> None:
        """:meth:`apply_remote_run`'s work (timed there for LATENCY as ``crdt-apply``)."""
        db, decode_plain_add = self.db, opcodec.decode_plain_add
        aa = db.aa
        applied = counted = at = 0
        offer_cpu = self.offer_cpu
        every = self.apply_yield_ops if offer_cpu is not None and not self.replaying else 0
        failure: Exception | None = None
        try:
            for env in run:
                if every and applied and applied % every == 0:
                    offer_cpu()
                if self.apply_faults:  # DEBUG APPLY-FAIL
                    self.apply_faults -= 1
                    raise InjectedFault("DEBUG APPLY-FAIL")
                try:  # nearly always an XADD without IDMP: appended without building the operation
                    add = decode_plain_add(env.op)
                except msgspec.ValidationError:
                    db.apply_remote(opcodec.decode(env.op))
                else:
                    db.append_remote(add[1], add[2], add[3], add[4])
                applied += 1
        except Exception as e:
            failure, at = e, applied
        try:
            if applied and self.oplog is not None and not self.replaying:
                self.oplog.log_remote_run(run[:applied])
                aa.logged(self.oplog.last_record, aa.causal.end + applied)  # relayed only once logged here
                self.records_appended()
            counted = applied
            if failure is None and not aa.hub.in_batch:  # a link's batch wakes the readers once, at its end
                self.keys_ready()  # a reader served raising here must not leave them applied but uncounted
        except Exception as e:
            if failure is None:
                failure, at = e, min(counted, len(run) - 1)
        if failure is not None:
            env = run[at]
            reason = (f"cannot apply operation {env.origin}.{env.n} of region {env.origin}: "
                      f"{type(failure).__name__}: {failure}")
            if not self.replaying:  # a replay reports it as a record it cannot load
                self.fail_stop(reason, failure)
            raise ApplyFailed(reason, counted) from failure

    def peer_frame_arrives(self) -> None:
        """A link is about to handle a frame of a peer's operations: offer the core to other
        runnable processes first, as between slices of a batch (:meth:`apply_remote_run`).  A
        peer's frame leaves when the peer ends a turn of its event loop, the same moment its
        replies to its clients leave: where they share this region's core, those clients go
        first."""
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
        except Exception as e:
            reason = f"cannot serve the readers of operations of other regions: {type(e).__name__}: {e}"
            self.fail_stop(reason, e)
            raise ApplyFailed(reason) from e

    def records_appended(self) -> None:
        """Records were appended outside a client's command (the server schedules its end of turn)."""

    # ------------------------------------------------------------ full resync
    def resync_image(self) -> tuple[bytes, dict]:
        """This region's whole state and backlog, for a peer that lacks trimmed operations."""
        return self.db.aa.resync_image(self.system_ms())

    def install_image(self, data: bytes) -> bool:
        """Take a peer's image as this region's replicated state (``ActiveActive.adopt_image``
        says what is kept), apply again on top the operations this region held that the
        image lacks, then a snapshot makes the new state the base of the append-only file
        and readers blocked on any key are served.  False: refused (nothing changed).

        The old log does not lead to the new state, so nothing may be logged on top of the
        image before its snapshot is on disk: replayed on the old state, a record of an
        operation sent with the image's dependencies would not stamp the same, and the
        region could never start again.  So the old log is put on disk first, ending a
        segment at record R (when even that fails, the image is refused and the link asks
        for it again), and the snapshot is the state after R: the image with the operations
        applied again on top (so that dropping the old log loses none of this region's own).
        Their records follow R (they are logged as they are applied), and a replay from the
        snapshot skips them as the causal log skips any operation it holds.  A snapshot that
        cannot be written (a full disk) leaves the log holding every record after R back,
        and the region refusing writes, until the cron writes it
        (``OperationLog.hold_for_image``): a process that ends first starts again from the
        old log, which holds those operations, and is sent an image again.
        """
        if not self._take_image(data, self.db.aa.adopt_image, "refusing a full-resync image", "crdt-image-install"):
            return False
        log.warning("installed a full-resync image: version vector %s", self.db.aa.causal.vv)
        return True

    def join_image(self, data: bytes) -> bool:
        """Join a peer's image into this region's state (``ActiveActive.join_image``: both
        regions dropped operations the other lacks), then, as :meth:`install_image` does,
        deliver again what waited and make the joined state the base of the append-only
        file (a replay of the old log cannot lead to it).  False: refused (nothing changed)."""
        if not self._take_image(data, self.db.aa.join_image, "refusing to join a peer's state", "crdt-state-join"):
            return False
        log.warning("joined a peer's state with this region's: version vector %s", self.db.aa.causal.vv)
        return True

    def _take_image(self, data: bytes, take: Callable[[bytes], list | None], refusing: str, event: str) -> bool:
        """The steps :meth:`install_image` and :meth:`join_image` share around ``take`` (which
        changes the state and returns the envelopes to deliver again on top, or None), timed
        as LATENCY's ``event``."""
        aa = self.db.aa
        oplog = self.oplog
        t0 = self.latency_start()
        try:
            if oplog is not None:
                try:
                    oplog.roll()  # the old state's records on disk, ending a segment: the snapshot follows them
                except OSError as e:
                    log.error("%s: the append-only file cannot be put on disk first: %s", refusing, e.strerror or e)
                    return False
                base = oplog.last_record
            replayed = take(data)
            if replayed is None:
                return False
            for env in replayed:  # operations this region held that the new state lacks, its own among them
                if env.n > aa.causal.vv.get(env.origin, 0):
                    aa.hub.deliver(env)
            if oplog is not None:
                self._save_image(base)
                aa.log_started()
            self.db.ready.update(self.db.keys)
            self.keys_ready()
            return True
        finally:
            self.latency_end(event, t0)

    def _save_image(self, record: int) -> None:
        """The snapshot that makes a full-resync image just installed the base of the append-only
        file, at ``record`` (see :meth:`install_image`); written even while a BGSAVE runs: the
        older state that one writes cannot be the base any more."""
        data = snapshot.encode(self.db.keys, self.db.aa.causal, record, self.system_ms(), True, self.region)
        self._log_withdrawn_again()
        try:
            self.oplog.write_snapshot(data, record)
        except OSError as e:
            self.last_bgsave_ok = False
            self.oplog.hold_for_image(data, record, e, lambda rec: self.saved(rec, None))
            return
        self.saved(record, None)


def _clip(b: bytes, n: int = 128) -> str:
    return b[:n].decode("utf-8", "replace")


def unknown_command_error(argv: list[bytes]) -> ReplyError:
    args = ""
    for a in argv[1:]:
        if len(args) >= 128:
            break
        args += "'" + a[: 128 - len(args)].decode("utf-8", "replace") + "' "
    return ReplyError(f"ERR unknown command '{_clip(argv[0])}', with args beginning with: {args}")
