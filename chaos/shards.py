"""Sharded regions in a live chaos run: ``braid-chaos run --shards N`` (the process backend).

Theory of operation
-------------------
Each region runs as it does in production on a machine: ``braid node --config FILE
--region NAME`` on a cluster file with ``[shards] count = N`` is the region's
*supervisor*, which starts one ``braid node ... --shard K`` process per shard and
restarts one that exits (node/tools/shards.py).  Shard K of every region forms one
replication group; shard K of a region dials shard K of each region with a higher
number through a relay of its own (:mod:`chaos.relay`), so a network fault between
two regions reaches every shard's link between them, as between two machines.

Two crashes, two faults:

* ``kill`` - a machine crash: SIGKILL of the supervisor.  Each shard asked the kernel
  to be killed with its parent, so the whole region goes at once; the heal starts the
  supervisor again, which starts every shard on its own data.
* ``shard-kill`` - a process crash: SIGKILL of one shard process.  Nobody here starts
  it again: its supervisor must, while the region's other shards serve on.  A
  :class:`ShardWatch` measures both from the moment of the kill: when a new process
  of that shard answers (the restart time), and whether each sibling shard kept
  answering PING meanwhile (answers, and the longest silence).  What it measured is
  the fault's ``info`` in the history; the ``shard kills`` checker judges it.

The supervisor gives up a shard that dies three times in a row within 10 s of its
start (a shard that cannot start must not be restarted forever).  A chaos schedule
could do that to a healthy shard, which would be the nemesis's doing, not a fault of
Braid: a kill that would be such a third quick death goes to another shard of the
region, or is not injected (the fault says so).

Pause stops (SIGSTOP) the supervisor and every shard; DEBUG faults (clock, disk,
fsync) and the long partition's backlog bound reach every shard of the region.

Membership (``--faults membership``): a region added gets a port and a repl port per shard
(``braid-admin region add`` joins it to every shard group) and its shard K dials shard K of
every member through a relay; it is active once every shard says so.  A region removed by
force is frozen by each shard group at its own point, read back from the groups' member
lists (:meth:`ShardedProcessBackend.frozen_per_shard`): the checkers judge each write of it
by its shard's point.
Clients (:class:`chaos.workloads.Members`) send each command to the shard owning
its key's slot, by the cluster file's slot map.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field

import redis

from crdt.membership import REMOVED
from node.activeactive.cluster_config import ClusterConfig, RegionSpec, load, local_cluster
from node.testing import free_ports, wait_until
from node.tools.admin_calls import AdminError, call
from node.tools.cluster_processes import parent_pid, ping, process_info
from node.tools.shards import MAX_QUICK_CRASHES, QUICK_CRASH_S

from .backends import DEBUG_FAULTS, NETWORK_FAULTS, MembershipFailed, ProcessBackend, RegionProcess
from .history import Fault
from .relay import RelayHub
from .workloads import Members, connect

RESTART_TIMEOUT_S = 30.0  # a killed shard not answering again this long after its kill: not restarted
WATCH_POLL_S = 0.1        # the watch's look at the killed shard and its siblings
SIBLING_PING_S = 1.0      # a sibling that does not answer PING within this is silent
MAX_SHARDS = 5            # as braid up --shards


class FaultRefused(OSError):
    """A fault the nemesis does not inject (its message says why)."""


def shard_children(supervisor: int) -> dict[int, int]:
    """The shard processes a supervisor runs now: shard number -> pid."""
    out: dict[int, int] = {}
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return out
    for pid in pids:
        if parent_pid(pid) != supervisor:
            continue
        info = process_info(pid)
        if info is None:
            continue
        argv = info[0]
        if "--shard" in argv[:-1]:
            with contextlib.suppress(ValueError):
                out[int(argv[len(argv) - 1 - argv[::-1].index("--shard") + 1])] = pid
    return out


def gone(pid: int) -> bool:
    """Has the process exited (or is it a zombie nobody reaped yet)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


