"""The whole state of a region as data: the schema of snapshots and full-resync images.

Theory of operation
-------------------
A snapshot (and a full-resync image, which is a snapshot sent to a peer) holds
the keyspace and the causal log of :mod:`crdt`.  They are written as msgpack
through the msgspec Structs below - one Struct per core object, every field
named - and read back with a decoder typed by the same Structs.  A decoder of
that kind only ever builds these Structs, ints, bytes, lists and tuples, and
fails with a :class:`StateFormatError` on anything else: a damaged or hostile
body can produce an error, never run code or build an arbitrary object.  The
Structs are then turned into the core objects by :func:`to_state`, which checks
what the core relies on and the schema cannot say (below).

What is stored, per object (``crdt/`` holds the meaning of each field)::

    State      keys: Keyspace, causal: CausalLog | nil
    Keyspace   active_active, streams (in the keyspace's order), key_contexts,
               group_contexts, id_floor, idmp_kept (IDMP maps of dropped keys)
    Stream     key, last_id, first_id, max_deleted_id, entries_added,
               logs (origin, blocks; in the stream's order), groups, idmp
    Block      first, last, master fields, buf (the packed entries, as they are
               in memory: crdt/blocks.py), live, dead, lp_base
    Group      name, last_id, entries_read, floor, stamp counter, consumers,
               PEL (id, consumer's index or -1, delivery time, count, stamp),
               created_deps, created_dot, cursors, watermarks, acked_sent
               (a PEL entry without a consumer, -1, is one XNACK released: the
               NACK zone is those entries in stamp order, so a snapshot keeps it
               with no field of its own, and snapshots written before XNACK
               existed - which hold no such entry - load unchanged)
    Consumer   name, seen_time, active_time
    Idmp       duration, maxsize, iids_added, iids_duplicates, producers (pid,
               [(iid, entry id)] oldest first), dots ((pid, iid) -> dot),
               cleared ((pid, iid) an XCFGSET cleared; absent in older files)
    CausalLog  region, vv, log (the backlog), pending, base, floor, seen, heads
               (per origin, the digest of its history at vv: crdt/causal.py;
               absent in older files, whose histories are then unknown until
               learnt from a peer)
    Envelope   origin, n, deps, op (the operation's codec bytes, node/activeactive/opcodec.py)

Not stored, rebuilt instead: an entry log's ``firsts`` (the blocks' first IDs)
and ``length`` (the blocks' live counts), its cache of decoded blocks (empty),
a group's and a consumer's name (their key), a consumer's own PEL (the group
PEL's entries of that consumer, sharing each pending entry with the group as
in memory) and a pending envelope's key (its dot).

Checked when read, so that a hostile or damaged body is refused instead of
crashing the region later: IDs are two unsigned 64-bit integers; names of keys,
origins, groups, consumers, producers and pending dots are unique where the
core keys a table by them; a PEL entry names a consumer of its group; an entry
log's blocks are ordered (each block's first <= last < the next block's first)
and not empty; and, with ``verify_blocks`` (the default), every block's packed
entries are walked once: they must parse to the end of the buffer with IDs
rising from the block's first to its last, the block's live and deleted counts
and each entry's field count (a master-fields entry has as many values as the
block has master fields).  What stays trusted: ``lp_base`` (it only decides
when a new block opens), counters (entries_added, IDMP counts, stamps), and
the causal log's consistency (a peer could send the same operations anyway).
Operations inside envelopes stay bytes; they are decoded, and refused if they
are not operations, when they are applied (node/activeactive/region.py).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Annotated

import msgspec
from msgspec import Meta, Struct

from crdt.blocks import DELETED, SAMEFIELDS, EntryLog, restored_block
from crdt.causal import HISTORY_WINDOW, CausalLog, Envelope
from crdt.groups import Consumer, ConsumerGroup, Nack
from crdt.idmp import IdmpState
from crdt.ops import Keyspace
from crdt.pel import PendingMap
from crdt.stream import Stream
from node.persistence.safe_encode import encode_buffer


class StateFormatError(ValueError):
    """The body is not a valid state: the message says what is wrong."""


U64 = Annotated[int, Meta(ge=0)]  # msgpack holds at most an unsigned 64-bit integer
Count = Annotated[int, Meta(ge=0)]
ID = tuple[U64, U64]
VV = dict[int, int]
Dot = tuple[int, int]


class _S(Struct, array_like=True, forbid_unknown_fields=True):
    """Every body Struct: an array of its fields in order (no names repeated per object)."""


class BlockS(_S):
    first: ID
    last: ID
    fields: tuple[bytes, ...]
    buf: bytearray
    live: Count
    dead: Count
    lp_base: Count


class LogS(_S):
    origin: int
    blocks: list[BlockS]


class ConsumerS(_S):
    name: bytes
    seen_time: int
    active_time: int


class NackS(_S):
    id: ID
    consumer: int  # index into the group's consumers, -1 for none
    delivery_time: int
    delivery_count: int
    stamp: int


class GroupS(_S):
    name: bytes
    last_id: ID
    entries_read: int
    floor: ID
    stamps: int
    consumers: list[ConsumerS]
    pel: list[NackS]
    created_deps: VV | None
    created_dot: Dot | None
    cursors: dict[int, ID]
    watermarks: dict[int, ID]
    acked_sent: dict[int, ID]


class ProducerS(_S):
    pid: bytes
    iids: list[tuple[bytes, ID]]  # oldest first


class IdmpS(_S):
    duration: int
    maxsize: int
    iids_added: int
    iids_duplicates: int
    producers: list[ProducerS]
    dots: list[tuple[bytes, bytes, Dot]]
    cleared: list[tuple[bytes, bytes]] = []  # iids an XCFGSET cleared, kept until stable (none: older files)


class StreamS(_S):
    key: bytes
    last_id: ID
    first_id: ID
    max_deleted_id: ID
    entries_added: int
    logs: list[LogS]
    groups: list[GroupS]
    idmp: IdmpS


class KeyspaceWithoutTopsS(_S):
    """The keyspace as versions before the highest added IDs read it (they refuse a seventh
    element): written for them only (a full-resync image for a peer without history digests,
    which came in the same version)."""
    active_active: bool
    streams: list[StreamS]
    key_contexts: list[tuple[bytes, VV]]
    group_contexts: list[tuple[bytes, bytes, VV]]
    id_floor: list[tuple[bytes, ID]]
    idmp_kept: list[tuple[bytes, IdmpS]]


class KeyspaceS(KeyspaceWithoutTopsS):
    highest_added: list[tuple[bytes, int, ID]] = []  # (key, origin log, ID); none: older files


class EnvelopeS(_S):
    origin: int
    n: int
    deps: tuple[tuple[int, int], ...]
    op: bytes


class CausalWithoutDigestsS(_S):
    """The causal log as versions before history digests read it (they refuse an eighth
    element): written for them only (a full-resync image for such a peer)."""
    region: int
    vv: VV
    log: list[EnvelopeS]
    pending: list[EnvelopeS]
    base: Count
    floor: VV
    seen: dict[int, VV]


class CausalS(CausalWithoutDigestsS):
    heads: dict[int, int] = {}


class StateS(_S):
    keys: KeyspaceS
    causal: CausalS | None


class StateOutS(_S):
    """:class:`StateS` as written: its fields may be the forms older versions read (an
    encoder writes each Struct as its own class, so the bytes are StateS's)."""
    keys: KeyspaceWithoutTopsS
    causal: CausalWithoutDigestsS | None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(StateS)


# ------------------------------------------------------------------ encoding
def encode(keys, causal: CausalLog | None, digests: bool = True) -> bytes:
    """The state as msgpack bytes (runs on the event loop: kept to one pass, no copies of blocks).
    ``digests`` False leaves the histories' digests out, as older versions wrote it."""
    return bytes(encode_into_buffer(keys, causal, digests))


def encode_into_buffer(keys, causal: CausalLog | None, digests: bool = True) -> bytearray:
    """:func:`encode` in a bytearray, not copied into bytes (a snapshot copies it once, into the
    file's bytes).  MemoryError if memory runs out (msgspec's ``encode`` would crash the process
    instead: node/persistence/safe_encode.py)."""
    return encode_buffer(_encoder, StateOutS(_keyspace_out(keys, digests),
                                             None if causal is None else _causal_out(causal, digests)))


def _keyspace_out(keys, tops: bool = True) -> KeyspaceS | KeyspaceWithoutTopsS:
    parts = (
        getattr(keys, "active_active", False),
        [_stream_out(k, s) for k, s in keys.items()],
        list(getattr(keys, "key_contexts", {}).items()),
        [(k, g, vv) for (k, g), vv in getattr(keys, "group_contexts", {}).items()],
        list(getattr(keys, "id_floor", {}).items()),
        [(k, _idmp_out(m)) for k, m in getattr(keys, "idmp_kept", {}).items()],
    )
    if not tops:
        return KeyspaceWithoutTopsS(*parts)
    return KeyspaceS(*parts, [(k, o, top) for k, t in getattr(keys, "highest_added", {}).items()
                              for o, top in t.items()])


def _stream_out(key: bytes, s: Stream) -> StreamS:
    return StreamS(
        key, s.last_id, s.first_id, s.max_deleted_id, s.entries_added,
        [LogS(origin, [BlockS(b.first, b.last, b.fields, b.buf, b.live, b.dead, b.lp_base) for b in log.blocks])
         for origin, log in s.logs.items()],
        [_group_out(g) for g in s.groups.values()],
        _idmp_out(s.idmp),
    )


def _group_out(g: ConsumerGroup) -> GroupS:
    index = {name: i for i, name in enumerate(g.consumers)}
    return GroupS(
        g.name, g.last_id, g.entries_read, g.floor, g._stamps,
        [ConsumerS(c.name, c.seen_time, c.active_time) for c in g.consumers.values()],
        [NackS(id_, -1 if n.consumer is None else index[n.consumer.name], n.delivery_time, n.delivery_count,
               n.stamp) for id_, n in g.pel.items()],
        g.created_deps, g.created_dot, g.cursors, g.watermarks, g.acked_sent,
    )


def _idmp_out(m: IdmpState) -> IdmpS:
    return IdmpS(m.duration, m.maxsize, m.iids_added, m.iids_duplicates,
                 [ProducerS(pid, list(iids.items())) for pid, iids in m.producers.items()],
                 [(pid, iid, dot) for (pid, iid), dot in m.dots.items()], sorted(m.cleared))


def _envelope_out(e: Envelope) -> EnvelopeS:
    return EnvelopeS(e.origin, e.n, e.deps, e.op)


def _causal_out(c: CausalLog, digests: bool = True) -> CausalS | CausalWithoutDigestsS:
    log, pending = [_envelope_out(e) for e in c.log], [_envelope_out(e) for e in c.pending.values()]
    if not digests:
        return CausalWithoutDigestsS(c.region, c.vv, log, pending, c.base, c.floor, c.seen)
    return CausalS(c.region, c.vv, log, pending, c.base, c.floor, c.seen, c.held_heads())


# ------------------------------------------------------------------ decoding
def decode(body: bytes | memoryview, verify_blocks: bool = True) -> tuple[Keyspace, CausalLog | None]:
    """The keyspace and causal log a body holds; StateFormatError if it is not a valid state."""
    try:
        state = _decoder.decode(body)
    except msgspec.DecodeError as e:  # ValidationError is a DecodeError
        raise StateFormatError(str(e)) from None
    return to_state(state, verify_blocks)


def to_state(state: StateS, verify_blocks: bool = True) -> tuple[Keyspace, CausalLog | None]:
    return _keyspace_in(state.keys, verify_blocks), None if state.causal is None else _causal_in(state.causal)


def _unique(names, what: str) -> None:
    names = list(names)
    if len(set(names)) != len(names):
        raise StateFormatError(f"{what} appear twice")


def _keyspace_in(ks: KeyspaceS, verify: bool) -> Keyspace:
    keys = Keyspace(active_active=ks.active_active)
    for ss in ks.streams:
        if ss.key in keys:
            raise StateFormatError(f"key {ss.key!r} appears twice")
        keys[ss.key] = _stream_in(ss, verify)
    keys.key_contexts = dict(ks.key_contexts)
    keys.group_contexts = {(k, g): vv for k, g, vv in ks.group_contexts}
    keys.id_floor = dict(ks.id_floor)
    keys.idmp_kept = {k: _idmp_in(m) for k, m in ks.idmp_kept}
    for k, origin, top in ks.highest_added:
        tops = keys.highest_added.setdefault(k, {})
        if origin in tops:
            raise StateFormatError("the highest added ID of one key's origin log appears twice")
        tops[origin] = top
    for table, pairs, what in ((keys.key_contexts, ks.key_contexts, "key contexts"),
                               (keys.group_contexts, ks.group_contexts, "group contexts"),
                               (keys.id_floor, ks.id_floor, "ID floors"),
                               (keys.idmp_kept, ks.idmp_kept, "kept IDMP maps")):
        if len(table) != len(pairs):
            raise StateFormatError(f"{what} of one key appear twice")
    return keys


def _stream_in(ss: StreamS, verify: bool) -> Stream:
    s = Stream.__new__(Stream)
    s.last_id, s.first_id, s.max_deleted_id, s.entries_added = ss.last_id, ss.first_id, ss.max_deleted_id, \
        ss.entries_added
    s.logs = {}
    for ls in ss.logs:
        if ls.origin in s.logs:
            raise StateFormatError(f"stream {ss.key!r}: origin {ls.origin} has two entry logs")
        s.logs[ls.origin] = _log_in(ss.key, ls, verify)
    s.groups = {}
    for gs in ss.groups:
        if gs.name in s.groups:
            raise StateFormatError(f"stream {ss.key!r}: group {gs.name!r} appears twice")
        s.groups[gs.name] = _group_in(ss.key, gs)
    s.idmp = _idmp_in(ss.idmp)
    return s


def _log_in(key: bytes, ls: LogS, verify: bool) -> EntryLog:
    log = EntryLog()
    blocks, firsts = log.blocks, log.firsts
    length = 0
    prev_last = None
    for bs in ls.blocks:
        first, last, buf = bs.first, bs.last, bs.buf
        if last < first or (prev_last is not None and first <= prev_last):
            raise StateFormatError(f"{_where(key, ls, bs)}: blocks out of order")
        if bs.live + bs.dead == 0 or len(buf) < 3 or buf[0] > (DELETED | SAMEFIELDS) or buf[1] or buf[2]:
            raise StateFormatError(f"{_where(key, ls, bs)}: empty, or its first entry is not its first ID")
        b = restored_block(first, last, bs.fields, buf, bs.live, bs.dead, bs.lp_base)
        if verify:
            try:
                b.check()
            except ValueError as e:
                raise StateFormatError(f"{_where(key, ls, bs)}: {e}") from None
        blocks.append(b)
        firsts.append(first)
        length += bs.live
        prev_last = last
    log.length = length
    log.recount()
    return log


def _where(key: bytes, ls: LogS, bs: BlockS) -> str:
    return f"stream {key!r}, origin {ls.origin}, block {bs.first[0]}-{bs.first[1]}"


def _group_in(key: bytes, gs: GroupS) -> ConsumerGroup:
    g = ConsumerGroup(gs.name, gs.last_id, gs.entries_read)
    g.floor, g._stamps = gs.floor, gs.stamps
    g.created_deps, g.created_dot = gs.created_deps, gs.created_dot
    g.cursors, g.watermarks, g.acked_sent = gs.cursors, gs.watermarks, gs.acked_sent
    consumers = []
    for cs in gs.consumers:
        consumer = Consumer(cs.name, cs.seen_time)
        consumer.active_time = cs.active_time
        consumers.append(consumer)
        g.consumers[cs.name] = consumer
    if len(g.consumers) != len(consumers):
        raise StateFormatError(f"stream {key!r}, group {gs.name!r}: a consumer appears twice")
    ncons = len(consumers)
    pel = []
    own: list[list] = [[] for _ in consumers]
    for ns in gs.pel:
        ci = ns.consumer
        if ci < -1 or ci >= ncons:
            raise StateFormatError(f"stream {key!r}, group {gs.name!r}: a pending entry names no consumer")
        c = None if ci < 0 else consumers[ci]
        nack = Nack(c, ns.delivery_time, ns.delivery_count, ns.stamp)
        pel.append((ns.id, nack))
        if c is not None:
            own[ci].append((ns.id, nack))
    g.pel = PendingMap(pel)
    if len(g.pel) != len(pel):
        raise StateFormatError(f"stream {key!r}, group {gs.name!r}: an entry is pending twice")
    for consumer, items in zip(consumers, own, strict=True):
        consumer.pel = PendingMap(items)
    return g


def _idmp_in(ms: IdmpS) -> IdmpState:
    m = IdmpState(ms.duration, ms.maxsize)
    m.iids_added, m.iids_duplicates = ms.iids_added, ms.iids_duplicates
    for ps in ms.producers:
        if ps.pid in m.producers:
            raise StateFormatError(f"IDMP producer {ps.pid!r} appears twice")
        m.producers[ps.pid] = OrderedDict(ps.iids)
    m.dots = {(pid, iid): dot for pid, iid, dot in ms.dots}
    m.cleared = {(pid, iid) for pid, iid in ms.cleared if iid in m.producers.get(pid, ())}
    if len(m.cleared) != len(ms.cleared):
        raise StateFormatError("an IDMP iid marked cleared is not in its producer's map")
    return m


def _envelope_in(es: EnvelopeS) -> Envelope:
    return Envelope(es.origin, es.n, es.deps, es.op)


def _causal_in(cs: CausalS) -> CausalLog:
    c = CausalLog(cs.region)
    c.vv, c.base, c.floor, c.seen = cs.vv, cs.base, cs.floor, cs.seen
    for origin, digest in cs.heads.items():
        if not c.vv.get(origin, 0) or digest >> 64:
            raise StateFormatError(f"a history digest for origin {origin}, which has no operations, or too large")
        c.heads[origin] = digest
        c.recent[origin] = deque([digest], maxlen=HISTORY_WINDOW)
    c.log = [_envelope_in(e) for e in cs.log]
    c.pending = {(e.origin, e.n): _envelope_in(e) for e in cs.pending}
    c.index_pending()
    c.pending_bytes = sum(len(e.op) for e in c.pending.values())  # codec bytes (EnvelopeS.op)
    if len(c.pending) != len(cs.pending):
        raise StateFormatError("a pending operation appears twice")
    return c
