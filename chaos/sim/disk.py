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
inside a simulated region's :class:`node.region.core.RegionCore`: the core logs through the
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
damage followed by a valid record (``aof._record_follows``), an intact record of
an unknown kind, and - when the run mark says the last run closed cleanly, so
nothing can be torn - a bad last record are *damage*: :class:`Damage` is raised,
as the real start refuses such a log (``aof.examine``'s rules, on one segment:
:func:`scan_bytes`).  A start that cuts a torn tail sets the run mark to
``recover`` first, as the real one does (``mark_for_recovery``).

The operator's faults (chaos/sim/world.py) act on these files too.  A *clean
stop* (:meth:`SimFile.stop_cleanly`) writes everything back and leaves the run
mark ``clean`` (unless a recovery was left unfinished: it stays ``recover``).
A *copy* (:meth:`SimFile.copy`, a :class:`FileCopy`) is what a backup or a VM
snapshot takes: the durable bytes, the snapshot and the run mark at that moment,
never the OS cache; :meth:`SimFile.restore` puts one back.  A *bit flip*
(:meth:`SimFile.flip`) hits a stopped region's log - only the records a start
would read, those after the snapshot's record - or its snapshot (whose checksum
then fails: ``snapshot.decode`` raises).  :meth:`SimFile.salvage` is the operator
after a refused start, as ``braid check-log --fix``: the run mark becomes
``recover``, the log keeps the valid prefix before the first bad record, a
damaged snapshot is moved aside - and since the records before a snapshot are
gone from a real folder (``drop_before_snapshot``), nothing a region could start
from remains then: the operator empties the folder, and the region takes
everything from its peers.  :func:`held_vv` reads what a folder holds, by the
real record decoders, so the world can say what a restore or a salvage lost.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from dataclasses import dataclass

from crdt.causal import Envelope
from node.persistence import aof, snapshot
from node.persistence.oplog import (
    DurabilityRules,
    command_record,
    decode_local,
    decode_replicated,
    idmp_duplicate_record,
    idmp_expiry_record,
    lone_record,
    own_record,
    remote_record,
)


class Damage(Exception):
    """A start refuses the region's files (the real start raises ``LoadError``): damage in the
    log, or a snapshot that fails its checksum."""


class MachineDown(BaseException):
    """The machine loses power in the middle of a call into the region's core (the image-crash
    fault, while the snapshot of a full-resync image is being written).  A BaseException, so
    that nothing in the core takes it for an error it handles: the world catches it and
    crashes the region."""


