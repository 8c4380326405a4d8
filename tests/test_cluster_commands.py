"""A shard as a node of a Redis Cluster: routing (MOVED, CROSSSLOT), CLUSTER, READONLY,
READWRITE, ASKING and INFO's cluster section (node/commands/cluster.py, docs/sharding.md).

The shard is a bare region core of a sharded database, driven in this process (no socket):
its replies are checked as values and, where the protocol version shapes them, as the bytes
RESP2 and RESP3 put on the wire.  The tests at the end compare the same requests with a real
Redis Cluster (tests/realcluster.py: three ``redis-server --cluster-enabled yes`` joined by
``redis-cli --cluster create``), and the disabled-cluster errors with a Redis without
cluster mode, where the replies must match exactly.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import hiredis
import pytest

from node.activeactive.cluster_config import ClusterConfig, local_cluster
from node.commands.cluster import DISABLED
from node.region.config import Config
from node.region.core import RegionCore, Session
from node.region.routing import CROSSSLOT
from node.region.slots import SLOTS, SlotMap, key_slot
from node.resp.encoder import ReplyError, Verbatim, to_bytes
from node.testing import every_peer_answered
from tests.differential import Err, RawClient

PORTS = [7001, 7002]
REPL_PORTS = [7101, 7102]


def database(regions: int = 1, shards: int = 2, slots: list[list[tuple[int, int]]] | None = None,
             ports: list[int] | None = None) -> ClusterConfig:
    """A sharded database on loopback, each region's shards on real-looking ports."""
    cfg = local_cluster(regions, 0, shards=shards)
    cfg.id_mode = "liberal"  # XADD takes any ID, as Redis does
    if slots is not None:
        cfg.shards = SlotMap.of(slots)
    for i, r in enumerate(cfg.regions):
        if cfg.shards.sharded:
            r.ports = list(ports) if ports else [p + 1000 * i for p in PORTS[:shards]]
            r.repl_ports = [p + 100 for p in r.ports]
    return cfg


def shard(cfg: ClusterConfig, k: int = 0, region: int = 0, ready: bool = True) -> tuple[RegionCore, Session]:
    """Shard ``k`` of a region of ``cfg`` as a bare core, and an authenticated client of it."""
    view = cfg.shard_view(k)
    core = RegionCore(Config(), cluster=(view, view.regions[region]))
    if ready:
        every_peer_answered(core)
    client = Session(core)
    client.authenticated = True
    return core, client


def standalone() -> tuple[RegionCore, Session]:
    core = RegionCore(Config())
    return core, Session(core)


def key_in(lo: int, hi: int, prefix: str = "k", skip: int = 0) -> bytes:
    """A key whose slot is within [lo, hi] (the ``skip``-th such key)."""
    i = 0
    while True:
        key = f"{prefix}{i}".encode()
        i += 1
        if lo <= key_slot(key) <= hi:
            if skip == 0:
                return key
            skip -= 1


def call(core: RegionCore, client: Session, *args) -> object:
    return core.call(client, [a if isinstance(a, bytes) else str(a).encode() for a in args])


def wire(value: object, resp3: bool) -> object:
    """``value`` as a client reads it: encoded for the protocol, then parsed (hiredis)."""
    reader = hiredis.Reader(replyError=Err)
    reader.feed(to_bytes(value, resp3))
    return reader.gets()


def error(reply: object) -> str:
    assert isinstance(reply, ReplyError), reply
    return reply.message


# ---------------------------------------------------------------- routing
def test_a_shard_refuses_other_databases_in_redis_cluster_words():
    """As a Redis Cluster node: SELECT of another index, COPY ... DB n (its keys of one
    slot), and INFO server's redis_mode."""
    core, client = shard(database())
    assert call(core, client, "SELECT", "0") == "OK"
    assert error(call(core, client, "SELECT", "1")) == "ERR SELECT is not allowed in cluster mode"
    assert error(call(core, client, "SELECT", "x")) == "ERR value is not an integer or out of range"
    src = key_in(0, 8191)
    assert error(call(core, client, "COPY", src, b"{" + src + b"}x", "DB", "1")) == \
        "ERR Copying to another database is not allowed in cluster mode"
    assert b"redis_mode:cluster\r\n" in call(core, client, "INFO", "server")
    plain, plain_client = standalone()
    plain_client.authenticated = True
    assert error(call(plain, plain_client, "SELECT", "1")) == "ERR DB index is out of range"
    assert b"redis_mode:standalone\r\n" in call(plain, plain_client, "INFO", "server")


def test_info_says_cluster_enabled_only_for_a_shard_of_a_sharded_database():
    core, client = shard(database())
    assert b"cluster_enabled:1\r\n" in call(core, client, "INFO", "cluster")
    core, client = standalone()
    assert b"cluster_enabled:0\r\n" in call(core, client, "INFO", "cluster")
    core, client = shard(database(shards=1))  # one shard: an unsharded database
    assert core.routing is None
    assert b"cluster_enabled:0\r\n" in call(core, client, "INFO", "cluster")


