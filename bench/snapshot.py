"""Benchmark: encoding and decoding a snapshot, schema format against the old pickle format.

``python -m bench.snapshot [--entries N] [--repeat R]``

Builds states through the pure core (``crdt.ops.apply``, the default layout of
100 entries per block), then times, best of R:

- ``encode``: ``snapshot.encode`` (what SAVE/BGSAVE and a full-resync image run on
  the event loop between two commands);
- ``decode (file)``: ``snapshot.decode(..., verify_blocks=False)``, what a restart
  does with a file it wrote (checksummed);
- ``decode (image)``: ``snapshot.decode`` with every block walked, what a region
  does with a peer's full-resync image;
- ``pickle`` / ``unpickle``: the format-1 body (pickle protocol 5, read with the
  restricted unpickler), as snapshots were made before format 2.

States: N entries ``f <short value>`` in one stream with a consumer group holding
10,000 pending entries; and N entries over 1,000 keys.  A measurement: nothing
passes or fails.
"""

from __future__ import annotations

import argparse
import io
import pickle
import time

from crdt import ops
from crdt.groups import read_new
from node.persistence import snapshot
from node.persistence.legacy import _Unpickler


def one_stream(entries: int) -> ops.Keyspace:
    keys, limits = ops.Keyspace(), ops.Limits()
    for i in range(1, entries + 1):
        ops.apply(keys, ops.AddEntry(b"s", 1, (1_700_000_000_000 + i, 0), [b"f", b"v%d" % (i % 1000)]), limits)
    ops.apply(keys, ops.CreateGroup(b"s", b"g", (0, 0), 0), limits)
    s = keys[b"s"]
    g = s.groups[b"g"]
    c, _ = g.consumer(b"alice", 0)
    read_new(s, g, c, (0, 0), 10_000, False, 1_700_000_000_000)
    return keys


def many_keys(entries: int, nkeys: int = 1000) -> ops.Keyspace:
    keys, limits = ops.Keyspace(), ops.Limits()
    per = entries // nkeys
    for k in range(nkeys):
        key = b"key:%d" % k
        for i in range(1, per + 1):
            ops.apply(keys, ops.AddEntry(key, 1, (1_700_000_000_000 + i, 0), [b"f", b"v%d" % i]), limits)
    return keys


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(name: str, keys, repeat: int) -> None:
    data = snapshot.encode(keys, None, 1, 0, False, 1)
    old = pickle.dumps({"keys": keys, "causal": None}, protocol=5)
    rows = [
        ("encode", best(lambda: snapshot.encode(keys, None, 1, 0, False, 1), repeat), len(data)),
        ("decode (file)", best(lambda: snapshot.decode(data, verify_blocks=False), repeat), len(data)),
        ("decode (image)", best(lambda: snapshot.decode(data), repeat), len(data)),
        ("pickle (format 1)", best(lambda: pickle.dumps({"keys": keys, "causal": None}, protocol=5), repeat),
         len(old)),
        ("unpickle (format 1)", best(lambda: _Unpickler(io.BytesIO(old)).load(), repeat), len(old)),
    ]
    print(f"\n{name}")
    print(f"| {'operation':<20} | {'ms':>8} | {'bytes':>12} |")
    print(f"| {'-' * 20} | {'-' * 8}:| {'-' * 12}:|")
    for op, seconds, size in rows:
        print(f"| {op:<20} | {seconds * 1000:8.1f} | {size:12,} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.snapshot")
    p.add_argument("--entries", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    measure(f"{args.entries:,} entries in one stream, a group with 10,000 pending", one_stream(args.entries),
            args.repeat)
    measure(f"{args.entries:,} entries over 1,000 keys", many_keys(args.entries), args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
