"""Idempotent XADD (seed 002): per-producer maps of iid -> entry ID.

Theory of operation
-------------------
Each producer (pid) owns an insertion-ordered map iid -> entry ID.  Entries
leave the map when it grows past ``maxsize`` (oldest first, at insert time) or
when their entry ID's milliseconds are more than ``duration`` seconds older than
the current time (``expire(now_ms)``, run by the server once a second).  IDs
minted with ``*`` grow with time, so insertion order is time order and expiry
stops at the first young entry.  ``auto_iid`` is IDMPAUTO's content hash: the
XOR of XXH128(field || value) over all pairs, so field order does not matter.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import xxhash

from .ids import StreamID


_M64 = (1 << 64) - 1


def _rotl64(v: int, r: int) -> int:
    return ((v << r) | (v >> (64 - r))) & _M64


def auto_iid(flat: Sequence[bytes]) -> bytes:
    """IDMPAUTO's iid, as Redis 8.6 computes it (``createIdempotencyHash``).

    Each pair is hashed with XXH3-128 over field, the field's length (8 bytes,
    little-endian: it separates field from value) and value.  The pair hashes
    are combined by both sum and XOR, so field order does not matter.  (Seed 002
    describes a plain XOR; the released code strengthens it this way.)
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
    __slots__ = ("duration", "maxsize", "producers", "iids_added", "iids_duplicates")

    def __init__(self, duration: int = 100, maxsize: int = 100) -> None:
        self.duration = duration
        self.maxsize = maxsize
        self.producers: dict[bytes, OrderedDict[bytes, StreamID]] = {}
        self.iids_added = 0
        self.iids_duplicates = 0

    def lookup(self, pid: bytes, iid: bytes) -> StreamID | None:
        m = self.producers.get(pid)
        return None if m is None else m.get(iid)

    def record(self, pid: bytes, iid: bytes, id_: StreamID) -> None:
        m = self.producers.get(pid)
        if m is None:
            m = self.producers[pid] = OrderedDict()
        m[iid] = id_
        self.iids_added += 1
        while len(m) > self.maxsize:
            m.popitem(last=False)

    def replace(self, pid: bytes, iid: bytes, id_: StreamID) -> None:
        """Point a tracked iid at another entry (multi-region conflict rule, crdt/ops.py)."""
        self.producers[pid][iid] = id_

    def expire(self, now_ms: int) -> int:
        """Forget iids whose entries are older than the duration; returns how many."""
        horizon = now_ms - self.duration * 1000
        dropped = 0
        for pid in list(self.producers):
            m = self.producers[pid]
            while m:
                iid, id_ = next(iter(m.items()))
                if id_[0] >= horizon:
                    break
                m.popitem(last=False)
                dropped += 1
            if not m:
                del self.producers[pid]
        return dropped

    def configure(self, duration: int | None, maxsize: int | None) -> None:
        if duration is not None:
            self.duration = duration
        if maxsize is not None:
            self.maxsize = maxsize
        self.producers.clear()

    @property
    def pids_tracked(self) -> int:
        return len(self.producers)

    @property
    def iids_tracked(self) -> int:
        return sum(len(m) for m in self.producers.values())
