"""``braid up`` / ``braid down`` / ``braid restart``: run local regions as child processes.

Each region is a real ``braid node`` process with its own port and data
directory under ``--data-dir``.  ``braid up`` checks every port it needs before
starting anything, waits until every region answers PING, prints how to connect,
and then either stays in the foreground or, with ``--detach``, returns.  Either
way ``<data-dir>/cluster.pids`` records the regions' process ids (and, in the
foreground, the ``braid up`` process's own).

In the foreground ``braid up`` supervises: a region that dies is reported (its
name, port, how it ended - the signal or exit code - and the end of its log) while
the others keep serving, and it is started again at once; one that keeps dying
within ``QUICK_CRASH_S`` of its start is retried after 1 s, then 2 s, and given up
after ``MAX_QUICK_CRASHES`` such deaths in a row, with the command that restarts it.
Ctrl-C (or SIGTERM, which ``braid down`` sends) stops every region: SIGTERM to
all, then one shared deadline for all of them, SIGKILL past it; no traceback,
also during start-up.

Which processes are this cluster's.  A pid in a record may by now be some other
program's (pid reuse), and a region may have been restarted by hand, so neither
``braid down`` nor ``braid restart`` trusts the record: they read every
process's command line (``/proc/PID/cmdline``, relative paths resolved against
``/proc/PID/cwd``) and take as a region of this cluster only a ``braid node``
whose ``--config`` is this cluster file (its ``--region`` names it) or whose
``--data-dir`` is a folder of the data directory.  Nothing else is ever
signalled.  ``braid down`` stops all of them (and a foreground ``braid up``
first), reports what it stopped, and removes the record only when nothing is
left.  ``braid restart --region NAME`` stops that region if it runs and starts
it detached, logging to ``<data-dir>/NAME/node.log``; under a foreground
``braid up`` it stops the region and lets ``braid up`` start it again.

``--regions N`` (default 3) writes ``<data-dir>/cluster.toml`` (a fresh cluster
id and token, RESP on ``--base-port``.., gRPC replication 100 ports above, each
region's ``data_dir`` and ``tls = false``: plain-text links, on loopback only) and
starts each region with ``braid node --config cluster.toml --region NAME``;
``--regions 1`` starts a standalone region (Redis's own ID rules).  A data
directory holds one cluster: ``braid up`` over a running one says so (and how
to reach and stop it) and exits 0; over the data of another shape it refuses.

``--tls`` makes the cluster CA and the certificates under ``<data-dir>/tls/``
(``node.security.certs``), writes the links' ``[tls]`` table and, per region, TLS on
a client port 200 above the plain one (which stays on), and prints the
``redis-cli --tls`` line for each region.

Growing and shrinking a detached cluster.  ``braid up --add-region [NAME]`` adds a
region to the cluster running detached in ``--data-dir``: it picks the next free
ports after the existing regions (RESP one above the highest, gRPC 100 above that)
and, unless NAME is given, the next name ``region-N``; runs ``braid-admin region add``
against the cluster file (every member must be reachable, else nothing changes);
with TLS, signs the new region's certificate with the cluster's CA; then starts the
region detached (its data and ``node.log`` under ``<data-dir>/NAME/``), records its
pid beside the others and prints how to connect.  The region joins: it takes its
data from its peers and accepts writes once it has caught up (``braid-admin status``
shows it).  Shrinking is ``braid-admin region remove NAME`` (graceful: it stops taking
writes and hands over everything), then ``braid down --region NAME``, which stops that
region only.  After ``braid down``, ``braid up`` restarts the cluster with its members
of the moment (the cluster file's epoch says they changed), whatever ``--regions`` says.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from . import admin_cli
from .cluster_config import LinkTls, load, local_cluster
from .security.certs import create_cluster_certs

PIDFILE = "cluster.pids"
CLUSTER_FILE = "cluster.toml"
READY_TIMEOUT_S = 30.0    # a region that does not answer PING by then failed to start
STOP_GRACE_S = 10.0       # SIGTERM, then SIGKILL past this (one deadline for every region)
QUICK_CRASH_S = 10.0      # a region dying sooner after its start crashed "at once"
MAX_QUICK_CRASHES = 3     # in a row: the foreground braid up stops restarting it
LOG_TAIL_LINES = 8        # of a dead region's log, printed with the news
POLL_S = 0.2              # the foreground supervisor's look at its regions


def ping(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Does a server answer PING on this port?"""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _port_free(port: int) -> bool:
    """Can a server listen on ``port`` on loopback?  (SO_REUSEADDR, as the regions bind: a port
    in TIME_WAIT after a region stopped is free.)"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            return False
    return True


# ------------------------------------------------------------------ which processes are ours
def _process(pid: int) -> tuple[list[str], str] | None:
    """A live process's command line and working directory; None if gone, a zombie or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except (OSError, IndexError):
        return None
    return (argv, cwd) if argv else None


