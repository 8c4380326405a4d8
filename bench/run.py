"""Benchmark: Braid beside Debian's redis-server on loopback, same load, ratios.

``make bench`` (or ``python -m bench.run [--quick] [--only NAME[,NAME]] [--out PATH]``)
starts one Braid region and one redis-server (no persistence) on loopback, runs
``redis-benchmark`` against each, one after the other, with identical arguments,
then a memory run (1,000,000 XADDs of ``f1 <12 random chars> f2 <12 random chars>``
loaded with redis-py pipelines of 1,000), and writes the raw numbers and the
Braid/Redis ratios to ``bench/RESULTS.md``.  This is a measurement, not a test:
nothing here passes or fails, and no test depends on it.

Each scenario runs ``--repeat`` times (default 3) and the tables show each side's
median run; the server under test runs on one core and ``redis-benchmark`` on the
other (``--cores``, default ``0,1``).  ``region1of3_xadd_c50_p1`` measures what
Active-Active costs: region 1 of a three-region cluster against one standalone
region with the same persistence (regions 2 and 3 share the load generator's core;
``--peers-nice N`` runs them at a lower priority).  Every run also records the server's
CPU per request (all its threads, from ``/proc``), which the core layout does not move.
``--redis-server PATH`` (or ``$BRAID_BENCH_REDIS_SERVER``) compares with another
redis-server build, e.g. Redis 8.6.3, instead of the one on PATH.

Every run gets a fresh pair of servers, so one run's garbage or a
crash does not leak into the next.  Servers are always stopped (SIGTERM, then
SIGKILL after a grace period) from ``finally`` blocks; SIGTERM/SIGHUP to the
harness unwinds through them, and on Linux the servers also die with the
harness if it is killed outright (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import datetime
import io
import os
import platform
import random
import re
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import redis
from rich.console import Console
from rich.table import Table

from node.tools.cluster_processes import ping

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "RESULTS.md")
PARTIAL_OUT = os.path.join(HERE, "out", "RESULTS-partial.md")

PAYLOAD = ["f1", "abcdefghijkl", "f2", "abcdefghijkl"]
START_DEADLINE = 30.0      # seconds for both servers to answer PING
STOP_GRACE = 10.0          # seconds between SIGTERM and SIGKILL
BENCH_TIMEOUT = 1800.0     # seconds for one redis-benchmark run
MEMORY_BATCH = 1000        # XADDs per pipeline in the memory run
QUICK_DIVISOR = 10


# --------------------------------------------------------------------------- servers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL me if the harness dies (Linux only)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
    except Exception:
        pass


# Cores: the server under test on one, the load generator on the other, so they never
# compete for a core with each other (``--cores``; other work on the machine still can).
PIN = {"server": None, "load": None}   # sets of CPU numbers, or None (not pinned)
# region1of3: the niceness given to regions 2 and 3 (``--peers-nice``; 0: the load generator's)
PEERS_NICE = {"value": 0}


def set_cores(spec: str | None) -> str:
    """``SERVER,LOAD`` (e.g. ``0,1``), ``none``, or None: ``0,1`` on a machine with two cores or more."""
    if spec is None:
        spec = "0,1" if (os.cpu_count() or 1) >= 2 and hasattr(os, "sched_setaffinity") else "none"
    if spec == "none":
        PIN.update(server=None, load=None)
        return "not pinned"
    server, load = (int(x) for x in spec.split(","))
    PIN.update(server={server}, load={load})
    return f"server on CPU {server}, load generator on CPU {load}"


def _child_setup(role: str):
    """preexec_fn for a child: die with the harness, run on the role's core."""
    cores = PIN[role]

    def setup() -> None:
        _die_with_parent()
        if cores:
            os.sched_setaffinity(0, cores)
    return setup


def _each_thread(pid: int, change) -> None:
    """``change(tid)`` for every thread of a running process (one that exits meanwhile is skipped)."""
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                change(int(tid))


def renice_process(pid: int, nice: int) -> None:
    """Give every thread of a running process the niceness ``nice`` (threads it starts later
    inherit their creator's)."""
    _each_thread(pid, lambda tid: os.setpriority(os.PRIO_PROCESS, tid, nice))


def pin_process(pid: int, role: str) -> None:
    """Move every thread of a running process onto the role's cores (regions started by others)."""
    cores = PIN[role]
    if cores:
        _each_thread(pid, lambda tid: os.sched_setaffinity(tid, cores))


