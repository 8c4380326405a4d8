"""Redis's RDB value encoding of streams, both ways (sans-IO).

Theory of operation
-------------------
Redis serializes a key's value the same way in an RDB file, in a DUMP payload
and in the RESTORE that MIGRATE sends: a one-byte *type* followed by the
value.  This module reads and writes that encoding for streams, so that a
stream can move between Redis and Braid (DUMP / RESTORE / MIGRATE here, the
RDB file import and export elsewhere) without going through commands.  It
does no I/O: bytes in, :class:`crdt.stream.Stream` out, and back.

The layers, bottom up (each is public; the RDB *file* reader builds on them):

- RDB's primitives, in :mod:`node.interop.rdbformat` (and importable from here):
  the constants, :class:`Reader` / :class:`Writer` (the length encoding, strings, times,
  doubles; a :class:`Reader` never reads past its buffer nor builds anything larger than
  the bytes left), :func:`crc64` and LZF (:func:`lzf_decompress`, :func:`lzf_compress`).
- Listpacks (:mod:`node.interop.listpack`): Redis's packed list, whose elements are
  integers or strings, and a stream node's layout in one.
- A stream value (:func:`read_stream_value`, :func:`write_stream_value`).
  Redis stores a stream as its radix tree of listpack *nodes*, each keyed by
  its master ID and holding a master entry (live count, deleted count, the
  master field names) then the entries (flags, ID deltas against the master
  ID, fields or only values when they match the master's, and a back count);
  then the stream's counters, the consumer groups with their PELs,
  consumers and (since Redis 8.8) NACK zones, and (since Redis 8.6) the
  idempotent-producer state.  Braid's :class:`crdt.blocks.Block` has the same
  shape, so a node becomes a block with the same entries, deleted ones
  included, and a block becomes a node.

Encodings (``STREAM_TYPES``)
    15 ``RDB_TYPE_STREAM_LISTPACKS``    Redis 5.0 - 6.2
    19 ``RDB_TYPE_STREAM_LISTPACKS_2``  Redis 7.0: first ID, max deleted ID,
                                        entries added, groups' entries read
    21 ``RDB_TYPE_STREAM_LISTPACKS_3``  Redis 7.2 - 8.4: consumers' active time
    26 ``RDB_TYPE_STREAM_LISTPACKS_4``  Redis 8.6: IDMP (duration, max size,
                                        producers' iid -> ID maps, counters)
    27 ``RDB_TYPE_STREAM_LISTPACKS_5``  Redis 8.8 - 8.10: each group's NACK zone

All five are read; any of them is written on request, 27 by default (what
Redis 8.10 writes, in RDB version 15; Redis 8.8 writes it in version 14).
Writing an older type drops what it cannot hold (the NACK zone; IDMP state;
consumers' active time; with type 15 also the counters, which the reader then
derives as Redis does).  Redis itself never writes an older type, so what an
older type does with XNACK's released entries is Braid's rule: they are left
out of the group PEL altogether, because every Redis before 8.8 needs an owner
for each PEL entry (Redis 8.6 refuses an unowned one as "Bad data format" with
``sanitize-dump-payload yes``, and without it loads one that then crashes its
XPENDING).  Such a payload carries the owned entries only; the released ones
are not pending in the target Redis.

The NACK zone (type 27)
    XNACK (Redis 8.8) releases pending entries: they stay in the group PEL with
    no owner (delivery time 0 and their delivery count), in the order they were
    released.  Type 27 writes the group PEL with them (in ID order, like every
    PEL entry) and each consumer's PEL as before; after a group's consumers
    comes the zone: a length, then each released ID as 16 raw bytes (big-endian
    ms and seq, like a PEL ID), first released first.  Loading gives those
    NACKs no consumer and stamps them in that order, so
    :meth:`crdt.groups.ConsumerGroup.by_delivery_time` serves them first and in
    release order, as Redis 8.8's time-ordered PEL does.  An ID in the zone
    must be in the group PEL, owned by no consumer and listed once; a PEL entry
    without an owner that is not in the zone is refused, as before.  The layout
    is the one independent readers agree on (librdb 2.3's
    ``handleStreamNackZoneEntry`` and its ``stream_v14_xnack`` fixture, whose
    PEL lists the released entries with delivery time 0; a Go and a Rust RDB
    decoder reading a count then 16 bytes per ID after each group's consumers).
    Redis 8.10 added no stream type (its RDB version 15 brings the compact-hash
    types 29-32); a type 28 is ``RDB_TYPE_ARRAY`` (Redis 8.8), not a stream.

A Braid stream with several origin logs (an Active-Active database) is
written as one Redis stream: the live entries of all logs merged by ID into
fresh nodes of ``stream-node-max-entries`` / ``-bytes`` (100 / 4096, Redis's
defaults).  Two origins can hold the same ID only outside strict ID mode;
Redis cannot, so the first origin's entry is written (the one reads return
first).  A stream read from Redis lands in one origin log, the ``origin``
argument.  Consumers, PELs and cursors are written as this region holds them.

Decoding checks what Redis's loader checks with deep sanitization (listpack
headers and element counts, node and entry layout, duplicate groups,
consumers and PEL entries, a consumer's PEL entry missing from the group's
PEL, an IDMP window out of range) and a few invariants Braid relies on:
entry IDs rise across the whole stream, the node counts and the stream's
length agree with the entries, and ``last-generated-id`` is not below any
entry.  Each failure is an :class:`RdbError` whose text says what is wrong.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Generator

from crdt.blocks import Block, EntryLog, restored_block, tagged
from crdt.groups import ENTRIES_READ_UNKNOWN, Consumer, ConsumerGroup, Nack, estimate_distance
from crdt.ids import MAX_ID, MIN_ID, StreamID
from crdt.stream import Stream
from node.interop.listpack import U64 as _U64
from node.interop.listpack import node_listpack, read_node, signed64

# The RDB primitives (rdbformat.py), importable from here as before rdb.py was split:
from node.interop.rdbformat import (  # noqa: F401
    DEFAULT_STREAM_TYPE,
    IDMP_DURATION_RANGE,
    IDMP_MAXSIZE_RANGE,
    MIN_VERSION_FOR_STREAM_TYPE,
    RDB_6BITLEN,
    RDB_14BITLEN,
    RDB_32BITLEN,
    RDB_64BITLEN,
    RDB_ENC_INT8,
    RDB_ENC_INT16,
    RDB_ENC_INT32,  # noqa: F401
    RDB_ENC_LZF,
    RDB_ENCVAL,
    RDB_OPCODE_AUX,
    RDB_OPCODE_EOF,
    RDB_OPCODE_EXPIRETIME,  # noqa: F401
    RDB_OPCODE_EXPIRETIME_MS,
    RDB_OPCODE_FREQ,
    RDB_OPCODE_FUNCTION2,  # noqa: F401
    RDB_OPCODE_FUNCTION_PRE_GA,
    RDB_OPCODE_IDLE,
    RDB_OPCODE_KEY_META,
    RDB_OPCODE_MODULE_AUX,  # noqa: F401
    RDB_OPCODE_RESIZEDB,
    RDB_OPCODE_SELECTDB,
    RDB_OPCODE_SLOT_INFO,  # noqa: F401
    RDB_TYPE_ARRAY,
    RDB_TYPE_HASH,
    RDB_TYPE_HASH_LISTPACK,
    RDB_TYPE_HASH_LISTPACK_EX,  # noqa: F401
    RDB_TYPE_HASH_LISTPACK_EX_PRE_GA,
    RDB_TYPE_HASH_METADATA,  # noqa: F401
    RDB_TYPE_HASH_METADATA_PRE_GA,
    RDB_TYPE_HASH_TMPL_ARRAY,
    RDB_TYPE_HASH_TMPL_ARRAY_REF,  # noqa: F401
    RDB_TYPE_HASH_TMPL_LP,
    RDB_TYPE_HASH_TMPL_LP_REF,
    RDB_TYPE_HASH_ZIPLIST,  # noqa: F401
    RDB_TYPE_HASH_ZIPMAP,
    RDB_TYPE_LIST,
    RDB_TYPE_LIST_QUICKLIST,  # noqa: F401
    RDB_TYPE_LIST_QUICKLIST_2,
    RDB_TYPE_LIST_ZIPLIST,
    RDB_TYPE_MODULE_2,  # noqa: F401
    RDB_TYPE_MODULE_PRE_GA,
    RDB_TYPE_SET,
    RDB_TYPE_SET_INTSET,
    RDB_TYPE_SET_LISTPACK,  # noqa: F401
    RDB_TYPE_STREAM_LISTPACKS,
    RDB_TYPE_STREAM_LISTPACKS_2,
    RDB_TYPE_STREAM_LISTPACKS_3,
    RDB_TYPE_STREAM_LISTPACKS_4,
    RDB_TYPE_STREAM_LISTPACKS_5,
    RDB_TYPE_STRING,
    RDB_TYPE_ZSET,
    RDB_TYPE_ZSET_2,  # noqa: F401
    RDB_TYPE_ZSET_LISTPACK,
    RDB_TYPE_ZSET_ZIPLIST,
    RDB_VERSION,
    RDB_VERSION_REDIS_7_0,  # noqa: F401
    RDB_VERSION_REDIS_7_2,
    RDB_VERSION_REDIS_8_6,
    RDB_VERSION_REDIS_8_8,  # noqa: F401
    STREAM_NODE_MAX_BYTES,
    STREAM_NODE_MAX_ENTRIES,
    STREAM_TYPE_FOR_VERSION,
    STREAM_TYPES,
    TYPE_NAMES,
    RdbError,
    Reader,
    Writer,
    crc64,
    lzf_compress,
    lzf_decompress,
)
from node.region.slicing import run_to_end


def _check_range(id_: StreamID) -> StreamID:
    if not (0 <= id_[0] <= _U64 and 0 <= id_[1] <= _U64):
        raise RdbError("stream ID out of range")
    return id_


def _read_nack_zone(reader: Reader, g: ConsumerGroup) -> set[StreamID]:
    """Type 27's NACK zone of ``g`` (after its consumers): the released IDs, first released
    first.  Each must be an unowned entry of the group PEL, listed once; it is stamped after
    every loaded entry, in zone order, so that it is served in the order it was released."""
    released: set[StreamID] = set()
    count = reader.length_value()
    if count > reader.remaining() // 16:
        raise RdbError("stream NACK zone longer than its data")
    for _ in range(count):
        id_ = reader.stream_id()
        nack = g.pel.get(id_)
        if nack is None:
            raise RdbError("NACK zone entry not found in the group's PEL")
        if nack.consumer is not None:
            raise RdbError("NACK zone entry owned by a consumer")
        if id_ in released:
            raise RdbError("duplicated NACK zone entry")
        released.add(id_)
        g._stamps += 1
        nack.stamp = g._stamps
    return released


def read_stream_value(reader: Reader, rdb_type: int, origin: int = 0) -> Stream:
    """Decode a stream value of type ``rdb_type`` (one of ``STREAM_TYPES``) from
    ``reader``; its entries land in the log of ``origin``."""
    return run_to_end(read_stream_value_steps(reader, rdb_type, origin))


def read_stream_value_steps(reader: Reader, rdb_type: int, origin: int = 0) -> Generator[None, None, Stream]:
    """:func:`read_stream_value` as steps: it pauses after each stream node."""
    if rdb_type not in STREAM_TYPES:
        raise RdbError(f"RDB type {rdb_type} is not a stream encoding")
    nodes = reader.length_value()
    log = EntryLog()
    blocks: list[Block] = []
    masters = set()
    for _ in range(nodes):
        key = reader.string()
        if len(key) != 16:
            raise RdbError("stream node key is not the size of a stream ID")
        if key in masters:
            raise RdbError("stream listpack re-added with an existing key")
        masters.add(key)
        master = (int.from_bytes(key[:8], "big"), int.from_bytes(key[8:], "big"))
        block = read_node(master, reader.string())
        if block is not None:
            blocks.append(block)
        yield
    blocks.sort(key=lambda b: b.first)
    for block in blocks:
        if log.blocks and block.first <= log.blocks[-1].last:
            raise RdbError("stream nodes overlap")
        log.blocks.append(block)
        log.firsts.append(block.first)
        log.length += block.live
    log.recount()
    length = reader.length_value()
    if length != log.length:
        raise RdbError("stream length disagrees with its entries")
    s = Stream()
    if blocks:
        s.logs[origin] = log
    s.last_id = reader.len_id()
    if blocks and s.last_id < blocks[-1].last:
        raise RdbError("stream last ID below its last entry")
    if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_2:
        s.first_id = reader.len_id()
        s.max_deleted_id = reader.len_id()
        s.entries_added = reader.length_value()
    else:
        s.max_deleted_id = MIN_ID
        s.entries_added = length
        # every node read holds a live entry (read_node drops the others): the first is found
        first = log.first_live() if blocks else None
        s.first_id = MIN_ID if first is None else first
    if s.entries_added < length:
        raise RdbError("stream entries-added below its length")

    ngroups = reader.length_value()
    for _ in range(ngroups):
        name = reader.string()
        if name in s.groups:
            raise RdbError("duplicated consumer group name")
        last = reader.len_id()
        if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_2:
            entries_read = signed64(reader.length_value())
            if entries_read < ENTRIES_READ_UNKNOWN:
                entries_read = ENTRIES_READ_UNKNOWN
        else:
            entries_read = estimate_distance(s, last)
        g = ConsumerGroup(name, last, entries_read)
        for stamp in range(1, reader.length_value() + 1):
            id_ = reader.stream_id()
            nack = Nack(None, reader.millis(), reader.length_value(), stamp)
            if id_ in g.pel:
                raise RdbError("duplicated global PEL entry in a consumer group")
            g.pel[id_] = nack
            g._stamps = stamp
        for _c in range(reader.length_value()):
            cname = reader.string()
            if cname in g.consumers:
                raise RdbError("duplicate stream consumer")
            c = Consumer(cname, reader.millis())
            c.active_time = reader.millis() if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_3 else c.seen_time
            g.consumers[cname] = c
            for _p in range(reader.length_value()):
                id_ = reader.stream_id()
                nack = g.pel.get(id_)
                if nack is None:
                    raise RdbError("consumer entry not found in the group's PEL")
                if nack.consumer is not None:
                    raise RdbError("PEL entry owned by two consumers")
                nack.consumer = c
                c.pel[id_] = nack
        released = _read_nack_zone(reader, g) if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_5 else set()
        if any(n.consumer is None and i not in released for i, n in g.pel.items()):
            raise RdbError("consumer group PEL entry without a consumer")
        s.groups[name] = g

    if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_4:
        duration = reader.length_value()
        maxsize = reader.length_value()
        if not IDMP_DURATION_RANGE[0] <= duration <= IDMP_DURATION_RANGE[1]:
            raise RdbError("stream IDMP duration out of range")
        if not IDMP_MAXSIZE_RANGE[0] <= maxsize <= IDMP_MAXSIZE_RANGE[1]:
            raise RdbError("stream IDMP max entries out of range")
        s.idmp.duration = duration
        s.idmp.maxsize = maxsize
        for _ in range(reader.length_value()):
            pid = reader.string()
            if pid in s.idmp.producers:
                raise RdbError("duplicated IDMP producer")
            m: OrderedDict[bytes, StreamID] = OrderedDict()
            for _i in range(reader.length_value()):
                iid = reader.string()
                id_ = reader.len_id()
                m.setdefault(iid, id_)  # Redis skips a duplicate iid
            s.idmp.producers[pid] = m
        s.idmp.iids_added = reader.length_value()
        s.idmp.iids_duplicates = reader.length_value()
    return s


# ---------------------------------------------------------------- stream value: encoding
def _blocks_for_export(s: Stream) -> list[Block]:
    """The nodes to write: the one log's blocks as they are, or merged logs packed anew."""
    origins = sorted(o for o, log in s.logs.items() if log.blocks)
    return run_to_end(_export_steps([s.logs[o] for o in origins], origins))


