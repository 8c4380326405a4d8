"""How long a state join holds a region's event loop, against a full resync of the same size.

``python -m bench.state_join [--entries 100000,300000] [--keys 50] [--with-log]``: regions 1, 2
and 3 of one cluster, in this process, first share that many entries region 1 wrote (every
region applies them), then each writes that many entries of its own (spread over ``--keys``
streams) while apart.  Regions 1 and 2 drop their whole backlogs (a partition longer than
both), region 3 keeps its own.  Then region 3 installs region 1's image (a full resync: its
own operations the image lacks are applied again on top) and region 2 joins region 1's image
(``RegionCore.join_image``): the two calls a link makes in one turn of the loop, so the time
each takes is how long the region's clients wait.  ``--with-log`` gives regions 2 and 3 an
append-only file, so both times include the snapshot that makes the new state the region's
base on disk.  Prints both times and their ratio.  Not part of ``make bench``; no test
depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from node.region.core import Session
from node.testing import cluster_of, region_server


def _write(server, entries: int, keys: int) -> None:
    me = Session(server)
    me.authenticated = True
    for i in range(entries):
        server.call(me, [b"XADD", b"k%d" % (i % keys), b"*", b"f", b"v" * 20])


async def measure(entries: int, keys: int, with_log: bool) -> tuple[float, float, int]:
    """(on an event loop: a region with an append-only file fsyncs in a worker thread)"""
    cluster = cluster_of(3)
    with tempfile.TemporaryDirectory() as d2, tempfile.TemporaryDirectory() as d3:
        one = region_server(cluster, 1)
        two = region_server(cluster, 2, d2 if with_log else None)
        three = region_server(cluster, 3, d3 if with_log else None)
        _write(one, entries, keys)  # the history every region shares
        for env in list(one.core.aa.causal.log):
            for server in (two, three):
                server.core.aa.hub.deliver(env)
        for server in (one, two, three):
            _write(server, entries, keys)
        for server in (one, two):
            aa = server.core.aa
            aa.hub.trim(len(aa.causal.log))  # gone before any peer received them
        image, _vv = one.core.aa.resync_image(0)
        started = time.perf_counter()
        assert three.core.install_image(image)
        resync = time.perf_counter() - started
        started = time.perf_counter()
        assert two.core.join_image(image)
        joined = time.perf_counter() - started
        assert two.core.aa.causal.vv == {1: 2 * entries, 2: entries}
        return resync, joined, len(image)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", default="100000,300000", help="entries each region writes (comma-separated runs)")
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--with-log", action="store_true", help="regions 2 and 3 keep an append-only file")
    args = p.parse_args()
    print(f"{'entries':>9} {'image bytes':>12} {'full resync ms':>15} {'join ms':>8} {'join/resync':>12}")
    for n in (int(x) for x in args.entries.split(",")):
        resync, joined, size = asyncio.run(measure(n, args.keys, args.with_log))
        print(f"{n:>9} {size:>12} {resync * 1000:>15.0f} {joined * 1000:>8.0f} {joined / resync:>12.2f}")


if __name__ == "__main__":
    main()
