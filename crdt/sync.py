"""What one replication link decides, without any I/O (sans-IO, pure).

Theory of operation
-------------------
Two regions that talk keep one link.  Each end holds a :class:`LinkState` for
its peer, built from the peer's version vector at the handshake (the Hello the
dialer sends, the Welcome the server answers).  Everything the link decides is
here; moving frames (gRPC and protobuf in node/activeactive/hub.py, a
seeded network in chaos/sim/) is the caller's business.

The sender side.  The local causal log (crdt/causal.py) is append-only and in
causal order, so the link walks it once: ``position`` is how far it has looked
(an absolute position).  :meth:`LinkState.outgoing` takes the log's new part up
to ``sendable_upto`` - the region lets only durable operations leave - and
returns the envelopes the peer lacks: those above both what was already put on
the wire (``sent``) and what the peer acknowledged (``acked``).  Operations of
third regions are in the log too, so a link relays them.

The receiver side.  :meth:`LinkState.on_batch` records that the peer holds every
envelope it sent (never echo one back, nor count it as the peer's lag); the
caller hands them to the causal log, which applies each exactly once and in
causal order, and answers with an Ack of its version vector.
:meth:`LinkState.on_ack` raises ``acked`` (a max-register: acks may arrive late
or twice).  All three maps only grow within one link, so frames that arrive
twice or out of order change nothing but timing.

Loss is not absorbed here: an envelope put on the wire is never offered again
on the same link.  A transport that loses a frame must end the link; the next
handshake starts from the peer's real version vector (which may be *lower* than
what it acknowledged, if it crashed and lost unsynced operations).

Full resync.  The backlog may have been trimmed (``CausalLog.trim``).  At the
handshake, :func:`opening` says what each end does first: an image where the
peer lacks dropped envelopes (:meth:`LinkState.peer_sends_image`), and where both
ends dropped what the other lacks, an image each way that each end joins into its
own state (crdt/join.py); the caller sends a whole-state image and reports it
with :meth:`LinkState.image_sent`.  If trimming overtakes a running link
(``position`` fell behind the log's base and the peer lacks something dropped),
or a state join raised the floor above what the peer holds (:meth:`LinkState.floor_raised`),
:meth:`LinkState.outgoing` raises :class:`NeedsResync`: the link must restart
and resync at its next handshake.  The receiving end reports an installed
image with :meth:`LinkState.image_installed`, and a log replaced under a
running link with :meth:`LinkState.log_replaced`.

Both ends know at the handshake whether an image comes: each announces the
``floor`` of its backlog (the highest dropped ``n`` per origin), and
:meth:`LinkState.peer_sends_image` is the sender's own rule seen from the
receiving end.  An :class:`ImageAssembler` built with that answer refuses an
image nobody announced, a second one, one larger than its stated total or than
the receiver's cap, and pieces out of order or larger than a frame
(:class:`ProtocolError`: the link ends and nothing of it is installed).

Frames are bounded by bytes.  :func:`plan_frames` groups the envelopes to send
into batches of at most a byte budget; an envelope larger than the budget goes
alone, in parts, which a :class:`PartsAssembler` joins on the receiving end under
strict rules (one operation at a time, the same dot in every part, offsets that
follow each other, a total below the receiver's cap and parts that add up to it
exactly) before anything of it is handed to the causal log.

Relays.  Relaying a third region's operations is what heals a cut link; with the
peer's own link to that region working it only sends the peer a second copy of
each.  So a link keeps a :class:`RelayHold`: of what :meth:`LinkState.outgoing`
gives, :meth:`RelayHold.hold` passes this region's and the peer's own operations
and holds the others; :meth:`RelayHold.due` drops a held one once the peer
acknowledged it and relays it only once the peer's acknowledgements of its region
stood still for the relay delay (see there why, and the quiet case);
:meth:`RelayHold.on_ack` keeps what that rule reads.  The hold reads no clock:
every call takes ``now`` (seconds, from any origin that never goes back), and
instead of arming a timer it says when its driver must look again
(:attr:`RelayHold.wake_at`).  The gRPC link drives it with ``time.monotonic()``
and an asyncio timer; the simulation with its virtual clock and a scheduled event.

Progress.  :meth:`LinkState.on_ack` says whether an ack raised ``acked``, and
:meth:`LinkState.unacknowledged` whether the peer was sent envelopes it has not
acknowledged; a transport closes a link that stays unacknowledged without
progress for too long (a peer that reads but never acknowledges, or never reads).
"""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

