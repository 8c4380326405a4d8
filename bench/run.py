"""Benchmark: Braid beside Debian's redis-server on loopback, same load, ratios.

``make bench`` (or ``python -m bench.run [--quick] [--only NAME] [--out PATH]``)
starts one Braid region and one redis-server (no persistence), runs
``redis-benchmark`` against each with identical arguments, then a memory run
(1,000,000 XADDs of ``f1 <12 random chars> f2 <12 random chars>`` loaded with
pipelines), and writes the numbers and the Braid/Redis ratios to
``bench/RESULTS.md``.  This is a measurement, not a test: nothing here passes
or fails.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import string
import subprocess
import sys

from rich.console import Console
from rich.table import Table

from node.testing import BraidProcess, RedisProcess

PAYLOAD = ["f1", "abcdefghijkl", "f2", "abcdefghijkl"]


def _benchmark(port: int, n: int, clients: int, pipeline: int, *command: str) -> float:
    """requests per second reported by redis-benchmark --csv."""
    argv = ["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(n),
            "-P", str(pipeline), "--csv", *command]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=True).stdout
    last = [line for line in out.splitlines() if line.startswith('"')][-1]
    return float(last.split(",")[1].strip('"'))


def _prepare(client, name: str) -> None:
    client.flushall()
    if name == "xrange_100":
        with client.pipeline(transaction=False) as p:
            for i in range(1, 1001):
                p.xadd("bench:r", dict(zip(PAYLOAD[0::2], PAYLOAD[1::2])), id=f"{i}-0")
            p.execute()
    if name == "xreadgroup_count1":
        with client.pipeline(transaction=False) as p:
            for i in range(1, 400_001):
                p.xadd("bench:g", {"f": "v"}, id=f"{i}-0")
                if i % 10_000 == 0:
                    p.execute()
            p.execute()
        client.xgroup_create("bench:g", "g", id="0")


def scenarios(quick: bool) -> list[tuple[str, int, int, int, list[str]]]:
    n = 20_000 if quick else 200_000
    return [
        ("xadd_c1_p1", n // 4, 1, 1, ["xadd", "bench:s", "*", *PAYLOAD]),
        ("xadd_c50_p1", n, 50, 1, ["xadd", "bench:s", "*", *PAYLOAD]),
        ("xadd_c50_p16", n * 2, 50, 16, ["xadd", "bench:s", "*", *PAYLOAD]),
        ("xrange_100", n // 4, 50, 1, ["xrange", "bench:r", "-", "+", "COUNT", "100"]),
        ("xreadgroup_count1", min(n, 300_000), 50, 1,
         ["xreadgroup", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "bench:g", ">"]),
    ]


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def memory_run(proc, entries: int) -> dict:
    client = proc.client()
    client.flushall()
    rng = random.Random(7)
    letters = string.ascii_letters
    before_used = int(client.info("memory")["used_memory"])
    before_rss = _rss(proc.pid)
    batch = 1000
    for start in range(0, entries, batch):
        with client.pipeline(transaction=False) as p:
            for _ in range(batch):
                p.execute_command("XADD", "bench:m", "*",
                                  "f1", "".join(rng.choices(letters, k=12)),
                                  "f2", "".join(rng.choices(letters, k=12)))
            p.execute()
    assert client.xlen("bench:m") == entries
    used = int(client.info("memory")["used_memory"]) - before_used
    rss = _rss(proc.pid) - before_rss
    client.flushall()
    client.close()
    return {"used_per_entry": used / entries, "rss_per_entry": rss / entries}


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    redis_v = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "redis": redis_v, "date": datetime.date.today().isoformat()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short runs (smoke)")
    ap.add_argument("--only", help="run only the scenario with this name (or 'memory')")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "RESULTS.md"))
    ap.add_argument("--entries", type=int, default=1_000_000, help="entries for the memory run")
    args = ap.parse_args(argv)
    console = Console()
    rows = []
    mem = {}
    with BraidProcess() as braid, RedisProcess() as redis_:
        servers = {"braid": braid, "redis": redis_}
        for name, n, c, p, cmd in scenarios(args.quick):
            if args.only and args.only != name:
                continue
            rps = {}
            for label, proc in servers.items():
                cl = proc.client()
                _prepare(cl, name)
                cl.close()
                rps[label] = _benchmark(proc.port, n, c, p, *cmd)
            rows.append((name, f"c{c} P{p}", n, rps["braid"], rps["redis"]))
            console.print(f"{name}: braid {rps['braid']:.0f}/s, redis {rps['redis']:.0f}/s")
    if not args.only or args.only == "memory":
        # fresh processes, so that RSS growth is not hidden by memory freed earlier
        entries = 100_000 if args.quick else args.entries
        with BraidProcess() as braid, RedisProcess() as redis_:
            for label, proc in {"braid": braid, "redis": redis_}.items():
                mem[label] = memory_run(proc, entries)
        mem["entries"] = entries
    table = Table(title="Braid vs Redis (loopback, side by side)")
    for col in ("scenario", "load", "requests", "braid rps", "redis rps", "braid/redis"):
        table.add_column(col)
    for name, load, n, b, r in rows:
        table.add_row(name, load, str(n), f"{b:,.0f}", f"{r:,.0f}", f"{b / r:.2f}")
    console.print(table)
    write_results(args.out, machine(), rows, mem, args.quick)
    console.print(f"written {args.out}")
    return 0


def targets(rows: list, mem: dict) -> list[str]:
    """The issue's targets, each with what this run reached."""
    out = []
    for name, _load, _n, b, r in rows:
        if name == "xadd_c50_p1":
            verdict = "met" if b / r >= 0.5 else "missed"
            out.append(f"- XADD c50 P1 at least 50 % of Redis's throughput: {b / r:.0%} ({verdict}).")
    if mem:
        ratio = mem["braid"]["rss_per_entry"] / mem["redis"]["used_per_entry"]
        verdict = "met" if ratio <= 3 else "missed"
        out.append(f"- Memory at most 3x Redis's bytes per entry: {ratio:.2f}x ({verdict}).")
    return out


