"""Benchmark: WAIT, WAITAOF and BRAID.WAITFOR across regions - what a waiting client costs the
writes that do not wait, and how long the waits take.

``python -m bench.wait [--part cost,loopback,wan] [--runs R] [--seconds S] [--ops N] [--gap-ms G]
[--delay-ms D] [--set NAME=VALUE] [--out PATH]`` (not part of ``make bench``; ``wan`` needs root):

``cost``
    A three-region cluster on loopback (``node.testing.LocalCluster``, the cluster's defaults).
    A *plain writer* (its own process: no GIL shared with the others) does sequential XADDs at
    region 1 for ``--seconds``, in three variants: alone; beside a *WAIT client* (another
    process looping ``XADD`` + ``WAIT 2 1000`` at region 1); and beside a *paced writer* that
    does only the XADDs, at the rate the WAIT client reached in a warm-up (the control: a second
    client's writes without the waits).  ``--runs`` runs, each variant once per run in a rotated
    order, medians.  Reported: the plain writer's ops/s and p50 / p99, the second client's rate
    and CPU, and each region's CPU over the window (region 1's also per XADD of any client).
    The claim measured: a WAIT costs the writes that do not use it nothing beyond what the
    waiting client's own writes cost, i.e. the plain writer beside the WAIT client runs as
    beside the paced writer.
``loopback`` and ``wan``
    One client at region 1, sequential: ``XADD`` then the wait, ``--ops`` times per command,
    p50 / p99 of the wait's own time: ``WAIT 1 0``, ``WAIT 2 0``, ``WAITAOF 0 1 0``,
    ``WAITAOF 1 2 0``, and ``BRAID.WAITFOR token 0`` at region 2 for the token region 1 gave
    right after the XADD (``XADD`` and ``BRAID.TOKEN`` in one pipeline): the time until region 2
    applied the write.  Each command back to back and with ``--gap-ms`` of quiet before each
    XADD (so every link starts from a quiet spell).  ``loopback``
    on the cluster above; ``wan`` on three regions in network namespaces with ``--delay-ms``
    one way on every link (:class:`chaos.netns.NetnsCluster`, as ``bench.wan``; the client sits
    in the root namespace, next to its region).  The expectation printed beside each row: a
    round trip to the farthest region counted, plus the pacing (a batch within the send
    interval; a blocked WAIT asks its peers to ack at once; WAITAOF also waits for the peers'
    replication fsync, within their fsync interval).

``--set`` applies a setting at every region (``CONFIG SET``, e.g. ``crdt-repl-ack-interval-ms=2``)
for the whole run.  Each part replaces its own section of ``--out`` (``bench/RESULTS-wait.md``),
so the parts can run one at a time.  A measurement, not a test: nothing fails on a number.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time

import redis

from bench.run import cpu_seconds, machine, settings_of
from node.testing import LocalCluster, wait_in_sync

PAYLOAD = {"f1": "abcdefghijkl", "f2": "abcdefghijkl"}
PARTS = ("cost", "loopback", "wan")
VARIANTS = ("alone", "beside a WAIT client", "beside a paced writer")
WAIT_COMMANDS = (("WAIT", 1, 0), ("WAIT", 2, 0), ("WAITAOF", 0, 1, 0), ("WAITAOF", 1, 2, 0))
WAITFOR = "BRAID.WAITFOR at region 2"
DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "RESULTS-wait.md")


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


# ------------------------------------------------------------ cost: the clients, one process each
def client_loop(port: int, mode: str, seconds: float, rate: float, ready, go, start_at, out) -> None:
    """One client at region 1 (run in a process of its own): ``plain`` sequential XADDs,
    ``wait`` XADD + ``WAIT 2 1000``, ``paced`` XADDs at ``rate`` a second.  Warms up, says
    ``ready``, and once ``go`` is set runs from ``start_at`` (CLOCK_MONOTONIC, the machine's one
    clock) for ``seconds``.  Puts a summary on ``out``."""
    c = redis.Redis(host="127.0.0.1", port=port, protocol=2)
    key = f"cost:{mode}"
    for _ in range(50):  # warm up: the connection, the stream's first block
        c.xadd(key, PAYLOAD)
    ready.put(mode)
    go.wait()
    clock, lat, short, begin = time.monotonic, [], 0, start_at.value
    pause = begin - clock()
    if pause > 0:
        time.sleep(pause)  # every client starts with the window the parent measures
    cpu0, end, k = time.process_time(), begin + seconds, 0
    while (now := clock()) < end:
        if mode == "paced":
            due = begin + k / rate
            if due > now:
                time.sleep(min(due, end) - now)  # pacing the offered load, not synchronising
                continue
        t0 = clock()
        c.xadd(key, PAYLOAD)
        lat.append(clock() - t0)
        if mode == "wait" and c.execute_command("WAIT", 2, 1000) < 2:
            short += 1
        k += 1
    out.put({"mode": mode, "ops": k, "lat": lat, "short": short, "cpu": time.process_time() - cpu0,
             "took": clock() - begin})
    c.close()


def cost_window(cluster: LocalCluster, modes: list[str], seconds: float, rate: float) -> dict:
    """Run the clients of ``modes`` side by side for ``seconds``; their summaries and each
    region's CPU seconds over the window."""
    ctx = multiprocessing.get_context("spawn")
    ready, out, go, start_at = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
    port = cluster.procs[0].port
    procs = [ctx.Process(target=client_loop, args=(port, m, seconds, max(rate, 1.0), ready, go, start_at, out))
             for m in modes]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)  # a loaded machine starts a process slowly: the window waits for all
    start_at.value = time.monotonic() + 0.05
    go.set()
    time.sleep(max(0.0, start_at.value - time.monotonic()))
    cpu0 = [cpu_seconds(r.pid) for r in cluster.procs]
    time.sleep(max(0.0, start_at.value + seconds - time.monotonic()))
    cpu = [cpu_seconds(r.pid) - b for r, b in zip(cluster.procs, cpu0, strict=True)]
    summaries = {s["mode"]: s for s in (out.get(timeout=60) for _ in procs)}
    for p in procs:
        p.join(30)
    clients = cluster.clients()
    try:
        wait_in_sync(clients, timeout=120)  # the next window starts with every region caught up
    finally:
        for c in clients:
            c.close()
    return {"clients": summaries, "region_cpu": cpu, "seconds": seconds}


