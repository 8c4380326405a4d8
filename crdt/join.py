"""Joining two regions' states: the state delivering every operation of both would give (pure).

Theory of operation
-------------------
Replication is operation based (crdt/causal.py), and it needs the operations: two
regions partitioned longer than their backlogs each dropped operations the other
lacks, and a full-resync image would overwrite one side's acknowledged writes.  But
a region's state is the result of a causally closed set of operations - those at or
below its version vector - and the union of two such sets is causally closed too.
:func:`join` computes, from the two states alone, the state applying that union (in
any causal order) gives: ``join(state(A), state(B)) == state(ops(A) | ops(B))`` for
the replicated part (:func:`replicated_view`).  What is region-local - consumers,
PELs, a group's own cursors and last-delivered ID, XSETID's counters, IDMP statistics
- stays the receiving region's, ``a``'s; only the replicated part is joined.

Why each part joins the way it does:

- **Version vectors**: the union of the two sets of operations is their pointwise
  maximum.

- **Entries**, per key and origin log.  An origin's log is append-only with rising
  IDs, delivered in order (FIFO per origin), so what a region has *received* of a
  log is every entry up to one ID: ``Keyspace.highest_added[key][origin]``, the
  highest ID of an entry of that log it ever applied.  Deleted entries count, and it
  outlives the key: a key with no entries and no groups does not exist, and nothing
  else in the state remembers what its logs held.  It is the one piece of metadata
  the join needed added to the state (kept by crdt/ops.py's ``apply``).  Every deletion - DEL
  and RENAME's source, FLUSH, XDEL, a trim's cutoffs - is observed-remove: it removes only
  entries its issuer had received, so it is applied after their addition everywhere, and it
  removes them for good.  Hence an entry is in the union's state exactly when it is live at one
  side and, at the other, live too or never received (above that side's top): an
  entry the other side received and no longer holds was deleted by an operation of
  the union.  An entry neither side received cannot be in either state.  The join
  starts from ``a``'s logs (their blocks and deletion flags, as delivery would leave
  them), deletes what ``b`` deleted, and appends ``b``'s entries above ``a``'s top:
  they are above every ID ``a``'s log holds, so the log stays ordered.

- **Idempotent adds** (IDMP).  Two adds of one (producer, iid) at two regions that
  had not met each other's are a conflict: the smaller (ID, origin) wins everywhere
  and the other entry goes (crdt/ops.py).  A state keeps, per iid, the entry and the
  dot of its add.  When both sides hold an iid for different adds: if neither side
  received the other's add (the version vectors say so from the dots), the join
  resolves the conflict by the same rule and removes the loser's entry; if one side
  received both, its answer is the union's (the later add of an iid its issuer had
  forgotten replaces it; a concurrent one met the rule there).  An iid only one side
  holds is taken if the other never received its add, and left out if it did (that
  side let it go: IDMP expiry is each region's own).  An iid without a dot
  (XIDMPRECORD) cannot be judged: the join keeps ``a``'s and takes ``b``'s others.
  The maps outlive their key (``Keyspace.idmp_kept``), so they join by key name
  whether the key exists or not.  ``cleared`` (an XCFGSET's marks) is kept for an iid
  if a side holding the same add had it marked.

- **Consumer groups**: delete-wins.  A creation survives only if its dependencies
  dominate every delete context of its key and group (DEL, FLUSH, XGROUP DESTROY);
  of two surviving creations of one name the higher dot wins.  The union's winner is
  always one of the two sides' current groups: had a side's winner lost in the
  union to a context the other side brought, the union's winner - which survives
  that context, so came after it - would have brought it to that side too.  So the
  contexts are merged (pointwise maximum, per key and per (key, group)) and each
  side's group is checked against them.  A context one side already collected
  (``collect_garbage``: causally stable) cannot matter: every creation concurrent
  with it had reached that side, and lost there.  When ``a``'s group wins it is kept with its
  local state; a group ``b`` created, new at ``a``, starts as delivering its creation
  would start it: no consumers, no PEL, every log from its floor.  XACK watermarks
  are max-registers per (group creation, origin log): merged when both sides hold
  the same creation.  A ``$`` creation is itself such a watermark (crdt/ops.py sets
  it from the creation's per-log starting points), so a group new at ``a`` skips
  what its creator had seen, exactly as its creation does where it is applied.

- **Key existence**: a key exists when, after the join, it has entries or groups.

- **Metadata**: delete contexts merge (pointwise maximum; the union's contexts are
  the merge of every deletion's), ``id_floor`` and ``highest_added`` are maxima.

- **Counters** (last-generated-id, max-deleted-entry-id, entries-added,
  recorded-first-entry-id) are each region's Redis bookkeeping of what it applied, in
  the order it applied it: they do not converge under operation delivery either (a
  key dropped and created again starts them afresh; XSETID stays local).  The join
  moves ``a``'s as delivering ``b``'s operations would, as far as the states show:
  every entry appended counts as an add, last-generated-id rises to the top of every
  log ``b`` received more of (deleted entries included), every entry removed raises
  max-deleted-entry-id, and recorded-first-entry-id is the first live entry.  A key
  ``a`` does not hold starts from zero, as a key those adds create would.

What the join cannot do from today's state (listed, not guessed):

- IDMP configuration (XCFGSET's duration and maxsize) is a register without a
  version: which side set it last is not known, and concurrent XCFGSETs do not
  converge under delivery either.  The join keeps ``a``'s (``b``'s for a key ``a``
  never held).
- A group new at ``a`` starts from ``b``'s floor: its creation's, unless an XGROUP
  SETID at ``b`` (region-local) moved it.  Its last-delivered ID is that floor and
  its entries-read unknown (a creation's own values are not kept apart).
- A state written before ``highest_added`` existed (a snapshot or an image of an older
  version; node/persistence/stateformat.py carries it since) knows only the stored tops of its logs: an entry it deleted
  whose block is gone, or whose key is gone, looks never received and comes back.
  Likewise a ``$`` group created before its creation set a watermark starts, new at
  ``a``, from the beginning of every log.
- Everything above rests on each origin log growing with rising IDs.  COPY and RENAME
  keep it: they add the source's entries, with their IDs, to an origin log of their
  own (crdt/resolve.py), not below the IDs the region's own log of the destination
  may hold.

Where it runs: a replication link whose two ends both dropped from their backlogs
operations the other lacks exchanges images, and each end joins the other's into its
own (node/activeactive/hub.py, ``RegionCore.join_image``); the simulation and the
Hypothesis state machine drive the same path.  Its cost is in proportion to what
differs: a block of ``a``'s that ``b`` holds byte for byte is passed without being
decoded, and ``b``'s blocks that ``a`` never received are copied whole.

Nothing here does I/O or reads a clock; neither input is changed.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from .causal import VersionVector, dominates, merge
from .groups import ENTRIES_READ_UNKNOWN, ConsumerGroup
from .idmp import IdmpState
from .ids import MAX_ID, MIN_ID, StreamID, incr
from .ops import Keyspace, Limits
from .stream import Stream

Dot = tuple[int, int]
LogEntry = tuple[int, StreamID]  # (origin log, entry ID)


@dataclass(slots=True)
class RegionState:
    """What a region's replicated state is made of: its keyspace and its version vector."""

    keys: Keyspace
    vv: VersionVector