def _braid_command(argv: list[str]) -> tuple[str, dict[str, str]] | None:
    """The ``braid`` subcommand a command line runs and its ``--option value`` pairs, or None when
    it is not ``braid …`` / ``python -m node …``."""
    i = 1
    if os.path.basename(argv[0]) != "braid":
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "-m":
            i += 1  # the interpreter's own options
        if argv[i:i + 1] == ["-m"] and argv[i + 1:i + 2] in (["node"], ["node.cli"]):
            i += 2
        elif i < len(argv) and os.path.basename(argv[i]) == "braid":
            i += 1
        else:
            return None
    if argv[i:i + 1] and argv[i].startswith("--log-level"):
        i += 1 if "=" in argv[i] else 2
    if i >= len(argv):
        return None
    opts: dict[str, str] = {}
    rest = argv[i + 1:]
    for j, a in enumerate(rest):
        if a.startswith("--"):
            key, eq, value = a.partition("=")
            opts[key] = value if eq else (rest[j + 1] if j + 1 < len(rest) and not rest[j + 1].startswith("--")
                                          else "")
    return argv[i], opts


def _same_path(path: str, cwd: str, target: str) -> bool:
    return os.path.realpath(os.path.join(cwd, path)) == os.path.realpath(target)


def _region_name(pid: int, data_dir: str) -> str | None:
    """The name of the region of the cluster in ``data_dir`` that process ``pid`` runs, or None."""
    proc = _process(pid)
    if proc is None:
        return None
    argv, cwd = proc
    cmd = _braid_command(argv)
    if cmd is None or cmd[0] != "node":
        return None
    opts = cmd[1]
    if opts.get("--config") and opts.get("--region") and _same_path(opts["--config"], cwd,
                                                                    os.path.join(data_dir, CLUSTER_FILE)):
        return opts["--region"]
    if opts.get("--data-dir"):
        rdir = os.path.realpath(os.path.join(cwd, opts["--data-dir"]))
        if os.path.dirname(rdir) == os.path.realpath(data_dir):
            return os.path.basename(rdir)
    return None


def region_processes(data_dir: str) -> dict[int, str]:
    """Every running region of the cluster in ``data_dir``, however it was started: pid -> name."""
    found = {}
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid != os.getpid():
            name = _region_name(pid, data_dir)
            if name is not None:
                found[pid] = name
    return found


def _supervisor(data_dir: str, info: dict | None) -> int | None:
    """The pid of the foreground ``braid up`` running the cluster in ``data_dir``, if one runs."""
    pid = (info or {}).get("supervisor")
    proc = _process(pid) if isinstance(pid, int) and pid != os.getpid() else None
    if proc is None:
        return None
    cmd = _braid_command(proc[0])
    if cmd is None or cmd[0] != "up" or "--detach" in cmd[1] or "--add-region" in cmd[1]:
        return None
    return pid if _same_path(cmd[1].get("--data-dir") or "./data", proc[1], data_dir) else None


# ------------------------------------------------------------------ stopping
def _stop_children(procs: list[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every child, wait for all of them under one deadline, SIGKILL what is left."""
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)  # polling the children's exit under the deadline
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _stop_regions(pids: dict[int, str], data_dir: str, grace_s: float = STOP_GRACE_S) -> list[int]:
    """Stop regions of this cluster that are not our children (each pid checked again before each
    signal); the pids that could not be stopped."""
    def still(pid: int) -> bool:
        return _region_name(pid, data_dir) == pids[pid]

    for pid in pids:
        if still(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + grace_s
    while any(still(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)  # polling the regions' exit under the deadline
    for pid in pids:
        if still(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + 2.0
    while any(still(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [pid for pid in pids if still(pid)]


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _process(pid) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# ------------------------------------------------------------------ starting
def _exit_how(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}" + _EXIT_MEANS.get(code, "")


_EXIT_MEANS = {  # braid node's exit statuses (its --help)
    1: " (it could not load its data, listen, or use its ACL file or certificates)",
    2: " (a bad cluster file or region)",
    70: " (it fail-stopped - its state may be wrong, or it ran out of memory; a restart replays its log)",
}


def _log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 16384))
            tail = f.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return "    (no log)"
    return "\n".join(f"    | {line}" for line in tail) or "    (the log is empty)"


class StartError(Exception):
    """A region did not start: the message names it, its port and its log."""


@dataclass(slots=True)
class _Region:
    name: str
    port: int
    cmd: list[str]
    log: str
    proc: subprocess.Popen | None = None
    started: float = 0.0
    ready: bool = False
    quick_crashes: int = 0
    restart_at: float | None = None
    done: bool = False  # given up, or running as a process braid up did not start

    def start(self, detach: bool) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=detach)
        self.started, self.ready = time.monotonic(), False


def _region_command(data_dir: str, cluster_file: str | None, name: str, port: int, cmdline_tls: bool) -> list[str]:
    cmd = [sys.executable, "-m", "node", "node", "--port", str(port), "--data-dir", os.path.join(data_dir, name)]
    if cluster_file:
        cmd += ["--config", cluster_file, "--region", name]
    if cmdline_tls:  # a standalone or added region: its TLS settings on the command line
        for key, value in tls_region_config(name, port).items():
            cmd += [f"--{key}", os.path.join(data_dir, value) if key.endswith("-file") else str(value)]
    return cmd


def _wait_ready(regions: list[_Region], deadline_s: float = READY_TIMEOUT_S, what: str = "start-up") -> None:
    """Until every region answers PING; StartError naming the first that exited or timed out."""
    deadline = time.monotonic() + deadline_s
    pending = list(regions)
    while pending:
        for r in pending:
            code = r.proc.poll()
            if code is not None:
                raise StartError(f"{r.name} (port {r.port}) {_exit_how(code)} during {what}; its log, {r.log}, "
                                 f"ends with:\n{_log_tail(r.log)}")
        pending = [r for r in pending if not ping(r.port)]
        for r in regions:
            if r not in pending:
                r.ready = True
        if pending and time.monotonic() > deadline:
            late = pending[0]
            raise StartError(f"{late.name} (port {late.port}) did not answer within {deadline_s:.0f} s; its log, "
                             f"{late.log}, ends with:\n{_log_tail(late.log)}")
        if pending:
            time.sleep(0.05)  # polling interval while waiting for sockets, not synchronisation


def writable(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Does the region on this port take writes (``INFO crdt`` says it is not taking back its own
    operations from its peers, which every region of a cluster does after it starts)?"""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"*2\r\n$4\r\nINFO\r\n$4\r\ncrdt\r\n")
            reply = b""
            while b"\r\n" not in reply or len(reply) < _bulk_end(reply):
                chunk = s.recv(65536)
                if not chunk:
                    return False
                reply += chunk
    except (OSError, ValueError):
        return False
    return reply.startswith(b"$") and b"crdt_recovering:1" not in reply


def _bulk_end(reply: bytes) -> int:
    """Where a bulk reply whose first line ``reply`` holds ends (ValueError: not a bulk)."""
    header, _, _ = reply.partition(b"\r\n")
    if not header.startswith(b"$"):
        return len(reply)  # an error or another reply: nothing more to read
    return len(header) + 2 + max(int(header[1:]), 0) + 2


def _wait_writable(regions: list[_Region], deadline_s: float = 10.0) -> None:
    """Until every region takes writes (its peers told it the last of its own operations they
    hold: node/activeactive.py), so the first write after ``braid up`` is not answered LOADING;
    a region still waiting after ``deadline_s`` is named, and the cluster keeps starting."""
    deadline = time.monotonic() + deadline_s
    pending = [r for r in regions if not writable(r.port)]
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)  # polling interval while waiting for the handshakes, not synchronisation
        pending = [r for r in pending if not writable(r.port)]
    for r in pending:
        print(f"braid up: {r.name} still waits for its peers before it takes writes (LOADING); "
              f"its log: {r.log}", file=sys.stderr)


