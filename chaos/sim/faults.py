"""The simulation's faults, and the operator who answers them (mixed into world.Simulation).

:class:`Faults` is the part of :class:`~chaos.sim.world.Simulation` that injects the
faults a schedule runs with (crash, partition, clog, swizzle, clock, membership, restore,
bitflip, lone, backlog, memory; drop, dup and reorder are the network's, links.py), stops
and restarts regions (a fail-stop included), and acts as the operator a refused start
needs (a salvage).  Its methods use the simulation's state, which world.py's
``Simulation.__init__`` sets up; world.py's docstring tells what each fault does.
"""

from __future__ import annotations

import math

from .disk import held_vv
from .region import SimRegion
from .scheduler import START_MS, _vv

FAIL_STOP_RESTARTS = 3  # a region restarted this often after fail-stops stays down (the run fails anyway)
STARTUP_CHECK_MS = 300  # a restarted region asks its peers for their member lists (after its first dials)
LONE_AWAY_MS = (300, 1500)  # the lone fault: how long the region that goes away stays down
MEMORY_ROOM = (0, 3000)     # the memory fault: maxmemory this many bytes above what the region holds
MEMORY_FULL_MS = (50, 1500)  # ... for this long
LONG_PARTITION_MS = (200, 900)     # ... and isolates a region this long now and then


