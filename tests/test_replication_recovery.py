"""A region's operations leave once their records reached the OS, before the fsync
(node/persistence/oplog.py): a killed process loses none of them, but a crashed machine may
lose the unsynced tail while peers hold those operations.  A start after such a crash
takes the region's own operations back from its peers before it mints a dot again
(node/activeactive/region.py's recovery).  Every other start waits for its peers too: no mark tells a
killed process from a folder restored from an older copy (tests/test_restore.py).

The machine crash is made by hand on a real region process killed with SIGKILL: its log is
cut back to what it held before the operations its peers got, and its run mark says the
last run was in another boot of the machine.
"""

from __future__ import annotations

import os

import pytest
import redis

from node.activeactive.region import ActiveActive
from node.persistence import aof
from node.persistence.oplog import OperationLog, boot_id, read_run_mark, unsynced_tail_may_be_lost, write_run_mark
from node.testing import LocalCluster, wait_until


def ids(entries) -> list[bytes]:
    return [e[0] for e in entries]


def _log_dir(proc) -> str:
    return os.path.join(proc.data_dir, "appendonlydir")


def _last_segment(proc) -> str:
    return aof.list_segments(_log_dir(proc))[-1][1]


def _recovering(client: redis.Redis) -> int:
    return int(client.info("crdt")["crdt_recovering"])


@pytest.mark.parametrize("mark,boot,lost", [
    (None, "b1", False),        # a new log, or one of a version that sent only what was on disk
    ("clean", "b2", False),     # closed cleanly: everything was fsynced
    ("b1", "b1", False),        # a killed process in this boot: the OS kept what it wrote
    ("b1", "b2", True),         # the machine went down since
    ("recover", "b1", True),    # a recovery not finished yet, killed again
    ("unknown", "", True),      # an OS that does not tell its boots apart
])
def test_a_start_counts_the_unsynced_tail_as_lost_only_after_the_machine_went_down(mark, boot, lost):
    assert unsynced_tail_may_be_lost(mark, boot) is lost


def test_the_run_mark_follows_the_log_through_starts_and_closes(tmp_path):
    directory = str(tmp_path / "log")
    first = OperationLog(directory, "everysec")
    assert not first.may_have_lost and read_run_mark(directory) == (boot_id() or "unknown")
    first.close()
    assert read_run_mark(directory) == "clean"
    write_run_mark(directory, "a-boot-that-is-over")  # as if it ran in another boot and crashed
    second = OperationLog(directory, "everysec")
    assert second.may_have_lost and read_run_mark(directory) == "recover"
    second.close()  # closed before it recovered: the next start recovers too
    assert read_run_mark(directory) == "recover"
    third = OperationLog(directory, "everysec")
    assert third.may_have_lost
    third.recovered()
    assert not third.may_have_lost and read_run_mark(directory) == (boot_id() or "unknown")
    third.close()


def test_a_region_whose_machine_crashed_takes_back_its_own_operations_before_it_writes():
    with LocalCluster(3) as cluster:
        r1, r2, r3 = cluster.clients()
        before = [r1.xadd("s", {"n": str(i)}) for i in range(20)]
        cluster.sync_wait()
        one = cluster.procs[0]
        segment = _last_segment(one)
        on_disk = os.path.getsize(segment)  # what region 1's disk will still hold
        lost = [r1.xadd("s", {"n": f"lost-{i}"}) for i in range(10)]
        cluster.sync_wait()  # regions 2 and 3 hold them
        for c in (r1, r3):
            c.close()
        one.kill()  # SIGKILL
        os.truncate(segment, on_disk)  # the crash of its machine took what never reached the disk
        write_run_mark(_log_dir(one), "a-boot-that-is-over")
        cluster.procs[2].kill()  # region 3, which may hold more of region 1's operations, is down
        one.restart()
        r1 = one.client()
        # it serves reads (what its disk held; region 2 may be sending back the rest already)
        assert ids(r1.xrange("s"))[:len(before)] == before
        assert _recovering(r1) == 1
        with pytest.raises(redis.exceptions.BusyLoadingError, match="waiting for region-3"):  # LOADING
            r1.xadd("s", {"n": "too-early"})  # it would mint again a dot its peers hold
        cluster.procs[2].restart()
        wait_until(lambda: _recovering(r1) == 0, 60, what="region 1 taking its operations back")
        assert ids(r1.xrange("s")) == before + lost
        assert read_run_mark(_log_dir(one)) == (boot_id() or "unknown")
        after = r1.xadd("s", {"n": "after"})  # a new dot: the others apply it (a re-minted one they would drop)
        cluster.sync_wait(60)
        r3 = cluster.procs[2].client()
        for c in (r1, r2, r3):
            assert ids(c.xrange("s")) == before + lost + [after]
            c.close()
        # what it took back is in its log: killed again (same boot), it starts with all of it
        one.kill()
        one.restart()
        r1 = one.client()
        assert ids(r1.xrange("s")) == before + lost + [after]
        one.wait_writable()  # its peers told it again that it holds its own operations
        assert read_run_mark(_log_dir(one)) == (boot_id() or "unknown")
        r1.close()


