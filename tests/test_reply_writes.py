"""When replies leave: once per client at the end of the event loop's turn, as Redis writes
them before it sleeps.

A reply that may leave is not written the moment its command ends: the client is noted and
every noted client's replies are written when the turn's work is done, after the append log's
records (node/runtime/server.py, ``Server.finish_turn``).  A client that pipelines gets one write for
all its replies of a turn, and writes to many clients come together, so a reader that was
asleep is woken once rather than between every two replies.
"""

from __future__ import annotations

import asyncio

import pytest

import node.runtime.connection as connection_module
from node.region.blocking import Blocked
from node.region.config import Config
from node.runtime.connection import ClientConnection
from node.runtime.server import Server
from node.testing import RecordingTransport


@pytest.fixture(autouse=True)
def _slices_never_end(monkeypatch):
    """A client's commands here always fit in the slice of the loop it gets per turn (the
    slices themselves: tests/test_client_fairness.py): a stopped clock keeps a slow or busy
    machine from splitting a read's commands over two turns."""
    monkeypatch.setattr(connection_module, "clock", lambda: 0.0)


def _req(*args: str) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a.encode())
    return out


def _connect(server: Server) -> tuple[ClientConnection, RecordingTransport]:
    client = ClientConnection(server)
    transport = RecordingTransport()
    client.connection_made(transport)  # type: ignore[arg-type]
    return client, transport


def _server(tmp_path, appendonly: bool = False) -> Server:
    config = Config(dir=str(tmp_path))
    config.set("appendonly", appendonly)
    server = Server(config)
    server.open_log()
    return server


def test_a_turns_replies_leave_together_at_its_end_one_write_per_client(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        a, ta = _connect(server)
        b, tb = _connect(server)
        a.data_received(_req("PING") + _req("XADD", "s", "1-1", "f", "v") + _req("XLEN", "s"))
        b.data_received(_req("ECHO", "hi") + _req("XLEN", "s"))
        assert ta.writes == [] and tb.writes == []  # the turn is not over
        await asyncio.sleep(0)  # the loop ends the turn
        assert ta.writes == [b"+PONG\r\n$3\r\n1-1\r\n:1\r\n"]
        assert tb.writes == [b"$2\r\nhi\r\n:1\r\n"]
        await asyncio.sleep(0)
        assert len(ta.writes) == 1 and len(tb.writes) == 1  # nothing is written twice

    asyncio.run(main())


def test_replies_that_wait_for_the_log_leave_after_its_write_in_the_same_single_write(tmp_path):
    async def main() -> None:
        server = _server(tmp_path, appendonly=True)
        client, transport = _connect(server)
        seen_written = []
        write = transport.write
        transport.write = lambda data: (seen_written.append(server.core.oplog.written), write(data))  # type: ignore[method-assign]
        client.data_received(_req("XADD", "s", "1-1", "f", "v") + _req("PING"))
        await asyncio.sleep(0)
        assert transport.writes == [b"$3\r\n1-1\r\n+PONG\r\n"]
        assert seen_written == [server.core.oplog.last_record] and server.core.oplog.last_record >= 1
        server.core.oplog.close()

    asyncio.run(main())


def test_quit_writes_its_reply_at_once_and_closes(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        client, transport = _connect(server)
        client.data_received(_req("PING") + _req("QUIT") + _req("PING"))
        assert transport.writes == [b"+PONG\r\n+OK\r\n"] and transport.closed  # the last PING is not run

    asyncio.run(main())


def test_a_client_gone_before_the_turn_ends_gets_nothing_and_the_others_are_served(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        gone, tgone = _connect(server)
        stays, tstays = _connect(server)
        gone.data_received(_req("XADD", "s", "1-1", "f", "v"))
        stays.data_received(_req("XLEN", "s"))
        tgone.closed = True
        gone.connection_lost(None)
        await asyncio.sleep(0)
        assert tgone.writes == [] and tstays.writes == [b":1\r\n"]
        assert server.core.db.keys.get(b"s").length == 1  # the command ran; only its reply had nobody to go to

    asyncio.run(main())


def test_a_woken_readers_reply_leaves_at_the_end_of_the_writers_turn(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        reader, treader = _connect(server)
        writer, twriter = _connect(server)
        reader.data_received(_req("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
        assert type(reader.blocked) is Blocked and treader.writes == []
        writer.data_received(_req("XADD", "s", "5-1", "f", "v"))
        assert reader.blocked is None  # served in the writer's turn
        assert treader.writes == [] and twriter.writes == []
        await asyncio.sleep(0)
        assert twriter.writes == [b"$3\r\n5-1\r\n"]
        assert treader.writes == [b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n5-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"]

    asyncio.run(main())


def test_a_client_whose_write_fails_is_closed_and_the_others_still_get_theirs(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        broken, tbroken = _connect(server)
        fine, tfine = _connect(server)
        reported = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: reported.append(context))

        def refuse(data: bytes) -> None:
            raise OSError("the socket refused the write")

        tbroken.write = refuse  # type: ignore[method-assign]
        broken.data_received(_req("PING"))
        fine.data_received(_req("PING"))
        await asyncio.sleep(0)
        assert tfine.writes == [b"+PONG\r\n"]
        assert tbroken.closed and broken.closing and not broken.out
        assert len(reported) == 1 and isinstance(reported[0]["exception"], OSError)
        assert f"client {broken.id}" in reported[0]["message"]

    asyncio.run(main())