from .causal import CausalLog, Envelope, VersionVector, merge
from .linkerrors import NeedsResync as NeedsResync  # exported: the link errors this module raises
from .linkerrors import ProtocolError as ProtocolError

# Upper bounds of what an envelope's header takes on the wire besides its operation bytes
# (protobuf tags, lengths and varints of origin and n), and per dependency (one map entry).
ENVELOPE_OVERHEAD = 40
DEP_OVERHEAD = 24
# a relay waits this many relay delays when the peer acknowledges nothing at all meanwhile
RELAY_QUIET_FACTOR = 4


class Opening(NamedTuple):
    """What a link does first, decided at the handshake (:func:`opening`)."""

    merging: bool        # both ends dropped what the other lacks: each sends its image, joins the other's
    conflict: bool       # ... and the peer cannot join states: nothing crosses either way
    sends_image: bool    # this end sends its whole state before anything else
    expects_image: bool  # the peer does: nothing but its image is taken until it is whole


def opening(vv: VersionVector, floor: VersionVector, peer_vv: VersionVector, peer_floor: VersionVector,
            both_join: bool) -> Opening:
    """One end's view of a link's start, from what both handshook with (each end's version
    vector and backlog floor; ``both_join``: both announced that they join states).  The
    same at both ends, mirrored: what one sends, the other expects."""
    both_dropped = LinkState.image_conflict(vv, floor, peer_vv, peer_floor)
    merging = both_dropped and both_join
    conflict = both_dropped and not merging
    sends = merging or not conflict and LinkState.peer_sends_image(peer_vv, floor)
    expects = merging or not conflict and LinkState.peer_sends_image(vv, peer_floor)
    return Opening(merging, conflict, sends, expects)