def write_results(path: str, m: dict, rows: list, mem: dict, quick: bool) -> None:
    lines = [
        "# Benchmark results",
        "",
        f"Recorded {m['date']} with `python -m bench.run{' --quick' if quick else ''}` "
        "(Braid and Redis side by side on loopback; no persistence on either).",
        "",
        f"- machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}",
        f"- reference: {m['redis']}",
        "- load generator: Debian's `redis-benchmark` with `--csv`, one server at a time,"
        " the same arguments for both",
        "",
        "## Throughput",
        "",
        "| scenario | load | requests | Braid rps | Redis rps | Braid/Redis |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, load, n, b, r in rows:
        lines.append(f"| {name} | {load} | {n} | {b:,.0f} | {r:,.0f} | {b / r:.2f} |")
    lines += ["", "Commands (`-c`, `-P` and `-n` as in the table):", "",
              "- XADD: `redis-benchmark -p PORT -c C -P P -n N --csv xadd bench:s * f1 abcdefghijkl f2 abcdefghijkl`",
              "- XRANGE: `xrange bench:r - + COUNT 100` over 1,000 entries",
              "- XREADGROUP: `xreadgroup GROUP g c COUNT 1 STREAMS bench:g >` over 400,000 entries", ""]
    if mem:
        b, r = mem["braid"], mem["redis"]
        lines += [
            "## Memory",
            "",
            f"{mem['entries']:,} XADDs of `f1 <12 random chars> f2 <12 random chars>` (pipelines of 1,000).",
            "",
            "| | bytes per entry |",
            "| --- | --- |",
            f"| Redis `used_memory` growth | {r['used_per_entry']:.1f} |",
            f"| Redis RSS growth | {r['rss_per_entry']:.1f} |",
            f"| Braid RSS growth (the honest number: the whole process) | {b['rss_per_entry']:.1f} |",
            f"| Braid `used_memory` growth (packed entry data only) | {b['used_per_entry']:.1f} |",
            f"| ratio Braid RSS / Redis used_memory | {b['rss_per_entry'] / r['used_per_entry']:.2f} |",
            "",
        ]
    lines += ["## Targets", ""] + targets(rows, mem) + [""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
