"""The local cluster launcher: `braid up` (foreground and detached), `braid restart`, `braid down`,
against real region processes.

A foreground `braid up` reports a region that died (its name, the signal, its log), keeps the
others serving and starts it again; gives up on a region that keeps dying at start; stops at once
and without a traceback on Ctrl-C. `braid down` and `braid restart` find the cluster's regions by
their command lines, however they were started, and never signal any other process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import redis

from node.activeactive.cluster_config import load, local_cluster
from node.testing import braid_cli, free_port_base, ports_free, process_gone, wait_until
from node.tools.cluster_processes import region_processes


def _record(data: Path) -> dict:
    return json.loads((data / "cluster.pids").read_text())


class _Foreground:
    """A foreground `braid up` subprocess whose output goes to a file the test reads."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.out_path = tmp / "braid-up.out"
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "node", "up", *map(str, args)], stdout=out,
                                         stderr=subprocess.STDOUT, cwd=tmp)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 60) -> str:
        def seen():
            out = self.output()
            assert self.proc.poll() is None or text in out, f"braid up exited ({self.proc.returncode}):\n{out}"
            return text in out
        wait_until(seen, timeout, interval=0.05, what=repr(text))
        return self.output()


@contextmanager
def _foreground(tmp: Path, data: Path, *args: str):
    up = _Foreground(tmp, "--data-dir", data, *args)
    try:
        yield up
    finally:
        if up.proc.poll() is None:
            up.proc.send_signal(signal.SIGINT)
            try:
                up.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.proc.kill()
                up.proc.wait()
        braid_cli("down", "--data-dir", data)  # whatever is left (a region started detached)


def test_foreground_up_reports_a_killed_region_restarts_it_and_stops_on_ctrl_c(tmp_path):
    base = free_port_base(3)
    data = tmp_path / "data"
    with _foreground(tmp_path, data, "--base-port", base) as up:
        up.wait_for("press Ctrl-C")
        pids = _record(data)["pids"]
        assert re.search(rf"region-2\s*│\s*{base + 1}\s*│\s*{pids[1]}\s*│", up.output())  # the table: each pid
        r1, r3 = redis.Redis(port=base, socket_timeout=5), redis.Redis(port=base + 2, socket_timeout=5)
        first = r1.xadd("rides", {"id": "1"})

        os.kill(pids[1], signal.SIGKILL)
        out = up.wait_for(f"region-2 (port {base + 1}, pid {pids[1]}) was killed by SIGKILL")
        assert "region-1, region-3 keep serving" in out
        assert f"Its log, {data / 'region-2' / 'node.log'}, ends with:" in out
        assert r1.ping() and r3.ping()  # the others serve on
        second = r1.xadd("rides", {"id": "2"})  # written while region-2 is down (or starting)
        out = up.wait_for(f"region-2 is back on port {base + 1}")
        back = _record(data)["pids"][1]
        assert back != pids[1] and f"(pid {back})" in out
        r2 = redis.Redis(port=base + 1, socket_timeout=5)
        wait_until(lambda: [e[0] for e in r2.xrange("rides")] == [first, second], 30, what="region-2 to catch up")

        # `braid up` over the running cluster: it says so, how to reach and stop it, and exits 0
        again = braid_cli("up", "--base-port", base, "--data-dir", data)
        assert again.returncode == 0, again.stderr
        assert "already up" in again.stdout and f"redis-cli -p {base}" in again.stdout
        assert f"braid down --data-dir {data}" in again.stdout

        # `braid restart` of a region this braid up watches: it stops it and braid up starts it again
        restarted = braid_cli("restart", "--region", "region-3", "--data-dir", data)
        assert restarted.returncode == 0, restarted.stderr
        assert "region-3 is back" in restarted.stdout
        assert pids[2] != _record(data)["pids"][2] and process_gone(pids[2])
        wait_until(lambda: r3.xrange("rides") and [e[0] for e in r3.xrange("rides")] == [first, second], 30,
                   what="region-3 after its restart")
        for c in (r1, r2, r3):
            c.close()

        # Ctrl-C: every region stops at once, no traceback
        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(timeout=30) == 0
        out = up.output()
        assert "Traceback" not in out and out.rstrip().endswith("stopped"), out
        assert region_processes(str(data)) == {}
        assert not (data / "cluster.pids").exists()
        assert ports_free([base, base + 1, base + 2, base + 100, base + 101, base + 102])