def _reuse_cluster(cluster_file: str, args: argparse.Namespace):
    """Write a new cluster file, or keep the one whose regions' data is in the directory; the
    cluster's configuration, or None (refused).

    The regions keep their append-only files under the data directory, so a second
    ``braid up`` restarts the same cluster (same id, token and settings); a cluster of
    another shape there is refused rather than mixed with it - unless its members were
    changed (``braid up --add-region``, ``braid-admin region remove``): then its
    members of the moment are restarted, whatever ``--regions`` says.
    """
    data_dir = os.path.dirname(os.path.abspath(cluster_file))
    wanted = local_cluster(args.regions, args.base_port, data_dir)
    if getattr(args, "tls", False):
        with_tls(wanted, os.path.dirname(os.path.abspath(cluster_file)))
    if os.path.exists(cluster_file):
        try:
            held = load(cluster_file)
        except (OSError, ValueError, KeyError) as e:
            print(f"braid up: {cluster_file}: {e}", file=sys.stderr)
            return None
        if any(r.data_dir is None for r in held.regions):  # a file written before regions named their folder
            for r in held.regions:
                r.data_dir = r.data_dir or os.path.join(data_dir, r.name)
            held.save(cluster_file)
        shape = [(r.name, r.port, r.repl_port, r.config.get("tls-port")) for r in held.regions]
        if shape == [(r.name, r.port, r.repl_port, r.config.get("tls-port")) for r in wanted.regions]:
            print(f"restarting the cluster {held.cluster_id} kept in {os.path.dirname(cluster_file)}")
            return held
        if held.epoch > 1:  # grown or shrunk while it ran: its members are what it is now
            print(f"restarting the cluster {held.cluster_id} kept in {os.path.dirname(cluster_file)} (members "
                  f"changed since it was made: {', '.join(r.name for r in held.live_regions())})")
            return held
        tls = "with" if any(r.config.get("tls-port") for r in held.regions) else "without"
        print(f"braid up: {os.path.dirname(cluster_file)} holds another cluster ({cluster_file}: "
              f"{len(held.regions)} regions from port {held.regions[0].port if held.regions else '?'}, {tls} TLS): "
              f"start it with the same --regions, --base-port and --tls, give another --data-dir, or remove the "
              f"folder to start afresh", file=sys.stderr)
        return None
    wanted.save(cluster_file)
    return wanted


TLS_DIR = "tls"  # under the data directory: the cluster CA and every certificate (braid up --tls)
TLS_PORT_OFFSET = 200  # a region's TLS client port: its plain port + 200


def tls_region_config(name: str, port: int) -> dict[str, str | int]:
    """A region's client-port TLS settings as ``braid up --tls`` writes them (paths relative to the
    data directory).  ``tls-auth-clients optional``: a client certificate is checked when one is
    presented, and ``redis-cli --tls --cacert`` alone also connects."""
    return {"tls-port": port + TLS_PORT_OFFSET, "tls-cert-file": f"{TLS_DIR}/{name}.crt",
            "tls-key-file": f"{TLS_DIR}/{name}.key", "tls-ca-cert-file": f"{TLS_DIR}/ca.crt",
            "tls-auth-clients": "optional"}


