"""Replication links between regions over gRPC (the only module that imports grpc).

Theory of operation
-------------------
Each pair of regions keeps one bidirectional ``Sync`` stream (proto/replication.proto).
The region with the lower number dials; the other serves.  The dialer sends
``Hello`` (cluster id, database, region, token, version vector); the server checks
every field and either answers ``Welcome`` or ends the call with
PERMISSION_DENIED - a mismatched peer is refused and logged, and nothing it sent
is applied.

After the handshake both ends run the same :class:`Link` logic: a sender that
ships, in batches, every envelope of the local causal log the peer has not
acknowledged (relayed operations of third regions included, so a cut link heals
through any region that talks to both), and a receiver that hands incoming
envelopes to :class:`crdt.causal.CausalLog` (which applies each exactly once and
in causal order) and acknowledges with its version vector.  What to send, what
a batch or an ack means and when a full resync is needed are decided by the pure
:class:`crdt.sync.LinkState` (the deterministic simulation, chaos/sim/, runs the
same decisions over a seeded network); :class:`Link` only converts protobuf,
queues frames and waits.  Dialers reconnect with exponential backoff and jitter.
Messages are gzip-compressed.

Only what is safely logged leaves: ``sendable`` (set by the region from its
operation log) bounds how far into the causal log links may send, so a peer
never holds an operation the region could lose in a crash and then mint again
under the same dot.

Full resync: a region trims its backlog (``trim``), so a peer that was away long
may lack operations no longer held.  The side that sees this at the handshake
(:meth:`crdt.causal.CausalLog.lacks_dropped`) sends its whole replicated state
first, as ``Resync`` chunks built by ``make_image``; the peer hands them to
``install_image`` and the stream continues from the image's version vector.
What each peer acknowledged is kept across reconnections (``peer_acked``), so
trimming knows what every peer holds.

Pausing cuts links: ``pause()`` cuts every link of the region, ``pause(peer)`` only
the link to one peer (a partition, for maintenance and tests).  A cut link is
closed at once, its frames are neither sent nor applied, and the peer's attempts
to reconnect are turned away with UNAVAILABLE until ``resume``; one side cutting
is enough, since the pair shares one stream.

The hub does not know what an operation means: envelopes carry it as bytes and
``on_apply`` is called with each envelope the causal log delivers.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import random
import time
from collections.abc import Callable, Iterable

import grpc

from crdt.causal import CausalLog, Envelope
from crdt.sync import LinkState
from proto import replication_pb2 as pb
from proto import replication_pb2_grpc as pb_grpc

log = logging.getLogger("braid.replication")

BATCH = 256  # envelopes per Batch frame
RESYNC_CHUNK = 1 << 20  # bytes of a full-resync image per frame (gRPC's default limit is 4 MB)


def to_proto(env: Envelope) -> pb.Envelope:
    return pb.Envelope(origin=env.origin, n=env.n, deps=dict(env.deps), op=env.op)


def from_proto(m: pb.Envelope) -> Envelope:
    return Envelope(m.origin, m.n, tuple(sorted(m.deps.items())), bytes(m.op))


def _end_call(out: asyncio.Queue) -> None:
    """Tell whoever drains ``out`` that the link is over (frames still queued are moot)."""
    while out.full():
        out.get_nowait()
    out.put_nowait(None)


def _no_resync(*_args):
    raise ConnectionError("this region cannot take part in a full resync")


class Link:
    """One established stream with a peer, whichever side dialed: a thin adapter that moves
    frames for :class:`crdt.sync.LinkState`, which makes every decision."""

    def __init__(self, hub: "ReplicationHub", peer: int, peer_vv: dict[int, int]) -> None:
        self.hub = hub
        self.peer = peer
        # what the peer acknowledged is kept per peer across reconnections (trimming reads it);
        # its Hello says what it holds now (it may have lost some in a crash)
        self.state = LinkState(hub.causal, peer_vv, hub.peer_acked.setdefault(peer, {}))
        self.resync: list[bytes] = []  # chunks of a full-resync image being received
        self.wakeup = asyncio.Event()
        self.wakeup.set()

    # the state's registers, read by the hub, the region's status and tests
    @property
    def acked(self) -> dict[int, int]:
        return self.state.acked

    @acked.setter
    def acked(self, vv: dict[int, int]) -> None:
        self.state.acked = vv

    @property
    def position(self) -> int:
        return self.state.position

    async def send_image(self, out: asyncio.Queue) -> None:
        """Full resync: the peer lacks operations this region trimmed; send everything."""
        image, vv = self.hub.make_image()
        end = self.hub.causal.end  # the image holds the log up to here (made in this loop turn)
        log.warning("region %d lacks trimmed operations: full resync (%d bytes)", self.peer, len(image))
        self.hub.resyncs_sent += 1
        for at in range(0, max(len(image), 1), RESYNC_CHUNK):
            chunk = image[at:at + RESYNC_CHUNK]
            await out.put(pb.Frame(resync=pb.Resync(data=chunk, last=at + RESYNC_CHUNK >= len(image))))
        self.state.image_sent(vv, end)

    async def send_loop(self, out: asyncio.Queue) -> None:
        if self.state.starts_with_image() and not self.hub.is_cut(self.peer):
            await self.send_image(out)
        while True:
            await self.wakeup.wait()
            await asyncio.sleep(0)  # let operations issued in this loop turn join the batch
            self.wakeup.clear()
            if self.hub.is_cut(self.peer):
                continue
            missing = self.state.outgoing(self.hub.sendable_upto())  # NeedsResync ends the link
            for i in range(0, len(missing), BATCH):
                chunk = missing[i:i + BATCH]
                await out.put(pb.Frame(batch=pb.Batch(envelopes=[to_proto(e) for e in chunk])))

    async def on_frame(self, frame: pb.Frame, out: asyncio.Queue) -> None:
        kind = frame.WhichOneof("body")
        if self.hub.is_cut(self.peer):
            return  # nothing crosses a cut link; it is being closed
        if kind == "batch":
            for env in self.state.on_batch([from_proto(m) for m in frame.batch.envelopes]):
                self.hub.deliver(env)
            await out.put(pb.Frame(ack=pb.Ack(vv=self.hub.causal.vv)))
        elif kind == "ack":
            self.state.on_ack(dict(frame.ack.vv))
        elif kind == "resync":
            self.resync.append(frame.resync.data)
            if frame.resync.last:
                image, self.resync = b"".join(self.resync), []
                if not self.hub.install_image(image):
                    raise ConnectionResetError("a full resync was not needed: start the link again")
                self.state.image_installed(self.hub.causal.vv)
                await out.put(pb.Frame(ack=pb.Ack(vv=self.hub.causal.vv)))

    def lag(self, now: float) -> tuple[int, float]:
        """(operations the peer has not acknowledged, age in ms of the oldest of them)."""
        return self.state.lag(self.hub.arrivals, now)


class _Servicer(pb_grpc.ReplicationServicer):
    def __init__(self, hub: "ReplicationHub") -> None:
        self.hub = hub

    async def Sync(self, request_iterator, context):  # noqa: N802 (gRPC's name)
        hub = self.hub
        first = await request_iterator.__anext__()
        hello = first.hello if first.WhichOneof("body") == "hello" else None
        reason = hub.check_hello(hello)
        if reason:
            hub.refused += 1
            log.warning("refused a replication peer: %s", reason)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, reason)
        if hub.is_cut(hello.region):
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the link to this region is paused")
        link = Link(hub, hello.region, dict(hello.vv))
        out: asyncio.Queue = asyncio.Queue(maxsize=64)  # backpressure on the sender
        await out.put(pb.Frame(welcome=pb.Welcome(region=hub.region, vv=hub.causal.vv)))
        return_task = asyncio.ensure_future(hub.run_link(link, request_iterator, out))
        hub._served[link.peer] = out
        try:
            while True:
                frame = await out.get()
                if frame is None:  # the link was cut: end this call
                    return
                yield frame
        finally:
            return_task.cancel()
            if hub._served.get(link.peer) is out:
                del hub._served[link.peer]


class ReplicationHub:
    """A region's replication endpoint: serves peers, dials peers, relays."""

    def __init__(self, region: int, cluster_id: str, database: str, token: str,
                 causal: CausalLog, on_apply: Callable[[Envelope], None]) -> None:
        self.region = region
        self.cluster_id = cluster_id
        self.database = database
        self.token = token
        self.causal = causal
        self.on_apply = on_apply
        self.links: dict[int, Link] = {}
        self.refused = 0  # handshakes this region refused
        self.denied = 0   # handshakes peers refused to this region
        self.sendable: int | None = None  # absolute causal-log position safe to send up to (None: all)
        self.peer_acked: dict[int, dict[int, int]] = {}  # per peer, the version vector it acknowledged
        self.make_image: Callable[[], tuple[bytes, dict]] = _no_resync
        self.install_image: Callable[[bytes], bool] = _no_resync
        self.resyncs_sent = 0
        self.resyncs_received = 0
        self.paused = False          # every link cut
        self.cut: set[int] = set()   # links to these peers cut
        self.arrivals: list[float] = []  # monotonic time each log entry was issued or received here
        self._served: dict[int, asyncio.Queue] = {}  # calls peers made to us, ended by putting None
        self._peers: dict[int, str] = {}
        self._server: grpc.aio.Server | None = None
        self._dialers: dict[int, asyncio.Task] = {}
        self.port = 0

    # ------------------------------------------------------------ local side
    def issue(self, op: bytes) -> Envelope:
        """Stamp a local operation (already applied locally) and wake the links."""
        env = self.causal.stamp(op)
        self.arrivals.append(time.monotonic())
        self.wake()
        return env

    def deliver(self, env: Envelope) -> None:
        """Hand ``env`` to the causal log, which has ``on_apply`` apply it and every envelope
        it makes ready, each before counting it.  If applying one raises, the exception
        propagates: that envelope and the ones after it are neither counted, acknowledged
        nor relayed (the region fail-stops, node/supervision.py)."""
        def apply(ready: Envelope) -> None:
            self.on_apply(ready)
            self.arrivals.append(time.monotonic())  # one arrival per log entry, in log order

        self.causal.receive(env, apply)
        self.wake()  # relay what arrived to the other peers

    def sendable_upto(self) -> int:
        return self.causal.end if self.sendable is None else self.sendable

    def trim(self, count: int) -> None:
        """Drop the ``count`` oldest envelopes of the backlog (see crdt/causal.py)."""
        self.causal.trim(count)
        del self.arrivals[:count]

    def log_replaced(self) -> None:
        """After a full resync installed another log: every link looks at it from its start."""
        self.resyncs_received += 1
        self.arrivals = [time.monotonic()] * len(self.causal.log)
        for link in self.links.values():
            link.state.log_replaced()
        self.wake()

    def wake(self) -> None:
        for link in self.links.values():
            link.wakeup.set()

    def check_hello(self, hello: pb.Hello | None) -> str:
        if hello is None:
            return "the first frame was not Hello"
        if hello.cluster_id != self.cluster_id:
            return f"cluster id {hello.cluster_id!r} is not {self.cluster_id!r}"
        if hello.database != self.database:
            return f"database {hello.database!r} is not {self.database!r}"
        if not hmac.compare_digest(hello.token.encode(), self.token.encode()):
            return f"region {hello.region} presented a wrong token"
        if hello.region == self.region:
            return f"region number {hello.region} is this region's own"
        return ""

    def is_cut(self, peer: int) -> bool:
        return self.paused or peer in self.cut

    # ------------------------------------------------------------ serving
    async def serve(self, host: str = "127.0.0.1", port: int = 0, extra: Iterable = ()) -> int:
        """Serve Replication, and the ``extra`` services (each ``.add_to(server)``), on one port."""
        self._server = grpc.aio.server(compression=grpc.Compression.Gzip)
        pb_grpc.add_ReplicationServicer_to_server(_Servicer(self), self._server)
        for service in extra:
            service.add_to(self._server)
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        await self._server.start()
        return self.port

    async def run_link(self, link: Link, incoming, out: asyncio.Queue) -> None:
        """Send and receive until either side stops; then the call ends (None on ``out``)."""
        self.links[link.peer] = link

        async def receive() -> None:
            async for frame in incoming:
                await link.on_frame(frame, out)

        sender, receiver = asyncio.ensure_future(link.send_loop(out)), asyncio.ensure_future(receive())
        try:
            done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a failure ends the link (a dialer reconnects)
        finally:
            sender.cancel()
            receiver.cancel()
            if self.links.get(link.peer) is link:
                del self.links[link.peer]
            _end_call(out)

    # ------------------------------------------------------------ dialing
    def pause(self, peer: int | None = None) -> None:
        """Cut every link (``peer`` None) or the link to one peer: stop sending and applying, close."""
        if peer is None:
            self.paused = True
        else:
            self.cut.add(peer)
        for p in [p for p in self._served if self.is_cut(p)]:
            _end_call(self._served[p])
        for p in [p for p in self._dialers if self.is_cut(p)]:
            self._dialers.pop(p).cancel()

    def resume(self, peer: int | None = None) -> None:
        if peer is None:
            self.paused = False
            self.cut.clear()
        else:
            self.cut.discard(peer)
        for p, address in self._peers.items():
            if not self.is_cut(p):
                self.dial(p, address)

    def dial(self, peer: int, address: str) -> None:
        """Keep a link to ``peer`` up, reconnecting with backoff and jitter."""
        self._peers[peer] = address
        if peer not in self._dialers and not self.is_cut(peer):
            self._dialers[peer] = asyncio.ensure_future(self._dial_forever(peer, address))

    async def _dial_forever(self, peer: int, address: str) -> None:
        delay = 0.05
        while True:
            try:
                await self._dial_once(peer, address)
                delay = 0.05
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.PERMISSION_DENIED:
                    self.denied += 1
                    log.error("region %d refused this region: %s", peer, e.details())
                else:
                    log.info("link to region %d down: %s", peer, e.code().name)
            except Exception as e:  # whatever ended the link, the region keeps dialing
                log.warning("link to region %d ended: %s", peer, e)
            await asyncio.sleep(delay * (0.5 + random.random()))  # backoff with jitter
            delay = min(delay * 2, 1.0)

    async def _dial_once(self, peer: int, address: str) -> None:
        async with grpc.aio.insecure_channel(address, compression=grpc.Compression.Gzip) as channel:
            call = pb_grpc.ReplicationStub(channel).Sync()
            await call.write(pb.Frame(hello=pb.Hello(cluster_id=self.cluster_id, database=self.database,
                                                     region=self.region, token=self.token,
                                                     vv=self.causal.vv)))
            frames = call.__aiter__()  # one reader API only: grpc.aio forbids mixing read() and iteration
            first = await frames.__anext__()
            if first.WhichOneof("body") != "welcome":
                raise ConnectionError(f"region {peer} did not welcome this region")
            out: asyncio.Queue = asyncio.Queue(maxsize=64)

            async def writer() -> None:
                while (frame := await out.get()) is not None:
                    await call.write(frame)

            writing = asyncio.ensure_future(writer())
            try:
                await self.run_link(Link(self, first.welcome.region, dict(first.welcome.vv)), frames, out)
            finally:
                writing.cancel()

    async def stop(self) -> None:
        for task in self._dialers.values():
            task.cancel()
        self._dialers.clear()
        if self._server is not None:
            await self._server.stop(grace=0.5)