_DEFAULT_LIMITS = Limits()  # join's default (a region's default config)


def join(a: RegionState, b: RegionState, limits: Limits = _DEFAULT_LIMITS) -> RegionState:
    """The state of region ``a`` had it applied every operation ``b`` applied too (the
    module's theory); ``limits`` are ``a``'s (node sizes of the blocks it appends to)."""
    if not (a.keys.active_active and b.keys.active_active):
        raise ValueError("only Active-Active states join: a single region's deletions leave no trace")
    keys = Keyspace(active_active=True)
    keys.key_contexts = _merged_vectors(a.keys.key_contexts, b.keys.key_contexts)
    keys.group_contexts = _merged_vectors(a.keys.group_contexts, b.keys.group_contexts)
    keys.id_floor = _max_ids(a.keys.id_floor, b.keys.id_floor)
    for key in _ordered_union(a.keys.highest_added, b.keys.highest_added):
        keys.highest_added[key] = _max_ids(a.keys.highest_added.get(key, {}), b.keys.highest_added.get(key, {}))
    for key in _ordered_union(a.keys, b.keys, a.keys.idmp_kept, b.keys.idmp_kept):
        _join_key(keys, key, a, b, limits)
    return RegionState(keys, merge(a.vv, b.vv))


def replicated_view(state: RegionState) -> dict:
    """The replicated part of a state, as plain data that compares equal exactly when two
    states agree on it: the version vector; per key, each origin log's live entries and
    each group's creation (dot, dependencies), floor and XACK watermarks; per key (live
    or dropped), its IDMP configuration and maps (iid -> entry ID, the add's dot, the
    iids an XCFGSET cleared); the delete contexts, ID floors and highest added IDs."""
    keys = state.keys
    streams = {}
    for key in sorted(keys):
        s = keys[key]
        logs = {o: [(eid, [bytes(x) for x in flat]) for eid, flat in log.range(MIN_ID, MAX_ID)]
                for o, log in sorted(s.logs.items()) if log.length}
        groups = {name: (g.created_dot, _sorted_vector(g.created_deps), g.floor, sorted(g.watermarks.items()))
                  for name, g in sorted(s.groups.items())}
        streams[key] = (logs, groups)
    idmp = {}
    for key in sorted(set(keys) | set(keys.idmp_kept)):
        st = _idmp_of(keys, key)
        if st is None or key not in keys and not st.producers:
            continue
        maps = {pid: dict(m) for pid, m in sorted(st.producers.items()) if m}
        held = {(pid, iid) for pid, m in maps.items() for iid in m}
        idmp[key] = (st.duration, st.maxsize, maps, {k: d for k, d in sorted(st.dots.items()) if k in held},
                     sorted(k for k in st.cleared if k in held))
    return {
        "vv": _sorted_vector(state.vv),
        "streams": streams,
        "idmp": idmp,
        "key_contexts": {k: _sorted_vector(v) for k, v in sorted(keys.key_contexts.items())},
        "group_contexts": {k: _sorted_vector(v) for k, v in sorted(keys.group_contexts.items())},
        "id_floor": dict(sorted(keys.id_floor.items())),
        "highest_added": {k: dict(sorted(t.items())) for k, t in sorted(keys.highest_added.items()) if t},
    }