def test_a_key_of_the_other_shard_is_moved_to_its_endpoint_and_nothing_changes():
    cfg = database()
    core, client = shard(cfg, 0)
    theirs = key_in(8192, SLOTS - 1)
    assert error(call(core, client, "XADD", theirs, "*", "f", "v")) == f"MOVED {key_slot(theirs)} 127.0.0.1:7002"
    assert error(call(core, client, "XLEN", theirs)) == f"MOVED {key_slot(theirs)} 127.0.0.1:7002"
    assert core.db.keys == {}
    core1, client1 = shard(cfg, 1)
    ours = key_in(0, 8191)
    assert error(call(core1, client1, "XRANGE", ours, "-", "+")) == f"MOVED {key_slot(ours)} 127.0.0.1:7001"
    assert call(core1, client1, "XADD", theirs, "1-1", "f", "v") == b"1-1"


def test_keys_of_two_slots_are_refused_with_crossslot():
    core, client = shard(database())
    a, b = key_in(0, 8191), key_in(0, 8191, skip=1)
    assert key_slot(a) != key_slot(b)
    for k in (a, b):
        call(core, client, "XADD", k, "1-1", "f", "v")
    for argv in (["XREAD", "STREAMS", a, b, "0", "0"], ["DEL", a, b], ["EXISTS", a, b], ["UNLINK", a, b],
                 ["RENAME", a, b], ["COPY", a, b], ["XREADGROUP", "GROUP", "g", "c", "STREAMS", a, b, ">", ">"]):
        assert error(call(core, client, *argv)) == CROSSSLOT, argv
    # one key of another shard among them: CROSSSLOT still (Redis looks at the slots first)
    assert error(call(core, client, "DEL", a, key_in(8192, SLOTS - 1))) == CROSSSLOT
    assert sorted(core.db.keys) == sorted([a, b])
    assert call(core, client, "DEL", a, a) == 1  # one slot, twice


def test_hash_tags_keep_keys_in_one_slot():
    core, client = shard(database(), 1)
    assert key_slot(b"{user1}.orders") == key_slot(b"{user1}.audit") == key_slot(b"user1")
    tag = next(t for t in (f"{{u{i}}}".encode() for i in range(100)) if key_slot(t[1:-1]) >= 8192)
    orders, audit = tag + b".orders", tag + b".audit"
    for k in (orders, audit):
        assert call(core, client, "XADD", k, "1-1", "f", "v") == b"1-1"
    assert call(core, client, "XREAD", "STREAMS", orders, audit, "0", "0") == [
        [orders, [[b"1-1", [b"f", b"v"]]]], [audit, [[b"1-1", [b"f", b"v"]]]]]
    assert call(core, client, "RENAME", orders, tag + b".renamed") == "OK"
    assert call(core, client, "COPY", audit, tag + b".copy") == 1
    assert call(core, client, "DEL", audit, tag + b".copy", tag + b".renamed") == 3
    # what is not a tag: an empty one hashes the whole key; only the first { counts
    assert key_slot(b"{}.a") != key_slot(b"{}.b")
    assert key_slot(b"a{b}{c}") == key_slot(b"b") and key_slot(b"{{a}}") == key_slot(b"{a")
    assert key_slot(b"{user1") != key_slot(b"user1")  # no closing brace: no tag


def test_exec_of_commands_of_two_slots_answers_crossslot_and_runs_nothing():
    core, client = shard(database())
    a, b = key_in(0, 8191), key_in(0, 8191, skip=1)
    assert call(core, client, "MULTI") == "OK"
    assert call(core, client, "XADD", a, "1-1", "f", "v") == "QUEUED"
    assert call(core, client, "XADD", b, "1-1", "f", "v") == "QUEUED"
    assert error(call(core, client, "EXEC")) == CROSSSLOT
    assert client.multi is None and core.db.keys == {}
    assert error(call(core, client, "EXEC")) == "ERR EXEC without MULTI"


def test_a_queued_key_of_the_other_shard_is_moved_and_exec_aborts():
    core, client = shard(database())
    ours, theirs = key_in(0, 8191), key_in(8192, SLOTS - 1)
    assert call(core, client, "MULTI") == "OK"
    assert call(core, client, "XADD", ours, "1-1", "f", "v") == "QUEUED"
    assert error(call(core, client, "XADD", theirs, "1-1", "f", "v")) == f"MOVED {key_slot(theirs)} 127.0.0.1:7002"
    assert error(call(core, client, "EXEC")) == "EXECABORT Transaction discarded because of previous errors."
    assert client.multi is None and core.db.keys == {}
    # a transaction of one slot runs
    assert call(core, client, "MULTI") == "OK"
    assert call(core, client, "XADD", ours, "1-1", "f", "v") == "QUEUED"
    assert call(core, client, "XLEN", ours) == "QUEUED"
    assert call(core, client, "EXEC") == [b"1-1", 1]


