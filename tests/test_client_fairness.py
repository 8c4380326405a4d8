"""How a region shares its loop between clients, and holds the replies a client does not read
(node/runtime/server.py: ``ClientConnection.process_input``, ``send_now``, ``Server.finish_turn``).

- A client's pipelined commands run for at most ``INPUT_SLICE_S`` in a turn of the loop; the
  rest wait, reading paused, until the end of the turn, after the loop has read every other
  client: another client is answered while a long pipeline still has commands to run.
- While a client's unread replies (the transport's buffer and those not yet written) are past
  the hold - the soft limit of ``client-output-buffer-limit`` when one is set, else
  ``OUTPUT_HOLD_BYTES`` - its further commands wait in its input until it reads; its input is
  still read, so a client that writes its whole pipeline before reading any reply (redis-py
  pipelines do) gets every reply.
- The hard limit is checked as each reply is made: a client is closed one reply past it at
  most; the soft limit's seconds close a client that stays past it.
- A large reply leaves without being copied: a large ``out`` is handed to the transport as it
  is, and a large range read (its entries' encodings) or bulk string (DUMP's payload) as a
  list of pieces, in order with the replies around it.

Two kinds of test: a region in this process on uvloop (what ``braid node`` serves on) and on
asyncio's own loop, with real sockets; and a client connection driven by hand on a transport
whose peer reads only when the test says so, with a clock the test advances.  Nothing sleeps
to synchronise: waits poll with a deadline, and a condition is checked while it must hold.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import threading
import time

import hiredis
import pytest
import uvloop

import node.runtime.connection as connection_module
from node.region.config import Config
from node.resp.encoder import encode
from node.runtime.connection import HANDOVER_BYTES, INPUT_SLICE_S, OUTPUT_HOLD_BYTES, SPILL_BYTES, ClientConnection
from node.runtime.server import Server
from node.testing import InProcessServer, wait_until

DEFAULT_LIMIT = "normal 1073741824 0 0"


def _req(*args) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%b\r\n" % (len(a), a)
    return out


# ---------------------------------------------------------------- a region in this process
class UvloopServer(InProcessServer):
    """An in-process region on uvloop, the loop ``braid node`` serves on."""

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.loop.close()
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)


@pytest.fixture(scope="module", params=["uvloop", "asyncio"])
def region(request):
    with (UvloopServer if request.param == "uvloop" else InProcessServer)(Config(appendonly=False)) as srv:
        yield srv


_opened: list[socket.socket] = []


@pytest.fixture
def admin(region):
    c = region.client()
    c.flushall()
    yield c
    while _opened:  # (a failed test's sockets too: the region never waits for them to read)
        _opened.pop().close()
    c.config_set("client-output-buffer-limit", DEFAULT_LIMIT)
    c.close()


def _connect(region, rcvbuf: int | None = None, sndbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    _opened.append(s)
    if rcvbuf is not None:  # (before connecting: the window is agreed then)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if sndbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    s.settimeout(60)
    s.connect(("127.0.0.1", region.port))
    return s


def _one_reply(region, command: bytes) -> bytes:
    """The bytes of the reply to ``command``, exactly as the region sends them."""
    s = _connect(region)
    reader = hiredis.Reader()
    s.sendall(command)
    data = b""
    while reader.gets() is False:
        chunk = s.recv(65536)
        assert chunk
        reader.feed(chunk)
        data += chunk
    s.close()
    return data


def _read_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _named(region, name: bytes) -> ClientConnection:
    return region.call(lambda: next(c for c in region.server.core.clients.values() if c.name == name))


def _state(region, conn: ClientConnection) -> tuple[int, int]:
    """(its unread replies - what INFO's client_recent_max_output_buffer counts -, the bytes of
    its input not yet run), read on the region's loop."""
    return region.call(lambda: (len(conn.out) + conn.transport.get_write_buffer_size(), conn.parser.buffered))


def _stream(admin, key: str, entries: int, value_size: int) -> None:
    pipe = admin.pipeline(transaction=False)
    for _i in range(entries):
        pipe.xadd(key, {"f": "v" * value_size})
    pipe.execute()


