"""Membership of an Active-Active database: which regions it has, agreed epoch by epoch (pure).

Theory of operation
-------------------
A database's members are regions, each a number, a name and a status:
``joining`` (added, catching up from a full-resync image), ``active``, ``leaving``
(a graceful removal under way) or ``removed``.  The list changes only by epochs:
epoch ``e + 1`` is epoch ``e``'s list with one :class:`Change` applied, and a
change takes effect only once every *voter* agreed to it.

Agreement, in two phases (the region an operator talks to coordinates):

1. The coordinator builds a :class:`Proposal` for epoch ``e + 1``
   (:meth:`Membership.propose` checks the change against its list) and sends it
   to every voter: every live member (joining, active, leaving), except the
   region a forced removal removes.
2. Each voter answers :meth:`Membership.promise`: yes only if it is at epoch
   ``e`` and has promised no *other* proposal for ``e + 1``; a promise holds
   until that proposal commits or is aborted.  A yes carries how far the voter
   holds the operations of the region a removal removes.
3. With a yes from every voter the coordinator commits (:meth:`Membership.commit`
   at every member, with the highest of those counts for a removal); with any
   no it aborts (:meth:`Membership.abort`), and nothing changed anywhere.

Two changes made at once cannot both take effect: each needs every voter's
promise, and a voter promises one proposal per epoch and commits only the one it
promised.  A voter that cannot be reached blocks changes - except its own forced
removal, which does not ask it.  A member that missed a commit (the coordinator
failed half way) learns the newer list from any member that has it
(:meth:`Membership.adopt`: the handshake carries the epoch), since every epoch's
list was agreed; the coordinator's commit reaching it afterwards changes nothing.

What membership means for the other rules (crdt/causal.py, crdt/ops.py):

* A number is never reused: a removed region's number stays in the list
  (``removed``), so a dot ``(origin, n)`` always names one region's operation and a
  version vector never mixes two regions.  A region that comes back after a
  forced removal is purged and added again under a new number.
* A joining region starts from a full-resync image: its first operations depend
  on everything the image holds, so they are concurrent only with what a region
  added at any time could be concurrent with; delete-wins and observed-remove
  need nothing new.
* Causal stability (delete contexts, IDMP maps, backlog trimming) waits for the
  live members only (:meth:`Membership.stability_regions`): a removed region
  never holds it back again - once every live member holds its operations up to
  its frozen point (:meth:`Membership.stable_past_removals`): after a forced
  removal some may still be on their way, concurrent with a delete.
* Operations of a removed region: a graceful leave is committed (``remove`` of a
  ``leaving`` member) only once every remaining member holds all of the leaver's
  operations.  A forced removal *freezes* the removed origin at the highest of its
  operations any voter held (``frozen``): the remaining regions keep exchanging its
  operations up to that point, so they converge on the same set, and accept none
  beyond it (:meth:`Membership.accepts`); those are lost, and their count is what
  the removed region had issued past ``frozen`` (unknown while it is away).  From
  its promise on, a voter of a forced removal takes no operation of the removed
  region above what it held when it promised (``holding``), so no voter can hold
  more than the ``frozen`` the coordinator computes from the promises.  That hold
  outlives a promise that lapses (:meth:`Membership.lapse`: its coordinator
  vanished, and the removal may have been committed elsewhere); it ends only with
  an abort of that proposal or a newer epoch (the removal took effect - ``frozen``
  rules from then on - or another change made that epoch, so it never will).
* A join carries the new region's address (``Change.endpoint``: host, client port,
  replication port), so every member can reach it once the join is committed.

Settling a promise its coordinator left
---------------------------------------
A coordinator may vanish between the phases (braid-admin killed, or every voter
down when it sent the commit and it gave up): each voter still holds its promise,
and a forced removal's voters their holds, so the removed region stays cut off
and no other change can be made.  The voters end such a change themselves, once
they can all be asked.  A voter whose promise its coordinator left asks every voter
of that proposal where it stands on it (:meth:`Membership.standing`; the asker asks
itself too) and :meth:`Membership.settle` decides, as the coordinator would have:

* a voter at a newer epoch: the proposal, or another one, made that epoch - the
  asker takes that voter's list (:meth:`Membership.adopt`);
* a voter at the proposal's epoch that does not hold its promise (it never received
  the request, refused it, or got the coordinator's abort): the coordinator never
  had every promise, and that voter now *refuses* the proposal for good
  (``refusing``: a promise request still on its way is refused when it comes), so
  no one ever can - **abort**;
* every voter holds the promise: the coordinator had, or would have had, every
  promise, and commits only that - **commit**, frozen at the highest ``held`` the
  voters answered (each keeps it: ``answered``), the very point the coordinator
  computes;
* otherwise (a voter cannot be reached, is behind, or its promise lapsed while it
  backs another proposal) - ask again later.

Two details keep a settlement and a coordinator from deciding differently.  A voter
that told an asker it holds the promise (``reported``) no longer takes the
coordinator's abort: an abort sent when a promise's answer was lost might arrive
after the askers counted it; such a voter settles instead.  And a promise that
lapsed keeps its proposal and ``held`` (``lapsed``): an asker does not count that
voter as refusing (its coordinator may have counted its promise), and once it backs
no other proposal an asker's question takes the promise back (still held).  A
voter that cannot answer for good (gone) blocks the settlement, as it blocks any
change, until it is removed by force: the others' promises lapse when that
removal is proposed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

JOINING, ACTIVE, LEAVING, REMOVED = "joining", "active", "leaving", "removed"
STATUSES = (JOINING, ACTIVE, LEAVING, REMOVED)
LIVE = (JOINING, ACTIVE, LEAVING)

# what a change does to its target: (kind, status before (None: not a member), status after)
JOIN, ACTIVATE, LEAVE, REMOVE, FORCE_REMOVE = "join", "activate", "leave", "remove", "force-remove"
TRANSITIONS = {
    JOIN: ((None,), JOINING),           # a new region; it catches up, then is activated
    ACTIVATE: ((JOINING,), ACTIVE),     # it holds everything: it takes writes
    LEAVE: ((ACTIVE,), LEAVING),        # graceful removal starts: it stops taking writes
    REMOVE: ((LEAVING,), REMOVED),      # every remaining member holds all its operations
    FORCE_REMOVE: (LIVE, REMOVED),      # unreachable: the others stop waiting for it now
}


# where a voter stands on a proposal a settling voter asks about (Membership.standing)
PROMISED = "promised"      # it holds the proposal's promise
LAPSED = "lapsed"          # its promise lapsed and it backs another proposal now
REFUSED = "refused"        # it does not hold the promise, and will never give it
NEWER = "newer"            # it is at the proposal's epoch or past it: that epoch was made
BEHIND = "behind"          # it is at an older epoch: it learns the newer list first
STANDINGS = (PROMISED, LAPSED, REFUSED, NEWER, BEHIND)

# what a settlement decides (Membership.settle)
COMMIT, ABORT, ADOPT, WAIT = "commit", "abort", "adopt", "wait"


class MembershipError(ValueError):
    """A change that cannot be made to this list (the message says why)."""


@dataclass(frozen=True, slots=True)
class Member:
    number: int
    name: str
    status: str = ACTIVE


@dataclass(frozen=True, slots=True)
class Change:
    kind: str
    number: int
    name: str = ""  # a join names the new region
    endpoint: tuple = ()  # a join: (host, client port, replication port) of the new region


@dataclass(frozen=True, slots=True)
class Proposal:
    epoch: int                 # the epoch the change makes
    change: Change
    ballot: tuple[int, int]    # (coordinator's number, its counter): tells two proposals apart


@dataclass(frozen=True, slots=True)
class Promise:
    ok: bool
    reason: str = ""
    held: int = 0              # a removal: the highest operation of the removed region this voter holds


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a voter stands on a proposal (:meth:`Membership.standing`)."""

    epoch: int                 # the voter's epoch
    state: str                 # one of STANDINGS
    held: int = 0              # PROMISED: the ``held`` its promise answered


