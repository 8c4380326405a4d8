"""What a batch frame costs its two ends in-process: CPU microseconds to build one (the sender:
envelopes to a frame, compressed when that helps, then serialized as gRPC does on write) and
to read one (the receiver: parsed as gRPC does, decompressed, back to envelopes), in the
protobuf form a region sends a peer of an earlier version and in the packed form.

``python -m bench.frames [--ops 15,60,250] [--rounds 5]``: batches of that many XADD-sized
operations (``--ops``: 15 is a lone client's 3,000 XADD/s per 5 ms send interval, 60 and 250
what 50 clients make), the median of the rounds.  Without sockets and gRPC's own per-message
work, which is the same for both forms.  Not part of ``make bench``; no test depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from crdt.causal import CausalLog
from node.activeactive.frames import from_proto, unpack_batch
from node.activeactive.hub import ReplicationHub
from node.activeactive.link import Link
from proto import replication_pb2 as pb


def _operation(i: int) -> bytes:
    # about what an XADD of two 12-byte fields encodes to: a key, an ID, fields, some noise
    return b"\x94\xa4xadd\xa7bench:s\x92\xcf" + (1_764_000_000_000 + i).to_bytes(8, "big") + \
        b"\x94\xa2f1\xacabcdefghijkl\xa2f2\xac" + os.urandom(6).hex().encode()


def _per_frame_us(fn, frames: int) -> float:
    start = time.process_time()
    for _ in range(frames):
        fn()
    return (time.process_time() - start) / frames * 1e6


async def measure(ops: int, rounds: int) -> dict[str, list[float]]:
    hub = ReplicationHub(1, "c1", "db", "t", CausalLog(1), lambda env: None)
    for i in range(ops):
        hub.issue(_operation(i))
    envelopes = list(hub.causal.log)
    frames = max(50, 20_000 // ops)
    out: dict[str, list[float]] = {}
    for packed in (False, True):
        link = Link(hub, 2, {}, packed=packed)
        form = "packed" if packed else "protobuf"
        wire = (await link.batch_frame(envelopes)).SerializeToString()

        def build(link: Link = link) -> None:
            hub.last_batch = None  # a frame built anew each time (not the one shared by the links)
            _build_now(link, envelopes).SerializeToString()

        def read(link: Link = link, wire: bytes = wire) -> None:
            frame = pb.Frame.FromString(wire)
            kind = frame.WhichOneof("body")
            if kind == "packed":
                unpack_batch(frame.packed)
            elif kind == "packed_zlib":
                unpack_batch(link.inflate(frame.packed_zlib))
            elif kind == "batch":
                [from_proto(m) for m in frame.batch.envelopes]
            else:
                [from_proto(m) for m in link.unpack(frame.batch_zlib).envelopes]

        out[f"{form} build"] = [_per_frame_us(build, frames) for _ in range(rounds)]
        out[f"{form} read"] = [_per_frame_us(read, frames) for _ in range(rounds)]
        out[f"{form} bytes"] = [float(len(wire))]
    return out


def _build_now(link: Link, envelopes) -> pb.Frame:
    """``Link.batch_frame`` run to its end without an event loop turn (below the size it would
    compress in a worker thread it never waits)."""
    coro = link.batch_frame(envelopes)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the batch was compressed in a worker thread: choose fewer operations")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.frames", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="15,60,250", help="operations per batch, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"CPU µs per frame (median of {args.rounds} rounds); bytes on the wire")
    print(f"{'ops':>5} {'form':<9} {'build':>8} {'read':>8} {'bytes':>7}")
    for ops in (int(x) for x in args.ops.split(",")):
        res = asyncio.run(measure(ops, args.rounds))
        for form in ("protobuf", "packed"):
            print(f"{ops:>5} {form:<9} {statistics.median(res[form + ' build']):>8.1f} "
                  f"{statistics.median(res[form + ' read']):>8.1f} {int(res[form + ' bytes'][0]):>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
