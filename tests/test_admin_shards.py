"""braid-admin against a real sharded database: two regions of two shards each, four processes.

Each shard is ``braid node --shard K``: a region server on the cluster file's shard view
(``ClusterConfig.shard_view``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil

import pytest

from node import testing
from node.activeactive.cluster_config import load
from node.persistence import snapshot
from node.testing import replication_status, under_headings
from node.tools import admin_cli


class ShardedCluster(testing.ShardedCluster):
    def shard_of(self, key: str) -> int:
        return self.owner(key)

    def key(self, shard: int, prefix: str) -> str:
        """A key (``prefix``N) that shard ``shard`` owns."""
        return self.keys(prefix, 1)[shard]


@pytest.fixture(scope="module")
def cluster():
    c = ShardedCluster().start()
    try:
        yield c
    finally:
        c.stop()


REGIONS = ("region-1", "region-2")
HEADINGS = ("shard 0 of 2 (slots 0-8191)", "shard 1 of 2 (slots 8192-16383)")


def _sections(out: str) -> list[str]:
    return under_headings(out, HEADINGS)


@contextlib.contextmanager
def _resumed(cluster: ShardedCluster):
    """On the way out, every shard's links are resumed (a test may have paused some)."""
    try:
        yield
    finally:
        for p in cluster.procs.values():
            with p.client() as c:
                c.execute_command("BRAID.REPLICATION", "RESUME")


def test_status_lists_both_shards_of_both_regions(cluster):
    code, out, err = cluster.admin("status")
    assert code == 0, err
    for k, section in enumerate(_sections(out)):
        for r in cluster.config.regions:
            # the region's row: its client address is its shard k's
            assert re.search(rf"{r.name}\s*│\s*{r.number}\s*│\s*active\s*│\s*127\.0\.0\.1:{r.ports[k]}\s*│\s*active",
                             section), section
            other = next(x for x in REGIONS if x != r.name)
            assert re.search(rf"{r.name}\s*│\s*{other}\s*│\s*up\b", section), section  # its link, up
    code, out, err = cluster.admin("status", "--shard", "1")
    assert code == 0, err
    assert HEADINGS[1] in out and HEADINGS[0] not in out
    assert f"127.0.0.1:{cluster.config.regions[0].ports[1]}" in out
    assert f"127.0.0.1:{cluster.config.regions[0].ports[0]}" not in out


def test_status_through_one_shards_port_knows_every_shard(cluster):
    r = cluster.config.regions[1]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = admin_cli.main(["--host", r.host, "--port", str(r.repl_ports[1]), "--token", cluster.config.token,
                               "status"])
    assert code == 0, err.getvalue()
    sections = _sections(out.getvalue())
    assert f"127.0.0.1:{r.ports[0]}" in sections[0] and f"127.0.0.1:{r.ports[1]}" in sections[1]


def test_a_shard_that_is_not_one_is_a_usage_error(cluster):
    code, _, err = cluster.admin("sync", "wait", "--shard", "2")
    assert code == 2 and "--shard 2: shard 2 is not one of this database's 2 (0-1)" in err


def test_sync_wait_after_writes_to_both_shards(cluster):
    written = {}
    with cluster.client("region-1", 0) as c0, cluster.client("region-1", 1) as c1:
        for k, c in enumerate((c0, c1)):
            key = cluster.key(k, "sync-")
            written[key] = [c.xadd(key, {"i": i}) for i in range(3)]
    code, out, err = cluster.admin("sync", "wait", "--timeout", "20")
    assert code == 0, err
    for section in _sections(out):
        assert "in sync: all 2 members hold the same operations" in section
    for key, ids in written.items():  # sync wait returned: the other region holds them already
        with cluster.client("region-2", cluster.shard_of(key)) as c:
            assert [i for i, _ in c.xrange(key)] == ids


