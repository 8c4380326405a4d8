"""A simulated disk and the operation log a simulated region writes to it.

Theory of operation
-------------------
:class:`SimFile` is one append-only file as a machine sees it: ``durable`` bytes
are on the platter, ``cache`` bytes were written to the OS but not yet fsynced.
An fsync moves the cache to the platter.  A crash of the *machine* keeps the
platter and, at the world's choice, a prefix of the cache - nothing (every
unsynced write lost), a few whole records, or a torn record (a short prefix, or
a record whose last bytes are zeros: a sector that never reached the disk).  A
crash of the *process* keeps the cache too (the OS survives).

:class:`SimOperationLog` stands in for ``node.persistence.oplog.OperationLog``
inside a simulated region's :class:`node.core.RegionCore`: the core logs through the
same methods, the records are the real ones (``oplog.own_record`` and friends
framed by ``aof.encode_record``), and durability is reported the same way
(``on_durable`` tells the region which records may leave for other regions:
written ones, and after a crash of the machine the region takes its own back
from its peers before it mints again, as a real one does; or, with
``--leave-when-on-disk``, fsynced ones, as regions did before).  Time is the world's:
an fsync is started (:meth:`SimOperationLog.begin_fsync`) and completes later
(:meth:`SimOperationLog.fsync_done`), and a crash in between loses it.

:func:`read_back` is the restart path: the file's bytes through the real sans-IO
``aof.RecordReader``; a torn tail is cut as ``aof-load-truncated yes`` does, and
damage followed by a valid record (``aof._record_follows``) is corruption the
simulation must never produce, so it raises.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from crdt.causal import Envelope
from node.persistence import aof
from node.persistence.oplog import (DurabilityRules, command_record, idmp_duplicate_record, idmp_expiry_record,
                                    own_record, remote_record)


class SimFile:
    """One file on a simulated machine: what is on the platter and what only the OS holds."""

    def __init__(self) -> None:
        self.durable = bytearray()
        self.cache = bytearray()
        self.record_ends: list[int] = []  # offsets in the cache where a written record ends
        self.fsyncs = 0
        self.snapshot: tuple[int, bytes] | None = None  # (last record it holds, state): written whole
        # the log's run mark (node/persistence/oplog.py): set by a crash of the machine, cleared
        # once the region took its own operations back from its peers; on disk, so it
        # survives crashes
        self.recover_mark = False

    def write(self, record: bytes) -> None:
        self.cache += record
        self.record_ends.append(len(self.cache))

    def fsync(self) -> None:
        """Make everything written so far durable (the planted bug lying-fsync replaces this)."""
        self.writeback()
        self.fsyncs += 1

    def contents(self) -> bytes:
        """What a reader sees while the machine runs."""
        return bytes(self.durable + self.cache)

    def crash_machine(self, rng: random.Random) -> str:
        """The machine loses power: keep the platter and maybe part of the cache; returns what happened."""
        cache, record_ends = bytes(self.cache), self.record_ends
        self.cache, self.record_ends = bytearray(), []
        if not cache:
            return "nothing unsynced"
        roll = rng.random()
        if roll < 0.4:
            return f"lost {len(cache)} unsynced bytes"
        if roll < 0.6 and record_ends:
            keep = rng.choice(record_ends)
            self.durable += cache[:keep]
            return f"kept {keep} of {len(cache)} unsynced bytes (whole records)"
        if roll < 0.8:
            keep = rng.randrange(1, len(cache) + 1)
            self.durable += cache[:keep]
            return f"kept {keep} of {len(cache)} unsynced bytes (a torn record)"
        keep = rng.choice(record_ends) if record_ends else len(cache)
        zeros = rng.randrange(1, min(keep, 64) + 1)
        self.durable += cache[:keep - zeros] + bytes(zeros)
        return f"kept {keep} of {len(cache)} unsynced bytes, the last {zeros} of them zeros (a torn sector)"

    def crash_process(self) -> str:
        """Only the process dies: the OS still writes what it was given."""
        kept = len(self.cache)
        self.writeback()
        return f"process killed; the OS keeps {kept} written bytes"

    def writeback(self) -> None:
        """The OS writes its cache back on its own (``appendfsync no`` relies on it)."""
        self.durable += self.cache
        self.cache.clear()
        self.record_ends.clear()

    def truncate(self, size: int) -> None:
        """Cut the file (a torn tail at restart); only ever called on a file with no cache."""
        del self.durable[size:]


def read_back(file: SimFile) -> tuple[list[tuple[int, int, bytes]], int]:
    """The records of a restarted region's file, numbered from 1, and how many torn bytes were cut."""
    data = file.contents()
    reader = aof.RecordReader()
    reader.feed(data)
    records: list[tuple[int, int, bytes]] = []
    try:
        while (record := reader.next_record()) is not None:
            records.append((len(records) + 1, *record))
    except aof.RecordError as e:
        if not e.may_be_torn or aof._record_follows(data[e.offset:]) is not None:
            raise AssertionError(f"simulated disk corrupted before its tail: {e}") from None
    cut = len(data) - reader.offset
    if cut:
        file.truncate(reader.offset)
    return records, cut