class ShardedRegion(RegionProcess):
    """A sharded region: its supervisor (``proc``) and, through it, one process per shard."""

    def __init__(self, ports: list[int], *a, **kw) -> None:
        super().__init__(ports[0], *a, **kw)
        self.ports = list(ports)
        self.started_at: dict[int, float] = {}  # shard -> when its process was last seen starting
        self.quick: dict[int, int] = {}  # shard -> its deaths in a row soon after its start (as its supervisor counts)

    def answers(self) -> bool:
        """Serving: every shard answers PING (start() waits for this)."""
        return all(ping(p) for p in self.ports)

    def start(self) -> ShardedRegion:
        super().start()
        now = time.monotonic()
        self.started_at = dict.fromkeys(range(len(self.ports)), now)
        self.quick = {}  # a new supervisor counts afresh
        return self

    def shard_pids(self) -> dict[int, int]:
        return shard_children(self.proc.pid) if self.alive() and self.proc is not None else {}

    def signal_all(self, sig: int) -> None:
        assert self.proc is not None
        pids = self.shard_pids()
        self.proc.send_signal(sig)
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """SIGKILL the supervisor; its shards die with it (they asked the kernel to)."""
        pids = list(self.shard_pids().values())
        super().kill(sig)
        wait_until(lambda: all(gone(p) for p in pids), 15.0, what=f"{self.region}'s shards to die with it")

    def complete(self) -> bool:
        """The supervisor runs every shard (none given up) and each answers."""
        return self.alive() and len(self.shard_pids()) == len(self.ports) and self.answers()


@dataclass
class ShardWatch:
    """From a shard's kill on: when a new process of it answers, and how its siblings answered."""

    region: ShardedRegion
    shard: int
    old_pid: int
    fault: Fault | None  # its detail and info are filled in at the end
    killed: float = field(default_factory=time.monotonic)
    back_s: float | None = None
    new_pid: int | None = None
    pings: dict[int, list[int]] = field(default_factory=dict)     # sibling -> [asked, answered]
    silence: dict[int, float] = field(default_factory=dict)       # sibling -> longest time without an answer
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    finished: bool = False

    def start(self) -> ShardWatch:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.region.region}-{self.shard}",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        siblings = [k for k in range(len(self.region.ports)) if k != self.shard]
        last = dict.fromkeys(siblings, self.killed)
        for k in siblings:
            self.pings[k], self.silence[k] = [0, 0], 0.0
        while True:
            now = time.monotonic()
            for k in siblings:
                self.pings[k][0] += 1
                if ping(self.region.ports[k], timeout=SIBLING_PING_S):
                    self.pings[k][1] += 1
                    last[k] = time.monotonic()
                self.silence[k] = max(self.silence[k], time.monotonic() - last[k])
            if self.back_s is None:
                pid = self.region.shard_pids().get(self.shard)
                if pid is not None and pid != self.old_pid and ping(self.region.ports[self.shard]):
                    self.new_pid, self.back_s = pid, time.monotonic() - self.killed
                    self.region.started_at[self.shard] = time.monotonic()
            if self._stop.is_set() and (self.back_s is not None or now - self.killed > RESTART_TIMEOUT_S):
                return
            time.sleep(WATCH_POLL_S)  # the watch's sampling interval, not synchronisation

    def finish(self) -> None:
        """The fault heals: stop watching once the shard is back (or the restart deadline passed),
        and record what was seen."""
        if self.finished:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(RESTART_TIMEOUT_S + 5)
        self.finished = True
        f = self.fault
        siblings = {k: {"asked": a, "answered": n, "longest_silence_s": round(self.silence[k], 3)}
                    for k, (a, n) in sorted(self.pings.items())}
        info = {"shard": self.shard, "pid": self.old_pid, "restarted": self.back_s is not None,
                "back_s": None if self.back_s is None else round(self.back_s, 3), "new_pid": self.new_pid,
                "siblings": siblings}
        if f is not None:
            f.info.update(info)
            if self.back_s is not None:
                f.detail += (f"; its supervisor started it again: answering after {self.back_s:.2f} s "
                             f"(pid {self.new_pid})")
            else:
                f.detail += f"; NOT restarted by its supervisor within {RESTART_TIMEOUT_S:.0f} s"
            f.detail += "".join(f"; shard {k} answered {s['answered']}/{s['asked']} pings meanwhile "
                                f"(longest silence {s['longest_silence_s']:.2f} s)" for k, s in siblings.items())


