"""Writes a region takes alone (``crdt-lone-writes-after-ms``): held until every member answered,
then sent (no member held more of the region's operations) or withdrawn and issued again under
new numbers (one did: a folder restored from an older copy).  No acknowledged write of either
side is lost and every region ends with the same history (node/activeactive/lone_writes.py).

These are the operator's steps, on real processes; the rules on their own are tested at the end.
"""

from __future__ import annotations

import shutil

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import ops
from crdt.ids import MAX_ID, MIN_ID
from crdt.reissue import Reissue
from node.activeactive.lone_writes import LoneStep, LoneWrites
from node.testing import LocalCluster, replication_status, wait_in_sync, wait_until

LONE = {"crdt-lone-writes-after-ms": 1000}


def ids(entries) -> list[bytes]:
    return [e[0] for e in entries]


def lone(client: redis.Redis, field: str) -> int:
    return int(replication_status(client)[f"crdt_lone_{field}"])


def test_a_restored_region_alone_withdraws_its_writes_and_issues_them_again(tmp_path):
    """Region 2 restarts from an older copy of its folder while regions 1 and 3 are down:
    after a second it takes writes alone.  Region 1 comes back holding three operations of
    region 2 the copy lacks, so region 2 withdraws its own, takes those back, and - region 3
    still away - takes writes alone again, its withdrawn ones first.  Killed then, it starts
    holding them still.  Once region 3 is back, everything leaves: every region holds every
    acknowledged entry, under the IDs its client was told, with one history."""
    with LocalCluster(3, settings=LONE) as cluster:
        one, two, three = cluster.procs
        r2 = two.client()
        before = [r2.xadd("s", {"n": f"before-{i}"}) for i in range(5)]
        r2.xgroup_create("s", "g", id="0")
        cluster.sync_wait()
        r2.close()
        two.stop_keeping_data()
        copy = tmp_path / "copy"
        shutil.copytree(two.data_dir, copy)
        two.restart().wait_writable()
        r2 = two.client()
        first = [r2.xadd("s", {"n": f"first-{i}"}) for i in range(3)]
        cluster.sync_wait()
        r2.close()
        for p in cluster.procs:
            p.stop_keeping_data()
        shutil.rmtree(two.data_dir)
        shutil.copytree(copy, two.data_dir)
        two.restart()
        r2 = two.client()
        two.wait_writable()  # a second later: alone
        assert lone(r2, "writes") == 1
        waiter = two.client()  # its write taken alone is withdrawn, then issued again under another number
        alone = [waiter.xadd("s", {"n": "alone-0"})] + [r2.xadd("s", {"n": f"alone-{i}"}) for i in (1, 2)]
        assert ids(r2.xreadgroup("g", "c", {"s": ">"})[0][1]) == before + alone
        assert r2.xack("s", "g", *alone) == 3
        with pytest.raises(redis.exceptions.ResponseError, match="takes writes alone"):
            r2.bgsave()  # its log keeps the point where it began to be alone
        assert lone(r2, "held_ops") == 4  # three adds and an acknowledgement watermark

        one.restart()  # holds region 2's `first`, which the copy lacks: region 2 withdraws
        wait_until(lambda: lone(r2, "withdrawals") == 1, what="region 2 withdrawing")
        wait_until(lambda: ids(r2.xrange("s")) == before + first + alone, 30,
                   what="region 2 holding region 1's and its own, issued again alone")
        assert lone(r2, "writes") == 1  # region 3 is still away: held again
        # region 1 holds another operation under the number the withdrawn write had: WAIT counts
        # the write under its new number, which nobody else holds yet
        assert waiter.execute_command("WAIT", "1", "100") == 0
        waiter.close()
        r1 = one.client()
        assert ids(r1.xrange("s")) == before + first  # nothing held has left
        r1.close()

        two.kill()  # and its restart holds them still
        two.restart()
        r2 = two.client()
        assert ids(r2.xrange("s")) == before + first + alone
        two.wait_writable()
        assert lone(r2, "writes") == 1 and lone(r2, "held_ops") == 3  # the watermark was not issued again

        three.restart()
        wait_until(lambda: lone(r2, "writes") == 0, 30, what="region 2 confirming")
        cluster.sync_wait(60)
        code, out = cluster.admin("sync", "wait", "--timeout", "30")
        assert code == 0 and "in sync" in out, out
        clients = cluster.clients()
        for c in clients:
            assert ids(c.xrange("s")) == before + first + alone
            assert [g["name"] for g in c.xinfo_groups("s")] == [b"g"]
        wait_in_sync(clients)
        # the group at region 2 skips nothing: the entries taken back from region 1 lie below the
        # ones read alone, and `>` still delivers them (what was read alone may come again)
        pending = ids(r2.xreadgroup("g", "c", {"s": "0"})[0][1])
        delivered = ids(r2.xreadgroup("g", "c", {"s": ">"})[0][1])
        assert set(first) <= set(delivered) and set(before) <= set(pending + delivered)
        r2.close()


