"""Benchmark: replication across an emulated WAN (regions in network namespaces).

``python -m bench.wan [--quick] [--delays 30,60,90] [--rates 1000,5000] [--cut 60] [--out PATH]``
(needs root; not part of ``make bench``):

Three regions, each in its own network namespace (:mod:`chaos.netns`), with
one-way delays per pair given by ``--delays`` (region 1-2, 1-3, 2-3).

- replication delay: a writer adds entries at region 1 at a fixed offered rate
  (batches every 10 ms, pipelined, each entry carrying its send time); readers
  blocked on XREAD at regions 2 and 3 record when each entry becomes readable
  there.  Reported: that time minus the link's one-way delay (what Braid adds
  to the network), p50 / p99, and the rate achieved;
- catch-up: region 3 is cut off from both others in the network for ``--cut``
  seconds while region 1 takes writes at 1,000/s; after the heal, the time
  until region 3 holds every operation region 1 has.

Writes ``bench/RESULTS-wan.md``.  A measurement, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import threading
import time

from chaos.netns import NetnsCluster
from node.testing import replication_status, version_vector

from .replication import _cpu, pct

TICK = 0.01  # the writer sends one pipelined batch per tick


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (to show what the delay line itself costs)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_at(cluster: NetnsCluster, key: str, rate: int, seconds: float) -> tuple[int, float]:
    """Offer ``rate`` XADD/s at region 1 for ``seconds``; (entries written, seconds it took)."""
    writer = cluster.procs[0].client()
    total, sent, start = int(rate * seconds), 0, time.monotonic()
    try:
        while sent < total:
            due = min(total, int((time.monotonic() - start) * rate) + 1)
            if due > sent:
                pipe = writer.pipeline(transaction=False)
                now = repr(time.time())
                for _ in range(due - sent):
                    pipe.xadd(key, {"t": now, "p": "abcdefghijkl"})
                pipe.execute()
                sent = due
            pause = start + sent / rate - time.monotonic()
            if pause > 0:
                time.sleep(min(pause, TICK))  # pacing the offered load, not synchronising
    finally:
        writer.close()
    return sent, time.monotonic() - start


def delays(cluster: NetnsCluster, rate: int, seconds: float) -> tuple[dict[int, list[float]], int, float]:
    key = f"wan:{rate}"
    total = int(rate * seconds)
    seen: dict[int, list[float]] = {2: [], 3: []}
    ready = threading.Barrier(3)

    def reader(region: int) -> None:
        c = cluster.procs[region - 1].client()
        one_way = cluster.base_shape(1, region).delay
        last = "$"
        ready.wait()
        while len(seen[region]) < total:
            reply = c.xread({key: last}, block=10000, count=2000)
            now = time.time()
            if not reply:
                break
            for eid, fields in reply[0][1]:
                seen[region].append(now - float(fields[b"t"]) - one_way)
                last = eid
        c.close()

    threads = [threading.Thread(target=reader, args=(r,)) for r in seen]
    for t in threads:
        t.start()
    ready.wait()
    written, took = write_at(cluster, key, rate, seconds)
    for t in threads:
        t.join(120)
    return seen, written, took


def catch_up(cluster: NetnsCluster, cut_s: float) -> tuple[int, float]:
    """Cut region 3 off for ``cut_s`` while region 1 takes 1,000 XADD/s; seconds until it caught up."""
    cluster.cut(1, 3)
    cluster.cut(2, 3)
    try:
        written, _ = write_at(cluster, "wan:cut", 1000, cut_s)
    finally:
        cluster.heal_network()
    healed = time.monotonic()
    c1, c3 = cluster.procs[0].client(), cluster.procs[2].client()
    try:
        target = version_vector(replication_status(c1))
        while True:
            vv = version_vector(replication_status(c3))
            if all(vv.get(o, 0) >= n for o, n in target.items()):
                return written, time.monotonic() - healed
            time.sleep(0.01)  # polling interval of the measurement
    finally:
        c1.close()
        c3.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 s per rate, a 10 s cut")
    ap.add_argument("--delays", default="30,60,90", help="one-way ms for the pairs 1-2, 1-3, 2-3")
    ap.add_argument("--rates", default="1000,5000", help="XADD/s offered at region 1")
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of load per rate")
    ap.add_argument("--cut", type=float, default=60.0, help="seconds region 3 is cut off")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "RESULTS-wan.md"))
    args = ap.parse_args(argv)
    seconds, cut_s = (2.0, 10.0) if args.quick else (args.seconds, args.cut)
    d12, d13, d23 = (float(x) / 1000 for x in args.delays.split(","))
    rates = [int(r) for r in args.rates.split(",")]
    rows, load = [], os.getloadavg()[0]
    with NetnsCluster(3, delay={(1, 2): d12, (1, 3): d13, (2, 3): d23}) as cluster:
        cluster.sync_wait()
        for rate in rates:
            cpu0 = cpu_seconds(cluster.wan.proc.pid)
            seen, written, took = delays(cluster, rate, seconds)
            line_cpu = (cpu_seconds(cluster.wan.proc.pid) - cpu0) / took * 100
            for region, xs in seen.items():
                rows.append((rate, written / took, line_cpu, region, cluster.base_shape(1, region).delay * 1000,
                             len(xs), pct(xs, 0.5) * 1000, pct(xs, 0.99) * 1000))
                print(f"{rate}/s offered ({written / took:,.0f}/s achieved, delay line {line_cpu:.0f} % CPU): "
                      f"region {region}: {len(xs)} entries, p50 {rows[-1][6]:.1f} ms, p99 {rows[-1][7]:.1f} ms "
                      f"over the one-way delay", flush=True)
        cluster.sync_wait(120)
        cut_written, caught = catch_up(cluster, cut_s)
        print(f"region 3 cut off {cut_s:.0f} s ({cut_written} entries written meanwhile): caught up {caught:.2f} s "
              f"after the heal", flush=True)
    lines = [
        "# Replication across an emulated WAN",
        "",
        f"Recorded {datetime.date.today().isoformat()} with `python -m bench.wan"
        f"{' --quick' if args.quick else ''} --delays {args.delays}` on {_cpu()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {load:.1f} at the start.",
        f"Three regions in network namespaces; one-way delay 1-2 {d12 * 1000:g} ms, 1-3 {d13 * 1000:g} ms, "
        f"2-3 {d23 * 1000:g} ms (the delay line of chaos/netns.py; no jitter, loss or bandwidth cap).",
        "",
        "## Time until an entry written at region 1 is readable elsewhere, minus the one-way delay",
        "",
        "| offered (XADD/s) | achieved (XADD/s) | delay line CPU | region | one-way (ms) | entries | p50 (ms) "
        "| p99 (ms) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rate, achieved, line_cpu, region, one_way, count, p50, p99 in rows:
        lines.append(f"| {rate:,} | {achieved:,.0f} | {line_cpu:.0f} % | {region} | {one_way:g} | {count} | {p50:.1f} "
                     f"| {p99:.1f} |")
    lines += ["", "## Catch-up", "",
              f"Region 3 cut off from both others (every packet dropped) for {cut_s:.0f} s while region 1 took "
              f"{cut_written:,} XADDs; it held every operation of region 1 **{caught:.2f} s** after the heal.", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