# ---------------------------------------------------------------- CLUSTER's replies
def test_cluster_slots_in_resp2_and_resp3():
    cfg = database()
    core, client = shard(cfg)
    ids = [s.node_id.encode() for s in core.routing.shards]
    reply = call(core, client, "CLUSTER", "SLOTS")
    assert reply == [[0, 8191, [b"127.0.0.1", 7001, ids[0], {}]], [8192, 16383, [b"127.0.0.1", 7002, ids[1], {}]]]
    assert wire(reply, False)[0][2] == [b"127.0.0.1", 7001, ids[0], []]  # RESP2: an empty array
    assert wire(reply, True)[0][2] == [b"127.0.0.1", 7001, ids[0], {}]  # RESP3: an empty map
    assert to_bytes(reply, True).endswith(b"$40\r\n" + ids[1] + b"\r\n%0\r\n")


def test_cluster_shards_in_resp2_and_resp3():
    core, client = shard(database())
    ids = [s.node_id.encode() for s in core.routing.shards]
    reply = call(core, client, "CLUSTER", "SHARDS")
    node1 = {b"id": ids[1], b"port": 7002, b"ip": b"127.0.0.1", b"endpoint": b"127.0.0.1", b"role": b"master",
             b"replication-offset": 0, b"health": b"online"}
    assert wire(reply, True)[1] == {b"slots": [8192, 16383], b"nodes": [node1]}
    flat = wire(reply, False)[1]
    assert flat == [b"slots", [8192, 16383], b"nodes", [[x for kv in node1.items() for x in kv]]]
    assert to_bytes(reply, True).startswith(b"*2\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:8191\r\n"
                                            b"$5\r\nnodes\r\n*1\r\n%7\r\n")


def test_cluster_shards_health_and_offset_of_this_shard():
    cfg = database(regions=2)
    cfg.regions[0].status = "joining"  # until it caught up with its peers it refuses writes with LOADING
    core, client = shard(cfg, 0, ready=False)
    me = wire(call(core, client, "CLUSTER", "SHARDS"), True)[0][b"nodes"][0]
    assert me[b"health"] == b"loading" and me[b"replication-offset"] == 0
    every_peer_answered(core)
    call(core, client, "XADD", key_in(0, 8191), "*", "f", "v")
    call(core, client, "XADD", key_in(0, 8191), "*", "f", "v")
    shards = wire(call(core, client, "CLUSTER", "SHARDS"), True)
    assert shards[0][b"nodes"][0][b"health"] == b"online"
    assert shards[0][b"nodes"][0][b"replication-offset"] == core.aa.causal.end == 2
    assert shards[1][b"nodes"][0][b"replication-offset"] == 0  # a sibling's: not known here
    core.replaying = True
    assert call(core, client, "CLUSTER", "SHARDS")[0][b"nodes"][0][b"health"] == b"loading"


NODE_LINE = re.compile(r"^[0-9a-f]{40} [^ :]+:\d+@\d+ (myself,)?master - 0 0 \d+ connected( \d+(-\d+)?)+$")


def test_cluster_nodes_lines_as_redis_writes_them():
    cfg = database(slots=[[(0, 99), (101, 8191)], [(100, 100), (8192, 16383)]])
    core, client = shard(cfg, 1)
    ids = [s.node_id for s in core.routing.shards]
    reply = call(core, client, "CLUSTER", "NODES")
    assert type(reply) is Verbatim and to_bytes(reply, True).startswith(b"=%d\r\ntxt:" % (len(reply) + 4))
    lines = reply.decode().split("\n")
    assert lines[-1] == ""
    assert lines[:-1] == [f"{ids[0]} 127.0.0.1:7001@17001 master - 0 0 1 connected 0-99 101-8191",
                          f"{ids[1]} 127.0.0.1:7002@17002 myself,master - 0 0 1 connected 100 8192-16383"]
    assert all(NODE_LINE.match(line) for line in lines[:-1])
    slots = call(core, client, "CLUSTER", "SLOTS")
    assert [(a, b, n[1]) for a, b, n in slots] == [(0, 99, 7001), (100, 100, 7002), (101, 8191, 7001),
                                                   (8192, 16383, 7002)]
    assert call(core, client, "CLUSTER", "SHARDS")[0][b"slots"] == [0, 99, 101, 8191]


def test_adjacent_ranges_of_a_shard_are_one():
    core, client = shard(database(slots=[[(0, 99), (100, 8191)], [(8192, 16383)]]))
    assert [s[:2] for s in call(core, client, "CLUSTER", "SLOTS")] == [[0, 8191], [8192, 16383]]
    assert b"connected 0-8191\n" in call(core, client, "CLUSTER", "NODES")


