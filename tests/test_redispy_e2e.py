"""redis-py (with hiredis) against a Braid region process: every command through
the client library's own methods, pipelines, transactions, RESP3, and blocking
reads from several threads."""

from __future__ import annotations

import threading

import pytest
import redis
from redis.utils import HIREDIS_AVAILABLE


def test_hiredis_parser_in_use():
    assert HIREDIS_AVAILABLE


def test_stream_commands(braid):
    r = braid
    assert r.xadd("s", {"a": "1"}, id="1-1") == b"1-1"
    auto = r.xadd("s", {"b": "2"})
    assert auto > b"1-1"
    assert r.xlen("s") == 2
    assert [e[0] for e in r.xrange("s")] == [b"1-1", auto]
    assert r.xrange("s", count=1) == [(b"1-1", {b"a": b"1"})]
    assert [e[0] for e in r.xrevrange("s")] == [auto, b"1-1"]
    assert r.xread({"s": "0"}, count=1) == [[b"s", [(b"1-1", {b"a": b"1"})]]]
    assert r.xdel("s", "1-1") == 1
    assert r.xtrim("s", maxlen=0) == 1
    assert r.xlen("s") == 0
    with pytest.raises(redis.ResponseError, match="equal or smaller"):
        r.xadd("s", {"a": "1"}, id="1-1")
    r.xadd("s", {"a": "1"}, id="9999999999999-1", maxlen=10, approximate=False)
    assert r.xinfo_stream("s")["last-generated-id"] == b"9999999999999-1"


def test_group_commands(braid):
    r = braid
    for i in range(1, 6):
        r.xadd("q", {"n": str(i)}, id=f"{i}-0")
    assert r.xgroup_create("q", "g", id="0") is True
    with pytest.raises(redis.ResponseError, match="BUSYGROUP"):
        r.xgroup_create("q", "g", id="0")
    got = r.xreadgroup("g", "alice", {"q": ">"}, count=3)
    assert [e[0] for e in got[0][1]] == [b"1-0", b"2-0", b"3-0"]
    assert r.xack("q", "g", "1-0") == 1
    summary = r.xpending("q", "g")
    assert summary["pending"] == 2 and summary["min"] == b"2-0" and summary["max"] == b"3-0"
    rng = r.xpending_range("q", "g", min="-", max="+", count=10)
    assert [p["message_id"] for p in rng] == [b"2-0", b"3-0"]
    assert all(p["consumer"] == b"alice" for p in rng)
    claimed = r.xclaim("q", "g", "bob", min_idle_time=0, message_ids=["2-0"])
    assert claimed == [(b"2-0", {b"n": b"2"})]
    auto = r.xautoclaim("q", "g", "carol", min_idle_time=0, start_id="0-0", count=10)
    assert [e[0] for e in auto[1]] == [b"2-0", b"3-0"]
    groups = r.xinfo_groups("q")
    assert groups[0]["name"] == b"g" and groups[0]["pending"] == 2
    consumers = {c["name"] for c in r.xinfo_consumers("q", "g")}
    assert consumers == {b"alice", b"bob", b"carol"}
    assert r.xgroup_createconsumer("q", "g", "dave") == 1
    assert r.xgroup_delconsumer("q", "g", "carol") == 2
    assert r.xgroup_setid("q", "g", "0") is True
    assert r.xgroup_destroy("q", "g") == 1
    full = r.xinfo_stream("q", full=True)
    assert full["length"] == 5 and full["groups"] == []


def test_keys_and_server(braid):
    r = braid
    r.xadd("k1", {"f": "v"}, id="1-0")
    r.xadd("k2", {"f": "v"}, id="1-0")
    assert r.exists("k1", "k2", "nokey") == 2
    assert r.type("k1") == b"stream"
    assert r.rename("k1", "k3") is True
    assert sorted(r.keys("*")) == [b"k2", b"k3"]
    assert sorted(r.scan_iter(match="k*")) == [b"k2", b"k3"]
    assert r.dbsize() == 2
    assert r.delete("k2", "k3") == 2
    info = r.info()
    assert info["redis_version"] == "8.10.2"
    assert "braid_version" in info
    assert r.config_get("stream-node-max-entries") == {"stream-node-max-entries": "100"}
    assert r.config_set("stream-node-max-entries", 7) is True
    assert r.config_get("stream-node-max-entries") == {"stream-node-max-entries": "7"}
    r.client_setname("tester")
    assert r.client_getname() == "tester" or r.client_getname() == b"tester"
    assert isinstance(r.client_id(), int)
    assert any(c["name"] == "tester" for c in r.client_list())
    assert r.ping() is True
    secs, usecs = r.time()
    assert secs > 1_600_000_000 and 0 <= usecs < 1_000_000


def test_pipeline_and_transaction(braid):
    r = braid
    with r.pipeline(transaction=False) as p:
        for i in range(1, 101):
            p.xadd("p", {"i": str(i)}, id=f"{i}-0")
        p.xlen("p")
        out = p.execute()
    assert out[-1] == 100
    with r.pipeline(transaction=True) as p:
        p.xadd("p", {"i": "x"}, id="200-0")
        p.xlen("p")
        assert p.execute() == [b"200-0", 101]


