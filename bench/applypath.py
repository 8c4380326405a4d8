"""The replication apply path in-process: CPU microseconds per operation a region spends on
another region's frames, without gRPC, sockets or a load generator.

``python -m bench.applypath [--ops 20,140,500] [--rounds R]``: region 1 of a three-region
cluster issues XADDs of ``bench.run``'s payload; region 2 (appendonly on, ``everysec``, in a
temporary directory) takes them in packed frames of that many operations (``--ops``: 140 is
what a region 1 serving 50 clients sends a peer per 5 ms send interval) through its link's
``on_frame``, as the link does once gRPC hands it a frame, and the event loop turns after
each frame (the log's write, the paced fsync in a worker thread, the acknowledgement in the
link's outbox), with the garbage collector tuned as a serving region tunes it.  It prints the
process CPU time per operation (every thread), the median of the rounds: the peer's side of
``bench.run``'s region1of3 scenario minus gRPC and the kernel.  Not part of ``make bench``;
no test depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from node.activeactive.frames import pack_batch
from node.activeactive.link import Link
from node.runtime.server import tune_garbage_collector
from node.testing import cluster_of, region_server
from proto import replication_pb2 as pb

FIELDS = [b"f1", b"abcdefghijkl", b"f2", b"abcdefghijkl"]


async def measure(sizes: list[int], rounds: int) -> dict[int, list[float]]:
    cluster = cluster_of(3)
    source = region_server(cluster, 1)
    with tempfile.TemporaryDirectory() as tmp:
        peer = region_server(cluster, 2, tmp)
        tune_garbage_collector()  # as a serving region runs (node/runtime/server.py)
        hub = peer.core.aa.hub
        link = Link(hub, 1, {}, packed=True)
        hub.links[1] = link
        issued = 0

        def frames(size: int, count: int) -> list[pb.Frame]:
            nonlocal issued
            out = []
            for _ in range(count):
                start = len(source.core.aa.causal.log)
                for _ in range(size):
                    source.core.db.add_plain(b"bench:s", 1, (1_764_000_000_000 + issued, 0), FIELDS)
                    issued += 1
                out.append(pb.Frame(packed=pack_batch(source.core.aa.causal.log[start:])))
            return out

        results: dict[int, list[float]] = {}
        try:
            for size in sizes:
                count = max(20, 40_000 // size)
                runs = []
                for _ in range(rounds):
                    batch = frames(size, count)
                    t0 = time.process_time()
                    for frame in batch:
                        link.on_frame(frame)
                        await asyncio.sleep(0)  # the turn's end: the log's write, the fsync's hand-off
                    runs.append((time.process_time() - t0) / (size * count) * 1e6)
                    assert peer.core.aa.causal.vv.get(1) == issued, "the peer did not apply every operation"
                results[size] = runs
        finally:
            await asyncio.sleep(0.05)  # the last fsync's worker returns before the log closes
            peer.core.oplog.close()
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.applypath", description=__doc__.splitlines()[0])
    p.add_argument("--ops", default="20,140,500", help="operations per frame, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.ops.split(",")]
    results = asyncio.run(measure(sizes, args.rounds))
    print(f"{'ops/frame':>9}  {'CPU us/op':>9}  rounds")
    for size, runs in results.items():
        print(f"{size:9d}  {statistics.median(runs):9.2f}  " + " ".join(f"{r:.2f}" for r in runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