def test_cluster_info_fields_in_redis_order():
    cfg = database()
    cfg.epoch = 3
    core, client = shard(cfg)
    reply = call(core, client, "CLUSTER", "INFO")
    assert type(reply) is Verbatim
    assert reply.endswith(b"\r\n")
    fields = [line.split(":", 1) for line in reply.decode().split("\r\n")[:-1]]
    assert fields[:12] == [["cluster_state", "ok"], ["cluster_slots_assigned", "16384"], ["cluster_slots_ok", "16384"],
                           ["cluster_slots_pfail", "0"], ["cluster_slots_fail", "0"], ["cluster_known_nodes", "2"],
                           ["cluster_size", "2"], ["cluster_current_epoch", "3"], ["cluster_my_epoch", "3"],
                           ["cluster_stats_messages_sent", "0"], ["cluster_stats_messages_received", "0"],
                           ["total_cluster_links_buffer_limit_exceeded", "0"]]
    assert [n for n, _ in fields[12:]] == [
        "cluster_slot_migration_active_tasks", "cluster_slot_migration_active_trim_running",
        "cluster_slot_migration_active_trim_current_job_keys",
        "cluster_slot_migration_active_trim_current_job_trimmed",
        "cluster_slot_migration_stats_active_trim_started", "cluster_slot_migration_stats_active_trim_completed",
        "cluster_slot_migration_stats_active_trim_cancelled"]
    assert wire(reply, True) == wire(reply, False) == bytes(reply)


def test_node_ids_and_shard_ids():
    cfg = database(regions=2)
    a0, ca0 = shard(cfg, 0, 0)
    a1, ca1 = shard(cfg, 1, 0)
    b0, cb0 = shard(cfg, 0, 1)
    myid = call(a0, ca0, "CLUSTER", "MYID")
    assert myid == a0.routing.shards[0].node_id.encode() and re.fullmatch(rb"[0-9a-f]{40}", myid)
    assert call(a1, ca1, "CLUSTER", "MYID") == a0.routing.shards[1].node_id.encode() != myid
    assert call(b0, cb0, "CLUSTER", "MYID") != myid  # another region: another node
    shard_id = call(a0, ca0, "CLUSTER", "MYSHARDID")
    assert re.fullmatch(rb"[0-9a-f]{40}", shard_id) and shard_id != myid
    assert call(b0, cb0, "CLUSTER", "MYSHARDID") == shard_id  # shard 0 of every region: one group
    assert call(a1, ca1, "CLUSTER", "MYSHARDID") != shard_id
    again, client = shard(cfg, 0, 0)  # restarted: the same ids
    assert call(again, client, "CLUSTER", "MYID") == myid


def test_keyslot_and_the_keys_of_a_slot():
    core, client = shard(database())
    assert call(core, client, "CLUSTER", "KEYSLOT", "somekey") == 11058  # Redis's documentation's examples
    assert call(core, client, "CLUSTER", "KEYSLOT", "foo{hash_tag}") == 2515
    assert call(core, client, "CLUSTER", "KEYSLOT", "123456789") == 12739  # CRC16/XMODEM's check value
    assert call(core, client, "CLUSTER", "KEYSLOT", "") == 0
    tagged = [b"{b}1", b"{b}2", b"x{b}y"]
    slot = key_slot(b"b")
    assert slot < 8192
    for k in [tagged[0], key_in(0, 8191, "other"), *tagged[1:]]:
        call(core, client, "XADD", k, "1-1", "f", "v")
    assert call(core, client, "CLUSTER", "COUNTKEYSINSLOT", slot) == 3
    assert call(core, client, "CLUSTER", "GETKEYSINSLOT", slot, 10) == tagged
    assert call(core, client, "CLUSTER", "GETKEYSINSLOT", slot, 2) == tagged[:2]
    assert call(core, client, "CLUSTER", "GETKEYSINSLOT", slot, 0) == []
    assert call(core, client, "CLUSTER", "COUNTKEYSINSLOT", 16000) == 0  # another shard's slot
    assert call(core, client, "CLUSTER", "GETKEYSINSLOT", 16000, 5) == []
    assert wire(call(core, client, "CLUSTER", "GETKEYSINSLOT", slot, 1), True) == [b"{b}1"]


# Redis's getLongLongFromObjectOrReply, then the slot's and the count's range
SLOT_ARGS = [
    ("-1", "ERR Invalid slot"), ("16384", "ERR Invalid slot"), ("abc", "ERR value is not an integer or out of range"),
    ("1.5", "ERR value is not an integer or out of range"), ("+5", "ERR value is not an integer or out of range"),
    ("1e3", "ERR value is not an integer or out of range"), (" 5", "ERR value is not an integer or out of range"),
    ("5 ", "ERR value is not an integer or out of range"), ("05", "ERR value is not an integer or out of range"),
    ("-0", "ERR value is not an integer or out of range"), ("", "ERR value is not an integer or out of range"),
    (str(1 << 63), "ERR value is not an integer or out of range"), (str((1 << 63) - 1), "ERR Invalid slot"),
    (str(-(1 << 63)), "ERR Invalid slot"), ("0", None), ("16383", None),
]


