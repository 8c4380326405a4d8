"""The operation log's on-disk format: Braid's append-only file (docs/durability.md).

Theory of operation
-------------------
The operation log is both the replication feed and the append-only file.  On disk
it is a directory of *segments*, each a file of back-to-back records::

    log/
      00000000000000000001.aof     records 1 .. 41236
      00000000000000041237.aof     records 41237 .. 80001
      00000000000000080002.aof     records 80002 ..        (being appended to)

Records are numbered from 1 over the log's whole life.  A segment is named after
the number of its first record, zero-padded to 20 digits (any u64 fits), so
sorting the names sorts the log, and a segment's record numbers follow from its
name and its position in the file: no index is stored anywhere.  A new segment
starts when the current one would grow past ``segment_size`` (64 MiB by
default); whole segments are the unit of compaction
(:meth:`AppendLog.drop_segments_before`).

Rolling to a new segment never waits for the disk on the caller's thread (the
event loop): the finished segment's records are handed to the OS, the new
segment is created as ``<name>.aof.next``, and a worker thread *seals* the
finished one - fsync it, rename the new one to ``<name>.aof``, fsync the
directory.  So a segment that has its real name always follows a segment that
is on disk.  Whatever makes records durable (:meth:`AppendLog.fsync`, the
fsync an operation log runs in a worker thread with :meth:`AppendLog.seal_wait`
first) waits for the seal, so nothing in a ``.next`` segment counts as on disk
before its predecessor is.  At start (:func:`scan`, :meth:`AppendLog.open`) a
``.next`` segment that follows an intact last segment is part of the log (a
process crash: its records had reached the OS) and gets its real name; after a
torn one it is discarded with the torn tail (a machine crash before the seal:
none of its records was on disk or acknowledged as such).  A segment that fills
up before the previous seal is done waits for it (a segment filled within one
fsync).

One record::

    +----------------+----------------------------------+--------+-----------------+
    | payload length | checksum                         |  kind  | payload         |
    | u32 LE         | u64 LE xxh3_64(kind + payload)   |  u8    | <length> bytes  |
    +----------------+----------------------------------+--------+-----------------+
    0                4                                  12       13         13 + length

    kind 1  OP_REPLICATED   operations of crdt/ops.py: this region's own, or another region's
    kind 2  OP_LOCAL        a region-local change (a command touching consumers, the PEL...)
    (the payloads, and the format version their tags carry: node/persistence/oplog.py)
    any other kind is corruption.

The checksum covers the kind byte and the payload, which lie next to each other,
so it is computed over one contiguous slice.  The length is not covered; instead
it is capped at :data:`MAX_PAYLOAD` (what a u32 length can say, 4 GiB - 1), and a
damaged length is found by the checksum of the bytes it claims (or, at the end of
the file, as a torn record).  The cap is above every record a region writes: a
command is at most ``client-query-buffer-limit`` (1 GB by default; a write
command whose record could pass the cap is refused before it runs, see
``Server.call``), and a record holds at most its arguments and its operations.

:class:`RecordReader` is sans-IO (as ``node/resp/parser.py``): bytes go in with
``feed``, records come out of ``next_record``, so tests feed it one byte at a
time.  :class:`AppendLog` writes with blocking file I/O; the server decides when
to ``flush`` and ``fsync`` (``appendfsync always | everysec | no``).

Damage, and what is cut
-----------------------
A crash while appending leaves a *torn tail*: the last segment ends inside a
record, or its last record's bytes did not all reach the disk (its checksum
fails).  A record torn by a crash was never fully written, so never acknowledged
under ``appendfsync always``; :func:`scan` reports it as ``ScanResult.torn`` and
:func:`truncate_torn` cuts it, as Redis's ``aof-load-truncated`` does.  Anything
else is *corruption* and raises :class:`CorruptLog` naming the file and byte
offset; nothing is cut, because valid, acknowledged records would be lost:

* a bad record followed by a valid one.  In the last segment the rest of the
  file is searched for one, because a damaged *length* field can make a record
  in the middle look like an incomplete one at the end.  The search is bounded;
  past the bound (a torn record of hundreds of MB of random bytes) the damage
  counts as corruption.  Bytes after a bad record that hold no valid record
  (a crash can leave a zero-filled tail) are part of the torn tail;
* a bad or short record in a segment that is not the last: the writer fsyncs a
  segment before the next gets its real name, so a crash cannot tear an earlier
  segment;
* a record whose checksum holds but whose kind is unknown (a newer Braid wrote
  it, or the bytes were deliberately changed: never cut);
* a gap in record numbers between segments;
* a bad last record of a log whose last run closed cleanly.  Beside the
  segments a *run mark* says how the last run ended (node/persistence/oplog.py):
  ``clean`` is written only after a close fsynced everything, so such a log
  cannot end with a torn append, and a bad last record there is damage (a
  flipped bit): a start refuses it like damage elsewhere (``scan(...,
  closed_cleanly=True)``) instead of cutting an acknowledged record.

:meth:`AppendLog.open` scans the log and refuses (:class:`TornTail`) to append
after an unhandled torn tail, so nothing is ever written after garbage.

A cut torn tail may have held records that left for other regions (operations
leave once they reached the OS, not the disk), so a start writes the run mark
``recover`` before it cuts one: the region then takes its own operations back
from its peers before it takes writes (oplog.py, ``may_have_lost``).

Salvage (``braid check-log --fix``, as ``redis-check-aof --fix``) is the
operator's decision, never a start's: :func:`examine` finds the first bad record
without raising, :func:`plan_salvage` says what cutting there drops - the rest of
that segment, every later segment (their names would no longer follow the
log's last record) and any ``.next`` one, and how many valid records can still
be identified in what goes - and :func:`salvage` does it, later files first, so
the log keeps exactly the records before the first bad one.  A segment that is
itself out of place (a record-number gap, a ``.next`` segment that follows
nothing) goes whole; a record that is intact but of an unknown kind (a newer
Braid wrote it) is never cut.
"""

