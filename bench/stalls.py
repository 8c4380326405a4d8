"""Work done on the event loop that every client waits for: ``python -m bench.stalls``.

Times, in one process and without a network:

* ``ActiveActive.trim_backlog`` (once a second) with ``--ops`` operations in the
  backlog that no peer acknowledged yet: nothing can be dropped, so the cost is
  what the call does to find that out;
* ``Database.expire_idmp`` (once a second) over ``--keys`` streams of which ten hold
  IDMP maps;
* ``AppendLog.append`` across 20 segment rolls (16 MB segments of 64 KB records,
  written to the OS as the server's end-of-turn write does): the worst append is the
  one that rolled.

The first call of the first two includes one-off work (counting the backlog, indexing
the keys); the steady state is the best of the following calls.  This is a
measurement, not a test: nothing passes or fails on a number.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from crdt import ops
from node.activeactive.cluster_config import local_cluster
from node.persistence.aof import OP_LOCAL, AppendLog
from node.region.config import Config
from node.runtime.server import Server


def _timed(fn, runs: int = 5) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def backlog_trim(n_ops: int) -> str:
    cfg = local_cluster(3, 17000)  # never started: no sockets
    aa = Server(Config(), cluster=(cfg, cfg.regions[0])).core.aa
    for _ in range(n_ops):
        aa.hub.issue(b"x" * 60)
    t = _timed(lambda: aa.trim_backlog(1 << 40, 0, time.monotonic()))
    return f"trim_backlog, {n_ops:,} operations: first {t[0] * 1000:.1f} ms, then {min(t[1:]) * 1e6:.0f} us"


def idmp_expiry(n_keys: int) -> str:
    srv = Server(Config())
    keys, limits = srv.core.db.keys, srv.core.db.limits
    for i in range(n_keys):
        ops.apply(keys, ops.AddEntry(b"k%d" % i, 1, (1, 0), [b"f", b"v"]), limits)
    for i in range(10):
        ops.apply(keys, ops.AddEntry(b"k%d" % i, 1, (2, 0), [b"f", b"v"], pid=b"p", iid=b"i%d" % i), limits)
    t = _timed(lambda: srv.core.db.expire_idmp(0))
    return f"expire_idmp, {n_keys:,} keys: first {t[0] * 1000:.1f} ms, then {min(t[1:]) * 1e6:.0f} us"


def segment_roll(directory: str | None) -> str:
    payload = b"x" * 65536
    times = []
    with tempfile.TemporaryDirectory(dir=directory) as d, AppendLog.open(d, segment_size=16 << 20) as log:
        for i in range(16 * 20):
            t0 = time.perf_counter()
            log.append(OP_LOCAL, payload)
            times.append(time.perf_counter() - t0)
            if i % 16 == 15:
                log.flush()
    times.sort()
    return (f"append across 20 segment rolls: median {times[len(times) // 2] * 1e6:.0f} us, "
            f"worst {times[-1] * 1000:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--dir", help="where the segments go (a real disk; default the system's temp dir)")
    args = ap.parse_args()
    print(backlog_trim(args.ops))
    print(idmp_expiry(args.keys))
    print(segment_roll(args.dir))


if __name__ == "__main__":
    main()