def test_a_killed_region_takes_writes_once_its_peers_answered():
    """A start that only followed SIGKILL lost nothing the OS held, but no mark can tell it from a
    start from an older copy of the folder: every start waits for the live peers (LOADING meanwhile),
    then takes writes, and nothing is minted twice."""
    with LocalCluster(2) as cluster:
        r1, r2 = cluster.clients()
        made = [r1.xadd("s", {"n": str(i)}) for i in range(10)]
        cluster.sync_wait()
        r1.close()
        cluster.procs[0].kill()
        cluster.procs[1].kill()
        cluster.procs[0].restart()
        r1 = cluster.procs[0].client()
        assert ids(r1.xrange("s")) == made  # it serves reads at once
        assert _recovering(r1) == 1
        with pytest.raises(redis.exceptions.BusyLoadingError, match="is starting .*waiting for region-2"):
            r1.xadd("s", {"n": "too-early"})
        cluster.procs[1].restart()
        cluster.procs[0].wait_writable()
        made.append(r1.xadd("s", {"n": "after"}))
        cluster.sync_wait(60)
        r2 = cluster.procs[1].client()
        assert ids(r1.xrange("s")) == ids(r2.xrange("s")) == made
        for c in (r1, r2):
            c.close()


def test_the_simulation_recovers_machine_crashes_and_catches_a_region_that_does_not(monkeypatch):
    """braid-chaos sim (its default rule): operations leave once written; regions whose
    machines crashed recover their own from their peers and every check holds.  The same
    schedule with the recovery taken out mints a dot again and the checkers say so."""
    from chaos.sim.run import run_sim
    from chaos.sim.world import SimConfig

    config = SimConfig(seed=109, fsync="everysec", faults=("crash",), leave_when_written=True)
    assert run_sim(config).ok
    for seed in range(1, 11):
        outcome = run_sim(SimConfig(seed=seed, leave_when_written=True))
        assert outcome.ok, (seed, outcome.failed)

    # the region never waits for its peers at a start: it mints again what they hold
    monkeypatch.setattr(ActiveActive, "recover_own_operations", lambda self, on_recovered, machine_crash=False: None)
    broken = run_sim(config)
    assert not broken.ok and "convergence" in broken.failed


def test_waiting_operations_are_not_taken_back_from_a_snapshot_or_a_resync_image():
    """What waits for its dependencies was never applied, acknowledged nor relayed: its
    senders send it again.  Kept from a snapshot at a restart, or from a peer's resync image,
    it could be an operation its origin lost in a crash of its machine and has since minted
    again under the same dot - so neither brings waiting operations back (this region's own
    waiting ones survive an image: they are delivered again on top of it)."""
    from node.persistence import replay, snapshot
    from tests.test_convergence import Region, deliver

    one, two, three = Region(1), Region(2), Region(3)
    for _ in range(3):
        one.xadd(b"s")
        three.xadd(b"t")
    deliver(one, two)
    second = three.causal.log[1]
    one.aa.hub.deliver(second)  # 3.2 without 3.1: it waits at region 1
    two.aa.hub.deliver(three.causal.log[2])  # and 3.3 at region 2
    assert set(one.causal.pending) == {(3, 2)} and set(two.causal.pending) == {(3, 3)}

    # a restart from a snapshot taken meanwhile
    data = snapshot.encode(one.keys, one.causal, 7, 1234, True, 1)
    assert set(snapshot.decode(data).causal.pending) == {(3, 2)}  # the file holds it (format unchanged)
    restarted = Region(1)
    replay.install(restarted.server, snapshot.decode(data), "snapshot")
    assert restarted.causal.vv == one.causal.vv and restarted.causal.pending == {}

    # a resync image from region 1 (which trimmed what region 2 lacks) leaves region 2 only what waited there
    one.xadd(b"s")
    one.trim_backlog(len(one.causal.log))
    assert deliver(one, two)  # the image was installed
    assert set(two.causal.pending) == {(3, 3)} and two.causal.vv[1] == one.causal.vv[1]
    deliver(three, one)
    deliver(three, two)
    assert one.snapshot() == two.snapshot() and one.causal.pending == two.causal.pending == {}

    # a handshake of region 3 forgets region 3's waiting operations, and INFO counts them
    three.xadd(b"t")
    three.xadd(b"t")
    one.aa.hub.deliver(three.causal.log[-1])
    assert set(one.causal.pending) == {(3, 5)} and "crdt_forgotten_waiting_ops:0" in one.aa.info_lines()
    assert one.aa.hub.handshook(3, dict(three.causal.vv)) == 1
    assert one.causal.pending == {} and "crdt_forgotten_waiting_ops:1" in one.aa.info_lines()
    deliver(three, one)
    assert one.causal.vv[3] == 5
