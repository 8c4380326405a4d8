"""A region's operation log: what is logged, when it is on disk, and replay.

Theory of operation
-------------------
Every change to a region's state becomes one record of the append-only file
(format in :mod:`node.persistence.aof`), in the order the event loop made it.
What a command *decided* - the ID of a new entry, the entries a trim removes, an
IDMP duplicate, a delete's context - is logged as its outcome, never as the
command that decided it: a replay applies the outcome again, so a newer version
that would decide differently (another ID, another trim cutoff, another IDMPAUTO
hash) cannot re-write history.  In a region of a cluster that history is shared:
an operation this region sent is held by its peers under its dot ``(region, n)``,
and a replay that rebuilt other content under the same dot would leave this
region different from them for good, without an error.

The records, their tags and the format versions are node/persistence/oplogformat.py
(its docstring describes each); this module holds the open log (:class:`OperationLog`):
when a record reaches the disk, when a reply may leave, automatic snapshots.  The run
mark beside the log is node/persistence/runmark.py.

When a record reaches the disk is ``appendfsync``, as in Redis:

* ``always``: a reply leaves only after the records it may depend on are
  fsynced.  Clients share fsyncs (group commit): the server writes and fsyncs
  the log once at the end of a turn of its event loop, covering every client
  served in that turn, then sends their replies - as Redis does before it
  sleeps.  A client waits only for records that existed when its replies were
  produced, so a busy neighbour cannot starve it.
* ``everysec``: records are written to the OS before any reply (a crash of the
  process loses nothing); an fsync runs once a second (a crash of the machine
  loses about a second).  In a region of a cluster, fsyncs also run in a
  worker thread after records were written, one at most every
  ``crdt-repl-fsync-interval-ms`` (10 ms; the first at once after a quiet spell,
  so a steady trickle of writes shares fsyncs instead of one each), so a crash
  of the machine loses about that much.  Clients never wait for these.
* ``no``: records are written to the OS before any reply; the OS decides when
  they reach the disk.

Operations leave for other regions once their records reached the OS, whatever
the policy: the disk is not on the way of every cross-region delivery.  (Until
this version they left only once fsynced.)  A killed process loses nothing the
OS holds, but a crashed machine may lose the unsynced tail while peers hold
some of those operations, and a region that minted their dots again would give
two operations one dot.  So the log keeps a *run mark* beside its segments
(``last-run``): ``clean`` after a close, else the boot id of the machine it runs
in, or ``recover``.  A start that finds another boot's id there (or ``recover``)
may have lost records: it writes ``recover``, and its region takes no writes
until every live peer handshook and it holds the last of its own operations any
of them held (node/activeactive/region.py's recovery); then the mark becomes this
boot's id (:meth:`OperationLog.recovered`).  A process killed in the same boot
starts writable at once.

A failed write or fsync stops the region accepting writes (``MISCONF``) until
the cron manages to write and fsync again (in a worker thread, as the
``everysec`` fsync); replies held for ``always`` stay held, since what they
acknowledge is not on disk.  Under ``everysec`` and ``no`` the reply of a
command whose record could not be written is held too: a process crash
meanwhile would lose it, so it is not acknowledged.  (Redis sends it, and so
did Braid until the chaos suite's lost-write checker made the case plain: a
region killed while its disk is full.)  Readers are not held (under ``always``
they are, as every reply is).  A held reply is not held for ever, though: once
it has waited ``aof-write-error-timeout-ms`` (2 s) and writing still fails
(checked once a second, :meth:`OperationLog.tick`), a command whose record is
not written (fsynced under ``always``) is answered ``MISCONF Errors writing to
the AOF file: ...`` - the error writes are refused with - and the other replies
held with it leave as they are.  That write is *not* acknowledged, and its outcome is
unknown, as after a timeout: it was applied in memory and readers may have seen
it; if the region keeps running until the disk takes its record again, it is
logged and replicated then; if the process ends first, it is lost.  (Before, the
client waited for the disk, minutes if need be, and a client library's retry
could report an error for a write that had committed meanwhile.)

A full-resync image (node/region/core.py's ``install_image``) is the one state a region
takes without logging it: a snapshot makes it the base of the file, and every
record after it describes operations on that state.  Replayed on the old state
those would be other operations - the causal log would stamp them with other
dependencies, and the region could never start again.  So the log before the
image is on disk before the image is taken (else the image is refused, and the
link asks for it again later), and when its snapshot cannot be written (a full
disk) no record after it reaches the file until it is
(:meth:`OperationLog.hold_for_image`): they wait in memory, writes are refused
with ``MISCONF``, and the cron writes the snapshot once there is room for it.
A process that ends before that leaves the log as it was before the image; its
next start replays it and is sent an image again.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence

from crdt.causal import Envelope
from node.persistence import snapshot
from node.persistence.aof import AppendLog
from node.persistence.aofformat import OP_LOCAL, OP_REPLICATED
from node.persistence.fsyncthread import FsyncThread

# The records' and the run mark's names, importable from here as before oplog.py was split
# (node/tools/cli.py, chaos/sim/disk.py, tests):
from node.persistence.oplogformat import (  # noqa: F401
    FORMAT,
    LONE_TAGS,
    LocalRecord,
    LoneMark,
    OwnOperation,
    command_record,
    decode_local,
    decode_replicated,  # noqa: F401
    idmp_duplicate_record,
    idmp_expiry_record,
    lone_marks,
    lone_record,
    own_entry,
    own_record,
    remote_record,
)
from node.persistence.runmark import (  # noqa: F401
    RUN_MARK,
    boot_id,
    mark_for_recovery,
    read_run_mark,
    unsynced_tail_may_be_lost,
    write_run_mark,
)
from node.region.supervision import ran_out_of_memory

log = logging.getLogger("braid.persistence")

# ``everysec`` in a region of a cluster: the fsyncs that follow writes start at most this
# often (seconds), so a steady trickle of writes shares them instead of one per record;
# the default when no region's setting (crdt-repl-fsync-interval-ms) is attached
REPLICATION_FSYNC_INTERVAL = 0.01

# ------------------------------------------------------------------ automatic snapshots
# What replaying one record costs a region at start, in CPU microseconds: the records of
# a log of XADDs, measured with ``python -m bench.replay_speed`` (a region of a cluster,
# the dearer kind: each operation is stamped again by the causal log), scan included,
# rounded up.  A faster machine replays faster: the bound below is then conservative.
REPLAY_US_PER_RECORD = 35


def rewrite_due(config, size: int, base_size: int, records_since_snapshot: int,
                replay_bound_ready: bool = True) -> str | None:
    """Why an automatic snapshot (Redis's automatic AOF rewrite) should start now, or None.

    Two rules, as ``INFO`` and docs/durability.md ("Snapshots") say: Redis's - the log passed
    ``auto-aof-rewrite-min-size`` and grew ``auto-aof-rewrite-percentage`` percent since
    the last snapshot (``base_size``: its size just after) - and a bound on the time a
    start would spend replaying the records written since the last snapshot,
    ``auto-aof-rewrite-max-replay-ms`` (estimated at :data:`REPLAY_US_PER_RECORD` per
    record; 0: no bound).  A percentage of 0 turns both off, as it turns off Redis's.
    ``replay_bound_ready`` False holds the second rule back: the caller keeps snapshots
    taken for it from using more than a tenth of the region's time (a large state makes
    each snapshot slow, and a busy region would otherwise snapshot without pause).
    """
    pct = int(config["auto-aof-rewrite-percentage"])
    if not pct:
        return None
    if size >= int(config["auto-aof-rewrite-min-size"]) and size >= base_size * (100 + pct) / 100:
        return f"the append-only file grew to {size} bytes"
    bound_ms = int(config["auto-aof-rewrite-max-replay-ms"])
    replay_ms = records_since_snapshot * REPLAY_US_PER_RECORD / 1000
    if bound_ms and replay_ms > bound_ms and replay_bound_ready:
        return (f"replaying the {records_since_snapshot} records since the last snapshot would take about "
                f"{replay_ms:.0f} ms at start (auto-aof-rewrite-max-replay-ms {bound_ms})")
    return None


# ------------------------------------------------------------------ the log
class DurabilityRules:
    """When a reply may leave and what may leave for other regions, from ``policy``,
    ``written`` (records handed to the OS) and ``synced`` (records on disk).  The
    deterministic simulation's log (chaos/sim/disk.py) keeps the same rules."""

    policy: str
    written: int
    synced: int
    _durable_told: int
    on_durable: Callable[[int], None] | None
    # operations leave once their records reached the OS, not the disk: a start that may
    # have lost the unsynced tail takes its own operations back from its peers first
    # (node/activeactive/region.py's recovery); False: they wait for the fsync
    leave_when_written = True

    replicating: bool
    replication_fsync_interval: Callable[[], float]
    # told each time ``synced`` rises (a region of a cluster: what its acknowledgements say is
    # on its disk, which WAITAOF at other regions counts)
    on_synced: Callable[[int], None] | None = None
    _synced_told = 0

    def replicate(self, on_durable: Callable[[int], None], fsync_interval: Callable[[], float],
                  on_synced: Callable[[int], None] | None = None) -> None:
        """A region of a cluster: ``on_durable`` hears which records may leave for the other
        regions, ``on_synced`` which are on disk, and fsyncs keep coming every
        ``fsync_interval()`` seconds while operations wait to leave (``crdt-repl-fsync-interval-ms``)."""
        self.on_durable = on_durable
        self.on_synced = on_synced
        self.replicating = True
        self.replication_fsync_interval = fsync_interval

    def durable(self, record: int) -> bool:
        """May a reply that depends on records up to ``record`` leave now?

        ``always``: once they are on disk.  Otherwise once they reached the OS: a write
        that failed (a full disk) holds the reply until the cron manages to write and
        fsync them, so a process crash meanwhile cannot lose what a client was told."""
        return self.synced >= record if self.policy == "always" else self.written >= record

    def _tell_durable(self) -> None:
        # what may leave for other regions: what reached the OS (a killed process loses none
        # of it; a crashed machine may, and its region then recovers it from its peers), or
        # only what is on disk when the region does not recover that way
        mark = self.written if self.policy == "no" or self.leave_when_written else self.synced
        if mark > self._durable_told:
            self._durable_told = mark
            if self.on_durable is not None:
                self.on_durable(mark)
        if self.synced > self._synced_told:
            self._synced_told = self.synced
            if self.on_synced is not None:
                self.on_synced(self.synced)


