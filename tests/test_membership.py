"""The member list and its agreement rules (crdt/membership.py), pure.

Unit tests for each rule, then a Hypothesis state machine: several coordinators
propose changes at once to members that receive promise requests, commits and
aborts in any order (some never), and gossip newer lists; promises lapse, and
members settle the promises their coordinators left with the voters they can
reach.  Whatever happens, no two members ever hold different lists for one epoch,
no member holds a removed region's operations past its frozen point, and once
every coordinator is gone and every voter can be asked, every change ends.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from crdt.causal import Envelope
from crdt.membership import (
    ABORT,
    ACTIVATE,
    ADOPT,
    COMMIT,
    FORCE_REMOVE,
    JOIN,
    JOINING,
    LAPSED,
    LEAVE,
    LEAVING,
    LIVE,
    PROMISED,
    REFUSED,
    REMOVE,
    REMOVED,
    WAIT,
    Change,
    Membership,
    MembershipError,
    Proposal,
)


def three() -> Membership:
    return Membership.initial(16, [(1, "region-1"), (2, "region-2"), (3, "region-3")])


def agree(members: list[Membership], change: Change, coordinator: int = 1, frozen: int = 0) -> None:
    """The whole protocol with every voter reachable."""
    p = members[0].propose(change, (coordinator, 1))
    voters = set(members[0].voters(change))
    for m, n in zip(members, (1, 2, 3, 4, 5), strict=False):
        if n in voters:
            assert m.promise(p).ok
    for m, n in zip(members, (1, 2, 3, 4, 5), strict=False):
        if n in voters:
            m.commit(p, frozen)


def test_a_region_joins_catches_up_and_takes_writes():
    ms = [three() for _ in range(3)]
    agree(ms, Change(JOIN, 4, "region-4"))
    assert all(m.epoch == 2 and m.status(4) == JOINING for m in ms)
    assert not ms[0].writable(4) and ms[0].accepts(4, 1)  # its operations apply everywhere at once
    assert ms[0].voters(Change(ACTIVATE, 4)) == [1, 2, 3, 4]  # the newcomer votes too from now on
    new = three()
    new.adopt(ms[0])  # the newcomer's copy, taken from the region that added it
    agree([*ms, new], Change(ACTIVATE, 4))
    assert all(m.writable(4) and m.epoch == 3 for m in [*ms, new])
    assert ms[0].stability_regions() == [1, 2, 3, 4]


def test_a_graceful_leave_then_its_removal():
    ms = [three() for _ in range(3)]
    agree(ms, Change(LEAVE, 3))
    assert ms[0].status(3) == LEAVING and not ms[0].writable(3)
    agree(ms, Change(REMOVE, 3), frozen=42)
    assert ms[0].status(3) == REMOVED and ms[0].stability_regions() == [1, 2]
    assert ms[0].accepts(3, 42) and not ms[0].accepts(3, 43)


def test_a_batch_is_admitted_only_if_each_of_its_operations_is():
    ms = [three() for _ in range(3)]
    agree(ms, Change(LEAVE, 3))
    agree(ms, Change(REMOVE, 3), frozen=42)
    m = ms[0]

    def batch(*dots, deps=((1, 5),)):
        return [Envelope(o, n, deps, b"") for o, n in dots]

    assert m.admits_all(batch((3, 41), (3, 42), (1, 7)))
    assert not m.admits_all(batch((3, 41), (3, 43)))  # the last one is past region 3's frozen point
    assert not m.admits_all(batch((3, 43), (3, 41)))
    assert not m.admits_all(batch((1, 7), deps=((1, 5), (9, 1))))  # depends on a region never a member
    assert not m.admits_all(batch((9, 1)))
    assert m.admits_all([])


def test_a_forced_removal_does_not_ask_the_removed_region_and_freezes_its_operations():
    ms = [three() for _ in range(3)]
    change = Change(FORCE_REMOVE, 2)
    assert ms[0].voters(change) == [1, 3]
    p = ms[0].propose(change, (1, 1))
    held = [ms[0].promise(p, held=7).held, ms[2].promise(p, held=9).held]
    for m in (ms[0], ms[2]):
        m.commit(p, max(held))
    assert ms[0].accepts(2, 9) and not ms[0].accepts(2, 10)
    assert ms[1].epoch == 1  # the removed region never heard of it; its handshake is refused (epoch)
    assert not ms[0].accepts(5, 1)  # never a member


@pytest.mark.parametrize("change, error", [
    (Change(JOIN, 2, "other"), "is taken"),
    (Change(JOIN, 16, "sixteen"), "from 1 to 15"),
    (Change(JOIN, 4, "region-1"), "already a member"),
    (Change(JOIN, 4, ""), "needs a name"),
    (Change(ACTIVATE, 1), "is active: cannot activate"),
    (Change(REMOVE, 1), "is active: cannot remove"),
    (Change(LEAVE, 9), "not a member"),
    (Change("rename", 1), "unknown membership change"),
])
def test_changes_that_cannot_be_made_are_refused(change, error):
    with pytest.raises(MembershipError, match=error):
        three().propose(change, (1, 1))


def test_numbers_are_never_reused_and_the_last_active_region_cannot_leave():
    m = Membership.initial(16, [(1, "a"), (2, "b")])
    agree([m, Membership.initial(16, [(1, "a"), (2, "b")])], Change(FORCE_REMOVE, 2))
    with pytest.raises(MembershipError, match="was removed"):
        m.propose(Change(JOIN, 2, "b"), (1, 2))
    m.check(Change(JOIN, 3, "b"))  # the name is free again, under a new number
    with pytest.raises(MembershipError, match="last active region"):
        m.propose(Change(LEAVE, 1), (1, 3))


def test_one_proposal_per_epoch_is_promised_and_only_it_commits():
    a, b = three(), three()
    p = a.propose(Change(JOIN, 4, "x"), (1, 1))
    q = a.propose(Change(JOIN, 5, "y"), (2, 1))
    assert a.promise(p).ok and b.promise(q).ok
    refused = a.promise(q)
    assert not refused.ok and "another change for epoch 2" in refused.reason
    with pytest.raises(MembershipError, match="did not promise"):
        a.commit(q)
    a.abort(p)
    assert a.promise(q).ok  # the aborted promise no longer stands in the way
    a.commit(q)
    a.commit(q)  # again: nothing happens
    with pytest.raises(MembershipError, match="made by another change"):
        a.commit(p)
    assert not a.promise(p).ok  # a proposal for an epoch already made is refused


def test_a_member_that_missed_a_commit_adopts_the_newer_list():
    a, b = three(), three()
    p = a.propose(Change(LEAVE, 3), (1, 1))
    assert a.promise(p).ok and b.promise(p).ok
    a.commit(p)  # the coordinator stopped before b's commit
    assert b.promise(b.propose(Change(LEAVE, 2), (2, 1))).ok is False  # b still backs p
    assert b.adopt(a) and b.epoch == 2 and b.status(3) == LEAVING and b.promised is None
    assert not b.adopt(a)  # nothing newer


def handshake_form(m: Membership) -> Membership:
    """The list as a handshake carries it: epoch, members, frozen points, not the proposals."""
    return Membership(m.stride, m.epoch, dict(m.members), dict(m.frozen))


def test_a_commit_reaching_a_member_that_adopted_the_list_changes_nothing():
    a, b = three(), three()
    p = a.propose(Change(FORCE_REMOVE, 3), (1, 1))
    assert a.promise(p, held=5).ok and b.promise(p, held=4).ok
    a.commit(p, 5)
    assert b.adopt(handshake_form(a))  # b met a, which committed first
    b.commit(p, 5)  # the coordinator's commit comes after: nothing to do (was refused)
    assert (b.epoch, b.members, b.frozen) == (a.epoch, a.members, a.frozen) == (2, a.members, {3: 5})
    q = b.propose(Change(LEAVE, 2), (2, 1))
    assert b.promise(q).ok and a.promise(q).ok
    a.commit(q)
    b.commit(q)
    with pytest.raises(MembershipError, match="made by another change"):
        b.commit(Proposal(3, Change(LEAVE, 1), (1, 2)))  # its own epoch 3 it knows: another change is refused


# ---------------------------------------------------------------- concurrent coordinators
NUMBERS = (1, 2, 3, 4)
EVERYONE = (1, 2, 3, 4, 5, 6)  # 5 and 6 may join: they start with the founders' list and learn by gossip
CHANGES = st.sampled_from([Change(JOIN, 5, "five"), Change(JOIN, 6, "six"), Change(LEAVE, 2), Change(LEAVE, 3),
                           Change(FORCE_REMOVE, 4), Change(FORCE_REMOVE, 1), Change(ACTIVATE, 5),
                           Change(REMOVE, 2), Change(REMOVE, 3)])


class ConcurrentChanges(RuleBasedStateMachine):
    """Coordinators run the protocol over a network that delays, reorders and loses
    messages; members also gossip their lists.  A coordinator commits only with every
    voter's yes (as its own list names the voters) and aborts otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.members = {n: Membership.initial(16, [(k, f"region-{k}") for k in NUMBERS]) for n in EVERYONE}
        self.inflight: list[tuple[str, int, object]] = []  # (kind, to, proposal or (proposal, frozen))
        self.runs: dict[tuple, dict] = {}  # ballot -> the coordinator's view of its run
        self.counter = 0
        # member -> origin -> how many of that origin's operations it applied (what it answers as held)
        self.taken: dict[int, dict[int, int]] = {n: {} for n in EVERYONE}

    @rule(coordinator=st.sampled_from(NUMBERS), change=CHANGES)
    def propose(self, coordinator, change):
        m = self.members[coordinator]
        self.counter += 1
        try:
            p = m.propose(change, (coordinator, self.counter))
        except MembershipError:
            return
        voters = m.voters(change)
        self.runs[p.ballot] = {"p": p, "voters": set(voters), "yes": {}, "no": False, "done": False}
        self.inflight += [("promise", v, p) for v in voters]

    @rule(data=st.data(), count=st.integers(1, 6))
    def deliver(self, data, count):
        """Up to ``count`` messages, each one of the three oldest (so they overtake each other)."""
        for _ in range(count):
            if self.inflight:
                self._deliver_one(self.inflight.pop(data.draw(st.integers(0, min(2, len(self.inflight) - 1)))))

    def _deliver_one(self, message) -> None:
        kind, to, body = message
        member = self.members[to]
        if kind == "promise":
            answer = member.promise(body, held=self.taken[to].get(body.change.number, 0))
            run = self.runs[body.ballot]
            if answer.ok:
                run["yes"][to] = answer.held
            else:
                run["no"] = True
        elif kind == "commit":
            p, frozen = body
            try:
                member.commit(p, frozen)
            except MembershipError:
                pass  # refused here: it promised another change or moved on; gossip settles it
        else:
            member.abort(body)

    @rule(data=st.data())
    def time_out(self, data):
        """A coordinator stops waiting for an answer (lost, or late - its voter may well have
        promised): it aborts the proposal."""
        waiting = [r for r in self.runs.values() if not r["done"] and not r["no"]]
        if waiting:
            data.draw(st.sampled_from(waiting))["no"] = True

    @rule(data=st.data(), really=st.integers(0, 3))
    def lose(self, data, really):
        if self.inflight and not really:
            self.inflight.pop(data.draw(st.integers(0, len(self.inflight) - 1)))

    @rule(data=st.data())
    def decide(self, data):
        """A coordinator with every answer (or a no) commits or aborts, once."""
        open_runs = [r for r in self.runs.values() if not r["done"] and (r["no"] or set(r["yes"]) == r["voters"])]
        if not open_runs:
            return
        run = data.draw(st.sampled_from(open_runs))
        run["done"] = True
        p = run["p"]
        if run["no"]:
            self.inflight += [("abort", v, p) for v in run["voters"]]
        else:
            self.inflight += [("commit", v, (p, max(run["yes"].values()))) for v in run["voters"]]

    @rule(at=st.sampled_from(EVERYONE), origin=st.sampled_from(NUMBERS), count=st.integers(1, 3))
    def take_operations(self, at, origin, count):
        """A live member applies ``origin``'s next operations, as far as its list lets it (a
        hold of a forced removal, a frozen point); the origin keeps making them."""
        m = self.members[at]
        if at == origin or m.status(at) not in LIVE:
            return
        for _ in range(count):
            n = self.taken[at].get(origin, 0) + 1
            if not m.accepts(origin, n):
                return
            self.taken[at][origin] = n

    @rule(at=st.sampled_from(EVERYONE))
    def lapse(self, at):
        """Its coordinator took too long: the promise lapses (ActiveActive does so when another
        proposal comes PROMISE_TIMEOUT_S after it).  Modelled where that time means what it is
        meant to: the coordinator is gone without having committed the proposal anywhere (its
        run is decided or was never finished, no commit of it landed or is on its way).  A
        commit that lands after a lapse can let a forced removal of the one voter it reached
        make the same epoch elsewhere: a hazard of the timeout itself, not of settling."""
        m = self.members[at]
        p = m.promised
        if p is None or any(other.changes.get(p.epoch) == p for other in self.members.values()):
            return
        if any(kind == "commit" and body[0] == p for kind, _to, body in self.inflight):
            return
        run = self.runs.get(p.ballot)
        asked = {to for kind, to, body in self.inflight if kind == "promise" and body == p}
        if run is not None and not run["done"] and not run["no"] and set(run["yes"]) | asked == run["voters"]:
            return  # every promise is in or on its way: its coordinator may still decide to commit
        m.lapse(p)

    @rule(at=st.sampled_from(EVERYONE), data=st.data())
    def settle(self, at, data):
        """A member settles the promise its coordinator left with the voters it can reach."""
        m = self.members[at]
        p = m.left_promise()
        if p is None:
            return
        voters = m.voters(p.change)
        reached = data.draw(st.sets(st.sampled_from(voters))) if voters else set()
        self._settle(at, p, reached | {at})

    def _settle(self, at: int, p: Proposal, reached) -> None:
        m = self.members[at]
        standings = {n: self.members[n].standing(p) for n in sorted(reached) if n in m.voters(p.change)}
        if m.promised != p:  # asking itself did not take a lapsed promise back (it backs another)
            return
        settlement = m.settle(p, standings)
        if settlement.outcome == COMMIT:
            m.commit(p, settlement.frozen)
            self.inflight += [("commit", v, (p, settlement.frozen)) for v in sorted(reached) if v != at]
        elif settlement.outcome == ABORT:
            assert m.abort(p, settled=True)
        elif settlement.outcome == ADOPT:
            m.adopt(self.members[settlement.source])

    @rule(a=st.sampled_from(EVERYONE), b=st.sampled_from(EVERYONE), handshake=st.booleans())
    def gossip(self, a, b, handshake):
        """``b`` takes ``a``'s newer list, with the proposals that made it or (as a region's
        handshake carries it) without: a commit reaching ``b`` later changes nothing."""
        self.members[b].adopt(handshake_form(self.members[a]) if handshake else self.members[a])

    @rule(at=st.sampled_from(EVERYONE),
          batch=st.lists(st.tuples(st.sampled_from(EVERYONE + (9,)), st.integers(1, 60),
                                   st.lists(st.sampled_from(EVERYONE + (9,)), max_size=3, unique=True)), max_size=8))
    def a_batch_is_admitted_as_each_of_it_would_be(self, at, batch):
        """A peer's batch is checked at once (per origin, its highest n): the same verdict as
        one by one, whatever the list holds (frozen points, holds of a forced removal)."""
        m = self.members[at]
        envs = [Envelope(o, n, tuple((d, 1) for d in sorted(deps)), b"") for o, n, deps in batch]
        assert m.admits_all(envs) == all(m.admits(e.origin, e.n, e.deps) for e in envs)

    @invariant()
    def one_list_per_epoch(self):
        by_epoch: dict[int, tuple] = {}
        for m in self.members.values():
            for epoch, p in m.changes.items():
                assert by_epoch.setdefault(epoch, p) == p, f"epoch {epoch} made by two changes"
            shown = (tuple(sorted(m.members.items())), tuple(sorted(m.frozen.items())))
            seen = by_epoch.setdefault(("list", m.epoch), shown)
            assert seen == shown, f"two lists at epoch {m.epoch}"

    @invariant()
    def no_member_holds_a_removed_regions_operations_past_its_frozen_point(self):
        """What the holds of a forced removal are for.  (A graceful removal's frozen point rests
        on braid-admin's hand-over wait, which this machine does not model: it removes leavers
        whatever their members hold.)"""
        forced = {p.change.number for m in self.members.values() for p in m.changes.values()
                  if p.change.kind == FORCE_REMOVE}
        for n, m in self.members.items():
            if m.status(n) not in LIVE:
                continue  # removed itself (it may not know it yet): it takes part no more
            for origin, frozen in m.frozen.items():
                if origin in forced:
                    assert self.taken[n].get(origin, 0) <= frozen, (
                        f"member {n} applied {origin}.{self.taken[n][origin]}, past its frozen point {frozen}")

    def teardown(self):
        """Every coordinator vanishes (what is in flight is lost); members gossip and settle with
        every voter reachable: every change ends, and the invariants still hold."""
        self.inflight.clear()
        for _ in range(len(EVERYONE) * 4):
            newest = max(self.members.values(), key=lambda m: m.epoch)
            for m in self.members.values():
                m.adopt(newest)
            left = [(n, m.left_promise()) for n, m in sorted(self.members.items()) if m.left_promise()]
            if not left:
                break
            for n, p in left:
                if self.members[n].left_promise() == p:
                    self._settle(n, p, set(self.members[n].voters(p.change)) | {n})
            self.inflight.clear()  # the settled commits' own copies: each voter settles too
        self.one_list_per_epoch()
        self.no_member_holds_a_removed_regions_operations_past_its_frozen_point()
        for n, m in sorted(self.members.items()):
            assert m.left_promise() is None and not m.holding, (
                f"member {n} still holds {m.promised or m.lapsed} and holds {m.holding}: the change never ended")