from __future__ import annotations

import os
import re
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from xxhash import xxh3_64_intdigest

OP_REPLICATED = 1
OP_LOCAL = 2
KINDS = frozenset({OP_REPLICATED, OP_LOCAL})
_KINDS_OR_ZERO = KINDS | {0}
_KIND_BYTES = {k: bytes((k,)) for k in KINDS}

MAX_PAYLOAD = (1 << 32) - 1  # the largest length the u32 field holds
DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024

_PREFIX = struct.Struct("<IQ")  # payload length, checksum
HEADER_SIZE = _PREFIX.size + 1  # + the kind byte: 13
_KIND_AT = _PREFIX.size  # the kind byte's offset in a record; the checksummed bytes start there

SEGMENT_SUFFIX = ".aof"
NEXT_SUFFIX = ".next"  # a segment whose predecessor was not yet sealed (see the theory of operation)
_SEGMENT_NAME = re.compile(r"^(\d{20})\.aof$")
_READ_CHUNK = 1024 * 1024
# Looking for a valid record after damage (_record_follows) is bounded: bytes that
# look like headers could make it quadratic.  Past the bounds the damage counts as
# corruption: refusing to start can be undone, cutting valid records cannot.
_SEARCH_MAX_CANDIDATES = 2_000_000  # ~3 s of Python at worst
_SEARCH_HASH_BUDGET = 8 * 1024 * 1024 * 1024  # bytes hashed; xxh3 does ~10 GB/s


def segment_name(first_record: int) -> str:
    return f"{first_record:020d}{SEGMENT_SUFFIX}"


