"""RDB files in and out: the file reader and writer, ``braid import`` and ``braid export``.

Real files from Debian's redis-server 7.0 (every value type, big and small encodings,
streams with groups, PELs and consumers) and one recorded from Redis 8.6.3 (hashes with
field TTLs, IDMP streams, a function library) are read key by key, each value checked
against the bytes DUMP gives for it; older and rarer encodings, and the files of Redis
8.8 and 8.10 (RDB 14 and 15: NACK zones, arrays, hash templates and compact hashes), are
built byte by byte; corrupt files give RdbFileError with an offset, never another
exception.  The commands run against real servers: a redis-server 7.0 and a Braid region.
"""

from __future__ import annotations

import argparse
import os
import struct
import time

import pytest
import redis

from node.interop import rdb, rdbfile
from node.interop.listpack import listpack_encode
from node.interop.rdb import crc64
from node.interop.rdbfile import RdbFileError, RdbFileReader, RdbFileWriter, restore_payload, split_dump_payload
from node.testing import BraidProcess, InProcessServer, LocalCluster, RedisProcess, free_port, wait_until
from node.tools import cli
from node.tools import import_export as cli_rdb
from tests.differential import normalise

pytestmark = pytest.mark.redis

# SAVE of a Redis 8.6.3 (set/zset/hash-max-listpack-entries 2, list-max-listpack-size 2, so the
# big encodings appear with few elements): a string with a TTL, a quicklist, listpack / intset /
# plain sets, listpack and skiplist zsets (an infinite score), listpack and table hashes, hashes
# with a field TTL in both encodings, IDMP streams (one with a group, a PEL and a consumer, one
# with a compressed name), a function library, a stream in database 1.
REDIS_8_6_FILE = bytes.fromhex(
    "524544495330303133fa0972656469732d76657205382e362e33fa0a72656469732d62697473c040fa056374696d65c21988046bfa087573"
    "65642d6d656dc220fd1000fa08616f662d62617365c000f5404723216c7561206e616d653d6d796c69620a72656469732e72656769737465"
    "725f66756e6374696f6e28276631272c2066756e6374696f6e28292072657475726e203120656e6429fe00fb0e0104076269676861736803"
    "0162c0020161c0010163c00311067a7365746c700c0c00000002008161020101ff14057365746c700d0d0000000200816102816202ff1ac3"
    "091e016b6be01100016b6b0110000001a209b3a45300000000000000001d1d0000000a000101000101018166020001020100010001817602"
    "0401ff0181000001a209b3a4530081000001a209b3a45300000001004064406400000005076269677a736574030163000000000000f07f01"
    "6200000000000000400161000000000000f03ffc4888bf5da401000000037374720568656c6c6f12046c69737403020d0d00000002008161"
    "02816202ff020d0d0000000200816302816402ff020a0a0000000100816502ff1a0673747265616d0110000001a209b3a44f000000000000"
    "00002d2d00000011000201000101018166020001020100010001817602040100010001010101018167028177020601ff0281000001a209b3"
    "a44f0181000001a209b3a44f00000002010367727081000001a209b3a44f000101000001a209b3a44f000000000000000053a4b309a20100"
    "00010105616c69636553a4b309a201000053a4b309a201000001000001a209b3a44f000000000000000040644064010470726f6401056969"
    "642d3181000001a209b3a44f000100000c657870697265642d736f6f6e01780206626967736574030162016101630b06696e747365740e02"
    "000000030000000100020003001006686173686c700d0d0000000200816602817602ff18076866652d6269674f88bf5da401000003010162"
    "c002000161c001000163c00319066866652d6c704d88bf5da401000017170000000300816602817602f44d88bf5da401000009fffe01fb01"
    "001a0a6462312d73747265616d0110000001a209b3a45400000000000000001d1d0000000a00010100010101816102000102010001000181"
    "62020401ff0181000001a209b3a4540081000001a209b3a454000000010040644064000000ffcf89b9ad788734e7"
)
# (db, key, type, length of the value) of every key in that file, in file order
REDIS_8_6_KEYS = [
    (0, b"bighash", 4, 13), (0, b"zsetlp", 17, 13), (0, b"setlp", 20, 14), (0, b"k" * 30, 26, 80),
    (0, b"bigzset", 5, 31), (0, b"str", 0, 6), (0, b"list", 18, 43), (0, b"stream", 26, 199),
    (0, b"expired-soon", 0, 2), (0, b"bigset", 2, 7), (0, b"intset", 11, 15), (0, b"hashlp", 16, 14),
    (0, b"hfe-big", 24, 24), (0, b"hfe-lp", 25, 32), (1, b"db1-stream", 26, 80),
]
# that Redis's DUMP of "stream"
REDIS_8_6_STREAM_DUMP = bytes.fromhex(
    "1a0110000001a209b3a44f00000000000000002d2d00000011000201000101018166020001020100010001817602040100010001"
    "010101018167028177020601ff0281000001a209b3a44f0181000001a209b3a44f00000002010367727081000001a209b3a44f00"
    "0101000001a209b3a44f000000000000000053a4b309a2010000010105616c69636553a4b309a201000053a4b309a20100000100"
    "0001a209b3a44f000000000000000040644064010470726f6401056969642d3181000001a209b3a44f0001000d00a25f74926c92"
    "79eb")


def L(n: int) -> bytes:
    """An RDB length."""
    w = rdb.Writer()
    w.length(n)
    return w.getvalue()


def S(s: bytes) -> bytes:
    """A raw RDB string (never integer-encoded)."""
    return L(len(s)) + s


def rdb_bytes(body: bytes, version: int = 13) -> bytes:
    """A whole file around ``body``: header, body, EOF and the checksum."""
    data = b"REDIS%04d" % version + body + b"\xff"
    return data + (struct.pack("<Q", crc64(data)) if version >= 5 else b"")


def read_all(data: bytes) -> tuple[RdbFileReader, list[rdbfile.RdbKey]]:
    reader = RdbFileReader(data)
    return reader, list(reader.keys())


@pytest.fixture(scope="module")
def redis_file(tmp_path_factory):
    """A redis-server 7.0 holding every type in small and big encodings, and its SAVEd file."""
    with RedisProcess() as p:
        c = p.client()
        c.config_set("hash-max-listpack-entries", 4)
        c.config_set("zset-max-listpack-entries", 4)
        c.config_set("set-max-intset-entries", 4)
        c.config_set("list-max-listpack-size", 4)
        c.set("str", "hello")
        c.set("int", 12345)
        c.set("neg", -70000)
        c.set("long", "x" * 300)  # LZF-compressed
        c.set("ttl", "v", px=10 ** 9)
        c.rpush("list", *range(3))
        c.rpush("biglist", *[f"e{i}" * 20 for i in range(20)])
        c.sadd("intset", 1, 2, 3)
        c.sadd("set", *[f"m{i}" for i in range(10)])
        c.zadd("zset", {"a": 1, "b": 2.5})
        c.zadd("bigzset", {f"m{i}": i / 3 for i in range(10)} | {"inf": float("inf")})
        c.hset("hash", mapping={"f": "v"})
        c.hset("bighash", mapping={f"f{i}": "v" * 70 for i in range(10)})
        c.xadd("s1", {"a": "1"}, id="1-1")
        c.xadd("s1", {"b": "2", "c": "3"}, id="2-1")
        c.xadd("s1", {"a": "4"}, id="3-0")
        c.xdel("s1", "2-1")
        c.xgroup_create("s1", "g1", id="0")
        c.xgroup_create("s1", "g2", id="$")
        c.xreadgroup("g1", "alice", {"s1": ">"}, count=1)
        c.xreadgroup("g1", "bob", {"s1": ">"})
        c.xgroup_createconsumer("s1", "g1", "carol")
        c.xadd("big-stream", {"payload": "p" * 100}, id="5-0")
        for i in range(250):  # several listpack nodes
            c.xadd("big-stream", {"n": i, "text": f"entry {i}"})
        c.xadd("k" * 40, {"k": "v" * 50})  # an LZF-compressed key name
        c.xadd("empty-stream", {"x": "y"}, id="1-0")
        c.xdel("empty-stream", "1-0")
        c.execute_command("SELECT", 1)
        c.xadd("s-db1", {"x": "y"})
        c.set("str-db1", "z")
        c.execute_command("SELECT", 0)
        c.save()
        dumps = {}
        for db in (0, 1):
            c.execute_command("SELECT", db)
            dumps.update({(db, k): c.dump(k) for k in c.keys()})
        c.execute_command("SELECT", 0)
        expire = c.pexpiretime("ttl")
        with open(os.path.join(p.data_dir, "dump.rdb"), "rb") as f:
            data = f.read()
        yield data, dumps, expire, p


