"""Idempotent XADD (Redis 8.6's IDMP): per-producer maps of iid -> entry ID.

Theory of operation
-------------------
Each producer (pid) owns an insertion-ordered map iid -> entry ID.  Entries
leave the map when it grows past ``maxsize`` (oldest first, at insert time) or
when their entry ID's milliseconds are more than ``duration`` seconds older than
the current time (``expire(now_ms)``, run by the server once a second).  IDs
minted with ``*`` grow with time, so insertion order is time order and expiry
stops at the first young entry.  ``auto_iid`` is IDMPAUTO's content hash: the
XOR of XXH128(field || value) over all pairs, so field order does not matter.

In an Active-Active database an iid also remembers the dot of the add that
recorded it, and leaves the map - past the size or the time window - only once
that add is causally stable (``expire(now_ms, stable)``): every region has
applied it, so every add of the same iid concurrent with it has arrived here
too and met it (crdt/ops.py's conflict rule: the smaller ID wins).  Letting it
go earlier, at a different moment at each region, made a late concurrent
duplicate a conflict at one region and a new entry at another: the regions
diverged.  The map may so exceed ``maxsize`` while a region is cut off.

For the same reason XCFGSET (``configure``) does not drop an Active-Active
map's iids at once: it marks them ``cleared``, they keep answering duplicates,
and each goes at the next ``expire`` once its add is stable.  Dropping them on
the spot let a concurrent duplicate arriving after the XCFGSET look new at that
region while the others had resolved it as a duplicate.  A map of a standalone
region (no dots) is cleared at once, as Redis does.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import xxhash

from .copying import copy_attributes
from .ids import StreamID

_M64 = (1 << 64) - 1


def _rotl64(v: int, r: int) -> int:
    return ((v << r) | (v >> (64 - r))) & _M64


def auto_iid(flat: Sequence[bytes]) -> bytes:
    """IDMPAUTO's iid, as Redis 8.6 computes it (``createIdempotencyHash``).

    Each pair is hashed with XXH3-128 over field, the field's length (8 bytes,
    little-endian: it separates field from value) and value.  The pair hashes
    are combined by both sum and XOR, so field order does not matter.  (The IDMP
    proposal describes a plain XOR; the released code strengthens it this way.)
    """
    sum_lo = sum_hi = xor_lo = xor_hi = 0
    for i in range(0, len(flat), 2):
        f, v = flat[i], flat[i + 1]
        h = xxhash.xxh3_128_intdigest(f + len(f).to_bytes(8, "little") + v)
        lo, hi = h & _M64, h >> 64
        sum_lo = (sum_lo + lo) & _M64
        sum_hi = (sum_hi + hi) & _M64
        xor_lo ^= lo
        xor_hi ^= hi
    low = sum_lo ^ _rotl64(xor_hi, 1)
    high = sum_hi ^ _rotl64(xor_lo, 1)
    return low.to_bytes(8, "little") + high.to_bytes(8, "little")


class IdmpState:
    __slots__ = ("duration", "maxsize", "producers", "iids_added", "iids_duplicates", "dots", "cleared")

    def __init__(self, duration: int = 100, maxsize: int = 100) -> None:
        self.duration = duration
        self.maxsize = maxsize
        self.producers: dict[bytes, OrderedDict[bytes, StreamID]] = {}
        self.iids_added = 0
        self.iids_duplicates = 0
        self.dots: dict[tuple[bytes, bytes], tuple[int, int]] = {}  # Active-Active: (pid, iid) -> dot of its add
        self.cleared: set[tuple[bytes, bytes]] = set()  # Active-Active: cleared by XCFGSET, go once stable

    def __deepcopy__(self, memo: dict) -> IdmpState:
        return copy_attributes(self, IdmpState(), ('duration', 'maxsize', 'producers', 'iids_added',
                                                   'iids_duplicates', 'dots', 'cleared'), memo)

    def __setstate__(self, state) -> None:
        """Snapshots made before ``dots`` existed load with none."""
        self.dots = {}
        self.cleared = set()
        for name, value in (state[1] if isinstance(state, tuple) else state).items():
            setattr(self, name, value)

    def lookup(self, pid: bytes, iid: bytes) -> StreamID | None:
        m = self.producers.get(pid)
        return None if m is None else m.get(iid)

    def dot_of(self, pid: bytes, iid: bytes) -> tuple[int, int] | None:
        return self.dots.get((pid, iid))

    def record(self, pid: bytes, iid: bytes, id_: StreamID, dot: tuple[int, int] | None = None) -> None:
        """Remember an iid's entry.  With a ``dot`` (Active-Active) the size window is
        kept by ``expire`` once the add is stable, not here."""
        m = self.producers.get(pid)
        if m is None:
            m = self.producers[pid] = OrderedDict()
        m[iid] = id_
        self.iids_added += 1
        self.cleared.discard((pid, iid))  # a new add of it: no longer what an XCFGSET cleared
        if dot is not None:
            self.dots[(pid, iid)] = dot
            return
        while len(m) > self.maxsize:
            old, _ = m.popitem(last=False)
            self.dots.pop((pid, old), None)
            self.cleared.discard((pid, old))  # gone: no longer waiting to go

    def replace(self, pid: bytes, iid: bytes, id_: StreamID, dot: tuple[int, int] | None = None) -> None:
        """Point a tracked iid at another entry (multi-region conflict rule, crdt/ops.py)."""
        self.producers[pid][iid] = id_
        if dot is not None:
            self.dots[(pid, iid)] = dot

    def expire(self, now_ms: int, stable: dict[int, int] | None = None) -> int:
        """Forget iids whose entries are older than the duration; returns how many.

        With ``stable`` (Active-Active: what every region has applied), also the
        oldest iids past ``maxsize``, and only those whose add is stable."""
        horizon = now_ms - self.duration * 1000
        dropped = 0
        if self.cleared and stable is not None:
            dropped += self._drop_cleared(stable)
        for pid in list(self.producers):
            m = self.producers[pid]
            while m:
                iid, id_ = next(iter(m.items()))
                if id_[0] >= horizon and (stable is None or len(m) <= self.maxsize):
                    break
                dot = self.dots.get((pid, iid))
                if stable is not None and dot is not None and dot[1] > stable.get(dot[0], 0):
                    break  # a concurrent add of it may still be on its way
                m.popitem(last=False)
                self.dots.pop((pid, iid), None)
                self.cleared.discard((pid, iid))
                dropped += 1
            if not m:
                del self.producers[pid]
        return dropped

    def _drop_cleared(self, stable: dict[int, int]) -> int:
        """Forget the iids an XCFGSET cleared whose adds every region has applied."""
        dropped = 0
        for pid, iid in list(self.cleared):
            dot = self.dots.get((pid, iid))
            if dot is not None and dot[1] > stable.get(dot[0], 0):
                continue  # a concurrent add of it may still be on its way
            self.cleared.discard((pid, iid))
            self.dots.pop((pid, iid), None)
            m = self.producers.get(pid)
            if m is not None and m.pop(iid, None) is not None:
                dropped += 1
                if not m:
                    del self.producers[pid]
        return dropped

    def configure(self, duration: int | None, maxsize: int | None) -> None:
        """XCFGSET: new limits, and the maps cleared - at once for iids without a dot (a
        standalone region), once stable for an Active-Active add (see the module's notes)."""
        if duration is not None:
            self.duration = duration
        if maxsize is not None:
            self.maxsize = maxsize
        for pid in list(self.producers):
            m = self.producers[pid]
            for iid in list(m):
                if (pid, iid) in self.dots:
                    self.cleared.add((pid, iid))
                else:
                    del m[iid]
            if not m:
                del self.producers[pid]

    @property
    def pids_tracked(self) -> int:
        return len(self.producers)

    @property
    def iids_tracked(self) -> int:
        return sum(len(m) for m in self.producers.values())