def test_watch_conflict_aborts_exec(braid_proc, braid):
    other = braid_proc.client()
    try:
        with braid.pipeline(transaction=True) as p:
            p.watch("w")
            other.xadd("w", {"f": "v"}, id="1-0")  # a concurrent writer
            p.multi()
            p.xadd("w", {"f": "mine"}, id="2-0")
            with pytest.raises(redis.WatchError):
                p.execute()
        assert braid.xlen("w") == 1
    finally:
        other.close()


def test_resp3(braid_proc):
    r = braid_proc.client(protocol=3)
    try:
        r.flushall()
        r.xadd("r3", {"f": "v"}, id="1-0")
        assert r.xread({"r3": "0"}) == {b"r3": [[(b"1-0", {b"f": b"v"})]]}
        assert r.xread({"nothing": "$"}, block=20) == {}
        info = r.xinfo_stream("r3")
        assert info["length"] == 1
        assert r.execute_command("HELLO", "3")[b"proto"] == 3
    finally:
        r.close()


def _blocked_reader(proc, fn, results, key, started):
    c = proc.client()
    try:
        started.set()
        results[key] = fn(c)
    finally:
        c.close()


def _wait_blocked(r, n, timeout=10.0):
    from node.testing import wait_until
    wait_until(lambda: int(r.info("clients")["blocked_clients"]) >= n, timeout,
               what=f"{n} blocked clients")


def test_blocking_reads_from_many_threads(braid_proc, braid):
    r = braid
    r.xadd("b1", {"f": "0"}, id="1-0")
    r.xgroup_create("b1", "g", id="$")
    results: dict = {}
    threads = []
    readers = {
        "xread_$": lambda c: c.xread({"b1": "$"}, block=0),
        "xread_b2": lambda c: c.xread({"b2": "$"}, block=0),
        "group_1": lambda c: c.xreadgroup("g", "c1", {"b1": ">"}, block=0, count=1),
        "group_2": lambda c: c.xreadgroup("g", "c2", {"b1": ">"}, block=0, count=1),
    }
    for name, fn in readers.items():
        ev = threading.Event()
        t = threading.Thread(target=_blocked_reader, args=(braid_proc, fn, results, name, ev))
        t.start()
        ev.wait(5)
        threads.append(t)
    _wait_blocked(r, 4)
    r.xadd("b1", {"f": "1"}, id="2-0")
    r.xadd("b1", {"f": "2"}, id="3-0")
    r.xadd("b2", {"f": "x"}, id="1-0")
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert results["xread_$"][0][1][0][0] == b"2-0"
    assert results["xread_b2"][0][1][0][0] == b"1-0"
    delivered = sorted(results[k][0][1][0][0] for k in ("group_1", "group_2"))
    assert delivered == [b"2-0", b"3-0"]  # each entry to exactly one consumer
    assert int(r.info("clients")["blocked_clients"]) == 0


def test_block_timeout_returns_null(braid_proc, braid):
    # redis-py turns Redis's null array into an empty list; the wire has *-1
    assert braid.xread({"never": "$"}, block=50) == []
    from tests.differential import RawClient
    raw = RawClient(braid_proc.port)
    try:
        assert raw.call("XREAD", "BLOCK", "30", "STREAMS", "never", "$") is None
    finally:
        raw.close()


def _blocked_group_read_error(braid_proc, braid, key: str, wake) -> str:
    """Block an XREADGROUP on ``key`` in a thread, run ``wake()``, return the error it got."""
    errors: dict = {}

    def reader():
        c = braid_proc.client()
        try:
            c.xreadgroup("g", "c", {key: ">"}, block=0)
        except redis.ResponseError as e:
            errors["e"] = str(e)
        finally:
            c.close()

    t = threading.Thread(target=reader)
    t.start()
    _wait_blocked(braid, 1)
    wake()
    t.join(10)
    assert not t.is_alive()
    return errors["e"]


def test_xreadgroup_unblocked_when_key_deleted(braid_proc, braid):
    braid.xgroup_create("gone", "g", id="$", mkstream=True)
    err = _blocked_group_read_error(braid_proc, braid, "gone", lambda: braid.delete("gone"))
    assert err == "NOGROUP No such key 'gone' or consumer group 'g' in XREADGROUP with GROUP option"


def test_xreadgroup_unblocked_when_group_destroyed(braid_proc, braid):
    braid.xgroup_create("gd", "g", id="$", mkstream=True)
    err = _blocked_group_read_error(braid_proc, braid, "gd", lambda: braid.xgroup_destroy("gd", "g"))
    assert err == "NOGROUP No such key 'gd' or consumer group 'g' in XREADGROUP with GROUP option"


def test_disconnect_while_blocked_is_cleaned_up(braid_proc, braid):
    import socket

    s = socket.create_connection(("127.0.0.1", braid_proc.port))
    s.sendall(b"*6\r\n$5\r\nXREAD\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n$2\r\nzz\r\n$1\r\n$\r\n")
    _wait_blocked(braid, 1)
    s.close()
    from node.testing import wait_until
    wait_until(lambda: int(braid.info("clients")["blocked_clients"]) == 0, 10, what="cleanup")
    assert braid.xadd("zz", {"f": "v"}, id="1-0") == b"1-0"
    assert braid.ping()