def test_reads_every_key_of_a_redis_7_0_file_as_dump_encodes_it(redis_file):
    data, dumps, expire, _ = redis_file
    reader, keys = read_all(data)
    assert reader.version == 10 and reader.aux[b"redis-ver"] == b"7.0.15"
    assert reader.checksum is True and reader.trailing == 0
    assert {(k.db, k.key) for k in keys} == set(dumps)
    for k in keys:  # the value ends exactly where DUMP's does: every skip is right
        rdb_type, value, version = split_dump_payload(dumps[(k.db, k.key)])
        assert (k.rdb_type, k.value, version) == (rdb_type, value, 10), k.key
    by_key = {k.key: k for k in keys}
    assert by_key[b"ttl"].expire_ms == expire
    assert {k.expire_ms for k in keys if k.key != b"ttl"} == {None}
    types = {k.key: k.type_name for k in keys}
    assert types[b"bighash"] == "hash" and types[b"s1"] == "stream" and types[b"intset"] == "set"
    assert {by_key[k].rdb_type for k in (b"hash", b"bighash", b"zset", b"bigzset", b"set", b"intset")} \
        == {rdb.RDB_TYPE_HASH_LISTPACK, rdb.RDB_TYPE_HASH, rdb.RDB_TYPE_ZSET_LISTPACK, rdb.RDB_TYPE_ZSET_2,
            rdb.RDB_TYPE_SET, rdb.RDB_TYPE_SET_INTSET}


def test_reads_a_redis_8_6_file():
    reader, keys = read_all(REDIS_8_6_FILE)
    assert reader.version == 13 and reader.aux[b"redis-ver"] == b"8.6.3" and reader.checksum is True
    assert reader.functions == 1
    assert [(k.db, k.key, k.rdb_type, len(k.value)) for k in keys] == REDIS_8_6_KEYS
    stream = next(k for k in keys if k.key == b"stream")
    assert (stream.rdb_type, stream.value, 13) == split_dump_payload(REDIS_8_6_STREAM_DUMP)
    assert restore_payload(stream.rdb_type, stream.value, 13) == REDIS_8_6_STREAM_DUMP
    assert next(k for k in keys if k.key == b"str").expire_ms == 1805459097672


def _module_id(name: str, version: int) -> int:
    charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    n = 0
    for ch in name:
        n = (n << 6) | charset.index(ch)
    return (n << 10) | version


MODULE_VALUE = (L(1) + L(7) + L(2) + L(5) + L(3) + b"\x00" * 4 + L(4) + b"\x00" * 8 + L(5) + S(b"module data")
                + L(0))  # SINT, UINT, FLOAT, DOUBLE, STRING, EOF
LZF_KEY = b"\xc3" + L(6) + L(9) + b"\x02abc\x80\x02"  # "abcabcabc": a literal run and a back reference
STREAM_CORE = L(1) + S(b"\x00" * 16) + S(b"listpack bytes") + L(2) + L(5) + L(1)  # nodes, length, last ID


def _stream_value(rdb_type: int) -> bytes:
    v2 = rdb_type != rdb.RDB_TYPE_STREAM_LISTPACKS
    value = STREAM_CORE + (L(1) + L(0) + L(3) + L(0) + L(2) if v2 else b"")  # first, max deleted, added
    value += L(1) + S(b"group") + L(5) + L(1) + (L(2) if v2 else b"")  # one group, its last ID, entries read
    value += L(1) + b"\x01" * 16 + b"\x02" * 8 + L(3)  # its PEL: one entry
    value += L(1) + S(b"consumer") + b"\x03" * (16 if rdb_type >= rdb.RDB_TYPE_STREAM_LISTPACKS_3 else 8)
    value += L(1) + b"\x01" * 16
    if rdb_type >= rdb.RDB_TYPE_STREAM_LISTPACKS_5:
        value += L(2) + b"\x04" * 16 + b"\x05" * 16  # the NACK zone: two released IDs
    if rdb_type >= rdb.RDB_TYPE_STREAM_LISTPACKS_4:
        value += L(100) + L(200) + L(1) + S(b"producer") + L(2) + S(b"iid-1") + L(5) + L(0) + S(b"iid-2") + L(5) \
            + L(1) + L(2) + L(0)
    return value


# (type, value) for every encoding a Redis has written; each is followed by a sentinel key in the file
SYNTHETIC_VALUES = [
    (rdb.RDB_TYPE_STRING, b"\xc0\x05"), (rdb.RDB_TYPE_STRING, b"\xc1\x00\x80"),
    (rdb.RDB_TYPE_STRING, b"\xc2\x00\x00\x00\x80"), (rdb.RDB_TYPE_STRING, LZF_KEY),
    (rdb.RDB_TYPE_LIST, L(2) + S(b"a") + S(b"b")), (rdb.RDB_TYPE_SET, L(1) + b"\xc0\x05"),
    (rdb.RDB_TYPE_ZSET, L(3) + S(b"m1") + b"\x031.5" + S(b"m2") + b"\xfe" + S(b"m3") + b"\xfd"),
    (rdb.RDB_TYPE_HASH, L(1) + S(b"f") + S(b"v")), (rdb.RDB_TYPE_ZSET_2, L(1) + S(b"m") + struct.pack("<d", 2.5)),
    (rdb.RDB_TYPE_MODULE_2, L(_module_id("mymodtype", 3)) + MODULE_VALUE),
    *[(t, S(b"a ziplist, listpack, intset or zipmap")) for t in (
        rdb.RDB_TYPE_HASH_ZIPMAP, rdb.RDB_TYPE_LIST_ZIPLIST, rdb.RDB_TYPE_SET_INTSET, rdb.RDB_TYPE_ZSET_ZIPLIST,
        rdb.RDB_TYPE_HASH_ZIPLIST, rdb.RDB_TYPE_HASH_LISTPACK, rdb.RDB_TYPE_ZSET_LISTPACK, rdb.RDB_TYPE_SET_LISTPACK,
        rdb.RDB_TYPE_HASH_LISTPACK_EX_PRE_GA)],
    (rdb.RDB_TYPE_LIST_QUICKLIST, L(2) + S(b"ziplist 1") + S(b"ziplist 2")),
    (rdb.RDB_TYPE_LIST_QUICKLIST_2, L(2) + L(2) + S(b"listpack") + L(1) + S(b"a plain node")),
    (rdb.RDB_TYPE_HASH_METADATA_PRE_GA, L(1) + L(1700000000000) + S(b"f") + S(b"v")),
    (rdb.RDB_TYPE_HASH_METADATA, b"\x00" * 8 + L(2) + L(0) + S(b"f") + S(b"v") + L(5) + S(b"g") + S(b"w")),
    (rdb.RDB_TYPE_HASH_LISTPACK_EX, b"\x00" * 8 + S(b"listpack")),
    *[(t, _stream_value(t)) for t in rdb.STREAM_TYPES],
]