def encode_record(kind: int, payload: bytes) -> bytes:
    """One record's bytes: header, kind, payload (layout in the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind}")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    body = _KIND_BYTES[kind] + payload
    return _PREFIX.pack(len(payload), xxh3_64_intdigest(body)) + body


# ------------------------------------------------------------------- reading
class RecordError(ValueError):
    """A record that cannot be decoded, at byte ``offset`` of the bytes fed.

    ``may_be_torn`` is False when the record is intact but not ours (unknown
    kind): such a record is never cut as a torn tail.
    """

    def __init__(self, offset: int, reason: str, may_be_torn: bool = True) -> None:
        super().__init__(f"at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason
        self.may_be_torn = may_be_torn


class RecordReader:
    """Sans-IO record decoder: ``feed(bytes)``, then ``next_record()`` until None.

    ``offset`` is where the next record starts (bytes consumed), ``last_offset``
    where the record last returned started, ``pending`` how many bytes of an
    incomplete record are buffered.  After a :class:`RecordError` the reader
    raises the same error again: nothing after damage is decoded.
    """

    __slots__ = ("max_payload", "last_offset", "_buf", "_pos", "_base", "_error")

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self.last_offset: int | None = None
        self._buf = bytearray()
        self._pos = 0  # start of the next record in _buf
        self._base = 0  # offset of _buf[0] in the stream
        self._error: RecordError | None = None

    @property
    def offset(self) -> int:
        return self._base + self._pos

    @property
    def pending(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        # Drop consumed bytes once they are half the buffer: amortised linear even
        # when a large record arrives one byte at a time.
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._base += self._pos
            self._pos = 0
        self._buf += data

    def next_record(self) -> tuple[int, bytes] | None:
        if self._error is not None:
            raise self._error
        buf, pos = self._buf, self._pos
        if len(buf) - pos < HEADER_SIZE:
            return None
        length, checksum = _PREFIX.unpack_from(buf, pos)
        if length > self.max_payload:
            self._fail(f"record length {length} exceeds the maximum {self.max_payload}")
        end = pos + HEADER_SIZE + length
        if len(buf) < end:
            return None
        with memoryview(buf) as view:
            actual = xxh3_64_intdigest(view[pos + _KIND_AT : end])
        if actual != checksum:
            self._fail("checksum mismatch")
        kind = buf[pos + _KIND_AT]
        if kind not in KINDS:
            self._fail(f"unknown record kind {kind}", may_be_torn=False)
        self.last_offset = self.offset
        self._pos = end
        return kind, bytes(buf[pos + HEADER_SIZE : end])

    def take_records(self, out: list, number: int) -> int:
        """Append ``(number, kind, payload)`` to ``out`` for every complete record buffered,
        numbering from ``number``; returns how many.  The same records, checks and errors as
        calling :meth:`next_record` until None (a load reads a whole log: one call per chunk
        instead of one per record).  On damage the records before it are in ``out`` already
        when :class:`RecordError` is raised."""
        if self._error is not None:
            raise self._error
        buf, pos = self._buf, self._pos
        size, limit = len(buf), self.max_payload
        unpack, digest, kinds, append = _PREFIX.unpack_from, xxh3_64_intdigest, KINDS, out.append
        taken, last = 0, -1
        reason, may_be_torn = None, True
        with memoryview(buf) as view:
            while size - pos >= HEADER_SIZE:
                length, checksum = unpack(buf, pos)
                if length > limit:
                    reason = f"record length {length} exceeds the maximum {limit}"
                    break
                start = pos + _KIND_AT
                end = start + 1 + length
                if end > size:
                    break
                if digest(view[start:end]) != checksum:
                    reason = "checksum mismatch"
                    break
                kind = buf[start]
                if kind not in kinds:
                    reason, may_be_torn = f"unknown record kind {kind}", False
                    break
                append((number + taken, kind, view[start + 1:end].tobytes()))
                taken += 1
                last, pos = pos, end
        if taken:
            self.last_offset = self._base + last
        self._pos = pos
        if reason is not None:
            self._fail(reason, may_be_torn)
        return taken

    def _fail(self, reason: str, may_be_torn: bool = True) -> None:
        self._error = RecordError(self.offset, reason, may_be_torn)
        raise self._error


# ------------------------------------------------------------------- damage
class CorruptLog(Exception):
    """Damage that must not be cut at start: the message names the file and byte offset.

    ``record``: the number the first bad record would have (None: not known);
    ``whole_file``: the file itself is out of place (a record-number gap, a ``.next``
    segment that follows nothing), not a record in it; ``intact``: the record is whole
    but of an unknown kind (a newer Braid wrote it), so a salvage never cuts it.
    """

    def __init__(self, path: str, offset: int, reason: str, *, record: int | None = None,
                 whole_file: bool = False, intact: bool = False) -> None:
        where = "" if record is None else f" (record {record})"
        super().__init__(f"corrupt record in {path} at offset {offset}: {reason}{where}")
        self.path = path
        self.offset = offset
        self.reason = reason
        self.record = record
        self.whole_file = whole_file
        self.intact = intact


class TornTail(CorruptLog):
    """AppendLog.open found a torn tail that nobody cut (see :func:`truncate_torn`)."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        Exception.__init__(
            self,
            f"torn record at the end of {path} at offset {offset}: {reason}; "
            f"cut it with `braid check-log {os.path.dirname(path)} --fix`",
        )
        self.path = path
        self.offset = offset
        self.reason = reason
        self.record = None
        self.whole_file = self.intact = False


def _record_follows(data: bytes) -> str | None:
    """Whether a valid record starts somewhere in ``data[1:]``, described; else None.

    ``data`` runs from a damaged record to the end of the file.  Candidates are
    found by their kind byte (``bytes.find``, C speed) and must fit in ``data``.
    Only those that end where a record can end are hashed, which keeps random
    bytes (a large torn payload) from costing a hash of megabytes per candidate.
    """
    candidates = hashed = 0
    with memoryview(data) as view:
        for kind in sorted(KINDS):
            at = data.find(kind, 1 + _KIND_AT)
            while at != -1:
                candidates += 1
                if candidates > _SEARCH_MAX_CANDIDATES or hashed > _SEARCH_HASH_BUDGET:
                    return "too much data after it to rule out valid records"
                start = at - _KIND_AT
                length, checksum = _PREFIX.unpack_from(data, start)
                end = start + HEADER_SIZE + length
                if length <= MAX_PAYLOAD and _can_end_record(data, end):
                    hashed += length
                    if xxh3_64_intdigest(view[at:end]) == checksum:
                        return f"a valid record follows at {start} bytes after it"
                at = data.find(kind, at + 1)
    return None


