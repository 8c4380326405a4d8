"""One region's RESP server: connections, dispatch, transactions, blocking.

Theory of operation
-------------------
bytes -> :class:`node.resp.parser.RequestParser` -> argv -> :meth:`Server.call`
(command table lookup, arity, MULTI queueing, the handler) -> reply value ->
:func:`node.resp.encoder.encode` -> bytes.  Each layer is separate, as in
mini-redis; only :class:`ClientConnection` touches the socket.

Everything runs on one event loop thread, so a command sees and changes the
keyspace atomically, as in Redis.  After each batch of input the server wakes
clients blocked on keys that the batch touched.  Shutdown is handled in one
place (:meth:`Server.stop`).

Durability (node/persistence/): a command runs with the clock pinned (every
``now_ms()`` in it answers the same); what it did is appended to the operation
log - the operations it resolved into (collected by ``Database.apply``), and,
for a command that also changed region-local state, the command with that
clock - so replaying the log rebuilds the state without resolving anything
again (node/persistence/oplog.py).  Replies leave only when the log allows it
(``appendfsync always``: after the fsync that covers them).

Fail-stop (node/supervision.py): a region whose state may be wrong - a handler
that raised after changing state, an operation of another region it could not
apply, a failed background step that changes state - stops at once
(:meth:`Server.fail_stop`) without writing or answering the failing turn; a
restart replays the log.  The cron's steps and the long-lived tasks run under
a :class:`node.supervision.Supervisor`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import signal
import time
from typing import Any

from crdt import ops, resolve

from . import commands as cmdtable
from .blocking import Blocked, BlockingRegistry
from .config import Config
from .db import Database
from .resp.encoder import ReplyError, encode
from .resp.parser import ARG_OVERHEAD, ProtocolError, RequestParser
from .security.tls import ClientTls
from .supervision import EXIT_FAIL_STOP, RegionStopped, Supervisor

log = logging.getLogger("braid.server")

BRAID_VERSION = "0.1.0"
REDIS_COMPAT_VERSION = "8.6.3"  # the Redis release whose stream semantics Braid implements
UNAUTH_QUERY_BUFFER_LIMIT = 1024 * 1024  # a client that has not authenticated yet (as Redis)


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


class Server:
    """A region server.  Holds no process-wide singletons: a shard is just a
    Server owning some keys, and several can live in one process (tests do)."""

    def __init__(self, config: Config | None = None, region: int = 1, cluster=None) -> None:
        """``cluster``: (ClusterConfig, RegionSpec) when this region belongs to one."""
        self.config = config or Config()
        self.region = region  # this region's origin number in every entry log
        self.db = Database(self._limits(), active_active=cluster is not None)
        self.db.own_ops = []  # what commands resolved into, for the operation log (_log_command)
        if cluster is not None:
            from .activeactive import ActiveActive

            cfg, me = cluster
            self.region = me.number
            self.db.aa = ActiveActive(self, cfg, me)
            self.db.resolver = resolve.ActiveActive(self.db.aa)
        self.stats = Stats()
        self._set_write_cap()
        self.blocking = BlockingRegistry()
        self.clients: dict[int, ClientConnection] = {}
        self._client_ids = itertools.count(1)
        self.start_time = time.time()
        self.last_save = int(time.time())
        self.run_id = os.urandom(20).hex()
        self._server: asyncio.base_events.Server | None = None
        self._cron: asyncio.Task | None = None
        self.port = int(self.config["port"])
        self.oplog = None          # node.persistence.oplog.OperationLog, when appendonly is yes
        self.replaying = False     # loading the log: nothing is logged again
        self.loading_report = None
        self._after_log_write: dict[int, ClientConnection] = {}  # replies waiting for this turn's log write
        self._log_write_scheduled = False
        self.saving = False        # a BGSAVE is writing its file
        self._bgsave: asyncio.Future | None = None
        self.last_bgsave_ok = True
        self.dirty_at_save = 0
        self.log_base_size = 0     # log size just after the last snapshot (auto snapshots grow from it)
        self._clock: int | None = None
        self.clock_offset_ms = 0   # DEBUG CLOCK-OFFSET: a skewed region (chaos tests)
        self.apply_faults = 0      # DEBUG APPLY-FAIL: operations of other regions still to fail to apply
        self.failed: str | None = None  # why the region fail-stopped (node/supervision.py)
        self.supervisor = Supervisor(self)
        self.tls = ClientTls(self)  # the TLS client port (node/security/tls.py)
        cmdtable.load_all()

    # ------------------------------------------------------------ settings
    def _limits(self) -> ops.Limits:
        c = self.config
        return ops.Limits(int(c["stream-node-max-entries"]), int(c["stream-node-max-bytes"]),
                          int(c["stream-idmp-duration"]), int(c["stream-idmp-maxsize"]))

    def config_changed(self) -> None:
        self.db.limits = self._limits()
        self._set_write_cap()
        max_bulk = int(self.config["proto-max-bulk-len"])
        for c in self.clients.values():
            c.parser.max_bulk_len = max_bulk
        if self.oplog is not None:
            self.oplog.policy = self.config["appendfsync"]

    def _set_write_cap(self) -> None:
        """The largest write command whose log record is sure to fit (node/persistence/aof.py):
        a record holds a command's arguments and its operations, each about as large as the
        command.  With the default query-buffer limit (1 GB) every command fits and nothing
        is checked; only a limit raised past about 2 GB makes the check (``call``) run."""
        from .persistence.aof import MAX_PAYLOAD

        cap = MAX_PAYLOAD // 2 - (1 << 16)
        self.write_cap = cap if int(self.config["client-query-buffer-limit"]) > cap else None

    def wall_ms(self) -> int:
        """This region's wall clock in milliseconds: the system clock moved by ``clock_offset_ms``
        (``DEBUG CLOCK-OFFSET``, used by the chaos suite to skew a region or jump it backwards).
        The deterministic simulation replaces it with a virtual clock."""
        return int(time.time() * 1000) + self.clock_offset_ms

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

    # ------------------------------------------------------------ persistence
    def open_log(self) -> None:
        """Load the append-only file (if appendonly is yes), then keep appending to it."""
        from .persistence.oplog import OperationLog
        from .persistence.replay import load

        if not self.config["appendonly"]:
            return
        directory = os.path.join(self.config["dir"], self.config["appenddirname"])
        t0 = time.monotonic()
        report = load(self, directory, bool(self.config["aof-load-truncated"]))
        self.loading_report = (dataclasses.replace(report, scanned=None), time.monotonic() - t0)  # drop the records
        if report.records:
            log.info("loaded %d records of the append-only file in %.2fs", report.records, self.loading_report[1])
        self.oplog = OperationLog(directory, self.config["appendfsync"], scanned=report.scanned)
        self.log_base_size = self.oplog.size
        if self.db.aa is not None:
            self.db.aa.log_started()
            self.oplog.on_durable = self.db.aa.durable
            self.oplog.replicating = True
        self.db.dirty = 0
        self.stats.reset()

    def _log_command(self, client: "ClientConnection", cmd: "cmdtable.Command | None", argv: list[bytes],
                     changed: bool, reply: Any) -> None:
        """Append what a command did (node/persistence/oplog.py): the operations it applied
        when they are all it did (``RESOLVED`` commands), else the command with them, if it
        changed state or is a write that did not fail."""
        db = self.db
        own = db.own_ops
        if own:
            db.own_ops = []  # the next command's start here
        oplog = self.oplog
        write = cmd is not None and cmd.is_write
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
        client.logged_upto = oplog.last_record  # its reply waits for this record (see flush)

    def _append_command(self, now: int, argv: list[bytes], own: list | tuple = ()) -> None:
        aa = self.db.aa
        self.oplog.log_command(now, argv, None if aa is None else aa.mode, own)
        if aa is not None:
            aa.logged(self.oplog.last_record)  # its operations leave once it is durable

    # ------------------------------------------------------------ snapshots
    def _snapshot_now(self) -> tuple[bytes, int, str]:
        """Serialise the state after the log's last record; the log rolls so that record ends a segment."""
        from .persistence import snapshot

        if self.oplog is None:
            raise ReplyError("ERR snapshots are the base of the append-only file: this region runs with appendonly no")
        record = self.oplog.last_record
        aa = self.db.aa
        data = snapshot.encode(self.db.keys, aa.causal if aa is not None else None, record,
                               int(time.time() * 1000), aa is not None, self.region)
        try:
            self.oplog.roll()
        except OSError as e:
            raise ReplyError(f"ERR snapshot failed: cannot start a new log segment: {e.strerror}") from None
        return data, record, self.oplog.directory

    def save(self, force: bool = False) -> None:
        """SAVE: write a snapshot now (the loop waits), then compact the log.

        ``force``: even while a BGSAVE runs (a full resync replaced the state: the
        older snapshot being written cannot be the base any more).
        """
        from .persistence import snapshot

        if self.saving and not force:
            raise ReplyError("ERR Background save already in progress")
        data, record, directory = self._snapshot_now()
        try:
            snapshot.write(directory, data, record)
        except OSError as e:
            self._saved(record, e)
            raise ReplyError(f"ERR snapshot failed: {e.strerror}") from None
        self._saved(record, None)

    def bgsave(self) -> None:
        """BGSAVE: serialise now (a consistent point), write and fsync in a worker thread."""
        from .persistence import snapshot

        if self.saving:
            raise ReplyError("ERR Background save already in progress")
        data, record, directory = self._snapshot_now()
        self.saving = True
        fut = asyncio.get_running_loop().run_in_executor(None, snapshot.write, directory, data, record)
        fut.add_done_callback(lambda f: self._saved(record, f.exception()))
        self._bgsave = fut

    def _saved(self, record: int, error: BaseException | None) -> None:
        from .persistence import snapshot

        self.saving = False
        self.last_bgsave_ok = error is None
        if error is not None:
            log.error("snapshot at record %d failed: %s", record, error)
            return
        self.last_save = int(time.time())
        self.dirty_at_save = self.db.dirty
        if self.oplog is not None:
            self.oplog.file.drop_segments_before(record + 1)  # the snapshot holds them now
            snapshot.drop_older(self.oplog.directory, record)
            self.log_base_size = self.oplog.size

    def _auto_snapshot(self) -> None:
        """Like Redis's auto-aof-rewrite: snapshot once the log grew enough since the last one."""
        pct = int(self.config["auto-aof-rewrite-percentage"])
        if self.oplog is None or self.saving or not pct:
            return
        size = self.oplog.size
        if size >= int(self.config["auto-aof-rewrite-min-size"]) and size >= self.log_base_size * (100 + pct) / 100:
            log.info("the append-only file grew to %d bytes: writing a snapshot", size)
            self.bgsave()

    def flush_after_log_write(self, client: "ClientConnection") -> None:
        self.schedule_log_write()
        self._after_log_write[client.id] = client

    def schedule_log_write(self) -> None:
        """Write this turn's records once the turn's work is done (then send the replies)."""
        if not self._log_write_scheduled:
            self._log_write_scheduled = True
            asyncio.get_running_loop().call_soon(self._write_log_then_reply)

    def _write_log_then_reply(self) -> None:
        self._log_write_scheduled = False
        if self.failed is not None:
            return  # a fail-stop: this turn's records and replies are dropped
        clients, self._after_log_write = self._after_log_write, {}
        oplog = self.oplog
        if oplog is not None:
            oplog.write_out()
            if oplog.policy == "always":
                oplog.fsync_now()
            elif oplog.replicating:
                oplog.sync_for_replication()
        for client in clients.values():
            client.send_held()

    def log_settings(self, argv: list[bytes]) -> None:
        """A CONFIG SET that changes how streams are laid out (see LAYOUT_SETTINGS)."""
        if self.oplog is not None and not self.replaying:
            self._append_command(self.now_ms(), argv)

    def expire_idmp(self, now: int, stable: dict[int, int] | None = None) -> int:
        """Seed 002's time-based IDMP expiry over every stream; returns how many iids went.
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

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        if self.oplog is None:
            self.open_log()
        loop = asyncio.get_running_loop()
        plain = port is not None or self.port  # setting `port 0`: no plain port (start(host, 0): any free port)
        port = self.port if port is None else port
        if plain:
            self._server = await loop.create_server(lambda: ClientConnection(self), host, port,
                                                    reuse_address=True, backlog=511)
            self.port = self._server.sockets[0].getsockname()[1]
            self.config.set("port", self.port)
        await self.tls.start(host, bool(plain))
        if loop.get_exception_handler() is None:  # count what nothing else caught (INFO)
            loop.set_exception_handler(self.supervisor.loop_exception)
        self._cron = self.supervisor.watch(loop.create_task(self._cron_loop()), "cron")
        if self.db.aa is not None:
            await self.db.aa.start()

    def shutdown(self) -> None:
        """Stop the region once this turn of the event loop is done (SHUTDOWN)."""
        event = getattr(self, "shutdown_event", None)
        if event is not None:
            event.set()  # serve_forever() stops the region
        else:
            asyncio.get_running_loop().call_soon(
                lambda: self.supervisor.watch(asyncio.ensure_future(self.stop()), "shutdown"))

    def fail_stop(self, reason: str, exc: BaseException | None = None) -> None:
        """Stop the region now: its state may be wrong (node/supervision.py).

        Nothing more is applied, logged, replicated or answered: this turn's records
        not yet handed to the OS and the replies not yet sent are dropped (no client
        was told about them; peers resend what was never acknowledged), clients and
        links are closed, and the server stops; a process exits with EXIT_FAIL_STOP.
        """
        if self.failed is not None:
            return
        self.failed = reason
        log.critical("FAIL-STOP: region %d stops: %s. Nothing more is applied, replicated, logged or "
                     "answered. Restart the region: it replays its append-only file and catches up from "
                     "its peers (exit status %d).", self.region, reason, EXIT_FAIL_STOP, exc_info=exc)
        self._after_log_write.clear()
        for c in list(self.clients.values()):
            self.blocking.unpark(c)
            c.closing = True
            c.out.clear()
            transport, c.transport = c.transport, None
            if transport is not None:
                transport.abort()
        if self.db.aa is not None:
            self.db.aa.hub.pause()  # nothing more crosses a link
        if self._cron is not None:
            self._cron.cancel()
        if self._server is not None:
            self._server.close()
        self.tls.close()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # not serving (the simulation): whoever drives the server sees ``failed``
        self.shutdown()

    async def serve_forever(self) -> None:
        assert self._server is not None or self.config["tls-port"]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        self.shutdown_event = stop
        if self.failed is not None:
            stop.set()  # it fail-stopped while starting
        await stop.wait()
        await self.stop()

    async def stop(self) -> None:
        if self._cron is not None:
            self._cron.cancel()
        if self.db.aa is not None:
            await self.db.aa.stop()
        if self._server is not None:
            self._server.close()
        await self.tls.stop()
        for c in list(self.clients.values()):
            c.close()
        if self._server is not None:
            await self._server.wait_closed()
        if self._bgsave is not None and not self._bgsave.done():
            await asyncio.wait([self._bgsave])  # a snapshot being written is finished, not torn
        if self.oplog is not None:
            if self.failed is not None:
                self.oplog.file.discard_unwritten()  # the failing turn never happened
            self.oplog.close()

    async def _cron_loop(self) -> None:
        """Once a second, each step supervised (a failure is counted and retried with backoff,
        or stops the region when the step changes state): IDMP time-based expiry (seed 002's
        cron job), the log's tick (everysec fsync, MISCONF recovery), automatic snapshots,
        backlog trimming and garbage collection."""
        run = self.supervisor.run_step
        while True:
            await asyncio.sleep(1)
            now = time.monotonic()
            run("idmp-expiry", self._cron_expire_idmp, True, now)
            if self.oplog is not None:
                run("log-tick", self.oplog.tick, False, now)
                run("auto-snapshot", self._auto_snapshot, False, now)
            aa = self.db.aa
            if aa is not None:
                run("backlog-trim", lambda: aa.trim_backlog(int(self.config["crdt-repl-backlog-size"]),
                                                            int(self.config["crdt-repl-backlog-ttl"]),
                                                            time.monotonic()), True, now)
                run("gc", aa.collect_garbage, True, now)

    def _cron_expire_idmp(self) -> None:
        with self.clock_pinned() as now:
            stable = self.db.aa.stable() if self.db.aa is not None else None
            if self.expire_idmp(now, stable) and self.oplog is not None:
                self.oplog.log_idmp_expiry(now, stable)

    # ------------------------------------------------------------ dispatch
    def call(self, client: "ClientConnection", argv: list[bytes]) -> Any:
        """Run one command for a client; returns the reply value."""
        cmd = cmdtable.COMMANDS.get(argv[0].lower())
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
        if not cmd.check_arity(len(argv)):
            return self._reject(ReplyError(f"ERR wrong number of arguments for '{cmd.fullname}' command"))
        if client.needs_auth() and cmd.name not in ("auth", "hello", "quit", "reset"):
            return self._reject(ReplyError("NOAUTH Authentication required."))
        if self.failed is not None:
            return cmdtable.CLOSE_WITHOUT_REPLY
        if self.oplog is not None and self.oplog.error is not None and cmd.is_write:
            return self._reject(ReplyError(f"MISCONF Errors writing to the AOF file: {self.oplog.error}"))
        if self.write_cap is not None and cmd.is_write and sum(map(len, argv)) > self.write_cap:
            return self._reject(ReplyError(f"ERR command of more than {self.write_cap} bytes: too large for "
                                           "the append-only file (lower client-query-buffer-limit)"))
        return self.execute(client, cmd, argv)

    def execute(self, client: "ClientConnection", cmd: cmdtable.Command, argv: list[bytes]) -> Any:
        stats = self.stats
        stats.total_commands_processed += 1
        t0 = time.perf_counter_ns()
        dirty = self.db.dirty
        outermost = self._clock is None  # clock_pinned(), inlined: every command passes here
        if outermost:
            self._clock = self.wall_ms()
        try:
            try:
                reply = cmd.handler(client, argv)  # type: ignore[misc]
            except ReplyError as e:
                reply = e
            except Exception as e:
                reply = self._handler_failed(cmd.fullname, e, self.db.dirty != dirty, outermost)
            if cmd.name != "exec" and self.failed is None:  # EXEC's commands are logged one by one
                self._log_command(client, cmd, argv, self.db.dirty != dirty, reply)
        finally:
            if outermost:
                self._clock = None
        rec = stats.command_calls.get(cmd.fullname)
        if rec is None:
            rec = stats.command_calls[cmd.fullname] = [0, 0, 0, 0]
        rec[0] += 1
        rec[1] += (time.perf_counter_ns() - t0) // 1000
        if type(reply) is ReplyError:
            rec[3] += 1
            self._count_error(reply)
        return reply

    def _handler_failed(self, name: str, e: Exception, changed: bool, outermost: bool) -> Any:
        """A handler raised (a bug).  Having changed nothing, it is answered with an error and
        counted; after a change (the dirty counter moved: issuing an operation moves it too,
        see Database.apply), or inside a transaction that made one, the region fail-stops:
        the command is neither logged nor answered, and nothing after it runs."""
        if not changed and self.failed is None:
            log.exception("command %s failed (it changed nothing: answered with an error)", name)
            self.stats.command_internal_errors += 1
            return ReplyError(f"ERR internal error running '{name}': {type(e).__name__}")
        if self.replaying:  # the log does not replay as it ran: a load error (node/persistence/replay.py)
            raise ValueError(f"{name} failed after it changed state: {type(e).__name__}: {e}") from e
        self.fail_stop(f"command {name} failed after it changed state: {type(e).__name__}: {e}", e)
        if not outermost:
            raise RegionStopped(self.failed) from e  # out of EXEC: nothing after it runs
        return cmdtable.CLOSE_WITHOUT_REPLY

    def _reject(self, err: ReplyError) -> ReplyError:
        self._count_error(err)
        return err

    def _count_error(self, err: ReplyError) -> None:
        self.stats.total_error_replies += 1
        code = err.message.split(" ", 1)[0]
        self.stats.error_codes[code] = self.stats.error_codes.get(code, 0) + 1

    def _queue(self, client: "ClientConnection", cmd: cmdtable.Command | None, argv: list[bytes]) -> Any:
        if cmd is None:
            client.multi_error = True
            return self._reject(unknown_command_error(argv))
        target = cmd
        if cmd.subcommands and len(argv) >= 2:
            target = cmd.subcommands.get(argv[1].lower(), cmd)
        if not target.check_arity(len(argv)):
            client.multi_error = True
            return self._reject(ReplyError(f"ERR wrong number of arguments for '{target.fullname}' command"))
        assert client.multi is not None
        client.multi.append(argv)
        return "QUEUED"

    # ------------------------------------------------------------ blocking
    def park(self, client: "ClientConnection", blocked: Blocked) -> None:
        self.blocking.park(client, blocked)
        if blocked.timeout_ms > 0:
            loop = asyncio.get_running_loop()
            blocked.handle = loop.call_later(blocked.timeout_ms / 1000, self._timeout, client, blocked)
        self._arm_wake(client, blocked)

    def _arm_wake(self, client: "ClientConnection", blocked: Blocked) -> None:
        when = blocked.next_wake_ms() if blocked.next_wake_ms is not None else None
        if when is not None:
            # at least 1 ms ahead: timers may fire a little early against the wall clock
            delay = max(when - self.now_ms(), 1) / 1000
            blocked.wake_handle = asyncio.get_running_loop().call_later(delay, self._wake, client, blocked)

    def _wake(self, client: "ClientConnection", blocked: Blocked) -> None:
        """A timed retry (not a key change): serve the client if it can be served now."""
        if client.blocked is blocked:
            blocked.wake_handle = None
            self._retry(client, blocked)
            if client.blocked is blocked:  # not servable yet: wait for the next moment
                self._arm_wake(client, blocked)

    def _timeout(self, client: "ClientConnection", blocked: Blocked) -> None:
        if client.blocked is blocked:
            blocked.handle = None
            self._unblock(client, blocked.timeout_reply)

    def _retry(self, client: "ClientConnection", blocked: Blocked) -> None:
        dirty = self.db.dirty
        with self.clock_pinned():
            try:
                reply = blocked.retry()
            except Exception as e:
                name = blocked.argv[0].decode("utf-8", "replace").lower() if blocked.argv else "a blocked read"
                reply = self._handler_failed(name, e, self.db.dirty != dirty, True)
                if reply is cmdtable.CLOSE_WITHOUT_REPLY:
                    return
            if blocked.argv is not None:  # a retry of XREADGROUP touches its consumer even unserved
                self._log_command(client, cmdtable.lookup(blocked.argv), blocked.argv, self.db.dirty != dirty,
                                  reply)
        if reply is not None:
            self._unblock(client, reply)

    def _unblock(self, client: "ClientConnection", reply: Any) -> None:
        self.blocking.unpark(client)
        if type(reply) is ReplyError:
            self._count_error(reply)
        client.send(reply)
        client.resume()

    def serve_ready_keys(self) -> None:
        """Wake clients blocked on keys touched since the last call."""
        db = self.db
        while db.ready:
            keys, db.ready = db.ready, set()
            if not self.blocking.by_key:
                return
            for key in keys:
                for client in self.blocking.waiting_on(key):
                    if client.blocked is not None:
                        self._retry(client, client.blocked)


def _clip(b: bytes, n: int = 128) -> str:
    return b[:n].decode("utf-8", "replace")


def unknown_command_error(argv: list[bytes]) -> ReplyError:
    args = ""
    for a in argv[1:]:
        if len(args) >= 128:
            break
        args += "'" + a[: 128 - len(args)].decode("utf-8", "replace") + "' "
    return ReplyError(f"ERR unknown command '{_clip(argv[0])}', with args beginning with: {args}")


class ClientConnection(asyncio.Protocol):
    """One client: its socket, parser, protocol version and session state."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.id = next(server._client_ids)
        self.parser = RequestParser(int(server.config["proto-max-bulk-len"]), self.needs_auth)
        self.transport: asyncio.Transport | None = None
        self.resp3 = False
        self.name: bytes = b""
        self.lib_name: bytes = b""
        self.lib_ver: bytes = b""
        self.authenticated = False
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
        self.out = bytearray()
        self.in_exec = False
        self.reply_needs = 0        # the operation-log record the replies in ``out`` may depend on
        self.logged_upto = 0        # the last operation-log record this client's own commands appended
        self.reply_held = False     # replies wait for the operation log (send_held sends them)
        self.fsync_waiter = False   # send_held is registered to run after an fsync
        self.obuf_soft_since: float | None = None  # when unread replies passed the soft limit
        self._multi_counted: list | None = None  # the MULTI queue _multi_bytes counted,
        self._multi_seen = 0                     # how many of its commands,
        self._multi_size = 0                     # and what they hold

    # ------------------------------------------------------------ session
    @property
    def db(self) -> Database:
        return self.server.db

    def needs_auth(self) -> bool:
        return bool(self.server.config["requirepass"]) and not self.authenticated

    # ------------------------------------------------------------ transport
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        srv = self.server
        srv.stats.total_connections_received += 1
        if len(srv.clients) >= int(srv.config["maxclients"]):
            srv.stats.rejected_connections += 1
            transport.write(b"-ERR max number of clients reached\r\n")  # type: ignore[attr-defined]
            transport.close()
            return
        srv.clients[self.id] = self
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if peer:
            self.addr = f"{peer[0]}:{peer[1]}"
        if sock:
            self.laddr = f"{sock[0]}:{sock[1]}"
        sk = transport.get_extra_info("socket")
        if sk is not None:
            try:
                import socket
                sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.blocking.unpark(self)
        self.server.db.unwatch(self.watched)
        self.server.clients.pop(self.id, None)
        self.closing = True

    def data_received(self, data: bytes) -> None:
        self.server.stats.net_input_bytes += len(data)
        self.parser.feed(data)
        # What this client's input holds: the command being assembled (its parsed
        # arguments and the buffer) and the commands queued by MULTI.  Redis counts
        # the buffer and the queue; the parsed arguments count too, or a huge
        # multibulk count followed by endless small bulks would grow without a bound.
        limit = int(self.server.config["client-query-buffer-limit"])
        if self.needs_auth():
            limit = min(limit, UNAUTH_QUERY_BUFFER_LIMIT)
        held = self.parser.pending_bytes + self._multi_bytes()
        if held > limit:
            log.warning("closing client %d: query buffer over %d bytes", self.id, limit)
            self.server.stats.client_qbuf_limit_disconnections += 1
            self.close()
            return
        self.last_interaction = time.time()
        self.process_input()

    def _multi_bytes(self) -> int:
        """What the commands queued by MULTI hold, counted as the parser counts arguments;
        only the commands queued since the last call are summed."""
        queue = self.multi
        if queue is None:
            self._multi_counted = None
            return 0
        if self._multi_counted is not queue:
            self._multi_counted, self._multi_seen, self._multi_size = queue, 0, 0
        if self._multi_seen < len(queue):
            self._multi_size += sum(len(a) + ARG_OVERHEAD for argv in queue[self._multi_seen:] for a in argv)
            self._multi_seen = len(queue)
        return self._multi_size

    def process_input(self) -> None:
        server = self.server
        out = self.out
        while self.blocked is None and not self.closing:
            try:
                argv = self.parser.next_command()
            except ProtocolError as e:
                err = ReplyError(f"ERR {e}")
                server._count_error(err)
                encode(out, err, self.resp3)
                self.closing = True
                break
            if argv is None:
                break
            self.last_command = argv[0]
            reply = server.call(self, argv)
            if reply is cmdtable.CLOSE_WITHOUT_REPLY:
                self.closing = True
                break
            if type(reply) is Blocked:
                reply.argv = argv
                server.park(self, reply)
                break
            encode(out, reply, self.resp3)
            if server.db.ready:
                if server.blocking.by_key:
                    self.flush()
                    server.serve_ready_keys()
                else:
                    server.db.ready.clear()
        self.flush()
        if self.closing and self.transport is not None and not self.reply_held:
            self.transport.close()

    def resume(self) -> None:
        """Continue with buffered input after being unblocked."""
        if self.transport is not None and not self.transport.is_closing():
            asyncio.get_running_loop().call_soon(self.process_input)

    def send(self, reply: Any) -> None:
        encode(self.out, reply, self.resp3)
        self.flush()

    def flush(self) -> None:
        """Send the replies produced so far, once the operation log allows it.

        Records not yet handed to the OS are written once for every client served in
        this turn of the event loop (as Redis does before it sleeps), then the
        replies go out: one write of the log instead of one per client.  Under
        ``always`` a reply may depend on any record so far (a read can show another
        client's write), so it waits for all of them to be on disk; otherwise a
        reply waits for the records its own commands appended to reach the OS - a
        failed write (a full disk) holds the writer's reply, not every reader's.
        """
        if not self.out or self.transport is None:
            return
        oplog = self.server.oplog
        if oplog is not None:
            self.reply_needs = oplog.last_record if oplog.policy == "always" else self.logged_upto
            if oplog.written < self.reply_needs or not oplog.durable(self.reply_needs):
                self.reply_held = True
                self.server.flush_after_log_write(self)
                self._check_output_limit()  # held replies count too (a failing disk holds them)
                return
        self._send_out()

    def send_held(self) -> None:
        """After this turn's log write (and fsync, under ``always``): send the held replies.

        If an fsync they need is still missing (it failed; the cron retries), wait for it;
        replies added meanwhile may need a later one, which this checks again.
        """
        oplog = self.server.oplog
        if not oplog.durable(self.reply_needs):
            if not self.fsync_waiter:
                self.fsync_waiter = True
                oplog.after_sync(self.reply_needs, self._fsynced)
            return
        self.reply_held = False
        self._send_out()
        if self.closing and self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # what closing waited for has left

    def _fsynced(self) -> None:
        self.fsync_waiter = False
        self.send_held()

    def _send_out(self) -> None:
        if self.out and self.transport is not None and not self.transport.is_closing():
            self.server.stats.net_output_bytes += len(self.out)
            self.transport.write(bytes(self.out))
            self.out.clear()
            self._check_output_limit()

    def _check_output_limit(self) -> None:
        """Redis's ``client-output-buffer-limit`` for normal clients: replies the client has
        not read (what the socket did not take) past the hard limit, or past the soft one
        for longer than its seconds, close the connection; it would grow without a bound."""
        unread = self.transport.get_write_buffer_size() + len(self.out)
        hard, soft, seconds = self.server.config["client-output-buffer-limit"]["normal"]
        over = hard and unread > hard
        if soft and unread > soft:
            now = time.monotonic()
            if self.obuf_soft_since is None:
                self.obuf_soft_since = now
            over = over or now - self.obuf_soft_since > seconds
        else:
            self.obuf_soft_since = None
        if over:
            log.warning("closing client %d: %d bytes of replies it does not read", self.id, unread)
            self.server.stats.client_outbuf_limit_disconnections += 1
            self.closing = True
            self.transport.abort()  # what is buffered would never leave

    def close(self) -> None:
        self.closing = True
        self.flush()
        if self.transport is not None and not self.reply_held:
            self.transport.close()



async def run_server(server: Server, host: str, port: int | None) -> int:
    """Serve until SHUTDOWN or a signal (0), or a fail-stop (EXIT_FAIL_STOP): the exit status.
    ``port`` None: the setting's (0: no plain port)."""
    await server.start(host, port)
    if server._server is not None:
        log.info("braid region %d listening on %s:%d", server.region, host, server.port)
    if server.tls.port:
        log.info("braid region %d TLS port on %s:%d", server.region, host, server.tls.port)
    await server.serve_forever()
    return EXIT_FAIL_STOP if server.failed is not None else 0
