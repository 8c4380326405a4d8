"""MIGRATE from Braid: into a Redis, into another Braid, and out of an Active-Active database.

- The same sequence of MIGRATEs (one key, KEYS with missing keys, COPY, REPLACE, the
  target's BUSYKEY passed back with the keys that did move deleted, NOKEY, another
  destination DB, inside MULTI/EXEC, every argument error) is run from Braid and from Debian's
  redis-server 7.0 into a third redis-server: the replies, what the sources keep and
  what the target holds are the same.  Braid's source uses ``dump-rdb-version 10``;
  its default payload (Redis 8.6's) is refused by 7.0 and that error is passed back.
- AUTH and AUTH2 against a target with requirepass and an ACL user, the target having
  closed the cached connections first (the first MIGRATE retries on a fresh one).
- A target that accepts and never answers (IOERR reading, after the timeout, nothing
  deleted), a closed port (IOERR writing, as Redis reports a refused connection).
- The cached connection: SELECT only when the destination DB changes; one the target
  closed is opened again (the MIGRATE succeeds); idle ones closed.
- Braid to Braid (the whole stream, groups and all), and Braid's DB-index error passed back.
- Active-Active: a MIGRATE at one region deletes the key at every region (an
  observed-remove: an entry the migrating region had not seen survives); COPY keeps it.
- The append-only file records the deletes, never the MIGRATE: a restart does not
  contact the target again.
- Command metadata: COMMAND INFO as 7.0's, COMMAND GETKEYS's forms, ACL key checks.
"""

from __future__ import annotations

import socket

import pytest

from node.commands.migrate import ERR_NO_TRANSPORT
from node.runtime.migrate_sockets import CACHE_IDLE_SECONDS, SocketMigrateTransport
from node.testing import InProcessServer, RedisProcess, free_port
from tests.differential import Err, RawClient
from tests.test_convergence import Region as ActiveRegion
from tests.test_convergence import sync
from tests.test_dump_restore import _build_on, _comparable_full
from tests.test_replay_ops import Region as LoggedRegion

HOST = "127.0.0.1"
BUSY = Err("ERR Target instance replied with error: BUSYKEY Target key name already exists.")


@pytest.fixture(scope="module")
def target_proc():
    with RedisProcess() as p:
        yield p


@pytest.fixture
def target(target_proc):
    t = RawClient(target_proc.port)
    t.call("FLUSHALL")
    t.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # every source's cached connection
    yield t
    t.call("CONFIG", "SET", "requirepass", "")
    t.call("ACL", "DELUSER", "mover")
    t.close()


@pytest.fixture
def sources(braid_proc, redis_proc):
    b, r = RawClient(braid_proc.port), RawClient(redis_proc.port)
    for c in (b, r):
        c.call("FLUSHALL")
    default = b.call("CONFIG", "GET", "dump-rdb-version")[1]
    assert b.call("CONFIG", "SET", "dump-rdb-version", "10") == b"OK"  # what 7.0 reads
    yield b, r
    b.call("CONFIG", "SET", "dump-rdb-version", default)  # the region is shared by other tests
    b.close()
    r.close()


