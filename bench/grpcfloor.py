"""What a replication frame costs in gRPC alone: CPU microseconds a bare ``grpc.aio`` server
spends per frame it receives, with none of Braid's work on it.

``python -m bench.grpcfloor [--rate 200,1000] [--seconds 8] [--bytes 1000] [--reply-every N]``:
a server process (uvloop, the project's ``Replication`` service with a ``Sync`` that only
counts frames, and with ``--reply-every N`` answers every Nth with a small Ack, as a region
acknowledges) on the second core of ``--cores``; a client process on the first writes packed
frames of ``--bytes`` at ``--rate`` a second over one bidirectional stream.  Prints the
server's process CPU time (every thread, from ``/proc``) per frame received.

The number to hold beside ``bench.peercost``'s cost per frame: what a region pays per frame
beyond this is Braid's (its link's tasks, the log's write and fsync, the apply).  Not part of
``make bench``; no test depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time

import grpc

from bench.run import cpu_seconds
from node.testing import free_port, wait_until
from proto import replication_pb2 as pb
from proto import replication_pb2_grpc as pb_grpc


class _Counting(pb_grpc.ReplicationServicer):
    def __init__(self, reply_every: int) -> None:
        self.reply_every = reply_every

    async def Sync(self, request_iterator, context):  # noqa: N802 - the service's method name
        n = 0
        async for _frame in request_iterator:
            n += 1
            if self.reply_every and n % self.reply_every == 0:
                yield pb.Frame(ack=pb.Ack(vv={1: n, 2: 0, 3: 0}))


async def _serve(port: int, reply_every: int) -> None:
    server = grpc.aio.server()
    pb_grpc.add_ReplicationServicer_to_server(_Counting(reply_every), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def _write(port: int, rate: int, seconds: float, size: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ReplicationStub(channel).Sync()

        async def drain() -> None:
            async for _ in call:
                pass

        reader = asyncio.ensure_future(drain())
        frame, start, sent = pb.Frame(packed=b"x" * size), time.monotonic(), 0
        while time.monotonic() - start < seconds:
            await call.write(frame)
            sent += 1
            ahead = start + sent / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)  # pacing the writer
        await call.done_writing()
        await reader
    return sent


def measure(rate: int, seconds: float, size: int, reply_every: int, cores: tuple[int, int]) -> float:
    import uvloop

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "bench.grpcfloor", "--serve", str(port),
                               "--reply-every", str(reply_every)])
    mine = os.sched_getaffinity(0)
    try:
        def listening() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return True
            except OSError:
                return False

        wait_until(listening, 30, what="the gRPC server to listen")
        for tid in os.listdir(f"/proc/{server.pid}/task"):
            os.sched_setaffinity(int(tid), {cores[1]})
        os.sched_setaffinity(0, {cores[0]})
        before = cpu_seconds(server.pid)
        sent = uvloop.run(_write(port, rate, seconds, size))
        after = cpu_seconds(server.pid)
    finally:
        os.sched_setaffinity(0, mine)
        server.kill()
        server.wait()
    return (after - before) * 1e6 / sent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpcfloor", description=__doc__.splitlines()[0])
    p.add_argument("--rate", default="200,1000", help="frames per second, comma-separated")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--bytes", type=int, default=1000, help="bytes of each frame's packed batch")
    p.add_argument("--reply-every", type=int, default=0, metavar="N", help="the server answers every Nth frame")
    p.add_argument("--cores", default="0,1", help="two cores: the writer's, the server's")
    p.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the server process
    args = p.parse_args(argv)
    if args.serve:
        import uvloop

        uvloop.run(_serve(args.serve, args.reply_every))
        return 0
    cores = tuple(int(c) for c in args.cores.split(","))
    if len(cores) != 2:
        raise SystemExit("--cores takes two core numbers")
    print(f"{'frames/s':>8}  server CPU µs per frame received ({args.bytes} B"
          + (f", an ack every {args.reply_every}" if args.reply_every else "") + ")")
    for rate in (int(r) for r in args.rate.split(",")):
        print(f"{rate:8d}  {measure(rate, args.seconds, args.bytes, args.reply_every, cores):8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
