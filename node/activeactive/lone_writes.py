"""Writes a region takes alone (``crdt-lone-writes-after-ms``), and their withdrawal.

Theory of operation
-------------------
At every start a region of a cluster takes no writes until every live member has told it
the last of its own operations that member holds (node/activeactive/recovery.py): its folder may be
an older copy of itself, or its machine lost the unsynced tail, and minting those numbers
again would give two operations one number.  A member that does not answer keeps it
read-only.  ``crdt-lone-writes-after-ms N`` (milliseconds, 0 = never, the default) lets a region
that waited N ms for members that do not answer - having taken back what those that did answer
hold - take writes alone (decided by the cron, and by a write the region would refuse).  What
that risks is a member, back later, holding operations of this region the region no longer
has; so the writes taken alone are made safe in three steps:

1. *Held.*  The region marks where it began (an ``a`` record of its log holding ``g``, the
   count of its own operations it held then) and keeps the state of that moment (an image
   in memory).  Clients are served as usual, but nothing applied from then on leaves for
   other regions - its own operations above ``g``, and what it would relay - and no
   snapshot, full-resync image or backup is taken or installed: none of those operations
   may reach another region or the base of its log before step 2 or 3.
2. *Confirmed* (``k``) once every member has answered and none holds an operation of this
   region above ``g``: the numbers were free.  Everything held leaves, in order.
3. *Withdrawn* (``w``) as soon as a member shows one above ``g`` (its handshake's version
   vector, or a fork of this region's history found on a link) - if the region minted any
   number alone; if not, the period just ends (``k``) and the region takes those back first.
   Meanwhile, once it minted one, operations of its own origin coming from peers are dropped
   (they can only be another history of those numbers; they come again after the withdrawal).  That member's history
   wins those numbers: the region goes back to the image, applies again the other
   regions' operations it applied since (they never depended on the withdrawn ones, which
   never left), and its links handshake again; the ``w`` record lists the withdrawn
   operations, as applied here.  The region is then starting again: it takes back the
   member's operations, and once every member answered (or, if one still does not, after
   the setting's time once more, held as in step 1), it issues the withdrawn operations
   again, in order, under fresh numbers (crdt/reissue.py says what changes), before any
   new write.  No acknowledged write of either branch is lost.

A replay reads the same story from the log (node/persistence/replay.py): an ``a`` still
open makes the region hold again what followed it; a ``w`` makes the replay skip the
region's own operations since its ``a`` and wait to issue the listed ones again; the first
record of the region's own operations after a ``w`` is their re-issue.  Region-local state
(a consumer group's PEL and consumers) is not withdrawn: it keeps what the region's clients
did while alone, except what a replay of a withdrawn command would have redone (a crash
during the short window between a withdrawal and the re-issue).
"""

from __future__ import annotations

from enum import Enum


class LoneStep(Enum):
    """What the region must do about writes taken alone (:meth:`LoneWrites.step`)."""

    ALONE = "alone"          # start (or resume) taking writes alone
    CONFIRM = "confirm"      # every member answered, none holds more: release what was held
    WITHDRAW = "withdraw"    # a member holds more of this region's operations: go back


class LoneWrites:
    """A region's writes taken alone: whether it is alone, what it holds, what waits to be
    issued again.  Decisions only; the region core carries them out (node/region/core.py)."""

    def __init__(self) -> None:
        self.confirmed: int | None = None  # g while alone: own operations up to here were confirmed
        self.image: bytes | None = None    # the state when the region began to be alone
        self.ops: list[bytes] = []         # own operations applied since, as applied (to withdraw)
        self.first_minted: int | None = None  # the number of the first operation it sent alone
        self.reissue: list[bytes] = []     # withdrawn, to be issued again
        self.reissue_base = 0              # how many of its own the region held when they were taken
        self.waiting_since: int | None = None  # since when (ms) members have not answered
        # counters (INFO crdt)
        self.periods = 0
        self.withdrawals = 0
        self.withdrawn_ops = 0
        self.reissued_ops = 0
        self.renamed_entries = 0

    @property
    def alone(self) -> bool:
        return self.confirmed is not None

    def step(self, now_ms: int, after_ms: int, recovering: bool, waiting: bool, behind: bool,
             own_held_elsewhere: int, own_forked: bool) -> LoneStep | None:
        """What to do now (the cron asks once a second, and a write the region would refuse).
        ``recovering``: the region takes no writes yet after its start; ``waiting``: some live
        member has not answered since it started; ``behind``: it holds fewer of its own
        operations than a member that answered; ``own_held_elsewhere``: the most of its own
        operations any member held at its latest handshake; ``own_forked``: a link found
        another history of this region's operations."""
        if self.confirmed is not None:  # alone
            if own_held_elsewhere > self.confirmed or own_forked:
                return LoneStep.WITHDRAW if self.first_minted is not None else LoneStep.CONFIRM
            if not waiting:
                return LoneStep.CONFIRM
            if not recovering:
                return None
        elif not recovering or after_ms <= 0 or not waiting or behind or own_forked:
            self.waiting_since = None
            return None
        if after_ms <= 0:
            return None
        if self.waiting_since is None:
            self.waiting_since = now_ms
        return LoneStep.ALONE if now_ms - self.waiting_since >= after_ms else None

    def info_lines(self) -> list[str]:
        return [
            f"crdt_lone_writes:{int(self.alone)}",
            f"crdt_lone_held_ops:{len(self.ops)}",
            f"crdt_lone_periods:{self.periods}",
            f"crdt_lone_withdrawals:{self.withdrawals}",
            f"crdt_lone_withdrawn_ops:{self.withdrawn_ops}",
            f"crdt_lone_reissue_waiting:{len(self.reissue)}",
            f"crdt_lone_reissued_ops:{self.reissued_ops}",
            f"crdt_lone_renamed_entries:{self.renamed_entries}",
        ]