def settings_of(pairs: list[str], option: str) -> dict[str, str]:
    """``NAME=VALUE`` arguments of ``option`` as settings (ValueError naming a malformed one):
    what ``bench.replication --set``, ``bench.peercost --set/--against`` and
    ``bench.colocation --with`` set at every region."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not name or not sep:
            raise ValueError(f"{option} takes NAME=VALUE, not {pair!r}")
        out[name] = value
    return out


class Server:
    """One server subprocess in its own temp dir, on a free loopback port."""

    def __init__(self, label: str, extra: list[str] = ()) -> None:
        self.label = label
        self.extra = list(extra)  # more command-line arguments (e.g. the fsync policy)
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix=f"bench-{label}-")
        self.log_path = os.path.join(self.dir, f"{label}.log")
        self.proc: subprocess.Popen | None = None
        self._log = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def display_argv(self) -> str:
        """The command line with the port and temp dir as placeholders."""
        text = " ".join(a if a else "''" for a in self.argv())
        text = text.replace(self.dir, "$TMP").replace(str(self.port), "$PORT").replace(sys.executable, "python")
        exe = redis_server_exe()
        if exe and os.environ.get("BRAID_BENCH_REDIS_SERVER"):   # a build of one's own: where it is says nothing
            text = text.replace(exe, "$REDIS_SERVER")
        return text

    def spawn(self) -> None:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), cwd=self.dir, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=_child_setup("server"))

    def wait_ready(self, seconds: float | None = None) -> None:
        """Poll PING (with a deadline: START_DEADLINE by default) until the server answers;
        RuntimeError if it exits first."""
        limit = START_DEADLINE if seconds is None else seconds
        deadline = time.monotonic() + limit
        while not ping(self.port):
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.label} did not answer PING within {limit:.0f}s")
            time.sleep(0.02)  # polling a process we wait for, with a deadline

    def check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise RuntimeError(f"{self.label} exited with {code}: {self.log_tail()}")

    def log_tail(self, size: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-size:].decode("utf-8", "replace")
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, protocol=2, socket_timeout=120)

    def stop(self) -> None:
        """SIGTERM, wait STOP_GRACE, SIGKILL; then remove the temp dir.  Never raises."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=STOP_GRACE)
        except Exception as exc:  # a stop must not hide the error that led here
            print(f"warning: stopping {self.label} (pid {self.pid}): {exc}", file=sys.stderr)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
            shutil.rmtree(self.dir, ignore_errors=True)


class BraidServer(Server):
    def argv(self) -> list[str]:
        # in memory only unless asked, as the redis-server beside it (bench/durability.py compares logs)
        persistence = self.extra or ["--appendonly", "no"]
        return [sys.executable, "-m", "node", "--log-level", "WARNING", "node",
                "--port", str(self.port), "--data-dir", self.dir, *persistence]

    def spawn(self) -> None:
        self._env_pythonpath()
        super().spawn()

    @staticmethod
    def _env_pythonpath() -> None:
        # `python -m node` must find this checkout even when run from elsewhere
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if REPO not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([REPO, *[p for p in paths if p]])


def redis_server_exe() -> str | None:
    """The redis-server to compare with: ``$BRAID_BENCH_REDIS_SERVER`` (``--redis-server``), e.g. a
    Redis 8.6.3 built from Debian's source package, else the one on PATH (Debian's 7.0)."""
    return os.environ.get("BRAID_BENCH_REDIS_SERVER") or shutil.which("redis-server")


class RedisServer(Server):
    def argv(self) -> list[str]:
        exe = redis_server_exe()
        if exe is None:
            raise RuntimeError("redis-server is not installed: `make deps` installs it (Debian redis-server)")
        persistence = self.extra or ["--appendonly", "no"]
        return [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *persistence,
                "--dir", self.dir, "--daemonize", "no"]


@contextlib.contextmanager
def servers():
    """Braid and Redis started side by side, both answering PING, stopped on the way out."""
    pair = {"braid": BraidServer("braid"), "redis": RedisServer("redis")}
    try:
        for s in pair.values():
            s.spawn()
        for s in pair.values():  # started together: the second is mostly ready by then
            s.wait_ready()
        yield pair
    finally:
        for s in pair.values():
            s.stop()


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)


# --------------------------------------------------------------------------- helpers

def rss_bytes(pid: int) -> int:
    """VmRSS of ``pid`` plus all its descendants (a region may grow shard processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def used_memory(client: redis.Redis) -> int | None:
    try:
        value = client.info("memory").get("used_memory")
    except redis.RedisError:
        return None
    return int(value) if value is not None else None


def fill(client: redis.Redis, key: str, count: int, batch: int = MEMORY_BATCH) -> None:
    done = 0
    while done < count:
        n = min(batch, count - done)
        with client.pipeline(transaction=False) as p:
            for _ in range(n):
                p.execute_command("XADD", key, "*", *PAYLOAD)
            p.execute()
        done += n


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process (all its threads) used so far, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_benchmark(text: str) -> dict:
    """rps and latencies (ms) from ``redis-benchmark --csv`` output, or rps from ``-q`` output."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    if rows and rows[0] and rows[0][0] == "test":
        header = rows[0]
        data = [r for r in rows[1:] if len(r) == len(header)]
        if data:
            rec = dict(zip(header, data[-1], strict=True))
            return {k: float(v) for k, v in rec.items() if k != "test"}
    # -q: "xadd ...: 38461.54 requests per second, p50=0.087 msec" (after \r progress lines)
    found = re.findall(r"([0-9.]+) requests per second(?:, p50=([0-9.]+) msec)?", text)
    if found:
        rps, p50 = found[-1]
        out = {"rps": float(rps)}
        if p50:
            out["p50_latency_ms"] = float(p50)
        return out
    raise ValueError(f"no result in redis-benchmark output: {text[-500:]!r}")


