"""Benchmark: three regions on loopback against one standalone region.

``python -m bench.replication [--quick] [--out PATH]`` (part of ``make bench``):

- throughput: ``redis-benchmark`` XADD c50 P1 against region 1 of a three-region
  cluster, and against a standalone region, side by side;
- replication delay: a writer adds entries at region 1 at a fixed rate, each
  carrying its send time; readers blocked on XREAD at regions 2 and 3 record when
  each entry becomes readable there; p50 / p99 of the delay.

Writes ``bench/RESULTS-replication.md``.  A measurement, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

from rich.console import Console

from node.testing import BraidProcess, LocalCluster

PAYLOAD = ["f1", "abcdefghijkl", "f2", "abcdefghijkl"]


def _benchmark(port: int, n: int, clients: int, pipeline: int, *command: str) -> float:
    """Requests per second that ``redis-benchmark --csv`` reports."""
    argv = ["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(n),
            "-P", str(pipeline), "--csv", *command]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=True).stdout
    last = [line for line in out.splitlines() if line.startswith('"')][-1]
    return float(last.split(",")[1].strip('"'))


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def delays(cluster: LocalCluster, rate: int, seconds: float) -> dict[str, list[float]]:
    total = int(rate * seconds)
    seen: dict[str, list[float]] = {"region-2": [], "region-3": []}
    ready = threading.Barrier(3)

    def reader(index: int, name: str) -> None:
        c = cluster.procs[index].client()
        last = "$"
        ready.wait()
        while len(seen[name]) < total:
            reply = c.xread({"lat": last}, block=5000, count=1000)
            now = time.time()
            if not reply:
                break
            for eid, fields in reply[0][1]:
                seen[name].append(now - float(fields[b"t"]))
                last = eid
        c.close()

    threads = [threading.Thread(target=reader, args=(i, n)) for i, n in ((1, "region-2"), (2, "region-3"))]
    for t in threads:
        t.start()
    ready.wait()
    writer = cluster.procs[0].client()
    start = time.monotonic()
    for k in range(total):
        target = start + k / rate
        pause = target - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing the offered load, not synchronising
        writer.xadd("lat", {"t": repr(time.time())})
    writer.close()
    for t in threads:
        t.join(60)
    return seen


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rate", type=int, default=1000, help="entries per second offered at region 1")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "RESULTS-replication.md"))
    args = ap.parse_args(argv)
    console = Console()
    n = 20_000 if args.quick else 100_000
    seconds = 2.0 if args.quick else 10.0
    cmd = ["xadd", "bench:s", "*", *PAYLOAD]
    with BraidProcess() as single:
        single_rps = _benchmark(single.port, n, 50, 1, *cmd)
    with LocalCluster(3) as cluster:
        cluster_rps = _benchmark(cluster.procs[0].port, n, 50, 1, *cmd)
        cluster.sync_wait(120)
        lat = delays(cluster, args.rate, seconds)
    console.print(f"XADD c50 P1: standalone {single_rps:,.0f}/s, region 1 of 3 {cluster_rps:,.0f}/s")
    rows = []
    for region, xs in lat.items():
        rows.append((region, len(xs), pct(xs, 0.5) * 1000, pct(xs, 0.99) * 1000,
                     statistics.mean(xs) * 1000 if xs else float("nan")))
        console.print(f"{region}: {len(xs)} entries, p50 {rows[-1][2]:.2f} ms, p99 {rows[-1][3]:.2f} ms")
    lines = [
        "# Replication benchmark",
        "",
        f"Recorded {datetime.date.today().isoformat()} with `python -m bench.replication"
        f"{' --quick' if args.quick else ''}` on {_cpu()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}.",
        "All processes share the machine's cores (regions, load generator, readers).",
        "",
        "## Throughput",
        "",
        "| target | XADD c50 P1 (rps) |",
        "| --- | --- |",
        f"| standalone region | {single_rps:,.0f} |",
        f"| region 1 of a three-region cluster | {cluster_rps:,.0f} |",
        f"| ratio | {cluster_rps / single_rps:.2f} |",
        "",
        f"Command: `redis-benchmark -p PORT -c 50 -P 1 -n {n} --csv xadd bench:s * f1 abcdefghijkl f2 abcdefghijkl`",
        "",
        f"## Time until an entry written at region 1 is readable elsewhere ({args.rate}/s offered)",
        "",
        "| region | entries | p50 (ms) | p99 (ms) | mean (ms) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for region, count, p50, p99, mean in rows:
        lines.append(f"| {region} | {count} | {p50:.2f} | {p99:.2f} | {mean:.2f} |")
    lines.append("")
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    console.print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
