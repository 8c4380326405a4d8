"""Consumer groups: cursors, the pending entries list (PEL) and consumers.

Theory of operation
-------------------
Seed 001's model: a group has a "last delivered" cursor, a PEL mapping each
delivered-but-unacknowledged ID to a NACK (consumer, last delivery time,
delivery count), and named consumers each holding their own slice of the PEL.
Consumers and the PEL are local to a region; group existence and the
acknowledged watermark replicate (seed 003).  Times are arguments (``now``).
"""

from __future__ import annotations

from sortedcontainers import SortedDict

from .ids import MIN_ID, StreamID

ENTRIES_READ_UNKNOWN = -1  # Redis's SCG_INVALID_ENTRIES_READ


class Nack:
    __slots__ = ("consumer", "delivery_time", "delivery_count")

    def __init__(self, consumer: "Consumer", delivery_time: int, delivery_count: int = 1) -> None:
        self.consumer = consumer
        self.delivery_time = delivery_time
        self.delivery_count = delivery_count


class Consumer:
    __slots__ = ("name", "seen_time", "active_time", "pel")

    def __init__(self, name: bytes, now: int) -> None:
        self.name = name
        self.seen_time = now
        self.active_time = -1  # never active yet (Redis reports inactive -1)
        self.pel: SortedDict = SortedDict()  # StreamID -> Nack (shared with group)


class ConsumerGroup:
    __slots__ = ("name", "last_id", "entries_read", "pel", "consumers")

    def __init__(self, name: bytes, last_id: StreamID = MIN_ID,
                 entries_read: int = ENTRIES_READ_UNKNOWN) -> None:
        self.name = name
        self.last_id = last_id
        self.entries_read = entries_read
        self.pel: SortedDict = SortedDict()  # StreamID -> Nack
        self.consumers: dict[bytes, Consumer] = {}
