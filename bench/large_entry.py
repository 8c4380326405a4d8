"""How long one large entry takes to cross a three-region cluster.

XADD of a random value of SIZE MB at region 1, then the time until both other
regions have applied it (their version vectors equal region 1's), then one
XRANGE reading it back at region 3.  Automatic snapshots are turned off so that
the numbers are the link's, not a snapshot's::

    python -m bench.large_entry 64
"""

from __future__ import annotations

import argparse
import os
import time

from node.testing import LocalCluster, replication_status, version_vector, wait_until


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("size_mb", type=int, nargs="?", default=64)
    size = p.parse_args().size_mb
    with LocalCluster(3) as cluster:
        clients = cluster.clients(socket_timeout=600)
        for c in clients:
            c.config_set("auto-aof-rewrite-min-size", "1gb")
        value = os.urandom(size << 20)
        t0 = time.perf_counter()
        clients[0].xadd("big", {"v": value})
        t1 = time.perf_counter()
        want = version_vector(replication_status(clients[0]))
        wait_until(lambda: all(version_vector(replication_status(c)) == want for c in clients[1:]),
                   timeout=600, interval=0.005, what="the entry at every region")
        t2 = time.perf_counter()
        got = clients[2].xrange("big")
        t3 = time.perf_counter()
        assert got[0][1][b"v"] == value, "region 3 holds another value"
    print(f"{size} MB: XADD {t1 - t0:.2f} s; at both other regions {t2 - t1:.2f} s later; "
          f"XRANGE at region 3 {t3 - t2:.2f} s")


if __name__ == "__main__":
    main()
