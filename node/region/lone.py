"""The region core's side of writes taken alone (node/activeactive/lone_writes.py).

Theory of operation
-------------------
A region of a cluster that cannot hear every member may take writes alone once
``crdt-lone-writes-after-ms`` passed (node/activeactive/lone_writes.py decides when).  The
decisions are the Active-Active part's; what they do to the region's own state and its
operation log happens here, in the order a replay relies on:

- **begin** (``a`` record): the state before the period is kept as an image, so the writes
  can be withdrawn; writes withdrawn earlier are issued again first;
- **confirm** (``k`` record, rolled to disk before anything held leaves): every member
  answered and none holds a conflicting history, the writes stay;
- **withdraw** (``w`` record, on disk first): a member held this region's own operations the
  period did not know; the state goes back to the image, other regions' operations since are
  applied again, the links handshake again, and the withdrawn writes wait to be issued again
  (**reissue**, as one record of own operations right after the ``w`` record).

A :class:`LoneWritesObserver` (the simulation's durability check) hears of withdrawals and
reissues; it is given to the core when it is made.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from crdt.reissue import Reissue
from node.activeactive import opcodec
from node.activeactive.lone_writes import LoneStep
from node.persistence import snapshot

if TYPE_CHECKING:
    from node.activeactive.region import ActiveActive
    from node.region.core import RegionCore

log = logging.getLogger("braid.server")

# a client's last write (Session.wrote_upto) was withdrawn and waits to be issued again: no
# region holds it under any number yet, so WAIT counts none until reissue() gives the new one
WITHDRAWN = (1 << 64) - 1


class LoneWritesObserver(Protocol):
    """Who hears what writes taken alone did (the simulation's checks)."""

    def withdrawn(self, first_minted: int | None, last: int) -> None:
        """Writes taken alone from ``first_minted`` to ``last`` (this region's own counter) went."""

    def reissued(self, count: int) -> None:
        """``count`` withdrawn writes were issued again."""


class LoneWritesSteps:
    """Begin, confirm, withdraw and reissue writes taken alone (see the module's docstring)."""

    def __init__(self, core: RegionCore, observer: LoneWritesObserver | None = None) -> None:
        self.core = core
        self.observer = observer

    def _aa(self) -> ActiveActive:
        aa = self.core.aa
        if aa is None:
            raise RuntimeError("writes taken alone are a cluster member's: this region is standalone")
        return aa

    def cron(self, now_ms: int) -> None:
        """Begin, confirm or withdraw, as the Active-Active part decides at ``now_ms``."""
        step = self._aa().lone_step(now_ms)
        if step is LoneStep.ALONE:
            self.begin()
        elif step is LoneStep.CONFIRM:
            self.confirm()
        elif step is LoneStep.WITHDRAW:
            self.withdraw()

    def let_through_now(self) -> bool:
        """A write the region would refuse: whether writes taken alone let it through now (their
        time came, or they were just confirmed) - decided at once, not at the next cron."""
        core, aa = self.core, self._aa()
        if not (aa.lone.alone or aa.recovering) or int(core.config["crdt-lone-writes-after-ms"]) <= 0:
            return False
        self.cron(core.system_ms())
        return aa.writable

    def begin(self) -> None:
        core, aa = self.core, self._aa()
        if aa.lone.alone:  # a period a replay reopened: take writes again
            aa.begin_alone(None)
            return
        image = snapshot.encode(core.db.keys, aa.causal, 0, core.system_ms(), True, core.region)
        if core.oplog is not None:
            core.oplog.log_lone(b"a", aa.causal.vv.get(core.region, 0))
            core.records_appended()
        aa.begin_alone(image)
        if aa.lone.reissue:  # withdrawn before: issued again first, held with the rest
            self.reissue()

    def confirm(self) -> None:
        """The ``k`` record is on disk before anything held leaves: a replay that found the
        period still open would take the peers' copies of those operations for another history."""
        core, aa = self.core, self._aa()
        oplog = core.oplog
        if oplog is not None:
            confirmed = aa.lone.confirmed
            assert confirmed is not None  # set for as long as the region is alone
            oplog.log_lone(b"k", confirmed)
            try:
                oplog.roll()
            except OSError as e:  # the record waits in the buffer; the cron tries again
                log.error("cannot confirm the writes taken alone yet: the append-only file cannot be written: %s",
                          e.strerror or e)
                return
        aa.end_alone()

    def withdraw(self) -> None:
        """Go back to the state before the writes taken alone, apply again the other regions'
        operations since, and handshake again.  The ``w`` record is on disk first: a replay
        then skips the withdrawn operations and waits to issue them again."""
        core, aa = self.core, self._aa()
        lone = aa.lone
        first, last, before = lone.first_minted, aa.causal.vv.get(core.region, 0), lone.withdrawals
        oplog = core.oplog
        if oplog is not None:
            confirmed = lone.confirmed
            assert confirmed is not None  # set for as long as the region is alone
            oplog.log_lone(b"w", confirmed, lone.ops)
            try:
                oplog.roll()
            except OSError as e:
                log.error("cannot withdraw the writes taken alone yet: the append-only file cannot be written: %s",
                          e.strerror or e)
                return
        if first is not None:  # their WAIT and tokens now wait for the writes issued again (reissue)
            for client in core.clients.values():
                if client.wrote_upto >= first:
                    client.wrote_upto = WITHDRAWN
        again = aa.withdraw_alone()
        core.replaying = True  # they are in the file already
        try:
            for env in again:
                aa.hub.deliver(env)
        finally:
            core.replaying = False
        aa.log_started()  # everything the causal log holds is on disk
        aa.hub.relink()  # the peers learn what this region holds now
        core.db.ready.update(core.db.keys)
        core.keys_ready()
        if self.observer is not None and lone.withdrawals != before:
            self.observer.withdrawn(first, last)

    def took_back_own_operations(self) -> None:
        """Every live member answered and this region holds its own operations they held: the
        writes it withdrew are issued again before any other."""
        if self._aa().lone.reissue:
            self.reissue()
        oplog = self.core.oplog
        if oplog is not None:
            oplog.recovered()

    def reissue(self) -> None:
        """Issue the withdrawn writes again, in order, as one record of this region's own
        operations (the first after the ``w`` record: a replay knows them by that)."""
        core, aa = self.core, self._aa()
        db, lone = core.db, aa.lone
        count = len(lone.reissue)
        reissue = Reissue(core.region, aa.stride, lone.reissue_base)
        collected, db.own_ops = db.own_ops, []
        try:
            with core.clock_pinned() as now:
                for data in lone.reissue:
                    op = reissue.make(opcodec.decode(data), db.keys, aa.causal.vv, now)
                    if op is not None:
                        db.apply(op)
            own = db.own_ops
        finally:
            db.own_ops = collected
        if lone.alone:
            aa.note_lone(own)
        oplog = core.oplog
        if own and oplog is not None:
            oplog.log_own(own)
            aa.logged(oplog.last_record)
            core.records_appended()
        log.warning("issued again the %d writes taken alone it withdrew (%d entries under new IDs: their old "
                    "ones were taken)", len(lone.reissue), reissue.renamed)
        lone.reissued_ops += len(lone.reissue)
        lone.renamed_entries += reissue.renamed
        lone.reissue = []
        for client in core.clients.values():
            if client.wrote_upto == WITHDRAWN:
                client.wrote_upto = aa.causal.vv.get(core.region, 0)
        db.ready.update(db.keys)
        core.keys_ready()
        if self.observer is not None:
            self.observer.reissued(count)

    def log_withdrawn_again(self) -> None:
        """After a new base of the log: the writes withdrawn and not yet issued again, listed again."""
        core, aa = self.core, self.core.aa
        if aa is not None and aa.lone.reissue and core.oplog is not None:
            core.oplog.log_lone(b"w", aa.lone.reissue_base, aa.lone.reissue)
            core.records_appended()

