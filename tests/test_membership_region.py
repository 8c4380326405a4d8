"""Membership at one region, without processes: the handshake gate, what is applied, what
clients may write, promises that lapse, promises voters settle when their coordinator left them,
and the cluster file that records the list."""

from __future__ import annotations

import json

import pytest

from crdt.causal import Envelope
from crdt.membership import ACTIVATE, FORCE_REMOVE, JOIN, LEAVE, REMOVE, Change, Proposal, Standing
from node.activeactive import coordinator as membership_change
from node.activeactive.cluster_config import ClusterConfig, RegionSpec, load, membership_from_blob
from node.activeactive.coordinator import MembershipChangeError, standings
from node.activeactive.region import PROMISE_TIMEOUT_S
from node.persistence.promise import FilePromiseStore
from node.region.config import Config
from node.region.core import RegionCore, Session
from node.resp.encoder import ReplyError
from node.transport.admin import AdminCallError


def cluster() -> ClusterConfig:
    return ClusterConfig("c", "db", "t", 16, [RegionSpec(f"region-{n}", n, "127.0.0.1", 7000 + n, 7100 + n)
                                             for n in (1, 2, 3)])


def region(number: int = 1, cfg: ClusterConfig | None = None) -> tuple[RegionCore, Session]:
    cfg = cfg or cluster()
    core = RegionCore(Config(), cluster=(cfg, cfg.by_number(number)))
    session = Session(core)
    session.authenticated = True
    return core, session


def agree(cores: list[RegionCore], change: Change, frozen: int = 0) -> Proposal:
    p = cores[0].aa.membership.propose(change, (9, 1))
    for c in cores:
        assert c.aa.promise(p).ok
    for c in cores:
        c.aa.commit(p, frozen)
    return p


def env(origin: int, n: int, deps=()) -> Envelope:
    return Envelope(origin, n, tuple(deps), b"")


def test_a_peer_removed_or_never_added_is_refused_at_the_handshake():
    (core, _), (other, _) = region(1), region(2)
    gate = core.aa.hub.gate
    assert gate.check_peer(2, 1, b"") == ""
    assert "not a member" in gate.check_peer(7, 1, b"")
    agree([core, other], Change(FORCE_REMOVE, 3))
    reason = gate.check_peer(3, 1, b"")
    assert "was removed" in reason and "braid-admin region purge --region region-3" in reason


def test_a_newer_list_from_a_peer_is_adopted_and_an_older_one_is_not():
    (a, _), (b, _) = region(1), region(2)
    agree([a], Change(JOIN, 4, "region-4", ("127.0.0.1", 7004, 7104)))
    blob = a.aa.cluster.membership_blob()
    assert b.aa.hub.gate.check_peer(1, 2, blob) == ""  # region 1 is still a member after the change
    assert b.aa.membership.epoch == 2 and b.aa.membership.status(4) == "joining"
    assert b.aa.cluster.by_number(4).repl_port == 7104  # its address came with the list
    old = cluster().membership_blob()
    assert not b.aa.adopt(old)
    assert b.aa.membership.epoch == 2


@pytest.mark.parametrize("blob, error", [
    (b"not json", "unreadable"),
    (json.dumps({"epoch": 5, "stride": 8, "regions": []}).encode(), "stride"),
    (json.dumps({"epoch": 5, "stride": 16, "regions": [{"number": 99, "name": "x", "status": "active",
                                                         "host": "h", "port": 1, "repl_port": 2}]}).encode(),
     "cannot be a member"),
    (json.dumps({"epoch": 0, "stride": 16, "regions": []}).encode(), "epoch below 1"),
])
def test_a_member_list_that_cannot_be_this_databases_is_refused(blob, error):
    with pytest.raises(ValueError, match=error):
        membership_from_blob(blob, 16)
    core, _ = region(1)
    assert core.aa.hub.gate.check_peer(2, 9, blob).startswith("region 2 sent an unreadable")
    assert core.aa.membership.epoch == 1


def test_operations_of_a_removed_region_past_its_frozen_point_are_dropped():
    core, _ = region(1)
    gate = core.aa.hub.gate
    agree([core], Change(FORCE_REMOVE, 3), frozen=2)
    assert gate.admits(env(3, 2)) == ""
    assert gate.admits(env(3, 3)) == "drop"
    assert core.aa.membership_dropped == 1
    assert gate.admits(env(9, 1)) == "behind"               # a region this list does not know
    assert gate.admits(env(2, 1, [(9, 1)])) == "behind"     # one that depends on such a region