# OperationLog.unsaved_image: (snapshot, its record, the segment size to go back to, what to call once it is written)
_UnsavedImage = tuple[bytes, int, int, Callable[[int], None]]


class OperationLog(DurabilityRules):
    """The open log of a running region, with its fsync policy and group commit."""

    # a full-resync image the region took whose snapshot is not on disk yet (hold_for_image):
    # (snapshot, its record, the segment size to go back to, what to call once it is written)
    unsaved_image: _UnsavedImage | None = None

    def __init__(self, directory: str, policy: str, segment_size: int | None = None, scanned=None) -> None:
        kw = {} if segment_size is None else {"segment_size": segment_size}
        self.file = AppendLog.open(directory, scanned=scanned, **kw)
        self.directory = directory
        self.policy = policy
        # the machine may have lost what the last run wrote and did not fsync, or records were
        # cut (a torn tail this start cut, damage check-log --fix salvaged: both marked the log
        # "recover" before cutting, see mark_for_recovery): a region of a cluster takes its own
        # operations back from its peers before it mints any (and calls recovered() then);
        # until then the mark stays "recover", across restarts too
        self.boot = boot_id()
        self.may_have_lost = unsynced_tail_may_be_lost(read_run_mark(directory), self.boot)
        write_run_mark(directory, "recover" if self.may_have_lost else self.boot or "unknown")
        # the record the newest snapshot holds the state after: a start replays only what follows
        self.snapshot_record = next(iter(snapshot.list_snapshots(directory)), (0, ""))[0]
        self.written = self.file.last_record   # handed to the OS
        self.synced = self.file.last_record    # on disk
        self.error: str | None = None          # last write/fsync failure, until one succeeds
        self.fsyncs = 0
        self.last_fsync_ms = 0
        self.synced_bytes = 0  # of file.appended_bytes, how many are on disk
        # told how long each fsync took, in nanoseconds (node/runtime/metrics.py's histogram; None: nobody asks)
        self.on_fsync: Callable[[int], None] | None = None
        self._waiters: list[tuple[int, Callable[[], None]]] = []
        self._syncing = False
        self._fsync_thread = FsyncThread()  # where fsyncs run, off the event loop
        # where a full segment is sealed (aof.py), rather than in a thread of its own for each; both
        # started now, not when they first have work: a thread started after memory ran out may
        # never boot, and the event loop would wait for it for ever (fsyncthread.py)
        self._seal_thread = FsyncThread("braid-seal-segment")
        self._fsync_thread.start()
        self._seal_thread.start()
        self.file.run_seal = lambda seal: self._seal_thread.run(seal, (), None)
        self._fsync_started = float("-inf")  # monotonic time the last fsync started
        self._fsync_timer: asyncio.TimerHandle | None = None  # a paced fsync for replication
        # told the last durable record (per the policy): replication sends only what is durable
        self.on_durable: Callable[[int], None] | None = None
        self.replicating = False  # a region of a cluster: keep fsyncing while operations wait to leave
        # seconds between the fsyncs that follow writes in a region of a cluster (crdt-repl-fsync-interval-ms)
        self.replication_fsync_interval: Callable[[], float] = lambda: REPLICATION_FSYNC_INTERVAL
        self._durable_told = self.synced
        # injected faults (DEBUG DISK-FULL / DEBUG FSYNC-DELAY, for the chaos suite)
        self.disk_full = False
        self.fsync_delay_s = 0.0

    def inject_faults(self, disk_full: bool | None = None, fsync_delay_s: float | None = None) -> None:
        """DEBUG DISK-FULL (writes fail as on a full disk) and DEBUG FSYNC-DELAY (each fsync
        takes this much longer); None leaves a fault as it is."""
        if disk_full is not None:
            self.disk_full = disk_full
        if fsync_delay_s is not None:
            self.fsync_delay_s = fsync_delay_s

    # ------------------------------------------------------------ appending
    def log_own(self, own: list) -> None:
        self.file.append(OP_REPLICATED, own_record(own))

    def log_command(self, now_ms: int, argv: list[bytes], id_mode: str | None = None,
                    own: Sequence[tuple] = ()) -> None:
        self.file.append(OP_LOCAL, command_record(now_ms, argv, id_mode, own))

    def log_idmp_duplicate(self, now_ms: int, key: bytes) -> None:
        self.file.append(OP_LOCAL, idmp_duplicate_record(now_ms, key))

    def log_idmp_expiry(self, now_ms: int, stable: dict[int, int] | None = None) -> None:
        self.file.append(OP_LOCAL, idmp_expiry_record(now_ms, stable))

    def log_lone(self, tag: bytes, confirmed: int, withdrawn: Sequence[bytes] = ()) -> None:
        self.file.append(OP_LOCAL, lone_record(tag, confirmed, withdrawn))

    def log_remote_run(self, run: list[Envelope]) -> None:
        """A record of each of ``run`` (operations of other regions applied here, in order),
        appended in one go."""
        self.file.append_many(OP_REPLICATED, [remote_record(env) for env in run])

    @property
    def last_record(self) -> int:
        return self.file.last_record

    @property
    def size(self) -> int:
        return sum(os.path.getsize(p) for p in self.file.segments())

    # ------------------------------------------------------------ reaching the OS and the disk
    def write_out(self) -> bool:
        """Hand buffered records to the OS (before any reply); False if that failed."""
        if self.written == self.file.last_record:
            return self.error is None
        if self.unsaved_image is not None:
            return False  # records after a full-resync image wait until it is on disk (hold_for_image)
        try:
            if self.disk_full:  # records stay in the writer's buffer, as with a real ENOSPC
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.file.flush()
        except OSError as e:
            self._failed("write", e)
            return False
        self.written = self.file.last_record
        self._tell_durable()
        return True

    def fsync_now(self) -> None:
        if self.synced >= self.written or self.error is not None:
            return
        target_bytes = self.file.appended_bytes
        t0 = time.perf_counter_ns()
        try:
            self.file.fsync()
        except OSError as e:
            self._failed("fsync", e)
            return
        self._synced_to(self.written, target_bytes, time.perf_counter_ns() - t0)

    def after_sync(self, record: int, callback: Callable[[], None],
                   expired: Callable[[], None] | None = None, expire_after: float = 0.0) -> None:
        """Call ``callback`` once records up to ``record`` are on disk (``always``), or were
        written and an fsync followed.  ``expired``: called instead (and ``callback`` never)
        if, ``expire_after`` seconds from now, writing or fsyncing is failing still - at the
        first :meth:`tick` that finds it so: the bound on a reply a failing disk holds."""
        if expired is not None:
            callback = _HeldReply(callback, expired, time.monotonic() + expire_after)
        self._waiters.append((record, callback))
        self._start_fsync()

    def _expire_held_replies(self) -> None:
        """Writing or fsyncing is failing: the waiters whose bound passed are told so and forgotten."""
        now = time.monotonic()
        expired = [w for _, w in self._waiters if type(w) is _HeldReply and w.deadline <= now]
        if expired:
            self._waiters = [(rec, w) for rec, w in self._waiters if not (type(w) is _HeldReply and w.deadline <= now)]
            for w in expired:
                w.expired()

    def _start_fsync(self) -> None:
        # closed: an fsync that ended after close() (which fsyncs everything) starts no other
        if self._syncing or self.error is not None or self.file.closed or not self.write_out():
            return
        self._syncing = True
        self._fsync_started = time.monotonic()
        target, target_bytes = self.written, self.file.appended_bytes
        fd = os.dup(self.file.fileno())  # the segment may be rolled while the thread works
        directory_dirty = self.file.take_directory_dirty()
        seal = self.file.sealing()  # a finished segment still being put on disk goes first (aof.py)
        self._fsync_thread.run(_fsync, (fd, self.directory if directory_dirty else None, self.fsync_delay_s, seal),
                               lambda took_ns, err: self._fsynced(took_ns, err, target, target_bytes, directory_dirty))

    def _fsynced(self, took_ns: int, err: BaseException | None, target: int, target_bytes: int,
                 directory_dirty: bool) -> None:
        self._syncing = False
        if err is not None:
            if directory_dirty:
                self.file.mark_directory_dirty()
            if ran_out_of_memory(err):  # not the disk's failure: the loop's handler fail-stops the region
                raise err
            self._failed("fsync", err)
            return
        self._synced_to(target, target_bytes, took_ns)
        ready = [cb for rec, cb in self._waiters if rec <= self.synced]
        self._waiters = [(rec, cb) for rec, cb in self._waiters if rec > self.synced]
        for cb in ready:
            cb()
        if self._waiters:
            self._start_fsync()  # what was written while this fsync ran: the next group
        elif self.replicating:
            self.sync_for_replication()

    def sync_for_replication(self) -> None:
        """``everysec`` in a region of a cluster: fsync soon (in a worker thread), so that a
        crash of the machine loses little that peers may already hold (the region would
        take it back from them at its next start); clients do not wait for it, nor do
        other regions.  One fsync
        starts at most every ``replication_fsync_interval()`` seconds (the first at once
        after a quiet spell): records written meanwhile share the next one."""
        if self.policy != "everysec" or self.synced >= self.file.last_record or self._syncing \
                or self._fsync_timer is not None:
            return
        wait = self._fsync_started + self.replication_fsync_interval() - time.monotonic()
        if wait <= 0:
            self._start_fsync()
        else:
            self._fsync_timer = asyncio.get_running_loop().call_later(wait, self._paced_fsync)

    def _paced_fsync(self) -> None:
        self._fsync_timer = None
        if self.synced < self.file.last_record:  # the cron's fsync may have covered them meanwhile
            self._start_fsync()

    def _synced_to(self, target: int, target_bytes: int, took_ns: int) -> None:
        if self.unsaved_image is None:  # (an fsync started before the image: the writes stay refused)
            self.error = None
        self.fsyncs += 1
        self.last_fsync_ms = int(time.time() * 1000)
        self.synced = max(self.synced, target)
        self.synced_bytes = max(self.synced_bytes, target_bytes)
        if self.on_fsync is not None:
            self.on_fsync(took_ns)
        self._tell_durable()

    def _failed(self, what: str, e: BaseException) -> None:
        reason = getattr(e, "strerror", None) or str(e)
        if self.error is None:
            log.error("cannot %s the append-only file in %s: %s", what, self.directory, reason)
        self.error = f"{what} failed: {reason}"

    def tick(self) -> None:
        """Once a second: the ``everysec`` fsync, and after a failure: answering the replies it
        held past their bound (:meth:`after_sync`), then trying again - a full-resync image
        waiting for its snapshot first (:meth:`hold_for_image`)."""
        if self.error is not None:
            self._expire_held_replies()
            if self.unsaved_image is not None:
                try:
                    self._write_image(self.unsaved_image)
                except OSError:
                    return
            self.error = None  # try again; a new failure sets it back
            if not self.write_out():
                return
        if self.policy == "everysec" and self.synced < self.file.last_record:
            self._start_fsync()
        elif self.policy == "always" and self._waiters:
            self._start_fsync()

    def write_snapshot(self, data: bytes, record: int) -> None:
        """Write a snapshot of the state after ``record`` beside the log (node/persistence/snapshot.py)."""
        try:
            snapshot.write(self.directory, data, record)
        except OSError:
            # what was written of it would keep the disk full for everything else
            try:
                os.remove(os.path.join(self.directory, snapshot.file_name(record)) + ".tmp")
            except OSError:
                pass
            raise

    def hold_for_image(self, data: bytes, record: int, error: OSError, saved: Callable[[int], None]) -> None:
        """The region took a full-resync image, the state after ``record`` (the log up to it is
        on disk), and its snapshot ``data`` could not be written (``error``).

        The later records describe operations on the image: replayed on the log before it
        they would be other operations, and the region could not start.  So none reaches
        the file before the snapshot does - they wait in memory (:meth:`write_out`), writes
        are refused (``MISCONF``: ``error`` stays set until then) - and :meth:`tick` writes
        the snapshot once the disk has room for it, then calls ``saved(record)``.  A process
        that ends first leaves the log as it was before the image (:meth:`close` drops the
        records that waited): its next start replays that and is sent an image again.
        """
        # a segment that fills up would hand its records to the OS: they stay in this one's buffer
        self.unsaved_image = (data, record, self.file.segment_size, saved)
        self.file.segment_size = 1 << 62
        self.error = _image_error(error)
        log.error("cannot write the snapshot of a full-resync image in %s (%s): writes are refused and nothing "
                  "is logged until it is written (retried once a second)", self.directory,
                  getattr(error, "strerror", None) or error)

    def _write_image(self, image: _UnsavedImage) -> None:
        """Write the snapshot of the image :meth:`hold_for_image` holds (``image``, the
        ``unsaved_image``); OSError (and ``error`` set) if that still fails.  The records that
        waited for it may be written after it."""
        data, record, segment_size, saved = image
        try:
            if shutil.disk_usage(self.directory).free < len(data):  # it cannot fit: no need to fill the disk
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.write_snapshot(data, record)
        except OSError as e:
            self.error = _image_error(e)
            raise
        self.unsaved_image = None
        self.file.segment_size = segment_size
        self.error = None
        log.warning("wrote the snapshot of the full-resync image (record %d) in %s: writes are taken again",
                    record, self.directory)
        saved(record)

    def drop_before_snapshot(self, record: int) -> None:
        """A snapshot of the state after ``record`` is on disk: the segments and older snapshots it replaces go."""
        self.file.drop_segments_before(record + 1)
        snapshot.drop_older(self.directory, record)
        self.snapshot_record = max(self.snapshot_record, record)

    def rewrite_due(self, config, base_size: int, replay_bound_ready: bool = True) -> str | None:
        """Should an automatic snapshot start now (see :func:`rewrite_due`)?"""
        return rewrite_due(config, self.size, base_size, self.last_record - self.snapshot_record,
                           replay_bound_ready)

    def roll(self) -> None:
        """End the current segment here (fsynced) so the next record starts a new one.  After a
        full-resync image not yet on disk, its snapshot first (OSError if it still fails)."""
        if self.unsaved_image is not None:
            self._write_image(self.unsaved_image)
        self.file.roll()
        self.written = self.synced = max(self.synced, self.file.last_record)
        self.synced_bytes = self.file.appended_bytes
        self._tell_durable()

    def recovered(self) -> None:
        """This region holds its own operations its peers held: a later crash of this
        machine is one to recover from again, a killed process is not."""
        if self.may_have_lost:
            self.may_have_lost = False
            write_run_mark(self.directory, self.boot or "unknown")

    def close(self) -> None:
        """Flush and fsync everything (a clean shutdown loses nothing, whatever the policy)."""
        if self._fsync_timer is not None:
            self._fsync_timer.cancel()
            self._fsync_timer = None
        self._fsync_thread.stop()  # after an fsync still running: closing fsyncs everything anyway
        self._seal_thread.stop()  # (closing finishes a seal still to run: AppendLog.close waits for it)
        if self.unsaved_image is not None:
            try:
                self._write_image(self.unsaved_image)
            except OSError:
                if self.unsaved_image is not None:  # (not when only dropping what it replaces failed)
                    # the records after the image are operations on it: without it they must not reach
                    # the file, which ends as it did before the image (the next start is sent one again)
                    self.file.discard_unwritten()
                    log.warning("closing without the snapshot of the full-resync image: the records after "
                                "it are dropped, and the next start is sent an image again")
        try:
            self.file.close()
        except OSError as e:
            self._failed("fsync", e)
            return
        if not self.may_have_lost:  # a recovery left unfinished stays one to finish
            try:
                write_run_mark(self.directory, "clean")
            except OSError as e:
                log.warning("cannot mark the log in %s as closed cleanly: %s", self.directory, e)


def _fsync(fd: int, directory: str | None, delay_s: float = 0.0, seal: Callable[[], None] | None = None) -> int:
    """Runs in the log's fsync thread; returns how long it took in nanoseconds (an injected delay included)."""
    t0 = time.perf_counter_ns()
    if delay_s:
        time.sleep(delay_s)  # a slow disk (DEBUG FSYNC-DELAY): this runs in a worker thread
    try:
        if seal is not None:
            seal()
        os.fsync(fd)
    finally:
        os.close(fd)
    if directory is not None:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return time.perf_counter_ns() - t0


def _image_error(e: BaseException) -> str:
    return f"snapshot of the full-resync image failed: {getattr(e, 'strerror', None) or e}"


class _HeldReply:
    """A waiter of :meth:`OperationLog.after_sync` with a bound: past ``deadline`` while writing
    or fsyncing fails, ``expired`` is called instead of it."""

    __slots__ = ("callback", "deadline", "expired")

    def __init__(self, callback: Callable[[], None], expired: Callable[[], None], deadline: float) -> None:
        self.callback, self.expired, self.deadline = callback, expired, deadline

    def __call__(self) -> None:
        self.callback()