def _disconnections(admin) -> int:
    return admin.info("stats")["client_output_buffer_limit_disconnections"]


@pytest.mark.parametrize("limit, hold", [(DEFAULT_LIMIT, OUTPUT_HOLD_BYTES),  # no soft limit: the fixed bound
                                         ("normal 0 1000000 3600", 1_000_000)])  # the soft limit
def test_a_client_that_does_not_read_holds_its_pipeline_at_the_bound_and_then_gets_every_reply(
        region, admin, limit, hold):
    _stream(admin, "p", 100, 100)
    command = _req("XRANGE", "p", "-", "+")
    reply = _one_reply(region, command)
    n = 4000  # ~55 MB of replies: far past the hold and what the sockets' buffers take
    admin.config_set("client-output-buffer-limit", limit)
    s = _connect(region, rcvbuf=4096)
    s.sendall(_req("CLIENT", "SETNAME", "silent"))
    assert _read_exactly(s, 5) == b"+OK\r\n"
    conn = _named(region, b"silent")
    s.sendall(command * n)  # (the region reads all of it: far under the query buffer limit)
    wait_until(lambda: _state(region, conn)[0] > hold // 4, what="its replies to pile up")
    for _ in range(50):  # each a turn of the region's loop
        unread, waiting = _state(region, conn)
        assert unread <= hold + len(reply)  # the bound, passed by one reply at most
    assert waiting > n // 2 * len(command)  # most of its commands wait for it to read
    assert _read_exactly(s, n * len(reply)) == reply * n  # every reply, in order, once it reads
    s.sendall(_req("PING"))
    assert _read_exactly(s, 7) == b"+PONG\r\n"  # never closed
    assert _state(region, conn) == (0, 0)
    s.close()


def test_a_client_that_writes_its_whole_pipeline_before_reading_gets_every_reply(region, admin):
    """redis-py sends a pipeline whole, then reads: the region reads it all while the replies
    wait for the client (here more input than the sockets' buffers take, and more replies
    than the hold), or the two would wait for each other forever."""
    admin.xadd("q", {"f": "v"})
    n = 250_000  # ~6 MB of commands, ~13 MB of replies
    c = region.client(socket_timeout=120)
    pipe = c.pipeline(transaction=False)
    for _ in range(n):
        pipe.xrange("q")
    replies = pipe.execute()
    assert len(replies) == n and all(r == replies[0] for r in replies) and len(replies[0]) == 1
    assert c.ping()
    c.close()


def _closing_message(caplog, before: int) -> int:
    """The unread bytes the region logged when it closed a client (the one closing logged after
    ``before`` records)."""
    msgs = [r.getMessage() for r in caplog.records[before:] if "bytes of replies it does not read" in r.getMessage()]
    assert len(msgs) == 1, msgs
    return int(re.search(r": (\d+) bytes of replies", msgs[0]).group(1))


def test_a_client_past_the_hard_limit_is_closed_one_reply_past_it_at_most(region, admin, caplog):
    _stream(admin, "p", 100, 100)
    command = _req("XRANGE", "p", "-", "+")
    reply = _one_reply(region, command)
    admin.config_set("client-output-buffer-limit", "normal 1mb 0 0")
    caplog.set_level(logging.WARNING, logger="braid.server")
    logged, before = len(caplog.records), _disconnections(admin)
    s = _connect(region, rcvbuf=4096)
    try:
        s.sendall(command * 4000)  # ~55 MB of replies
    except OSError:
        pass  # (closed while sending)
    wait_until(lambda: _disconnections(admin) == before + 1, what="the client closed")
    unread = _closing_message(caplog, logged)
    assert 1024 * 1024 < unread <= 1024 * 1024 + len(reply)
    s.close()
    assert admin.info("clients")["connected_clients"] == 1


def test_a_client_that_stays_past_the_soft_limit_for_its_seconds_is_closed(region, admin, caplog):
    """Its commands wait at the soft limit; nothing more is written to it, yet its seconds
    are counted and it is closed (Redis's rule), holding no more than the limit and a reply."""
    _stream(admin, "p", 100, 100)
    command = _req("XRANGE", "p", "-", "+")
    reply = _one_reply(region, command)
    admin.config_set("client-output-buffer-limit", "normal 0 1mb 1")
    caplog.set_level(logging.WARNING, logger="braid.server")
    logged, before = len(caplog.records), _disconnections(admin)
    s = _connect(region, rcvbuf=4096)
    s.sendall(command * 4000)
    wait_until(lambda: _disconnections(admin) == before + 1, what="the client closed")
    assert 1024 * 1024 < _closing_message(caplog, logged) <= 1024 * 1024 + len(reply)
    s.close()


def test_another_client_is_answered_between_the_slices_of_a_long_pipeline(region, admin, monkeypatch):
    """One read of 400 commands of 5 ms each: the region runs a slice of them, serves the
    other clients, and goes on; another client's PING is answered while most still wait."""
    started = []
    call = region.server.core.call

    def slow_call(client, argv):
        if argv == [b"ECHO", b"slow"]:
            started.append(argv)
            time.sleep(0.005)  # longer than a slice: one such command per turn
        return call(client, argv)

    monkeypatch.setattr(region.server.core, "call", slow_call)
    n = 400
    other = region.client()
    assert other.ping()
    s = _connect(region)
    received = bytearray()

    def read() -> None:
        while len(received) < n * 10:
            chunk = s.recv(65536)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    s.sendall(_req("ECHO", "slow") * n)  # 10 KB: one read
    wait_until(lambda: started, what="the pipeline to start")
    assert other.ping()
    assert len(started) < n  # answered while the pipeline still had commands to run
    reader.join(60)
    assert bytes(received) == b"$4\r\nslow\r\n" * n  # all of them, in order
    s.close()
    other.close()


# ---------------------------------------------------------------- a connection driven by hand
class Peer:
    """A transport whose peer reads only when told (``read``), with asyncio's flow control:
    pause_writing past the high-water mark, resume_writing once read down to the low one."""

    def __init__(self) -> None:
        self.protocol: ClientConnection | None = None
        self.unread = bytearray()
        self.writes: list = []
        self.high, self.low = 64 * 1024, 16 * 1024
        self.paused = False
        self.reading = True
        self.closed = False

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        self.high, self.low = high, low
        self._maybe_pause()

    def write(self, data) -> None:
        self.writes.append(data)
        self.unread += data
        self._maybe_pause()

    def writelines(self, pieces) -> None:
        self.writes.append(list(pieces))
        for piece in pieces:
            self.unread += piece
        self._maybe_pause()

    def _maybe_pause(self) -> None:
        if not self.paused and len(self.unread) > self.high:
            self.paused = True
            self.protocol.pause_writing()

    def read(self, n: int | None = None) -> bytes:
        n = len(self.unread) if n is None else n
        data = bytes(self.unread[:n])
        del self.unread[:n]
        if self.paused and len(self.unread) <= self.low:
            self.paused = False
            self.protocol.resume_writing()
        return data

    def get_write_buffer_size(self) -> int:
        return len(self.unread)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default=None):
        return default


