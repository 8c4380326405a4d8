"""DUMP, RESTORE, RESTORE-ASKING, and MIGRATE from a Redis into Braid.

- Redis 8.6's own payloads (recorded by hand from a Redis 8.6.3 server: hex data
  below, with the XINFO STREAM FULL reply it gave): Braid decodes them, restores
  them to the same XINFO STREAM FULL, and writes the uncompressed one back byte for
  byte.
- Redis 8.8's type 27 (RDB 14) with a NACK zone, hand-built from the layout with the
  content of librdb's ``stream_v14_xnack`` fixture: RESTORE gives the released entries
  back unowned, counted in ``nacked-count`` and claimed first in zone order; a
  damaged zone is ``Bad data format``.  XNACK, DUMP (Redis 8.10's RDB 15 by default),
  RESTORE keeps the zone; ``dump-rdb-version 13`` leaves it out.
- Debian's redis-server 7.0 both ways: a stream built there (several nodes, deleted
  entries, groups, PELs, consumers) DUMPed there is RESTOREd into Braid (the legacy
  type 19) to the same XRANGE and XINFO STREAM FULL; Braid's DUMP with
  ``dump-rdb-version 10`` RESTOREs into 7.0 the same way (released entries left out),
  and Braid's default (RDB 15) one is refused there exactly as 7.0 refuses any newer
  payload.
- MIGRATE run on 7.0 moves its streams into Braid (single key, KEYS, COPY, REPLACE,
  AUTH): Braid has what 7.0 had; 7.0 reports Braid's BUSYKEY.
- Replies and errors against redis-server itself (differential), and Braid's own
  (another type, a TTL); every truncation and random bit flips of a payload are
  refused and the server keeps serving.
- Active-Active: RESTORE resolves like COPY (entries in a log of their own, groups
  created again, consumers at the issuing region), and converges.
- The append-only file: a RESTORE replays exactly after a restart.
"""

from __future__ import annotations

import random

import pytest

from crdt.ids import MAX_ID, MIN_ID
from node.interop import rdb
from node.interop.listpack import listpack_encode
from node.resp.encoder import ReplyError
from tests.differential import Err, RawClient
from tests.test_convergence import STRIDE, sync
from tests.test_convergence import Region as ActiveRegion
from tests.test_copy import OneRegion, _state
from tests.test_replay_ops import Region as LoggedRegion

# ---------------------------------------------------------------- Redis 8.6's payloads
# Made on Redis 8.6.3 by:
#   XADD s * f v n 1;  XADD s IDMP prod iid-1 * f w n 2;  XADD s IDMP prod iid-1 * f dup
#   XADD s * other x;  XADD s IDMPAUTO p2 * k 12345;  XGROUP CREATE s g 0
#   XREADGROUP GROUP g alice COUNT 2 STREAMS s >;  XGROUP CREATECONSUMER s g bob
#   XGROUP CREATE s empty $;  XCFGSET s IDMP-DURATION 300 IDMP-MAXSIZE 50
#   XADD s IDMP prod iid-2 * f after;  XDEL s <first ID>;  DUMP s
# once with rdbcompression yes (LZF) and once with no.
REDIS86_PAYLOAD = bytes.fromhex(
    "1a0110000001a209baea870000000000000000c3405f406816680000002700040101010201816602816e0200010301"
    "0020010581760201010520160004400c02770202200c0000200c40000a856f746865720681780206601320290701"
    "816b02f1393003401040282010056602856166742027020601ff0481000001a209baea8c0081000001a209baea8b00"
    "81000001a209baea8700050205656d70747981000001a209baea8b0281ffffffffffffffff0000016781000001a209"
    "baea8b000202000001a209baea8700000000000000008ceaba09a201000001000001a209baea8b0000000000000000"
    "8ceaba09a2010000010205616c6963658ceaba09a20100008ceaba09a201000002000001a209baea87000000000000"
    "0000000001a209baea8b000000000000000003626f628ceaba09a2010000ffffffffffffffff00412c32010470726f"
    "6401056969642d3281000001a209baea8c0003010d00d98905326d9e65b3")
REDIS86_PAYLOAD_RAW = bytes.fromhex(
    "1a0110000001a209baea8700000000000000004068680000002700040101010201816602816e0200010301000100018176"
    "0201010501020104010001817702020105010001040101010101856f746865720681780206010001040102010101816b"
    "02f139300306010001050100010101816602856166746572060601ff0481000001a209baea8c0081000001a209baea8b00"
    "81000001a209baea8700050205656d70747981000001a209baea8b0281ffffffffffffffff0000016781000001a209baea"
    "8b000202000001a209baea8700000000000000008ceaba09a201000001000001a209baea8b00000000000000008ceaba09"
    "a2010000010205616c6963658ceaba09a20100008ceaba09a201000002000001a209baea870000000000000000000001a2"
    "09baea8b000000000000000003626f628ceaba09a2010000ffffffffffffffff00412c32010470726f6401056969642d32"
    "81000001a209baea8c0003010d00eac1d5dbe88093fd")
