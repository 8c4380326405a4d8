"""What is on disk at start: the append-only file's segments scanned, damage found, salvage.

Holds :func:`scan` and :func:`examine` (read every segment in order: the valid records, a
torn tail, or :class:`CorruptLog`), :func:`truncate_torn`, and the operator's salvage
(:func:`plan_salvage`, :func:`salvage`; ``braid check-log --fix``), with the bounded search
for valid records after damage (:func:`_record_follows`, :func:`_count_records`).  The
format is node/persistence/aofformat.py, the writer node/persistence/aof.py.

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
from dataclasses import dataclass, field

from xxhash import xxh3_64_intdigest

from node.persistence.aofformat import (
    _KIND_AT,
    _KINDS_OR_ZERO,
    _PREFIX,
    _SEGMENT_NAME,
    HEADER_SIZE,
    KINDS,
    MAX_PAYLOAD,
    NEXT_SUFFIX,
    SEGMENT_SUFFIX,
    RecordError,
    RecordReader,
    fsync_directory,
    segment_name,
)

_READ_CHUNK = 1024 * 1024
# Looking for a valid record after damage (_record_follows) is bounded: bytes that
# look like headers could make it quadratic.  Past the bounds the damage counts as
# corruption: refusing to start can be undone, cutting valid records cannot.
_SEARCH_MAX_CANDIDATES = 2_000_000  # ~3 s of Python at worst
_SEARCH_HASH_BUDGET = 8 * 1024 * 1024 * 1024  # bytes hashed; xxh3 does ~10 GB/s


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
            assert e.record is not None  # _classify numbers the record it raises for
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
                assert e.record is not None  # _classify numbers the record it raises for
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


def _scan_segment(path: str, first: int, is_last: bool,
                  records: list | None) -> tuple[int, tuple[str, int, str] | None]:
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
