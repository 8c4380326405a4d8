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

Where things are
----------------
This module holds the writer (:class:`AppendLog`, one :class:`SegmentWriter` per segment
being appended to, the seal of a finished segment).  The record framing, segment names
and fsync helpers are node/persistence/aofformat.py; scanning a log at start, what
damage is cut and what is refused, and salvage are node/persistence/aofscan.py, whose
docstring tells that part of the theory.  Their names are importable from here too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

# The format's and the scanner's names, importable from here as before aof.py was split
# (node/persistence/replay.py, node/tools/cli.py, node/tools/admin_cli.py, chaos/sim/disk.py, tests):
from node.persistence.aofformat import (  # noqa: F401
    HEADER_SIZE,
    KINDS,
    MAX_PAYLOAD,
    NEXT_SUFFIX,
    OP_LOCAL,
    OP_REPLICATED,
    SEGMENT_SUFFIX,
    RecordError,  # noqa: F401
    RecordReader,
    _fsync_file,
    encode_record,
    fsync_directory,
    segment_name,
)
from node.persistence.aofscan import (  # noqa: F401
    CorruptLog,
    Salvage,
    ScanResult,
    SegmentInfo,
    TornTail,
    _record_follows,
    examine,
    list_segments,
    plan_salvage,
    salvage,
    scan,
    truncate_torn,  # noqa: F401
)

DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024


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
        for (_, path), (next_first, _) in zip(segments, segments[1:], strict=False):
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

    @property
    def closed(self) -> bool:
        return self._segment is None

    def _current(self) -> SegmentWriter:
        if self._segment is None:
            raise ValueError("the append log is closed")
        return self._segment

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
