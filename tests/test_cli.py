"""`braid up --detach` / `braid down` start and stop real region processes."""

from __future__ import annotations

import socket
import subprocess
import sys

import redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _braid(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_up_detach_serves_and_down_stops(tmp_path):
    port = _free_port()
    data = str(tmp_path / "cluster")
    up = _braid("up", "--detach", "--base-port", str(port), "--data-dir", data)
    assert up.returncode == 0, up.stderr
    assert f"redis-cli -p {port}" in up.stdout
    try:
        r = redis.Redis(port=port, socket_timeout=5)
        assert r.xadd("s", {"f": "v"}, id="1-1") == b"1-1"
        assert r.xlen("s") == 1
        r.close()
    finally:
        down = _braid("down", "--data-dir", data)
    assert down.returncode == 0, down.stderr
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_up_refuses_a_busy_port(tmp_path):
    port = _free_port()
    data = str(tmp_path / "c1")
    assert _braid("up", "--detach", "--base-port", str(port), "--data-dir", data).returncode == 0
    try:
        again = _braid("up", "--detach", "--base-port", str(port), "--data-dir", str(tmp_path / "c2"))
        assert again.returncode == 1
        assert "already serving" in again.stderr
    finally:
        assert _braid("down", "--data-dir", data).returncode == 0


def test_down_without_cluster_is_a_clear_error(tmp_path):
    res = _braid("down", "--data-dir", str(tmp_path))
    assert res.returncode == 1
    assert "no detached cluster" in res.stderr