@pytest.mark.parametrize("arg,expected", SLOT_ARGS)
def test_slot_arguments_parse_as_redis_does(arg, expected):
    core, client = shard(database())
    count = call(core, client, "CLUSTER", "COUNTKEYSINSLOT", arg)
    keys = call(core, client, "CLUSTER", "GETKEYSINSLOT", arg, "1")
    if expected is None:
        assert (count, keys) == (0, [])
        return
    assert error(count) == expected
    assert error(keys) == ("ERR Invalid slot or number of keys" if expected == "ERR Invalid slot" else expected)


@pytest.mark.parametrize("slot,count,expected", [
    ("0", "-1", "ERR Invalid slot or number of keys"), ("0", "abc", "ERR value is not an integer or out of range"),
    ("0", "+1", "ERR value is not an integer or out of range"), ("0", str(1 << 63), "ERR value is not an integer or "
                                                                                   "out of range"),
    ("abc", "-1", "ERR value is not an integer or out of range"),  # the slot is parsed first
    ("-1", "abc", "ERR value is not an integer or out of range"),  # both are parsed before either is checked
    ("16384", "-1", "ERR Invalid slot or number of keys"), ("0", str((1 << 63) - 1), None),
])
def test_getkeysinslot_count_parses_as_redis_does(slot, count, expected):
    core, client = shard(database())
    reply = call(core, client, "CLUSTER", "GETKEYSINSLOT", slot, count)
    assert (reply == []) if expected is None else error(reply) == expected


def test_help_lists_what_a_shard_answers():
    core, client = shard(database())
    reply = call(core, client, "cluster", "help")
    assert reply[0] == "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert reply[-2:] == ["HELP", "    Print this help."]
    names = [line.split()[0] for line in reply[1:] if not line.startswith(" ")]
    assert names == ["COUNTKEYSINSLOT", "GETKEYSINSLOT", "INFO", "KEYSLOT", "MYID", "MYSHARDID", "NODES", "REPLICAS",
                     "SLOTS", "SHARDS", "COUNT-FAILURE-REPORTS", "LINKS", "HELP"]
    assert all(type(line) is str for line in reply)  # status replies, as Redis's
    for name in names[:-1]:
        argv = {"COUNTKEYSINSLOT": ["1"], "GETKEYSINSLOT": ["1", "1"], "KEYSLOT": ["k"]}.get(name, [])
        if name in ("REPLICAS", "COUNT-FAILURE-REPORTS"):
            argv = [core.routing.shards[1].node_id]
        assert not isinstance(call(core, client, "CLUSTER", name, *argv), ReplyError), name


TOPOLOGY = [["ADDSLOTS", "1"], ["ADDSLOTSRANGE", "1", "2"], ["DELSLOTS", "1"], ["DELSLOTSRANGE", "1", "2"],
            ["FLUSHSLOTS"], ["MEET", "127.0.0.1", "7003"], ["MEET", "127.0.0.1", "7003", "17003"], ["FORGET", "x"],
            ["FAILOVER"], ["FAILOVER", "FORCE"], ["REPLICATE", "x"], ["RESET"], ["RESET", "HARD"],
            ["SETSLOT", "1", "STABLE"], ["SETSLOT", "1", "NODE", "x"], ["SAVECONFIG"], ["BUMPEPOCH"],
            ["SET-CONFIG-EPOCH", "1"]]


@pytest.mark.parametrize("argv", TOPOLOGY, ids=" ".join)
def test_what_would_change_the_topology_is_refused(argv):
    core, client = shard(database())
    message = error(call(core, client, "CLUSTER", *argv))
    assert message.startswith(f"ERR CLUSTER {argv[0]} is not supported: ")
    assert "[shards]" in message and "new database" in message
    assert core.routing.shards[0].slots == ((0, 8191),)


def test_topology_subcommands_with_arguments_redis_does_not_take_are_its_syntax_error():
    core, client = shard(database())
    for argv in (["MEET", "a", "1", "2", "3"], ["failover", "force", "x"], ["Reset", "hard", "x"]):
        assert error(call(core, client, "CLUSTER", *argv)) == (
            f"ERR unknown subcommand or wrong number of arguments for '{argv[0]}'. Try CLUSTER HELP.")
    assert error(call(core, client, "CLUSTER", "ADDSLOTS")) == "ERR wrong number of arguments for 'cluster|addslots' " \
                                                               "command"


def test_reads_of_a_cluster_without_replicas():
    core, client = shard(database())
    other = core.routing.shards[1].node_id
    assert call(core, client, "CLUSTER", "LINKS") == []
    assert call(core, client, "CLUSTER", "REPLICAS", other) == []
    assert call(core, client, "CLUSTER", "SLAVES", core.routing.shards[0].node_id) == []
    assert call(core, client, "CLUSTER", "COUNT-FAILURE-REPORTS", other) == 0
    for sub in ("REPLICAS", "SLAVES", "COUNT-FAILURE-REPORTS"):
        assert error(call(core, client, "CLUSTER", sub, other.upper())) == f"ERR Unknown node {other.upper()}"
        assert error(call(core, client, "CLUSTER", sub, b"ab\r\ncd\0ef")) == "ERR Unknown node ab\r\ncd"
    assert to_bytes(call(core, client, "CLUSTER", "REPLICAS", b"a\r\nb")) == b"-ERR Unknown node a  b\r\n"