def _export_steps(logs: list[EntryLog], origins: list[int]) -> Generator[None, None, list[Block]]:
    """:func:`_blocks_for_export` of ``logs`` (the non-empty logs of ``origins``, in that
    order), pausing every ``_EXPORT_STEP`` entries of a merge."""
    if not logs:
        return []
    if len(logs) == 1:
        return list(logs[0].blocks)
    fresh = EntryLog()
    prev: StreamID | None = None
    its = [tagged(o, log.range(MIN_ID, MAX_ID)) for o, log in zip(origins, logs, strict=True)]
    n = 0
    for eid, _origin, flat in heapq.merge(*its, key=lambda e: (e[0], e[1])):
        if eid == prev:
            continue  # the same ID from a second origin: Redis holds one
        fresh.append(eid, flat, STREAM_NODE_MAX_ENTRIES, STREAM_NODE_MAX_BYTES)
        prev = eid
        n += 1
        if n % _EXPORT_STEP == 0:
            yield
    return fresh.blocks


_EXPORT_STEP = 256  # entries merged between two pauses of a sliced DUMP


def _log_copy(log: EntryLog) -> EntryLog:
    """An entry log of copies of ``log``'s blocks (their bytes copied): what a later change
    of ``log`` (an entry appended to its last block, one deleted in place) does not reach."""
    twin = EntryLog()
    for b in log.blocks:
        twin.blocks.append(restored_block(b.first, b.last, b.fields, bytearray(b.buf), b.live, b.dead, b.lp_base))
    twin.firsts = list(log.firsts)
    twin.length = log.length
    return twin


