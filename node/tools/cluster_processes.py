"""The region processes of a local cluster (``braid up``, node/tools/cluster.py): finding which
processes are this cluster's, starting a region, waiting until it answers, stopping.

Theory of operation
-------------------
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
``braid up`` it leaves a mark naming the process it stops (``<data-dir>/NAME.restart``), stops
it, and ``braid up``, finding the mark, starts the region again at once and counts no crash.

A sharded region is one ``braid node`` supervisor and its ``braid node ... --shard K``
children (node/tools/shards.py): the supervisor counts as the region (stopping it stops its
shards, which also die with it), and its children are left to it; a shard started on its own
(by hand, ``--shard K``) counts as a region process of its own.  A sharded region is ready
when every shard's client port answers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from node.tools.cluster_files import CLUSTER_FILE, tls_region_config

READY_TIMEOUT_S = 30.0    # a region that does not answer PING by then failed to start
STOP_GRACE_S = 10.0       # SIGTERM, then SIGKILL past this (one deadline for every region)
LOG_TAIL_LINES = 8        # of a dead region's log, printed with the news


def ping(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Does a server answer PING on this port?"""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def port_free(port: int) -> bool:
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
def process_info(pid: int) -> tuple[list[str], str] | None:
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
        if argv[i:i + 1] == ["-m"] and argv[i + 1:i + 2] in (["node"], ["node.tools.cli"]):
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


def _region_of(pid: int, data_dir: str) -> tuple[str, str | None] | None:
    """The region of the cluster in ``data_dir`` that process ``pid`` runs, and its ``--shard``
    (None: the whole region, or a sharded region's supervisor); None: not a region of it."""
    proc = process_info(pid)
    if proc is None:
        return None
    argv, cwd = proc
    cmd = _braid_command(argv)
    if cmd is None or cmd[0] != "node":
        return None
    opts = cmd[1]
    shard = opts.get("--shard")
    if opts.get("--config") and opts.get("--region") and _same_path(opts["--config"], cwd,
                                                                    os.path.join(data_dir, CLUSTER_FILE)):
        return opts["--region"], shard
    if opts.get("--data-dir"):
        rdir = os.path.realpath(os.path.join(cwd, opts["--data-dir"]))
        if os.path.dirname(rdir) == os.path.realpath(data_dir):
            return os.path.basename(rdir), shard
    return None


def _region_name(pid: int, data_dir: str) -> str | None:
    """The name of the region of the cluster in ``data_dir`` that process ``pid`` runs, or None."""
    found = _region_of(pid, data_dir)
    return found[0] if found else None


def parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _cluster_processes(data_dir: str) -> dict[int, tuple[str, str | None]]:
    """Every running process of the cluster in ``data_dir``: pid -> (region, its --shard or None)."""
    found: dict[int, tuple[str, str | None]] = {}
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid != os.getpid():
            region = _region_of(pid, data_dir)
            if region is not None:
                found[pid] = region
    return found


def region_processes(data_dir: str) -> dict[int, str]:
    """Every running region of the cluster in ``data_dir``, however it was started: pid -> name.  A
    sharded region counts once, as its supervisor (which stops and restarts its shards); a shard
    started on its own (``--shard K`` by hand) counts as a region process of its own."""
    found = _cluster_processes(data_dir)

    def supervised(pid: int, name: str, shard: str | None) -> bool:
        parent = parent_pid(pid) if shard is not None else None
        return parent is not None and found.get(parent) == (name, None)

    return {pid: name for pid, (name, shard) in found.items() if not supervised(pid, name, shard)}


def shard_processes(data_dir: str) -> dict[int, tuple[str, int]]:
    """Every running shard process of the cluster in ``data_dir`` (``--shard K``, supervised or not):
    pid -> (region, K)."""
    out = {}
    for pid, (name, shard) in _cluster_processes(data_dir).items():
        if shard is not None and shard.isdigit():
            out[pid] = (name, int(shard))
    return out


def supervisor_pid(data_dir: str, info: dict | None) -> int | None:
    """The pid of the foreground ``braid up`` running the cluster in ``data_dir``, if one runs."""
    pid = (info or {}).get("supervisor")
    proc = process_info(pid) if isinstance(pid, int) and pid != os.getpid() else None
    if proc is None:
        return None
    cmd = _braid_command(proc[0])
    if cmd is None or cmd[0] != "up" or "--detach" in cmd[1] or "--add-region" in cmd[1]:
        return None
    return pid if _same_path(cmd[1].get("--data-dir") or "./data", proc[1], data_dir) else None