def cost(cluster: LocalCluster, runs: int, seconds: float) -> dict:
    warm = cost_window(cluster, ["wait"], min(seconds, 2.0), 0.0)["clients"]["wait"]
    rate = warm["ops"] / warm["took"]
    print(f"warm-up: the WAIT client alone did {rate:,.1f} XADD + WAIT a second; the paced writer offers that",
          flush=True)
    modes = {"alone": ["plain"], "beside a WAIT client": ["plain", "wait"], "beside a paced writer": ["plain", "paced"]}
    rows: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for run in range(runs):
        order = VARIANTS[run % 3:] + VARIANTS[:run % 3]  # rotated: no variant always runs first
        for variant in order:
            w = cost_window(cluster, modes[variant], seconds, rate)
            plain = w["clients"]["plain"]
            other = next((s for m, s in w["clients"].items() if m != "plain"), None)
            ops = plain["ops"] + (other["ops"] if other else 0)
            row = {"ops_s": plain["ops"] / seconds, "p50": pct(plain["lat"], 0.5) * 1e3,
                   "p99": pct(plain["lat"], 0.99) * 1e3, "plain_cpu": plain["cpu"] / seconds * 100,
                   "other_ops_s": other["ops"] / seconds if other else 0.0,
                   "other_cpu": other["cpu"] / seconds * 100 if other else 0.0,
                   "short": other["short"] if other else 0,
                   "r_cpu": [x / seconds * 100 for x in w["region_cpu"]],
                   "r1_us_per_xadd": w["region_cpu"][0] / max(ops, 1) * 1e6}
            rows[variant].append(row)
            print(f"run {run + 1} {variant:<22} plain {row['ops_s']:,.0f}/s p50 {row['p50']:.2f} "
                  f"p99 {row['p99']:.2f} ms; other {row['other_ops_s']:,.1f}/s; regions CPU "
                  + " ".join(f"{x:.0f}%" for x in row["r_cpu"]) + f"; r1 {row['r1_us_per_xadd']:.1f} µs/XADD "
                  f"(load {loadavg()})", flush=True)
    return {"rate": rate, "rows": rows}


