"""One region's RESP server: the asyncio driver of a region core.

Theory of operation
-------------------
bytes -> :class:`node.resp.parser.HiredisRequestParser` -> argv -> ``RegionCore.call``
(node/region/core.py: the command table, arity, MULTI queueing, the handler, the
operation log) -> reply value -> :func:`node.resp.encoder.encode` -> bytes.
Each layer is separate, as in mini-redis; only :class:`ClientConnection`
touches the socket.

:class:`Server` holds a :class:`node.region.core.RegionCore` (``core``) and is its
:class:`~node.region.driver.Driver`, with the parts that need an event loop: the listening
socket and client connections (node/runtime/connection.py), blocking reads and their
timers, the end of each turn (the log's records are written once for every client served
in the turn, then the replies that may leave go out, and only then starts an fsync that
bounds what a crash of the machine may lose), the fsync and BGSAVE worker threads, the
once-a-second cron task, the gRPC links of a cluster, the Prometheus endpoint
(``metrics-port``, node/runtime/metrics.py: served on this loop, so a scrape reads the
state between two commands), signals and shutdown (handled in one place, :meth:`Server.stop`).
The rules - what is logged, when a reply may leave, what the cron does, what
stops the region - are the core's, shared with the deterministic simulation.

Everything runs on one event loop thread, so a command sees and changes the
keyspace atomically, as in Redis.  After each batch of input the server wakes
clients blocked on keys that the batch touched.

Fail-stop (node/region/supervision.py): a region whose state may be wrong - a handler
that raised after changing state, an operation of another region it could not
apply, a failed background step that changes state - stops at once
(``RegionCore.fail_stop``) without writing or answering the failing turn; a
restart replays the log.  The cron's steps and the long-lived tasks run under
a :class:`node.region.supervision.Supervisor`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import gc
import logging
import os
import shutil
import signal
import time
from typing import Any

from node import commands as cmdtable
from node.commands.server import rss_bytes
from node.commands.util import unknown_command_error
from node.persistence import snapshot
from node.persistence.oplog import OperationLog
from node.persistence.promise import FilePromiseStore
from node.persistence.replay import LoadError, load
from node.region import cron
from node.region.blocking import Blocked
from node.region.config import Config
from node.region.core import RegionCore, Stats
from node.region.slicing import Sliced
from node.region.supervision import EXIT_FAIL_STOP
from node.resp.encoder import ReplyError
from node.runtime import connection
from node.runtime.connection import OUTPUT_HOLD_BYTES, ClientConnection
from node.runtime.metrics import RegionMetrics
from node.runtime.migrate_sockets import SocketMigrateTransport
from node.security.tls import ClientTls
from node.transport.admin import AdminServicer
from node.transport.admin import clients as admin_clients
from node.transport.grpc_links import GrpcLinks

__all__ = ["ClientConnection", "Server", "Stats", "run_server",
           "unknown_command_error"]

log = logging.getLogger("braid.server")

class Server:
    """A region server: the asyncio driver of a region core (``core``)."""

    def __init__(self, config: Config | None = None, region: int = 1, cluster=None) -> None:
        """``cluster``: (ClusterConfig, RegionSpec) when this region belongs to one."""
        # the region itself; this server is its driver (RegionCore's Driver: the end of a turn,
        # blocked readers, BGSAVE, SHUTDOWN, a fail-stop), and lets other processes run on its
        # CPU between slices of a peer's batch (os.sched_yield)
        # (startup memory: the interpreter and the code, before any data is loaded)
        self.core = core = RegionCore(config, region, cluster, driver=self,
                                      offer_cpu=getattr(os, "sched_yield", None), startup_memory=rss_bytes())
        self._server: asyncio.base_events.Server | None = None
        self._cron: asyncio.Future | None = None
        self._after_log_write: dict[int, ClientConnection] = {}  # replies waiting for this turn's log write
        self._replies_due: dict[int, ClientConnection] = {}  # replies free to leave, written at the end of the turn
        self._input_due: dict[int, ClientConnection] = {}  # clients whose waiting commands go on then
        self._turn_end_scheduled = False
        self._log_closed = False  # stop() closed the log: a turn still scheduled has nothing to write
        self._bgsave: asyncio.Future | None = None
        self._replay_snapshot_after = 0.0  # monotonic time from which the replay bound may snapshot again
        # the TLS client port (node/security/tls.py) and MIGRATE's cached connections to targets
        self.tls = ClientTls(core, lambda: ClientConnection(self))
        self.migrate_transport = SocketMigrateTransport()
        core.attach_ports(self.tls, self.migrate_transport)
        # the Prometheus endpoint (node/runtime/metrics.py) when metrics-port is set
        self.metrics: RegionMetrics | None = None
        self.purging = False  # braid-admin region purge: the data files go once the region stopped
        self._cache_limits()
        if self.core.aa is not None:
            self.core.aa.on_purge = self.purge
            self.core.aa.attach_promise_store(FilePromiseStore(self.core.config["dir"]))

    # ------------------------------------------------------------ settings
    def settings_changed(self) -> None:
        """The core took new settings (CONFIG SET): the limits every client checks follow."""
        self._cache_limits()
        max_bulk = int(self.core.config["proto-max-bulk-len"])
        for c in self.connections():
            c.parser.max_bulk_len = max_bulk
            c.set_flow_limits()

    def connections(self) -> list[ClientConnection]:
        """The connected clients (every session in ``clients`` is a connection here)."""
        return [c for c in self.core.clients.values() if isinstance(c, ClientConnection)]

    def _cache_limits(self) -> None:
        """The settings every read and write of a client checks, read once per change (CONFIG SET)."""
        self.query_buffer_limit = int(self.core.config["client-query-buffer-limit"])
        self.output_buffer_limit = self.core.config["client-output-buffer-limit"]["normal"]  # (hard, soft, seconds)
        hard, soft, _seconds = self.output_buffer_limit
        # unread replies past which a client's further commands wait for it to read
        self.output_hold = soft or OUTPUT_HOLD_BYTES
        # what process_input lets unread replies reach: the hold, or the hard limit (closes) below it
        self.output_room = min(self.output_hold, hard) if hard else self.output_hold

    # ------------------------------------------------------------ persistence
    def open_log(self) -> None:
        """Load the append-only file (if appendonly is yes), then keep appending to it."""
        if not self.core.config["appendonly"]:
            return
        directory = os.path.join(self.core.config["dir"], self.core.config["appenddirname"])
        t0 = time.monotonic()
        try:  # (opening writes: the run mark, a first segment; an error here is no listen failure)
            report = load(self.core, directory, bool(self.core.config["aof-load-truncated"]))
            seconds = time.monotonic() - t0
            self.core.loaded(dataclasses.replace(report, scanned=None), seconds)  # (the records dropped)
            if report.records:
                log.info("loaded %d records of the append-only file in %.2fs", report.records, seconds)
            oplog = OperationLog(directory, self.core.config["appendfsync"], scanned=report.scanned)
        except OSError as e:
            raise LoadError(log_directory_error(directory, e)) from e
        self.core.attach_log(oplog)

    # ------------------------------------------------------------ snapshots
    def bgsave(self) -> None:
        """BGSAVE: serialise now (a consistent point), write and fsync in a worker thread."""
        if self.core.saving:
            raise ReplyError("ERR Background save already in progress")
        started = time.monotonic()
        data, record = self.core.begin_background_save()
        assert self.core.oplog is not None  # (snapshot_now refuses without one)
        fut = asyncio.get_running_loop().run_in_executor(None, snapshot.write, self.core.oplog.directory, data, record)

        def done(f) -> None:
            ended = time.monotonic()
            # the replay bound may ask for the next snapshot only after nine times this one's
            # duration: snapshots it starts take at most a tenth of the region's time
            self._replay_snapshot_after = ended + 9 * (ended - started)
            self.core.saved(record, f.exception())
        fut.add_done_callback(done)
        self._bgsave = fut

    def _auto_snapshot(self) -> None:
        """Like Redis's auto-aof-rewrite: snapshot once the log grew enough since the last one,
        or would take too long to replay at start (node/persistence/oplog.py's ``rewrite_due``)."""
        if self.core.oplog is None or self.core.saving or (self.core.aa is not None and self.core.aa.lone.alone):
            return  # (a region taking writes alone keeps its log whole: node/activeactive/lone_writes.py)
        reason = self.core.oplog.rewrite_due(self.core.config, self.core.log_base_size,
                                        time.monotonic() >= self._replay_snapshot_after)
        if reason is not None:
            log.info("%s: writing a snapshot", reason)
            self.bgsave()

    def flush_after_log_write(self, client: ClientConnection) -> None:
        self.schedule_turn_end()
        self._after_log_write[client.id] = client

    def reply_at_end_of_turn(self, client: ClientConnection) -> None:
        self.schedule_turn_end()
        self._replies_due[client.id] = client

    def continue_input_at_end_of_turn(self, client: ClientConnection) -> None:
        self.schedule_turn_end()
        self._input_due[client.id] = client

    def schedule_turn_end(self) -> None:
        """Write this turn's records and replies once the turn's work is done."""
        if not self._turn_end_scheduled:
            self._turn_end_scheduled = True
            asyncio.get_running_loop().call_soon(self.finish_turn)

    def records_appended(self) -> None:
        self.schedule_turn_end()  # an operation of another region was logged: write it this turn

    def finish_turn(self) -> None:
        """The end of a turn (``RegionCore.end_turn``): write the records, fsync as the
        policy says (``always``: now, before the replies; ``everysec`` in a cluster: in a
        worker thread, after them), then send the replies that may leave: those that
        waited for the log, then those that waited only for the turn to end.  Last, the
        clients whose commands wait for a later turn (their slice was spent, or they have
        read their replies: ``ClientConnection.process_input``) go on, a slice each; the
        loop reads every other client before the next end of turn."""
        self._turn_end_scheduled = False
        clients, self._after_log_write = self._after_log_write, {}
        due, self._replies_due = self._replies_due, {}
        if self.core.failed is not None:
            return  # a fail-stop: this turn's records and replies are dropped
        if self._log_closed:
            return  # stop() closed the log after the turn was scheduled: closing wrote it
        sync, oplog = self.core.end_turn(), self.core.oplog
        if sync and oplog is not None and oplog.policy == "always":
            oplog.fsync_now()
        for client in clients.values():
            self._reply(client, client.send_held)
        for client in due.values():
            if not client.reply_held:  # (a held reply went with send_held, or waits for an fsync)
                try:  # _reply(client, client.send_now), inlined: every client served in the turn passes here
                    client.send_now()
                except Exception as e:  # noqa: BLE001 - reported, the turn goes on
                    self._reply_failed(client, e, "writing the replies")
        if sync and oplog is not None and oplog.policy != "always":
            oplog.sync_for_replication()  # after the replies: they do not wait for it
        if self._input_due:
            waiting, self._input_due = self._input_due, {}
            for client in waiting.values():
                self._reply(client, client.continue_input, "running the commands")

    @staticmethod
    def _reply(client: ClientConnection, send: Any, what: str = "writing the replies") -> None:
        """One client's replies at the end of the turn: a failure to write them closes that
        client (counted and logged by the loop's handler), not the others' replies."""
        try:
            send()
        except Exception as e:  # noqa: BLE001 - reported below, the turn goes on
            Server._reply_failed(client, e, what)

    @staticmethod
    def _reply_failed(client: ClientConnection, e: Exception, what: str) -> None:
        asyncio.get_running_loop().call_exception_handler(
            {"message": f"{what} of client {client.id} failed: it is closed", "exception": e})
        client.closing = True
        client.out.clear()
        client.drop_spilled()
        if client.transport is not None:
            client.transport.abort()

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        if self.core.oplog is None:
            self.open_log()
        loop = asyncio.get_running_loop()
        plain = port is not None or self.core.port  # setting `port 0`: no plain port (start(host, 0): any free port)
        port = self.core.port if port is None else port
        if plain:
            self._server = await loop.create_server(lambda: ClientConnection(self), host, port,
                                                    reuse_address=True, backlog=511)
            self.core.listening_on(self._server.sockets[0].getsockname()[1])
        await self.tls.start(host, bool(plain))
        if int(self.core.config["metrics-port"]) and self.metrics is None:
            self.metrics = RegionMetrics(self.core)
            await self.metrics.start(host, int(self.core.config["metrics-port"]))
        if loop.get_exception_handler() is None:  # count what nothing else caught (INFO)
            loop.set_exception_handler(self.core.supervisor.loop_exception)
        self._cron = self.core.supervisor.watch(loop.create_task(self._cron_loop()), "cron")
        if self.core.aa is not None:
            # where the RESP port listens; the links over gRPC, the admin service served beside them, and
            # how the region reaches the other regions' (node/transport/{grpc_links,admin}.py)
            await self.core.aa.start(self.core.config["bind"], services=[AdminServicer], connect=admin_clients,
                                   transport=GrpcLinks())

    def shutdown(self) -> None:
        """Stop the region once this turn of the event loop is done (SHUTDOWN)."""
        event = getattr(self, "shutdown_event", None)
        if event is not None:
            event.set()  # serve_forever() stops the region
        else:
            asyncio.get_running_loop().call_soon(
                lambda: self.core.supervisor.watch(asyncio.ensure_future(self.stop()), "shutdown"))

    def purge(self) -> None:
        """A removed region's data is wiped (braid-admin region purge): it stops, then its
        append-only directory (the log and the snapshots) is deleted."""
        log.warning("purging this region: it stops, and its append-only directory is deleted")
        self.purging = True
        self.shutdown()

    def fail_stopped(self) -> None:
        """A fail-stop (``RegionCore.fail_stop``): drop the replies not yet sent, close every
        client and the listening socket, stop the cron, and stop the server."""
        self._after_log_write.clear()
        for c in self.connections():
            self.core.blocking.unpark(c)
            c.closing = True
            c.job = None
            c.out.clear()
            c.drop_spilled()
            transport, c.transport = c.transport, None
            if transport is not None:
                transport.abort()
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

    def stop_on_signals(self) -> asyncio.Event:
        """SIGTERM and SIGINT stop the region cleanly (serve_forever returns) from now on.
        Called before start(): the region answers as soon as it listens, while the rest of
        its start (its links, asking its peers) may still take a while, and a stop sent then
        (a supervisor's, Kubernetes') must not kill it outright."""
        self._stop_requested = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._stop_requested.set)
            except (NotImplementedError, RuntimeError):
                pass
        return self._stop_requested

    async def serve_forever(self) -> None:
        assert self._server is not None or self.core.config["tls-port"]
        stop = getattr(self, "_stop_requested", None) or self.stop_on_signals()
        self.shutdown_event = stop
        if self.core.failed is not None:
            stop.set()  # it fail-stopped while starting
        await stop.wait()
        await self.stop()

    async def stop(self) -> None:
        if self._cron is not None:
            self._cron.cancel()
        if self.core.aa is not None:
            await self.core.aa.stop()
        if self._server is not None:
            self._server.close()
        await self.tls.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        for c in self.connections():
            c.close()
        self.migrate_transport.close_all()
        if self._server is not None:
            await self._server.wait_closed()
        if self._bgsave is not None and not self._bgsave.done():
            await asyncio.wait([self._bgsave])  # a snapshot being written is finished, not torn
        if self.core.oplog is not None:
            if self.core.failed is not None:
                self.core.oplog.file.discard_unwritten()  # the failing turn never happened
            self._log_closed = True
            self.core.oplog.close()
            if self.purging:
                shutil.rmtree(self.core.oplog.directory, ignore_errors=True)
                store = self.core.aa.promise_store if self.core.aa is not None else None
                if store is not None:
                    store.save(None)
                if self.core.aa is not None:  # (a shard's group list: it comes back as a new member)
                    self.core.aa.cluster.drop_group_list()
                log.warning("purged: deleted %s; add the region again (braid-admin region add) and start it",
                            self.core.oplog.directory)

    async def _cron_loop(self) -> None:
        """Once a second, each step supervised (a failure is counted and retried with backoff,
        or stops the region when the step changes state): IDMP time-based expiry (Redis 8.6's
        cron job), the log's tick (everysec fsync, MISCONF recovery), automatic snapshots,
        backlog trimming and garbage collection, and MIGRATE's idle connections closed."""
        run = self.core.supervisor.run_step
        while True:
            await asyncio.sleep(1)
            now = time.monotonic()
            steps = cron.steps(self.core, now)  # the core's: IDMP expiry, backlog trim, GC
            for name, step, changes_state in steps[:1]:
                run(name, step, changes_state, now)
            if self.core.oplog is not None:
                run("log-tick", self.core.oplog.tick, False, now)
                run("auto-snapshot", self._auto_snapshot, False, now)
            for name, step, changes_state in steps[1:]:
                run(name, step, changes_state, now)
            self.migrate_transport.close_idle(now)  # closing sockets: nothing to supervise
            run("memory", self._count_memory, False, now)

    def _count_memory(self) -> None:
        """Once a second: count the clients' buffers and the keys changed since (so the set of
        them stays small without maxmemory too), and log a crossing of maxmemory that
        operations of other regions (never refused) or a client's buffers made."""
        self.core.memory.count_clients()
        if self.core.memory.limit:
            self.core.memory.out_of_memory()
        else:
            self.core.memory.used()

    # ------------------------------------------------------------ sliced commands
    def run_sliced(self, client: ClientConnection, sliced: Sliced, argv: list[bytes]) -> None:
        """Prepare ``client``'s long command a slice per turn of the loop (node/region/slicing.py);
        its later commands wait meanwhile (``job``)."""
        sliced.argv = argv
        client.job = sliced
        asyncio.get_running_loop().call_soon(self._advance_sliced, client, sliced)

    def _advance_sliced(self, client: ClientConnection, sliced: Sliced) -> None:
        """One slice (``connection.SLICED_STEP_S``) of a preparation; the next in the next turn, after the
        loop has served the other clients; at its end, the command completes."""
        if client.job is not sliced:
            return
        if client.closing or client.transport is None or client.transport.is_closing():
            client.job = None  # (its reply could go nowhere)
            return
        steps, argv = sliced.steps, sliced.argv
        assert argv is not None  # (set by the command that returned it)
        end = connection.clock() + connection.SLICED_STEP_S
        try:
            while True:
                next(steps)
                if connection.clock() > end:
                    break
        except StopIteration as done:
            client.job = None
            client.prepared = (argv, done.value)
            self._reply(client, lambda: client.complete_sliced(argv), "completing a command")
            return
        except ReplyError as e:
            client.job = None
            self.core.count_error(e)
            self._reply(client, lambda error=e: client.complete_with(error), "answering a command")
            return
        except Exception as e:  # noqa: BLE001 - a preparation changes nothing: this command fails, not the region
            client.job = None
            name = argv[0].decode("utf-8", "replace").lower()
            log.exception("preparing '%s' for client %d failed", name, client.id)
            error = ReplyError(f"ERR internal error running '{name}': {type(e).__name__}")
            self.core.count_error(error)
            self._reply(client, lambda: client.complete_with(error), "answering a command")
            return
        asyncio.get_running_loop().call_soon(self._advance_sliced, client, sliced)

    # ------------------------------------------------------------ blocking
    def park(self, client: ClientConnection, blocked: Blocked) -> None:
        self.core.blocking.park(client, blocked)
        if blocked.timeout_ms > 0:
            loop = asyncio.get_running_loop()
            blocked.handle = loop.call_later(blocked.timeout_ms / 1000, self._timeout, client, blocked)
        self._arm_wake(client, blocked)

    def _arm_wake(self, client: ClientConnection, blocked: Blocked) -> None:
        when = blocked.next_wake_ms() if blocked.next_wake_ms is not None else None
        if when is not None:
            # at least 1 ms ahead: timers may fire a little early against the wall clock
            delay = max(when - self.core.now_ms(), 1) / 1000
            blocked.wake_handle = asyncio.get_running_loop().call_later(delay, self._wake, client, blocked)

    def _wake(self, client: ClientConnection, blocked: Blocked) -> None:
        """A timed retry (not a key change): serve the client if it can be served now."""
        if client.blocked is blocked:
            blocked.wake_handle = None
            self._retry(client, blocked)
            if client.blocked is blocked:  # not servable yet: wait for the next moment
                self._arm_wake(client, blocked)

    def _timeout(self, client: ClientConnection, blocked: Blocked) -> None:
        if client.blocked is blocked:
            blocked.handle = None
            at_end = blocked.timeout_reply_of
            self._unblock(client, blocked.timeout_reply if at_end is None else at_end())

    def _retry(self, client: ClientConnection, blocked: Blocked) -> None:
        dirty = self.core.db.dirty
        with self.core.clock_pinned():
            try:
                reply = blocked.retry()
            except Exception as e:
                name = blocked.argv[0].decode("utf-8", "replace").lower() if blocked.argv else "a blocked read"
                reply = self.core.handler_failed(name, e, self.core.db.dirty != dirty, True)
                if reply is cmdtable.CLOSE_WITHOUT_REPLY:
                    return
            if blocked.argv is not None:  # a retry of XREADGROUP touches its consumer even unserved
                self.core.log_command(client, cmdtable.lookup(blocked.argv), blocked.argv, self.core.db.dirty != dirty,
                                  reply)
        if reply is not None:
            self._unblock(client, reply)

    def _unblock(self, client: ClientConnection, reply: Any) -> None:
        blocked = client.blocked
        self.core.blocking.unpark(client)
        if blocked is not None and blocked.argv is not None:
            self._count_unblocked(blocked.argv, reply, client, blocked.ran_us)
        elif type(reply) is ReplyError:
            self.core.count_error(reply)
        client.send(reply)
        client.resume()

    def _count_unblocked(self, argv: list[bytes], reply: Any, client: ClientConnection | None = None,
                         ran_us: int = 0) -> None:
        """A blocked command ended (served, timed out, or with an error such as NOGROUP when
        its key or group went away): one call now, and a failed call if it ended with an
        error (INFO commandstats, errorstats), as Redis counts a command it runs again; and,
        as Redis 8 logs it then, an entry of the slow log for ``client`` if the time it ran
        before it blocked (``ran_us``) reaches the threshold."""
        core = self.core
        stats = core.stats
        stats.total_commands_processed += 1
        cmd = cmdtable.lookup(argv)
        name = cmd.fullname if cmd is not None else argv[0].decode("utf-8", "replace").lower()
        rec = stats.command_calls.get(name)
        if rec is None:
            rec = stats.command_calls[name] = [0, 0, 0, 0]
        rec[0] += 1
        if type(reply) is ReplyError:
            rec[3] += 1
            core.count_error(reply)
        if (client is not None and cmd is not None and core.slowlog_us is not None and ran_us >= core.slowlog_us
                and not core.replaying):
            core.slowlog_push(client, cmd, argv, ran_us)

    def keys_ready(self) -> None:
        self.serve_ready_keys()

    def serve_progress_waiters(self) -> None:
        """Retry the clients waiting for replication's progress (WAIT, WAITAOF, BRAID.WAITFOR)."""
        for client in list(self.core.blocking.on_progress):
            if client.blocked is not None:
                self._retry(client, client.blocked)

    def serve_ready_keys(self) -> None:
        """Wake clients blocked on keys touched since the last call."""
        db = self.core.db
        while db.ready:
            keys, db.ready = db.ready, set()
            if not self.core.blocking.by_key:
                return
            for key in keys:
                for client in self.core.blocking.waiting_on(key):
                    if client.blocked is not None:
                        self._retry(client, client.blocked)


