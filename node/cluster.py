"""``braid up`` / ``braid down``: run local regions as child processes.

Each region is a real ``braid node`` process with its own port and data
directory under ``--data-dir``.  ``braid up`` waits until every region answers
PING, prints how to connect, and then either stays in the foreground (Ctrl-C
stops the regions) or, with ``--detach``, records the process ids in
``<data-dir>/cluster.pids`` and returns; ``braid down`` stops them.

``--regions N`` (default 3) writes ``<data-dir>/cluster.toml`` (a fresh cluster
id and token, RESP on ``--base-port``.., gRPC replication 100 ports above, and
``tls = false``: plain-text links, on loopback only) and
starts each region with ``braid node --config cluster.toml --region NAME``;
``--regions 1`` starts a standalone region (Redis's own ID rules).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

PIDFILE = "cluster.pids"


def ping(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Does a server answer PING on this port?"""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _wait_ready(ports: list[int], procs: list[subprocess.Popen], deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    pending = set(ports)
    while pending:
        for p in procs:
            if p.poll() is not None:
                raise SystemExit(f"braid up: a region exited during start-up (code {p.returncode})")
        pending = {p for p in pending if not ping(p)}
        if pending and time.monotonic() > deadline:
            raise SystemExit(f"braid up: regions on ports {sorted(pending)} did not answer within {deadline_s:.0f}s")
        if pending:
            time.sleep(0.05)  # polling interval while waiting for sockets, not synchronisation


def _stop(pids: list[int], grace_s: float = 5.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _reuse_cluster(cluster_file: str, args: argparse.Namespace) -> bool:
    """Write a new cluster file, or keep the one whose regions' data is in the directory.

    The regions keep their append-only files under the data directory, so a second
    ``braid up`` restarts the same cluster (same id, token and settings); a cluster of
    another shape there is refused rather than mixed with it.
    """
    from .cluster_config import load, local_cluster

    wanted = local_cluster(args.regions, args.base_port)
    if os.path.exists(cluster_file):
        try:
            held = load(cluster_file)
        except (OSError, ValueError, KeyError) as e:
            print(f"braid up: {cluster_file}: {e}", file=sys.stderr)
            return False
        shape = [(r.name, r.port, r.repl_port) for r in held.regions]
        if shape == [(r.name, r.port, r.repl_port) for r in wanted.regions]:
            print(f"restarting the cluster {held.cluster_id} kept in {os.path.dirname(cluster_file)}")
            return True
        print(f"braid up: {os.path.dirname(cluster_file)} holds another cluster ({len(held.regions)} regions from "
              f"port {held.regions[0].port if held.regions else '?'}): give another --data-dir or remove it",
              file=sys.stderr)
        return False
    wanted.save(cluster_file)
    return True


def up(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    if not 1 <= args.regions <= 15:
        print("braid up: --regions must be between 1 and 15", file=sys.stderr)
        return 2
    cluster_file = None
    if args.regions > 1:
        cluster_file = os.path.join(data_dir, "cluster.toml")
        if not _reuse_cluster(cluster_file, args):
            return 1
    names = [f"region-{i}" for i in range(1, args.regions + 1)]
    ports = [args.base_port + i for i in range(len(names))]
    for port in ports:
        if ping(port):
            print(f"braid up: port {port} is already serving (is a cluster running? try `braid down`)",
                  file=sys.stderr)
            return 1
    procs = []
    for name, port in zip(names, ports):
        rdir = os.path.join(data_dir, name)
        os.makedirs(rdir, exist_ok=True)
        log = open(os.path.join(rdir, "node.log"), "ab")
        extra = ["--config", cluster_file, "--region", name] if cluster_file else []
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "node", "node", "--port", str(port), "--data-dir", rdir, *extra],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=args.detach))
    try:
        _wait_ready(ports, procs)
    except SystemExit:
        _stop([p.pid for p in procs])
        raise
    title = f"Braid local cluster: {len(names)} region{'s' if len(names) > 1 else ''}"
    table = Table(title=title)
    for col in ("region", "port", "connect with", "log"):
        table.add_column(col)
    for name, port in zip(names, ports):
        table.add_row(name, str(port), f"redis-cli -p {port}", os.path.join(data_dir, name, "node.log"))
    console = Console()
    console.print(table)
    if args.detach:
        with open(os.path.join(data_dir, PIDFILE), "w") as f:
            json.dump({"pids": [p.pid for p in procs], "ports": ports}, f)
        console.print(f"detached; stop with: braid down --data-dir {args.data_dir}")
        return 0
    console.print("press Ctrl-C to stop")
    try:
        while all(p.poll() is None for p in procs):
            try:
                procs[0].wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
    except KeyboardInterrupt:
        pass
    finally:
        _stop([p.pid for p in procs])
    console.print("stopped")
    return 0


def down(args: argparse.Namespace) -> int:
    path = os.path.join(os.path.abspath(args.data_dir), PIDFILE)
    try:
        with open(path) as f:
            info = json.load(f)
    except FileNotFoundError:
        print(f"braid down: no detached cluster recorded in {args.data_dir}", file=sys.stderr)
        return 1
    _stop(info["pids"])
    os.remove(path)
    print("stopped")
    return 0