def median_row(rows: list[dict]) -> dict:
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "r_cpu"}
    med["r_cpu"] = [statistics.median(r["r_cpu"][i] for r in rows) for i in range(len(rows[0]["r_cpu"]))]
    med["runs"] = [r["ops_s"] for r in rows]
    return med


# ------------------------------------------------------------ latency
def wait_latencies(r1: redis.Redis, r2: redis.Redis, ops: int, gap: float, warmup: int = 5) -> dict[str, dict]:
    """Per command: the wait's own times (seconds) over ``ops`` sequential XADD + wait rounds,
    ``gap`` seconds of quiet before each XADD, and how many replies counted fewer than asked."""
    clock, results = time.monotonic, {}
    for cmd in (*WAIT_COMMANDS, None):
        name = WAITFOR if cmd is None else " ".join(map(str, cmd))
        times, short = [], 0
        for k in range(warmup + ops):
            if gap:
                time.sleep(gap)  # the quiet spell before the write (what the row measures)
            if cmd is None:
                pipe = r1.pipeline(transaction=False)
                pipe.xadd("wait:lat", PAYLOAD)
                pipe.execute_command("BRAID.TOKEN")
                token = pipe.execute()[1]
                t0 = clock()
                reply = r2.execute_command("BRAID.WAITFOR", token, 0)
                took, ok = clock() - t0, reply == 1
            else:
                r1.xadd("wait:lat", PAYLOAD)
                t0 = clock()
                reply = r1.execute_command(*cmd)
                took = clock() - t0
                ok = reply >= cmd[1] if cmd[0] == "WAIT" else reply[0] >= cmd[1] and reply[1] >= cmd[2]
            if k >= warmup:  # the first rounds find the links in whatever pace they were left
                times.append(took)
                short += not ok
        results[name] = {"times": times, "short": short}
        print(f"  {name:<26} gap {gap * 1e3:.0f} ms: p50 {pct(times, 0.5) * 1e3:.1f} ms, "
              f"p99 {pct(times, 0.99) * 1e3:.1f} ms", flush=True)
    return results


def pacing_of(client: redis.Redis) -> dict[str, float]:
    """The pacing settings a region runs with (ms), as CONFIG GET answers them."""
    names = ("crdt-repl-send-interval-ms", "crdt-repl-ack-interval-ms", "crdt-repl-fsync-interval-ms")
    return {n: float(client.config_get(n)[n]) for n in names}


def expectation(name: str, rtt_ms: float, gap: float, pace: dict[str, float]) -> tuple[float, float]:
    """(low, high) ms the wait should take: the round trip ``rtt_ms`` to the farthest region it
    counts, plus the pacing.  A batch leaves at once unless one left less than a send interval
    ago (the high end adds one).  A blocked WAIT has region 1 ask its peers for an ack at once
    (``Ack.ack_wanted``), so no ack pacing adds to it; WAITAOF's peers fsync within their fsync
    interval and say so in the ack that follows.  BRAID.WAITFOR waits one way, for the batch
    only.  (``gap``, the quiet before each XADD, no longer changes the expectation: kept for the
    table's rows.)"""
    send, fsync = pace["crdt-repl-send-interval-ms"], pace["crdt-repl-fsync-interval-ms"]
    if name == WAITFOR:
        return rtt_ms / 2, rtt_ms / 2 + send
    if name.startswith("WAITAOF"):
        return rtt_ms, rtt_ms + send + fsync
    return rtt_ms, rtt_ms + send