# Redis 8.8 (RDB 14): arrays.  Count, insert-index flag (and index), then index, tag, value per element.
ARRAY_VALUES = [
    L(4) + L(1) + L(49) + L(0) + L(0) + S(b"a string longer than seven bytes") + L(3) + L(3) + S(b"short")
    + L(49) + L(1) + struct.pack("<q", -5) + L(1 << 40) + L(2) + struct.pack("<d", 2.5),
    L(1) + L(0) + L(7) + L(1) + struct.pack("<q", 1 << 62),  # no insert index
]
# Redis 8.10 (RDB 15): two hash templates, defined before the keys that name them
TEMPLATES = (bytes([rdbfile.RDB_OPCODE_HASH_TEMPLATE]) + L(0) + L(2) + S(b"field1") + S(b"field2")
             + bytes([rdbfile.RDB_OPCODE_HASH_TEMPLATE]) + L(5) + L(3) + S(b"a") + S(b"bb") + S(b"ccc"))
# the field names "field1", "field2" as one listpack, and a values listpack (template id 0, then 1 and 2), as
# Redis 8.10's hash-template tests spell them out
FIELDS_LP = b"\x17\x17\x00\x00\x00\x02\x00\x86field1\x07\x86field2\x07\xff"
VALUES_LP = b"\x0d\x0d\x00\x00\x00\x03\x00\x00\x01\x01\x01\x02\x01\xff"
COMPACT_HASH_VALUES = [
    (rdb.RDB_TYPE_HASH_TMPL_LP_REF, VALUES_LP),
    (rdb.RDB_TYPE_HASH_TMPL_LP_REF, S(listpack_encode([5, b"x", b"y", b"z" * 100]))),
    (rdb.RDB_TYPE_HASH_TMPL_ARRAY_REF, L(0) + b"\xc0\x01" + S(b"v" * 70)),
    (rdb.RDB_TYPE_HASH_TMPL_ARRAY_REF, L(5) + S(b"1") + S(b"2") + LZF_KEY),
    (rdb.RDB_TYPE_HASH_TMPL_LP, L(0) + FIELDS_LP + VALUES_LP),  # the field names as one listpack
    (rdb.RDB_TYPE_HASH_TMPL_LP, L(1) + L(2) + S(b"field1") + S(b"field2") + VALUES_LP),  # one string each
    (rdb.RDB_TYPE_HASH_TMPL_ARRAY, L(1) + L(2) + S(b"field1") + S(b"field2") + b"\xc0\x01\xc0\x02"),
    (rdb.RDB_TYPE_HASH_TMPL_ARRAY, L(0) + S(listpack_encode([b"f1", b"f2", b"f3"])) + S(b"x" * 70) + S(b"")
     + b"\xc0\x05"),
]
SYNTHETIC_VALUES += [(rdb.RDB_TYPE_ARRAY, v) for v in ARRAY_VALUES] + COMPACT_HASH_VALUES


def test_skips_every_encoding_and_opcode_exactly():
    body = (bytes([rdb.RDB_OPCODE_AUX]) + S(b"redis-ver") + S(b"9.9.9")
            + bytes([rdb.RDB_OPCODE_AUX]) + S(b"ctime") + b"\xc2\x00\x00\x00\x60"  # an int-encoded AUX value
            + bytes([rdb.RDB_OPCODE_MODULE_AUX]) + L(_module_id("auxmodule", 1)) + L(2) + L(2) + MODULE_VALUE
            + bytes([rdb.RDB_OPCODE_FUNCTION2]) + S(b"#!lua name=lib\n...")
            + bytes([rdb.RDB_OPCODE_SELECTDB]) + L(0) + bytes([rdb.RDB_OPCODE_RESIZEDB]) + L(40) + L(1)
            + bytes([rdb.RDB_OPCODE_SLOT_INFO]) + L(5) + L(40) + L(1) + TEMPLATES)
    expected = []
    for n, (rdb_type, value) in enumerate(SYNTHETIC_VALUES):
        key = LZF_KEY if n == 3 else S(b"key-%d" % n)
        body += bytes([rdb.RDB_OPCODE_IDLE]) + L(1000) if n % 3 == 0 else bytes([rdb.RDB_OPCODE_FREQ, 7])
        body += bytes([rdb_type]) + key + value + bytes([rdb.RDB_TYPE_STRING]) + S(b"after-%d" % n) + S(b"ok")
        expected += [(b"abcabcabc" if n == 3 else b"key-%d" % n, rdb_type, value), (b"after-%d" % n, 0, S(b"ok"))]
    body += bytes([rdb.RDB_OPCODE_SELECTDB]) + L(3)
    body += bytes([rdb.RDB_OPCODE_EXPIRETIME]) + struct.pack("<i", 1700000000) + bytes([rdb.RDB_TYPE_STRING]) \
        + S(b"secs") + S(b"1")
    body += bytes([rdb.RDB_OPCODE_EXPIRETIME_MS]) + struct.pack("<q", 1700000000123)
    body += bytes([rdb.RDB_OPCODE_KEY_META]) + L(2) + b"cls1" + MODULE_VALUE + b"cls2" + L(0)  # two metadata classes
    stream = _stream_value(rdb.RDB_TYPE_STREAM_LISTPACKS_4)
    body += bytes([rdb.RDB_TYPE_STREAM_LISTPACKS_4]) + S(b"with-meta") + stream
    reader, keys = read_all(rdb_bytes(body, 15))
    assert [(k.key, k.rdb_type, k.value) for k in keys[:-2]] == expected
    assert {k.db for k in keys[:-2]} == {0} and {k.expire_ms for k in keys[:-2]} == {None}
    secs, meta = keys[-2:]
    assert (secs.db, secs.key, secs.expire_ms, secs.metadata) == (3, b"secs", 1700000000000, False)
    assert (meta.db, meta.key, meta.expire_ms, meta.metadata, meta.value) == (3, b"with-meta", 1700000000123, True,
                                                                             stream)
    assert reader.aux == {b"redis-ver": b"9.9.9", b"ctime": str(0x60000000).encode()}
    assert reader.functions == 1 and reader.module_aux == ["auxmodule"] and reader.templates == {0: 2, 5: 3}
    assert {k.type_name for k in keys if k.rdb_type >= rdb.RDB_TYPE_ARRAY} == {"array", "hash"}
    assert next(k for k in keys if k.rdb_type == rdb.RDB_TYPE_MODULE_2).module_name == "mymodtype"
    assert meta.offset == body.index(bytes([rdb.RDB_OPCODE_EXPIRETIME_MS])) + 9


def test_files_without_a_checksum_and_with_a_tail():
    body = bytes([rdb.RDB_TYPE_STRING]) + S(b"k") + S(b"v")
    reader, keys = read_all(b"REDIS0004" + body + b"\xff" + b"tail")  # before RDB 5: no checksum
    assert [k.key for k in keys] == [b"k"] and reader.checksum is False and reader.trailing == 4
    reader, keys = read_all(b"REDIS0009" + body + b"\xff" + b"\x00" * 8)  # rdbchecksum no
    assert [k.key for k in keys] == [b"k"] and reader.checksum is False
    reader, keys = read_all(rdb_bytes(body, 9) + b"*1\r\n$4\r\nPING\r\n")  # an AOF tail after an RDB preamble
    assert reader.checksum is True and reader.trailing == 14


