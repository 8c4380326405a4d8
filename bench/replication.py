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
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from rich.console import Console

from bench.run import settings_of
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


def _reader(port: int, total: int, out) -> None:
    """A process of its own (no GIL shared with the writer): XREAD blocked at one region,
    recording when each entry became readable (CLOCK_MONOTONIC, one clock for the machine)."""
    import redis

    c = redis.Redis(port=port)
    seen: list[tuple[int, int]] = []  # (sequence number, monotonic ns readable)
    last = "$"
    out.put("ready")
    while len(seen) < total:
        reply = c.xread({"lat": last}, block=5000, count=1000)
        now = time.monotonic_ns()
        if not reply:
            break
        for eid, fields in reply[0][1]:
            seen.append((int(fields[b"k"]), now))
            last = eid
    c.close()
    out.put(seen)


@dataclass
class DelayRun:
    """One run of the writer at region 1 and the readers at the others."""

    rate: int                     # offered (entries per second)
    achieved: float               # what the writer managed (entries per second)
    sent: list[int]               # per entry, monotonic ns the XADD was sent
    replied: list[int]            # ... and its reply came back
    readable: dict[str, dict[int, int]]  # region -> entry -> monotonic ns it was readable there
    relayed: int = 0                # operations of third regions the regions relayed (INFO crdt)
    duplicates: int = 0             # envelopes that arrived a second time, all regions together

    def delays(self, region: str) -> list[float]:
        """Seconds from sending each entry to its being readable at ``region``."""
        return [(t - self.sent[k]) / 1e9 for k, t in self.readable[region].items()]

    def replies(self) -> list[float]:
        return [(r - s) / 1e9 for s, r in zip(self.sent, self.replied, strict=True)]


def delays(cluster: LocalCluster, rate: int, seconds: float) -> DelayRun:
    """One plain client (redis-py, one XADD after another) writes ``rate`` entries a second at
    region 1 for ``seconds``; a reader process per other region records when each is readable."""
    total = int(rate * seconds)
    ctx = multiprocessing.get_context("spawn")
    names = [f"region-{i + 1}" for i in range(1, len(cluster.procs))]
    queues = [ctx.Queue() for _ in names]
    readers = [ctx.Process(target=_reader, args=(p.port, total, q))
               for p, q in zip(cluster.procs[1:], queues, strict=True)]
    for r in readers:
        r.start()
    for q in queues:
        q.get(timeout=60)  # each reader is about to block on XREAD
    time.sleep(0.2)  # let the readers' first XREAD reach their regions (not a synchronisation of results)
    writer = cluster.procs[0].client()
    sent, replied = [0] * total, [0] * total
    start = time.monotonic()
    for k in range(total):
        pause = start + k / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing the offered load, not synchronising
        sent[k] = time.monotonic_ns()
        writer.xadd("lat", {"k": k})
        replied[k] = time.monotonic_ns()
    elapsed = time.monotonic() - start
    writer.close()
    readable = {name: dict(q.get(timeout=120)) for name, q in zip(names, queues, strict=True)}
    for r in readers:
        r.join(30)
    return DelayRun(rate, total / elapsed, sent, replied, readable)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


STAGES = ("reply", "issued", "logged", "batch", "received", "applied", "readable")


def stage_times(run: DelayRun, prefix: str, regions: int) -> dict[str, dict[str, list[float]]]:
    """Per region other than 1, per stage, the ms from sending each entry to its reaching that
    stage: region 1's ``issued``, ``logged`` and ``batch`` (toward that region), that region's
    ``received`` and ``applied``, the client's ``reply`` and the reader's ``readable``.  Region
    1's operations after the trace began are the writer's entries, in order (XADD: one each)."""
    rows: dict[int, list[tuple[str, int, int, int, int]]] = {}
    for number in range(1, regions + 1):
        with open(f"{prefix}.{number}") as f:
            rows[number] = [(s, int(p), int(o), int(n), int(t)) for s, p, o, n, t in (line.split() for line in f)]
    issued = sorted(n for s, _, o, n, _ in rows[1] if s == "issued" and o == 1)
    first = issued[-len(run.sent)] if len(issued) >= len(run.sent) else None
    out: dict[str, dict[str, list[float]]] = {}
    if first is None:
        return out
    for number in range(2, regions + 1):
        name = f"region-{number}"
        at: dict[str, dict[int, int]] = {s: {} for s in STAGES}
        for s, peer, o, n, t in rows[1]:
            if o == 1 and (s in ("issued", "logged") or (s == "batch" and peer == number)):
                at[s].setdefault(n - first, t)
        for s, peer, o, n, t in rows[number]:
            if o == 1 and (s == "applied" or (s == "received" and peer == 1)):
                at[s].setdefault(n - first, t)
        at["reply"] = dict(enumerate(run.replied))
        at["readable"] = run.readable[name]
        out[name] = {}
        for s in STAGES:
            by_entry = {k: (at[s][k] - run.sent[k]) / 1e6 for k in range(len(run.sent)) if k in at[s]}
            out[name][s] = list(by_entry.values())
            out[name][f"{s}#by-entry"] = by_entry
    return out