def _can_end_record(data: bytes, end: int) -> bool:
    """Whether a record may end at ``end``: what follows is the end of the file, a
    partial header, or a header whose kind byte is known or zero (a crash can
    leave a zero-filled tail)."""
    if end > len(data):
        return False
    return len(data) - end < HEADER_SIZE or data[end + _KIND_AT] in _KINDS_OR_ZERO


def _classify(path: str, offset: int, reason: str, is_last: bool, may_be_torn: bool,
              record: int) -> tuple[str, int, str]:
    """Damage at ``offset`` (the place of record number ``record``): a torn tail
    ``(path, offset, reason)``, or raise CorruptLog."""
    intact = not may_be_torn
    if not is_last:
        raise CorruptLog(path, offset, f"{reason} (in a segment that is not the last)", record=record, intact=intact)
    if intact:
        raise CorruptLog(path, offset, reason, record=record, intact=True)
    with open(path, "rb") as f:
        f.seek(offset)
        rest = f.read()
    follows = _record_follows(rest)
    if follows is not None:
        raise CorruptLog(path, offset, f"{reason}; {follows}", record=record)
    return path, offset, reason


# ------------------------------------------------------------------- scanning
@dataclass(frozen=True)
class SegmentInfo:
    path: str
    first_record: int
    records: int  # valid records (a torn tail is not counted)
    size: int  # the file's size in bytes when scanned, torn bytes included


@dataclass(frozen=True)
class ScanResult:
    directory: str
    segments: list[SegmentInfo]
    records: list[tuple[int, int, bytes]] = field(default_factory=list)  # (number, kind, payload)
    torn: tuple[str, int] | None = None  # (path, offset) of a torn tail
    torn_reason: str = ""
    discarded_next: str | None = None  # a .next segment after a torn tail: truncate_torn deletes it
    # the first damage that is not a torn tail (only from examine(): scan() raises it); the
    # segments and records above stop there, the damaged segment counted up to the damage
    corrupt: CorruptLog | None = None

    @property
    def last_record(self) -> int:
        """The number of the last valid record; 0 for an empty log."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        return last.first_record + last.records - 1


def list_segments(directory: str) -> list[tuple[int, str]]:
    """``(first record number, path)`` of each segment file, in log order."""
    found = []
    for name in os.listdir(directory):
        match = _SEGMENT_NAME.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(found)


def scan(directory: str, *, collect: bool = True, closed_cleanly: bool = False) -> ScanResult:
    """Read every segment in order; ``collect=False`` checks without keeping payloads.

    ``closed_cleanly``: the log's run mark says its last run closed cleanly, so it has
    no torn tail: a bad last record is damage (see the theory of operation).
    Raises :class:`CorruptLog` for damage that is not a torn tail.
    """
    result = examine(directory, collect=collect, closed_cleanly=closed_cleanly)
    if result.corrupt is not None:
        raise result.corrupt
    return result


def examine(directory: str, *, collect: bool = True, closed_cleanly: bool = False) -> ScanResult:
    """:func:`scan` that reports damage in ``ScanResult.corrupt`` instead of raising it: the
    segments and records it returns are the log's valid prefix (what a salvage keeps)."""
    segments = list_segments(directory)
    infos: list[SegmentInfo] = []
    records: list[tuple[int, int, bytes]] = []
    torn = corrupt = None
    expected = max(segments[0][0], 1) if segments else 1  # records count from 1
    for index, (first, path) in enumerate(segments):
        if first != expected:
            corrupt = CorruptLog(path, 0, f"record-number gap: the segment should start at record {expected}",
                                 record=expected, whole_file=True)
            break
        is_last = index == len(segments) - 1
        try:
            count, torn = _scan_segment(path, first, is_last, records if collect else None)
        except CorruptLog as e:
            corrupt = e
            infos.append(SegmentInfo(path, first, e.record - first, os.path.getsize(path)))
            break
        infos.append(SegmentInfo(path, first, count, os.path.getsize(path)))
        expected = first + count
    discarded = None
    unsealed = _next_segments(directory)
    if unsealed and corrupt is None:
        path = os.path.join(directory, segment_name(expected) + NEXT_SUFFIX)
        if len(unsealed) > 1 or not segments or (torn is None and unsealed != [path]):
            corrupt = CorruptLog(unsealed[0], 0, "a segment started during a roll does not follow the last segment",
                                 record=expected, whole_file=True)
        elif torn is None:  # its predecessor is intact: it is the log's last segment
            try:
                count, torn = _scan_segment(path, expected, True, records if collect else None)
            except CorruptLog as e:
                corrupt = e
                count = e.record - expected
            infos.append(SegmentInfo(path, expected, count, os.path.getsize(path)))
        else:  # its predecessor lost records: it follows nothing, and was never on disk as such
            discarded = unsealed[0]
    if torn is not None and closed_cleanly:  # no torn append after a clean close: damage
        corrupt = CorruptLog(torn[0], torn[1], f"{torn[2]} at the end of a log closed cleanly (everything was "
                             "fsynced, so this is damage, not a torn append)", record=_record_after(infos))
        torn = discarded = None
    return ScanResult(
        os.path.abspath(directory), infos, records,
        torn=torn[:2] if torn else None, torn_reason=torn[2] if torn else "", discarded_next=discarded,
        corrupt=corrupt,
    )


