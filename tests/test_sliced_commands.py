"""Long commands prepared in slices (node/region/slicing.py): a large DUMP or RESTORE holds no other client.

A DUMP of a stream of a megabyte or more encodes a copy of it a node per step, and a RESTORE
of such a payload decodes it a node per step, between other clients' turns; the command then
runs again and completes at once.  These tests drive client connections by hand (the transport
of tests/test_client_fairness.py, whose peer reads when told) with one step per turn of the
loop, so that what happens between two steps is certain, not a matter of speed:

- other clients are served while the preparation runs, and the client that sent it gets its
  reply in order, its next commands after it;
- DUMP answers the stream as it was when the command arrived; RESTORE's checks (BUSYKEY) are
  made when it completes, and a damaged payload is refused after its slices;
- a client that leaves meanwhile is forgotten; in MULTI/EXEC, and on a bare session, the same
  commands run in one piece; a sliced RESTORE is logged once and replays after a restart.
"""

from __future__ import annotations

import asyncio
import random

import hiredis
import pytest

import node.runtime.connection as connection_module
from node.commands.dump import SLICED_BYTES, dump_value
from node.interop import rdb
from node.region.config import Config
from node.region.core import RegionCore, Session
from node.runtime.server import Server
from tests.test_client_fairness import _client, _req, _turns


@pytest.fixture(autouse=True)
def one_step_per_turn(monkeypatch):
    monkeypatch.setattr(connection_module, "SLICED_STEP_S", 0.0)


def _replies(data: bytes) -> list:
    reader = hiredis.Reader(replyError=lambda m: ("error", m))
    reader.feed(data)
    out = []
    while (reply := reader.gets()) is not False:
        out.append(reply)
    return out


def _filled(server: Server, entries: int) -> None:
    """``big``: ``entries`` entries of a random 1 KB value (what LZF barely compresses)."""
    loader = Session(server.core)
    rng = random.Random(7)
    for _ in range(entries):
        server.core.call(loader, [b"XADD", b"big", b"*", b"v", rng.randbytes(512).hex().encode()])
    assert server.core.call(loader, [b"XLEN", b"big"]) == entries


ENTRIES = SLICED_BYTES // 1000 + 200  # a little over the size that is sliced


def _server(tmp_path, **settings) -> Server:
    server = Server(Config(dir=str(tmp_path), **{"appendonly": False, **settings}))
    server.open_log()
    return server