def test_readonly_readwrite_asking_are_accepted_by_a_shard():
    core, client = shard(database())
    for name in ("READONLY", "READWRITE", "ASKING", "readonly"):
        assert call(core, client, name) == "OK"
    assert error(call(core, client, "READONLY", "x")) == "ERR wrong number of arguments for 'readonly' command"


def test_the_port_a_client_is_shown_is_the_one_it_connected_with():
    cfg = database()
    cfg.regions[0].config["tls-port"] = [7201, 7202]
    core, client = shard(cfg)
    shards = call(core, client, "CLUSTER", "SHARDS")
    assert [n[b"port"] for s in shards for n in s[b"nodes"]] == [7001, 7002]
    assert [n[b"tls-port"] for s in shards for n in s[b"nodes"]] == [7201, 7202]
    assert list(shards[0][b"nodes"][0])[:4] == [b"id", b"port", b"tls-port", b"ip"]
    core.tls = SimpleNamespace(port=7201)  # the TLS client port (node/security/tls.py), as the server binds it
    plain = call(core, client, "CLUSTER", "SLOTS")
    client.laddr = "127.0.0.1:7201"
    tls = call(core, client, "CLUSTER", "SLOTS")
    assert [s[2][1] for s in plain] == [7001, 7002] and [s[2][1] for s in tls] == [7201, 7202]
    assert b" 127.0.0.1:7202@17002 master " in call(core, client, "CLUSTER", "NODES")
    other = key_in(8192, 16383)  # a key of shard 1: MOVED to its TLS port, as the client came by TLS
    assert error(call(core, client, "XADD", other, "*", "f", "v")) == f"MOVED {key_slot(other)} 127.0.0.1:7202"
    client.laddr = "127.0.0.1:7001"
    assert error(call(core, client, "XADD", other, "*", "f", "v")) == f"MOVED {key_slot(other)} 127.0.0.1:7002"


CLUSTER_ARGVS = [["INFO"], ["SLOTS"], ["SHARDS"], ["NODES"], ["MYID"], ["MYSHARDID"], ["KEYSLOT", "k"],
                 ["COUNTKEYSINSLOT", "1"], ["GETKEYSINSLOT", "1", "1"], ["HELP"], ["LINKS"], ["REPLICAS", "x"],
                 ["SLAVES", "x"], ["COUNT-FAILURE-REPORTS", "x"]] + TOPOLOGY


@pytest.mark.parametrize("make", [standalone, lambda: shard(database(shards=1))], ids=["standalone", "unsharded"])
def test_without_shards_cluster_is_disabled_as_in_redis(make):
    core, client = make()
    for argv in CLUSTER_ARGVS:
        assert error(call(core, client, "CLUSTER", *argv)) == DISABLED, argv
    for name in ("READONLY", "READWRITE", "ASKING"):
        assert error(call(core, client, name)) == DISABLED
    # what dispatch checks comes first, as in Redis
    assert error(call(core, client, "CLUSTER", "KEYSLOT")) == "ERR wrong number of arguments for 'cluster|keyslot' " \
                                                              "command"
    assert error(call(core, client, "CLUSTER", "NOSUCH")) == "ERR unknown subcommand 'NOSUCH'. Try CLUSTER HELP."
    assert error(call(core, client, "CLUSTER")) == "ERR wrong number of arguments for 'cluster' command"


def test_cluster_commands_are_described_as_redis_does():
    core, client = standalone()
    info = call(core, client, "COMMAND", "INFO", "cluster", "readonly", "asking")
    assert info[0][:6] == [b"cluster", -2, [], 0, 0, 0]
    assert info[1][:6] == [b"readonly", 1, [b"loading", b"stale", b"fast"], 0, 0, 0]
    assert info[2][:6] == [b"asking", 1, [b"fast"], 0, 0, 0]
    subs = {s[0]: s for s in wire(info, False)[0][9]}
    assert subs[b"cluster|slots"][:6] == [b"cluster|slots", 2, [b"loading", b"stale"], 0, 0, 0]
    assert subs[b"cluster|addslots"][:7] == [b"cluster|addslots", -3, [b"admin", b"stale", b"no_async_loading"],
                                             0, 0, 0, [b"@admin", b"@slow", b"@dangerous"]]
    assert b"cluster|slot-stats" not in subs


