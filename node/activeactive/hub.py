"""Replication between regions: the hub, a region's endpoint that keeps its links.

The hub checks handshakes, keeps one :class:`~node.activeactive.link.Link` per peer, hands what
the links receive to the causal log and the region, pauses and cuts links, and dials.  Where
the rest lives:

- node/activeactive/link.py: one link - sending, batching and relaying, receiving, the watchdog;
- node/activeactive/outbox.py: what a link writes, data frames bounded by bytes and the latest ack;
- node/activeactive/frames.py: what a frame may hold (:class:`LinkLimits`) and the conversions of
  envelopes to protobuf and packed batches;
- node/activeactive/pacing.py: how often a link sends batches and acks;
- node/activeactive/stage_trace.py: a benchmark's trace of each operation's stages;
- node/activeactive/sides.py: what the hub is built with - the region's side, the membership
  gate, a watcher;
- node/transport/grpc_links.py: the hub's ``transport``, which moves the frames over gRPC.
  None of the others imports gRPC, so the simulation runs real hubs over a network of its own.

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
batch raised it, to every other peer too.  How links batch and relay, how frames are bounded
and compressed, why writing never blocks reading and how dead or stuck peers are noticed: the
theory of operation of link.py, frames.py and outbox.py.

Only what is logged leaves: ``sendable`` (raised by the region from its operation
log, :meth:`ReplicationHub.logged_upto`) bounds how far into the causal log links may send, so a peer never holds an
operation whose record the region has not handed to the OS (a killed process
keeps those; after a crash of its machine the region takes its own operations
back from its peers before it mints again: node/activeactive/recovery.py).  While it is
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
than where they differed (a region that took writes alone withdrew them: node/activeactive/lone_writes.py);
a fork in a third region's history stops the region (the side's ``fail_stop``).

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

The hub does not know what an operation means: envelopes carry it as bytes and the
region's side (:class:`RegionSide`, the region core) is handed each envelope the causal log
delivers (``apply_remote``) - or, for a peer's batch, each run of envelopes that are ready
in order (``apply_remote_run``; nearly the whole batch: a peer sends in causal order), so
that the region applies and logs them in one call (``deliver_batch``).

What the hub works with is given when it is built, never patched in afterwards: the region's
side (the region core, handed on by node/activeactive/region.py's ``ActiveActive``), the member
list's :class:`Gate`, how to make this region's image, whom to tell of a refusal.  The rest
moves through methods: the operation log raises ``sendable`` (:meth:`ReplicationHub.logged_upto`),
writes taken alone hold this region's operations (:meth:`~ReplicationHub.hold_own_from`,
:meth:`~ReplicationHub.release_own`), the transport reports where it listens and what it serves
(:meth:`~ReplicationHub.listening`, :meth:`~ReplicationHub.serving`), and a :class:`Watcher` sees
what is applied and issued (the simulation's checks).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from crdt.causal import CausalLog, Envelope, Fork
from crdt.linkerrors import MembershipBehind
from crdt.sync import ProtocolError
from node.activeactive.frames import LinkLimits
from node.activeactive.handshake_checks import HandshakeChecks
from node.activeactive.link import Link, LinkStalled
from node.activeactive.outbox import Outbox
from node.activeactive.pacing import AckPace, Pacing
from node.activeactive.sides import Callbacks, Gate, RegionSide, Watcher, no_image, nothing
from node.activeactive.stage_trace import stage_trace
from node.transport.tls import Identity, LinkCredentials, TlsFront
from proto import replication_pb2

# protoc's generated module builds its message classes at run time and ships no type stubs
# (proto/build.py writes no .pyi): to a type checker its messages are Any
pb: Any = replication_pb2

log = logging.getLogger("braid.replication")

# what gRPC's TLS reports when this end's check of the peer's certificate failed
CERTIFICATE_REFUSED = ("CERTIFICATE_VERIFY_FAILED", "Hostname Verification")


class Transport(Protocol):
    """What moves a hub's frames: serves its peers' calls and dials its own (node/transport/grpc_links.py's
    ``GrpcLinks`` over gRPC).  Kept out of this module so the hub's logic runs without gRPC (the
    simulation drives hubs over a network of its own)."""

    async def serve(self, hub: ReplicationHub, host: str, port: int, extra: Iterable) -> int: ...
    async def dial_forever(self, hub: ReplicationHub, peer: int, address: str) -> None: ...
    async def stop(self, hub: ReplicationHub) -> None: ...


class ReplicationHub(HandshakeChecks):
    """A region's replication endpoint: serves peers, dials peers, relays."""

    def __init__(self, region: int, cluster_id: str, database: str, token: str,
                 causal: CausalLog, side: RegionSide | Callable[[Envelope], None], config: Any = None, *,
                 tls: LinkCredentials | None = None, names: dict[int, str] | None = None,
                 transport: Transport | None = None, gate: Gate | None = None,
                 make_image: Callable[[bool], tuple[bytes, dict[int, int]]] = no_image,
                 on_denied: Callable[[], None] = nothing, shard: int = 0, slot_map: str = "") -> None:
        """``side``: the region that applies what arrives and takes images (a :class:`RegionSide`;
        a function alone: ``Callbacks(apply=function)``, a hub that only applies).
        ``config``: the region's settings (node/region/config.py), read when links need them;
        None: the defaults.  ``tls``: this region's certificate, key and CA bundle (None:
        plain-text links); ``names``: region number -> name, the name a peer's certificate
        must carry; ``transport``: what serves and dials the links (``GrpcLinks()``,
        node/transport/grpc_links.py; None: given to :meth:`serve`).  ``gate``: the member list
        handshakes and operations pass (None: every peer and operation passes);
        ``make_image``: builds this region's full-resync image (the argument: hold the
        histories' digests - False for a peer that may be older); ``on_denied``: told when a
        peer refused this region at Hello.  ``shard``, ``slot_map``: which shard of which slot
        map this is (docs/sharding.md): a peer of another shard or map is refused at Hello."""
        self.region = region
        self.shard = shard
        self.slot_map = slot_map
        self.cluster_id = cluster_id
        self.database = database
        self.token = token
        self.causal = causal
        self.side: RegionSide = Callbacks(apply=side) if callable(side) else side
        self.config = config
        self.links: dict[int, Link] = {}
        self.refused = 0  # handshakes this region refused
        self.denied = 0   # handshakes peers refused to this region (at Hello, or ending the TLS handshake)
        self.protocol_errors = 0  # links ended because the peer broke the protocol
        self.stalls = 0           # links the watchdog closed
        self.sendable: int | None = None  # absolute causal-log position safe to send up to (None: all)
        # nothing from this causal-log position on leaves while the region takes writes alone
        # (node/activeactive/lone_writes.py); None: no hold
        self.hold_at: int | None = None
        # and operations of this region's own origin coming from peers are dropped: it minted
        # numbers alone, and theirs can only be another history of those (node/activeactive/lone_writes.py)
        self.refuse_own = False
        self.peer_acked: dict[int, dict[int, int]] = {}  # per peer, what it is known to hold
        # per peer, what its last acks said is on its disk (Ack.synced; reset at each handshake)
        self.peer_synced: dict[int, dict[int, int]] = {}
        # per peer, what its acks said it holds since the last handshake (reset there): WAIT counts
        # these, not peer_acked, which a Hello or Welcome sets to what the peer applied - more than
        # its log may have handed to its OS yet (records held behind a full-resync image's snapshot)
        self.peer_said: dict[int, dict[int, int]] = {}
        # what this region's log holds on disk: to which causal-log position, per origin how far (Ack.synced)
        self.synced_at, self.synced_vv = 0, dict[int, int]()
        # while a full-resync image's snapshot waits to be written (the disk was full), what the
        # log before the image held: acks say just that (a process that ends first starts from it)
        self.ack_cap: dict[int, int] | None = None
        # per peer, the version vector it last reported as a whole (handshake, ack): causal
        # stability reads these (crdt/sync.py, LinkState.on_batch says why not peer_acked)
        self.peer_reported: dict[int, dict[int, int]] = {}
        # true while a link hands a whole received batch to the causal log (the side's
        # remote_batch_applied follows)
        self.in_batch = False
        self.make_image = make_image
        self.image_vv: dict[int, int] = {}  # the version vector of the last image installed or joined
        self.joins_states = True            # announced at handshakes (a test plays an older version)
        self.merging: set[int] = set()      # peers whose image this region is about to join
        self.conflicts: set[int] = set()    # ... or cannot join (the peer cannot): nothing crosses
        # peers that hold another history than this region under the same numbers (per peer,
        # where: crdt/causal.py's Fork), and how many times a link found one
        self.forks: dict[int, list[Fork]] = {}
        self.history_forks = 0
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
        # membership (node/activeactive/membership.py's MembershipGate): handshakes and operations pass it
        self.gate = gate
        self.on_denied = on_denied  # a peer refused this region at Hello
        self.watchers: list[Watcher] = []  # see watch()
        self.retired = False  # this region was removed from the database
        self.handshake_vv: dict[int, dict[int, int]] = {}  # per peer, its vv at the first handshake
        # ... and at the latest one: what a starting region takes back (a peer restored from an
        # older copy meanwhile no longer holds what its first handshake said)
        self.last_handshake_vv: dict[int, dict[int, int]] = {}
        self.forgotten_at_handshake = 0  # a peer's own waiting operations dropped when it handshook
        # the links the last handshake ended to have forgotten operations sent again (handshook)
        self.links_to_restart: set[int] = set()
        self.trace = stage_trace(region)  # None unless a benchmark asks (see StageTrace)
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
        by itself; a region whose own history forked takes no writes: node/activeactive/recovery.py)."""
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
            # side (node/activeactive/lone_writes.py): two histories of a third region mean a fault that
            # nothing here can judge, so the region stops rather than serve either (fail-stop)
            f = foreign[0]
            self.side.fail_stop(f"region {peer} holds another history of region {f.origin}'s operations than "
                              f"this region: at operation {f.n} their digests differ ({f.here:016x} here, "
                              f"{f.there:016x} there)")

    def withdrawn_by(self, peer: int, peer_vv: dict[int, int]) -> None:
        """A fork in ``peer``'s own history ends when the peer comes back holding fewer of its
        operations than where the histories differed, and agreeing up to there (the handshake
        checks): it withdrew the ones it minted alone (node/activeactive/lone_writes.py) and issues them again."""
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
        its log's tail - operations that left before their records were on its disk.  It
        takes back from each peer the last of its own operations that peer *applied*
        (``ActiveActive.recovered``), but one that waits here was never applied, so nothing
        counts it: kept, it would share its dot with the operation the region mints after
        recovering - a silent divergence.  The same holds for a waiting operation of any
        origin that depends on one of the peer's operations past what the peer now holds
        (applied on a different operation under that dot, it would break causality; with
        none, it would wait for ever).  A region that applied the lost one sends both again:
        the peer after this handshake; another region once its link handshakes again, which
        ending the other links brings about.  An older link with the peer still up here (its
        machine went down without closing the connection) is superseded: it applies nothing
        more, so no frame sent before the peer's restart brings such an operation back."""
        self.handshake_vv.setdefault(peer, dict(peer_vv))
        self.last_handshake_vv[peer] = dict(peer_vv)
        older = self.links.get(peer)
        if older is not None:
            older.superseded = True  # it applies nothing more (run_link)
        if not self.causal.pending:
            return 0
        holds = peer_vv.get(peer, 0)

        def lost_with_the_peer(e: Envelope) -> bool:
            return any(o == peer and n > holds for o, n in e.deps)

        # a third region's operation that depends on what the peer lost came over another link,
        # whose sender counts it as delivered: that link handshakes again, so its sender learns
        # what this region holds and sends it again (with what it depends on)
        others = {e.origin for e in self.causal.pending.values() if e.origin != peer and lost_with_the_peer(e)}
        forgotten = self.causal.drop_pending(lambda e: e.origin == peer or lost_with_the_peer(e))
        if forgotten:
            self.forgotten_at_handshake += forgotten
            log.info("forgot %d operations that were waiting here for their dependencies (of region %d, "
                     "or depending on what it no longer holds): it sends again what this region has not applied",
                     forgotten, peer)
        if others:
            self.links_to_restart = {p for p in self.links if p != peer}
            for other in self.links_to_restart:
                self.restart_link(other)
        return forgotten

    def restart_link(self, peer: int) -> None:
        """End the link with ``peer`` (served or dialed) so that it handshakes again."""
        outbox = self._served.get(peer)
        if outbox is not None:
            outbox.close()
        task = self._dialers.pop(peer, None)
        if task is not None:
            task.cancel()
        if peer in self._peers:
            self.dial(peer, self._peers[peer])

    def issue(self, op: bytes) -> Envelope:
        """Stamp a local operation (already applied locally) and wake the links."""
        for watcher in self.watchers:
            watcher.issuing()
        env = self.causal.stamp(op)
        self.arrivals.append(time.monotonic())
        if self.trace is not None:
            self.trace.mark("issued", 0, env.origin, env.n)
        self.wake_if_sendable()
        return env

    def deliver(self, env: Envelope) -> None:
        """Hand ``env`` to the causal log, which has the side's ``apply_remote`` apply it and every envelope
        it makes ready, each before counting it.  If applying one raises, the exception
        propagates: that envelope and the ones after it are neither counted, acknowledged
        nor relayed (the region fail-stops, node/region/supervision.py).  The membership gate
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
        for watcher in self.watchers:
            watcher.applying(ready)
        self.side.apply_remote(ready)
        self.arrivals.append(time.monotonic())  # one arrival per log entry, in log order
        if self.trace is not None:
            self.trace.mark("applied", 0, ready.origin, ready.n)

    def deliver_batch(self, envelopes: list[Envelope]) -> None:
        """:meth:`deliver` of each of a peer's batch in turn, with the same outcome; a run of
        envelopes that are ready in order (nearly every batch: a peer sends in causal order)
        is applied in one ``apply_remote_run`` call - one log write, one count - instead of one
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
            for watcher in self.watchers:
                for env in run:
                    watcher.applying(env)
            self.side.apply_remote_run(run)
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

    def logged_upto(self, end: int) -> None:
        """The region's operation log holds (on the OS) what the causal log holds up to absolute
        position ``end``: links may send that far (``sendable``).  It does not wake them; a
        link whose last ack said less than the region had applied acks again."""
        self.sendable = end
        for link in self.links.values():
            if link.ack_short:
                link.ack_short = False
                link.acknowledge(pace=AckPace.WAITED if link.peer_wants_ack else AckPace.LAZY)

    def ask_acks(self, n: int) -> None:
        """A client waits (WAIT, WAITAOF) for peers to hold this region's operations up to ``n``:
        every link asks its peer to acknowledge them at the ack interval, not lazily."""
        for link in self.links.values():
            link.want_ack(n)

    def synced_upto(self, end: int) -> None:
        """The region's operation log holds on disk what the causal log holds up to absolute
        position ``end``: the links' next acks say so (Ack.synced), soon."""
        if end <= self.synced_at:
            return
        synced = self.synced_vv
        for e in self.causal.since(self.synced_at, end):
            if e.n > synced.get(e.origin, 0):
                synced[e.origin] = e.n
        self.synced_at = end
        for link in self.links.values():  # (an fsync is a rare event: its ack need not be lazy)
            link.acknowledge(pace=AckPace.PARTS)

    def acknowledgement(self) -> tuple[dict[int, int], dict[int, int]]:
        """What an ack says this region holds, and the digests of those histories: what the
        causal log holds up to where the operation log handed its records to the OS (a killed
        process keeps those), so a peer counting this region for WAIT counts what survives a
        SIGKILL here; while a full-resync image waits for its snapshot to be written, what the
        log before the image holds (``ack_cap``).  Without a log, everything applied."""
        causal = self.causal
        vv = causal.vv if self.sendable is None else causal.vv_before(self.sendable)
        if self.ack_cap is not None:  # a full-resync image held in memory: what the old log holds
            vv = dict(self.ack_cap)
        if vv is causal.vv:
            return vv, causal.held_heads()
        return vv, {o: digest for o, n in vv.items() if n and (digest := causal.digest_at(o, n)) is not None}

    def ack_said(self, peer: int, vv: Mapping[int, int], on_disk: bool = False) -> bool:
        """An ack of ``peer`` said it holds ``vv`` (:meth:`acknowledgement`), or on disk (``on_disk``:
        Ack.synced); returns whether that raised what WAIT or WAITAOF may count it for."""
        said, risen = (self.peer_synced if on_disk else self.peer_said).setdefault(peer, {}), False
        for origin, n in vv.items():
            if n > said.get(origin, 0):
                said[origin] = n
                risen = True
        return risen

    def hold_own_from(self, end: int) -> None:
        """Nothing from causal-log position ``end`` on leaves: the region takes writes alone
        (node/activeactive/lone_writes.py) until :meth:`release_own`."""
        self.hold_at = end

    def refuse_peers_own(self) -> None:
        """Drop operations of this region's own origin that come from peers: it minted numbers
        alone, and theirs can only be another history of those (until :meth:`release_own`)."""
        self.refuse_own = True

    def release_own(self) -> None:
        """End :meth:`hold_own_from` and :meth:`refuse_peers_own` (it does not wake the links)."""
        self.hold_at = None
        self.refuse_own = False

    def restart_arrivals(self) -> None:
        """Every entry of the causal log arrives now (it was loaded or replaced wholesale)."""
        self.arrivals = [time.monotonic()] * len(self.causal.log)

    def drop_forks_of(self, origin: int) -> None:
        """Forget the forks links found in ``origin``'s history (that region withdrew what forked)."""
        for peer, found in list(self.forks.items()):
            rest = [f for f in found if f.origin != origin]
            if rest:
                self.forks[peer] = rest
            else:
                del self.forks[peer]

    def update_names(self, names: dict[int, str]) -> None:
        """The member list changed: region number -> the name its certificate must carry."""
        self.names = dict(names)

    def watch(self, watcher: Watcher) -> None:
        """Have ``watcher`` see every envelope before it is applied and every operation of this
        region's own before it is stamped (the simulation's checks, chaos/sim/region.py)."""
        self.watchers.append(watcher)

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
        # what is on disk counts again from here, as records of the new log are fsynced
        self.synced_at, self.synced_vv = self.causal.end, {}
        self.restart_arrivals()
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
        """Read the certificate, key and CA bundle again (LinkTlsError: nothing changed) and
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
        for peer in set(self._served) | set(self._dialers) | set(self._peers):
            self.restart_link(peer)

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
    async def serve(self, host: str = "127.0.0.1", port: int = 0, extra: Iterable = (),
                    transport: Transport | None = None) -> int:
        """Serve Replication, and the ``extra`` services (each ``.add_to(server)``), on one port,
        through ``transport`` (which then also dials; None: the one the hub was built with);
        returns the port."""
        if transport is not None:
            self.transport = transport
        if self.transport is None:
            raise RuntimeError("this hub has no transport to serve on (node/transport/grpc_links.py)")
        return await self.transport.serve(self, host, port, extra)

    def listening(self, port: int, front: TlsFront | None = None) -> None:
        """The transport serves on ``port`` (through ``front``, the TLS front, with TLS)."""
        self.port = port
        self.front = front

    def serving(self, peer: int, outbox: Outbox, front_port: int | None) -> None:
        """A call ``peer`` made is up: closing ``outbox`` ends it (``front_port``: the TLS front's
        port the call came through, dropped when the certificates are reloaded)."""
        self._served[peer] = outbox
        if self.front is not None:
            self._served_ports[peer] = front_port

    def served_ended(self, peer: int, outbox: Outbox) -> None:
        """A call ``peer`` made ended (a newer one of the peer may be up meanwhile)."""
        if self._served.get(peer) is outbox:
            del self._served[peer]
            self._served_ports.pop(peer, None)

    def refused_by(self, peer: int, reason: str) -> None:
        """``peer`` refused this region's Hello: counted, logged, and the region told."""
        self.denied += 1
        log.error("region %d refused this region: %s", peer, reason)
        self.on_denied()

    def sent_frame(self) -> None:
        """The transport wrote a frame to a peer."""
        self.frames_sent += 1

    def count_relayed(self, count: int) -> None:
        """A link sent ``count`` operations of third regions to its peer (see crdt.sync.RelayHold.due)."""
        self.relayed += count

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
