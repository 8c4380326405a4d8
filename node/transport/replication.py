"""Replication links between regions: the hub and the logic of its links.

The frames cross the network over gRPC (node/transport/grpc_links.py, the hub's ``transport``);
this module does not import gRPC, so the simulation runs real hubs over a network of its own.

Theory of operation
-------------------
Each pair of regions keeps one bidirectional ``Sync`` stream (proto/replication.proto).
The region with the lower number dials; the other serves.  The dialer sends
``Hello`` (cluster id, database, region, token, version vector, its backlog's
floor, the largest message it accepts); the server checks every field and
either answers ``Welcome`` (the same facts of its own) or ends the call with
PERMISSION_DENIED - a mismatched peer is refused and logged, and nothing it sent
is applied.

After the handshake both ends run the same :class:`Link` logic: a sender that
ships every envelope of the local causal log the peer has not acknowledged
(relayed operations of third regions included, so a cut link heals through any
region that talks to both), and a receiver that hands incoming envelopes to
:class:`crdt.causal.CausalLog` (which applies each exactly once and in causal
order) and acknowledges with its version vector - to the sender and, when the
batch raised it, to every other peer too.

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
from copies): the peer's own link to that region is down or stuck.  A direct link that works, even one far behind, keeps raising
them, so a slow link is not loaded further with copies.  ``relayed`` counts the
operations relayed, ``ReplicationHub.duplicates`` counts envelopes that
arrived a second time.  What to send, which relays to hold and until when, what a
batch or an ack means, when a full resync is needed, how frames are cut and joined
again are decided by the pure code of :mod:`crdt.sync` (the deterministic simulation,
chaos/sim/, runs the same decisions over a seeded network on its virtual clock);
:class:`Link` only converts protobuf, queues frames, reads the clock and waits - its
one timer wakes the sender when the relay hold asks for a look.  Dialers reconnect
with exponential backoff and jitter.

Frames are bounded by bytes, never by a count: a Batch holds envelopes up to a
budget (``crdt-repl-frame-bytes``, 1 MB), and an operation larger than that
travels alone as Fragment parts, joined on the receiving end and checked part by
part (one operation at a time, the same dot, offsets in order, a total no larger
than the largest operation a client could make here: ``client-query-buffer-limit``
or ``proto-max-bulk-len``, plus 1 MB of encoding).  Both ends set gRPC's message
limit to ``crdt-repl-max-message`` (8 MB) and tell each other theirs in the
handshake; the budget toward a peer is at most half of either limit, so no frame
is ever refused for its size and an entry as large as ``proto-max-bulk-len``
replicates.  Compression: gRPC's gzip is off (it would compress every message,
and a 64 MB random value costs seconds per hop at ~30 MB/s); a Batch of 1 KB or
more is zlib-compressed at level 1 (in a worker thread from 64 KB) and sent as
``batch_zlib`` when that is smaller (a smaller batch on the event loop: the
hand-off would cost more than the compression), decompressed on arrival with a bound (the
message limit), so small operations still travel compressed; fragments and
full-resync pieces go as they are.  Packed batches: building a Batch of nested protobuf
messages and reading one back cost each end ~100 and ~140 µs of CPU for 60 small operations
(``python -m bench.frames``), so toward a peer whose handshake says it reads them
(``packed_batches``) a batch goes as one MessagePack array (``packed``, ``packed_zlib``:
:func:`pack_batch`), which costs a third of that to build and half to read; every region
reads both forms, so regions of two versions still replicate during a rolling upgrade.

Writing never blocks reading.  Each link has an :class:`Outbox`: the data frames
in order, bounded by bytes (the sender waits for room: backpressure), and one
slot for the latest Ack.  An ack only raises a value, so a newer one replaces an
older one and putting it never waits; the writer sends it before the next data
frame (alternating with data, so neither starves).  A receiver therefore never
waits for its own sender's queue, and two regions catching up at once cannot
stop each other.

Dead and stuck peers.  HTTP/2 keepalive pings run on both ends
(``crdt-repl-keepalive-ms``, answered within ``crdt-repl-keepalive-timeout-ms``,
5 s each; servers accept pings at that rate), so a peer that powered off or
froze is noticed in seconds and the dialer dials again.  A watchdog closes a
link that has unacknowledged operations, or frames its peer does not read, and
no progress for ``crdt-repl-stall-timeout-ms`` (30 s): progress is an ack that
raises what the peer acknowledged, or that reports more bytes of a fragmented
operation or image received (``Ack.received``), so a large transfer on a slow
link is not cut.  Closed links are logged and counted (``crdt_link_stalls``).

Only what is logged leaves: ``sendable`` (set by the region from its operation
log) bounds how far into the causal log links may send, so a peer never holds an
operation whose record the region has not handed to the OS (a killed process
keeps those; after a crash of its machine the region takes its own operations
back from its peers before it mints again: node/activeactive.py).  While it is
set, a new operation does not wake the links: the log's write at the end of the
turn raises ``sendable`` and wakes them (once per turn).

Full resync: a region trims its backlog (``trim``), so a peer that was away long
may lack operations no longer held.  Hello and Welcome carry each side's backlog
floor, so both ends know at the handshake whether an image comes
(:meth:`crdt.sync.LinkState.peer_sends_image`).  The side whose floor is above the
other's version vector sends its whole replicated state first, as ``Resync``
pieces of an image built by ``make_image`` (each stating the image's total length
and its offset); the peer hands the joined image to ``install_image`` and the
stream continues from the image's version vector.  An image nobody announced, a
second one, one larger than its stated total or ``crdt-repl-max-image-size``
(8 GB), pieces out of order or larger than a frame, a Batch arriving before the
announced image, or a fragment stream that breaks its rules: each ends the link
with a logged error (counted as ``crdt_link_protocol_errors``), before anything
of it is decoded, applied or installed.  What each peer acknowledged is kept
across reconnections (``peer_acked``), so trimming knows what every peer holds.

State join: when both sides dropped operations the other lacks (a partition outlasted
both backlogs), an image either way would lose the receiver's dropped operations.
Both ends see it at the handshake (:meth:`crdt.sync.LinkState.image_conflict`); when
both announced ``joins_states`` each sends its image and hands the other's to
``join_image``, which joins it into the region's own state (crdt/join.py): the link
is ``merging`` until this end joined, then goes on as any other.  The join raises
the backlog's floor to what it brought without envelopes, so every other link
checks again whether its peer lacks what is now below the floor (a full resync at
its next handshake).  Only a peer of an older version leaves the link in
``conflict``: idle, reported, nothing crossing.

Histories.  Hello, Welcome and every Ack carry the digests of the histories the version
vector covers (crdt/causal.py); each end checks the peer's against its own wherever it holds
at least as many of an origin's operations (:func:`crdt.causal.forks`).  Holding other
operations under the same numbers - a *fork* - makes the link idle on both ends: the end
that found it at the handshake sends the peer one Ack at the peer's count with its own
digest, so the peer, which holds fewer and could not check, finds it too.  Forks are
logged, counted (``history_forks``) and kept per peer (``forks``) for the status.  A fork in
the peer's own history ends when the peer handshakes again holding fewer of its operations
than where they differed (a region that took writes alone withdrew them: node/lone_writes.py);
a fork in a third region's history stops the region (``foreign_fork``: fail-stop).

Pausing cuts links: ``pause()`` cuts every link of the region, ``pause(peer)`` only
the link to one peer (a partition, for maintenance and tests).  A cut link is
closed at once, its frames are neither sent nor applied, and the peer's attempts
to reconnect are turned away with UNAVAILABLE until ``resume``; one side cutting
is enough, since the pair shares one stream.

Mutual TLS (``[tls]`` in the cluster file, node/transport/tls.py): the port peers
dial is a TLS front that verifies each peer's certificate against the cluster CA
bundle and splices the connection to this gRPC server on loopback; the servicer
then checks that the certificate names the region the Hello claims.  Dialers use
gRPC's TLS with the peer region's name as the name its certificate must carry.
Every refusal - at the TLS handshake or at Hello - is logged with the peer's
address and counted (``refused``: ``crdt_refused_handshakes``), and nothing the
refused peer sent is applied.  ``reload_tls`` re-reads the certificate, key and
CA bundle and has every link handshake again with them.

The hub does not know what an operation means: envelopes carry it as bytes and
``on_apply`` is called with each envelope the causal log delivers - or, for a peer's
batch, ``on_apply_run`` with each run of envelopes that are ready in order (nearly the
whole batch: a peer sends in causal order), so that the region applies and logs them
in one call (``deliver_batch``).
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import logging
import math
import os
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Protocol

import msgspec

from crdt.causal import CausalLog, Envelope, Fork, envelopes_of, forks
from crdt.linkerrors import MembershipBehind
from crdt.sync import ImageAssembler, LinkState, PartsAssembler, ProtocolError, RelayHold, opening, part_size, \
    plan_frames
from proto import replication_pb2 as pb

from ..persistence import safe_encode
from .tls import Identity, LinkCredentials, TlsFront

log = logging.getLogger("braid.replication")

GRPC_DEFAULT_MESSAGE = 4 * 1024 * 1024  # what a peer that does not state its limit accepts
MIN_BUDGET = 16 * 1024  # a frame budget below this is raised to it (parts must carry data)
OUTBOX_FRAMES = 4       # the sender waits once this many frame budgets are queued
COMPRESS_FROM = 1024    # Batches smaller than this are not worth compressing
COMPRESS_INLINE = 64 * 1024  # ...and smaller than this are compressed on the event loop
FRAME_HEADER = 64       # bytes a Resync piece takes besides its data (an upper bound)
# The defaults of the pacing settings (seconds; crdt-repl-send-interval-ms, -ack-interval-ms,
# -relay-delay-ms): a link sends at most one batch per SEND_INTERVAL and one ack per
# ACK_INTERVAL (the first at once after a quiet spell): operations and acks arriving
# meanwhile share the next frame.  A third region's operations are relayed only once the
# peer's acknowledgements of that region stood still for RELAY_DELAY (crdt.sync.RelayHold.due).
SEND_INTERVAL = 0.005
ACK_INTERVAL = 0.01
RELAY_DELAY = 0.05
# an ack that only tells a peer its own operations arrived waits this many ack intervals
# (Outbox.put_ack): the peer holds no relays of them, nothing of it waits for that ack
LAZY_ACK_FACTOR = 5
# an ack that lets a peer drop the relays it holds waits a relay delay divided by this
RELAY_ACKS_PER_DELAY = 3


class AckPace(enum.IntEnum):
    """How long an ack may wait after the previous one, by what it tells the peer (the lower,
    the sooner): of two waiting, the newer ack says all the older said, at the sooner pace."""

    PARTS = 0   # parts of a large operation or of a full resync arrived: one ack interval
    RELAYS = 1  # a third region's operations arrived: a third of the relay delay
    LAZY = 2    # only the peer's own operations arrived: LAZY_ACK_FACTOR ack intervals


@dataclass(frozen=True, slots=True)
class Pacing:
    """How a link paces its frames (seconds): read from the settings at every batch, so
    CONFIG SET applies at once."""

    send_interval: float = SEND_INTERVAL
    ack_interval: float = ACK_INTERVAL
    relay_delay: float = RELAY_DELAY

    @classmethod
    def from_config(cls, config) -> Pacing:
        return cls(int(config["crdt-repl-send-interval-ms"]) / 1000, int(config["crdt-repl-ack-interval-ms"]) / 1000,
                   int(config["crdt-repl-relay-delay-ms"]) / 1000)
# what gRPC's TLS reports when this end's check of the peer's certificate failed
CERTIFICATE_REFUSED = ("CERTIFICATE_VERIFY_FAILED", "Hostname Verification")


class StageTrace:
    """When each operation passed each stage of the replication path, for ``bench.replication
    --stages`` (off unless the environment variable ``BRAID_REPL_TRACE`` names a file prefix: the
    region then writes ``PREFIX.N``, N its number, when it stops).  A row is
    ``stage peer origin n monotonic_ns``: ``issued`` (the operation was applied here and
    joined the causal log), ``logged`` (its log record reached the OS: it may leave), ``batch``
    (put in a frame toward ``peer``), ``received`` (a frame from ``peer`` held it), ``applied``.
    CLOCK_MONOTONIC is one clock for every process of a machine, so rows of regions on one
    machine compare."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: list[tuple[str, int, int, int, int]] = []

    def mark(self, stage: str, peer: int, origin: int, n: int) -> None:
        self.rows.append((stage, peer, origin, n, time.monotonic_ns()))

    def save(self) -> None:
        with open(self.path, "w") as f:
            f.writelines(f"{s} {p} {o} {n} {t}\n" for s, p, o, n, t in self.rows)
        self.rows.clear()