def with_tls(cfg, data_dir: str) -> None:
    """TLS everywhere in a local cluster file (kept in ``data_dir``): mutual TLS on the links,
    TLS on each client port."""
    d = os.path.join(data_dir, TLS_DIR)
    cfg.tls = LinkTls(os.path.join(d, "ca.crt"), d, os.path.join(d, "admin.crt"), os.path.join(d, "admin.key"))
    for r in cfg.regions:
        r.config.update(tls_region_config(r.name, r.port))


def tls_connect_line(data_dir: str, port: int) -> str:
    d = os.path.join(data_dir, TLS_DIR)
    return (f"redis-cli --tls --cacert {d}/ca.crt --cert {d}/client.crt --key {d}/client.key "
            f"-p {port + TLS_PORT_OFFSET}")


def _console() -> Console:
    """Rich's console; to a pipe or file, wide enough that no command or path is folded."""
    return Console() if sys.stdout.isatty() else Console(width=max(shutil.get_terminal_size().columns, 200))


def _redis_py_line(port: int) -> str:
    python = sys.executable
    if python.startswith(os.getcwd() + os.sep):
        python = os.path.relpath(python)
    return (f"{python} -c \"import redis; r = redis.Redis(port={port}); "
            f"print(r.xadd('rides', {{'id': 123}}), r.xrange('rides'))\"")


def _print_connect(console: Console, title: str, rows: list[tuple[str, int, int, str]]) -> None:
    """The table of regions: name, port, pid, how to connect, log; redis-py's line when redis-cli is missing."""
    have_cli = shutil.which("redis-cli") is not None
    table = Table(title=title)
    for col in ("region", "port", "pid", "connect with", "log"):
        table.add_column(col, overflow="fold")
    for name, port, pid, log in rows:
        table.add_row(name, str(port), str(pid), f"redis-cli -p {port}" if have_cli else "redis-py (below)", log)
    console.print(table)
    if not have_cli:  # printed whole, never wrapped: each line is a command to copy
        print("redis-cli is not installed (Debian: sudo apt-get install redis-tools); from Python, with "
              f"redis-py (installed with Braid):\n  {_redis_py_line(rows[0][1])}")


def _already_up(args: argparse.Namespace, data_dir: str, running: dict[int, str], supervisor: int | None) -> int:
    """``braid up`` over a cluster that runs: say so, how to reach it and how to stop it."""
    ports = {}
    try:
        ports = {r.name: r.port for r in load(os.path.join(data_dir, CLUSTER_FILE)).live_regions()}
    except (OSError, ValueError, KeyError):
        info = _load_pids(data_dir) or {"names": [], "ports": []}
        ports = dict(zip(info["names"], info["ports"]))
    by_name = {name: pid for pid, name in running.items()}
    how = f" (in the foreground: braid up, pid {supervisor})" if supervisor else ""
    print(f"the cluster in {args.data_dir} is already up{how}:")
    for name, port in ports.items() or [(n, 0) for n in by_name]:
        if name in by_name:
            print(f"  {name}: port {port}, pid {by_name[name]}: redis-cli -p {port}")
        else:
            print(f"  {name}: port {port}, not running: braid restart --region {name} --data-dir {args.data_dir}")
    print(f"stop it with: braid down --data-dir {args.data_dir}")
    return 0


def _plan(args: argparse.Namespace, data_dir: str):
    """The regions to start: (names, ports, replication ports, cluster file, tls, regions whose TLS goes on
    the command line), or an exit status after printing why not."""
    names = [f"region-{i}" for i in range(1, args.regions + 1)]
    ports = [args.base_port + i for i in range(len(names))]
    tls = getattr(args, "tls", False)
    cluster_file = os.path.join(data_dir, CLUSTER_FILE)
    if args.regions == 1:
        if os.path.exists(cluster_file):
            try:
                held = f"a cluster of {len(load(cluster_file).live_regions())} regions"
            except (OSError, ValueError, KeyError):
                held = "a cluster"
            print(f"braid up: {args.data_dir} holds {held} ({cluster_file}), and --regions 1 starts a standalone "
                  "region: run braid up without --regions 1 to start that cluster, or give another --data-dir",
                  file=sys.stderr)
            return 1
        return names, ports, [None], None, tls, set(names) if tls else set()
    standalone = os.path.join(data_dir, "region-1", "appendonlydir")
    if not os.path.exists(cluster_file) and os.path.isdir(standalone):
        print(f"braid up: {args.data_dir} holds a standalone region ({os.path.dirname(standalone)}, started with "
              "--regions 1) and no cluster file: start it with --regions 1, or give another --data-dir",
              file=sys.stderr)
        return 1
    cfg = _reuse_cluster(cluster_file, args)
    if cfg is None:
        return 1
    live = cfg.live_regions()
    tls = cfg.tls is not None
    return ([r.name for r in live], [r.port for r in live], [r.repl_port for r in live], cluster_file, tls,
            {r.name for r in live if tls and "tls-port" not in r.config})  # added by --add-region