def test_pausing_a_region_pauses_every_shard_of_it(cluster):
    with _resumed(cluster):
        code, out, err = cluster.admin("replication", "pause", "--region", "region-2")
        assert code == 0, err
        assert [s.count("replication paused: all links of region-2") for s in _sections(out)] == [1, 1]
        keys = [cluster.key(k, "paused-") for k in (0, 1)]
        for k, key in enumerate(keys):
            with cluster.client("region-1", k) as c:
                c.xadd(key, {"f": "v"})
        for k in (0, 1):
            with cluster.client("region-2", k) as c:
                assert "link=paused" in replication_status(c)["crdt_peer_1"]
        # not in sync: neither shard's write crosses while region-2 is paused
        code, _, err = cluster.admin("sync", "wait", "--timeout", "0.5")
        assert code == 1
        assert "shard 0: not in sync" in err and "shard 1: not in sync" in err, err
        for k, key in enumerate(keys):
            with cluster.client("region-2", k) as c:
                assert c.exists(key) == 0
        code, out, err = cluster.admin("status")
        for section in _sections(out):
            assert re.search(r"region-2\s*│\s*2\s*│\s*active\s*│\s*\S+\s*│\s*paused", section), section
        code, out, err = cluster.admin("replication", "resume", "--region", "region-2")
        assert code == 0, err
        assert [s.count("replication resumed: all links of region-2") for s in _sections(out)] == [1, 1]
        code, _, err = cluster.admin("sync", "wait", "--timeout", "20")
        assert code == 0, err
        for k, key in enumerate(keys):
            with cluster.client("region-2", k) as c:
                assert c.exists(key) == 1


def test_pausing_one_shard_only(cluster):
    with _resumed(cluster):
        code, out, err = cluster.admin("replication", "pause", "--region", "region-2", "--shard", "1")
        assert code == 0, err
        assert HEADINGS[1] in out and HEADINGS[0] not in out
        links = {}
        for k in (0, 1):
            with cluster.client("region-2", k) as c:
                links[k] = replication_status(c)["crdt_peer_1"].split(",")[1]
        assert links == {0: "link=up", 1: "link=paused"}
        for k in (0, 1):
            with cluster.client("region-1", k) as c:
                c.xadd(cluster.key(k, "one-shard-"), {"f": "v"})
        assert cluster.admin("sync", "wait", "--shard", "0", "--timeout", "20")[0] == 0
        code, out, err = cluster.admin("sync", "wait", "--shard", "1", "--timeout", "0.3")
        assert code == 1 and "shard 1: not in sync after 0.3s: region-2 lacks 1 operation" in err, err
        assert cluster.admin("replication", "resume", "--region", "region-2", "--shard", "1")[0] == 0
        assert cluster.admin("sync", "wait", "--timeout", "20")[0] == 0


def test_info_and_tune_reach_every_shard(cluster):
    code, out, err = cluster.admin("info", "db", "db")
    assert code == 0, err
    assert out.startswith(f"database db: cluster {cluster.config.cluster_id}, 2 regions, 2 shards, ")
    for k, section in enumerate(_sections(out)):
        for r in cluster.config.regions:
            assert f"{r.name} (number {r.number}) 127.0.0.1:{r.ports[k]}: " in section
    try:
        code, out, err = cluster.admin("tune", "db", "db", "crdt_xadd_id_uniqueness_mode", "semi-strict")
        assert code == 0, err
        assert "crdt_xadd_id_uniqueness_mode is semi-strict on every region (all 2 shards)" in out
        for p in cluster.procs.values():
            with p.client() as c:
                assert c.execute_command("BRAID.CONFIG", "GET", "crdt_xadd_id_uniqueness_mode") == b"semi-strict"
        assert load(cluster.file).id_mode == "semi-strict"
    finally:
        assert cluster.admin("tune", "db", "db", "crdt_xadd_id_uniqueness_mode", "strict")[0] == 0


def test_flush_empties_both_shards_everywhere(cluster):
    for r in REGIONS:
        for k in (0, 1):
            with cluster.client(r, k) as c:
                c.xadd(cluster.key(k, f"flush-{r}-"), {"f": "v"})
    code, out, err = cluster.admin("flush", "db", "db")
    assert code == 0, err
    for section in _sections(out):
        assert "database db flushed at region-1: " in section
    code, _, err = cluster.admin("sync", "wait", "--timeout", "20")
    assert code == 0, err
    sizes = {}
    for (r, k), p in cluster.procs.items():
        with p.client() as c:
            sizes[(r, k)] = c.dbsize()
    assert sizes == {(r, k): 0 for r in REGIONS for k in (0, 1)}