def _stage_trace(region: int) -> StageTrace | None:
    prefix = os.environ.get("BRAID_REPL_TRACE")
    return StageTrace(f"{prefix}.{region}") if prefix else None


@dataclass(frozen=True, slots=True)
class LinkLimits:
    """The settings a link runs with (node/config.py's ``crdt-repl-*`` rows)."""

    frame_bytes: int = 1024 * 1024                  # operation bytes per frame
    max_message: int = 8 * 1024 * 1024              # gRPC's message limit, both ways
    max_op: int = 1024**3 + 1024 * 1024             # the largest operation accepted from a peer
    max_image: int = 8 * 1024**3                    # the largest full-resync image accepted
    keepalive_ms: int = 5000
    keepalive_timeout_ms: int = 5000
    stall_timeout_ms: int = 30000                   # 0: no watchdog
    max_pending_ops: int = 100000                   # operations waiting for their dependencies
    max_pending_bytes: int = 2 * 1024**3

    @classmethod
    def from_config(cls, config) -> LinkLimits:
        # a peer's operation is a command's arguments, re-encoded: as large as either limit allows
        argv = max(int(config["client-query-buffer-limit"]), int(config["proto-max-bulk-len"]))
        return cls(int(config["crdt-repl-frame-bytes"]), int(config["crdt-repl-max-message"]),
                   argv + 1024 * 1024, int(config["crdt-repl-max-image-size"]),
                   int(config["crdt-repl-keepalive-ms"]), int(config["crdt-repl-keepalive-timeout-ms"]),
                   int(config["crdt-repl-stall-timeout-ms"]), int(config["crdt-repl-pending-max-ops"]),
                   int(config["crdt-repl-pending-max-bytes"]))

    @property
    def frame_cap(self) -> int:
        """The largest frame body (a batch's envelopes, a part, a piece) a peer may send here."""
        return self.max_message // 2

    def budget(self, peer_max_message: int) -> int:
        """Bytes per frame toward a peer: this region's budget, at most half of either limit."""
        peer = peer_max_message or GRPC_DEFAULT_MESSAGE
        return max(MIN_BUDGET, min(self.frame_bytes, self.frame_cap, peer // 2))

    @property
    def handshake_timeout(self) -> float:
        return max(1.0, (self.keepalive_ms + self.keepalive_timeout_ms) / 1000)

    def _common_options(self) -> list[tuple[str, int]]:
        return [("grpc.max_send_message_length", self.max_message),
                ("grpc.max_receive_message_length", self.max_message),
                ("grpc.keepalive_time_ms", self.keepalive_ms),
                ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
                ("grpc.http2.ping_timeout_ms", self.keepalive_timeout_ms),  # newer gRPC times pings by this one
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0)]  # an idle stream keeps pinging

    def server_options(self) -> list[tuple[str, int]]:
        # peers ping every keepalive_ms: never count that as abuse (no GOAWAY "too many pings")
        return [*self._common_options(),
                ("grpc.http2.min_recv_ping_interval_without_data_ms", max(1, self.keepalive_ms // 2)),
                ("grpc.http2.max_ping_strikes", 0)]

    def channel_options(self) -> list[tuple[str, int]]:
        return self._common_options()


def to_proto(env: Envelope) -> pb.Envelope:
    m = pb.Envelope(origin=env.origin, n=env.n, op=env.op)
    deps = m.deps  # filled in place: cheaper than building a dict for the constructor to copy
    for o, n in env.deps:
        deps[o] = n
    return m


# The packed form of a batch (Frame.packed): an array of [origin, n, {origin: n}, op].  The
# bounds are protobuf's (uint32 regions, uint64 counters); deps as a map, so a region named
# twice means what it means in protobuf's map (the last one), and sorting gives the pairs.
_U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)]
_U64 = Annotated[int, msgspec.Meta(ge=0)]  # msgspec reads integers up to 2**64 - 1
_pack = safe_encode.encoder()  # not Encoder().encode: it crashes the process when an allocation fails
_unpack = msgspec.msgpack.Decoder(list[tuple[_U32, _U64, dict[_U32, _U64], bytes]]).decode


def pack_batch(envelopes: list[Envelope]) -> bytes:
    return _pack([(e.origin, e.n, dict(e.deps), e.op) for e in envelopes])


def unpack_batch(raw: bytes) -> list[Envelope]:
    try:
        rows = _unpack(raw)
    except msgspec.MsgspecError as e:
        raise ProtocolError(f"an unreadable packed batch: {e}") from None
    return envelopes_of(rows)


def _same_envelopes(a: list[Envelope], b: list[Envelope]) -> bool:
    """The same envelopes (the same objects of the causal log), in the same order?"""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def from_proto(m: pb.Envelope) -> Envelope:
    return Envelope(m.origin, m.n, tuple(sorted(m.deps.items())), bytes(m.op))


def _nothing() -> None:
    pass


def _nothing_said(_why: str) -> None:
    return None


def _no_resync(*_args):
    raise ConnectionError("this region cannot take part in a full resync")


class LinkStalled(ConnectionError):
    """The peer acknowledged nothing for too long while operations were in flight."""


class Transport(Protocol):
    """What moves a hub's frames: serves its peers' calls and dials its own (node/transport/grpc_links.py's
    ``GrpcLinks`` over gRPC).  Kept out of this module so the hub's logic runs without gRPC (the
    simulation drives hubs over a network of its own)."""

    async def serve(self, hub: ReplicationHub, host: str, port: int, extra: Iterable) -> int: ...
    async def dial_forever(self, hub: ReplicationHub, peer: int, address: str) -> None: ...
    async def stop(self, hub: ReplicationHub) -> None: ...


class Outbox:
    """What a link writes: data frames in order, bounded by bytes (:meth:`put` waits for
    room), and the latest Ack in a slot of its own (:meth:`put_ack` replaces it, never waits).

    The writer (:meth:`get`) sends a waiting ack before the next data frame, but never two
    acks in a row while data waits, so neither direction of the link starves the other."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # bytes of queued data frames before put() waits
        self.frames: deque[tuple[pb.Frame, int]] = deque()
        self.queued = 0
        # what builds the ack to send next, called when it leaves (Link.acknowledge: most acks
        # put are replaced before they leave, so their version vector is read only then)
        self.ack: Callable[[], pb.Frame] | None = None
        self.closed = False
        self._ack_turn = True
        self.ack_interval = ACK_INTERVAL  # the link sets both from its settings (Pacing)
        self.relay_delay = RELAY_DELAY
        self._ack_at = float("-inf")  # when the last ack was handed to the writer
        self._holding_ack = False  # the writer waits for the ack's pace to allow it (see get)
        self._ack_waiting = False  # an ack was put and not yet sent
        self._ack_pace = AckPace.PARTS  # ...and how long it may wait (see put_ack)
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    async def put(self, frame: pb.Frame) -> None:
        """Queue a data frame, waiting while the queue holds ``capacity`` bytes or more."""
        while self.queued >= self.capacity and not self.closed:
            self._room.clear()
            await self._room.wait()
        if self.closed:
            return  # the link is over: the sender is being stopped
        size = frame.ByteSize()
        self.frames.append((frame, size))
        self.queued += size
        self._readable.set()

    def put_ack(self, build: Callable[[], pb.Frame], pace: AckPace = AckPace.PARTS) -> None:
        """Make the ack ``build`` returns (called when it leaves) the ack to send next,
        replacing one not yet sent (acks only raise a value).
        ``pace``: how long after the previous ack it may leave (:meth:`ack_wait`); when an
        ack was already waiting, the sooner of the two paces holds (the newer ack says all
        the older said).  A writer holding an ack back until its pace allows it is not woken
        (it would only wait again), unless the pace is now a sooner one."""
        self.ack = build
        if self._ack_waiting and self._ack_pace <= pace:
            pace = self._ack_pace
        hurry = pace < self._ack_pace
        self._ack_pace = pace
        self._ack_waiting = True
        if not self._holding_ack or hurry:
            self._readable.set()

    def ack_wait(self, pace: AckPace) -> float:
        """Seconds an ack of that pace waits after the previous ack (see :class:`AckPace`)."""
        if pace == AckPace.PARTS:
            return self.ack_interval
        lazy = self.ack_interval * LAZY_ACK_FACTOR
        if pace == AckPace.LAZY:
            return lazy
        return min(lazy, max(self.ack_interval, self.relay_delay / RELAY_ACKS_PER_DELAY))

    def close(self) -> None:
        """End the link: the writer gets None, a waiting sender returns."""
        self.closed = True
        self._readable.set()
        self._room.set()

    def backlogged(self) -> bool:
        """Are data frames waiting for the peer to read?"""
        return bool(self.frames)

    async def get(self) -> pb.Frame | None:
        """The next frame to write; None once the link is closed."""
        while not self.closed:
            if self.ack is not None and (self._ack_turn or not self.frames):
                now = time.monotonic()
                due = self._ack_at + self.ack_wait(self._ack_pace)
                if not self.frames and now < due:
                    # only an ack waits and one left a moment ago: a newer one may replace it
                    self._holding_ack = True
                    try:
                        await self._readable_or(due - now)
                    finally:
                        self._holding_ack = False
                    continue
                frame, self.ack = self.ack(), None
                self._ack_waiting = False
                self._ack_turn = False
                self._ack_at = now
                return frame
            if self.frames:
                frame, size = self.frames.popleft()
                self.queued -= size
                self._room.set()
                self._ack_turn = True
                return frame
            self._readable.clear()
            await self._readable.wait()
        return None

    async def _readable_or(self, timeout: float) -> None:
        """Wait until something is put (or the outbox closes), or ``timeout`` seconds."""
        self._readable.clear()
        timer = asyncio.get_running_loop().call_later(timeout, self._readable.set)
        try:
            await self._readable.wait()
        finally:
            timer.cancel()


class Link:
    """One established stream with a peer, whichever side dialed: a thin adapter that moves
    frames for :mod:`crdt.sync` (:class:`LinkState` and the assemblers), which decides."""

    def __init__(self, hub: "ReplicationHub", peer: int, peer_vv: dict[int, int], *,
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
        # forked comes back without its side: withdrawn_by, node/lone_writes.py)
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
        self.peer_received = 0               # the peer's last Ack.received

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
            small = zlib.compress(raw, 1) if len(raw) < COMPRESS_INLINE else await asyncio.to_thread(zlib.compress, raw, 1)
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
        self.hub.relayed += len(relays)
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
        causal = self.hub.causal
        self.outbox.put_ack(lambda: pb.Frame(ack=pb.Ack(vv=causal.vv, received=received,
                                                        heads=causal.held_heads())), pace)

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
        hub.on_batch_applied()
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
        self.acknowledge(pace=AckPace.LAZY if own else AckPace.RELAYS)
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
        self.hub.frame_arrives()  # what follows applies operations: the region may offer its core first
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
                if not self.hub.join_image(image):
                    raise ConnectionResetError("the peer's state could not be joined now: start the link again")
                self.merging = False
                self.hub.merging.discard(self.peer)
            elif not self.hub.install_image(image):
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
        if raised or ack.received > self.peer_received:
            self.progress_at = now
        self.peer_received = ack.received

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


class ReplicationHub:
    """A region's replication endpoint: serves peers, dials peers, relays."""

    def __init__(self, region: int, cluster_id: str, database: str, token: str,
                 causal: CausalLog, on_apply: Callable[[Envelope], None], config=None, *,
                 tls: LinkCredentials | None = None, names: dict[int, str] | None = None,
                 transport: Transport | None = None) -> None:
        """``config``: the region's settings (node/config.py), read when links need them;
        None: the defaults.  ``tls``: this region's certificate, key and CA bundle (None:
        plain-text links); ``names``: region number -> name, the name a peer's certificate
        must carry; ``transport``: what serves and dials the links (``GrpcLinks()``,
        node/transport/grpc_links.py; None: set later, before :meth:`serve`)."""
        self.region = region
        self.cluster_id = cluster_id
        self.database = database
        self.token = token
        self.causal = causal
        self.on_apply = on_apply
        # applies a run of envelopes in one call (None: on_apply for each); see deliver_batch
        self.on_apply_run: Callable[[list[Envelope]], None] | None = None
        self.config = config
        self.links: dict[int, Link] = {}
        self.refused = 0  # handshakes this region refused
        self.denied = 0   # handshakes peers refused to this region (at Hello, or ending the TLS handshake)
        self.protocol_errors = 0  # links ended because the peer broke the protocol
        self.stalls = 0           # links the watchdog closed
        self.sendable: int | None = None  # absolute causal-log position safe to send up to (None: all)
        # nothing from this causal-log position on leaves while the region takes writes alone
        # (node/lone_writes.py); None: no hold
        self.hold_at: int | None = None
        # and operations of this region's own origin coming from peers are dropped: it minted
        # numbers alone, and theirs can only be another history of those (node/lone_writes.py)
        self.refuse_own = False
        self.peer_acked: dict[int, dict[int, int]] = {}  # per peer, what it is known to hold
        # per peer, the version vector it last reported as a whole (handshake, ack): causal
        # stability reads these (crdt/sync.py, LinkState.on_batch says why not peer_acked)
        self.peer_reported: dict[int, dict[int, int]] = {}
        # called once a link handed a whole received batch to the causal log (the region
        # wakes its blocked readers once per batch, not once per operation); ``in_batch``
        # is true meanwhile
        self.on_batch_applied: Callable[[], None] = _nothing
        self.in_batch = False
        # called as a link is about to handle a frame of operations from its peer, not an ack (the
        # region offers its core to other runnable processes first: RegionCore.peer_frame_arrives)
        self.frame_arrives: Callable[[], None] = _nothing
        # (the argument: hold the histories' digests - False for a peer that may be older)
        self.make_image: Callable[[bool], tuple[bytes, dict]] = _no_resync
        self.install_image: Callable[[bytes], bool] = _no_resync
        self.join_image: Callable[[bytes], bool] = _no_resync  # joins a peer's image into the state
        self.image_vv: dict[int, int] = {}  # the version vector of the last image installed or joined
        self.joins_states = True            # announced at handshakes (a test plays an older version)
        self.merging: set[int] = set()      # peers whose image this region is about to join
        self.conflicts: set[int] = set()    # ... or cannot join (the peer cannot): nothing crosses
        # peers that hold another history than this region under the same numbers (per peer,
        # where: crdt/causal.py's Fork), and how many times a link found one
        self.forks: dict[int, list[Fork]] = {}
        self.history_forks = 0
        # told why when a link finds two histories of a third region (the region core fail-stops)
        self.foreign_fork: Callable[[str], None] = _nothing_said
        self.resyncs_sent = 0
        self.resyncs_received = 0
        self.joins = 0  # peers' states joined into this region's
        self.duplicates = 0  # envelopes received that were applied here already
        self.relayed = 0     # operations of third regions sent to a peer (see crdt.sync.RelayHold.due)
        self.frames_sent = 0      # frames written to peers, data and acks (what batching saves)
        self.frames_received = 0  # ... and read from them
        self.paused = False          # every link cut
        self.cut: set[int] = set()   # links to these peers cut
        self.arrivals: list[float] = []  # monotonic time each log entry was issued or received here
        self._served: dict[int, Outbox] = {}  # calls peers made to us, ended by closing the outbox
        self._peers: dict[int, str] = {}
        self.tls = tls
        self.names = dict(names or {})
        self.front: TlsFront | None = None
        self._served_ports: dict[int, int | None] = {}  # peer -> the front's port its served link uses
        # what serves and dials links (gRPC: node/transport/grpc_links.py); None: nothing yet
        self.transport: Transport | None = transport
        self._dialers: dict[int, asyncio.Task] = {}
        self.port = 0
        # membership (node/activeactive.py's MembershipGate): handshakes and operations pass it
        self.gate = None
        self.on_denied: Callable[[], None] = lambda: None  # a peer refused this region at Hello
        self.retired = False  # this region was removed from the database
        self.handshake_vv: dict[int, dict[int, int]] = {}  # per peer, its vv at the first handshake
        # ... and at the latest one: what a starting region takes back (a peer restored from an
        # older copy meanwhile no longer holds what its first handshake said)
        self.last_handshake_vv: dict[int, dict[int, int]] = {}
        self.forgotten_at_handshake = 0  # a peer's own waiting operations dropped when it handshook
        self.trace = _stage_trace(region)  # None unless a benchmark asks (see StageTrace)
        # the last batch frame built: (its envelopes, packed?, the frame); see Link.batch_frame
        self.last_batch: tuple[list[Envelope], bool, pb.Frame] | None = None
        # announced in the handshake: send this region packed batches (every region reads both
        # forms; a region of an earlier version does not announce it, and tests play one)
        self.packed_batches = True

    @property
    def limits(self) -> LinkLimits:
        return LinkLimits() if self.config is None else LinkLimits.from_config(self.config)

    def pacing(self) -> Pacing:
        return Pacing() if self.config is None else Pacing.from_config(self.config)

    # ------------------------------------------------------------ local side
    def history_forked(self, peer: int, found: list[Fork]) -> None:
        """A link found that ``peer`` holds other operations than this region under the same
        numbers: it exchanges nothing more (each end would drop the other's as duplicates),
        and the region's status names the fork for as long as it runs (a fork does not heal
        by itself; a region whose own history forked takes no writes: node/activeactive.py)."""
        new = self.forks.get(peer) != found
        self.forks[peer] = found
        if new:
            self.history_forks += 1
            for f in found:
                log.error("region %d holds another history of region %d's operations than this region: at "
                          "operation %d their digests differ (%016x here, %016x there); nothing more crosses "
                          "this link until the region whose history forked withdraws its side (see "
                          "docs/active-active.md, 'Histories and forks')", peer, f.origin, f.n, f.here, f.there)
        foreign = [f for f in found if f.origin not in (self.region, peer)]
        if foreign:
            # only a region itself mints its numbers, and one that minted alone withdraws its
            # side (node/lone_writes.py): two histories of a third region mean a fault that
            # nothing here can judge, so the region stops rather than serve either (fail-stop)
            f = foreign[0]
            self.foreign_fork(f"region {peer} holds another history of region {f.origin}'s operations than "
                              f"this region: at operation {f.n} their digests differ ({f.here:016x} here, "
                              f"{f.there:016x} there)")

    def withdrawn_by(self, peer: int, peer_vv: dict[int, int]) -> None:
        """A fork in ``peer``'s own history ends when the peer comes back holding fewer of its
        operations than where the histories differed, and agreeing up to there (the handshake
        checks): it withdrew the ones it minted alone (node/lone_writes.py) and issues them again."""
        found = self.forks.get(peer)
        if not found:
            return
        rest = [f for f in found if not (f.origin == peer and peer_vv.get(peer, 0) < f.n)]
        if len(rest) == len(found):
            return
        log.warning("region %d withdrew its operations from where its history differed from this region's: "
                    "the fork is over", peer)
        if rest:
            self.forks[peer] = rest
        else:
            del self.forks[peer]

    def handshook(self, peer: int, peer_vv: dict[int, int]) -> int:
        """A link with ``peer`` is up (either end dialed; every handshake, not only the first).
        Record what the peer held when first met (``handshake_vv``: what a joining region
        catches up to, what a recovering one takes back) and forget the operations *of the
        peer's own* that wait here for their dependencies; returns how many were forgotten.

        Why forget them: a region that restarts after a crash of its machine may have lost
        the tail of its own log - operations that left before their records were on its
        disk.  It learns from each peer's handshake the last of its own operations that peer
        *applied* and takes those back before it mints again (``ActiveActive.recovered``),
        but one that waits here was never applied, acknowledged nor relayed, so nothing
        counts it: kept, it would share its dot with the different operation the region
        mints after recovering - two operations under one dot, a silent divergence.
        Forgetting a waiting operation is always safe (crdt/causal.py): this end's
        handshake said what it applied, so the peer sends again everything after that.
        An older link with the peer still up here (its machine went down without closing
        the connection) is superseded: it applies nothing more, so no frame sent before the
        peer's restart can bring such an operation back after this."""
        self.handshake_vv.setdefault(peer, dict(peer_vv))
        self.last_handshake_vv[peer] = dict(peer_vv)
        older = self.links.get(peer)
        if older is not None:
            older.superseded = True  # it applies nothing more (run_link)
        if not self.causal.pending:
            return 0
        forgotten = self.causal.drop_pending(lambda e: e.origin == peer)
        if forgotten:
            self.forgotten_at_handshake += forgotten
            log.info("forgot %d operations of region %d that were waiting here for their dependencies: "
                     "it sends again what this region has not applied", forgotten, peer)
        return forgotten

    def issue(self, op: bytes) -> Envelope:
        """Stamp a local operation (already applied locally) and wake the links."""
        env = self.causal.stamp(op)
        self.arrivals.append(time.monotonic())
        if self.trace is not None:
            self.trace.mark("issued", 0, env.origin, env.n)
        self.wake_if_sendable()
        return env

    def deliver(self, env: Envelope) -> None:
        """Hand ``env`` to the causal log, which has ``on_apply`` apply it and every envelope
        it makes ready, each before counting it.  If applying one raises, the exception
        propagates: that envelope and the ones after it are neither counted, acknowledged
        nor relayed (the region fail-stops, node/supervision.py).  The membership gate
        first drops an operation of a removed region past its frozen point, and ends the
        link (:class:`MembershipBehind`) on one of a region it does not know."""
        if self.gate is not None:
            verdict = self.gate.admits(env)
            if verdict == "drop":
                return
            if verdict == "behind":
                raise MembershipBehind(f"operation {env.dot} of a region that is not a member here "
                                       "(or that depends on one): handshake again for the newer member list")

        if self.refuse_own and env.origin == self.region:
            return
        if env.n <= self.causal.vv.get(env.origin, 0):
            self.duplicates += 1  # it came another way first (a relay, or a resend after a reconnection)
        self.causal.receive(env, self._apply_ready)
        self.wake_if_sendable()  # relay what arrived to the other peers

    def _apply_ready(self, ready: Envelope) -> None:
        """The causal log's callback for each envelope it makes ready (see :meth:`deliver`)."""
        self.on_apply(ready)
        self.arrivals.append(time.monotonic())  # one arrival per log entry, in log order
        if self.trace is not None:
            self.trace.mark("applied", 0, ready.origin, ready.n)

    def deliver_batch(self, envelopes: list[Envelope]) -> None:
        """:meth:`deliver` of each of a peer's batch in turn, with the same outcome; a run of
        envelopes that are ready in order (nearly every batch: a peer sends in causal order)
        is applied in one ``on_apply_run`` call - one log write, one count - instead of one
        call per envelope.  A batch the membership gate does not wholly admit goes one by one."""
        if (self.gate is not None and not self.gate.admits_all(envelopes)) or self.refuse_own:
            for env in envelopes:
                self.deliver(env)
            return
        self.duplicates += self.causal.receive_all(envelopes, self._apply_run)
        self.wake_if_sendable()

    def _apply_run(self, run: list[Envelope]) -> None:
        """The causal log's callback for a run of ready envelopes (see :meth:`deliver_batch`).
        If applying fails, the exception's ``applied`` says how many of the run were applied
        (crdt/causal.py counts those)."""
        try:
            if self.on_apply_run is not None:
                self.on_apply_run(run)
            else:
                for k, env in enumerate(run):
                    try:
                        self.on_apply(env)
                    except Exception as e:
                        e.applied = k  # type: ignore[attr-defined]
                        raise
        except BaseException as e:
            self._arrived(run[:getattr(e, "applied", 0)])  # those the causal log counts
            raise
        self._arrived(run)

    def _arrived(self, applied: list[Envelope]) -> None:
        self.arrivals.extend([time.monotonic()] * len(applied))  # one per log entry, in log order
        if self.trace is not None:
            for env in applied:
                self.trace.mark("applied", 0, env.origin, env.n)

    def sendable_upto(self) -> int:
        upto = self.causal.end if self.sendable is None else self.sendable
        return upto if self.hold_at is None or self.hold_at >= upto else self.hold_at

    def trim(self, count: int) -> None:
        """Drop the ``count`` oldest envelopes of the backlog (see crdt/causal.py)."""
        self.causal.trim(count)
        del self.arrivals[:count]

    def joined(self, image_vv: dict[int, int]) -> None:
        """A peer's image holding ``image_vv`` was joined into the state: the backlog's floor
        rose to what it brought, so every link checks whether its peer lacks some of it."""
        self.joins += 1
        self.image_vv = dict(image_vv)
        for link in self.links.values():
            link.state.floor_raised()
        self.wake()

    def log_replaced(self) -> None:
        """After a full resync installed another log: every link looks at it from its start."""
        self.resyncs_received += 1
        self.image_vv = dict(self.causal.vv)  # the image's own, before this region's go on top
        self.arrivals = [time.monotonic()] * len(self.causal.log)
        for link in self.links.values():
            link.state.log_replaced()
        self.wake()

    def wake(self) -> None:
        for link in self.links.values():
            link.wakeup.set()

    def wake_if_sendable(self) -> None:
        """Wake the links for what just joined the causal log, if it may leave now.  When the
        region logs (``sendable`` set), it may not: the operation log's write tells the
        region, which raises ``sendable`` and wakes the links then (one wake-up per turn,
        not two per operation)."""
        if (self.sendable is None or self.sendable >= self.causal.end) and self.hold_at is None:
            self.wake()

    def membership_hello(self) -> tuple[int, bytes]:
        """(epoch, member list) for a Hello or Welcome: (0, b'') without a membership gate."""
        return (0, b"") if self.gate is None else self.gate.hello()

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

    def check_certificate(self, hello: pb.Hello, caller: Identity | None) -> str:
        """With TLS: does the caller's verified certificate name the region its Hello claims?"""
        if self.tls is None:
            return ""
        if caller is None:
            return "the call did not come through this region's TLS port"
        claimed = self.names.get(hello.region)
        if claimed is None:
            return f"region number {hello.region} is not in the cluster file"
        if claimed not in caller.names:
            return (f"a certificate of {', '.join(sorted(caller.names)) or 'no name'} "
                    f"cannot speak for {claimed} (region {hello.region})")
        return ""

    def caller(self, grpc_peer: str) -> Identity | None:
        """Who made a call (None without TLS, or when it did not come through the TLS front)."""
        return None if self.front is None else self.front.identity(grpc_peer)

    def refuse(self, address: str, reason: str) -> None:
        """A peer refused at the TLS handshake or at Hello: logged and counted."""
        self.refused += 1
        log.warning("refused a connection from %s: %s", address, reason)

    def denied_by(self, address: str, reason: str) -> None:
        """A peer gave up a TLS handshake with this region (it does not accept its certificate)."""
        self.denied += 1
        log.warning("a connection from %s ended: %s", address, reason)

    def reload_tls(self) -> dict:
        """Read the certificate, key and CA bundle again (TlsConfigError: nothing changed) and
        have every link handshake again with them: outgoing links are dialed anew, the
        connections peers dialed are closed (they dial again)."""
        if self.tls is None:
            raise ValueError("links are plain text here (tls = false): there are no certificates to reload")
        self.tls.reload()
        if self.front is not None:
            self.front.drop({p for p in self._served_ports.values() if p is not None})
        for peer in list(self._dialers):
            self._dialers.pop(peer).cancel()
        for peer, address in self._peers.items():
            self.dial(peer, address)
        log.warning("reloaded the TLS certificate (serial %s), its key and the CA bundle (%d CAs); "
                    "links handshake again", self.tls.describe()["cert_serial"], self.tls.material.ca_count)
        return self.tls.describe()

    def is_cut(self, peer: int) -> bool:
        return self.paused or self.retired or peer in self.cut

    # ------------------------------------------------------------ membership changes
    def peer_numbers(self) -> set[int]:
        return set(self._peers) | set(self._served) | set(self.links)

    def relink(self) -> None:
        """Every link handshakes again (a membership change: both ends meet at the new epoch)."""
        for outbox in list(self._served.values()):
            outbox.close()
        for peer in list(self._dialers):
            self._dialers.pop(peer).cancel()
        for peer, address in list(self._peers.items()):
            self.dial(peer, address)

    def forget(self, peer: int) -> None:
        """``peer`` is a member no more: stop dialing it and close its link."""
        task = self._dialers.pop(peer, None)
        if task is not None:
            task.cancel()
        self._peers.pop(peer, None)
        outbox = self._served.get(peer)
        if outbox is not None:
            outbox.close()

    def retire(self) -> None:
        """This region was removed: no link, no dialing (peers are refused at Hello)."""
        self.retired = True
        for peer in list(self.peer_numbers()):
            self.forget(peer)

    # ------------------------------------------------------------ serving
    async def serve(self, host: str = "127.0.0.1", port: int = 0, extra: Iterable = ()) -> int:
        """Serve Replication, and the ``extra`` services (each ``.add_to(server)``), on one port,
        through :attr:`transport`; returns the port."""
        if self.transport is None:
            raise RuntimeError("this hub has no transport to serve on (node/transport/grpc_links.py)")
        return await self.transport.serve(self, host, port, extra)

    async def run_link(self, link: Link, incoming, writer=None) -> None:
        """Send, receive and watch (and write: ``writer``, a coroutine) until one of them stops;
        then the call ends (the outbox closes).

        A protocol violation or a stall is logged and counted here, then raised."""
        self.links[link.peer] = link

        async def receive() -> None:
            async for frame in incoming:
                if link.superseded:  # a newer connection of the peer handshook (see handshook)
                    log.info("link to region %d closed: a newer connection of it handshook", link.peer)
                    return
                self.frames_received += 1
                link.on_frame(frame)

        tasks = {asyncio.ensure_future(link.send_loop()), asyncio.ensure_future(receive()),
                 asyncio.ensure_future(link.watch())}
        if writer is not None:
            tasks.add(asyncio.ensure_future(writer))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a failure ends the link (a dialer reconnects)
        except ProtocolError as e:
            self.protocol_errors += 1
            log.error("region %d broke the replication protocol, link closed (nothing of it applied): %s",
                      link.peer, e)
            raise
        except LinkStalled as e:
            self.stalls += 1
            log.warning("link to region %d closed by the watchdog: %s", link.peer, e)
            raise
        finally:
            for task in tasks:
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: raised above, or moot once the link is over
                else:
                    task.cancel()
            if self.links.get(link.peer) is link:
                del self.links[link.peer]
                self.merging.discard(link.peer)  # the next handshake decides again
            link.outbox.close()
            if link._relay_timer is not None:
                link._relay_timer.cancel()

    # ------------------------------------------------------------ dialing
    def pause(self, peer: int | None = None) -> None:
        """Cut every link (``peer`` None) or the link to one peer: stop sending and applying, close."""
        if peer is None:
            self.paused = True
        else:
            self.cut.add(peer)
        for p in [p for p in self._served if self.is_cut(p)]:
            self._served[p].close()
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
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # not serving: whoever drives this hub without a loop (the simulation) connects it
        if self.transport is None:
            return  # nothing to dial with yet: the region's start gives the transport, then dials
        if peer not in self._dialers and not self.is_cut(peer):
            self._dialers[peer] = asyncio.ensure_future(self.transport.dial_forever(self, peer, address))

    async def stop(self) -> None:
        for task in self._dialers.values():
            task.cancel()
        self._dialers.clear()
        if self.transport is not None:
            await self.transport.stop(self)
        if self.trace is not None:
            self.trace.save()
