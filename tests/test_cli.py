"""`braid up --detach` / `braid down` start and stop real region processes."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

import redis

from node.activeactive.cluster_config import load
from node.region.slots import key_slot
from node.testing import free_port_base, port_is_free, under_headings, wait_until


def _braid(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_up_starts_three_regions_that_replicate(tmp_path):
    port = free_port_base(3)
    data = str(tmp_path / "cluster")
    up = _braid("up", "--detach", "--base-port", str(port), "--data-dir", data)
    assert up.returncode == 0, up.stderr
    for p in (port, port + 1, port + 2):
        assert f"redis-cli -p {p}" in up.stdout
    try:
        first = redis.Redis(port=port, socket_timeout=5)
        third = redis.Redis(port=port + 2, socket_timeout=5)
        new_id = first.xadd("s", {"f": "v"})
        assert new_id.endswith(b"-1")  # strict IDs: region 1's number in the sequence
        wait_until(lambda: third.xrange("s") == [(new_id, {b"f": b"v"})], 20, what="replication")
        first.close()
        third.close()
    finally:
        down = _braid("down", "--data-dir", data)
    assert down.returncode == 0, down.stderr
    for p in (port, port + 1, port + 2):
        assert port_is_free(p)
    # a second `braid up` restarts the same cluster from its files
    again = _braid("up", "--detach", "--base-port", str(port), "--data-dir", data)
    assert again.returncode == 0 and "restarting the cluster" in again.stdout, again.stderr
    try:
        third = redis.Redis(port=port + 2, socket_timeout=5)
        assert [e[0] for e in third.xrange("s")] == [new_id]
        third.close()
    finally:
        assert _braid("down", "--data-dir", data).returncode == 0
    other = _braid("up", "--detach", "--regions", "2", "--base-port", str(port), "--data-dir", data)
    assert other.returncode == 1 and "holds another cluster" in other.stderr


def test_up_one_region_is_standalone(tmp_path):
    port = free_port_base(1)
    data = str(tmp_path / "one")
    assert _braid("up", "--detach", "--regions", "1", "--base-port", str(port), "--data-dir", data).returncode == 0
    try:
        r = redis.Redis(port=port, socket_timeout=5)
        assert r.xadd("s", {"f": "v"}, id="1-1") == b"1-1"  # full IDs: Redis's own rules
        r.close()
    finally:
        assert _braid("down", "--data-dir", data).returncode == 0


def test_up_refuses_a_busy_port(tmp_path):
    port = free_port_base(1)
    data = str(tmp_path / "c1")
    assert _braid("up", "--detach", "--regions", "1", "--base-port", str(port), "--data-dir", data).returncode == 0
    try:
        again = _braid("up", "--detach", "--regions", "1", "--base-port", str(port), "--data-dir",
                       str(tmp_path / "c2"))
        assert again.returncode == 1
        assert "already serving" in again.stderr
    finally:
        assert _braid("down", "--data-dir", data).returncode == 0


def test_down_without_cluster_is_a_clear_error(tmp_path):
    res = _braid("down", "--data-dir", str(tmp_path))
    assert res.returncode == 1
    assert "no detached cluster" in res.stderr


def test_example_cluster_file_loads():
    import os

    from node.activeactive.cluster_config import load

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = load(os.path.join(here, "deploy", "cluster.example.toml"))
    assert [r.name for r in cfg.regions] == ["region-1", "region-2", "region-3"]
    assert cfg.region("region-2").repl_port == 7102


def test_node_with_an_unknown_region_is_a_clear_error(tmp_path):
    import os

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = _braid("node", "--config", os.path.join(here, "deploy", "cluster.example.toml"),
                 "--region", "mars", "--data-dir", str(tmp_path))
    assert res.returncode == 2 and "no region named 'mars'" in res.stderr


def _info(client: redis.Redis, field: str) -> str:
    return str(client.info("crdt")[field])


def test_up_grows_a_detached_cluster_and_down_stops_one_region(tmp_path):
    port = free_port_base(3)
    data = str(tmp_path / "grow")
    up = _braid("up", "--detach", "--regions", "2", "--base-port", str(port), "--data-dir", data)
    assert up.returncode == 0, up.stderr
    try:
        first = redis.Redis(port=port, socket_timeout=5)
        before = first.xadd("s", {"at": "region-1"})
        added = _braid("up", "--add-region", "--data-dir", data)
        assert added.returncode == 0, added.stderr
        assert "region-3" in added.stdout and f"redis-cli -p {port + 2}" in added.stdout
        third = redis.Redis(port=port + 2, socket_timeout=5)
        wait_until(lambda: _info(third, "crdt_member_status") == "active", 60, what="region-3 to become active")
        assert before in [e[0] for e in third.xrange("s")]  # it took the data that was there before it
        mine = third.xadd("s", {"at": "region-3"})
        assert mine.endswith(b"-3")  # its own number in strict IDs
        wait_until(lambda: mine in [e[0] for e in first.xrange("s")], 20, what="region-3's write at region-1")

        again = _braid("up", "--add-region", "region-3", "--data-dir", data)
        assert again.returncode == 1 and "already a member" in again.stderr

        removed = subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--cluster", f"{data}/cluster.toml",
                                  "region", "remove", "region-3"], capture_output=True, text=True, timeout=90)
        assert removed.returncode == 0, removed.stderr
        assert "left the database" in removed.stdout
        third.close()  # first: a connection the server closes would hold its port (TIME_WAIT)
        stopped = _braid("down", "--region", "region-3", "--data-dir", data)
        assert stopped.returncode == 0 and "stopped region-3" in stopped.stdout, stopped.stderr
        assert "still a member" not in stopped.stderr
        assert port_is_free(port + 2)
        assert [e[0] for e in first.xrange("s")] == [before, mine]  # its write stays: it is data
        assert first.ping()  # the others run on
        unknown = _braid("down", "--region", "region-9", "--data-dir", data)
        assert unknown.returncode == 1 and "no region named 'region-9'" in unknown.stderr
        first.close()
    finally:
        down = _braid("down", "--data-dir", data)
    assert down.returncode == 0, down.stderr
    for p in (port, port + 1, port + 2):
        assert port_is_free(p)
    # `braid up` restarts the cluster as its members are now (region-3 left it)
    again = _braid("up", "--detach", "--data-dir", data)
    assert again.returncode == 0 and "members changed since it was made: region-1, region-2" in again.stdout, \
        again.stderr
    try:
        second = redis.Redis(port=port + 1, socket_timeout=5)
        assert [e[0] for e in second.xrange("s")] == [before, mine]
        second.close()
        assert port_is_free(port + 2)
    finally:
        assert _braid("down", "--data-dir", data).returncode == 0


def test_add_region_without_a_detached_cluster_is_a_clear_error(tmp_path):
    res = _braid("up", "--add-region", "--data-dir", str(tmp_path))
    assert res.returncode == 1
    assert "no detached cluster" in res.stderr


def test_a_region_added_to_a_tls_cluster_has_a_certificate_of_its_ca_and_metrics_like_the_others(tmp_path):
    port = free_port_base(3, (0, 100, 200, 300))
    data = str(tmp_path / "tls")
    up = _braid("up", "--detach", "--tls", "--metrics", "--regions", "2", "--base-port", str(port), "--data-dir", data)
    assert up.returncode == 0, up.stderr
    try:
        added = _braid("up", "--add-region", "--data-dir", data)
        assert added.returncode == 0, added.stderr
        assert f"-p {port + 202}" in added.stdout  # its TLS client port, like the others'
        # and its metrics, like the others' (kept in the cluster file for its later starts)
        assert load(f"{data}/cluster.toml").region("region-3").config["metrics-port"] == port + 302
        with urllib.request.urlopen(f"http://127.0.0.1:{port + 302}/metrics", timeout=5) as page:
            assert b"braid_" in page.read()
        third = redis.Redis(port=port + 202, socket_timeout=5, ssl=True, ssl_ca_certs=f"{data}/tls/ca.crt")
        # it can only become active over mutual-TLS links: its certificate is signed by the cluster's CA
        wait_until(lambda: _info(third, "crdt_member_status") == "active", 60, what="region-3 to become active")
        third.close()
    finally:
        assert _braid("down", "--data-dir", data).returncode == 0


def test_up_grows_a_sharded_cluster_with_tls_and_metrics_by_a_region_of_every_shard(tmp_path):
    """`braid up --add-region` on a cluster of two shards per region: the new region joins both
    shard groups with a port per shard (20 apart, as braid up lays them out), gets each shard's
    TLS and metrics port like the others, and cluster-aware clients write and read at it."""
    port = free_port_base(3 + 20, (0, 100, 200, 300))
    data = str(tmp_path / "sharded")
    up = _braid("up", "--detach", "--regions", "2", "--shards", "2", "--tls", "--metrics", "--base-port", str(port),
                "--data-dir", data)
    assert up.returncode == 0, up.stderr
    try:
        added = _braid("up", "--add-region", "--data-dir", data, timeout=120)
        assert added.returncode == 0, added.stderr
        assert "region-3" in added.stdout and f"{port + 2}, {port + 22}" in added.stdout, added.stdout
        assert f"http://127.0.0.1:{port + 322}/metrics" in added.stdout
        cfg = load(f"{data}/cluster.toml")
        third = cfg.region("region-3")
        assert third.ports == [port + 2, port + 22] and third.repl_ports == [port + 102, port + 122]
        for shard, shard_port in enumerate(third.ports):  # a member of both groups, once caught up
            plain = redis.Redis(port=shard_port, socket_timeout=5)
            wait_until(lambda c=plain: _info(c, "crdt_member_status") == "active", 60,
                       what=f"region-3 shard {shard} to become active")
            secure = redis.Redis(port=shard_port + 200, socket_timeout=5, ssl=True, ssl_ca_certs=f"{data}/tls/ca.crt")
            assert secure.execute_command("CLUSTER", "MYSHARDID") and secure.ping()  # its shard's own TLS port
            with urllib.request.urlopen(f"http://127.0.0.1:{shard_port + 300}/metrics", timeout=5) as page:
                assert b"braid_" in page.read()
            plain.close()
            secure.close()
        status = subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--cluster", f"{data}/cluster.toml",
                                 "status"], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        assert all("region-3" in part for part in under_headings(status.stdout, ["shard 0 of 2", "shard 1 of 2"]))
        at_third = redis.RedisCluster(host="127.0.0.1", port=port + 2, socket_timeout=5)
        at_first = redis.RedisCluster(host="127.0.0.1", port=port, socket_timeout=5)
        owners = cfg.shards.owners()
        keys = [next(k for k in (f"k{i}" for i in range(100)) if owners[key_slot(k.encode())] == shard)
                for shard in (0, 1)]
        written = {k: at_third.xadd(k, {"at": "region-3"}) for k in keys}
        assert all(i.endswith(b"-3") for i in written.values())  # its own number in strict IDs, in both shards
        wait_until(lambda: all([e[0] for e in at_first.xrange(k)] == [i] for k, i in written.items()), 30,
                   what="region-3's writes of both shards at region-1")
        at_third.close()
        at_first.close()
    finally:
        down = _braid("down", "--data-dir", data)
    assert down.returncode == 0, down.stderr


def test_sigterm_right_after_the_region_answers_stops_it_cleanly(tmp_path):
    """A region answers PING as soon as it listens, while the rest of its start (its links,
    asking peers that do not answer) goes on: a SIGTERM then (a supervisor's, Kubernetes'
    right after a readiness probe) is a clean stop with status 0, not a kill by the signal."""
    import signal

    import redis

    from node.activeactive.cluster_config import local_cluster
    from node.testing import free_ports, wait_until

    ports = free_ports(6)
    cfg = local_cluster(3, 0)
    for r, (port, repl) in zip(cfg.regions, zip(ports[::2], ports[1::2], strict=True), strict=True):
        r.port, r.repl_port = port, repl  # region-2 and region-3 never start: nothing answers there
    path = tmp_path / "cluster.toml"
    cfg.save(str(path))
    log = tmp_path / "region.log"
    with open(log, "wb") as out:
        region = subprocess.Popen([sys.executable, "-m", "node", "node", "--config", str(path), "--region",
                                   "region-1", "--data-dir", str(tmp_path / "data"), "--port", str(ports[0])],
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        def answers() -> bool:
            assert region.poll() is None, log.read_text()[-2000:]
            try:
                return redis.Redis(port=ports[0], socket_timeout=1).ping()
            except redis.exceptions.ConnectionError:
                return False

        wait_until(answers, 30, what="region-1 to answer")
        region.send_signal(signal.SIGTERM)
        assert region.wait(30) == 0, log.read_text()[-2000:]
    finally:
        if region.poll() is None:
            region.kill()
            region.wait(10)