# ------------------------------------------------------------------ stopping
def stop_children(procs: list[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
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


def stop_regions(pids: dict[int, str], data_dir: str, grace_s: float = STOP_GRACE_S) -> list[int]:
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


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while process_info(pid) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# ------------------------------------------------------------------ starting
def exit_how(code: int) -> str:
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


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
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
class RegionProcess:
    name: str
    port: int
    cmd: list[str]
    log: str
    proc: subprocess.Popen | None = None
    started: float = 0.0
    ready: bool = False
    quick_crashes: int = 0
    restart_at: float | None = None
    restart_asked: bool = False  # stopped by braid restart: started again at once, and no crash
    done: bool = False  # given up, or running as a process braid up did not start
    ports: list[int] = field(default_factory=list)  # a sharded region's: one client port per shard

    @property
    def all_ports(self) -> list[int]:
        """Its client ports: one per shard (its supervisor runs them), else ``port``."""
        return self.ports or [self.port]

    @property
    def where(self) -> str:
        return f"ports {', '.join(map(str, self.ports))}" if self.ports else f"port {self.port}"

    def silent(self) -> int | None:
        """The first of its client ports where nothing answers PING (None: every shard answers)."""
        return next((p for p in self.all_ports if not ping(p)), None)

    def start(self, detach: bool) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=detach)
        self.started, self.ready = time.monotonic(), False

    @property
    def process(self) -> subprocess.Popen:
        """``proc`` where the region was started and not found exited since."""
        if self.proc is None:
            raise RuntimeError(f"region {self.name} has no process")
        return self.proc


def region_command(data_dir: str, cluster_file: str | None, name: str, port: int, cmdline_tls: bool,
                   metrics_port: int = 0) -> list[str]:
    cmd = [sys.executable, "-m", "node", "node", "--port", str(port), "--data-dir", os.path.join(data_dir, name)]
    if metrics_port:  # a standalone region's (a cluster's regions read theirs from the cluster file)
        cmd += ["--metrics-port", str(metrics_port)]
    if cluster_file:
        cmd += ["--config", cluster_file, "--region", name]
    if cmdline_tls:  # a standalone or added region: its TLS settings on the command line
        for key, value in tls_region_config(name, port).items():
            cmd += [f"--{key}", os.path.join(data_dir, str(value)) if key.endswith("-file") else str(value)]
    return cmd


def wait_ready(regions: list[RegionProcess], deadline_s: float = READY_TIMEOUT_S, what: str = "start-up") -> None:
    """Until every region answers PING; StartError naming the first that exited or timed out."""
    deadline = time.monotonic() + deadline_s
    pending = list(regions)
    while pending:
        for r in pending:
            code = r.process.poll()
            if code is not None:
                raise StartError(f"{r.name} ({r.where}) {exit_how(code)} during {what}; its log, {r.log}, "
                                 f"ends with:\n{log_tail(r.log)}")
        pending = [r for r in pending if r.silent() is not None]
        for r in regions:
            if r not in pending:
                r.ready = True
        if pending and time.monotonic() > deadline:
            late = pending[0]
            raise StartError(f"{late.name} (port {late.silent() or late.port}) did not answer within "
                             f"{deadline_s:.0f} s; its log, {late.log}, ends with:\n{log_tail(late.log)}")
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


def wait_writable(regions: list[RegionProcess], deadline_s: float = 10.0) -> None:
    """Until every region takes writes (its peers told it the last of its own operations they
    hold: node/activeactive/recovery.py), so the first write after ``braid up`` is not answered LOADING;
    a region still waiting after ``deadline_s`` is named, and the cluster keeps starting."""
    deadline = time.monotonic() + deadline_s
    def waits(r: RegionProcess) -> bool:
        return not all(writable(p) for p in r.all_ports)

    pending = [r for r in regions if waits(r)]
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)  # polling interval while waiting for the handshakes, not synchronisation
        pending = [r for r in pending if waits(r)]
    for r in pending:
        print(f"braid up: {r.name} still waits for its peers before it takes writes (LOADING); "
              f"its log: {r.log}", file=sys.stderr)


def unrecorded_children(data_dir: str) -> dict[int, str]:
    """Regions this process started whose Popen an interrupt cut short (it came between the fork and
    the assignment): found among the cluster's regions by their parent pid."""
    return {pid: name for pid, name in region_processes(data_dir).items() if parent_pid(pid) == os.getpid()}