def test_a_stopped_shard_is_named_and_fails_the_command(cluster):
    proc = cluster.procs[("region-2", 1)]
    proc.stop_keeping_data()
    try:
        code, out, err = cluster.admin("status")
        assert code == 1
        assert re.search(r"region region-2 shard 1 at 127\.0\.0\.1:\d+ is unreachable", err), err
        sections = _sections(out)
        assert re.search(r"region-2\s*│\s*2\s*│\s*active\s*│\s*\S+\s*│\s*unreachable", sections[1]), sections[1]
        assert "unreachable" not in sections[0]
        code, _, err = cluster.admin("flush", "db", "db")
        assert code == 1 and err.startswith("braid-admin: nothing flushed") and "region-2 shard 1" in err
        assert cluster.admin("status", "--shard", "0")[0] == 0
    finally:
        proc.restart().wait_writable()
    assert cluster.admin("sync", "wait", "--timeout", "20")[0] == 0


def test_backup_writes_one_snapshot_per_shard_and_a_shard_restores_from_it(cluster, tmp_path):
    keys = {}
    for k in (0, 1):
        with cluster.client("region-1", k) as c:
            key = cluster.key(k, "backup-")
            keys[k] = (key, [c.xadd(key, {"i": i}) for i in range(4)])
    assert cluster.admin("sync", "wait", "--timeout", "20")[0] == 0
    out_dir = tmp_path / "run"
    code, out, err = cluster.admin("backup", "--dir", str(out_dir))
    assert code == 0, err
    assert sorted(os.listdir(out_dir)) == list(REGIONS)
    for r in cluster.config.regions:
        assert sorted(os.listdir(out_dir / r.name)) == ["shard-0", "shard-1"]  # no partial folder left
        for k in (0, 1):
            folder = out_dir / r.name / f"shard-{k}"
            manifest = json.loads((folder / "backup.json").read_text())
            assert (manifest["region"], manifest["number"], manifest["shard"]) == (r.name, r.number, k)
            found = snapshot.list_snapshots(str(folder / "appendonlydir"))
            assert len(found) == 1, found
            s = snapshot.read(found[0][1])
            assert (s.region, s.record) == (r.number, manifest["record"])
            key, ids = keys[k]
            assert len(s.keys.get(key.encode())) == len(ids)
            assert s.keys.get(keys[1 - k][0].encode()) is None  # the other shard's key is not in it
            assert f"{r.name} shard {k} (region {r.number}): {manifest['bytes']} bytes" in out
    words = " ".join(out.split())  # (the closing sentence wraps at the console's width)
    assert "backup of 4 shards of 2 regions of database db" in words and "To restore a shard: stop it" in words
    code, _, err = cluster.admin("backup", "--dir", str(out_dir), "--shard", "1", "--region", "region-2")
    assert code == 1 and "already holds a backup of region-2/shard-1" in err, err

    # the restore the documentation gives, for shard 1 of region-2: it takes back from its peer
    # the operations of its own made after the backup
    key, ids = keys[1]
    with cluster.client("region-2", 1) as c:
        ids += [c.xadd(key, {"after": i}) for i in range(2)]
    assert cluster.admin("sync", "wait", "--timeout", "20")[0] == 0
    proc = cluster.procs[("region-2", 1)]
    proc.stop_keeping_data()
    log_dir = os.path.join(proc.data_dir, "appendonlydir")
    shutil.rmtree(log_dir)
    shutil.copytree(out_dir / "region-2" / "shard-1" / "appendonlydir", log_dir)
    proc.restart().wait_writable()
    with proc.client() as c:
        assert [i for i, _ in c.xrange(key)] == ids
        ids.append(c.xadd(key, {"restored": 1}))
    assert cluster.admin("sync", "wait", "--timeout", "20")[0] == 0
    with cluster.client("region-1", 1) as c:
        assert [i for i, _ in c.xrange(key)] == ids



def test_tls_reload_reaches_every_shard_of_the_region():
    c = ShardedCluster(regions=1, tls=True).start()
    try:
        code, out, err = c.admin("tls", "reload", "--region", "region-1")
        assert code == 0, err
        for section in _sections(out):
            assert "region-1 reloaded its TLS credentials: certificate serial" in " ".join(section.split())
        code, out, err = c.admin("tls", "reload", "--region", "region-1", "--shard", "1")
        assert code == 0 and HEADINGS[1] in out and HEADINGS[0] not in out, err
    finally:
        c.stop()