# --------------------------------------------------------------------------- scenarios

@dataclass
class Scenario:
    name: str
    clients: int
    pipeline: int
    requests: int          # full run; --quick divides, --requests overrides
    command: list[str]
    prepare_note: str = ""
    # what it is compared with: "redis" (a redis-server beside one Braid region) or "standalone"
    # (region 1 of a three-region cluster beside one standalone Braid region: the cost of Active-Active)
    against: str = "redis"

    @property
    def load(self) -> str:
        return f"c{self.clients} P{self.pipeline}"

    def argv(self, port: int, requests: int) -> list[str]:
        return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(self.clients),
                "-n", str(requests), "-P", str(self.pipeline), "--csv", *self.command]

    def display(self, requests: int) -> str:
        cmd = " ".join(f"'{a}'" if a in ("*", ">") else a for a in self.command)
        return (f"redis-benchmark -h 127.0.0.1 -p $PORT -c {self.clients} -n {requests} "
                f"-P {self.pipeline} --csv {cmd}")

    def prepare(self, client: redis.Redis, requests: int) -> None:
        client.flushall()
        if self.name == "xrange_100":
            fill(client, "bench:r", 1000)
        elif self.name == "xreadgroup_count1":
            fill(client, "bench:g", self.group_fill(requests))
            client.xgroup_create("bench:g", "g", id="0")

    def group_fill(self, requests: int) -> int:
        # more entries than requests (+ what pipelines may issue beyond -n), so `>` never runs dry
        return requests + requests // 10 + self.clients * self.pipeline + 1000

    def check(self, client: redis.Redis, requests: int) -> str:
        """'ok', or what was wrong with the server's state after the run."""
        if self.name.startswith("xadd"):
            n = client.xlen("bench:s")
            return "ok" if n >= requests else f"XLEN bench:s = {n} < {requests}"
        if self.name == "xrange_100":
            n = len(client.execute_command("XRANGE", "bench:r", "-", "+", "COUNT", "100"))
            return "ok" if n == 100 else f"XRANGE returned {n} entries"
        if self.name == "xreadgroup_count1":
            n = client.xpending("bench:g", "g")["pending"]
            return "ok" if n >= requests else f"pending {n} < {requests} (reads returned nothing?)"
        return "ok"


XADD = ["xadd", "bench:s", "*", *PAYLOAD]
SCENARIOS = [
    Scenario("xadd_c1_p1", 1, 1, 100_000, XADD),
    Scenario("xadd_c50_p1", 50, 1, 500_000, XADD),
    Scenario("xadd_c50_p16", 50, 16, 2_000_000, XADD),
    Scenario("xrange_100", 50, 1, 100_000, ["xrange", "bench:r", "-", "+", "COUNT", "100"],
             "`bench:r` pre-filled with 1,000 entries (same payload)"),
    Scenario("xreadgroup_count1", 50, 1, 300_000,
             ["xreadgroup", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "bench:g", ">"],
             "`bench:g` pre-filled with requests × 1.1 + 1,800 entries (same payload), then "
             "`XGROUP CREATE bench:g g 0`"),
    Scenario("region1of3_xadd_c50_p1", 50, 1, 200_000, XADD, against="standalone"),
]
NAMES = [s.name for s in SCENARIOS] + ["memory"]


@dataclass
class Result:
    scenario: Scenario
    requests: int
    braid: dict = field(default_factory=dict)    # parsed csv: rps, latencies
    redis: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)   # label -> 'ok' / problem
    error: str = ""
    runs: dict = field(default_factory=dict)     # label -> every run's parsed csv (braid/redis is the median)

    @property
    def ratio(self) -> float | None:
        if self.braid.get("rps") and self.redis.get("rps"):
            return self.braid["rps"] / self.redis["rps"]
        return None