def log_directory_error(directory: str, e: OSError) -> str:
    """Why a region cannot open its append-only directory, for the operator (``braid node``
    prints it and exits 1): a full disk said as such, with the file that could not be written."""
    what = e.filename or f"to {directory}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"the disk holding {directory} is full: cannot write {what} ({e.strerror}); "
                "free space on it, then start the region again")
    return f"cannot open the append-only file in {directory}: {what}: {e.strerror or e}"


# Python's cyclic garbage collector, once a region serves: what the start loaded (the modules,
# the replayed streams) is frozen out of its scans, and the youngest generation is collected
# every 20,000 net allocations instead of 700.  Its pauses make the slowest 1 % of replicated
# entries wait: p99 from write to readable at the other regions 11.5-19 ms with Python's
# defaults, 9.3-10 ms with these, once every link is up (bench/README.md, "The replication
# tail").  Nearly everything a region holds is freed by reference counting; only cycles wait
# for the collector.
GC_YOUNG_THRESHOLD = 20_000


def tune_garbage_collector() -> None:
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)


async def run_server(server: Server, host: str, port: int | None) -> int:
    """Serve until SHUTDOWN or a signal (0), or a fail-stop (EXIT_FAIL_STOP): the exit status.
    ``port`` None: the setting's (0: no plain port)."""
    server.stop_on_signals()
    await server.start(host, port)
    tune_garbage_collector()
    if server._server is not None:
        log.info("braid region %d listening on %s:%d", server.core.region, host, server.core.port)
    if server.tls.port:
        log.info("braid region %d TLS port on %s:%d", server.core.region, host, server.tls.port)
    await server.serve_forever()
    return EXIT_FAIL_STOP if server.core.failed is not None else 0
