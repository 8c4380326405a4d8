"""XADD over TLS: Braid beside Debian's redis-server, with ``redis-benchmark --tls``.

``python -m bench.tls [--requests N]`` makes a cluster CA and certificates
(``node.security.certs``), starts one Braid region (``--appendonly no``) and one
``redis-server`` (``--save '' --appendonly no``), each with its plain port and a TLS port
presenting the same kind of certificate and asking clients for theirs
(``tls-auth-clients yes``), and runs the same load against each port:
``redis-benchmark -c 50 -P 1 -n N --csv xadd bench:tls * f1 abcdefghijkl f2 abcdefghijkl``
(with ``--tls --cacert --cert --key`` on the TLS ports).  It prints requests per second,
the TLS/plain ratio of each server and the Braid/Redis ratio over TLS, as a Markdown
table to paste into ``bench/README.md``.  A measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import tempfile

from bench.run import parse_benchmark
from node.security.certs import create_cluster_certs
from node.testing import BraidProcess, RedisProcess, free_port

COMMAND = ["xadd", "bench:tls", "*", "f1", "abcdefghijkl", "f2", "abcdefghijkl"]


def run_benchmark(port: int, requests: int, tls: list[str]) -> float:
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), *tls, "-c", "50", "-P", "1",
            "-n", str(requests), "--csv", *COMMAND]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=True)
    return parse_benchmark(out.stdout)["rps"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tls", description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200_000)
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="braid-bench-tls-")
    try:
        made = create_cluster_certs(os.path.join(tmp, "tls"), ["region-1"])
        crt, key = made.regions["region-1"]
        server_tls = ["--tls-cert-file", crt, "--tls-key-file", key, "--tls-ca-cert-file", made.ca]
        client_tls = ["--tls", "--cacert", made.ca, "--cert", made.client[0], "--key", made.client[1]]
        braid_tls, redis_tls = free_port(), free_port()

        class TlsRedis(RedisProcess):
            def argv(self) -> list[str]:
                return super().argv() + ["--tls-port", str(redis_tls), *server_tls]

        results: dict[str, dict[str, float]] = {}
        servers = [("Braid", BraidProcess(extra_args=["--appendonly", "no", "--tls-port", str(braid_tls),
                                                      *server_tls]), braid_tls),
                   ("Redis", TlsRedis(), redis_tls)]
        for name, proc, tls_port in servers:
            with proc:
                results[name] = {"plain": run_benchmark(proc.port, args.requests, []),
                                 "tls": run_benchmark(tls_port, args.requests, client_tls)}
                proc.client().flushall()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    version = subprocess.run(["redis-server", "--version"], capture_output=True,
                             text=True).stdout.split()[2].removeprefix("v=")
    print(f"{platform.node()}: {os.cpu_count()} CPUs, redis-server {version}, {args.requests} requests each\n")
    print("| server | XADD c50 P1 plain (rps) | over TLS (rps) | TLS / plain |")
    print("| --- | ---: | ---: | ---: |")
    for name, r in results.items():
        print(f"| {name} | {r['plain']:,.0f} | {r['tls']:,.0f} | {r['tls'] / r['plain']:.2f} |")
    b, r = results["Braid"], results["Redis"]
    print(f"\nBraid / Redis: plain {b['plain'] / r['plain']:.2f}, over TLS {b['tls'] / r['tls']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