def _ports_taken(names, ports, repl_ports, tls: bool) -> list[str]:
    """What stands in the way of each port the regions need (all of them, before anything starts)."""
    problems = []
    for name, port, repl in zip(names, ports, repl_ports):
        wanted = [(port, "client port")] + ([(repl, "replication port")] if repl else [])
        if tls:
            wanted.append((port + TLS_PORT_OFFSET, "TLS client port"))
        for p, what in wanted:
            if ping(p):
                problems.append(f"port {p} ({name}'s {what}) is already serving: another Braid or Redis server "
                                "(is a cluster running? try `braid down`)")
            elif not _port_free(p):
                problems.append(f"port {p} ({name}'s {what}) is in use by another program")
    return problems


def _ignore_stop_signals() -> None:
    """While stopping the regions: a second Ctrl-C or SIGTERM does not cut the clean-up short."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


class _Terminated(BaseException):
    """SIGTERM (or SIGHUP) to braid up: stop as Ctrl-C does."""


def _on_terminate(signum, frame):
    raise _Terminated


def up(args: argparse.Namespace) -> int:
    if getattr(args, "add_region", None) is not None:
        return add_region(args)
    if not 1 <= args.regions <= 15:
        print("braid up: --regions must be between 1 and 15", file=sys.stderr)
        return 2
    data_dir = os.path.abspath(args.data_dir)
    regions: list[_Region] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`&`)
    signal.signal(signal.SIGTERM, _on_terminate)
    signal.signal(signal.SIGHUP, _on_terminate)
    try:
        return _up(args, data_dir, regions)
    except (KeyboardInterrupt, _Terminated):
        _ignore_stop_signals()
        started = [r.proc for r in regions if r.proc is not None]
        _stop_children(started)
        orphans = _unrecorded_children(data_dir)
        _stop_regions(orphans, data_dir)
        started += list(orphans)
        if not args.detach:
            _forget(data_dir)
        print("braid up: interrupted during start-up"
              + (f"; stopped the {len(started)} region(s) it had started" if started else ""), file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _up(args: argparse.Namespace, data_dir: str, regions: list[_Region]) -> int:
    os.makedirs(data_dir, exist_ok=True)
    info = _load_pids(data_dir)
    running, supervisor = region_processes(data_dir), _supervisor(data_dir, info)
    if running or supervisor:
        return _already_up(args, data_dir, running, supervisor)
    plan = _plan(args, data_dir)
    if isinstance(plan, int):
        return plan
    names, ports, repl_ports, cluster_file, tls, cmdline_tls = plan
    problems = _ports_taken(names, ports, repl_ports, tls)
    if problems:
        print("braid up: nothing started:\n  " + "\n  ".join(problems) + "\npick other ports with --base-port "
              "(RESP on BASE.., replication on BASE+100.., TLS on BASE+200..) or stop what holds them",
              file=sys.stderr)
        return 1
    if tls:
        try:  # an existing CA and certificates are kept (a restart, or new regions of the same CA)
            create_cluster_certs(os.path.join(data_dir, TLS_DIR), names)
        except (OSError, ValueError) as e:
            print(f"braid up: cannot make the certificates under {os.path.join(data_dir, TLS_DIR)}: {e}",
                  file=sys.stderr)
            return 1
    print(f"starting {', '.join(names)} (logs: {os.path.join(args.data_dir, 'NAME', 'node.log')})", flush=True)
    for name, port in zip(names, ports):
        os.makedirs(os.path.join(data_dir, name), exist_ok=True)
        r = _Region(name, port, _region_command(data_dir, cluster_file, name, port, name in cmdline_tls),
                    os.path.join(data_dir, name, "node.log"))
        regions.append(r)
        r.start(args.detach)
    try:
        _wait_ready(regions)
    except StartError as e:
        _stop_children([r.proc for r in regions])
        print(f"braid up: {e}\nthe other regions are stopped", file=sys.stderr)
        return 1
    _wait_writable(regions)
    console = _console()
    title = f"Braid local cluster: {len(names)} region{'s' if len(names) > 1 else ''}"
    _print_connect(console, title, [(r.name, r.port, r.proc.pid, r.log) for r in regions])
    if tls:  # printed whole, never wrapped: each line is a command to copy
        print("TLS client ports (a client certificate is optional: `redis-cli --tls --cacert "
              f"{os.path.join(args.data_dir, TLS_DIR)}/ca.crt -p PORT` connects too):")
        for name, port in zip(names, ports):
            print(f"  {name}: {tls_connect_line(args.data_dir, port)}")
    record = {"pids": [r.proc.pid for r in regions], "ports": ports, "names": names}
    if args.detach:
        _save_pids(data_dir, record)
        print(f"detached; restart one region with: braid restart --region NAME --data-dir {args.data_dir}\n"
              f"stop with: braid down --data-dir {args.data_dir}")
        return 0
    _save_pids(data_dir, {**record, "supervisor": os.getpid(), "supervised": names})
    print("press Ctrl-C to stop (or run braid down); a region that dies is reported and started again", flush=True)
    try:
        _supervise(args, data_dir, regions)
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        _ignore_stop_signals()
        _stop_children([r.proc for r in regions if r.proc is not None])
        _stop_regions(_unrecorded_children(data_dir), data_dir)
        _forget(data_dir)
    print("stopped", flush=True)
    return 0


def _unrecorded_children(data_dir: str) -> dict[int, str]:
    """Regions this process started whose Popen an interrupt cut short (it came between the fork and
    the assignment): found among the cluster's regions by their parent pid."""
    mine = {}
    for pid, name in region_processes(data_dir).items():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if int(f.read().rsplit(b")", 1)[1].split()[1]) == os.getpid():
                    mine[pid] = name
        except (OSError, ValueError, IndexError):
            pass
    return mine