def write_stream_value(s: Stream, rdb_type: int = DEFAULT_STREAM_TYPE, compress: bool = False) -> bytes:
    """Encode ``s`` as a value of type ``rdb_type`` (the type byte is not included)."""
    w = Writer(compress)
    _write_stream_value(w, s, rdb_type)
    return w.getvalue()


def _write_stream_value(w: Writer, s: Stream, rdb_type: int) -> None:
    """:func:`write_stream_value`, appended to ``w``."""
    if rdb_type not in STREAM_TYPES:
        raise ValueError(f"RDB type {rdb_type} is not a stream encoding")
    meta = Writer(w.compress)
    _write_stream_meta(meta, s, rdb_type)
    run_to_end(_write_nodes_steps(w, _blocks_for_export(s)))
    _write_stream_ids(w, s.last_id, s.first_id, s.max_deleted_id, s.entries_added, w.nodes_live, rdb_type)
    w.raw(meta.buf)


def _write_nodes_steps(w: Writer, blocks: list[Block]) -> Generator[None, None, None]:
    """The nodes of a stream value, pausing after each; ``w.nodes_live`` counts their entries."""
    w.length(len(blocks))
    length = 0
    for block in blocks:
        w.string(block.first[0].to_bytes(8, "big") + block.first[1].to_bytes(8, "big"))
        w.string(node_listpack(block))
        length += block.live
        yield
    w.nodes_live = length