class ShardedProcessBackend(ProcessBackend):
    """Regions of ``shards`` shard processes each, under their supervisors (module doc)."""

    faults = DEBUG_FAULTS | NETWORK_FAULTS | {"kill", "pause", "restore", "shard-kill"}

    def __init__(self, regions: int, workdir: str, shards: int, fsync: str = "everysec", bug: str | None = None,
                 seed: int = 0, membership: bool = False) -> None:
        super().__init__(regions, workdir, fsync, bug, seed, membership)
        self.faults = type(self).faults | ({"membership"} if membership else set())
        self.shards = shards
        self.watches: list[ShardWatch] = []

    def start(self) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        n, s = self.n, self.shards
        config = local_cluster(n, 0, shards=s)
        ports = free_ports(2 * n * s)
        top = config.stride - 1 - n if self.membership else 0  # (added regions dial: ProcessBackend)
        specs = []
        for i, r in enumerate(config.regions):
            mine = ports[2 * s * i:2 * s * (i + 1)]
            specs.append(RegionSpec(f"region-{r.number + top}", r.number + top, r.host, mine[0], mine[s],
                                    ports=mine[:s], repl_ports=mine[s:]))
        config.regions = specs
        config.appendfsync = self.fsync
        config.validate()
        self.config = config
        self.cluster_file = os.path.join(self.workdir, "cluster.toml")
        config.save(self.cluster_file)
        self.relays = RelayHub(self.seed)
        for a in config.regions:  # shard K of the lower number dials shard K of the higher: a relay each
            for b in config.regions:
                if a.number < b.number:
                    for k in range(s):
                        self.relays.add(a.number, b.number, (b.host, b.repl_ports[k]), shard=k)
        for r in config.regions:
            self.procs[r.number] = proc = self.region_process(r.ports, os.path.join(self.workdir, r.name),
                                                              self._region_file(r), r.name)
            proc.start()
        self.addresses = {r.number: ("127.0.0.1", r.port) for r in config.regions}
        self.members = Members(self.addresses, shards={r.number: [("127.0.0.1", p) for p in r.ports]
                                                       for r in config.regions},
                               owners=config.shards.owners())

    def _region_file(self, me: RegionSpec, c: ClusterConfig | None = None) -> str:
        """Region ``me``'s cluster file: each shard of a peer it dials is at that shard's relay."""
        c = c or self.config
        hub = self.relays
        assert c is not None and hub is not None

        def dialed(r: RegionSpec) -> list[int]:
            relays = [hub.relay(me.number, r.number, k) if r.number > me.number else None
                      for k in range(len(r.repl_ports))]
            return [x.port if x is not None else p for x, p in zip(relays, r.repl_ports, strict=True)]

        regions = []
        for r in c.regions:
            repl = dialed(r)
            regions.append(RegionSpec(r.name, r.number, r.host, r.port, repl[0], status=r.status, frozen=r.frozen,
                                      ports=list(r.ports), repl_ports=repl))
        view = ClusterConfig(c.cluster_id, c.database, c.token, c.stride, regions, c.id_mode, c.appendfsync,
                             tls=c.tls, epoch=c.epoch, shards=c.shards)
        path = os.path.join(self.workdir, f"{me.name}-{me.number}.toml")
        view.save(path)
        return path

    # ------------------------------------------------------------ membership
    def region_process(self, ports: list[int], data_dir: str, cluster_file: str, name: str) -> ShardedRegion:
        """The region's supervisor, which runs a process per shard on ``ports``."""
        return ShardedRegion(ports, data_dir, cluster_file, name,
                             ["--enable-debug-command", "yes", "--appendfsync", self.fsync], bug=self.bug)

    def member_status(self, region: int) -> str:
        """The region's status as its shards see it: "active" once every shard says so, else the
        first other answer ('' if a shard does not answer)."""
        proc = self.procs.get(region)
        if not isinstance(proc, ShardedRegion):
            return ""
        statuses = []
        for port in proc.ports:
            c = connect(("127.0.0.1", port), timeout=2.0)
            try:
                statuses.append(str(c.info("crdt").get("crdt_member_status", "")))
            except (redis.RedisError, OSError):
                return ""
            finally:
                c.close()
        return next((st for st in statuses if st != "active"), "active")

    def frozen_per_shard(self, region: int) -> list[int]:
        """The frozen point each shard group agreed for ``region`` (removed by force), as the
        group's members answer braid-admin's status call."""
        cfg = load(self.cluster_file)
        frozen = []
        for k in range(self.shards):
            view = cfg.shard_view(k)
            found = None
            for r in view.live_regions():
                if r.number == region:
                    continue
                try:
                    st = call(view, r, "status")
                except AdminError:
                    continue
                found = next((x.frozen for x in st.members if x.number == region and x.status == REMOVED), None)
                if found is not None:
                    break
            if found is None:
                raise MembershipFailed(f"no member of shard {k}'s group says where region {region} was frozen")
            frozen.append(found)
        return frozen

    def region_addresses(self, region: int) -> list[tuple[str, int]]:
        proc = self.procs[region]
        assert isinstance(proc, ShardedRegion)
        return [("127.0.0.1", p) for p in proc.ports]

    def slots_of(self) -> list[str]:
        """Each shard's slot ranges, as the cluster file says them."""
        assert self.config is not None
        return self.config.shards.describe()

    # ------------------------------------------------------------ faults
    def kill(self, region: int) -> None:
        with self.lock:
            self._finish_watches(region)
            super().kill(region)

    def kill_shard(self, region: int, shard: int, fault=None) -> ShardWatch:
        """SIGKILL one shard process of ``region`` (another one of it if that one would be given up by
        its supervisor; FaultRefused if every one would).  Returns the watch of its restart."""
        with self.lock:
            proc = self.procs[region]
            assert isinstance(proc, ShardedRegion)
            if proc.paused:
                self.resume(region)
            now = time.monotonic()

            def quick_deaths(k: int) -> int:  # what this kill would make the supervisor count
                young = now - proc.started_at.get(k, 0.0) < QUICK_CRASH_S
                return proc.quick.get(k, 0) + 1 if young else 0

            order = [shard] + [k for k in range(self.shards) if k != shard]
            target = next((k for k in order if quick_deaths(k) < MAX_QUICK_CRASHES), None)
            if target is None:
                raise FaultRefused(f"every shard of region {region} was restarted moments ago, twice in a row: "
                                   "its supervisor would give one up")
            pids = proc.shard_pids()
            if target not in pids:
                raise FaultRefused(f"shard {target} of region {region} runs no process")
            proc.quick[target] = quick_deaths(target)
            os.kill(pids[target], signal.SIGKILL)
            if fault is not None:
                fault.detail += f" (pid {pids[target]})" if target == shard else \
                    f" (shard {target} instead, pid {pids[target]}: shard {shard} was restarted moments ago twice)"
                fault.info["shard"] = target
            watch = ShardWatch(proc, target, pids[target], fault).start()
            self.watches.append(watch)
            return watch

    def _finish_watches(self, region: int | None = None) -> None:
        for w in self.watches:
            if not w.finished and (region is None or w.region is self.procs.get(region)):
                w.finish()

    def restart(self, region: int) -> None:
        with self.lock:
            proc = self.procs.get(region)
            if proc is None:
                return
            assert isinstance(proc, ShardedRegion)
            if proc.alive() and not proc.complete():
                # a shard its supervisor gave up (or one that does not answer): the region starts again
                # whole, as an operator would restart the machine's service
                super().kill(region)
            if not proc.alive():
                proc.restart()

    def heal_all(self) -> None:
        self._finish_watches()  # (a shard killed just before the end: its supervisor restarts it first)
        super().heal_all()

    def stop(self) -> None:
        for w in self.watches:
            w._stop.set()
        super().stop()