T = 1795459574400  # the milliseconds around which the payloads were made
REDIS86_FULL = [
    b"length", 4, b"radix-tree-keys", 1, b"radix-tree-nodes", 2, b"last-generated-id", b"%d-0" % (T + 12),
    b"max-deleted-entry-id", b"%d-0" % (T + 7), b"entries-added", 5, b"recorded-first-entry-id", b"%d-0" % (T + 11),
    b"idmp-duration", 300, b"idmp-maxsize", 50, b"pids-tracked", 1, b"iids-tracked", 1, b"iids-added", 3,
    b"iids-duplicates", 1,
    b"entries", [[b"%d-0" % (T + 11), [b"f", b"w", b"n", b"2"]], [b"%d-1" % (T + 11), [b"other", b"x"]],
                 [b"%d-2" % (T + 11), [b"k", b"12345"]], [b"%d-0" % (T + 12), [b"f", b"after"]]],
    b"groups", [
        [b"name", b"empty", b"last-delivered-id", b"%d-2" % (T + 11), b"entries-read", None, b"lag", None,
         b"pel-count", 0, b"pending", [], b"consumers", []],
        [b"name", b"g", b"last-delivered-id", b"%d-0" % (T + 11), b"entries-read", 2, b"lag", 3, b"pel-count", 2,
         b"pending", [[b"%d-0" % (T + 7), b"alice", T + 12, 1], [b"%d-0" % (T + 11), b"alice", T + 12, 1]],
         b"consumers", [
             [b"name", b"alice", b"seen-time", T + 12, b"active-time", T + 12, b"pel-count", 2,
              b"pending", [[b"%d-0" % (T + 7), T + 12, 1], [b"%d-0" % (T + 11), T + 12, 1]]],
             [b"name", b"bob", b"seen-time", T + 12, b"active-time", -1, b"pel-count", 0, b"pending", []]]]],
]
# The IDMP map expires with time (its iid's entry is from the recording's day): a region's
# expiry may have dropped it by the time XINFO runs, so those two counts are left out.
_IDMP_TRACKED = {b"pids-tracked", b"iids-tracked"}


def _fields(reply: list, skip: set = frozenset()) -> dict:
    reply = _without_nacked(reply)
    return {reply[i]: reply[i + 1] for i in range(0, len(reply), 2) if reply[i] not in skip}


def _without_nacked(reply):
    """The reply without XINFO's ``nacked-count`` (Redis 8.8+: neither 7.0 nor the recorded 8.6
    replies have it), at any depth."""
    if not isinstance(reply, list):
        return reply
    if len(reply) % 2 == 0 and b"nacked-count" in reply[::2]:
        i = reply[::2].index(b"nacked-count") * 2
        reply = reply[:i] + reply[i + 2:]
    return [_without_nacked(r) for r in reply]


def test_redis86_payloads_decode():
    for payload in (REDIS86_PAYLOAD, REDIS86_PAYLOAD_RAW):
        assert rdb.verify_payload(payload) == 13 and payload[0] == rdb.RDB_TYPE_STREAM_LISTPACKS_4
        s = rdb.load_payload(payload, origin=0)
        assert [(i, f) for i, f in s.range(MIN_ID, MAX_ID)] == \
            [(tuple(map(int, i.split(b"-"))), f) for i, f in _fields(REDIS86_FULL)[b"entries"]]
        assert (s.idmp.duration, s.idmp.maxsize, s.idmp.iids_added, s.idmp.iids_duplicates) == (300, 50, 3, 1)
        assert {p: dict(m) for p, m in s.idmp.producers.items()} == {b"prod": {b"iid-2": (T + 12, 0)}}
        assert s.node_count == 1 and s.logs[0].blocks[0].dead == 1  # the deleted entry is still in its node
    # written back (uncompressed) byte for byte as Redis 8.6 wrote it
    assert rdb.dump_payload(rdb.load_payload(REDIS86_PAYLOAD), rdb.RDB_VERSION_REDIS_8_6) == REDIS86_PAYLOAD_RAW


@pytest.mark.parametrize("payload", [REDIS86_PAYLOAD, REDIS86_PAYLOAD_RAW], ids=["lzf", "raw"])
def test_redis86_payload_restores_to_what_redis86_showed(braid_proc, payload):
    c = RawClient(braid_proc.port)
    try:
        c.call("FLUSHALL")
        assert c.call("RESTORE", "s", 0, payload) == b"OK"
        full = c.call("XINFO", "STREAM", "s", "FULL")
        skip = {b"radix-tree-nodes"} | _IDMP_TRACKED  # radix-tree-nodes: Redis's internal rax count
        assert _fields(full, skip) == _fields(REDIS86_FULL, skip)
    finally:
        c.close()