class LinkState:
    """One end of a link to ``peer``: what it was sent, what it acknowledged, where the sender is."""

    __slots__ = ("causal", "acked", "reported", "sent", "position", "unacked_from", "floor_checked")

    def __init__(self, causal: CausalLog, peer_vv: VersionVector, acked: VersionVector | None = None,
                 reported: VersionVector | None = None) -> None:
        """``acked``: a dict to keep what the peer is known to hold in (the hub keeps one per
        peer across reconnections); ``reported``: likewise, what the peer reported holding as
        a whole (its version vector at a handshake or an ack, never raised by a batch: causal
        stability may read only those, see :meth:`on_batch`).  Both are reset to ``peer_vv``,
        which is what the peer holds now."""
        self.causal = causal
        self.acked = {} if acked is None else acked
        self.acked.clear()
        self.acked.update(peer_vv)
        self.reported = {} if reported is None else reported
        self.reported.clear()
        self.reported.update(peer_vv)
        self.sent: VersionVector = dict(peer_vv)  # what was put on the wire to the peer
        self.position = causal.base      # how far into the causal log the sender looked (absolute)
        self.unacked_from = causal.base  # no envelope before this position is unacknowledged
        self.floor_checked = True        # false once a state join raised the floor (floor_raised)

    # ------------------------------------------------------------ sending
    @staticmethod
    def peer_sends_image(vv: VersionVector, peer_floor: VersionVector) -> bool:
        """With ``vv`` announced at the handshake, does a peer whose backlog's floor is
        ``peer_floor`` send an image first (this end lacks envelopes it dropped)?  Each end
        applies it both ways (:func:`opening`)."""
        return any(vv.get(o, 0) < n for o, n in peer_floor.items())

    @staticmethod
    def image_conflict(vv: VersionVector, floor: VersionVector, peer_vv: VersionVector,
                       peer_floor: VersionVector) -> bool:
        """Both ends dropped from their backlogs operations the other lacks (a long partition
        overflowed both): an image either way would lose the receiver's dropped operations
        (it holds them only in its state, which the image replaces), and nothing else can
        be applied in causal order.  Symmetric: both ends decide the same from the handshake.
        Only a state join (crdt/join.py) unites the two: each end sends its image and joins
        the other's instead of installing it (node/activeactive/hub.py)."""
        return LinkState.peer_sends_image(peer_vv, floor) and LinkState.peer_sends_image(vv, peer_floor)

    @staticmethod
    def image_loses(image_vv: VersionVector, floor: VersionVector) -> bool:
        """Would installing an image holding ``image_vv`` lose operations this region dropped
        from its backlog (``floor``), which it could not apply again on top?"""
        return any(image_vv.get(o, 0) < n for o, n in floor.items())

    def outgoing(self, sendable_upto: int) -> list[Envelope]:
        """The envelopes to send now, in log order; they count as sent from here on."""
        causal = self.causal
        if self.position < causal.base or not self.floor_checked:
            if causal.lacks_dropped(merge(self.acked, self.sent)):
                raise NeedsResync()
            self.floor_checked = True
        fresh = causal.since(self.position, sendable_upto)
        self.position = max(self.position, causal.base) + len(fresh)
        sent, acked = self.sent, self.acked
        out = [e for e in fresh if e.n > sent.get(e.origin, 0) and e.n > acked.get(e.origin, 0)]
        for e in out:
            sent[e.origin] = e.n  # log order: n rises per origin
        return out

    def floor_raised(self) -> None:
        """A state join brought this region operations without their envelopes and raised the
        log's floor to them: before sending more, check that the peer does not lack some
        (what this link sends next may depend on them, and only an image can bring them)."""
        self.floor_checked = False

    def image_sent(self, image_vv: VersionVector, end: int) -> None:
        """A full-resync image holding ``image_vv`` (the log up to ``end``) was sent."""
        self.sent = dict(image_vv)
        self.position = end

    # ------------------------------------------------------------ receiving
    def on_batch(self, envelopes: list[Envelope]) -> list[Envelope]:
        """The peer sent these (it holds them); returns them for the causal log.

        They raise ``acked`` (what the peer holds: nothing to send back, no lag), not
        ``reported``: a batch says what the peer held of some origins, not its version vector
        at one moment - a relay of another region's operation can leave before the peer's own
        concurrent one (still waiting for its fsync), and a view built from such marks would
        count that region as stable while a concurrent operation has yet to arrive here."""
        top: VersionVector = {}  # per origin, the highest n of the batch
        for e in envelopes:
            if e.n > top.get(e.origin, 0):
                top[e.origin] = e.n
        sent, acked = self.sent, self.acked
        for origin, n in top.items():
            if n > sent.get(origin, 0):
                sent[origin] = n    # never echo it back
            if n > acked.get(origin, 0):
                acked[origin] = n   # nor count it as the peer's lag
        return envelopes

    def on_ack(self, vv: VersionVector) -> bool:
        """The peer applied everything up to ``vv``; returns whether that raised ``acked``."""
        acked, raised = self.acked, False
        for o, n in vv.items():
            if n > acked.get(o, 0):
                acked[o] = n
                raised = True
        reported = self.reported
        for o, n in vv.items():
            if n > reported.get(o, 0):
                reported[o] = n
        return raised

    def image_installed(self, vv: VersionVector) -> None:
        """This end installed the peer's image, which held ``vv``: the peer has all of it
        (``vv`` is the image's own, not this region's after its operations went on top)."""
        self.sent = merge(self.sent, vv)
        self.on_ack(vv)

    def log_replaced(self) -> None:
        """This region's causal log was replaced (a full resync): look at it from its start."""
        self.position = self.unacked_from = self.causal.base

    # ------------------------------------------------------------ status
    def unacknowledged(self) -> bool:
        """Was the peer sent envelopes (or an image) it has not acknowledged yet?"""
        acked = self.acked
        return any(n > acked.get(o, 0) for o, n in self.sent.items())

    def lag(self, arrivals: list[float], now: float) -> tuple[int, float]:
        """(envelopes the peer has not acknowledged, age in ms of the oldest of them);
        ``arrivals[i]`` is when the log's i-th held envelope arrived (seconds)."""
        causal, acked = self.causal, self.acked
        log_, base = causal.log, causal.base
        i = max(self.unacked_from, base) - base
        while i < len(log_) and log_[i].n <= acked.get(log_[i].origin, 0):
            i += 1
        self.unacked_from = base + i
        behind = sum(1 for e in log_[i:] if e.n > acked.get(e.origin, 0))
        return behind, (now - arrivals[i]) * 1000 if behind else 0.0


