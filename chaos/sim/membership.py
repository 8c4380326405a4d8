"""Membership changes in the simulation: the world as braid-admin, and a joining region's activation.

Theory of operation
-------------------
The *membership* fault starts one scenario at a time (at most ``MAX_SCENARIOS``
per schedule), each a change of the database's member list agreed as the real
coordinator agrees it (``node.activeactive.coordinator.agree``, crdt/membership.py):

* **join** - braid-admin adds a region under the lowest number never used (below
  the stride; numbers are never reused), often while a partition cuts some pair.
  Once committed, a new :class:`SimRegion` starts with an empty file and a cluster
  file holding the newest list (itself ``joining``); its peers dial it, it gets a
  full-resync image or the backlog, and client writes to it are refused (LOADING)
  until ``ActiveActive.caught_up``.  Its activation task (one tick per virtual
  second, like the real one) then coordinates its own ACTIVATE.
* **leave** - braid-admin makes an active region ``leaving`` (its writes are
  refused: READONLY), then polls every ``HANDOVER_POLL_MS`` of virtual time until
  every other live member holds all of the leaver's operations, and removes it
  (``frozen`` = that count).
* **forced removal** - of a crashed region, voted by every other live member;
  ``frozen`` is the highest count of its operations a voter held.  When it comes
  back, with its own cluster file still at the old epoch, every handshake it
  tries is refused and it learns the newer list (``MembershipGate.check_peer`` on
  both ends of a connection: the refusing side hands it its list, as the real
  region's start-up check would; the start-up check itself runs too).

Agreement is ``agree`` itself, with the regions that are up as voters
(``ActiveActive.promise / commit / abort`` called directly): a voter that is
down makes the change abort, except the region a forced removal removes.  The
promises are given at once; the commits land after the coordinator's round trip
(``COMMIT_MS``), so links keep running between a promise and its commit (a voter
of a forced removal takes none of the target's operations beyond what it held
when it promised).  Crash faults hit voters meanwhile too: a promise and its hold
are on the region's disk (``SimPromiseStore``, as node/persistence/promise.py) and
survive the restart; a voter that is down or fail-stopped at the commit misses it
and adopts the newer list at its next handshake.  A commit that reached no voter
is sent again every ``COMMIT_RETRY_MS`` for ``COMMIT_RETRY_FOR_MS``, then braid-admin
gives up, as the real one does.

Coordinators that vanish.  With the *admin-kill* fault, braid-admin may be killed
in the middle of a forced removal (``KILLED_CHANCE``, drawn from a generator of
its own: a schedule where it is not killed stays what it is without the fault):
after one of its promise requests, aborts or commits, nothing more is sent.  Its
voters then hold a promise no one will end; each region settles such a promise as
the real one does (``ActiveActive.left_promise``, ``standing``, ``settle``:
crdt/membership.py, "Settling a promise its coordinator left"): once its
coordinator had ``PROMISE_TIMEOUT_S`` of virtual time (the region's promise clock
is the world's), it asks the voters it can reach (up, not cut off) where they
stand, every ``SETTLE_EVERY_MS``, commits the change when every voter holds its
promise (and sends the commit on), aborts it when a voter never promised it, or
takes a newer list.  Once the faults heal every voter is back, so every such change
ends; the liveness check fails a schedule in which a region still holds a promise
or a hold after the heal.
Every region that commits or adopts a change restarts its links (the world
disconnects them; they redial), and each handshake passes both regions'
membership gates.  A change never leaves fewer than ``MIN_ACTIVE`` live active
regions.

What the checkers need is kept here: the changes committed (the trace shows each:
epoch, kind, region), every operation of a removed region a region applied past
its frozen point, and every operation a region issued while it could not take
writes (hooks on each region's hub, SimRegion.boot).
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from crdt.causal import Envelope
from crdt.membership import (
    ABORT,
    ACTIVATE,
    ACTIVE,
    ADOPT,
    COMMIT,
    FORCE_REMOVE,
    JOIN,
    JOINING,
    LEAVE,
    LEAVING,
    REMOVE,
    REMOVED,
    Change,
    Membership,
    MembershipError,
    Promise,
    Proposal,
)
from node.activeactive.coordinator import MembershipChangeError, agree, standings
from node.activeactive.region import SETTLE_EVERY_S

from .workload import LAYOUT

if TYPE_CHECKING:
    from .region import SimRegion
    from .world import Simulation

MAX_SCENARIOS = 3        # membership scenarios (join, leave, forced removal) started per schedule at most
MIN_ACTIVE = 2           # no change leaves fewer live active regions
EXTRA_REGIONS = 2        # joins stop once the live members outnumber the initial regions by this many
HANDOVER_POLL_MS = 50    # braid-admin's polling while a leaver's operations are handed over
ACTIVATION_TICK_MS = 1000  # a joining region looks whether it caught up once a virtual second
COMMIT_MS = (1, 40)      # from the last promise to the commits: the coordinator's round trips
COMMIT_RETRY_MS = 1000   # a commit that reached no voter is sent again (braid-admin's COMMIT_RETRY_S)
COMMIT_RETRY_FOR_MS = 60_000  # ... for this long, then braid-admin gives up (its COMMIT_RETRY_FOR_S)
KILLED_CHANCE = 0.3      # the admin-kill fault: braid-admin is killed in the middle of a forced removal
SETTLE_EVERY_MS = int(SETTLE_EVERY_S * 1000)  # a region settles a promise its coordinator left this often
STARTUP_RETRY_MS = 1000  # a start-up check no peer answered is asked again
LEARN_EVERY_MS = 5000    # a region with no link up asks its peers for their lists (LEARN_EVERY_S)
QUIET_LEARN_TRIES = 10   # ... at most this many times once the faults are healed
ADMIN = 0                # braid-admin's number in ballots (regions are 1 and up)


class CoordinatorKilled(Exception):
    """braid-admin was killed in the middle of an agreement: it sends nothing more."""


class CoordinatorLife:
    """How many more calls braid-admin makes to voters before it is killed (None: it is not)."""

    def __init__(self, calls: int | None) -> None:
        self.calls = calls
        self.made: list[str] = []  # the calls it made, described

    def call(self, what: str) -> None:
        if self.calls is not None and len(self.made) >= self.calls:
            raise CoordinatorKilled(f"before {what}")
        self.made.append(what)


class SimVoter:
    """A region as a voter of ``agree``: it promises (or aborts) at once and commits after the
    coordinator's round trip, if it is still the same life of the region."""

    def __init__(self, driver: MembershipDriver, region: SimRegion, delay: int,
                 life: CoordinatorLife | None = None) -> None:
        self.driver, self.region, self.delay = driver, region, delay
        self.incarnation = region.incarnation
        self.life = life or CoordinatorLife(None)

    def promise(self, p: Proposal) -> Promise:
        self.life.call(f"the promise request to r{self.region.number}")
        answer = self.region.aa.promise(p)
        if answer.ok and p.change.kind == FORCE_REMOVE:  # the real hub closes the link (hub.pause)
            self.driver.sim.disconnect(self.region.number, p.change.number, f"r{self.region.number} promised "
                                       f"the forced removal of r{p.change.number}")
        if self.region.aa.membership.lapsed:  # it gave up an older promise: that one is settled
            self.driver.watch_promises()
        return answer

    def abort(self, p: Proposal) -> None:
        self.life.call(f"the abort to r{self.region.number}")
        self.region.aa.abort(p)
        if self.region.aa.membership.promised == p:  # reported to a settling voter: settled instead
            self.driver.watch_promises()

    def commit(self, p: Proposal, frozen: int) -> None:
        self.life.call(f"the commit to r{self.region.number}")
        self.driver.sim.sched.after(self.delay, self.driver.commit_at, self.region.number, self.incarnation, p, frozen)