# ---------------------------------------------------------------- against Redis itself
def test_disabled_replies_equal_redis_without_cluster_mode(redis_proc):
    """Redis without ``cluster-enabled`` answers every CLUSTER subcommand (KEYSLOT and HELP
    too), READONLY, READWRITE and ASKING with its disabled error; a standalone region the same."""
    core, client = standalone()
    ref = RawClient(redis_proc.port)
    try:
        for argv in [["CLUSTER", *a] for a in CLUSTER_ARGVS if a[0] != "MYSHARDID"] + [  # (MYSHARDID: Redis 7.2)
                ["READONLY"], ["READWRITE"], ["ASKING"], ["CLUSTER", "KEYSLOT"], ["CLUSTER", "NOSUCH"], ["CLUSTER"],
                ["READONLY", "x"]]:
            assert wire(call(core, client, *argv), False) == ref.call(*argv), argv
        assert b"cluster_enabled:0\r\n" in ref.call("INFO", "cluster")
    finally:
        ref.close()


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A real three-node Redis Cluster, and a Braid shard mirroring its first node: the same
    slot map, the same ports (so MOVED must match to the byte)."""
    from tests.realcluster import real_redis_cluster

    with real_redis_cluster(tmp_path_factory.mktemp("redis-cluster"), nodes=3) as nodes:
        probe = RawClient(nodes[0][1])
        try:
            slots = sorted(probe.call("CLUSTER", "SLOTS"))
        finally:
            probe.close()
        ports = [s[2][1] for s in slots]
        me = 0
        cfg = database(shards=len(slots), slots=[[(s[0], s[1])] for s in slots], ports=ports)
        core, client = shard(cfg, me)
        resp2, resp3 = RawClient(ports[me]), RawClient(ports[me])
        resp3.call("HELLO", "3")
        try:
            yield SimpleNamespace(core=core, client=client, resp2=resp2, resp3=resp3, slots=slots, ports=ports)
        finally:
            resp2.close()
            resp3.close()


def _both(real, *argv, resp3: bool = False) -> tuple[object, object]:
    """(Braid's reply, the real cluster's) to the same request, as the client reads each."""
    ours = wire(call(real.core, real.client, *argv), resp3)
    theirs = (real.resp3 if resp3 else real.resp2).call(*argv)
    return ours, theirs


def _ids_out(value: object) -> object:
    """``value`` with every node id (40 hex digits) replaced: they differ by construction."""
    if isinstance(value, bytes):
        return re.sub(rb"\b[0-9a-f]{40}\b", b"<id>", value)
    if isinstance(value, list):
        return [_ids_out(v) for v in value]
    if isinstance(value, dict):
        return {k: _ids_out(v) for k, v in value.items()}
    return value


def test_routing_errors_equal_a_real_cluster(real):
    lo, hi = real.slots[0][:2]
    a, b, c = key_in(lo, hi), key_in(lo, hi, skip=1), key_in(lo, hi, skip=2)
    elsewhere = key_in(real.slots[1][0], real.slots[1][1])
    for argv in (["DEL", a, b], ["EXISTS", a, b], ["UNLINK", a, b], ["RENAME", a, b], ["COPY", a, b],
                 ["XREAD", "STREAMS", a, b, "0", "0"], ["XADD", elsewhere, "1-1", "f", "v"],
                 ["XLEN", elsewhere], ["DEL", a, elsewhere], ["XREAD", "STREAMS", elsewhere, "0"],
                 ["XADD", a, "1-1", "f", "v"], ["DEL", a]):
        ours, theirs = _both(real, *argv)
        assert ours == theirs, argv
    transactions = [
        [["MULTI"], ["XADD", a, "1-1", "f", "v"], ["XADD", b, "1-1", "f", "v"], ["EXEC"]],
        [["MULTI"], ["XADD", a, "1-1", "f", "v"], ["XADD", elsewhere, "1-1", "f", "v"], ["EXEC"]],
        [["MULTI"], ["XADD", c, "1-1", "f", "v"], ["XLEN", c], ["EXEC"]],  # (a fresh key: Braid's IDs
        [["DEL", c]],                                                    # stay above a deleted stream's)
    ]
    for lines in transactions:
        for argv in lines:
            ours, theirs = _both(real, *argv)
            assert ours == theirs, (lines, argv)


KEYSLOT_KEYS = [b"", b"a", b"somekey", b"foo{hash_tag}", b"{user1}.orders", b"{user1}.audit", b"{}", b"{}a", b"a{}",
                b"{", b"}", b"}{", b"{a", b"a}", b"{a}", b"{{a}}", b"{a}{b}", b"a{b}{c}", b"a{{b}}c", b"{}{a}",
                b"x{}}y", b"\x00", b"\x00{\x00}", b"\xff\xfe", b"{\xff}z", "{ключ}".encode(), b"123456789",
                b"x" * 1000, b"{" + b"y" * 500 + b"}tail"] + [f"key:{i}".encode() for i in range(200)]


def test_keyslot_equals_a_real_cluster(real):
    ours = [call(real.core, real.client, "CLUSTER", "KEYSLOT", k) for k in KEYSLOT_KEYS]
    real.resp2.send(*[["CLUSTER", "KEYSLOT", k] for k in KEYSLOT_KEYS])
    assert ours == real.resp2.receive(len(KEYSLOT_KEYS))


def test_slot_argument_errors_equal_a_real_cluster(real):
    args = [a for a, _ in SLOT_ARGS] + ["x\x00", "9" * 30]
    for arg in args:
        ours, theirs = _both(real, "CLUSTER", "COUNTKEYSINSLOT", arg)
        assert ours == theirs, arg
        for count in ("1", "-1", "abc", "0", "+1", str(1 << 63)):
            ours, theirs = _both(real, "CLUSTER", "GETKEYSINSLOT", arg, count)
            assert ours == theirs, (arg, count)
    for argv in (["CLUSTER", "COUNTKEYSINSLOT"], ["CLUSTER", "GETKEYSINSLOT", "1"], ["CLUSTER", "KEYSLOT", "a", "b"],
                 ["CLUSTER", "NOSUCH"], ["CLUSTER", "REPLICAS", "nosuch"], ["CLUSTER", "COUNT-FAILURE-REPORTS", "x"],
                 ["CLUSTER", "MEET", "a", "1", "2", "3"], ["CLUSTER", "FAILOVER", "FORCE", "x"],
                 ["READONLY"], ["READWRITE"], ["ASKING"], ["CLUSTER", "LINKS", "x"]):
        ours, theirs = _both(real, *argv)
        assert ours == theirs, argv


# Redis counts bus messages per type (listed once not 0); Braid has no bus.  Redis 8.4 added
# the atomic slot migration counters, which the reference Redis 7.0 does not have.
_PER_TYPE = re.compile(r"^cluster_stats_messages_[a-z-]+_(sent|received)$")
_SINCE_84 = re.compile(r"^cluster_slot_migration_")


def test_cluster_info_fields_equal_a_real_cluster(real):
    for resp3 in (False, True):
        ours, theirs = _both(real, "CLUSTER", "INFO", resp3=resp3)
        assert type(ours) is type(theirs) is bytes
        names = [line.split(":")[0] for line in ours.decode().split("\r\n") if line]
        their_names = [line.split(":")[0] for line in theirs.decode().split("\r\n") if line]
        assert [n for n in names if not _SINCE_84.match(n)] == [n for n in their_names if not _PER_TYPE.match(n)]
        values = dict(line.split(":") for line in ours.decode().split("\r\n") if line)
        their_values = dict(line.split(":") for line in theirs.decode().split("\r\n") if line)
        for name in ("cluster_state", "cluster_slots_assigned", "cluster_slots_ok", "cluster_slots_pfail",
                     "cluster_slots_fail", "cluster_known_nodes", "cluster_size"):
            assert values[name] == their_values[name], name


def test_slots_shards_nodes_shapes_equal_a_real_cluster(real):
    for resp3 in (False, True):
        ours, theirs = _both(real, "CLUSTER", "SLOTS", resp3=resp3)
        assert _ids_out(ours) == _ids_out(sorted(theirs)), resp3
        ours, theirs = _both(real, "CLUSTER", "SHARDS", resp3=resp3)
        if not resp3:  # (flat lists: compare them as maps, by their slots)
            ours = [dict(zip(s[::2], s[1::2], strict=True)) for s in ours]
            theirs = [dict(zip(s[::2], s[1::2], strict=True)) for s in theirs]
            for s in ours + theirs:
                s[b"nodes"] = [dict(zip(n[::2], n[1::2], strict=True)) for n in s[b"nodes"]]
        for s in ours + theirs:
            for n in s[b"nodes"]:
                n[b"replication-offset"] = 0
        theirs = sorted(theirs, key=lambda s: s[b"slots"])
        assert [list(n) for s in ours for n in s[b"nodes"]] == [list(n) for s in theirs for n in s[b"nodes"]]
        assert _ids_out(ours) == _ids_out(theirs)
        ours, theirs = _both(real, "CLUSTER", "NODES", resp3=resp3)
        assert type(ours) is type(theirs) is bytes

        def lines(text: bytes) -> list[list[str]]:
            out = []
            for line in text.decode().split("\n")[:-1]:
                f = line.split(" ")
                addr = re.sub(r"@\d+", "@<cport>", f[1])
                out.append([addr, f[2], f[3], f[7], *f[8:]])  # (not the id, pings, pongs, epoch)
            assert text.endswith(b"\n")
            return sorted(out)

        assert lines(ours) == lines(theirs)
        for argv in (["CLUSTER", "MYID"], ["CLUSTER", "LINKS"], ["CLUSTER", "KEYSLOT", "x"]):
            ours, theirs = _both(real, *argv, resp3=resp3)
            assert type(ours) is type(theirs), argv
    ours, theirs = _both(real, "CLUSTER", "MYID")
    assert re.fullmatch(rb"[0-9a-f]{40}", ours) and re.fullmatch(rb"[0-9a-f]{40}", theirs)
    assert _both(real, "INFO", "cluster") == (b"# Cluster\r\ncluster_enabled:1\r\n",) * 2
