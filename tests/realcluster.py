"""A real Redis Cluster on loopback (Debian's redis-server), the reference for Braid's cluster
protocol (docs/sharding.md): what MOVED, CROSSSLOT, CLUSTER SLOTS/SHARDS/NODES and a cluster
client's redirections must look like is what these nodes answer, not what we remember.

``with real_redis_cluster(tmp_path) as nodes:`` starts ``nodes`` primaries (no replicas) on
free ports, joins them, waits until every one says ``cluster_state:ok`` and yields their
``(host, port)``; on the way out each gets SIGTERM, then SIGKILL after a deadline.  It
installs nothing (``make deps`` does) and fails, never skips, when the binaries are missing.

Start-up waits poll with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import redis

from node.testing import free_ports, wait_until
from node.tools.cluster_processes import ping

HOST = "127.0.0.1"
SLOTS = 16384


def _exe(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not on PATH: `make deps` installs it "
                           "(Debian packages redis-server and redis-tools)")
    return path


def _client(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, protocol=2, socket_timeout=10)  # a node answers at once


def _state(port: int) -> str:
    """``cluster_state`` of CLUSTER INFO at ``port`` (``fail`` until the node knows every slot's owner)."""
    with _client(port) as c:
        info = c.execute_command("CLUSTER", "INFO").decode()
    return dict(line.split(":", 1) for line in info.splitlines() if ":" in line)["cluster_state"]


def _join(cli: str, ports: list[int], bus_ports: list[int]) -> None:
    if len(ports) >= 3:  # what users run; it refuses fewer than three primaries
        out = subprocess.run([cli, "--cluster", "create", *(f"{HOST}:{p}" for p in ports),
                              "--cluster-replicas", "0", "--cluster-yes"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout}{out.stderr}")
        return
    # What `--cluster create` does, by hand: even slot ranges, distinct config epochs (set
    # before the nodes meet: Redis refuses it after), then one node meets the others.
    for i, port in enumerate(ports):
        with _client(port) as c:
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", SLOTS * i // len(ports),
                              SLOTS * (i + 1) // len(ports) - 1)
            c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
    with _client(ports[0]) as c:
        for port, bus in zip(ports[1:], bus_ports[1:], strict=True):
            c.execute_command("CLUSTER", "MEET", HOST, port, bus)


@contextlib.contextmanager
def real_redis_cluster(tmp_path: str | os.PathLike[str], nodes: int = 3,
                       args: Sequence[str] = ()) -> Iterator[list[tuple[str, int]]]:
    """``nodes`` Redis Cluster primaries with the slots split evenly, their data and logs in
    ``tmp_path``; ``args`` go to every redis-server (e.g. ``["--cluster-node-timeout", "1000"]``)."""
    server, cli = _exe("redis-server"), _exe("redis-cli")
    directory = os.fspath(tmp_path)
    # Each node also listens on a cluster bus port, port+10000 unless told: that one may be
    # taken, and Redis refuses a port above 55535 for it.  So the bus ports are free ones too.
    ports, bus_ports = (chosen := free_ports(2 * nodes))[:nodes], chosen[nodes:]
    procs: list[subprocess.Popen] = []
    logs: list[BinaryIO] = []
    try:
        for port, bus in zip(ports, bus_ports, strict=True):
            logs.append(open(os.path.join(directory, f"redis-{port}.log"), "ab"))
            procs.append(subprocess.Popen(
                # A node learns its own address from a peer that meets it: announced, a lone
                # node's CLUSTER NODES/SLOTS name it too (else it is "").
                [server, "--port", str(port), "--bind", HOST, "--cluster-enabled", "yes",
                 "--cluster-announce-ip", HOST, "--cluster-port", str(bus),
                 "--cluster-config-file", f"nodes-{port}.conf",
                 "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", directory, *args],
                stdout=logs[-1], stderr=subprocess.STDOUT, cwd=directory))

        def serving() -> bool:
            for proc, port in zip(procs, ports, strict=True):
                if proc.poll() is not None:  # a port taken meanwhile, a bad argument: say why
                    with open(os.path.join(directory, f"redis-{port}.log"), "rb") as f:
                        tail = f.read()[-2000:].decode("utf-8", "replace")
                    raise RuntimeError(f"redis-server on port {port} exited with {proc.returncode}: {tail}")
            return all(ping(p) for p in ports)

        wait_until(serving, 30.0, what="redis-server cluster nodes answering PING")
        _join(cli, ports, bus_ports)
        # `--cluster create` returns once the nodes agree on the slots; each node turns
        # `ok` on its own a little later (a node also waits a moment after it starts).
        wait_until(lambda: all(_state(p) == "ok" for p in ports), 30.0, what="cluster_state:ok everywhere")
        yield [(HOST, p) for p in ports]
    finally:
        for proc in procs:  # all at once, then wait: they stop side by side
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for log in logs:
            log.close()
