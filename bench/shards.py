"""A region of 2 shards against a region of 1: does a second shard process buy throughput?

``python -m bench.shards [--requests N] [--repeats R] [--out PATH]`` starts one region of a
one-region database twice, in memory (``--appendonly no``): first unsharded (one
process), then with ``[shards] count = 2`` (two processes, ``braid node --shard K``,
shard K pinned to CPU K), and runs the same ``redis-benchmark`` XADD on random keys
against each - ``--cluster`` against the sharded one (it reads CLUSTER NODES and sends
each key to its shard), plain against the unsharded one.  The key carries ``{tag}``,
which ``redis-benchmark --cluster`` replaces per connection with a tag of one of that
node's slots (without it, a random key lands on another shard and the run stops at the
first MOVED); the unsharded region takes the same keys literally.

Besides requests per second it records each shard's CPU time per request (from
``/proc/PID/stat``; the requests a shard served from its INFO commandstats), which does
not depend on what else shares the cores: the scaling a machine with a core per shard
and one for the load would show is about (1-shard CPU per request) / (max per shard).
The load generator runs unpinned, so on a 2-core machine it takes part of both cores
and the 2-shard throughput is below that bound.

With ``--redis-server PATH`` the same benchmark also runs against a Redis Cluster of two
masters of that build (``--cluster-enabled yes``, in memory, slots 0-8191 and 8192-16383,
master K pinned to CPU K, as the shards): the sharded region's throughput and CPU per
request beside Redis's on the same cores, in the same run.

Results go to ``bench/RESULTS-shards.md`` (medians of ``--repeats`` runs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import redis

from bench.run import cpu_seconds, free_port, loadavg, machine, parse_benchmark
from node.activeactive.cluster_config import local_cluster

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
START_DEADLINE = 60.0
KEYSPACE = 100_000


def _pin(pid: int, cpu: int) -> None:
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), {cpu % (os.cpu_count() or 1)})


def _commandstat(client: redis.Redis, name: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every process, then SIGKILL the ones still there after 10 s."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextlib.contextmanager
def region(shards: int):
    """One region (``shards`` processes) on free ports; yields [(port, pid)] per shard."""
    work = tempfile.mkdtemp(prefix="braid-bench-shards-")
    procs: list[subprocess.Popen] = []
    try:
        cfg = local_cluster(1, 0, os.path.join(work, "data"), shards=shards)
        ports = [free_port() for _ in range(2 * shards)]
        r = cfg.regions[0]
        if shards > 1:
            r.ports, r.repl_ports = ports[:shards], ports[shards:]
        r.port, r.repl_port = ports[0], ports[shards]
        path = os.path.join(work, "cluster.toml")
        cfg.save(path)
        env = {**os.environ, "PYTHONPATH": ROOT}
        for k in range(shards):
            argv = [sys.executable, "-m", "node", "--log-level", "WARNING", "node", "--config", path,
                    "--region", r.name, "--appendonly", "no"]
            if shards > 1:
                argv += ["--shard", str(k)]
            log = open(os.path.join(work, f"shard-{k}.log"), "ab")  # noqa: SIM115 (closed with the process)
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=work))
        out = []
        for k, p in enumerate(procs):
            port = r.ports[k] if shards > 1 else r.port
            deadline = time.monotonic() + START_DEADLINE
            while True:
                if p.poll() is not None:
                    with open(os.path.join(work, f"shard-{k}.log"), "rb") as f:
                        raise RuntimeError(f"shard {k} exited: {f.read()[-2000:].decode(errors='replace')}")
                try:
                    if redis.Redis(port=port, socket_timeout=2).ping():
                        break
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"shard {k} did not answer PING within {START_DEADLINE:.0f} s")
                time.sleep(0.1)  # polling a starting process (a deadline above bounds it)
            _pin(p.pid, k)
            out.append((port, p.pid))
        yield out
    finally:
        _stop(procs)
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def redis_cluster(server: str, nodes: int = 2):
    """A Redis Cluster of ``nodes`` masters of the redis-server at ``server`` on free ports, each
    holding an equal range of slots; yields [(port, pid)] once every node says the cluster is ok."""
    work = tempfile.mkdtemp(prefix="braid-bench-redis-cluster-")
    procs: list[subprocess.Popen] = []
    try:
        ports = [_cluster_port() for _ in range(nodes)]
        for k, port in enumerate(ports):
            d = os.path.join(work, f"node-{k}")
            os.makedirs(d)
            procs.append(subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no", "--dir", d,
                 "--daemonize", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        clients = [redis.Redis(port=p, socket_timeout=5) for p in ports]
        deadline = time.monotonic() + START_DEADLINE
        for c in clients:
            while True:
                try:
                    if c.ping():
                        break
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("a Redis Cluster node did not answer PING")
                time.sleep(0.1)  # polling a starting process (a deadline above bounds it)
        step = 16384 // nodes
        for k, c in enumerate(clients):
            last = 16383 if k == nodes - 1 else (k + 1) * step - 1
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", k * step, last)
            if k:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0])
        while not all(c.info("cluster").get("cluster_enabled") and "cluster_state:ok" in
                      c.execute_command("CLUSTER", "INFO").decode() for c in clients):
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.1)  # polling the nodes' gossip (a deadline above bounds it)
        for k, p in enumerate(procs):
            _pin(p.pid, k)
        yield [(port, p.pid) for port, p in zip(ports, procs, strict=True)]
    finally:
        _stop(procs)
        shutil.rmtree(work, ignore_errors=True)


def _cluster_port() -> int:
    """A free port for a Redis Cluster node whose cluster bus port (10000 above) is free too."""
    while True:
        port = free_port()
        if port + 10000 <= 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port


def benchmark_argv(port: int, requests: int, pipeline: int, cluster: bool) -> list[str]:
    exe = shutil.which("redis-benchmark") or "redis-benchmark"
    argv = [exe, "-h", "127.0.0.1", "-p", str(port), "-c", "50", "-n", str(requests), "-P", str(pipeline),
            "-r", str(KEYSPACE), "--csv"]
    if cluster:
        argv.append("--cluster")
    return argv + ["xadd", "s:{tag}:__rand_int__", "*", "f1", "abcdefghijkl", "f2", "abcdefghijkl"]


def one_run(shards: int, requests: int, pipeline: int, redis_server: str | None = None) -> dict:
    """One benchmark against a region of ``shards`` shards, or (``redis_server``) a Redis Cluster of 2."""
    servers = redis_cluster(redis_server) if redis_server else region(shards)
    with servers as endpoints:
        clients = [redis.Redis(port=port) for port, _ in endpoints]
        calls = [_commandstat(c, "xadd") for c in clients]
        cpu = [cpu_seconds(pid) for _, pid in endpoints]
        argv = benchmark_argv(endpoints[0][0], requests, pipeline, cluster=len(endpoints) > 1)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"redis-benchmark failed: {proc.stdout[-1000:]} {proc.stderr[-1000:]}")
        result = parse_benchmark(proc.stdout[proc.stdout.find('"test"'):])  # (--cluster prints the nodes first)
        served = [_commandstat(c, "xadd") - before for c, before in zip(clients, calls, strict=True)]
        used = [cpu_seconds(pid) - before for (_, pid), before in zip(endpoints, cpu, strict=True)]
        if sum(served) < requests:
            raise RuntimeError(f"the shards served {sum(served)} XADDs of {requests}")
        return {"rps": result["rps"], "served": served,
                "cpu_us": [u / s * 1e6 if s else 0.0 for u, s in zip(used, served, strict=True)],
                "command": " ".join(argv[1:]).replace(str(endpoints[0][0]), "$PORT")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=1_000_000, help="requests per run (default 1,000,000)")
    p.add_argument("--pipeline", type=int, default=16, help="redis-benchmark -P (default 16)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each variant, alternating (default 3)")
    p.add_argument("--out", default=os.path.join(HERE, "RESULTS-shards.md"))
    p.add_argument("--redis-server", metavar="PATH",
                   help="also run the benchmark against a Redis Cluster of two masters of this redis-server")
    args = p.parse_args(argv)
    runs: dict[int, list[dict]] = {1: [], 2: []}
    redis_runs: list[dict] = []
    version = _version(args.redis_server) if args.redis_server else ""
    for i in range(args.repeats):
        for shards in (1, 2):
            run = one_run(shards, args.requests, args.pipeline)
            runs[shards].append(run)
            print(f"run {i + 1}: {shards} shard(s): {run['rps']:,.0f} req/s, CPU per request per shard "
                  f"{', '.join(f'{c:.2f}' for c in run['cpu_us'])} µs, served {run['served']}", flush=True)
        if args.redis_server:
            run = one_run(2, args.requests, args.pipeline, args.redis_server)
            redis_runs.append(run)
            print(f"run {i + 1}: Redis Cluster of 2: {run['rps']:,.0f} req/s, CPU per request per node "
                  f"{', '.join(f'{c:.2f}' for c in run['cpu_us'])} µs, served {run['served']}", flush=True)
    rps = {s: statistics.median(r["rps"] for r in runs[s]) for s in runs}
    cpu1 = statistics.median(r["cpu_us"][0] for r in runs[1])
    cpu2 = [statistics.median(r["cpu_us"][k] for r in runs[2]) for k in range(2)]
    share = [statistics.median(r["served"][k] / sum(r["served"]) for r in runs[2]) for k in range(2)]
    ratio = rps[2] / rps[1]
    # a shard on a core of its own serves 1/cpu requests a second, of which the share s is its
    # part: the busiest shard bounds the whole (1 shard: 1/cpu1)
    bound = cpu1 / max(c * s for c, s in zip(cpu2, share, strict=True))
    m = machine()
    lines = [
        "# A region of 2 shards against a region of 1",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m bench.shards --requests {args.requests} "
        f"--pipeline {args.pipeline} --repeats {args.repeats}"
        + (" --redis-server $REDIS_SERVER" if args.redis_server else "") + f"` on {m['cpu']} ({m['cores']} cores), "
        f"load average {loadavg()}. In memory (`--appendonly no`), one region of a one-region database; shard K "
        "pinned to CPU K, redis-benchmark unpinned (it shares both cores). Medians of the runs.",
        "",
        "| region | req/s | CPU per request (µs, per shard) | share of requests (per shard) |",
        "| --- | ---: | ---: | ---: |",
        f"| 1 shard | {rps[1]:,.0f} | {cpu1:.2f} | 1.00 |",
        f"| 2 shards | {rps[2]:,.0f} | {' / '.join(f'{c:.2f}' for c in cpu2)} | "
        f"{' / '.join(f'{s:.2f}' for s in share)} |",
        "",
        f"2 shards / 1 shard: **{ratio:.2f}×** (target ≥ 1.4× on this 2-core machine).",
        "",
        f"From CPU per request: with a core per shard and the load generator elsewhere, 2 shards could serve "
        f"{bound:.2f}× what 1 does (1-shard CPU per request over the busier shard's CPU per request times its "
        "share of the load); a shard's cost per request does not grow with the shard count, so S shards on "
        "S free cores scale about S× (less the imbalance of the keys over the shards).",
        "",
        "Commands:",
        "",
        f"- 1 shard: `redis-benchmark {runs[1][0]['command']}`",
        f"- 2 shards: `redis-benchmark {runs[2][0]['command']}`",
        "",
    ]
    if redis_runs:
        redis_rps = statistics.median(r["rps"] for r in redis_runs)
        redis_cpu = [statistics.median(r["cpu_us"][k] for r in redis_runs) for k in range(2)]
        lines += [
            f"## Beside a Redis Cluster of 2 masters (Redis {version})",
            "",
            "The same benchmark (`--cluster`) against two `redis-server --cluster-enabled yes` masters, in "
            "memory, slots split in two halves, master K pinned to CPU K, in the same run:",
            "",
            "| servers | req/s | CPU per request (µs, per process) |",
            "| --- | ---: | ---: |",
            f"| Braid, 1 region of 2 shards | {rps[2]:,.0f} | {' / '.join(f'{c:.2f}' for c in cpu2)} |",
            f"| Redis Cluster, 2 masters | {redis_rps:,.0f} | {' / '.join(f'{c:.2f}' for c in redis_cpu)} |",
            "",
            f"Braid 2 shards / Redis Cluster 2 masters: **{rps[2] / redis_rps:.2f}×** in requests a second "
            f"(the load generator takes its share of the same cores); by CPU per request, "
            f"{max(redis_cpu) / max(cpu2):.2f}× of Redis's speed per process.",
            "",
        ]
    lines += ["Runs:", "", "| run | servers | req/s | CPU per request (µs) | requests served |",
              "| ---: | --- | ---: | ---: | ---: |"]
    for label, series in ([(f"{s} shard{'s' if s > 1 else ''}", runs[s]) for s in (1, 2)]
                          + ([("Redis Cluster of 2", redis_runs)] if redis_runs else [])):
        for i, r in enumerate(series, 1):
            lines.append(f"| {i} | {label} | {r['rps']:,.0f} | {' / '.join(f'{c:.2f}' for c in r['cpu_us'])} | "
                         f"{' / '.join(f'{n:,}' for n in r['served'])} |")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"2 shards / 1 shard: {ratio:.2f}x; wrote {args.out}")
    return 0


def _version(server: str) -> str:
    out = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=30).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("v=")), "?")


if __name__ == "__main__":
    sys.exit(main())