TestConcurrentChanges = ConcurrentChanges.TestCase


def test_a_commit_for_an_epoch_adopted_from_a_peer_changes_nothing():
    """A member that heard of the change from a peer first (its handshake carried the newer
    list) then gets the coordinator's commit: the epoch was made by that proposal (one per
    epoch can have every promise), so the commit is a no-op, not an error."""
    a, b = three(), three()
    p = a.propose(Change(JOIN, 4, "region-4"), (0, 7))
    assert a.promise(p).ok and b.promise(p).ok
    a.commit(p)
    peer_list = Membership(a.stride, a.epoch, dict(a.members), dict(a.frozen))  # a list carries no proposals
    assert b.adopt(peer_list)
    b.commit(p)
    assert b.epoch == 2 and b.status(4) == JOINING


def test_a_forced_removal_hold_outlives_a_lapsed_promise_until_an_epoch_settles_it():
    a = three()
    p = a.propose(Change(FORCE_REMOVE, 3), (0, 1))
    assert a.promise(p, held=4).ok
    assert a.accepts(3, 4) and not a.accepts(3, 5)
    a.lapse(p)  # its coordinator vanished: another change may be promised, the hold stays
    assert a.promised is None and not a.accepts(3, 5)
    q = a.propose(Change(JOIN, 4, "region-4"), (0, 2))
    assert a.promise(q).ok
    a.commit(q)  # epoch 2 was made by the join: the removal never took effect
    assert a.holding == {} and a.accepts(3, 5)
    r = a.propose(Change(FORCE_REMOVE, 3), (0, 3))
    assert a.promise(r, held=9).ok
    a.abort(r)  # an explicit abort: the hold goes with the promise
    assert a.holding == {} and a.accepts(3, 10)