def _stage_table(stages: dict[str, list[float]], readable: dict[int, float]) -> list[str]:
    """Per stage, p50 / p99 of the ms since the XADD was sent, and the mean over the entries
    that were the slowest 1 % to become readable (where their time went)."""
    slow = sorted(readable, key=readable.get)[-max(1, len(readable) // 100):]
    lines = ["| stage | p50 (ms) | p99 (ms) | slowest 1 %: mean (ms) |", "| --- | --- | --- | --- |"]
    for stage in STAGES:
        xs = stages[stage]
        lines.append(f"| {stage} | {pct(xs, 0.5):.2f} | {pct(xs, 0.99):.2f} | "
                     f"{_mean_of(stages, stage, slow):.2f} |")
    return lines


def _mean_of(stages: dict[str, list[float]], stage: str, entries: list[int]) -> float:
    by_entry = stages.get(f"{stage}#by-entry")  # type: ignore[arg-type]
    values = [by_entry[k] for k in entries if k in by_entry] if by_entry else []
    return statistics.mean(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 s per run, 20,000 requests of throughput")
    ap.add_argument("--rate", type=int, default=3000, help="entries per second offered at region 1")
    ap.add_argument("--seconds", type=float, default=None, help="length of each delay run (default 10, --quick 2)")
    ap.add_argument("--runs", type=int, default=3, help="delay runs, each on a new cluster (the median is reported)")
    ap.add_argument("--no-throughput", action="store_true", help="skip the redis-benchmark comparison")
    ap.add_argument("--stages", action="store_true",
                    help="also time each stage of the path (the regions record them: BRAID_REPL_TRACE)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting of every region of the delay runs (e.g. crdt-repl-send-interval-ms=10)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "RESULTS-replication.md"))
    args = ap.parse_args(argv)
    try:
        settings = settings_of(args.set, "--set")
    except ValueError as e:
        ap.error(str(e))
    console = Console()
    n = 20_000 if args.quick else 100_000
    seconds = args.seconds or (2.0 if args.quick else 10.0)
    cmd = ["xadd", "bench:s", "*", *PAYLOAD]
    single_rps = cluster_rps = None
    if not args.no_throughput:
        with BraidProcess() as single:
            single_rps = _benchmark(single.port, n, 50, 1, *cmd)
        with LocalCluster(3) as cluster:
            cluster.links_wait(120)
            cluster_rps = _benchmark(cluster.procs[0].port, n, 50, 1, *cmd)
        console.print(f"XADD c50 P1: standalone {single_rps:,.0f}/s, region 1 of 3 {cluster_rps:,.0f}/s")
    runs: list[tuple[DelayRun, dict]] = []
    trace_dir = tempfile.mkdtemp(prefix="braid-repl-trace-") if args.stages else None
    for i in range(args.runs):
        prefix = os.path.join(trace_dir, f"run{i}") if trace_dir else None
        if prefix:
            os.environ["BRAID_REPL_TRACE"] = prefix  # the regions started next record their stages
        try:
            with LocalCluster(3) as cluster:
                for c in cluster.clients():
                    for name, value in settings.items():
                        c.config_set(name, value)
                    c.close()
                cluster.links_wait(120)  # a region started before its peers dials them again later:
                cluster.sync_wait(120)   # the first operations would arrive relayed, not directly
                run = delays(cluster, args.rate, seconds)
                cluster.sync_wait(120)
                for c in cluster.clients():
                    info = c.info("crdt")
                    run.relayed += int(info.get("crdt_relayed_ops", 0))
                    run.duplicates += int(info.get("crdt_duplicate_ops", 0))
                    c.close()
        finally:
            os.environ.pop("BRAID_REPL_TRACE", None)
        stages = stage_times(run, prefix, 3) if prefix else {}
        runs.append((run, stages))
        summary = ", ".join(f"{r} p50 {pct(run.delays(r), 0.5) * 1000:.1f} p99 {pct(run.delays(r), 0.99) * 1000:.1f} ms"
                            for r in run.readable)
        console.print(f"run {i + 1}: writer {run.achieved:,.0f}/s of {run.rate:,}/s offered, reply p99 "
                      f"{pct(run.replies(), 0.99) * 1000:.2f} ms; {summary}; relayed {run.relayed}, "
                      f"duplicates {run.duplicates}")
    if trace_dir:
        shutil.rmtree(trace_dir, ignore_errors=True)
    regions = list(runs[0][0].readable)

    def median_of(f) -> float:
        return statistics.median(f(run) for run, _ in runs)

    lines = [
        "# Replication benchmark",
        "",
        f"Recorded {datetime.date.today().isoformat()} with `python -m bench.replication"
        f"{' ' + ' '.join(argv if argv is not None else sys.argv[1:]) if (argv or sys.argv[1:]) else ''}` "
        f"on {_cpu()}, {os.cpu_count()} cores, Python {platform.python_version()}, load average "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "All processes share the machine's cores (regions, load generator, readers).",
        "",
    ]
    if single_rps is not None:
        lines += [
            "## Throughput",
            "",
            "| target | XADD c50 P1 (rps) |",
            "| --- | --- |",
            f"| standalone region | {single_rps:,.0f} |",
            f"| region 1 of a three-region cluster | {cluster_rps:,.0f} |",
            f"| ratio | {cluster_rps / single_rps:.2f} |",
            "",
            f"Command: `redis-benchmark -p PORT -c 50 -P 1 -n {n} --csv "
            "xadd bench:s * f1 abcdefghijkl f2 abcdefghijkl`",
            "",
        ]
    lines += [
        f"## Time until an entry written at region 1 is readable elsewhere ({args.rate:,}/s offered)",
        "",
        f"One plain client (redis-py, one XADD after another) offers {args.rate:,} entries a second at "
        f"region 1 for {seconds:g} s; a reader process per other region waits in XREAD BLOCK. "
        f"{args.runs} runs, each on a new three-region cluster; the median of the runs.",
        "",
        f"Writer achieved: {median_of(lambda r: r.achieved):,.0f}/s (runs: "
        f"{', '.join(f'{run.achieved:,.0f}' for run, _ in runs)}); its XADD round trip p50 "
        f"{median_of(lambda r: pct(r.replies(), 0.5)) * 1000:.2f} ms, p99 "
        f"{median_of(lambda r: pct(r.replies(), 0.99)) * 1000:.2f} ms.",
        "",
        f"Operations relayed by a region to another (all regions, per run): "
        f"{', '.join(str(run.relayed) for run, _ in runs)}; envelopes that arrived a second time: "
        f"{', '.join(str(run.duplicates) for run, _ in runs)}.",
        "",
        "| region | entries | p50 (ms) | p99 (ms) | mean (ms) | p99 of each run (ms) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for region in regions:
        lines.append(
            f"| {region} | {median_of(lambda r, region=region: len(r.readable[region])):.0f} "
            f"| {median_of(lambda r, region=region: pct(r.delays(region), 0.5)) * 1000:.2f} "
            f"| {median_of(lambda r, region=region: pct(r.delays(region), 0.99)) * 1000:.2f} "
            f"| {median_of(lambda r, region=region: statistics.mean(r.delays(region))) * 1000:.2f} "
            f"| {', '.join(f'{pct(run.delays(region), 0.99) * 1000:.1f}' for run, _ in runs)} |")
        console.print(lines[-1])
    if args.stages:
        # the run whose p99 at region 2 is the median one
        run, stages = sorted(runs, key=lambda rs: pct(rs[0].delays(regions[0]), 0.99))[len(runs) // 2]
        lines += ["", "## Where the time goes (the median run)", "",
                  "Each stage: when the entry reached it, in ms after its XADD was sent: `reply` the client "
                  "got the reply; at region 1 `issued` (applied, joined the causal log), `logged` (its log "
                  "record reached the OS: it may leave), `batch` (put in a frame toward that region); at the other "
                  "region `received` (its frame arrived from region 1) and `applied`; `readable` the "
                  "reader's XREAD returned it.", ""]
        for region in regions:
            lines += [f"### {region}", "", *_stage_table(stages[region], stages[region]["readable#by-entry"]), ""]
    lines.append("")
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    console.print("\n".join(lines))
    console.print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
