"""What sharing the load generator's core with regions 2 and 3 costs region 1 of three.

``python -m bench.colocation [--rounds 3] [--requests 200000] [--cores 0,1]``: ``bench.run``'s
``region1of3_xadd_c50_p1`` scenario (redis-benchmark, XADD c50 P1, at region 1 pinned to the
first core; the load generator, regions 2 and 3 on the second) with the peers placed in
several ways, and a standalone region for the ratio.  Each round runs every placement once,
in turn, on fresh processes (a drift of the machine hits them all); medians are printed:

``peers``
    the scenario as ``bench.run`` measures it: the peers at the load generator's priority.
``peers-batch``
    the peers under ``SCHED_BATCH``: they never preempt the load generator when they wake.
``peers-nice``
    the peers at niceness 10: the load generator takes the core whenever it is ready to run
    (as it would if the peers ran on machines of their own).
``stand-ins``
    the peers killed once the links are up (region 1 keeps its backlog for them and sends
    nothing) and two processes that burn, each, the CPU a peer used in this round's ``peers``
    run, in slices of a send interval (5 ms): the same load on the load generator's core,
    with no work of Braid's in it and no link to region 1.
``stopped``
    the peers killed, nothing in their place.

``--shares 0.1,0.18`` adds stand-ins that burn those fixed shares of a core each (placements
named ``stand-ins@0.1``...): how region 1's throughput follows the load on the load
generator's core when nothing else changes.  ``--with NAME=VALUE[,NAME=VALUE]`` (repeatable)
adds ``peers`` runs with those settings (``CONFIG SET`` at every region once the links are
up; placements named ``peers:NAME=VALUE``...): a setting's worth in this scenario, alternated
with the others in every round.

For each: XADD/s, the ratio to the standalone region of the same round, region 1's main
thread's busy share and CPU µs per XADD, the CPU share of each peer (or stand-in), and the
load generator's involuntary context switches a second (how often something took its core
while it could run).  Not part of ``make bench``; no test depends on it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import time

from bench.run import (
    XADD,
    BraidServer,
    _child_setup,
    cpu_seconds,
    parse_benchmark,
    pin_process,
    renice_process,
    set_cores,
    settings_of,
)
from bench.run import _each_thread as each_thread
from node.testing import LocalCluster

PLACEMENTS = ("peers", "peers-batch", "peers-nice", "stand-ins", "stopped")
SLICE_S = 0.005  # a stand-in burns its share in slices of one default send interval
# a stand-in: burn SHARE of a core, in slices of SLICE seconds, until killed (it sleeps as long
# as its CPU time is ahead of the share: the share holds however long a sleep overshoots)
BURNER = ("import sys, time\n"
          "share, piece = float(sys.argv[1]), float(sys.argv[2])\n"
          "start, cpu = time.perf_counter(), time.process_time()\n"
          "while True:\n"
          "    t = time.perf_counter()\n"
          "    while time.perf_counter() - t < share * piece:\n"
          "        pass\n"
          "    ahead = (time.process_time() - cpu) / share - (time.perf_counter() - start)\n"
          "    if ahead > 0:\n"
          "        time.sleep(ahead)\n")


def _benchmark(port: int, requests: int) -> tuple[float, float, float]:
    """(XADD/s, the load generator's involuntary switches a second, seconds it ran).  The
    switches are the children's resource usage over the run: the regions and stand-ins are
    children too, but none of them is reaped before the run ends."""
    argv = ["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(requests), "-P", "1", "--csv", *XADD]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_nivcsw
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, preexec_fn=_child_setup("load"))
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"redis-benchmark exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    switches = resource.getrusage(resource.RUSAGE_CHILDREN).ru_nivcsw - before
    return parse_benchmark(proc.stdout)["rps"], switches / took, took


def _main_thread_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def standalone(requests: int) -> float:
    server = BraidServer("standalone", ["--appendonly", "yes"])
    try:
        server.spawn()
        server.wait_ready()
        pin_process(server.pid, "server")
        return _benchmark(server.port, requests)[0]
    finally:
        server.stop()


def placed(placement: str, requests: int, peer_share: float, settings: dict[str, str] | None = None) -> dict:
    """One run of the scenario with the peers placed so; ``peer_share``: what a stand-in burns;
    ``settings``: set at every region before the run."""
    burners: list[subprocess.Popen] = []
    with LocalCluster(3) as cluster:
        cluster.links_wait(60)
        for client in cluster.clients():
            for name, value in (settings or {}).items():
                client.config_set(name, value)
            client.close()
        pids = [p.proc.pid for p in cluster.procs]
        for i, pid in enumerate(pids):
            pin_process(pid, "server" if i == 0 else "load")
        peers = pids[1:]
        if placement == "peers-nice":
            for pid in peers:
                renice_process(pid, 10)
        elif placement == "peers-batch":
            for pid in peers:
                each_thread(pid, lambda tid: os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0)))
        elif placement.startswith("stand-ins") or placement == "stopped":
            for p in cluster.procs[1:]:
                p.kill()
            peers = []
        try:
            if placement.startswith("stand-ins"):
                for _ in range(2):
                    burners.append(subprocess.Popen(
                        [sys.executable, "-c", BURNER, str(peer_share), str(SLICE_S)],
                        preexec_fn=_child_setup("load")))
                peers = [b.pid for b in burners]
            before = [cpu_seconds(pid) for pid in [pids[0], *peers]]
            main_before = _main_thread_seconds(pids[0])
            rps, switches, took = _benchmark(cluster.procs[0].port, requests)
            cpu = [cpu_seconds(pid) - b for pid, b in zip([pids[0], *peers], before, strict=True)]
            main = _main_thread_seconds(pids[0]) - main_before
        finally:
            for b in burners:
                b.kill()
                b.wait()
    return {"rps": rps, "switches": switches, "main_busy": main / took, "us_per_xadd": cpu[0] / requests * 1e6,
            "peer_share": [c / took for c in cpu[1:]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.colocation", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds (each runs every placement once); medians are printed")
    p.add_argument("--requests", type=int, default=200_000, help="XADDs per run")
    p.add_argument("--cores", default="0,1", help="two cores: region 1's, and the load generator's and the peers'")
    p.add_argument("--only", default=",".join(PLACEMENTS),
                   help=f"placements, comma-separated ({', '.join(PLACEMENTS)})")
    p.add_argument("--shares", default="", help="also stand-ins burning these shares of a core each, comma-separated")
    p.add_argument("--with", dest="variants", action="append", default=[], metavar="NAME=VALUE[,NAME=VALUE]",
                   help="also the peers with these settings at every region (repeatable)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds takes a number of rounds of at least 1")
    only = args.only.split(",") if args.only else []
    if unknown := [x for x in only if x not in PLACEMENTS]:
        p.error(f"unknown placements: {', '.join(unknown)}")
    fixed: dict[str, float] = {}
    for text in filter(None, args.shares.split(",")):
        try:
            share = float(text)
        except ValueError:
            share = -1.0
        if not 0 < share < 1:
            p.error(f"--shares takes shares of a core between 0 and 1, not {text!r}")
        fixed[f"stand-ins@{text}"] = share
    only += list(fixed)
    variants: dict[str, dict[str, str]] = {}
    for text in args.variants:
        try:
            variants[f"peers:{text}"] = settings_of(text.split(","), "--with")
        except ValueError as e:
            p.error(str(e))
    only += list(variants)
    set_cores(args.cores)
    runs: dict[str, list[dict]] = {name: [] for name in only}
    for round_ in range(args.rounds):
        alone = standalone(args.requests)
        share = 0.2  # a peer's usual share, until this round's "peers" run says
        for name in only:
            run = placed(name, args.requests, fixed.get(name, share), variants.get(name))
            if name == "peers":
                share = statistics.mean(run["peer_share"])
            run["ratio"] = run["rps"] / alone
            runs[name].append(run)
            print(f"round {round_ + 1}: {name:<14} {run['rps']:9,.0f} XADD/s  {run['ratio']:.2f} of standalone "
                  f"({alone:,.0f})  region 1 main {run['main_busy'] * 100:3.0f} % busy, "
                  f"{run['us_per_xadd']:.1f} µs/XADD;"
                  f"  peers {' '.join(f'{s * 100:.0f} %' for s in run['peer_share']) or '-'};  load generator "
                  f"preempted {run['switches']:,.0f}/s", flush=True)
    print(f"\nmedians of {args.rounds} rounds")
    width = max(15, *(len(name) + 1 for name in runs))
    print(f"{'placement':<{width}} {'XADD/s':>9} {'ratio':>6} {'main busy':>10} {'µs/XADD':>8} {'peer CPU':>9} "
          f"{'preempted/s':>12}")
    for name, done in runs.items():
        med = {k: statistics.median(r[k] for r in done)
               for k in ("rps", "ratio", "main_busy", "us_per_xadd", "switches")}
        share = statistics.median(statistics.mean(r["peer_share"]) for r in done) if done[0]["peer_share"] else None
        print(f"{name:<{width}} {med['rps']:9,.0f} {med['ratio']:6.2f} {med['main_busy'] * 100:9.0f}% "
              f"{med['us_per_xadd']:8.1f} {(f'{share * 100:.0f}%' if share is not None else '-'):>9} "
              f"{med['switches']:12,.0f}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
