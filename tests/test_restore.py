"""A region started from an older copy of its data folder (a backup, a snapshot of its VM, a
copy taken while it ran) holds less of its own history than its peers do.  It must not mint
those operation numbers again: every start of a region of a cluster takes no writes until
every live peer told it the last of its own operations it holds, and it holds them
(node/activeactive/region.py).  And two regions holding different operations under the same numbers
are never reported in sync: histories carry digests (crdt/causal.py), compared at every
handshake and acknowledgement, by ``braid-admin sync wait`` and ``status``.

These are the operator's steps, on real processes.
"""

from __future__ import annotations

import shutil

import pytest
import redis

from node.testing import LocalCluster, replication_status, wait_until


def ids(entries) -> list[bytes]:
    return [e[0] for e in entries]


def test_a_region_restored_from_an_older_copy_of_its_folder_loses_nothing_and_forks_nothing(tmp_path):
    """Stop region 2, copy its folder, start it; cut region 3 off; write 3 entries at region 2
    (only region 1 receives them); stop regions 1 and 2, put the copy back, start region 2 (its
    copy knows nothing of the 3), write there, start region 1.  Before every start waited for
    its peers, region 2 minted the 3 numbers again for other entries: region 1 kept the first
    three, regions 2 and 3 the others, and `sync wait` said in sync."""
    with LocalCluster(3) as cluster:
        one, two, three = cluster.procs
        r2 = two.client()
        before = [r2.xadd("s", {"n": f"before-{i}"}) for i in range(5)]
        cluster.sync_wait()
        r2.close()
        two.stop_keeping_data()
        copy = tmp_path / "copy"
        shutil.copytree(two.data_dir, copy)
        two.restart().wait_writable()
        code, out = cluster.admin("replication", "pause", "--region", "region-3")
        assert code == 0, out
        r1, r2 = one.client(), two.client()
        first = [r2.xadd("s", {"n": f"first-{i}"}) for i in range(3)]
        wait_until(lambda: ids(r1.xrange("s")) == before + first, what="region 1 holding the three")
        r1.close()
        r2.close()
        one.stop_keeping_data()
        two.stop_keeping_data()
        code, out = cluster.admin("replication", "resume", "--region", "region-3")
        assert code == 0, out
        shutil.rmtree(two.data_dir)
        shutil.copytree(copy, two.data_dir)
        two.restart()
        r2 = two.client()
        assert ids(r2.xrange("s")) == before  # the copy's state, served for reading
        assert int(replication_status(r2)["crdt_recovering"]) == 1
        with pytest.raises(redis.exceptions.BusyLoadingError, match="waiting for region-1"):
            r2.xadd("s", {"n": "second-0"})  # region 1 holds numbers of region 2's this copy lacks
        one.restart()
        two.wait_writable()
        assert ids(r2.xrange("s")) == before + first  # taken back from region 1
        second = [r2.xadd("s", {"n": f"second-{i}"}) for i in range(3)]
        cluster.sync_wait(60)
        code, out = cluster.admin("sync", "wait", "--timeout", "30")
        assert code == 0 and "in sync" in out, out
        clients = cluster.clients()
        want = before + first + second
        for c in clients:
            assert ids(c.xrange("s")) == want
        histories = {replication_status(c)["crdt_history"] for c in clients}
        assert len(histories) == 1 and histories != {""}
        for c in clients:
            c.close()
        r2.close()


def test_a_fork_is_found_named_and_never_reported_in_sync(tmp_path):
    """The same steps with region 2 planted without its start gate (``chaos.planted
    no-start-gate``): it mints again the three numbers region 1 holds, and region 3 takes them.
    The regions cannot converge, and nothing calls them in sync: region 1, which meets another
    history of region 2 at region 3 (a third region's history: nothing it can resolve, since
    only region 2 itself could withdraw its side), stops (fail-stop) naming both digests, and
    `braid-admin sync wait` does not answer in sync."""
    from chaos.backends import RegionProcess

    with LocalCluster(3) as cluster:
        one, two, three = cluster.procs
        two.stop_keeping_data()
        copy = tmp_path / "copy"
        shutil.copytree(two.data_dir, copy)
        two.restart().wait_writable()
        assert cluster.admin("replication", "pause", "--region", "region-3")[0] == 0
        r1, r2 = one.client(), two.client()
        first = [r2.xadd("s", {"n": f"first-{i}"}) for i in range(3)]
        wait_until(lambda: ids(r1.xrange("s")) == first, what="region 1 holding the three")
        r1.close()
        r2.close()
        one.stop_keeping_data()
        two.stop_keeping_data()
        assert cluster.admin("replication", "resume", "--region", "region-3")[0] == 0
        shutil.rmtree(two.data_dir)
        shutil.copytree(copy, two.data_dir)
        forgetful = RegionProcess(two.port, two.data_dir, two.cluster_file, two.region, two.extra_args,
                                  bug="no-start-gate")
        cluster.procs[1] = forgetful
        forgetful.start()
        r2 = forgetful.client()
        second = [r2.xadd("s", {"n": f"second-{i}"}) for i in range(3)]  # taken at once: the bug
        r3 = three.client()
        wait_until(lambda: ids(r3.xrange("s")) == second, what="region 3 holding the other three")
        r3.close()
        try:
            one.restart()
        except RuntimeError:
            pass  # it may stop before it answered a first PING
        # regions 1 and 3 each meet the other holding another history of region 2: whichever
        # checks first stops (the other may only see the link drop)
        stopped = wait_until(lambda: [p for p in (one, three) if p.proc.poll() is not None], 30,
                             what="region 1 or 3 stopping")
        for p in stopped:
            assert p.proc.returncode == 70
            with open(p.log_path, "rb") as f:
                said = f.read().decode("utf-8", "replace")
            assert "FAIL-STOP" in said and "another history of region 2's operations than this region" in said
            assert "their digests differ" in said, said
        assert ids(r2.xrange("s")) == second  # nothing crossed
        code, out = cluster.admin("sync", "wait", "--timeout", "5")
        assert code == 1 and "not in sync" in " ".join(out.split()), out
        r2.close()
