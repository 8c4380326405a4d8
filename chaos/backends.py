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

Membership (the ``membership`` fault, :class:`chaos.nemesis.MembershipNemesis`) needs a
backend that can start a region process that did not exist at the start: only
:class:`ProcessBackend` has it.  Its regions then take the *highest* numbers of the
stride (13, 14, 15 of 16 for three regions) and each added region the next lower
unused number, because the lower number of a pair dials the other: a new region
dials every member, so its own cluster file can put a relay in front of each of
its links, like the first regions' files do, and every network fault reaches every
pair.  Membership changes go through ``braid-admin`` itself (a subprocess, against
the run's cluster file with the real addresses).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading

import redis

from node.activeactive.cluster_config import ClusterConfig, RegionSpec, load, local_cluster
from node.testing import BraidProcess, free_ports, replication_status, version_vector, wait_until

from .relay import RelayHub
from .workloads import Members, connect

DEBUG_FAULTS = {"clock", "disk-full", "slow-fsync"}
RESTORED_ALONE_S = 1.0  # the restore fault: how long a restored region runs before its peers reach it
NETWORK_FAULTS = {"partition", "one-way", "bridge", "long-partition", "link-faults"}
PROCESS_FAULTS = {"kill", "pause", "restore"}


class Backend:
    faults: set[str] = set()
    addresses: dict[int, tuple[str, int]] = {}
    cluster_file: str = ""
    members: Members | None = None  # what clients may use; None: ``addresses``, fixed for the run
    shards: int = 1  # shard processes per region (chaos/shards.py); ``addresses`` are then shard 0's

    def start(self) -> None: ...
    def stop(self) -> None: ...

    def fault_targets(self) -> list[int]:
        """Regions the fault nemesis may pick now."""
        return sorted(self.members.addresses if self.members is not None else self.addresses)

    def region_addresses(self, region: int) -> list[tuple[str, int]]:
        """Every RESP address of a region: one per shard."""
        return [self.addresses[region]]

    def debug(self, region: int, *args) -> None:
        """A DEBUG fault at one region, at each of its shards (it must run with --enable-debug-command)."""
        for address in self.region_addresses(region):
            c = connect(address, timeout=2.0)
            try:
                c.execute_command("DEBUG", *args)
            finally:
                c.close()

    def bound_backlogs(self, regions) -> dict[int, bytes]:
        """The long-partition fault: bound the replication backlog of every one of ``regions``
        to nothing (a partition longer than any backlog, in seconds); returns the settings to
        put back (:meth:`unbound_backlogs`), of the regions (and shards) that answered."""
        before = {}
        for address in (a for region in regions for a in self.region_addresses(region)):
            try:
                c = connect(address, timeout=2.0)
            except (redis.RedisError, OSError):
                continue
            try:
                before[address] = c.config_get("crdt-repl-backlog-size")["crdt-repl-backlog-size"]
                c.config_set("crdt-repl-backlog-size", 1)
            except (redis.RedisError, OSError):
                pass  # down: its backlog is nothing it sends anyway
            finally:
                c.close()
        return before

    def unbound_backlogs(self, before: dict[tuple[str, int], bytes]) -> None:
        for address, size in before.items():
            try:
                c = connect(address, timeout=2.0)
                try:
                    c.config_set("crdt-repl-backlog-size", size)
                finally:
                    c.close()
            except (redis.RedisError, OSError):
                pass  # down: it starts again with its cluster file's setting

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

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to every process of the region (a sharded one: its supervisor and its shards)."""
        assert self.proc is not None
        self.proc.send_signal(sig)


class MembershipFailed(Exception):
    """A membership change braid-admin did not make (its message says why; nothing changed, or it can be
    run again to finish)."""


class ProcessBackend(Backend):
    faults = DEBUG_FAULTS | NETWORK_FAULTS | PROCESS_FAULTS | {"membership"}

    def __init__(self, regions: int, workdir: str, fsync: str = "everysec", bug: str | None = None,
                 seed: int = 0, membership: bool = False) -> None:
        self.n, self.workdir, self.fsync, self.bug, self.seed = regions, workdir, fsync, bug, seed
        self.membership = membership  # number the regions from the top, so that added ones dial (module doc)
        if not membership:
            self.faults = type(self).faults - {"membership"}
        self.procs: dict[int, RegionProcess] = {}
        self.copies: dict[int, str] = {}  # the restore fault's copies of data folders, per region
        self.relays: RelayHub | None = None
        self.config: ClusterConfig | None = None
        self.lock = threading.RLock()  # the fault nemesis and the membership nemesis share the processes
        self.busy: set[int] = set()    # regions a membership change is working on: no other fault touches them
        self.faulted: set[int] = set()  # regions under a fault now: no membership change picks them
        self.retired: dict[int, RegionProcess] = {}  # processes of regions that left (stopped; logs kept)

    def start(self) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        config = local_cluster(self.n, 0)
        ports = free_ports(2 * self.n)
        top = config.stride - 1 - self.n if self.membership else 0
        config.regions = [RegionSpec(f"region-{r.number + top}", r.number + top, r.host, ports[2 * i],
                                     ports[2 * i + 1]) for i, r in enumerate(config.regions)]
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
            self.procs[r.number] = proc = self.region_process([r.port], os.path.join(self.workdir, r.name),
                                                              self._region_file(r), r.name)
            proc.start()
        self.addresses = {r.number: ("127.0.0.1", r.port) for r in config.regions}
        self.members = Members(self.addresses)

    def _region_file(self, me: RegionSpec, c: ClusterConfig | None = None) -> str:
        """Region ``me``'s cluster file: the peers it dials are at their relays."""
        c = c or self.config
        def dialed(r: RegionSpec) -> int:
            relay = self.relays.relay(me.number, r.number) if r.number > me.number else None
            return relay.port if relay is not None else r.repl_port

        regions = [RegionSpec(r.name, r.number, r.host, r.port, dialed(r), status=r.status, frozen=r.frozen)
                   for r in c.regions]
        view = ClusterConfig(c.cluster_id, c.database, c.token, c.stride, regions, c.id_mode, c.appendfsync,
                             tls=c.tls, epoch=c.epoch)
        path = os.path.join(self.workdir, f"{me.name}-{me.number}.toml")
        view.save(path)
        return path

    def fault_targets(self) -> list[int]:
        with self.lock:
            return [r for r in super().fault_targets() if r not in self.busy]

    def claim(self, candidates) -> int | None:
        """Mark the first of ``candidates`` that is under no fault busy (a membership change works on it)."""
        with self.lock:
            for r in candidates:
                if r in self.members.addresses and r not in self.faulted and r not in self.busy:
                    self.busy.add(r)
                    return r
        return None

    # ------------------------------------------------------------ membership
    def admin(self, *argv: str, timeout: float = 120.0) -> str:
        """Run ``braid-admin`` against the run's cluster file; its output, or MembershipFailed."""
        res = subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--cluster", self.cluster_file, *argv],
                             capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise MembershipFailed((res.stderr.strip() or res.stdout.strip()).removeprefix("braid-admin: "))
        return " ".join(res.stdout.split())

    def member_status(self, region: int) -> str:
        """The region's own view of its status (INFO crdt), '' if it does not answer."""
        address = self.members.addresses.get(region) or self.addresses.get(region)
        if address is None:
            return ""
        c = connect(address, timeout=2.0)
        try:
            return str(c.info("crdt").get("crdt_member_status", ""))
        except (redis.RedisError, OSError):
            return ""
        finally:
            c.close()

    def add_region(self, name: str | None = None) -> int:
        """``braid-admin region add`` a new region under the next lower unused number, with a
        port and a repl port per shard, then start it behind relays to every member (it dials
        them all, each of its shards the same shard of theirs).  Returns its number."""
        cfg = load(self.cluster_file)
        number = min(r.number for r in cfg.regions) - 1
        if number < 1:
            raise MembershipFailed("no region number left below the first regions'")
        name = name or f"region-{number}"
        s = self.shards
        ports = free_ports(2 * s)
        self.admin("region", "add", name, "--host", "127.0.0.1", "--port", ",".join(map(str, ports[:s])),
                   "--repl-port", ",".join(map(str, ports[s:])), "--number", str(number))
        cfg = load(self.cluster_file)  # braid-admin recorded the new member there
        with self.lock:
            assert self.relays is not None
            for r in cfg.live_regions():
                if r.number != number:
                    for k, repl_port in enumerate(r.repl_ports or [r.repl_port]):
                        self.relays.add(number, r.number, (r.host, repl_port), shard=k)
            proc = self.region_process(ports[:s], os.path.join(self.workdir, f"{name}-{number}"),
                                       self._region_file(cfg.by_number(number), cfg), name)
            self.procs[number] = proc
            self.addresses[number] = ("127.0.0.1", ports[0])
        proc.start()
        # it reads at once, writes once active
        self.members.set(number, ("127.0.0.1", ports[0]), writable=False,
                         shards=[("127.0.0.1", p) for p in ports[:s]] if s > 1 else None)
        return number

    def region_process(self, ports: list[int], data_dir: str, cluster_file: str, name: str) -> RegionProcess:
        """The process of a region of this run, on ``ports`` (one per shard), not started yet."""
        return RegionProcess(ports[0], data_dir, cluster_file, name,
                             ["--enable-debug-command", "yes", "--appendfsync", self.fsync], bug=self.bug)

    def activated(self, region: int) -> None:
        """The region reports itself active: clients may write there."""
        self.members.set(region, self.addresses[region], writable=True)

    def remove_region(self, region: int, timeout: float = 15.0) -> str:
        """A graceful removal (braid-admin region remove): it stops taking writes, hands over, leaves;
        then its process stops.  Returns braid-admin's report."""
        name = self.procs[region].region
        self.members.set(region, self.addresses[region], writable=False)
        out = self.admin("region", "remove", name, "--timeout", str(timeout))
        self._retire(region)
        return out

    def frozen_per_shard(self, region: int) -> list[int] | None:
        """A sharded region removed by force: the frozen point of each shard group (None: unsharded)."""
        return None

    def force_remove_region(self, region: int) -> tuple[str, int]:
        """SIGKILL the region (if it still runs), then braid-admin region remove --force.  Returns
        braid-admin's report and the frozen point."""
        name = self.procs[region].region
        self.members.set(region, None, writable=False)
        with self.lock:
            self.kill(region)
        out = self.admin("region", "remove", name, "--force")
        spec = load(self.cluster_file).by_number(region)
        return out, spec.frozen

    def isolate(self, region: int) -> list[int]:
        """Cut every link of ``region`` to the other members (both ways); returns those members."""
        with self.lock:
            peers = sorted(r for r in self.procs if r != region)
        for peer in peers:
            self.relays.partition(region, peer)
        return peers

    def reconnect(self, region: int, peers: list[int]) -> None:
        """Heal the links :meth:`isolate` cut (and any other fault on them)."""
        for peer in peers:
            self.relays.heal(region, peer)

    def purge_region(self, region: int) -> str:
        """Restart a region removed by force (it is refused by every member and learns it was removed),
        then braid-admin region purge: it deletes its data and stops."""
        proc = self.procs[region]
        with self.lock:
            if not proc.alive():
                proc.restart()
        out = self.admin("region", "purge", "--region", proc.region)
        with self.lock:
            if proc.proc is not None:
                try:
                    proc.proc.wait(30)
                except subprocess.TimeoutExpired:
                    pass
        self._retire(region)
        return out

    def _retire(self, region: int) -> None:
        """A region that is no member any more: no client, no fault, no process."""
        self.members.set(region, None, writable=False)
        with self.lock:
            proc = self.procs.pop(region)
            self.addresses.pop(region, None)
            self.retired[region] = proc
        proc.stop()

    # ------------------------------------------------------------ faults
    def kill(self, region: int) -> None:
        with self.lock:
            proc = self.procs[region]
            if proc.paused:
                self.resume(region)
            proc.kill(signal.SIGKILL)

    def restart(self, region: int) -> None:
        with self.lock:  # a region that left meanwhile is not started again
            if region in self.procs and not self.procs[region].alive():
                self.procs[region].restart()

    def copy_folder(self, region: int) -> None:
        """A copy of the region's data folder taken while it runs, as a careless backup or a
        snapshot of its VM would be (a record half written is a torn tail to it)."""
        with self.lock:
            source = self.procs[region].data_dir
        copy = os.path.join(self.workdir, f"copy-of-region-{region}")
        for _attempt in range(5):
            shutil.rmtree(copy, ignore_errors=True)
            try:
                shutil.copytree(source, copy, ignore=shutil.ignore_patterns(f"{RegionProcess.name}.log"))
                break
            except (shutil.Error, FileNotFoundError):
                continue  # a file went while it was copied (a compaction, a snapshot's rename): copy again
        else:
            raise OSError(f"could not copy region {region}'s folder while it ran")
        self.copies[region] = copy

    def restore(self, region: int) -> None:
        """Stop the region and start it from its copy (its log file stays).

        What a region acknowledged and had not yet sent to any other region is on its disk
        only, and replacing that disk loses it, whatever a database does (as losing the
        disk would).  The fault is about what the copy lacks that *peers* hold: so first
        the region takes no more writes (its disk reports full: writes get MISCONF, never
        acknowledged) and its peers catch up with everything it issued; then SIGKILL, and
        the copy goes in.  Its peers then hold operations of its own that the copy lacks,
        and it must take them back before it writes again."""
        with self.lock:
            proc, copy = self.procs.get(region), self.copies.pop(region, None)
            if proc is None or copy is None:
                return  # it left the members meanwhile
            if proc.paused:
                self.resume(region)
            with contextlib.suppress(redis.RedisError, OSError, TimeoutError):
                self.debug(region, "DISK-FULL", "yes")
                wait_until(lambda: self._peers_hold_all_of(region), 15.0, what=f"region {region}'s peers catching up")
            proc.kill(signal.SIGKILL)
            for name in os.listdir(proc.data_dir):
                if name != f"{RegionProcess.name}.log":
                    path = os.path.join(proc.data_dir, name)
                    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            shutil.copytree(copy, proc.data_dir, dirs_exist_ok=True)
            shutil.rmtree(copy, ignore_errors=True)
            # it comes back while its peers are out of reach for a moment, as after a restore on
            # a machine whose network is not up yet: clients reach it before any peer does
            peers = [number for number in self.addresses if number != region]
            for number in peers:
                self.partition(region, number)
            try:
                proc.restart()
                threading.Event().wait(RESTORED_ALONE_S)  # the fault's own length, not a synchronisation
            finally:
                self.heal_network()

    def _peers_hold_all_of(self, region: int) -> bool:
        """Does every other member hold every operation ``region`` issued (in every shard group)?"""
        def own(address, origin: int) -> int:
            c = connect(address, timeout=2.0)
            try:
                return version_vector(replication_status(c)).get(origin, 0)
            finally:
                c.close()

        for k, address in enumerate(self.region_addresses(region)):
            issued = own(address, region)
            if not all(own(self.region_addresses(number)[k], region) >= issued
                       for number in self.addresses if number != region):
                return False
        return True

    def pause(self, region: int) -> None:
        with self.lock:
            self.procs[region].signal_all(signal.SIGSTOP)
            self.procs[region].paused = True

    def resume(self, region: int) -> None:
        with self.lock:
            proc = self.procs.get(region)
            if proc is not None and proc.paused:
                proc.signal_all(signal.SIGCONT)
                proc.paused = False

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
        for region in list(self.procs):
            self.resume(region)
            self.restart(region)
            self.heal_region(region)

    def logs(self) -> dict[int, str]:
        return {n: p.log_path for n, p in {**self.retired, **self.procs}.items()}

    def stop(self) -> None:
        for region, proc in list(self.procs.items()):
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

    faults = DEBUG_FAULTS | {"partition", "bridge", "long-partition"}

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