def _scenario(src: RawClient, tgt: RawClient, port: int) -> list:
    """What a source answers and keeps, and what the target holds, along a series of MIGRATEs."""
    seen = []

    def migrate(*args):
        seen.append(src.call("MIGRATE", HOST, port, *args))

    for key in ("a", "b", "c", "c2", "d", "e"):
        src.call("XADD", key, "1-1", "f", key)
    src.call("XADD", "a", "2-0", "g", "2")
    src.call("XGROUP", "CREATE", "a", "grp", "0")
    src.call("XREADGROUP", "GROUP", "grp", "alice", "COUNT", "1", "STREAMS", "a", ">")
    migrate("a", 0, 5000)
    seen += [src.call("EXISTS", "a"), tgt.call("XRANGE", "a", "-", "+"), tgt.call("XPENDING", "a", "grp")]
    migrate("a", 0, 5000)                                   # NOKEY: nothing to move
    migrate("b", 0, 5000, "COPY")
    seen.append(src.call("EXISTS", "b"))
    migrate("b", 0, 5000, "COPY")                           # BUSYKEY passed back
    src.call("XADD", "b", "3-0", "f", "newer")
    migrate("b", 0, 5000, "REPLACE")
    seen += [src.call("EXISTS", "b"), tgt.call("XRANGE", "b", "-", "+")]
    tgt.call("XADD", "c2", "9-9", "busy", "yes")
    migrate("", 0, 5000, "KEYS", "c", "missing", "c2")      # c moves, c2 is busy: the error, c2 kept
    seen += [src.call("EXISTS", "c"), src.call("EXISTS", "c2"), tgt.call("XRANGE", "c2", "-", "+")]
    migrate("", 0, 5000, "KEYS", "nothere", "neither")
    migrate("", 0, 5000, "KEYS")
    migrate("d", 3, 5000)                                   # another DB of the target
    tgt.call("SELECT", 3)
    seen.append(tgt.call("XRANGE", "d", "-", "+"))
    tgt.call("SELECT", 0)
    src.call("MULTI")                                       # inside a transaction: run at EXEC
    src.call("MIGRATE", HOST, port, "", 0, 5000, "KEYS", "e", "d")
    src.call("XADD", "e", "2-2", "f", "again")
    seen += [src.call("EXEC"), tgt.call("XRANGE", "e", "-", "+")]
    migrate("c2", 0, 0, "AUTH2", "u", "p", "AUTH", "pw", "COPY", "REPLACE", "KEYS", "x")  # options, any order
    for bad in (("c2", 0, 5000, "BOGUS"), ("c2", 0, 5000, "AUTH"), ("c2", 0, 5000, "AUTH2", "u"),
                ("c2", 0, 5000, "KEYS", "c2"), ("c2", 0, "x"), ("c2", "x", 5000), ("c2", "1.5", "x"),
                ("c2", 0, 5000, "COPY", "BOGUS", "KEYS", "c2"), ("c2", 0), ("", 0, 5000)):
        migrate(*bad)
    seen.append(sorted(tgt.call("KEYS", "*")))
    return seen


def test_migrate_replies_and_effects_match_redis70(sources, target, target_proc):
    braid, redis = sources
    ours = _scenario(braid, target, target_proc.port)
    target.call("FLUSHALL")
    target.call("SELECT", 3)
    target.call("FLUSHDB")
    target.call("SELECT", 0)
    theirs = _scenario(redis, target, target_proc.port)
    assert ours == theirs
    assert ours[0] == b"OK" and BUSY in ours and b"NOKEY" in ours  # the scenario reaches every answer


def test_a_stream_with_groups_migrates_whole(sources, target, target_proc):
    braid, _ = sources
    _build_on(braid)
    full = _comparable_full(braid.call("XINFO", "STREAM", "s", "FULL"))
    entries = braid.call("XRANGE", "s", "-", "+")
    assert braid.call("MIGRATE", HOST, target_proc.port, "s", 0, 5000) == b"OK"
    assert braid.call("EXISTS", "s") == 0
    assert target.call("XRANGE", "s", "-", "+") == entries
    assert _comparable_full(target.call("XINFO", "STREAM", "s", "FULL")) == full


def test_a_payload_newer_than_the_target_reads_is_its_error(sources, target, target_proc):
    braid, _ = sources
    braid.call("XADD", "s", "1-1", "f", "v")
    assert braid.call("CONFIG", "SET", "dump-rdb-version", "13") == b"OK"  # Redis 8.6's
    assert braid.call("MIGRATE", HOST, target_proc.port, "s", 0, 5000) == \
        Err("ERR Target instance replied with error: ERR DUMP payload version or checksum are wrong")
    assert braid.call("EXISTS", "s") == 1 and target.call("EXISTS", "s") == 0


def test_auth_and_auth2(sources, target, target_proc):
    target.call("CONFIG", "SET", "requirepass", "sesame")
    target.call("ACL", "SETUSER", "mover", "on", ">pw", "~*", "+@all")
    target.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # cached connections were authenticated
    port = target_proc.port
    results = []
    for src in sources:
        target.call("FLUSHALL")
        for key in ("a", "b", "c"):
            src.call("XADD", key, "1-1", "f", "v")
        results.append([
            src.call("MIGRATE", HOST, port, "a", 0, 5000),                     # NOAUTH passed back
            src.call("MIGRATE", HOST, port, "a", 0, 5000, "AUTH", "wrong"),    # WRONGPASS
            src.call("MIGRATE", HOST, port, "a", 0, 5000, "AUTH", "sesame"),
            # a failed AUTH leaves the connection as it was (authenticated): b is restored there,
            # but the error is the reply and b stays at the source, as in Redis
            src.call("MIGRATE", HOST, port, "b", 0, 5000, "AUTH2", "mover", "nope"),
            src.call("MIGRATE", HOST, port, "c", 0, 5000, "AUTH2", "mover", "pw"),
            src.call("EXISTS", "a", "b", "c"),
            sorted(target.call("KEYS", "*")),
        ])
        target.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    assert results[0] == results[1]
    assert results[0][0] == Err("ERR Target instance replied with error: NOAUTH Authentication required.")
    assert results[0][1] == Err("ERR Target instance replied with error: WRONGPASS invalid username-password "
                                "pair or user is disabled.")
    assert results[0][2:] == [b"OK", results[0][1], b"OK", 1, [b"a", b"b", b"c"]]