class SimOperationLog(DurabilityRules):
    """``OperationLog``'s interface over a :class:`SimFile`, with fsyncs that take virtual time."""

    def __init__(self, file: SimFile, policy: str, records: int) -> None:
        self.file = file
        self.policy = policy
        self.last_record = records
        self.written = records          # handed to the OS
        self.synced = records           # on the platter (as far as fsync said)
        self.error: str | None = None   # the server refuses writes while set (never set here)
        self.on_durable: Callable[[int], None] | None = None
        self.replicating = False
        self.fsyncing: int | None = None   # the record an fsync in flight will cover
        self._buffer: list[bytes] = []
        self._durable_told = records
        self.may_have_lost = False  # set by the region: it recovers before it mints (core.attach_log)

    def recovered(self) -> None:
        self.may_have_lost = self.file.recover_mark = False

    # ------------------------------------------------------------ what the server calls
    def log_own(self, own: list) -> None:
        self._append(aof.OP_REPLICATED, own_record(own))

    def log_command(self, now_ms: int, argv: list[bytes], id_mode: str | None = None, own: list = ()) -> None:
        self._append(aof.OP_LOCAL, command_record(now_ms, argv, id_mode, own))

    def log_idmp_duplicate(self, now_ms: int, key: bytes) -> None:
        self._append(aof.OP_LOCAL, idmp_duplicate_record(now_ms, key))

    def log_idmp_expiry(self, now_ms: int, stable: dict[int, int] | None = None) -> None:
        self._append(aof.OP_LOCAL, idmp_expiry_record(now_ms, stable))

    def log_remote_run(self, run: list[Envelope]) -> None:
        for env in run:
            self._append(aof.OP_REPLICATED, remote_record(env))

    def _append(self, kind: int, payload: bytes) -> None:
        self._buffer.append(aof.encode_record(kind, payload))
        self.last_record += 1

    # ------------------------------------------------------------ what the region's turn does
    def write_out(self) -> None:
        """Hand this turn's records to the OS (before any reply, as the real server does)."""
        if not self._buffer:
            return
        for record in self._buffer:
            self.file.write(record)
        self._buffer.clear()
        self.written = self.last_record
        self._tell_durable()

    def begin_fsync(self) -> int | None:
        """Start an fsync unless one is running or nothing waits; returns the record it covers."""
        if self.fsyncing is not None or self.synced >= self.written:
            return None
        self.fsyncing = self.written
        return self.fsyncing

    @property
    def size(self) -> int:
        return len(self.file.contents())

    def roll(self) -> None:
        """Before a snapshot: everything so far written and on disk (the real log ends a
        segment, fsynced, so the snapshot's record is the last of one)."""
        self.write_out()
        self.file.fsync()
        self.synced = self.written
        self._tell_durable()

    def write_snapshot(self, data: bytes, record: int) -> None:
        """The snapshot is kept beside the file, durable at once (a crash never tears it)."""
        self.file.snapshot = (record, data)

    def drop_before_snapshot(self, record: int) -> None:
        """The records stay: a restart replays those after the snapshot's record."""

    def fsync_done(self) -> None:
        """The fsync started by :meth:`begin_fsync` returned success."""
        target, self.fsyncing = self.fsyncing, None
        self.file.fsync()
        self.synced = max(self.synced, target or 0)
        self._tell_durable()