# ---------------------------------------------------------------- one key
def _join_key(keys: Keyspace, key: bytes, a: RegionState, b: RegionState, limits: Limits) -> None:
    """Put ``key``'s joined stream in ``keys`` (or its IDMP maps only, when it has neither
    entries nor groups)."""
    sa, sb = a.keys.get(key), b.keys.get(key)
    idmp, losers = _join_idmp(_idmp_of(a.keys, key), _idmp_of(b.keys, key), a.vv, b.vv)
    if sa is None and sb is None:
        if idmp is not None and idmp.producers:
            keys.idmp_kept[key] = idmp
        return
    tops_a, tops_b = _received_tops(a.keys, key), _received_tops(b.keys, key)
    s = copy.deepcopy(sa) if sa is not None else Stream()
    _remove_deleted(s, sb, tops_b, losers)
    _append_unreceived(s, sb, tops_a, losers, limits)
    for origin, top in tops_b.items():
        if top > tops_a.get(origin, MIN_ID) and top > s.last_id:
            s.last_id = top  # an add ``a`` never received, even one deleted since, moves it
    firsts = [f for f in (log.first_live() for log in s.logs.values()) if f is not None]
    s.first_id = min(firsts) if firsts else MIN_ID
    s.groups = _join_groups(keys, key, s.groups, sb.groups if sb is not None else {})
    if idmp is not None:
        s.idmp = idmp
    if s.length == 0 and not s.groups:
        if s.idmp.producers:
            keys.idmp_kept[key] = s.idmp
        return
    keys[key] = s


def _received_tops(keys: Keyspace, key: bytes) -> dict[int, StreamID]:
    """Per origin log of ``key``, the highest ID this state received (``highest_added``;
    for a state without it, the top its logs still store)."""
    tops = dict(keys.highest_added.get(key, {}))
    s = keys.get(key)
    if s is not None:
        for origin, log in s.logs.items():
            last = log.last_any()
            if last is not None and last > tops.get(origin, MIN_ID):
                tops[origin] = last
    return tops