def _record_after(infos: list[SegmentInfo]) -> int:
    """The number the record after the last of ``infos`` has (1 for no segments)."""
    return infos[-1].first_record + infos[-1].records if infos else 1


def _next_segments(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.endswith(SEGMENT_SUFFIX + NEXT_SUFFIX))


def _scan_segment(path: str, first: int, is_last: bool, records: list | None) -> tuple[int, tuple | None]:
    """(valid record count, torn tail or None) of one segment; appends to ``records``."""
    reader = RecordReader()
    count = 0
    out = records if records is not None else []
    with open(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK):
            reader.feed(chunk)
            before = len(out)
            try:
                count += reader.take_records(out, first + count)
            except RecordError as e:
                count += len(out) - before
                return count, _classify(path, e.offset, e.reason, is_last, e.may_be_torn, first + count)
            finally:
                if records is None:
                    out.clear()
    if reader.pending:
        reason = f"incomplete record ({reader.pending} bytes at the end of the file)"
        return count, _classify(path, reader.offset, reason, is_last, True, first + count)
    return count, None


def truncate_torn(result: ScanResult) -> int:
    """Cut the torn tail ``result`` found (and fsync); returns how many bytes were cut."""
    if result.torn is None:
        return 0
    path, offset = result.torn
    scanned = result.segments[-1]
    if scanned.path != path or os.path.getsize(path) != scanned.size:
        raise ValueError(f"{path} changed since it was scanned; scan it again")
    with open(path, "r+b") as f:
        f.truncate(offset)
        f.flush()
        os.fsync(f.fileno())
    if result.discarded_next is not None:
        os.remove(result.discarded_next)
        fsync_directory(os.path.dirname(result.discarded_next))
    return scanned.size - offset


# ------------------------------------------------------------------- salvage (braid check-log --fix)
@dataclass(frozen=True)
class Salvage:
    """What cutting a damaged log back to its valid prefix drops (:func:`plan_salvage`)."""

    directory: str
    path: str       # the file holding the first bad record (or the file out of place)
    offset: int     # where that record starts in it
    record: int     # the number that record would have: the log keeps the records before it
    reason: str
    cut: tuple[str, int, int] | None  # (path, offset, bytes cut); None: the file goes whole
    removed: list[tuple[str, int]]    # (path, size) of the files that go, in log order
    identified: int      # valid records found in what goes (the bad one is not valid)
    identified_all: bool  # False: the search stopped at its bounds: at least ``identified``
    refused: str | None  # why this damage is not cut (an intact record of an unknown kind)

    @property
    def dropped_bytes(self) -> int:
        return (self.cut[2] if self.cut else 0) + sum(size for _, size in self.removed)