def test_nothing_is_stable_until_a_force_removed_regions_operations_reached_every_member():
    """A region removed by force is frozen at the most of its operations any voter held; the
    others may still be on their way (relayed) to a live member, and one of them may be a
    group creation concurrent with a delete: until every live member holds them all, no
    delete context may be collected, or that creation survives at one region only (found by
    the convergence state machine: a forced removal, then a cron's garbage collection)."""
    ms = [three() for _ in range(2)]
    agree(ms, Change(FORCE_REMOVE, 3), frozen=4)
    m = ms[0]
    assert m.stability_regions() == [1, 2]
    assert m.stable_past_removals({1: 9, 2: 7, 3: 3}) == {}       # a live member lacks 3.4
    assert m.stable_past_removals({1: 9, 2: 7}) == {}             # ... or any of region 3's
    assert m.stable_past_removals({1: 9, 2: 7, 3: 4}) == {1: 9, 2: 7, 3: 4}
    assert three().stable_past_removals({1: 2, 2: 2}) == {1: 2, 2: 2}  # nobody removed: as it was


# ---------------------------------------------------------------- settling a promise its coordinator left
def _standings(members: dict[int, Membership], p: Proposal) -> dict:
    return {n: m.standing(p) for n, m in members.items()}


def test_voters_commit_a_change_every_one_of_them_promised_once_its_coordinator_left():
    """The issue's case: both voters of region 3's forced removal promised, then its
    coordinator vanished before any commit.  Asked by a voter, each says it holds the
    promise; that is what the coordinator needed, so they commit it, frozen at the highest
    ``held`` they answered (the coordinator's own frozen point)."""
    a, b = three(), three()
    p = a.propose(Change(FORCE_REMOVE, 3), (0, 1))
    assert a.promise(p, held=4).ok and b.promise(p, held=6).ok
    settlement = a.settle(p, _standings({1: a, 2: b}, p))
    assert (settlement.outcome, settlement.frozen) == (COMMIT, 6)
    a.commit(p, settlement.frozen)
    assert a.status(3) == REMOVED and a.frozen == {3: 6} and a.holding == {} and a.left_promise() is None
    later = b.settle(p, _standings({1: a, 2: b}, p))  # b settles it after a did: a holds the newer list
    assert (later.outcome, later.source) == (ADOPT, 1)
    assert b.adopt(a) and b.holding == {} and b.frozen == {3: 6}


