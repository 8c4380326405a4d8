"""A replication link's outbox: the frames it writes, data bounded by bytes and the latest ack
in a slot of its own.

Theory of operation
-------------------
Writing never blocks reading.  Each link has an :class:`Outbox`: the data frames
in order, bounded by bytes (the sender waits for room: backpressure), and one
slot for the latest Ack.  An ack only raises a value, so a newer one replaces an
older one and putting it never waits; the writer sends it before the next data
frame (alternating with data, so neither starves).  A receiver therefore never
waits for its own sender's queue, and two regions catching up at once cannot
stop each other.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from node.activeactive.pacing import ACK_INTERVAL, LAZY_ACK_FACTOR, RELAY_ACKS_PER_DELAY, RELAY_DELAY, AckPace
from proto import replication_pb2

# protoc's generated module builds its message classes at run time and ships no type stubs
# (proto/build.py writes no .pyi): to a type checker its messages are Any
pb: Any = replication_pb2

OUTBOX_FRAMES = 4       # the sender waits once this many frame budgets are queued


class Outbox:
    """What a link writes: data frames in order, bounded by bytes (:meth:`put` waits for
    room), and the latest Ack in a slot of its own (:meth:`put_ack` replaces it, never waits).

    The writer (:meth:`get`) sends a waiting ack before the next data frame, but never two
    acks in a row while data waits, so neither direction of the link starves the other."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # bytes of queued data frames before put() waits
        self.frames: deque[tuple[pb.Frame, int]] = deque()
        self.queued = 0
        # what builds the ack to send next, called when it leaves (Link.acknowledge: most acks
        # put are replaced before they leave, so their version vector is read only then)
        self.ack: Callable[[], pb.Frame] | None = None
        self.closed = False
        self._ack_turn = True
        self.ack_interval = ACK_INTERVAL  # the link sets both from its settings (Pacing)
        self.relay_delay = RELAY_DELAY
        self._ack_at = float("-inf")  # when the last ack was handed to the writer
        self._holding_ack = False  # the writer waits for the ack's pace to allow it (see get)
        self._ack_waiting = False  # an ack was put and not yet sent
        self._ack_pace = AckPace.PARTS  # ...and how long it may wait (see put_ack)
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    async def put(self, frame: pb.Frame) -> None:
        """Queue a data frame, waiting while the queue holds ``capacity`` bytes or more."""
        while self.queued >= self.capacity and not self.closed:
            self._room.clear()
            await self._room.wait()
        if self.closed:
            return  # the link is over: the sender is being stopped
        size = frame.ByteSize()
        self.frames.append((frame, size))
        self.queued += size
        self._readable.set()

    def put_ack(self, build: Callable[[], pb.Frame], pace: AckPace = AckPace.PARTS) -> None:
        """Make the ack ``build`` returns (called when it leaves) the ack to send next,
        replacing one not yet sent (acks only raise a value).
        ``pace``: how long after the previous ack it may leave (:meth:`ack_wait`); when an
        ack was already waiting, the sooner of the two paces holds (the newer ack says all
        the older said).  A writer holding an ack back until its pace allows it is not woken
        (it would only wait again), unless the pace is now a sooner one."""
        self.ack = build
        if self._ack_waiting and self._ack_pace <= pace:
            pace = self._ack_pace
        hurry = pace < self._ack_pace
        self._ack_pace = pace
        self._ack_waiting = True
        if not self._holding_ack or hurry:
            self._readable.set()

    def ack_wait(self, pace: AckPace) -> float:
        """Seconds an ack of that pace waits after the previous ack (see :class:`AckPace`)."""
        if pace == AckPace.WAITED:
            return 0.0
        if pace == AckPace.PARTS:
            return self.ack_interval
        lazy = self.ack_interval * LAZY_ACK_FACTOR
        if pace == AckPace.LAZY:
            return lazy
        return min(lazy, max(self.ack_interval, self.relay_delay / RELAY_ACKS_PER_DELAY))

    def close(self) -> None:
        """End the link: the writer gets None, a waiting sender returns."""
        self.closed = True
        self._readable.set()
        self._room.set()

    def backlogged(self) -> bool:
        """Are data frames waiting for the peer to read?"""
        return bool(self.frames)

    async def get(self) -> pb.Frame | None:
        """The next frame to write; None once the link is closed."""
        while not self.closed:
            if self.ack is not None and (self._ack_turn or not self.frames):
                now = time.monotonic()
                due = self._ack_at + self.ack_wait(self._ack_pace)
                if not self.frames and now < due:
                    # only an ack waits and one left a moment ago: a newer one may replace it
                    self._holding_ack = True
                    try:
                        await self._readable_or(due - now)
                    finally:
                        self._holding_ack = False
                    continue
                frame, self.ack = self.ack(), None
                self._ack_waiting = False
                self._ack_turn = False
                self._ack_at = now
                return frame
            if self.frames:
                frame, size = self.frames.popleft()
                self.queued -= size
                self._room.set()
                self._ack_turn = True
                return frame
            self._readable.clear()
            await self._readable.wait()
        return None

    async def _readable_or(self, timeout: float) -> None:
        """Wait until something is put (or the outbox closes), or ``timeout`` seconds."""
        self._readable.clear()
        timer = asyncio.get_running_loop().call_later(timeout, self._readable.set)
        try:
            await self._readable.wait()
        finally:
            timer.cancel()

