"""The simulation's virtual clock, its seeded event queue and its trace.

:class:`Scheduler` runs events in (virtual time, insertion number) order and records the
trace a schedule prints; an exception an event raises is an error of the run (the
"exceptions" check).  ``_vv`` and ``_dots`` spell version vectors and dots in trace lines.
chaos/sim/world.py tells the theory of operation.
"""

from __future__ import annotations

import heapq
import itertools
import traceback
from collections.abc import Callable

START_MS = 1_000_000   # the virtual clock's first reading (ms)


class Scheduler:
    """A virtual clock and the events due on it."""

    def __init__(self) -> None:
        self.now = START_MS
        self.events = 0
        self.trace: list[str] = []
        self.errors: list[str] = []
        self._queue: list = []
        self._order = itertools.count()

    def at(self, when: int, fn: Callable, *args) -> None:
        heapq.heappush(self._queue, (when, next(self._order), fn, args))

    def after(self, delay: int, fn: Callable, *args) -> None:
        self.at(self.now + delay, fn, *args)

    def run(self, max_events: int | None = None) -> bool:
        """Run events in time order; True when the queue emptied (False: ``max_events`` hit)."""
        budget = max_events
        while self._queue:
            if budget is not None:
                if budget <= 0:
                    return False
                budget -= 1
            when, _order, fn, args = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            self.events += 1
            try:
                fn(*args)
            except Exception as e:  # a region's code failed: judged by the "exceptions" check
                where = traceback.extract_tb(e.__traceback__)[-1]
                error = f"{type(e).__name__}: {e} (in {fn.__name__}, at {where.filename}:{where.lineno})"
                self.errors.append(error)
                self.log(f"EXCEPTION {error}")
        return True

    def pending(self) -> int:
        """Events still queued (besides the one running)."""
        return len(self._queue)

    def log(self, text: str) -> None:
        self.trace.append(f"{self.now - START_MS:>7} {text}")


class GroupScheduler:
    """One shard group's view of the scheduler all groups share (chaos/sim/shards.py): the
    same clock and queue, its trace lines marked with the group's shard."""

    def __init__(self, shared: Scheduler, shard: int) -> None:
        self.shared = shared
        self.prefix = f"s{shard} "

    @property
    def now(self) -> int:
        return self.shared.now

    def log(self, text: str) -> None:
        self.shared.log(self.prefix + text)

    def __getattr__(self, name: str):
        return getattr(self.shared, name)  # at, after, run, pending, trace, errors, events


def _vv(vv: dict[int, int]) -> str:
    return ",".join(f"{o}:{n}" for o, n in sorted(vv.items()))


def _dots(envelopes) -> str:
    if len(envelopes) <= 4:
        return " ".join(f"{e.origin}.{e.n}" for e in envelopes)
    return f"{envelopes[0].origin}.{envelopes[0].n} .. {envelopes[-1].origin}.{envelopes[-1].n} ({len(envelopes)})"