def test_voters_abort_a_change_one_of_them_never_promised_and_it_refuses_it_for_good():
    """The coordinator vanished after region 1's promise, before asking region 2: region 1
    aborts it (its hold ends), and region 2, asked, will never promise it - a promise request
    still on its way would otherwise let the coordinator commit what region 1 gave up."""
    a, b = three(), three()
    p = a.propose(Change(FORCE_REMOVE, 3), (0, 1))
    assert a.promise(p, held=4).ok
    standings = _standings({1: a, 2: b}, p)
    assert standings[2].state == REFUSED
    settlement = a.settle(p, standings)
    assert settlement.outcome == ABORT and "region 2 never promised it" in settlement.reason
    assert a.abort(p, settled=True)
    assert a.promised is None and a.holding == {} and a.accepts(3, 5)
    late = b.promise(p, held=9)
    assert not late.ok and "was given up" in late.reason
    c = three()
    q = c.propose(Change(FORCE_REMOVE, 3), (0, 2))
    assert c.promise(q, held=1).ok
    waiting = c.settle(q, {1: c.standing(q)})  # region 2 not reached: nothing is decided
    assert waiting.outcome == WAIT and "region 2 not reached" in waiting.reason


def test_an_abort_that_overtakes_its_promise_request_makes_the_voter_refuse_it():
    a = three()
    p = a.propose(Change(JOIN, 4, "region-4"), (0, 1))
    assert a.abort(p)
    assert not a.promise(p).ok and a.promised is None


