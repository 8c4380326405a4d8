"""Benchmark: one client's round trips at region 1 of three against a standalone region.

``python -m bench.roundtrip [--ops N] [--runs R] [--rate R] [--redis PATH]`` (not part of ``make bench``):

Starts a three-region cluster on loopback (``node.testing.LocalCluster``: every region
with the cluster's default settings, ``appendfsync everysec`` with its fsyncs for
replication), one standalone region (``BraidProcess``, appendonly on, ``everysec``) and,
with ``--redis``, a ``redis-server`` (``--appendonly yes --appendfsync everysec``) side by
side.  Then one redis-py client does ``N`` sequential XADDs (and ``N`` PINGs) at each
target in turn, R runs interleaved (each target once per run, so a noisy neighbour hits
all of them alike), and prints ops/s and the per-operation latency p50 / p99 / p99.9 of
the median run.  A measurement, not a test.

Rates swing with the machine's load; what each operation costs does less.  So for every
XADD run it also records the CPU time (user + system, ``/proc/PID/stat``) each Braid
process spent from just before the run until every region holds its operations, and the
replication frames each region sent and received (``INFO crdt``), and prints their medians
per operation: ``r1 r2 r3`` for the cluster's regions, then the standalone region.  What a
region spends per second whatever the load (replication frames paced by time, fsyncs) is
spread over more operations the faster the client goes, so to compare two versions of the
code at the same frame rate ``--rate`` paces the XADDs (operations offered per second).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import redis

from node.testing import BraidProcess, LocalCluster, free_port, wait_in_sync, wait_until

PAYLOAD = {"f1": "abcdefghijkl", "f2": "abcdefghijkl"}


def _run(client: redis.Redis, what: str, n: int, rate: float = 0.0) -> list[float]:
    """Per-operation latencies (seconds) of ``n`` sequential commands (XADDs at most ``rate``
    a second, when given)."""
    clock = time.perf_counter
    lat = []
    append = lat.append
    if what == "XADD":
        xadd = client.xadd
        start = clock()
        for k in range(n):
            if rate:
                pause = start + k / rate - clock()
                if pause > 0:
                    time.sleep(pause)  # pacing the offered load, not synchronising
            t0 = clock()
            xadd("rt:s", PAYLOAD)
            append(clock() - t0)
    else:
        ping = client.ping
        for _ in range(n):
            t0 = clock()
            ping()
            append(clock() - t0)
    return lat


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _frames(port: int) -> tuple[int, int]:
    """(frames sent, frames received) over the region's replication links so far."""
    c = redis.Redis(host="127.0.0.1", port=port, protocol=2)
    try:
        info = c.info("crdt")
    finally:
        c.close()
    return int(info.get("crdt_frames_sent", 0)), int(info.get("crdt_frames_received", 0))


def _pct(xs: list[float], p: float) -> float:
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _summary(lat: list[float]) -> tuple[float, float, float, float]:
    """(ops/s, p50 ms, p99 ms, p99.9 ms)."""
    xs = sorted(lat)
    return len(xs) / sum(xs), _pct(xs, 0.5) * 1e3, _pct(xs, 0.99) * 1e3, _pct(xs, 0.999) * 1e3


class _Redis:
    """A reference ``redis-server`` with an append-only file, fsync every second."""

    def __init__(self, binary: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="rt-redis-")
        self.port = free_port()
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--dir", self.dir, "--save", "",
                                      "--appendonly", "yes", "--appendfsync", "everysec"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self._answers(), 30.0, what="redis-server")

    def _answers(self) -> bool:
        try:
            return redis.Redis(port=self.port).ping()
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=5000, help="sequential commands per run and target")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", type=float, default=0.0, help="XADDs offered per second (default: as fast as it goes)")
    ap.add_argument("--redis", default=None, help="a redis-server binary to measure beside Braid")
    args = ap.parse_args(argv)
    cluster = LocalCluster(3).start()
    cluster.links_wait(60)  # measure the steady state: every link up, none relaying
    single = BraidProcess().start()
    ref = _Redis(args.redis) if args.redis else None
    try:
        targets = {"region 1 of 3": cluster.procs[0].port, "standalone region": single.port}
        if ref is not None:
            targets["redis-server"] = ref.port
        clients = {name: redis.Redis(host="127.0.0.1", port=port, protocol=2) for name, port in targets.items()}
        for c in clients.values():
            _run(c, "XADD", 200)  # warm up: connections, first stream blocks
            _run(c, "PING", 200)
        results: dict[tuple[str, str], list[tuple]] = {}
        # per XADD run at the cluster / the standalone region: CPU µs and frames per operation
        cost: dict[str, list[list[float]]] = {"region 1 of 3": [], "standalone region": []}
        procs = {"region 1 of 3": cluster.procs, "standalone region": [single]}
        for _ in range(args.runs):
            for what in ("XADD", "PING"):
                for name, c in clients.items():
                    measured = procs.get(name) if what == "XADD" else None
                    if measured:
                        cpu0 = [_cpu_seconds(p.pid) for p in measured]
                        frames0 = [_frames(p.port) for p in measured]
                    results.setdefault((name, what), []).append(_summary(_run(c, what, args.ops, args.rate)))
                    if measured:
                        if len(measured) > 1:  # until the other regions applied the run's operations
                            wait_in_sync([p.client() for p in measured], timeout=120)
                        cpu = [(_cpu_seconds(p.pid) - b) / args.ops * 1e6 for p, b in zip(measured, cpu0, strict=True)]
                        frames = [(f[0] - b[0] + f[1] - b[1]) / args.ops
                                  for f, b in zip((_frames(p.port) for p in measured), frames0, strict=True)]
                        cost[name].append(cpu + frames)
        print(f"{args.ops} sequential commands per run, median of {args.runs} runs "
              f"(load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores)")
        print(f"{'target':<20} {'cmd':<5} {'ops/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9}  runs (ops/s)")
        for (name, what), runs in results.items():
            rate = statistics.median(r[0] for r in runs)
            mid = min(runs, key=lambda r: abs(r[0] - rate))
            print(f"{name:<20} {what:<5} {rate:>8,.0f} {mid[1]:>8.3f} {mid[2]:>8.3f} {mid[3]:>9.3f}  "
                  + " ".join(f"{r[0]:,.0f}" for r in runs))
        print("XADD cost per operation, medians of the runs (CPU µs of each region process from the "
              "run's start until every region applied it; replication frames sent + received)")
        for name, rows in cost.items():
            n = len(rows[0]) // 2
            med = [statistics.median(r[i] for r in rows) for i in range(2 * n)]
            labels = [f"r{i + 1}" for i in range(n)] if n > 1 else ["region"]
            print(f"{name:<20} CPU µs/op " + " ".join(f"{lab} {v:.1f}" for lab, v in zip(labels, med[:n], strict=True))
                  + (f" (sum {sum(med[:n]):.1f})" if n > 1 else "")
                  + "   frames/op " + " ".join(f"{lab} {v:.3f}" for lab, v in zip(labels, med[n:], strict=True)))
        for c in clients.values():
            c.close()
    finally:
        if ref is not None:
            ref.stop()
        single.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