def test_writes_taken_alone_leave_once_every_member_answered_holding_no_more():
    """Region 3 is down when region 2 restarts (same folder): region 2 takes writes alone; region
    1 does not get them while region 3 is away; once it is back, they leave, unchanged."""
    with LocalCluster(3, settings=LONE) as cluster:
        one, two, three = cluster.procs
        three.stop_keeping_data()
        two.stop_keeping_data()
        two.restart().wait_writable()
        r1, r2 = one.client(), two.client()
        assert lone(r2, "writes") == 1
        alone = [r2.xadd("s", {"n": f"alone-{i}"}) for i in range(3)]
        assert lone(r2, "held_ops") == 3
        late = r1.xadd("s", {"n": "from-region-1"})  # region 1's still reach region 2
        wait_until(lambda: late in ids(r2.xrange("s")), what="region 2 receiving region 1's")
        assert ids(r1.xrange("s")) == [late]
        three.restart()
        wait_until(lambda: ids(r1.xrange("s")) == alone + [late], 30, what="region 1 receiving the held writes")
        assert lone(r2, "withdrawals") == 0 and lone(r2, "writes") == 0
        wait_in_sync(cluster.clients(), 30)
        r1.close()
        r2.close()


def test_without_the_setting_a_region_waits_for_every_member():
    with LocalCluster(2) as cluster:
        one, two = cluster.procs
        one.stop_keeping_data()
        two.stop_keeping_data()
        two.restart()
        r2 = two.client()
        assert int(replication_status(r2)["crdt_recovering"]) == 1
        with pytest.raises(redis.exceptions.BusyLoadingError, match="waiting for region-1"):
            r2.xadd("s", {"n": "x"})
        assert lone(r2, "writes") == 0
        r2.close()


# ------------------------------------------------------------ the rules on their own
def test_the_lone_step_waits_the_setting_then_confirms_or_withdraws():
    lone = LoneWrites()
    # recovering, a member silent, nothing to take back: the timer runs
    assert lone.step(10_000, 5000, True, True, False, 3, False) is None
    assert lone.step(14_999, 5000, True, True, False, 3, False) is None
    assert lone.step(15_000, 5000, True, True, False, 3, False) is LoneStep.ALONE
    # never while it still takes back from one that answered, nor with the setting off
    assert LoneWrites().step(99_000, 5000, True, True, True, 3, False) is None
    fresh = LoneWrites()
    assert fresh.step(0, 0, True, True, False, 3, False) is None
    assert fresh.step(10**12, 0, True, True, False, 3, False) is None
    lone.confirmed = 3
    assert lone.step(16_000, 5000, False, True, False, 3, False) is None        # alone, waiting
    assert lone.step(17_000, 5000, False, False, False, 3, False) is LoneStep.CONFIRM
    # a member holds more: nothing was sent alone yet, so the period just ends (it takes them back)
    assert lone.step(17_000, 5000, False, True, False, 4, False) is LoneStep.CONFIRM
    lone.first_minted = 4
    assert lone.step(17_000, 5000, False, True, False, 4, False) is LoneStep.WITHDRAW  # else they go back
    assert lone.step(17_000, 5000, False, True, False, 3, True) is LoneStep.WITHDRAW   # or another history