class Faults:
    """Faults and the operator (a part of :class:`~chaos.sim.world.Simulation`)."""

    def inject_fault(self) -> None:
        kinds = [k for k in ("crash", "partition", "clog", "swizzle", "clock", "membership", "restore", "bitflip",
                             "lone", "backlog", "memory") if k in self.config.faults]
        if not kinds:
            return
        kind = self.rng.choice(kinds)
        getattr(self, f"_fault_{kind}")()

    def _fault_crash(self) -> None:
        up = self.membership.crash_victims([r for r in self.regions.values() if r.up])
        if not up:
            return
        victim = self.rng.choice(up)
        if self.siblings and self.rng.random() < 0.5:  # a sharded region: one shard's process
            self.crash(victim, process=True)
            return
        self.crash(victim)
        for group in self.siblings:  # the machine: every shard of the region
            group.machine_crashed(victim.number, self.shard)

    def machine_crashed(self, number: int, shard: int) -> None:
        """Region ``number``'s machine went down (a fault of group ``shard``): its shard of this
        group goes down with it - unless this group healed already (no faults from then on)."""
        region = self.regions.get(number)
        if self.active and region is not None and region.up:
            self.crash(region, f"MACHINE r{number} (with its shard {shard})")

    def crash(self, region: SimRegion, cause: str = "", process: bool = False) -> None:
        """Crash ``region`` (its machine; under ``appendfsync no``, which promises nothing across
        a machine crash, or with ``process``, its process) and restart it later; ``cause``
        opens the trace line."""
        machine = self.config.fsync != "no" and not process
        for peer in list(region.links):
            self.disconnect(region.number, peer, f"region {region.number} crashed")
        happened = region.crash(machine)
        self.sched.log(f"{cause + '; ' if cause else ''}CRASH r{region.number} "
                       f"({'machine' if machine else 'process'}): {happened}")
        self.sched.after(self.rng.randint(20, 1500), self.restart, region.number, region.incarnation)

    def _stop(self, region: SimRegion, fault: str) -> None:
        """Stop ``region`` for an operator's fault: cleanly, or by a crash; it restarts later,
        and ``region.restart_as`` says what the operator does to its folder before."""
        if self.rng.random() < 0.5:
            for peer in list(region.links):
                self.disconnect(region.number, peer, f"region {region.number} stopped")
            self.sched.log(f"{fault.upper()} r{region.number} {region.stop_cleanly()}")
            self.sched.after(self.rng.randint(20, 1500), self.restart, region.number, region.incarnation)
        else:
            self.crash(region, f"{fault.upper()} r{region.number} goes down")
        region.restart_as, region.stopped_ms = fault, self.sched.now

    def _fault_restore(self) -> None:
        up = self.membership.crash_victims([r for r in self.regions.values() if r.up])
        if up:
            self._stop(self.rng.choice(up), "restore")

    def _fault_lone(self) -> None:
        """A region goes away for a while (a long outage, at a schedule's scale) and, meanwhile, another restarts -
        from an older copy of its folder when the operator has one: the restarted one waits
        ``crdt-lone-writes-after-ms`` for the missing member, then takes writes alone; the one
        away may hold operations of it the copy lacks (node/activeactive/lone_writes.py)."""
        up = self.membership.crash_victims([r for r in self.regions.values() if r.up])
        if len(up) < 2:
            return
        away, back = self.rng.sample(up, 2)
        for peer in list(away.links):
            self.disconnect(away.number, peer, f"region {away.number} went away")
        happened = away.crash(self.config.fsync != "no")
        self.sched.log(f"LONE r{away.number} goes away for long: {happened}")
        self.sched.after(self.rng.randint(*LONE_AWAY_MS), self.restart, away.number, away.incarnation)
        self._stop(back, "restore")

    def _fault_bitflip(self) -> None:
        up = self.membership.crash_victims([r for r in self.regions.values() if r.up])
        if up:
            self._stop(self.rng.choice(up), "bitflip")

    def _image_crash(self, number: int, incarnation: int) -> None:
        """The image-crash fault's machine crash, if the image's snapshot is still not on disk."""
        region = self.regions[number]
        if not self.active or not region.up or region.incarnation != incarnation:
            return
        if region.core.oplog.unsaved_image is not None:
            self.crash(region, f"IMAGE-CRASH r{number}: the machine goes down before the image's snapshot is written")

    def _disk_freed(self, number: int) -> None:
        region = self.regions[number]
        if region.file.snapshot_fails:
            region.file.snapshot_fails = False
            self.sched.log(f"r{number}'s disk has room again")

    def _operator_acts(self, region: SimRegion) -> tuple[dict[int, int], str] | None:
        """What the operator does to a stopped region's folder before it starts again (its
        ``restart_as``): put an older copy back, or flip a bit (the disk's doing).  Returns
        what the folder held before and why, for the durability check's count of losses."""
        fault, region.restart_as = region.restart_as, None
        # (a copy taken while it is down is the folder as it is: only older ones go back in time)
        copies = [c for c in self.backups.get(region.number, []) if c[0].taken_ms <= region.stopped_ms]
        if fault is not None and "stale-copies" not in self.config.faults:
            # the folder is about to lose operations every copy of it so far may hold, and the
            # region may mint their numbers again: restored later, such a copy would fork its
            # history.  The operator takes new copies from now on (stale-copies: it does not)
            self.backups[region.number] = []
        if fault == "restore":
            if not copies:
                self.sched.log(f"RESTORE r{region.number}: no copy of its folder yet: it starts from its own")
                return None
            before = held_vv(region.file, region.number)
            copied, trimmed = self.rng.choice(copies)
            region.file.restore(copied)
            self.trimmed[region.number] = list(trimmed)
            mark = "clean" if copied.closed_cleanly else "recover" if copied.recover_mark else "its boot"
            self.sched.log(f"RESTORE r{region.number} starts from its folder as copied at "
                           f"t={copied.taken_ms - START_MS} ({len(copied.durable)} bytes of log"
                           f"{f', snapshot at record {copied.snapshot[0]}' if copied.snapshot else ''}, run mark "
                           f"{mark}): the folder held vv {_vv(before)}")
            return before, f"r{region.number}'s restore from an older copy"
        if fault == "bitflip":
            before = held_vv(region.file, region.number)
            what = region.file.flip(self.rng)
            self.sched.log(f"BITFLIP r{region.number}: {what or 'an empty folder: nothing to flip'}")
            return before, f"the salvage of r{region.number}'s damaged files"
        return None

    def fail_stopped(self, region: SimRegion) -> None:
        """``region``'s core fail-stopped: its process exits (a crash of the process), and
        it restarts later from its file."""
        reason = region.core.failed
        self.sched.errors.append(f"FAIL-STOP r{region.number}: {reason}")
        for peer in list(region.links):
            self.disconnect(region.number, peer, f"region {region.number} fail-stopped")
        what = region.crash(machine=False)
        region.fail_stops += 1
        self.sched.log(f"FAIL-STOP r{region.number}: {reason}; {what}")
        if region.fail_stops <= FAIL_STOP_RESTARTS:
            self.sched.after(self.rng.randint(20, 1500), self.restart, region.number, region.incarnation)

    def restart(self, number: int, incarnation: int) -> None:
        region = self.regions[number]
        if region.up or region.incarnation != incarnation:
            return
        acted = self._operator_acts(region)
        cut = self.boot(region)
        self.waits.started(region, "folder" if acted is not None else region.went_down)
        if acted is not None:  # what the folder lost (a restore, a cut or salvaged flip), for the checkers
            before, why = acted
            self.file_losses.append((number, before, dict(region.causal.vv), why))
            if self.promises.withdrawn.get(number) and not region.core.aa.lone.reissue:
                # its withdrawn writes were listed only in its log, which the operator replaced
                lost = self.promises.withdrawn.pop(number)
                self.sched.log(f"durability: {lost} operation(s) r{number} withdrew and had not issued again "
                               f"went with {why}")
        self.sched.log(f"RESTART r{number}: replayed its file (torn tail cut: {cut} bytes), vv {_vv(region.causal.vv)}")
        # (a fixed delay, no draw: without the membership fault a schedule stays what it was before it)
        self.sched.after(STARTUP_CHECK_MS, self.membership.startup_check, number, region.incarnation)
        for peer in sorted(self.regions):
            if peer != number:
                self.sched.after(self.rng.randint(5, 100), self.connect, min(number, peer), max(number, peer))

    def _fault_membership(self) -> None:
        self.membership.start()

    def _fault_partition(self) -> None:
        self.partition()

    def _fault_backlog(self) -> None:
        """A partition longer than every backlog: a region isolated while both sides write on;
        before it heals, every region trims its backlog (the virtual schedule is shorter than
        a backlog's life, so its end stands for the hours that passed), so each side drops
        operations the other lacks and the heal joins their states."""
        self.partition(isolate=True, duration=self.rng.randint(*LONG_PARTITION_MS), trim_first=True)

    def partition(self, isolate: bool | None = None, duration: int | None = None, trim_first: bool = False) -> None:
        """Isolate a region, or cut one pair (the others bridge it), for a while."""
        numbers = sorted(self.regions)
        if isolate or isolate is None and self.rng.random() < 0.5:
            victim = self.rng.choice(numbers)
            pairs = [(min(victim, o), max(victim, o)) for o in numbers if o != victim]
            what = f"region {victim} isolated"
        else:
            pairs = [self.rng.choice(self.pairs())]
            what = f"pair {pairs[0][0]}-{pairs[0][1]} cut (the others bridge it)"
        if duration is None:
            duration = self.rng.randint(50, 3000)
        self.sched.log(f"PARTITION {what} for {duration} ms")
        for a, b in pairs:
            pair = frozenset((a, b))
            self.net.cuts[pair] = self.net.cuts.get(pair, 0) + 1
            self.disconnect(a, b, "partitioned")
        self.sched.after(duration, self._unpartition, pairs, trim_first)

    def _unpartition(self, pairs: list[tuple[int, int]], trim_first: bool = False) -> None:
        if not self.active:
            return  # the heal already lifted every cut
        if trim_first:  # hours passed: every backlog's age bound dropped all it may drop
            for region in self.regions.values():
                if region.up:
                    self.cron_steps(region, "backlog-trim", math.inf)
        for a, b in pairs:
            pair = frozenset((a, b))
            self.net.cuts[pair] -= 1
            if not self.net.cuts[pair]:
                del self.net.cuts[pair]
                self.sched.log(f"partition of {a}-{b} healed")
                self.connect(a, b)

    def _directions(self) -> list[tuple[int, int]]:
        return [(a, b) for a in sorted(self.regions) for b in sorted(self.regions) if a != b]

    def _clog(self, a: int, b: int, until: int) -> None:
        if not self.active:
            return
        self.net.clogged_until[(a, b)] = max(self.net.clogged_until.get((a, b), 0), until)
        self.sched.log(f"CLOG {a}->{b} until t={until - START_MS}")

    def _fault_clog(self) -> None:
        a, b = self.rng.choice(self._directions())
        self._clog(a, b, self.sched.now + self.rng.randint(20, 2000))

    def _fault_swizzle(self) -> None:
        """FoundationDB's swizzle-clog: clog a random subset one by one, unclog in random order."""
        directions = self._directions()
        chosen = self.rng.sample(directions, self.rng.randint(1, len(directions)))
        t = self.sched.now
        starts = []
        for a, b in chosen:
            t += self.rng.randint(5, 100)
            starts.append((t, a, b))
        ends = [t + self.rng.randint(50, 1500) for _ in chosen]
        order = list(range(len(chosen)))
        self.rng.shuffle(order)
        ends.sort()
        self.sched.log(f"SWIZZLE-CLOG {', '.join(f'{a}->{b}' for a, b in chosen)}")
        for i, idx in enumerate(order):
            start, a, b = starts[idx]
            self.sched.at(start, self._clog, a, b, max(ends[i], start + 1))

    def _fault_memory(self) -> None:
        """A region runs short of memory: its maxmemory is set a little above what it holds, so
        its clients' writes are soon refused (OOM) while the other regions' operations are
        still applied; the limit is lifted later (at the latest, by the heal)."""
        up = [r for r in self.regions.values() if r.up]
        if not up:
            return
        region = self.rng.choice(up)
        core = region.core
        limit = core.memory.used() + self.rng.randint(*MEMORY_ROOM)
        core.config.set("maxmemory", limit)
        core.config_changed()
        self.sched.log(f"MEMORY r{region.number}: maxmemory {limit} ({core.memory.used()} used)")
        self.sched.after(self.rng.randint(*MEMORY_FULL_MS), self._memory_freed, region.number, region.incarnation)

    def _memory_freed(self, number: int, incarnation: int) -> None:
        region = self.regions[number]
        if region.up and region.incarnation == incarnation and region.core.memory.limit:
            region.core.config.set("maxmemory", 0)
            region.core.config_changed()
            self.sched.log(f"MEMORY r{number}: maxmemory lifted ({region.core.memory.used()} used)")

    def _fault_clock(self) -> None:
        region = self.rng.choice(list(self.regions.values()))
        if self.rng.random() < 0.5:
            region.skew = self.rng.randint(-3000, 3000)
            self.sched.log(f"CLOCK r{region.number} skewed to {region.skew:+d} ms")
        else:
            jump = self.rng.randint(100, 5000)
            region.skew -= jump
            self.sched.log(f"CLOCK r{region.number} jumps back {jump} ms (skew {region.skew:+d} ms)")