@dataclass(frozen=True)
class FileCopy:
    """A copy of a region's folder as a backup or a VM snapshot takes it: what is durable."""

    taken_ms: int
    durable: bytes
    snapshot: tuple[int, bytes] | None
    recover_mark: bool
    closed_cleanly: bool


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
        # the run mark says "clean": the last run closed cleanly (stop_cleanly), so the log has
        # no torn tail and a bad last record is damage; a start writes another mark at once
        self.closed_cleanly = False
        # a bit the world flipped and no start or salvage has dealt with yet (the damage check):
        # ("log", offset, in the last record, the mark was clean) or ("snapshot", offset, ...)
        self.flipped: tuple[str, int, bool, bool] | None = None
        # the image-crash fault: writing a snapshot fails (a full disk) while set; and the next
        # snapshot write is interrupted by the machine going down
        self.snapshot_fails = False
        self.crash_in_snapshot = False

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

    # ------------------------------------------------------------ the operator's faults
    def stop_cleanly(self) -> None:
        """The region's log was closed: everything written is fsynced and the run mark says
        ``clean`` - unless a recovery is unfinished, which keeps ``recover`` (oplog.close)."""
        self.fsync()
        self.closed_cleanly = not self.recover_mark

    def copy(self, now_ms: int) -> FileCopy:
        """What a backup (or a snapshot of the VM's disk) taken now holds: the durable bytes,
        the snapshot and the run mark, not the OS cache."""
        return FileCopy(now_ms, bytes(self.durable), self.snapshot, self.recover_mark, self.closed_cleanly)

    def restore(self, c: FileCopy) -> None:
        """The operator put the folder back as ``c`` holds it (the region is stopped)."""
        self.durable, self.cache, self.record_ends = bytearray(c.durable), bytearray(), []
        self.snapshot, self.recover_mark, self.closed_cleanly = c.snapshot, c.recover_mark, c.closed_cleanly
        self.flipped = None

    def live_start(self) -> int:
        """Where the records a start reads begin: after the snapshot's record (those before it
        are gone from a real folder, ``drop_before_snapshot``)."""
        if self.snapshot is None:
            return 0
        ends = record_ends(self.contents())
        record = self.snapshot[0]
        return ends[record - 1] if 0 < record <= len(ends) else 0

    def flip(self, rng: random.Random) -> str | None:
        """Flip one bit of this stopped region's log (what a start reads of it; half the time
        in its last record) or of its snapshot; returns what was hit (None: nothing to hit).
        (A bit on the platter: a stopped region's OS cache is empty - but for lying-fsync's.)"""
        data = bytes(self.durable)
        start = self.live_start()
        ends = [e for e in record_ends(data) if e > start]
        targets = []
        if len(data) > start:
            targets.append("log")
        if self.snapshot is not None:
            targets.append("snapshot")
        if not targets:
            return None
        what = rng.choice(targets)
        bit = 1 << rng.randrange(8)
        if what == "snapshot":
            record, image = self.snapshot
            at = rng.randrange(len(image))
            self.snapshot = (record, image[:at] + bytes([image[at] ^ bit]) + image[at + 1:])
            self.flipped = ("snapshot", at, False, self.closed_cleanly)
            return f"snapshot byte {at} of {len(image)}"
        last_from = ends[-2] if len(ends) >= 2 else start
        if ends and rng.random() < 0.5:  # the last record: a torn append, unless the log closed cleanly
            at = rng.randrange(last_from, ends[-1])
        else:
            at = rng.randrange(start, len(data))
        self.durable[at] ^= bit  # the region is stopped: everything it has is durable
        last = bool(ends) and last_from <= at < ends[-1]
        self.flipped = ("log", at, last, self.closed_cleanly)
        mark = "clean" if self.closed_cleanly else "recover" if self.recover_mark else "boot"
        return f"log byte {at} of {len(data)}{' (its last record)' if last else ''}, run mark {mark}"

    def salvage(self) -> str:
        """The operator after a refused start, as ``braid check-log --fix``: the run mark becomes
        ``recover`` (before anything is cut), the log keeps its valid prefix, a damaged
        snapshot goes - and with it everything a start could use (the records before it are
        gone from a real folder), so the operator empties the folder.  Returns what was done."""
        self.recover_mark, self.closed_cleanly = True, False
        data = self.contents()
        done = []
        _records, torn, damage = scan_bytes(data, closed_cleanly=False)
        bad = damage[0] if damage is not None else torn
        if bad is not None:
            done.append(f"check-log --fix kept the log's first {bad} bytes (cut {len(data) - bad})")
            self.truncate(bad)
        if self.snapshot is not None:
            try:
                snapshot.decode(self.snapshot[1])
            except snapshot.SnapshotError as e:
                self.durable, self.cache, self.record_ends, self.snapshot = bytearray(), bytearray(), [], None
                self.recover_mark = False  # an empty folder has no run mark
                done.append(f"the snapshot is damaged ({e}) and the log lacks what it held: the folder was "
                            "emptied")
        self.flipped = None
        return "; ".join(done) or "nothing to cut"


def record_ends(data: bytes) -> list[int]:
    """The offset where each valid record of ``data`` ends (the real reader, up to any damage)."""
    reader = aof.RecordReader()
    reader.feed(data)
    ends = []
    try:
        while reader.next_record() is not None:
            ends.append(reader.offset)
    except aof.RecordError:
        pass
    return ends