# ---------------------------------------------------------------- relays of third regions
class RelayHold:
    """What ``region``'s link to ``peer`` holds back of third regions' operations, and when it relays them.

    Times are seconds on the driver's clock (``now``, never read here).  ``acked`` in the
    calls is what the peer is known to hold (:attr:`LinkState.acked`); ``delay`` the relay
    delay (``crdt-repl-relay-delay-ms``, read by the driver at every look: CONFIG SET
    applies at once).  The driver sends, at every look, ``due + direct`` from
    :meth:`outgoing`, counts the relays, and keeps one timer at :attr:`wake_at`, calling
    :meth:`woken` when it fires."""

    __slots__ = ("region", "peer", "started", "held", "held_from", "wake_at", "ack_moved", "relayed", "acked_at")

    def __init__(self, region: int, peer: int, now: float) -> None:
        self.region = region
        self.peer = peer
        self.started = now  # the link's start: the peer's acks stand still since then, until they rise
        self.held: deque[tuple[float, Envelope]] = deque()  # (due, relay): see due()
        self.held_from = math.inf  # the earliest due of held: no relay is ready before it
        self.wake_at = math.inf    # when the driver must look again (its timer); inf: no need
        # per third region: when the peer's acknowledgement of it last rose past what this
        # link relayed of it (so: got it another way, in practice from the region itself)
        self.ack_moved: dict[int, float] = {}
        self.relayed: dict[int, int] = {}  # per third region, the last of its operations relayed here
        self.acked_at = now  # when the peer's acknowledgements last rose at all

    def outgoing(self, envelopes: list[Envelope], acked: VersionVector, now: float,
                 delay: float) -> tuple[list[Envelope], list[Envelope]]:
        """Of ``envelopes`` (what :meth:`LinkState.outgoing` gave), what to send now: the held
        relays due now and this region's and the peer's own (:meth:`hold`, then :meth:`due`);
        the link sends them in that order."""
        direct = self.hold(envelopes, now, delay)
        return self.due(acked, now, delay), direct

    def hold(self, envelopes: list[Envelope], now: float, delay: float) -> list[Envelope]:
        """Of ``envelopes``, return this region's and the peer's own; hold the operations of
        third regions until ``delay`` from now at least (:meth:`due` says which of
        them to relay, and when).  A relay delay of 0 relays everything at once."""
        if not envelopes or delay <= 0:
            return envelopes
        keep = []
        due = now + delay
        region, peer, held = self.region, self.peer, self.held
        for e in envelopes:
            if e.origin == region or e.origin == peer:
                keep.append(e)
            else:
                held.append((due, e))
        if held and due < self.held_from:
            self.held_from = due
        return keep

    def due(self, acked: VersionVector, now: float, delay: float) -> list[Envelope]:
        """The held operations of third regions to relay now, in log order.

        Relaying is what heals a cut link; with the peer's own link to a region working it
        only sends the peer a second copy of each of that region's operations.  So a held
        operation is dropped once the peer acknowledged it, and relayed only when it has
        been held ``delay`` and the peer's acknowledgements of its region have not risen
        (past what this link relayed of it) for ``delay`` either, while the peer went on
        acknowledging others': the peer's direct link to that region is down or stuck.  A
        direct link that works, even far behind, keeps raising them, and nothing is relayed:
        a slow link is not made slower by copies.  When the peer acknowledges nothing at all
        (it, or this region, is short of CPU; or only that region writes), the relay waits
        ``RELAY_QUIET_FACTOR`` times as long: copies would only add to the load.

        Sets :attr:`wake_at` when a held operation may become due without anything else
        waking the link."""
        held, moved, relayed = self.held, self.ack_moved, self.relayed
        if not held:
            return []
        while held and held[0][1].n <= acked.get(held[0][1].origin, 0):
            held.popleft()  # the peer has it (nearly always a prefix: the peer acknowledges in order)
        if not held:
            self.held_from = math.inf
            return []
        if self.held_from > now:
            # No held operation is ready before its own hold ends, and none ends before
            # held_from (a bound from below): nothing else to look at now.  A link is woken
            # for every batch it sends, and the hold is ~delay x the rate of third regions'
            # operations long; the wake-up makes sure of a look once the first hold ends.
            if self.wake_at > self.held_from:
                self.wake_at = self.held_from
            return []
        due: list[Envelope] = []
        waiting: deque[tuple[float, Envelope]] = deque()
        next_at = math.inf
        for at, e in held:
            if e.n <= acked.get(e.origin, 0):
                continue  # the peer has it
            still = moved.get(e.origin, self.started)  # the peer's acks of its region stand still since
            wait = delay if self.acked_at > still else delay * RELAY_QUIET_FACTOR
            ready_at = at if delay <= 0 else max(at, still + wait)
            if ready_at <= now:
                due.append(e)
                if e.n > relayed.get(e.origin, 0):
                    relayed[e.origin] = e.n
            else:
                waiting.append((at, e))
                next_at = min(next_at, ready_at)
        self.held = waiting
        self.held_from = min((at for at, _e in waiting), default=math.inf)
        self.wake_at = next_at
        return due

    def on_ack(self, acked: VersionVector, vv: VersionVector, now: float) -> None:
        """The peer acknowledged ``vv``; ``acked`` is what it was known to hold before (call
        this before :meth:`LinkState.on_ack` raises it)."""
        relayed, raised = self.relayed, False
        for o, n in vv.items():
            if n > acked.get(o, 0):
                raised = True
                if n > relayed.get(o, 0):  # the peer got a region's operations another way than from here
                    self.ack_moved[o] = now
        if raised:
            self.acked_at = now

    def woken(self) -> None:
        """The driver's wake-up at :attr:`wake_at` came: it looks again now."""
        self.wake_at = math.inf


