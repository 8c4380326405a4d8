"""`braid up`'s options over a cluster whose members changed (--tls), and --metrics: each region's
Prometheus endpoint, kept for its later starts."""

from __future__ import annotations

import socket
import urllib.request

import redis

from crdt.membership import REMOVED
from node.activeactive.cluster_config import load, local_cluster
from node.testing import braid_cli, free_port_base
from node.tools.cluster_files import with_tls
from node.tools.cluster_processes import region_processes


def _changed_cluster(data, base: int, tls: bool) -> None:
    """A cluster file of three regions made by braid up (with or without TLS) whose region-3 was removed
    since: membership epoch 2."""
    data.mkdir()
    cfg = local_cluster(3, base, str(data))
    if tls:
        with_tls(cfg, str(data))
    cfg.epoch = 2
    cfg.regions[2].status = REMOVED
    cfg.save(str(data / "cluster.toml"))


def test_tls_on_a_cluster_made_without_it_whose_members_changed_is_an_error(tmp_path):
    base = free_port_base(3, (0, 100, 200))
    data = tmp_path / "data"
    _changed_cluster(data, base, tls=False)
    res = braid_cli("up", "--detach", "--tls", "--regions", 2, "--base-port", base, "--data-dir", data)
    try:
        assert res.returncode == 1, res.stdout
        assert "--tls: the cluster in" in res.stderr and "was made without TLS" in res.stderr
        assert "run braid up without --tls" in res.stderr and "another --data-dir" in res.stderr
        assert region_processes(str(data)) == {} and not (data / "cluster.pids").exists()
        assert load(str(data / "cluster.toml")).tls is None
    finally:
        if region_processes(str(data)):  # started after all: stopped, whatever the test says
            braid_cli("down", "--data-dir", data)


def test_tls_on_a_cluster_made_with_it_whose_members_changed_keeps_it(tmp_path):
    base = free_port_base(3, (0, 100, 200))
    data = tmp_path / "data"
    _changed_cluster(data, base, tls=True)
    res = braid_cli("up", "--detach", "--tls", "--regions", 2, "--base-port", base, "--data-dir", data)
    try:
        assert res.returncode == 0, res.stderr
        assert "members changed since it was made: region-1, region-2" in res.stdout
        assert f"-p {base + 200}" in res.stdout and f"-p {base + 201}" in res.stdout
        for i in range(2):
            r = redis.Redis(port=base + i, socket_timeout=5)
            assert r.config_get("tls-port") == {"tls-port": str(base + 200 + i)}
            r.close()
    finally:
        assert braid_cli("down", "--data-dir", data).returncode == 0


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return reply.read().decode()


def test_up_metrics_serves_each_region_on_its_own_port_and_keeps_it(tmp_path):
    base = free_port_base(2, (0, 100, 300))
    data = tmp_path / "data"
    up = braid_cli("up", "--detach", "--metrics", "--regions", 2, "--base-port", base, "--data-dir", data)
    try:
        assert up.returncode == 0, up.stderr
        assert "Prometheus metrics:" in up.stdout
        for i in range(2):
            assert f"region-{i + 1}: http://127.0.0.1:{base + 300 + i}/metrics" in up.stdout
            assert f'region_name="region-{i + 1}"' in _metrics(base + 300 + i)
        restarted = braid_cli("restart", "--region", "region-2", "--data-dir", data)  # the file keeps it
        assert restarted.returncode == 0, restarted.stderr
        assert 'region_name="region-2"' in _metrics(base + 301)
        assert load(str(data / "cluster.toml")).region("region-1").config["metrics-port"] == base + 300
    finally:
        assert braid_cli("down", "--data-dir", data).returncode == 0


def test_up_metrics_names_a_metrics_port_in_use(tmp_path):
    base = free_port_base(1, (0, 100, 300))
    data = tmp_path / "data"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 300))
        holder.listen(1)
        res = braid_cli("up", "--detach", "--metrics", "--regions", 1, "--base-port", base, "--data-dir", data)
    assert res.returncode == 1
    assert f"port {base + 300} (region-1's metrics port) is in use by another program" in res.stderr
