"""The region core's side of a full resync: a peer's image taken as this region's state, or
joined with it (node/activeactive/backlog.py decides what an image holds and keeps).

Theory of operation
-------------------
Taking an image (:meth:`FullResync.install`): ``ActiveActive.adopt_image`` makes it the
region's replicated state, the operations this region held that the image lacks are applied
again on top, then a snapshot makes the new state the base of the append-only file and
readers blocked on any key are served.

The old log does not lead to the new state, so nothing may be logged on top of the image
before its snapshot is on disk: replayed on the old state, a record of an operation sent
with the image's dependencies would not stamp the same, and the region could never start
again.  So the old log is put on disk first, ending a segment at record R (when even that
fails, the image is refused and the link asks for it again), and the snapshot is the state
after R: the image with the operations applied again on top (so that dropping the old log
loses none of this region's own).  Their records follow R (they are logged as they are
applied), and a replay from the snapshot skips them as the causal log skips any operation
it holds.  A snapshot that cannot be written (a full disk) leaves the log holding every
record after R back, and the region refusing writes, until the cron writes it
(``OperationLog.hold_for_image``): a process that ends first starts again from the old log,
which holds those operations, and is sent an image again.  Meanwhile the region's acks say
no more than that old log holds, and nothing new is on disk (``ActiveActive.image_held``):
a peer's WAIT or WAITAOF must not count it for what lives only in its memory.

Joining (:meth:`FullResync.join`, crdt/join.py) is the same around ``ActiveActive.join_image``:
both regions dropped operations the other lacks, so each joins the other's state into its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from node.persistence import snapshot

if TYPE_CHECKING:
    from node.region.core import RegionCore

log = logging.getLogger("braid.server")


class FullResync:
    """Take or join a peer's image (see the module's docstring)."""

    def __init__(self, core: RegionCore) -> None:
        self.core = core

    def install(self, data: bytes) -> bool:
        """Take a peer's image as this region's replicated state.  False: refused (nothing changed)."""
        aa = self.core.member()
        if not self._take(data, aa.adopt_image, "refusing a full-resync image", "crdt-image-install"):
            return False
        log.warning("installed a full-resync image: version vector %s", aa.causal.vv)
        return True

    def join(self, data: bytes) -> bool:
        """Join a peer's image into this region's state.  False: refused (nothing changed)."""
        aa = self.core.member()
        if not self._take(data, aa.join_image, "refusing to join a peer's state", "crdt-state-join"):
            return False
        log.warning("joined a peer's state with this region's: version vector %s", aa.causal.vv)
        return True

    def _take(self, data: bytes, take: Callable[[bytes], list | None], refusing: str, event: str) -> bool:
        """The steps :meth:`install` and :meth:`join` share around ``take`` (which changes the
        state and returns the envelopes to deliver again on top, or None), timed as LATENCY's
        ``event``."""
        core = self.core
        aa = core.member()
        oplog = core.oplog
        t0 = core.latency_start()
        try:
            if oplog is not None:
                try:
                    oplog.roll()  # the old state's records on disk, ending a segment: the snapshot follows them
                except OSError as e:
                    log.error("%s: the append-only file cannot be put on disk first: %s", refusing, e.strerror or e)
                    return False
                base = oplog.last_record
                old_log_held = dict(aa.hub.acknowledgement()[0])  # (everything: the roll put it on disk)
            replayed = take(data)
            if replayed is None:
                return False
            for env in replayed:  # operations this region held that the new state lacks, its own among them
                if env.n > aa.causal.vv.get(env.origin, 0):
                    aa.hub.deliver(env)
            if oplog is not None:
                if self._save(base):  # the new state is the base of the log, on disk
                    aa.log_started()
                else:  # held in memory until the disk takes its snapshot: acks say no more than the old log
                    aa.image_held(old_log_held, aa.causal.end)
            core.db.ready.update(core.db.keys)
            core.keys_ready()
            return True
        finally:
            core.latency_end(event, t0)

    def _save(self, record: int) -> bool:
        """The snapshot that makes a full-resync image just installed the base of the append-only
        file, at ``record`` (see the module's docstring); written even while a BGSAVE runs: the
        older state that one writes cannot be the base any more.  False: the disk refused it, and
        the log holds it (and every record after it) until the disk takes it."""
        core = self.core
        oplog = core.oplog
        assert oplog is not None  # (an image is saved only with a log)
        data = snapshot.encode(core.db.keys, core.member().causal, record, core.system_ms(), True, core.region)
        core.lone_steps.log_withdrawn_again()
        try:
            oplog.write_snapshot(data, record)
        except OSError as e:
            core.last_bgsave_ok = False
            oplog.hold_for_image(data, record, e, self._held_image_saved)
            return False
        core.saved(record, None)
        return True

    def _held_image_saved(self, record: int) -> None:
        """The snapshot :meth:`_save` could not write is on disk now (the log's tick wrote it)."""
        self.core.saved(record, None)
        self.core.member().image_saved()
