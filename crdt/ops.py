"""Operations: every replicated change to a stream key, and how it applies.

Theory of operation
-------------------
A command never mutates shared state directly when the change must reach
other regions.  It *resolves* its arguments against the current state (picks
the new entry's ID, validates options) into a fully determined operation, and
the operation is applied by :func:`apply`, pure code with no clock and no I/O.
The same operation, applied to the same state, always gives the same result,
so it can be logged, replayed after a crash, and shipped to other regions.

Region-local changes (deliveries to consumers, the PEL, XGROUP SETID,
CREATECONSUMER, DELCONSUMER) are not operations: they stay local, as in Redis Active-Active.

Which operations exist:

=================  =============================================  ===========
operation          made by                                        applies as
=================  =============================================  ===========
AddEntry           XADD (after ID choice and IDMP check)          append to the origin's log
Trim               XADD MAXLEN/MINID, XTRIM                       Redis's ``streamTrim``
DeleteEntries      XDEL, XDELEX, XACKDEL                          flag / drop those IDs
DeleteKey          DEL, UNLINK                                    drop the key
FlushKeys          FLUSHALL, FLUSHDB, ``braid-admin flush``       drop every key (one operation)
RenameKey          RENAME, RENAMENX                               move the stream to a new name
CreateGroup        XGROUP CREATE, XREADGROUP-less MKSTREAM        add the group
DestroyGroup       XGROUP DESTROY                                 drop the group
SetStreamId        XSETID                                         move last-generated-id etc.
AckWatermark       XACK (multi-region, when the watermark moves)  raise a group's per-origin watermark
ConfigureIdmp      XCFGSET / XIDMP CFGSET                         set duration/maxsize, clear maps
RecordIdmp         XIDMPRECORD                                    remember (pid, iid) -> entry ID
=================  =============================================  ===========

A flush is one operation, not one DeleteKey per key: one record in the
append-only file, one envelope on the wire, applied at once at every region, so
no reader anywhere sees half a flushed database.  In an Active-Active database
it is, key by key, exactly the observed-remove of DEL (see the multi-region
rules below): it names every key the issuer held with the top of each origin log
it had seen there, and carries one delete context for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .blocks import TrimSpec
from .causal import VersionVector, dominates, merge
from .groups import ConsumerGroup
from .ids import MIN_ID, StreamID
from .stream import Stream

if TYPE_CHECKING:
    from .idmp import IdmpState

# delete strategies (Redis 8.2: KEEPREF / DELREF / ACKED)
KEEPREF, DELREF, ACKED = "keepref", "delref", "acked"


class Keyspace(dict[bytes, Stream]):
    """key -> Stream, plus what must outlive a dropped key in an Active-Active database.

    ``active_active`` selects the database's rules: False is one Redis-compatible
    region (an emptied stream still exists, a DEL'd key starts afresh); True applies
    Redis Active-Active's rules, where a key with no entries and no groups does not exist.
    ``key_contexts[key]`` merges the contexts of every DEL of ``key`` applied here,
    ``group_contexts[(key, group)]`` those of every XGROUP DESTROY; a group creation
    survives only if its dependencies dominate both (see :func:`_create_group`).
    ``id_floor[key]`` is the highest entry ID this region has held for the key: an
    origin never mints an ID twice, even after the key was deleted, or a later
    observed-remove could take the new entry for the old one.  ``highest_added[key][o]``
    is the highest ID of an entry of origin log ``o`` this region has applied (deleted
    since or not, the key dropped since or not): an origin's log grows with rising IDs,
    so it says which of that log's entries this region has received - what joining two
    regions' states needs (crdt/join.py), and what a deletion leaves no other trace of
    (Active-Active only, as ``id_floor``).  ``idmp_kept`` keeps a dropped key's IDMP
    maps (they outlive the key, until they expire), so every region judges a late
    duplicate the same way.  :meth:`idmp_keys` indexes the keys whose stream holds IDMP
    maps, so expiry visits those and not every key.
    """

    def stream(self, key: bytes, limits: Limits) -> Stream:
        """The stream at ``key``, created if missing (with any IDMP maps it had)."""
        s = self.get(key)
        if s is None:
            s = self[key] = Stream(limits.idmp_duration, limits.idmp_maxsize)
            kept = self.idmp_kept.pop(key, None)
            if kept is not None:
                s.idmp = kept
                self.note_idmp(key)
        return s

    def __init__(self, *args, active_active: bool = False, **kw) -> None:
        super().__init__(*args, **kw)
        self.active_active = active_active
        self.key_contexts: dict[bytes, VersionVector] = {}
        self.group_contexts: dict[tuple[bytes, bytes], VersionVector] = {}
        self.id_floor: dict[bytes, StreamID] = {}
        self.highest_added: dict[bytes, dict[int, StreamID]] = {}  # key -> origin log -> ID (Active-Active)
        self.idmp_kept: dict[bytes, IdmpState] = {}  # IDMP maps of dropped keys, restored on re-creation
        self.idmp_index: set[bytes] | None = None  # see idmp_keys (None: not built yet)

    def idmp_keys(self) -> set[bytes]:
        """Keys whose stream may hold IDMP maps: every key that does, and maybe some that
        no longer do (the caller drops those).  Built from every stream on first use - a
        keyspace loaded from a snapshot or an image - then kept up to date by :func:`apply`."""
        index = getattr(self, "idmp_index", None)  # a keyspace unpickled from before the index
        if index is None:
            index = self.idmp_index = {k for k, s in self.items() if s.idmp.producers}
        return index

    def note_idmp(self, key: bytes) -> None:
        """The stream at ``key`` holds IDMP maps now."""
        index = getattr(self, "idmp_index", None)
        if index is not None:
            index.add(key)

    def top_id(self, key: bytes) -> StreamID:
        """The ID a new entry of ``key`` must exceed."""
        s = self.get(key)
        last = s.last_id if s is not None else (0, 0)
        return max(last, self.id_floor.get(key, (0, 0)))


@dataclass(slots=True)
class Limits:
    """Storage parameters a region applies operations with (its config)."""

    node_max_entries: int = 100
    node_max_bytes: int = 4096
    idmp_duration: int = 100
    idmp_maxsize: int = 100


@dataclass(slots=True)
class Op:
    key: bytes


@dataclass(slots=True)
class AddEntry(Op):
    origin: int
    id: StreamID
    fields: list
    pid: bytes | None = None
    iid: bytes | None = None
    # Multi-region IDMP: the add's dot and its issuer's version vector before it, so a
    # region can tell a concurrent duplicate (one wins) from an add made after the
    # issuer forgot the iid (both stay) - whatever its own map still remembers.
    dot: tuple | None = None
    deps: dict | None = None


@dataclass(slots=True)
class Trim(Op):
    spec: TrimSpec
    strategy: str = KEEPREF
    # Multi-region: the trim resolved at the issuing region into "remove
    # entries <= cutoff" per origin log, so it never removes what it had not seen.
    cutoffs: dict | None = None


@dataclass(slots=True)
class DeleteEntries(Op):
    ids: list
    strategy: str = KEEPREF
    # Multi-region: per ID, the origin logs it was removed from at the issuer.  Two
    # origins may hold the same ID (semi-strict and liberal modes); a region that held
    # only one of them when it deleted must not remove the other elsewhere.  None:
    # every log holding the ID (one region).
    origins: list | None = None


@dataclass(slots=True)
class DeleteKey(Op):
    # Multi-region (observed-remove): the top ID of each origin log the issuer
    # had seen, and its version vector including this operation (delete-wins
    # context for groups).  None: remove everything (one region).
    observed: dict | None = None
    context: dict | None = None


@dataclass(slots=True)
class FlushKeys(Op):
    """FLUSHALL / FLUSHDB (``key`` is unused: empty).

    Multi-region: ``observed`` maps every key the issuer held to what DeleteKey's
    ``observed`` would be for it (the top ID of each origin log it had seen), and
    ``context`` is the issuer's version vector including this operation, the
    delete-wins context of every one of those keys.  Keys it does not name are
    untouched.  None: remove every key (one region, Redis's FLUSHALL).
    """

    observed: dict | None = None
    context: dict | None = None


@dataclass(slots=True)
class RenameKey(Op):
    new_key: bytes


@dataclass(slots=True)
class RecordIdmp(Op):
    pid: bytes
    iid: bytes
    id: StreamID


@dataclass(slots=True)
class CreateGroup(Op):
    group: bytes
    last_id: StreamID
    entries_read: int
    mkstream: bool = False
    # Multi-region: the issuer's version vector before this operation, and its dot;
    # for "$", where the group starts in each origin log the issuer held (logs it had
    # not seen start from the beginning, so no entry is skipped).
    deps: dict | None = None
    dot: tuple | None = None
    cursors: dict | None = None


@dataclass(slots=True)
class DestroyGroup(Op):
    group: bytes
    context: dict | None = None  # multi-region: the issuer's version vector including this op


@dataclass(slots=True)
class AckWatermark(Op):
    """Multi-region XACK: the group read and acknowledged origin's log up to ``id``.

    ``created`` is the dot of the group's creation it was acknowledged in: when two
    regions create a group of the same name concurrently only one creation
    survives, and the other's acknowledgements must not move it (at some regions
    only, depending on what arrived first).
    """

    group: bytes
    origin: int
    id: StreamID
    created: tuple | None = None


@dataclass(slots=True)
class SetStreamId(Op):
    last_id: StreamID
    entries_added: int | None = None
    max_deleted_id: StreamID | None = None


@dataclass(slots=True)
class ConfigureIdmp(Op):
    duration: int | None = None
    maxsize: int | None = None


@dataclass(slots=True)
class Result:
    """What applying an operation did, for the reply."""

    count: int = 0
    per_id: list = field(default_factory=list)


def is_referenced(s: Stream, id_: StreamID) -> bool:
    """True if any group still has this ID pending, or has not delivered it yet."""
    for g in s.groups.values():
        if id_ in g.pel or id_ > g.last_id:
            return True
    return False


def drop_references(s: Stream, id_: StreamID) -> None:
    """DELREF: remove the ID from every group's and consumer's PEL."""
    for g in s.groups.values():
        g.ack(id_)  # also an entry XNACK released, which has no consumer


def _can_delete(s: Stream, strategy: str):
    if strategy == ACKED:
        return lambda id_: not is_referenced(s, id_)
    if strategy == DELREF:
        def delref(id_: StreamID) -> bool:
            drop_references(s, id_)
            return True
        return delref
    return None


_DEFAULT_LIMITS = Limits()  # apply's default (a region's default config)


def apply(keys: Keyspace, op: Op, limits: Limits = _DEFAULT_LIMITS) -> object:
    """Apply ``op`` to the keyspace ``keys``; returns what the reply needs."""
    s: Stream | None
    if type(op) is AddEntry:
        if op.pid is None:
            append_entry(keys, op.key, op.origin, op.id, op.fields, limits)
            return op.id
        assert op.iid is not None  # an IDMP add names its producer and its iid
        s = keys.stream(op.key, limits)
        if keys.active_active:
            note_added(keys, op.key, op.origin, op.id)  # received, even if it loses to a duplicate
            if op.pid is not None:
                held = s.idmp.lookup(op.pid, op.iid)
                if held is not None and _another_entry(s.idmp, op, held) and not _added_after(s.idmp, op):
                    return _idmp_conflict(keys, s, op, held, limits)
        s.add(op.origin, op.id, op.fields, limits.node_max_entries, limits.node_max_bytes)
        if op.pid is not None:
            s.idmp.record(op.pid, op.iid, op.id, op.dot)
            keys.note_idmp(op.key)
        return op.id
    if type(op) is DeleteKey:
        if op.observed is None:
            return keys.pop(op.key, None) is not None
        return _observed_remove_key(keys, op.key, op.observed, op.context)
    if type(op) is FlushKeys:  # returns how many keys it removed here
        if op.observed is None:
            n = len(keys)
            keys.clear()
            return n
        return _flush_keys(keys, op)
    if type(op) is RenameKey:
        stream = keys.pop(op.key, None)
        if stream is None:
            return False
        keys[op.new_key] = stream  # replaces any stream under the new name
        if stream.idmp.producers:
            keys.note_idmp(op.new_key)
        return True
    s = keys.get(op.key)
    if type(op) is CreateGroup:
        if op.deps is not None:
            return _create_group(keys, op, limits)
        if s is None:
            s = keys[op.key] = Stream(limits.idmp_duration, limits.idmp_maxsize)
        if op.group in s.groups:
            return False
        s.groups[op.group] = ConsumerGroup(op.group, op.last_id, op.entries_read)
        return True
    if type(op) is DestroyGroup and op.context is not None:
        return _destroy_group(keys, op)  # records its context even where the key is gone
    if s is None:
        return None
    if type(op) is Trim:
        if op.cutoffs is not None:
            return _remove_upto(keys, op.key, s, op.cutoffs)
        return s.trim(op.spec, _can_delete(s, op.strategy), op.strategy == KEEPREF)
    if type(op) is DeleteEntries:
        result = _delete_entries(s, op)
        if keys.active_active:
            _drop_if_empty(keys, op.key, s)
        return result
    if type(op) is DestroyGroup:
        return s.groups.pop(op.group, None) is not None
    if type(op) is AckWatermark:
        g = s.groups.get(op.group)
        if g is None or (op.created is not None and g.created_dot != op.created):
            return False
        if op.id > g.watermarks.get(op.origin, MIN_ID):
            g.watermarks[op.origin] = op.id
        return True
    if type(op) is SetStreamId:
        s.last_id = op.last_id
        if op.entries_added is not None:
            s.entries_added = op.entries_added
        if op.max_deleted_id is not None:
            s.max_deleted_id = op.max_deleted_id
        return True
    if type(op) is ConfigureIdmp:
        s.idmp.configure(op.duration, op.maxsize)
        return True
    if type(op) is RecordIdmp:
        s.idmp.record(op.pid, op.iid, op.id)
        keys.note_idmp(op.key)
        return True
    raise TypeError(f"unknown operation {op!r}")


def append_entry(keys: Keyspace, key: bytes, origin: int, id_: StreamID, fields: list, limits: Limits) -> None:
    """:func:`apply` of an :class:`AddEntry` without an IDMP producer (``pid`` None), given
    its parts: a start replaying a log of XADDs calls it once per record, without building
    the operation it would throw away."""
    s = keys.get(key)
    if s is None:
        s = keys.stream(key, limits)
    if keys.active_active:
        note_added(keys, key, origin, id_)
    s.add(origin, id_, fields, limits.node_max_entries, limits.node_max_bytes)


def note_added(keys: Keyspace, key: bytes, origin: int, id_: StreamID) -> None:
    """An entry ``id_`` of ``origin``'s log of ``key`` was applied here (Active-Active): raise
    the key's ID floor and the log's highest added ID (see :class:`Keyspace`)."""
    if id_ > keys.id_floor.get(key, MIN_ID):
        keys.id_floor[key] = id_
    tops = keys.highest_added.get(key)
    if tops is None:
        tops = keys.highest_added[key] = {}
    if id_ > tops.get(origin, MIN_ID):
        tops[origin] = id_


def touched_keys(keys: Keyspace, op: Op) -> list[bytes]:
    """The keys applying ``op`` to ``keys`` may change (asked before applying it): WATCH and
    blocked readers hear of each."""
    if type(op) is FlushKeys:
        return list(keys) if op.observed is None else list(op.observed)
    return [op.key]


def replicated_form(op: Op, result: object) -> Op:
    """The operation other regions apply for ``op``, given its result here.

    A delete under ACKED or DELREF depends on consumer groups' PELs, which are
    region-local: re-checking them elsewhere would delete an entry at one region
    and keep it at another.  So the issuing region decides, and other regions
    remove exactly the IDs it removed (their own PELs keep their references, as
    after any XDEL).
    """
    if type(op) is DeleteEntries and op.strategy != KEEPREF:
        kept = [n for n, r in enumerate(cast("list[int]", result)) if r == 1]  # _delete_entries's
        return DeleteEntries(op.key, [op.ids[n] for n in kept],
                             origins=None if op.origins is None else [op.origins[n] for n in kept])
    return op


def _delete_entries(s: Stream, op: DeleteEntries) -> list[int]:
    """Per ID: 1 deleted, -1 no such entry, 2 kept (ACKED and still referenced).

    XDEL's reply is the number of 1s; XDELEX / XACKDEL reply with the list.  As
    in Redis, the reference check comes first: an ID some group has not read
    yet is "still referenced" even when no entry has it.
    """
    out = []
    for i, id_ in enumerate(op.ids):
        if op.strategy == ACKED and is_referenced(s, id_):
            out.append(2)
            continue
        if op.strategy == DELREF:
            drop_references(s, id_)
        out.append(1 if s.delete_ids([id_], None if op.origins is None else op.origins[i]) else -1)
    return out


# ---------------------------------------------------------------- multi-region rules
# Theory: an origin's log only grows, with rising IDs, so "what the issuer had
# seen of origin o's log" is one ID, and observed-remove is "remove <= that ID
# in log o" - entries added concurrently elsewhere are above it and survive.
# Group creations carry their dependencies and deletions a context (the
# issuer's version vector including the deletion): a creation survives only if
# it happened after every deletion that applies to it (its deps dominate the
# contexts), so a concurrent creation loses: delete wins.  A key with no
# entries and no groups does not exist.  Applying these in any causal order
# gives the same entries and groups everywhere (tests/test_convergence.py).


def _added_after(idmp, op: AddEntry) -> bool:
    """Did ``op``'s issuer add it after applying the add the map holds for its iid?

    Then it is no duplicate: the issuer no longer remembered the iid (its map had
    let it go: past the producer's size or time window) and added a new entry on
    purpose, which every region keeps.  A region lets an iid go only once its add
    is causally stable (crdt/idmp.py), so a *concurrent* duplicate always finds it.
    """
    dot = idmp.dot_of(op.pid, op.iid)
    return op.deps is not None and dot is not None and op.deps.get(dot[0], 0) >= dot[1]


def _held_origin(idmp, op: AddEntry) -> int | None:
    """The origin of the entry the map holds for ``op``'s iid (None: not known)."""
    dot = idmp.dot_of(op.pid, op.iid)
    return None if dot is None else dot[0]


def _another_entry(idmp, op: AddEntry, held: StreamID) -> bool:
    """Is the entry the map holds for the iid another one than ``op`` would add?  With full
    or liberal IDs two regions may give the same ID to their adds: then the origins differ."""
    if held != op.id:
        return True
    origin = _held_origin(idmp, op)
    return origin is not None and origin != op.origin


def _idmp_conflict(keys: Keyspace, s: Stream, op: AddEntry, held: StreamID, limits: Limits) -> StreamID:
    """One (producer, iid) reached two regions concurrently, so two entries were added.

    Rule: the entry with the smaller (ID, origin) wins everywhere - the origin breaks a
    tie between equal IDs, which full and liberal IDs allow; the other is never added,
    or removed (from its own origin log) where it already was.  Every region ends with
    the same single entry and the same IDMP map, whatever the order the two additions
    arrive in.  (It holds because no region forgets an iid before every concurrent add
    of it has arrived.)
    """
    assert op.pid is not None and op.iid is not None  # only an IDMP add conflicts
    held_origin = _held_origin(s.idmp, op)
    if (held, -1 if held_origin is None else held_origin) < (op.id, op.origin):
        _drop_if_empty(keys, op.key, s)  # the loser arrives second: not added
        return held
    s.delete_ids([held], None if held_origin is None else [held_origin])  # the loser was here first
    s.add(op.origin, op.id, op.fields, limits.node_max_entries, limits.node_max_bytes)
    s.idmp.replace(op.pid, op.iid, op.id, op.dot)
    return op.id


def _remove_upto(keys: Keyspace, key: bytes, s: Stream, cutoffs: dict) -> int:
    removed = s.remove_upto(cutoffs)
    _drop_if_empty(keys, key, s)
    return removed


def _drop_if_empty(keys: Keyspace, key: bytes, s: Stream) -> None:
    if s.length == 0 and not s.groups:
        keys.pop(key, None)
        if s.idmp.producers:
            keys.idmp_kept[key] = s.idmp


def collect_garbage(keys: Keyspace, stable: VersionVector) -> int:
    """Drop the delete contexts every region has seen (``stable``, see crdt/causal.py).

    A context only decides creations concurrent with its deletion; once it is
    stable they have all been applied here, and every later creation's
    dependencies dominate it, so keeping it or not gives the same outcomes.
    Returns how many were dropped.
    """
    dropped = 0
    tables: tuple[dict[Any, VersionVector], ...] = (keys.key_contexts, keys.group_contexts)
    for table in tables:
        for k in [k for k, ctx in table.items() if dominates(stable, ctx)]:
            del table[k]
            dropped += 1
    return dropped


def _survives(deps: VersionVector, *contexts: VersionVector | None) -> bool:
    return all(ctx is None or dominates(deps, ctx) for ctx in contexts)


def _observed_remove_key(keys: Keyspace, key: bytes, observed: dict, context: dict | None) -> bool:
    """DEL of ``key`` (and a flush, key by key): entries up to ``observed`` go, groups
    created before ``context`` go; the context is kept for later creations."""
    ctx = merge(keys.key_contexts.get(key, {}), context or {})
    keys.key_contexts[key] = ctx
    s = keys.get(key)
    if s is None:
        return False
    for name in [n for n, g in s.groups.items() if not _survives(g.created_deps or {}, ctx)]:
        del s.groups[name]
    _remove_upto(keys, key, s, observed or {})
    return True


def _flush_keys(keys: Keyspace, op: FlushKeys) -> int:
    """A multi-region flush: the observed-remove of every key it names, with its one context."""
    assert op.observed is not None  # apply flushes everything itself otherwise
    return sum(_observed_remove_key(keys, key, tops, op.context) for key, tops in op.observed.items())


def _create_group(keys: Keyspace, op: CreateGroup, limits: Limits) -> bool:
    assert op.deps is not None and op.dot is not None  # a multi-region creation carries both
    if not _survives(op.deps, keys.key_contexts.get(op.key), keys.group_contexts.get((op.key, op.group))):
        return False  # a deletion this creation had not seen wins
    s = keys.stream(op.key, limits)
    current = s.groups.get(op.group)
    if current is not None and (current.created_dot or (0, 0)) >= op.dot:
        return False  # concurrent creations of one name: the higher dot wins everywhere
    g = s.groups[op.group] = ConsumerGroup(op.group, op.last_id, op.entries_read)
    g.created_deps, g.created_dot = dict(op.deps), op.dot
    if op.cursors is not None:
        g.floor = MIN_ID
        g.cursors = dict(op.cursors)
        # "$": the group is done with what the issuer held of each log, as if it had read and
        # acknowledged it - a replicated watermark, so a region that gets the group from a
        # state rather than from this operation (crdt/join.py) starts it there too
        g.watermarks = dict(op.cursors)
    return True


def _destroy_group(keys: Keyspace, op: DestroyGroup) -> bool:
    assert op.context is not None  # a multi-region destruction (apply checks)
    gk = (op.key, op.group)
    keys.group_contexts[gk] = merge(keys.group_contexts.get(gk, {}), op.context)
    s = keys.get(op.key)
    if s is None:
        return False
    g = s.groups.get(op.group)
    if g is None or _survives(g.created_deps or {}, keys.group_contexts[gk]):
        return False
    del s.groups[op.group]
    _drop_if_empty(keys, op.key, s)
    return True
