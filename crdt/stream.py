"""A stream key: one entry log per origin region, merged on read.

Theory of operation
-------------------
Redis keeps one radix tree per stream.  Braid keeps one :class:`EntryLog` per
*origin region* (the region that minted the entry), as Redis Active-Active
does: an entry added at region R lives in R's log everywhere, so a
region only ever appends to its own log and the logs of other regions grow by
replication.  Reads merge the logs by ID; when two origins hold the same ID
(possible only outside strict ID mode) both entries are returned, ordered by
origin number.  With a single region there is a single log and every read is
a plain walk of it, which is what keeps single-region behaviour identical to
Redis.

The stream-wide counters are Redis's (``last-generated-id``,
``recorded-first-entry-id``, ``max-deleted-entry-id``, ``entries-added``) and
keep Redis's meaning over the merged stream.

What a stream holds in memory (:meth:`Stream.memory_bytes`, what ``maxmemory`` counts) is
its logs' own count (crdt/blocks.py, "Memory") and, for the rest, a cost per object
calibrated against ``tracemalloc``: the key's objects, each consumer group, pending entry
and consumer, each IDMP record.  It costs a few steps per log and group, not per entry.

Nothing here does I/O or reads a clock: times arrive as arguments.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from itertools import islice

from .blocks import EntryLog, TrimSpec, tagged
from .copying import copy_attributes
from .groups import ConsumerGroup
from .idmp import IdmpState
from .ids import MAX_ID, MIN_ID, StreamID, incr

# A merged entry as reads return it.
Entry = tuple[StreamID, list]

# What a stream's objects cost in memory beyond its logs' blocks (see the theory above)
STREAM_BYTES = 1500       # the Stream, its first log, its IDMP state, its place in the keyspace
GROUP_BYTES = 800         # a consumer group with no pending entry and no consumer
PENDING_BYTES = 300       # an entry of a group's pending entries list
CONSUMER_BYTES = 400      # a consumer
IDMP_RECORD_BYTES = 150   # an IDMP record (producer, iid -> entry ID)


class Stream:
    __slots__ = (
        "logs", "last_id", "first_id", "max_deleted_id", "entries_added",
        "groups", "idmp",
    )

    def __init__(self, idmp_duration: int = 100, idmp_maxsize: int = 100) -> None:
        self.logs: dict[int, EntryLog] = {}
        self.last_id: StreamID = MIN_ID
        self.first_id: StreamID = MIN_ID
        self.max_deleted_id: StreamID = MIN_ID
        self.entries_added = 0
        self.groups: dict[bytes, ConsumerGroup] = {}
        self.idmp = IdmpState(idmp_duration, idmp_maxsize)

    def __deepcopy__(self, memo: dict) -> Stream:
        return copy_attributes(self, Stream(), ('logs', 'last_id', 'first_id', 'max_deleted_id', 'entries_added',
                                                'groups', 'idmp'), memo)

    # ------------------------------------------------------------ size
    @property
    def length(self) -> int:
        total = 0  # a loop, not sum() over a generator: every read asks for this
        for log in self.logs.values():
            total += log.length
        return total

    def __len__(self) -> int:
        return self.length

    def is_empty_key(self) -> bool:
        """Multi-region rule: a key with no entries and no groups does not exist."""
        return self.length == 0 and not self.groups

    def log(self, origin: int) -> EntryLog:
        log = self.logs.get(origin)
        if log is None:
            log = self.logs[origin] = EntryLog()
        return log

    # ------------------------------------------------------------ writing
    def add(self, origin: int, id_: StreamID, flat: Sequence[bytes],
            max_entries: int, max_bytes: int) -> None:
        """Append an entry with an already validated ID."""
        self.log(origin).append(id_, flat, max_entries, max_bytes)
        self.entries_added += 1
        # compared number by number: compiled, the IDs stay unboxed (comparing the tuples boxes both)
        last, first = self.last_id, self.first_id
        if id_[0] > last[0] or (id_[0] == last[0] and id_[1] > last[1]):
            self.last_id = id_
        if first[0] == 0 and first[1] == 0:  # the stream was empty (IDs are > 0-0)
            self.first_id = id_

    def delete_ids(self, ids: Sequence[StreamID], origins: Sequence[int] | None = None) -> int:
        """XDEL: remove each ID from every log (or only from the logs of ``origins``);
        returns the number removed."""
        deleted = 0
        first_hit = False
        logs = list(self.logs.values()) if origins is None else [self.logs[o] for o in origins if o in self.logs]
        for id_ in ids:
            for log in logs:
                if log.delete(id_):
                    deleted += 1
                    if id_ > self.max_deleted_id:
                        self.max_deleted_id = id_
                    if id_ == self.first_id:
                        first_hit = True
        if deleted and (first_hit or self.length == 0):
            self._refresh_first_id()
        return deleted

    def trim(self, spec: TrimSpec, can_delete: Callable[[StreamID], bool] | None = None,
             keep_refs: bool = True) -> int:
        """XTRIM / XADD trimming, Redis's algorithm, on the merged stream.

        With one log this is exactly ``streamTrim``.  With several, MINID
        applies to each log; MAXLEN removes the oldest entries across logs
        (resolved into per-log cutoffs by ID order) - see docs/active-active.
        """
        if len(self.logs) <= 1:
            deleted = sum(log.trim(spec, can_delete, keep_refs) for log in self.logs.values())
        elif spec.minid is not None:
            deleted = sum(log.trim(spec, can_delete, keep_refs) for log in self.logs.values())
        else:
            deleted = self._trim_maxlen_merged(spec, can_delete, keep_refs)
        if self.length == 0:
            self.first_id = MIN_ID
        elif deleted:
            self._refresh_first_id()
        return deleted

    def _trim_maxlen_merged(self, spec: TrimSpec, can_delete, keep_refs) -> int:
        excess = self.length - (spec.maxlen or 0)
        if excess <= 0:
            return 0
        if spec.limit:
            excess = min(excess, spec.limit)
        cut: StreamID | None = None
        for n, (eid, _o, _f) in enumerate(self.merged(MIN_ID, MAX_ID)):
            if n == excess:
                cut = eid
                break
        cutoff = TrimSpec(minid=cut if cut is not None else MAX_ID, approx=spec.approx)
        return sum(log.trim(cutoff, can_delete, keep_refs) for log in self.logs.values())

    def remove_upto(self, cutoffs: dict[int, StreamID]) -> int:
        """Observed-remove: drop every entry <= cutoffs[o] from each origin log o."""
        removed = 0
        for origin, top in cutoffs.items():
            log = self.logs.get(origin)
            if log is not None:
                after = incr(top)
                removed += log.trim(TrimSpec(minid=after if after is not None else MAX_ID), None, True)
        if removed:
            self._refresh_first_id()
        return removed

    def _refresh_first_id(self) -> None:
        firsts = [f for f in (log.first_live() for log in self.logs.values()) if f is not None]
        self.first_id = min(firsts) if firsts else MIN_ID

    # ------------------------------------------------------------ reading
    def merged(self, start: StreamID, end: StreamID) -> Iterator[tuple[StreamID, int, list]]:
        its = [tagged(origin, log.range(start, end)) for origin, log in sorted(self.logs.items())]
        return heapq.merge(*its, key=lambda e: (e[0], e[1]))

    def range(self, start: StreamID, end: StreamID, count: int = 0) -> list[Entry]:
        """Live entries with start <= id <= end, ascending, at most count (0: all)."""
        logs = self.logs
        if len(logs) == 1:
            return next(iter(logs.values())).range_list(start, end, max(count, 0))
        # a loop, not a generator expression under islice: compiled (mypyc), that expression
        # ran the whole merge before the first ``count`` entries were taken
        out: list[Entry] = []
        for eid, _o, flat in self.merged(start, end):
            out.append((eid, flat))
            if len(out) == count:  # (count 0: never)
                break
        return out

    def revrange(self, start: StreamID, end: StreamID, count: int = 0) -> list[Entry]:
        logs = self.logs
        if len(logs) == 1:
            it = next(iter(logs.values())).revrange(start, end)
            return list(it if count <= 0 else islice(it, count))
        its = [tagged(origin, log.revrange(start, end)) for origin, log in sorted(self.logs.items(), reverse=True)]
        out: list[Entry] = []
        for eid, _o, flat in heapq.merge(*its, key=lambda e: (e[0], e[1]), reverse=True):
            out.append((eid, flat))
            if len(out) == count:  # (count 0: never)
                break
        return out

    def get(self, id_: StreamID) -> list | None:
        """The fields of a live entry with this ID (first origin wins), or None."""
        for log in self.logs.values():
            flat = log.get(id_)
            if flat is not None:
                return flat
        return None

    def count_between(self, start: StreamID, end: StreamID) -> int:
        return sum(log.contains_range_count(start, end) for log in self.logs.values())

    def first_entry(self) -> Entry | None:
        r = self.range(MIN_ID, MAX_ID, 1)
        return r[0] if r else None

    def last_entry(self) -> Entry | None:
        r = self.revrange(MIN_ID, MAX_ID, 1)
        return r[0] if r else None

    def top_id(self) -> StreamID:
        """Highest ID of a live entry, MIN_ID if none (Redis's streamLastValidID)."""
        top = MIN_ID
        for log in self.logs.values():
            t = log.last_live()
            if t is not None and t > top:
                top = t
        return top

    @property
    def node_count(self) -> int:
        return sum(log.node_count for log in self.logs.values())

    def memory_bytes(self) -> int:
        """What the stream holds in memory, estimated (see the theory above)."""
        n = STREAM_BYTES
        for log in self.logs.values():
            n += log.nbytes + log.decoded_bytes
        for g in self.groups.values():
            n += GROUP_BYTES + len(g.pel) * PENDING_BYTES + len(g.consumers) * CONSUMER_BYTES
        if self.idmp.producers:
            n += self.idmp.iids_tracked * IDMP_RECORD_BYTES
        return n
