"""One simulated region: the real region core, on a simulated disk and a virtual clock.

Theory of operation
-------------------
A :class:`SimRegion` drives a real :class:`node.region.core.RegionCore` - the same class
the asyncio server drives - built with the cluster configuration: no sockets, no
event loop.  Client commands go through ``RegionCore.call`` (the command table,
arity, the handlers, the operation log) for a :class:`node.region.core.Session`;
handlers read time only through ``now_ms()``, which reads the core's clock, here
the world's virtual clock plus this region's skew (clock faults move the skew,
backwards too).

The core's operation log is a :class:`chaos.sim.disk.SimOperationLog`, so every
record it writes lands on this region's :class:`SimFile`.  The server ends each
turn of its event loop with ``RegionCore.end_turn`` (records to the OS, then
an fsync if the policy wants one) and sends a reply once
``RegionCore.may_release`` allows; here the world calls :meth:`SimRegion.end_turn`
after every event that touched the region, with the same core calls, and a reply
that may not leave yet waits (``held``) for the fsync that covers the records
``RegionCore.reply_needs`` names.  Fsyncs take virtual time.

A crash drops the core (held replies are never sent: their clients see the
connection close) and crashes the file (see disk.py).  A clean stop
(:meth:`SimRegion.stop_cleanly`, the restore and bitflip faults) closes the log
as the real ``OperationLog.close`` does: this turn's records written, everything
fsynced, the run mark ``clean``; its held replies are not sent either (the
clients' connections close with the process).  :meth:`SimRegion.boot` is a
restart: the file's snapshot, if a full resync left one, is installed and the
records after it, torn tail cut, are replayed by the real
``node.persistence.replay`` into a fresh core, which then appends to the same
file - exactly the path of a real restart, minus the directory scan.  A start
that must refuse its files (damage in the log, a snapshot that fails its
checksum) raises :class:`chaos.sim.disk.Damage` before any core exists; the
world then plays the operator (``SimFile.salvage``) and starts it again.

The world watches two things as they happen, for the membership checks
(chaos/sim/membership.py): each operation of another region the region applies,
and each operation it issues (a watcher of its hub, ``ReplicationHub.watch``).

A fail-stop of the core (node/region/supervision.py: a command that raised after
changing state, an operation it could not apply, a state-changing cron step
that failed) is the process exiting: the world crashes the region as a process
(what was written stays, this turn's unwritten records and unsent replies are
gone) and restarts it later.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.persistence import replay, snapshot
from node.region.config import Config
from node.region.core import RegionCore, Session

from .disk import Damage, SimFile, SimOperationLog, read_back

if TYPE_CHECKING:
    from crdt.causal import CausalLog, Envelope
    from crdt.sync import LinkState
    from node.activeactive.region import ActiveActive

    from .world import Simulation

INDETERMINATE = object()  # the reply never came: the region crashed first


class SimPromiseStore:
    """The region's ``membership-promise.json`` (node/persistence/promise.py): written and
    fsynced before the promise is answered, so a crash never loses it."""

    def __init__(self) -> None:
        self.state: dict | None = None

    def save(self, state: dict | None) -> None:
        self.state = copy.deepcopy(state)

    def load(self) -> dict | None:
        return copy.deepcopy(self.state)


class _Watcher:
    """The hub's watcher (node/activeactive/hub.py's ``Watcher``): the membership checks see
    every operation of another region before the region applies it, and every one of its own
    before the hub stamps it (chaos/sim/membership.py)."""

    def __init__(self, region: SimRegion) -> None:
        self.region = region

    def applying(self, env: Envelope) -> None:
        self.region.sim.membership.on_apply(self.region, env)

    def issuing(self) -> None:
        self.region.sim.membership.on_issue(self.region)


class SimRegion:
    def __init__(self, sim: Simulation, cluster: ClusterConfig, spec: RegionSpec, policy: str) -> None:
        self.sim = sim
        self.cluster = copy.deepcopy(cluster)  # the region's own cluster file (tune changes it)
        self.spec = spec
        self.number = spec.number
        self.policy = policy
        self.file = SimFile()
        self.skew = 0                 # ms this region's clock is ahead (negative: behind)
        self.core: RegionCore | None = None
        self.client: Session | None = None
        self.incarnation = 0          # restarts so far: events of an older life are ignored
        self.links: dict[int, LinkState] = {}
        # replies waiting for an fsync: (record needed, callback, reply)
        self.held: list[tuple[int, Callable[[Any], None], Any]] = []
        self.fsync_own_n = 0          # this region's own operations the fsync in flight covers
        self.fail_stops = 0           # times its core fail-stopped
        self.promise_store = SimPromiseStore()  # its membership promise, on its disk (survives crashes)
        self.restart_as: str | None = None  # the operator's fault to act out before its next start
        self.stopped_ms = 0           # when the operator's fault stopped it
        # how it last went down: "machine" (a crash that may lose what the OS held unsynced),
        # "process" (a SIGKILL or a fail-stop: what was handed to the OS stays), "clean"
        self.went_down = ""

    # ------------------------------------------------------------ state
    @property
    def up(self) -> bool:
        return self.core is not None

    @property
    def aa(self) -> ActiveActive:
        return self.core.aa

    @property
    def causal(self) -> CausalLog:
        return self.core.aa.causal

    def wall_ms(self) -> int:
        return self.sim.sched.now + self.skew

    def virtual_seconds(self) -> float:
        """The world's clock, as a monotonic clock in seconds (no skew: clock faults move wall clocks)."""
        return self.sim.sched.now / 1000

    def own_n(self) -> int:
        return self.causal.vv.get(self.number, 0)

    # ------------------------------------------------------------ life
    def boot(self) -> int:
        """Start (again) from the file, on top of its snapshot if it has one; returns how many
        torn bytes were cut."""
        records, cut = read_back(self.file)  # Damage: the start refuses the log
        taken = self.file.snapshot
        image = None
        if taken is not None:
            try:
                image = snapshot.decode(taken[1])
            except snapshot.SnapshotError as e:
                # the real start skips it, and finds the log starting after its record with no
                # older snapshot (drop_before_snapshot): it does not start
                raise Damage(f"snapshot at record {taken[0]} is damaged ({e}) and the log no longer holds "
                             "what came before it") from None
        self.file.closed_cleanly = False  # the start writes its own run mark
        settings = {"appendfsync": self.policy,
                    # the world's backlog bound (the backlog fault; 0: none), and no age bound
                    "crdt-repl-backlog-size": self.sim.backlog_bytes, "crdt-repl-backlog-ttl": 0,
                    "crdt-lone-writes-after-ms": self.sim.lone_writes_after}
        # writes taken alone that it withdraws and issues again: the durability check's promises
        # move with them (a withdrawing region's links handshake again)
        core = RegionCore(Config(**settings), cluster=(self.cluster, self.spec), clock=self.wall_ms,
                          lone_observer=_LoneWritesWatch(self))
        if taken is None:
            replay.replay(core, records)
        else:
            replay.install(core, image, f"r{self.number}'s snapshot")
            replay.replay(core, [r for r in records if r[0] > taken[0]])
        oplog = SimOperationLog(self.file, self.policy, len(records))
        oplog.leave_when_written = self.sim.config.leave_when_written
        oplog.may_have_lost = oplog.leave_when_written and self.file.recover_mark
        core.attach_log(oplog)
        core.aa.membership_clock = self.virtual_seconds  # promises are timed by the world's clock
        core.aa.attach_promise_store(self.promise_store)  # a promise made before a crash holds
        self._watch(core)
        self.core = core
        self.client = Session(core)
        self.client.authenticated = True
        self.incarnation += 1
        self.links.clear()
        return cut

    def _watch(self, core: RegionCore) -> None:
        """What the checks need to see as it happens: every operation of another region this one
        applies, and every one it issues (chaos/sim/membership.py); writes it withdraws and
        issues again (node/activeactive/lone_writes.py)."""
        core.aa.hub.watch(_Watcher(self))

    def crash(self, machine: bool) -> str:
        """Kill the region; ``machine``: the machine too (unsynced bytes may be lost)."""
        self.sim.image_lost(self, self.core.oplog.unsaved_image is not None)
        held, self.held = self.held, []
        self.core = self.client = None
        self.links.clear()
        what = self.file.crash_machine(self.sim.rng) if machine else self.file.crash_process()
        self.went_down = "machine" if machine else "process"
        if machine:
            self.file.recover_mark = True  # the next start is in another boot of the machine
        for _needs, callback, _reply in held:
            callback(INDETERMINATE)
        return what

    def stop_cleanly(self) -> str:
        """Stop the region as a shutdown does: the log closed (``OperationLog.close``: this
        turn's records written, a held image's snapshot written first, everything fsynced,
        the run mark ``clean`` unless a recovery is unfinished); clients' connections close."""
        oplog = self.core.oplog
        if oplog.unsaved_image is not None:
            try:
                oplog.roll()
            except OSError:  # still no room: the records after the image are dropped with it
                oplog._buffer.clear()
                oplog.unsaved_image = None
                self.sim.image_lost(self, True)
        self.sim.image_lost(self, False)  # (a held image's snapshot is written: its history stays)
        oplog.write_out()
        held, self.held = self.held, []
        self.core = self.client = None
        self.links.clear()
        self.file.stop_cleanly()
        self.went_down = "clean"
        for _needs, callback, _reply in held:
            callback(INDETERMINATE)
        return "stopped cleanly (log closed, everything fsynced, run mark " + \
            ("clean)" if self.file.closed_cleanly else "recover: its recovery was unfinished)")

    # ------------------------------------------------------------ commands
    def call(self, argv: list[bytes], on_reply: Callable[[Any], None]) -> None:
        """Run one client command; ``on_reply`` gets the reply when the client would."""
        core = self.core
        reply = core.call(self.client, argv)
        if core.failed is not None:  # the process exits: no reply, this turn not written
            self.sim.fail_stopped(self)
            on_reply(INDETERMINATE)
            return
        needs = core.reply_needs(self.client)
        self.end_turn()
        if core.may_release(needs):
            on_reply(reply)
        else:
            self.held.append((needs, on_reply, reply))

    def read(self, argv: list[bytes]) -> Any:
        """A read the workload makes to choose its next write (same turn, no log)."""
        return self.core.call(self.client, argv)

    # ------------------------------------------------------------ the end of a turn
    def end_turn(self) -> None:
        """The core's end of turn; an fsync it wants takes virtual time; send what may leave."""
        self.after_writing(self.core.end_turn())

    def after_writing(self, fsync_wanted: bool) -> None:
        """The rest of :meth:`end_turn` once ``RegionCore.end_turn`` handed this turn's records to
        the OS and said whether it wants an fsync (a link acks in between: links.py, ``ack``)."""
        if fsync_wanted or self.core.oplog.fsync_asked:  # (an fsync WAITAOF asked for: under any policy)
            target = self.core.oplog.begin_fsync()
            if target is not None:
                self.fsync_own_n = self.own_n()
                self.sim.sched.after(self.sim.rng.randint(1, 8), self._fsynced, self.incarnation)
        self.sim.pump(self)

    def _fsynced(self, incarnation: int) -> None:
        if incarnation != self.incarnation or not self.up:
            return  # the machine crashed while fsyncing: nothing was promised
        core = self.core
        core.oplog.fsync_done()
        self.sim.promise(self, self.fsync_own_n, f"fsync at t={self.sim.sched.now}")
        self.sim.waits.progressed(self)  # a client in WAITAOF 1 may have its local count
        ready = [h for h in self.held if core.may_release(h[0])]
        self.held = [h for h in self.held if not core.may_release(h[0])]
        for _needs, callback, reply in ready:
            callback(reply)
        self.end_turn()  # what was written meanwhile: the next fsync; and send what became durable


class _LoneWritesWatch:
    """Tells the world what a region's writes taken alone did (node/region/lone.py's observer)."""

    def __init__(self, region: SimRegion) -> None:
        self.region = region

    def withdrawn(self, first_minted: int | None, last: int) -> None:
        self.region.sim.withdrawn(self.region, first_minted, last)

    def reissued(self, count: int) -> None:
        self.region.sim.reissued(self.region, count)
