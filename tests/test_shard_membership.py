"""Member-list changes of a sharded database, with real processes: two regions of two shards
(node/testing.py's ShardedCluster), braid-admin in this process.

Shard K of every region is a replication group with a member list of its own: braid-admin
agrees each change group by group, shard 0's first, each group's part of its output under the
heading ``shard K of N (slots A-B)``; each shard keeps its group's list in its data folder
(``members.json``), so a restarted shard comes back with it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re

import pytest
import redis

from chaos.sim.shards import ShardedSimulation
from chaos.sim.world import SimConfig
from node import testing
from node.activeactive.cluster_config import GROUP_LIST_FILE, load, local_cluster
from node.testing import (
    BraidProcess,
    free_ports,
    process_gone,
    replication_status,
    under_headings,
    wait_until,
    writable,
)
from node.tools import admin_cli

HEADINGS = ("shard 0 of 2 (slots 0-8191)", "shard 1 of 2 (slots 8192-16383)")


def _sections(out: str) -> list[str]:
    return under_headings(out, HEADINGS)


def _membership(cluster: testing.ShardedCluster, region: str, shard: int) -> tuple[int, dict[str, str]]:
    """(membership epoch, each member's status) as shard ``shard`` of ``region`` sees them."""
    with cluster.client(region, shard) as c:
        epoch = int(replication_status(c)["crdt_membership_epoch"])
    code, out, err = cluster.admin("status", "--shard", str(shard))
    assert code in (0, 1), err
    rows = dict(re.findall(r"(region-\d)\s*│\s*\d+\s*│\s*(active|joining|leaving|removed)", out))
    return epoch, rows


def _group_file(cluster: testing.ShardedCluster, region: str, shard: int) -> dict:
    with open(os.path.join(cluster.procs[(region, shard)].data_dir, GROUP_LIST_FILE)) as f:
        return json.load(f)


@pytest.fixture
def cluster():
    c = testing.ShardedCluster(prefix="braid-shard-members-").start()
    try:
        yield c
    finally:
        c.stop()


def test_a_region_added_to_a_sharded_database_joins_every_group_takes_writes_and_leaves(cluster):
    ports = free_ports(4)
    code, out, err = cluster.admin("region", "add", "region-3", "--host", "127.0.0.1",
                                   "--port", f"{ports[0]},{ports[1]}", "--repl-port", f"{ports[2]},{ports[3]}")
    assert code == 0, err
    for section in _sections(out):
        assert "region-3 joined the group as region 3 (membership epoch 2, status joining)" in section
    assert "Start it with: braid node --config" in out
    spec = load(cluster.file).region("region-3")  # the file records every shard's ports
    assert (spec.number, spec.status, spec.ports, spec.repl_ports) == (3, "joining", ports[:2], ports[2:])
    for r in ("region-1", "region-2"):
        for k in (0, 1):  # each shard of the old regions keeps its group's list, with the new region's ports
            listed = {x["name"]: x for x in _group_file(cluster, r, k)["regions"]}
            assert (listed["region-3"]["port"], listed["region-3"]["ports"]) == (ports[k], ports[:2])

    # the new region runs as `braid node`, the supervisor: one process per shard, each joining its group
    region_dir = os.path.join(cluster.dir, "region-3")
    supervisor = BraidProcess(ports[0], region_dir, cluster.file, "region-3")
    supervisor.start()
    try:
        for k in (0, 1):
            wait_until(lambda k=k: writable(ports[k], "127.0.0.1"), 30, what=f"region-3 shard {k} taking writes")
        written = {}
        for k, key in enumerate(cluster.keys("joined-", 1)):
            with redis.Redis(port=ports[k], protocol=2) as c:
                written[key] = c.xadd(key, {"shard": k})
        code, out, err = cluster.admin("sync", "wait", "--timeout", "20")
        assert code == 0, err
        for section in _sections(out):
            assert "in sync: all 3 members hold the same operations" in section
        for key, entry_id in written.items():
            with cluster.client("region-1", cluster.owner(key)) as c:
                assert [i for i, _ in c.xrange(key)] == [entry_id]
        for k in (0, 1):  # (the activation's commit reaches the voters one after another)
            wait_until(lambda k=k: _membership(cluster, "region-1", k) == (
                3, {"region-1": "active", "region-2": "active", "region-3": "active"}), 20,
                what=f"shard {k}'s group to activate region-3")

        # a shard restarted after the change comes back with its group's list
        proc = cluster.procs[("region-2", 1)]
        proc.stop_keeping_data()
        proc.restart().wait_writable()
        with proc.client() as c:
            st = replication_status(c)
        assert st["crdt_membership_epoch"] == "3" and "name=region-3,link=up" in st["crdt_peer_3"], st

        code, out, err = cluster.admin("region", "remove", "region-3", "--timeout", "30")
        assert code == 0, err
        for section in _sections(out):
            assert re.search(r"region-3 \(region 3\) left the database at membership epoch 5: every member holds "
                             r"its \d+ operations", " ".join(section.split())), section
        for k in (0, 1):
            with redis.Redis(port=ports[k], protocol=2) as c:
                assert replication_status(c)["crdt_member_status"] == "removed"
        # run again: every group has the change already
        code, out, err = cluster.admin("region", "remove", "region-3")
        assert code == 0, err
        assert [s.count("was already removed from this group") for s in _sections(out)] == [1, 1]
        assert load(cluster.file).region("region-3").status == "removed"
    finally:
        supervisor.stop()


def test_a_forced_removal_finished_group_by_group_is_kept_by_a_restarted_shard_and_purged(cluster):
    for k in (0, 1):
        cluster.procs[("region-2", k)].stop_keeping_data()
    # only shard 1's group first: the groups may end a change differently
    code, out, err = cluster.admin("region", "remove", "region-2", "--force", "--shard", "1")
    assert code == 0, err
    assert HEADINGS[0] not in out and "region-2 (region 2) was removed by force at membership epoch 2" in out
    assert load(cluster.file).region("region-2").status == "active"  # the file records shard 0's group

    # shard 1 of region-1, restarted, keeps its group's list, not the file's
    proc = cluster.procs[("region-1", 1)]
    proc.stop_keeping_data()
    proc.restart().wait_writable()
    assert _membership(cluster, "region-1", 1) == (2, {"region-1": "active", "region-2": "removed"})
    with cluster.client("region-1", 0) as c:
        assert replication_status(c)["crdt_membership_epoch"] == "1"

    # braid-admin run again finds what it must still change: shard 0's group only
    code, out, err = cluster.admin("region", "remove", "region-2", "--force")
    assert code == 0, err
    first, second = _sections(out)
    assert "region-2 (region 2) was removed by force at membership epoch 2" in first
    assert "was already removed from this group (membership epoch 2)" in second
    assert load(cluster.file).region("region-2").status == "removed"
    for k in (0, 1):
        assert _membership(cluster, "region-1", k) == (2, {"region-1": "active", "region-2": "removed"})

    # the removed region comes back, learns it was removed, and is purged shard by shard
    for k in (0, 1):
        cluster.procs[("region-2", k)].restart()
    for k in (0, 1):
        wait_until(lambda k=k: replication_status(cluster.procs[("region-2", k)].client())["crdt_member_status"]
                   == "removed", 20, what=f"region-2 shard {k} to learn it was removed")
    code, out, err = cluster.admin("region", "purge", "--region", "region-2")
    assert code == 0, err
    for k, section in enumerate(_sections(out)):
        assert f"region-2 shard {k} (region 2) deleted its data and stopped." in section
    assert "To bring region-2 back: braid-admin region add region-2 --host 127.0.0.1 --port " in out
    for k in (0, 1):
        proc = cluster.procs[("region-2", k)]
        wait_until(lambda proc=proc: process_gone(proc.pid), 20, what=f"region-2 shard {k} to stop")
        assert not os.path.exists(os.path.join(proc.data_dir, "appendonlydir"))
        assert not os.path.exists(os.path.join(proc.data_dir, GROUP_LIST_FILE))


def test_a_new_region_needs_a_port_and_a_repl_port_per_shard(tmp_path):
    file = str(tmp_path / "cluster.toml")
    local_cluster(2, 7001, shards=2).save(file)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = admin_cli.main(["--cluster", file, "region", "add", "region-3", "--host", "127.0.0.1",
                               "--port", "7004", "--repl-port", "7104,7124"])
    assert code == 2, err.getvalue()
    assert "--port 7004: this database has 2 shard(s), so the new region needs 2 port(s)" in err.getvalue()


def test_the_simulation_changes_the_members_of_every_shard_group():
    """The membership fault in sharded schedules: joins (with every shard's ports), leaves and
    forced removals in each group, every check passing."""
    changed = {0: set(), 1: set()}
    for seed in range(1, 9):
        sim = ShardedSimulation(SimConfig(seed=seed, shards=2, faults=("membership", "crash", "partition")))
        sim.run()
        assert [v for v in sim.verdicts() if not v.ok] == [], seed
        for g in sim.groups:
            changed[g.shard] |= {p.change.kind for p in g.membership.committed}
    assert changed[0] >= {"join", "activate"} and changed[1] >= {"join", "activate"}, changed
