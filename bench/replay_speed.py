"""Benchmark: the operation log's record size per XADD, and how fast a region replays it.

``python -m bench.replay_speed [single|cluster] [--mb 64]``: a real region (``node.server.Server``
in this process, never started: no sockets; ``cluster``: region 1 of two) takes
``XADD s * f1 abcdefghijkl f2 abcdefghijkl`` (redis-benchmark's payload) until its
append-only file holds ``--mb`` megabytes; then a fresh region loads the file
(``open_log``: scan and replay).  Printed: the record size of one XADD, the XADDs/s
written, and the load time in CPU seconds (``time.process_time``, so other work on a
shared machine disturbs it less).  A measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from node.cluster_config import ClusterConfig, RegionSpec
from node.config import Config
from node.persistence.aof import scan
from node.server import ClientConnection, Server

ARGV = [b"XADD", b"s", b"*", b"f1", b"abcdefghijkl", b"f2", b"abcdefghijkl"]


def _region(directory: str, cluster: bool) -> Server:
    specs = [RegionSpec("r1", 1, "127.0.0.1", 0, 0), RegionSpec("r2", 2, "127.0.0.1", 0, 0)]
    server = Server(Config(dir=directory), cluster=(ClusterConfig("bench", "db", "t", 16, specs), specs[0])
                    if cluster else None)
    server.schedule_log_write = lambda: None  # no event loop: the writer flushes every 10,000 XADDs
    return server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["single", "cluster"], nargs="?", default="single")
    ap.add_argument("--mb", type=int, default=64)
    args = ap.parse_args()
    directory = tempfile.mkdtemp(prefix="braid-replay-")
    try:
        server = _region(directory, args.kind == "cluster")
        server.open_log()
        client = ClientConnection(server)
        client.authenticated = True
        written, t0 = 0, time.process_time()
        while server.oplog.size < args.mb * 1024 * 1024:
            for _ in range(10_000):
                server.call(client, ARGV)
            written += 10_000
            server.oplog.write_out()
        write_s = time.process_time() - t0
        size = server.oplog.size
        server.oplog.close()
        del server
        last = scan(os.path.join(directory, "appendonlydir")).records[-1]
        t0 = time.process_time()
        _region(directory, args.kind == "cluster").open_log()
        load_s = time.process_time() - t0
        print(f"{args.kind}: {written:,} XADDs, log {size / 1e6:.1f} MB, last XADD record {len(last[2]) + 13} bytes; "
              f"written at {written / write_s:,.0f}/s; loaded in {load_s:.1f} s ({written / load_s:,.0f} records/s)")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