def plan_salvage(result: ScanResult) -> Salvage | None:
    """What :func:`salvage` would drop from the log :func:`examine` gave ``result`` (None: nothing
    to cut).  The log keeps its valid prefix, records 1 (or its first) .. ``record - 1``."""
    if result.corrupt is not None:
        e = result.corrupt
        path, offset, reason, whole = e.path, e.offset, e.reason, e.whole_file
        refused = (f"the record is intact but of an unknown kind ({reason}): a newer Braid wrote it; "
                   "run that version instead of cutting valid records") if e.intact else None
    elif result.torn is not None:
        (path, offset), reason, whole, refused = result.torn, result.torn_reason, False, None
    else:
        return None
    directory = result.directory
    paths = [p for _, p in list_segments(directory)]
    later = paths[paths.index(path) + (0 if whole else 1):] if path in paths else []  # else a .next segment
    later += [n for n in _next_segments(directory) if whole or n != path]
    removed = [(p, os.path.getsize(p)) for p in later]
    cut = None
    identified, complete = 0, True
    if not whole:
        size = os.path.getsize(path)
        cut = (path, offset, size - offset)
        with open(path, "rb") as f:
            f.seek(offset)
            identified, complete = _count_records(f.read(), 1)  # the bad record itself is not one
    for p, _ in removed:
        with open(p, "rb") as f:
            n, done = _count_records(f.read(), 0)
        identified, complete = identified + n, complete and done
    return Salvage(directory, path, offset, result.last_record + 1, reason, cut, removed, identified, complete,
                   refused)


def salvage(plan: Salvage) -> None:
    """Cut the log back to its valid prefix as ``plan`` says, durably: the files after the
    damage go, newest first, then the damaged file is cut at the damage.  A crash part-way
    leaves the same first bad record, which the same salvage finishes."""
    if plan.refused is not None:
        raise ValueError(plan.refused)
    sizes = plan.removed + ([(plan.path, plan.cut[1] + plan.cut[2])] if plan.cut else [])
    for path, size in sizes:
        if os.path.getsize(path) != size:
            raise ValueError(f"{path} changed since it was examined; examine it again")
    for path, _ in reversed(plan.removed):
        os.remove(path)
    if plan.removed:
        fsync_directory(plan.directory)
    if plan.cut is not None:
        with open(plan.path, "r+b") as f:
            f.truncate(plan.offset)
            f.flush()
            os.fsync(f.fileno())


def _count_records(data: bytes, start: int) -> tuple[int, bool]:
    """How many valid records (checksum holds, kind known) can be found in ``data`` from
    ``start`` on: after each one the search goes on where it ends, after a bad spot at the
    next byte.  Bounded as :func:`_record_follows` is; ``(count, False)`` past the bounds."""
    count = candidates = hashed = 0
    size = len(data)
    nearest = dict.fromkeys(sorted(KINDS), -2)  # kind -> offset of its next kind byte (-1: none left)
    pos = start
    with memoryview(data) as view:
        while size - pos >= HEADER_SIZE:
            for kind, at in nearest.items():
                if -1 < at < pos + _KIND_AT or at == -2:
                    nearest[kind] = data.find(kind, pos + _KIND_AT)
            found = [at for at in nearest.values() if at != -1]
            if not found:
                break
            candidates += 1
            if candidates > _SEARCH_MAX_CANDIDATES or hashed > _SEARCH_HASH_BUDGET:
                return count, False
            at = min(found)
            begin = at - _KIND_AT
            length, checksum = _PREFIX.unpack_from(data, begin)
            end = begin + HEADER_SIZE + length
            if end <= size:
                hashed += length
                if xxh3_64_intdigest(view[at:end]) == checksum:
                    count += 1
                    pos = end
                    continue
            pos = begin + 1
    return count, True


