"""The RDB codec of streams (node/interop/rdb.py), without a server.

- Primitives: CRC-64's published check value and its bitwise definition; every length
  width at its bounds; strings raw, integer-encoded and LZF-compressed; LZF on random and
  repetitive data and refusing damaged input, its two implementations (node/persistence/
  lzf.py: the native one, compiled, and the plain one) writing what the codec wrote before
  they existed, byte for byte, at sizes around its limits, and reading back the same
  bytes or refusing with the same error; listpacks with every integer and string width,
  and refusing malformed ones.
- Stream values: Hypothesis-built streams (entries in several nodes, deleted
  entries, groups with PELs and consumers, entries released by XNACK, IDMP maps)
  written in each encoding and read back equal (minus what an older encoding cannot
  hold: before type 27 the released entries are left out), node structure and the
  NACK zone's order included; a multi-origin stream written as one merged Redis
  stream.  Type 27's group section checked byte for byte against the layout.
- Hostile input: every truncation of a value and random byte damage raise
  RdbError and nothing else; a NACK zone naming an entry that is not pending,
  owned, or listed twice, and an unowned entry outside the zone, are refused.
"""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crdt.groups import ENTRIES_READ_UNKNOWN, FAIL, FATAL, SILENT, ConsumerGroup, advance
from crdt.ids import MAX_ID, MIN_ID
from crdt.stream import Stream
from node.interop import listpack, lzf, rdb
from node.interop.rdb import (
    RDB_TYPE_STREAM_LISTPACKS,
    RDB_TYPE_STREAM_LISTPACKS_2,
    RDB_TYPE_STREAM_LISTPACKS_3,
    RDB_TYPE_STREAM_LISTPACKS_4,
    RDB_TYPE_STREAM_LISTPACKS_5,
    RdbError,
    Reader,
    Writer,
)

ALL_TYPES = sorted(rdb.STREAM_TYPES)


# ---------------------------------------------------------------- primitives
def test_crc64_is_redis_jones_crc():
    # crc64.c's own test vector, and continuing a running CRC gives the same result
    assert rdb.crc64(b"123456789") == 0xE9C6D914C4B8D9CA
    assert rdb.crc64(b"6789", rdb.crc64(b"12345")) == 0xE9C6D914C4B8D9CA
    assert rdb.crc64(b"") == 0
    assert rdb.crc64(b"", 12345) == 12345


def _crc64_bitwise(data: bytes, crc: int = 0) -> int:
    """crc64.c's definition, a bit at a time: the reflected Jones polynomial, init 0, no xorout."""
    poly = int(f"{0xAD93D23594C935A9:064b}"[::-1], 2)
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
    return crc


def test_crc64_agrees_with_the_definition_on_random_data():
    rng = random.Random(64)
    for n in [*range(0, 40), 63, 64, 65, 127, 128, 129, 1000, 4099]:
        data = rng.randbytes(n)
        start = rng.getrandbits(64) if n % 2 else 0
        want = _crc64_bitwise(data, start)
        assert rdb.crc64(data, start) == want, n
        # the buffers rdbfile.py and dump_payload hand it
        assert rdb.crc64(bytearray(data), start) == rdb.crc64(memoryview(data), start) == want
        cut = rng.randrange(n + 1)
        assert rdb.crc64(data[cut:], rdb.crc64(data[:cut], start)) == want


@pytest.mark.parametrize("n", [0, 1, 63, 64, 16383, 16384, 2**32 - 1, 2**32, 2**64 - 1])
def test_length_widths_round_trip(n):
    w = Writer()
    w.length(n)
    data = w.getvalue()
    expected = 1 if n < 64 else 2 if n < 16384 else 5 if n < 2**32 else 9
    assert len(data) == expected
    r = Reader(data)
    assert r.length() == (n, False)
    assert r.at_end()


@pytest.mark.parametrize("s,size", [
    (b"0", 2), (b"-128", 2), (b"127", 2), (b"128", 3), (b"-32768", 3), (b"32768", 5),
    (b"2147483647", 5), (b"-2147483648", 5), (b"2147483648", 11), (b"007", 4), (b"-0", 3),
    (b"", 1), (b"hello", 6),
])
def test_strings_use_integer_encoding_when_redis_does(s, size):
    w = Writer()
    w.string(s)
    assert len(w.getvalue()) == size
    assert Reader(w.getvalue()).string() == s


