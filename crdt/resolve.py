"""Resolving a command into operations, one resolver per kind of database (pure).

Theory of operation
-------------------
A write command parses its arguments, then asks the database's resolver for the
fully determined operations (crdt/ops.py) that carry out the request against the
current state; the handler applies them one at a time.  The handler never asks
which kind of database it runs in: that choice is made once, when the region is
built, by picking a resolver.

- :class:`SingleRegion` is Redis's own behaviour: IDs by Redis's rule, a trim as
  Redis's ``streamTrim``, a DEL that drops everything, RENAME moving the stream
  with its groups.
- :class:`ActiveActive` applies the multi-region rules: IDs by the database's ID
  mode with the region's number in the sequence (crdt/idgen.py); a DEL is an
  observed-remove carrying the top of every origin log this region holds and its
  version vector including the deletion (the delete-wins context for groups), and a
  flush is that observed-remove of every key held, in one operation; a
  trim is resolved into per-origin cutoffs of what this region has seen (exact:
  ``~`` may keep more, so removing precisely is allowed); a group creation
  carries its dependencies and dot, and ``$`` starts it after what this region
  holds of each origin log (logs it has not seen start at the beginning, so ``>``
  skips nothing that arrives late); XACK replicates as per-origin watermarks; XDEL
  names the origin logs it removes each ID from (two origins may hold one ID).

Installing a stream image under a key (:meth:`SingleRegion.install`, then
:meth:`SingleRegion.install_local`) is what COPY does with a copy of its source
(:func:`duplicate`) and RESTORE with a decoded value; the image is a
:class:`~crdt.stream.Stream` that is not in the keyspace.

- One region: whatever the key held is deleted (a DeleteKey), then the image itself
  is put in place, region-local state: every entry, block and deleted-entry flag,
  the counters, the groups with their consumers and PELs, the IDMP state - an exact
  copy.  A command that installs is logged as a command (node/persistence/oplog.py)
  and replayed by running it again, which builds the same image.
- Active-Active: an observed-remove of what the key held (a DEL), then the image's
  entries (one per ID) added with their IDs, as entries of the issuing region, in a
  log of their own: origin ``region + stride * n``, ``n`` the dot of the first add.
  Every origin log only grows at its top, which observed-remove, XDEL by origin and
  the per-origin cursors (XREADGROUP ``>``, XRANGEORIGIN) rely on: re-adding older
  IDs to the region's own log would let a concurrent DEL, trim or XDEL that had seen
  its earlier, higher entries remove them at some regions only.  Then each group is
  created again (its last-delivered ID and entries-read; a creation with
  dependencies and a dot, so a concurrent DEL of the key still wins), and the IDMP
  configuration is set (ConfigureIdmp, when it differs).  The image's IDMP maps are
  not carried: an iid recorded without its add's dot (RecordIdmp) overwrites, or
  pushes out of the size window, an iid a concurrent add at another region just
  recorded under the destination, so that region no longer sees the duplicate when
  it arrives - the simulation found regions keeping different entries that way.  The
  destination keeps the maps it had, as after a DEL.  The consumers and PELs are
  region-local: :meth:`ActiveActive.install_local` copies them into the new groups
  at the issuing region only.  The counters follow from the entries, as after RENAME.

Operations that depend on the version vector (contexts, dots) must be resolved
right before they are applied, after the previous one was: every method resolves
one step, and :meth:`rename` is a generator the handler drives.  Nothing here
reads a clock: ``now_ms`` is an argument.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Protocol

from . import groups as cg
from . import idgen, ops
from .blocks import TrimSpec
from .causal import CausalLog
from .ids import MAX_ID, MIN_ID, StreamID, decr
from .stream import Stream


class SingleRegion:
    """One Redis-compatible region."""

    active_active = False

    def top_id(self, keys: ops.Keyspace, key: bytes) -> StreamID:
        """The ID a new entry of ``key`` must exceed."""
        s = keys.get(key)
        return s.last_id if s is not None else (0, 0)

    def new_id(self, last: StreamID, now_ms: int, wanted: StreamID | None, seq_given: bool,
               ms_only: bool) -> StreamID:
        """XADD's ID: ``wanted`` None means ``*`` (IdError with Redis's text if refused)."""
        return idgen.next_auto(last, now_ms) if wanted is None else idgen.explicit(last, wanted, seq_given)

    def add_entry(self, key: bytes, region: int, id_: StreamID, flat: list, pid: bytes | None,
                  iid: bytes | None) -> ops.AddEntry:
        return ops.AddEntry(key, region, id_, flat, pid, iid)

    def trim(self, s: Stream, key: bytes, spec: TrimSpec, strategy: str) -> ops.Trim | None:
        """The trim to apply, or None when there is nothing to remove."""
        return ops.Trim(key, spec, strategy)

    def delete_key(self, key: bytes, s: Stream) -> ops.DeleteKey:
        return ops.DeleteKey(key)

    def flush(self, keys: ops.Keyspace) -> ops.FlushKeys:
        """FLUSHALL / FLUSHDB: every key goes."""
        return ops.FlushKeys(b"")

    def delete_entries(self, s: Stream, key: bytes, ids: list, strategy: str = ops.KEEPREF) -> ops.DeleteEntries:
        return ops.DeleteEntries(key, ids, strategy)

    def create_group(self, key: bytes, group: bytes, s: Stream | None, last: StreamID, entries_read: int,
                     mkstream: bool, from_top: bool) -> ops.CreateGroup:
        return ops.CreateGroup(key, group, last, entries_read, mkstream)

    def destroy_group(self, key: bytes, group: bytes) -> ops.DestroyGroup:
        return ops.DestroyGroup(key, group)

    def ack_watermarks(self, key: bytes, name: bytes, s: Stream, group) -> Iterator[ops.AckWatermark]:
        """What an XACK that acknowledged something replicates: nothing in one region."""
        return iter(())

    def rename(self, keys: ops.Keyspace, src: bytes, dst: bytes) -> Iterator[ops.Op]:
        """The stream moves as a whole (entries, groups, IDMP maps)."""
        yield ops.RenameKey(src, dst)

    def install(self, keys: ops.Keyspace, dst: bytes, image: Stream, replace: bool) -> Iterator[ops.Op]:
        """The operations that make room for ``image`` at ``dst`` (the theory above):
        here the deletion of what ``dst`` held.  Nothing when ``dst`` exists and not
        ``replace`` (the caller answers that case).  Then :meth:`install_local`."""
        if dst in keys:
            if not replace:
                return
            yield self.delete_key(dst, keys[dst])

    def install_local(self, keys: ops.Keyspace, dst: bytes, image: Stream) -> None:
        """After :meth:`install`'s operations: the image itself becomes ``dst``."""
        keys[dst] = image
        if image.idmp.producers:
            keys.note_idmp(dst)


