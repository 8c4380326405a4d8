"""Shard processes, for real: `braid up --shards 2` starts each region's `braid node` as the supervisor
of its two shard processes; a key lives in the shard its slot names (MOVED from the other) and
replicates to the same shard of the other region; a killed shard is restarted by its supervisor while
the other serves on, with its data; a killed supervisor takes its shards with it; one that keeps dying
at start is given up while the other serves; `braid down` stops everything.

One cluster serves the tests in order (module fixture); each waits by polling under a deadline.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis
from redis.exceptions import MovedError

from node.activeactive.cluster_config import load, local_cluster
from node.region.slots import key_slot
from node.testing import braid_cli, free_port_base, ports_free, process_gone, wait_until
from node.tools import cli
from node.tools.cluster_processes import parent_pid, ping, region_processes, shard_processes


def _key_of(shard: int, slot_owner: bytes, prefix: str) -> str:
    """A key whose slot shard ``shard`` owns."""
    return next(k for k in (f"{prefix}:{i}" for i in range(1000)) if slot_owner[key_slot(k.encode())] == shard)


class Cluster:
    def __init__(self, tmp: Path, base: int) -> None:
        self.tmp, self.base, self.data = tmp, base, tmp / "data"
        self.up = braid_cli("up", "--detach", "--regions", 2, "--shards", 2, "--base-port", base,
                         "--data-dir", self.data, cwd=tmp)
        assert self.up.returncode == 0, self.up.stdout + self.up.stderr
        self.cfg = load(str(self.data / "cluster.toml"))
        self.owner = self.cfg.shards.owners()

    def port(self, region: int, shard: int) -> int:
        return self.cfg.region(f"region-{region}").ports[shard]

    def client(self, region: int, shard: int) -> redis.Redis:
        return redis.Redis(port=self.port(region, shard), socket_timeout=5)

    def shards(self) -> dict[tuple[str, int], int]:
        return {where: pid for pid, where in shard_processes(str(self.data)).items()}

    def supervisors(self) -> dict[str, int]:
        return {name: pid for pid, name in region_processes(str(self.data)).items()}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    c = Cluster(tmp, free_port_base(2 + 20, (0, 100)))  # shard 1 of each region 20 ports above shard 0
    try:
        yield c
    finally:
        braid_cli("down", "--data-dir", c.data)


def test_up_starts_every_shard_and_a_key_replicates_within_its_shard(cluster):
    base, data = cluster.base, cluster.data
    out = cluster.up.stdout
    assert "2 regions, 2 shards each" in out and f"{base}, {base + 20}" in out and f"{base + 1}, {base + 21}" in out
    assert f"redis-cli -c -p {base}" in out and "MOVED" in out  # how to reach a sharded region
    supervisors = cluster.supervisors()
    assert sorted(supervisors) == ["region-1", "region-2"]  # a sharded region counts once: its supervisor
    shards = cluster.shards()
    assert sorted(shards) == [("region-1", 0), ("region-1", 1), ("region-2", 0), ("region-2", 1)]
    assert all(parent_pid(pid) == supervisors[name] for (name, _), pid in shards.items())
    for region, shard in shards:
        assert (data / region / f"shard-{shard}" / "appendonlydir").is_dir()

    for shard in (0, 1):
        key = _key_of(shard, cluster.owner, "rides")
        with cluster.client(1, shard) as here, cluster.client(2, shard) as there, \
                cluster.client(1, 1 - shard) as elsewhere:
            entry = here.xadd(key, {"id": str(shard)})
            wait_until(lambda: [e[0] for e in there.xrange(key)] == [entry], 20,  # noqa: B023
                       what=f"{key} at region-2's shard {shard}")
            with pytest.raises(MovedError) as moved:  # (redis-py's name for a -MOVED reply)
                elsewhere.xadd(key, {"id": "wrong shard"})
            assert str(moved.value) == f"{key_slot(key.encode())} 127.0.0.1:{cluster.port(1, shard)}"
            assert moved.value.slot_id == key_slot(key.encode())
            with pytest.raises(MovedError):
                elsewhere.xrange(key)
            assert [e[0] for e in here.xrange(key)] == [entry]  # the refused write changed nothing


def test_cluster_clients_write_at_one_region_and_read_at_another(cluster):
    """Unchanged cluster-aware clients: redis-py's RedisCluster writes streams of both shards
    at region 1 (it reads CLUSTER SLOTS and routes by slot; COMMAND GETKEYS for XREAD), a
    consumer group reads and acknowledges them at region 2; redis-cli -c follows MOVED;
    redis-benchmark --cluster runs on the map CLUSTER NODES gives it."""
    one = redis.RedisCluster(host="127.0.0.1", port=cluster.port(1, 0), socket_timeout=5)
    two = redis.RedisCluster(host="127.0.0.1", port=cluster.port(2, 1), socket_timeout=5)
    try:
        assert sorted(n.port for n in one.get_primaries()) == [cluster.port(1, 0), cluster.port(1, 1)]
        keys = [f"orders:{i}" for i in range(12)]
        assert {cluster.owner[key_slot(k.encode())] for k in keys} == {0, 1}  # both shards
        ids = {k: one.xadd(k, {"n": k}) for k in keys}
        for k in keys:
            wait_until(lambda: two.xlen(k) == 1, 20, what=f"{k} at region 2")  # noqa: B023
        tagged = ["{user7}.a", "{user7}.b"]  # one slot: one XREAD over both
        for k in tagged:
            one.xadd(k, {"v": k})
        wait_until(lambda: all(two.xlen(k) == 1 for k in tagged), 20, what="the tagged keys at region 2")
        assert sorted(s.decode() for s, _ in two.xread({k: "0" for k in tagged})) == tagged
        key = keys[0]
        two.xgroup_create(key, "g", id="0")
        assert two.xreadgroup("g", "c", {key: ">"}) == [[key.encode(), [(ids[key], {b"n": key.encode()})]]]
        assert two.xack(key, "g", ids[key]) == 1
    finally:
        one.close()
        two.close()
    other = next(k for k in (f"cli:{i}" for i in range(100)) if cluster.owner[key_slot(k.encode())] == 1)
    cli = subprocess.run(["redis-cli", "-c", "-p", str(cluster.port(1, 0)), "XADD", other, "*", "f", "v"],
                         capture_output=True, text=True, timeout=30)
    assert cli.returncode == 0 and "-" in cli.stdout and "MOVED" not in cli.stdout, cli.stdout + cli.stderr
    with cluster.client(1, 1) as owner:
        assert owner.xlen(other) == 1
    bench = subprocess.run(["redis-benchmark", "--cluster", "-p", str(cluster.port(1, 0)), "-n", "2000", "-c", "4",
                            "-P", "4", "-r", "1000", "--csv", "xadd", "b:{tag}:__rand_int__", "*", "f", "v"],
                           capture_output=True, text=True, timeout=120)
    assert bench.returncode == 0 and "Cluster has 2 master nodes" in bench.stdout, bench.stdout + bench.stderr
    assert '"xadd b:{tag}:__rand_int__' in bench.stdout


def test_a_killed_shard_is_restarted_while_the_other_serves_and_keeps_its_data(cluster):
    supervisor = cluster.supervisors()["region-1"]
    victim = cluster.shards()[("region-1", 1)]
    key, other_key = _key_of(1, cluster.owner, "kill"), _key_of(0, cluster.owner, "serve")
    with cluster.client(1, 1) as one, cluster.client(1, 0) as zero:
        entry = one.xadd(key, {"before": "kill"})
        os.kill(victim, signal.SIGKILL)
        served = []

        def back() -> int | None:
            served.append(zero.xadd(other_key, {"n": str(len(served))}))  # shard 0 answers throughout
            pid = cluster.shards().get(("region-1", 1))
            return pid if pid not in (None, victim) and ping(cluster.port(1, 1)) else None

        again = wait_until(back, 30, what="shard 1 of region-1 to be restarted")
        assert process_gone(victim) and parent_pid(again) == supervisor
        assert cluster.supervisors()["region-1"] == supervisor  # the region's other shard was not touched
        assert len(zero.xrange(other_key)) == len(served) >= 1
        assert [e[0] for e in one.xrange(key)] == [entry]  # its data, from its own log
    log = (cluster.data / "region-1" / "node.log").read_text()
    assert f"region-1: shard 1 (port {cluster.port(1, 1)}, pid {victim}) was killed by SIGKILL; shard 0 keeps " \
           "serving" in log
    assert "shard-1 braid.server INFO" in log  # every shard's log lines, tagged, in the region's log


def test_a_killed_supervisor_takes_its_shards_with_it(cluster):
    supervisor = cluster.supervisors()["region-2"]
    shards = [pid for (name, _), pid in cluster.shards().items() if name == "region-2"]
    assert len(shards) == 2
    os.kill(supervisor, signal.SIGKILL)
    wait_until(lambda: all(process_gone(pid) for pid in shards), 10,
               what="region-2's shards to die with their supervisor")
    assert "region-2" not in {name for name, _ in cluster.shards()}
    wait_until(lambda: not ping(cluster.port(2, 0)) and not ping(cluster.port(2, 1)), 10,
               what="region-2's ports to close")

    # braid restart starts the whole region again: both shards, with their data
    restarted = braid_cli("restart", "--region", "region-2", "--data-dir", cluster.data)
    assert restarted.returncode == 0, restarted.stderr
    assert f"region-2 runs again on ports {cluster.port(2, 0)}, {cluster.port(2, 1)}" in restarted.stdout
    assert sorted(k for name, k in cluster.shards() if name == "region-2") == [0, 1]
    key = _key_of(1, cluster.owner, "rides")
    with cluster.client(2, 1) as two:
        assert len(two.xrange(key)) == 1


def test_down_stops_every_shard_and_another_shard_count_is_refused(cluster):
    ports = [cluster.port(r, k) + off for r in (1, 2) for k in (0, 1) for off in (0, 100)]
    down = braid_cli("down", "--data-dir", cluster.data)
    assert down.returncode == 0, down.stderr
    assert "region-1 (pid" in down.stdout and "region-2 (pid" in down.stdout
    assert region_processes(str(cluster.data)) == {} and shard_processes(str(cluster.data)) == {}
    assert not (cluster.data / "cluster.pids").exists()
    wait_until(lambda: ports_free(ports), 10, what="every shard's ports to be free")

    again = braid_cli("up", "--detach", "--regions", 2, "--base-port", cluster.base, "--data-dir", cluster.data)
    assert again.returncode == 1 and "a cluster of 2 shards per region" in again.stderr
    assert "--shards 2" in again.stderr and region_processes(str(cluster.data)) == {}


def test_a_shard_that_keeps_dying_at_start_is_given_up_while_the_other_serves(cluster, tmp_path):
    """(After the test above: the cluster is down.)  A supervisor run by hand, its shard 0's data
    unusable: shard 0 is given up after three quick deaths, shard 1 serves on - with its metrics on
    the given port + 1 -, SIGHUP reaches shard 1 and stops nothing, SIGTERM stops the supervisor
    and shard 1."""
    aof = cluster.data / "region-1" / "shard-0" / "appendonlydir"
    aof.rename(tmp_path / "aside")
    aof.write_text("not a directory")
    metrics = free_port_base(2, (0,))
    out = tmp_path / "supervisor.out"
    with open(out, "wb") as f:
        sup = subprocess.Popen([sys.executable, "-m", "node", "node", "--config", "data/cluster.toml", "--region",
                                "region-1", "--metrics-port", str(metrics)], cwd=cluster.tmp, stdout=f,
                               stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "died 3 times in a row" in out.read_text() or sup.poll() is not None, 60,
                   what="shard 0 to be given up")
        text = out.read_text()
        assert sup.poll() is None, text  # the supervisor runs on, with shard 1
        assert text.count("region-1: shard 0 (port") == 3 and "exited with code 1" in text
        assert "braid node --config data/cluster.toml --region region-1 --metrics-port " \
               f"{metrics} --shard 0" in text  # how to run it by hand once fixed
        assert ping(cluster.port(1, 1)) and not ping(cluster.port(1, 0))
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics + 1}/metrics", timeout=5) as page:
            assert b"braid_" in page.read()
        one = shard_processes(str(cluster.data))
        assert list(one.values()) == [("region-1", 1)]
        sup.send_signal(signal.SIGHUP)  # passed on (a TLS reload), stopping nothing
        wait_until(lambda: "SIGHUP passed on to shard 1" in out.read_text(), 10, what="the SIGHUP passed on")
        assert sup.poll() is None and shard_processes(str(cluster.data)) == one and ping(cluster.port(1, 1))
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(timeout=30) == 0
        assert "region-1: every shard stopped" in out.read_text()
        assert shard_processes(str(cluster.data)) == {}
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        aof.unlink()
        (tmp_path / "aside").rename(aof)


def test_shard_options_are_checked(tmp_path, capsys, monkeypatch):
    """Refused before anything starts (in this process: nothing here gets as far as a server)."""
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: None)  # (the command line's, not the tests')

    def braid(*args: object) -> tuple[int, str]:
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as e:  # argparse's refusals
            code = int(e.code or 0)
        return code, capsys.readouterr().err

    local_cluster(2, 7001, str(tmp_path)).save(str(tmp_path / "unsharded.toml"))
    local_cluster(2, 7001, str(tmp_path), shards=2).save(str(tmp_path / "sharded.toml"))
    code, err = braid("node", "--config", tmp_path / "unsharded.toml", "--region", "region-1", "--shard", 1)
    assert code == 2 and "the database is not sharded" in err and "its only shard is 0" in err
    code, err = braid("node", "--config", tmp_path / "sharded.toml", "--region", "region-1", "--shard", 2)
    assert code == 2 and "the database has 2 shards (0-1)" in err
    code, err = braid("node", "--config", tmp_path / "sharded.toml", "--region", "region-1", "--import", "x.rdb")
    assert code == 2 and "--import x.rdb: No such file or directory" in err  # said once, before any shard starts
    code, err = braid("node", "--shard", 1, "--data-dir", tmp_path / "d")
    assert code == 2 and "only a sharded database has more than one shard" in err
    code, err = braid("node", "--shard", -1)
    assert code == 2 and "'-1' is not a shard number" in err
    code, err = braid("up", "--shards", 6, "--data-dir", tmp_path / "d")
    assert code == 2 and "not a shard count from 1 to 5" in err
    code, err = braid("up", "--regions", 1, "--shards", 2, "--data-dir", tmp_path / "d")
    assert code == 2 and "a standalone region (--regions 1) has no shards" in err
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())


def test_a_taken_port_of_any_shard_is_named_before_anything_starts(tmp_path):
    base = free_port_base(2 + 20, (0, 100))
    data = tmp_path / "data"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 121))  # region-2 shard 1's replication port
        holder.listen(1)
        res = braid_cli("up", "--detach", "--regions", 2, "--shards", 2, "--base-port", base, "--data-dir", data)
    assert res.returncode == 1
    assert f"port {base + 121} (region-2 shard 1's replication port) is in use by another program" in res.stderr
    assert "nothing started" in res.stderr and region_processes(str(data)) == {}
