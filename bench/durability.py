"""Benchmark: durability - XADD under appendfsync always / everysec beside Redis, restart time.

``python -m bench.durability [--quick] [--out PATH]`` (``make bench`` runs it):

1. For ``always`` and ``everysec``: one Braid region and one Debian redis-server
   with ``appendonly yes`` and the same ``appendfsync``, fresh for each run, both
   writing to the same file system; ``redis-benchmark -c 50 -P 1 XADD s * f1 v f2 v``
   against each in turn; the ratio Braid/Redis.
2. Restart: 1,000,000 entries loaded into a Braid region, a snapshot (BGSAVE) at
   90 % of them and the last 10 % as the log's tail, then the time from starting
   the process to its first PING reply, and what INFO persistence says it loaded.
3. Full resync: a three-region cluster, region 3 stopped, 1,000,000 entries written
   at region 1 with a backlog too small to keep them, then region 3 restarted: the
   time from its start until it holds every entry.

A measurement, not a test: nothing passes or fails.  Results go to
``bench/RESULTS-durability.md``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time

from rich.console import Console

from node.testing import replication_status

from .run import PAYLOAD, BraidServer, RedisServer, fill, machine, parse_benchmark

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "RESULTS-durability.md")


def throughput(policy: str, requests: int) -> dict:
    out = {}
    for label, cls, extra in (("braid", BraidServer, ["--appendfsync", policy]),
                              ("redis", RedisServer, ["--appendonly", "yes", "--appendfsync", policy])):
        s = cls(label, extra)
        try:
            s.spawn()
            s.wait_ready()
            text = subprocess.run(["redis-benchmark", "-p", str(s.port), "-c", "50", "-P", "1", "-n", str(requests),
                                   "--csv", "XADD", "s", "*", *PAYLOAD], capture_output=True, text=True,
                                  timeout=1800).stdout
            out[label] = parse_benchmark(text)
            c = s.client()
            out[label]["xlen"] = c.xlen("s")
            c.close()
        finally:
            s.stop()
    return out


def restart(entries: int) -> dict:
    s = BraidServer("braid", ["--appendfsync", "everysec"])
    try:
        s.spawn()
        s.wait_ready()
        c = s.client()
        fill(c, "s", entries * 9 // 10)
        c.bgsave()
        while c.info("persistence")["rdb_bgsave_in_progress"]:
            time.sleep(0.05)
        fill(c, "s", entries - entries * 9 // 10)
        c.close()
        s.proc.terminate()
        s.proc.wait(60)
        t0 = time.monotonic()
        s.spawn()
        s.wait_ready()
        seconds = time.monotonic() - t0
        c = s.client()
        info = c.info("persistence")
        out = {"seconds": seconds, "xlen": c.xlen("s"), "snapshot_record": info["aof_loaded_snapshot_record"],
               "tail_records": info["aof_loaded_records"], "load_ms": info["aof_load_time_ms"]}
        c.close()
        return out
    finally:
        s.stop()


def full_resync(entries: int) -> dict:
    from node.testing import LocalCluster

    with LocalCluster(3) as cluster:
        p3 = cluster.procs[2]
        r1, r2, _ = cluster.clients()
        p3.stop_keeping_data()
        for c in (r1, r2):
            c.config_set("crdt-repl-backlog-size", 1)
        fill(r1, "s", entries)
        cluster_deadline = time.monotonic() + 600
        while r2.xlen("s") < entries or _trimmed(r1) < entries or _trimmed(r2) < entries:
            if time.monotonic() > cluster_deadline:
                raise TimeoutError("regions 1 and 2 did not settle")
            time.sleep(0.2)
        t0 = time.monotonic()
        p3.restart()
        r3 = p3.client()
        while r3.xlen("s") < entries:
            time.sleep(0.02)
        seconds = time.monotonic() - t0
        received = _crdt(r3)["crdt_full_resyncs_received"]
        for c in (r1, r2, r3):
            c.close()
        return {"seconds": seconds, "entries": entries, "resyncs": received}


def _crdt(c) -> dict:
    return replication_status(c)


def _trimmed(c) -> int:
    return int(_crdt(c)["crdt_backlog_trimmed"])


def write(path: str, m: dict, tp: dict, rs: dict, fr: dict, invocation: str) -> None:
    lines = [
        "# Durability benchmark",
        "",
        f"Recorded {datetime.date.today().isoformat()} with `{invocation}` on {m.get('cpu', '?')}, "
        f"{m.get('cores', '?')} cores (everything on one machine, servers run one after the other).",
        "",
        "## XADD c50 P1 with the append-only file (`appendonly yes`)",
        "",
        "| appendfsync | Braid rps | Redis rps | Braid/Redis | Braid p50 ms | Redis p50 ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for policy, r in tp.items():
        b, rr = r["braid"], r["redis"]
        lines.append(f"| {policy} | {b['rps']:,.0f} | {rr['rps']:,.0f} | {b['rps'] / rr['rps']:.2f} | "
                     f"{b.get('p50_latency_ms', float('nan')):.2f} | {rr.get('p50_latency_ms', float('nan')):.2f} |")
    lines += [
        "",
        "## Restart",
        "",
        f"{rs['xlen']:,} entries: a snapshot at record {rs['snapshot_record']:,} and {rs['tail_records']:,} "
        f"records of tail; process start to first PING reply **{rs['seconds']:.2f} s** "
        f"(loading itself {rs['load_ms']} ms).",
        "",
        "## Full resync",
        "",
        f"{fr['entries']:,} entries trimmed from the backlogs of regions 1 and 2 while region 3 was stopped: "
        f"from region 3's start until it holds them all **{fr['seconds']:.2f} s** "
        f"({fr['resyncs']} full resyncs installed).",
        "",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.durability")
    ap.add_argument("--quick", action="store_true", help="a tenth of the requests and entries")
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    console = Console()
    div = 10 if args.quick else 1
    tp = {}
    for policy in ("always", "everysec"):
        console.print(f"XADD c50 with appendfsync {policy} …")
        tp[policy] = throughput(policy, 200_000 // div)
        console.print(f"  braid {tp[policy]['braid']['rps']:,.0f} rps, redis {tp[policy]['redis']['rps']:,.0f} rps")
    console.print("restart with 1,000,000 entries …")
    rs = restart(1_000_000 // div)
    console.print(f"  {rs}")
    console.print("full resync of 1,000,000 entries …")
    fr = full_resync(1_000_000 // div)
    console.print(f"  {fr}")
    write(args.out, machine(), tp, rs, fr, "python -m bench.durability" + (" --quick" if args.quick else ""))
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
