"""The simulated world: a virtual clock, a seeded scheduler, a seeded network, faults.

Theory of operation
-------------------
Everything in one schedule is driven by one ``random.Random(seed)`` and one
event queue ordered by (virtual time, insertion number): no wall clock, no
threads, no sockets, so a seed is a schedule and the same seed gives the same
trace byte for byte.

Network model.  Each pair of regions keeps one connection, dialed by the lower
number, as the real regions do; at the handshake both ends build a
:class:`crdt.sync.LinkState` from the other's version vector (the Hello and the
Welcome).  Frames (a batch of envelopes, an ack) travel in a direction with a
seeded delay.  What a link sends goes through the real link's pure rules: each
direction of a connection keeps a :class:`crdt.sync.RelayHold` on the virtual
clock, at the relay delay of the region's settings, so third regions' operations
are held back and relayed as the real link does, and a held relay that may come
due wakes its link at the time the hold asks (``relay_wake``, the real link's
timer); batches are cut by bytes with the real planner (``crdt.sync.plan_frames``).
The real link is a gRPC stream over TCP, which never loses,
duplicates or reorders a frame: a frame that is *lost* is modelled honestly as a
broken connection - both ends drop their link state and the dialer reconnects
after a backoff, from fresh version vectors.  *Duplication* and *reordering*
are applied to frames within a connection anyway: that is stronger than TCP,
and proves the link logic and causal delivery do not depend on order (the same
envelope also reaches a region along several relay paths).  Frames of a closed
connection are discarded on arrival.

Partitions cut pairs (a whole region, or one pair: with three regions that is a
bridge, the third region relaying): connections break and redialing fails until
the cut heals.  A *clog* delays every frame sent in one direction until it
unclogs, without breaking the connection (a one-way partition, as long as it
lasts); *swizzle-clog* (FoundationDB) clogs a random subset of directions one
by one, then unclogs them in random order.  Crashes are the machine's (unsynced
writes lost or torn, see disk.py) or, under ``appendfsync no`` (which promises
nothing across a machine crash), the process's; the region restarts later from
its file.  Clock faults skew a region's clock or jump it backwards.

A region whose core fail-stops (node/region/supervision.py) crashes as a process and
restarts later, like a real region under a supervisor; the fail-stop is also
reported as an error of the run (the "exceptions" check), since it means the
code met a state or an operation it could not handle.  A region that keeps
fail-stopping stays down after ``FAIL_STOP_RESTARTS`` restarts (faults.py).

The cron.  Each region that is up runs the state-changing steps of the real
server's cron (node/region/cron.py, under the region's supervisor) every
virtual second of the active phase: IDMP expiry by time and size with the
region's stable vector (logged as the server logs it), trimming its replication
backlog (``ActiveActive.trim_backlog``, never past what a connected peer has been
sent), and garbage collection of the delete contexts every region has seen.  The
backlog keeps only what every peer acknowledged; with the *backlog* fault it is
also bounded by a few kilobytes (drawn per schedule, as the region's
``crdt-repl-backlog-size``), so a region that was away - crashed, partitioned -
lacks trimmed operations at its next handshake, and the link starts with a
full-resync image (``crdt.sync.opening`` decides, as for the real link;
``RegionCore.resync_image`` on one side, ``RegionCore.install_image`` on the
other); a trim that overtakes a running link ends it (``NeedsResync``) and the
next handshake resyncs.  The fault also isolates a region now and then for a
partition longer than every backlog: before it heals every region trims all
its backlog may drop (the hours such a partition lasts, which a schedule's
seconds cannot hold), so both sides dropped operations the other lacks, and
the link starts with each end sending its state and joining the other's
(``RegionCore.join_image``, crdt/join.py); the joining region's history, for
the checkers, is then its own followed by what the other held that it lacked.
Installing an image makes the new state the base of the region's file through
the core's own SAVE: the simulated log keeps the snapshot beside the file
(durable at once, as the real SAVE's is), and a restart installs it
(``node.persistence.replay.install``) before replaying the records after it.
What a region trimmed stays known to the checkers (``Simulation.history``).

The operator's faults.  *restore*: the world keeps copies of each region's
folder, taken at random moments as a backup or a snapshot of its VM would be
(what is durable then: the log's bytes on the platter, the snapshot, the run mark;
``SimFile.copy``); the fault stops a region - cleanly (its log closed: everything
fsynced, run mark ``clean``) or by a crash of its machine - and starts it again
later from one of those older copies.  Nothing in the folder says it is old: the
start gate (``ActiveActive.recover_own_operations``, at every start) keeps the
region from taking writes until every live member handshook and it took back its
own operations they held; minting their numbers again would give two operations
one dot.  What no other region held is lost with the restore, and the region mints
those numbers again - so every copy taken before may hold operations that no
longer exist under their numbers: after a restore or a salvage the operator
starts a new set of copies (*stale-copies*, not in the default set, keeps the old
ones: restoring one forks the region's history, which Braid detects but cannot
resolve; chaos/README.md, Findings).  *bitflip*: the fault stops a region the same way and, before it starts
again, flips one bit of its log (the records a start reads; half the time the
last one, which after a clean close is damage, not a torn append) or of its
snapshot.  The real rules refuse the start (disk.py: ``read_back``,
``snapshot.decode``); the world then acts as the operator - ``braid check-log
--fix`` keeps the log's valid prefix, a damaged snapshot goes and the folder with
it (``SimFile.salvage``) - and starts the region again, which takes back from its
peers what the cut held.  A bad last record of a log that did not close cleanly
is cut at start as a torn tail, as a real start does.  What a restore or a
salvage took from a folder that no other region held is lost (the durability
check counts it, ``Simulation.file_losses``); the damage check holds every flip
to those rules.  *lone* (not in the default set): every region may take writes alone after 200 ms without a member
(``crdt-lone-writes-after-ms``), and the fault sends a region away for a while as
another restarts, from an older copy when there is one: the restarted one takes writes
alone, held, then confirms or withdraws them and issues them again (node/activeactive/lone_writes.py;
the durability check's promises follow them, and in the heal phase, with no cron,
``lone_tick`` still runs that part).  *image-crash*: when a region installs a full-resync image, its
machine goes down while the image's snapshot is being written (no snapshot: the
log before the image is what is on disk), or the snapshot cannot be written (a
full disk: ``OperationLog.hold_for_image`` - later records wait in memory, writes
are refused, the cron's log tick tries again once the disk has room) and the
machine goes down before it is.  Either way the region restarts from the log
before the image and is sent one again.

Membership.  The *membership* fault has the world act as braid-admin (and as a
joining region's activation task): a region joins, leaves gracefully or is
removed by force while it is down (chaos/sim/membership.py).  Regions can thus
appear (``--regions`` is the initial count) and stop being members; links are
made only between live members: a region dials the live members of its own list
(the lower number dials), and each connection passes both regions'
membership gate (``MembershipGate.check_peer`` on the other's epoch and list,
which adopts a newer list first).  A refused region is handed the refusing side's
list (the real region learns it by asking its peers at start; that start-up check
runs at every restart too); a region that commits or adopts a change restarts its
links, and an operation of a region its list does not know (``MembershipBehind``)
ends the link, whose next handshake brings the list.

A schedule has an active phase (client operations, faults, the cron) and a heal
phase (every fault lifted, every region restarted and connected, no client
operations, no cron) that runs until the event queue is empty - a membership
change under way keeps polling while anything else is left to do; then the
checkers judge (chaos/sim/checks.py).

Where things are: this module holds :class:`SimConfig` and :class:`Simulation` - running
a schedule, booting regions, the cron, the operator's copies, durability promises.  Two
parts of the simulation are mixed into it from their own modules: the network and the
links over it (links.py: :class:`~chaos.sim.links.Links`, the ``Network``) and the faults
with the operator's answers to them (faults.py: :class:`~chaos.sim.faults.Faults`).  The
virtual clock, the event queue and the trace are scheduler.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from crdt.causal import Envelope
from crdt.membership import JOINING, REMOVED
from crdt.sync import RelayHold
from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.region import cron
from node.region.config import FSYNC_POLICIES
from node.region.slots import SlotMap, key_slot

from .disk import Damage, FileCopy
from .faults import Faults
from .links import Links, Network, NetworkFaults
from .membership import MembershipDriver
from .region import SimRegion
from .scheduler import START_MS, GroupScheduler, Scheduler, _vv  # noqa: F401 (START_MS: tests import it from here)
from .waits import Waits

FAULTS = ("crash", "partition", "clog", "swizzle", "clock", "membership", "drop", "dup", "reorder", "backlog",
          "restore", "bitflip", "image-crash", "stale-copies", "lone", "admin-kill", "memory")
# the default set leaves out stale copies: a copy of a folder taken before the region lost
# operations (a restore, a salvage) may hold some it minted again since - restoring it forks
# the history, which Braid detects but cannot resolve.  The lone fault is left out too, for
# now: adding it changes the schedule of every seed, and the scenario tests pin seeds of the
# default set (tests/test_sim.py runs it on seeds of its own); the memory fault likewise
DEFAULT_FAULTS = tuple(f for f in FAULTS if f not in ("stale-copies", "lone", "memory"))
CRON_MS = 1000          # the real cron runs once a second
LONE_WRITES_AFTER_MS = 200  # the lone fault: crdt-lone-writes-after-ms of every region
BACKLOG_BYTES = (600, 1500, 4000)  # the backlog fault bounds each region's backlog by one of these
POLICIES = FSYNC_POLICIES  # appendfsync's, which a schedule runs its regions with
MAX_EVENTS = 1_000_000  # a schedule that has not settled after this many events is a liveness failure
BACKUP_CHANCE = 0.05    # per client step (restore fault): the operator copies a region's folder
BACKUPS_KEPT = 4        # the newest copies of each region's folder the operator keeps
SALVAGES = 3            # refused starts an operator salvages before giving up (a bug of the world)


@dataclass(frozen=True)
class SimConfig:
    """Everything a schedule depends on besides the seed (the replay command spells it out)."""

    seed: int
    steps: int = 150
    regions: int = 3          # at the start (membership changes add and remove regions)
    fsync: str = "always"
    faults: tuple[str, ...] = DEFAULT_FAULTS
    bug: str | None = None
    copies: bool = True       # COPY in the workload (schedules pinned before it was run without)
    # operations leave once their records reached the OS (as regions do), and a region whose
    # machine crashed takes its own back from its peers before it writes; False: they leave
    # once fsynced, the earlier rule (some schedules the scenario tests pin were recorded so)
    leave_when_written: bool = True
    shards: int = 1           # shard groups (chaos/sim/shards.py); 1: an unsharded database

    def command(self) -> str:
        parts = [f"braid-chaos sim --seed {self.seed} --steps {self.steps} --regions {self.regions}",
                 f"--fsync {self.fsync}"]
        if self.faults != DEFAULT_FAULTS:
            parts.append(f"--faults {','.join(self.faults) or 'none'}")
        if self.bug:
            parts.append(f"--bug {self.bug}")
        if not self.copies:
            parts.append("--no-copies")
        if not self.leave_when_written:
            parts.append("--leave-when-on-disk")
        if self.shards > 1:
            parts.append(f"--shards {self.shards}")
        return " ".join(parts)


class Simulation(Links, Faults):
    """N regions, the network between them, a workload and faults, from one seed."""

    def __init__(self, config: SimConfig, shard: int = 0, sched: Scheduler | None = None) -> None:
        """``shard``, ``sched``: a sharded database's group ``shard``, on the scheduler every
        group shares (chaos/sim/shards.py)."""
        from .checks import Promises
        from .workload import Workload

        self.config = config
        self.shard = shard
        self.rng = random.Random(config.seed if config.shards == 1 else f"{config.seed} shard {shard}")
        self.sched = Scheduler() if sched is None else GroupScheduler(sched, shard)
        # a sharded database: this group's keys' hash tag, the other groups' (the workload
        # sends a command to the wrong shard now and then), what the probes found wrong, and
        # the other groups (a machine crash stops the region's shards of every group)
        self.key_tag, self.other_tags = shard_tags(config.shards, shard)
        self.routing_problems: list[str] = []
        self.siblings: list[Simulation] = []
        self.net = Network()
        faults = set(config.faults)
        self.net.faults = NetworkFaults(0.01 if "drop" in faults else 0.0, 0.03 if "dup" in faults else 0.0,
                                        0.08 if "reorder" in faults else 0.0)
        specs = [RegionSpec(f"region-{i}", i, "sim", 0, 0) for i in range(1, config.regions + 1)]
        cluster = ClusterConfig("sim", "db", "sim-token", 16, specs, appendfsync=config.fsync)
        if config.shards > 1:  # shard ``shard`` of every region: a database of its own, keyed by slot
            for s in specs:
                s.ports, s.repl_ports = [0] * config.shards, [0] * config.shards
            cluster.shards = SlotMap.even(config.shards)
            cluster = cluster.shard_view(shard)
            specs = cluster.regions
        self.regions = {s.number: SimRegion(self, cluster, s, config.fsync) for s in specs}
        self.backlog_bytes = self.rng.choice(BACKLOG_BYTES) if "backlog" in faults else 0
        self.lone_writes_after = LONE_WRITES_AFTER_MS if "lone" in faults else 0
        self.trimmed: dict[int, list[Envelope]] = {n: [] for n in self.regions}  # what each region's backlog dropped
        # a region holding a full-resync image whose snapshot is not on disk yet: its trimmed
        # history from before the image, what its folder still holds (a start without the
        # image takes it back: image_lost)
        self.trimmed_before_image: dict[int, list[Envelope]] = {}
        self.resyncs = 0
        self.joins = 0  # states joined (both ends of a link had dropped operations the other lacked)
        # per direction (region, peer): the connection and its link's relay hold (relay_hold)
        self.relay_holds: dict[tuple[int, int], tuple[int, RelayHold]] = {}
        self.promises = Promises()
        self.waits = Waits(self)  # clients in WAIT, what it answered, what regions lost since
        # the operator's copies of each region's folder (restore fault): the copy, and what the
        # region's backlog had trimmed then (the checkers' view of its history, Simulation.history)
        self.backups: dict[int, list[tuple[FileCopy, list[Envelope]]]] = {n: [] for n in self.regions}
        # what a restore or a salvage took from a region's folder: (region, version vector the
        # folder held before, after the start, why) - operations only it held are lost there
        self.file_losses: list[tuple[int, dict[int, int], dict[int, int], str]] = []
        self.damage_problems: list[str] = []  # a start that did not refuse a flipped bit (damage check)
        self.membership = MembershipDriver(self)
        self.workload = Workload(self)
        self.active = True
        self.settled = False

    # ------------------------------------------------------------ running
    def run(self) -> None:
        self.start()
        self.settled = self.sched.run(MAX_EVENTS)  # the last step starts the heal phase

    def start(self) -> None:
        for region in self.regions.values():
            self.boot(region)
        for a, b in self.pairs():
            self.connect(a, b)
        self.sched.after(0, self.client_step, 0)

    def client_step(self, step: int) -> None:
        if step >= self.config.steps:
            self.heal()
            return
        self.workload.step(step)
        if "restore" in self.config.faults and self.rng.random() < BACKUP_CHANCE:
            self.back_up(self.regions[self.rng.choice(sorted(self.regions))])
        if self.rng.random() < 0.12:
            self.inject_fault()
        self.sched.after(self.rng.randint(1, 15), self.client_step, step + 1)

    def heal(self) -> None:
        """Lift every fault, restart every region, connect every pair; then only the system runs."""
        self.active = False
        self.sched.log("heal: faults lifted, every region up and connected")
        self.net.cuts.clear()
        self.net.clogged_until.clear()
        self.net.faults = NetworkFaults()
        for region in self.regions.values():
            region.file.snapshot_fails = False  # the disk has room again: a held image's snapshot is written
            if region.up and region.core.memory.limit:  # the memory fault's limit
                region.core.config.set("maxmemory", 0)
                region.core.config_changed()
            if region.up and region.core.oplog.unsaved_image is not None:
                region.core.oplog.tick()
                region.end_turn()
            if not region.up:
                self.restart(region.number, region.incarnation)
        for a, b in self.pairs():
            self.connect(a, b)
        for region in self.regions.values() if self.lone_writes_after else ():
            # no cron from now on: writes taken alone still resolve
            self.sched.after(CRON_MS, self.lone_tick, region.number, region.incarnation)

    def lone_tick(self, number: int, incarnation: int) -> None:
        """In the heal phase, the cron's part that still runs: writes a region took alone are
        confirmed or withdrawn, and withdrawn ones issued again once it took back its own
        operations (``LoneWritesSteps.cron``); once a second while any is left."""
        region = self.regions[number]
        if not region.up or region.incarnation != incarnation:
            return
        core = region.core
        aa = core.aa
        core.supervisor.run_step("lone-writes", lambda: core.lone_steps.cron(core.system_ms()), True,
                                 self.sched.now / 1000)
        if core.failed is not None:
            self.fail_stopped(region)
            return
        region.end_turn()
        self.pump(region)
        if (aa.lone.alone or aa.lone.reissue) and aa.membership.status(number) not in (None, REMOVED):
            self.sched.after(CRON_MS, self.lone_tick, number, incarnation)  # (a removed region takes part no more)

    def history(self, region: SimRegion) -> list[Envelope]:
        """Every operation ``region`` applied, in the order it applied them: what its backlog
        trimmed (or, after a full resync, what the image's sender had trimmed), then its log."""
        seen, out = set(), []
        for env in self.trimmed[region.number] + region.causal.log:
            if env.dot not in seen:
                seen.add(env.dot)
                out.append(env)
        return out

    # ------------------------------------------------------------ booting and the cron
    def boot(self, region: SimRegion) -> int:
        """Start (again) from the region's file, on top of its snapshot if it has one.  A start
        the real rules refuse (damage) is salvaged as an operator would (``SimFile.salvage``) and
        tried again; a flipped bit a start took is reported (the damage check)."""
        for attempt in range(SALVAGES + 1):
            try:
                cut = region.boot()
                break
            except Damage as e:
                self.sched.log(f"START r{region.number} refused: {e}")
                if region.file.flipped is None:  # only a flipped bit may damage a simulated disk
                    self.sched.errors.append(f"r{region.number}'s start refused files the world never damaged: {e}")
                if attempt == SALVAGES:
                    raise
                self.sched.log(f"SALVAGE r{region.number}: {region.file.salvage()}")
        self._judge_flip(region)
        # the checkers' view of its history holds only what it holds now (a restore, a salvage
        # or a lost unsynced tail took the rest; what it takes back comes through its log)
        vv = region.causal.vv
        self.trimmed[region.number] = [e for e in self.trimmed[region.number] if e.n <= vv.get(e.origin, 0)]
        if self.active:
            self.sched.after(self.rng.randint(1, CRON_MS), self.cron, region.number, region.incarnation)
        if region.aa.membership.status(region.number) == JOINING:  # its activation task
            self.sched.after(self.rng.randint(1, CRON_MS), self.membership.activation_tick, region.number,
                             region.incarnation)
        return cut

    def _judge_flip(self, region: SimRegion) -> None:
        """A region started with a bit the world flipped still in its files: only a bad last
        record of a log that did not close cleanly may go that way (cut as a torn tail)."""
        flipped, region.file.flipped = region.file.flipped, None
        if flipped is None:
            return
        kind, at, _last, clean = flipped
        if kind == "snapshot":
            self.damage_problems.append(f"r{region.number} started from a snapshot whose byte {at} was flipped")
        elif len(region.file.durable) > at:
            self.damage_problems.append(f"r{region.number} replayed a log whose byte {at} was flipped")
        elif clean:
            self.damage_problems.append(f"r{region.number}'s start cut a damaged record (byte {at} flipped) at the "
                                        "end of a log closed cleanly, instead of refusing it")

    def image_lost(self, region: SimRegion, lost: bool) -> None:
        """``region`` goes down; ``lost``: with a full-resync image whose snapshot never reached
        its disk - the checkers' view of its history goes back to what its folder holds."""
        before = self.trimmed_before_image.pop(region.number, None)
        if lost and before is not None:
            self.trimmed[region.number] = before

    # ------------------------------------------------------------ the operator's copies
    def back_up(self, region: SimRegion) -> None:
        """The operator copies the region's folder (what is durable now), keeping the newest few."""
        copies = self.backups.setdefault(region.number, [])
        on_disk = self.trimmed_before_image.get(region.number, self.trimmed[region.number]) \
            if region.up and region.core.oplog.unsaved_image is not None else self.trimmed[region.number]
        copies.append((region.file.copy(self.sched.now), list(on_disk)))
        del copies[:-BACKUPS_KEPT]
        self.sched.log(f"BACKUP r{region.number}: copied its folder ({len(region.file.durable)} durable bytes"
                       f"{', a snapshot' if region.file.snapshot else ''}; {len(copies)} copies kept)")

    def cron(self, number: int, incarnation: int) -> None:
        """The region's once-a-second work: the core's cron steps (node/region/cron.py:
        IDMP expiry, backlog trim bounded by the running links, GC), each run under the
        region's supervisor as the server runs them."""
        region = self.regions[number]
        if not self.active or not region.up or region.incarnation != incarnation:
            return
        region.core.oplog.tick()  # the log's tick: a held full-resync image's snapshot, tried again
        if self.cron_steps(region):
            self.sched.after(CRON_MS, self.cron, number, incarnation)

    def cron_steps(self, region: SimRegion, only: str | None = None, now_s: float | None = None) -> bool:
        """Run the core's cron steps (or the one named ``only``) at ``region``, at ``now_s`` (default
        the virtual clock's); False: it failed."""
        core, causal, number = region.core, region.causal, region.number
        assert core is not None  # (a region that is up)
        log_before, base_before = list(causal.log), causal.base
        if now_s is None:
            now_s = self.sched.now / 1000
        done = {}
        for name, step, changes_state in cron.steps(core, now_s, [link.position for link in region.links.values()]):
            if only is None or name == only:
                done[name] = core.supervisor.run_step(name, step, changes_state, now_s)
        if core.failed is not None:
            self.fail_stopped(region)
            return False
        if region.causal is causal:  # trimmed from the front: what went is still known to the checkers
            self.trimmed[number].extend(log_before[:max(0, causal.base - base_before)])
        if any(done.values()):
            self.sched.log(f"r{number} cron: {done.get('idmp-expiry') or 0} iids expired, "
                           f"{done.get('backlog-trim') or 0} operations trimmed, "
                           f"{done.get('gc') or 0} delete contexts collected")
        region.end_turn()
        return True

    def pairs(self) -> list[tuple[int, int]]:
        numbers = sorted(self.regions)
        return [(a, b) for a in numbers for b in numbers if a < b]

    # ------------------------------------------------------------ durability promises
    def promise(self, region: SimRegion, upto_n: int, why: str) -> None:
        self.promises.hold(region, upto_n, why)

    def withdrawn(self, region: SimRegion, first: int, last: int) -> None:
        """``region`` withdrew its operations ``first``..``last``, taken alone (another region held
        others under those numbers): their promises wait for their re-issue; its links handshake
        again, so its peers learn it holds fewer."""
        waiting = self.promises.withdraw(region.number, first, last)
        self.sched.log(f"WITHDRAW r{region.number}: its operations {first}..{last}, taken alone, withdrawn ({waiting} "
                       f"promised): another region holds others under those numbers; vv now {_vv(region.causal.vv)}")
        self.relink(region.number, f"r{region.number} withdrew its writes taken alone")

    def reissued(self, region: SimRegion, count: int) -> None:
        self.promises.reissued(region.number)
        self.sched.log(f"REISSUE r{region.number}: {count} withdrawn operations issued again, vv now "
                       f"{_vv(region.causal.vv)}")


def shard_tags(shards: int, shard: int) -> tuple[bytes, list[bytes]]:
    """The hash tag of each group's keys (``{sN}``, N the first that lands in the group's
    slots), this group's and the others'; none for an unsharded database."""
    if shards == 1:
        return b"", []
    owners = SlotMap.even(shards).owners()
    tags: dict[int, bytes] = {}
    n = 0
    while len(tags) < shards:
        tag = b"{s%d}" % n
        tags.setdefault(owners[key_slot(tag)], tag)
        n += 1
    return tags[shard], [t for k, t in sorted(tags.items()) if k != shard]

