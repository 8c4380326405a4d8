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
  an explicit abort of that proposal or a newer epoch (the removal took effect -
  ``frozen`` rules from then on - or another change made that epoch, so it never
  will).
* A join carries the new region's address (``Change.endpoint``: host, client port,
  replication port), so every member can reach it once the join is committed.
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

    @classmethod
    def initial(cls, stride: int, regions: list[tuple[int, str]]) -> "Membership":
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
        removes).  Yes only for the next epoch and only one proposal per epoch."""
        if p.epoch != self.epoch + 1:
            return Promise(False, f"this region is at epoch {self.epoch}, the proposal makes epoch {p.epoch}")
        if self.promised is not None and self.promised != p:
            return Promise(False, f"another change for epoch {p.epoch} is under way "
                                  f"({self.promised.change.kind} of region {self.promised.change.number})")
        try:
            self.check(p.change)
        except MembershipError as e:
            return Promise(False, str(e))
        self.promised = p
        if p.change.kind == FORCE_REMOVE:
            self.holding[p.change.number] = held
        return Promise(True, held=held)

    def abort(self, p: Proposal) -> None:
        """The coordinator gave ``p`` up: the promise goes (another proposal may be backed)."""
        if self.promised == p:
            self.promised = None
            if p.change.kind == FORCE_REMOVE:
                self.holding.pop(p.change.number, None)

    def lapse(self, p: Proposal) -> None:
        """Give up waiting for ``p``'s coordinator: another proposal may be promised.  Unlike
        :meth:`abort`, a forced removal's hold stays (it may have been committed elsewhere)."""
        if self.promised == p:
            self.promised = None

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

    def adopt(self, other: "Membership") -> bool:
        """Take a newer list (a peer's, at its handshake): every epoch of it was agreed.
        Returns whether anything changed."""
        if other.epoch <= self.epoch:
            return False
        self.epoch, self.members, self.frozen = other.epoch, dict(other.members), dict(other.frozen)
        self.changes = {**self.changes, **other.changes}
        self.promised = None
        self.holding = {}  # a newer epoch: removals promised before it took effect or never will
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
        self.promised = None
        self.holding = {}