class MembershipDriver:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.in_flight = ""              # the scenario under way ('' none): one at a time
        self.agreeing = False            # promised, commits not landed yet
        self.voting: set[int] = set()    # the voters meanwhile (no crash fault hits them: see crash_victims)
        self.scenarios = 0
        self.ballots = itertools.count(1)
        self.committed: list[Proposal] = []     # every change that took effect, in order
        self.frozen: dict[int, int] = {}        # removed region -> its frozen point
        self.past_frozen: list[str] = []        # operations of removed regions applied past frozen
        self.issued_read_only: list[str] = []   # operations a region issued while it could not take writes
        # whether braid-admin is killed in an agreement is drawn apart: the world's draws stay the same
        self.kill_rng = random.Random(f"braid-admin {sim.config.seed}")
        self.settle_tick_pending = False         # the regions' settling tasks are scheduled
        self.waiting: dict[int, str] = {}        # region -> why its settlement waits (logged once)

    # ------------------------------------------------------------ reading the regions' lists
    def newest(self) -> Membership | None:
        """A copy of the newest list any region that is up holds (braid-admin's view)."""
        up = [r for r in self.sim.regions.values() if r.up]
        if not up:
            return None
        m = max((r.aa.membership for r in up), key=lambda m: m.epoch)
        return _copy(m)

    def live_members(self) -> list[int]:
        """The live members (joining, active, leaving) of the newest list: the regions the
        checkers hold to convergence."""
        m = self.newest()
        return sorted(self.sim.regions) if m is None else [n for n in m.live() if n in self.sim.regions]

    def forced(self) -> dict[int, int]:
        """Region -> frozen point of every region removed by force."""
        return {p.change.number: self.frozen[p.change.number] for p in self.committed
                if p.change.kind == FORCE_REMOVE}

    # ------------------------------------------------------------ scenarios
    def start(self) -> None:
        """The membership fault: start a scenario if none is under way and one is possible."""
        sim = self.sim
        m = self.newest()
        if self.in_flight or self.scenarios >= MAX_SCENARIOS or m is None:
            return
        live = m.live()
        active = [n for n in live if m.status(n) == ACTIVE]
        options: list[tuple[str, int]] = []
        free = [n for n in range(1, m.stride) if n not in m.members and n not in sim.regions]
        if free and len(live) < sim.config.regions + EXTRA_REGIONS:
            options.append(("join", free[0]))
        up_active = [n for n in active if sim.regions[n].up]
        if len(active) > MIN_ACTIVE and up_active:
            options.append(("leave", self.rng.choice(up_active)))
        down = [n for n in live if not sim.regions[n].up and (m.status(n) != ACTIVE or len(active) > MIN_ACTIVE)]
        if down:
            options.append(("force", self.rng.choice(down)))
        if not options:
            return
        kind, number = self.rng.choice(options)
        self.scenarios += 1
        if kind == "join":
            if not sim.net.cuts and self.rng.random() < 0.5:
                sim.partition()  # join while some pair is cut
            self.in_flight = f"join of r{number}"
            per_shard = ((0,) * sim.config.shards,) * 2 if sim.config.shards > 1 else ()  # (no sockets here)
            change = Change(JOIN, number, f"region-{number}", ("sim", 0, 0, *per_shard))
            began = self.agree(change, ADMIN, lambda p, frozen: self.joined(number))
        elif kind == "leave":
            self.in_flight = f"leave of r{number}"
            began = self.agree(Change(LEAVE, number), ADMIN, lambda p, frozen: self.handover(number))
        else:
            self.in_flight = f"forced removal of r{number}"
            began = self.agree(Change(FORCE_REMOVE, number), ADMIN, self.done)
        if not began:
            self.in_flight = ""

    def agree(self, change: Change, coordinator: int, then: Callable[[Proposal, int], None]) -> bool:
        """Propose ``change`` to the voters that are up (the coordinator: braid-admin, or a
        joining region with its own list); ``then`` runs once the commits landed.  False:
        refused or aborted, nothing changed."""
        sim = self.sim
        who = "braid-admin" if coordinator == ADMIN else f"r{coordinator}"
        current = self.newest() if coordinator == ADMIN else _copy(sim.regions[coordinator].aa.membership)
        delay = self.rng.randint(*COMMIT_MS)
        life = CoordinatorLife(self._calls_before_killed(change, coordinator, current))
        voters = {n: SimVoter(self, r, delay, life) for n, r in sim.regions.items() if r.up}
        names = {n: f"r{n}" for n in sim.regions}
        what = f"{change.kind} of r{change.number}"
        try:
            p, frozen, _unreached = agree(change, current, voters, (coordinator, next(self.ballots)), names)
        except (MembershipError, MembershipChangeError) as e:
            sim.sched.log(f"MEMBERSHIP {who}: {what} not made: {e}")
            return False
        except CoordinatorKilled as e:
            sim.sched.log(f"MEMBERSHIP {who} killed {e} (it sent {'; '.join(life.made)}): the {what} is left "
                          "to its voters")
            self.watch_promises()
            return False
        self.agreeing = True
        self.voting = set(current.voters(change))
        sim.sched.log(f"MEMBERSHIP {who}: {what} promised for epoch {p.epoch} by "
                      f"{', '.join(f'r{n}' for n in current.voters(change))}"
                      f"{f' (frozen at {frozen})' if change.kind in (REMOVE, FORCE_REMOVE) else ''}")
        sim.sched.after(delay, self.committed_everywhere, p, frozen, then, sim.sched.now)  # after every commit
        return True

    def _calls_before_killed(self, change: Change, coordinator: int, current: Membership) -> int | None:
        """How many calls braid-admin makes in this agreement before it is killed: at least one
        promise request, at most every one (killed before its first commit); None: not killed.
        Only a forced removal's braid-admin is killed (the operator, told nothing, would still
        start a joined region or wait for a leaver's hand-over)."""
        if "admin-kill" not in self.sim.config.faults or coordinator != ADMIN or change.kind != FORCE_REMOVE:
            return None
        if self.kill_rng.random() >= KILLED_CHANCE:
            return None
        return self.kill_rng.randint(1, max(1, len(current.voters(change))))

    def commit_at(self, number: int, incarnation: int, p: Proposal, frozen: int) -> None:
        sim = self.sim
        region = sim.regions[number]
        if not region.up or region.incarnation != incarnation:
            sim.sched.log(f"MEMBERSHIP epoch {p.epoch}: the commit did not reach r{number} (it crashed since it "
                          "promised): it learns the list at a handshake")
            return
        try:
            region.aa.commit(p, frozen)
        except MembershipError as e:  # its promise lapsed meanwhile: the list comes at a handshake
            sim.sched.log(f"MEMBERSHIP epoch {p.epoch}: r{number} refused the commit ({e}): it learns the list "
                          "at a handshake")
            return
        sim.relink(number, f"r{number} committed membership epoch {p.epoch}")

    def committed_everywhere(self, p: Proposal, frozen: int, then: Callable[[Proposal, int], None],
                             since: int) -> None:
        sim = self.sim
        # a region that restarted since it committed (or adopted the list at a handshake) holds
        # the change in its list, not the proposal in memory: its epoch says it has it
        if not any(r.aa.membership.changes.get(p.epoch) == p or r.aa.membership.epoch >= p.epoch
                   for r in sim.regions.values() if r.up):
            if sim.sched.now - since >= COMMIT_RETRY_FOR_MS:
                sim.sched.log(f"MEMBERSHIP epoch {p.epoch}: braid-admin gave up sending the commit of "
                              f"{p.change.kind} of r{p.change.number}: its voters settle it")
                self.agreeing, self.voting, self.in_flight = False, set(), ""
                self.watch_promises()
                return
            # every voter went down between its promise and the commit: braid-admin sends the
            # commit again until one has it (node/tools/admin_cli.py); each kept its promise on disk
            up = sorted(n for n in self.voting if sim.regions[n].up)
            sim.sched.log(f"MEMBERSHIP epoch {p.epoch}: the commit of {p.change.kind} of r{p.change.number} "
                          f"reached no voter yet: braid-admin sends it again"
                          f"{' to ' + ', '.join(f'r{n}' for n in up) if up else ' (no voter is up)'}")
            delay = self.rng.randint(*COMMIT_MS)
            for n in up:
                SimVoter(self, sim.regions[n], delay).commit(p, frozen)
            sim.sched.after(COMMIT_RETRY_MS + delay, self.committed_everywhere, p, frozen, then, since)
            return
        self.agreeing = False
        self.voting = set()
        self.took_effect(p, frozen)
        then(p, frozen)

    def took_effect(self, p: Proposal, frozen: int) -> None:
        """Record a change that took effect (once: its coordinator and a settlement may both say so)."""
        if p in self.committed:
            return
        self.committed.append(p)
        if p.change.kind in (REMOVE, FORCE_REMOVE):
            self.frozen[p.change.number] = frozen
        self.sim.sched.log(f"MEMBERSHIP epoch {p.epoch}: {p.change.kind} r{p.change.number}"
                           f"{f' frozen at {frozen}' if p.change.kind in (REMOVE, FORCE_REMOVE) else ''}")

    # ------------------------------------------------------------ settling promises coordinators left
    def watch_promises(self) -> None:
        """Run the regions' settling tasks (MembershipChanges._keep_settling) while any region holds a
        promise: every SETTLE_EVERY_MS, each region whose promise its coordinator left settles it."""
        if not self.settle_tick_pending:
            self.settle_tick_pending = True
            self.sim.sched.after(SETTLE_EVERY_MS, self.settle_tick)

    def settle_tick(self) -> None:
        self.settle_tick_pending = False
        sim = self.sim
        for number in sorted(sim.regions):
            region = sim.regions[number]
            if region.up:
                p = region.aa.left_promise()
                if p is not None:
                    self.settle(region, p)
        if any(r.up and r.aa.membership.left_promise() is not None for r in sim.regions.values()):
            self.watch_promises()

    def settle(self, region: SimRegion, p: Proposal) -> None:
        """``region`` settles ``p`` with the voters it can reach (up, not cut off from it), as
        ``MembershipChanges._settle_with_voters`` does over the admin service."""
        sim = self.sim
        aa = region.aa
        others = [n for n in aa.membership.voters(p.change) if n != region.number]
        reachable = {n: sim.regions[n].aa for n in others
                     if n in sim.regions and sim.regions[n].up and not sim.net.is_cut(region.number, n)}
        mine = aa.standing(p)
        settlement = aa.settle(p, {**standings(p, others, reachable), region.number: mine})
        what = f"{p.change.kind} of r{p.change.number} for epoch {p.epoch}"
        if settlement.outcome == COMMIT:
            self.waiting.pop(region.number, None)
            sim.sched.log(f"MEMBERSHIP r{region.number} settled the {what} with its voters: every one holds its "
                          "promise, committed")
            self.took_effect(p, settlement.frozen)
            sim.relink(region.number, f"r{region.number} committed membership epoch {p.epoch}")
            delay = self.rng.randint(*COMMIT_MS)
            for n in sorted(reachable):
                SimVoter(self, sim.regions[n], delay).commit(p, settlement.frozen)
        elif settlement.outcome == ABORT:
            self.waiting.pop(region.number, None)
            sim.sched.log(f"MEMBERSHIP r{region.number} settled the {what} with its voters: aborted "
                          f"({settlement.reason})")
            sim.relink(region.number, f"r{region.number} gave up the {what}")
        elif settlement.outcome == ADOPT:
            self.waiting.pop(region.number, None)
            self.hand_list(sim.regions[settlement.source], region, f"settling the {what}")
        elif self.waiting.get(region.number) != settlement.reason:
            self.waiting[region.number] = settlement.reason
            sim.sched.log(f"MEMBERSHIP r{region.number} cannot settle the {what} yet: {settlement.reason}")

    def done(self, p: Proposal, frozen: int) -> None:
        self.in_flight = ""

    def crash_victims(self, up: list[SimRegion]) -> list[SimRegion]:
        """The regions a crash fault may hit: any, voters between their promise and the commit
        too (a promise survives a restart: node/persistence/promise.py)."""
        return up

    # ------------------------------------------------------------ join
    def joined(self, number: int) -> None:
        """The join was agreed: the operator starts the new region with the newest cluster file."""
        from .region import SimRegion

        sim = self.sim
        holder = next(r for r in sim.regions.values() if r.up and r.aa.membership.status(number) == JOINING)
        cluster = copy.deepcopy(holder.aa.cluster)
        region = SimRegion(sim, cluster, cluster.by_number(number), sim.config.fsync)
        sim.regions[number] = region
        sim.trimmed[number] = []
        sim.boot(region)
        cuts = ", ".join(f"{min(p)}-{max(p)}" for p in sorted(sim.net.cuts, key=sorted))
        sim.sched.log(f"JOIN r{number} starts with an empty file (membership epoch {cluster.epoch}, joining)"
                      f"{f' while partitions cut {cuts}' if cuts else ''}")
        for name, value in LAYOUT:  # the IDMP window every region got at the first step
            sim.workload.issue("layout", number, [b"CONFIG", b"SET", name, value])
        for peer in sorted(sim.regions):
            if peer != number:
                sim.sched.after(self.rng.randint(5, 100), sim.connect, min(number, peer), max(number, peer))

    def activation_tick(self, number: int, incarnation: int) -> None:
        """A joining region's activation task: once it caught up, it has itself activated."""
        sim = self.sim
        region = sim.regions[number]
        if not region.up or region.incarnation != incarnation or region.aa.membership.status(number) != JOINING:
            return
        if not self.agreeing and region.aa.caught_up():
            held, target = region.aa.catch_up_progress()
            sim.sched.log(f"r{number} caught up ({held} of {target} operations): it asks to be activated")
            if self.agree(Change(ACTIVATE, number), number, self.done):
                return
        if sim.active or sim.sched.pending():
            sim.sched.after(ACTIVATION_TICK_MS, self.activation_tick, number, incarnation)
        else:
            sim.sched.log(f"r{number} is still joining: the world went quiet before it caught up")
            self.in_flight = ""

    # ------------------------------------------------------------ leave
    def handover(self, number: int) -> None:
        """braid-admin's wait: once every other live member holds all of the leaver's
        operations, remove it."""
        sim = self.sim
        m = self.newest()
        if m is None or m.status(number) != LEAVING:
            self.in_flight = ""
            return
        leaver = sim.regions[number]
        others = [n for n in m.live() if n != number]
        if not self.agreeing and leaver.up and all(sim.regions[n].up for n in others):
            total = leaver.causal.vv.get(number, 0)
            if all(sim.regions[n].causal.vv.get(number, 0) >= total for n in others):
                sim.sched.log(f"every member holds r{number}'s {total} operations: braid-admin removes it")
                if self.agree(Change(REMOVE, number), ADMIN, self.done):
                    return
        if sim.active or sim.sched.pending():
            sim.sched.after(HANDOVER_POLL_MS, self.handover, number)
        else:
            sim.sched.log(f"r{number} is still leaving: the world went quiet before its operations were handed over")
            self.in_flight = ""

    # ------------------------------------------------------------ a region's start
    def startup_check(self, number: int, incarnation: int, tries: int = 0) -> None:
        """A region's start: ask the peers of its list for their lists, adopt the newest (a
        region removed while it was down learns it here).  Asked again until some peer answers:
        a removed region that no peer dials (a removed number dials nobody, and the others do
        not dial it) has no other way to learn it (see chaos/README.md, Findings)."""
        sim = self.sim
        region = sim.regions[number]
        if not region.up or region.incarnation != incarnation:
            return
        aa = region.aa
        if aa.membership.left_promise() is not None:  # kept on its disk: settled if its coordinator left it
            self.watch_promises()
        peers = [sim.regions[p.number] for p in aa.peers() if p.number in sim.regions]
        lists = [(r.aa.membership.epoch, r.number) for r in peers if r.up and not sim.net.is_cut(number, r.number)]
        if not lists:
            if peers and (sim.active or sim.sched.pending()):
                sim.sched.after(STARTUP_RETRY_MS, self.startup_check, number, incarnation)
            return
        _epoch, source = max(lists)
        self.hand_list(sim.regions[source], region, "its start-up check")
        # and, as the real region (MembershipChanges._keep_learning), every LEARN_EVERY_MS while no
        # link is up: a region removed while its voters held their links to it cut is dialed
        # by nobody afterwards, and learns it was removed only by asking (bounded once the
        # world is quiet, so two regions asking each other cannot run it forever)
        if region.up and not region.links and aa.membership.status(number) != REMOVED:
            tries = 0 if sim.active else tries + 1
            if tries < QUIET_LEARN_TRIES and (sim.active or sim.sched.pending()):
                sim.sched.after(LEARN_EVERY_MS, self.startup_check, number, incarnation, tries)

    def hand_list(self, source: SimRegion, to: SimRegion, how: str) -> None:
        """``to`` adopts ``source``'s list if it is newer (then restarts its links)."""
        before = to.aa.membership.epoch
        if to.aa.adopt(source.aa.cluster.membership_blob()):
            status = to.aa.membership.status(to.number)
            self.sim.sched.log(f"r{to.number} adopted membership epoch {to.aa.membership.epoch} from r{source.number} "
                               f"({how}; it was at epoch {before}): it is {status}")
            self.sim.relink(to.number, f"r{to.number} adopted membership epoch {to.aa.membership.epoch}")

    # ------------------------------------------------------------ hooks (SimRegion.boot)
    def on_apply(self, region: SimRegion, env: Envelope) -> None:
        """Called before ``region`` applies ``env``: an operation of a removed region past its
        frozen point must never be applied."""
        m = region.aa.membership
        if m.status(env.origin) == REMOVED and env.n > m.frozen.get(env.origin, 0):
            self.past_frozen.append(f"r{region.number} applied {env.origin}.{env.n}, past r{env.origin}'s frozen "
                                    f"point {m.frozen.get(env.origin, 0)} (membership epoch {m.epoch})")

    def on_issue(self, region: SimRegion) -> None:
        """Called before ``region`` issues an operation of its own: only while it takes writes."""
        aa = region.aa
        if not aa.writable:
            status = aa.membership.status(region.number)
            self.issued_read_only.append(f"r{region.number} issued {region.number}.{region.own_n() + 1} while "
                                         f"{status}{' and not caught up' if status == JOINING else ''}")


def _copy(m: Membership) -> Membership:
    return Membership(m.stride, m.epoch, dict(m.members), dict(m.frozen), changes=dict(m.changes))