@dataclass(frozen=True, slots=True)
class Settlement:
    """What the voters' standings on a proposal decide (:meth:`Membership.settle`)."""

    outcome: str               # COMMIT, ABORT, ADOPT or WAIT
    frozen: int = 0            # COMMIT of a removal: the frozen point
    source: int = 0            # ADOPT: a voter whose list is newer
    reason: str = ""           # why (ABORT, WAIT: who)


@dataclass
class Membership:
    """One region's copy of the member list (the same at every member of an epoch)."""

    stride: int
    epoch: int = 1
    members: dict[int, Member] = field(default_factory=dict)
    frozen: dict[int, int] = field(default_factory=dict)   # removed origin -> last operation accepted
    promised: Proposal | None = None                       # the proposal for epoch + 1 this region backs
    holding: dict[int, int] = field(default_factory=dict)  # region being force-removed -> held at promise
    changes: dict[int, Proposal] = field(default_factory=dict)  # epoch -> the proposal that made it
    # the rest keeps a promise settleable (see "Settling a promise its coordinator left");
    # like ``promised`` and ``holding``, it is about epoch + 1 only and goes with the epoch
    answered: int = 0                                      # the ``held`` this region's promise answered
    reported: bool = False                                 # it told a settling voter it holds ``promised``
    # ballot -> (a promise that lapsed here, its answered, its reported)
    lapsed: dict[tuple[int, int], tuple[Proposal, int, bool]] = field(default_factory=dict)
    refusing: set[tuple[int, int]] = field(default_factory=set)  # ballots of proposals it never promises

    @classmethod
    def initial(cls, stride: int, regions: list[tuple[int, str]]) -> Membership:
        """The list a database is created with: every region active, epoch 1."""
        m = cls(stride, 1, {n: Member(n, name) for n, name in regions})
        if len(m.members) != len(regions):
            raise MembershipError("two regions share a number")
        if len({name for _, name in regions}) != len(regions):
            raise MembershipError("two regions share a name")
        return m

    # ------------------------------------------------------------ reading
    def status(self, number: int) -> str | None:
        member = self.members.get(number)
        return None if member is None else member.status

    def live(self) -> list[int]:
        return sorted(n for n, m in self.members.items() if m.status in LIVE)

    def stability_regions(self) -> list[int]:
        """The regions causal stability waits for: every live member."""
        return self.live()

    def stable_past_removals(self, stable: dict[int, int]) -> dict[int, int]:
        """``stable`` (what every live member applied), or nothing while a removed region's
        operations up to its frozen point have not reached every live member: they may still
        arrive (relayed) and be concurrent with a delete the others made, so a delete
        context collected before they all arrived would let one of its concurrent creations
        survive at one region and lose at another."""
        for origin, frozen in self.frozen.items():
            if frozen and stable.get(origin, 0) < frozen:
                return {}
        return stable

    def writable(self, number: int) -> bool:
        """May this region take writes?  Only when active (a joining region is catching up,
        a leaving one hands over)."""
        return self.status(number) == ACTIVE

    def accepts(self, origin: int, n: int) -> bool:
        """May an operation ``(origin, n)`` be applied here?  Any of a live member; of a
        removed one only up to where it was frozen; none of a region never a member."""
        status = self.status(origin)
        if status is None:
            return False
        if status == REMOVED:
            return n <= self.frozen.get(origin, 0)
        if origin in self.holding:
            return n <= self.holding[origin]  # its removal is being agreed: frozen where this voter was
        return True

    def admits(self, origin: int, n: int, deps) -> bool:
        """May an envelope be applied here: its origin accepted (:meth:`accepts`) and every
        region it depends on a member (``deps``: (region, n) pairs)?  A region never a member
        at this epoch makes it wait for a newer list (the link restarts and the handshake
        brings it).  Asked for every operation a peer sends: a loop, not a generator."""
        if not self.accepts(origin, n):
            return False
        members = self.members
        for o, _ in deps:
            if o not in members:
                return False
        return True

    def admits_all(self, envelopes) -> bool:
        """Whether :meth:`admits` holds for every one of ``envelopes`` (a peer's batch).
        :meth:`accepts` only bounds ``n`` from above, so each origin is asked once, with its
        highest ``n`` in the batch."""
        members = self.members
        top: dict[int, int] = {}
        for env in envelopes:
            if env.n > top.get(env.origin, 0):
                top[env.origin] = env.n
            for o, _ in env.deps:
                if o not in members:
                    return False
        for origin, n in top.items():
            if not self.accepts(origin, n):
                return False
        return True

    def voters(self, change: Change) -> list[int]:
        """The members whose promise a change needs."""
        return [n for n in self.live() if not (change.kind == FORCE_REMOVE and n == change.number)]

    # ------------------------------------------------------------ changing
    def check(self, change: Change) -> None:
        """MembershipError when ``change`` cannot be made to this list."""
        if change.kind not in TRANSITIONS:
            raise MembershipError(f"unknown membership change {change.kind!r}")
        before, _after = TRANSITIONS[change.kind]
        status = self.status(change.number)
        if change.kind == JOIN:
            if status is not None:
                taken = "was removed (numbers are never reused)" if status == REMOVED else "is taken"
                raise MembershipError(f"region number {change.number} {taken}")
            if not 1 <= change.number < self.stride:
                raise MembershipError(f"region numbers go from 1 to {self.stride - 1} (the stride is "
                                      f"{self.stride}); {change.number} is outside")
            if not change.name or any(m.name == change.name and m.status != REMOVED for m in self.members.values()):
                raise MembershipError(f"a region named {change.name!r} is already a member" if change.name
                                      else "a new region needs a name")
            return
        if status not in before:
            what = "not a member" if status is None else status
            raise MembershipError(f"region {change.number} is {what}: cannot {change.kind} it")
        if change.kind in (LEAVE, FORCE_REMOVE):
            remaining = [n for n in self.live() if n != change.number and self.status(n) == ACTIVE]
            if not remaining:
                raise MembershipError(f"region {change.number} is the last active region")

    def propose(self, change: Change, ballot: tuple[int, int]) -> Proposal:
        self.check(change)
        return Proposal(self.epoch + 1, change, ballot)

    def promise(self, p: Proposal, held: int = 0) -> Promise:
        """A voter's answer (``held``: its version vector's entry for the region a removal
        removes).  Yes only for the next epoch and only one proposal per epoch.  Asked again
        for the promise it holds, it answers as it did (the same ``held``)."""
        if p.epoch != self.epoch + 1:
            return Promise(False, f"this region is at epoch {self.epoch}, the proposal makes epoch {p.epoch}")
        if self.promised == p:
            return Promise(True, held=self.answered)
        if self.promised is not None:
            return Promise(False, f"another change for epoch {p.epoch} is under way "
                                  f"({self.promised.change.kind} of region {self.promised.change.number})")
        if p.ballot in self.refusing:
            return Promise(False, f"the change for epoch {p.epoch} was given up (aborted, or settled by its "
                                  "voters) before its promise request reached this region")
        if p.ballot in self.lapsed:  # its promise lapsed here: take it back as it was
            self._take_back(p)
            return Promise(True, held=self.answered)
        try:
            self.check(p.change)
        except MembershipError as e:
            return Promise(False, str(e))
        self.promised, self.answered, self.reported = p, held, False
        if p.change.kind == FORCE_REMOVE:
            self.holding[p.change.number] = held
        return Promise(True, held=held)

    def abort(self, p: Proposal, settled: bool = False) -> bool:
        """``p`` was given up: by its coordinator, or (``settled``) by this region's settlement.
        The promise goes (another proposal may be backed), with a forced removal's hold, and
        ``p`` is refused from now on (its promise request may still be on its way).  Returns
        False when this region keeps the promise: it told a settling voter it holds it, so
        only the settlement ends it (a coordinator's abort may come after the others counted
        this promise; see the module's theory)."""
        if p.epoch != self.epoch + 1:
            return True
        if self.promised == p:
            if self.reported and not settled:
                return False
            self.promised, self.answered, self.reported = None, 0, False
        elif p.ballot in self.lapsed:
            if self.lapsed[p.ballot][2] and not settled:
                return False  # reported before it lapsed: its hold may be counted on
            del self.lapsed[p.ballot]
        self.refusing.add(p.ballot)
        self._release_hold(p)
        return True

    def lapse(self, p: Proposal) -> None:
        """Give up waiting for ``p``'s coordinator: another proposal may be promised.  Unlike
        :meth:`abort`, a forced removal's hold stays (it may have been committed elsewhere),
        and ``p`` stays known with what this region answered (``lapsed``): a settling voter
        must not take it for a proposal this region never promised."""
        if self.promised == p:
            self.lapsed[p.ballot] = (p, self.answered, self.reported)
            self.promised, self.answered, self.reported = None, 0, False

    # ------------------------------------------------------------ settling a left promise
    def standing(self, p: Proposal) -> Standing:
        """Where this region stands on ``p``, asked by a voter settling it.  Answering commits
        this region: a promise it reports holding it keeps until the settlement ends it (it
        no longer takes the coordinator's abort); a proposal it does not hold at ``p``'s
        epoch it refuses from now on; a lapsed promise of ``p`` it takes back if it backs
        no other proposal."""
        if self.epoch >= p.epoch:
            return Standing(self.epoch, NEWER)
        if self.epoch < p.epoch - 1:
            return Standing(self.epoch, BEHIND)
        if self.promised is None and p.ballot in self.lapsed:
            self._take_back(p)
        if self.promised == p:
            self.reported = True
            return Standing(self.epoch, PROMISED, self.answered)
        if p.ballot in self.lapsed:
            return Standing(self.epoch, LAPSED)
        self.refusing.add(p.ballot)
        return Standing(self.epoch, REFUSED)

    def settle(self, p: Proposal, standings: dict[int, Standing]) -> Settlement:
        """What the standings of ``p``'s voters (``standings``: voter -> its answer; the
        voters that could not be asked are missing) decide, as ``p``'s coordinator would
        have decided: see the module's theory.  Asked by a voter at ``p``'s epoch - 1, whose
        list names the voters."""
        voters = self.voters(p.change)
        known = {n: standings[n] for n in voters if n in standings}
        newer = sorted((s.epoch, n) for n, s in known.items() if s.state == NEWER)
        if newer:
            epoch, source = newer[-1]
            return Settlement(ADOPT, source=source, reason=f"region {source} is at epoch {epoch}")
        refused = [n for n, s in known.items() if s.state == REFUSED]
        if refused:
            return Settlement(ABORT, reason=f"{_regions(refused)} never promised it")
        waiting = [f"region {n} {known[n].state if n in known else 'not reached'}" for n in voters
                   if n not in known or known[n].state != PROMISED]
        if waiting:
            return Settlement(WAIT, reason=", ".join(waiting))
        frozen = max(s.held for s in known.values()) if p.change.kind in (REMOVE, FORCE_REMOVE) else 0
        return Settlement(COMMIT, frozen=frozen)

    def left_promise(self) -> Proposal | None:
        """The proposal a settlement here would be about: the promise held, else - backing
        none - a promise that lapsed (asking itself takes it back)."""
        if self.promised is not None:
            return self.promised
        return min(self.lapsed.values(), key=lambda lapsed: lapsed[0].ballot)[0] if self.lapsed else None

    def _take_back(self, p: Proposal) -> None:
        """Back ``p`` again, a promise that lapsed here (its hold never went)."""
        _p, answered, reported = self.lapsed.pop(p.ballot)
        self.promised, self.answered, self.reported = p, answered, reported
        if p.change.kind == FORCE_REMOVE:
            self.holding[p.change.number] = min(answered, self.holding.get(p.change.number, answered))

    def _release_hold(self, p: Proposal) -> None:
        """``p`` ended without taking effect: its forced removal's hold goes, unless another
        proposal this region backs, or backed before it lapsed, removes the same region."""
        if p.change.kind != FORCE_REMOVE:
            return
        target = p.change.number
        others = ([self.promised] if self.promised is not None else []) + [lapsed[0] for lapsed in self.lapsed.values()]
        if not any(q.change.kind == FORCE_REMOVE and q.change.number == target for q in others):
            self.holding.pop(target, None)

    def commit(self, p: Proposal, frozen: int = 0) -> None:
        """Apply ``p``, the proposal this region promised: epoch + 1.  ``frozen``: for a
        removal, the highest operation of the removed region any voter held (the remaining
        regions accept it up to there).  Committing ``p`` again is a no-op; committing a
        proposal this region did not promise is refused (MembershipError).  A commit for an
        epoch this region already adopted from a peer is a no-op: it made that epoch."""
        if self.changes.get(p.epoch) == p:
            return
        if p.epoch <= self.epoch:
            if p.epoch in self.changes:
                raise MembershipError(f"epoch {p.epoch} was made by another change here")
            # adopted from a peer (a list carries no proposals): only one proposal per epoch
            # can have every promise, so the epoch a commit names was made by it
            return
        if self.promised != p:
            raise MembershipError(f"this region did not promise the change for epoch {p.epoch}")
        self._apply(p, frozen)

    def record(self, p: Proposal, frozen: int = 0) -> None:
        """The coordinator's own copy of the list (it is no voter): apply ``p``, which every
        voter promised and was asked to commit."""
        if p.epoch != self.epoch + 1:
            raise MembershipError(f"this list is at epoch {self.epoch}, the change made epoch {p.epoch}")
        self._apply(p, frozen)

    def adopt(self, other: Membership) -> bool:
        """Take a newer list (a peer's, at its handshake): every epoch of it was agreed.
        Returns whether anything changed."""
        if other.epoch <= self.epoch:
            return False
        self.epoch, self.members, self.frozen = other.epoch, dict(other.members), dict(other.frozen)
        self.changes = {**self.changes, **other.changes}
        self._new_epoch()  # removals promised before it took effect or never will
        return True

    def _apply(self, p: Proposal, frozen: int) -> None:
        self.check(p.change)
        change = p.change
        _before, after = TRANSITIONS[change.kind]
        if change.kind == JOIN:
            self.members[change.number] = Member(change.number, change.name, after)
        else:
            self.members[change.number] = replace(self.members[change.number], status=after)
        if after == REMOVED:
            self.frozen[change.number] = frozen
        self.epoch = p.epoch
        self.changes[p.epoch] = p
        self._new_epoch()

    def _new_epoch(self) -> None:
        """Promises, holds and refusals are about the next epoch: a new one ends them."""
        self.promised, self.answered, self.reported = None, 0, False
        self.holding = {}
        self.lapsed = {}
        self.refusing = set()


def _regions(numbers: list[int]) -> str:
    return ("region " if len(numbers) == 1 else "regions ") + ", ".join(str(n) for n in numbers)