def _remove_deleted(s: Stream, sb: Stream | None, tops_b: dict[int, StreamID], losers: set[LogEntry]) -> None:
    """Delete from ``s`` (a copy of ``a``'s stream) every entry ``b`` received and no longer
    holds, and every entry that lost an IDMP conflict the join resolved.

    Block by block: where ``b`` holds the very same block - the same entries with the same
    deletion marks, as two regions that appended one origin's log alike do - ``b`` deleted
    nothing of it that ``a`` holds, and the block is passed without being decoded.  (Counting
    would not do: a block ``a`` got from an earlier join lacks the entries deleted before
    it, so the same count can stand for other entries.)"""
    for origin, log in s.logs.items():
        top_b = tops_b.get(origin, MIN_ID)
        theirs_log = sb.logs.get(origin) if sb is not None else None
        suspects = sorted(eid for o, eid in losers if o == origin)
        gone = []
        for block in list(log.blocks):
            if block.first > top_b:
                break  # never received by ``b``: nothing there could have deleted them
            if theirs_log is not None and not (suspects and suspects[0] <= block.last and suspects[-1] >= block.first):
                if theirs_log.holds_block(block):
                    continue  # ``b`` deleted none of them
            gone += _deleted_in(log, theirs_log, block.first, min(block.last, top_b), origin, losers)
        gone += [eid for eid in suspects if eid > top_b]  # losers ``b`` never received
        if gone:
            s.delete_ids(gone, [origin])


def _deleted_in(log, theirs_log, first: StreamID, last: StreamID, origin: int, losers: set[LogEntry]) -> list:
    """The live IDs of ``log`` from ``first`` to ``last`` that ``theirs_log`` (which received
    all of them) no longer holds, or that lost an IDMP conflict."""
    theirs = iter(theirs_log.range(first, last)) if theirs_log is not None else iter(())
    their = next(theirs, None)
    gone = []
    for eid, _flat in log.range(first, last):
        if (origin, eid) in losers:
            gone.append(eid)
            continue
        while their is not None and their[0] < eid:
            their = next(theirs, None)
        if their is None or their[0] != eid:
            gone.append(eid)
    return gone


def _append_unreceived(s: Stream, sb: Stream | None, tops_a: dict[int, StreamID], losers: set[LogEntry],
                       limits: Limits) -> None:
    """Append to ``s`` ``b``'s live entries that ``a`` never received (above ``a``'s top of
    their log, so above every ID ``a``'s log holds), but IDMP conflict losers."""
    if sb is None:
        return
    for origin, log in sb.logs.items():
        start = incr(tops_a[origin]) if origin in tops_a else MIN_ID
        if start is None:
            continue  # ``a`` received up to the highest ID there is
        suspects = any(o == origin for o, _eid in losers)
        for block in log.blocks:
            if block.last < start:
                continue
            if block.first >= start and not block.dead and not suspects:
                # a whole block of live entries: copied as it is (what adding them one by one
                # would give, but for where the blocks split)
                s.log(origin).append_block(block)
                s.entries_added += block.live
                if block.last > s.last_id:
                    s.last_id = block.last
                continue
            for eid, flat in log.range(max(start, block.first), block.last):
                if (origin, eid) not in losers:
                    s.add(origin, eid, list(flat), limits.node_max_entries, limits.node_max_bytes)


# ---------------------------------------------------------------- consumer groups
def _join_groups(keys: Keyspace, key: bytes, mine: dict[bytes, ConsumerGroup],
                 theirs: dict[bytes, ConsumerGroup]) -> dict[bytes, ConsumerGroup]:
    """Per group name, the creation that survives every merged delete context, the higher
    dot of two; ``mine`` are ``a``'s groups (a copy: their local state is kept)."""
    key_context = keys.key_contexts.get(key)
    out: dict[bytes, ConsumerGroup] = {}
    for name in _ordered_union(mine, theirs):
        ga, gb = mine.get(name), theirs.get(name)
        group_context = keys.group_contexts.get((key, name))
        alive = [g for g in (ga, gb) if g is not None and _survives(g, key_context, group_context)]
        if not alive:
            continue
        winner = max(alive, key=_creation_order)  # ``a``'s first: it stays on a tie
        if winner is ga:
            if gb is not None and gb.created_dot == ga.created_dot:
                for origin, mark in gb.watermarks.items():
                    if mark > ga.watermarks.get(origin, MIN_ID):
                        ga.watermarks[origin] = mark
            out[name] = ga
        else:
            out[name] = _created_here(winner)
    return out


def _creation_order(g: ConsumerGroup) -> Dot:
    return g.created_dot or (0, 0)


def _survives(g: ConsumerGroup, *contexts: VersionVector | None) -> bool:
    deps = g.created_deps or {}
    return all(ctx is None or dominates(deps, ctx) for ctx in contexts)