@pytest.mark.parametrize("data, offset, reason", [
    (b"", 0, "not an RDB file"),
    (b"REDIX0009\xff", 0, "not an RDB file"),
    (b"REDIS00a9\xff", 5, "bad version"),
    (b"REDIS0016\xff", 5, "RDB version 16 is not supported (1 to 15: files written by Redis up to 8.10)"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_MODULE_PRE_GA]) + S(b"old-mod") + L(1)), 9, "key 'old-mod' holds a module value"),
    (rdb_bytes(bytes([rdb.RDB_OPCODE_FUNCTION_PRE_GA]) + S(b"x")), 9, "release candidates"),
    (rdb_bytes(bytes([200]) + S(b"x")), 9, "unknown opcode or value type 200"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_STRING]) + S(b"k") + b"\xc4"), 12, "bad value of key 'k' (string): unknown string "
                                                                 "encoding 4"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_LIST_QUICKLIST_2]) + S(b"q") + L(1) + L(3) + S(b"x")), 13,
     "quicklist node container"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_SET]) + S(b"s") + b"\xc0"), 12, "an encoded string where a length belongs"),
    (rdb_bytes(bytes([rdb.RDB_OPCODE_SELECTDB]) + b"\x82"), 10, "unknown length encoding 0x82"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_MODULE_2]) + S(b"m") + L(5) + L(9)), 13, "unknown module value opcode 9"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_STRING]) + b"\xc3" + L(3) + L(9) + b"\x05ab" + S(b"v")), 10,
     "cannot read a key name: LZF-compressed string: LZF literal run"),
    (rdb_bytes(bytes([rdb.RDB_OPCODE_AUX]) + S(b"k") + b"\xc3" + L(2) + L(9) + b"\x20\x00"), 12, "before the start"),
    (rdb_bytes(bytes([rdb.RDB_OPCODE_AUX]) + S(b"k") + b"\xc3" + L(3) + L(9) + b"\x01ab"), 12,
     "shorter than its stated length"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_STRING]) + S(b"k") + S(b"v"))[:-1], 15, "ends before its checksum"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_STRING]) + S(b"k") + S(b"v"))[:-8] + b"\x01" * 8, 15, "checksum mismatch"),
    (b"REDIS0009" + bytes([rdb.RDB_TYPE_HASH]) + S(b"h") + L(2) + S(b"f"), 15,
     "truncated in the value of key 'h' (hash)"),
])
def test_refuses_what_cannot_be_read(data, offset, reason):
    with pytest.raises(RdbFileError) as e:
        read_all(data)
    assert e.value.offset == offset and reason in e.value.reason, str(e.value)


STREAM_5 = _stream_value(rdb.RDB_TYPE_STREAM_LISTPACKS_5)
NACK_ZONE = STREAM_5.index(L(2) + b"\x04" * 16)


def _v15(body: bytes) -> bytes:
    return rdb_bytes(TEMPLATES + body, 15)  # the templates take 29 bytes: the body starts at offset 38


@pytest.mark.parametrize("data, offset, reason", [
    (rdb_bytes(bytes([rdbfile.RDB_TYPE_GCRA]) + S(b"limiter") + L(1), 15), 9,
     "key 'limiter' holds a GCRA rate limiter (type 33, written only by Redis Enterprise builds)"),
    (rdb_bytes(bytes([34]) + S(b"k") + L(1), 15), 9, "unknown opcode or value type 34"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_ARRAY]) + S(b"arr") + L(1) + L(2) + L(0), 14), 15,
     "bad value of key 'arr' (array): array insert-index flag 2 (0 or 1)"),
    (rdb_bytes(bytes([rdb.RDB_TYPE_ARRAY]) + S(b"arr") + L(1) + L(0) + L(3) + L(7) + L(0), 14), 17,
     "unknown array element tag 7"),
    (b"REDIS0014" + bytes([rdb.RDB_TYPE_ARRAY]) + S(b"arr") + L(2) + L(0) + L(3) + L(1) + b"\x00" * 7, 18,
     "truncated in the value of key 'arr' (array): 8 bytes needed, the file ends 1 bytes short"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_ARRAY_REF]) + S(b"h") + L(9) + S(b"v")), 41,
     "bad value of key 'h' (hash): a compact hash of hash template 9, which the file does not define before it"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_LP_REF]) + S(b"h") + S(listpack_encode([7, b"v"]))), 41,
     "bad value of key 'h' (hash): a compact hash of hash template 7, which the file does not define before it"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_LP_REF]) + S(b"h") + S(listpack_encode([5, b"v"]))), 41,
     "values listpack of 2 elements for 3 fields and the template id"),
    # two DUMP payloads Redis 8.10's tests show RESTORE refusing: one value too few, an id that is a string
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_LP]) + S(b"h") + L(0) + FIELDS_LP
          + b"\x0b\x0b\x00\x00\x00\x02\x00\x00\x01\x01\x01\xff"), 66,
     "values listpack of 2 elements for 2 fields and the template id"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_LP]) + S(b"h") + L(0) + FIELDS_LP
          + b"\x0e\x0e\x00\x00\x00\x03\x00\x81\x78\x02\x01\x01\x02\x01\xff"), 66,
     "values listpack that does not open with a template id"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_LP_REF]) + S(b"h") + S(b"\x20\x00\x00\x00\x01\x00\x00\x01\xff")), 41,
     "values listpack whose header disagrees with its length"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_ARRAY_REF]) + S(b"h") + L(5) + S(b"1") + S(b"2"))[:-9], 46,
     "truncated in the value of key 'h' (hash)"),  # template 5 has three fields
    (_v15(bytes([rdbfile.RDB_OPCODE_HASH_TEMPLATE]) + L(0) + L(1) + S(b"x")), 38,
     "cannot read a hash template: hash template 0 is defined twice"),
    (_v15(bytes([rdbfile.RDB_OPCODE_HASH_TEMPLATE]) + L(1) + L(0)), 40, "hash template 1 has no fields"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_LP]) + S(b"h") + L(2) + VALUES_LP), 41,
     "unknown hash template field format 2"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_ARRAY]) + S(b"h") + L(1) + L(0)), 42, "a compact hash with no fields"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_ARRAY]) + S(b"h") + L(0) + FIELDS_LP[:-1] + b"\x00" + S(b"1") + S(b"2")),
     42, "the field names' listpack: listpack without its terminator"),
    (_v15(bytes([rdb.RDB_TYPE_HASH_TMPL_ARRAY]) + S(b"h") + L(0) + S(listpack_encode([b"f1", b"f2"]))
          + S(b"only one value"))[:-9], 73, "truncated in the value of key 'h' (hash)"),
    (b"REDIS0014" + bytes([rdb.RDB_TYPE_STREAM_LISTPACKS_5]) + S(b"s") + STREAM_5[:NACK_ZONE] + L(2) + b"\x04" * 20,
     12 + NACK_ZONE + 1 + 16, "truncated in the value of key 's' (stream): 16 bytes needed, the file ends 12 bytes "
                               "short"),  # the NACK zone's second ID
])
def test_refuses_what_cannot_be_read_in_redis_8_8_and_8_10_files(data, offset, reason):
    with pytest.raises(RdbFileError) as e:
        read_all(data)
    assert e.value.offset == offset and reason in e.value.reason, str(e.value)


def test_every_truncation_and_flipped_byte_is_a_clean_error():
    for n in range(len(REDIS_8_6_FILE)):  # RdbFileError, never another exception, never a hang
        with pytest.raises(RdbFileError):
            read_all(REDIS_8_6_FILE[:n])
    for n in range(9, len(REDIS_8_6_FILE)):
        flipped = bytearray(REDIS_8_6_FILE)
        flipped[n] ^= 0xFF
        with pytest.raises(RdbFileError):
            read_all(bytes(flipped))


def test_a_written_file_loads_in_redis_7_0(redis_file, tmp_path):
    data, dumps, _, _ = redis_file
    _, keys = read_all(data)
    streams = [k for k in keys if k.rdb_type in rdb.STREAM_TYPES and k.db == 0]
    with open(tmp_path / "dump.rdb", "wb") as out:
        writer = RdbFileWriter(out, 10)
        writer.begin({"redis-ver": "7.0.15", "redis-bits": 64})
        writer.select_db(0, len(streams))
        for k in streams:
            writer.key(k.key, k.rdb_type, k.value)
        writer.key(b"expiring", streams[0].rdb_type, streams[0].value, expire_ms=int(time.time() * 1000) + 10 ** 9)
        writer.end()
    reader, again = read_all((tmp_path / "dump.rdb").read_bytes())
    assert reader.checksum is True and len(again) == len(streams) + 1
    with RedisProcess(data_dir=str(tmp_path)) as p:
        c = p.client()
        assert sorted(c.keys()) == sorted([k.key for k in streams] + [b"expiring"])
        for k in streams:
            assert split_dump_payload(c.dump(k.key))[1] == k.value
        assert c.pttl("expiring") > 0