# ---------------------------------------------------------------- frames bounded by bytes
def wire_size(env: Envelope) -> int:
    """An upper bound of the bytes ``env`` takes in a frame."""
    return len(env.op) + ENVELOPE_OVERHEAD + DEP_OVERHEAD * len(env.deps)


def plan_frames(envelopes: list[Envelope], budget: int) -> list[tuple[bool, list[Envelope]]]:
    """Group ``envelopes`` (kept in order) into frames of at most ``budget`` bytes each:
    ``(False, batch)``, or ``(True, [env])`` for an envelope too large for any frame, sent in parts."""
    frames: list[tuple[bool, list[Envelope]]] = []
    batch: list[Envelope] = []
    size = 0
    for env in envelopes:
        n = wire_size(env)
        if n > budget:
            if batch:
                frames.append((False, batch))
                batch, size = [], 0
            frames.append((True, [env]))
            continue
        if size + n > budget:
            frames.append((False, batch))
            batch, size = [], 0
        batch.append(env)
        size += n
    if batch:
        frames.append((False, batch))
    return frames


def part_size(env: Envelope, budget: int) -> int:
    """Operation bytes in each part of ``env`` so that every part fits ``budget``."""
    return budget - ENVELOPE_OVERHEAD - DEP_OVERHEAD * len(env.deps)


