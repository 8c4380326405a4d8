"""Benchmark: replication between regions with mutual TLS against plain text.

``python -m bench.tls_links [--quick] [--rate N]``: two three-region clusters on loopback,
one with ``tls = false`` and one with ``[tls]`` (certificates made by ``braid certs``' code),
measured the same way:

- delay: a writer adds entries at region 1 at a fixed rate, each carrying its send time;
  readers blocked on XREAD at regions 2 and 3 record when each becomes readable there
  (bench/replication.py's ``delays``); p50 / p99 / mean;
- catch-up: region 1's links are paused, N entries of 1 KB are written there, the links
  resume, and the time until regions 2 and 3 hold them all is taken (entries per second
  through the links: what the TLS layer costs in bulk).

Prints a table (and the ratios) for bench/README.md.  A measurement, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from rich.console import Console
from rich.table import Table

from node.testing import LocalCluster, replication_status, wait_until

from .replication import delays, pct


def catch_up(cluster: LocalCluster, entries: int) -> float:
    """Seconds for regions 2 and 3 to apply ``entries`` written at region 1 while its links were paused."""
    r1, r2, r3 = cluster.clients()
    r1.execute_command("BRAID.REPLICATION", "PAUSE")
    pipe = r1.pipeline(transaction=False)
    value = "x" * 1024
    for i in range(entries):
        pipe.xadd("bulk", {"v": value})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    target = replication_status(r1)["crdt_vv"]
    start = time.monotonic()
    r1.execute_command("BRAID.REPLICATION", "RESUME")
    wait_until(lambda: all(replication_status(c)["crdt_vv"] == target for c in (r2, r3)), 300, interval=0.01,
               what="regions 2 and 3 caught up")
    elapsed = time.monotonic() - start
    for c in (r1, r2, r3):
        c.close()
    return elapsed


def measure(tls: bool, rate: int, seconds: float, entries: int) -> dict:
    with LocalCluster(3, tls=tls) as cluster:
        cluster.sync_wait(60)
        lat = delays(cluster, rate, seconds)
        xs = lat["region-2"] + lat["region-3"]
        bulk = catch_up(cluster, entries)
    return {"count": len(xs), "p50": pct(xs, 0.5) * 1000, "p99": pct(xs, 0.99) * 1000,
            "mean": statistics.mean(xs) * 1000, "catch_up_s": bulk, "catch_up_rate": entries / bulk}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rate", type=int, default=1000, help="entries per second offered at region 1")
    args = ap.parse_args(argv)
    seconds = 2.0 if args.quick else 10.0
    entries = 20_000 if args.quick else 100_000
    results = {name: measure(tls, args.rate, seconds, entries) for name, tls in (("plain", False), ("mTLS", True))}
    table = Table(title=f"replication, {args.rate}/s offered for {seconds:g} s; catch-up of {entries} x 1 KB")
    for col in ("links", "entries", "p50 (ms)", "p99 (ms)", "mean (ms)", "catch-up (s)", "catch-up (entries/s)"):
        table.add_column(col)
    for name, r in results.items():
        table.add_row(name, str(r["count"]), f"{r['p50']:.2f}", f"{r['p99']:.2f}", f"{r['mean']:.2f}",
                      f"{r['catch_up_s']:.2f}", f"{r['catch_up_rate']:,.0f}")
    p, t = results["plain"], results["mTLS"]
    table.add_row("mTLS / plain", "", f"{t['p50'] / p['p50']:.2f}", f"{t['p99'] / p['p99']:.2f}",
                  f"{t['mean'] / p['mean']:.2f}", f"{t['catch_up_s'] / p['catch_up_s']:.2f}", "")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