def test_writer_refuses_unknown_versions_and_maps_stream_types():
    with pytest.raises(ValueError):
        RdbFileWriter(None, 16)
    assert [rdbfile.stream_type_for(v) for v in (9, 10, 11, 12, 13, 14, 15)] == [15, 19, 21, 21, 26, 27, 27]
    assert rdbfile.REDIS_RDB_VERSIONS["8.8"] == 14 and rdbfile.REDIS_RDB_VERSIONS["8.10"] == 15
    assert cli_rdb.FOR_REDIS == tuple(rdbfile.REDIS_RDB_VERSIONS)  # --for-redis offers every release the table knows
    with pytest.raises(ValueError, match="predates streams"):
        rdbfile.stream_type_for(8)
    assert [L(n) for n in (5, 300, 70000, 1 << 40)] == [b"\x05", b"\x41\x2c", b"\x80\x00\x01\x11\x70",
                                                         b"\x81" + (1 << 40).to_bytes(8, "big")]


# -- the commands


def _run(capsys, *argv) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def _import_file(redis_file, tmp_path) -> str:
    """The 7.0 file plus an expired stream and one with a TTL, written with RdbFileWriter."""
    data, _, _, _ = redis_file
    _, keys = read_all(data)
    s1 = next(k for k in keys if k.key == b"s1")
    path = str(tmp_path / "import.rdb")
    with open(path, "wb") as out:
        writer = RdbFileWriter(out, 10)
        writer.begin({"redis-ver": "7.0.15"})
        for db in (0, 1):
            mine = [k for k in keys if k.db == db]
            writer.select_db(db, len(mine))
            for k in mine:
                writer.key(k.key, k.rdb_type, k.value, k.expire_ms)
            if db == 0:
                writer.key(b"expired-stream", s1.rdb_type, s1.value, expire_ms=1000)
                writer.key(b"ttl-stream", s1.rdb_type, s1.value, expire_ms=int(time.time() * 1000) + 10 ** 9)
        writer.end()
    return path


def _report(lines: list[str]) -> dict[str, tuple[int, set[str] | None]]:
    """'what: N: a, b' lines as what -> (N, {a, b}); the names are None when the line cuts them off."""
    out = {}
    for line in lines:
        head, _, rest = line.rpartition(": ")
        what, _, count = head.rpartition(": ")
        if count.isdigit():
            out[what] = int(count), None if rest.endswith("...") else set(rest.split(", "))
    return out


def test_import_into_redis_reports_what_it_skipped(redis_file, tmp_path, capsys):
    path = _import_file(redis_file, tmp_path)
    _, dumps, _, _ = redis_file
    with RedisProcess() as target:
        c = target.client()
        c.xadd("s1", {"already": "here"})
        status, out, err = _run(capsys, "import", path, "--into", f"127.0.0.1:{target.port}")
        assert status == 0, err
        streams = [b"big-stream", b"empty-stream", b"k" * 40, b"ttl-stream"]
        assert sorted(c.keys()) == sorted(streams + [b"s1"])
        for key in streams[:3]:
            assert split_dump_payload(c.dump(key))[1] == split_dump_payload(dumps[(0, key)])[1]
        assert c.xrange("s1") != [] and c.xlen("s1") == 1  # kept
        assert c.pttl("ttl-stream") == -1
        lines = out.splitlines()
        assert lines[0] == f"{path}: RDB version 10, written by Redis 7.0.15, 21 keys"
        assert f"imported 4 streams into 127.0.0.1:{target.port}" in lines
        assert "already there, not replaced (--replace replaces them): 1: s1" in lines
        assert "had a TTL, imported without it (Braid's keys do not expire): 1: ttl-stream" in lines
        assert "expired when the file was written or since, not imported: 1: expired-stream" in lines
        assert "streams in database 1, not imported (--db 1 imports them): 1: s-db1" in lines
        report = _report(lines)
        assert report["skipped, not streams: string"] == (6, None)  # only five names shown
        assert report["skipped, not streams: hash"] == (2, {"hash", "bighash"})
        assert report["skipped, not streams: zset"] == (2, {"zset", "bigzset"})
        assert report["skipped, not streams: set"] == (2, {"set", "intset"})
        assert report["skipped, not streams: list"] == (2, {"list", "biglist"})

        status, out, _ = _run(capsys, "import", path, "--into", f"127.0.0.1:{target.port}", "--replace")
        assert status == 0 and f"imported 5 streams into 127.0.0.1:{target.port}" in out
        assert split_dump_payload(c.dump("s1"))[1] == split_dump_payload(dumps[(0, b"s1")])[1]
        status, out, _ = _run(capsys, "import", path, "--into", f"127.0.0.1:{target.port}", "--db", "1")
        assert status == 0 and "imported 1 streams" in out and c.exists("s-db1")


def test_import_of_a_corrupt_file_sends_nothing(redis_file, tmp_path, capsys):
    path = _import_file(redis_file, tmp_path)
    with open(path, "rb") as f:
        data = f.read()
    with RedisProcess() as target:
        for _n, damaged in ((len(data) - 3, data[:-3]),
                            (400, data[:400] + bytes([data[400] ^ 0x40]) + data[401:])):
            with open(path, "wb") as f:
                f.write(damaged)
            status, out, err = _run(capsys, "import", path, "--into", f"127.0.0.1:{target.port}")
            assert status == 2 and "not a valid RDB file: offset " in err and "nothing was imported" in err
            assert target.client().dbsize() == 0
        status, _, err = _run(capsys, "import", str(tmp_path / "missing.rdb"), "--into", f"127.0.0.1:{target.port}")
        assert status == 2 and "No such file or directory" in err
    status, _, err = _run(capsys, "import", path + "x", "--into", "127.0.0.1:1")
    assert status == 2


def test_import_reports_an_unreachable_server_and_a_refused_stream(redis_file, tmp_path, capsys):
    path = _import_file(redis_file, tmp_path)
    with open(path, "wb") as out:
        writer = RdbFileWriter(out, 10)
        writer.begin()
        writer.select_db(0, 1)
        writer.key(b"bad-stream", rdb.RDB_TYPE_STREAM_LISTPACKS_2,
                   _stream_value(rdb.RDB_TYPE_STREAM_LISTPACKS_2))  # no listpack
        writer.end()
    with RedisProcess() as target:
        status, out, err = _run(capsys, "import", path, "--into", f"127.0.0.1:{target.port}")
        assert status == 1 and "refused: bad-stream: Bad data format" in err and "refused 1 streams" in err
        status, out, err = _run(capsys, "import", path, "--into", f"127.0.0.1:{target.port}", "--password", "x")
        assert status == 1 and "AUTH" in err
    status, out, err = _run(capsys, "import", path, "--into", f"127.0.0.1:{target.port}", "--timeout", "5")
    assert status == 1 and f"127.0.0.1:{target.port}" in err and "Connection refused" in err


def test_export_from_redis_for_redis_7_0(redis_file, tmp_path, capsys):
    _, dumps, _, source = redis_file
    path = tmp_path / "dump.rdb"
    path.write_bytes(b"the old file")
    status, out, err = _run(capsys, "export", str(path), "--from", f"127.0.0.1:{source.port}", "--for-redis", "7.0")
    assert status == 0, err
    assert out.strip() == f"exported 4 streams from 127.0.0.1:{source.port} to {path} (RDB version 10)"
    assert os.listdir(tmp_path) == ["dump.rdb"]  # the temporary file renamed over it
    with RedisProcess(data_dir=str(tmp_path)) as p:
        c = p.client()
        assert sorted(c.keys()) == sorted(k for db, k in dumps if db == 0 and c.type(k) == b"stream")
        for key in c.keys():
            assert c.dump(key) == dumps[(0, key)]


