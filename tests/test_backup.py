"""braid-admin backup against a real three-region cluster, and a region restored from one."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest
import redis

from node.activeactive.cluster_config import load
from node.persistence import snapshot
from node.testing import LocalCluster, free_port, wait_until
from node.tools.admin_cli import main


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c


def _write(client: redis.Redis, key: str, n: int, tag: str) -> list[bytes]:
    return [client.xadd(key, {"tag": tag, "i": i}) for i in range(n)]


def _in_order(ids: list[bytes]) -> list[bytes]:
    return sorted(ids, key=lambda i: tuple(map(int, i.split(b"-"))))


def _snapshot_path(folder: str) -> str:
    found = snapshot.list_snapshots(os.path.join(folder, "appendonlydir"))
    assert len(found) == 1, found
    return found[0][1]


def test_backup_of_every_region(cluster, tmp_path):
    c1, c2, c3 = cluster.clients()
    _write(c1, "bk-all", 5, "r1")
    _write(c3, "bk-all", 4, "r3")
    for i in range(12):  # 3 MiB: the snapshot crosses in several messages
        c2.xadd("bk-big", {"blob": bytes([i]) * (256 << 10)})
    cluster.sync_wait()
    out_dir = tmp_path / "run"
    code, out = cluster.admin("backup", "--dir", str(out_dir))
    assert code == 0, out
    assert sorted(os.listdir(out_dir)) == ["region-1", "region-2", "region-3"]  # no partial folder left
    for r in cluster.config.regions:
        folder = out_dir / r.name
        manifest = json.loads((folder / "backup.json").read_text())
        s = snapshot.read(_snapshot_path(str(folder)))  # checksum, structure, the whole state
        assert (s.region, s.record, s.active_active) == (r.number, manifest["record"], True)
        assert {str(o): n for o, n in s.causal.vv.items()} == manifest["vv"]
        assert len(s.keys.get(b"bk-all")) == 9 and len(s.keys.get(b"bk-big")) == 12
        assert manifest["bytes"] > 3 << 20
        assert (manifest["region"], manifest["cluster_id"]) == (r.name, cluster.config.cluster_id)
        log_dir = folder / "appendonlydir"
        # the log goes on right after the snapshot (without a segment it would start again at record 1)
        assert (log_dir / f"{manifest['record'] + 1:020d}.aof").stat().st_size == 0
        line = next(x for x in out.splitlines() if x.startswith(f"{r.name} "))
        assert f"{manifest['bytes']} bytes, record {manifest['record']}" in line
    assert "backup of 3 regions" in out


def test_one_region_and_an_existing_backup(cluster, tmp_path):
    code, out = cluster.admin("backup", "--dir", str(tmp_path), "--region", "region-2")
    assert code == 0, out
    assert os.listdir(tmp_path) == ["region-2"]
    first = json.loads((tmp_path / "region-2" / "backup.json").read_text())
    # a second run into the same directory would mix two runs: refused, nothing touched
    code, out = cluster.admin("backup", "--dir", str(tmp_path), "--region", "region-2")
    assert code == 1 and "already holds a backup of region-2" in out
    assert json.loads((tmp_path / "region-2" / "backup.json").read_text()) == first
    c2 = cluster.clients()[1]
    _write(c2, "bk-one", 3, "r2")
    code, out = cluster.admin("backup", "--dir", str(tmp_path), "--region", "region-2", "--force")
    assert code == 0, out
    assert os.listdir(tmp_path) == ["region-2"]
    second = json.loads((tmp_path / "region-2" / "backup.json").read_text())
    assert second["vv"]["2"] >= int(first["vv"].get("2", 0)) + 3
    assert snapshot.read(_snapshot_path(str(tmp_path / "region-2"))).record == second["record"]


def test_the_check_of_a_written_backup_reads_the_whole_file(cluster, tmp_path):
    code, out = cluster.admin("backup", "--dir", str(tmp_path / "b"), "--region", "region-1")
    assert code == 0, out
    path = _snapshot_path(str(tmp_path / "b" / "region-1"))
    header = snapshot.read_header(path)
    assert (header.region, header.record) == (1, snapshot.read(path).record)
    data = bytearray(Path(path).read_bytes())
    damaged = tmp_path / "damaged.bsnap"
    data[len(data) // 2] ^= 0x01  # one bit in the body: only the checksum of the whole file sees it
    damaged.write_bytes(bytes(data))
    with pytest.raises(snapshot.SnapshotError, match="checksum"):
        snapshot.read_header(str(damaged))
    damaged.write_bytes(Path(path).read_bytes()[:-100])
    with pytest.raises(snapshot.SnapshotError):
        snapshot.read_header(str(damaged))


def test_an_unreachable_region_fails_the_backup_naming_it(cluster, tmp_path):
    cfg = load(cluster.file)
    cfg.region("region-3").repl_port = free_port()  # nobody listens there
    cfg.save(str(tmp_path / "cluster.toml"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["--cluster", str(tmp_path / "cluster.toml"), "backup", "--dir", str(tmp_path / "b")])
    text = out.getvalue()
    assert code == 1
    assert "backup of region-3 failed: region region-3 at" in text and "unreachable" in text
    assert "2 of 3 regions backed up" in text and "failed: region-3" in text
    assert sorted(os.listdir(tmp_path / "b")) == ["region-1", "region-2"]  # the others are written


def test_a_region_restored_from_its_backup_takes_back_what_it_lacks(cluster, tmp_path):
    c1, c2, c3 = cluster.clients()
    key = "bk-restore"
    before = _write(c2, key, 6, "A2") + _write(c1, key, 4, "A1")
    cluster.sync_wait()
    code, out = cluster.admin("backup", "--dir", str(tmp_path), "--region", "region-2")
    assert code == 0, out
    after = _write(c2, key, 5, "B2")  # region-2's own operations its backup lacks; its peers hold them
    cluster.sync_wait()
    for c in (c1, c2, c3):
        c.close()

    proc = cluster.proc("region-2")
    proc.stop_keeping_data()
    log_dir = os.path.join(proc.data_dir, "appendonlydir")
    shutil.rmtree(log_dir)
    shutil.copytree(tmp_path / "region-2" / "appendonlydir", log_dir)
    proc.restart()

    # a write at once, taken as soon as region-2 accepts one: had it taken writes before holding
    # its own operations back from its peers, this one would reuse a number they already hold
    c2 = cluster.proc("region-2").client()

    def write_at_region_2():
        try:
            return c2.xadd(key, {"tag": "after-restore"})
        except redis.exceptions.BusyLoadingError:  # LOADING: still taking back its own operations
            return None

    new_id = wait_until(write_at_region_2, 30, interval=0.005, what="region-2 writable after the restore")
    cluster.sync_wait(timeout=30)
    clients = cluster.clients()
    ranges = [c.xrange(key) for c in clients]
    assert [i for i, _ in ranges[0]] == _in_order(before + after + [new_id])
    assert ranges[0] == ranges[1] == ranges[2]
    for c in [*clients, c2]:
        c.close()


def test_every_region_restored_from_one_run_returns_to_it(cluster, tmp_path):
    clients = cluster.clients()
    key = "bk-all-restore"
    kept = _write(clients[0], key, 3, "A1") + _write(clients[2], key, 3, "A3")
    cluster.sync_wait()
    code, out = cluster.admin("backup", "--dir", str(tmp_path))
    assert code == 0, out
    _write(clients[1], key, 4, "lost")  # after the backup: a restore of every region drops it
    cluster.sync_wait()
    for c in clients:
        c.close()

    for proc in cluster.procs:
        proc.stop_keeping_data()
    for proc in cluster.procs:
        log_dir = os.path.join(proc.data_dir, "appendonlydir")
        shutil.rmtree(log_dir)
        shutil.copytree(tmp_path / proc.region / "appendonlydir", log_dir)
    for proc in cluster.procs:
        proc.restart()
    cluster.sync_wait(timeout=30)

    clients = cluster.clients()
    for c in clients:
        assert [i for i, _ in c.xrange(key)] == _in_order(kept)
    writer = clients[1]

    def write():
        try:
            return writer.xadd(key, {"tag": "after-restore"})
        except redis.exceptions.BusyLoadingError:  # LOADING until every peer answered
            return None

    new_id = wait_until(write, 30, what="region-2 writable after the restore")
    cluster.sync_wait(timeout=30)
    ranges = [c.xrange(key) for c in clients]
    assert [i for i, _ in ranges[0]] == _in_order(kept + [new_id])
    assert ranges[0] == ranges[1] == ranges[2]
    for c in clients:
        c.close()
