"""A client connection of a region's RESP server: a session with a socket.

Theory of operation
-------------------
bytes -> :class:`node.resp.parser.HiredisRequestParser` -> argv -> ``RegionCore.call``
(node/region/core.py) -> reply value -> :func:`node.resp.encoder.encode` -> bytes.  Only
:class:`ClientConnection` touches the socket; the server (node/runtime/server.py) owns the
turn of the event loop that every connection's replies wait for.

Fairness between clients is kept here: a client's pipelined commands run for at most one
slice of the loop per turn (``INPUT_SLICE_S``), a client that does not read its replies stops
being read (``OUTPUT_HOLD_BYTES``, the output-buffer limits), and large replies go to the
transport as pieces rather than copies (``HANDOVER_BYTES``, ``SPILL_BYTES``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, Any, cast

from node import commands as cmdtable
from node.region.blocking import Blocked
from node.region.session import Session
from node.region.slicing import Sliced
from node.resp.encoder import Entries, ReplyError, encode
from node.resp.parser import ARG_OVERHEAD, HiredisRequestParser, ProtocolError

if TYPE_CHECKING:
    from node.runtime.server import Server

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
clock = time.time



class ClientConnection(Session, asyncio.Protocol):
    """One client: a session (node/region/core.py) with its socket, parser and unsent replies."""

    may_slice = True  # it can wait for a long command's preparation (node/region/slicing.py)

    def __init__(self, server: Server) -> None:
        super().__init__(server.core)
        self.server = server  # the driver: its turn, its limits
        self.core = server.core  # the region (``region`` too, as its commands see it)
        self.parser = HiredisRequestParser(int(server.core.config["proto-max-bulk-len"]), self.needs_auth)
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
        self.transport = cast(asyncio.Transport, transport)  # (a stream socket's: asyncio's or uvloop's)
        srv = self.server
        srv.core.stats.total_connections_received += 1
        if len(srv.core.clients) >= int(srv.core.config["maxclients"]):
            srv.core.stats.rejected_connections += 1
            self.transport.write(b"-ERR max number of clients reached\r\n")
            self.transport.close()
            return
        srv.core.clients[self.id] = self
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
        if set_limits is not None and transport is not None and not transport.is_closing():
            set_limits(high=server.output_hold, low=server.output_hold // 4)
        self._room = server.output_room - (transport.get_write_buffer_size() if transport is not None else 0)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        """The client read its replies down to the low-water mark: its waiting commands go on."""
        self._writing_paused = False
        transport = self.transport
        self._room = self.server.output_room - (transport.get_write_buffer_size() if transport is not None else 0)
        if self.obuf_soft_since is not None:
            self._check_output_limit()  # back under the soft limit: its clock stops
        if self.input_waits:
            self.server.continue_input_at_end_of_turn(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._soft_timer is not None:
            self._soft_timer.cancel()
            self._soft_timer = None
        self.server._input_due.pop(self.id, None)
        self.core.blocking.unpark(self)
        self.core.db.unwatch(self.watched)
        self.core.clients.pop(self.id, None)
        self.closing = True

    def data_received(self, data: bytes) -> None:
        server, core = self.server, self.core
        core.stats.net_input_bytes += len(data)
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
            self.core.stats.client_qbuf_limit_disconnections += 1
            self.close()
            return
        self.last_interaction = now = clock()
        if not self.input_waits:  # (else the end of a turn runs it: continue_input)
            self.process_input(now)

    def _multi_bytes(self) -> int:
        """What the commands queued by MULTI hold, counted as the parser counts arguments;
        only the commands queued since the last call are summed."""
        queue = self.multi
        if queue is None:
            self._multi_counted = None
            return 0
        another = self._multi_counted is not queue  # (a comparison kept apart: it would narrow ``queue``)
        if another:
            self._multi_counted, self._multi_seen, self._multi_size = queue, 0, 0
        seen = self._multi_seen
        if seen < len(queue):
            self._multi_size += sum(len(a) + ARG_OVERHEAD for argv in queue[seen:] for a in argv)
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
        server, core = self.server, self.core
        parser = self.parser
        end = self._slice_end
        if not end:  # its first run since its replies were last written: a new slice
            end = self._slice_end = (now or clock()) + INPUT_SLICE_S
        room = self._room
        check = 1
        while self.blocked is None and self.job is None and not self.closing:
            try:
                argv = parser.next_command()
            except ProtocolError as e:
                err = ReplyError(f"ERR {e}")
                core.count_error(err)
                encode(self.out, err, self.resp3)
                self.closing = True
                break
            if argv is None:
                if now and parser.buffered and clock() > end:
                    # parsing this read (part of a large command) took the slice: the loop
                    # reads no more of it this turn (a run of the end of the turn parses
                    # nothing new, and never pauses reading: that would stop its input)
                    self._yield_turn()
                break
            self.last_command = argv[0]
            reply = core.call(self, argv)
            kind = type(reply)
            out = self.out  # (the command may have sent what it held: CLIENT KILL of itself)
            at = len(out)
            if kind is bytes and len(reply) < SPILL_BYTES:
                # a bulk string (XADD's ID), encode() inlined: the reply of most writes
                out += b"$%d\r\n%b\r\n" % (len(reply), reply)
            else:
                if reply is cmdtable.CLOSE_WITHOUT_REPLY:
                    self.closing = True
                    break
                if kind is Blocked:
                    reply.argv = argv
                    server.park(self, reply)
                    break
                if kind is Sliced:
                    server.run_sliced(self, reply, argv)
                    break
                if (kind is Entries and len(reply) > SPILL_MIN_ROWS or kind is bytes) and self._spill(reply):
                    out = self.out
                else:
                    encode(out, reply, self.resp3)
            if self.logged_upto != self.replied_upto:
                self._logged_reply(at)
            if core.db.ready:
                if core.blocking.by_key:
                    self.flush()
                    server.serve_ready_keys()
                else:
                    core.db.ready.clear()
            if len(out) + self.spilled_bytes > room:  # (each reply is checked as it is made)
                if self._output_full():
                    break
                room = self._room
            check -= 1
            if not check:  # after its first command, then every few (a clock reading per
                if not parser.buffered:  # command costs a pipeline of XADDs 1.5 %)
                    break  # (the usual case: its read held one command)
                if clock() > end:  # its slice is spent: a later turn runs the rest
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
        if isinstance(reply, bytes):
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
        server, core = self.server, self.core
        reply = core.call(self, argv)
        self.prepared = None  # (taken by the handler, unless the command failed before it)
        if type(reply) is Sliced:  # a handler that did not take its prepared value: a bug
            reply = ReplyError(f"ERR internal error running '{argv[0].decode('utf-8', 'replace').lower()}'")
        self.send(reply)
        if core.db.ready:
            if core.blocking.by_key:
                server.serve_ready_keys()
            else:
                core.db.ready.clear()
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
        server, core = self.server, self.core
        if core.oplog is not None:
            self.reply_needs = needs = core.reply_needs(self)
            if needs > self.answered_upto and not core.may_release(needs):
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
        oplog = self.core.oplog
        assert oplog is not None  # (a reply waits for a record only with a log)
        if self.reply_needs > self.answered_upto and not oplog.durable(self.reply_needs):
            if not self.fsync_waiter:
                self.fsync_waiter = True
                oplog.after_sync(self.reply_needs, self._fsynced, self._held_too_long,
                                 int(self.core.config["aof-write-error-timeout-ms"]) / 1000)
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
        server, core = self.server, self.core
        oplog = core.oplog
        assert oplog is not None  # (replies are held for records only with a log)
        misconf = ReplyError(f"MISCONF Errors writing to the AOF file: {oplog.error or 'write failed'}")
        out, at = self.out, 0
        answered = bytearray()
        for record, start, end in self.logged_replies:
            if not oplog.durable(record):
                answered += out[at:start]
                encode(answered, misconf, self.resp3)
                core.count_error(misconf)
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
            self.core.stats.net_output_bytes += self.spilled_bytes
            self.spilled_bytes = 0
            transport.writelines(spilled)
        if out and transport is not None and not transport.is_closing():
            server, core = self.server, self.core
            core.stats.net_output_bytes += len(out)
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

    def input_buffered(self) -> int:
        return self.parser.buffered

    def output_buffered(self) -> int:
        return self._unread()

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
        self.core.stats.client_outbuf_limit_disconnections += 1
        self.closing = True
        self.input_waits = False
        self.out = bytearray()  # (what it held would never leave)
        self.drop_spilled()
        self.logged_replies.clear()
        if self.transport is not None:
            self.transport.abort()  # what is buffered would never leave

    def close(self) -> None:
        self.closing = True
        self.flush()
        if self.transport is not None and not self.reply_held:
            self.transport.close()