class PartsAssembler:
    """Joins the parts of one operation too large for a frame, refusing any that break the rules.

    ``cap``: the largest operation this region accepts (it could not have made a larger
    one itself); ``part_cap``: the largest part (a frame).  :meth:`add` returns the whole
    envelope with the last part, None before; :class:`ProtocolError` on any violation."""

    __slots__ = ("cap", "part_cap", "dot", "deps", "total", "chunks", "received")

    def __init__(self, cap: int, part_cap: int) -> None:
        self.cap, self.part_cap = cap, part_cap
        self._reset()

    def _reset(self) -> None:
        self.dot: tuple[int, int] | None = None
        self.deps: tuple[tuple[int, int], ...] = ()
        self.total = 0
        self.chunks: list[bytes] = []
        self.received = 0  # bytes of the operation so far

    @property
    def open(self) -> bool:
        """Has an operation started arriving and not ended?"""
        return self.dot is not None

    def add(self, origin: int, n: int, deps: VersionVector, total: int, offset: int, data: bytes,
            last: bool) -> Envelope | None:
        if self.dot is None:
            if offset != 0:
                raise ProtocolError(f"operation ({origin}, {n}) starts at offset {offset}, not 0")
            if not 0 < total <= self.cap:
                raise ProtocolError(f"operation ({origin}, {n}) of {total} bytes: this region "
                                    f"accepts 1 to {self.cap}")
            self.dot, self.deps, self.total = (origin, n), tuple(sorted(deps.items())), total
        else:
            if (origin, n) != self.dot:
                raise ProtocolError(f"a part of operation ({origin}, {n}) inside operation {self.dot}")
            if total != self.total:
                raise ProtocolError(f"operation {self.dot} changed its length from {self.total} to {total}")
            if offset != self.received:
                raise ProtocolError(f"operation {self.dot}: a part at offset {offset}, expected {self.received}")
            if deps:
                raise ProtocolError(f"operation {self.dot}: dependencies after its first part")
        if not data or len(data) > self.part_cap:
            raise ProtocolError(f"operation {self.dot}: a part of {len(data)} bytes (1 to {self.part_cap})")
        end = self.received + len(data)
        if end > self.total or last != (end == self.total):
            raise ProtocolError(f"operation {self.dot}: parts add up to {end} of {self.total} bytes "
                                f"({'last' if last else 'not last'})")
        self.chunks.append(data)
        self.received = end
        if not last:
            return None
        (origin, n), deps_, chunks = self.dot, self.deps, self.chunks
        self._reset()
        return Envelope(origin, n, deps_, b"".join(chunks))


class ImageAssembler:
    """Receives the one full-resync image a link may bring, if the handshake announced it.

    ``announced``: :meth:`LinkState.peer_sends_image` at the handshake; ``cap``: the largest
    image this region accepts; ``part_cap``: the largest piece (a frame).  :meth:`add` returns
    the whole image with its last piece, None before; :class:`ProtocolError` on any violation,
    before anything is kept of an image that was not announced or is too large."""

    __slots__ = ("expected", "cap", "part_cap", "total", "chunks", "received")

    def __init__(self, announced: bool, cap: int, part_cap: int) -> None:
        self.expected, self.cap, self.part_cap = announced, cap, part_cap
        self.total: int | None = None
        self.chunks: list[bytes] = []
        self.received = 0

    @property
    def pending(self) -> bool:
        """Is an announced image still to come (nothing else may come before it)?"""
        return self.expected

    def add(self, total: int, offset: int, data: bytes, last: bool) -> bytes | None:
        if not self.expected:
            raise ProtocolError("a full-resync image the handshake did not announce")
        if self.total is None:
            if not 0 < total <= self.cap:
                raise ProtocolError(f"a full-resync image of {total} bytes: this region accepts 1 to {self.cap}")
            self.total = total
        elif total != self.total:
            raise ProtocolError(f"the full-resync image changed its length from {self.total} to {total}")
        if offset != self.received:
            raise ProtocolError(f"a full-resync piece at offset {offset}, expected {self.received}")
        if not data or len(data) > self.part_cap:
            raise ProtocolError(f"a full-resync piece of {len(data)} bytes (1 to {self.part_cap})")
        end = self.received + len(data)
        if end > self.total or last != (end == self.total):
            raise ProtocolError(f"full-resync pieces add up to {end} of {self.total} bytes "
                                f"({'last' if last else 'not last'})")
        self.chunks.append(data)
        self.received = end
        if not last:
            return None
        image, self.chunks, self.expected = b"".join(self.chunks), [], False
        return image
