"""A pending entries list's map: entry IDs in order, each to its NACK.

Theory of operation
-------------------
A group's PEL and each of its consumers' PELs map an entry ID to its NACK
(crdt/groups.py).  They are read in ID order (XPENDING, XCLAIM, XAUTOCLAIM, a
consumer's history, XINFO STREAM FULL, snapshots) and changed one ID at a time,
and nearly every change is at an end: XREADGROUP ``>`` delivers IDs above every
pending one, and XACK removes pending IDs, most often the oldest.

:class:`PendingMap` keeps a dict (ID -> NACK: lookups and membership) beside the
IDs in order, held as a list of sorted chunks of at most ``2 * LOAD`` IDs with
each chunk's largest ID in ``maxes`` - the layout of sortedcontainers'
``SortedList``, whose ``SortedDict`` this replaces::

    maxes   [ (9,0)            (17,3)             (40,0) ]
    chunks  [ [(1,0) .. (9,0)] [(10,0) .. (17,3)] [(18,0) .. (40,0)] ]

An ID above every other is appended to the last chunk (one comparison and a
list append); any other new ID bisects ``maxes`` for its chunk and is inserted
there.  A chunk that grows past ``2 * LOAD`` IDs is split in two; one that shrinks
below ``LOAD // 2`` is joined to its neighbour (split again if that made it too
long), and an empty one goes, so every operation stays O(log n) plus a
chunk-sized move.  A range read bisects twice and walks the chunks.  The module
is compiled with the rest of crdt/ (setup.py): a delivery's two inserts (the
group's PEL and the consumer's) cost a small part of what the pure-Python
``SortedDict`` took (bench/README.md, "Consumer-group reads").

The values are opaque here (groups.py's NACKs): the map never looks into them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from copy import deepcopy
from typing import Any

# An entry ID, kept as the Python object the caller gave (a ``(ms, seq)`` tuple): typed as
# ``StreamID`` (a fixed-length tuple), mypyc would unbox each ID on the way in and build a new
# tuple object for every list and dict it is put in.
Key = Any

LOAD = 512  # chunks hold LOAD // 2 to 2 * LOAD IDs (a lone chunk may hold fewer)


class PendingMap:
    """A map from stream ID to a value, iterated in ID order (see the module's theory)."""

    __slots__ = ("_map", "_chunks", "_maxes", "_load")

    def __init__(self, items: Iterable[tuple[Key, Any]] = (), load: int = LOAD) -> None:
        self._load = load  # (tests use small chunks, to split and join them often)
        self._map: dict[Key, Any] = {}
        self._chunks: list[list[Key]] = []
        self._maxes: list[Key] = []
        for key, value in items:
            self[key] = value

    # ------------------------------------------------------------ the dict's side
    def __len__(self) -> int:
        return len(self._map)

    def __bool__(self) -> bool:
        return bool(self._map)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __getitem__(self, key: Key) -> Any:
        return self._map[key]

    def get(self, key: Key, default: Any = None) -> Any:
        return self._map.get(key, default)

    def __setitem__(self, key: Key, value: Any) -> None:
        if key not in self._map:
            self._insert(key)
        self._map[key] = value

    def pop(self, key: Key, default: Any = None) -> Any:
        """Remove ``key`` and return its value; ``default`` when it is not in the map."""
        if key not in self._map:
            return default
        value = self._map.pop(key)
        self._remove(key)
        return value

    def __delitem__(self, key: Key) -> None:
        del self._map[key]
        self._remove(key)

    # ------------------------------------------------------------ in ID order
    def __iter__(self) -> Iterator[Key]:
        for chunk in self._chunks:
            yield from chunk

    def keys(self) -> Iterator[Key]:
        return iter(self)

    def values(self) -> Iterator[Any]:
        m = self._map
        for chunk in self._chunks:
            for key in chunk:
                yield m[key]

    def items(self) -> Iterator[tuple[Key, Any]]:
        m = self._map
        for chunk in self._chunks:
            for key in chunk:
                yield key, m[key]

    def first(self) -> Key:
        """The lowest ID (IndexError when empty)."""
        return self._chunks[0][0]

    def last(self) -> Key:
        """The highest ID (IndexError when empty)."""
        return self._maxes[-1]

    def irange(self, lo: Key, hi: Key) -> Iterator[Key]:
        """The IDs from ``lo`` to ``hi``, both included, ascending."""
        maxes = self._maxes
        chunks = self._chunks
        c = bisect_left(maxes, lo)
        if c == len(maxes):
            return
        i = bisect_left(chunks[c], lo)
        while c < len(chunks):
            chunk = chunks[c]
            while i < len(chunk):
                key = chunk[i]
                if key > hi:
                    return
                yield key
                i += 1
            c += 1
            i = 0

    # ------------------------------------------------------------ the chunks
    def _insert(self, key: Key) -> None:
        maxes = self._maxes
        chunks = self._chunks
        if not maxes:
            chunks.append([key])
            maxes.append(key)
            return
        last = len(maxes) - 1
        if key > maxes[last]:  # above every ID: the usual delivery
            chunks[last].append(key)
            maxes[last] = key
            c = last
        else:
            c = bisect_left(maxes, key)
            chunk = chunks[c]
            chunk.insert(bisect_left(chunk, key), key)
        if len(chunks[c]) > 2 * self._load:
            self._split(c)

    def _split(self, c: int) -> None:
        chunk = self._chunks[c]
        half = len(chunk) // 2
        self._chunks.insert(c + 1, chunk[half:])
        del chunk[half:]
        self._maxes.insert(c, chunk[-1])

    def _remove(self, key: Key) -> None:
        maxes = self._maxes
        chunks = self._chunks
        c = 0 if chunks[0][0] == key else bisect_left(maxes, key)  # the oldest: XACK's usual ID
        chunk = chunks[c]
        i = 0 if chunk[0] == key else bisect_left(chunk, key)
        del chunk[i]
        if not chunk:
            del chunks[c]
            del maxes[c]
            return
        if i == len(chunk):
            maxes[c] = chunk[-1]
        if len(chunk) < self._load // 2 and len(chunks) > 1:
            self._join(c)

    def _join(self, c: int) -> None:
        """Join chunk ``c`` with a neighbour (the next one, or the previous for the last)."""
        if c == len(self._chunks) - 1:
            c -= 1
        chunks = self._chunks
        maxes = self._maxes
        chunks[c].extend(chunks[c + 1])
        del chunks[c + 1]
        maxes[c] = maxes[c + 1]
        del maxes[c + 1]
        if len(chunks[c]) > 2 * self._load:
            self._split(c)

    def __eq__(self, other: object) -> bool:
        """Equal to a map (this class or a dict) holding the same IDs with equal values."""
        if isinstance(other, PendingMap):
            return self._map == other._map
        if isinstance(other, dict):
            return self._map == other
        return NotImplemented

    # ------------------------------------------------------------ copies, display
    def __deepcopy__(self, memo: dict) -> PendingMap:
        twin = PendingMap((), self._load)
        memo[id(self)] = twin
        twin._map = {key: deepcopy(value, memo) for key, value in self._map.items()}
        twin._chunks = [list(chunk) for chunk in self._chunks]
        twin._maxes = list(self._maxes)
        return twin

    def __repr__(self) -> str:
        return f"PendingMap({dict(self.items())!r})"

    def check(self) -> None:
        """Assert the layout's invariants (tests)."""
        keys = list(self)
        assert keys == sorted(self._map), "the chunks hold the dict's keys in order"
        assert len(keys) == len(set(keys)), "no ID twice"
        assert self._maxes == [chunk[-1] for chunk in self._chunks], "maxes are the chunks' last IDs"
        assert all(0 < len(chunk) <= 2 * self._load for chunk in self._chunks), "chunk sizes"
        assert len(self._chunks) < 2 or all(len(chunk) >= self._load // 2 for chunk in self._chunks), \
            "no small chunk beside others"