# ---------------------------------------------------------------- Redis 8.8's NACK zone
# librdb's stream_v14_xnack fixture (Redis 8.8, RDB 14) as its JSON shows it: four entries,
# consumer1 owns the first and the last, the two in the middle were released by XNACK.
V14 = 1779170191996


def _v14_payload(zone=((V14 + 2, 0), (V14 + 4, 0)), version: int = 14) -> bytes:
    """A type-27 payload written out from the layout (not by Braid's stream writer): nodes,
    counters, the group PEL (released entries with delivery time 0), the consumers, the NACK
    zone (a count, then raw 128-bit IDs in release order), the IDMP defaults, the footer."""
    w = rdb.Writer()
    w.byte(rdb.RDB_TYPE_STREAM_LISTPACKS_5)
    w.length(1)                                                    # one listpack node
    w.string(V14.to_bytes(8, "big") + bytes(8))                    # its key: the master ID (raw)
    w.string(listpack_encode([
        4, 0, 1, b"field1", 0,                                     # live, deleted, master fields, 0
        2, 0, 0, b"value1", 4,                                     # SAMEFIELDS entry
        0, 2, 0, 1, b"field2", b"value2", 6,                       # entries with fields of their own
        0, 4, 0, 1, b"field3", b"value3", 6,
        0, 5, 0, 1, b"field4", b"value4", 6]))
    w.length(4)                                                    # length
    w.len_id((V14 + 5, 0))                                         # last-generated-id
    w.len_id((V14, 0))                                             # first ID
    w.len_id((0, 0))                                               # max deleted ID
    w.length(4)                                                    # entries added
    w.length(1)
    w.string(b"mygroup")
    w.len_id((V14 + 5, 0))
    w.length(4)                                                    # entries read
    w.length(4)                                                    # the group PEL, in ID order
    for ms, when in ((V14, V14 + 8), (V14 + 2, 0), (V14 + 4, 0), (V14 + 5, V14 + 8)):
        w.stream_id((ms, 0))
        w.millis(when)
        w.length(1)
    w.length(1)
    w.string(b"consumer1")
    w.millis(V14 + 8)                                              # seen
    w.millis(V14 + 8)                                              # active
    w.length(2)
    w.stream_id((V14, 0))
    w.stream_id((V14 + 5, 0))
    w.length(len(zone))                                            # the NACK zone
    for id_ in zone:
        w.stream_id(id_)
    for n in (100, 100, 0, 0, 0):                                  # IDMP: duration, max size, none
        w.length(n)
    body = w.getvalue() + version.to_bytes(2, "little")
    return body + rdb.crc64(body).to_bytes(8, "little")


def test_v14_payload_decodes_with_its_nack_zone():
    s = rdb.load_payload(_v14_payload(), origin=0)
    assert [i for i, _f in s.range(MIN_ID, MAX_ID)] == [(V14, 0), (V14 + 2, 0), (V14 + 4, 0), (V14 + 5, 0)]
    g = s.groups[b"mygroup"]
    assert [(i, n.consumer and n.consumer.name, n.delivery_time) for i, n in g.by_delivery_time()] == [
        ((V14 + 2, 0), None, 0), ((V14 + 4, 0), None, 0), ((V14, 0), b"consumer1", V14 + 8),
        ((V14 + 5, 0), b"consumer1", V14 + 8)]
    # zone order, not ID order, decides which released entry is served first
    g = rdb.load_payload(_v14_payload(zone=((V14 + 4, 0), (V14 + 2, 0))), origin=0).groups[b"mygroup"]
    assert [i for i, n in g.by_delivery_time() if n.consumer is None] == [(V14 + 4, 0), (V14 + 2, 0)]
    # the same value in RDB 15 (Redis 8.10), and Braid writes it back byte for byte
    p15 = _v14_payload(version=15)
    assert rdb.dump_payload(rdb.load_payload(p15)) == p15
    assert rdb.dump_payload(rdb.load_payload(_v14_payload()), rdb.RDB_VERSION_REDIS_8_8) == _v14_payload()


def _group_of(c: RawClient, key: str = "s") -> dict:
    info = c.call("XINFO", "STREAM", key, "FULL")
    g = dict(zip(info[::2], info[1::2], strict=True))[b"groups"][0]
    return dict(zip(g[::2], g[1::2], strict=True))


def _claim_all(c: RawClient, key: str, group: str) -> list:
    rows = c.call("XREADGROUP", "GROUP", group, "claimer", "CLAIM", "0", "STREAMS", key, ">")
    return [r[0] for r in rows[0][1]]


