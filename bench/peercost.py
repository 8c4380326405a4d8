"""What replication costs each region, at a fixed write rate: CPU microseconds per operation.

``python -m bench.peercost [--rate 2000,10000] [--seconds 8] [--runs 3] [--set NAME=VALUE ...]
[--against NAME=VALUE ...]``: a three-region cluster on loopback; one client adds entries at
region 1 (``bench.run``'s XADD payload, pipelined, paced to ``--rate`` per second); once every
region holds them all, each region's process CPU time (every thread, from ``/proc``) is
divided by the number of operations.  Region 2 runs alone on the second core (the cores
given by ``--cores``), region 1, region 3 and the writer on the first, so region 2's number
is not disturbed by a load generator sharing its core.

At a fixed rate each region receives the same frames a second (one per send interval) at any
rate, so the cost per operation falls as the rate rises: the difference between two rates
splits it into a part per frame and a part per operation.  ``--against`` runs the same
measurement with other settings (``CONFIG SET`` at every region before the writer starts),
alternating with ``--set``'s runs, and prints both: a change of pacing or of the log's fsync
interval shows up here long before it moves ``bench.run``'s throughput, whose load generator
shares a core with regions 2 and 3.  Not part of ``make bench``; no test depends on it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import redis

from bench.run import _each_thread as each_thread
from bench.run import cpu_seconds, settings_of
from node.testing import LocalCluster

FIELDS = {"f1": "abcdefghijkl", "f2": "abcdefghijkl"}
SEND_INTERVAL_S = 0.005  # the writer's pipelines: one per default send interval


def _pin(pid: int, core: int) -> None:
    each_thread(pid, lambda tid: os.sched_setaffinity(tid, {core}))


def measure(rate: int, seconds: float, settings: dict[str, str], cores: tuple[int, int]) -> list[float]:
    """CPU µs per operation of regions 1, 2 and 3 for one run."""
    mine = os.sched_getaffinity(0)
    with LocalCluster(3) as cluster:
        cluster.links_wait(60)
        clients = [redis.Redis(port=p.port) for p in cluster.procs]
        for c in clients:
            for name, value in settings.items():
                c.config_set(name, value)
        pids = [p.proc.pid for p in cluster.procs]
        for i, pid in enumerate(pids):
            _pin(pid, cores[1] if i == 1 else cores[0])
        os.sched_setaffinity(0, {cores[0]})
        try:
            per_pipeline = max(1, round(rate * SEND_INTERVAL_S))
            before = [cpu_seconds(pid) for pid in pids]
            start, issued = time.monotonic(), 0
            while time.monotonic() - start < seconds:
                pipe = clients[0].pipeline(transaction=False)
                for _ in range(per_pipeline):
                    pipe.xadd("bench:s", FIELDS)
                pipe.execute()
                issued += per_pipeline
                ahead = start + issued / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)  # pacing the writer, not waiting for an outcome
            deadline = time.monotonic() + 60
            while any(c.xlen("bench:s") < issued for c in clients):
                if time.monotonic() > deadline:
                    raise TimeoutError("the other regions did not receive every operation within 60 s")
                time.sleep(0.01)
            after = [cpu_seconds(pid) for pid in pids]
        finally:
            os.sched_setaffinity(0, mine)
    return [(a - b) * 1e6 / issued for a, b in zip(after, before, strict=True)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peercost", description=__doc__.splitlines()[0])
    p.add_argument("--rate", default="2000,10000", help="operations per second at region 1, comma-separated")
    p.add_argument("--seconds", type=float, default=8.0, help="how long the writer writes, per run")
    p.add_argument("--runs", type=int, default=3, help="runs per rate (and per setting); medians are printed")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a setting for every run")
    p.add_argument("--against", action="append", default=[], metavar="NAME=VALUE",
                   help="also measure with these settings (runs alternate with --set's)")
    p.add_argument("--cores", default="0,1", help="two cores: regions 1 and 3 and the writer; region 2")
    args = p.parse_args(argv)
    cores = tuple(int(c) for c in args.cores.split(","))
    if len(cores) != 2:
        raise SystemExit("--cores takes two core numbers")
    try:
        base = settings_of(args.set, "--set")
        variants = {"as set": base}
        if args.against:
            variants["against"] = {**base, **settings_of(args.against, "--against")}
    except ValueError as e:
        p.error(str(e))
    print(f"{'rate/s':>7}  {'settings':<8}  {'region 1':>8}  {'region 2':>8}  {'region 3':>8}   CPU µs per operation, "
          f"medians of {args.runs}")
    for rate in (int(r) for r in args.rate.split(",")):
        runs: dict[str, list[list[float]]] = {name: [] for name in variants}
        for _ in range(args.runs):
            for name, settings in variants.items():  # alternated: a drift of the machine hits both
                runs[name].append(measure(rate, args.seconds, settings, cores))
        for name, results in runs.items():
            medians = [statistics.median(r[i] for r in results) for i in range(3)]
            print(f"{rate:7d}  {name:<8}  " + "  ".join(f"{m:8.2f}" for m in medians))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