def test_export_refuses_what_it_cannot_write(redis_file, tmp_path, capsys):
    _, _, _, source = redis_file
    status, _, err = _run(capsys, "export", str(tmp_path / "x.rdb"), "--from", f"127.0.0.1:{source.port}",
                          "--rdb-version", "8")
    assert status == 2 and "predates streams" in err
    status, _, err = _run(capsys, "export", str(tmp_path / "x.rdb"), "--from", f"127.0.0.1:{source.port}",
                          "--rdb-version", "16")
    assert status == 2 and "newer than" in err
    status, _, err = _run(capsys, "export", str(tmp_path / "no-dir" / "x.rdb"), "--from",
                          f"127.0.0.1:{source.port}")
    assert status == 2 and "No such file or directory" in err
    assert not os.path.exists(tmp_path / "x.rdb")
    with pytest.raises(SystemExit):
        cli.main(["export", "x.rdb", "--from", "nowhere"])
    assert "is not HOST:PORT" in capsys.readouterr().err


def test_every_option_of_import_and_export_has_help():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_rdb.add_rdb_commands(sub)
    for name, p in sub.choices.items():
        assert p.description and p.epilog, name
        for action in p._actions:
            assert action.help, (name, action.option_strings or action.dest)


# -- into and out of a Braid region


def _full(client, key) -> object:
    """XINFO STREAM FULL as the differential harness compares it across servers, and every PEL entry's
    delivery time and count (which RESTORE carries exactly)."""
    reply = client.execute_command("XINFO", "STREAM", key, "FULL")
    pel = {}
    for group in client.xinfo_groups(key):
        pel[group["name"]] = client.xpending_range(key, group["name"], "-", "+", 1000)
        for entry in pel[group["name"]]:
            entry.pop("time_since_delivered")
    return normalise(["xinfo", "stream", key, "full"], reply), pel


@pytest.fixture
def region():
    with InProcessServer() as server:
        yield server


def test_import_into_braid_from_redis_7_0(redis_file, region, tmp_path, capsys):
    data, _, _, source = redis_file
    path = tmp_path / "dump.rdb"
    path.write_bytes(data)
    status, out, err = _run(capsys, "import", str(path), "--into", f"127.0.0.1:{region.port}")
    assert status == 0, err
    assert f"imported 4 streams into 127.0.0.1:{region.port}" in out
    src, braid = source.client(), region.client()
    assert sorted(braid.keys()) == sorted([b"s1", b"big-stream", b"empty-stream", b"k" * 40])
    for key in braid.keys():
        assert braid.xrange(key) == src.xrange(key), key
        assert _full(braid, key) == _full(src, key), key
    # the imported groups work on: bob's pending entry is claimable, new entries are delivered
    braid.xadd("s1", {"new": "1"}, id="9-0")
    assert braid.xreadgroup("g1", "carol", {"s1": ">"}) == [[b"s1", [(b"9-0", {b"new": b"1"})]]]
    status, out, _ = _run(capsys, "import", str(path), "--into", f"127.0.0.1:{region.port}")
    assert status == 0 and "already there, not replaced (--replace replaces them): 4" in out


def test_import_into_braid_from_redis_8_6(region, tmp_path, capsys):
    path = tmp_path / "dump.rdb"
    path.write_bytes(REDIS_8_6_FILE)
    status, out, err = _run(capsys, "import", str(path), "--into", f"127.0.0.1:{region.port}")
    assert status == 0, err
    assert "RDB version 13, written by Redis 8.6.3, 15 keys" in out and "imported 2 streams" in out
    assert _report(out.splitlines())["skipped, not streams: hash"] == (4, {"bighash", "hashlp", "hfe-big", "hfe-lp"})
    braid = region.client()
    assert [fields for _, fields in braid.xrange("stream")] == [{b"f": b"v"}, {b"g": b"w"}]
    info = braid.xinfo_stream("stream")
    assert (info["pids-tracked"], info["iids-tracked"], info["groups"]) == (1, 1, 1)
    assert braid.xpending("stream", "grp")["consumers"] == [{"name": b"alice", "pending": 1}]
    # the producer's iid came along: the same IDMP pair is a duplicate, answered with the first entry's ID
    first = braid.xrange("stream")[0][0]
    assert braid.execute_command("XADD", "stream", "IDMP", "prod", "iid-1", "*", "f", "again") == first


def test_export_from_braid_loads_in_redis_7_0(region, tmp_path, capsys):
    braid = region.client()
    braid.xadd("orders", {"n": 1}, id="1-1")
    braid.xadd("orders", {"n": 2}, id="2-1")
    braid.xadd("orders", {"n": 3}, id="3-1")
    braid.xdel("orders", "2-1")
    braid.xgroup_create("orders", "billing", id="0")
    braid.xreadgroup("billing", "worker-1", {"orders": ">"}, count=1)
    braid.xgroup_create("orders", "audit", id="$")
    for i in range(300):
        braid.xadd("events", {"i": i, "text": "x" * (i % 50)})
    braid.xadd("a" * 50, {"compressible": "y" * 200})
    status, out, err = _run(capsys, "export", str(tmp_path / "dump.rdb"), "--from", f"127.0.0.1:{region.port}",
                            "--for-redis", "7.0")
    assert status == 0, err
    assert f"exported 3 streams from 127.0.0.1:{region.port}" in out and "(RDB version 10)" in out
    reader, keys = read_all((tmp_path / "dump.rdb").read_bytes())
    assert reader.version == 10 and {k.rdb_type for k in keys} == {rdb.RDB_TYPE_STREAM_LISTPACKS_2}
    with RedisProcess(data_dir=str(tmp_path)) as p:
        c = p.client()
        assert sorted(c.keys()) == sorted(braid.keys())
        for key in braid.keys():
            assert c.xrange(key) == braid.xrange(key), key
            assert _full(c, key) == _full(braid, key), key

    # a Redis 6.2 file (RDB 9, the first stream encoding), which 7.0 loads too
    (tmp_path / "old").mkdir()
    status, out, err = _run(capsys, "export", str(tmp_path / "old" / "dump.rdb"), "--from",
                            f"127.0.0.1:{region.port}", "--for-redis", "6.2")
    assert status == 0 and "(RDB version 9)" in out, err
    reader, keys = read_all((tmp_path / "old" / "dump.rdb").read_bytes())
    assert reader.version == 9 and {k.rdb_type for k in keys} == {rdb.RDB_TYPE_STREAM_LISTPACKS}
    with RedisProcess(data_dir=str(tmp_path / "old")) as p:
        c = p.client()
        for key in braid.keys():
            assert c.xrange(key) == braid.xrange(key), key
        assert c.xpending_range("orders", "billing", "-", "+", 10)[0]["consumer"] == b"worker-1"

    status, out, err = _run(capsys, "export", str(tmp_path / "new.rdb"), "--from", f"127.0.0.1:{region.port}")
    assert status == 0, err
    reader, keys = read_all((tmp_path / "new.rdb").read_bytes())  # the version of Braid's DUMP: Redis 8.10's
    assert reader.version == 15 and {k.rdb_type for k in keys} == {rdb.RDB_TYPE_STREAM_LISTPACKS_5}
    for k in keys:  # exactly what DUMP answers
        assert restore_payload(k.rdb_type, k.value, 15) == braid.dump(k.key)


def test_an_import_into_one_region_reaches_the_others(redis_file, tmp_path, capsys):
    data, _, _, source = redis_file
    path = tmp_path / "dump.rdb"
    path.write_bytes(data)
    with LocalCluster(2) as cluster:
        first, second = cluster.clients()
        status, out, err = _run(capsys, "import", str(path), "--into", f"127.0.0.1:{cluster.procs[0].port}")
        assert status == 0 and "imported 4 streams" in out, err
        cluster.sync_wait()
        src = source.client()
        # in an Active-Active database a stream with no entries and no groups does not exist
        assert sorted(second.keys()) == sorted(first.keys()) == sorted([b"s1", b"big-stream", b"k" * 40])
        for key in first.keys():
            assert second.xrange(key) == first.xrange(key) == src.xrange(key), key
            assert [g["name"] for g in second.xinfo_groups(key)] == [g["name"] for g in src.xinfo_groups(key)]
        # an export from the other region holds the same streams
        status, out, err = _run(capsys, "export", str(tmp_path / "out.rdb"), "--from",
                                f"127.0.0.1:{cluster.procs[1].port}")
        assert status == 0 and "exported 3 streams" in out, err
        _, keys = read_all((tmp_path / "out.rdb").read_bytes())
        assert sorted(k.key for k in keys) == sorted(first.keys())


