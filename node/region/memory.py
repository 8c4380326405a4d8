"""What a region holds in memory, and its limit (``maxmemory``, INFO memory).

Theory of operation
-------------------
Used memory is counted, not measured: what the process held when it began (the driver
measures it once; nothing in the simulation), plus what the region holds - the keyspace's
estimate and the replication backlog, counted as they change (node/region/db.py) - plus what
the clients' buffers hold, which the driver counts once a second (:meth:`MemoryAccount.count_clients`)
and INFO counts when asked.  ``maxmemory`` (0: none) refuses commands that add data while
used memory is past it (the core's OOM error); operations of other regions are always
applied.  A crossing of the limit either way is logged once; the peak is kept for INFO.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

log = logging.getLogger("braid.server")


class Buffered(Protocol):
    """A client as memory sees it: the bytes its buffers hold."""

    def input_buffered(self) -> int: ...
    def output_buffered(self) -> int: ...


class MemoryAccount:
    """Used memory and the limit on it (see the module's docstring)."""

    def __init__(self, held: Callable[[], int], clients: Callable[[], Iterable[Buffered]], startup: int = 0) -> None:
        """``held``: what the region's data holds now (keyspace and backlog); ``clients``: the
        connected clients, whose buffers :meth:`count_clients` counts; ``startup``: what the
        process held when it began."""
        self._held = held
        self._clients = clients
        self.startup = startup
        self.clients = 0   # what the clients' buffers held when last counted
        self.peak = 0
        self.limit = 0     # maxmemory (0: none)
        self.over = False  # used memory was past the limit when last looked at

    def set_limit(self, limit: int) -> None:
        """A new ``maxmemory`` (CONFIG SET, or at start)."""
        if limit and limit != self.limit:
            used = self.used()
            if used > limit:  # (Redis's warning)
                log.warning("WARNING: the new maxmemory value set via CONFIG SET (%d) is smaller than the current "
                            "memory usage (%d): commands that add data are refused until it is lower", limit, used)
        self.limit = limit
        if not limit and self.over:
            self.over = False
            log.info("maxmemory is off: commands that add data are taken again")

    def used(self) -> int:
        """What the region holds in memory, in bytes (INFO memory's ``used_memory``, what
        maxmemory limits)."""
        used = self.startup + self._held() + self.clients
        if used > self.peak:
            self.peak = used
        return used

    def count_clients(self) -> int:
        """Count what the clients' buffers hold now (their input not yet run, their replies
        not yet read): part of used memory until counted again."""
        self.clients = sum(c.input_buffered() + c.output_buffered() for c in self._clients())
        return self.clients

    def out_of_memory(self) -> bool:
        """Is used memory past the limit (set)?  A crossing either way is logged once."""
        used = self.used()
        over = used > self.limit
        if over != self.over:
            self.over = over
            if over:
                log.warning("used memory (%d bytes) is over maxmemory (%d): commands that add data are refused "
                            "with OOM until it is lower; operations of other regions are still applied, and may "
                            "take it further past the limit", used, self.limit)
            else:
                log.info("used memory (%d bytes) is under maxmemory (%d) again: commands that add data are taken",
                         used, self.limit)
        return over