def test_foreground_up_gives_up_on_a_region_that_keeps_dying_at_start(tmp_path):
    base = free_port_base(2)
    data = tmp_path / "data"
    with _foreground(tmp_path, data, "--regions", 2, "--base-port", base) as up:
        up.wait_for("press Ctrl-C")
        pids = _record(data)["pids"]
        aof = data / "region-2" / "appendonlydir"
        aof.rename(tmp_path / "aside")
        aof.write_text("not a directory")  # every start of region-2 fails now
        os.kill(pids[1], signal.SIGKILL)
        out = up.wait_for("died 3 times in a row", timeout=90)
        assert f"braid restart --region region-2 --data-dir {data}" in out
        assert out.count("region-2 (port") >= 3 and "exited with code 1" in out
        assert redis.Redis(port=base, socket_timeout=5).ping()  # region-1 serves on

        aof.unlink()
        (tmp_path / "aside").rename(aof)
        restarted = braid_cli("restart", "--region", "region-2", "--data-dir", data)  # as the message says
        assert restarted.returncode == 0 and "region-2 runs again" in restarted.stdout, restarted.stderr
        detached = _record(data)["pids"][1]
        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(timeout=30) == 0
        assert region_processes(str(data)) == {detached: "region-2"}  # not braid up's: it runs on
        down = braid_cli("down", "--data-dir", data)
        assert down.returncode == 0 and f"region-2 (pid {detached})" in down.stdout, down.stderr
        assert region_processes(str(data)) == {}


def test_ctrl_c_during_start_up_stops_what_started_without_a_traceback(tmp_path):
    base = free_port_base(3)
    data = tmp_path / "data"
    with _foreground(tmp_path, data, "--base-port", base) as up:
        up.wait_for("starting region-1, region-2, region-3")
        up.proc.send_signal(signal.SIGINT)
        code = up.proc.wait(timeout=30)
        out = up.output()
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
        assert code == 130 and "interrupted during start-up" in out or code == 0 and "stopped" in out, out
        wait_until(lambda: region_processes(str(data)) == {}, 10, what="the regions to stop")