def _write_stream_ids(w: Writer, last_id: StreamID, first_id: StreamID, max_deleted_id: StreamID,
                      entries_added: int, length: int, rdb_type: int) -> None:
    """What follows a stream value's nodes: its length, last ID, and (type 19 on) first and
    largest deleted IDs and entries added."""
    w.length(length)
    w.len_id(last_id)
    if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_2:
        w.len_id(first_id)
        w.len_id(max_deleted_id)
        w.length(max(entries_added, length))


def _write_stream_meta(w: Writer, s: Stream, rdb_type: int) -> None:
    """A stream value's consumer groups and IDMP state (what follows its IDs)."""
    w.length(len(s.groups))
    for name in sorted(s.groups):
        g = s.groups[name]
        w.string(name)
        w.len_id(g.last_id)
        if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_2:
            w.length(g.entries_read & _U64)
        # Before type 27 a Redis needs an owner for every PEL entry: released ones are left out
        nack_zone = rdb_type >= RDB_TYPE_STREAM_LISTPACKS_5
        pel = [(id_, nack) for id_, nack in g.pel.items() if nack_zone or nack.consumer is not None]
        w.length(len(pel))
        for id_, nack in pel:
            w.stream_id(id_)
            w.millis(nack.delivery_time)
            w.length(max(nack.delivery_count, 0))
        w.length(len(g.consumers))
        for cname in sorted(g.consumers):
            c = g.consumers[cname]
            w.string(cname)
            w.millis(c.seen_time)
            if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_3:
                w.millis(c.active_time)
            w.length(len(c.pel))
            for id_ in c.pel:
                w.stream_id(id_)
        if nack_zone:
            released = [id_ for id_, nack in g.by_delivery_time() if nack.consumer is None]
            w.length(len(released))
            for id_ in released:
                w.stream_id(id_)
    if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_4:
        idmp = s.idmp
        w.length(min(max(idmp.duration, IDMP_DURATION_RANGE[0]), IDMP_DURATION_RANGE[1]))
        w.length(min(max(idmp.maxsize, IDMP_MAXSIZE_RANGE[0]), IDMP_MAXSIZE_RANGE[1]))
        producers = {pid: m for pid, m in idmp.producers.items() if m}
        w.length(len(producers))
        for pid in sorted(producers):
            m = producers[pid]
            w.string(pid)
            w.length(len(m))
            for iid, id_ in m.items():
                w.string(iid)
                w.len_id(id_)
        w.length(idmp.iids_added)
        w.length(idmp.iids_duplicates)