def test_a_voter_that_reported_its_promise_takes_no_coordinators_abort():
    """A coordinator aborts when an answer was lost; if its aborts then reach no voter, every
    voter may hold the promise and a settling voter counts it.  An abort that comes after the
    voter said so must not end the promise (its hold would go while the others commit): only
    the settlement ends it."""
    a, b = three(), three()
    p = a.propose(Change(FORCE_REMOVE, 3), (0, 1))
    assert a.promise(p, held=2).ok and b.promise(p, held=3).ok
    standings = _standings({1: a, 2: b}, p)
    assert {s.state for s in standings.values()} == {PROMISED}
    assert not b.abort(p)  # the coordinator's abort, late
    assert b.promised == p and not b.accepts(3, 4)
    assert a.settle(p, standings).outcome == COMMIT
    assert b.settle(p, _standings({1: a, 2: b}, p)).frozen == 3
    c = three()
    q = c.propose(Change(FORCE_REMOVE, 3), (0, 2))
    assert c.promise(q, held=1).ok
    assert c.abort(q) and c.holding == {}  # not reported: the coordinator's abort ends it


def test_a_lapsed_promise_holds_its_settlement_until_its_voter_backs_nothing_else():
    """Region 2's promise of the removal lapsed and it promised another change: it is not
    counted as refusing (the removal's coordinator may have counted its promise), so the
    removal waits; once the other change is aborted, region 2 takes its promise back when
    asked - its hold never went - and the voters commit the removal."""
    a, b = three(), three()
    p = a.propose(Change(FORCE_REMOVE, 3), (0, 1))
    assert a.promise(p, held=5).ok and b.promise(p, held=5).ok
    b.lapse(p)
    q = b.propose(Change(JOIN, 4, "region-4"), (0, 2))
    assert b.promise(q).ok and not b.accepts(3, 6)  # the hold stays
    standings = _standings({1: a, 2: b}, p)
    assert standings[2].state == LAPSED and a.settle(p, standings).outcome == WAIT
    assert b.abort(q) and not b.accepts(3, 6)  # the join's abort leaves the removal's hold
    standings = _standings({1: a, 2: b}, p)
    assert standings[2].state == PROMISED and b.promised == p
    settlement = a.settle(p, standings)
    assert (settlement.outcome, settlement.frozen) == (COMMIT, 5)
    a.commit(p, 5)
    b.commit(p, 5)
    assert a.members == b.members and b.holding == {}
