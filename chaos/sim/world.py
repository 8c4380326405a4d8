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

A region whose core fail-stops (node/supervision.py) crashes as a process and
restarts later, like a real region under a supervisor; the fail-stop is also
reported as an error of the run (the "exceptions" check), since it means the
code met a state or an operation it could not handle.  A region that keeps
fail-stopping stays down after FAIL_STOP_RESTARTS restarts.

The cron.  Each region that is up runs the state-changing steps of the real
server's cron (``RegionCore.cron_steps``, under the region's supervisor) every
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
alone, held, then confirms or withdraws them and issues them again (node/lone_writes.py;
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
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from crdt.causal import Envelope
from crdt.linkerrors import MembershipBehind
from crdt.membership import JOINING, LIVE, REMOVED
from crdt.sync import LinkState, NeedsResync, RelayHold, opening, plan_frames
from node.cluster_config import ClusterConfig, RegionSpec
from node.config import FSYNC_POLICIES

from .disk import Damage, FileCopy, MachineDown, held_vv
from .membership import MembershipDriver
from .region import SimRegion

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
LONE_AWAY_MS = (300, 1500)  # the lone fault: how long the region that goes away stays down
MEMORY_ROOM = (0, 3000)     # the memory fault: maxmemory this many bytes above what the region holds
MEMORY_FULL_MS = (50, 1500)  # ... for this long
BACKLOG_BYTES = (600, 1500, 4000)  # the backlog fault bounds each region's backlog by one of these
LONG_PARTITION_MS = (200, 900)     # ... and isolates a region this long now and then
POLICIES = FSYNC_POLICIES  # appendfsync's, which a schedule runs its regions with
START_MS = 1_000_000   # the virtual clock's first reading (ms)
MAX_EVENTS = 1_000_000  # a schedule that has not settled after this many events is a liveness failure
STARTUP_CHECK_MS = 300  # a restarted region asks its peers for their member lists (after its first dials)
FAIL_STOP_RESTARTS = 3  # a region restarted this often after fail-stops stays down (the run fails anyway)
BACKUP_CHANCE = 0.05    # per client step (restore fault): the operator copies a region's folder
BACKUPS_KEPT = 4        # the newest copies of each region's folder the operator keeps
IMAGE_CRASH_CHANCE = 0.5  # per installed image (image-crash fault): its snapshot is interrupted
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
        return " ".join(parts)


class Scheduler:
    """A virtual clock and the events due on it."""

    def __init__(self) -> None:
        self.now = START_MS
        self.events = 0
        self.trace: list[str] = []
        self.errors: list[str] = []
        self._queue: list = []
        self._order = itertools.count()

    def at(self, when: int, fn: Callable, *args) -> None:
        heapq.heappush(self._queue, (when, next(self._order), fn, args))

    def after(self, delay: int, fn: Callable, *args) -> None:
        self.at(self.now + delay, fn, *args)

    def run(self, max_events: int | None = None) -> bool:
        """Run events in time order; True when the queue emptied (False: ``max_events`` hit)."""
        budget = max_events
        while self._queue:
            if budget is not None:
                if budget <= 0:
                    return False
                budget -= 1
            when, _order, fn, args = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            self.events += 1
            try:
                fn(*args)
            except Exception as e:  # a region's code failed: judged by the "exceptions" check
                where = traceback.extract_tb(e.__traceback__)[-1]
                error = f"{type(e).__name__}: {e} (in {fn.__name__}, at {where.filename}:{where.lineno})"
                self.errors.append(error)
                self.log(f"EXCEPTION {error}")
        return True

    def pending(self) -> int:
        """Events still queued (besides the one running)."""
        return len(self._queue)

    def log(self, text: str) -> None:
        self.trace.append(f"{self.now - START_MS:>7} {text}")


@dataclass
class NetworkFaults:
    drop: float = 0.0      # a frame lost: the connection breaks
    dup: float = 0.0       # a frame arrives twice
    reorder: float = 0.0   # a frame may overtake or be overtaken


@dataclass
class Network:
    """Connections between regions, cuts (partitions) and clogs, and frames in flight."""

    faults: NetworkFaults = field(default_factory=NetworkFaults)
    cuts: dict[frozenset, int] = field(default_factory=dict)      # pair -> how many partitions cut it
    clogged_until: dict[tuple[int, int], int] = field(default_factory=dict)  # direction -> time
    conn: dict[frozenset, int] = field(default_factory=dict)      # pair -> current connection id
    last_arrival: dict[tuple[int, int], int] = field(default_factory=dict)  # FIFO per direction
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def is_cut(self, a: int, b: int) -> bool:
        return self.cuts.get(frozenset((a, b)), 0) > 0


class Simulation:
    """N regions, the network between them, a workload and faults, from one seed."""

    def __init__(self, config: SimConfig) -> None:
        from .checks import Promises
        from .workload import Workload

        self.config = config
        self.rng = random.Random(config.seed)
        self.sched = Scheduler()
        self.net = Network()
        faults = set(config.faults)
        self.net.faults = NetworkFaults(0.01 if "drop" in faults else 0.0, 0.03 if "dup" in faults else 0.0,
                                        0.08 if "reorder" in faults else 0.0)
        specs = [RegionSpec(f"region-{i}", i, "sim", 0, 0) for i in range(1, config.regions + 1)]
        cluster = ClusterConfig("sim", "db", "sim-token", 16, specs, appendfsync=config.fsync)
        self.regions = {s.number: SimRegion(self, cluster, s, config.fsync) for s in specs}
        self.backlog_bytes = self.rng.choice(BACKLOG_BYTES) if "backlog" in faults else 0
        self.lone_writes_after = LONE_WRITES_AFTER_MS if "lone" in faults else 0
        self.trimmed: dict[int, list[Envelope]] = {n: [] for n in self.regions}  # what each region's backlog dropped
        self.resyncs = 0
        self.joins = 0  # states joined (both ends of a link had dropped operations the other lacked)
        # per direction (region, peer): the connection and its link's relay hold (relay_hold)
        self.relay_holds: dict[tuple[int, int], tuple[int, RelayHold]] = {}
        self.promises = Promises()
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
        for region in self.regions.values():
            self.boot(region)
        for a, b in self.pairs():
            self.connect(a, b)
        self.sched.after(0, self.client_step, 0)
        self.settled = self.sched.run(MAX_EVENTS)  # the last step starts the heal phase

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
            if region.up and region.core.maxmemory:  # the memory fault's limit
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
        operations (``RegionCore.cron_lone_writes``); once a second while any is left."""
        region = self.regions[number]
        if not region.up or region.incarnation != incarnation:
            return
        core = region.core
        aa = core.db.aa
        core.supervisor.run_step("lone-writes", lambda: core.cron_lone_writes(core.system_ms()), True,
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

    # ------------------------------------------------------------ the operator's copies
    def back_up(self, region: SimRegion) -> None:
        """The operator copies the region's folder (what is durable now), keeping the newest few."""
        copies = self.backups.setdefault(region.number, [])
        copies.append((region.file.copy(self.sched.now), list(self.trimmed[region.number])))
        del copies[:-BACKUPS_KEPT]
        self.sched.log(f"BACKUP r{region.number}: copied its folder ({len(region.file.durable)} durable bytes"
                       f"{', a snapshot' if region.file.snapshot else ''}; {len(copies)} copies kept)")

    def cron(self, number: int, incarnation: int) -> None:
        """The region's once-a-second work: the core's cron steps (``RegionCore.cron_steps``:
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
        log_before, base_before = list(causal.log), causal.base
        if now_s is None:
            now_s = self.sched.now / 1000
        done = {}
        for name, step, changes_state in core.cron_steps(now_s, [link.position for link in region.links.values()]):
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

    # ------------------------------------------------------------ links
    def connect(self, a: int, b: int) -> None:
        """The dialer (``a``, the lower number) reaches ``b``: both ends pass the other through their
        membership gate, then start a link from Hello/Welcome."""
        ra, rb = self.regions[a], self.regions[b]
        pair = frozenset((a, b))
        if not (ra.up and rb.up) or self.net.is_cut(a, b) or pair in self.net.conn:
            return
        mine = ra.aa.membership  # a region dials the live members of its own list, while a member itself
        if mine.status(a) in (None, REMOVED) or mine.status(b) not in LIVE:
            return
        if ra.aa.hub.is_cut(b) or rb.aa.hub.is_cut(a):  # paused: a voter of the other's forced removal
            return
        if not self.handshake(ra, rb):
            return
        conn = next(self.net.ids)
        self.net.conn[pair] = conn
        self.net.last_arrival.pop((a, b), None)
        self.net.last_arrival.pop((b, a), None)
        # what each end sends first, decided as the real link decides it (crdt/sync.py): an image
        # where the peer lacks what this end dropped; when both dropped what the other lacks, each
        # sends its own and joins the other's (crdt/join.py)
        held = {r.number: (dict(r.causal.vv), dict(r.causal.floor)) for r in (ra, rb)}
        first = {a: opening(*held[a], *held[b], True), b: opening(*held[b], *held[a], True)}
        merging = first[a].merging
        hub_a, hub_b = ra.core.db.aa.hub, rb.core.db.aa.hub
        ra.links[b] = LinkState(ra.causal, dict(rb.causal.vv), hub_a.peer_acked.setdefault(b, {}),
                                hub_a.peer_reported.setdefault(b, {}))
        rb.links[a] = LinkState(rb.causal, dict(ra.causal.vv), hub_b.peer_acked.setdefault(a, {}),
                                hub_b.peer_reported.setdefault(a, {}))
        # each end records what the other held, and forgets the other's own waiting operations
        for hub, peer, region in ((hub_a, b, rb), (hub_b, a, ra)):
            forgotten = hub.handshook(peer, dict(region.causal.vv))
            if forgotten:
                self.sched.log(f"link {a}-{b}: r{hub.region} forgot {forgotten} waiting operations of r{peer}")
        self.sched.log(f"link {a}-{b} up (connection {conn}): hello vv {_vv(ra.causal.vv)}, "
                       f"welcome vv {_vv(rb.causal.vv)}" + (f"; both dropped operations the other lacks (floors "
                                                            f"{_vv(ra.causal.floor)} / {_vv(rb.causal.floor)}): "
                                                            "merging" if merging else ""))
        for x, y in ((ra, b), (rb, a)):
            # (sending the first image may have lost a frame: the connection broke)
            if y in x.links and first[x.number].sends_image:
                try:
                    self.send_image(x, y, "join" if merging else "image")
                except ConnectionAbortedError as e:  # it takes writes alone: the link ends, as the real one
                    self.disconnect(x.number, y, str(e))
                    return
        self.pump(ra)
        self.pump(rb)

    def handshake(self, ra: SimRegion, rb: SimRegion) -> bool:
        """The membership half of a handshake: ``rb`` checks ``ra``'s Hello (its epoch and list), then
        ``ra`` checks ``rb``'s Welcome (``MembershipGate.check_peer``, which adopts a newer list
        first).  A refused region is handed the refusing side's list (the real one learns it at
        start); a region that adopted a list restarts its links, this one included."""
        a, b = ra.number, rb.number
        epochs = {a: ra.aa.membership.epoch, b: rb.aa.membership.epoch}
        for checker, peer in ((rb, ra), (ra, rb)):
            gate = checker.aa.hub.gate
            reason = gate.check_peer(peer.number, *peer.aa.hub.gate.hello())
            if reason:
                gate.refused()
                self.sched.log(f"link {a}-{b} refused by r{checker.number}: {reason}")
                self.membership.hand_list(checker, peer, f"refused by r{checker.number}")
                if checker.aa.membership.epoch != epochs[checker.number]:
                    self.relink(checker.number, f"r{checker.number} adopted membership epoch "
                                                f"{checker.aa.membership.epoch}")
                return False
        moved = [r for r in (ra, rb) if r.aa.membership.epoch != epochs[r.number]]
        for r in moved:
            self.sched.log(f"r{r.number} adopted membership epoch {r.aa.membership.epoch} at a handshake "
                           f"(it was at epoch {epochs[r.number]}): it is {r.aa.membership.status(r.number)}")
            self.relink(r.number, f"r{r.number} adopted membership epoch {r.aa.membership.epoch}")
        return not moved

    def relink(self, number: int, why: str) -> None:
        """After ``number`` committed or adopted a change: its links handshake again at the new
        epoch (each one is closed; the dialer redials), and it dials the members it did not reach."""
        for pair in [p for p in self.net.conn if number in p]:
            (peer,) = pair - {number}
            self.disconnect(number, peer, why)
        for peer in sorted(self.regions):
            if peer != number and frozenset((number, peer)) not in self.net.conn:
                self.sched.after(self.rng.randint(20, 300), self.connect, min(number, peer), max(number, peer))

    def send_image(self, region: SimRegion, peer: int, kind: str = "image") -> None:
        """Full resync, or (``kind`` "join") the region's half of a state join: its whole state,
        first on the link (``Link.send_image``).  With it goes the sender's history, for the
        checkers (a joining receiver then holds the union of both)."""
        data, vv = region.core.resync_image()
        region.links[peer].image_sent(vv, region.causal.end)
        what = "state to join" if kind == "join" else "full-resync image"
        self.sched.log(f"r{region.number} -> r{peer} {what} ({len(data)} bytes, vv {_vv(vv)})")
        history = self.history(region) if kind == "join" else list(self.trimmed[region.number])
        self.send(region.number, peer, (kind, (data, history)))

    def disconnect(self, a: int, b: int, why: str) -> None:
        pair = frozenset((a, b))
        if self.net.conn.pop(pair, None) is None:
            return
        for x, y in ((a, b), (b, a)):
            self.regions[x].links.pop(y, None)
            self.relay_holds.pop((x, y), None)
        self.sched.log(f"link {min(a, b)}-{max(a, b)} down: {why}")
        self.sched.after(self.rng.randint(20, 300), self.connect, min(a, b), max(a, b))

    def pump(self, region: SimRegion) -> None:
        """Send each link of ``region`` what it decides to send (only durable operations leave)."""
        if not region.up:
            return
        for peer in list(region.links):
            self.pump_link(region, peer)

    def pump_link(self, region: SimRegion, peer: int) -> None:
        """One look of ``region``'s link to ``peer``, as the real ``Link.send_loop`` takes at each
        wake-up: what the link state decides to send, through the link's relay hold, in frames
        planned by bytes."""
        hub, link = region.core.db.aa.hub, region.links[peer]
        try:
            envelopes = link.outgoing(hub.sendable_upto())
        except NeedsResync:  # trimming overtook the link: the next handshake resyncs
            self.disconnect(region.number, peer, f"r{peer} needs operations r{region.number} trimmed")
            return
        hold = self.relay_hold(region.number, peer)
        wake = hold.wake_at
        relays, direct = hold.outgoing(envelopes, link.acked, self.sched.now / 1000, hub.pacing().relay_delay)
        hub.relayed += len(relays)
        if hold.wake_at != wake and hold.wake_at != math.inf:
            # the real link's timer: at least a millisecond on (a wake-up is asked for a time after
            # now, which the rounding of seconds to milliseconds must not turn into a loop at now)
            conn = self.net.conn[frozenset((region.number, peer))]
            delay = max(1, math.ceil(hold.wake_at * 1000) - self.sched.now)
            self.sched.after(delay, self.relay_wake, region.number, peer, conn, hold.wake_at)
        # every simulated region runs the same settings: the peer's message limit is this one's.
        # An operation larger than the budget goes as one frame all the same: the real link
        # sends it in parts (crdt.sync.PartsAssembler joins them), which the world does not model
        limits = hub.limits
        for _in_parts, batch in plan_frames(relays + direct, limits.budget(limits.max_message)):
            self.send(region.number, peer, ("batch", batch))

    def relay_hold(self, number: int, peer: int) -> RelayHold:
        """The relay hold of ``number``'s link to ``peer`` on the current connection, one per
        direction as the real ``Link`` keeps one: made at the link's first look (its handshake's
        pump), dropped when the connection closes."""
        conn = self.net.conn[frozenset((number, peer))]
        kept = self.relay_holds.get((number, peer))
        if kept is None or kept[0] != conn:
            kept = self.relay_holds[(number, peer)] = (conn, RelayHold(number, peer, self.sched.now / 1000))
        return kept[1]

    def relay_wake(self, number: int, peer: int, conn: int, at: float) -> None:
        """The relay hold of ``number``'s link to ``peer`` asked for a look at ``at`` (the real
        link's timer fires): nothing if that connection closed since (a crash or a restart of
        either region closes it: it stands for the incarnation the cron checks), or if the hold
        asked for another time since (the real link re-armed its timer)."""
        region = self.regions[number]
        kept = self.relay_holds.get((number, peer))
        if (kept is None or kept[0] != conn or kept[1].wake_at != at or not region.up or peer not in region.links
                or self.net.conn.get(frozenset((number, peer))) != conn):
            return
        kept[1].woken()
        self.pump_link(region, peer)

    def send(self, a: int, b: int, frame: tuple) -> None:
        net, rng = self.net, self.rng
        conn = net.conn.get(frozenset((a, b)))
        if conn is None:
            return
        if rng.random() < net.faults.drop:
            self.disconnect(a, b, f"a frame {a}->{b} was lost")
            return
        now = self.sched.now
        when = now + rng.randint(1, 20)
        clog = net.clogged_until.get((a, b), 0)
        if clog > now:
            when = max(when, clog + rng.randint(0, 5))
        if rng.random() < net.faults.reorder:
            when += rng.randint(0, 40)  # may overtake or be overtaken
        else:
            when = max(when, net.last_arrival.get((a, b), 0))
            net.last_arrival[(a, b)] = when
        self.sched.at(when, self.arrive, a, b, conn, frame)
        if rng.random() < net.faults.dup:
            self.sched.at(when + rng.randint(0, 40), self.arrive, a, b, conn, frame)

    def arrive(self, a: int, b: int, conn: int, frame: tuple) -> None:
        if self.net.conn.get(frozenset((a, b))) != conn:
            return  # the connection it travelled on is closed
        region = self.regions[b]
        link = region.links[a]
        kind, body = frame
        if kind == "ack":
            self.relay_hold(b, a).on_ack(link.acked, body, self.sched.now / 1000)  # before acked rises
            link.on_ack(body)
            return
        if kind == "image":
            self.install_image(region, a, *body)
            return
        if kind == "join":
            self.join_image(region, a, *body)
            return
        hub = region.core.db.aa.hub
        before = dict(region.causal.vv)
        behind = None
        try:
            hub.deliver_batch(link.on_batch(body))
        except MembershipBehind as e:  # of a region this list does not know: handshake again
            behind = e
        except Exception:
            if region.core.failed is None:
                raise
        if region.core.failed is not None:
            self.fail_stopped(region)  # an operation it could not apply: nothing acknowledged
            return
        applied = {o: n for o, n in region.causal.vv.items() if n > before.get(o, 0)}
        self.sched.log(f"r{b} <- r{a} batch {_dots(body)}; applied {_vv(applied) or 'nothing new'}")
        if behind is not None:
            self.disconnect(a, b, f"r{b} restarts the link: {behind}")
        else:
            self.send(b, a, ("ack", dict(region.causal.vv)))
            if applied:  # as the real link (Link.deliver): every other peer learns it need not relay these
                for peer in sorted(region.links):
                    if peer != a:
                        self.send(b, peer, ("ack", dict(region.causal.vv)))
        region.end_turn()

    def install_image(self, region: SimRegion, sender: int, data: bytes, trimmed: list[Envelope]) -> None:
        interrupted = None
        if self.active and "image-crash" in self.config.faults and self.rng.random() < IMAGE_CRASH_CHANCE:
            interrupted = self.rng.choice(("machine down", "disk full"))
            region.file.crash_in_snapshot = interrupted == "machine down"
            region.file.snapshot_fails = region.file.snapshot_fails or interrupted == "disk full"
        try:
            installed = region.core.install_image(data)
        except MachineDown:
            self.crash(region, f"IMAGE-CRASH r{region.number}: the machine went down while the snapshot of "
                               f"r{sender}'s image was being written (none on disk)")
            return
        finally:
            region.file.crash_in_snapshot = False
        if not installed:  # nothing missing any more: start again
            if interrupted == "disk full":
                region.file.snapshot_fails = False
            self.disconnect(region.number, sender, f"r{region.number} refused r{sender}'s image")
            return
        self.resyncs += 1
        self.trimmed[region.number] = trimmed  # the image holds what its sender had trimmed
        # the image's own vector, as the real link: not this region's after its own went on top
        region.links[sender].image_installed(dict(region.core.db.aa.hub.image_vv))
        for link in region.links.values():
            link.log_replaced()
        self.sched.log(f"r{region.number} installed r{sender}'s image: vv {_vv(region.causal.vv)}")
        if region.core.oplog.unsaved_image is None:
            taken = region.file.snapshot
            self.sched.log(f"r{region.number} snapshot at record {taken[0] if taken else None}: the image is the "
                           "base of its file")
        else:
            self.sched.log(f"IMAGE-CRASH r{region.number}: the snapshot of r{sender}'s image cannot be written (disk "
                           "full): later records wait in memory, writes are refused")
            self.sched.after(self.rng.randint(1, 800), self._image_crash, region.number, region.incarnation)
            self.sched.after(self.rng.randint(100, 3000), self._disk_freed, region.number)
        self.send(region.number, sender, ("ack", dict(region.causal.vv)))
        region.end_turn()

    def join_image(self, region: SimRegion, sender: int, data: bytes, history: list[Envelope]) -> None:
        """``region`` joins ``sender``'s state into its own (``RegionCore.join_image``; saving its
        snapshot goes as for an installed image, but no crash is injected there)."""
        number = region.number
        if not region.core.join_image(data):  # it takes writes alone now: the link starts again
            self.disconnect(number, sender, f"r{number} could not join r{sender}'s state now")
            return
        self.joins += 1
        # the checkers' view of its history: what it held (in the order it applied it), then
        # what the joined state brought (in the sender's order: causal, and none of it depends
        # on an operation only this region held), then its log from here on
        mine = self.history(region)
        held = {e.dot for e in mine}
        self.trimmed[number] = mine + [e for e in history if e.dot not in held]
        region.links[sender].image_installed(dict(region.core.db.aa.hub.image_vv))
        for link in region.links.values():  # the floor rose: a peer may lack what it now covers
            link.floor_raised()
        self.sched.log(f"r{number} joined r{sender}'s state: vv {_vv(region.causal.vv)}, floor "
                       f"{_vv(region.causal.floor)}")
        if region.core.oplog.unsaved_image is not None:
            self.sched.log(f"r{number}: the snapshot of the joined state cannot be written (disk full): later "
                           "records wait in memory, writes are refused")
            self.sched.after(self.rng.randint(100, 3000), self._disk_freed, number)
        self.send(number, sender, ("ack", dict(region.causal.vv)))
        self.pump(region)
        region.end_turn()

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

    # ------------------------------------------------------------ faults
    def inject_fault(self) -> None:
        kinds = [k for k in ("crash", "partition", "clog", "swizzle", "clock", "membership", "restore", "bitflip",
                             "lone", "backlog", "memory") if k in self.config.faults]
        if not kinds:
            return
        kind = self.rng.choice(kinds)
        getattr(self, f"_fault_{kind}")()

    def _fault_crash(self) -> None:
        up = self.membership.crash_victims([r for r in self.regions.values() if r.up])
        if not up:
            return
        self.crash(self.rng.choice(up))

    def crash(self, region: SimRegion, cause: str = "") -> None:
        """Crash ``region`` (its machine; under ``appendfsync no``, which promises nothing across
        a machine crash, its process) and restart it later; ``cause`` opens the trace line."""
        machine = self.config.fsync != "no"
        for peer in list(region.links):
            self.disconnect(region.number, peer, f"region {region.number} crashed")
        happened = region.crash(machine)
        self.sched.log(f"{cause + '; ' if cause else ''}CRASH r{region.number} "
                       f"({'machine' if machine else 'process'}): {happened}")
        self.sched.after(self.rng.randint(20, 1500), self.restart, region.number, region.incarnation)

    def _stop(self, region: SimRegion, fault: str) -> None:
        """Stop ``region`` for an operator's fault: cleanly, or by a crash; it restarts later,
        and ``region.restart_as`` says what the operator does to its folder before."""
        if self.rng.random() < 0.5:
            for peer in list(region.links):
                self.disconnect(region.number, peer, f"region {region.number} stopped")
            self.sched.log(f"{fault.upper()} r{region.number} {region.stop_cleanly()}")
            self.sched.after(self.rng.randint(20, 1500), self.restart, region.number, region.incarnation)
        else:
            self.crash(region, f"{fault.upper()} r{region.number} goes down")
        region.restart_as, region.stopped_ms = fault, self.sched.now

    def _fault_restore(self) -> None:
        up = self.membership.crash_victims([r for r in self.regions.values() if r.up])
        if up:
            self._stop(self.rng.choice(up), "restore")

    def _fault_lone(self) -> None:
        """A region goes away for a while (a long outage, at a schedule's scale) and, meanwhile, another restarts -
        from an older copy of its folder when the operator has one: the restarted one waits
        ``crdt-lone-writes-after-ms`` for the missing member, then takes writes alone; the one
        away may hold operations of it the copy lacks (node/lone_writes.py)."""
        up = self.membership.crash_victims([r for r in self.regions.values() if r.up])
        if len(up) < 2:
            return
        away, back = self.rng.sample(up, 2)
        for peer in list(away.links):
            self.disconnect(away.number, peer, f"region {away.number} went away")
        happened = away.crash(self.config.fsync != "no")
        self.sched.log(f"LONE r{away.number} goes away for long: {happened}")
        self.sched.after(self.rng.randint(*LONE_AWAY_MS), self.restart, away.number, away.incarnation)
        self._stop(back, "restore")

    def _fault_bitflip(self) -> None:
        up = self.membership.crash_victims([r for r in self.regions.values() if r.up])
        if up:
            self._stop(self.rng.choice(up), "bitflip")

    def _image_crash(self, number: int, incarnation: int) -> None:
        """The image-crash fault's machine crash, if the image's snapshot is still not on disk."""
        region = self.regions[number]
        if not self.active or not region.up or region.incarnation != incarnation:
            return
        if region.core.oplog.unsaved_image is not None:
            self.crash(region, f"IMAGE-CRASH r{number}: the machine goes down before the image's snapshot is written")

    def _disk_freed(self, number: int) -> None:
        region = self.regions[number]
        if region.file.snapshot_fails:
            region.file.snapshot_fails = False
            self.sched.log(f"r{number}'s disk has room again")

    def _operator_acts(self, region: SimRegion) -> tuple[dict[int, int], str] | None:
        """What the operator does to a stopped region's folder before it starts again (its
        ``restart_as``): put an older copy back, or flip a bit (the disk's doing).  Returns
        what the folder held before and why, for the durability check's count of losses."""
        fault, region.restart_as = region.restart_as, None
        # (a copy taken while it is down is the folder as it is: only older ones go back in time)
        copies = [c for c in self.backups.get(region.number, []) if c[0].taken_ms <= region.stopped_ms]
        if fault is not None and "stale-copies" not in self.config.faults:
            # the folder is about to lose operations every copy of it so far may hold, and the
            # region may mint their numbers again: restored later, such a copy would fork its
            # history.  The operator takes new copies from now on (stale-copies: it does not)
            self.backups[region.number] = []
        if fault == "restore":
            if not copies:
                self.sched.log(f"RESTORE r{region.number}: no copy of its folder yet: it starts from its own")
                return None
            before = held_vv(region.file, region.number)
            copied, trimmed = self.rng.choice(copies)
            region.file.restore(copied)
            self.trimmed[region.number] = list(trimmed)
            mark = "clean" if copied.closed_cleanly else "recover" if copied.recover_mark else "its boot"
            self.sched.log(f"RESTORE r{region.number} starts from its folder as copied at "
                           f"t={copied.taken_ms - START_MS} ({len(copied.durable)} bytes of log"
                           f"{f', snapshot at record {copied.snapshot[0]}' if copied.snapshot else ''}, run mark "
                           f"{mark}): the folder held vv {_vv(before)}")
            return before, f"r{region.number}'s restore from an older copy"
        if fault == "bitflip":
            before = held_vv(region.file, region.number)
            what = region.file.flip(self.rng)
            self.sched.log(f"BITFLIP r{region.number}: {what or 'an empty folder: nothing to flip'}")
            return before, f"the salvage of r{region.number}'s damaged files"
        return None

    def fail_stopped(self, region: SimRegion) -> None:
        """``region``'s core fail-stopped: its process exits (a crash of the process), and
        it restarts later from its file."""
        reason = region.core.failed
        self.sched.errors.append(f"FAIL-STOP r{region.number}: {reason}")
        for peer in list(region.links):
            self.disconnect(region.number, peer, f"region {region.number} fail-stopped")
        what = region.crash(machine=False)
        region.fail_stops += 1
        self.sched.log(f"FAIL-STOP r{region.number}: {reason}; {what}")
        if region.fail_stops <= FAIL_STOP_RESTARTS:
            self.sched.after(self.rng.randint(20, 1500), self.restart, region.number, region.incarnation)

    def restart(self, number: int, incarnation: int) -> None:
        region = self.regions[number]
        if region.up or region.incarnation != incarnation:
            return
        acted = self._operator_acts(region)
        cut = self.boot(region)
        if acted is not None:  # what the folder lost (a restore, a cut or salvaged flip), for the checkers
            before, why = acted
            self.file_losses.append((number, before, dict(region.causal.vv), why))
            if self.promises.withdrawn.get(number) and not region.core.db.aa.lone.reissue:
                # its withdrawn writes were listed only in its log, which the operator replaced
                lost = self.promises.withdrawn.pop(number)
                self.sched.log(f"durability: {lost} operation(s) r{number} withdrew and had not issued again "
                               f"went with {why}")
        self.sched.log(f"RESTART r{number}: replayed its file (torn tail cut: {cut} bytes), vv {_vv(region.causal.vv)}")
        # (a fixed delay, no draw: without the membership fault a schedule stays what it was before it)
        self.sched.after(STARTUP_CHECK_MS, self.membership.startup_check, number, region.incarnation)
        for peer in sorted(self.regions):
            if peer != number:
                self.sched.after(self.rng.randint(5, 100), self.connect, min(number, peer), max(number, peer))

    def _fault_membership(self) -> None:
        self.membership.start()

    def _fault_partition(self) -> None:
        self.partition()

    def _fault_backlog(self) -> None:
        """A partition longer than every backlog: a region isolated while both sides write on;
        before it heals, every region trims its backlog (the virtual schedule is shorter than
        a backlog's life, so its end stands for the hours that passed), so each side drops
        operations the other lacks and the heal joins their states."""
        self.partition(isolate=True, duration=self.rng.randint(*LONG_PARTITION_MS), trim_first=True)

    def partition(self, isolate: bool | None = None, duration: int | None = None, trim_first: bool = False) -> None:
        """Isolate a region, or cut one pair (the others bridge it), for a while."""
        numbers = sorted(self.regions)
        if isolate or isolate is None and self.rng.random() < 0.5:
            victim = self.rng.choice(numbers)
            pairs = [(min(victim, o), max(victim, o)) for o in numbers if o != victim]
            what = f"region {victim} isolated"
        else:
            pairs = [self.rng.choice(self.pairs())]
            what = f"pair {pairs[0][0]}-{pairs[0][1]} cut (the others bridge it)"
        if duration is None:
            duration = self.rng.randint(50, 3000)
        self.sched.log(f"PARTITION {what} for {duration} ms")
        for a, b in pairs:
            pair = frozenset((a, b))
            self.net.cuts[pair] = self.net.cuts.get(pair, 0) + 1
            self.disconnect(a, b, "partitioned")
        self.sched.after(duration, self._unpartition, pairs, trim_first)

    def _unpartition(self, pairs: list[tuple[int, int]], trim_first: bool = False) -> None:
        if not self.active:
            return  # the heal already lifted every cut
        if trim_first:  # hours passed: every backlog's age bound dropped all it may drop
            for region in self.regions.values():
                if region.up:
                    self.cron_steps(region, "backlog-trim", math.inf)
        for a, b in pairs:
            pair = frozenset((a, b))
            self.net.cuts[pair] -= 1
            if not self.net.cuts[pair]:
                del self.net.cuts[pair]
                self.sched.log(f"partition of {a}-{b} healed")
                self.connect(a, b)

    def _directions(self) -> list[tuple[int, int]]:
        return [(a, b) for a in sorted(self.regions) for b in sorted(self.regions) if a != b]

    def _clog(self, a: int, b: int, until: int) -> None:
        if not self.active:
            return
        self.net.clogged_until[(a, b)] = max(self.net.clogged_until.get((a, b), 0), until)
        self.sched.log(f"CLOG {a}->{b} until t={until - START_MS}")

    def _fault_clog(self) -> None:
        a, b = self.rng.choice(self._directions())
        self._clog(a, b, self.sched.now + self.rng.randint(20, 2000))

    def _fault_swizzle(self) -> None:
        """FoundationDB's swizzle-clog: clog a random subset one by one, unclog in random order."""
        directions = self._directions()
        chosen = self.rng.sample(directions, self.rng.randint(1, len(directions)))
        t = self.sched.now
        starts = []
        for a, b in chosen:
            t += self.rng.randint(5, 100)
            starts.append((t, a, b))
        ends = [t + self.rng.randint(50, 1500) for _ in chosen]
        order = list(range(len(chosen)))
        self.rng.shuffle(order)
        ends.sort()
        self.sched.log(f"SWIZZLE-CLOG {', '.join(f'{a}->{b}' for a, b in chosen)}")
        for i, idx in enumerate(order):
            start, a, b = starts[idx]
            self.sched.at(start, self._clog, a, b, max(ends[i], start + 1))

    def _fault_memory(self) -> None:
        """A region runs short of memory: its maxmemory is set a little above what it holds, so
        its clients' writes are soon refused (OOM) while the other regions' operations are
        still applied; the limit is lifted later (at the latest, by the heal)."""
        up = [r for r in self.regions.values() if r.up]
        if not up:
            return
        region = self.rng.choice(up)
        core = region.core
        limit = core.used_memory() + self.rng.randint(*MEMORY_ROOM)
        core.config.set("maxmemory", limit)
        core.config_changed()
        self.sched.log(f"MEMORY r{region.number}: maxmemory {limit} ({core.used_memory()} used)")
        self.sched.after(self.rng.randint(*MEMORY_FULL_MS), self._memory_freed, region.number, region.incarnation)

    def _memory_freed(self, number: int, incarnation: int) -> None:
        region = self.regions[number]
        if region.up and region.incarnation == incarnation and region.core.maxmemory:
            region.core.config.set("maxmemory", 0)
            region.core.config_changed()
            self.sched.log(f"MEMORY r{number}: maxmemory lifted ({region.core.used_memory()} used)")

    def _fault_clock(self) -> None:
        region = self.rng.choice(list(self.regions.values()))
        if self.rng.random() < 0.5:
            region.skew = self.rng.randint(-3000, 3000)
            self.sched.log(f"CLOCK r{region.number} skewed to {region.skew:+d} ms")
        else:
            jump = self.rng.randint(100, 5000)
            region.skew -= jump
            self.sched.log(f"CLOCK r{region.number} jumps back {jump} ms (skew {region.skew:+d} ms)")


def _vv(vv: dict[int, int]) -> str:
    return ",".join(f"{o}:{n}" for o, n in sorted(vv.items()))


def _dots(envelopes) -> str:
    if len(envelopes) <= 4:
        return " ".join(f"{e.origin}.{e.n}" for e in envelopes)
    return f"{envelopes[0].origin}.{envelopes[0].n} .. {envelopes[-1].origin}.{envelopes[-1].n} ({len(envelopes)})"