def test_a_voter_of_a_forced_removal_takes_nothing_more_of_that_region():
    core, _ = region(1)
    core.aa.causal.vv[3] = 5
    p = core.aa.membership.propose(Change(FORCE_REMOVE, 3), (9, 1))
    assert core.aa.promise(p).held == 5
    assert core.aa.hub.gate.admits(env(3, 5)) == "" and core.aa.hub.gate.admits(env(3, 6)) == "drop"
    core.aa.abort(p)  # given up: it is a member again
    assert core.aa.hub.gate.admits(env(3, 6)) == ""


def test_writes_are_refused_while_joining_leaving_or_removed():
    core, s = region(1)
    assert core.call(s, [b"XADD", b"k", b"*", b"f", b"v"])
    other, _ = region(2)
    agree([core, other], Change(LEAVE, 1))
    reply = core.call(s, [b"XADD", b"k", b"*", b"f", b"v"])
    assert isinstance(reply, ReplyError) and reply.message.startswith("READONLY this region is leaving")
    assert core.call(s, [b"XLEN", b"k"]) == 1  # reads go on
    assert core.call(s, [b"MULTI"]) == "OK"
    queued = core.call(s, [b"XADD", b"k", b"*", b"f", b"v"])
    assert isinstance(queued, ReplyError) and queued.message.startswith("READONLY")
    assert core.call(s, [b"EXEC"]).message.startswith("EXECABORT")
    agree([core, other], Change(REMOVE, 1))
    reply = core.call(s, [b"XADD", b"k", b"*", b"f", b"v"])
    assert isinstance(reply, ReplyError) and "was removed from the database" in reply.message


def test_a_joining_region_takes_writes_once_it_holds_what_its_peers_held():
    cfg = cluster()
    cfg.regions.append(RegionSpec("region-4", 4, "127.0.0.1", 7004, 7104, status="joining"))
    cfg.epoch = 2
    core, s = region(4, cfg)
    reply = core.call(s, [b"XADD", b"k", b"*", b"f", b"v"])
    assert isinstance(reply, ReplyError) and reply.message.startswith("LOADING this region is joining")
    first, s1 = region(1)
    first.call(s1, [b"XADD", b"k", b"*", b"f", b"v"])
    hub = core.aa.hub
    for peer in (1, 2, 3):  # what each peer held at its first handshake with the newcomer
        hub.handshake_vv[peer] = dict(first.aa.causal.vv)
    assert core.aa.catch_up_progress() == (0, 1) and not core.aa.writable
    hub.deliver(first.aa.causal.log[-1])
    assert core.aa.catch_up_progress() == (1, 1) and core.aa.writable
    assert core.call(s, [b"XLEN", b"k"]) == 1


def test_a_promise_whose_coordinator_vanished_lapses():
    core, _ = region(1)
    m = core.aa.membership
    first = m.propose(Change(JOIN, 4, "region-4", ("h", 1, 2)), (0, 1))
    second = m.propose(Change(JOIN, 5, "region-5", ("h", 1, 2)), (0, 2))
    assert core.aa.promise(first, now=100.0).ok
    assert not core.aa.promise(second, now=110.0).ok  # the first is still under way
    assert core.aa.promise(second, now=131.0).ok      # it lapsed
    core.aa.commit(second, 0)
    assert m.status(5) == "joining" and m.status(4) is None


def test_the_cluster_file_records_the_member_list(tmp_path):
    cfg = cluster()
    cfg.path = str(tmp_path / "cluster.toml")
    core, _ = region(1, cfg)
    (other, _), (third, _) = region(2), region(3)
    agree([core, other, third], Change(JOIN, 4, "region-4", ("10.0.0.4", 7004, 7104)))
    agree([core, other, third], Change(FORCE_REMOVE, 2), frozen=17)
    back = load(cfg.path)
    assert back.epoch == 3
    assert [(r.name, r.number, r.status, r.frozen) for r in back.regions] == [
        ("region-1", 1, "active", 0), ("region-2", 2, "removed", 17), ("region-3", 3, "active", 0),
        ("region-4", 4, "joining", 0)]
    assert back.region("region-4").host == "10.0.0.4"
    # a name freed by a removal may come back under a new number: the member is the one found
    back.regions.append(RegionSpec("region-2", 5, "127.0.0.1", 1, 2, status="joining"))
    back.validate()
    assert back.region("region-2").number == 5
    assert core.aa.membership.propose(Change(ACTIVATE, 4), (0, 3)).epoch == 4