def test_a_reissued_entry_keeps_its_id_unless_the_log_holds_a_higher_one():
    keys = ops.Keyspace(active_active=True)
    ops.apply(keys, ops.AddEntry(b"s", 2, (100, 2), [b"f", b"taken back"]))
    again = Reissue(region=2, stride=16, base=5)
    above = again.make(ops.AddEntry(b"s", 2, (200, 2), [b"f", b"alone"]), keys, {2: 7}, 300)
    assert above.id == (200, 2) and again.renamed == 0
    ops.apply(keys, above)
    below = again.make(ops.AddEntry(b"s", 2, (150, 2), [b"f", b"alone, older clock"]), keys, {2: 8}, 300)
    assert below.id == (300, 2) and again.renamed == 1  # the next ID region 2 mints, above (200, 2)
    ops.apply(keys, below)
    ops.apply(keys, ops.DeleteKey(b"s", observed={2: (300, 2)}, context={2: 10}))
    gone = again.make(ops.AddEntry(b"s", 2, (250, 2), [b"f", b"alone"]), keys, {2: 10}, 400)
    assert gone.id == (400, 2)  # the key was deleted since, but a deletion observed (300, 2): above it
    xdel = again.make(ops.DeleteEntries(b"s", [(150, 2)], origins=[[2]]), keys, {2: 9}, 300)
    assert xdel.ids == [(300, 2)]  # what it deleted is the renamed entry
    delete = again.make(ops.DeleteKey(b"s", observed={2: (150, 2)}, context={1: 4, 2: 5}), keys, {1: 6, 2: 9}, 300)
    assert delete.observed == {2: (300, 2)} and delete.context == {1: 4, 2: 10}  # region 1: as it knew
    idmp = again.make(ops.AddEntry(b"t", 2, (500, 2), [b"f", b"v"], b"p", b"i", dot=(2, 7), deps={1: 4, 2: 6}),
                      keys, {1: 6, 2: 11}, 500)
    assert idmp.dot == (2, 12) and idmp.deps == {1: 4, 2: 5}  # concurrent with the taken-back ones
    assert MIN_ID < below.id


def test_a_reissued_group_creation_takes_a_new_dot_and_its_acknowledgements_follow():
    again = Reissue(region=2, stride=16, base=4)
    keys = ops.Keyspace()
    create = again.make(ops.CreateGroup(b"s", b"g", (0, 0), 0, True, deps={1: 2, 2: 4}, dot=(2, 5)), keys,
                        {1: 3, 2: 9}, 1)
    assert create.dot == (2, 10) and create.deps == {1: 2, 2: 9}
    ack = again.make(ops.AckWatermark(b"s", b"g", 1, (5, 1), created=(2, 5)), keys, {1: 3, 2: 10}, 1)
    assert ack.created == (2, 10)
    untouched = again.make(ops.AckWatermark(b"s", b"h", 1, (5, 1), created=(1, 2)), keys, {1: 3, 2: 10}, 1)
    assert untouched.created == (1, 2)


@settings(max_examples=200, deadline=None)
@given(taken_back=st.lists(st.tuples(st.integers(1, 50), st.booleans()), max_size=8),
       alone=st.lists(st.integers(1, 60), min_size=1, max_size=8))
def test_reissued_entries_are_all_there_above_every_id_the_region_held(taken_back, alone):
    """Whatever IDs the writes taken alone had (clocks go back; liberal IDs), issued again after
    the entries taken back - some deleted, with their key - every one is there once, in order,
    each above every entry ID held for the key before it (so no deletion that observed a higher
    one can take it where it arrives first)."""
    region, keys = 2, ops.Keyspace(active_active=True)
    vv = {region: 0}
    for ms, delete_after in taken_back:  # the member's history of region 2, taken back first
        top = keys.top_id(b"s")
        id_ = (max(ms, top[0]), top[1] + 1 if ms <= top[0] else 0)
        ops.apply(keys, ops.AddEntry(b"s", region, id_, [b"f", b"back"]))
        vv[region] += 1
        if delete_after:
            s = keys.get(b"s")
            ops.apply(keys, ops.DeleteKey(b"s", observed={region: s.logs[region].last_any()}, context=dict(vv)))
            vv[region] += 1
    again = Reissue(region, stride=16, base=0)
    for i, ms in enumerate(alone):
        floor = keys.top_id(b"s")
        op = again.make(ops.AddEntry(b"s", region, (ms, region), [b"f", b"alone-%d" % i]), keys, vv, 100)
        assert op.id > floor
        ops.apply(keys, op)
        vv[region] += 1
    s = keys[b"s"]
    mine = [f[1] for _id, f in s.logs[region].range(MIN_ID, MAX_ID) if f[1].startswith(b"alone")]
    assert mine == [b"alone-%d" % i for i in range(len(alone))]
