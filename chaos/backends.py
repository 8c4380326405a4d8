"""Where a chaos run's regions live, and how faults reach them.

A backend starts (or finds) the regions and turns the nemesis's fault names
into actions.  Workloads and checkers only see ``addresses`` (region number ->
RESP host and port), so every backend shares them.

* :class:`ProcessBackend`: regions as real local processes (``braid node``),
  every replication link through a fault-injecting relay (:mod:`chaos.relay`).
  Kill is SIGKILL then a restart on the same data directory; pause is
  SIGSTOP/SIGCONT.
* :class:`AttachBackend`: a running cluster given by its cluster file.  It
  can only cut links (``BRAID.REPLICATION PAUSE PEER``) and, if the regions run
  with ``--enable-debug-command``, skew clocks and fake a full or slow disk.
* :class:`chaos.docker_backend.DockerBackend`: the compose deployment in
  ``deploy/``.
* :class:`chaos.netns_backend.NetnsBackend`: regions as processes, each in its
  own network namespace behind an emulated WAN (:mod:`chaos.netns`).

Clock, disk-full and slow-fsync faults go through ``DEBUG`` (see
``node/commands/debug.py``) in every backend.
"""

from __future__ import annotations

import os
import signal

import redis

from node.cluster_config import ClusterConfig, RegionSpec, load, local_cluster
from node.testing import BraidProcess, free_ports

from .relay import RelayHub
from .workloads import connect

DEBUG_FAULTS = {"clock", "disk-full", "slow-fsync"}
NETWORK_FAULTS = {"partition", "one-way", "bridge", "link-faults"}
PROCESS_FAULTS = {"kill", "pause"}


class Backend:
    faults: set[str] = set()
    addresses: dict[int, tuple[str, int]] = {}
    cluster_file: str = ""

    def start(self) -> None: ...
    def stop(self) -> None: ...

    def debug(self, region: int, *args) -> None:
        """A DEBUG fault at one region (it must run with --enable-debug-command)."""
        c = connect(self.addresses[region], timeout=2.0)
        try:
            c.execute_command("DEBUG", *args)
        finally:
            c.close()

    def heal_region(self, region: int) -> None:
        """Undo every DEBUG fault at a region (best effort: it may be down)."""
        for args in (("CLOCK-OFFSET", 0), ("DISK-FULL", "no"), ("FSYNC-DELAY", 0)):
            try:
                self.debug(region, *args)
            except (redis.RedisError, OSError):
                pass