def test_restart_and_down_find_regions_however_they_were_started(tmp_path):
    base = free_port_base(2)
    data = tmp_path / "data"
    up = braid_cli("up", "--detach", "--regions", 2, "--base-port", base, "--data-dir", data)
    assert up.returncode == 0, up.stderr
    hand = None
    try:
        r1 = redis.Redis(port=base, socket_timeout=5)
        entry = r1.xadd("rides", {"id": "1"})
        r2 = redis.Redis(port=base + 1, socket_timeout=5)
        wait_until(lambda: r2.xrange("rides"), 20, what="replication")
        r2.close()
        old = _record(data)["pids"][1]

        restarted = braid_cli("restart", "--region", "region-2", "--data-dir", data)
        assert restarted.returncode == 0, restarted.stderr
        assert f"stopped region-2 (pid {old})" in restarted.stdout and "region-2 runs again" in restarted.stdout
        new = _record(data)["pids"][1]
        assert new != old and process_gone(old)
        assert [e[0] for e in r2.xrange("rides")] == [entry]

        # stopped, then started by hand as the README says: the cluster file names its data folder
        os.kill(new, signal.SIGTERM)
        wait_until(lambda: process_gone(new), 20, what="region-2 to stop")
        with open(tmp_path / "by-hand.log", "wb") as log:
            hand = subprocess.Popen([sys.executable, "-m", "node", "node", "--config", "data/cluster.toml",
                                     "--region", "region-2"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: _ping(r2), 30, what="region-2 started by hand")
        assert [e[0] for e in r2.xrange("rides")] == [entry]  # its own data, not a fresh ./data
        assert not (data / "appendonlydir").exists()
        r1.close()
        r2.close()

        down = braid_cli("down", "--data-dir", data)
        assert down.returncode == 0, down.stderr
        assert f"region-2 (pid {hand.pid})" in down.stdout and "region-1 (pid" in down.stdout
        assert hand.wait(timeout=20) is not None
        assert region_processes(str(data)) == {} and not (data / "cluster.pids").exists()
    finally:
        braid_cli("down", "--data-dir", data)
        if hand is not None and hand.poll() is None:
            hand.kill()
            hand.wait()


def _ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def test_down_never_signals_a_process_that_is_not_a_region_of_this_cluster(tmp_path):
    """A recorded pid now held by another program (a `sleep`), and a Braid region of another data
    directory: `braid down` and `braid restart` leave both alone."""
    base = free_port_base(1)
    other = tmp_path / "other"
    assert braid_cli("up", "--detach", "--regions", 1, "--base-port", base, "--data-dir", other).returncode == 0
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        foreign = _record(other)["pids"][0]
        data = tmp_path / "data"
        data.mkdir()
        (data / "cluster.pids").write_text(json.dumps({
            "pids": [sleeper.pid, foreign], "ports": [base, base], "names": ["region-1", "region-2"],
            "supervisor": sleeper.pid, "supervised": ["region-1", "region-2"]}))
        restart = braid_cli("restart", "--region", "region-1", "--data-dir", data)
        assert restart.returncode == 1  # its port is held by a region of another cluster: not started
        assert f"port {base}" in restart.stderr and "not by region-1 of this cluster" in restart.stderr
        one = braid_cli("down", "--region", "region-2", "--data-dir", data)
        assert one.returncode == 0 and "region-2 was not running" in one.stdout, one.stderr
        assert not process_gone(foreign) and _record(data)["names"] == ["region-1"]
        down = braid_cli("down", "--data-dir", data)
        assert down.returncode == 0, down.stderr
        assert "nothing was running" in down.stdout and "left alone" in down.stdout
        assert sleeper.poll() is None and not process_gone(foreign)
        assert redis.Redis(port=base, socket_timeout=5).ping()
        assert not (data / "cluster.pids").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        assert braid_cli("down", "--data-dir", other).returncode == 0


def test_taken_ports_are_named_before_anything_starts(tmp_path):
    base = free_port_base(3)
    data = tmp_path / "data"
    for taken, what in ((base + 101, "region-2's replication port"), (base + 2, "region-3's client port")):
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", taken))
            holder.listen(1)
            res = braid_cli("up", "--detach", "--base-port", base, "--data-dir", data)
        assert res.returncode == 1
        assert f"port {taken} ({what}) is in use by another program" in res.stderr
        assert "nothing started" in res.stderr and "--base-port" in res.stderr
        assert region_processes(str(data)) == {} and not (data / "cluster.pids").exists()
        assert not data.exists()  # nothing written either: no cluster of these ports to refuse another


def test_the_other_base_port_a_failed_start_suggests_works(tmp_path):
    taken, base = free_port_base(2), free_port_base(2)
    data = tmp_path / "data"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken + 1))
        holder.listen(1)
        first = braid_cli("up", "--detach", "--regions", 2, "--base-port", taken, "--data-dir", data)
    assert first.returncode == 1 and "pick other ports with --base-port" in first.stderr
    again = braid_cli("up", "--detach", "--regions", 2, "--base-port", base, "--data-dir", data)
    try:
        assert again.returncode == 0, again.stderr
        assert f"redis-cli -p {base}" in again.stdout
        assert [r.port for r in load(str(data / "cluster.toml")).regions] == [base, base + 1]
    finally:
        assert braid_cli("down", "--data-dir", data).returncode == 0


def test_start_up_failures_name_the_region_and_its_log(tmp_path):
    base = free_port_base(3)
    data = tmp_path / "data"
    data.mkdir()
    local_cluster(3, base, str(data)).save(str(data / "cluster.toml"))
    one = braid_cli("up", "--regions", 1, "--base-port", base, "--data-dir", data)
    assert one.returncode == 1
    assert f"{data / 'cluster.toml'}" in one.stderr and "--regions 1" in one.stderr
    assert "a cluster of 3 regions" in one.stderr

    (data / "region-2").mkdir()
    (data / "region-2" / "appendonlydir").write_text("not a directory")
    res = braid_cli("up", "--detach", "--base-port", base, "--data-dir", data)
    assert res.returncode == 1
    assert f"region-2 (port {base + 1}) exited with code 1 (it could not load its data" in res.stderr
    assert "during start-up" in res.stderr
    assert f"{data / 'region-2' / 'node.log'}" in res.stderr and "the other regions are stopped" in res.stderr
    assert region_processes(str(data)) == {}


