"""RDB files in and out of a sharded database: a real redis-server 7.0's file imported at start-up
by every shard of a region (``braid node --import``: each restores the keys of its own slots),
the streams replicated shard by shard to the other region, exported from there whole with one
address (``braid export`` follows the cluster), and ``braid import`` into that region routing
each RESTORE to its key's shard.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from node.activeactive.cluster_config import local_cluster
from node.region.slots import key_slot
from node.testing import RedisProcess, free_port_base, wait_until
from node.tools import cli
from node.tools.cluster_processes import stop_children

STREAMS = [f"orders:{i}" for i in range(24)]


@pytest.fixture(scope="module")
def redis_dump(tmp_path_factory) -> bytes:
    """A redis-server 7.0's file: 24 streams (one with a group and a pending entry), a hash."""
    with RedisProcess() as p:
        c = p.client()
        for i, key in enumerate(STREAMS):
            c.xadd(key, {"n": i}, id=f"{i + 1}-0")
        c.xgroup_create(STREAMS[0], "billing", id="0")
        c.xreadgroup("billing", "worker-1", {STREAMS[0]: ">"})
        c.hset("not-a-stream", mapping={"f": "v"})
        c.save()
        with open(os.path.join(p.data_dir, "dump.rdb"), "rb") as f:
            return f.read()


def _run(capsys, *argv) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_a_sharded_database_imports_and_exports_whole(redis_dump, tmp_path, capsys):
    dump = tmp_path / "dump.rdb"
    dump.write_bytes(redis_dump)
    base = free_port_base(2 + 20, (0, 100))
    cfg = local_cluster(2, base, str(tmp_path), shards=2)
    cfg.save(str(tmp_path / "c.toml"))
    owners = cfg.shards.owners()
    per_shard = [sorted(k for k in STREAMS if owners[key_slot(k.encode())] == shard) for shard in (0, 1)]
    assert all(per_shard)  # the streams fall in both shards
    logs = {name: tmp_path / f"{name}.log" for name in ("region-1", "region-2")}
    procs: list[subprocess.Popen] = []

    def start(name: str, *extra: str) -> None:
        with open(logs[name], "wb") as out:
            procs.append(subprocess.Popen([sys.executable, "-m", "node", "node", "--config", str(tmp_path / "c.toml"),
                                           "--region", name, *extra], stdout=out, stderr=subprocess.STDOUT))

    def log(name: str) -> str:
        return logs[name].read_text(errors="replace")

    try:
        start("region-1", "--import", str(dump))
        # it takes writes once its peer answered (it may have written before it lost its data): the
        # import waits for that, in both shards, instead of giving up
        wait_until(lambda: log("region-1").count("--import: waiting until the region takes writes") == 2, 60,
                   what="both shards' imports to wait for region-2")
        start("region-2")
        reports = [f"braid node [shard-{shard}]: --import: imported {len(keys)} streams into"
                   for shard, keys in enumerate(per_shard)]
        wait_until(lambda: all(r in log("region-1") for r in reports), 60, what="both shards' import reports")
        text = log("region-1")  # each shard took its own slots' streams and named the others'
        assert text.count("--import: streams of the other shards' slots, imported by those shards") == 2, text
        first = [redis.Redis(port=p, socket_timeout=5) for p in cfg.region("region-1").ports]
        for shard, client in enumerate(first):
            assert sorted(k.decode() for k in client.keys()) == per_shard[shard]

        # shard K of region-1 replicates to shard K of region-2
        second = redis.RedisCluster(host="127.0.0.1", port=cfg.region("region-2").ports[0], socket_timeout=5)
        wait_until(lambda: sorted(k.decode() for k in second.keys(target_nodes=redis.RedisCluster.PRIMARIES))
                   == sorted(STREAMS), 60, what="every stream at region-2")
        assert [g["name"] for g in second.xinfo_groups(STREAMS[0])] == [b"billing"]

        # one address exports the whole region: the export follows the cluster to both shards
        (tmp_path / "back").mkdir()
        status, out, err = _run(capsys, "export", str(tmp_path / "back" / "dump.rdb"), "--from",
                                f"127.0.0.1:{cfg.region('region-2').ports[1]}", "--for-redis", "7.0")
        assert status == 0 and f"exported {len(STREAMS)} streams" in out, err
        with RedisProcess(data_dir=str(tmp_path / "back")) as p:  # redis-server 7.0 loads it, every stream whole
            back = p.client()
            assert sorted(k.decode() for k in back.keys()) == sorted(STREAMS)
            for i, key in enumerate(STREAMS):
                assert back.xrange(key) == [(f"{i + 1}-0".encode(), {b"n": str(i).encode()})]
            assert [g["name"] for g in back.xinfo_groups(STREAMS[0])] == [b"billing"]
        # and an import routes each RESTORE to its key's shard (all there already: none replaced)
        status, out, err = _run(capsys, "import", str(dump), "--into", f"127.0.0.1:{cfg.region('region-2').ports[0]}")
        assert status == 0, err
        assert f"already there, not replaced (--replace replaces them): {len(STREAMS)}" in out and "refused" not in err
        for c in first:
            c.close()
        second.close()
    finally:
        stop_children(procs)
    assert [p.returncode for p in procs] == [0, 0]