def test_lzf_strings_round_trip_and_refuse_damage():
    rng = random.Random(7)
    for n in (21, 100, 5000):
        data = bytes(rng.choice(b"ab") for _ in range(n // 3)) * 3 + b"x" * (n % 3)
        w = Writer(compress=True)
        w.string(data)
        enc = w.getvalue()
        assert enc[0] == 0xC3  # LZF-encoded
        assert len(enc) < n
        assert Reader(enc).string() == data
        packed = rdb.lzf_compress(data)
        assert rdb.lzf_decompress(packed, n) == data
        with pytest.raises(RdbError):
            rdb.lzf_decompress(packed, n + 1)
        with pytest.raises(RdbError):
            rdb.lzf_decompress(packed, n - 1)
        with pytest.raises(RdbError):
            rdb.lzf_decompress(packed[:-1], n)
    assert rdb.lzf_compress(os.urandom(200)) is None  # incompressible: stored raw
    with pytest.raises(RdbError):
        rdb.lzf_decompress(b"\x20\x05", 3)  # a back reference before the start


# ---------------------------------------------------------------- LZF: both implementations
def _lzf_compress_before(data: bytes) -> bytes | None:
    """rdb.py's LZF compressor before node/interop/lzf.py, verbatim: what both of its
    implementations must still write, byte for byte."""
    n = len(data)
    if n <= 4:
        return None
    out = bytearray()
    table: dict[bytes, int] = {}
    lit_start = 0
    i = 0

    def flush_literals(upto: int) -> None:
        s = lit_start
        while s < upto:
            run = min(32, upto - s)
            out.append(run - 1)
            out.extend(data[s:s + run])
            s += run

    while i + 2 < n:
        key = data[i:i + 3]
        ref = table.get(key)
        table[key] = i
        if ref is not None and i - ref - 1 < 1 << 13:
            off = i - ref - 1
            maxlen = min(n - i, 264)
            length = 3
            while length < maxlen and data[ref + length] == data[i + length]:
                length += 1
            flush_literals(i)
            enc = length - 2
            if enc < 7:
                out.append((enc << 5) | (off >> 8))
            else:
                out.append((7 << 5) | (off >> 8))
                out.append(enc - 7)
            out.append(off & 0xFF)
            i += length
            lit_start = i
            if len(out) > n - 4:
                return None
            continue
        i += 1
    flush_literals(n)
    return bytes(out) if len(out) <= n - 4 else None


# around the literal run (32), the longest back reference (264), the window (8 KiB) and
# rdbSaveLzfStringObject's 4-byte saving (sizes up to 5 never compress)
_LZF_SIZES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 31, 32, 33, 34, 63, 64, 65, 66, 67, 100, 263, 264,
              265, 266, 267, 268, 300, 528, 529, 1000, 4096, 8191, 8192, 8193, 8194, 8195, 10000, 20000, 70000]


def _lzf_inputs(n: int, rng: random.Random) -> list[bytes]:
    period = rng.randrange(1, 300)
    pattern = rng.randbytes(period)
    noisy = bytearray((pattern * (n // period + 1))[:n])
    for _ in range(n // 50):
        noisy[rng.randrange(n)] = rng.randrange(256)
    return [
        rng.randbytes(n),                                  # incompressible
        rng.randbytes((n + 1) // 2).hex().encode()[:n],    # random hex, as the benchmark's values
        bytes(rng.choice(b"ab") for _ in range(n)),        # two letters: short matches everywhere
        b"x" * n,                                          # one letter: overlapping references
        (pattern * (n // period + 1))[:n],                 # a period of 1 to 299 bytes
        bytes(noisy),                                      # that, with a byte changed here and there
        bytes(n),                                          # zeros (the key 0 at position 0)
    ]


def test_lzf_implementations_write_what_the_codec_wrote_before_and_read_it_back():
    rng = random.Random(2024)
    for n in _LZF_SIZES:
        for data in _lzf_inputs(n, rng):
            want = _lzf_compress_before(data)
            assert lzf.compress_native(data) == want, (n, data[:16])
            assert lzf.compress_plain(data) == want, (n, data[:16])
            assert rdb.lzf_compress(data) == want
            if want is not None:
                assert len(want) <= n - 4
                assert lzf.decompress_native(want, n) == data
                assert lzf.decompress_plain(want, n) == data
                assert rdb.lzf_decompress(want, n) == data


def test_lzf_back_references_at_the_edge_of_the_window():
    # a random block repeated: the match starts exactly its length back, inside the window
    # (8192 bytes back at most, offset 8191) or just outside it
    rng = random.Random(13)
    for size in (8190, 8191, 8192, 8193, 8194):
        block = rng.randbytes(size)
        data = block + block[:2000] + rng.randbytes(100)
        want = _lzf_compress_before(data)
        if size <= 8192:
            assert want is not None and len(want) < len(data) - 1500
        else:
            assert want is None  # random bytes, and the repeat out of reach
        assert lzf.compress_native(data) == lzf.compress_plain(data) == want
        if want is not None:
            assert lzf.decompress_native(want, len(data)) == data


def _random_lzf_tokens(rng: random.Random) -> tuple[bytes, int]:
    """A random LZF stream (literals and back references, overlapping ones too) and its size."""
    out = bytearray()
    produced = 0
    for _ in range(rng.randrange(1, 60)):
        if produced == 0 or rng.random() < 0.4:
            run = rng.randrange(1, 33)
            out.append(run - 1)
            out += rng.randbytes(run)
            produced += run
        else:
            length = rng.randrange(3, 265)
            back = rng.randrange(1, min(produced, 8192) + 1)
            off = back - 1
            if length - 2 < 7:
                out.append(((length - 2) << 5) | (off >> 8))
            else:
                out += bytes(((7 << 5) | (off >> 8), length - 9))
            out.append(off & 0xFF)
            produced += length
    return bytes(out), produced


def _outcome(fn, data: bytes, n: int):
    try:
        return fn(data, n)
    except lzf.LzfError as e:
        return ("LzfError", str(e))


def test_lzf_decompressors_agree_on_valid_and_damaged_streams():
    rng = random.Random(99)
    for _ in range(300):
        data, n = _random_lzf_tokens(rng)
        out = lzf.decompress_plain(data, n)
        assert len(out) == n and lzf.decompress_native(data, n) == out
        # damaged: cut short, a byte changed, or the wrong length stated; the same outcome
        cut = data[:rng.randrange(len(data))]
        bad = bytearray(data)
        bad[rng.randrange(len(bad))] = rng.randrange(256)
        for damaged, size in ((cut, n), (bytes(bad), n), (data, n + 1), (data, n - 1), (data, 0),
                              (data, -1), (data, 2**70)):
            assert _outcome(lzf.decompress_native, damaged, size) == _outcome(lzf.decompress_plain, damaged, size)
    for garbage in (b"\x20\x05", b"\xe0", b"\xe0\x01", b"\x05ab", b"\x00a\x00"):
        for size in (0, 1, 3, 10):
            plain = _outcome(lzf.decompress_plain, garbage, size)
            assert _outcome(lzf.decompress_native, garbage, size) == plain
            if isinstance(plain, tuple):
                with pytest.raises(RdbError, match=plain[1]):
                    rdb.lzf_decompress(garbage, size)


def test_lzf_uses_the_native_implementation_when_compiled():
    assert lzf.COMPILED == lzf.__file__.endswith(".so")
    assert lzf.lzf_compress is (lzf.compress_native if lzf.COMPILED else lzf.compress_plain)
    assert lzf.lzf_decompress is (lzf.decompress_native if lzf.COMPILED else lzf.decompress_plain)
    assert rdb.lzf_compress is lzf.lzf_compress


def test_lzf_string_claiming_a_huge_length_is_refused_without_allocating():
    w = Writer()
    w.byte(0xC3)
    w.length(3)
    w.length(2**62)
    w.raw(b"\x00ab")
    with pytest.raises(RdbError):
        Reader(w.getvalue()).string()


def test_millis_and_doubles():
    w = Writer()
    w.millis(-1)
    w.millis(1_700_000_000_123)
    w.double(-2.5)
    w.stream_id((2**64 - 1, 3))
    r = Reader(w.getvalue())
    assert (r.millis(), r.millis(), r.double(), r.stream_id()) == (-1, 1_700_000_000_123, -2.5, (2**64 - 1, 3))
    with pytest.raises(RdbError):
        r.byte()


LP_ELEMENTS = [0, 127, 128, -1, -4096, 4095, 4096, -4097, 32767, -32768, 32768, 8388607, -8388608,
               8388608, 2**31 - 1, -2**31, 2**31, 2**63 - 1, -2**63, b"", b"a", b"x" * 63, b"x" * 64,
               b"y" * 4095, b"y" * 4096, b"007", b"-0", b"1e3"]


def test_listpack_round_trip_every_width():
    lp = listpack.listpack_encode(LP_ELEMENTS)
    assert listpack.listpack_decode(lp) == LP_ELEMENTS
    # the encoder's shortcuts (small ints, values of 64 to 4095 bytes) write what the general
    # element encoder does, and the back-length's two-byte shortcut what lpEncodeBacklen does
    body = b"".join(listpack.lp_element(x) for x in LP_ELEMENTS)
    assert lp == (len(body) + 7).to_bytes(4, "little") + len(LP_ELEMENTS).to_bytes(2, "little") + body + b"\xff"
    for n in (128, 129, 1000, 4097, 16382, 16383, 16384, 2097150, 2097151):
        size = 1 if n <= 127 else 2 if n < 16383 else 3 if n < 2097151 else 4
        assert listpack.backlen(n) == bytes(((n >> (7 * k)) & 127) | (0 if k == size - 1 else 128)
                                        for k in range(size - 1, -1, -1)), n
    # canonical integer strings are stored as integers, as lpAppend does
    assert listpack.listpack_decode(listpack.listpack_encode([b"12", b"-7"])) == [12, -7]
    # a listpack of 65535+ elements says "unknown" in its header and still decodes
    many = list(range(70000))
    assert listpack.listpack_decode(listpack.listpack_encode(many)) == many


@pytest.mark.parametrize("damage", ["size", "count", "terminator", "backlen", "cut"])
def test_listpack_damage_is_refused(damage):
    lp = bytearray(listpack.listpack_encode([b"field", 5, b"value" * 30]))
    if damage == "size":
        lp[0] += 1
    elif damage == "count":
        lp[4] = 9
    elif damage == "terminator":
        lp[-1] = 0
    elif damage == "backlen":
        lp[6 + 6] ^= 0x01
    else:
        lp = lp[:-5]
        lp[0:4] = len(lp).to_bytes(4, "little")
    with pytest.raises(RdbError):
        listpack.listpack_decode(bytes(lp))


# ---------------------------------------------------------------- stream values
def stream_state(s: Stream, rdb_type: int = RDB_TYPE_STREAM_LISTPACKS_5) -> dict:
    """Everything the RDB encoding ``rdb_type`` keeps of a stream, comparable with ``==``."""
    state = {
        "entries": s.range(MIN_ID, MAX_ID),
        "last": s.last_id,
        "length": s.length,
        "nodes": [(b.first, b.last, b.fields, b.live, b.dead, [(e[0], e[1], e[2]) for e in b.decode()])
                  for log in s.logs.values() for b in log.blocks],
    }
    if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_2:
        state.update(first=s.first_id, max_deleted=s.max_deleted_id, added=s.entries_added)
    groups = {}
    nack_zone = rdb_type >= RDB_TYPE_STREAM_LISTPACKS_5
    for name, g in s.groups.items():
        # before type 27 an encoding has no released (unowned) PEL entries: they are left out
        pel = {i: n for i, n in g.pel.items() if nack_zone or n.consumer is not None}
        owned = [i for i, n in pel.items() if n.consumer is not None]
        groups[name] = {
            "last": g.last_id,
            "read": g.entries_read if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_2 else None,
            "pel": {i: (n.consumer and n.consumer.name, n.delivery_time, n.delivery_count) for i, n in pel.items()},
            "consumers": {c.name: (c.seen_time, c.active_time if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_3
                                   else c.seen_time, list(c.pel))
                          for c in g.consumers.values()},
            # Redis keeps no order among equal delivery times: loading puts them in ID order
            "by_time": sorted(owned, key=lambda i: (g.pel[i].delivery_time, i)),
            # the NACK zone: released entries in the order they were released (served first)
            "nack_zone": [i for i, n in g.by_delivery_time() if n.consumer is None] if nack_zone else [],
            "nacked_count": g.nacked_count() if nack_zone else 0,
        }
    state["groups"] = groups
    if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_4:
        idmp = s.idmp
        state["idmp"] = (idmp.duration, idmp.maxsize, {p: list(m.items()) for p, m in idmp.producers.items()},
                         idmp.iids_added, idmp.iids_duplicates)
    return state


values = st.one_of(st.binary(max_size=12), st.integers(-2**63, 2**63 - 1).map(lambda v: b"%d" % v),
                   st.sampled_from([b"x" * 70, b"y" * 5000]))
field_names = st.sampled_from([b"a", b"b", b"temp", b"12", b""])


@st.composite
def streams(draw, origins=(1,)):
    s = Stream(draw(st.integers(1, 86400)), draw(st.integers(1, 10000)))
    max_entries = draw(st.sampled_from([0, 1, 3, 100]))
    max_bytes = draw(st.sampled_from([0, 60, 4096]))
    ms = draw(st.integers(0, 2**64 - 1000))
    seq = 0
    for _ in range(draw(st.integers(0, 40))):
        if draw(st.booleans()):
            ms += draw(st.integers(1, 2**20))
            seq = draw(st.integers(0, 3))
        else:
            seq += draw(st.integers(1, 2**40))
        if ms > 2**64 - 1 or seq > 2**64 - 1:
            break
        n = draw(st.integers(1, 3))
        flat = []
        for k in range(n):
            flat += [draw(field_names) + b"%d" % k, draw(values)]
        s.add(draw(st.sampled_from(origins)), (ms, seq), flat, max_entries, max_bytes)
    ids = [e[0] for e in s.range(MIN_ID, MAX_ID)]
    if ids:
        s.delete_ids(draw(st.lists(st.sampled_from(ids), max_size=len(ids))))
    now = 1_700_000_000_000
    for gname in draw(st.lists(st.binary(min_size=1, max_size=6), max_size=3, unique=True)):
        g = s.groups[gname] = ConsumerGroup(gname, MIN_ID, draw(st.sampled_from([0, ENTRIES_READ_UNKNOWN, 5])))
        live = [e[0] for e in s.range(MIN_ID, MAX_ID)]
        for cname in draw(st.lists(st.sampled_from([b"alice", b"bob", b"c"]), max_size=3, unique=True)):
            c, _ = g.consumer(cname, now + draw(st.integers(-5, 5)))
            c.active_time = draw(st.sampled_from([-1, now, now + 7]))
            for id_ in draw(st.lists(st.sampled_from(live), max_size=5, unique=True)) if live else []:
                if id_ not in g.pel:
                    nack = g.deliver(id_, c, now + draw(st.integers(-1000, 1000)))
                    nack.delivery_count = draw(st.integers(1, 2**40))
                    if id_ > g.last_id:
                        advance(s, g, id_)
        # XNACK: pending entries released (in an order of their own), and with FORCE entries
        # nobody had pending; a second XNACK moves an entry to the end of the zone
        if live:
            for id_ in draw(st.lists(st.sampled_from(live), max_size=6)):
                g.release(id_, draw(st.sampled_from([SILENT, FAIL, FATAL])),
                          draw(st.sampled_from([-1, -1, 0, 7])), force=draw(st.booleans()), exists=True)
    for pid in draw(st.lists(st.binary(max_size=5), max_size=3, unique=True)):
        for iid in draw(st.lists(st.binary(max_size=17), max_size=4, unique=True)):
            s.idmp.record(pid, iid, (draw(st.integers(0, 2**64 - 1)), draw(st.integers(0, 2**64 - 1))))
    s.idmp.iids_duplicates = draw(st.integers(0, 2**40))
    return s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=streams(), rdb_type=st.sampled_from(ALL_TYPES), compress=st.booleans())
def test_stream_values_round_trip_in_every_encoding(s, rdb_type, compress):
    data = rdb.write_stream_value(s, rdb_type, compress)
    r = Reader(data)
    back = rdb.read_stream_value(r, rdb_type, origin=1)
    assert r.at_end()
    assert stream_state(back, rdb_type) == stream_state(s, rdb_type)
    # and writing what was read gives the same bytes: nothing is lost on a second trip
    assert rdb.write_stream_value(back, rdb_type, compress) == data


def test_type_1_derives_counters_as_redis_does():
    s = Stream()
    for i in range(1, 6):
        s.add(0, (i, 0), [b"f", b"v"], 100, 4096)
    s.delete_ids([(1, 0)])
    data = rdb.write_stream_value(s, RDB_TYPE_STREAM_LISTPACKS)
    back = rdb.read_stream_value(Reader(data), RDB_TYPE_STREAM_LISTPACKS)
    # Redis 5's stream has no counters: entries-added is the length, the first ID the first live entry
    assert (back.entries_added, back.first_id, back.max_deleted_id) == (4, (2, 0), MIN_ID)


def test_several_origin_logs_are_written_as_one_redis_stream():
    s = Stream()
    for i in range(1, 120):
        s.add(1 + i % 3, (i, 0), [b"f", b"%d" % i], 100, 4096)
    s.add(1, (200, 0), [b"from", b"1"], 100, 4096)
    s.add(2, (200, 0), [b"from", b"2"], 100, 4096)  # one ID at two origins (outside strict ID mode)
    back = rdb.read_stream_value(Reader(rdb.write_stream_value(s)), RDB_TYPE_STREAM_LISTPACKS_4, origin=5)
    assert list(back.logs) == [5]
    entries = back.range(MIN_ID, MAX_ID)
    assert [e[0] for e in entries] == [(i, 0) for i in range(1, 120)] + [(200, 0)]
    assert entries[-1][1] == [b"from", b"1"]  # the entry reads return first
    assert back.node_count == 2  # packed anew at Redis's 100 entries a node


# ---------------------------------------------------------------- hostile input
def _sample_stream() -> Stream:
    s = Stream()
    for i in range(1, 30):
        s.add(0, (1000 + i, i % 3), [b"f", b"%d" % i, b"long", b"z" * (i * 3)], 10, 4096)
    s.delete_ids([(1003, 0), (1010, 1)])
    g = s.groups[b"g"] = ConsumerGroup(b"g", (1005, 2), 5)
    c, _ = g.consumer(b"alice", 5)
    g.deliver((1004, 1), c, 7)
    s.idmp.record(b"p", b"i1", (1004, 1))
    return s


@pytest.mark.parametrize("rdb_type", ALL_TYPES)
def test_every_truncation_is_refused(rdb_type):
    data = rdb.write_stream_value(_sample_stream(), rdb_type, compress=True)
    for n in range(len(data)):
        with pytest.raises(RdbError):
            r = Reader(data[:n])
            rdb.read_stream_value(r, rdb_type)


def test_random_damage_raises_rdb_error_or_decodes():
    rng = random.Random(15)
    for rdb_type in ALL_TYPES:
        data = rdb.write_stream_value(_sample_stream(), rdb_type, compress=rng.random() < 0.5)
        for _ in range(400):
            bad = bytearray(data)
            for _k in range(rng.randint(1, 3)):
                bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
            try:
                rdb.read_stream_value(Reader(bytes(bad)), rdb_type)
            except RdbError:
                pass


def test_node_checks():
    good = listpack.listpack_encode([1, 0, 1, b"f", 0, 2, 0, 0, b"v", 4])
    key = (5).to_bytes(8, "big") + (0).to_bytes(8, "big")

    def value(lp: bytes, length: int = 1, last=(5, 0), key=key) -> bytes:
        w = Writer()
        w.length(1)
        w.string(key)
        w.string(lp)
        w.length(length)
        w.len_id(last)
        w.length(0)
        return w.getvalue()

    s = rdb.read_stream_value(Reader(value(good)), RDB_TYPE_STREAM_LISTPACKS)
    assert s.range(MIN_ID, MAX_ID) == [((5, 0), [b"f", b"v"])]
    cases = {
        "length": value(good, length=2),
        "last id": value(good, last=(4, 0)),
        "key size": value(good, key=b"short"),
        "back count": value(listpack.listpack_encode([1, 0, 1, b"f", 0, 2, 0, 0, b"v", 5])),
        "counts": value(listpack.listpack_encode([2, 0, 1, b"f", 0, 2, 0, 0, b"v", 4])),
        "flags": value(listpack.listpack_encode([1, 0, 1, b"f", 0, 8, 0, 0, b"v", 4])),
        "terminator": value(listpack.listpack_encode([1, 0, 1, b"f", 1, 2, 0, 0, b"v", 4])),
        "extra": value(listpack.listpack_encode([1, 0, 1, b"f", 0, 2, 0, 0, b"v", 4, 9])),
        "not int": value(listpack.listpack_encode([1, 0, 1, b"f", 0, b"x", 0, 0, b"v", 4])),
        "ID 0-0": value(listpack.listpack_encode([1, 0, 1, b"f", 0, 2, 0, 0, b"v", 4]), key=bytes(16), last=(0, 0)),
    }
    for what, data in cases.items():
        with pytest.raises(RdbError):
            rdb.read_stream_value(Reader(data), RDB_TYPE_STREAM_LISTPACKS)
            pytest.fail(what)


def test_group_checks():
    def with_groups(body) -> bytes:
        w = Writer()
        for x in (0, 0, 0, 0):  # no nodes, length 0, last ID 0-0
            w.length(x)
        w.length(1)
        body(w)
        return w.getvalue()

    def pel_without_owner(w):
        w.string(b"g")
        w.len_id((0, 0))
        w.length(1)
        w.stream_id((1, 0))
        w.millis(5)
        w.length(1)
        w.length(0)

    def owner_not_in_pel(w):
        w.string(b"g")
        w.len_id((0, 0))
        w.length(0)
        w.length(1)
        w.string(b"c")
        w.millis(1)
        w.length(1)
        w.stream_id((1, 0))

    for body in (pel_without_owner, owner_not_in_pel):
        with pytest.raises(RdbError):
            rdb.read_stream_value(Reader(with_groups(body)), RDB_TYPE_STREAM_LISTPACKS)


def test_idmp_window_out_of_range_is_refused():
    s = Stream()
    data = bytearray(rdb.write_stream_value(s, RDB_TYPE_STREAM_LISTPACKS_4))
    # no nodes, length, last (2), first (2), max deleted (2), added, groups: 10 one-byte lengths,
    # then the duration 100 in the 14-bit form
    assert data[10:12] == b"\x40\x64"
    data[11] = 0
    with pytest.raises(RdbError, match="duration"):
        rdb.read_stream_value(Reader(bytes(data)), RDB_TYPE_STREAM_LISTPACKS_4)


def test_payload_footer():
    s = _sample_stream()
    p = rdb.dump_payload(s)
    # by default what Redis 8.10 writes: type 27 in RDB version 15
    assert p[0] == RDB_TYPE_STREAM_LISTPACKS_5 and p[-10:-8] == b"\x0f\x00"
    assert rdb.verify_payload(p) == 15
    assert stream_state(rdb.load_payload(p)) == stream_state(s)
    for version, kind in [(rdb.RDB_VERSION_REDIS_8_8, 27), (rdb.RDB_VERSION_REDIS_8_6, 26),
                          (rdb.RDB_VERSION_REDIS_7_2, 21), (rdb.RDB_VERSION_REDIS_7_0, 19)]:
        older = rdb.dump_payload(s, version)
        assert (older[0], int.from_bytes(older[-10:-8], "little")) == (kind, version)
        assert stream_state(rdb.load_payload(older), kind) == stream_state(s, kind)
    # a zero checksum means "not computed"
    assert rdb.verify_payload(p[:-8] + bytes(8)) == 15
    with pytest.raises(rdb.PayloadError):
        rdb.verify_payload(p[:-1] + bytes((p[-1] ^ 1,)))
    newer = p[:-10] + b"\x10\x00"
    with pytest.raises(rdb.PayloadError):
        rdb.verify_payload(newer + rdb.crc64(newer).to_bytes(8, "little"))
    # a reader of an older Redis (RDB files' own limit) refuses 14 and 15
    with pytest.raises(rdb.PayloadError):
        rdb.verify_payload(p, rdb.RDB_VERSION_REDIS_8_6)
    with pytest.raises(rdb.PayloadError):
        rdb.verify_payload(b"\x00" * 9)
    with pytest.raises(ValueError):
        rdb.dump_payload(s, rdb.RDB_VERSION_REDIS_7_0, RDB_TYPE_STREAM_LISTPACKS_4)
    with pytest.raises(ValueError):
        rdb.dump_payload(s, rdb.RDB_VERSION_REDIS_8_6, RDB_TYPE_STREAM_LISTPACKS_5)
    body = b"\x00\x03abc" + b"\x0a\x00"
    with pytest.raises(rdb.NotAStream) as e:
        rdb.load_payload(body + rdb.crc64(body).to_bytes(8, "little"))
    assert e.value.type_name == "string"
    # Redis 8.10's compact hashes (self-contained DUMP types 29 and 31) and 8.8's arrays
    for kind, name in [(29, "hash"), (31, "hash"), (28, "array")]:
        body = bytes((kind,)) + b"\x00" + b"\x0f\x00"
        with pytest.raises(rdb.NotAStream) as e:
            rdb.load_payload(body + rdb.crc64(body).to_bytes(8, "little"))
        assert e.value.type_name == name


# ---------------------------------------------------------------- the NACK zone (type 27)
def _released_stream() -> Stream:
    """Entries 1-0..5-0 read by alice; XNACK FAIL of 4-0, then FATAL of 2-0, then FORCE of
    6-0 (which nobody had pending): the zone is 4-0, 2-0, 6-0."""
    s = Stream()
    for i in range(1, 7):
        s.add(0, (i, 0), [b"f", b"%d" % i], 100, 4096)
    g = s.groups[b"g"] = ConsumerGroup(b"g", (5, 0), 5)
    c, _ = g.consumer(b"alice", 50)
    c.active_time = 60
    for i in range(1, 6):
        g.deliver((i, 0), c, 100 + i)
    g.release((4, 0), FAIL)
    g.release((2, 0), FATAL)
    g.release((6, 0), SILENT, force=True, exists=True)
    return s


def _group_section(g_pel, consumers, zone) -> bytes:
    """A type-27 group section written out by hand from the layout (not by the codec)."""
    out = bytearray(b"\x01\x01g" + b"\x05\x00" + b"\x05")   # 1 group "g", last 5-0, entries-read 5
    out += bytes((len(g_pel),))
    for (ms, seq), when, count in g_pel:
        out += ms.to_bytes(8, "big") + seq.to_bytes(8, "big") + when.to_bytes(8, "little")
        out += bytes((count,)) if count < 64 else b"\x81" + count.to_bytes(8, "big")
    out += bytes((len(consumers),))
    for name, seen, active, ids in consumers:
        out += bytes((len(name),)) + name + seen.to_bytes(8, "little") + active.to_bytes(8, "little")
        out += bytes((len(ids),)) + b"".join(ms.to_bytes(8, "big") + seq.to_bytes(8, "big") for ms, seq in ids)
    out += bytes((len(zone),)) + b"".join(ms.to_bytes(8, "big") + seq.to_bytes(8, "big") for ms, seq in zone)
    return bytes(out)


_IDMP_DEFAULTS = b"\x40\x64\x40\x64\x00\x00\x00"  # duration 100, max size 100, no producers, counters 0


def _value_before_groups(s: Stream) -> bytes:
    data = rdb.write_stream_value(s, RDB_TYPE_STREAM_LISTPACKS_5)
    return data[:data.index(b"\x01\x01g\x05\x00\x05")]


def test_type_27_writes_the_zone_after_the_consumers_in_release_order():
    s = _released_stream()
    data = rdb.write_stream_value(s, RDB_TYPE_STREAM_LISTPACKS_5)
    pel = [((1, 0), 101, 1), ((2, 0), 0, 2**63 - 1), ((3, 0), 103, 1), ((4, 0), 0, 1), ((5, 0), 105, 1),
           ((6, 0), 0, 0)]
    section = _group_section(pel, [(b"alice", 50, 60, [(1, 0), (3, 0), (5, 0)])], [(4, 0), (2, 0), (6, 0)])
    assert data == _value_before_groups(s) + section + _IDMP_DEFAULTS
    back = rdb.read_stream_value(Reader(data), RDB_TYPE_STREAM_LISTPACKS_5)
    g = back.groups[b"g"]
    assert [(i, n.consumer and n.consumer.name) for i, n in g.by_delivery_time()] == \
        [((4, 0), None), ((2, 0), None), ((6, 0), None), ((1, 0), b"alice"), ((3, 0), b"alice"), ((5, 0), b"alice")]
    assert g.nacked_count() == 3
    # what is stamped after loading comes after the zone
    c = g.consumers[b"alice"]
    g.release((1, 0), FAIL)
    assert [i for i, n in g.by_delivery_time() if n.consumer is None] == [(4, 0), (2, 0), (6, 0), (1, 0)]
    assert list(c.pel) == [(3, 0), (5, 0)]


def test_older_types_leave_released_entries_out():
    s = _released_stream()
    for kind in (RDB_TYPE_STREAM_LISTPACKS_4, RDB_TYPE_STREAM_LISTPACKS_3, RDB_TYPE_STREAM_LISTPACKS_2,
                 RDB_TYPE_STREAM_LISTPACKS):
        back = rdb.read_stream_value(Reader(rdb.write_stream_value(s, kind)), kind)
        g = back.groups[b"g"]
        assert list(g.pel) == [(1, 0), (3, 0), (5, 0)] and g.nacked_count() == 0, kind
        assert list(g.consumers[b"alice"].pel) == [(1, 0), (3, 0), (5, 0)]


@pytest.mark.parametrize("what,pel,owned,zone", [
    ("not pending", [((1, 0), 0, 1)], [], [(1, 0), (2, 0)]),
    ("owned", [((1, 0), 5, 1)], [(1, 0)], [(1, 0)]),
    ("twice", [((1, 0), 0, 1), ((2, 0), 0, 1)], [], [(1, 0), (2, 0), (1, 0)]),
    ("unowned outside the zone", [((1, 0), 0, 1), ((2, 0), 0, 1)], [], [(2, 0)]),
    ("longer than its data", [((1, 0), 0, 1)], [], [(1, 0)] * 40),
])
def test_bad_nack_zones_are_refused(what, pel, owned, zone):
    head = b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x00\x00" + b"\x00"  # empty stream: no nodes..entries-added
    consumers = [(b"c", 1, 1, owned)] if owned else []
    section = _group_section(pel, consumers, zone)
    data = head + section + _IDMP_DEFAULTS
    if what == "longer than its data":
        data = head + section[:section.rindex(bytes((40,)))] + bytes((40,)) + bytes(16)
    with pytest.raises(RdbError):
        rdb.read_stream_value(Reader(data), RDB_TYPE_STREAM_LISTPACKS_5)
    # the same group without the bad part loads: the section's layout itself is right
    if what != "longer than its data":
        good_zone = [i for i, _t, _n in pel if i not in owned]
        ok = head + _group_section(pel, consumers, good_zone) + _IDMP_DEFAULTS
        g = rdb.read_stream_value(Reader(ok), RDB_TYPE_STREAM_LISTPACKS_5).groups[b"g"]
        assert g.nacked_count() == len(good_zone)
