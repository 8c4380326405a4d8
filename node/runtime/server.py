"""One region's RESP server: the asyncio driver of a region core.

Theory of operation
-------------------
bytes -> :class:`node.resp.parser.HiredisRequestParser` -> argv -> ``RegionCore.call``
(node/region/core.py: the command table, arity, MULTI queueing, the handler, the
operation log) -> reply value -> :func:`node.resp.encoder.encode` -> bytes.
Each layer is separate, as in mini-redis; only :class:`ClientConnection`
touches the socket.

:class:`Server` is a :class:`node.region.core.RegionCore` with the parts that need an
event loop: the listening socket and client connections, blocking reads and
their timers, the end of each turn (the log's records are written once for
every client served in the turn, then the replies that may leave go out, and
only then starts an fsync that bounds what a crash of the machine may lose), the
fsync and BGSAVE worker threads, the once-a-second cron task, the gRPC links
of a cluster, the Prometheus endpoint (``metrics-port``, node/runtime/metrics.py: served
on this loop, so a scrape reads the state between two commands), signals and
shutdown (handled in one place, :meth:`Server.stop`).
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
import socket
import time
from typing import Any

from node import commands as cmdtable
from node.commands.migrate import SocketMigrateTransport
from node.commands.server import clients_memory, rss_bytes
from node.persistence import snapshot
from node.persistence.oplog import OperationLog
from node.persistence.promise import FilePromiseStore
from node.persistence.replay import LoadError, load
from node.region.blocking import Blocked
from node.region.config import Config
from node.region.core import RegionCore, Session, Stats, unknown_command_error
from node.region.slicing import Sliced
from node.region.supervision import EXIT_FAIL_STOP
from node.resp.encoder import Entries, ReplyError, encode
from node.resp.parser import ARG_OVERHEAD, HiredisRequestParser, ProtocolError
from node.runtime.metrics import RegionMetrics
from node.security.tls import ClientTls
from node.transport.admin import AdminServicer
from node.transport.admin import clients as admin_clients
from node.transport.grpc_links import GrpcLinks

__all__ = ["ClientConnection", "Server", "Stats", "run_server",
           "unknown_command_error"]

log = logging.getLogger("braid.server")

UNAUTH_QUERY_BUFFER_LIMIT = 1024 * 1024  # a client that has not authenticated yet (as Redis)

# How a region shares its loop between clients (ClientConnection.process_input).  A client's
# pipelined commands run for at most this long in a turn of the loop before the other clients
# are served; the rest run at the end of the turn, after the loop has read the others.  Redis
# bounds the same thing by reading at most 16 KB of a client per event; Braid measures time,
# as its commands cost far more each: 2 ms is ~300 XADDs or ~150 XRANGEs of 100 entries, so 25
# clients all pipelining hold another one's reply <= 50 ms, while a yield (reading paused and
# resumed, one more end of turn) costs ~11 us, half a percent of the slice.
INPUT_SLICE_S = 0.002
SLICE_CHECK_EVERY = 4  # commands between two readings of the clock, after the first command
# Unread replies (the socket's write buffer and those not yet written) past which a client's
# further commands wait in its input until it reads, when client-output-buffer-limit sets no
# soft limit for normal clients (else the soft limit is the bound).  A few MB: above what a
# client reading as fast as it can leaves unread (the kernel's own send buffer grows to 4 MB,
# tcp_wmem), so such a client never waits; yet one that never reads holds at most this plus
# one reply, not the 1 GB of the hard limit.
OUTPUT_HOLD_BYTES = 4 * 1024 * 1024
# Replies of at least this many bytes are handed to the transport as they are (it keeps a
# view of the buffer, no copy; ``out`` starts anew) rather than copied into a bytes object
# whose buffer the next replies reuse: copying a 50 MB reply cost the loop ~30 ms.
HANDOVER_BYTES = 64 * 1024
# A reply of at least this many bytes that is a bulk string, or a range read's entries
# already encoded one by one (the memos of node/commands/entryreply.py), goes to the
# transport as those pieces, not joined into ``out``: joining a 50 MB XRANGE reply and
# copying it into ``out`` cost the loop ~65 ms of page faults and copies, while the
# transport takes a list of buffers as they are.
SPILL_BYTES = 256 * 1024
SPILL_MIN_ROWS = 16  # (an entry with an encoding in the memo is at most 16 KB: fewer rows never reach it)
# A long command prepared in slices (node/region/slicing.py: a large DUMP or RESTORE) runs at most
# this long per turn of the loop: one input slice, so it delays the others as a pipelining
# client does.
SLICED_STEP_S = INPUT_SLICE_S
# the clock of the slices: the wall clock, as data_received reads it anyway (the client's last
# interaction); a step of it makes one slice shorter or longer, for one turn at most
_clock = time.time


class Server(RegionCore):
    """A region server: a region core driven by an asyncio event loop."""

    def __init__(self, config: Config | None = None, region: int = 1, cluster=None) -> None:
        """``cluster``: (ClusterConfig, RegionSpec) when this region belongs to one."""
        super().__init__(config, region, cluster)
        self.startup_memory = rss_bytes()  # the interpreter and the code, before any data is loaded
        self.start_time = time.time()
        self.run_id = os.urandom(20).hex()
        self._server: asyncio.base_events.Server | None = None
        self._cron: asyncio.Task | None = None
        self.port = int(self.config["port"])
        self._after_log_write: dict[int, ClientConnection] = {}  # replies waiting for this turn's log write
        self._replies_due: dict[int, ClientConnection] = {}  # replies free to leave, written at the end of the turn
        self._input_due: dict[int, ClientConnection] = {}  # clients whose waiting commands go on then
        self._turn_end_scheduled = False
        self._log_closed = False  # stop() closed the log: a turn still scheduled has nothing to write
        self._bgsave: asyncio.Future | None = None
        self._replay_snapshot_after = 0.0  # monotonic time from which the replay bound may snapshot again
        self.tls = ClientTls(self, lambda: ClientConnection(self))  # the TLS client port (node/security/tls.py)
        self.migrate_transport = SocketMigrateTransport()  # MIGRATE's cached connections to targets
        self.metrics = None  # the Prometheus endpoint (node/runtime/metrics.py) when metrics-port is set
        self.purging = False  # braid-admin region purge: the data files go once the region stopped
        self.offer_cpu = getattr(os, "sched_yield", None)  # between slices of a peer's batch (core.py)
        self._cache_limits()
        if self.db.aa is not None:
            self.db.aa.on_purge = self.purge
            self.db.aa.attach_promise_store(FilePromiseStore(self.config["dir"]))

    # ------------------------------------------------------------ settings
    def config_changed(self) -> None:
        super().config_changed()
        self._cache_limits()
        max_bulk = int(self.config["proto-max-bulk-len"])
        for c in self.clients.values():
            c.parser.max_bulk_len = max_bulk
            c.set_flow_limits()

    def _cache_limits(self) -> None:
        """The settings every read and write of a client checks, read once per change (CONFIG SET)."""
        self.query_buffer_limit = int(self.config["client-query-buffer-limit"])
        self.output_buffer_limit = self.config["client-output-buffer-limit"]["normal"]  # (hard, soft, seconds)
        hard, soft, _seconds = self.output_buffer_limit
        # unread replies past which a client's further commands wait for it to read
        self.output_hold = soft or OUTPUT_HOLD_BYTES
        # what process_input lets unread replies reach: the hold, or the hard limit (closes) below it
        self.output_room = min(self.output_hold, hard) if hard else self.output_hold

    # ------------------------------------------------------------ persistence
    def open_log(self) -> None:
        """Load the append-only file (if appendonly is yes), then keep appending to it."""
        if not self.config["appendonly"]:
            return
        directory = os.path.join(self.config["dir"], self.config["appenddirname"])
        t0 = time.monotonic()
        try:  # (opening writes: the run mark, a first segment; an error here is no listen failure)
            report = load(self, directory, bool(self.config["aof-load-truncated"]))
            self.loading_report = (dataclasses.replace(report, scanned=None), time.monotonic() - t0)  # drop the records
            if report.records:
                log.info("loaded %d records of the append-only file in %.2fs", report.records, self.loading_report[1])
            oplog = OperationLog(directory, self.config["appendfsync"], scanned=report.scanned)
        except OSError as e:
            raise LoadError(log_directory_error(directory, e)) from e
        self.attach_log(oplog)

    # ------------------------------------------------------------ snapshots
    def bgsave(self) -> None:
        """BGSAVE: serialise now (a consistent point), write and fsync in a worker thread."""
        if self.saving:
            raise ReplyError("ERR Background save already in progress")
        started = time.monotonic()
        data, record = self.snapshot_now()
        self.saving = True
        fut = asyncio.get_running_loop().run_in_executor(None, snapshot.write, self.oplog.directory, data, record)

        def done(f) -> None:
            ended = time.monotonic()
            # the replay bound may ask for the next snapshot only after nine times this one's
            # duration: snapshots it starts take at most a tenth of the region's time
            self._replay_snapshot_after = ended + 9 * (ended - started)
            self.saved(record, f.exception())
        fut.add_done_callback(done)
        self._bgsave = fut

    def _auto_snapshot(self) -> None:
        """Like Redis's auto-aof-rewrite: snapshot once the log grew enough since the last one,
        or would take too long to replay at start (node/persistence/oplog.py's ``rewrite_due``)."""
        if self.oplog is None or self.saving or (self.db.aa is not None and self.db.aa.lone.alone):
            return  # (a region taking writes alone keeps its log whole: node/activeactive/lone_writes.py)
        reason = self.oplog.rewrite_due(self.config, self.log_base_size,
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
        if self.failed is not None:
            return  # a fail-stop: this turn's records and replies are dropped
        if self._log_closed:
            return  # stop() closed the log after the turn was scheduled: closing wrote it
        sync = self.end_turn()
        if sync and self.oplog.policy == "always":
            self.oplog.fsync_now()
        for client in clients.values():
            self._reply(client, client.send_held)
        for client in due.values():
            if not client.reply_held:  # (a held reply went with send_held, or waits for an fsync)
                self._reply(client, client.send_now)
        if sync and self.oplog.policy != "always":
            self.oplog.sync_for_replication()  # after the replies: they do not wait for it
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
            asyncio.get_running_loop().call_exception_handler(
                {"message": f"{what} of client {client.id} failed: it is closed", "exception": e})
            client.closing = True
            client.out.clear()
            client.drop_spilled()
            if client.transport is not None:
                client.transport.abort()

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
        if int(self.config["metrics-port"]) and self.metrics is None:
            self.metrics = RegionMetrics(self)
            await self.metrics.start(host, int(self.config["metrics-port"]))
        if loop.get_exception_handler() is None:  # count what nothing else caught (INFO)
            loop.set_exception_handler(self.supervisor.loop_exception)
        self._cron = self.supervisor.watch(loop.create_task(self._cron_loop()), "cron")
        if self.db.aa is not None:
            # where the RESP port listens; the links over gRPC, the admin service served beside them, and
            # how the region reaches the other regions' (node/transport/{grpc_links,admin}.py)
            await self.db.aa.start(self.config["bind"], services=[AdminServicer], connect=admin_clients,
                                   transport=GrpcLinks())

    def shutdown(self) -> None:
        """Stop the region once this turn of the event loop is done (SHUTDOWN)."""
        event = getattr(self, "shutdown_event", None)
        if event is not None:
            event.set()  # serve_forever() stops the region
        else:
            asyncio.get_running_loop().call_soon(
                lambda: self.supervisor.watch(asyncio.ensure_future(self.stop()), "shutdown"))

    def purge(self) -> None:
        """A removed region's data is wiped (braid-admin region purge): it stops, then its
        append-only directory (the log and the snapshots) is deleted."""
        log.warning("purging this region: it stops, and its append-only directory is deleted")
        self.purging = True
        self.shutdown()

    def on_fail_stop(self) -> None:
        """A fail-stop (``RegionCore.fail_stop``): drop the replies not yet sent, close every
        client and the listening socket, stop the cron, and stop the server."""
        self._after_log_write.clear()
        for c in list(self.clients.values()):
            self.blocking.unpark(c)
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
        assert self._server is not None or self.config["tls-port"]
        stop = getattr(self, "_stop_requested", None) or self.stop_on_signals()
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
        if self.metrics is not None:
            await self.metrics.stop()
        for c in list(self.clients.values()):
            c.close()
        self.migrate_transport.close_all()
        if self._server is not None:
            await self._server.wait_closed()
        if self._bgsave is not None and not self._bgsave.done():
            await asyncio.wait([self._bgsave])  # a snapshot being written is finished, not torn
        if self.oplog is not None:
            if self.failed is not None:
                self.oplog.file.discard_unwritten()  # the failing turn never happened
            self._log_closed = True
            self.oplog.close()
            if self.purging:
                shutil.rmtree(self.oplog.directory, ignore_errors=True)
                if self.db.aa is not None:
                    self.db.aa.promise_store.save(None)
                log.warning("purged: deleted %s; add the region again (braid-admin region add) and start it",
                            self.oplog.directory)

    async def _cron_loop(self) -> None:
        """Once a second, each step supervised (a failure is counted and retried with backoff,
        or stops the region when the step changes state): IDMP time-based expiry (Redis 8.6's
        cron job), the log's tick (everysec fsync, MISCONF recovery), automatic snapshots,
        backlog trimming and garbage collection, and MIGRATE's idle connections closed."""
        run = self.supervisor.run_step
        while True:
            await asyncio.sleep(1)
            now = time.monotonic()
            steps = self.cron_steps(now)  # the core's: IDMP expiry, backlog trim, GC
            for name, step, changes_state in steps[:1]:
                run(name, step, changes_state, now)
            if self.oplog is not None:
                run("log-tick", self.oplog.tick, False, now)
                run("auto-snapshot", self._auto_snapshot, False, now)
            for name, step, changes_state in steps[1:]:
                run(name, step, changes_state, now)
            self.migrate_transport.close_idle(now)  # closing sockets: nothing to supervise
            run("memory", self._count_memory, False, now)

    def _count_memory(self) -> None:
        """Once a second: count the clients' buffers and the keys changed since (so the set of
        them stays small without maxmemory too), and log a crossing of maxmemory that
        operations of other regions (never refused) or a client's buffers made."""
        self.clients_memory = clients_memory(self)
        if self.maxmemory:
            self.out_of_memory()
        else:
            self.used_memory()

    # ------------------------------------------------------------ sliced commands
    def run_sliced(self, client: ClientConnection, sliced: Sliced, argv: list[bytes]) -> None:
        """Prepare ``client``'s long command a slice per turn of the loop (node/region/slicing.py);
        its later commands wait meanwhile (``job``)."""
        sliced.argv = argv
        client.job = sliced
        asyncio.get_running_loop().call_soon(self._advance_sliced, client, sliced)

    def _advance_sliced(self, client: ClientConnection, sliced: Sliced) -> None:
        """One slice (``SLICED_STEP_S``) of a preparation; the next in the next turn, after the
        loop has served the other clients; at its end, the command completes."""
        if client.job is not sliced:
            return
        if client.closing or client.transport is None or client.transport.is_closing():
            client.job = None  # (its reply could go nowhere)
            return
        steps = sliced.steps
        end = _clock() + SLICED_STEP_S
        try:
            while True:
                next(steps)
                if _clock() > end:
                    break
        except StopIteration as done:
            client.job = None
            client.prepared = (sliced.argv, done.value)
            self._reply(client, lambda: client.complete_sliced(sliced.argv), "completing a command")
            return
        except ReplyError as e:
            client.job = None
            self._count_error(e)
            self._reply(client, lambda error=e: client.complete_with(error), "answering a command")
            return
        except Exception as e:  # noqa: BLE001 - a preparation changes nothing: this command fails, not the region
            client.job = None
            name = sliced.argv[0].decode("utf-8", "replace").lower()
            log.exception("preparing '%s' for client %d failed", name, client.id)
            error = ReplyError(f"ERR internal error running '{name}': {type(e).__name__}")
            self._count_error(error)
            self._reply(client, lambda: client.complete_with(error), "answering a command")
            return
        asyncio.get_running_loop().call_soon(self._advance_sliced, client, sliced)

    # ------------------------------------------------------------ blocking
    def park(self, client: ClientConnection, blocked: Blocked) -> None:
        self.blocking.park(client, blocked)
        if blocked.timeout_ms > 0:
            loop = asyncio.get_running_loop()
            blocked.handle = loop.call_later(blocked.timeout_ms / 1000, self._timeout, client, blocked)
        self._arm_wake(client, blocked)

    def _arm_wake(self, client: ClientConnection, blocked: Blocked) -> None:
        when = blocked.next_wake_ms() if blocked.next_wake_ms is not None else None
        if when is not None:
            # at least 1 ms ahead: timers may fire a little early against the wall clock
            delay = max(when - self.now_ms(), 1) / 1000
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
            self._unblock(client, blocked.timeout_reply)

    def _retry(self, client: ClientConnection, blocked: Blocked) -> None:
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

    def _unblock(self, client: ClientConnection, reply: Any) -> None:
        blocked = client.blocked
        self.blocking.unpark(client)
        if blocked is not None and blocked.argv is not None:
            self.count_unblocked(blocked.argv, reply, client, blocked.ran_us)
        elif type(reply) is ReplyError:
            self._count_error(reply)
        client.send(reply)
        client.resume()

    def keys_ready(self) -> None:
        self.serve_ready_keys()

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


def log_directory_error(directory: str, e: OSError) -> str:
    """Why a region cannot open its append-only directory, for the operator (``braid node``
    prints it and exits 1): a full disk said as such, with the file that could not be written."""
    what = e.filename or f"to {directory}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"the disk holding {directory} is full: cannot write {what} ({e.strerror}); "
                "free space on it, then start the region again")
    return f"cannot open the append-only file in {directory}: {what}: {e.strerror or e}"


class ClientConnection(Session, asyncio.Protocol):
    """One client: a session (node/region/core.py) with its socket, parser and unsent replies."""

    may_slice = True  # it can wait for a long command's preparation (node/region/slicing.py)

    def __init__(self, server: RegionCore) -> None:
        super().__init__(server)
        self.parser = HiredisRequestParser(int(server.config["proto-max-bulk-len"]), self.needs_auth)
        self.transport: asyncio.Transport | None = None
        self.out = bytearray()
        # replies handed over as pieces (``_spill``), to be written before ``out``, and their size
        self.spilled: list = []
        self.spilled_bytes = 0
        self.job: Sliced | None = None  # a long command being prepared in slices (Server.run_sliced)
        self.reply_needs = 0        # the operation-log record the replies in ``out`` may depend on
        self.reply_held = False     # replies wait for the operation log (send_held sends them)
        self.fsync_waiter = False   # send_held is registered to run after an fsync
        # the replies in ``out`` of commands that appended records, as (last record, start, end):
        # a failing disk holding one too long turns it into MISCONF (_held_too_long)
        self.logged_replies: list[tuple[int, int, int]] = []
        self.replied_upto = 0       # logged_upto when the last of them was encoded
        self.answered_upto = 0      # records that hold this client's replies no more (answered MISCONF)
        self.obuf_soft_since: float | None = None  # when unread replies passed the soft limit
        self._soft_timer: asyncio.TimerHandle | None = None  # closes it if it stays past the soft limit
        # Sharing the loop (process_input): when its slice of this turn ends (0: its next run
        # starts one), and whether its commands wait for a later turn (its slice was spent, or
        # its unread replies reached the hold; its input is still read, within the query limit)
        self._slice_end = 0.0
        self.input_waits = False
        # what ``out`` may hold before its commands wait: the hold (or the hard limit) less what
        # the socket had not taken when last asked (it only drains since: a lower bound)
        self._room = 1 << 62
        self._reading_paused = False  # by process_input, for the rest of this turn
        self._writing_paused = False  # the transport's buffer passed the hold (pause_writing)
        self._multi_counted: list | None = None  # the MULTI queue _multi_bytes counted,
        self._multi_seen = 0                     # how many of its commands,
        self._multi_size = 0                     # and what they hold

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
        self.set_flow_limits()
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if peer:
            self.addr = f"{peer[0]}:{peer[1]}"
        if sock:
            self.laddr = f"{sock[0]}:{sock[1]}"
        sk = transport.get_extra_info("socket")
        if sk is not None:
            try:
                sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def set_flow_limits(self) -> None:
        """The transport calls pause_writing once its buffer passes the hold (the soft limit,
        else OUTPUT_HOLD_BYTES), and resume_writing once it is down to a quarter of it."""
        server = self.server
        transport = self.transport
        set_limits = getattr(transport, "set_write_buffer_limits", None)  # (a test's transport may have none)
        if set_limits is not None and not transport.is_closing():
            set_limits(high=server.output_hold, low=server.output_hold // 4)
        self._room = server.output_room - (transport.get_write_buffer_size() if transport is not None else 0)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        """The client read its replies down to the low-water mark: its waiting commands go on."""
        self._writing_paused = False
        self._room = self.server.output_room - self.transport.get_write_buffer_size()
        if self.obuf_soft_since is not None:
            self._check_output_limit()  # back under the soft limit: its clock stops
        if self.input_waits:
            self.server.continue_input_at_end_of_turn(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._soft_timer is not None:
            self._soft_timer.cancel()
            self._soft_timer = None
        self.server._input_due.pop(self.id, None)
        self.server.blocking.unpark(self)
        self.server.db.unwatch(self.watched)
        self.server.clients.pop(self.id, None)
        self.closing = True

    def data_received(self, data: bytes) -> None:
        server = self.server
        server.stats.net_input_bytes += len(data)
        parser = self.parser
        parser.feed(data)
        # What this client's input holds: the command being assembled (its parsed
        # arguments and the buffer) and the commands queued by MULTI.  Redis counts
        # the buffer and the queue; the parsed arguments count too, or a huge
        # multibulk count followed by endless small bulks would grow without a bound.
        limit = server.query_buffer_limit
        if not self.authenticated and self.needs_auth():
            limit = min(limit, UNAUTH_QUERY_BUFFER_LIMIT)
        held = parser.pending_bytes
        if self.multi is not None or self._multi_counted is not None:
            held += self._multi_bytes()
        if held > limit:
            log.warning("closing client %d: query buffer over %d bytes", self.id, limit)
            self.server.stats.client_qbuf_limit_disconnections += 1
            self.close()
            return
        self.last_interaction = now = _clock()
        if not self.input_waits:  # (else the end of a turn runs it: continue_input)
            self.process_input(now)

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

    def process_input(self, now: float = 0.0) -> None:
        """Run the client's complete commands, in order, each reply encoded into ``out``.

        It stops early, the rest of its input waiting (``input_waits``) while more is read:
        - when its slice of the loop is spent (INPUT_SLICE_S, from its first read since its
          replies were last written, at the end of a turn - the loop may hand it many reads in
          one turn; the clock is read after a run's first command, then every
          SLICE_CHECK_EVERY): reading pauses for the rest of the turn and the end of the turn
          goes on (``_yield_turn``), so every other client is served in between;
        - when its unread replies (the transport's buffer and ``out``) pass the hold: they go
          on once it has read them (``send_now``, ``resume_writing``), or, past the hard limit,
          it is closed (``_output_full``).  Each reply is checked as it is made, so the hold
          and the hard limit are passed by one reply at most.
        """
        server = self.server
        parser = self.parser
        end = self._slice_end
        if not end:  # its first run since its replies were last written: a new slice
            end = self._slice_end = (now or _clock()) + INPUT_SLICE_S
        room = self._room
        check = 1
        while self.blocked is None and self.job is None and not self.closing:
            try:
                argv = parser.next_command()
            except ProtocolError as e:
                err = ReplyError(f"ERR {e}")
                server._count_error(err)
                encode(self.out, err, self.resp3)
                self.closing = True
                break
            if argv is None:
                if now and parser.buffered and _clock() > end:
                    # parsing this read (part of a large command) took the slice: the loop
                    # reads no more of it this turn (a run of the end of the turn parses
                    # nothing new, and never pauses reading: that would stop its input)
                    self._yield_turn()
                break
            self.last_command = argv[0]
            reply = server.call(self, argv)
            if reply is cmdtable.CLOSE_WITHOUT_REPLY:
                self.closing = True
                break
            kind = type(reply)
            if kind is Blocked:
                reply.argv = argv
                server.park(self, reply)
                break
            if kind is Sliced:
                server.run_sliced(self, reply, argv)
                break
            out = self.out  # (the command may have sent what it held: CLIENT KILL of itself)
            at = len(out)
            if (kind is Entries and len(reply) > SPILL_MIN_ROWS or kind is bytes and len(reply) >= SPILL_BYTES) \
                    and self._spill(reply):
                out = self.out
            else:
                encode(out, reply, self.resp3)
            if self.logged_upto != self.replied_upto:
                self._logged_reply(at)
            if server.db.ready:
                if server.blocking.by_key:
                    self.flush()
                    server.serve_ready_keys()
                else:
                    server.db.ready.clear()
            if len(out) + self.spilled_bytes > room:  # (each reply is checked as it is made)
                if self._output_full():
                    break
                room = self._room
            check -= 1
            if not check:  # after its first command, then every few (a clock reading per
                if not parser.buffered:  # command costs a pipeline of XADDs 1.5 %)
                    break  # (the usual case: its read held one command)
                if _clock() > end:  # its slice is spent: a later turn runs the rest
                    self._yield_turn()
                    break
                check = SLICE_CHECK_EVERY
        self.flush()
        if self.closing and self.transport is not None and not self.reply_held:
            self.transport.close()

    def resume(self) -> None:
        """Continue with buffered input after being unblocked."""
        if self.transport is not None and not self.transport.is_closing():
            self.server.continue_input_at_end_of_turn(self)

    def _spill(self, reply: Entries | bytes) -> bool:
        """A large reply queued as pieces after what ``out`` holds, ``out`` starting anew:
        no join, no copy (``send_now`` hands the pieces to the transport as a list).  A range
        read's entries go as their encodings (``Entries.parts``), a bulk string (DUMP's
        payload) as itself between its header and CRLF.  Not while ``out`` holds replies of
        logged commands, nor for a command that logged records (``logged_replies`` are places
        in ``out``): False, and the reply is encoded into ``out`` as any other."""
        if self.logged_replies or self.logged_upto != self.replied_upto:
            return False
        out = self.out
        if type(reply) is bytes:
            size = len(reply)
            out += b"$%d\r\n" % size
            pieces: list = [out, reply, b"\r\n"]
            size += 2
        else:
            parts = reply.parts
            if parts is None or len(parts) != len(reply):
                return False
            size = sum(map(len, parts))
            if size < SPILL_BYTES:
                return False
            out += b"*%d\r\n" % len(reply)
            pieces = [out]
            pieces += parts
        self.spilled += pieces
        self.spilled_bytes += len(out) + size
        self.out = bytearray()
        return True

    def _yield_turn(self) -> None:
        """Its slice is spent: the other clients are served, its commands go on at the end of
        the turn (``Server.finish_turn``).  Reading pauses until then: the loop may have more
        reads of it in this turn, one of which may hold a large command, long to parse."""
        self.input_waits = True
        transport = self.transport
        if transport is not None and not self._reading_paused:
            pause = getattr(transport, "pause_reading", None)  # (a test's transport may have none)
            if pause is not None:
                pause()
                self._reading_paused = True
        self.server.continue_input_at_end_of_turn(self)

    def _output_full(self) -> bool:
        """``out`` passed its room: whether the unread replies did pass what they may reach
        (the socket may have taken some since ``_room`` was measured).  Then past the hard
        limit it is closed, else its commands wait until it reads (``send_now`` or
        ``resume_writing`` go on)."""
        server = self.server
        unread = self._unread()
        self._room = server.output_room - (unread - len(self.out) - self.spilled_bytes)
        if unread <= server.output_room:
            return False
        self.input_waits = True
        hard, soft, _seconds = server.output_buffer_limit
        if hard and unread > hard:
            self._close_over_limit()
        elif soft:
            self._check_output_limit()  # the soft limit's clock starts (its timer closes it)
        return True

    def continue_input(self) -> None:
        """At the end of a turn: run the commands that waited (after a yield, a read of the
        replies, or an unblock), with reading on again."""
        transport = self.transport
        if transport is None or transport.is_closing() or self.closing:
            return
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        if self._writing_paused:
            self.input_waits = True
            return  # resume_writing comes back here
        if len(self.out) + self.spilled_bytes > self._room and self._output_full():
            return  # its replies still wait to be read
        self.input_waits = False
        self._slice_end = 0.0  # a turn of its own: a new slice
        self.process_input()

    def send(self, reply: Any) -> None:
        """A reply made outside process_input (a blocked read served or timed out, a sliced
        command completed)."""
        at = len(self.out)
        kind = type(reply)
        if not ((kind is Entries and len(reply) > SPILL_MIN_ROWS or kind is bytes and len(reply) >= SPILL_BYTES)
                and self._spill(reply)):
            encode(self.out, reply, self.resp3)
        if self.logged_upto != self.replied_upto:
            self._logged_reply(at)
        if self.transport is not None and len(self.out) + self.spilled_bytes > self.server.output_room:
            self._check_output_limit()  # the hard limit holds for these replies too
            if self.closing:
                return
        self.flush()

    def complete_with(self, reply: Any) -> None:
        """Its sliced command failed while being prepared: ``reply`` (an error), then its next
        commands."""
        self.send(reply)
        if not self.closing:
            self.server.continue_input_at_end_of_turn(self)

    def complete_sliced(self, argv: list[bytes]) -> None:
        """Its sliced command's preparation is done (``prepared``): the command runs again and
        completes, its reply is sent, and its next commands go on."""
        server = self.server
        reply = server.call(self, argv)
        self.prepared = None  # (taken by the handler, unless the command failed before it)
        if type(reply) is Sliced:  # a handler that did not take its prepared value: a bug
            reply = ReplyError(f"ERR internal error running '{argv[0].decode('utf-8', 'replace').lower()}'")
        self.send(reply)
        if server.db.ready:
            if server.blocking.by_key:
                server.serve_ready_keys()
            else:
                server.db.ready.clear()
        if not self.closing:
            server.continue_input_at_end_of_turn(self)

    def _logged_reply(self, start: int) -> None:
        """The reply just encoded at ``start`` of ``out`` answers a command that appended
        records (up to ``logged_upto``; a blocked read's retries count as its command's)."""
        self.replied_upto = self.logged_upto
        self.logged_replies.append((self.logged_upto, start, len(self.out)))

    def flush(self) -> None:
        """Send the replies produced so far at the end of this turn of the event loop, once
        the operation log allows it.

        Records not yet handed to the OS are written once for every client served in
        this turn (as Redis does before it sleeps), then the replies go out, one write
        per client: one write of the log instead of one per client, and writes to many
        clients close together, so that a client that was asleep is woken once, not
        between every two replies (a wake-up costs the writer more than its write:
        ``bench/README.md``, "Replies leave at the end of the turn").  Which records a
        reply waits for is the core's rule (``RegionCore.reply_needs``).  A client that
        is closing gets its replies at once: nothing comes after them.
        """
        if not (self.out or self.spilled) or self.transport is None:
            return
        server = self.server
        if server.oplog is not None:
            self.reply_needs = needs = server.reply_needs(self)
            if needs > self.answered_upto and not server.may_release(needs):
                self.reply_held = True
                server.flush_after_log_write(self)
                self._check_output_limit()  # held replies count too (a failing disk holds them)
                return
        if self.closing:
            self.send_now()  # the connection closes after this: nothing waits for the end of the turn
        else:
            server.reply_at_end_of_turn(self)

    def send_held(self) -> None:
        """After this turn's log write (and fsync, under ``always``): send the held replies.

        If an fsync they need is still missing (it failed; the cron retries), wait for it;
        replies added meanwhile may need a later one, which this checks again.
        """
        oplog = self.server.oplog
        if self.reply_needs > self.answered_upto and not oplog.durable(self.reply_needs):
            if not self.fsync_waiter:
                self.fsync_waiter = True
                oplog.after_sync(self.reply_needs, self._fsynced, self._held_too_long,
                                 int(self.server.config["aof-write-error-timeout-ms"]) / 1000)
            return
        self.reply_held = False
        self.send_now()
        if self.closing and self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # what closing waited for has left

    def _fsynced(self) -> None:
        self.fsync_waiter = False
        self.send_held()

    def _held_too_long(self) -> None:
        """Writing (or fsyncing) the log kept failing for ``aof-write-error-timeout-ms`` while
        these replies waited for it (``OperationLog.after_sync``): the reply of each command
        whose records are still not durable becomes the MISCONF error writes are refused with
        - not an acknowledgement: the write was applied here and may have been read, and it is
        logged and replicated only if the disk takes it before the process ends - and every
        reply leaves now, in order.  Later replies wait for no record up to these."""
        self.fsync_waiter = False
        if not self.reply_held or self.transport is None or self.transport.is_closing():
            return
        server = self.server
        oplog = server.oplog
        misconf = ReplyError(f"MISCONF Errors writing to the AOF file: {oplog.error or 'write failed'}")
        out, at = self.out, 0
        answered = bytearray()
        for record, start, end in self.logged_replies:
            if not oplog.durable(record):
                answered += out[at:start]
                encode(answered, misconf, self.resp3)
                server._count_error(misconf)
                at = end
        if at:
            answered += out[at:]
            out[:] = answered
        self.logged_replies.clear()
        self.answered_upto = max(self.answered_upto, self.reply_needs)
        self.reply_held = False
        server._reply(self, self.send_now)  # (run by the log's cron step: a failure closes this client only)
        if self.closing and self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def send_now(self) -> None:
        """Write the unsent replies to the socket (what ``flush`` decided may leave).

        The transport (uvloop's) writes what the socket takes at once and keeps the rest, then
        writes it as the socket drains, a socket buffer at a time: a large reply holds the loop
        no longer than its copies into the kernel.  A large ``out`` is handed over as it is (the
        transport keeps a view of it) and a new one started; a small one is copied, and its
        buffer reused."""
        out = self.out
        transport = self.transport
        if self.spilled and transport is not None and not transport.is_closing():
            spilled, self.spilled = self.spilled, []  # (before the write: if it fails, the client is closed)
            self.server.stats.net_output_bytes += self.spilled_bytes
            self.spilled_bytes = 0
            transport.writelines(spilled)
        if out and transport is not None and not transport.is_closing():
            server = self.server
            server.stats.net_output_bytes += len(out)
            if len(out) < HANDOVER_BYTES:
                transport.write(bytes(out))
                out.clear()
            else:
                self.out = bytearray()  # (before the write: if it fails, the client is closed)
                transport.write(out)
            if self.logged_replies:
                self.logged_replies.clear()
            self._slice_end = 0.0  # the end of its turn: its next run starts a new slice
            unsent = transport.get_write_buffer_size()
            self._room = server.output_room - unsent
            if unsent:
                self._check_output_limit()
            else:  # the socket took everything (the usual case): no limit can be passed
                self.obuf_soft_since = None
            if self.input_waits and not self._writing_paused and not self.closing:
                server.continue_input_at_end_of_turn(self)  # there is room again: they go on

    def drop_spilled(self) -> None:
        self.spilled = []
        self.spilled_bytes = 0

    def _unread(self) -> int:
        """The replies the client has not read: what the socket did not take, and ``out``."""
        transport = self.transport
        return len(self.out) + self.spilled_bytes + (transport.get_write_buffer_size() if transport is not None else 0)

    def _check_output_limit(self) -> None:
        """Redis's ``client-output-buffer-limit`` for normal clients: replies the client has
        not read (what the socket did not take) past the hard limit, or past the soft one
        for longer than its seconds, close the connection; it would grow without a bound.
        A client past the soft limit is checked again when its seconds are up (its commands
        wait meanwhile: nothing else would check it)."""
        if self.transport is None or self.transport.is_closing():
            return
        unread = self._unread()
        if not unread:  # the socket took everything (the usual case): no limit can be passed
            self.obuf_soft_since = None
            return
        hard, soft, seconds = self.server.output_buffer_limit
        over = hard and unread > hard
        if soft and unread > soft:
            now = time.monotonic()
            if self.obuf_soft_since is None:
                self.obuf_soft_since = now
            over = over or now - self.obuf_soft_since > seconds
            if not over and self._soft_timer is None:
                self._soft_timer = asyncio.get_running_loop().call_later(
                    max(self.obuf_soft_since + seconds - now, 0) + 0.01, self._soft_time_up)
        else:
            self.obuf_soft_since = None
        if over:
            self._close_over_limit()

    def _soft_time_up(self) -> None:
        self._soft_timer = None
        self._check_output_limit()

    def _close_over_limit(self) -> None:
        log.warning("closing client %d: %d bytes of replies it does not read", self.id, self._unread())
        self.server.stats.client_outbuf_limit_disconnections += 1
        self.closing = True
        self.input_waits = False
        self.out = bytearray()  # (what it held would never leave)
        self.drop_spilled()
        self.logged_replies.clear()
        self.transport.abort()  # what is buffered would never leave

    def close(self) -> None:
        self.closing = True
        self.flush()
        if self.transport is not None and not self.reply_held:
            self.transport.close()



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
        log.info("braid region %d listening on %s:%d", server.region, host, server.port)
    if server.tls.port:
        log.info("braid region %d TLS port on %s:%d", server.region, host, server.tls.port)
    await server.serve_forever()
    return EXIT_FAIL_STOP if server.failed is not None else 0
