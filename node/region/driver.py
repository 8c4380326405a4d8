"""What the driver of a region core does for it.

The region core (node/region/core.py) is sans-IO; what needs an event loop, sockets or
threads is its driver's: the asyncio server (node/runtime/server.py), which holds a core and
passes itself as the core's :class:`Driver`.  A core without one - the simulation's, a
replay's, a test's - does the least: it writes a BGSAVE's snapshot at once, notes a
SHUTDOWN, and lets nothing wait for keys.
"""

from __future__ import annotations

from typing import Protocol


class Driver(Protocol):
    """What the driver of a region core does for it (the asyncio server, node/runtime/server.py).
    A core without one - the simulation's, a replay's, a test's - does the least: it writes a
    BGSAVE's snapshot at once, notes a SHUTDOWN, and lets nothing wait for keys."""

    def records_appended(self) -> None:
        """Records were appended outside a client's command: end the turn that writes them."""

    def keys_ready(self) -> None:
        """Serve the readers blocked on the keys in ``db.ready``."""

    def serve_progress_waiters(self) -> None:
        """Retry the clients waiting for replication's progress (node/commands/waits.py)."""

    def settings_changed(self) -> None:
        """The settings changed (CONFIG SET, after the core took them)."""

    def fail_stopped(self) -> None:
        """The region fail-stopped: close what the driver owns (clients, links, its port)."""

    def bgsave(self) -> None:
        """BGSAVE: take a snapshot in the background."""

    def shutdown(self) -> None:
        """SHUTDOWN: stop the region once this turn is done."""
