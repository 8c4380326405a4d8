"""A partition longer than every backlog heals by itself: real regions join their states.

Three real region processes; region 1 is cut off (its replication paused) while every
region's backlog is bounded to nothing, so each side drops operations the other lacks.
When the link comes back, neither side may install the other's image (it would lose its
own dropped operations): each sends its state and joins the other's (crdt/join.py), and
replication goes on from there.
"""

from __future__ import annotations

from node.testing import LocalCluster, replication_status, wait_until


def _joins(client) -> int:
    return int(replication_status(client)["crdt_state_joins"])


def _trimmed(client) -> int:
    return int(replication_status(client)["crdt_backlog_trimmed"])


def _ids(client, key: str) -> list[bytes]:
    return [e[0] for e in client.xrange(key)]


def test_a_partition_longer_than_every_backlog_heals_without_losing_a_write():
    with LocalCluster(3) as cluster:
        r1, r2, r3 = cluster.clients()
        r1.xgroup_create("jobs", "g", id="0", mkstream=True)
        before = r1.xadd("shared", {"f": "before"})
        cluster.sync_wait()
        r1.execute_command("BRAID.REPLICATION", "PAUSE")
        trimmed = [_trimmed(c) for c in (r1, r2, r3)]
        for c in (r1, r2, r3):
            c.config_set("crdt-repl-backlog-size", 1)  # keep nothing a peer may still need

        # each side writes what the other never sees before it is dropped
        alone = [r1.xadd("jobs", {"r1": str(i)}) for i in range(200)]
        assert r1.delete("shared") == 1          # removes only what region 1 observed
        read = r1.xreadgroup("g", "c1", {"jobs": ">"}, count=10)  # region 1's own consumer state
        together = [r2.xadd("jobs", {"r2": str(i)}) for i in range(200)]
        concurrent = r3.xadd("shared", {"f": "while apart"})  # concurrent with the DEL: it stays
        r2.xgroup_create("jobs", "g2", id="$")
        wait_until(lambda: all(_trimmed(c) > t for c, t in zip((r1, r2, r3), trimmed, strict=True)), 20,
                   what="every region dropping operations from its backlog")
        for c in (r2, r3):  # the side that stayed together holds the same
            wait_until(lambda c=c: _ids(c, "jobs") == _ids(r2, "jobs") and len(_ids(c, "jobs")) == 200, 20,
                       what="regions 2 and 3 in sync while apart")

        r1.execute_command("BRAID.REPLICATION", "RESUME")
        cluster.sync_wait(60)
        assert _joins(r1) >= 1 and _joins(r2) + _joins(r3) >= 1
        views = [_ids(c, "jobs") for c in (r1, r2, r3)]
        assert views[0] == views[1] == views[2]
        assert set(views[0]) == set(alone + together) and len(views[0]) == 400
        cluster.links_wait()  # a link whose peer lacked what a join brought started again
        for c in (r1, r2, r3):
            assert _ids(c, "shared") == [concurrent] and before not in _ids(c, "shared")
            assert sorted(g["name"] for g in c.xinfo_groups("jobs")) == [b"g", b"g2"]
            links = [v for k, v in replication_status(c).items() if k.startswith("crdt_peer_")]
            assert len(links) == 2 and all("link=up" in v for v in links), links
        consumers = {c["name"]: c["pending"] for c in r1.xinfo_consumers("jobs", "g")}
        assert consumers == {b"c1": len(read[0][1])}  # region 1's consumer and its PEL stayed its own

        later = r2.xadd("jobs", {"after": "the join"})  # operations cross as before
        cluster.sync_wait()
        assert _ids(r1, "jobs")[-1] == later and _ids(r3, "jobs")[-1] == later

        p1 = cluster.procs[0]  # the joined state is region 1's base on disk
        r1.close()
        p1.stop_keeping_data()
        p1.restart()
        r1 = p1.client()
        assert _ids(r1, "jobs") == _ids(r2, "jobs")
        assert _ids(r1, "shared") == [concurrent]
        for c in (r1, r2, r3):
            c.close()
