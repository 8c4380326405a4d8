"""A region's part in changing the member list: learning newer lists, answering and settling
promises, committing or adopting a change, following it with the links, activating a joining
region, and the gate the replication hub asks at handshakes and per operation.

:class:`MembershipChanges` is a part :class:`node.activeactive.region.ActiveActive` holds
(``aa.changes``): it is given the member list, the cluster file, the causal log and the hub,
and keeps the rest of what membership needs (the promise store, the admin service's clients,
the tasks that learn, settle and activate).  :class:`MembershipGate` is the hub's ``gate``,
built before the hub with the member list, the cluster file, the counts it keeps
(:class:`MembershipCounts`) and how to adopt a newer list.

Theory of operation
-------------------
Membership (crdt/membership.py holds the rules).  The region keeps the agreed member
list (``membership``) and records every change in its cluster file.  It is the
replication hub's gate (:class:`MembershipGate`): the handshake carries the epoch and
the list; a peer with a newer list is believed (every epoch was agreed by every
live member) and its list adopted; a peer that is not a member at this region's
epoch, or was removed, is refused (logged, counted as ``membership_refused``); an
operation of a removed region past its frozen point is dropped - as it arrives, and
when it was already waiting in the causal log for its dependencies (at a promise, a
change, an installed image): applied later, it would bypass the gate - and one from
a region this list does not know restarts the link (the handshake brings the newer list).
A change - agreed here, or adopted - restarts every link, so both ends of each
handshake again at the new epoch.  Writes are taken only while this region is
``active``; a ``joining`` region, once it holds everything its peers held when it
connected (``caught_up``), has itself activated (``node/activeactive/coordinator.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from crdt.causal import CausalLog, Envelope
from crdt.membership import (
    ABORT,
    ACTIVATE,
    ACTIVE,
    ADOPT,
    COMMIT,
    FORCE_REMOVE,
    JOIN,
    JOINING,
    LEAVING,
    LIVE,
    REMOVE,
    REMOVED,
    WAIT,
    Change,
    Member,
    Membership,
    MembershipError,
    Promise,
    Proposal,
    Settlement,
    Standing,
)
from node.activeactive.cluster_config import ClusterConfig, RegionSpec, membership_from_blob
from node.activeactive.coordinator import (
    Connect,
    MembershipChangeError,
    agree_with_regions,
    commit_to_regions,
    member_lists,
    standings_from_regions,
)
from node.activeactive.hub import ReplicationHub
from node.persistence.promise import proposal_from_dict, proposal_to_dict

log = logging.getLogger("braid.activeactive")

# a promise whose coordinator neither commits nor aborts it lapses after this long, and its
# voters settle it among themselves (ActiveActive.left_promise)
PROMISE_TIMEOUT_S = 30.0
# a voter settling such a promise asks the other voters again this often until it ends
SETTLE_EVERY_S = 5.0
# a region with no link up asks its peers for their member lists this often
LEARN_EVERY_S = 5.0


class PromiseStore(Protocol):
    """Where the promise is kept across restarts (node/persistence/promise.py's FilePromiseStore)."""

    def save(self, state: dict | None) -> None: ...
    def load(self) -> dict | None: ...


@dataclass
class MembershipCounts:
    """What the gate and the changes count (INFO crdt, the status)."""

    refused: int = 0  # handshakes refused: the peer is not a member (or was removed)
    dropped: int = 0  # operations of removed regions past their frozen point, dropped


def _no_admin_clients(cfg, numbers, tls, timeout) -> dict:
    return {}  # not started: no way to reach another region's admin service


def _nothing() -> None:
    pass


class MembershipChanges:
    """The membership part of :class:`node.activeactive.region.ActiveActive` (see the module's
    theory): it changes ``membership`` (the member list, crdt/membership.py) and the cluster
    file, and follows every change with the hub's links."""

    def __init__(self, me: RegionSpec, cluster: ClusterConfig, membership: Membership, causal: CausalLog,
                 hub: ReplicationHub, counts: MembershipCounts,
                 state_on_disk: Callable[[], bool] = lambda: True) -> None:
        """``state_on_disk``: whether what the region holds is all on disk (not while a
        full-resync image waits for its snapshot): a removal's promise says what it holds."""
        self.me = me
        self.state_on_disk = state_on_disk
        self.region = me.number
        self.cluster = cluster
        self.membership = membership
        self.causal = causal
        self.hub = hub
        self.counts = counts
        self.active = membership.status(me.number) == ACTIVE  # kept with the list (writable)
        # the clock promises are timed by (monotonic seconds; the simulation sets its virtual one)
        self.clock: Callable[[], float] = time.monotonic
        self.activation: asyncio.Task | None = None  # has a joining region activated (_watch_join)
        self.learning: asyncio.Task | None = None    # learns newer member lists (start)
        self.settling: asyncio.Task | None = None    # settles promises their coordinators left (start)
        self._promised_at = 0.0  # when the promise held now was made (clock seconds)
        self.promise_store: PromiseStore | None = None  # the server's data dir (attach_promise_store)
        self._held_links: set[int] = set()  # links cut while a forced removal of that peer is held
        self._learn_soon = True   # ask the peers for their member lists (at start, after a refusal)
        self._settle_soon = False  # a coordinator's abort came for a promise reported to a settling voter
        self.on_purge: Callable[[], None] = _nothing  # the server wipes its files and stops
        # what opens clients of other regions' admin service (node.transport.admin.clients), and
        # what this region presents to them; until start() no region is reachable that way
        self.admin_connect: Connect = _no_admin_clients
        self.admin_tls: tuple[bytes, bytes, bytes] | None = None

    # ------------------------------------------------------------ what the region sets
    def time_by(self, clock: Callable[[], float]) -> None:
        """Time promises by ``clock`` (the simulation's virtual one)."""
        self.clock = clock

    def when_purged(self, on_purge: Callable[[], None]) -> None:
        """``on_purge``: what wipes this region's data once it is purged (the server's)."""
        self.on_purge = on_purge

    def reach_admin(self, connect: Connect | None = None, tls: tuple[bytes, bytes, bytes] | None = None) -> None:
        """How this region reaches other regions' admin service (learning, activating,
        settling): ``connect`` opens clients, ``tls`` is what it presents (each kept if None)."""
        if connect is not None:
            self.admin_connect = connect
        if tls is not None:
            self.admin_tls = tls

    def start(self) -> None:
        """Serving: dial the peers, have a joining region activated, learn and settle."""
        self.dial_peers()
        self._watch_join()
        loop = asyncio.get_running_loop()
        self.learning = loop.create_task(self._keep_learning())
        self.settling = loop.create_task(self._keep_settling())

    def stop(self) -> None:
        for task in (self.activation, self.learning, self.settling):
            if task is not None:
                task.cancel()

    def learn_soon(self) -> None:
        """A peer refused this region's handshake: perhaps it was removed meanwhile; ask."""
        self._learn_soon = True

    # ------------------------------------------------------------ the members
    def peers(self) -> list[RegionSpec]:
        """The other live members (active, joining, leaving)."""
        return [r for r in self.cluster.regions if r.number != self.region and
                self.membership.status(r.number) in LIVE]

    def dial_peers(self) -> None:
        """Dial every live member with a higher number (the lower number dials); a removed
        region dials nobody, nor does a region driven without an event loop (the simulations
        deliver operations themselves: a dial task there would never run)."""
        if self.membership.status(self.region) in (None, REMOVED):
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        for peer in self.peers():
            if peer.number > self.me.number:
                self.hub.dial(peer.number, f"{peer.host}:{peer.repl_port}")

    # ------------------------------------------------------------ learning newer lists
    async def _keep_learning(self) -> None:
        """Ask the peers for their member lists at start, after a peer refused this region, and
        every LEARN_EVERY_S while no link is up: a region removed while it was down or cut off
        learns it even from peers that never dial it (and then stops taking writes)."""
        last = -LEARN_EVERY_S
        while not self.hub.retired:
            now = time.monotonic()
            if self._learn_soon or (not self.hub.links and now - last >= LEARN_EVERY_S):
                self._learn_soon = False
                last = now
                await self._learn_membership()
            await asyncio.sleep(0.2)  # how often the conditions above are looked at

    async def _learn_membership(self) -> None:
        """Ask every peer's admin service for its member list and adopt a newer one."""
        try:
            lists = await asyncio.to_thread(member_lists, self.admin_connect, self.cluster,
                                            [p.number for p in self.peers()], self.admin_tls)
        except Exception as e:  # a peer's odd answer must not stop the region
            log.warning("could not ask the peers for their member lists: %s", e)
            return
        for blob in sorted(lists, key=lambda b: -json.loads(b)["epoch"])[:1]:
            try:
                self.adopt(blob)
            except ValueError as e:
                log.warning("a peer's member list was refused: %s", e)

    # ------------------------------------------------------------ catching up and promises
    def caught_up(self) -> bool:
        """A joining region holds everything each live peer held when they first handshook."""
        held, target = self.catch_up_progress()
        waiting = [p.number for p in self.peers() if self.membership.status(p.number) in (ACTIVE, LEAVING)]
        if any(p not in self.hub.handshake_vv for p in waiting):
            return False
        return held >= target

    def catch_up_progress(self) -> tuple[int, int]:
        """(operations held, operations to hold) of what the peers held at their handshakes."""
        target: dict[int, int] = {}
        for vv in self.hub.handshake_vv.values():
            for o, n in vv.items():
                if o != self.region and n > target.get(o, 0):
                    target[o] = n
        vv = self.causal.vv
        return sum(min(vv.get(o, 0), n) for o, n in target.items()), sum(target.values())

    def promise(self, p: Proposal, now: float | None = None) -> Promise:
        """A voter's answer to a proposed change (crdt/membership.py); a removal also says
        how far this region holds the removed region's operations.  A promise left behind by
        a coordinator that never came back lapses after PROMISE_TIMEOUT_S when another
        proposal comes (safe: a commit needs the promise it commits), and is settled with
        the other voters meanwhile (:meth:`left_promise`)."""
        now = self.clock() if now is None else now
        held_promise = self.membership.promised
        if held_promise is not None and held_promise != p and now - self._promised_at > PROMISE_TIMEOUT_S:
            log.warning("the promise for epoch %d (%s of region %d) lapsed: its coordinator never committed "
                        "nor aborted it (a forced removal's hold on that region's operations stays until its "
                        "voters settle it or an epoch does)", held_promise.epoch, held_promise.change.kind,
                        held_promise.change.number)
            self.membership.lapse(held_promise)  # a forced removal's hold stays (crdt/membership.py)
        held = self.causal.vv.get(p.change.number, 0)
        if p.change.kind in (REMOVE, FORCE_REMOVE) and held_promise != p and not self.state_on_disk():
            # what it holds of the removed region came in an image whose snapshot is not on disk:
            # a restart would start from the older log, and a removal frozen on this promise could
            # lose those operations for good (the removed region no longer sends them)
            return Promise(False, f"this region holds a full-resync image whose snapshot is not on disk yet "
                                  f"(the disk is full?): it cannot promise what it holds of region "
                                  f"{p.change.number} until it is")
        if p.change.kind == JOIN and held_promise != p:
            joining = Membership(self.membership.stride, p.epoch,
                                 {p.change.number: Member(p.change.number, p.change.name, JOINING)}, {})
            unrecordable = self.cluster.without_shard_ports(joining, {p.change.number: p.change.endpoint})
            if unrecordable:  # (a coordinator that does not know this database is sharded)
                return Promise(False, unrecordable)
        answer = self.membership.promise(p, held)
        if answer.ok and held_promise != p:
            self._promised_at = now
        self._store_promise()  # on disk before the answer leaves (a lapse, a promise)
        if answer.ok and p.change.kind == FORCE_REMOVE:
            self._hold_link(p.change.number)
            self.drop_refused_pending()
        return answer

    def _hold_link(self, number: int) -> None:
        """Cut the link to a region being force-removed: take nothing more of it (the gate also
        drops its operations relayed by others past the hold)."""
        self._held_links.add(number)
        self.hub.pause(number)

    def _release_links(self) -> None:
        """Links cut for holds no longer in force come back (the removal was aborted, or another
        change made the epoch)."""
        for number in list(self._held_links):
            if number not in self.membership.holding:
                self._held_links.discard(number)
                if self.membership.status(number) in LIVE:
                    self.hub.resume(number)

    def abort(self, p: Proposal, settled: bool = False) -> None:
        """Give ``p`` up: its coordinator aborted it, or (``settled``) this region's settlement
        did.  A promise this region reported to a settling voter is not given up on its
        coordinator's word: it is settled with the voters at once instead."""
        ended = self.membership.abort(p, settled)
        self._store_promise()
        self._release_links()
        if not ended:
            log.warning("the abort of the %s of region %d (epoch %d) came after this region told a voter "
                        "settling it that it holds its promise: it settles it with the voters instead",
                        p.change.kind, p.change.number, p.epoch)
            self._settle_soon = True

    # ------------------------------------------------------------ settling a promise its coordinator left
    def left_promise(self, now: float | None = None) -> Proposal | None:
        """The proposal to settle with the other voters now, if any: the promise held, once its
        coordinator had PROMISE_TIMEOUT_S to commit or abort it (from the promise, or from this
        region's start), or at once after a coordinator's abort this region could not take;
        backing none, a promise that lapsed here (its hold stays until it is settled)."""
        m = self.membership
        p = m.left_promise()
        if p is None:
            return None
        now = self.clock() if now is None else now
        if p == m.promised and not self._settle_soon and now - self._promised_at <= PROMISE_TIMEOUT_S:
            return None
        return p

    def standing(self, p: Proposal) -> Standing:
        """Where this region stands on ``p``, asked by a voter settling it (itself included);
        what the answer binds it to (crdt/membership.py) is on disk before the answer leaves."""
        m = self.membership
        if m.promised is not None and m.promised.change.kind == REMOVE and not m.answered:
            # kept by a version that did not keep ``answered``: a graceful removal's voter answers
            # every operation of the leaver it holds, and a leaver takes no writes
            m.answered = self.causal.vv.get(m.promised.change.number, 0)
        before = self._promise_state()
        answer = m.standing(p)
        if self._promise_state() != before:
            self._store_promise()
        return answer

    def settle(self, p: Proposal, standings: dict[int, Standing]) -> Settlement:
        """Decide ``p`` from where its voters stand (``standings``: voter -> its answer, this
        region's own among them) and apply the outcome here: commit it, abort it, or ask the
        peers for the newer list a voter holds.  The caller sends a commit on to the other
        voters."""
        m = self.membership
        if m.promised != p:
            return Settlement(WAIT, reason="this region no longer holds its promise")
        settlement = m.settle(p, standings)
        what = f"the {p.change.kind} of region {p.change.number} for epoch {p.epoch}"
        if settlement.outcome == COMMIT:
            log.warning("settled %s with its voters: every one holds its promise, so it is committed%s", what,
                        f" (frozen at {settlement.frozen})" if p.change.kind in (REMOVE, FORCE_REMOVE) else "")
            self.commit(p, settlement.frozen)
        elif settlement.outcome == ABORT:
            log.warning("settled %s with its voters: aborted (%s)", what, settlement.reason)
            self.abort(p, settled=True)
        elif settlement.outcome == ADOPT:
            log.warning("settling %s: %s; this region takes the newer list", what, settlement.reason)
            self._learn_soon = True  # the learning task asks the peers for their lists
        else:
            log.info("cannot settle %s yet: %s", what, settlement.reason)
        if settlement.outcome != WAIT:
            self._settle_soon = False
        return settlement

    async def _keep_settling(self) -> None:
        """Settle a promise its coordinator left (:meth:`left_promise`) with the other voters,
        asking again every SETTLE_EVERY_S until it ends."""
        while not self.hub.retired:
            p = self.left_promise()
            if p is None:
                await asyncio.sleep(0.5)  # how often a promise is looked at
                continue
            try:
                await self._settle_with_voters(p)
            except Exception as e:  # a peer's odd answer must not stop the region
                log.warning("could not settle the membership promise for epoch %d: %s", p.epoch, e)
            await asyncio.sleep(SETTLE_EVERY_S)

    async def _settle_with_voters(self, p: Proposal) -> None:
        others = [n for n in self.membership.voters(p.change) if n != self.region]
        mine = self.standing(p)
        theirs = await asyncio.to_thread(standings_from_regions, self.admin_connect, self.cluster, p, others,
                                         self.admin_tls)
        settlement = self.settle(p, {**theirs, self.region: mine})
        if settlement.outcome == COMMIT:
            unreached = await asyncio.to_thread(commit_to_regions, self.admin_connect, self.cluster, p,
                                                settlement.frozen, others, self.admin_tls)
            if unreached:
                log.info("the settled commit of epoch %d did not reach %s: each settles it itself or takes the "
                         "list at its next handshake", p.epoch, "; ".join(unreached))

    # ------------------------------------------------------------ the promise on disk
    def attach_promise_store(self, store: PromiseStore) -> None:
        """Keep the promise in ``store`` (``save(state | None)``, ``load()``), and take back the
        one stored before a restart (node/persistence/promise.py)."""
        self.promise_store = store
        state = store.load()
        if not state or int(state.get("epoch", 0)) != self.membership.epoch:
            return  # none, or the membership moved on meanwhile: the outcome is known
        m = self.membership
        m.holding = {int(o): int(n) for o, n in state.get("holding", {}).items()}
        if state.get("promised"):
            m.promised = proposal_from_dict(state["promised"])
            # settled with the other voters PROMISE_TIMEOUT_S after the restart, if its coordinator
            # has not ended it by then
            self._promised_at = self.clock()
            # (a file written before ``answered`` was kept: a forced removal's voter answered its
            # hold; a graceful removal's answer is read when a settling voter asks, see standing)
            m.answered = int(state.get("answered", m.holding.get(m.promised.change.number, 0)))
            m.reported = bool(state.get("reported", False))
        m.lapsed = {q.ballot: (q, int(x["answered"]), bool(x["reported"]))
                    for x in state.get("lapsed", ()) for q in (proposal_from_dict(x["proposal"]),)}
        m.refusing = {(int(b[0]), int(b[1])) for b in state.get("refusing", ())}
        for number in m.holding:
            self._hold_link(number)
        log.warning("restarted with a membership promise (%s) and holds %s", m.promised, m.holding)

    def _promise_state(self) -> dict | None:
        """What the promise store keeps (None: nothing)."""
        m = self.membership
        if m.promised is None and not m.holding and not m.lapsed and not m.refusing:
            return None
        return {"epoch": m.epoch,
                "promised": None if m.promised is None else proposal_to_dict(m.promised),
                "answered": m.answered, "reported": m.reported,
                "holding": {str(o): n for o, n in m.holding.items()},
                "lapsed": [{"proposal": proposal_to_dict(q), "answered": answered, "reported": reported}
                           for q, answered, reported in m.lapsed.values()],
                "refusing": [list(b) for b in sorted(m.refusing)]}

    def _store_promise(self) -> None:
        if self.promise_store is not None:
            self.promise_store.save(self._promise_state())

    def commit(self, p: Proposal, frozen: int) -> None:
        """Apply an agreed change (MembershipError: this region did not promise it)."""
        before = Membership(self.membership.stride, self.membership.epoch, dict(self.membership.members),
                            dict(self.membership.frozen))
        endpoint = {p.change.number: p.change.endpoint} if p.change.endpoint else {}
        self.membership.commit(p, frozen)
        log.warning("membership epoch %d: %s of region %d%s", p.epoch, p.change.kind, p.change.number,
                    f" ({p.change.name})" if p.change.name else "")
        self._membership_changed(before, endpoint)

    def adopt(self, blob: bytes) -> bool:
        """Take a peer's newer member list (from a handshake, or braid-admin); returns whether it
        was newer.  ValueError: it cannot be this database's list."""
        other, endpoints = membership_from_blob(blob, self.membership.stride)
        unrecordable = self.cluster.without_shard_ports(other, endpoints)
        if unrecordable:
            raise ValueError(unrecordable)
        before = Membership(self.membership.stride, self.membership.epoch, dict(self.membership.members),
                            dict(self.membership.frozen))
        if not self.membership.adopt(other):
            return False
        log.warning("adopted membership epoch %d from a peer (this region was at epoch %d)", other.epoch, before.epoch)
        self._membership_changed(before, endpoints)
        return True

    def _membership_changed(self, before: Membership, endpoints: dict[int, tuple]) -> None:
        """Record the new list, follow it with the links (dial new members, drop removed ones,
        handshake again with everyone at the new epoch) and, once removed, stop syncing."""
        m = self.membership
        self.active = m.status(self.region) == ACTIVE
        self._store_promise()  # a newer epoch: no promise or hold is left
        self.drop_refused_pending()
        self.cluster.take_membership(m, endpoints)
        self.hub.update_names({r.number: r.name for r in self.cluster.regions})
        try:
            self.cluster.save()
        except OSError as e:
            log.error("cannot record membership epoch %d in %s: %s (it is kept in memory; peers "
                      "bring it again at the next handshake)", m.epoch, self.cluster.path, e)
        if m.status(self.region) == REMOVED:
            log.warning("this region was removed from the database at epoch %d: it syncs no more and "
                        "refuses writes; purge it (braid-admin region purge) to add it again", m.epoch)
            self.hub.retire()
            return
        for number in [n for n in self.hub.peer_numbers() if m.status(n) not in LIVE]:
            self.hub.forget(number)
        self._release_links()
        self.hub.relink()
        self.dial_peers()
        self._watch_join()

    def drop_refused_pending(self) -> None:
        """The list now refuses operations of a region removed (or being removed) by force past
        its frozen point: envelopes of it that wait here for their dependencies go, with those
        that depend on one.  Left waiting, one would be applied past the frozen point as soon
        as what it waits for arrives from a member (or wait for good), and this region would
        hold what the others never accept.  Dropping a waiting envelope is safe (crdt/causal.py):
        a peer sends again what this region lacks."""
        m = self.membership
        self.counts.dropped += self.causal.drop_pending(
            lambda e: not m.accepts(e.origin, e.n) or not all(m.accepts(o, n) for o, n in e.deps))

    def purge(self, blob: bytes) -> None:
        """Wipe this region's data so that it can be added again as a new member: only once it
        is removed (``blob``: a member's list, which may say so); ValueError otherwise."""
        if blob:
            self.adopt(blob)
        status = self.membership.status(self.region)
        if status != REMOVED:
            raise ValueError(f"region {self.me.name} is {status or 'not a member'} at membership epoch "
                             f"{self.membership.epoch}: only a removed region can be purged")
        self.on_purge()

    def _watch_join(self) -> None:
        """While this region is joining, have it activated once it caught up."""
        if self.membership.status(self.region) != JOINING or (self.activation and not self.activation.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not serving (the simulation drives activation itself)
        self.activation = loop.create_task(self._activate_when_caught_up())

    async def _activate_when_caught_up(self) -> None:
        delay = 0.05
        while self.membership.status(self.region) == JOINING:
            if self.caught_up():
                try:
                    m = self.membership
                    await asyncio.to_thread(agree_with_regions, self.admin_connect, self.cluster,
                                            Membership(m.stride, m.epoch, dict(m.members), dict(m.frozen)),
                                            Change(ACTIVATE, self.region), (self.region, time.time_ns()),
                                            self.admin_tls)
                    continue
                except (MembershipChangeError, MembershipError) as e:
                    log.info("not activated yet: %s", e)
            await asyncio.sleep(delay * (0.5 + random.random()))  # retry with backoff and jitter
            delay = min(delay * 2, 2.0)


class MembershipGate:
    """What the replication hub asks at handshakes and per operation (see the module's theory).
    ``adopt``: takes a newer member list a peer brought (``ActiveActive.adopt``)."""

    def __init__(self, me: RegionSpec, cluster: ClusterConfig, membership: Membership, counts: MembershipCounts,
                 adopt: Callable[[bytes], bool]) -> None:
        self.me = me
        self.cluster = cluster
        self.membership = membership
        self.counts = counts
        self.adopt = adopt

    def hello(self) -> tuple[int, bytes]:
        """(epoch, member list) this region's Hello or Welcome carries."""
        return self.membership.epoch, self.cluster.membership_blob()

    def check_peer(self, peer: int, epoch: int, blob: bytes) -> str:
        """At a handshake: '' to go on, else why the peer is refused (a newer list is adopted first)."""
        if epoch > self.membership.epoch and blob:
            try:
                self.adopt(blob)
            except ValueError as e:
                return f"region {peer} sent {e}"
        m = self.membership
        if m.status(self.me.number) == REMOVED:
            return f"region {self.me.name} was removed from the database at membership epoch {m.epoch}"
        status = m.status(peer)
        if status == REMOVED:
            spec = self.cluster.by_number(peer)
            name = spec.name if spec else str(peer)
            return (f"region {peer} ({name}) was removed from the database (membership epoch {m.epoch}): "
                    f"purge it (braid-admin region purge --region {name}) and add it again")
        if status is None:
            return f"region {peer} is not a member of the database at membership epoch {m.epoch}"
        return ""

    def refused(self) -> None:
        self.counts.refused += 1

    def admits_all(self, envs: list[Envelope]) -> bool:
        """Whether :meth:`admits` would say '' (apply it) of every one of ``envs``."""
        return self.membership.admits_all(envs)

    def admits(self, env: Envelope) -> str:
        """'' apply it; 'drop': an operation of a removed region past its frozen point (or of one
        being force-removed past what this region held); 'behind': a region this list does
        not know (the peer has a newer list)."""
        m = self.membership
        if m.admits(env.origin, env.n, env.deps):
            return ""
        if m.status(env.origin) is not None and all(m.status(o) is not None for o, _ in env.deps):
            self.counts.dropped += 1
            return "drop"
        return "behind"
