"""Benchmark: the operation log's record size per XADD, and how long a region takes to start on it.

``python -m bench.replay_speed [single|cluster] [--mb 64] [--repeat 3] [--no-process]``: a real
region (``node.runtime.server.Server`` in this process, never started: no sockets; ``cluster``: region 1
of two, the other never running) takes ``XADD s * f1 abcdefghijkl f2 abcdefghijkl``
(redis-benchmark's payload) until its append-only file holds ``--mb`` megabytes, twice:

* ``no snapshot``: automatic snapshots off (``auto-aof-rewrite-percentage 0``), so a start
  replays the whole file;
* ``automatic snapshots``: as many XADDs under the default rules, checked every 10,000 XADDs as the server's
  once-a-second cron checks them (``rewrite_due``, node/persistence/oplog.py), a snapshot
  written when they say so; a start loads the last snapshot and replays what follows.

For each file: a fresh region in this process loads it (``open_log``: scan, snapshot, replay),
``--repeat`` times - CPU seconds (``time.process_time``, so other work on a shared machine
disturbs it less) and wall seconds - and a real ``braid node`` process is started on a copy of
the directory until it answers PING (the wall clock a user sees: interpreter start, imports,
the load; and the CPU seconds the process used until then), ``--repeat`` times.
``--no-snapshot-only``: only the first file.  Medians are printed, with every run.  A measurement,
not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from node.activeactive.cluster_config import local_cluster
from node.persistence.aof import scan
from node.region.config import Config
from node.runtime.connection import ClientConnection
from node.runtime.server import Server
from node.testing import BraidProcess, free_ports
from node.tools.cluster_processes import ping

START_DEADLINE_S = 600
ARGV = [b"XADD", b"s", b"*", b"f1", b"abcdefghijkl", b"f2", b"abcdefghijkl"]


def _cluster_file(directory: str):
    """Region 1 of two, on free ports, its cluster file beside the data (``tls = false``)."""
    from node.activeactive.cluster_config import RegionSpec

    cfg = local_cluster(2, 0)
    ports = free_ports(4)
    cfg.regions = [RegionSpec(r.name, r.number, r.host, ports[2 * i], ports[2 * i + 1])
                   for i, r in enumerate(cfg.regions)]
    path = os.path.join(directory, "cluster.toml")
    cfg.save(path)
    return cfg, path


def _region(directory: str, cluster, auto: bool) -> Server:
    config = Config(dir=directory)
    if not auto:
        config.set("auto-aof-rewrite-percentage", 0)
    server = Server(config, cluster=(cluster, cluster.regions[0]) if cluster is not None else None)
    server.schedule_turn_end = lambda: None  # no event loop: the writer flushes every 10,000 XADDs
    return server


def write(directory: str, cluster, mb: int, auto: bool, xadds: int | None) -> dict:
    """XADDs until the log holds ``mb`` megabytes, or ``xadds`` of them (the snapshots drop
    the log's older segments)."""
    server = _region(directory, cluster, auto)
    server.open_log()
    client = ClientConnection(server)
    client.authenticated = True
    written, save_s, t0 = 0, [], time.process_time()
    while written < xadds if xadds is not None else server.core.oplog.size < mb * 1024 * 1024:
        for _ in range(10_000):
            server.core.call(client, ARGV)
        written += 10_000
        server.core.oplog.write_out()
        if auto and server.core.oplog.rewrite_due(server.core.config, server.core.log_base_size) is not None:
            s0 = time.perf_counter()
            server.core.save()  # what the cron's BGSAVE does, without a worker thread
            save_s.append(time.perf_counter() - s0)
    write_s = time.process_time() - t0
    size = server.core.oplog.size
    server.core.oplog.close()
    records = scan(os.path.join(directory, "appendonlydir")).records  # none: a snapshot just took them all
    return {"written": written, "write_s": write_s, "size": size, "snapshots": len(save_s),
            "last_save_s": save_s[-1] if save_s else 0.0,
            "record_bytes": len(records[-1][2]) + 13 if records else 0}


def load(directory: str, cluster, auto: bool) -> tuple[float, float, int]:
    """(CPU s, wall s, records replayed) of one in-process load."""
    server = _region(directory, cluster, auto)
    t0, w0 = time.process_time(), time.perf_counter()
    server.open_log()
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    records = server.core.loading_report[0].records
    server.core.oplog.close()
    return cpu, wall, records


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a running process has used (Linux's /proc; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def process_start(directory: str, cluster_file: str | None, scratch: str) -> tuple[float, float | None]:
    """Wall seconds from spawning ``braid node`` on a copy of ``directory`` until it answers PING,
    and the CPU seconds the process used until then (None where it cannot be read): on a
    machine other work shares, the wall clock depends on the load, the CPU much less."""
    copy = os.path.join(scratch, "start")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(os.path.join(directory, "appendonlydir"), os.path.join(copy, "appendonlydir"))
    extra, port = {}, None
    if cluster_file is not None:
        from node.activeactive.cluster_config import load as load_cluster

        spec = load_cluster(cluster_file).regions[0]
        port = spec.port
        extra = {"cluster_file": cluster_file, "region": spec.name}
    proc = BraidProcess(port, copy, **extra)
    with open(os.path.join(copy, "braid.log"), "ab") as out:
        t0 = time.perf_counter()
        # not BraidProcess.start(): its 30 s deadline is a test's, and a long replay may pass it
        proc.proc = subprocess.Popen(proc.argv(), stdout=out, stderr=subprocess.STDOUT, cwd=copy)
        try:
            deadline = t0 + START_DEADLINE_S
            while not ping(proc.port):
                if proc.proc.poll() is not None:
                    raise RuntimeError(f"braid node exited with {proc.proc.returncode}: see {copy}/braid.log")
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"braid node did not answer PING within {START_DEADLINE_S} s")
                time.sleep(0.01)  # polling a process we wait for, not synchronising a test
            return time.perf_counter() - t0, _cpu_seconds(proc.proc.pid)
        finally:
            proc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["single", "cluster"], nargs="?", default="single")
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-process", action="store_true", help="only the in-process loads")
    ap.add_argument("--process-runs", type=int, help="process starts on the file without snapshots (default: --repeat)")
    ap.add_argument("--no-snapshot-only", action="store_true", help="only the file without snapshots")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    xadds = None  # the second file gets as many XADDs as the first
    for auto in (False,) if args.no_snapshot_only else (False, True):
        directory = tempfile.mkdtemp(prefix="braid-replay-")
        try:
            cluster, cluster_file = _cluster_file(directory) if args.kind == "cluster" else (None, None)
            w = write(directory, cluster, args.mb, auto, xadds)
            xadds = w["written"]
            loads = [load(directory, cluster, auto) for _ in range(args.repeat)]
            cpu = statistics.median(c for c, _, _ in loads)
            wall = statistics.median(x for _, x, _ in loads)
            replayed = loads[0][2]
            label = "automatic snapshots" if auto else "no snapshot"
            print(f"{args.kind}, {label}: {w['written']:,} XADDs, log now {w['size'] / 1e6:.1f} MB "
                  f"({w['snapshots']} snapshots written, the last in "
                  f"{w['last_save_s']:.2f} s), last XADD record {w['record_bytes']} bytes; "
                  f"written at {w['written'] / w['write_s']:,.0f}/s")
            print(f"  in-process load: {replayed:,} records replayed, median {cpu:.2f} s CPU, {wall:.2f} s wall "
                  f"({replayed / cpu if cpu else 0:,.0f} records/s); runs (CPU s): "
                  + ", ".join(f"{c:.2f}" for c, _, _ in loads))
            runs = args.repeat if auto else args.process_runs or args.repeat
            starts = [] if args.no_process else [process_start(directory, cluster_file, directory)
                                                 for _ in range(runs)]
            if starts:
                cpus = [c for _, c in starts if c is not None]
                cpu_text = f" ({statistics.median(cpus):.2f} s CPU of the process)" if cpus else ""
                print(f"  braid node start until PING: median {statistics.median(w for w, _ in starts):.2f} s wall"
                      f"{cpu_text}; runs (wall s / CPU s): "
                      + ", ".join(f"{w:.2f} / {c if c is None else round(c, 2)}" for w, c in starts))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