class RegionRules(Protocol):
    """What the multi-region resolver reads of its region (node/activeactive/region.py has them)."""

    causal: CausalLog
    mode: str          # crdt_xadd_id_uniqueness_mode, changed by the admin CLI
    region: int        # this region's number
    stride: int        # the cluster's ID stride


class ActiveActive(SingleRegion):
    """A region of an Active-Active database; reads ``rules`` live (the ID mode can be tuned)."""

    active_active = True

    def __init__(self, rules: RegionRules) -> None:
        self.rules = rules

    def top_id(self, keys: ops.Keyspace, key: bytes) -> StreamID:
        return keys.top_id(key)  # never below an ID this region held for the key, even deleted

    def new_id(self, last: StreamID, now_ms: int, wanted: StreamID | None, seq_given: bool,
               ms_only: bool) -> StreamID:
        r = self.rules
        return idgen.choose(r.mode, last, now_ms, r.region, r.stride, wanted, seq_given and not ms_only)

    def add_entry(self, key: bytes, region: int, id_: StreamID, flat: list, pid: bytes | None,
                  iid: bytes | None) -> ops.AddEntry:
        add = ops.AddEntry(key, region, id_, flat, pid, iid)
        if pid is not None:
            add.deps, add.dot = self.creation()  # lets every region tell a concurrent duplicate (crdt/idmp.py)
        return add

    def trim(self, s: Stream, key: bytes, spec: TrimSpec, strategy: str) -> ops.Trim | None:
        cutoffs = trim_cutoffs(s, spec)
        return ops.Trim(key, spec, ops.KEEPREF, cutoffs=cutoffs) if cutoffs else None

    def delete_key(self, key: bytes, s: Stream) -> ops.DeleteKey:
        return ops.DeleteKey(key, observed=observed(s), context=self.context())

    def flush(self, keys: ops.Keyspace) -> ops.FlushKeys:
        """One observed-remove of every key held here, with one context: what a DEL of
        each key would remove, in one operation."""
        return ops.FlushKeys(b"", observed={key: observed(s) for key, s in keys.items()}, context=self.context())

    def delete_entries(self, s: Stream, key: bytes, ids: list, strategy: str = ops.KEEPREF) -> ops.DeleteEntries:
        """XDEL names the origin logs each ID is removed from here: where another origin's
        entry has the same ID (semi-strict, liberal) and has not arrived yet, it survives."""
        origins = [[o for o, log_ in s.logs.items() if log_.get(id_) is not None] for id_ in ids]
        return ops.DeleteEntries(key, ids, strategy, origins=origins)

    def create_group(self, key: bytes, group: bytes, s: Stream | None, last: StreamID, entries_read: int,
                     mkstream: bool, from_top: bool) -> ops.CreateGroup:
        deps, dot = self.creation()
        cursors = (observed(s) if s is not None else {}) if from_top else None
        return ops.CreateGroup(key, group, last, entries_read, mkstream, deps=deps, dot=dot, cursors=cursors)

    def destroy_group(self, key: bytes, group: bytes) -> ops.DestroyGroup:
        return ops.DestroyGroup(key, group, context=self.context())

    def ack_watermarks(self, key: bytes, name: bytes, s: Stream, group) -> Iterator[ops.AckWatermark]:
        """Acknowledgements replicate only as a consecutive watermark per origin log."""
        for origin in list(s.logs):
            mark = cg.ack_watermark(s, group, origin)
            if mark is not None:
                yield ops.AckWatermark(key, name, origin, mark, group.created_dot)

    def rename(self, keys: ops.Keyspace, src: bytes, dst: bytes) -> Iterator[ops.Op]:
        """The entries this region sees under ``src`` are added under ``dst`` with their IDs, in
        an origin log of their own as COPY's are (entries sharing an ID collapse into one),
        after an observed-remove of whatever ``dst`` held; then ``src`` is deleted the
        observed-remove way.  Consumer groups are not carried over: RENAME drops all
        consumer-group information.  Entries added to ``src`` concurrently elsewhere stay
        there.  (In this region's own log of ``dst`` they would go below IDs it may hold
        already: every origin log grows with rising IDs, which replication and the state
        join rely on.)"""
        entries, last = [], None
        for eid, flat in keys[src].range(MIN_ID, MAX_ID):
            if eid != last:
                entries.append((eid, list(flat)))
                last = eid
        if dst in keys:
            yield self.delete_key(dst, keys[dst])
        if entries:
            log = self.copy_log()
            for eid, flat in entries:
                yield ops.AddEntry(dst, log, eid, flat)
        if src in keys:
            yield self.delete_key(src, keys[src])

    def install(self, keys: ops.Keyspace, dst: bytes, image: Stream, replace: bool) -> Iterator[ops.Op]:
        """An observed-remove of what ``dst`` held, the image's entries in a log of their
        own, its groups created again, its IDMP configuration (the theory above).
        A generator the handler drives: each step reads the state the previous one left."""
        if dst in keys:
            if not replace:
                return
            yield self.delete_key(dst, keys[dst])
        entries, last = [], None
        for eid, _origin, flat in image.merged(MIN_ID, MAX_ID):
            if eid != last:  # entries sharing an ID (two origins) collapse into one
                entries.append((eid, list(flat)))
                last = eid
        if entries:
            log = self.copy_log()
            for eid, flat in entries:
                yield ops.AddEntry(dst, log, eid, flat)
        for name, g in image.groups.items():
            deps, dot = self.creation()
            yield ops.CreateGroup(dst, name, g.last_id, g.entries_read, True, deps=deps, dot=dot)
        s = keys.get(dst)
        if s is None:
            return  # no entries and no groups: the key does not exist (nor its IDMP state)
        idmp = image.idmp
        if (idmp.duration, idmp.maxsize) != (s.idmp.duration, s.idmp.maxsize):
            yield ops.ConfigureIdmp(dst, idmp.duration, idmp.maxsize)

    def install_local(self, keys: ops.Keyspace, dst: bytes, image: Stream) -> None:
        """The region-local part: the image's consumers and PELs, into the groups
        :meth:`install` created (at this region only, as every delivery)."""
        s = keys.get(dst)
        if s is None:
            return
        for name, source in image.groups.items():
            g = s.groups.get(name)
            if g is not None:
                copy_consumers(source, g)

    def copy_log(self) -> int:
        """The origin log an install adds its entries to: one no operation has named yet,
        numbered after the dot of its first add (the region's number modulo the stride)."""
        r = self.rules
        return r.region + r.stride * (r.causal.vv.get(r.region, 0) + 1)

    # ------------------------------------------------------------ what the rules read
    def context(self) -> dict[int, int]:
        """A deletion's context: this region's version vector including the deletion."""
        r = self.rules
        ctx = dict(r.causal.vv)
        ctx[r.region] = ctx.get(r.region, 0) + 1
        return ctx

    def creation(self) -> tuple[dict[int, int], tuple[int, int]]:
        """An operation's dependencies (the version vector before it) and its dot."""
        r = self.rules
        deps = dict(r.causal.vv)
        return deps, (r.region, deps.get(r.region, 0) + 1)


