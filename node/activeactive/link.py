"""One replication link, whichever side dialed: what it sends, what it does with what it
receives, and its watchdog.  The hub that owns it (node/activeactive/hub.py) handshakes,
keeps the links and applies what they deliver.

Theory of operation
-------------------
Batching and relaying.  What a frame costs (gRPC, protobuf, the peer's apply
and its ack) is paid per frame, not per operation, so frames are paced: a link
sends at most one batch per ``crdt-repl-send-interval-ms`` (5 ms) and one ack per
``crdt-repl-ack-interval-ms`` (10 ms), the first at once after a quiet spell, and
what arrives meanwhile shares the next frame (a newer ack replaces the waiting
one).  How long an ack may wait depends on who waits for it (:class:`AckPace`).  One
that only tells a peer its own operations arrived is lazy: it waits
``LAZY_ACK_FACTOR`` ack intervals, since the peer holds no relays of its own
operations and nothing else of it waits for that ack (backlog trimming, stability
and the lag it reports may lag as much).  One that raises a third region's
operations lets the peer drop the copies it holds as relays toward this region: it
must come well within the relay delay, so it waits a third of that (at least an ack
interval, at most a lazy one's wait) - with three regions and one writer, the two
other regions then tell each other a third fewer times a second that the writer's
operations arrived, which was half of their frames.  Acks of the parts of a large
operation or of a full resync (progress the stall watch reads) wait one ack
interval.  The links of a region share the frames they build: its own operations
go to every peer, converted and compressed once.  A received batch
is applied operation by operation, and the region's blocked readers are woken once,
at its end.  A lone client writing a few thousand operations a second thus costs each
region a few hundred frames a second, not several per operation.  Relaying is
what heals a cut link, but with every link up it only sends each region a second
copy of every operation: so an operation of a third region (neither this
region's nor the peer's) is held back on the link, dropped once the peer
acknowledges it (acks go to every peer), and relayed only when the peer's
acknowledgements of that region have not risen - past what this link relayed of
it - for ``crdt-repl-relay-delay-ms`` (50 ms) while it acknowledged others' (four
times that when it acknowledged nothing at all: a peer short of CPU gains nothing
from copies): the peer's own link to that region is down or stuck.  A direct link that
works, even one far behind, keeps raising them, so a slow link is not loaded further with
copies.  ``relayed`` counts the operations relayed, ``ReplicationHub.duplicates`` counts envelopes that
arrived a second time.  What to send, which relays to hold and until when, what a
batch or an ack means, when a full resync is needed, how frames are cut and joined
again are decided by the pure code of :mod:`crdt.sync` (the deterministic simulation,
chaos/sim/, runs the same decisions over a seeded network on its virtual clock);
:class:`Link` only converts protobuf, queues frames, reads the clock and waits - its
one timer wakes the sender when the relay hold asks for a look.  Dialers reconnect
with exponential backoff and jitter.

Dead and stuck peers.  HTTP/2 keepalive pings run on both ends
(``crdt-repl-keepalive-ms``, answered within ``crdt-repl-keepalive-timeout-ms``,
5 s each; servers accept pings at that rate), so a peer that powered off or
froze is noticed in seconds and the dialer dials again.  A watchdog closes a
link that has unacknowledged operations, or frames its peer does not read, and
no progress for ``crdt-repl-stall-timeout-ms`` (30 s): progress is an ack that
raises what the peer acknowledged, or that reports more bytes of a fragmented
operation or image received (``Ack.received``), so a large transfer on a slow
link is not cut.  Closed links are logged and counted (``crdt_link_stalls``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import zlib
from typing import TYPE_CHECKING, Any

from crdt.causal import Envelope, forks
from crdt.sync import (
    ImageAssembler,
    LinkState,
    PartsAssembler,
    ProtocolError,
    RelayHold,
    opening,
    part_size,
    plan_frames,
)
from node.activeactive.frames import (
    COMPRESS_FROM,
    COMPRESS_INLINE,
    FRAME_HEADER,
    from_proto,
    pack_batch,
    to_proto,
    unpack_batch,
)
from node.activeactive.outbox import OUTBOX_FRAMES, Outbox
from node.activeactive.pacing import AckPace
from proto import replication_pb2

# protoc's generated module builds its message classes at run time and ships no type stubs
# (proto/build.py writes no .pyi): to a type checker its messages are Any
pb: Any = replication_pb2

if TYPE_CHECKING:
    from node.activeactive.hub import ReplicationHub

log = logging.getLogger("braid.replication")


class LinkStalled(ConnectionError):
    """The peer acknowledged nothing for too long while operations were in flight."""


def _same_envelopes(a: list[Envelope], b: list[Envelope]) -> bool:
    """The same envelopes (the same objects of the causal log), in the same order?"""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class Link:
    """One established stream with a peer, whichever side dialed: a thin adapter that moves
    frames for :mod:`crdt.sync` (:class:`LinkState` and the assemblers), which decides."""

    def __init__(self, hub: ReplicationHub, peer: int, peer_vv: dict[int, int], *,
                 peer_floor: dict[int, int] | None = None, peer_max_message: int = 0,
                 my_vv: dict[int, int] | None = None, my_floor: dict[int, int] | None = None,
                 packed: bool = False, peer_heads: dict[int, int] | None = None,
                 peer_joins: bool = False) -> None:
        """``peer_*``: what the peer's Hello or Welcome said; ``my_*``: what this end's said;
        ``packed``: the peer reads packed batches (its handshake said ``packed_batches``);
        ``peer_heads``: the digests of the peer's histories (crdt/causal.py); ``peer_joins``:
        the peer joins states (its handshake said ``joins_states``)."""
        self.hub = hub
        self.peer = peer
        self.packed = packed
        self.superseded = False  # a newer connection of the peer handshook (ReplicationHub.handshook)
        limits = self.limits = hub.limits
        # what the peer acknowledged is kept per peer across reconnections (trimming reads it);
        # its Hello says what it holds now (it may have lost some in a crash)
        hub.peer_synced[peer] = {}  # what is on its disk: its acks say it again (it may have been restored)
        hub.peer_said[peer] = {}  # ... and what its OS holds (WAIT counts these)
        self.state = LinkState(hub.causal, peer_vv, hub.peer_acked.setdefault(peer, {}),
                               hub.peer_reported.setdefault(peer, {}))
        hub.handshook(peer, peer_vv)
        my_floor = dict(hub.causal.floor) if my_floor is None else my_floor
        my_vv = dict(hub.causal.vv) if my_vv is None else my_vv
        peer_floor = peer_floor or {}
        # both ends dropped what the other lacks: no image may replace either state, so each
        # sends its image and joins the other's (crdt/join.py); a peer that cannot join gets
        # nothing at all (crdt/sync.py)
        first = opening(my_vv, my_floor, peer_vv, peer_floor, peer_joins and hub.joins_states)
        self.merging, self.conflict, self.sends_image = first.merging, first.conflict, first.sends_image
        self.image = ImageAssembler(first.expects_image, limits.max_image, limits.frame_cap)
        if self.merging:
            hub.merging.add(peer)
            log.warning("region %d and this region each dropped from their replication backlogs operations the "
                        "other lacks (backlog floors %s here, %s there): joining their states", peer, my_floor,
                        peer_floor)
        else:
            hub.merging.discard(peer)
        if self.conflict:
            hub.conflicts.add(peer)
            log.error("cannot sync with region %d: each region dropped from its replication backlog "
                      "operations the other lacks (backlog floors %s here, %s there), and region %d runs a "
                      "version that cannot join states; both keep serving with their own data until it is "
                      "upgraded", peer, my_floor, peer_floor, peer)
        else:
            hub.conflicts.discard(peer)
        # the same numbers, other operations: nothing may cross (each end would drop the
        # other's as duplicates and both would go on differing without an error)
        # (a fork found once stays - a region holding fewer of the origin's operations than its
        # peer cannot see it again at the next handshake - until the region whose own history
        # forked comes back without its side: withdrawn_by, node/activeactive/lone_writes.py)
        hub.causal.learn_heads(peer_vv, peer_heads or {})
        hub.withdrawn_by(peer, peer_vv)
        found = forks(hub.causal, peer_vv, peer_heads or {})
        # a peer that sent no digests may be of an older version, which refuses an image holding
        # them (one of this version holding no operations learns them at its first ack)
        self.peer_digests = bool(peer_heads)
        self.forked = bool(found) or peer in hub.forks
        if found:
            hub.history_forked(peer, found)
        self.parts = PartsAssembler(limits.max_op, limits.frame_cap)
        self.budget = limits.budget(peer_max_message)
        self.outbox = Outbox(OUTBOX_FRAMES * self.budget)
        if found:  # the peer holds fewer of those operations and cannot tell: show it where they differ
            proof = pb.Frame(ack=pb.Ack(vv={f.origin: f.n for f in found}, heads={f.origin: f.here for f in found}))
            self.outbox.put_ack(lambda: proof, AckPace.PARTS)
        self.wakeup = asyncio.Event()
        self.wakeup.set()
        self.relays = RelayHold(hub.region, peer, time.monotonic())  # third regions' operations held back
        self._relay_timer: asyncio.TimerHandle | None = None  # wakes the sender at relays.wake_at
        self.progress_at = time.monotonic()  # the last ack that showed progress (watchdog)
        self.ack_short = False  # the last ack said less than the region applied (see _ack_frame)
        # a client waits in WAIT for this region's operations up to this number: the acks ask the
        # peer to acknowledge them at once, not paced (Ack.ack_wanted) ...
        self.ack_wanted = 0
        # ... and the peer asks that of this region for its operations up to this number
        self.peer_wants_ack = 0
        self.peer_received = 0               # the peer's last Ack.received
        self.acknowledge(pace=AckPace.LAZY)  # the peer's WAIT counts this region from acks only

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

    # ------------------------------------------------------------ sending
    async def send_image(self) -> None:
        """Full resync: the peer lacks operations this region trimmed; send everything."""
        image, vv = self.hub.make_image(self.peer_digests)
        end = self.hub.causal.end  # the image holds the log up to here (made in this loop turn)
        log.warning("region %d lacks trimmed operations: full resync (%d bytes)", self.peer, len(image))
        self.hub.resyncs_sent += 1
        step, total = self.budget - FRAME_HEADER, len(image)
        for at in range(0, total, step):
            piece = image[at:at + step]
            await self.outbox.put(pb.Frame(resync=pb.Resync(data=piece, last=at + step >= total,
                                                            total=total, offset=at)))
        self.state.image_sent(vv, end)

    async def batch_frame(self, envelopes: list[Envelope]) -> pb.Frame:
        """A batch, packed when the peer reads that form (else a protobuf Batch), and
        zlib-compressed (off the event loop) when it is large enough and that helps.

        The links of a region mostly send the same envelopes (its own operations go to every
        peer, woken together): a frame built for one link is reused by the next one that
        sends exactly those envelopes in the same form, so each is converted and compressed
        once, not once per peer.  (A frame is never changed once built: gRPC serializes it
        when written.)"""
        hub = self.hub
        last, packed = hub.last_batch, self.packed
        if last is not None and last[1] is packed and _same_envelopes(last[0], envelopes):
            return last[2]
        if packed:
            batch, raw = None, pack_batch(envelopes)
        else:
            batch = pb.Batch(envelopes=[to_proto(e) for e in envelopes])
            raw = batch.SerializeToString()
        frame = None
        if len(raw) >= COMPRESS_FROM:
            # a small batch compresses in microseconds: a hand-off to a worker thread costs more
            small = (zlib.compress(raw, 1) if len(raw) < COMPRESS_INLINE
                     else await asyncio.to_thread(zlib.compress, raw, 1))
            if len(small) < len(raw):
                frame = pb.Frame(packed_zlib=small) if packed else pb.Frame(batch_zlib=small)
        if frame is None:
            frame = pb.Frame(packed=raw) if packed else pb.Frame(batch=batch)
        hub.last_batch = (envelopes, packed, frame)
        return frame

    async def send_parts(self, env: Envelope) -> None:
        """An operation too large for a frame: its parts, one after another."""
        op, step = env.op, part_size(env, self.budget)
        total = len(op)
        for at in range(0, total, step):
            part = pb.Fragment(origin=env.origin, n=env.n, total=total, offset=at, data=op[at:at + step],
                               last=at + step >= total)
            if at == 0:
                part.deps.update(env.deps)
            await self.outbox.put(pb.Frame(fragment=part))

    async def send_loop(self) -> None:
        if self.conflict or self.forked:
            await asyncio.Event().wait()  # the link stays up (keepalive) and idle: nothing can cross it
        if self.sends_image and not self.hub.is_cut(self.peer):
            await self.send_image()
        sent_at = float("-inf")
        while True:
            await self.wakeup.wait()
            if self.forked:  # found on an acknowledgement: the link stays up and idle
                await asyncio.Event().wait()
            pacing = self.hub.pacing()
            self.outbox.ack_interval, self.outbox.relay_delay = pacing.ack_interval, pacing.relay_delay
            # let operations issued meanwhile join the batch: the rest of this loop turn,
            # and after a frame went out, until the send interval passed since it
            await asyncio.sleep(max(0.0, sent_at + pacing.send_interval - time.monotonic()))
            self.wakeup.clear()
            if self.hub.is_cut(self.peer):
                continue
            missing = self.state.outgoing(self.hub.sendable_upto())  # NeedsResync ends the link
            now = time.monotonic()
            missing = self._sift_relays(missing, now, pacing.relay_delay)
            if missing:
                sent_at = now
                trace = self.hub.trace
                if trace is not None:
                    for e in missing:
                        trace.mark("batch", self.peer, e.origin, e.n)
            for in_parts, envelopes in plan_frames(missing, self.budget):
                if in_parts:
                    await self.send_parts(envelopes[0])
                else:
                    await self.outbox.put(await self.batch_frame(envelopes))

    def _sift_relays(self, envelopes: list[Envelope], now: float, delay: float) -> list[Envelope]:
        """What to send now of ``envelopes``: the relay hold decides (:class:`crdt.sync.RelayHold`);
        this link counts the relays and keeps its timer at the time the hold asks for a look."""
        wake = self.relays.wake_at
        relays, direct = self.relays.outgoing(envelopes, self.state.acked, now, delay)
        self.hub.count_relayed(len(relays))
        if self.relays.wake_at != wake:
            self._arm_relay_timer(now)
        return relays + direct

    def _arm_relay_timer(self, now: float) -> None:
        if self._relay_timer is not None:
            self._relay_timer.cancel()
            self._relay_timer = None
        at = self.relays.wake_at
        if at != math.inf:
            self._relay_timer = asyncio.get_running_loop().call_later(max(0.0, at - now), self._relay_timer_fired)

    def _relay_timer_fired(self) -> None:
        self._relay_timer = None
        self.relays.woken()
        self.wakeup.set()

    # ------------------------------------------------------------ receiving
    def acknowledge(self, received: int = 0, pace: AckPace = AckPace.PARTS) -> None:
        if self.forked:
            return  # nothing more crosses (and the ack showing the peer the fork stays in the slot)
        self.outbox.put_ack(lambda: self._ack_frame(received), pace)

    def _ack_frame(self, received: int) -> pb.Frame:
        """The ack, built when it leaves: what the region holds with its records on the OS, the
        digests of those histories, and what is on its disk.  One that says less than the
        region applied is followed by another once the records are written (``ack_short``)."""
        hub = self.hub
        vv, heads = hub.acknowledgement()
        self.ack_short = vv is not hub.causal.vv
        if self.peer_wants_ack and vv.get(self.peer, 0) >= self.peer_wants_ack:
            self.peer_wants_ack = 0  # this ack says it
        if self.ack_wanted and hub.peer_said.get(self.peer, {}).get(hub.region, 0) >= self.ack_wanted:
            self.ack_wanted = 0  # the peer said it
        return pb.Frame(ack=pb.Ack(vv=vv, received=received, heads=heads, synced=hub.synced_vv,
                                   ack_wanted=self.ack_wanted))

    def want_ack(self, n: int) -> None:
        """A client waits for the peer to acknowledge this region's operations up to ``n``:
        ask it (in an ack that leaves now) to acknowledge them at once, not paced."""
        if n > self.hub.peer_said.get(self.peer, {}).get(self.hub.region, 0) and n > self.ack_wanted:
            self.ack_wanted = n
            self.acknowledge(pace=AckPace.WAITED)

    def deliver(self, envelopes: list[Envelope]) -> None:
        causal, limits = self.hub.causal, self.limits
        end = causal.end
        before = dict(causal.vv)
        trace = self.hub.trace
        if trace is not None:
            for e in envelopes:
                trace.mark("received", self.peer, e.origin, e.n)
        hub = self.hub
        hub.in_batch = True
        try:
            hub.deliver_batch(self.state.on_batch(envelopes))
        finally:
            hub.in_batch = False
        hub.side.remote_batch_applied()
        if len(causal.pending) > limits.max_pending_ops or causal.pending_bytes > limits.max_pending_bytes:
            # an honest peer sends in causal order: this one piles up what can never apply
            dropped = causal.drop_pending()
            raise ProtocolError(f"{dropped} operations waiting for dependencies that never come "
                                f"(past crdt-repl-pending-max-ops {limits.max_pending_ops} or -bytes "
                                f"{limits.max_pending_bytes}): dropped, none was applied")
        # A peer holds back, as relays toward this region, the operations of regions other than
        # itself: an ack that raises what this region holds of any of those lets the peer drop
        # them, within the relay delay (AckPace.RELAYS).  One that only says the peer's own
        # operations arrived is lazy: a lone writer's region then gets a few acks a second,
        # not one per ack interval from every peer.
        vv = causal.vv
        risen = {o for o, n in vv.items() if n > before.get(o, 0)}
        peer = self.peer
        own = all(e.origin == peer for e in envelopes) and risen <= {peer}
        self.acknowledge(pace=AckPace.WAITED if self.peer_wants_ack else AckPace.LAZY if own else AckPace.RELAYS)
        if causal.end > end:  # every other peer learns it too: it need not relay these here
            for link in self.hub.links.values():
                if link is not self:
                    link.acknowledge(pace=AckPace.LAZY if risen <= {link.peer} else AckPace.RELAYS)

    def inflate(self, compressed: bytes) -> bytes:
        """A compressed batch's bytes, bounded by the message limit."""
        inflate = zlib.decompressobj()
        try:
            raw = inflate.decompress(compressed, self.limits.max_message)
        except zlib.error as e:
            raise ProtocolError(f"an unreadable compressed batch: {e}") from None
        if inflate.unconsumed_tail or not inflate.eof:
            raise ProtocolError("a compressed batch larger than the message limit, or cut short")
        return raw

    def unpack(self, compressed: bytes) -> pb.Batch:
        try:
            return pb.Batch.FromString(self.inflate(compressed))
        except ValueError as e:  # protobuf's DecodeError is a ValueError
            raise ProtocolError(f"an unreadable compressed batch: {e}") from None

    def on_frame(self, frame: pb.Frame) -> None:
        """Take one frame from the peer; never waits (acks go to the outbox's slot)."""
        kind = frame.WhichOneof("body")
        if self.hub.is_cut(self.peer) or self.forked:
            return  # nothing crosses a cut link (it is being closed), nor a forked one
        if kind == "ack":
            self.on_ack(frame.ack)
            return
        self.hub.side.peer_frame_arrives()  # what follows applies operations: the region may offer its core first
        if self.parts.open and kind != "fragment":
            raise ProtocolError(f"a {kind} frame among the parts of operation {self.parts.dot}")
        if self.image.pending and kind != "resync":
            raise ProtocolError(f"a {kind} frame before the announced full-resync image")
        if kind == "packed":
            self.deliver(unpack_batch(frame.packed))
        elif kind == "packed_zlib":
            self.deliver(unpack_batch(self.inflate(frame.packed_zlib)))
        elif kind == "batch":
            self.deliver([from_proto(m) for m in frame.batch.envelopes])
        elif kind == "batch_zlib":
            self.deliver([from_proto(m) for m in self.unpack(frame.batch_zlib).envelopes])
        elif kind == "fragment":
            f = frame.fragment
            env = self.parts.add(f.origin, f.n, dict(f.deps), f.total, f.offset, f.data, f.last)
            if env is None:
                self.acknowledge(self.parts.received)
            else:
                self.deliver([env])
        elif kind == "resync":
            r = frame.resync
            image = self.image.add(r.total, r.offset, r.data, r.last)
            if image is None:
                self.acknowledge(self.image.received)
                return
            if self.merging:
                if not self.hub.side.join_image(image):
                    raise ConnectionResetError("the peer's state could not be joined now: start the link again")
                self.merging = False
                self.hub.merging.discard(self.peer)
            elif not self.hub.side.install_image(image):
                raise ConnectionResetError("a full resync was not needed: start the link again")
            self.state.image_installed(self.hub.image_vv)
            self.acknowledge()
        else:
            raise ProtocolError(f"an unexpected {kind or 'empty'} frame")

    def on_ack(self, ack: pb.Ack) -> None:
        vv = dict(ack.vv)
        if ack.heads:
            heads = dict(ack.heads)
            causal = self.hub.causal
            causal.learn_heads(vv, heads)
            found = forks(causal, vv, heads)
            if found:  # the peer holds as many operations of an origin as here, and another history
                self.forked = True
                self.wakeup.set()  # the sender stops
                self.hub.history_forked(self.peer, found)
                return
        now = time.monotonic()
        self.relays.on_ack(self.state.acked, vv, now)  # before the state raises what the peer acked
        raised = self.state.on_ack(vv)
        said_risen = self.hub.ack_said(self.peer, vv)
        if raised or ack.received > self.peer_received:
            self.progress_at = now
        self.peer_received = ack.received
        if ack.ack_wanted > self.peer_wants_ack:  # a client waits there: acknowledge now
            self.peer_wants_ack = ack.ack_wanted
            self.acknowledge(pace=AckPace.WAITED)
        synced_risen = self.hub.ack_said(self.peer, ack.synced, on_disk=True)
        if raised or synced_risen or said_risen:
            self.hub.side.replication_progressed()  # WAIT / WAITAOF may have their count

    # ------------------------------------------------------------ the watchdog
    def stalled(self, now: float, timeout_s: float) -> bool:
        """Has the peer been owing acknowledgements (or reads) for ``timeout_s`` without progress?"""
        if self.conflict or self.forked or not (self.state.unacknowledged() or self.outbox.backlogged()):
            self.progress_at = now  # nothing owed (or nothing can cross): idle time is not a stall
            return False
        return now - self.progress_at > timeout_s

    async def watch(self) -> None:
        while True:
            timeout = self.hub.limits.stall_timeout_ms / 1000  # CONFIG SET applies at once
            await asyncio.sleep(min(timeout / 4, 1.0) if timeout else 1.0)
            if timeout and self.stalled(time.monotonic(), timeout):
                raise LinkStalled(f"no progress in {timeout:g} s with operations unacknowledged")

    def lag(self, now: float) -> tuple[int, float]:
        """(operations the peer has not acknowledged, age in ms of the oldest of them)."""
        return self.state.lag(self.hub.arrivals, now)

