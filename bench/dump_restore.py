"""How long DUMP and RESTORE of one large stream hold the event loop.

In process (``RegionCore.call``, no sockets): a stream of N entries of one field
whose value is SIZE bytes, random hex (``--kind random``, what LZF compresses a
little) or one repeated letter (``--kind x``, what it compresses well); then
DUMP of it (rdbcompression yes, as by default) and RESTORE of that payload under
another key, each timed alone, best of ``--repeat``::

    python -m bench.dump_restore --entries 20000 --kind random
    python -m bench.dump_restore --entries 50000 --kind x
    python -m bench.dump_restore --entries 20000 --profile   # cProfile's top functions

Both commands run on the single event loop in a server: the time each takes here
is how long every other client of the region waits.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time

from node.region.config import Config
from node.region.core import RegionCore, Session


def build(entries: int, size: int, kind: str) -> tuple[RegionCore, Session]:
    core = RegionCore(Config(), clock=lambda: 1_000)
    client = Session(core)
    client.authenticated = True
    rng = random.Random(1)
    for i in range(1, entries + 1):
        value = rng.randbytes(size // 2).hex().encode() if kind == "random" else b"x" * size
        core.call(client, [b"XADD", b"s", b"%d-1" % i, b"v", value])
    return core, client


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=20_000)
    p.add_argument("--size", type=int, default=1024, help="bytes per value")
    p.add_argument("--kind", choices=("random", "x"), default="random")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="print cProfile's top 25 instead")
    args = p.parse_args()
    core, client = build(args.entries, args.size, args.kind)

    def dump() -> bytes:
        return core.call(client, [b"DUMP", b"s"])

    payload = dump()
    assert isinstance(payload, bytes), payload

    def restore() -> None:
        assert core.call(client, [b"RESTORE", b"t", b"0", payload, b"REPLACE"]) == "OK"

    if args.profile:
        for name, fn in (("DUMP", dump), ("RESTORE", restore)):
            prof = cProfile.Profile()
            prof.runcall(fn)
            print(f"---- {name}")
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    times = {}
    for name, fn in (("DUMP", dump), ("RESTORE", restore)):
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        times[name] = best
    assert core.call(client, [b"XLEN", b"t"]) == args.entries
    print(f"{args.entries} x {args.size} B ({args.kind}), payload {len(payload) / 1e6:.1f} MB: "
          f"DUMP {times['DUMP'] * 1e3:.0f} ms, RESTORE {times['RESTORE'] * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