def duplicate(s: Stream) -> Stream:
    """Redis's ``streamDup``: an independent copy of ``s``, blocks, counters, groups,
    consumers, PELs and IDMP state included.  As Redis's copy, each group's
    time-ordered PEL lists entries delivered in the same millisecond by ID; the NACK
    zone keeps its release order."""
    image = copy.deepcopy(s)
    for g in image.groups.values():
        for n, (_id, nack) in enumerate(sorted(g.pel.items(), key=_copy_order), 1):
            nack.stamp = n
        g._stamps = len(g.pel)
    return image


def _copy_order(item: tuple) -> tuple:
    """The time order a copy gives a PEL: entries XNACK released (no consumer) first, in the
    order they were released; the others by delivery time, then ID."""
    id_, nack = item
    if nack.consumer is None:
        return (0, 0, nack.stamp)
    return (1, nack.delivery_time, id_)


def copy_consumers(source: cg.ConsumerGroup, g: cg.ConsumerGroup) -> None:
    """``source``'s consumers (seen and active times) and PEL (delivery times and counts)
    into ``g``, which has none; the PEL's time order as :func:`duplicate` gives it."""
    consumers = {}
    for name, c in source.consumers.items():
        new = consumers[name] = g.consumers[name] = cg.Consumer(name, c.seen_time)
        new.active_time = c.active_time
    for id_, nack in sorted(source.pel.items(), key=_copy_order):
        owner = consumers.get(nack.consumer.name) if nack.consumer is not None else None
        new_nack = g.pel[id_] = cg.Nack(owner, nack.delivery_time, nack.delivery_count, g._stamp())
        if owner is not None:
            owner.pel[id_] = new_nack


def observed(s: Stream) -> dict[int, StreamID]:
    """The top of every origin log held (deleted entries included)."""
    return {o: top for o, log_ in s.logs.items() if (top := log_.last_any()) is not None}


def trim_cutoffs(s: Stream, spec: TrimSpec) -> dict[int, StreamID]:
    """A trim resolved into per-origin cutoffs over what is held: exact, honouring LIMIT,
    never removing an entry not seen here."""
    if spec.maxlen is not None:
        excess = s.length - spec.maxlen
    else:
        excess = s.count_between(MIN_ID, decr(spec.minid) or MIN_ID) if spec.minid not in (None, MIN_ID) else 0
    if spec.limit:
        excess = min(excess, spec.limit)
    cutoffs: dict[int, StreamID] = {}
    if excess <= 0:
        return cutoffs
    for n, (eid, origin, _flat) in enumerate(s.merged(MIN_ID, MAX_ID)):
        if n >= excess:
            break
        cutoffs[origin] = eid
    return cutoffs
