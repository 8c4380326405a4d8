"""One origin region's entry log, packed in blocks (as Redis's t_stream.c).

Theory of operation
-------------------
Redis keeps a stream as a radix tree of listpacks: each listpack ("node") holds
up to ``stream-node-max-entries`` entries or ``stream-node-max-bytes`` bytes,
starts with a *master entry* whose field names later entries can share, and
stores every entry's ID as a delta against the node's first ID.  Deleting an
entry only sets a flag; a node whose entries are all deleted is freed, and
``MAXLEN ~`` frees whole nodes only.

Braid keeps exactly that shape, with a Python-friendly byte format.  An
:class:`EntryLog` is a list of :class:`Block` objects ordered by first ID, with
a parallel list of first IDs so ``bisect`` finds the block holding any ID in
O(log n).  Each block's entries live in one ``bytearray``::

    Block
    +-------------------------------------------------------------------+
    | first=(ms,seq)   master fields=(f1, f2, ...)   live   dead   last  |
    +-------------------------------------------------------------------+
    buf:  entry entry entry ...
    entry:
    +-------+----------+-----------+---------------------------------------+
    | flags | ms-delta | seq-delta | SAMEFIELDS set:   vlen v ... (n times)  |
    |  u8   | uvarint  | zigzag    | otherwise: n (flen f vlen v) ... n times|
    +-------+----------+-----------+---------------------------------------+
    flags: bit 0 DELETED, bit 1 SAMEFIELDS (field names equal the master's)
    uvarint: LEB128; zigzag: signed LEB128 (a seq delta may be negative)

When to open a new block must match Redis to the byte, because it decides what
``MAXLEN ~`` removes.  So each block also tracks ``lp_base``: the size in bytes
the same entries would take in a Redis listpack (listpack's integer and string
encodings plus back-lengths), and the new-node rule of ``streamAppendItem`` is
applied to that number.  The block's own buffer is smaller than the listpack.
The flags, the varints, the listpack size arithmetic and the walk over packed entries
without a block are crdt/blockformat.py (compiled with this module).

Memory
------
Each log counts what it holds as it changes (``nbytes``: its blocks, ``decoded_bytes``: the
decoded blocks it caches for readers), so what a region holds is known at any moment without
walking its blocks (``maxmemory``, INFO memory).  The counts are estimates of what Python
allocates for them, calibrated against ``tracemalloc``: a block costs its buffer (plus a
sixteenth for what a growing ``bytearray`` reserves) and ``BLOCK_BYTES`` of bookkeeping; a
decoded block costs ``DECODED_ENTRY_BYTES`` per entry (the tuples, the ID, the field list, the
reply encoding a reader memoises) and twice its buffer (the values as ``bytes`` objects and in
the memoised replies).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from .blockformat import (
    _LP_EMPTY,
    _U64,
    DELETED,
    LISTPACK_MAX_SIZE,
    SAMEFIELDS,
    _put_bytes,
    _put_uvarint,
    _s64,
    _skip_values,
    _uvarint_tail,
    entry_starts,  # noqa: F401 (pipeline/source.py and tests import it from here)
    lp_int_size,
    lp_str_size,
)
from .copying import copy_attributes
from .ids import StreamID

BLOCK_BYTES = 300          # a Block, its bytearray's header, its first ID in ``firsts``
DECODED_ENTRY_BYTES = 600  # a decoded entry's objects, but for its values (see "Memory" above)

# A decoded entry: (id, flat [f1, v1, f2, v2, ...], deleted, offset in buf)
Decoded = tuple[StreamID, list, bool, int]
_entry_id = itemgetter(0)  # a decoded entry's ID: what a range bisects a decoded block on
_id_and_fields = itemgetter(0, 1)  # a decoded entry as reads return it: (id, flat)


class Block:
    __slots__ = ("first", "last", "fields", "buf", "live", "dead", "lp_base")

    def __init__(self, first: StreamID, fields: tuple) -> None:
        self.first = first
        self.last = first
        self.fields = fields  # master entry field names
        self.buf = bytearray()
        self.live = 0
        self.dead = 0
        # listpack bytes of everything except the live/dead counters
        self.lp_base = _LP_EMPTY + lp_int_size(len(fields)) + lp_int_size(0)
        self.lp_base += sum(lp_str_size(f) for f in fields)

    def __deepcopy__(self, memo: dict) -> Block:
        return copy_attributes(self, Block(self.first, self.fields), ('last', 'buf', 'live', 'dead', 'lp_base'), memo)

    @property
    def lp_bytes(self) -> int:
        live, dead = self.live, self.dead
        return (self.lp_base + (2 if live < 128 else lp_int_size(live))
                + (2 if dead < 128 else lp_int_size(dead)))

    def append(self, id_: StreamID, flat: Sequence[bytes]) -> None:
        fields = self.fields
        n = len(flat) // 2
        same = n == len(fields) and len(flat) == 2 * n
        if same:  # the field names are the master entry's (compared in place: no tuple built)
            for k in range(n):
                if flat[2 * k] != fields[k]:
                    same = False
                    break
        out = self.buf
        out.append(SAMEFIELDS if same else 0)
        msd = id_[0] - self.first[0]
        seqd = id_[1] - self.first[1]
        zseq = (seqd << 1) if seqd >= 0 else ((-seqd) << 1) - 1
        if msd < 0x80 and zseq < 0x80:  # the usual entry: a few ms and sequence numbers after the first
            out.append(msd)
            out.append(zseq)
        else:
            _put_uvarint(out, msd)
            _put_uvarint(out, zseq)
        # listpack bytes of flags, ms-delta and seq-delta (small ints take 2)
        lp = 2 + (2 if 0 <= msd <= 127 else lp_int_size(_s64(msd))) \
            + (2 if 0 <= seqd <= 127 else lp_int_size(_s64(seqd)))
        if same:
            for i in range(1, 2 * n, 2):
                v = flat[i]
                if len(v) < 0x80:  # _put_bytes, inlined for the usual short value
                    out.append(len(v))
                    out += v
                else:
                    _put_bytes(out, v)
                lp += lp_str_size(v)
            lp += 2 if n < 125 else lp_int_size(n + 3)
        else:
            _put_uvarint(out, n)
            for x in flat:
                _put_bytes(out, x)
                lp += lp_str_size(x)
            lp += lp_int_size(n) + lp_int_size(2 * n + 4)
        self.lp_base += lp
        self.live += 1
        self.last = id_

    def decode(self) -> list[Decoded]:
        """Every entry of the block, deleted ones included, in ID order."""
        buf = bytes(self.buf)
        fields = self.fields
        nf = len(fields)
        fms, fseq = self.first
        out: list[Decoded] = []
        append = out.append
        i, end = 0, len(buf)
        while i < end:
            start = i
            flags = buf[i]
            i += 1
            v = buf[i]
            i += 1
            if v >= 0x80:
                v &= 0x7F
                shift = 7
                while True:
                    b = buf[i]
                    i += 1
                    v |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
            ms = fms + v
            v = buf[i]
            i += 1
            if v >= 0x80:
                v &= 0x7F
                shift = 7
                while True:
                    b = buf[i]
                    i += 1
                    v |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
            seq = fseq + ((v >> 1) if not v & 1 else -((v + 1) >> 1))
            if flags & SAMEFIELDS:
                flat: list = [None] * (2 * nf)
                flat[0::2] = fields
                for k in range(1, 2 * nf, 2):
                    n = buf[i]
                    i += 1
                    if n >= 0x80:
                        n, i = _uvarint_tail(buf, i, n)
                    flat[k] = buf[i:i + n]
                    i += n
            else:
                n = buf[i]
                i += 1
                if n >= 0x80:
                    n, i = _uvarint_tail(buf, i, n)
                flat = []
                for _ in range(2 * n):
                    m = buf[i]
                    i += 1
                    if m >= 0x80:
                        m, i = _uvarint_tail(buf, i, m)
                    flat.append(buf[i:i + m])
                    i += m
            append(((ms, seq), flat, bool(flags & DELETED), start))
        return out

    def check(self) -> None:
        """Walk the packed entries (the layout :meth:`decode` reads) without building them, and
        raise ValueError unless they parse to the end with rising IDs below 2^64 and agree with
        the block's last ID and counts: a block from a peer's image is checked once, so that
        reads of it never meet a malformed one."""
        buf, nf = self.buf, len(self.fields)
        fms, fseq = self.first
        end = len(buf)
        i = count = dead = 0
        pms, pseq = -1, 0
        uv = _uvarint_tail
        try:
            while i < end:
                flags = buf[i]
                if flags > (DELETED | SAMEFIELDS):
                    raise ValueError(f"entry {count} has unknown flags {flags}")
                v = buf[i + 1]
                i += 2
                if v >= 0x80:
                    v, i = uv(buf, i, v)
                z = buf[i]
                i += 1
                if z >= 0x80:
                    z, i = uv(buf, i, z)
                ms, seq = fms + v, fseq + (-((z + 1) >> 1) if z & 1 else z >> 1)
                if ms > _U64 or not 0 <= seq <= _U64 or ms < pms or (ms == pms and seq <= pseq):
                    raise ValueError(f"entry {count} has ID {ms}-{seq} out of order or range")
                pms, pseq = ms, seq
                i = _skip_values(buf, i, flags, nf)
                if i > end:
                    raise IndexError
                count += 1
                dead += flags & DELETED
        except IndexError:
            raise ValueError(f"entry {count} runs past the end of the block") from None
        if (pms, pseq) != self.last or count != self.live + self.dead or dead != self.dead:
            raise ValueError("the block's entries do not match its counts or its last ID")

    def mark_deleted(self, offset: int) -> None:
        self.buf[offset] |= DELETED
        self.live -= 1
        self.dead += 1


def block_bytes(block: Block) -> int:
    """What a block holds in memory (see "Memory" above)."""
    n = len(block.buf)
    return n + (n >> 4) + BLOCK_BYTES


def decoded_bytes(block: Block, entries: list) -> int:
    """What a block's decoded entries hold in memory (see "Memory" above)."""
    return len(entries) * DECODED_ENTRY_BYTES + 2 * len(block.buf)