def _median_of(runs: list[dict], name: str) -> float | None:
    """The median of one number over the runs that have it (of an even count, the lower middle)."""
    values = sorted(d[name] for d in runs if d.get(name) is not None)
    return values[(len(values) - 1) // 2] if values else None


def _median_run(runs: list[dict]) -> dict:
    """The run with the median throughput (of an even count, the lower middle)."""
    ordered = sorted(runs, key=lambda d: d.get("rps") or 0.0)
    return ordered[(len(ordered) - 1) // 2]


@contextlib.contextmanager
def cluster_and_standalone():
    """Region 1 of a three-region cluster (pinned to the server core; regions 2 and 3 share the
    load generator's core) beside one standalone Braid region with the same persistence."""
    from node.testing import LocalCluster

    cluster = LocalCluster(3)
    alone = BraidServer("standalone", ["--appendonly", "yes"])
    try:
        cluster.start()
        cluster.links_wait(60)  # the steady state: every link up, none relaying
        for i, p in enumerate(cluster.procs):
            pin_process(p.proc.pid, "server" if i == 0 else "load")
            if i and PEERS_NICE["value"]:
                renice_process(p.proc.pid, PEERS_NICE["value"])
        alone.spawn()
        alone.wait_ready()
        first = Server.__new__(Server)           # a view of region 1 for the scenario's client and checks
        first.label, first.port, first.proc = "region-1 of 3", cluster.procs[0].port, cluster.procs[0].proc
        first.log_path = cluster.procs[0].log_path
        first.peers = [p.proc.pid for p in cluster.procs[1:]]  # their CPU per request is reported too
        yield {"braid": first, "redis": alone}
    finally:
        alone.stop()
        cluster.stop()


def run_scenario(sc: Scenario, requests: int, console: Console, repeat: int = 1) -> Result:
    """``repeat`` runs, each on a fresh pair of servers; the result is each side's median run."""
    res = Result(sc, requests)
    runs: dict[str, list[dict]] = {"braid": [], "redis": []}
    names = ({"braid": "braid", "redis": "redis"} if sc.against == "redis"
             else {"braid": "region-1 of 3", "redis": "standalone"})
    try:
        for attempt in range(repeat):
            with (servers() if sc.against == "redis" else cluster_and_standalone()) as pair:
                for label, srv in pair.items():     # one after the other, never concurrently
                    client = srv.client()
                    try:
                        sc.prepare(client, requests)
                        pids = [srv.proc.pid, *getattr(srv, "peers", [])]
                        cpu_before = [cpu_seconds(pid) for pid in pids]
                        proc = subprocess.run(sc.argv(srv.port, requests), capture_output=True, text=True,
                                              timeout=BENCH_TIMEOUT, preexec_fn=_child_setup("load"))
                        if proc.returncode != 0:
                            srv.check_alive()
                            raise RuntimeError(f"redis-benchmark against {names[label]} exited {proc.returncode}: "
                                               f"{(proc.stderr or proc.stdout).strip()[-500:]}")
                        run = parse_benchmark(proc.stdout)
                        # the server's CPU per request (all its threads; for region 1 of 3, each
                        # peer's too): what a request costs whatever shares the cores
                        cpu = [(cpu_seconds(pid) - before) / requests * 1e6
                               for pid, before in zip(pids, cpu_before, strict=True)]
                        run["cpu_us"], run["peer_cpu_us"] = cpu[0], cpu[1:]
                        runs[label].append(run)
                        check = sc.check(client, requests)
                        if res.checks.get(label, "ok") == "ok":
                            res.checks[label] = check
                    finally:
                        client.close()
                    console.print(f"  {sc.name} {names[label]} run {attempt + 1}/{repeat}: "
                                  f"{runs[label][-1]['rps']:,.0f} rps ({check})")
    except Exception as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        console.print(f"  [red]{sc.name} failed: {res.error}[/red]")
    res.runs = runs
    for label, done in runs.items():
        if done:
            setattr(res, label, _median_run(done))
    return res


def memory_run(entries: int, console: Console) -> dict:
    """Load ``entries`` XADDs into each server (fresh pair); raw before/after numbers."""
    out: dict = {"entries": entries}
    rng = random.Random(7)
    letters = string.ascii_letters + string.digits
    with servers() as pair:
        for label, srv in pair.items():
            client = srv.client()
            try:
                client.flushall()
                rec = {"used_before": used_memory(client), "rss_before": rss_bytes(srv.pid)}
                t0 = time.perf_counter()
                done = 0
                while done < entries:
                    n = min(MEMORY_BATCH, entries - done)
                    with client.pipeline(transaction=False) as p:
                        for _ in range(n):
                            p.execute_command("XADD", "bench:m", "*",
                                              "f1", "".join(rng.choices(letters, k=12)),
                                              "f2", "".join(rng.choices(letters, k=12)))
                        p.execute()
                    done += n
                rec["load_seconds"] = time.perf_counter() - t0
                rec["used_after"] = used_memory(client)
                rec["rss_after"] = rss_bytes(srv.pid)
                rec["xlen"] = client.xlen("bench:m")
            finally:
                client.close()
            for kind in ("used", "rss"):
                b, a = rec[f"{kind}_before"], rec[f"{kind}_after"]
                rec[f"{kind}_per_entry"] = (a - b) / entries if a is not None and b is not None else None
            out[label] = rec
            console.print(f"  memory {label}: RSS +{rec['rss_per_entry']:.1f} B/entry, used_memory "
                          f"+{_fmt(rec['used_per_entry'], '.1f')} B/entry, XLEN {rec['xlen']:,}")
    return out


# --------------------------------------------------------------------------- report

def _fmt(v, spec: str = ",.0f", missing: str = "n/a") -> str:
    return missing if v is None else format(v, spec)


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine() -> dict:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    mem = ""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        with open("/proc/meminfo") as f:
            kb = int(next(ln for ln in f if ln.startswith("MemTotal:")).split()[1])
            mem = f"{kb / 1024 / 1024:.1f} GiB"
    commit = _run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    dirty = _run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu, "cores": os.cpu_count(), "memory": mem,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "redis": _run([redis_server_exe() or "redis-server", "--version"]) or "not found",
        "benchmark": _run(["redis-benchmark", "--version"]) or "not found",
        "commit": (commit + (" (with uncommitted changes)" if dirty else "")) if commit else "unknown",
    }


def loadavg() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "n/a"


# The performance targets: Braid/Redis throughput at least this (region 1 of three: against a
# standalone region), Braid's bytes per entry at most this many times Redis's.
THROUGHPUT_TARGETS = {"xadd_c50_p1": 0.60, "xadd_c50_p16": 0.25, "xrange_100": 0.45,
                      "xreadgroup_count1": 0.50, "region1of3_xadd_c50_p1": 0.60}
MEMORY_TARGET = 1.1


def targets(results: list[Result], mem: dict) -> list[str]:
    out = []
    for r in results:
        goal = THROUGHPUT_TARGETS.get(r.scenario.name)
        if goal is None or r.ratio is None:
            continue
        verdict = "met" if r.ratio >= goal else "missed"
        other = "a standalone region" if r.scenario.against == "standalone" else "Redis"
        out.append(f"- {r.scenario.name} ({r.scenario.load}) at least {goal:.2f} × {other}: "
                   f"**{r.ratio:.2f}** ({r.braid['rps']:,.0f} against {r.redis['rps']:,.0f} requests/s, "
                   f"medians of {len(r.runs.get('braid', []))}) — {verdict}.")
    if mem:
        b, r = mem["braid"], mem["redis"]
        if b["rss_per_entry"] is not None and r["used_per_entry"]:
            ratio = b["rss_per_entry"] / r["used_per_entry"]
            verdict = "met" if ratio <= MEMORY_TARGET else "missed"
            out.append(f"- Memory at most {MEMORY_TARGET}× Redis's bytes per entry: **{ratio:.2f}×** (Braid RSS "
                       f"growth {b['rss_per_entry']:.1f} B against Redis `used_memory` growth "
                       f"{r['used_per_entry']:.1f} B per entry) — {verdict}.")
        if b["rss_per_entry"] is not None and r["rss_per_entry"]:
            out.append(f"  - RSS against RSS: {b['rss_per_entry'] / r['rss_per_entry']:.2f}×.")
        if b["used_per_entry"] is not None and r["used_per_entry"]:
            out.append(f"  - `used_memory` against `used_memory` (Braid's is an estimate): "
                       f"{b['used_per_entry'] / r['used_per_entry']:.2f}×.")
    return out or ["- (no target measured in this run)"]


def write_results(path: str, m: dict, results: list[Result], mem: dict, invocation: str,
                  load: tuple[str, str], server_cmds: dict) -> None:
    lines = [
        "# Benchmark results",
        "",
        f"Recorded {m['date']} with `{invocation}` at commit {m['commit']}. Braid and Redis run side "
        "by side on loopback (no persistence on either); `redis-benchmark` runs against one server, "
        "then the other, with the same arguments. Each run starts a fresh pair of servers; each "
        f"scenario runs {m['repeat']} times and the tables show each side's median run. Cores: "
        f"{m['cores_used']}.",
        "Other work on the machine can move these numbers: load average "
        f"{load[0]} at the start, {load[1]} at the end.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores; memory {m['memory'] or 'n/a'}; {m['kernel']}",
        f"- Python: {m['python']} (runs Braid and the harness)",
        f"- Redis: {m['redis']}" + (" (`$REDIS_SERVER`, given with --redis-server)"
                                    if os.environ.get("BRAID_BENCH_REDIS_SERVER") else ""),
        f"- load generator: {m['benchmark']}",
        "",
        "## Servers",
        "",
        f"- Braid: `{server_cmds['braid']}`",
        f"- Redis: `{server_cmds['redis']}`",
        "",
    ]
    if results:
        lines += [
            "## Throughput",
            "",
            "| scenario | load | requests | Braid rps | Redis rps | Braid/Redis | Braid p50 / p99 ms "
            "| Redis p50 / p99 ms | checks |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in results:
            if r.scenario.against != "redis":
                continue
            if r.error:
                lines.append(f"| {r.scenario.name} | c{r.scenario.clients} P{r.scenario.pipeline} | {r.requests:,} "
                             f"| {_fmt(r.braid.get('rps'))} | {_fmt(r.redis.get('rps'))} | | | "
                             f"| failed: {r.error.replace('|', '/')[:300]} |")
                continue
            lat = {k: f"{_fmt(d.get('p50_latency_ms'), '.3f')} / {_fmt(d.get('p99_latency_ms'), '.3f')}"
                   for k, d in (("b", r.braid), ("r", r.redis))}
            checks = ", ".join(f"{k}: {v}" for k, v in r.checks.items() if v != "ok") or "ok"
            lines.append(f"| {r.scenario.name} | c{r.scenario.clients} P{r.scenario.pipeline} | {r.requests:,} "
                         f"| {r.braid['rps']:,.0f} | {r.redis['rps']:,.0f} | {r.ratio:.2f} "
                         f"| {lat['b']} | {lat['r']} | {checks} |")
        aa = [r for r in results if r.scenario.against == "standalone"]
        if aa:
            lines += ["", "Active-Active's cost: region 1 of a three-region cluster (appendonly on, `everysec`; "
                      "regions 2 and 3 on the load generator's core) against one standalone region with the "
                      "same persistence:", "",
                      "| scenario | load | requests | region 1 of 3 rps | standalone rps | ratio | "
                      "region 1 p50 / p99 ms | standalone p50 / p99 ms | checks |",
                      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
            for r in aa:
                if r.error:
                    lines.append(f"| {r.scenario.name} | {r.scenario.load} | {r.requests:,} | | | | | "
                                 f"| failed: {r.error.replace('|', '/')[:300]} |")
                    continue
                lat = {k: f"{_fmt(d.get('p50_latency_ms'), '.3f')} / {_fmt(d.get('p99_latency_ms'), '.3f')}"
                       for k, d in (("b", r.braid), ("r", r.redis))}
                checks = ", ".join(f"{k}: {v}" for k, v in r.checks.items() if v != "ok") or "ok"
                lines.append(f"| {r.scenario.name} | {r.scenario.load} | {r.requests:,} | {r.braid['rps']:,.0f} "
                             f"| {r.redis['rps']:,.0f} | {r.ratio:.2f} | {lat['b']} | {lat['r']} | {checks} |")
            for r in aa:
                b_cpu = _median_of(r.runs.get("braid", []), "cpu_us")
                s_cpu = _median_of(r.runs.get("redis", []), "cpu_us")
                peers = [_median_of([{"p": d["peer_cpu_us"][k]} for d in r.runs.get("braid", [])], "p")
                         for k in range(len((r.runs.get("braid") or [{}])[0].get("peer_cpu_us", [])))]
                if b_cpu and s_cpu:
                    lines += ["", f"CPU per request ({r.scenario.name}, medians of the runs): region 1 "
                              f"{b_cpu:.1f} µs, the standalone region {s_cpu:.1f} µs (standalone / region 1: "
                              f"{s_cpu / b_cpu:.2f}); regions 2 and 3, applying region 1's operations: "
                              + ", ".join(f"{p:.1f} µs" for p in peers) + ". Region 1's CPU per request does "
                              "not depend on what shares the cores; its throughput does (the peers share the "
                              "load generator's core here)."]
        lines += ["", "Ratios are Braid/Redis (above 1: Braid faster). Checks after each run: XLEN grew by at "
                  "least the request count (XADD), XRANGE returns 100 entries, the group's PEL holds at "
                  "least the request count (XREADGROUP).", "", "Exact commands (`$PORT` is the server's port):", ""]
        for r in results:
            lines.append(f"- {r.scenario.name}: `{r.scenario.display(r.requests)}`")
            if r.scenario.prepare_note:
                lines.append(f"  - before it, on each server: `FLUSHALL`; {r.scenario.prepare_note}")
        lines += ["", "Raw `redis-benchmark --csv` results of every run (latencies in ms):", "",
                  "| scenario | server | run | rps | avg | min | p50 | p95 | p99 | max | server CPU µs/request |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in results:
            names = ({"braid": "braid", "redis": "redis"} if r.scenario.against == "redis"
                     else {"braid": "region-1 of 3", "redis": "standalone"})
            for label in ("braid", "redis"):
                for n, d in enumerate(r.runs.get(label, []), 1):
                    lines.append(f"| {r.scenario.name} | {names[label]} | {n} | {_fmt(d.get('rps'), '.2f')} | "
                                 + " | ".join(_fmt(d.get(f"{k}_latency_ms"), ".3f")
                                              for k in ("avg", "min", "p50", "p95", "p99", "max"))
                                 + f" | {_fmt(d.get('cpu_us'), '.1f')} |")
        lines.append("")
    if mem:
        b, r = mem["braid"], mem["redis"]
        lines += [
            "## Memory",
            "",
            f"{mem['entries']:,} × `XADD bench:m * f1 <12 random chars> f2 <12 random chars>` into each "
            f"server (fresh pair, `FLUSHALL` first), sent by redis-py in pipelines of {MEMORY_BATCH:,} "
            "(characters from `[A-Za-z0-9]`, seeded). RSS is `VmRSS` from `/proc/<pid>/status` (Braid: "
            "summed over the process and its children); `used_memory` is from `INFO memory`.",
            "",
            "**Braid's primary number is its RSS growth.** Braid's `used_memory` is an estimate (the packed "
            "stream data only, and not yet complete while the memory accounting is being worked on), so it "
            "is shown but not used for the target.",
            "",
            "| | before (bytes) | after (bytes) | growth per entry (bytes) |",
            "| --- | ---: | ---: | ---: |",
        ]
        for _label, d, kind, name in (("braid", b, "rss", "Braid RSS (primary)"),
                                      ("braid", b, "used", "Braid `used_memory` (estimate)"),
                                      ("redis", r, "used", "Redis `used_memory`"),
                                      ("redis", r, "rss", "Redis RSS")):
            lines.append(f"| {name} | {_fmt(d[f'{kind}_before'])} | {_fmt(d[f'{kind}_after'])} "
                         f"| {_fmt(d[f'{kind}_per_entry'], '.1f')} |")
        lines += [
            "",
            f"Load time (redis-py, pipelined): Braid {b['load_seconds']:.1f} s, Redis {r['load_seconds']:.1f} s. "
            f"XLEN afterwards: Braid {b['xlen']:,}, Redis {r['xlen']:,}.",
            "",
        ]
    lines += ["## Targets", ""] + targets(results, mem) + [""]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    kept = kept_sections(path)  # read before opening the file for writing empties it
    with open(path, "w") as f:
        f.write("\n".join(lines) + kept)


def kept_sections(path: str) -> str:
    """The sections other benchmarks keep in the same file (``<!-- bench.NAME:start -->`` ..
    ``<!-- bench.NAME:end -->``, e.g. bench.pipeline's), read before it is rewritten."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    blocks = re.finditer(r"<!-- bench\.(\w+):start -->.*?<!-- bench\.\1:end -->", text, flags=re.S)
    return "".join("\n" + m.group(0) + "\n" for m in blocks)


def print_tables(console: Console, results: list[Result], mem: dict) -> None:
    if results:
        t = Table(title="Throughput: Braid vs Redis (loopback, one after the other)")
        for col in ("scenario", "load", "requests", "Braid rps", "Redis rps", "Braid/Redis",
                    "Braid p99 ms", "Redis p99 ms", "checks"):
            t.add_column(col, justify="right" if col not in ("scenario", "load", "checks") else "left")
        for r in results:
            if r.error:
                t.add_row(r.scenario.name, f"c{r.scenario.clients} P{r.scenario.pipeline}", f"{r.requests:,}",
                          "", "", "", "", "", f"[red]{r.error[:60]}[/red]")
                continue
            checks = ", ".join(f"{k}: {v}" for k, v in r.checks.items() if v != "ok") or "ok"
            if r.scenario.against == "standalone":
                checks += " (Braid = region 1 of 3, Redis column = a standalone region)"
            t.add_row(r.scenario.name, f"c{r.scenario.clients} P{r.scenario.pipeline}", f"{r.requests:,}",
                      f"{r.braid['rps']:,.0f}", f"{r.redis['rps']:,.0f}", f"{r.ratio:.2f}",
                      _fmt(r.braid.get("p99_latency_ms"), ".3f"), _fmt(r.redis.get("p99_latency_ms"), ".3f"), checks)
        console.print(t)
    if mem:
        t = Table(title=f"Memory: bytes per entry after {mem['entries']:,} XADDs")
        for col in ("", "Braid", "Redis", "Braid/Redis"):
            t.add_column(col, justify="right" if col else "left")
        b, r = mem["braid"], mem["redis"]

        def ratio(x, y):
            return f"{x / y:.2f}" if x is not None and y else "n/a"
        t.add_row("RSS growth", _fmt(b["rss_per_entry"], ".1f"), _fmt(r["rss_per_entry"], ".1f"),
                  ratio(b["rss_per_entry"], r["rss_per_entry"]))
        t.add_row("used_memory growth", _fmt(b["used_per_entry"], ".1f") + " (est.)",
                  _fmt(r["used_per_entry"], ".1f"), ratio(b["used_per_entry"], r["used_per_entry"]))
        t.add_row("[b]Braid RSS / Redis used_memory[/b]", "", "",
                  "[b]" + ratio(b["rss_per_entry"], r["used_per_entry"]) + "[/b]")
        console.print(t)
    for line in targets(results, mem):
        console.print(line.replace("**", ""))


# --------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"short runs: request counts / {QUICK_DIVISOR}, 100,000 entries in the memory run")
    ap.add_argument("--only", metavar="NAME[,NAME]",
                    help=f"run only these (comma-separated): {', '.join(NAMES)}, or 'throughput'")
    ap.add_argument("--requests", type=int, metavar="N",
                    help="requests for every throughput scenario (default: per scenario, see bench/README.md)")
    ap.add_argument("--entries", type=int, metavar="N", help="entries in the memory run (default 1,000,000)")
    ap.add_argument("--redis-server", metavar="PATH",
                    help="the redis-server to compare with (default $BRAID_BENCH_REDIS_SERVER, else the one on "
                         "PATH): a Redis 8.6.3 build gives the issue's reference numbers")
    ap.add_argument("--repeat", type=int, default=3, metavar="N",
                    help="runs per scenario, each on fresh servers; the tables show the median (default 3)")
    ap.add_argument("--cores", metavar="SERVER,LOAD",
                    help="pin the server under test to CPU SERVER and redis-benchmark to CPU LOAD "
                         "(default 0,1 with two cores or more; 'none' pins nothing)")
    ap.add_argument("--peers-nice", type=int, default=0, metavar="N",
                    help="region1of3: run regions 2 and 3 at niceness N (1-19), so that they take "
                         "the load generator's core only when it does not need it, as peers on "
                         "machines of their own would (default 0: they compete with it)")
    ap.add_argument("--out", metavar="PATH",
                    help=f"results file (default {os.path.relpath(DEFAULT_OUT, REPO)} for a full run, "
                         f"{os.path.relpath(PARTIAL_OUT, REPO)} with --quick/--only/--requests/--entries)")
    args = ap.parse_args(argv)
    wanted = set()
    for name in (args.only or "").split(","):
        name = name.strip()
        if not name:
            continue
        if name == "throughput":
            wanted.update(s.name for s in SCENARIOS)
        elif name in NAMES:
            wanted.add(name)
        else:
            ap.error(f"unknown --only name {name!r}; choose from {', '.join(NAMES)}, throughput")
    args.wanted = wanted or set(NAMES)
    for opt in ("requests", "entries", "repeat"):
        if getattr(args, opt) is not None and getattr(args, opt) <= 0:
            ap.error(f"--{opt} must be positive")
    if args.cores not in (None, "none") and not re.fullmatch(r"\d+,\d+", args.cores):
        ap.error("--cores takes SERVER,LOAD (two CPU numbers, e.g. 0,1) or none")
    if not 0 <= args.peers_nice <= 19:
        ap.error("--peers-nice takes a niceness from 0 to 19")
    partial = args.quick or args.only or args.requests or args.entries or args.repeat != 3 or args.peers_nice
    args.out = args.out or (PARTIAL_OUT if partial else DEFAULT_OUT)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.redis_server:
        if not os.access(args.redis_server, os.X_OK):
            print(f"--redis-server {args.redis_server}: not an executable file", file=sys.stderr)
            return 2
        os.environ["BRAID_BENCH_REDIS_SERVER"] = os.path.abspath(args.redis_server)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    for tool in ("redis-server", "redis-benchmark"):
        if (redis_server_exe() if tool == "redis-server" else shutil.which(tool)) is None:
            print(f"{tool} is not installed: `make deps` installs Debian's redis-server and redis-tools",
                  file=sys.stderr)
            return 2
    cores_used = set_cores(args.cores)
    PEERS_NICE["value"] = args.peers_nice
    if args.peers_nice:
        cores_used += f"; regions 2 and 3 of the Active-Active scenario at niceness {args.peers_nice}"
    console = Console()
    if not console.is_terminal:      # under make or a pipe rich assumes 80 columns: too narrow for the tables
        console = Console(width=150)
    invocation = "python -m bench.run" + ("" if argv is None and len(sys.argv) <= 1
                                          else " " + " ".join(sys.argv[1:] if argv is None else argv))
    if args.redis_server:
        invocation = invocation.replace(args.redis_server, "$REDIS_SERVER")
    load_start = loadavg()
    started = time.monotonic()
    results: list[Result] = []
    for sc in SCENARIOS:
        if sc.name not in args.wanted:
            continue
        n = args.requests or (max(sc.requests // QUICK_DIVISOR, 1000) if args.quick else sc.requests)
        console.print(f"[b]{sc.name}[/b]: {n:,} requests, c{sc.clients} P{sc.pipeline}")
        results.append(run_scenario(sc, n, console, args.repeat))
    mem: dict = {}
    if "memory" in args.wanted:
        entries = args.entries or (100_000 if args.quick else 1_000_000)
        console.print(f"[b]memory[/b]: {entries:,} XADDs into each server")
        try:
            mem = memory_run(entries, console)
        except Exception as exc:
            console.print(f"  [red]memory run failed: {type(exc).__name__}: {exc}[/red]")
    server_cmds = {"braid": BraidServer("braid"), "redis": RedisServer("redis")}
    try:
        cmds = {k: s.display_argv() for k, s in server_cmds.items()}
    finally:
        for s in server_cmds.values():
            s.stop()
    print_tables(console, results, mem)
    m = machine()
    m.update(repeat=args.repeat, cores_used=cores_used)
    write_results(args.out, m, results, mem, invocation, (load_start, loadavg()), cmds)
    console.print(f"written {args.out} in {time.monotonic() - started:.0f}s")
    failed = [r.scenario.name for r in results if r.error] + (["memory"] if "memory" in args.wanted and not mem
                                                              else [])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
