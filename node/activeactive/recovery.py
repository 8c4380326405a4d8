"""How a region takes back its own operations at every start, and how it takes writes alone
(node/activeactive/lone_writes.py decides when; this is what the region does at each step).

:class:`Recovery` is a part :class:`node.activeactive.region.ActiveActive` holds (``aa.recovery``),
given the causal log, the hub, the keyspace, the settings, the writes-alone state
(:class:`~node.activeactive.lone_writes.LoneWrites`) and how to list the live peers.  Holding
this region's own operations back, and refusing its own origin's from peers, it asks of the
hub (``hold_own_from``, ``refuse_peers_own``, ``release_own``).

Theory of operation
-------------------
Taking back its own operations at every start.  A region's data folder may hold less of
its own history than its peers do: operations leave once their log records reached the
OS (node/persistence/oplog.py), so a crashed machine may have lost some that peers hold;
and an operator may start a region from an older copy of its folder (a backup, a
snapshot of a VM, a copy taken while it ran), which no mark file can tell.  Minting
those numbers again would give two operations one dot.  So after *every* start the
region takes no writes until every live member has handshaken with it and it holds
every operation of its own that any of them held at that handshake (they send them
back as any operation a peer lacks, or a full resync brings them):
:meth:`Recovery.recovered`.  A member that stays unreachable keeps the region
read-only (``LOADING``) until it comes back or is removed from the database.  Client
writes are the only way this region mints dots, so refusing them (LOADING) is enough.  A peer's
handshake counts what it *applied*; one of this region's operations that waited there
for its dependencies is forgotten by that handshake (``ReplicationHub.handshook``), so
no region keeps a lost operation beside the one minted again under its dot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crdt.causal import CausalLog, Envelope, Fork
from node.activeactive import opcodec
from node.activeactive.backlog import image_parts, keep_local_groups
from node.activeactive.cluster_config import RegionSpec
from node.activeactive.hub import ReplicationHub
from node.activeactive.lone_writes import LoneStep, LoneWrites
from node.persistence import snapshot

if TYPE_CHECKING:
    from node.region.db import Database

log = logging.getLogger("braid.activeactive")


def _nothing() -> None:
    pass


class Recovery:
    """Taking back its own operations, and writes taken alone: a part of
    :class:`node.activeactive.region.ActiveActive`.  ``config``: the region's settings
    (node/region/config.py); ``peers``: the other live members now."""

    def __init__(self, me: RegionSpec, causal: CausalLog, hub: ReplicationHub, db: Database, config: Any,
                 lone: LoneWrites, peers: Callable[[], list[RegionSpec]]) -> None:
        self.me = me
        self.region = me.number
        self.causal = causal
        self.hub = hub
        self.db = db
        self.config = config
        self.lone = lone
        self.peers = peers
        # set after a start that may have lost operations peers hold (see recover_own_operations)
        self.recovering = False
        self.machine_crash = False  # the start that recovers followed a crash of the machine
        self._on_recovered: Callable[[], None] = _nothing

    def recover_own_operations(self, on_recovered: Callable[[], None], machine_crash: bool = False) -> None:
        """At every start, its peers may hold operations of this region its folder lacks (a
        crash of the machine lost the unsynced tail, ``machine_crash``; or the folder is an
        older copy of itself); minting their dots again would give two operations one dot.
        So the region takes no writes until every live member handshook with it and it
        holds every operation of its own any of them held then (they send them back, as any
        operation a peer lacks; or a full resync brings them): :meth:`recovered`.  A peer
        that stays unreachable keeps it read-only (``LOADING``) until it comes back or is
        removed from the database.  ``on_recovered`` is told once (the log's mark)."""
        self.recovering = True
        self.machine_crash = machine_crash
        self._on_recovered = on_recovered
        if machine_crash:
            log.warning("region %s may have lost operations in a crash of its machine: it takes writes again "
                        "once every peer has told it the last of its own operations it holds, and it holds them",
                        self.me.name)
        elif self.peers():
            log.info("region %s takes writes once every peer has told it the last of its own operations it "
                     "holds, and it holds them", self.me.name)

    def recovery_waits_for(self) -> list[RegionSpec]:
        """The live members this region has not yet heard from since it started."""
        return [p for p in self.peers() if p.number not in self.hub.handshake_vv]

    def recovered(self) -> bool:
        """Has a recovering region heard from every live member and taken back its own operations?"""
        if not self.recovering:
            return True
        if self.recovery_waits_for():
            return False
        if self.causal.vv.get(self.region, 0) < self.own_held_elsewhere() or self.own_history_forked():
            return False
        self.recovering = False
        log.log(logging.WARNING if self.machine_crash else logging.INFO,
                "region %s holds its own operations its peers held (up to %d): it takes writes",
                self.me.name, self.causal.vv.get(self.region, 0))
        self._on_recovered()
        return True

    def own_held_elsewhere(self) -> int:
        """The most of this region's own operations any live member held at its latest handshake."""
        live = {p.number for p in self.peers()}
        return max((vv.get(self.region, 0) for p, vv in self.hub.last_handshake_vv.items() if p in live),
                   default=0)

    def lone_step(self, now_ms: int) -> LoneStep | None:
        """What to do about writes taken alone now (node/activeactive/lone_writes.py)."""
        after_ms = int(self.config["crdt-lone-writes-after-ms"])
        if after_ms <= 0 and not self.lone.alone:
            return None  # (and the start gate is left to the writes that ask it, as without the setting)
        held = self.own_held_elsewhere()
        return self.lone.step(now_ms, after_ms,
                              self.recovering and not self.recovered(), bool(self.recovery_waits_for()),
                              self.causal.vv.get(self.region, 0) < held, held, bool(self.own_history_forked()))

    def begin_alone(self, image: bytes | None) -> None:
        """Take writes alone from now on (``image``: the state now; None: resuming a period
        a replay reopened); what is applied from now on stays here until confirmed."""
        lone = self.lone
        if image is not None:
            lone.confirmed = self.causal.vv.get(self.region, 0)
            lone.image = image
            lone.ops, lone.first_minted = [], None
            lone.periods += 1
            self.hub.hold_own_from(self.causal.end)
        self.recovering = False
        lone.waiting_since = None
        held = ", ".join(p.name for p in self.recovery_waits_for())
        log.warning("region %s takes writes alone (crdt-lone-writes-after-ms): %s did not answer. Its writes stay "
                    "here until every member has answered; one that holds operations of this region above %d "
                    "makes it withdraw them and issue them again under new numbers", self.me.name, held or "a member",
                    lone.confirmed)

    def end_alone(self) -> None:
        """Every member answered and none held more of this region's operations: what was held
        leaves.  Or one held more and nothing was minted alone: the region takes those back
        before it writes again."""
        lone, confirmed = self.lone, self.lone.confirmed
        assert confirmed is not None, "confirming writes while none are taken alone"
        if lone.first_minted is None and self.own_held_elsewhere() > confirmed:
            log.warning("region %s: a member holds operations of its own above %d, and it sent none alone: it "
                        "takes them back before it takes writes again", self.me.name, lone.confirmed)
            self.recovering = True
        else:
            log.warning("region %s: every member answered and none holds operations of its own above %d: the %d "
                        "operations it took alone leave for the other regions", self.me.name, lone.confirmed,
                        len(lone.ops))
        lone.confirmed, lone.image, lone.ops, lone.first_minted = None, None, [], None
        self.hub.release_own()
        self.hub.wake()

    def withdraw_alone(self) -> list[Envelope]:
        """Go back to the state this region had when it began to take writes alone: its own
        operations since then wait to be issued again (``lone.reissue``); returns the other
        regions' operations it applied since, for the caller to apply again on top (none of
        them depends on a withdrawn one: nothing held left).  Consumer groups keep their
        region-local state where the group is the same (same creation), as with an image."""
        lone, held_from, confirmed = self.lone, self.hub.hold_at, self.lone.confirmed
        assert lone.image is not None and held_from is not None and confirmed is not None, \
            "withdrawing writes while none are taken alone"
        img = snapshot.decode(lone.image)
        keys, causal = image_parts(img)
        since = self.causal.log[held_from - self.causal.base:]
        # in this region's own log each group goes back where it was: the operations taken
        # back put entries below those read alone, and `>` must not skip them
        keep_local_groups(keys, self.db.keys, back_in=self.region)
        self.db.replace_keys(keys)
        self.causal.take(causal)
        self.causal.drop_pending()  # their senders send them again
        self.hub.restart_arrivals()
        log.warning("region %s withdraws the %d operations it took alone: region(s) %s hold operations of this "
                    "region above %d; it takes those back, then issues its own again under new numbers",
                    self.me.name, len(lone.ops),
                    ", ".join(str(p) for p, vv in sorted(self.hub.last_handshake_vv.items())
                              if vv.get(self.region, 0) > confirmed) or "another", confirmed)
        lone.reissue, lone.reissue_base = lone.ops, confirmed
        lone.withdrawals += 1
        lone.withdrawn_ops += len(lone.ops)
        lone.confirmed, lone.image, lone.ops, lone.first_minted = None, None, [], None
        self.hub.release_own()
        self.drop_own_forks()
        self.recovering = True
        return [env for env in since if env.origin != self.region]

    def note_lone(self, own: list) -> None:
        """Operations this region applied while alone (``(op, envelope or None, sent)`` as a
        command resolved them), noted to be withdrawn if need be; once one was sent (stamped
        with a number), the peers' operations of this region's origin are another history."""
        lone = self.lone
        lone.ops.extend(op if type(op) is bytes else opcodec.encode(op) for op, _env, _sent in own)
        if lone.first_minted is None:
            minted = next((env.n for _op, env, _sent in own if env is not None), None)
            if minted is not None:
                lone.first_minted = minted
                self.hub.refuse_peers_own()

    def drop_own_forks(self) -> None:
        """Forget the forks links found in this region's own history (it withdrew what forked)."""
        self.hub.drop_forks_of(self.region)

    def own_history_forked(self) -> list[Fork]:
        """The forks a link found in this region's own history (crdt/causal.py): a peer holds
        other operations under numbers this region minted - e.g. a folder restored from a copy
        taken before a salvage cut what the copy holds.  Minting on would only deepen it."""
        if not self.hub.forks:
            return []
        return [f for found in self.hub.forks.values() for f in found if f.origin == self.region]