# ------------------------------------------------------------------- writing
def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: str) -> None:
    """Make file creations and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentWriter:
    """One segment file being appended to.

    Records wait in ``pending`` until ``flush`` hands them to the OS.  A write the OS
    refuses (a full disk) raises and keeps what was not written, so a later flush
    finishes it: a record is never dropped, and never written twice.
    """

    def __init__(self, path: str, first_record: int, records: int, size: int, *, create: bool) -> None:
        # O_EXCL never clobbers an existing segment; O_APPEND continues after its last valid record.
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o644)
        self.path = path
        self.first_record = first_record
        self.records = records
        self.size = size
        self.pending = bytearray()

    def write(self, records: bytes, count: int = 1) -> None:
        """Buffer ``count`` whole records (their bytes one after the other)."""
        self.pending += records
        self.records += count
        self.size += len(records)

    def flush(self) -> None:
        while self.pending:
            written = os.write(self.fd, self.pending)
            del self.pending[:written]

    def fsync(self) -> None:
        self.flush()
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


HANDOFF_WAIT_S = 1.0  # the longest a roll waits for a worker to take its seal (_Seal.hand_to)


class _Seal:
    """Puts a finished segment on disk off the event loop: fsync it, then give the
    segment that follows it its real name (``<name>.aof.next`` -> ``<name>.aof``) and
    fsync the directory.  Runs in its own thread, or in a long-lived worker's
    (:meth:`hand_to`: a region's log); :meth:`complete` finishes it (or tries again
    after a failure) in the calling thread."""

    def __init__(self, old: SegmentWriter, unsealed: str, final: str, directory: str) -> None:
        self.old, self.unsealed, self.final, self.directory = old, unsealed, final, directory
        self.done = False
        self.error: OSError | None = None
        self._renamed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="braid-seal-segment", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def hand_to(self, run: Callable[[Callable[[], None]], None]) -> None:
        """Seal in the thread ``run`` hands its argument to (a long-lived worker: no thread starts
        here) instead of one of its own.  Returns once that thread holds the seal, as
        :meth:`start` returns once its thread runs, so that a :meth:`complete` meanwhile waits for
        it rather than fsyncing in the calling thread; or after :data:`HANDOFF_WAIT_S` without
        a sign of it (a worker that is not running: ``complete`` then does the work)."""
        taken = threading.Event()
        run(lambda: self._run(taken))
        taken.wait(HANDOFF_WAIT_S)

    def _run(self, taken: threading.Event | None = None) -> None:
        try:
            with self._lock:
                if taken is not None:
                    taken.set()
                self._complete()
        except OSError:
            pass  # kept in ``error``; whoever needs the records on disk tries again

    def complete(self) -> None:
        """Wait for the seal (doing it again if it failed); raises OSError if it fails now."""
        with self._lock:
            self._complete()

    def _complete(self) -> None:
        if self.done:
            return
        try:
            os.fsync(self.old.fd)
            if not self._renamed:
                os.rename(self.unsealed, self.final)
                self._renamed = True
            fsync_directory(self.directory)
        except OSError as e:
            self.error = e
            raise
        self.error = None
        self.old.close()
        self.done = True


class AppendLog:
    """A log directory opened for appending: ``AppendLog.open(dir)``."""

    def __init__(self, directory: str, segment: SegmentWriter, segment_size: int, *, new_file: bool) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self._segment: SegmentWriter | None = segment
        self._last_record = segment.first_record + segment.records - 1
        self._directory_dirty = new_file  # a segment file was created since the last fsync
        self._seal: _Seal | None = None  # the previous segment being put on disk (see roll)
        # where a seal runs: None, a thread of its own for each; else this is handed the seal's work
        # (a region's log: its fsync thread, started when it opened - node/persistence/oplog.py)
        self.run_seal: Callable[[Callable[[], None]], None] | None = None
        self.appended_bytes = 0  # bytes of records appended since opened (metrics: bytes not yet fsynced)

    @classmethod
    def open(cls, directory: str, *, segment_size: int = DEFAULT_SEGMENT_SIZE,
             scanned: ScanResult | None = None) -> AppendLog:
        """Open (creating the directory if needed) to append after the last valid record.

        ``scanned``: a clean scan of the directory just made (saves reading it twice).
        Raises :class:`TornTail` if the log ends with a torn record nobody cut, and
        :class:`CorruptLog` if it is damaged elsewhere.
        """
        directory = os.path.abspath(directory)
        os.makedirs(directory, exist_ok=True)
        result = scanned if scanned is not None and scanned.torn is None else scan(directory, collect=False)
        if result.torn is not None:
            raise TornTail(*result.torn, result.torn_reason)
        if not result.segments:
            segment = SegmentWriter(os.path.join(directory, segment_name(1)), 1, 0, 0, create=True)
            return cls(directory, segment, segment_size, new_file=True)
        last = result.segments[-1]
        path = last.path
        if path.endswith(NEXT_SUFFIX):  # left by a crash during a seal: finish it
            _fsync_file(result.segments[-2].path)
            path = path[: -len(NEXT_SUFFIX)]
            os.rename(last.path, path)
            fsync_directory(directory)
        segment = SegmentWriter(path, last.first_record, last.records, last.size, create=False)
        return cls(directory, segment, segment_size, new_file=False)

    @property
    def last_record(self) -> int:
        """The number of the last record appended (0 if none ever was)."""
        return self._last_record

    def append(self, kind: int, payload: bytes) -> int:
        """Buffer one record; returns its record number."""
        return self._append_encoded(encode_record(kind, payload))

    def _append_encoded(self, record: bytes) -> int:
        segment = self._current()
        if segment.size and segment.size + len(record) > self.segment_size:
            try:
                self._roll_unsealed()
            except OSError:
                pass  # a full disk: keep appending here; the next record tries again
            segment = self._current()
        segment.write(record)
        self.appended_bytes += len(record)
        self._last_record += 1
        return self._last_record

    def append_many(self, kind: int, payloads: list[bytes]) -> int:
        """:meth:`append` of each payload in turn (the same records, the same segment rolls),
        in one write to the segment's buffer when they fit; returns the last record number."""
        records = [encode_record(kind, payload) for payload in payloads]
        size = sum(map(len, records))
        segment = self._current()
        if segment.size + size > self.segment_size:
            for record in records:  # a segment may roll among them: one at a time, as append does
                self._append_encoded(record)
            return self._last_record
        segment.write(b"".join(records), len(records))
        self.appended_bytes += size
        self._last_record += len(records)
        return self._last_record

    def flush(self) -> None:
        self._current().flush()

    def fileno(self) -> int:
        """The current segment's file descriptor (to fsync it from another thread)."""
        return self._current().fd

    def take_directory_dirty(self) -> bool:
        """Whether a segment file was created since the directory was last fsynced; clears it."""
        dirty, self._directory_dirty = self._directory_dirty, False
        return dirty

    def mark_directory_dirty(self) -> None:
        self._directory_dirty = True

    def fsync(self) -> None:
        """Flush, fsync the current segment, and the directory if a segment was created
        (after the previous segment's seal, waited for here)."""
        self.seal_wait()
        self._current().fsync()
        if self._directory_dirty:
            fsync_directory(self.directory)
            self._directory_dirty = False

    def sealing(self):
        """The seal in progress as a blocking callable (None if there is none): an fsync of
        the current segment run in another thread calls it first (see the theory of operation)."""
        seal = self._seal
        return None if seal is None or seal.done else seal.complete

    def seal_wait(self) -> None:
        """Wait for the previous segment's seal (trying it again if it failed; OSError if it fails)."""
        seal = self._seal
        if seal is not None:
            seal.complete()
            self._sealed()

    def _sealed(self) -> None:
        seal = self._seal
        if seal is not None and seal.done:
            self._seal = None
            if self._segment is not None and self._segment.path == seal.unsealed:
                self._segment.path = seal.final

    def roll(self) -> None:
        """Start a new segment now, with the finished one on disk (nothing to do while the
        current one is empty).  Blocking: a snapshot ends the log here."""
        self.seal_wait()
        old = self._current()
        if old.records == 0:
            return
        old.fsync()
        first = self._last_record + 1
        path = os.path.join(self.directory, segment_name(first))
        new = SegmentWriter(path, first, 0, 0, create=True)  # if this fails, the old one stays current
        old.close()
        self._segment = new
        self._directory_dirty = True

    def _roll_unsealed(self) -> None:
        """Start a new segment because the current one is full, sealing the finished one in
        a worker thread: its records go to the OS here, its fsync runs there."""
        self._sealed()
        if self._seal is not None:  # filled within one fsync: wait for the previous seal
            self.seal_wait()
        old = self._current()
        if old.records == 0:
            return
        old.flush()
        first = self._last_record + 1
        final = os.path.join(self.directory, segment_name(first))
        new = SegmentWriter(final + NEXT_SUFFIX, first, 0, 0, create=True)  # if this fails, the old one stays
        self._segment = new
        self._directory_dirty = True
        self._seal = _Seal(old, new.path, final, self.directory)
        if self.run_seal is not None:
            self._seal.hand_to(self.run_seal)
        else:
            self._seal.start()

    def segments(self) -> list[str]:
        """Paths of the segment files, in log order (the current one maybe still ``.next``)."""
        self._sealed()
        paths = [path for _, path in list_segments(self.directory)]
        seal = self._seal
        if seal is not None and seal.unsealed not in paths and os.path.exists(seal.unsealed):
            paths.append(seal.unsealed)
        return paths

    def drop_segments_before(self, record_number: int) -> list[str]:
        """Delete the segments whose records all precede ``record_number``; returns their paths.

        The current segment is never deleted.  Oldest first, with a directory fsync
        after each, so a crash leaves a suffix of the log and never a gap.  A seal in
        progress is finished first, so the segments have their real names.
        """
        self.seal_wait()
        segments = list_segments(self.directory)
        dropped = []
        for (_, path), (next_first, _) in zip(segments, segments[1:]):
            if next_first > record_number:
                break
            os.remove(path)
            fsync_directory(self.directory)
            dropped.append(path)
        return dropped

    def discard_unwritten(self) -> None:
        """Forget the records not yet handed to the OS (a fail-stop: nobody was told of them)."""
        if self._segment is not None:
            self._segment.pending.clear()

    def close(self) -> None:
        """Flush and fsync (as Redis does at shutdown), then close."""
        if self._segment is None:
            return
        self.fsync()
        self._segment.close()
        self._segment = None

    def _current(self) -> SegmentWriter:
        if self._segment is None:
            raise ValueError("the append log is closed")
        return self._segment

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