def test_braid_node_imports_on_its_first_start_only(redis_file, tmp_path):
    data, _, _, source = redis_file
    path = tmp_path / "dump.rdb"
    path.write_bytes(data)
    region = BraidProcess(data_dir=str(tmp_path / "region"), extra_args=["--import", str(path)])
    with region:
        c = region.client()

        def log() -> str:
            with open(region.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()

        wait_until(lambda: "braid node: --import: imported 4 streams" in log(), what="the import's report")
        assert "skipped, not streams: hash: 2" in log()
        assert sorted(c.keys()) == sorted([b"s1", b"big-stream", b"empty-stream", b"k" * 40])
        assert c.xrange("s1") == source.client().xrange("s1")
        c.delete("s1")
        region.stop_keeping_data()
        region.restart()
        wait_until(lambda: "not imported, the data directory holds data already" in log(), what="the restart")
        assert sorted(region.client().keys()) == sorted([b"big-stream", b"empty-stream", b"k" * 40])
    path.write_bytes(data[:-20])
    refused = BraidProcess(extra_args=["--import", str(path)])
    try:
        with pytest.raises(RuntimeError, match="exited with 2: .*not a valid RDB file: offset"):
            refused.start()
    finally:
        refused.stop()


def test_import_and_export_over_tls_with_a_password(redis_file, tmp_path, capsys):
    from node.security.certs import create_cluster_certs

    data, _, _, _ = redis_file
    path = tmp_path / "dump.rdb"
    path.write_bytes(data)
    made = create_cluster_certs(str(tmp_path / "tls"), ["region-1"])
    tls_port = free_port()

    def serves() -> bool:
        try:
            with region.client(password="s3cret", socket_timeout=1) as c:
                return c.ping()
        except redis.RedisError:
            return False

    region = BraidProcess(extra_args=["--requirepass", "s3cret", "--tls-port", str(tls_port),
                                      "--tls-cert-file", made.regions["region-1"][0],
                                      "--tls-key-file", made.regions["region-1"][1], "--tls-ca-cert-file", made.ca],
                          ready=serves)
    tls = ["--tls", "--cacert", made.ca, "--cert", made.client[0], "--key", made.client[1]]
    with region:
        status, out, err = _run(capsys, "import", str(path), "--into", f"127.0.0.1:{tls_port}", *tls,
                                "--password", "s3cret")
        assert status == 0 and "imported 4 streams" in out, err
        status, _, err = _run(capsys, "import", str(path), "--into", f"127.0.0.1:{tls_port}", *tls,
                              "--password", "wrong")
        assert status == 1 and "invalid username-password pair" in err
        status, out, err = _run(capsys, "export", str(tmp_path / "out.rdb"), "--from", f"127.0.0.1:{tls_port}",
                                *tls, "--user", "default", "--password", "s3cret")
        assert status == 0 and "exported 4 streams" in out, err
        _, keys = read_all((tmp_path / "out.rdb").read_bytes())
        assert len(keys) == 4


# -- Redis 8.8 and 8.10 files (RDB 14 and 15), into and out of a Braid region


def _jobs_stream() -> bytes:
    """A type-27 stream value written out from the layout: entries 1-0, 2-0, 3-0 in one node; group
    "workers" has delivered all three, w1 owns 1-0, and XNACK released 3-0 and then 2-0 (the NACK
    zone after the consumers lists them in that order; the group PEL lists them unowned, delivery
    time 0); then the IDMP settings and no producers."""
    w = rdb.Writer()
    w.length(1)
    w.string((1).to_bytes(8, "big") + bytes(8))  # the node's master ID, 1-0
    w.string(listpack_encode([3, 0, 1, b"job", 0,  # live, deleted, the master fields, 0
                                  2, 0, 0, b"a", 4, 2, 1, 0, b"b", 4, 2, 2, 0, b"c", 4]))  # same fields as the master
    w.length(3)
    for id_ in ((3, 0), (1, 0), (0, 0)):  # last, first, max deleted
        w.len_id(id_)
    w.length(3)  # entries added
    w.length(1)
    w.string(b"workers")
    w.len_id((3, 0))
    w.length(3)  # entries read
    w.length(3)  # the group PEL, in ID order: ID, delivery time, delivery count
    for ms, when, count in ((1, 1700000000000, 1), (2, 0, 2), (3, 0, 1)):
        w.stream_id((ms, 0))
        w.millis(when)
        w.length(count)
    w.length(1)
    w.string(b"w1")
    w.millis(1700000000000)  # seen
    w.millis(1700000000000)  # active
    w.length(1)
    w.stream_id((1, 0))
    w.length(2)  # the NACK zone, first released first
    w.stream_id((3, 0))
    w.stream_id((2, 0))
    for n in (100, 100, 0, 0, 0):  # IDMP: duration, max size, no producers, counters
        w.length(n)
    return w.getvalue()


def _redis_8_8_file() -> bytes:
    """What a Redis 8.8 SAVE holds for the jobs stream, an array, a string and a stream in database 1."""
    jobs = _jobs_stream()
    body = (bytes([rdb.RDB_OPCODE_AUX]) + S(b"redis-ver") + S(b"8.8.0") + bytes([rdb.RDB_OPCODE_SELECTDB]) + L(0)
            + bytes([rdb.RDB_OPCODE_RESIZEDB]) + L(4) + L(0)
            + bytes([rdb.RDB_TYPE_ARRAY]) + S(b"seats") + ARRAY_VALUES[0]
            + bytes([rdb.RDB_TYPE_STREAM_LISTPACKS_5]) + S(b"jobs") + jobs
            + bytes([rdb.RDB_TYPE_ARRAY]) + S(b"slots") + ARRAY_VALUES[1]
            + bytes([rdb.RDB_TYPE_STRING]) + S(b"greeting") + S(b"hello")
            + bytes([rdb.RDB_OPCODE_SELECTDB]) + L(1)
            + bytes([rdb.RDB_TYPE_STREAM_LISTPACKS_5]) + S(b"jobs-db1") + jobs)
    return rdb_bytes(body, 14)


def _redis_8_10_file() -> bytes:
    """A Redis 8.10 SAVE: its hash templates first, compact hashes of every form, an array, the jobs stream."""
    body = bytes([rdb.RDB_OPCODE_AUX]) + S(b"redis-ver") + S(b"8.10.2") + TEMPLATES
    body += bytes([rdb.RDB_OPCODE_SELECTDB]) + L(0) + bytes([rdb.RDB_OPCODE_RESIZEDB]) + L(11) + L(1)
    for n, (rdb_type, value) in enumerate(COMPACT_HASH_VALUES):
        body += bytes([rdb_type]) + S(b"user:%d" % n) + value
    body += bytes([rdb.RDB_TYPE_ARRAY]) + S(b"seats") + ARRAY_VALUES[0]
    body += bytes([rdb.RDB_OPCODE_EXPIRETIME_MS]) + struct.pack("<q", 1000) \
        + bytes([rdb.RDB_TYPE_HASH_TMPL_ARRAY_REF]) + S(b"expired-hash") + COMPACT_HASH_VALUES[2][1]
    body += bytes([rdb.RDB_TYPE_STREAM_LISTPACKS_5]) + S(b"jobs") + _jobs_stream()
    return rdb_bytes(body, 15)


def test_reads_redis_8_8_and_8_10_files():
    reader, keys = read_all(_redis_8_8_file())
    assert reader.version == 14 and reader.checksum is True and reader.aux[b"redis-ver"] == b"8.8.0"
    assert [(k.db, k.key, k.type_name) for k in keys] == [
        (0, b"seats", "array"), (0, b"jobs", "stream"), (0, b"slots", "array"), (0, b"greeting", "string"),
        (1, b"jobs-db1", "stream")]
    jobs = keys[1]
    assert (jobs.rdb_type, jobs.value) == (rdb.RDB_TYPE_STREAM_LISTPACKS_5, _jobs_stream())
    # the value is what Braid's codec reads as Redis 8.8's: released entries unowned, in release order
    g = rdb.load_payload(restore_payload(jobs.rdb_type, jobs.value, 14)).groups[b"workers"]
    assert [(i, n.consumer and n.consumer.name) for i, n in g.by_delivery_time()] == [
        ((3, 0), None), ((2, 0), None), ((1, 0), b"w1")]

    reader, keys = read_all(_redis_8_10_file())
    assert reader.version == 15 and reader.checksum is True and reader.templates == {0: 2, 5: 3}
    assert [k.type_name for k in keys] == ["hash"] * 8 + ["array", "hash", "stream"]
    assert keys[-1].value == _jobs_stream() and keys[-2].expire_ms == 1000


def test_every_truncation_and_flipped_byte_of_a_redis_8_10_file_is_a_clean_error():
    data = _redis_8_10_file()
    for n in range(len(data)):
        with pytest.raises(RdbFileError):
            read_all(data[:n])
    for n in range(9, len(data)):
        flipped = bytearray(data)
        flipped[n] ^= 0xFF
        with pytest.raises(RdbFileError):
            read_all(bytes(flipped))


def _claims(client, key: bytes, group: str) -> list[bytes]:
    """The IDs XREADGROUP ... CLAIM 0 serves, in order: XNACK's released entries first, in release order."""
    reply = client.execute_command("XREADGROUP", "GROUP", group, "claimer", "CLAIM", "0", "STREAMS", key, ">")
    return [entry[0] for entry in reply[0][1]]


def _group(client, key: bytes) -> dict:
    """The first group of XINFO STREAM key FULL: its name, PEL size, NACKed entries and entries read."""
    info = client.execute_command("XINFO", "STREAM", key, "FULL")
    group = dict(zip(info[::2], info[1::2], strict=True))[b"groups"][0]
    group = dict(zip(group[::2], group[1::2], strict=True))
    return {name: group[name.encode()] for name in ("name", "pel-count", "nacked-count", "entries-read")}


def test_import_into_braid_from_redis_8_8_and_8_10(region, tmp_path, capsys):
    braid = region.client()
    path = tmp_path / "dump.rdb"
    path.write_bytes(_redis_8_8_file())
    status, out, err = _run(capsys, "import", str(path), "--into", f"127.0.0.1:{region.port}")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{path}: RDB version 14, written by Redis 8.8.0, 5 keys"
    assert f"imported 1 streams into 127.0.0.1:{region.port}" in lines
    report = _report(lines)
    assert report["skipped, not streams: array"] == (2, {"seats", "slots"})
    assert report["skipped, not streams: string"] == (1, {"greeting"})
    assert report["streams in database 1, not imported (--db 1 imports them)"] == (1, {"jobs-db1"})
    assert [(id_, fields) for id_, fields in braid.xrange("jobs")] == [
        (b"1-0", {b"job": b"a"}), (b"2-0", {b"job": b"b"}), (b"3-0", {b"job": b"c"})]
    assert _group(braid, b"jobs") == {"name": b"workers", "pel-count": 3, "nacked-count": 2, "entries-read": 3}
    assert braid.xpending("jobs", "workers")["consumers"] == [{"name": b"w1", "pending": 1}]
    assert _claims(braid, b"jobs", "workers") == [b"3-0", b"2-0", b"1-0"]

    path.write_bytes(_redis_8_10_file())
    status, out, err = _run(capsys, "import", str(path), "--into", f"127.0.0.1:{region.port}", "--replace")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{path}: RDB version 15, written by Redis 8.10.2, 11 keys"
    assert f"imported 1 streams into 127.0.0.1:{region.port}" in lines
    report = _report(lines)
    assert report["skipped, not streams: hash"] == (9, None)
    assert report["skipped, not streams: array"] == (1, {"seats"})
    assert sorted(braid.keys()) == [b"jobs"]  # replaced: the NACK zone is back as the file has it
    assert _group(braid, b"jobs")["nacked-count"] == 2 and _claims(braid, b"jobs", "workers")[:2] == [b"3-0", b"2-0"]


def test_import_of_a_redis_8_10_file_with_a_value_it_cannot_skip_sends_nothing(region, tmp_path, capsys):
    body = _redis_8_10_file()[9:-9] + bytes([rdbfile.RDB_TYPE_GCRA]) + S(b"rate:api") + L(5)
    path = tmp_path / "dump.rdb"
    path.write_bytes(rdb_bytes(body, 15))
    status, _, err = _run(capsys, "import", str(path), "--into", f"127.0.0.1:{region.port}")
    assert status == 2 and f"offset {9 + len(body) - 11}: key 'rate:api' holds a GCRA rate limiter" in err
    assert "nothing was imported" in err and region.client().dbsize() == 0


def _pending(client) -> list[tuple]:
    """XPENDING tasks g - + 10 without the idle times, which move on"""
    return [(p["message_id"], p["consumer"], p["times_delivered"])
            for p in client.xpending_range("tasks", "g", "-", "+", 10)]


def test_export_for_redis_8_8_and_8_10_reads_back(region, tmp_path, capsys):
    braid = region.client()
    for i in range(1, 6):
        braid.xadd("tasks", {"n": i}, id=f"{i}-0")
    braid.xgroup_create("tasks", "g", id="0")
    braid.xreadgroup("g", "alice", {"tasks": ">"})
    assert braid.execute_command("XNACK", "tasks", "g", "FAIL", "IDS", 1, "4-0") == 1
    assert braid.execute_command("XNACK", "tasks", "g", "SILENT", "IDS", 1, "2-0") == 1
    braid.xadd("plain", {"x": "y"})
    group = _group(braid, b"tasks")
    assert group["nacked-count"] == 2

    files = {}
    for release, version in (("8.10", 15), ("8.8", 14)):
        files[release] = tmp_path / f"{release}.rdb"
        status, out, err = _run(capsys, "export", str(files[release]), "--from", f"127.0.0.1:{region.port}",
                                "--for-redis", release)
        assert status == 0, err
        assert f"exported 2 streams from 127.0.0.1:{region.port} to {files[release]} (RDB version {version})" in out
        reader, keys = read_all(files[release].read_bytes())
        assert reader.version == version and reader.checksum is True
        assert {k.rdb_type for k in keys} == {rdb.RDB_TYPE_STREAM_LISTPACKS_5}
        for k in keys:  # Braid's DUMP, in the file's version
            assert restore_payload(k.rdb_type, k.value, 15) == braid.dump(k.key)
            g = rdb.load_payload(restore_payload(k.rdb_type, k.value, version)).groups.get(b"g")
            if g is not None:
                assert [i for i, n in g.by_delivery_time() if n.consumer is None] == [(4, 0), (2, 0)]

    # the 8.8 file imported into another region: the same streams, the same zone, served first in its order
    with InProcessServer() as other:
        status, out, err = _run(capsys, "import", str(files["8.8"]), "--into", f"127.0.0.1:{other.port}")
        assert status == 0 and "imported 2 streams" in out, err
        copy = other.client()
        assert sorted(copy.keys()) == [b"plain", b"tasks"]
        for key in (b"plain", b"tasks"):
            assert copy.xrange(key) == braid.xrange(key)
        assert _group(copy, b"tasks") == group
        assert _pending(copy) == _pending(braid)
        assert _claims(copy, b"tasks", "g") == _claims(braid, b"tasks", "g") == [b"4-0", b"2-0", b"1-0", b"3-0",
                                                                                 b"5-0"]
