"""A fault-injecting TCP relay in front of each replication link.

Theory of operation
-------------------
Regions of a cluster talk over one gRPC stream per pair, dialed by the region
with the lower number (in a sharded database, one per pair and shard: shard K of
a region dials shard K of the other).  The chaos suite gives each region its own
cluster file in which the address of every peer it dials is a :class:`Relay`
port (one per shard); the relay forwards to the peer's real replication port.
A fault between two regions reaches every shard's link between them, as a
network fault between two machines would.  So every link between
real region processes passes through a relay, without Docker, network
namespaces or root, and the same suite runs on a laptop and in CI.

A link's faults, per direction (``forward``: dialer to listener, ``backward``):

* **partition** (``cut``): every connection is closed and new ones are closed
  as soon as they are accepted: both directions, as a pulled cable.
* **one-way partition** (``held``): bytes in that direction are kept, not
  forwarded, while the other direction flows.  The sender's stream stalls, as
  behind a one-way firewall; what was held flows when the fault heals.
* **delay** (``delay_s``, with ``jitter_s``): each chunk is forwarded that much later, in order.
* **loss** (``reset_p``): a TCP stream never loses bytes - the kernel
  retransmits - so what loss does to an application is a broken connection.
  Each forwarded chunk resets the connection with this probability; the
  regions reconnect and resend what was not acknowledged, so the application
  sees duplicate operations.
* Duplication and reordering of *operations* follow from resets (resent
  batches) and from relaying (an operation reaches a region by two paths, at
  different delays); bytes inside one TCP stream are never duplicated or
  reordered by a real network either.  The deterministic simulation
  (``braid-chaos sim``) duplicates and reorders frames directly.

The relays run in one background thread with its own event loop; the control
methods are thread-safe.
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field


@dataclass
class Direction:
    """Faults on the bytes going one way through a link."""

    held: bool = False
    delay_s: float = 0.0
    jitter_s: float = 0.0
    reset_p: float = 0.0
    moved: int = 0  # bytes forwarded (for the report)

    def clear(self) -> None:
        self.held, self.delay_s, self.jitter_s, self.reset_p = False, 0.0, 0.0, 0.0


@dataclass
class Relay:
    """One link ``dialer -> listener``: accepts on ``port``, forwards to ``target``."""

    name: str
    dialer: int
    listener: int
    target: tuple[str, int]
    port: int = 0
    shard: int = 0
    cut: bool = False
    forward: Direction = field(default_factory=Direction)
    backward: Direction = field(default_factory=Direction)

    def direction(self, src: int) -> Direction:
        return self.forward if src == self.dialer else self.backward


class _Pipe:
    """One accepted connection: two pumps, each with its own delay queue."""

    def __init__(self, relay: Relay, rng: random.Random, streams: tuple) -> None:
        self.relay, self.rng = relay, rng
        (self.cr, self.cw), (self.sr, self.sw) = streams
        self.closed = asyncio.Event()
        self.held_change = asyncio.Event()

    def close(self) -> None:
        for w in (self.cw, self.sw):
            w.close()
        self.closed.set()

    async def pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, d: Direction) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        deliver = asyncio.ensure_future(self._deliver(queue, writer, d))
        try:
            while not self.closed.is_set():
                chunk = await reader.read(65536)
                if not chunk:
                    break
                when = asyncio.get_running_loop().time() + d.delay_s + self.rng.random() * d.jitter_s
                await queue.put((when, chunk))
        except (ConnectionError, OSError):
            pass
        await queue.put(None)
        await deliver
        self.close()

    async def _deliver(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, d: Direction) -> None:
        loop = asyncio.get_running_loop()
        while True:
            item = await queue.get()
            if item is None or self.closed.is_set():
                return
            when, chunk = item
            while d.held or loop.time() < when:  # held: a one-way partition keeps the bytes
                if self.closed.is_set():
                    return
                await asyncio.sleep(min(0.02, max(when - loop.time(), 0.001)))
            if self.relay.cut:
                return
            if d.reset_p and self.rng.random() < d.reset_p:
                self.close()
                return
            try:
                writer.write(chunk)
                await writer.drain()
            except (ConnectionError, OSError):
                self.close()
                return
            d.moved += len(chunk)


class RelayHub:
    """Every relay of a chaos run, served from one background thread."""

    def __init__(self, seed: int = 0) -> None:
        self.relays: dict[tuple[int, int, int], Relay] = {}  # (dialer, listener, shard)
        self._pipes: dict[tuple[int, int, int], set[_Pipe]] = {}
        self._rng = random.Random(seed)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="chaos-relays", daemon=True)
        self._thread.start()
        self._servers: list[asyncio.base_events.Server] = []

    def _run(self, coro, timeout: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # ------------------------------------------------------------ setup
    def add(self, dialer: int, listener: int, target: tuple[str, int], shard: int = 0) -> Relay:
        relay = Relay(f"{dialer}-{listener}" + (f"/shard-{shard}" if shard else ""), dialer, listener, target,
                      shard=shard)
        relay.port = self._run(self._listen(relay))
        self.relays[(dialer, listener, shard)] = relay
        return relay

    def relay(self, dialer: int, listener: int, shard: int = 0) -> Relay | None:
        """The relay of ``dialer``'s link to ``listener`` (of that shard), if there is one."""
        return self.relays.get((dialer, listener, shard))

    async def _listen(self, relay: Relay) -> int:
        key = (relay.dialer, relay.listener, relay.shard)
        self._pipes[key] = set()
        server = await asyncio.start_server(lambda r, w: self._accept(relay, r, w), "127.0.0.1", 0)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def _accept(self, relay: Relay, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if relay.cut:
            writer.close()
            return
        try:
            sr, sw = await asyncio.open_connection(*relay.target)
        except OSError:
            writer.close()  # the listener is down (killed or paused): the dialer retries
            return
        pipe = _Pipe(relay, self._rng, ((reader, writer), (sr, sw)))
        pipes = self._pipes[(relay.dialer, relay.listener, relay.shard)]
        pipes.add(pipe)
        try:
            await asyncio.gather(pipe.pump(reader, sw, relay.forward), pipe.pump(sr, writer, relay.backward))
        finally:
            pipes.discard(pipe)

    def links(self, a: int, b: int) -> list[Relay]:
        """The relays between regions a and b: one per shard (KeyError: none)."""
        dialer, listener = min(a, b), max(a, b)
        found = [r for (d, li, _k), r in sorted(self.relays.items()) if (d, li) == (dialer, listener)]
        if not found:
            raise KeyError((dialer, listener))
        return found

    # ------------------------------------------------------------ faults
    def partition(self, a: int, b: int) -> None:
        """Cut the link between regions a and b, both ways (every shard's)."""
        for relay in self.links(a, b):
            relay.cut = True
            self.loop.call_soon_threadsafe(self._close_all, (relay.dialer, relay.listener, relay.shard))

    def hold(self, src: int, dst: int) -> None:
        """One-way partition: what ``src`` sends ``dst`` is held."""
        for relay in self.links(src, dst):
            relay.direction(src).held = True

    def impair(self, a: int, b: int, delay_s: float = 0.0, jitter_s: float = 0.0, reset_p: float = 0.0) -> None:
        """Delay (with jitter) and connection resets on the link, both ways."""
        for relay in self.links(a, b):
            for d in (relay.forward, relay.backward):
                d.delay_s, d.jitter_s, d.reset_p = delay_s, jitter_s, reset_p

    def heal(self, a: int | None = None, b: int | None = None) -> None:
        """Clear every fault on one link, or on all of them."""
        relays = list(self.relays.values()) if a is None or b is None else self.links(a, b)
        for relay in relays:
            relay.cut = False
            relay.forward.clear()
            relay.backward.clear()

    def _close_all(self, key: tuple[int, int, int]) -> None:
        for pipe in list(self._pipes.get(key, ())):
            pipe.close()

    def close(self) -> None:
        async def shutdown() -> None:
            for s in self._servers:
                s.close()
            for key in self._pipes:
                self._close_all(key)

        try:
            self._run(shutdown())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
            if not self._thread.is_alive():
                self.loop.close()