def latency_table(results: dict[float, dict[str, dict]], rtt_ms: float, pace: dict[str, float]) -> list[str]:
    lines = ["| command | quiet before each XADD | p50 (ms) | p99 (ms) | expected (ms) | replies short |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for gap, per in results.items():
        for name, r in per.items():
            low, high = expectation(name, rtt_ms, gap, pace)
            expected = f"{low:.0f}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}"
            lines.append(f"| `{name}` | {'none' if not gap else f'{gap * 1e3:.0f} ms'} | "
                         f"{pct(r['times'], 0.5) * 1e3:.1f} | {pct(r['times'], 0.99) * 1e3:.1f} | {expected} | "
                         f"{r['short']} of {len(r['times'])} |")
    return lines


# ------------------------------------------------------------ the results file
def write_section(path: str, part: str, body: list[str], settings: dict[str, str] | None = None) -> None:
    """Replace this part's section of the results file (between its markers), or append it; a
    run with settings has sections of its own, beside the defaults' ones."""
    if settings:
        part += "".join(f" {k}={v}" for k, v in sorted(settings.items()))
    start, end = f"<!-- bench.wait:{part}:start -->", f"<!-- bench.wait:{part}:end -->"
    section = "\n".join([start, *body, end])
    text = "# WAIT, WAITAOF and BRAID.WAITFOR across regions\n"
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)


def header(argv: list[str], load_before: str, settings: dict[str, str]) -> list[str]:
    m = machine()
    return [f"Recorded {m['date']} at {m['commit']} with `python -m bench.wait {' '.join(argv)}` on {m['cpu']}, "
            f"{m['cores']} cores (shared with other work), {m['python']}; load average {load_before} before, "
            f"{loadavg()} after." + (f" Settings at every region: {settings}." if settings else ""), ""]


