"""The region's once-a-second work that changes its state: the cron's steps, the same for
every driver (the asyncio server's cron task, the simulation's clock).

Each step is (name, step, changes state); a driver runs them in order under the region's
supervisor (node/region/supervision.py: a step that fails and changed state stops the
region).  A standalone region expires IDMP entries; a member of a cluster also trims its
replication backlog, collects the garbage of what every region holds, and begins, confirms
or withdraws writes taken alone (node/region/lone.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from node.region.core import RegionCore

Step = tuple[str, Callable[[], Any], bool]


def steps(core: RegionCore, now: float, link_positions: list[int] | None = None) -> list[Step]:
    """The cron's steps for ``core`` at ``now`` (monotonic seconds); ``link_positions``: where
    the links to the peers are in the backlog (the simulation's; the server's hub knows them)."""
    found: list[Step] = [("idmp-expiry", lambda: expire_idmp(core), True)]
    if core.aa is not None:
        found.append(("backlog-trim", lambda: trim_backlog(core, now, link_positions), True))
        found.append(("gc", lambda: collect_garbage(core), True))
        found.append(("lone-writes", lambda: core.lone_steps.cron(core.system_ms()), True))
    return found


def expire_idmp(core: RegionCore) -> int:
    """IDMP expiry with the region's clock and stable vector, logged as it ran."""
    with core.clock_pinned() as now:
        stable = core.aa.stable() if core.aa is not None else None
        dropped = core.db.expire_idmp(now, stable)
        if dropped and core.oplog is not None:
            core.oplog.log_idmp_expiry(now, stable)
    return dropped


def trim_backlog(core: RegionCore, now: float, link_positions: list[int] | None = None) -> int:
    """Trim the replication backlog per ``crdt-repl-backlog-size`` / ``-ttl``."""
    aa = core.aa
    if aa is None:
        return 0
    return aa.trim_backlog(int(core.config["crdt-repl-backlog-size"]), int(core.config["crdt-repl-backlog-ttl"]),
                           now, link_positions)


def collect_garbage(core: RegionCore) -> int:
    return core.aa.collect_garbage() if core.aa is not None else 0