def _forget(data_dir: str) -> None:
    """Remove the foreground braid up's record (only its own)."""
    info = _load_pids(data_dir)
    if info is not None and info.get("supervisor") == os.getpid():
        os.remove(os.path.join(data_dir, PIDFILE))


def _supervise(args: argparse.Namespace, data_dir: str, regions: list[_Region]) -> None:
    """Watch the regions until Ctrl-C / SIGTERM: report a death, start the region again, say when it is back."""
    def say(text: str) -> None:
        print(f"braid up: {text}", flush=True)

    while True:
        now = time.monotonic()
        for r in regions:
            if r.done:
                continue
            if r.proc is not None:
                code = r.proc.poll()
                if code is None:
                    if not r.ready and ping(r.port):
                        r.ready = True
                        _record_pid(data_dir, r.name, r.port, r.proc.pid)
                        say(f"{r.name} is back on port {r.port} (pid {r.proc.pid}): it replayed its log and "
                            "catches up from its peers")
                    continue
                quick = not r.ready or now - r.started < QUICK_CRASH_S
                r.quick_crashes = r.quick_crashes + 1 if quick else 0
                others = [o.name for o in regions if o is not r and o.proc is not None and o.proc.poll() is None]
                say(f"{r.name} (port {r.port}, pid {r.proc.pid}) {_exit_how(code)}"
                    + (f"; {', '.join(others)} keep serving" if others else "")
                    + f". Its log, {r.log}, ends with:\n{_log_tail(r.log)}")
                r.proc = None
                if r.quick_crashes >= MAX_QUICK_CRASHES:
                    r.done = True
                    _unsupervise(data_dir, r.name)
                    say(f"{r.name} died {r.quick_crashes} times in a row within {QUICK_CRASH_S:.0f} s of its start: "
                        f"not starting it again. Once its log ({r.log}) says why and it is fixed: "
                        f"braid restart --region {r.name} --data-dir {args.data_dir}")
                    continue
                delay = 0 if r.quick_crashes == 0 else 2 ** (r.quick_crashes - 1)
                r.restart_at = now + delay
                say(f"starting {r.name} again" + (f" in {delay} s" if delay else ""))
            elif r.restart_at is not None and now >= r.restart_at:
                r.restart_at = None
                elsewhere = [pid for pid, name in region_processes(data_dir).items() if name == r.name]
                if elsewhere:
                    r.done = True
                    _unsupervise(data_dir, r.name)
                    say(f"{r.name} runs again as pid {elsewhere[0]}, started by another command: braid up leaves "
                        "it be (braid down stops it)")
                    continue
                problems = _ports_taken([r.name], [r.port], [None], False)
                if problems:
                    r.done = True
                    _unsupervise(data_dir, r.name)
                    say(f"not starting {r.name} again: {problems[0]}")
                    continue
                r.start(args.detach)
        if all(r.done for r in regions):
            say("no region left to watch")
            return
        time.sleep(POLL_S)  # the supervisor's look at its regions, not synchronisation


def _unsupervise(data_dir: str, name: str) -> None:
    """The foreground braid up no longer restarts ``name``: braid restart / down treat it as detached."""
    info = _load_pids(data_dir)
    if info is not None and name in info.get("supervised", []):
        info["supervised"].remove(name)
        _save_pids(data_dir, info)


def _record_pid(data_dir: str, name: str, port: int, pid: int) -> None:
    info = _load_pids(data_dir) or {"pids": [], "ports": [], "names": []}
    if name in info["names"]:
        info["pids"][info["names"].index(name)] = pid
    else:
        info["pids"].append(pid)
        info["ports"].append(port)
        info["names"].append(name)
    _save_pids(data_dir, info)


def _recorded_pid(data_dir: str, name: str) -> int | None:
    info = _load_pids(data_dir)
    if info is None or name not in info["names"]:
        return None
    return info["pids"][info["names"].index(name)]


def _load_pids(data_dir: str) -> dict | None:
    """The cluster's record: ``pids``, ``ports`` and ``names`` (one per region, in order); in the
    foreground also ``supervisor``, braid up's pid, and ``supervised``, the regions it restarts."""
    try:
        with open(os.path.join(data_dir, PIDFILE)) as f:
            info = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    info.setdefault("names", [f"region-{i}" for i in range(1, len(info["pids"]) + 1)])  # recorded before names were
    return info


def _save_pids(data_dir: str, info: dict) -> None:
    path = os.path.join(data_dir, PIDFILE)
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)


def _next_region_name(cfg) -> str:
    used = {r.name for r in cfg.regions}
    n = len(cfg.regions) + 1
    while f"region-{n}" in used:
        n += 1
    return f"region-{n}"