def cost_section(result: dict, seconds: float, runs: int) -> list[str]:
    med = {v: median_row(rows) for v, rows in result["rows"].items()}
    lines = ["## What a WAIT client costs the writes that do not wait (loopback, region 1 of 3)", "",
             f"A plain writer's sequential XADDs at region 1, {seconds:g} s a window, {runs} runs, medians; the "
             f"second client at region 1 loops `XADD` + `WAIT 2 1000` (the WAIT client), or only XADDs at "
             f"{result['rate']:,.1f}/s, the rate the WAIT client reached alone (the paced writer).", "",
             "| variant | plain writer XADD/s (runs) | vs alone (median of the runs' ratios) | p50 / p99 (ms) "
             "| second client: XADD/s, CPU | region 1 / 2 / 3 CPU | region 1 µs per XADD (all clients) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    # each run's own ratio, its variants side by side in time, before the median: the machine's
    # load moves whole runs more than a variant moves its run
    ratios = {v: statistics.median(r["ops_s"] / a["ops_s"] for r, a in zip(result["rows"][v], result["rows"]["alone"],
                                                                            strict=True)) for v in VARIANTS}
    for v in VARIANTS:
        r = med[v]
        second = "-" if v == "alone" else f"{r['other_ops_s']:,.1f}/s, {r['other_cpu']:.1f} %"
        lines.append(f"| {v} | {r['ops_s']:,.0f} ({', '.join(f'{x:,.0f}' for x in r['runs'])}) | "
                     f"{ratios[v]:.3f} | {r['p50']:.3f} / {r['p99']:.3f} | {second} | "
                     + " / ".join(f"{x:.0f} %" for x in r["r_cpu"]) + f" | {r['r1_us_per_xadd']:.1f} |")
    short = sum(r["short"] for r in result["rows"]["beside a WAIT client"])
    lines += ["", f"WAIT replies that counted fewer than 2 regions within the 1000 ms timeout: {short}.", ""]
    return lines


def latency_section(title: str, results: dict, rtt_ms: float, pace: dict[str, float], ops: int) -> list[str]:
    between = f"{rtt_ms:g} ms" if rtt_ms else "loopback (about 0.1 ms)"
    lines = [f"## {title}", "",
             f"One client, `XADD` then the command, {ops} rounds per row (after 5 not counted); the wait's own "
             f"time. Round trip between regions {between}; pacing (ms): "
             + ", ".join(f"`{k}` {v:g}" for k, v in pace.items()) + " (a blocked WAIT's acks are not paced). "
             f"`{WAITFOR}`: the token from region 1 right after the XADD, waited for at region 2.", ""]
    return lines + latency_table(results, rtt_ms, pace) + [""]


# ------------------------------------------------------------ main
def configure(clients: list[redis.Redis], settings: dict[str, str]) -> None:
    for c in clients:
        for name, value in settings.items():
            c.config_set(name, value)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m bench.wait", description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="cost,loopback", help=f"which parts, of {','.join(PARTS)}")
    ap.add_argument("--runs", type=int, default=3, help="cost: runs, each variant once per run")
    ap.add_argument("--seconds", type=float, default=5.0, help="cost: seconds per window")
    ap.add_argument("--ops", type=int, default=200, help="latency: rounds per command")
    ap.add_argument("--gap-ms", type=float, default=100.0, help="latency: quiet before each XADD in the spaced rows")
    ap.add_argument("--delay-ms", type=float, default=40.0, help="wan: one-way delay on every link")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a setting at every region")
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    parts = args.part.split(",")
    if not parts or set(parts) - set(PARTS):
        ap.error(f"--part takes some of {','.join(PARTS)}, not {args.part!r}")
    try:
        settings = settings_of(args.set, "--set")
    except ValueError as e:
        ap.error(str(e))
    load_before = loadavg()
    gaps = (0.0, args.gap_ms / 1000)
    if "cost" in parts or "loopback" in parts:
        cluster = LocalCluster(3).start()
        try:
            cluster.links_wait(60)  # the steady state: every link up, none relaying
            r1, r2, *_ = clients = cluster.clients()
            configure(clients, settings)
            if "cost" in parts:
                result = cost(cluster, args.runs, args.seconds)
                write_section(args.out, "cost", header(argv, load_before, settings)
                              + cost_section(result, args.seconds, args.runs), settings)
            if "loopback" in parts:
                print("loopback:", flush=True)
                results = {gap: wait_latencies(r1, r2, args.ops, gap) for gap in gaps}
                write_section(args.out, "loopback", header(argv, load_before, settings) + latency_section(
                    "How long a wait takes on loopback (3 regions)", results, 0.0, pacing_of(r1), args.ops), settings)
            for c in clients:
                c.close()
        finally:
            cluster.stop()
    if "wan" in parts:
        from chaos.netns import NetnsCluster  # needs root; imported only for this part

        with NetnsCluster(3, delay=args.delay_ms / 1000) as wan:
            wan.sync_wait(60)
            rtt = wan.rtt(1, 2) * 1000, wan.rtt(1, 3) * 1000
            print(f"wan: TCP connect time region 1 -> 2 {rtt[0]:.1f} ms, -> 3 {rtt[1]:.1f} ms", flush=True)
            r1, r2, *_ = clients = wan.clients()
            configure(clients, settings)
            results = {gap: wait_latencies(r1, r2, args.ops, gap) for gap in gaps}
            write_section(args.out, "wan", header(argv, load_before, settings) + latency_section(
                f"How long a wait takes over the emulated WAN ({args.delay_ms:g} ms one way on every link)",
                results, 2 * args.delay_ms, pacing_of(r1), args.ops)
                + [f"Measured round trip (TCP connect from region 1's namespace): to region 2 {rtt[0]:.1f} ms, "
                   f"to region 3 {rtt[1]:.1f} ms.", ""], settings)
            for c in clients:
                c.close()
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