# ---------------------------------------------------------------- DUMP payloads
class PayloadError(ValueError):
    """A DUMP payload whose footer is wrong (version too new, or checksum)."""


class NotAStream(ValueError):
    """A well-formed payload of another Redis type; ``type_name`` says which."""

    def __init__(self, rdb_type: int) -> None:
        self.rdb_type = rdb_type
        self.type_name = TYPE_NAMES.get(rdb_type, f"type {rdb_type}")
        super().__init__(f"a {self.type_name} value")


def dump_payload(s: Stream, rdb_version: int = RDB_VERSION, rdb_type: int | None = None,
                 compress: bool = False) -> bytes:
    """``createDumpPayload``: type byte, value, RDB version (2 bytes LE), CRC-64 (8 bytes LE).

    ``rdb_type`` defaults to the stream type ``rdb_version`` writes; a DUMP for a
    Redis 7.0 is ``dump_payload(s, RDB_VERSION_REDIS_7_0)``."""
    return run_to_end(dump_payload_steps(s, rdb_version, rdb_type, compress, snapshot=False))


def dump_payload_steps(s: Stream, rdb_version: int = RDB_VERSION, rdb_type: int | None = None,
                       compress: bool = False, snapshot: bool = True) -> Generator[None, None, bytes]:
    """:func:`dump_payload` as steps (a node each): a generator whose return value is the
    payload.  With ``snapshot``, what it encodes is taken now - the stream's groups, IDMP
    state and IDs encoded, its blocks copied - so that the stream may change between the
    steps (a sliced DUMP: node/region/slicing.py); without, the stream must not change until the end."""
    if rdb_type is None:
        rdb_type = STREAM_TYPE_FOR_VERSION.get(rdb_version)
        if rdb_type is None:
            raise ValueError(f"no stream encoding for RDB version {rdb_version}")
    if MIN_VERSION_FOR_STREAM_TYPE[rdb_type] > rdb_version:
        raise ValueError(f"RDB version {rdb_version} cannot hold stream type {rdb_type}")
    if rdb_type not in STREAM_TYPES:
        raise ValueError(f"RDB type {rdb_type} is not a stream encoding")
    meta = Writer(compress)
    _write_stream_meta(meta, s, rdb_type)
    ids = (s.last_id, s.first_id, s.max_deleted_id, s.entries_added)
    origins = sorted(o for o, log in s.logs.items() if log.blocks)
    logs = [_log_copy(s.logs[o]) if snapshot else s.logs[o] for o in origins]
    return _dump_steps(logs, origins, meta, ids, rdb_version, rdb_type, compress)


