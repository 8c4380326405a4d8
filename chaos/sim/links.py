"""The simulated network and the replication links over it (mixed into world.Simulation).

:class:`Network` holds the connections between regions, the cuts (partitions) and clogs,
and the frames in flight; :class:`Links` is the part of :class:`~chaos.sim.world.Simulation`
that dials, handshakes, pumps frames through the real link's pure rules
(``crdt.sync``: ``LinkState``, ``RelayHold``, ``plan_frames``), delivers them with the
network's seeded faults, and installs or joins full-resync images.  Its methods use the
simulation's state (``self.regions``, ``self.net``, ``self.sched``...), which
world.py's ``Simulation.__init__`` sets up; world.py's docstring tells the network model.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from crdt.causal import Envelope
from crdt.linkerrors import MembershipBehind
from crdt.membership import LIVE, REMOVED
from crdt.sync import LinkState, NeedsResync, RelayHold, opening, plan_frames

from .disk import MachineDown
from .region import SimRegion
from .scheduler import _dots, _vv

IMAGE_CRASH_CHANCE = 0.5  # per installed image (image-crash fault): its snapshot is interrupted


class _NoWake:
    """A simulated link needs no waking: the world pumps a region's links at every end of its turn."""

    def set(self) -> None:
        pass


class SimLink:
    """What a region's hub sees of a simulated link while it is up (``hub.links[peer]``, where
    the real ``Link`` puts itself while it runs): WAIT counts only the peers whose link is up
    (``ActiveActive.regions_holding``), and the hub asks a link whose last ack said less than
    the region applied to ack again once the records are written (``ReplicationHub.logged_upto``
    resets ``ack_short`` and calls :meth:`acknowledge`)."""

    superseded = False  # (set by the hub's handshake on an older link; the world closed it already)

    def __init__(self, links: Links, region: SimRegion, peer: int, state: LinkState) -> None:
        self.links, self.region, self.peer, self.state = links, region, peer, state
        self.ack_short = False  # the hub's flag (see above)
        self.peer_wants_ack = 0  # (the hub reads it; simulated acks are never paced, so never set)
        self.said_less = False  # the last ack this end sent said less than the region applied
        self.wakeup = _NoWake()

    @property
    def position(self) -> int:
        return self.state.position

    def acknowledge(self, received: int = 0, pace: object = None) -> None:
        """The hub asks for an ack: the records were written, or an fsync ended.  One goes only
        while the last one said less than the region applied: the peer learns of this region's
        own operations from the batches.  Every ack carries what is on this region's disk
        (``Ack.synced``, which WAITAOF counts), but an fsync alone sends none (the real link
        sends one then): the peer learns of it with the next, so WAITAOF's count rises here
        later than over a real link, never sooner (and the schedules stay what they were)."""
        if self.said_less:
            self.links.ack(self.region, self.peer)

    def want_ack(self, n: int) -> None:
        """A client waits in WAIT: the real link asks its peer to ack without lazy pacing; a
        simulated peer acks every batch at once already."""


@dataclass
class NetworkFaults:
    drop: float = 0.0      # a frame lost: the connection breaks
    dup: float = 0.0       # a frame arrives twice
    reorder: float = 0.0   # a frame may overtake or be overtaken


@dataclass
class Network:
    """Connections between regions, cuts (partitions) and clogs, and frames in flight."""

    faults: NetworkFaults = field(default_factory=NetworkFaults)
    cuts: dict[frozenset, int] = field(default_factory=dict)      # pair -> how many partitions cut it
    clogged_until: dict[tuple[int, int], int] = field(default_factory=dict)  # direction -> time
    conn: dict[frozenset, int] = field(default_factory=dict)      # pair -> current connection id
    last_arrival: dict[tuple[int, int], int] = field(default_factory=dict)  # FIFO per direction
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def is_cut(self, a: int, b: int) -> bool:
        return self.cuts.get(frozenset((a, b)), 0) > 0


