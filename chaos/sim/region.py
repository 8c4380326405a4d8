"""One simulated region: the real server, on a simulated disk and a virtual clock.

Theory of operation
-------------------
A :class:`SimRegion` holds a real :class:`node.server.Server` built with the
cluster configuration, never started: no sockets, no event loop, no cron.
Client commands go through ``Server.call`` (the command table, arity, the
handlers, the operation log) with a :class:`node.server.ClientConnection` that
has no transport; handlers read time only through ``now_ms()``, which reads
``wall_ms()``, which this region points at the world's virtual clock plus its
own skew (clock faults move the skew, backwards too).

The server's operation log is a :class:`chaos.sim.disk.SimOperationLog`, so
every record the server writes lands on this region's :class:`SimFile`.  The
real server writes its records at the end of each turn of its event loop and
then replies; here the world calls :meth:`SimRegion.end_turn` after every event
that touched the region.  Under ``appendfsync always`` a reply waits for the
fsync that covers the records it may depend on (``held``); fsyncs take virtual
time, and start whenever records wait (``always``, and ``everysec`` in a
cluster: operations leave for other regions only once fsynced).

A crash drops the server (held replies are never sent: their clients see the
connection close) and crashes the file (see disk.py).  :meth:`SimRegion.boot`
is a restart: the file's records, torn tail cut, are replayed by the real
``node.persistence.replay.replay`` into a fresh server, which then appends to
the same file - exactly the path of a real restart, minus the directory scan.

A fail-stop of the server (node/supervision.py: a command that raised after
changing state, an operation it could not apply) is the process exiting: the
world crashes the region as a process (what was written stays, this turn's
unwritten records and unsent replies are gone) and restarts it later.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from node.cluster_config import ClusterConfig, RegionSpec
from node.config import Config
from node.persistence.replay import replay
from node.server import ClientConnection, Server

from .disk import SimFile, SimOperationLog, read_back

if TYPE_CHECKING:
    from crdt.causal import CausalLog
    from crdt.sync import LinkState

    from .world import Simulation

INDETERMINATE = object()  # the reply never came: the region crashed first


class SimRegion:
    def __init__(self, sim: "Simulation", cluster: ClusterConfig, spec: RegionSpec, policy: str) -> None:
        self.sim = sim
        self.cluster = copy.deepcopy(cluster)  # the region's own cluster file (tune changes it)
        self.spec = spec
        self.number = spec.number
        self.policy = policy
        self.file = SimFile()
        self.skew = 0                 # ms this region's clock is ahead (negative: behind)
        self.server: Server | None = None
        self.client: ClientConnection | None = None
        self.incarnation = 0          # restarts so far: events of an older life are ignored
        self.links: dict[int, "LinkState"] = {}
        # replies waiting for an fsync (appendfsync always): (record needed, callback, reply)
        self.held: list[tuple[int, Callable[[Any], None], Any]] = []
        self.fsync_own_n = 0          # this region's own operations the fsync in flight covers
        self.fail_stops = 0           # times its server fail-stopped

    # ------------------------------------------------------------ state
    @property
    def up(self) -> bool:
        return self.server is not None

    @property
    def causal(self) -> "CausalLog":
        return self.server.db.aa.causal

    def wall_ms(self) -> int:
        return self.sim.sched.now + self.skew

    def own_n(self) -> int:
        return self.causal.vv.get(self.number, 0)

    # ------------------------------------------------------------ life
    def boot(self) -> int:
        """Start (again) from the file; returns how many torn bytes were cut."""
        records, cut = read_back(self.file)
        server = Server(Config(appendfsync=self.policy), cluster=(self.cluster, self.spec))
        server.wall_ms = self.wall_ms  # the virtual clock
        replay(server, records)
        oplog = SimOperationLog(self.file, self.policy, len(records))
        server.oplog = oplog
        aa = server.db.aa
        aa.log_started()  # everything loaded is on disk: it may leave
        oplog.on_durable = aa.durable
        oplog.replicating = True
        server.schedule_log_write = _nothing  # end_turn writes the log after every event
        self.server = server
        self.client = ClientConnection(server)
        self.client.authenticated = True
        self.incarnation += 1
        self.links.clear()
        return cut

    def crash(self, machine: bool) -> str:
        """Kill the region; ``machine``: the machine too (unsynced bytes may be lost)."""
        held, self.held = self.held, []
        self.server = self.client = None
        self.links.clear()
        what = self.file.crash_machine(self.sim.rng) if machine else self.file.crash_process()
        for _needs, callback, _reply in held:
            callback(INDETERMINATE)
        return what

    # ------------------------------------------------------------ commands
    def call(self, argv: list[bytes], on_reply: Callable[[Any], None]) -> None:
        """Run one client command; ``on_reply`` gets the reply when the client would."""
        reply = self.server.call(self.client, argv)
        if self.server.failed is not None:  # the process exits: no reply, this turn not written
            self.sim.fail_stopped(self)
            on_reply(INDETERMINATE)
            return
        oplog = self.server.oplog
        needs = oplog.last_record
        self.end_turn()
        if oplog.durable(needs):
            on_reply(reply)
        else:
            self.held.append((needs, on_reply, reply))

    def read(self, argv: list[bytes]) -> Any:
        """A read the workload makes to choose its next write (same turn, no log)."""
        return self.server.call(self.client, argv)

    # ------------------------------------------------------------ the end of a turn
    def end_turn(self) -> None:
        """Write this turn's records to the OS, start an fsync if records wait, send what may leave."""
        oplog = self.server.oplog
        oplog.write_out()
        if self.policy != "no":
            target = oplog.begin_fsync()
            if target is not None:
                self.fsync_own_n = self.own_n()
                self.sim.sched.after(self.sim.rng.randint(1, 8), self._fsynced, self.incarnation)
        self.sim.pump(self)

    def _fsynced(self, incarnation: int) -> None:
        if incarnation != self.incarnation or not self.up:
            return  # the machine crashed while fsyncing: nothing was promised
        oplog = self.server.oplog
        oplog.fsync_done()
        self.sim.promise(self, self.fsync_own_n, f"fsync at t={self.sim.sched.now}")
        ready = [h for h in self.held if h[0] <= oplog.synced]
        self.held = [h for h in self.held if h[0] > oplog.synced]
        for _needs, callback, reply in ready:
            callback(reply)
        self.end_turn()  # what was written meanwhile: the next fsync; and send what became durable


def _nothing() -> None:
    return None
