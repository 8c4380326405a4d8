"""XREAD / XREADGROUP as Redis 8.10 has them, and the Redis 8.6 behaviour of blocked readers.

MAXCOUNT and MAXSIZE (Redis 8.10) are checked against the documented examples and
rules (the reference redis-server of the differential tests, 7.0, has neither).
The blocked-reader cases that Redis 7.0 answers differently are checked here
against Redis 8.6.3's replies, recorded by hand from a server built from Debian's
source package (never part of this repository); those 7.0 shares are in
tests/test_differential.py.
"""

from __future__ import annotations

import subprocess
import threading

import pytest
import redis

from node.resp.encoder import to_bytes
from node.testing import wait_until

NOGROUP = "NOGROUP No such key 'mystream' or consumer group 'mygroup' in XREADGROUP with GROUP option"


def _entries(reply) -> list[tuple[bytes, list]]:
    """(key, [ids]) of an XREAD reply (RESP2 list or RESP3 map)."""
    if reply is None:
        return []
    items = reply.items() if isinstance(reply, dict) else reply
    return [(k, [e[0] for e in rows]) for k, rows in items]


def _fill(r, keys=("s1", "s2", "s3"), n=3, value=b"v"):
    for k in keys:
        for i in range(1, n + 1):
            r.xadd(k, {"f": value}, id=f"{i}-0")


# ---------------------------------------------------------------- MAXCOUNT / MAXSIZE
def test_maxcount_is_a_total_over_streams_served_in_order(braid):
    _fill(braid)
    # the documented example: COUNT 2 per stream, MAXCOUNT 3 in all
    reply = braid.execute_command("XREAD", "COUNT", 2, "MAXCOUNT", 3, "STREAMS", "s1", "s2", "s3", 0, 0, 0)
    assert _entries(reply) == [(b"s1", [b"1-0", b"2-0"]), (b"s2", [b"1-0"])]
    reply = braid.execute_command("XREAD", "COUNT", 2, "STREAMS", "s1", "s2", "s3", 0, 0, 0)
    assert sum(len(ids) for _k, ids in _entries(reply)) == 6
    reply = braid.execute_command("XREAD", "MAXCOUNT", 4, "STREAMS", "s3", "s1", 0, 0)
    assert _entries(reply) == [(b"s3", [b"1-0", b"2-0", b"3-0"]), (b"s1", [b"1-0"])]
    # a stream with nothing new does not use the budget
    reply = braid.execute_command("XREAD", "MAXCOUNT", 2, "STREAMS", "s1", "s2", "3-0", 0)
    assert _entries(reply) == [(b"s2", [b"1-0", b"2-0"])]


def test_maxcount_with_resp3_replies_a_map(braid_proc, braid):
    from tests.differential import RawClient

    _fill(braid)
    c = RawClient(braid_proc.port)
    try:
        c.call("HELLO", "3")
        reply = c.call("XREAD", "MAXCOUNT", 2, "STREAMS", "s1", "s2", 2, 0)
    finally:
        c.close()
    assert reply == {b"s1": [[b"3-0", [b"f", b"v"]]], b"s2": [[b"1-0", [b"f", b"v"]]]}


def _entry_bytes(id_: bytes, fields: list) -> int:
    return len(to_bytes([id_, fields]))


