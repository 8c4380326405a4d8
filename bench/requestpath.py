"""The request path in-process: CPU microseconds per request, without sockets or a load generator.

``python -m bench.requestpath [--rounds R] [NAME ...]`` builds one region (``appendonly no``),
connects a :class:`node.runtime.server.ClientConnection` to a transport that takes every write, and
feeds it the requests of ``bench.run``'s scenarios through ``data_received``, one read at a
time: the parser, dispatch, the handler, the reply's encoding and the write call, as a real
connection runs them, minus the event loop and the kernel, with the garbage collector tuned as
a serving region tunes it.  It prints the process CPU time per request, the median of R rounds
(the first round's numbers are in the list too).

This isolates what Braid's own Python costs from what redis-benchmark and the loopback take
(they are the same for Redis): the number to compare before and after a change to the request
path, on the same machine state.  Not part of ``make bench``; no test depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from node.runtime.connection import ClientConnection
from node.runtime.server import tune_garbage_collector
from node.testing import RecordingTransport, cluster_of, region_server


def request(*args: str | bytes) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%b\r\n" % (len(b), b)
    return out


FIELDS = ("f1", "abcdefghijkl", "f2", "abcdefghijkl")
XADD = request("xadd", "bench:s", "*", *FIELDS)
# name: (bytes of one read, requests in it, reads per round)
SCENARIOS = {
    "ping": (request("ping"), 1, 50_000),
    "xadd_p1": (XADD, 1, 50_000),
    "xadd_p16": (XADD * 16, 16, 5_000),
    "xrange_100": (request("xrange", "bench:r", "-", "+", "COUNT", "100"), 1, 2_000),
    "xrevrange_100": (request("xrevrange", "bench:r", "+", "-", "COUNT", "100"), 1, 2_000),
    "xreadgroup_count1": (request("xreadgroup", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "bench:g", ">"),
                          1, 20_000),
}


async def measure(names: list[str], rounds: int, region_of: int = 0,
                  log_dir: str | None = None) -> dict[str, list[float]]:
    server = region_server(cluster_of(region_of) if region_of else None, 1, log_dir)
    tune_garbage_collector()  # as a serving region runs (node/runtime/server.py)
    client = ClientConnection(server)
    sink = RecordingTransport(keep=False)
    client.connection_made(sink)  # type: ignore[arg-type]
    # the end of each turn of the event loop (the replies are written) runs after each read,
    # rather than scheduled on a loop that this measurement never lets run
    server.schedule_turn_end = lambda: None  # type: ignore[method-assign]

    def serve(data: bytes) -> None:
        client.data_received(data)
        server.finish_turn()

    for _ in range(1000):
        serve(request("xadd", "bench:r", "*", *FIELDS))
    serve(request("xgroup", "create", "bench:g", "g", "$", "mkstream"))
    results: dict[str, list[float]] = {}
    for name in names:
        data, per_read, reads = SCENARIOS[name]
        if name == "xreadgroup_count1":  # an entry for every read of every round
            for _ in range(reads * rounds):
                serve(request("xadd", "bench:g", "*", *FIELDS))
        runs = []
        for _ in range(rounds):
            before = sink.written
            t0 = time.process_time()
            for _ in range(reads):
                serve(data)
            runs.append((time.process_time() - t0) / (reads * per_read) * 1e6)
            assert sink.written > before and not client.closing, f"{name}: no replies"
        results[name] = runs
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.requestpath", description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"scenarios (default all): {', '.join(SCENARIOS)}")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per scenario (the median is printed)")
    ap.add_argument("--appendonly", action="store_true", help="with the append-only file (everysec, in a temporary "
                    "directory); the scenarios' default is without, as bench.run compares with Redis")
    ap.add_argument("--region-of", type=int, default=0, metavar="N",
                    help="region 1 of a cluster of N regions (links not dialed) instead of a standalone region")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    with tempfile.TemporaryDirectory() as tmp:
        results = asyncio.run(measure(args.names or list(SCENARIOS), max(args.rounds, 1), args.region_of,
                                      tmp if args.appendonly else None))
    print(f"{'scenario':20s} {'CPU us/request':>15s}  rounds")
    for name, runs in results.items():
        print(f"{name:20s} {statistics.median(runs):15.2f}  {' '.join(f'{r:.2f}' for r in runs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
