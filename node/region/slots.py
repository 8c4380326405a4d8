"""Hash slots and the slot map: which shard of a region holds a key.

Theory of operation.  A sharded database splits its keys over shards by Redis Cluster's
rule: the slot of a key is CRC16 (CCITT/XMODEM) of the key modulo 16,384, taken over
the part between the first ``{`` and the next ``}`` when that part is not empty (a hash
tag: ``{user1}.orders`` and ``{user1}.audit`` share a slot).  The *slot map* gives each
shard a set of slot ranges; it is a database-wide setting, the same in every region, so
shard *k* of every region holds exactly the same keys and replicates with shard *k* of
the others only (docs/sharding.md).  Its digest travels in the replication handshake:
two shards with different maps, or of different numbers, never exchange an operation.

Pure: no I/O, no clock.  ``binascii.crc_hqx`` is the CRC the slot function needs (the
CCITT polynomial 0x1021; XMODEM starts it from 0).
"""

from __future__ import annotations

import hashlib
from binascii import crc_hqx
from dataclasses import dataclass

SLOTS = 16384


def key_slot(key: bytes) -> int:
    """Redis Cluster's slot of ``key`` (its ``keyHashSlot``)."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:  # an empty tag ("{}") hashes the whole key
            key = key[start + 1:end]
    return crc_hqx(key, 0) & (SLOTS - 1)


def parse_ranges(text: str) -> list[tuple[int, int]]:
    """``"0-8191"`` or ``"0-99,200-300,7"``: a shard's slot ranges (ValueError if malformed)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            start, end = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"{text!r} is not a list of slot ranges such as \"0-8191\"") from None
        if not 0 <= start <= end < SLOTS:
            raise ValueError(f"slot range {part!r} must lie within 0-{SLOTS - 1}, its start not after its end")
        out.append((start, end))
    return out


def format_ranges(ranges: list[tuple[int, int]]) -> str:
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def even_ranges(count: int) -> list[list[tuple[int, int]]]:
    """Equal contiguous ranges for ``count`` shards (the default map)."""
    bounds = [SLOTS * k // count for k in range(count + 1)]
    return [[(bounds[k], bounds[k + 1] - 1)] for k in range(count)]


@dataclass(frozen=True, slots=True)
class SlotMap:
    """Which shard owns which slots: ``ranges[k]`` are shard k's."""

    ranges: tuple[tuple[tuple[int, int], ...], ...] = (((0, SLOTS - 1),),)

    @classmethod
    def even(cls, count: int) -> SlotMap:
        return cls(tuple(tuple(r) for r in even_ranges(count)))

    @classmethod
    def of(cls, shards: list[list[tuple[int, int]]]) -> SlotMap:
        """A map from each shard's ranges; ValueError unless every slot has exactly one owner."""
        owner = [-1] * SLOTS
        for k, ranges in enumerate(shards):
            if not ranges:
                raise ValueError(f"shard {k} owns no slot")
            for a, b in ranges:
                for s in range(a, b + 1):
                    if owner[s] >= 0:
                        raise ValueError(f"slot {s} belongs to shards {owner[s]} and {k}")
                    owner[s] = k
        if -1 in owner:
            raise ValueError(f"slot {owner.index(-1)} belongs to no shard: the map must cover 0-{SLOTS - 1}")
        return cls(tuple(tuple(sorted(r)) for r in shards))

    @property
    def count(self) -> int:
        return len(self.ranges)

    @property
    def sharded(self) -> bool:
        return len(self.ranges) > 1

    def owners(self) -> bytes:
        """Per slot, its shard's number (a table: one lookup per routed key)."""
        table = bytearray(SLOTS)
        for k, ranges in enumerate(self.ranges):
            for a, b in ranges:
                table[a:b + 1] = bytes([k]) * (b - a + 1)
        return bytes(table)

    def digest(self) -> str:
        """What the replication handshake compares: empty for one shard (an unsharded region
        and a region of a release before shards agree), else a hash of the ranges."""
        if not self.sharded:
            return ""
        text = ";".join(format_ranges(list(r)) for r in self.ranges)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> list[str]:
        """Each shard's ranges as the cluster file writes them."""
        return [format_ranges(list(r)) for r in self.ranges]