def restored_block(first: StreamID, last: StreamID, fields: tuple, buf: bytearray, live: int, dead: int,
                   lp_base: int) -> Block:
    """A block as a snapshot holds it, counts and listpack size included (not checked here)."""
    b = Block(first, fields)
    b.last, b.buf, b.live, b.dead, b.lp_base = last, buf, live, dead, lp_base
    return b


def packed_entries(first: StreamID, fields: tuple, buf: bytes | bytearray) -> list[Decoded]:
    """Every entry (deleted ones included, in ID order) of a block given as its first ID, its
    master fields and its packed bytes, as ``XRANGEORIGIN ... PACKED`` sends it: what a reader
    outside the region (the Spark source) decodes such a block with, :meth:`Block.decode`."""
    return restored_block(first, first, fields, bytearray(buf), 0, 0, 0).decode()


class TrimSpec:
    """What a trim asks for (XADD's and XTRIM's MAXLEN / MINID options)."""

    __slots__ = ("maxlen", "minid", "approx", "limit")

    def __init__(self, maxlen: int | None = None, minid: StreamID | None = None,
                 approx: bool = False, limit: int = 0) -> None:
        self.maxlen = maxlen
        self.minid = minid
        self.approx = approx
        self.limit = limit


class EntryLog:
    """The entries minted by one origin region, in ID order."""

    __slots__ = ("blocks", "firsts", "length", "nbytes", "decoded_bytes", "_cache", "_memos", "_at", "_next")

    CACHED_BLOCKS = 8  # decoded blocks kept: the head and tail that readers revisit

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.firsts: list[StreamID] = []
        self.length = 0
        self.nbytes = 0  # what the blocks hold in memory (block_bytes of each)
        self.decoded_bytes = 0  # what the decoded blocks in the cache hold (decoded_bytes of each)
        self._cache: OrderedDict[Block, list[Decoded]] = OrderedDict()
        # per decoded block, a list the readers above may fill with what they derive from its
        # entries, index by index (the reply encoding of each entry): it lives exactly as long
        # as the decoded block, so it is dropped whenever an entry of the block changes
        self._memos: dict[Block, list] = {}
        # the index of the block where the last ``runs`` ended: a reader that goes on from
        # there (XREADGROUP >, a tailing XREAD) starts in it or the next one, checked in two
        # comparisons rather than found by bisecting every block's first ID
        self._at = 0
        # the index, in that block's decoded entries, after the entry where the last
        # ``first_run`` started: a reader of one entry at a time starts its next read there
        self._next = 0

    # ------------------------------------------------------------ writing
    def __deepcopy__(self, memo: dict) -> EntryLog:
        return copy_attributes(self, EntryLog(), ('blocks', 'firsts', 'length', 'nbytes'), memo)

    def append(self, id_: StreamID, flat: Sequence[bytes], max_entries: int, max_bytes: int) -> None:
        """Add an entry whose ID is above every ID in the log."""
        tail = self.blocks[-1] if self.blocks else None
        if tail is not None:
            limit = max_bytes if 0 < max_bytes <= LISTPACK_MAX_SIZE else LISTPACK_MAX_SIZE
            totelelen = 0
            for x in flat:
                totelelen += len(x)
            if tail.lp_bytes + totelelen >= limit or (
                max_entries and tail.live + tail.dead >= max_entries
            ):
                tail = None
        if tail is None:
            tail = Block(id_, tuple(flat[0::2]))
            self.blocks.append(tail)
            self.firsts.append(id_)
            self.nbytes += BLOCK_BYTES
        offset = len(tail.buf)
        tail.append(id_, flat)
        self.length += 1
        grown = len(tail.buf) - offset
        self.nbytes += grown + ((offset + grown) >> 4) - (offset >> 4)
        cached = self._cache.get(tail)
        if cached is not None:
            # keep the decoded tail in step instead of decoding it again
            cached.append((id_, list(flat), False, offset))
            self.decoded_bytes += DECODED_ENTRY_BYTES + 2 * grown

    def delete(self, id_: StreamID) -> bool:
        """XDEL one ID; True if a live entry was removed."""
        bi = bisect_right(self.firsts, id_) - 1
        if bi < 0:
            return False
        block = self.blocks[bi]
        if id_ > block.last:
            return False
        for eid, _flat, dead, off in self._decoded(block):
            if eid == id_:
                if dead:
                    return False
                self._remove_at(bi, off)
                return True
            if eid > id_:
                break
        return False

    def _remove_at(self, bi: int, off: int) -> None:
        block = self.blocks[bi]
        if block.live == 1:
            del self.blocks[bi]
            del self.firsts[bi]
            self.nbytes -= block_bytes(block)
        else:
            block.mark_deleted(off)
        self.length -= 1
        self._invalidate(block)

    def _invalidate(self, block: Block) -> None:
        entries = self._cache.pop(block, None)
        if entries is not None:
            self.decoded_bytes -= decoded_bytes(block, entries)
        self._memos.pop(block, None)

    def trim(self, spec: TrimSpec, can_delete: Callable[[StreamID], bool] | None,
             keep_refs: bool) -> int:
        """Redis's ``streamTrim`` on this log.  Returns entries removed.

        ``can_delete(id)`` is consulted per entry when references are not
        simply kept (DELREF / ACKED): it may clean references and says
        whether the entry may go.
        """
        maxlen = spec.maxlen
        minid = spec.minid if spec.minid is not None else (0, 0)  # MINID when maxlen is None
        deleted = 0
        bi = 0
        while bi < len(self.blocks):
            if maxlen is not None and self.length <= maxlen:
                break
            block = self.blocks[bi]
            entries = block.live
            if spec.limit and deleted + entries > spec.limit:
                break
            if maxlen is not None:
                eligible = self.length - entries >= maxlen
            else:
                eligible = block.last < minid
            if eligible and keep_refs:
                del self.blocks[bi]
                del self.firsts[bi]
                self.nbytes -= block_bytes(block)
                self._invalidate(block)
                self.length -= entries
                deleted += entries
                continue
            if spec.approx and keep_refs:
                break
            removed = 0
            for eid, _flat, dead, off in self._decoded(block):
                if maxlen is not None:
                    if self.length <= maxlen:
                        break
                elif eid >= minid:
                    break
                if dead:
                    continue
                if can_delete is not None and not can_delete(eid):
                    continue
                block.buf[off] |= DELETED
                removed += 1
                self.length -= 1
            self._invalidate(block)
            deleted += removed
            if eligible and removed == entries:
                del self.blocks[bi]
                del self.firsts[bi]
                self.nbytes -= block_bytes(block)
                continue
            block.live -= removed
            block.dead += removed
            if eligible:
                bi += 1
                continue
            break
        return deleted

    # ------------------------------------------------------------ reading
    def _decoded(self, block: Block) -> list[Decoded]:
        cache = self._cache
        entries = cache.get(block)
        if entries is None:
            entries = cache[block] = block.decode()
            self.decoded_bytes += decoded_bytes(block, entries)
            if len(cache) > self.CACHED_BLOCKS:
                oldest, dropped = cache.popitem(last=False)
                self.decoded_bytes -= decoded_bytes(oldest, dropped)
                self._memos.pop(oldest, None)
        return entries

    def _span(self, block: Block, start: StreamID | None, end: StreamID | None) -> tuple[list[Decoded], int, int]:
        """A block's decoded entries and the slice [i, j) of them from ``start`` to ``end``
        (None: from its first entry, to its last): a range's first and last blocks are
        bisected, the blocks between taken whole."""
        entries = self._decoded(block)
        i = 0 if start is None else bisect_left(entries, start, key=_entry_id)
        j = len(entries) if end is None else bisect_right(entries, end, key=_entry_id)
        return entries, i, j

    def runs(self, start: StreamID, end: StreamID) -> Iterator[tuple[list[Decoded], list, int, int, int]]:
        """The range start <= id <= end block by block, ascending, for readers that work on
        slices rather than entry by entry: ``(entries, memo, i, j, dead)`` per block, where
        ``entries[i:j]`` are the block's decoded entries in the range (deleted ones included
        when ``dead``, the block's count of deleted entries, is not 0), and ``memo`` is the
        block's memo list (see ``_memos``: empty until a reader fills it, and entries
        appended to the block since are not in it yet).  The lists are shared: read them,
        never change ``entries``."""
        if start > end or not self.blocks:
            return
        firsts = self.firsts
        blocks = self.blocks
        n = len(firsts)
        bi = self._block_of(start)
        stop = n if end >= blocks[-1].last else bisect_right(firsts, end)
        memos = self._memos
        for k in range(bi, stop):
            block = blocks[k]
            if block.last < start:
                continue
            self._at = k
            entries, i, j = self._span(block, start if k == bi else None, end if k == stop - 1 else None)
            memo = memos.get(block)
            if memo is None:
                memo = memos[block] = []
            yield entries, memo, i, j, block.dead

    def _block_of(self, start: Any) -> int:
        """The block holding ``start``: the last one whose first ID is <= start (or block 0).
        The block where the last read started is tried first (two comparisons)."""
        firsts: Any = self.firsts
        n = len(firsts)
        bi = self._at
        if not (bi < n and firsts[bi] <= start and (bi + 1 == n or start < firsts[bi + 1])):
            bi = bisect_right(firsts, start) - 1
            if bi < 0:
                bi = 0
        return bi

    def first_run(self, start: Any, end: Any) -> tuple[list[Decoded], list, int, int, int] | None:
        """The first tuple :meth:`runs` gives (None when the range is empty), in a plain call:
        a read of a few entries (XREADGROUP COUNT 1, a tailing XREAD) needs no more, and a
        generator's creation and closing cost it more than the run.  A reader that goes on
        from the entry after the last one this returned finds it in two comparisons."""
        if start > end or not self.blocks:
            return None
        # (IDs and entries are kept as the Python objects they are, not unboxed by mypyc: each
        # is compared once or twice, and unboxing a decoded entry costs more than comparing it)
        firsts: Any = self.firsts
        n = len(firsts)
        bi = self._block_of(start)
        block = self.blocks[bi]
        if block.last < start:  # between two blocks: the range starts in the next one
            bi += 1
            if bi == n:
                return None
            block = self.blocks[bi]
        if firsts[bi] > end:
            return None
        self._at = bi
        entries: Any = self._decoded(block)
        i = self._next
        if not (i < len(entries) and start <= entries[i][0] and (i == 0 or entries[i - 1][0] < start)):
            i = bisect_left(entries, start, key=_entry_id)  # (what the two comparisons stand for)
        self._next = i + 1
        j = len(entries) if end >= block.last else bisect_right(entries, end, key=_entry_id)
        memo = self._memos.get(block)
        if memo is None:
            memo = self._memos[block] = []
        return entries, memo, i, j, block.dead

    def range(self, start: StreamID, end: StreamID) -> Iterator[tuple[StreamID, list]]:
        """Live entries with start <= id <= end, ascending."""
        if start > end or not self.blocks:
            return
        firsts = self.firsts
        bi = max(bisect_right(firsts, start) - 1, 0)
        stop = bisect_right(firsts, end)
        blocks = self.blocks
        for k in range(bi, stop):
            block = blocks[k]
            if block.last < start:
                continue
            entries = self._decoded(block)
            # the first block is entered where the range starts, not scanned from its head
            for i in range(bisect_left(entries, start, key=_entry_id) if k == bi else 0, len(entries)):
                eid, flat, dead, _off = entries[i]
                if eid > end:
                    return
                if not dead:
                    yield eid, flat

    def revruns(self, start: StreamID, end: StreamID) -> Iterator[tuple[list[Decoded], list, int, int, int]]:
        """:meth:`runs` for a descending read: the same tuples, last block first (each
        block's ``entries[i:j]`` still in ascending order: the reader reverses them)."""
        if start > end or not self.blocks:
            return
        firsts = self.firsts
        bi = max(bisect_right(firsts, start) - 1, 0)
        stop = bisect_right(firsts, end)
        blocks = self.blocks
        memos = self._memos
        for k in range(stop - 1, bi - 1, -1):
            block = blocks[k]
            if block.last < start:
                return
            entries, i, j = self._span(block, start if k == bi else None, end if k == stop - 1 else None)
            memo = memos.get(block)
            if memo is None:
                memo = memos[block] = []
            yield entries, memo, i, j, block.dead

    def range_list(self, start: StreamID, end: StreamID, count: int = 0) -> list[tuple[StreamID, list]]:
        """:meth:`range` as a list of at most ``count`` entries (0: all), a block's run at a
        time: what a read of a few entries (XREADGROUP COUNT 1) pays is two bisections."""
        out: list[tuple[StreamID, list]] = []
        if start > end or not self.blocks:
            return out
        firsts = self.firsts
        bi = max(bisect_right(firsts, start) - 1, 0)
        blocks = self.blocks
        # a read "to the end" (XREADGROUP >, XRANGE ... +) needs no second bisection
        stop = len(firsts) if end >= blocks[-1].last else bisect_right(firsts, end)
        for k in range(bi, stop):
            block = blocks[k]
            if block.last < start:
                continue
            entries, i, j = self._span(block, start if k == bi else None, end if k == stop - 1 else None)
            if block.dead:
                for eid, flat, dead, _off in entries[i:j]:
                    if not dead:
                        out.append((eid, flat))
                        if len(out) == count:
                            return out
            else:
                if count and j - i > count - len(out):
                    j = i + count - len(out)
                out += map(_id_and_fields, entries[i:j])
                if count and len(out) >= count:
                    return out
        return out

    def revrange(self, start: StreamID, end: StreamID) -> Iterator[tuple[StreamID, list]]:
        """Live entries with start <= id <= end, descending."""
        if start > end or not self.blocks:
            return
        firsts = self.firsts
        bi = max(bisect_right(firsts, start) - 1, 0)
        stop = bisect_right(firsts, end)
        blocks = self.blocks
        for k in range(stop - 1, bi - 1, -1):
            block = blocks[k]
            if block.last < start:
                return
            entries = self._decoded(block)
            # the last block is entered where the range ends (see range)
            top = bisect_right(entries, end, key=_entry_id) if k == stop - 1 else len(entries)
            for i in range(top - 1, -1, -1):
                eid, flat, dead, _off = entries[i]
                if eid < start:
                    return
                if not dead:
                    yield eid, flat

    def get(self, id_: StreamID) -> list | None:
        for _eid, flat in self.range(id_, id_):
            return flat
        return None

    def first_live(self) -> StreamID | None:
        for eid, _ in self.range((0, 0), self.blocks[-1].last if self.blocks else (0, 0)):
            return eid
        return None

    def last_live(self) -> StreamID | None:
        if not self.blocks:
            return None
        tail = self.blocks[-1]
        if not tail.dead:  # no deletion in the tail block: its last entry is live
            return tail.last
        for eid, _ in self.revrange((0, 0), self.blocks[-1].last):
            return eid
        return None

    def last_any(self) -> StreamID | None:
        """The highest ID stored, deleted entries included (None if empty)."""
        return self.blocks[-1].last if self.blocks else None

    def contains_range_count(self, start: StreamID, end: StreamID) -> int:
        return sum(1 for _ in self.range(start, end))

    def holds_block(self, block: Block) -> bool:
        """Does this log hold a block equal to ``block`` (another log's): the same IDs, entries
        and deletion marks, byte for byte?"""
        k = bisect_left(self.firsts, block.first)
        if k == len(self.firsts) or self.firsts[k] != block.first:
            return False
        mine = self.blocks[k]
        return (mine.last == block.last and mine.live == block.live and mine.fields == block.fields
                and mine.buf == block.buf)

    def append_block(self, block: Block) -> None:
        """Append a copy of ``block`` (of another log of the same origin, every ID above this
        log's): what appending its entries one by one would hold, in one step."""
        mine = restored_block(block.first, block.last, block.fields, bytearray(block.buf), block.live, block.dead,
                              block.lp_base)
        self.blocks.append(mine)
        self.firsts.append(mine.first)
        self.length += mine.live
        self.nbytes += block_bytes(mine)

    def recount(self) -> None:
        """Count ``nbytes`` again, for a log whose blocks were put in place directly (a snapshot
        or an RDB file loaded)."""
        self.nbytes = sum(block_bytes(b) for b in self.blocks)

    @property
    def node_count(self) -> int:
        return len(self.blocks)

    def memory_bytes(self) -> int:
        """What the log holds in memory: its blocks and the decoded ones it caches."""
        return self.nbytes + self.decoded_bytes


def tagged(origin: int, entries: Iterator[tuple[StreamID, list]]) -> Iterator[tuple[StreamID, int, list]]:
    """(id, fields) -> (id, origin, fields), binding ``origin`` now (a generator
    expression built in a loop would read the loop variable late)."""
    for eid, flat in entries:
        yield eid, origin, flat