def scan_bytes(data: bytes, closed_cleanly: bool) -> tuple[list[tuple[int, int, bytes]], int | None,
                                                         tuple[int, str] | None]:
    """One segment read as ``aof.examine`` reads a log's last segment: its valid records
    (numbered from 1), where a torn tail starts (None: none), and damage (offset, reason;
    None: none).  The rules are the real ones: a bad record followed by a valid one
    (``aof._record_follows``), or intact but of an unknown kind, is damage; otherwise it and
    what follows are a torn tail - unless the log closed cleanly, where nothing is torn."""
    reader = aof.RecordReader()
    reader.feed(data)
    records: list[tuple[int, int, bytes]] = []
    torn = damage = None
    try:
        reader.take_records(records, 1)
        if reader.pending:
            torn = (reader.offset, f"incomplete record ({reader.pending} bytes at the end of the file)")
    except aof.RecordError as e:
        torn = (e.offset, e.reason) if e.may_be_torn else None
        if not e.may_be_torn:
            damage = (e.offset, e.reason)
    if torn is not None:
        follows = aof._record_follows(data[torn[0]:])
        if follows is not None:
            damage, torn = (torn[0], f"{torn[1]}; {follows}"), None
        elif _clean_tail_is_damage(closed_cleanly):
            damage, torn = (torn[0], f"{torn[1]} at the end of a log closed cleanly (damage, not a torn "
                                     "append)"), None
    return records, None if torn is None else torn[0], damage


def _clean_tail_is_damage(closed_cleanly: bool) -> bool:
    """A bad last record of a log whose run mark says ``clean`` is damage (the planted bug
    cut-clean-tail replaces this)."""
    return closed_cleanly


def read_back(file: SimFile) -> tuple[list[tuple[int, int, bytes]], int]:
    """The records of a restarted region's file, numbered from 1, and how many torn bytes were
    cut; :class:`Damage` if a start must refuse the log."""
    data = file.contents()
    records, torn, damage = scan_bytes(data, file.closed_cleanly)
    if damage is not None:
        raise Damage(f"the append-only file is damaged at offset {damage[0]}: {damage[1]}")
    cut = 0 if torn is None else len(data) - torn
    if cut:
        file.recover_mark = True  # mark_for_recovery: on disk before the cut
        file.truncate(torn)
    return records, cut


