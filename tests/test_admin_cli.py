"""braid-admin against a real three-region cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import redis

from node.testing import LocalCluster, wait_until


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c


ENV = {**os.environ, "COLUMNS": "200"}  # tables on one line each


def admin(cluster, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--cluster", cluster.file, *args],
                          capture_output=True, text=True, timeout=60, env=ENV)


def test_status_lists_every_region(cluster):
    res = admin(cluster, "status")
    assert res.returncode == 0, res.stderr
    for r in cluster.config.regions:
        assert r.name in res.stdout
    assert "strict" in res.stdout


def test_tune_id_mode_everywhere_and_in_the_file(cluster):
    r1, r2, r3 = cluster.clients()
    try:
        res = admin(cluster, "tune", "db", "db", "crdt_xadd_id_uniqueness_mode", "semi-strict")
        assert res.returncode == 0, res.stderr
        for c in (r1, r2, r3):
            assert c.execute_command("BRAID.CONFIG", "GET", "crdt_xadd_id_uniqueness_mode") == b"semi-strict"
        from pathlib import Path

        assert 'id_mode = "semi-strict"' in Path(cluster.file).read_text()
        assert r1.xadd("tuned", {"f": "v"}, id="5-5") == b"5-5"  # full IDs allowed now
        assert admin(cluster, "tune", "db", "db", "crdt_xadd_id_uniqueness_mode", "strict").returncode == 0
        with pytest.raises(Exception, match="strict ID mode"):
            r1.xadd("tuned", {"f": "v"}, id="9-9")
    finally:
        for c in (r1, r2, r3):
            c.close()


def test_pause_resume_and_sync_wait(cluster):
    r1, r2, _ = cluster.clients()
    try:
        assert admin(cluster, "replication", "pause", "--region", "region-2").returncode == 0
        new_id = r1.xadd("paused", {"f": "v"})
        assert r2.exists("paused") == 0
        assert admin(cluster, "sync", "wait", "--timeout", "0.5").returncode == 1
        assert admin(cluster, "replication", "resume", "--region", "region-2").returncode == 0
        res = admin(cluster, "sync", "wait", "--timeout", "20")
        assert res.returncode == 0, res.stderr
        assert r2.xrange("paused")[0][0] == new_id
    finally:
        r1.close()
        r2.close()


@pytest.mark.parametrize("args,message", [
    (("replication", "pause", "--region", "mars"), "no region named 'mars'"),
    (("replication", "pause", "--region", "region-1", "--peer", "pluto"), "no region named 'pluto'"),
    (("tune", "db", "db", "crdt_fancy", "x"), "unknown database setting 'crdt_fancy'"),
    (("tune", "db", "db", "crdt_xadd_id_uniqueness_mode", "chaotic"), "must be one of"),
    (("tune", "db", "other", "crdt_xadd_id_uniqueness_mode", "strict"), "no database named 'other'"),
    (("info", "db", "nope"), "no database named 'nope'"),
])
def test_clear_errors(cluster, args, message):
    res = admin(cluster, *args)
    assert res.returncode == 1 and message in res.stderr


def test_unreachable_region_is_reported(tmp_path):
    from node.activeactive.cluster_config import RegionSpec, local_cluster
    from node.testing import free_port

    cfg = local_cluster(1, 0)
    cfg.regions = [RegionSpec("gone", 1, "127.0.0.1", free_port(), free_port())]
    f = tmp_path / "c.toml"
    f.write_text(cfg.to_toml())
    res = subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--cluster", str(f), "status"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "region gone" in res.stderr and "unreachable" in res.stderr


def _direct(r, *args, token: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--host", r.host, "--port", str(r.repl_port),
                           "--token", token, *args], capture_output=True, text=True, timeout=60)


def test_via_host_and_port(cluster):
    r = cluster.config.regions[0]
    res = _direct(r, "status", token=cluster.config.token)
    assert res.returncode == 0, res.stderr
    assert "region-3" in res.stdout


def test_a_wrong_token_is_refused(cluster):
    res = _direct(cluster.config.regions[1], "status", token="guess")
    assert res.returncode == 1 and "refused the cluster token given" in res.stderr, res.stderr


def test_pause_one_link_only(cluster):
    r1, r2, r3 = cluster.clients()
    try:
        res = admin(cluster, "replication", "pause", "--region", "region-1", "--peer", "region-3")
        assert res.returncode == 0, res.stderr
        table = admin(cluster, "status").stdout
        assert re.search(r"region-1\s*│\s*region-3\s*│\s*paused", table), table
        assert re.search(r"region-3\s*│\s*region-1\s*│\s*down", table), table
        new_id = r1.xadd("one-link", {"f": "v"})
        assert admin(cluster, "sync", "wait", "--timeout", "20").returncode == 0  # through region 2
        assert r3.xrange("one-link")[0][0] == new_id
    finally:
        admin(cluster, "replication", "resume", "--region", "region-1", "--peer", "region-3")
        for c in (r1, r2, r3):
            c.close()


def test_tune_is_kept_by_the_region_itself(cluster, tmp_path):
    """Through --host/--port braid-admin has no file to write: the region records the mode in its own."""
    from pathlib import Path

    r = cluster.config.regions[0]
    try:
        assert _direct(r, "tune", "db", "db", "crdt_xadd_id_uniqueness_mode", "liberal",
                       token=cluster.config.token).returncode == 0
        assert 'id_mode = "liberal"' in Path(cluster.file).read_text()
    finally:
        assert admin(cluster, "tune", "db", "db", "crdt_xadd_id_uniqueness_mode", "strict").returncode == 0


def test_tune_appendfsync_everywhere(cluster):
    from pathlib import Path

    clients = cluster.clients()
    try:
        res = admin(cluster, "tune", "db", "db", "appendfsync", "always")
        assert res.returncode == 0, res.stderr
        assert all(c.info("persistence")["aof_fsync_policy"] == "always" for c in clients)
        assert all(c.config_get("appendfsync") == {"appendfsync": "always"} for c in clients)
        assert 'appendfsync = "always"' in Path(cluster.file).read_text()
        assert clients[0].xadd("fsynced", {"f": "v"})  # replies still come, after their fsync
        res = admin(cluster, "tune", "db", "db", "appendfsync", "sometimes")
        assert res.returncode == 1 and "appendfsync must be one of" in res.stderr
    finally:
        admin(cluster, "tune", "db", "db", "appendfsync", "everysec")
        for c in clients:
            c.close()


def test_tune_maxmemory_everywhere_and_other_regions_operations_pass_it(cluster):
    """The database's memory limit, set by braid-admin at every region and in the file; a
    region over it refuses its clients' writes but applies the other regions' operations
    (refusing them would leave the regions different), and says it is over."""
    from pathlib import Path

    r1, r2, r3 = clients = cluster.clients()
    try:
        res = admin(cluster, "tune", "db", "db", "maxmemory", "100mb")
        assert res.returncode == 0, res.stderr
        assert all(c.config_get("maxmemory") == {"maxmemory": str(100 << 20)} for c in clients)
        assert f"maxmemory = {100 << 20}" in Path(cluster.file).read_text()
        res = admin(cluster, "tune", "db", "db", "maxmemory", "lots")
        assert res.returncode == 1 and "maxmemory must be a memory amount" in res.stderr
        assert r1.config_set("maxmemory", 1)  # region-1 alone, now over its limit
        with pytest.raises(redis.exceptions.OutOfMemoryError, match=re.escape("command not allowed when used memory "
                                                                              "> 'maxmemory'.")):
            r1.xadd("over", {"f": "v"})
        ids = [r2.xadd("over", {"f": "x" * 1000}) for _ in range(50)]
        wait_until(lambda: r1.xlen("over") == 50, what="region-1 applying region-2's operations")
        assert [e[0] for e in r1.xrange("over")] == ids
        assert r1.info("memory")["braid_over_maxmemory"] == 1
        assert r1.delete("over") == 1  # deleting is allowed over the limit, and replicated
    finally:
        for c in clients:
            c.config_set("maxmemory", 0)
        admin(cluster, "tune", "db", "db", "maxmemory", "0")
        for c in clients:
            c.close()


def test_a_forced_removal_names_what_an_earlier_removed_region_loses_with_it():
    """region-3 was removed by force at 100 while only region-4 held its operations 98-100;
    removing region-4 by force takes them along, and braid-admin says so.  A region removed
    gracefully (every member held all of it), or whose operations a remaining member holds,
    is not named."""
    from types import SimpleNamespace

    from node.activeactive.cluster_config import ClusterConfig, RegionSpec
    from node.tools.admin_regions import orphaned_operations

    regions = [RegionSpec("region-1", 1, "h", 1, 2), RegionSpec("region-2", 2, "h", 1, 2, status="removed", frozen=40),
               RegionSpec("region-3", 3, "h", 1, 2, status="removed", frozen=100), RegionSpec("region-4", 4, "h", 1, 2),
               RegionSpec("region-5", 5, "h", 1, 2, status="removed", frozen=7), RegionSpec("region-6", 6, "h", 1, 2)]
    cfg = ClusterConfig("c", "db", "tok", 16, regions)
    statuses = {"region-1": SimpleNamespace(vv={2: 40, 3: 97, 5: 7}),
                "region-4": SimpleNamespace(vv={2: 40, 3: 100, 5: 7}),
                "region-6": SimpleNamespace(vv={2: 40, 3: 96, 5: 6})}
    assert [(x.name, held) for x, held in orphaned_operations(cfg, statuses, cfg.by_number(4))] == [("region-3", 97)]
    assert orphaned_operations(cfg, statuses, cfg.by_number(6)) == []  # region-4 stays and holds them
    del statuses["region-4"]  # unreachable (down): what it holds does not count
    assert [(x.name, held) for x, held in orphaned_operations(cfg, statuses, cfg.by_number(6))] == [("region-3", 97)]