def _client(server: Server) -> tuple[ClientConnection, Peer]:
    client = ClientConnection(server)
    peer = Peer()
    peer.protocol = client
    client.connection_made(peer)  # type: ignore[arg-type]
    return client, peer


def _server(tmp_path) -> Server:
    server = Server(Config(dir=str(tmp_path), appendonly=False))
    server.open_log()
    return server


async def _turns(until, limit: int = 1000) -> None:
    """Let the loop run turns until ``until()`` (at most ``limit`` of them)."""
    for _ in range(limit):
        if until():
            return
        await asyncio.sleep(0)
    raise AssertionError("not reached within the turns")


def test_a_pipeline_waits_at_the_hold_and_goes_on_as_its_replies_are_read(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        client, peer = _client(server)
        client.data_received(_req("CONFIG", "SET", "client-output-buffer-limit", "normal 0 100000 3600"))
        for i in range(10):
            client.data_received(_req("XADD", "s", f"{i + 1}-1", "f", "v" * 50))
        await _turns(lambda: not client.out)
        peer.read()
        assert peer.high == 100_000  # the transport pauses writing at the hold
        command = _req("XRANGE", "s", "-", "+")
        client.data_received(command)
        await _turns(lambda: peer.unread)
        reply = peer.read()
        assert reply.startswith(b"*10\r\n")
        n = 1000  # ~0.9 MB of replies, nine times the hold
        client.data_received(command * n)
        await _turns(lambda: peer.paused)
        assert client.input_waits and client.parser.buffered > n // 2 * len(command)
        received = bytearray()
        for _ in range(10_000):
            assert len(peer.unread) + len(client.out) <= 100_000 + len(reply)
            if not client.parser.buffered and not client.out and not peer.unread:
                break
            received += peer.read(4096)
            await asyncio.sleep(0)
        assert bytes(received) == reply * n
        assert not client.closing and not client.input_waits

    asyncio.run(main())


def test_a_slice_of_pipelined_commands_runs_per_turn_and_others_are_served_in_between(tmp_path, monkeypatch):
    """A clock that advances a millisecond at every reading: a slice of 2 ms ends after a few commands."""
    ticks = iter(range(10**9))
    monkeypatch.setattr(connection_module, "clock", lambda: next(ticks) / 1000)
    assert INPUT_SLICE_S == 0.002

    async def main() -> None:
        server = _server(tmp_path)
        busy, busy_peer = _client(server)
        other, other_peer = _client(server)
        n = 20
        busy.data_received(_req("XADD", "s", "*", "f", "v") * n)
        ran = server.core.db.keys[b"s"].length
        assert 0 < ran < n and busy.input_waits
        assert not busy_peer.reading  # reading pauses for the rest of the turn
        other.data_received(_req("XLEN", "s"))  # read in the same turn: served at once
        await _turns(lambda: other_peer.unread)
        assert other_peer.read() == b":%d\r\n" % ran
        await _turns(lambda: not busy.parser.buffered and not busy.out)
        assert busy_peer.reading and not busy.input_waits
        assert server.core.db.keys[b"s"].length == n
        assert busy_peer.read().count(b"\r\n") == 2 * n  # every ID

    asyncio.run(main())


def test_a_slice_spent_before_a_partial_command_leaves_reading_on(tmp_path, monkeypatch):
    """Every reading of this clock finds the slice spent.  The end of a turn runs what waits
    and resumes reading; with nothing complete left to run it must not pause reading again,
    or the rest of the command would never be read."""
    ticks = iter(range(0, 10**12, 1000))
    monkeypatch.setattr(connection_module, "clock", lambda: float(next(ticks)))

    async def main() -> None:
        server = _server(tmp_path)
        client, peer = _client(server)
        client.data_received(_req("PING") * 10 + b"*1\r\n$4\r\nPI")
        await _turns(lambda: peer.unread.count(b"+PONG") == 10 and not client.input_waits)
        assert peer.reading
        client.data_received(b"NG\r\n")
        await _turns(lambda: peer.unread.count(b"+PONG") == 11)
        assert peer.reading and not client.input_waits

    asyncio.run(main())


def test_a_large_reply_is_handed_to_the_transport_without_a_copy(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        client, peer = _client(server)
        client.data_received(_req("ECHO", "x" * HANDOVER_BYTES))
        held = client.out
        await _turns(lambda: peer.writes)
        assert len(peer.writes) == 1 and peer.writes[0] is held  # the buffer itself, not a copy
        assert client.out is not held and not client.out
        client.data_received(_req("ECHO", "small"))
        await _turns(lambda: len(peer.writes) == 2)
        assert type(peer.writes[1]) is bytes and peer.writes[1] == b"$5\r\nsmall\r\n"  # a copy: ``out`` is reused

    asyncio.run(main())


def _expected(server: Server, *commands: tuple) -> bytes:
    """What ``commands`` answer, each reply made and encoded on its own (a second client)."""
    other = ClientConnection(server)
    out = bytearray()
    for argv in commands:
        encode(out, server.core.call(other, [a if isinstance(a, bytes) else str(a).encode() for a in argv]), False)
    return bytes(out)


def test_a_large_range_read_leaves_as_its_entries_encodings_in_order_with_the_other_replies(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        client, peer = _client(server)
        entries = SPILL_BYTES // 1000 + 10
        client.data_received(b"".join(_req("XADD", "big", "*", "f", "v" * 1000) for _ in range(entries)))
        await _turns(lambda: not client.out and not client.spilled and peer.writes)
        peer.read()
        peer.writes.clear()
        client.data_received(_req("PING") + _req("XRANGE", "big", "-", "+") + _req("PING"))
        await _turns(lambda: not client.out and not client.spilled and len(peer.writes) == 2)
        pieces = peer.writes[0]
        assert type(pieces) is list and len(pieces) == 1 + entries  # the PING and the header, then one per entry
        assert bytes(pieces[0]) == b"+PONG\r\n*%d\r\n" % entries
        assert peer.writes[1] == b"+PONG\r\n"
        assert peer.read() == b"+PONG\r\n" + _expected(server, ("XRANGE", "big", "-", "+")) + b"+PONG\r\n"
        assert server.core.stats.net_output_bytes >= sum(map(len, pieces)) + 7

    asyncio.run(main())


def test_a_large_bulk_reply_leaves_as_itself_and_a_small_range_read_is_copied(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        client, peer = _client(server)
        client.data_received(b"".join(_req("XADD", "big", "*", "f", os.urandom(2000).hex()) for _ in range(200)))
        await _turns(lambda: not client.out and not client.spilled and peer.writes)
        peer.read()
        peer.writes.clear()
        client.data_received(_req("DUMP", "big") + _req("XRANGE", "big", "-", "+", "COUNT", "3"))
        await _turns(lambda: not client.out and not client.spilled and len(peer.writes) == 2)
        payload = server.core.call(ClientConnection(server), [b"DUMP", b"big"])
        assert len(payload) >= SPILL_BYTES
        pieces = peer.writes[0]
        assert len(pieces) == 3 and bytes(pieces[0]) == b"$%d\r\n" % len(payload)
        assert pieces[1] == payload and pieces[2] == b"\r\n"
        expected = (b"$%d\r\n%b\r\n" % (len(payload), payload)
                    + _expected(server, ("XRANGE", "big", "-", "+", "COUNT", "3")))
        assert peer.read() == expected
        client.data_received(_req("RESTORE", "copy", "0", payload))
        await _turns(lambda: peer.unread)
        assert peer.read() == b"+OK\r\n"
        assert _expected(server, ("XRANGE", "copy", "-", "+")) == _expected(server, ("XRANGE", "big", "-", "+"))

    asyncio.run(main())


def test_a_large_range_read_after_a_logged_write_in_the_same_pipeline_is_copied_in_order(tmp_path):
    """The replies of logged commands wait for the log (and may become MISCONF): they are places
    in ``out``, so a large reply after one is encoded into ``out`` as any other."""
    async def main() -> None:
        server = Server(Config(dir=str(tmp_path), appendonly=True))
        server.open_log()
        client, peer = _client(server)
        client.data_received(b"".join(_req("XADD", "big", "*", "f", "v" * 1000)
                                      for _ in range(SPILL_BYTES // 1000 + 10)))
        await _turns(lambda: not client.out and not client.spilled and peer.writes and not client.reply_held)
        peer.read()
        peer.writes.clear()
        client.data_received(_req("XADD", "s", "1-1", "f", "v") + _req("XRANGE", "big", "-", "+"))
        await _turns(lambda: not client.out and not client.spilled and peer.writes and not client.reply_held)
        assert all(type(w) is not list for w in peer.writes)
        assert peer.read() == b"$3\r\n1-1\r\n" + _expected(server, ("XRANGE", "big", "-", "+"))
        server.core.oplog.close()

    asyncio.run(main())


def test_a_woken_reader_past_the_hard_limit_is_closed_before_its_reply_is_written(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        reader, reader_peer = _client(server)
        writer, writer_peer = _client(server)
        writer.data_received(_req("CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0"))
        reader.data_received(_req("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
        assert reader.blocked is not None
        writer.data_received(_req("XADD", "s", "*", "f", "v" * (2 * 1024 * 1024)))
        assert reader.closing and reader_peer.closed
        await _turns(lambda: writer_peer.writes)
        assert reader_peer.writes == [] and server.core.stats.client_outbuf_limit_disconnections == 1

    asyncio.run(main())
