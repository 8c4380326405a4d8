"""What a command's handler sees: its client's session, and through it the region's services.

A handler is ``handler(client: Session, argv: list[bytes]) -> reply``.  The session
(node/region/session.py) is the client's own state; ``client.region`` is a :class:`Region`:
what a region offers its commands - the keyspace, the settings, the clock, users and
permissions, the other clients, the counters and logs INFO / SLOWLOG / LATENCY read, the
operation log, and the few effects a command may ask of its region (save, shut down, a
changed setting).  The region core (node/region/core.py) provides all of it, so every
command runs on a bare core as on the asyncio server that drives one (node/runtime/server.py)
and in the simulation; the type checker holds handlers to this list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from node.activeactive.region import ActiveActive
    from node.commands.migrate import MigrateTransport
    from node.persistence.oplog import OperationLog
    from node.persistence.replay import LoadReport
    from node.region.blocking import BlockingRegistry
    from node.region.config import Config
    from node.region.db import Database
    from node.region.memory import MemoryAccount
    from node.region.routing import ShardRouting
    from node.region.session import Session
    from node.region.slowlog import LatencyMonitor, SlowLog
    from node.region.stats import Stats
    from node.region.supervision import Supervisor
    from node.security.acl import AccessControl
    from node.security.tls import ClientTls


class Region(Protocol):
    """The region's services a command may use (see the module's docstring); read-only:
    a command changes its region through the methods below, never by setting attributes."""

    # what it is and holds
    @property
    def region(self) -> int: ...  # its origin number in every entry log
    @property
    def db(self) -> Database: ...  # the keyspace
    @property
    def aa(self) -> ActiveActive | None: ...  # its part in an Active-Active database (None: standalone)
    @property
    def routing(self) -> ShardRouting | None: ...  # a shard's slots and its siblings (None: not sharded)
    @property
    def config(self) -> Config: ...  # CONFIG GET / SET
    @property
    def acl(self) -> AccessControl: ...  # users and permissions
    @property
    def clients(self) -> dict[int, Session]: ...  # every connected client, by id
    @property
    def blocking(self) -> BlockingRegistry: ...  # clients blocked on keys
    @property
    def tls(self) -> ClientTls | None: ...  # the TLS client port, when the driver has one
    @property
    def migrate_transport(self) -> MigrateTransport | None: ...  # MIGRATE's connections, when the driver has them

    # what INFO, SLOWLOG and LATENCY read
    @property
    def start_time(self) -> float: ...
    @property
    def run_id(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def stats(self) -> Stats: ...
    @property
    def slowlog(self) -> SlowLog: ...
    @property
    def latency_events(self) -> LatencyMonitor: ...
    @property
    def supervisor(self) -> Supervisor: ...  # the background work, and DEBUG's injected faults
    @property
    def memory(self) -> MemoryAccount: ...  # used memory and maxmemory
    @property
    def loading_report(self) -> tuple[LoadReport, float] | None: ...  # what loading the log found, and how long it took
    @property
    def clock_offset_ms(self) -> int: ...

    # its operation log and snapshots
    @property
    def oplog(self) -> OperationLog | None: ...  # None: appendonly no
    @property
    def replaying(self) -> bool: ...
    @property
    def saving(self) -> bool: ...
    @property
    def last_save(self) -> int: ...
    @property
    def last_bgsave_ok(self) -> bool: ...
    @property
    def dirty_at_save(self) -> int: ...
    @property
    def log_base_size(self) -> int: ...

    def next_client_id(self) -> int: ...
    def now_ms(self) -> int: ...  # the clock commands see: pinned for the length of a command
    def system_ms(self) -> int: ...
    def call(self, client: Session, argv: list[bytes]) -> Any: ...  # a command of the region's own (EXEC)

    # effects a command may ask of its region
    def config_changed(self) -> None: ...
    def log_settings(self, argv: list[bytes]) -> None: ...
    def save(self, force: bool = False) -> None: ...
    def bgsave(self) -> None: ...
    def shutdown(self) -> None: ...
    def skew_clock(self, offset_ms: int) -> None: ...
    def fail_next_applies(self, n: int) -> None: ...
    def replication_progressed(self) -> None: ...  # retry WAIT's clients (an fsync they asked for ended)


Handler = Callable[["Session", list[bytes]], Any]
