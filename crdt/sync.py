"""What one replication link decides, without any I/O (sans-IO, pure).

Theory of operation
-------------------
Two regions that talk keep one link.  Each end holds a :class:`LinkState` for
its peer, built from the peer's version vector at the handshake (the Hello the
dialer sends, the Welcome the server answers).  Everything the link decides is
here; moving frames (gRPC and protobuf in node/transport/replication.py, a
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
handshake, :meth:`LinkState.starts_with_image` says whether the peer lacks
dropped envelopes; then the caller sends a whole-state image and reports it
with :meth:`LinkState.image_sent`.  If trimming overtakes a running link
(``position`` fell behind the log's base and the peer lacks something dropped),
:meth:`LinkState.outgoing` raises :class:`NeedsResync`: the link must restart
and resync at its next handshake.  The receiving end reports an installed
image with :meth:`LinkState.image_installed`, and a log replaced under a
running link with :meth:`LinkState.log_replaced`.
"""

from __future__ import annotations

from .causal import CausalLog, Envelope, VersionVector, merge


class NeedsResync(ConnectionResetError):
    """The peer needs envelopes the backlog no longer holds: restart the link for a full resync."""

    def __init__(self) -> None:
        super().__init__("the peer needs trimmed operations: reconnect for a full resync")


class LinkState:
    """One end of a link to ``peer``: what it was sent, what it acknowledged, where the sender is."""

    __slots__ = ("causal", "acked", "sent", "position", "unacked_from")

    def __init__(self, causal: CausalLog, peer_vv: VersionVector, acked: VersionVector | None = None) -> None:
        """``acked``: a dict to keep what the peer acknowledged in (the hub keeps one per peer
        across reconnections); it is reset to ``peer_vv``, which is what the peer holds now."""
        self.causal = causal
        self.acked = {} if acked is None else acked
        self.acked.clear()
        self.acked.update(peer_vv)
        self.sent: VersionVector = dict(peer_vv)  # what was put on the wire to the peer
        self.position = causal.base      # how far into the causal log the sender looked (absolute)
        self.unacked_from = causal.base  # no envelope before this position is unacknowledged

    # ------------------------------------------------------------ sending
    def starts_with_image(self) -> bool:
        """At the handshake: does the peer lack envelopes the backlog dropped (full resync)?"""
        return self.causal.lacks_dropped(self.acked)

    def outgoing(self, sendable_upto: int) -> list[Envelope]:
        """The envelopes to send now, in log order; they count as sent from here on."""
        causal = self.causal
        if self.position < causal.base and causal.lacks_dropped(merge(self.acked, self.sent)):
            raise NeedsResync()
        fresh = causal.since(self.position, sendable_upto)
        self.position = max(self.position, causal.base) + len(fresh)
        sent, acked = self.sent, self.acked
        out = [e for e in fresh if e.n > sent.get(e.origin, 0) and e.n > acked.get(e.origin, 0)]
        for e in out:
            sent[e.origin] = e.n  # log order: n rises per origin
        return out

    def image_sent(self, image_vv: VersionVector, end: int) -> None:
        """A full-resync image holding ``image_vv`` (the log up to ``end``) was sent."""
        self.sent = dict(image_vv)
        self.position = end

    # ------------------------------------------------------------ receiving
    def on_batch(self, envelopes: list[Envelope]) -> list[Envelope]:
        """The peer sent these (it holds them); returns them for the causal log."""
        sent, acked = self.sent, self.acked
        for e in envelopes:
            if e.n > sent.get(e.origin, 0):
                sent[e.origin] = e.n    # never echo it back
            if e.n > acked.get(e.origin, 0):
                acked[e.origin] = e.n   # nor count it as the peer's lag
        return envelopes

    def on_ack(self, vv: VersionVector) -> None:
        """The peer applied everything up to ``vv``."""
        acked = self.acked
        for o, n in vv.items():
            if n > acked.get(o, 0):
                acked[o] = n

    def image_installed(self, vv: VersionVector) -> None:
        """This end installed the peer's image: the peer has everything it holds."""
        self.sent = merge(self.sent, vv)

    def log_replaced(self) -> None:
        """This region's causal log was replaced (a full resync): look at it from its start."""
        self.position = self.unacked_from = self.causal.base

    # ------------------------------------------------------------ status
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