class RegionProcess(BraidProcess):
    """A region process, optionally with a planted bug (``python -m chaos.planted BUG ...``)."""

    def __init__(self, *a, bug: str | None = None, **kw) -> None:
        super().__init__(*a, **kw)
        self.bug = bug
        self.paused = False

    def argv(self) -> list[str]:
        argv = super().argv()
        if self.bug:
            argv[1:3] = ["-m", "chaos.planted", self.bug]
        return argv

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ProcessBackend(Backend):
    faults = DEBUG_FAULTS | NETWORK_FAULTS | PROCESS_FAULTS

    def __init__(self, regions: int, workdir: str, fsync: str = "everysec", bug: str | None = None,
                 seed: int = 0) -> None:
        self.n, self.workdir, self.fsync, self.bug, self.seed = regions, workdir, fsync, bug, seed
        self.procs: dict[int, RegionProcess] = {}
        self.relays: RelayHub | None = None
        self.config: ClusterConfig | None = None

    def start(self) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        config = local_cluster(self.n, 0)
        ports = free_ports(2 * self.n)
        config.regions = [RegionSpec(r.name, r.number, r.host, ports[2 * i], ports[2 * i + 1])
                          for i, r in enumerate(config.regions)]
        config.appendfsync = self.fsync
        self.config = config
        self.cluster_file = os.path.join(self.workdir, "cluster.toml")
        config.save(self.cluster_file)  # the real addresses (for braid-admin and attaching)
        self.relays = RelayHub(self.seed)
        for a in config.regions:  # the lower number dials: its link to each higher one is a relay
            for b in config.regions:
                if a.number < b.number:
                    self.relays.add(a.number, b.number, (b.host, b.repl_port))
        for r in config.regions:
            self.procs[r.number] = proc = RegionProcess(
                r.port, os.path.join(self.workdir, r.name), self._region_file(r), r.name,
                ["--enable-debug-command", "yes", "--appendfsync", self.fsync], bug=self.bug)
            proc.start()
        self.addresses = {r.number: ("127.0.0.1", r.port) for r in config.regions}

    def _region_file(self, me: RegionSpec) -> str:
        """Region ``me``'s cluster file: the peers it dials are at their relays."""
        c = self.config
        regions = [RegionSpec(r.name, r.number, r.host,
                              r.port, self.relays.relays[(me.number, r.number)].port if r.number > me.number
                              else r.repl_port) for r in c.regions]
        view = ClusterConfig(c.cluster_id, c.database, c.token, c.stride, regions, c.id_mode, c.appendfsync,
                             tls=c.tls)
        path = os.path.join(self.workdir, f"{me.name}.toml")
        view.save(path)
        return path

    # ------------------------------------------------------------ faults
    def kill(self, region: int) -> None:
        proc = self.procs[region]
        if proc.paused:
            self.resume(region)
        proc.kill(signal.SIGKILL)

    def restart(self, region: int) -> None:
        if not self.procs[region].alive():
            self.procs[region].restart()

    def pause(self, region: int) -> None:
        self.procs[region].proc.send_signal(signal.SIGSTOP)
        self.procs[region].paused = True

    def resume(self, region: int) -> None:
        if self.procs[region].paused:
            self.procs[region].proc.send_signal(signal.SIGCONT)
            self.procs[region].paused = False

    def partition(self, a: int, b: int) -> None:
        self.relays.partition(a, b)

    def hold(self, src: int, dst: int) -> None:
        self.relays.hold(src, dst)

    def impair(self, a: int, b: int, **kw) -> None:
        self.relays.impair(a, b, **kw)

    def heal_network(self) -> None:
        self.relays.heal()

    def heal_all(self) -> None:
        self.heal_network()
        for region in self.procs:
            self.resume(region)
            self.restart(region)
            self.heal_region(region)

    def logs(self) -> dict[int, str]:
        return {n: p.log_path for n, p in self.procs.items()}

    def stop(self) -> None:
        for region, proc in self.procs.items():
            self.resume(region)
            proc.stop()
        if self.relays is not None:
            self.relays.close()


class LinkControls:
    """Partitions through the regions' own link controls (``BRAID.REPLICATION PAUSE PEER``):
    for backends that cannot put a relay in front of each link.  One stream per pair, so
    cutting it at one end cuts it both ways."""

    addresses: dict[int, tuple[str, int]]
    names: dict[int, str]

    def partition(self, a: int, b: int) -> None:
        c = connect(self.addresses[a])
        try:
            c.execute_command("BRAID.REPLICATION", "PAUSE", "PEER", self.names[b])
        finally:
            c.close()

    def heal_network(self) -> None:
        for address in self.addresses.values():
            c = connect(address)
            try:
                c.execute_command("BRAID.REPLICATION", "RESUME")
            except (redis.RedisError, OSError):
                pass  # a region that is down has nothing paused
            finally:
                c.close()


class AttachBackend(LinkControls, Backend):
    """An already running cluster: link cuts through the regions' own replication controls."""

    faults = DEBUG_FAULTS | {"partition", "bridge"}

    def __init__(self, cluster_file: str) -> None:
        self.cluster_file = cluster_file
        self.config = load(cluster_file)
        self.addresses = {r.number: (r.host, r.port) for r in self.config.regions}
        self.names = {r.number: r.name for r in self.config.regions}

    def start(self) -> None:
        """Keep only the DEBUG faults every region accepts (it may run without --enable-debug-command,
        or without an append-only file)."""
        for probe, kinds in ((("CLOCK-OFFSET", 0), {"clock"}), (("FSYNC-DELAY", 0), {"disk-full", "slow-fsync"})):
            for region in self.addresses:
                try:
                    self.debug(region, *probe)
                except redis.ResponseError:
                    self.faults = self.faults - kinds
                    break

    def heal_all(self) -> None:
        self.heal_network()
        for region in self.addresses:
            self.heal_region(region)