def test_a_large_dump_answers_the_stream_as_it_arrived_while_others_are_served(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        _filled(server, ENTRIES)
        expected = dump_value(server.core, b"big")
        a, pa = _client(server)
        b, pb = _client(server)
        a.data_received(_req("DUMP", "big") + _req("XLEN", "big"))
        assert a.job is not None and not pa.unread  # being prepared: no reply yet
        b.data_received(_req("XADD", "big", "*", "late", "1") + _req("XDEL", "big", "0-1") + _req("PING"))
        await _turns(lambda: pb.unread.endswith(b"+PONG\r\n"))
        assert a.job is not None and not pa.unread  # b was answered in between
        await _turns(lambda: a.job is None and len(_replies(bytes(pa.unread))) == 2, limit=100_000)
        payload, length = _replies(pa.read())
        assert payload == expected  # without b's entry: the stream when DUMP arrived
        assert length == ENTRIES + 1  # XLEN ran after it, and sees b's entry
        assert len(payload) >= SLICED_BYTES

    asyncio.run(main())


def test_a_large_restore_is_checked_again_when_it_completes(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        _filled(server, ENTRIES)
        payload = dump_value(server.core, b"big")
        a, pa = _client(server)
        b, pb = _client(server)
        a.data_received(_req("RESTORE", "copy", "0", payload) + _req("XLEN", "copy"))
        assert a.job is not None
        b.data_received(_req("XADD", "copy", "*", "f", "v"))  # the key appears meanwhile
        await _turns(lambda: a.job is None and len(_replies(bytes(pa.unread))) == 2, limit=100_000)
        assert _replies(pa.read()) == [("error", "BUSYKEY Target key name already exists."), 1]
        a.data_received(_req("RESTORE", "copy", "0", payload, "REPLACE") + _req("XLEN", "copy"))
        await _turns(lambda: a.job is None and len(_replies(bytes(pa.unread))) == 2, limit=100_000)
        assert _replies(pa.read()) == [b"OK", ENTRIES]
        core = server.core
        assert core.call(a, [b"XRANGE", b"copy", b"-", b"+"]) == core.call(a, [b"XRANGE", b"big", b"-", b"+"])
        assert server.core.stats.command_calls["restore"][0] == 2  # counted once each, when it completed

    asyncio.run(main())


def test_a_large_damaged_payload_is_refused_after_its_slices_and_the_client_goes_on(tmp_path):
    async def main() -> None:
        server = _server(tmp_path, rdbcompression=False)  # listpacks written as they are
        _filled(server, ENTRIES)
        payload = bytearray(dump_value(server.core, b"big"))
        reader = rdb.Reader(bytes(payload))
        reader.byte()  # the type
        nodes = reader.length_value()
        for _ in range(nodes // 2):  # to the node in the middle
            reader.string()
            reader.string()
        reader.string()  # its master ID
        size, compressed = reader.length()
        assert not compressed
        payload[reader.pos] ^= 0x01  # the listpack's byte count
        payload[-8:] = rdb.crc64(memoryview(payload)[:-8]).to_bytes(8, "little")  # a checksum that agrees
        a, pa = _client(server)
        a.data_received(_req("RESTORE", "copy", "0", bytes(payload)) + _req("PING"))
        assert a.job is not None
        await _turns(lambda: a.job is None and len(_replies(bytes(pa.unread))) == 2, limit=100_000)
        assert _replies(pa.read()) == [("error", "ERR Bad data format"), b"PONG"]
        assert b"copy" not in server.core.db.keys

    asyncio.run(main())


def test_a_client_that_leaves_during_a_sliced_command_is_forgotten(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        _filled(server, ENTRIES)
        payload = dump_value(server.core, b"big")
        a, pa = _client(server)
        a.data_received(_req("RESTORE", "copy", "0", payload))
        assert a.job is not None
        pa.closed = True
        a.connection_lost(None)
        await _turns(lambda: a.job is None)
        assert b"copy" not in server.core.db.keys and a.id not in server.core.clients
        b, pb = _client(server)
        b.data_received(_req("PING"))
        await _turns(lambda: pb.unread)
        assert pb.read() == b"+PONG\r\n"

    asyncio.run(main())


def test_in_a_transaction_and_on_a_bare_session_the_same_commands_run_in_one_piece(tmp_path):
    async def main() -> None:
        server = _server(tmp_path)
        _filled(server, ENTRIES)
        payload = dump_value(server.core, b"big")
        a, pa = _client(server)
        a.data_received(_req("MULTI") + _req("DUMP", "big") + _req("RESTORE", "copy", "0", payload) + _req("EXEC"))
        assert a.job is None
        await _turns(lambda: pa.unread)
        replies = _replies(pa.read())
        assert replies == [b"OK", b"QUEUED", b"QUEUED", [payload, b"OK"]]

    asyncio.run(main())
    core = RegionCore(Config())
    me = Session(core)
    rng = random.Random(7)
    for _ in range(ENTRIES):
        core.call(me, [b"XADD", b"big", b"*", b"v", rng.randbytes(512).hex().encode()])
    payload = core.call(me, [b"DUMP", b"big"])
    assert type(payload) is bytes and len(payload) >= SLICED_BYTES
    assert core.call(me, [b"RESTORE", b"copy", b"0", payload]) == "OK"
    assert core.call(me, [b"XLEN", b"copy"]) == ENTRIES


def test_a_sliced_restore_is_logged_once_and_replays(tmp_path):
    async def main() -> None:
        server = _server(tmp_path, appendonly=True)
        _filled(server, ENTRIES)
        payload = dump_value(server.core, b"big")
        before = server.core.oplog.last_record
        a, pa = _client(server)
        a.data_received(_req("RESTORE", "copy", "0", payload))
        assert a.job is not None
        await _turns(lambda: a.job is None and pa.unread and not a.reply_held, limit=100_000)
        assert pa.read() == b"+OK\r\n"
        assert server.core.oplog.last_record == before + 1
        rows = server.core.call(a, [b"XRANGE", b"copy", b"-", b"+"])
        server.core.oplog.close()
        again = _server(tmp_path, appendonly=True)
        assert again.core.call(Session(again.core), [b"XRANGE", b"copy", b"-", b"+"]) == rows
        again.core.oplog.close()

    asyncio.run(main())
