"""Membership at one region, without processes: the handshake gate, what is applied, what
clients may write, promises that lapse, and the cluster file that records the list."""

from __future__ import annotations

import json

import pytest

from crdt.causal import Envelope
from crdt.membership import ACTIVATE, FORCE_REMOVE, JOIN, LEAVE, REMOVE, Change, Proposal
from node.cluster_config import ClusterConfig, RegionSpec, load, membership_from_blob
from node.config import Config
from node.core import RegionCore, Session
from node.resp.encoder import ReplyError


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
