"""Operations a region withdrew, made again for the state they are issued on (pure).

Theory of operation
-------------------
A region that took writes alone (node/activeactive/lone_writes.py) may learn that a member holds
operations of its own it had lost - a folder restored from an older copy, the unsynced
tail of a crashed machine.  Its writes taken alone then carry numbers that member holds
other operations under.  The member's history wins those numbers: the region goes back to
its state before it was alone, takes the member's operations, and issues its own writes
again, in their order, under fresh numbers - as if its clients had sent them now.

An operation is history: what it refers to must still mean the same on the state it is
issued on.  So, for each withdrawn operation, :meth:`Reissue.make` keeps its content and
renews what ties it to the moment it was first issued:

* its dot is the new one.  The version vectors it carries to judge concurrency (a group
  creation's dependencies and a deletion's context, for delete-wins; an idempotent add's
  dependencies, to tell a concurrent duplicate) keep what the operation knew of the other
  regions, and count this region's own operations up to the new dot - its earlier writes
  taken alone were issued again before it.  A version vector cannot say "knew those but not
  the ones taken back", so a creation or deletion counts the taken-back ones as known (a
  deletion issued alone then wins over a concurrent creation among them, as delete-wins
  wants; a creation issued alone wins over a concurrent deletion among them, which
  delete-wins would not have); an idempotent add counts none of this region's own past
  ``base``, so it stays concurrent with an add of the same iid among the taken-back ones,
  and one entry wins as for any concurrent duplicate;
* an entry keeps its ID when that is still above every entry ID this region has held for
  its key (nearly always: the entries taken back were minted before the ones written
  alone); an ID at or below one would let a deletion that observed the higher one take
  the new entry where it arrives first, so it gets the next ID this region would mint for
  the key instead, and every later withdrawn
  operation naming the old ID (XDEL, an acknowledgement watermark, an IDMP record, a trim's
  or a deletion's cut-off of this region's log) names the new one;
* a group's acknowledgement watermark of another region's log that named a group created
  while alone names the group's new creation; one of this region's own log is not issued
  again (None): the entries taken back lie below what was acknowledged alone, unread, and
  a watermark says every entry up to it was.  The acknowledgements stay in the region's
  PEL; other regions may deliver those entries again after a failover (at least once).

Nothing here does I/O or reads a clock: the time arrives as an argument.
"""

from __future__ import annotations

from dataclasses import replace

from . import idgen, ops
from .causal import VersionVector
from .ids import StreamID


class Reissue:
    """The renumbering of one region's withdrawn operations as they are issued again."""

    def __init__(self, region: int, stride: int, base: int) -> None:
        """``base``: how many of its own operations the region held when it began to be alone."""
        self.region = region
        self.stride = stride
        self.base = base
        self.dots: dict[tuple[int, int], tuple[int, int]] = {}  # a group creation's old dot -> new
        self.ids: dict[tuple[bytes, StreamID], StreamID] = {}   # (key, old ID) of an entry -> new ID
        self.renamed = 0  # entries that could not keep their ID

    def make(self, op: ops.Op, keys: ops.Keyspace, vv: VersionVector, now_ms: int) -> ops.Op | None:
        """``op`` as this region issues it now, on ``keys`` holding ``vv`` (None: not again)."""
        region = self.region
        n = vv.get(region, 0) + 1
        dot = (region, n)
        if type(op) is ops.AddEntry:
            new_id = op.id
            if op.origin == region and op.id <= keys.top_id(op.key):
                new_id = idgen.strict(keys.top_id(op.key), now_ms, region, self.stride)
                self.ids[(op.key, op.id)] = new_id
                self.renamed += 1
            if op.pid is None:
                return replace(op, id=new_id)
            return replace(op, id=new_id, deps=self._known(op.deps, self.base), dot=dot)
        if type(op) is ops.CreateGroup:
            if op.dot is not None:
                self.dots[tuple(op.dot)] = dot
            return replace(op, deps=self._known(op.deps, n - 1), dot=dot, cursors=self._tops(op.key, op.cursors))
        if type(op) is ops.DeleteKey:
            return replace(op, observed=self._tops(op.key, op.observed), context=self._known(op.context, n))
        if type(op) is ops.FlushKeys:
            observed = None if op.observed is None else {k: self._tops(k, o) for k, o in op.observed.items()}
            return replace(op, observed=observed, context=self._known(op.context, n))
        if type(op) is ops.DestroyGroup:
            return replace(op, context=self._known(op.context, n))
        if type(op) is ops.DeleteEntries:
            return replace(op, ids=[self.ids.get((op.key, i), i) for i in op.ids])
        if type(op) is ops.Trim:
            return replace(op, cutoffs=self._tops(op.key, op.cutoffs))
        if type(op) is ops.RecordIdmp:
            return replace(op, id=self.ids.get((op.key, op.id), op.id))
        if type(op) is ops.AckWatermark:
            if op.origin == region:
                return None
            created = op.created
            if created is not None:
                created = self.dots.get(tuple(created), created)
            return replace(op, created=created)
        return op

    def _known(self, vector: dict | None, own: int) -> dict | None:
        """``vector`` (what the operation knew of each region) with this region's own count ``own``."""
        if vector is None:
            return None
        out = dict(vector)
        out[self.region] = own
        return out

    def _tops(self, key: bytes, tops: dict | None) -> dict | None:
        """A per-origin cut-off map with this region's cut-off renamed as its entries were:
        the highest new ID of an entry at or below the old cut-off."""
        if not tops or self.region not in tops or not self.ids:
            return tops
        old = tops[self.region]
        moved = [new for (k, was), new in self.ids.items() if k == key and was <= old]
        if not moved:
            return tops
        out = dict(tops)
        out[self.region] = max(old, *moved)
        return out