def test_a_target_that_never_answers(sources):
    silent = socket.socket()
    silent.bind((HOST, 0))
    silent.listen(16)  # connections are queued by the kernel and never read from
    try:
        port = silent.getsockname()[1]
        replies = []
        for src in sources:
            src.call("XADD", "s", "1-1", "f", "v")
            replies.append(src.call("MIGRATE", HOST, port, "s", 0, 200))
            assert src.call("EXISTS", "s") == 1  # nothing deleted
        assert replies == [Err("IOERR error or timeout reading to target instance")] * 2
    finally:
        silent.close()


def test_a_closed_port(sources):
    port = free_port()  # nothing listens there
    replies = []
    for src in sources:
        src.call("XADD", "s", "1-1", "f", "v")
        replies.append(src.call("MIGRATE", HOST, port, "s", 0, 1000))
        assert src.call("EXISTS", "s") == 1
    # a refused connection: Redis's non-blocking connect reports it as the write that fails
    assert replies == [Err("IOERR error or timeout writing to target instance")] * 2


def test_select_only_when_the_destination_db_changes(sources, target, target_proc):
    braid, _ = sources
    port = target_proc.port
    target.call("CONFIG", "RESETSTAT")
    for i, db in enumerate((0, 0, 0, 2, 2, 0)):
        braid.call("XADD", f"k{i}", "1-1", "f", "v")
        assert braid.call("MIGRATE", HOST, port, f"k{i}", db, 5000) == b"OK"
    stats = target.call("INFO", "commandstats").decode()
    calls = {line.split(":")[0]: line.split("calls=")[1].split(",")[0] for line in stats.splitlines()
             if line.startswith("cmdstat_")}
    assert calls["cmdstat_select"] == "3" and calls["cmdstat_restore"] == "6"


def test_a_cached_connection_the_target_closed_is_opened_again(sources, target, target_proc):
    braid, _ = sources
    for key in ("a", "b"):
        braid.call("XADD", key, "1-1", "f", "v")
    assert braid.call("MIGRATE", HOST, target_proc.port, "a", 0, 5000) == b"OK"
    assert target.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") == 1  # the cached connection
    assert braid.call("MIGRATE", HOST, target_proc.port, "b", 0, 5000) == b"OK"  # retried on a fresh one
    assert sorted(target.call("KEYS", "*")) == [b"a", b"b"] and braid.call("EXISTS", "a", "b") == 0


def test_idle_cached_connections_are_closed(target_proc):
    transport = SocketMigrateTransport()
    link = transport.link(HOST.encode(), str(target_proc.port).encode(), 1000)
    assert link is not None and transport.link(HOST.encode(), str(target_proc.port).encode(), 1000) is link
    assert transport.close_idle(link.last_use + CACHE_IDLE_SECONDS) == 0
    assert transport.close_idle(link.last_use + CACHE_IDLE_SECONDS + 1) == 1
    assert transport.links == {} and link.sock.fileno() == -1


# ---------------------------------------------------------------- Braid to Braid
def test_braid_to_braid(braid_proc):
    src = RawClient(braid_proc.port)
    with InProcessServer() as other:
        dst = RawClient(other.port)
        try:
            src.call("FLUSHALL")
            _build_on(src)
            full = src.call("XINFO", "STREAM", "s", "FULL")
            assert src.call("MIGRATE", HOST, other.port, "s", 0, 5000) == b"OK"
            assert src.call("EXISTS", "s") == 0
            assert dst.call("XINFO", "STREAM", "s", "FULL") == full
            src.call("XADD", "t", "1-1", "f", "v")
            assert src.call("MIGRATE", HOST, other.port, "t", 1, 5000) == \
                Err("ERR Target instance replied with error: ERR DB index is out of range")
            assert src.call("EXISTS", "t") == 1
        finally:
            dst.close()
            src.call("FLUSHALL")
            src.close()