def _created_here(gb: ConsumerGroup) -> ConsumerGroup:
    """``b``'s group as its creation starts it at a region that had not read it: the
    replicated parts only (creation, floor, watermarks), nothing of ``b``'s readers."""
    g = ConsumerGroup(gb.name, gb.floor, ENTRIES_READ_UNKNOWN)
    g.created_deps = dict(gb.created_deps) if gb.created_deps is not None else None
    g.created_dot = gb.created_dot
    g.watermarks = dict(gb.watermarks)
    return g


# ---------------------------------------------------------------- IDMP
def _idmp_of(keys: Keyspace, key: bytes) -> IdmpState | None:
    """The key's IDMP state: its stream's, or the one kept since the key was dropped."""
    s = keys.get(key)
    if s is not None:
        return s.idmp
    kept = keys.idmp_kept.get(key)
    return kept if isinstance(kept, IdmpState) else None


def _received(vv: VersionVector, dot: Dot | None) -> bool:
    return dot is not None and vv.get(dot[0], 0) >= dot[1]


def _join_idmp(ia: IdmpState | None, ib: IdmpState | None, vva: VersionVector,
               vvb: VersionVector) -> tuple[IdmpState | None, set[LogEntry]]:
    """The joined IDMP state of one key (None: neither side has one), and the entries of the
    conflicts it resolved that lost (the module's theory)."""
    if ia is None and ib is None:
        return None, set()
    base = ia if ia is not None else ib
    assert base is not None
    out = IdmpState(base.duration, base.maxsize)
    out.iids_added, out.iids_duplicates = base.iids_added, base.iids_duplicates
    empty = IdmpState()
    side_a, side_b = ia if ia is not None else empty, ib if ib is not None else empty
    losers: set[LogEntry] = set()
    for pid in _ordered_union(side_a.producers, side_b.producers):
        ma: dict[bytes, StreamID] = side_a.producers.get(pid) or {}
        mb: dict[bytes, StreamID] = side_b.producers.get(pid) or {}
        joined: OrderedDict[bytes, StreamID] = OrderedDict()
        for iid in _ordered_union(ma, mb):
            xa, xb = ma.get(iid), mb.get(iid)
            da, db = side_a.dots.get((pid, iid)), side_b.dots.get((pid, iid))
            chosen: tuple[StreamID, Dot | None]
            if xa is not None and xb is not None and (xa, da) != (xb, db) and da is not None and db is not None:
                a_has_b, b_has_a = _received(vva, db), _received(vvb, da)
                if not a_has_b and not b_has_a:  # concurrent adds neither side met: the smaller wins
                    if (xb, db[0]) < (xa, da[0]):
                        losers.add((da[0], xa))
                        chosen = (xb, db)
                    else:
                        losers.add((db[0], xb))
                        chosen = (xa, da)
                else:  # a side that applied both adds holds the union's answer
                    chosen = (xb, db) if b_has_a and not a_has_b else (xa, da)
            elif xa is not None:
                chosen = (xa, da)  # ``b`` holds the same, never received it, or let it go
            elif xb is not None and not _received(vva, db):
                chosen = (xb, db)  # ``a`` never received it (or, without a dot, cannot tell)
                out.iids_added += 1
            else:
                continue  # ``a`` received it and let it go
            joined[iid] = chosen[0]
            if chosen[1] is not None:
                out.dots[(pid, iid)] = chosen[1]
            if any((m.get(iid), st.dots.get((pid, iid))) == chosen and (pid, iid) in st.cleared
                   for m, st in ((ma, side_a), (mb, side_b))):
                out.cleared.add((pid, iid))
        if joined:
            out.producers[pid] = joined
    return out, losers


# ---------------------------------------------------------------- small helpers
def _ordered_union(*tables: Iterable) -> list:
    """The keys of every table, each once, in the order first seen (``a``'s before ``b``'s)."""
    out: dict = {}
    for table in tables:
        for k in table:
            out.setdefault(k, None)
    return list(out)


def _merged_vectors(a: dict, b: dict) -> dict:
    return {k: merge(a.get(k, {}), b.get(k, {})) for k in _ordered_union(a, b)}


def _max_ids(a: dict, b: dict) -> dict:
    return {k: max(a.get(k, MIN_ID), b.get(k, MIN_ID)) for k in _ordered_union(a, b)}


def _sorted_vector(vv: VersionVector | None) -> list | None:
    return None if vv is None else sorted((o, n) for o, n in vv.items() if n)