def add_region(args: argparse.Namespace) -> int:
    """``braid up --add-region [NAME]``: grow the detached cluster in ``--data-dir`` by one region."""
    data_dir = os.path.abspath(args.data_dir)
    cluster_file = os.path.join(data_dir, "cluster.toml")
    info = _load_pids(data_dir)
    if info is None or not os.path.exists(cluster_file):
        print(f"braid up: no detached cluster in {args.data_dir} to add a region to (start one with "
              f"`braid up --detach --data-dir {args.data_dir}`)", file=sys.stderr)
        return 1
    try:
        cfg = load(cluster_file)
    except (OSError, ValueError, KeyError) as e:
        print(f"braid up: {cluster_file}: {e}", file=sys.stderr)
        return 1
    name = args.add_region or _next_region_name(cfg)
    if any(r.name == name and r.live for r in cfg.regions):
        print(f"braid up: {name} is already a member of this cluster", file=sys.stderr)
        return 1
    # the next ports after every region the file ever listed (a removed region's may still be in use)
    port = max(r.port for r in cfg.regions) + 1
    repl_port = max(max(r.repl_port for r in cfg.regions) + 1, port + 100)
    for p in (port, repl_port, port + TLS_PORT_OFFSET if cfg.tls else port):
        if ping(p) or not _port_free(p):
            print(f"braid up: port {p} is in use: the new region needs it", file=sys.stderr)
            return 1
    if cfg.tls is not None:
        try:  # signed by the CA the cluster already trusts (it is kept)
            create_cluster_certs(os.path.join(data_dir, TLS_DIR), [name])
        except (OSError, ValueError) as e:
            print(f"braid up: cannot make the certificate of {name}: {e}", file=sys.stderr)
            return 1
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = admin_cli.main(["--cluster", cluster_file, "region", "add", name, "--host", "127.0.0.1",
                               "--port", str(port), "--repl-port", str(repl_port)])
    if code != 0:
        print(f"braid up: adding {name} failed: {err.getvalue().strip() or out.getvalue().strip()}", file=sys.stderr)
        return 1
    number = load(cluster_file).region(name).number
    rdir = os.path.join(data_dir, name)
    if os.path.isdir(rdir):  # a region of that name was here before (removed, then purged): start afresh
        shutil.rmtree(rdir)
    os.makedirs(rdir)
    region = _Region(name, port, _region_command(data_dir, cluster_file, name, port, cfg.tls is not None),
                     os.path.join(rdir, "node.log"))
    region.start(detach=True)
    _record_pid(data_dir, name, port, region.proc.pid)
    try:
        _wait_ready([region], what="its start")
    except StartError as e:
        print(f"braid up: {e}\n({name} stays a member: braid-admin --cluster {cluster_file} "
              f"region remove {name} --force)", file=sys.stderr)
        return 1
    _print_connect(_console(), f"{name} joined the cluster as region {number}",
                   [(name, port, region.proc.pid, region.log)])
    if cfg.tls is not None:
        print(f"  TLS: {tls_connect_line(args.data_dir, port)}")
    # printed whole, never wrapped: each line holds a command to copy
    print("It serves reads now and takes writes once it has caught up with its peers (until then writes "
          f"answer LOADING). Progress:\n  braid-admin --cluster {cluster_file} status\nTo remove it:\n"
          f"  braid-admin --cluster {cluster_file} region remove {name}\n"
          f"  braid down --region {name} --data-dir {args.data_dir}")
    return 0


def _named(pids: dict[int, str]) -> str:
    return ", ".join(f"{name} (pid {pid})" for pid, name in sorted(pids.items(), key=lambda kv: kv[1]))