# ---------------------------------------------------------------- Active-Active
def test_migrate_out_of_an_active_active_database(target, target_proc):
    regions = [ActiveRegion(n) for n in (1, 2, 3)]
    r1, r2, r3 = regions
    r1.server.migrate_transport = SocketMigrateTransport()
    r1.call(b"CONFIG", b"SET", b"dump-rdb-version", b"10")
    port = b"%d" % target_proc.port
    r1.xadd(b"s", 100)
    r2.xadd(b"s", 200)
    r3.xadd(b"kept", 300)
    sync(*regions)
    merged = r1.call(b"XRANGE", b"s", b"-", b"+")
    assert r1.call(b"MIGRATE", HOST.encode(), port, b"kept", b"0", b"5000", b"COPY") == "OK"
    assert r1.call(b"MIGRATE", HOST.encode(), port, b"s", b"0", b"5000") == "OK"
    assert b"s" not in r1.keys
    sync(*regions)
    assert all(b"s" not in r.keys and b"kept" in r.keys for r in regions)
    assert target.call("XRANGE", "s", "-", "+") == merged
    # the delete is an observed-remove: an entry the migrating region had not seen survives it
    r1.xadd(b"t", 400)
    sync(*regions)
    r3.xadd(b"t", 500)
    assert r1.call(b"MIGRATE", HOST.encode(), port, b"t", b"0", b"5000") == "OK"
    sync(*regions)
    assert [r.call(b"XRANGE", b"t", b"-", b"+") for r in regions] == [[[b"500-3", [b"f", b"v"]]]] * 3
    assert target.call("XRANGE", "t", "-", "+") == [[b"400-1", [b"f", b"v"]]]
    r1.server.migrate_transport.close_all()


def test_a_core_without_a_network_port_answers_an_error():
    region = ActiveRegion(1)  # a bare region core, as the deterministic simulation drives it
    region.xadd(b"s", 100)
    reply = region.call(b"MIGRATE", b"127.0.0.1", b"1", b"s", b"0", b"100", check=False)
    assert reply.message == ERR_NO_TRANSPORT and b"s" in region.keys
    assert region.call(b"MIGRATE", b"127.0.0.1", b"1", b"gone", b"0", b"100") == "NOKEY"


def test_the_log_records_the_deletes_not_the_migrate(tmp_path, target, target_proc):
    r = LoggedRegion(str(tmp_path / "r"), 1)
    try:
        r("CONFIG", "SET", "dump-rdb-version", "10")
        r("XADD", "s", "*", "f", "v")
        r("XADD", "kept", "*", "f", "v")
        assert r("MIGRATE", HOST, target_proc.port, "", 0, 5000, "KEYS", "s", "kept") == "OK"
        r("XADD", "kept", "*", "f", "after")
        state = r.state()
    finally:
        r.server.migrate_transport.close_all()
        r.close()
    target.call("FLUSHALL")
    again = LoggedRegion(r.directory, 1)
    try:
        assert again.state() == state and again("EXISTS", "s") == 0
        assert again.server.core.loading_report[0].differences == 0
        assert target.call("DBSIZE") == 0  # the replay did not migrate anything
    finally:
        again.close()


# ---------------------------------------------------------------- metadata and ACL
def test_command_info_and_getkeys_as_redis(sources):
    braid, redis = sources
    assert braid.call("COMMAND", "INFO", "MIGRATE") == redis.call("COMMAND", "INFO", "MIGRATE")
    for args in (("h", 1, "k", 0, 0), ("h", 1, "", 0, 0, "KEYS", "a", "b"),
                 ("h", 1, "k", 0, 0, "AUTH", "KEYS", "b"), ("h", 1, "", 0, 0, "AUTH2", "u", "KEYS", "KEYS", "x"),
                 ("h", 1, "", 0, 0, "COPY", "REPLACE", "KEYS", "a")):
        assert braid.call("COMMAND", "GETKEYS", "MIGRATE", *args) == \
            redis.call("COMMAND", "GETKEYS", "MIGRATE", *args), args


def test_acl_key_permissions_as_redis(sources):
    results = []
    for src in sources:
        src.call("ACL", "SETUSER", "limited", "on", ">pw", "~a*", "+@all")
        c = RawClient(int(src.sock.getpeername()[1]))
        try:
            assert c.call("AUTH", "limited", "pw") == b"OK"
            out = [c.call("MIGRATE", HOST, 1, "b", 0, 100),
                   c.call("MIGRATE", HOST, 1, "", 0, 100, "KEYS", "a1", "a2"),
                   c.call("MIGRATE", HOST, 1, "", 0, 100, "KEYS", "a1", "b1")]
            results.append([o if not isinstance(o, Err) else str(o).split()[0] for o in out])
        finally:
            c.close()
            src.call("ACL", "DELUSER", "limited")
    assert results[0] == results[1] == ["NOPERM", b"NOKEY", "NOPERM"]