def test_v14_payload_restores_with_released_entries_first(braid_proc):
    c = RawClient(braid_proc.port)
    try:
        c.call("FLUSHALL")
        assert c.call("RESTORE", "s", 0, _v14_payload(zone=((V14 + 4, 0), (V14 + 2, 0)))) == b"OK"
        g = _group_of(c)
        assert (g[b"pel-count"], g[b"nacked-count"]) == (4, 2)
        assert g[b"pending"] == [[b"%d-0" % V14, b"consumer1", V14 + 8, 1], [b"%d-0" % (V14 + 2), b"", 0, 1],
                                 [b"%d-0" % (V14 + 4), b"", 0, 1], [b"%d-0" % (V14 + 5), b"consumer1", V14 + 8, 1]]
        assert c.call("XPENDING", "s", "mygroup") == [4, b"%d-0" % V14, b"%d-0" % (V14 + 5), [[b"consumer1", b"2"]]]
        # XREADGROUP CLAIM serves the zone first, in its order, then the owned entries by age
        assert _claim_all(c, "s", "mygroup") == [b"%d-0" % (V14 + 4), b"%d-0" % (V14 + 2), b"%d-0" % V14,
                                                 b"%d-0" % (V14 + 5)]
        assert _group_of(c)[b"nacked-count"] == 0
    finally:
        c.close()