def held_vv(file: SimFile, region: int, on_platter: bool = False) -> dict[int, int]:
    """The version vector of what ``file`` holds (its snapshot and its valid records), read by
    the real decoders: what a region starting from it would hold before it hears from peers.
    ``on_platter``: only what is on disk (fsynced), which a crash of the machine keeps."""
    data = bytes(file.durable) if on_platter else file.contents()
    records, _torn, _damage = scan_bytes(data, closed_cleanly=False)
    vv: dict[int, int] = {}
    after = 0
    if file.snapshot is not None:
        after = file.snapshot[0]
        try:
            vv = dict(snapshot.decode(file.snapshot[1]).causal.vv)
        except snapshot.SnapshotError:
            return {}  # nothing a start could use
    for _n, kind, payload in records[after:]:
        if kind == aof.OP_REPLICATED:
            rec = decode_replicated(payload)
            dots = [(rec.origin, rec.n)] if isinstance(rec, Envelope) else [(region, e.n) for e in rec]
        else:
            local = decode_local(payload)
            dots = [(region, e.n) for e in local.own or ()]
        for origin, n in dots:
            if n is not None and n > vv.get(origin, 0):
                vv[origin] = n
    return vv


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
        # (record, callback) of after_sync: called once an fsync covered the record
        self.sync_waiters: list[tuple[int, Callable[[], None]]] = []
        self._buffer: list[bytes] = []
        self._durable_told = records
        self.may_have_lost = False  # set by the region: it recovers before it mints (core.attach_log)
        # a full-resync image whose snapshot could not be written yet (hold_for_image):
        # (snapshot, its record, what to call once it is written)
        self.unsaved_image: tuple[bytes, int, Callable[[int], None]] | None = None

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

    def log_lone(self, tag: bytes, confirmed: int, withdrawn: list[bytes] = ()) -> None:
        self._append(aof.OP_LOCAL, lone_record(tag, confirmed, withdrawn))

    def log_remote_run(self, run: list[Envelope]) -> None:
        for env in run:
            self._append(aof.OP_REPLICATED, remote_record(env))

    def _append(self, kind: int, payload: bytes) -> None:
        self._buffer.append(aof.encode_record(kind, payload))
        self.last_record += 1

    # ------------------------------------------------------------ what the region's turn does
    def write_out(self) -> None:
        """Hand this turn's records to the OS (before any reply, as the real server does);
        records after a full-resync image wait until its snapshot is written (hold_for_image)."""
        if not self._buffer or self.unsaved_image is not None:
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

    def after_sync(self, record: int, callback: Callable[[], None], expired: Callable[[], None] | None = None,
                   expire_after: float = 0.0) -> None:
        """``OperationLog.after_sync`` (WAITAOF with numlocal 1): ``callback`` once records up to
        ``record`` are on disk, whatever the policy - :attr:`fsync_asked` makes the region's next
        end of turn start an fsync.  (A simulated disk never fails an fsync: ``expired`` is never
        called.)"""
        if self.synced >= record:
            callback()
        else:
            self.sync_waiters.append((record, callback))

    @property
    def fsync_asked(self) -> bool:
        """Does a caller of :meth:`after_sync` wait for an fsync (one starts even under ``no``)?"""
        return bool(self.sync_waiters)

    @property
    def size(self) -> int:
        return len(self.file.contents())

    def roll(self) -> None:
        """Before a snapshot: everything so far written and on disk (the real log ends a
        segment, fsynced, so the snapshot's record is the last of one).  After a full-resync
        image not yet on disk, its snapshot first (OSError if it still fails)."""
        if self.unsaved_image is not None:
            self._write_image()
        self.write_out()
        self.file.fsync()
        self.synced = self.written
        self._tell_durable()

    def write_snapshot(self, data: bytes, record: int) -> None:
        """The snapshot is kept beside the file, durable once this returns (written aside,
        fsynced, renamed: a crash never tears it).  The image-crash fault makes it fail (a
        full disk: OSError, as the real write) or the machine go down in the middle of it
        (:class:`MachineDown`: no snapshot)."""
        if self.file.crash_in_snapshot:
            self.file.crash_in_snapshot = False
            raise MachineDown()
        if self.file.snapshot_fails:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.file.snapshot = (record, data)

    def hold_for_image(self, data: bytes, record: int, error: OSError, saved: Callable[[int], None]) -> None:
        """``OperationLog.hold_for_image``: the snapshot of the image just installed could not be
        written, so no later record reaches the file until it is (they wait in memory, writes
        are refused while ``error`` is set); :meth:`tick` tries again."""
        self.unsaved_image = (data, record, saved)
        self.error = f"cannot write the snapshot of a full-resync image: {error.strerror or error}"

    def _write_image(self) -> None:
        data, record, saved = self.unsaved_image
        self.write_snapshot(data, record)  # OSError: still not
        self.unsaved_image = None
        self.error = None
        saved(record)

    def tick(self) -> None:
        """The cron's log tick (``OperationLog.tick``): a held image's snapshot tried again."""
        if self.unsaved_image is not None:
            try:
                self._write_image()
            except OSError:
                return
            self.write_out()

    def drop_before_snapshot(self, record: int) -> None:
        """The records stay: a restart replays those after the snapshot's record."""

    def fsync_done(self) -> None:
        """The fsync started by :meth:`begin_fsync` returned success."""
        target, self.fsyncing = self.fsyncing, None
        self.file.fsync()
        self.synced = max(self.synced, target or 0)
        self._tell_durable()
        ready = [callback for record, callback in self.sync_waiters if record <= self.synced]
        self.sync_waiters = [(record, callback) for record, callback in self.sync_waiters if record > self.synced]
        for callback in ready:
            callback()