def test_maxsize_returns_the_entry_that_crosses_the_cap_then_stops(braid):
    value = b"x" * 100
    _fill(braid, keys=("s1", "s2"), value=value)
    one = _entry_bytes(b"1-0", [b"f", value])
    # one entry already reaches MAXSIZE: only it is returned (and nothing from s2)
    reply = braid.execute_command("XREAD", "MAXSIZE", one, "STREAMS", "s1", "s2", 0, 0)
    assert _entries(reply) == [(b"s1", [b"1-0"])]
    # below the cap after one entry: the second is returned, crossing it, and the read stops
    reply = braid.execute_command("XREAD", "MAXSIZE", one + one // 2, "STREAMS", "s1", "s2", 0, 0)
    assert _entries(reply) == [(b"s1", [b"1-0", b"2-0"])]
    # a large budget serves everything
    reply = braid.execute_command("XREAD", "MAXSIZE", 65536, "STREAMS", "s1", "s2", 0, 0)
    assert _entries(reply) == [(b"s1", [b"1-0", b"2-0", b"3-0"]), (b"s2", [b"1-0", b"2-0", b"3-0"])]


def test_maxsize_smaller_than_one_entry_still_returns_one(braid):
    braid.xadd("big", {"f": b"y" * 10000}, id="1-0")
    braid.xadd("big", {"f": "z"}, id="2-0")
    reply = braid.execute_command("XREAD", "MAXSIZE", 1, "STREAMS", "big", 0)
    assert _entries(reply) == [(b"big", [b"1-0"])]
    reply = braid.execute_command("XREAD", "MAXSIZE", 1, "MAXCOUNT", 5, "COUNT", 5, "STREAMS", "big", "1-0")
    assert _entries(reply) == [(b"big", [b"2-0"])]


def test_an_empty_read_stays_empty(braid_proc, braid):
    from tests.differential import RawClient

    _fill(braid, keys=("s1",))
    c = RawClient(braid_proc.port)
    try:
        assert c.call("XREAD", "MAXCOUNT", 1, "MAXSIZE", 1, "STREAMS", "s1", "$") is None  # nil, as without caps
        assert c.call("XREAD", "MAXCOUNT", 1, "STREAMS", "nokey", 0) is None
    finally:
        c.close()


@pytest.mark.parametrize("args, error", [
    (["MAXCOUNT", "0"], "MAXCOUNT must be a positive integer"),
    (["MAXCOUNT", "-1"], "MAXCOUNT must be a positive integer"),
    (["MAXCOUNT", "x"], "MAXCOUNT must be a positive integer"),
    (["MAXCOUNT", "1.5"], "MAXCOUNT must be a positive integer"),
    (["MAXCOUNT", "9223372036854775808"], "MAXCOUNT must be a positive integer"),
    (["MAXSIZE", "0"], "MAXSIZE must be a positive integer"),
    (["MAXSIZE", "-5"], "MAXSIZE must be a positive integer"),
    (["MAXSIZE", "+5"], "MAXSIZE must be a positive integer"),
    (["COUNT", "5", "MAXCOUNT", "3"], "MAXCOUNT must be greater than or equal to COUNT"),
    (["MAXCOUNT", "3", "COUNT", "5"], "MAXCOUNT must be greater than or equal to COUNT"),
])
@pytest.mark.parametrize("command", ["XREAD", "XREADGROUP"])
def test_argument_errors(braid, command, args, error):
    braid.xgroup_create("s", "g", id="0", mkstream=True)
    head = ["XREADGROUP", "GROUP", "g", "c"] if command == "XREADGROUP" else ["XREAD"]
    with pytest.raises(redis.ResponseError) as e:
        braid.execute_command(*head, *args, "STREAMS", "s", ">" if command == "XREADGROUP" else "0")
    assert str(e.value) == error
    assert braid.xinfo_groups("s")[0]["consumers"] == 0  # refused before anything ran


def test_count_zero_and_the_largest_caps_are_accepted(braid):
    _fill(braid, keys=("s1",))
    reply = braid.execute_command("XREAD", "COUNT", 0, "MAXCOUNT", 1, "STREAMS", "s1", 0)
    assert _entries(reply) == [(b"s1", [b"1-0"])]
    big = 9223372036854775807
    reply = braid.execute_command("XREAD", "MAXCOUNT", big, "MAXSIZE", big, "COUNT", 2, "STREAMS", "s1", 0)
    assert _entries(reply) == [(b"s1", [b"1-0", b"2-0"])]


def test_xreadgroup_maxcount_delivers_and_creates_only_what_it_reads(braid):
    _fill(braid)
    for k in ("s1", "s2", "s3"):
        braid.xgroup_create(k, "g", id="0")
    reply = braid.execute_command("XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", 4,
                                  "STREAMS", "s1", "s2", "s3", ">", ">", ">")
    assert _entries(reply) == [(b"s1", [b"1-0", b"2-0", b"3-0"]), (b"s2", [b"1-0"])]
    assert braid.xpending("s2", "g")["pending"] == 1  # only what was delivered
    assert braid.xinfo_groups("s2")[0]["last-delivered-id"] == b"1-0"
    assert braid.xinfo_consumers("s3", "g") == []  # a skipped stream: no consumer created
    # history reads share the same budget
    reply = braid.execute_command("XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", 2, "STREAMS", "s1", "s2", 0, 0)
    assert _entries(reply) == [(b"s1", [b"1-0", b"2-0"])]
    # the next read carries on where the cap stopped
    reply = braid.execute_command("XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", 3,
                                  "STREAMS", "s1", "s2", "s3", ">", ">", ">")
    assert _entries(reply) == [(b"s2", [b"2-0", b"3-0"]), (b"s3", [b"1-0"])]


def test_xreadgroup_maxsize_on_history_and_new_entries(braid):
    value = b"x" * 100
    _fill(braid, keys=("s1", "s2"), value=value)
    for k in ("s1", "s2"):
        braid.xgroup_create(k, "g", id="0")
    reply = braid.execute_command("XREADGROUP", "GROUP", "g", "c", "MAXSIZE", 1, "STREAMS", "s1", "s2", ">", ">")
    assert _entries(reply) == [(b"s1", [b"1-0"])]
    assert braid.xpending("s1", "g")["pending"] == 1
    one = _entry_bytes(b"1-0", [b"f", value])
    reply = braid.execute_command("XREADGROUP", "GROUP", "g", "c", "MAXSIZE", one + 10, "STREAMS", "s1", ">")
    assert _entries(reply) == [(b"s1", [b"2-0", b"3-0"])]
    before = {p["message_id"]: p["times_delivered"]
              for p in braid.xpending_range("s1", "g", "-", "+", 10)}
    reply = braid.execute_command("XREADGROUP", "GROUP", "g", "c", "MAXSIZE", 1, "STREAMS", "s1", 0)
    assert _entries(reply) == [(b"s1", [b"1-0"])]
    after = {p["message_id"]: p["times_delivered"] for p in braid.xpending_range("s1", "g", "-", "+", 10)}
    assert after == {**before, b"1-0": before[b"1-0"] + 1}  # only the entry returned was delivered again


def test_claimed_entries_count_towards_maxcount(braid_proc, braid):
    from tests.differential import RawClient

    _fill(braid, keys=("s1",), n=4)
    braid.xgroup_create("s1", "g", id="0")
    braid.xreadgroup("g", "old", {"s1": ">"}, count=2)  # 1-0 and 2-0 pending at "old"
    c = RawClient(braid_proc.port)
    try:
        reply = c.call("XREADGROUP", "GROUP", "g", "new", "MAXCOUNT", 3, "CLAIM", 0, "STREAMS", "s1", ">")
    finally:
        c.close()
    rows = reply[0][1]
    assert [r[0] for r in rows] == [b"1-0", b"2-0", b"3-0"]  # two claimed, then one new entry
    assert [len(r) for r in rows] == [4, 4, 4] and [r[3] for r in rows] == [1, 1, 0]
    assert braid.xpending("s1", "g")["pending"] == 3


def _blocked(proc, args):
    """Run a blocking command in a thread; returns (thread, result dict)."""
    out: dict = {}

    def run():
        c = proc.client()
        try:
            out["reply"] = c.execute_command(*args)
        except redis.ResponseError as e:
            out["error"] = str(e)
        finally:
            c.close()

    t = threading.Thread(target=run)
    t.start()
    return t, out


def _wait_blocked(r, n):
    wait_until(lambda: int(r.info("clients")["blocked_clients"]) >= n, 10, what=f"{n} blocked clients")


def test_a_blocked_read_is_served_within_its_caps(braid_proc, braid):
    braid.xadd("s1", {"f": "v"}, id="1-0")
    braid.xadd("s2", {"f": "v"}, id="1-0")
    t, out = _blocked(braid_proc, ["XREAD", "BLOCK", 0, "MAXCOUNT", 2, "STREAMS", "s1", "s2", "$", "$"])
    _wait_blocked(braid, 1)
    with braid.pipeline(transaction=True) as p:  # every entry arrives in one turn
        for i in range(2, 5):
            p.xadd("s1", {"f": "v"}, id=f"{i}-0")
            p.xadd("s2", {"f": "v"}, id=f"{i}-0")
        p.execute()
    t.join(10)
    assert not t.is_alive()
    assert _entries(out["reply"]) == [(b"s1", [b"2-0", b"3-0"])]


# ---------------------------------------------------------------- COMMAND DOCS
def test_command_docs_history_and_arguments(braid_proc):
    from tests.differential import RawClient

    c = RawClient(braid_proc.port)
    try:
        docs = c.call("COMMAND", "DOCS", "xread", "xreadgroup")
    finally:
        c.close()
    docs = dict(zip(docs[::2], docs[1::2], strict=True))
    for name in (b"xread", b"xreadgroup"):
        doc = dict(zip(docs[name][::2], docs[name][1::2], strict=True))
        assert [b"8.10.0", b"Added the `MAXCOUNT` and `MAXSIZE` options."] in doc[b"history"]
        args = [dict(zip(a[::2], a[1::2], strict=True)) for a in doc[b"arguments"]]
        tokens = [a.get(b"token") for a in args]
        assert tokens.index(b"COUNT") + 1 == tokens.index(b"MAXCOUNT") == tokens.index(b"MAXSIZE") - 1
        maxcount = args[tokens.index(b"MAXCOUNT")]
        assert maxcount == {b"name": b"maxcount", b"type": b"integer", b"display_text": b"maxcount",
                            b"token": b"MAXCOUNT", b"since": b"8.10.0", b"flags": [b"optional"]}
    # redis-cli reads these docs at start (its hints): argument flags must be status replies
    res = subprocess.run(["redis-cli", "-p", str(braid_proc.port)], input="PING\n", capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0 and "PONG" in res.stdout, res.stderr


# ---------------------------------------------------------------- a blocked XREADGROUP whose key goes away
# Redis 8.6.3 (recorded): each of these wakes the reader with NOGROUP (Redis 7.0 answers
# "UNBLOCKED the stream key no longer exists"), and the command counts as one call,
# failed once (calls=1, failed_calls=1, errorstat_NOGROUP count=1).
@pytest.mark.parametrize("how", ["DEL", "UNLINK", "FLUSHALL", "FLUSHDB", "RENAME", "DESTROY"])
def test_blocked_xreadgroup_answers_nogroup_when_its_key_goes(braid_proc, braid, how):
    braid.xadd("mystream", {"a": 1}, id="1-0")
    braid.xgroup_create("mystream", "mygroup", id="$")
    braid.config_resetstat()
    t, out = _blocked(braid_proc, ["XREADGROUP", "GROUP", "mygroup", "c1", "BLOCK", 0,
                                   "STREAMS", "mystream", ">"])
    _wait_blocked(braid, 1)
    assert braid.info("clients")["total_blocking_keys_on_nokey"] == 1
    assert "cmdstat_xreadgroup" not in braid.info("commandstats")  # a call once it ends
    {"DEL": lambda: braid.delete("mystream"), "UNLINK": lambda: braid.unlink("mystream"),
     "FLUSHALL": braid.flushall, "FLUSHDB": braid.flushdb,
     "RENAME": lambda: braid.rename("mystream", "other"),
     "DESTROY": lambda: braid.xgroup_destroy("mystream", "mygroup")}[how]()
    t.join(10)
    assert not t.is_alive()
    assert out == {"error": NOGROUP}
    stats = braid.info("commandstats")["cmdstat_xreadgroup"]
    assert (stats["calls"], stats["rejected_calls"], stats["failed_calls"]) == (1, 0, 1)
    assert braid.info("errorstats")["errorstat_NOGROUP"] == {"count": 1}
    assert braid.info("clients")["total_blocking_keys_on_nokey"] == 0


def test_blocked_xread_keeps_waiting_when_its_key_is_deleted(braid_proc, braid):
    braid.xadd("mystream", {"a": 1}, id="1-0")
    t, out = _blocked(braid_proc, ["XREAD", "BLOCK", 0, "STREAMS", "mystream", "$"])
    _wait_blocked(braid, 1)
    assert braid.info("clients")["total_blocking_keys_on_nokey"] == 0  # XREAD has no such flag
    braid.delete("mystream")
    braid.xadd("mystream", {"b": 2}, id="5-0")  # the key comes back with an entry after '$'
    t.join(10)
    assert not t.is_alive()
    assert _entries(out["reply"]) == [(b"mystream", [b"5-0"])]


# ---------------------------------------------------------------- INFO clients
# Redis 8.6.3's INFO clients, in its order (recorded with an XREADGROUP BLOCK 2000 on two keys:
# blocked_clients:1, clients_in_timeout_table:1, total_blocking_keys:2,
# total_blocking_keys_on_nokey:2; with an XREAD BLOCK 0 on one key: 1, 0, 1, 0).
INFO_CLIENTS_86 = ["connected_clients", "cluster_connections", "maxclients", "client_recent_max_input_buffer",
                   "client_recent_max_output_buffer", "blocked_clients", "tracking_clients", "pubsub_clients",
                   "watching_clients", "clients_in_timeout_table", "total_watched_keys", "total_blocking_keys",
                   "total_blocking_keys_on_nokey"]


def test_info_clients_fields_and_blocking_counts(braid_proc, braid):
    assert list(braid.info("clients")) == INFO_CLIENTS_86
    for k in ("mystream", "s2"):
        braid.xgroup_create(k, "mygroup", id="$", mkstream=True)
    t, out = _blocked(braid_proc, ["XREADGROUP", "GROUP", "mygroup", "c1", "BLOCK", 100000,
                                   "STREAMS", "mystream", "s2", ">", ">"])
    _wait_blocked(braid, 1)
    info = braid.info("clients")
    assert [info[f] for f in ("blocked_clients", "clients_in_timeout_table", "total_blocking_keys",
                              "total_blocking_keys_on_nokey")] == [1, 1, 2, 2]
    braid.xadd("mystream", {"x": 1})
    t.join(10)
    assert not t.is_alive()
    t, out = _blocked(braid_proc, ["XREAD", "BLOCK", 0, "STREAMS", "mystream", "$"])
    _wait_blocked(braid, 1)
    info = braid.info("clients")
    assert [info[f] for f in ("blocked_clients", "clients_in_timeout_table", "total_blocking_keys",
                              "total_blocking_keys_on_nokey")] == [1, 0, 1, 0]
    braid.xadd("mystream", {"x": 1})
    t.join(10)
    assert not t.is_alive()
    info = braid.info("clients")
    assert [info[f] for f in ("blocked_clients", "clients_in_timeout_table", "total_blocking_keys",
                              "total_blocking_keys_on_nokey")] == [0, 0, 0, 0]


# ---------------------------------------------------------------- the change counter and the log
def _changes(r) -> tuple[int, int]:
    p = r.info("persistence")
    return p["rdb_changes_since_last_save"], p["aof_records"]


def test_history_reads_count_no_change_and_log_only_delivery_changes(braid):
    """Redis 8.6.3 (recorded): a history read adds 0 to rdb_changes_since_last_save whether
    it returns entries or not (7.0 added one per stream); a new consumer adds 1 even when
    ``>`` returns nothing (7.0 added 0).  Braid logs a history read that moved delivery
    counts (its replay must move them again) and nothing for one that returned nothing."""
    braid.xadd("s", {"f": "v"}, id="1-0")
    braid.xadd("t", {"f": "v"}, id="1-0")
    braid.xgroup_create("s", "g", id="0")
    braid.xgroup_create("t", "g", id="0")
    braid.execute_command("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "t", ">", ">")

    dirty, records = _changes(braid)
    braid.execute_command("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "t", 0, 0)
    assert _changes(braid) == (dirty, records + 1)  # delivery counts moved: logged, not counted

    dirty, records = _changes(braid)
    reply = braid.execute_command("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "t", 9, 9)
    assert reply == [[b"s", []], [b"t", []]]
    assert _changes(braid) == (dirty, records)  # changed nothing: not counted, not logged

    dirty, records = _changes(braid)
    assert braid.execute_command("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">") == []
    assert _changes(braid) == (dirty, records)

    dirty, records = _changes(braid)
    assert braid.execute_command("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", ">") == []
    assert _changes(braid) == (dirty + 1, records + 1)  # a consumer was created

    dirty, records = _changes(braid)
    braid.execute_command("XREADGROUP", "GROUP", "g", "c4", "STREAMS", "s", 0)
    assert _changes(braid) == (dirty + 1, records + 1)


def test_history_reads_replay_exactly(tmp_path):
    from node.testing import BraidProcess

    with BraidProcess(data_dir=str(tmp_path)) as p:
        r = p.client()
        r.xadd("s", {"f": "v"}, id="1-0")
        r.xadd("s", {"f": "v"}, id="2-0")
        r.xgroup_create("s", "g", id="0")
        r.xreadgroup("g", "c", {"s": ">"})
        r.xreadgroup("g", "c", {"s": "0"})
        r.xreadgroup("g", "c", {"s": "1-0"})
        r.xreadgroup("g", "c", {"s": "5-0"})  # nothing: not logged
        before = [(e["message_id"], e["times_delivered"]) for e in r.xpending_range("s", "g", "-", "+", 10)]
        assert before == [(b"1-0", 2), (b"2-0", 3)]
        r.close()
        p.kill()  # a crash: the append-only file is all there is
        p.restart()
        r = p.client()
        after = [(e["message_id"], e["times_delivered"]) for e in r.xpending_range("s", "g", "-", "+", 10)]
        assert after == before
        r.close()


# ---------------------------------------------------------------- Active-Active
@pytest.mark.parametrize("how", ["DEL", "FLUSHALL"])
def test_a_delete_replicated_from_another_region_wakes_a_blocked_xreadgroup(how):
    from node.testing import LocalCluster

    with LocalCluster(2) as cluster:
        a, b = cluster.clients()
        try:
            a.xadd("mystream", {"a": 1})
            a.xgroup_create("mystream", "mygroup", id="$")
            cluster.sync_wait()
            t, out = _blocked(cluster.procs[1], ["XREADGROUP", "GROUP", "mygroup", "c1", "BLOCK", 0,
                                                 "STREAMS", "mystream", ">"])
            _wait_blocked(b, 1)
            a.delete("mystream") if how == "DEL" else a.flushall()
            t.join(20)
            assert not t.is_alive()
            assert out == {"error": NOGROUP}
            assert b.info("commandstats")["cmdstat_xreadgroup"]["failed_calls"] == 1
        finally:
            a.close()
            b.close()
