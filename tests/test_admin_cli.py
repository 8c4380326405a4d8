"""braid-admin against a real three-region cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest

from node.testing import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c


def admin(cluster, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node.admin_cli", "--cluster", cluster.file, *args],
                          capture_output=True, text=True, timeout=60)


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
    (("tune", "db", "db", "crdt_xadd_id_uniqueness_mode", "chaotic"), "must be one of"),
    (("tune", "db", "other", "crdt_xadd_id_uniqueness_mode", "strict"), "no database named 'other'"),
    (("info", "db", "nope"), "no database named 'nope'"),
])
def test_clear_errors(cluster, args, message):
    res = admin(cluster, *args)
    assert res.returncode == 1 and message in res.stderr


def test_unreachable_region_is_reported(tmp_path):
    from node.cluster_config import RegionSpec, local_cluster
    from node.testing import free_port

    cfg = local_cluster(1, 0)
    cfg.regions = [RegionSpec("gone", 1, "127.0.0.1", free_port(), free_port())]
    f = tmp_path / "c.toml"
    f.write_text(cfg.to_toml())
    res = subprocess.run([sys.executable, "-m", "node.admin_cli", "--cluster", str(f), "status"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "region gone" in res.stderr and "unreachable" in res.stderr


def test_via_host_and_port(cluster):
    r = cluster.config.regions[0]
    res = subprocess.run([sys.executable, "-m", "node.admin_cli", "--host", r.host, "--port", str(r.port),
                          "status"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "region-3" in res.stdout