def test_a_promise_and_its_hold_survive_a_restart(tmp_path):
    from node.persistence.promise import FilePromiseStore, PromiseFileError

    core, _ = region(1)
    core.aa.attach_promise_store(FilePromiseStore(str(tmp_path)))
    core.aa.causal.vv[3] = 5
    p = core.aa.membership.propose(Change(FORCE_REMOVE, 3), (0, 1))
    assert core.aa.promise(p).ok
    again, _ = region(1)  # the region restarts from its files
    again.aa.attach_promise_store(FilePromiseStore(str(tmp_path)))
    assert again.aa.membership.promised == p
    assert again.aa.hub.gate.admits(env(3, 5)) == "" and again.aa.hub.gate.admits(env(3, 6)) == "drop"
    assert 3 in again.aa.hub.cut  # the link to the region being removed stays cut
    again.aa.commit(p, 7)  # the coordinator's commit reaches it after the restart
    assert again.aa.membership.status(3) == "removed" and not (tmp_path / "membership-promise.json").exists()
    (tmp_path / "membership-promise.json").write_text("{not json")
    with pytest.raises(PromiseFileError, match="is not a membership promise"):
        region(1)[0].aa.attach_promise_store(FilePromiseStore(str(tmp_path)))


def test_a_region_with_an_unreadable_promise_file_does_not_start(tmp_path):
    import subprocess
    import sys

    cfg = cluster()
    cfg.save(str(tmp_path / "cluster.toml"))
    data = tmp_path / "region-1"
    data.mkdir()
    (data / "membership-promise.json").write_text('{"epoch": "x"}')
    done = subprocess.run([sys.executable, "-m", "node", "node", "--config", str(tmp_path / "cluster.toml"),
                           "--region", "region-1", "--data-dir", str(data), "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "membership-promise.json is not a membership promise" in done.stderr


# ---------------------------------------------------------------- settling a promise its coordinator left
def restarted(number: int, directory, at: float) -> RegionCore:
    """Region ``number`` started again from its promise file in ``directory``, at monotonic time ``at``."""
    core, _ = region(number)
    core.aa.membership_clock = lambda: at
    core.aa.attach_promise_store(FilePromiseStore(str(directory)))
    return core


def test_voters_back_from_a_crash_with_a_left_promise_settle_it_with_each_other(tmp_path):
    """Issue 34: both voters of region 3's forced removal promised it, then crashed before
    any commit, and its coordinator gave up.  Back, each holds the promise and the hold (on
    disk).  Once the coordinator had PROMISE_TIMEOUT_S since their start, a voter asks the
    other where it stands: both hold the promise, so the voter commits it - frozen at the most
    either held - and sends the commit on; both end at the new epoch, holds gone."""

    dirs = {n: tmp_path / f"region-{n}" for n in (1, 2)}
    before = {}
    for n, held in ((1, 5), (2, 7)):
        core, _ = region(n)
        core.aa.attach_promise_store(FilePromiseStore(str(dirs[n])))
        core.aa.causal.vv[3] = held
        before[n] = core
    p = before[1].aa.membership.propose(Change(FORCE_REMOVE, 3), (0, 1))
    assert all(core.aa.promise(p, now=10.0).ok for core in before.values())
    a, b = (restarted(n, dirs[n], 500.0) for n in (1, 2))  # the crash: no commit ever came
    assert a.aa.membership.promised == p and a.aa.membership.holding == {3: 5} and 3 in a.aa.hub.cut
    assert a.aa.left_promise(now=500.0 + PROMISE_TIMEOUT_S) is None  # its coordinator may still send it
    assert a.aa.left_promise(now=501.0 + PROMISE_TIMEOUT_S) == p
    settlement = a.aa.settle(p, {**standings(p, [2], {2: b.aa}), 1: a.aa.standing(p)})
    assert (settlement.outcome, settlement.frozen) == ("commit", 7)
    b.aa.commit(p, settlement.frozen)  # the commit the settling voter sends on
    for core in (a, b):
        m = core.aa.membership
        assert (m.epoch, m.status(3), m.frozen) == (2, "removed", {3: 7})
        assert m.holding == {} and m.left_promise() is None and core.aa.left_promise(now=1e9) is None
    assert not any((d / "membership-promise.json").exists() for d in dirs.values())


def test_a_coordinators_abort_after_the_promise_was_reported_is_settled_at_once():
    """A voter that told a settling voter it holds its promise keeps it when its coordinator's
    abort comes after (the others may already count it): it settles it at once instead."""
    core, _ = region(1)
    p = core.aa.membership.propose(Change(FORCE_REMOVE, 3), (0, 1))
    assert core.aa.promise(p, now=10.0).ok
    assert core.aa.standing(p).state == "promised"
    core.aa.abort(p)
    assert core.aa.membership.promised == p and 3 in core.aa.hub.cut  # the hold stands
    assert core.aa.left_promise(now=10.0) == p  # no wait for the coordinator: it spoke
    refused = core.aa.settle(p, {1: core.aa.standing(p), 2: Standing(1, "refused")})
    assert refused.outcome == "abort" and core.aa.membership.promised is None and 3 not in core.aa.hub.cut


def test_what_settling_needs_survives_a_restart(tmp_path):
    """A lapsed promise (with what it answered, and whether it was reported), the proposals
    the region refuses for good, and the promise it backs now are on disk; a file written
    before any of that was kept reads as what its promise and hold say."""
    core, _ = region(1)
    core.aa.attach_promise_store(FilePromiseStore(str(tmp_path)))
    core.aa.causal.vv[3] = 4
    m = core.aa.membership
    p = m.propose(Change(FORCE_REMOVE, 3), (0, 1))
    q = m.propose(Change(JOIN, 4, "region-4", ("h", 1, 2)), (0, 2))
    r = m.propose(Change(JOIN, 5, "region-5", ("h", 1, 2)), (0, 3))
    assert core.aa.promise(p, now=10.0).ok and core.aa.standing(p).state == "promised"
    core.aa.abort(r)  # a proposal it never saw: refused from now on
    assert core.aa.promise(q, now=100.0).ok  # p lapsed: its hold stays
    back = restarted(1, tmp_path, 0.0).aa.membership
    assert back.promised == q and back.lapsed == {p.ballot: (p, 4, True)} and back.holding == {3: 4}
    assert back.refusing == {r.ballot} and not back.promise(r).ok
    state = json.loads((tmp_path / "membership-promise.json").read_text())
    old = {"epoch": state["epoch"], "promised": state["lapsed"][0]["proposal"], "holding": {"3": 4}}
    (tmp_path / "membership-promise.json").write_text(json.dumps(old))  # as an older version wrote it
    older = restarted(1, tmp_path, 0.0).aa.membership
    assert older.promised == p and older.answered == 4 and not older.reported and older.lapsed == {}


class LostAnswer:
    """A voter whose promise answer never reaches the coordinator (it did promise); its abort
    reaches it unless ``aborts_reach`` is False."""

    def __init__(self, core: RegionCore, aborts_reach: bool = True) -> None:
        self.aa, self.aborts_reach = core.aa, aborts_reach

    def promise(self, p: Proposal):
        self.aa.promise(p)
        raise AdminCallError("unreachable", True, timed_out=True)

    def commit(self, p: Proposal, frozen: int) -> None:
        self.aa.commit(p, frozen)

    def abort(self, p: Proposal) -> None:
        if not self.aborts_reach:
            raise AdminCallError("unreachable", True)
        self.aa.abort(p)


class AbortLost(LostAnswer):
    """A voter that answers; the coordinator's abort does not reach it."""

    def promise(self, p: Proposal):
        return self.aa.promise(p)


def test_a_coordinator_aborts_a_voter_whose_answer_it_lost_and_says_how_the_change_ends():
    """A voter's answer is lost (it promised): the coordinator aborts it too, so its promise and
    hold end and nothing changed.  When no abort reaches any voter, every voter holds the
    promise: the coordinator says it has not taken effect yet, and the voters, settling it,
    commit it - consistently, everywhere."""
    names = {1: "region-1", 2: "region-2"}
    change = Change(FORCE_REMOVE, 3)
    (a, _), (b, _) = region(1), region(2)
    with pytest.raises(MembershipChangeError, match="region-2 is unreachable; nothing changed"):
        membership_change.agree(change, a.aa.membership, {1: a.aa, 2: LostAnswer(b)}, (0, 1), names)
    for core in (a, b):
        assert core.aa.membership.promised is None and core.aa.membership.holding == {}
    (a, _), (b, _) = region(1), region(2)
    voters = {1: AbortLost(a, aborts_reach=False), 2: LostAnswer(b, aborts_reach=False)}
    with pytest.raises(MembershipChangeError, match="not taken effect yet: the abort did not reach region-1, "
                                                    "which settle it .* only if region-2 had promised it"):
        membership_change.agree(change, a.aa.membership, voters, (0, 2), names)
    p = a.aa.membership.promised
    assert p is not None and b.aa.membership.promised == p
    settlement = a.aa.settle(p, {**standings(p, [2], {2: b.aa}), 1: a.aa.standing(p)})
    assert settlement.outcome == "commit"
    b.aa.commit(p, settlement.frozen)
    assert a.aa.membership.members == b.aa.membership.members and a.aa.membership.status(3) == "removed"