def down(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    info = _load_pids(data_dir)
    supervisor = _supervisor(data_dir, info)
    running = region_processes(data_dir)
    name = getattr(args, "region", None)
    if name is not None:
        return _down_region(args, data_dir, name, info, running, supervisor)
    if info is None and not running and supervisor is None:
        print(f"braid down: no detached cluster recorded in {args.data_dir} and no region of it running",
              file=sys.stderr)
        return 1
    initial = dict(running)
    if supervisor is not None:  # the foreground braid up stops its regions itself (and would restart them)
        os.kill(supervisor, signal.SIGTERM)
        _wait_gone(supervisor, STOP_GRACE_S + 5)
        running = region_processes(data_dir)
    left = _stop_regions(running, data_dir)
    stopped = ([f"braid up (pid {supervisor})"] if supervisor is not None and _process(supervisor) is None else [])
    stopped += [f"{n} (pid {pid})" for pid, n in sorted(initial.items() | running.items(), key=lambda kv: kv[1])
                if pid not in left]
    ignored = sorted(set((info or {}).get("pids", [])) - set(initial) - set(running))
    if left or (supervisor is not None and _process(supervisor) is not None):
        still = {pid: running[pid] for pid in left}
        print(f"braid down: could not stop {_named(still) or f'braid up (pid {supervisor})'}; "
              f"{PIDFILE} is kept", file=sys.stderr)
        return 1
    if os.path.exists(os.path.join(data_dir, PIDFILE)):
        os.remove(os.path.join(data_dir, PIDFILE))
    print(f"stopped {', '.join(stopped)}" if stopped else "nothing was running (the record is removed)")
    if ignored:  # gone, or reused by another program: never signalled
        print(f"(recorded pid(s) {', '.join(map(str, ignored))} are no longer regions of this cluster: left alone)")
    return 0


def _down_region(args, data_dir: str, name: str, info: dict | None, running: dict[int, str],
                 supervisor: int | None) -> int:
    """``braid down --region NAME``: stop that region only."""
    mine = {pid: n for pid, n in running.items() if n == name}
    if not mine and info is not None and name in info["names"]:  # recorded, but gone: only the record is left
        _drop_from_record(data_dir, info, name)
        print(f"{name} was not running (its pid is no longer a region of this cluster): removed from {PIDFILE}")
        return 0
    if not mine:
        names = sorted(set(running.values()))
        print(f"braid down: no region named {name!r} runs in {args.data_dir} "
              f"(running: {', '.join(names) or 'none'})", file=sys.stderr)
        return 1
    if supervisor is not None and name in (info or {}).get("supervised", []):
        print(f"braid down: {name} runs under the foreground braid up (pid {supervisor}), which starts it again: "
              "stop the whole cluster (Ctrl-C there, or braid down)", file=sys.stderr)
        return 1
    left = _stop_regions(mine, data_dir)
    if left:
        print(f"braid down: could not stop {_named({pid: name for pid in left})}", file=sys.stderr)
        return 1
    if info is not None and name in info["names"]:
        _drop_from_record(data_dir, info, name)
    print(f"stopped {name} (pid {', '.join(map(str, mine))})")
    _warn_if_member(data_dir, name)
    return 0


def _drop_from_record(data_dir: str, info: dict, name: str) -> None:
    i = info["names"].index(name)
    for field in ("pids", "ports", "names"):
        del info[field][i]
    _save_pids(data_dir, info)


def restart(args: argparse.Namespace) -> int:
    """``braid restart --region NAME``: stop the region if it runs (only a process that really is that
    region of this cluster), start it detached with its log, wait until it answers."""
    data_dir = os.path.abspath(args.data_dir)
    name = args.region
    cluster_file = os.path.join(data_dir, CLUSTER_FILE)
    info = _load_pids(data_dir)
    repl_port = None
    if os.path.exists(cluster_file):
        try:
            cfg = load(cluster_file)
            spec = cfg.region(name)
        except (OSError, ValueError, KeyError) as e:
            print(f"braid restart: {cluster_file}: {e}", file=sys.stderr)
            return 1
        if not spec.live:
            print(f"braid restart: {name} was removed from the database ({cluster_file})", file=sys.stderr)
            return 1
        port, repl_port = spec.port, spec.repl_port
        cmd = _region_command(data_dir, cluster_file, name, port, cfg.tls is not None and "tls-port" not in spec.config)
    elif info is not None and name in info["names"]:  # a standalone region (braid up --regions 1)
        port = info["ports"][info["names"].index(name)]
        cmd = _region_command(data_dir, None, name, port, False)
        if os.path.isdir(os.path.join(data_dir, TLS_DIR)):
            cmd = _region_command(data_dir, None, name, port, True)
        cluster_file = None
    else:
        print(f"braid restart: no cluster in {args.data_dir} (no {CLUSTER_FILE}, and no region {name!r} recorded)",
              file=sys.stderr)
        return 1
    running = {pid: n for pid, n in region_processes(data_dir).items() if n == name}
    supervisor = _supervisor(data_dir, info)
    if supervisor is not None and running and name in (info or {}).get("supervised", []):
        print(f"{name} runs under the foreground braid up (pid {supervisor}): stopping it, braid up starts it again",
              flush=True)
        if _stop_regions(running, data_dir):
            print(f"braid restart: could not stop {_named(running)}", file=sys.stderr)
            return 1
        deadline = time.monotonic() + READY_TIMEOUT_S + 5
        while time.monotonic() < deadline:
            back = [pid for pid, n in region_processes(data_dir).items() if n == name and pid not in running]
            if back and ping(port) and _recorded_pid(data_dir, name) == back[0]:  # braid up knows it too
                print(f"{name} is back on port {port} (pid {back[0]})")
                return 0
            time.sleep(0.1)  # polling the foreground braid up's restart under a deadline
        print(f"braid restart: {name} did not come back within {READY_TIMEOUT_S + 5:.0f} s: see braid up's output "
              f"and {os.path.join(data_dir, name, 'node.log')}", file=sys.stderr)
        return 1
    if running:
        left = _stop_regions(running, data_dir)
        if left:
            print(f"braid restart: could not stop {_named(running)}", file=sys.stderr)
            return 1
        print(f"stopped {_named(running)}", flush=True)
    problems = _ports_taken([name], [port], [repl_port], False)
    if problems:
        print(f"braid restart: not starting {name}: {problems[0]} (not by {name} of this cluster)", file=sys.stderr)
        return 1
    os.makedirs(os.path.join(data_dir, name), exist_ok=True)
    region = _Region(name, port, cmd, os.path.join(data_dir, name, "node.log"))
    region.start(detach=True)
    try:
        _wait_ready([region], what="its start")
    except StartError as e:
        print(f"braid restart: {e}", file=sys.stderr)
        return 1
    _record_pid(data_dir, name, port, region.proc.pid)
    print(f"{name} runs again on port {port} (pid {region.proc.pid}, detached; log: {region.log}): it replayed its "
          f"log and catches up from its peers")
    return 0


def _warn_if_member(data_dir: str, name: str) -> None:
    """Stopping a region that is still a member only takes it down: the others wait for it."""
    try:
        cfg = load(os.path.join(data_dir, CLUSTER_FILE))
    except (OSError, ValueError, KeyError):
        return
    if any(r.name == name and r.live for r in cfg.regions):
        print(f"braid down: {name} is still a member of the database (down, not removed): the others keep its "
              f"place; to shrink the cluster run braid-admin --cluster {os.path.join(data_dir, CLUSTER_FILE)} "
              f"region remove {name} [--force]", file=sys.stderr)