def test_xnack_then_dump_then_restore_keeps_the_zone(braid_proc):
    c = RawClient(braid_proc.port)
    try:
        c.call("FLUSHALL")
        for i in range(1, 6):
            c.call("XADD", "s", f"{i}-0", "f", f"v{i}")
        c.call("XGROUP", "CREATE", "s", "g", "0")
        c.call("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
        assert c.call("XNACK", "s", "g", "FAIL", "IDS", "1", "4-0") == 1
        assert c.call("XNACK", "s", "g", "FATAL", "IDS", "1", "2-0") == 1
        assert c.call("XNACK", "s", "g", "SILENT", "IDS", "1", "5-0") == 1
        payload = c.call("DUMP", "s")
        assert payload[0] == rdb.RDB_TYPE_STREAM_LISTPACKS_5 and payload[-10:-8] == b"\x0f\x00"
        before = _group_of(c)
        assert c.call("RESTORE", "t", 0, payload) == b"OK"
        assert _group_of(c, "t") == before and before[b"nacked-count"] == 3
        def pending(key):  # id, owner, delivery count: the idle time moves between two calls
            return [[p[0], p[1], p[3]] for p in c.call("XPENDING", key, "g", "-", "+", "10")]
        assert pending("t") == pending("s")
        assert _claim_all(c, "t", "g") == [b"4-0", b"2-0", b"5-0", b"1-0", b"3-0"] == _claim_all(c, "s", "g")
        # for a Redis before 8.8 the released entries are left out: only alice's remain pending
        c.call("XNACK", "s", "g", "FAIL", "IDS", "2", "3-0", "1-0")
        assert c.call("CONFIG", "SET", "dump-rdb-version", "13") == b"OK"
        try:
            older = c.call("DUMP", "s")
        finally:
            c.call("CONFIG", "SET", "dump-rdb-version", "15")
        assert older[0] == rdb.RDB_TYPE_STREAM_LISTPACKS_4 and older[-10:-8] == b"\x0d\x00"
        assert c.call("RESTORE", "u", 0, older) == b"OK"
        g = _group_of(c, "u")
        assert (g[b"pel-count"], g[b"nacked-count"]) == (3, 0)
        assert [p[0] for p in g[b"pending"]] == [b"2-0", b"4-0", b"5-0"]
        assert [p[1] for p in g[b"pending"]] == [b"claimer"] * 3
    finally:
        c.close()


def test_damaged_nack_zones_are_bad_data_format(braid):
    cases = {
        "not pending": _v14_payload(zone=((V14 + 2, 0), (V14 + 3, 0))),
        "owned": _v14_payload(zone=((V14 + 2, 0), (V14, 0))),
        "twice": _v14_payload(zone=((V14 + 2, 0), (V14 + 4, 0), (V14 + 2, 0))),
        "an unowned entry outside it": _v14_payload(zone=((V14 + 2, 0),)),
    }
    for what, payload in cases.items():
        with pytest.raises(Exception, match="^Bad data format$"):
            braid.restore("dst", 0, payload)
            pytest.fail(what)
    good = _v14_payload()
    body = good[:-8]
    for n in range(len(body) - 60, len(body) - 10):              # every cut through the zone and IDMP
        cut = body[:n] + body[-2:]
        with pytest.raises(Exception, match="^Bad data format$"):
            braid.restore("dst", 0, cut + rdb.crc64(cut).to_bytes(8, "little"))
    assert braid.exists("dst") == 0
    assert braid.restore("dst", 0, good) == b"OK" and braid.xlen("dst") == 4


# ---------------------------------------------------------------- Redis 7.0 both ways
def _build_on(c: RawClient) -> None:
    """A stream with several nodes, deleted entries (some first in their node), two groups,
    PELs of two consumers, an acknowledged and a claimed entry, an idle consumer."""
    c.call("CONFIG", "SET", "stream-node-max-entries", "10")
    for i in range(1, 61):
        fields = ["f", str(i), "big", "x" * (i * 7)] if i % 4 else ["other", "-5", "n", "007"]
        c.call("XADD", "s", f"{1000 + i}-{i % 3}", *fields)
    c.call("XDEL", "s", "1001-1", "1011-2", "1030-0", "1031-1", "1032-2")
    c.call("XGROUP", "CREATE", "s", "g1", "0")
    c.call("XGROUP", "CREATE", "s", "g2", "1040-1")
    c.call("XREADGROUP", "GROUP", "g1", "alice", "COUNT", "4", "STREAMS", "s", ">")
    c.call("XREADGROUP", "GROUP", "g1", "bob", "COUNT", "3", "STREAMS", "s", ">")
    c.call("XACK", "s", "g1", "1003-0")
    c.call("XCLAIM", "s", "g1", "bob", "0", "1002-2")
    c.call("XGROUP", "CREATECONSUMER", "s", "g2", "idle")
    c.call("XREADGROUP", "GROUP", "g2", "carol", "STREAMS", "s", ">")
    c.call("CONFIG", "SET", "stream-node-max-entries", "100")


def _comparable_full(reply: list) -> dict:
    """XINFO STREAM FULL as Redis 7.0 and Braid can both show it: 7.0's fields only, no
    radix-tree-nodes (an internal count), consumers without 7.2's active-time."""
    out = _fields(reply, {b"radix-tree-nodes"})
    out = {k: v for k, v in out.items() if k not in (b"idmp-duration", b"idmp-maxsize", b"pids-tracked",
                                                     b"iids-tracked", b"iids-added", b"iids-duplicates")}
    groups = []
    for g in out[b"groups"]:
        g = _fields(g)
        g[b"consumers"] = [_fields(c, {b"active-time"}) for c in g[b"consumers"]]
        groups.append(g)
    out[b"groups"] = groups
    return out


@pytest.fixture
def pair(braid_proc, redis_proc):
    b, r = RawClient(braid_proc.port), RawClient(redis_proc.port)
    for c in (b, r):
        c.call("FLUSHALL")
    b.call("CONFIG", "SET", "dump-rdb-version", "15")
    yield b, r
    b.call("CONFIG", "SET", "dump-rdb-version", "15")
    b.close()
    r.close()


def test_redis70_dump_restores_into_braid(pair):
    b, r = pair
    _build_on(r)
    payload = r.call("DUMP", "s")
    assert payload[0] == rdb.RDB_TYPE_STREAM_LISTPACKS_2 and payload[-10:-8] == b"\x0a\x00"
    assert b.call("RESTORE", "s", 0, payload) == b"OK"
    assert b.call("XRANGE", "s", "-", "+") == r.call("XRANGE", "s", "-", "+")
    assert _comparable_full(b.call("XINFO", "STREAM", "s", "FULL")) == \
        _comparable_full(r.call("XINFO", "STREAM", "s", "FULL"))
    for cmd in (("XINFO", "GROUPS", "s"), ("XPENDING", "s", "g1"), ("XLEN", "s")):
        assert b.call(*cmd) == r.call(*cmd), cmd
    # the extended form without the idle times (they depend on when each server answers)
    cmd = ("XPENDING", "s", "g1", "-", "+", "10")
    assert [(i, c, n) for i, c, _idle, n in b.call(*cmd)] == [(i, c, n) for i, c, _idle, n in r.call(*cmd)]
    # the restored groups go on reading where Redis's do
    cmd = ("XREADGROUP", "GROUP", "g1", "dave", "COUNT", "5", "STREAMS", "s", ">")
    assert b.call(*cmd) == r.call(*cmd)


def test_braid_dump_restores_into_redis70(pair):
    b, r = pair
    _build_on(b)
    default = b.call("DUMP", "s")
    assert default[0] == rdb.RDB_TYPE_STREAM_LISTPACKS_5 and default[-10:-8] == b"\x0f\x00"
    # 7.0 refuses a payload newer than its RDB version, whatever it holds
    assert r.call("RESTORE", "s", 0, default) == Err("ERR DUMP payload version or checksum are wrong")
    assert b.call("CONFIG", "SET", "dump-rdb-version", "10") == b"OK"
    legacy = b.call("DUMP", "s")
    assert legacy[0] == rdb.RDB_TYPE_STREAM_LISTPACKS_2 and legacy[-10:-8] == b"\x0a\x00"
    assert r.call("RESTORE", "s", 0, legacy) == b"OK"
    assert r.call("XRANGE", "s", "-", "+") == b.call("XRANGE", "s", "-", "+")
    assert _comparable_full(r.call("XINFO", "STREAM", "s", "FULL")) == \
        _comparable_full(b.call("XINFO", "STREAM", "s", "FULL"))
    # and 7.0's own DUMP of it is what Braid wrote, once both store the listpacks raw
    b.call("CONFIG", "SET", "rdbcompression", "no")
    r.call("CONFIG", "SET", "rdbcompression", "no")
    try:
        assert r.call("DUMP", "s") == b.call("DUMP", "s")
    finally:
        b.call("CONFIG", "SET", "rdbcompression", "yes")
        r.call("CONFIG", "SET", "rdbcompression", "yes")


def test_released_entries_are_left_out_for_redis70(pair):
    b, r = pair
    for i in range(1, 5):
        b.call("XADD", "s", f"{i}-0", "f", f"v{i}")
    b.call("XGROUP", "CREATE", "s", "g", "0")
    b.call("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
    b.call("XNACK", "s", "g", "FAIL", "IDS", "2", "3-0", "1-0")
    assert b.call("CONFIG", "SET", "dump-rdb-version", "10") == b"OK"
    assert r.call("RESTORE", "s", 0, b.call("DUMP", "s")) == b"OK"
    # 7.0 has alice's entries pending, and nothing it would need an owner for
    assert r.call("XPENDING", "s", "g") == [2, b"2-0", b"4-0", [[b"alice", b"2"]]]
    assert [p[:2] for p in r.call("XPENDING", "s", "g", "-", "+", "10")] == [[b"2-0", b"alice"], [b"4-0", b"alice"]]
    assert r.call("XRANGE", "s", "-", "+") == b.call("XRANGE", "s", "-", "+")


def test_migrate_from_redis70_into_braid(pair, braid_proc):
    b, r = pair
    _build_on(r)
    r.call("XADD", "t", "1-1", "a", "b")
    r.call("XADD", "u", "1-1", "c", "d")
    expected = r.call("XRANGE", "s", "-", "+")
    full = _comparable_full(r.call("XINFO", "STREAM", "s", "FULL"))
    port = braid_proc.port
    assert r.call("MIGRATE", "127.0.0.1", port, "s", 0, 5000) == b"OK"
    assert r.call("EXISTS", "s") == 0                      # moved
    assert b.call("XRANGE", "s", "-", "+") == expected
    assert _comparable_full(b.call("XINFO", "STREAM", "s", "FULL")) == full
    # COPY leaves the source; an existing key is Braid's BUSYKEY, reported by Redis
    assert r.call("MIGRATE", "127.0.0.1", port, "t", 0, 5000, "COPY") == b"OK"
    assert r.call("EXISTS", "t") == 1
    err = r.call("MIGRATE", "127.0.0.1", port, "t", 0, 5000, "COPY")
    assert isinstance(err, Err) and "BUSYKEY Target key name already exists." in str(err)
    r.call("XADD", "t", "2-0", "e", "f")
    assert r.call("MIGRATE", "127.0.0.1", port, "", 0, 5000, "REPLACE", "KEYS", "t", "u") == b"OK"
    assert b.call("XRANGE", "t", "-", "+") == [[b"1-1", [b"a", b"b"]], [b"2-0", [b"e", b"f"]]]
    assert b.call("XRANGE", "u", "-", "+") == [[b"1-1", [b"c", b"d"]]]
    assert sorted(b.call("KEYS", "*")) == [b"s", b"t", b"u"]
    # a key with a TTL: Braid keys do not expire, Braid says so and Redis reports it
    r.call("XADD", "v", "1-1", "a", "b")
    r.call("PEXPIRE", "v", 100000)
    err = r.call("MIGRATE", "127.0.0.1", port, "v", 0, 5000)
    assert isinstance(err, Err) and "Braid keys do not expire" in str(err)
    assert r.call("EXISTS", "v") == 1 and b.call("EXISTS", "v") == 0


def test_migrate_with_auth_into_braid(pair, braid_proc):
    b, r = pair
    r.call("XADD", "s", "5-5", "f", "v")
    assert b.call("CONFIG", "SET", "requirepass", "sesame") == b"OK"  # b stays authenticated
    try:
        assert r.call("MIGRATE", "127.0.0.1", braid_proc.port, "s", 0, 5000, "AUTH", "sesame") == b"OK"
        assert b.call("XRANGE", "s", "-", "+") == [[b"5-5", [b"f", b"v"]]]
        assert r.call("EXISTS", "s") == 0
    finally:
        assert b.call("CONFIG", "SET", "requirepass", "") == b"OK"


# ---------------------------------------------------------------- replies and errors
def _payloads(r: RawClient) -> dict:
    r.call("XADD", "src", "1-1", "f", "v")
    good = r.call("DUMP", "src")
    bad_crc = good[:-1] + bytes((good[-1] ^ 1,))
    newer = good[:-10] + b"\x10\x00"  # 16: newer than both 7.0's 10 and Braid's 15
    newer += rdb.crc64(newer).to_bytes(8, "little")
    garbage = b"\x13\xff\xff" + b"\x0a\x00"
    garbage += rdb.crc64(garbage).to_bytes(8, "little")
    return {"good": good, "bad_crc": bad_crc, "newer": newer, "garbage": garbage, "short": b"123"}


DIFFERENTIAL = [
    ("RESTORE", "k", 0, "good"),
    ("RESTORE", "k", 0, "good"),                              # BUSYKEY
    ("RESTORE", "k", 0, "good", "REPLACE"),
    ("RESTORE", "k2", -1, "good"),
    ("RESTORE", "k2", "x", "good"),
    ("RESTORE", "k2", "1.5", "good"),
    ("RESTORE", "k2", 0, "bad_crc"),
    ("RESTORE", "k2", 0, "newer"),
    ("RESTORE", "k2", 0, "short"),
    ("RESTORE", "k2", 0, "garbage"),
    ("RESTORE", "k2", 0, "good", "IDLETIME", -1),
    ("RESTORE", "k2", 0, "good", "IDLETIME", "x"),
    ("RESTORE", "k2", 0, "good", "FREQ", 256),
    ("RESTORE", "k2", 0, "good", "FREQ", -1),
    ("RESTORE", "k2", 0, "good", "IDLETIME", 5, "FREQ", 5),
    ("RESTORE", "k2", 0, "good", "FREQ", 5, "IDLETIME", 5),
    ("RESTORE", "k2", 0, "good", "IDLETIME"),
    ("RESTORE", "k2", 0, "good", "BOGUS"),
    ("RESTORE", "k2", 0, "good", "REPLACE", "ABSTTL", "IDLETIME", 100),
    ("RESTORE", "k3", 0, "good", "FREQ", 10),
    ("RESTORE", "k", "x", "good"),                            # BUSYKEY comes before the TTL
    ("RESTORE", "k", 0, "good", "FREQ", 300),                 # the options before BUSYKEY
    ("RESTORE", "k"),
    ("RESTORE-ASKING", "k4", 0, "good"),
    ("RESTORE-ASKING", "k4", 0, "good"),
    ("DUMP", "nosuchkey"),
    ("DUMP",),
    ("DUMP", "a", "b"),
    ("XRANGE", "k", "-", "+"),
    ("XRANGE", "k2", "-", "+"),
    ("XRANGE", "k4", "-", "+"),
    ("EXISTS", "k", "k2", "k3", "k4"),
]


def test_replies_and_errors_match_redis(pair):
    b, r = pair
    payloads = _payloads(r)
    b.call("XADD", "src", "1-1", "f", "v")
    assert b.call("CONFIG", "SET", "dump-rdb-version", "10") == b"OK"
    assert b.call("DUMP", "src") == payloads["good"]  # Braid's DUMP for a 7.0 is 7.0's, byte for byte
    assert b.call("CONFIG", "SET", "dump-rdb-version", "15") == b"OK"
    for cmd in DIFFERENTIAL:
        argv = [payloads.get(a, a) if isinstance(a, str) else a for a in cmd]
        assert b.call(*argv) == r.call(*argv), cmd


def test_braid_own_restore_errors(braid):
    string_payload = b"\x00\x05hello" + b"\x0a\x00"
    string_payload += rdb.crc64(string_payload).to_bytes(8, "little")
    with pytest.raises(Exception, match="Bad data format: the payload holds a string; Braid keys hold only"):
        braid.restore("k", 0, string_payload)
    braid.xadd("src", {"f": "v"}, id="1-1")
    good = braid.dump("src")
    with pytest.raises(Exception, match="Braid keys do not expire"):
        braid.restore("k", 1000, good)
    with pytest.raises(Exception, match="Braid keys do not expire"):
        braid.restore("k", 4_000_000_000_000, good, absttl=True)
    assert braid.exists("k") == 0
    assert braid.restore("k", 0, good, absttl=True) == b"OK"


def test_damaged_payloads_are_refused_and_the_server_keeps_serving(braid):
    for i in range(1, 40):
        braid.xadd("src", {"f": str(i), "g": "x" * i}, id=f"{i}-0")
    braid.xgroup_create("src", "g", id="0")
    braid.xreadgroup("g", "c", {"src": ">"}, count=5)
    good = braid.dump("src")
    body = good[:-8]
    # every truncation of the value, with a footer recomputed so the value itself is what fails
    for n in range(len(body) - 10):
        cut = body[:n] + body[-2:]
        payload = cut + rdb.crc64(cut).to_bytes(8, "little")
        with pytest.raises(Exception, match="^Bad data format$"):
            braid.restore("dst", 0, payload)
    rng = random.Random(15)
    for _ in range(200):
        bad = bytearray(body)
        bad[rng.randrange(len(bad) - 2)] ^= 1 << rng.randrange(8)
        for payload in (bytes(bad) + good[-8:], bytes(bad) + rdb.crc64(bytes(bad)).to_bytes(8, "little")):
            try:
                braid.restore("dst", 0, payload, replace=True)
            except Exception as e:
                assert str(e).startswith(("DUMP payload version or checksum are wrong", "Bad data format")), e
    assert braid.xrange("src") and braid.ping()


def test_command_info_and_docs():
    r = OneRegion()
    for name, head, cats in [
        ("dump", [b"dump", 2, [b"readonly"], 1, 1, 1], ["@keyspace", "@read", "@slow"]),
        ("restore", [b"restore", -4, [b"write", b"denyoom"], 1, 1, 1],
         ["@keyspace", "@write", "@slow", "@dangerous"]),
        ("restore-asking", [b"restore-asking", -4, [b"write", b"denyoom", b"asking"], 1, 1, 1],
         ["@keyspace", "@write", "@slow", "@dangerous"]),
    ]:
        info = r("COMMAND", "INFO", name)[0]
        assert info[:6] == head, name
        assert info[6] == cats, name
    assert r("COMMAND", "DOCS", "restore")[b"restore"][b"since"] == b"2.6.0"
    assert r("COMMAND", "GETKEYS", "RESTORE", "k", "0", "payload", "REPLACE") == [b"k"]


def test_dump_rdb_version_setting():
    r = OneRegion()
    r("XADD", "s", "1-1", "f", "v")
    assert r("CONFIG", "GET", "dump-rdb-version") == {b"dump-rdb-version": b"15"}  # Redis 8.10's
    for version, kind in [(15, 27), (14, 27), (13, 26), (12, 21), (11, 21), (10, 19), (9, 15)]:
        assert r("CONFIG", "SET", "dump-rdb-version", version) == "OK"
        p = r("DUMP", "s")
        assert (p[0], int.from_bytes(p[-10:-8], "little")) == (kind, version)
        assert r("RESTORE", "copy", 0, p, "REPLACE") == "OK"
        assert r("XRANGE", "copy", "-", "+") == [[b"1-1", [b"f", b"v"]]]
    assert isinstance(r("CONFIG", "SET", "dump-rdb-version", 16), ReplyError)
    assert isinstance(r("CONFIG", "SET", "dump-rdb-version", 8), ReplyError)


# ---------------------------------------------------------------- Active-Active
def test_active_active_restore_resolves_like_copy():
    regions = [ActiveRegion(n) for n in (1, 2, 3)]
    r1, r2, r3 = regions
    for r in regions:
        r.clock = 1000
    r1.call(b"XADD", b"d", b"*", b"f", b"old")               # what the key held
    sync(r1, r2, r3)
    payload = rdb.load_payload(REDIS86_PAYLOAD_RAW)
    busy = r1.call(b"RESTORE", b"d", b"0", REDIS86_PAYLOAD_RAW, check=False)
    assert busy.message == "BUSYKEY Target key name already exists."
    vv = dict(r1.causal.vv)
    assert r1.call(b"RESTORE", b"d", b"0", REDIS86_PAYLOAD_RAW, b"REPLACE") == "OK"
    d = r1.keys[b"d"]
    assert list(d.logs) == [1 + STRIDE * (vv[1] + 2)]         # a log of its own, after the removal
    sync(r1, r2, r3)
    expected = [[b"%d-%d" % i, f] for i, f in payload.range(MIN_ID, MAX_ID)]
    for r in regions:
        assert r.call(b"XRANGE", b"d", b"-", b"+") == expected, r.number
        assert sorted(r.keys[b"d"].groups) == [b"empty", b"g"]
        assert r.keys[b"d"].idmp.duration == 300
    # consumers and PEL at the issuing region only
    assert sorted(r1.keys[b"d"].groups[b"g"].consumers) == [b"alice", b"bob"]
    assert not r2.keys[b"d"].groups[b"g"].consumers
    assert r1.snapshot() == r2.snapshot() == r3.snapshot()
    # entries from two regions' logs DUMP as one Redis stream, merged by ID
    r2.call(b"XADD", b"d", b"*", b"f", b"from-2")
    sync(r1, r2, r3)
    assert len(r1.keys[b"d"].logs) == 2
    dumped = rdb.load_payload(r1.call(b"DUMP", b"d"))
    assert [[b"%d-%d" % i, f] for i, f in dumped.range(MIN_ID, MAX_ID)] == r1.call(b"XRANGE", b"d", b"-", b"+")


# ---------------------------------------------------------------- the append-only file
@pytest.mark.parametrize("number", [None, 1], ids=["one-region", "active-active"])
def test_a_restore_replays_exactly(tmp_path, number):
    r = LoggedRegion(str(tmp_path / "r"), number)
    assert r("RESTORE", "s", 0, REDIS86_PAYLOAD) == "OK"
    r("XADD", "s", "*", "f", "after")
    assert r("RESTORE", "s", 0, REDIS86_PAYLOAD_RAW, "REPLACE") == "OK"
    r("XADD", "s", "*", "f", "after again")
    state = r.state()
    before = _state(r.server.core.db.keys[b"s"])
    r.close()
    again = LoggedRegion(r.directory, number)
    assert again.state() == state
    assert _state(again.server.core.db.keys[b"s"]) == before
    assert again.server.core.loading_report[0].differences == 0