def _dump_steps(logs: list[EntryLog], origins: list[int], meta: Writer, ids: tuple, rdb_version: int,
                rdb_type: int, compress: bool) -> Generator[None, None, bytes]:
    blocks = yield from _export_steps(logs, origins)
    # one buffer, copied once at the end (a large stream's payload is tens of megabytes)
    w = Writer(compress)
    w.byte(rdb_type)
    yield from _write_nodes_steps(w, blocks)
    last_id, first_id, max_deleted_id, entries_added = ids
    _write_stream_ids(w, last_id, first_id, max_deleted_id, entries_added, w.nodes_live, rdb_type)
    w.raw(meta.buf)
    w.raw(rdb_version.to_bytes(2, "little"))
    w.raw(crc64(w.buf).to_bytes(8, "little"))
    return w.getvalue()


def verify_payload(payload: bytes, max_version: int = RDB_VERSION) -> int:
    """``verifyDumpPayload``: the payload's RDB version, or :class:`PayloadError`.
    A zero checksum means "not computed" and is accepted, as Redis does."""
    if len(payload) < 10:
        raise PayloadError("payload shorter than its footer")
    version = int.from_bytes(payload[-10:-8], "little")
    if version > max_version:
        raise PayloadError(f"RDB version {version} is newer than {max_version}")
    crc = int.from_bytes(payload[-8:], "little")
    if crc and crc64(memoryview(payload)[:-8]) != crc:
        raise PayloadError("checksum mismatch")
    return version


def load_payload(payload: bytes, origin: int = 0) -> Stream:
    """A DUMP payload's stream.  Raises :class:`PayloadError` (footer), :class:`NotAStream`
    (another type, well-formed footer) or :class:`RdbError` (malformed value)."""
    verify_payload(payload)
    return run_to_end(load_payload_steps(payload, origin))


def load_payload_steps(payload: bytes, origin: int = 0) -> Generator[None, None, Stream]:
    """:func:`load_payload` of a payload already verified (:func:`verify_payload`), as steps
    (a stream node each): a generator whose return value is the stream.  The payload is not
    changed meanwhile (bytes), and the stream is nobody else's until it returns."""
    r = Reader(payload, end=len(payload) - 10)
    rdb_type = r.byte()
    if rdb_type == RDB_OPCODE_KEY_META:
        raise RdbError("key metadata (module key metadata classes) is not supported")
    if rdb_type not in STREAM_TYPES:
        raise NotAStream(rdb_type)
    s = yield from read_stream_value_steps(r, rdb_type, origin)
    if not r.at_end():
        raise RdbError("trailing bytes after the stream value")
    return s