def test_a_cluster_file_names_each_region_data_folder(tmp_path):
    cfg = local_cluster(2, 7001, str(tmp_path))
    cfg.save(str(tmp_path / "cluster.toml"))
    assert 'data_dir = "region-2"' in (tmp_path / "cluster.toml").read_text()  # relative to the file
    held = load(str(tmp_path / "cluster.toml"))
    assert held.region_data_dir(held.region("region-2")) == str(tmp_path / "region-2")
    # a file written before the field: NAME/ beside the file when it exists, else nothing (./data)
    old = "\n".join(line for line in (tmp_path / "cluster.toml").read_text().splitlines()
                    if not line.startswith("data_dir"))
    (tmp_path / "old.toml").write_text(old)
    held = load(str(tmp_path / "old.toml"))
    assert held.region_data_dir(held.region("region-1")) is None
    (tmp_path / "region-1").mkdir()
    assert held.region_data_dir(held.region("region-1")) == str(tmp_path / "region-1")


def test_without_redis_cli_up_prints_a_redis_py_line_that_works(tmp_path):
    base = free_port_base(1)
    data = tmp_path / "data"
    env = {**os.environ, "PATH": str(tmp_path / "no-such-dir")}  # no redis-cli on it
    up = subprocess.run([sys.executable, "-m", "node", "up", "--detach", "--regions", "1", "--base-port", str(base),
                         "--data-dir", str(data)], capture_output=True, text=True, timeout=90, env=env)
    try:
        assert up.returncode == 0, up.stderr
        assert "redis-cli -p" not in up.stdout  # no command the user cannot run
        assert "sudo apt-get install redis-tools" in up.stdout
        line = next(li.strip() for li in up.stdout.splitlines() if "import redis" in li)
        res = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and "rides" not in res.stderr, res.stderr
        assert res.stdout.startswith("b'") and "b'id': b'123'" in res.stdout  # the XADD's ID, then the entry
    finally:
        assert braid_cli("down", "--data-dir", data).returncode == 0


def test_up_writes_the_data_folders_into_a_cluster_file_made_before_them(tmp_path):
    import argparse

    from node.tools.cluster_files import reuse_cluster

    local_cluster(2, 7001).save(str(tmp_path / "cluster.toml"))  # as braid up wrote it before: no data_dir
    assert "data_dir" not in (tmp_path / "cluster.toml").read_text()
    held = reuse_cluster(str(tmp_path / "cluster.toml"), argparse.Namespace(regions=2, base_port=7001, tls=False))
    assert held is not None
    again = load(str(tmp_path / "cluster.toml"))
    assert [r.data_dir for r in again.regions] == [str(tmp_path / "region-1"), str(tmp_path / "region-2")]
    assert again.cluster_id == held.cluster_id  # the same cluster, only the field added


def test_restarts_asked_for_under_a_foreground_up_are_no_crashes(tmp_path):
    """Three `braid restart` in a row, each soon after the last: the foreground braid up starts the
    region again each time, says so in one line, counts no crash and keeps watching it."""
    base = free_port_base(2)
    data = tmp_path / "data"
    with _foreground(tmp_path, data, "--regions", 2, "--base-port", base) as up:
        up.wait_for("press Ctrl-C")
        for n in range(1, 4):
            old = _record(data)["pids"][1]
            restarted = braid_cli("restart", "--region", "region-2", "--data-dir", data)
            assert restarted.returncode == 0, restarted.stderr
            assert "region-2 is back" in restarted.stdout
            out = up.wait_for("region-2 restarted (asked by braid restart)")
            assert out.count("region-2 restarted (asked by braid restart)") == n, out
            new = _record(data)["pids"][1]
            assert new != old and process_gone(old)
        assert "exited with code" not in out and "died" not in out and "ends with" not in out, out
        info = _record(data)
        assert info["supervised"] == ["region-1", "region-2"]
        assert region_processes(str(data)) == dict(zip(info["pids"], info["names"], strict=True))
        assert all(_parent(pid) == up.proc.pid for pid in info["pids"])  # still braid up's own
        assert not list(data.glob("*.restart"))

        # a death that was not asked for is still reported as one
        os.kill(info["pids"][1], signal.SIGKILL)
        up.wait_for(f"region-2 (port {base + 1}, pid {info['pids'][1]}) was killed by SIGKILL")
        up.wait_for(f"region-2 is back on port {base + 1}")


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