class Links:
    """The links between the simulation's regions (a part of :class:`~chaos.sim.world.Simulation`)."""

    def connect(self, a: int, b: int) -> None:
        """The dialer (``a``, the lower number) reaches ``b``: both ends pass the other through their
        membership gate, then start a link from Hello/Welcome."""
        ra, rb = self.regions[a], self.regions[b]
        pair = frozenset((a, b))
        if not (ra.up and rb.up) or self.net.is_cut(a, b) or pair in self.net.conn:
            return
        mine = ra.aa.membership  # a region dials the live members of its own list, while a member itself
        if mine.status(a) in (None, REMOVED) or mine.status(b) not in LIVE:
            return
        if ra.aa.hub.is_cut(b) or rb.aa.hub.is_cut(a):  # paused: a voter of the other's forced removal
            return
        if not self.handshake(ra, rb):
            return
        conn = next(self.net.ids)
        self.net.conn[pair] = conn
        self.net.last_arrival.pop((a, b), None)
        self.net.last_arrival.pop((b, a), None)
        # what each end sends first, decided as the real link decides it (crdt/sync.py): an image
        # where the peer lacks what this end dropped; when both dropped what the other lacks, each
        # sends its own and joins the other's (crdt/join.py)
        held = {r.number: (dict(r.causal.vv), dict(r.causal.floor)) for r in (ra, rb)}
        first = {a: opening(*held[a], *held[b], True), b: opening(*held[b], *held[a], True)}
        merging = first[a].merging
        hub_a, hub_b = ra.core.aa.hub, rb.core.aa.hub
        ra.links[b] = LinkState(ra.causal, dict(rb.causal.vv), hub_a.peer_acked.setdefault(b, {}),
                                hub_a.peer_reported.setdefault(b, {}))
        rb.links[a] = LinkState(rb.causal, dict(ra.causal.vv), hub_b.peer_acked.setdefault(a, {}),
                                hub_b.peer_reported.setdefault(a, {}))
        # each end records what the other held, and forgets the other's own waiting operations
        # and those that depend on what the other lost
        for hub, peer, region in ((hub_a, b, rb), (hub_b, a, ra)):
            hub.links_to_restart = set()
            forgotten = hub.handshook(peer, dict(region.causal.vv))
            if forgotten:
                self.sched.log(f"link {a}-{b}: r{hub.region} forgot {forgotten} waiting operations of r{peer} "
                                   f"or depending on what r{peer} lost")
            # the links that brought a third region's forgotten operations handshake again, so
            # their senders send those again (as ReplicationHub.restart_link ends a real one)
            for other in sorted(hub.links_to_restart):
                self.disconnect(hub.region, other, f"r{hub.region} forgot operations this link brought: "
                                                   "it handshakes again")
        hub_a.links[b] = SimLink(self, ra, b, ra.links[b])
        hub_b.links[a] = SimLink(self, rb, a, rb.links[a])
        # what each end's acks say its OS holds, and its disk, starts again (Link.__init__: the
        # peer may have been restored), from the ack each sends as its link starts (taken with
        # the handshake, which the world makes at once)
        for hub, peer, region in ((hub_a, b, rb), (hub_b, a, ra)):
            hub.peer_said[peer], hub.peer_synced[peer] = {}, {}
            hub.ack_said(peer, dict(self.acknowledged(region)))
            hub.ack_said(peer, dict(region.aa.hub.synced_vv), on_disk=True)
        self.sched.log(f"link {a}-{b} up (connection {conn}): hello vv {_vv(ra.causal.vv)}, "
                       f"welcome vv {_vv(rb.causal.vv)}" + (f"; both dropped operations the other lacks (floors "
                                                            f"{_vv(ra.causal.floor)} / {_vv(rb.causal.floor)}): "
                                                            "merging" if merging else ""))
        for x, y in ((ra, b), (rb, a)):
            # (sending the first image may have lost a frame: the connection broke)
            if y in x.links and first[x.number].sends_image:
                try:
                    self.send_image(x, y, "join" if merging else "image")
                except ConnectionAbortedError as e:  # it takes writes alone: the link ends, as the real one
                    self.disconnect(x.number, y, str(e))
                    return
        self.pump(ra)
        self.pump(rb)

    def handshake(self, ra: SimRegion, rb: SimRegion) -> bool:
        """The membership half of a handshake: ``rb`` checks ``ra``'s Hello (its epoch and list), then
        ``ra`` checks ``rb``'s Welcome (``MembershipGate.check_peer``, which adopts a newer list
        first).  A refused region is handed the refusing side's list (the real one learns it at
        start); a region that adopted a list restarts its links, this one included."""
        a, b = ra.number, rb.number
        epochs = {a: ra.aa.membership.epoch, b: rb.aa.membership.epoch}
        for checker, peer in ((rb, ra), (ra, rb)):
            gate = checker.aa.hub.gate
            reason = gate.check_peer(peer.number, *peer.aa.hub.gate.hello())
            if reason:
                gate.refused()
                self.sched.log(f"link {a}-{b} refused by r{checker.number}: {reason}")
                self.membership.hand_list(checker, peer, f"refused by r{checker.number}")
                if checker.aa.membership.epoch != epochs[checker.number]:
                    self.relink(checker.number, f"r{checker.number} adopted membership epoch "
                                                f"{checker.aa.membership.epoch}")
                return False
        moved = [r for r in (ra, rb) if r.aa.membership.epoch != epochs[r.number]]
        for r in moved:
            self.sched.log(f"r{r.number} adopted membership epoch {r.aa.membership.epoch} at a handshake "
                           f"(it was at epoch {epochs[r.number]}): it is {r.aa.membership.status(r.number)}")
            self.relink(r.number, f"r{r.number} adopted membership epoch {r.aa.membership.epoch}")
        return not moved

    def relink(self, number: int, why: str) -> None:
        """After ``number`` committed or adopted a change: its links handshake again at the new
        epoch (each one is closed; the dialer redials), and it dials the members it did not reach."""
        for pair in [p for p in self.net.conn if number in p]:
            (peer,) = pair - {number}
            self.disconnect(number, peer, why)
        for peer in sorted(self.regions):
            if peer != number and frozenset((number, peer)) not in self.net.conn:
                self.sched.after(self.rng.randint(20, 300), self.connect, min(number, peer), max(number, peer))

    def send_image(self, region: SimRegion, peer: int, kind: str = "image") -> None:
        """Full resync, or (``kind`` "join") the region's half of a state join: its whole state,
        first on the link (``Link.send_image``).  With it goes the sender's history, for the
        checkers (a joining receiver then holds the union of both)."""
        data, vv = region.core.resync_image()
        region.links[peer].image_sent(vv, region.causal.end)
        what = "state to join" if kind == "join" else "full-resync image"
        self.sched.log(f"r{region.number} -> r{peer} {what} ({len(data)} bytes, vv {_vv(vv)})")
        history = self.history(region) if kind == "join" else list(self.trimmed[region.number])
        self.send(region.number, peer, (kind, (data, history)))

    def disconnect(self, a: int, b: int, why: str) -> None:
        pair = frozenset((a, b))
        if self.net.conn.pop(pair, None) is None:
            return
        for x, y in ((a, b), (b, a)):
            region = self.regions[x]
            region.links.pop(y, None)
            if region.up:
                region.aa.hub.links.pop(y, None)
            self.relay_holds.pop((x, y), None)
        self.sched.log(f"link {min(a, b)}-{max(a, b)} down: {why}")
        self.sched.after(self.rng.randint(20, 300), self.connect, min(a, b), max(a, b))

    def pump(self, region: SimRegion) -> None:
        """Send each link of ``region`` what it decides to send (only durable operations leave)."""
        if not region.up:
            return
        for peer in list(region.links):
            self.pump_link(region, peer)

    def pump_link(self, region: SimRegion, peer: int) -> None:
        """One look of ``region``'s link to ``peer``, as the real ``Link.send_loop`` takes at each
        wake-up: what the link state decides to send, through the link's relay hold, in frames
        planned by bytes."""
        hub, link = region.core.aa.hub, region.links[peer]
        try:
            envelopes = link.outgoing(hub.sendable_upto())
        except NeedsResync:  # trimming overtook the link: the next handshake resyncs
            self.disconnect(region.number, peer, f"r{peer} needs operations r{region.number} trimmed")
            return
        hold = self.relay_hold(region.number, peer)
        wake = hold.wake_at
        relays, direct = hold.outgoing(envelopes, link.acked, self.sched.now / 1000, hub.pacing().relay_delay)
        hub.count_relayed(len(relays))
        if hold.wake_at != wake and hold.wake_at != math.inf:
            # the real link's timer: at least a millisecond on (a wake-up is asked for a time after
            # now, which the rounding of seconds to milliseconds must not turn into a loop at now)
            conn = self.net.conn[frozenset((region.number, peer))]
            delay = max(1, math.ceil(hold.wake_at * 1000) - self.sched.now)
            self.sched.after(delay, self.relay_wake, region.number, peer, conn, hold.wake_at)
        # every simulated region runs the same settings: the peer's message limit is this one's.
        # An operation larger than the budget goes as one frame all the same: the real link
        # sends it in parts (crdt.sync.PartsAssembler joins them), which the world does not model
        limits = hub.limits
        for _in_parts, batch in plan_frames(relays + direct, limits.budget(limits.max_message)):
            self.send(region.number, peer, ("batch", batch))

    def relay_hold(self, number: int, peer: int) -> RelayHold:
        """The relay hold of ``number``'s link to ``peer`` on the current connection, one per
        direction as the real ``Link`` keeps one: made at the link's first look (its handshake's
        pump), dropped when the connection closes."""
        conn = self.net.conn[frozenset((number, peer))]
        kept = self.relay_holds.get((number, peer))
        if kept is None or kept[0] != conn:
            kept = self.relay_holds[(number, peer)] = (conn, RelayHold(number, peer, self.sched.now / 1000))
        return kept[1]

    def relay_wake(self, number: int, peer: int, conn: int, at: float) -> None:
        """The relay hold of ``number``'s link to ``peer`` asked for a look at ``at`` (the real
        link's timer fires): nothing if that connection closed since (a crash or a restart of
        either region closes it: it stands for the incarnation the cron checks), or if the hold
        asked for another time since (the real link re-armed its timer)."""
        region = self.regions[number]
        kept = self.relay_holds.get((number, peer))
        if (kept is None or kept[0] != conn or kept[1].wake_at != at or not region.up or peer not in region.links
                or self.net.conn.get(frozenset((number, peer))) != conn):
            return
        kept[1].woken()
        self.pump_link(region, peer)

    def ack(self, region: SimRegion, peer: int) -> None:
        """``region`` acks to ``peer`` what the real link's ack says (``Link._ack_frame``): what its
        causal log holds up to where its operation log handed the records to the OS
        (``ReplicationHub.acknowledgement``), so a peer counting it for WAIT counts what
        survives a SIGKILL here.  One that says less is followed by another once they are written."""
        link = region.aa.hub.links.get(peer)
        if not isinstance(link, SimLink):
            return
        vv = self.acknowledged(region)
        link.ack_short = link.said_less = vv is not region.causal.vv
        self.send(region.number, peer, ("ack", dict(vv), dict(region.aa.hub.synced_vv)))

    def acknowledged(self, region: SimRegion) -> dict[int, int]:
        """What an ack of ``region`` says now (the caller copies what it keeps)."""
        if not self.config.leave_when_written:
            # the earlier rule (--leave-when-on-disk: operations leave once fsynced), whose schedules
            # some scenario tests pin: its acks said every operation applied - which, at the end of
            # the turn, the operation log has handed to the OS too (its sendable mark is the fsynced one)
            return region.causal.vv
        return region.aa.hub.acknowledgement()[0]

    def send(self, a: int, b: int, frame: tuple) -> None:
        net, rng = self.net, self.rng
        conn = net.conn.get(frozenset((a, b)))
        if conn is None:
            return
        if rng.random() < net.faults.drop:
            self.disconnect(a, b, f"a frame {a}->{b} was lost")
            return
        now = self.sched.now
        when = now + rng.randint(1, 20)
        clog = net.clogged_until.get((a, b), 0)
        if clog > now:
            when = max(when, clog + rng.randint(0, 5))
        if rng.random() < net.faults.reorder:
            when += rng.randint(0, 40)  # may overtake or be overtaken
        else:
            when = max(when, net.last_arrival.get((a, b), 0))
            net.last_arrival[(a, b)] = when
        self.sched.at(when, self.arrive, a, b, conn, frame)
        if rng.random() < net.faults.dup:
            self.sched.at(when + rng.randint(0, 40), self.arrive, a, b, conn, frame)

    def arrive(self, a: int, b: int, conn: int, frame: tuple) -> None:
        if self.net.conn.get(frozenset((a, b))) != conn:
            return  # the connection it travelled on is closed
        region = self.regions[b]
        link = region.links[a]
        kind, body = frame[0], frame[1]
        if kind == "ack":
            self.relay_hold(b, a).on_ack(link.acked, body, self.sched.now / 1000)  # before acked rises
            raised = link.on_ack(body)
            said = region.aa.hub.ack_said(a, body)
            synced = region.aa.hub.ack_said(a, frame[2], on_disk=True)
            if said or synced or raised:  # as Link.on_ack
                self.waits.progressed(region)  # a client in WAIT or WAITAOF there may have its count
            return
        if kind == "image":
            self.install_image(region, a, *body)
            return
        if kind == "join":
            self.join_image(region, a, *body)
            return
        hub = region.core.aa.hub
        before = dict(region.causal.vv)
        behind = None
        try:
            hub.deliver_batch(link.on_batch(body))
        except MembershipBehind as e:  # of a region this list does not know: handshake again
            behind = e
        except Exception:
            if region.core.failed is None:
                raise
        if region.core.failed is not None:
            self.fail_stopped(region)  # an operation it could not apply: nothing acknowledged
            return
        applied = {o: n for o, n in region.causal.vv.items() if n > before.get(o, 0)}
        self.sched.log(f"r{b} <- r{a} batch {_dots(body)}; applied {_vv(applied) or 'nothing new'}")
        if behind is not None:
            self.disconnect(a, b, f"r{b} restarts the link: {behind}")
            region.end_turn()
            return
        fsync_wanted = region.core.end_turn()  # the batch's records to the OS: what the acks may say
        self.ack(region, a)
        if applied:  # as the real link (Link.deliver): every other peer learns it need not relay these
            for peer in sorted(region.links):
                if peer != a:
                    self.ack(region, peer)
        region.after_writing(fsync_wanted)

    def install_image(self, region: SimRegion, sender: int, data: bytes, trimmed: list[Envelope]) -> None:
        interrupted = None
        if self.active and "image-crash" in self.config.faults and self.rng.random() < IMAGE_CRASH_CHANCE:
            interrupted = self.rng.choice(("machine down", "disk full"))
            region.file.crash_in_snapshot = interrupted == "machine down"
            region.file.snapshot_fails = region.file.snapshot_fails or interrupted == "disk full"
        # what its folder holds once the image is taken: its history so far (an image held before
        # is written first, or this one is refused: RegionCore.install_image rolls the log)
        on_disk = self.trimmed[region.number]
        try:
            installed = region.core.install_image(data)
        except MachineDown:
            self.crash(region, f"IMAGE-CRASH r{region.number}: the machine went down while the snapshot of "
                               f"r{sender}'s image was being written (none on disk)")
            return
        finally:
            region.file.crash_in_snapshot = False
        if not installed:  # nothing missing any more: start again
            if interrupted == "disk full":
                region.file.snapshot_fails = False
            self.disconnect(region.number, sender, f"r{region.number} refused r{sender}'s image")
            return
        self.resyncs += 1
        if region.core.oplog.unsaved_image is not None:
            self.trimmed_before_image[region.number] = on_disk
        else:
            self.trimmed_before_image.pop(region.number, None)
        self.trimmed[region.number] = trimmed  # the image holds what its sender had trimmed
        # the image's own vector, as the real link: not this region's after its own went on top
        region.links[sender].image_installed(dict(region.core.aa.hub.image_vv))
        for link in region.links.values():
            link.log_replaced()
        self.sched.log(f"r{region.number} installed r{sender}'s image: vv {_vv(region.causal.vv)}")
        if region.core.oplog.unsaved_image is None:
            taken = region.file.snapshot
            self.sched.log(f"r{region.number} snapshot at record {taken[0] if taken else None}: the image is the "
                           "base of its file")
        else:
            self.sched.log(f"IMAGE-CRASH r{region.number}: the snapshot of r{sender}'s image cannot be written (disk "
                           "full): later records wait in memory, writes are refused")
            self.sched.after(self.rng.randint(1, 800), self._image_crash, region.number, region.incarnation)
            self.sched.after(self.rng.randint(100, 3000), self._disk_freed, region.number)
        fsync_wanted = region.core.end_turn()
        self.ack(region, sender)
        region.after_writing(fsync_wanted)

    def join_image(self, region: SimRegion, sender: int, data: bytes, history: list[Envelope]) -> None:
        """``region`` joins ``sender``'s state into its own (``RegionCore.join_image``; saving its
        snapshot goes as for an installed image, but no crash is injected there)."""
        number = region.number
        if not region.core.join_image(data):  # it takes writes alone now: the link starts again
            self.disconnect(number, sender, f"r{number} could not join r{sender}'s state now")
            return
        self.joins += 1
        # the checkers' view of its history: what it held (in the order it applied it), then
        # what the joined state brought (in the sender's order: causal, and none of it depends
        # on an operation only this region held), then its log from here on
        mine = self.history(region)
        held = {e.dot for e in mine}
        if region.core.oplog.unsaved_image is not None:  # its folder holds what it had before (image_lost)
            self.trimmed_before_image[number] = self.trimmed[number]
        else:
            self.trimmed_before_image.pop(number, None)
        self.trimmed[number] = mine + [e for e in history if e.dot not in held]
        region.links[sender].image_installed(dict(region.core.aa.hub.image_vv))
        for link in region.links.values():  # the floor rose: a peer may lack what it now covers
            link.floor_raised()
        self.sched.log(f"r{number} joined r{sender}'s state: vv {_vv(region.causal.vv)}, floor "
                       f"{_vv(region.causal.floor)}")
        if region.core.oplog.unsaved_image is not None:
            self.sched.log(f"r{number}: the snapshot of the joined state cannot be written (disk full): later "
                           "records wait in memory, writes are refused")
            self.sched.after(self.rng.randint(100, 3000), self._disk_freed, number)
        fsync_wanted = region.core.end_turn()
        self.ack(region, sender)
        self.pump(region)
        region.after_writing(fsync_wanted)
