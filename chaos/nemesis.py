"""The nemesis: a seeded schedule of faults, played against a backend.

The schedule is a pure function of (seed, duration, regions, fault kinds), so
``--seed`` replays the same faults at the same moments against the same
targets.  Faults come one at a time - each holds for a few seconds, heals,
and the cluster gets a short breath - so the report's timeline reads as a
sequence of stories.  (The deterministic simulation, ``braid-chaos sim``,
overlaps faults freely.)

=============  =====================================================================
kind           what happens, and how it heals
=============  =====================================================================
kill           SIGKILL a region; restarted on the same data when the fault heals (a
               sharded region: its supervisor, whose shards die with it - a machine
               crash -, and the supervisor restarted, which starts every shard)
shard-kill     sharded regions (``--shards N``): SIGKILL one shard process of a region;
               its supervisor restarts it by itself while the region's other shards
               serve on, and the heal checks that it did (how long it took, and
               whether the other shards answered meanwhile)
pause          SIGSTOP a region (every process of it) (clients time out, links stall);
               SIGCONT
partition      cut the link between two regions, both ways
one-way        what one region sends another is held; the other way flows
bridge         split the regions in two sides; one region stays connected to both
long-partition split the regions in two sides with no region between them, every
               backlog bounded to nothing meanwhile: each side drops operations the
               other lacks, and the heal must join the two sides' states
link-faults    every link delays (with jitter) and resets now and then (loss)
clock          a region's clock jumps (forwards or backwards, up to a minute)
disk-full      a region's append-only file cannot be written (ENOSPC)
slow-fsync     a region's fsyncs take hundreds of milliseconds
restore        a copy of a region's data folder is taken while it runs (as a careless
               backup or a snapshot of its VM would be); the heal SIGKILLs the region
               and starts it from that copy: what it wrote since, its peers must give
               back before it writes again
membership     while the faults above go on: a region is added (it joins, catches up,
               becomes active), one is removed gracefully, one is cut off from its
               peers for a second, killed and removed by force, then restarted (every
               member refuses it), purged, and maybe added again under a new number
               (:class:`MembershipNemesis`)
=============  =====================================================================

The membership changes run in a thread of their own, beside the fault schedule, so
they meet real faults: a change that needs a member a fault took away is refused by
braid-admin (nothing changed) and tried again a second later.  Each fault's targets are
drawn again when it is injected if the members changed since the schedule was made
(from the seed and the step, so a replay with the same membership history draws the
same); a region a membership change works on is left alone, and a change never picks
a region under a fault.
"""

from __future__ import annotations

import contextlib
import random
import threading
from dataclasses import dataclass, field

import redis

from .history import Fault, History

KINDS = ("kill", "pause", "partition", "one-way", "bridge", "long-partition", "link-faults", "clock", "disk-full",
         "slow-fsync", "restore", "shard-kill", "membership")
SCHEDULED = KINDS[:-1]  # membership changes are not steps of the schedule: MembershipNemesis plays them
ISOLATED_S = 1.0  # a forced removal: how long the region is cut off from its peers before its SIGKILL


@dataclass(frozen=True)
class Step:
    at: float
    kind: str
    targets: tuple
    length: float
    params: dict = field(default_factory=dict, hash=False, compare=False)


def schedule(seed: int, duration: float, regions: list[int], kinds: list[str], shards: int = 1) -> list[Step]:
    rng = random.Random(seed)
    kinds = [k for k in kinds if k in SCHEDULED]
    steps, t = [], 1.5  # let the workloads warm up first
    while kinds and t < duration - 1.5:
        kind = rng.choice(kinds)
        length = min(rng.uniform(2.0, 7.0), duration - t)
        steps.append(_step(rng, t, kind, length, regions, shards))
        t += length + rng.uniform(0.5, 2.0)
    return steps


def _step(rng: random.Random, t: float, kind: str, length: float, regions: list[int], shards: int = 1) -> Step:
    if kind in ("partition", "one-way"):
        return Step(t, kind, tuple(rng.sample(regions, 2)), length)
    if kind == "bridge":
        rest = rng.sample(regions, len(regions))
        bridge, others = rest[0], rest[1:]
        cut = max(1, len(others) // 2)
        left, right = sorted(others[:cut]), sorted(others[cut:])
        return Step(t, kind, (bridge, *left, *right), length, {"sides": (left, right)})
    if kind == "long-partition":
        rest = rng.sample(regions, len(regions))
        cut = rng.randint(1, len(rest) - 1)
        left, right = sorted(rest[:cut]), sorted(rest[cut:])
        return Step(t, kind, (*left, *right), length, {"sides": (left, right)})
    if kind == "link-faults":
        return Step(t, kind, tuple(regions), length,
                    {"delay_s": rng.uniform(0.01, 0.2), "jitter_s": rng.uniform(0.0, 0.1),
                     "reset_p": rng.uniform(0.005, 0.05)})
    target = (rng.choice(regions),)
    if kind == "clock":
        return Step(t, kind, target, length, {"offset_ms": rng.choice((-1, 1)) * rng.randint(1000, 60000)})
    if kind == "slow-fsync":
        return Step(t, kind, target, length, {"delay_ms": rng.randint(100, 800)})
    if kind == "shard-kill":
        return Step(t, kind, target, length, {"shard": rng.randrange(shards)})
    if kind == "kill" and shards > 1:
        return Step(t, kind, target, length, {"shards": shards})  # (for its description: a machine crash)
    return Step(t, kind, target, length)


class Nemesis(threading.Thread):
    """Plays a schedule; every fault is recorded (with its healing) in the history."""

    def __init__(self, backend, steps: list[Step], history: History, stop: threading.Event) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.backend, self.steps, self.history, self.stop_event = backend, steps, history, stop
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for step in self.steps:
                if self.stop_event.wait(max(0.0, step.at - self.history.now())):
                    return
                step = self._retarget(step)
                if step is None:
                    continue  # too few members for this kind of fault now
                fault = self.history.fault(step.kind, list(step.targets), _describe(step))
                try:
                    undo = self.inject(step, fault)
                except (redis.RedisError, OSError, KeyError) as e:  # e.g. DEBUG at a region that is down
                    fault.detail += f" (not injected: {e!r})"
                    undo = None
                if self.stop_event.wait(step.length):
                    return  # the run is over: the heal undoes this fault, and marks it healed
                if undo is not None:
                    try:
                        undo()
                    except (redis.RedisError, OSError, KeyError) as e:
                        fault.detail += f" (heal failed: {e!r})"
                self._release(step)
                self.history.healed(fault)
        except BaseException as e:  # surfaces in the report instead of dying silently
            self.error = e

    def _retarget(self, step: Step) -> Step | None:
        """The step, its targets drawn again among the regions a fault may hit now if they changed;
        the targets are marked as under a fault (membership changes leave them alone)."""
        b = self.backend
        with getattr(b, "lock", None) or contextlib.nullcontext():
            if step.kind in ("kill", "pause", "restore", "shard-kill") and getattr(b, "busy", None):
                return None  # a removal under way needs every other member up; network faults still happen
            current = b.fault_targets() if hasattr(b, "fault_targets") else sorted(b.addresses)
            if not set(step.targets) <= set(current) or (step.kind == "link-faults" and
                                                           list(step.targets) != current):
                need = 3 if step.kind == "bridge" else 2 if step.kind in ("partition", "one-way", "link-faults",
                                                                          "long-partition") else 1
                if len(current) < need:
                    return None
                rng = random.Random(f"{step.at}:{step.kind}:{current}")
                step = _step(rng, step.at, step.kind, step.length, current, getattr(b, "shards", 1))
            if hasattr(b, "faulted"):
                b.faulted.update(step.targets)
        return step

    def _release(self, step: Step) -> None:
        if hasattr(self.backend, "faulted"):
            with self.backend.lock:
                self.backend.faulted.difference_update(step.targets)

    def inject(self, step: Step, fault: Fault | None = None):
        b, (first, *rest), p = self.backend, step.targets, step.params
        if step.kind == "shard-kill":  # the backend watches the supervisor restart it (chaos/shards.py)
            return b.kill_shard(first, p["shard"], fault).finish
        if step.kind == "kill":
            b.kill(first)
            return lambda: b.restart(first)
        if step.kind == "pause":
            b.pause(first)
            return lambda: b.resume(first)
        if step.kind == "partition":
            b.partition(first, rest[0])
            return b.heal_network
        if step.kind == "one-way":
            b.hold(first, rest[0])
            return b.heal_network
        if step.kind == "bridge":
            left, right = p["sides"]
            for x in left:
                for y in right:
                    b.partition(x, y)
            return b.heal_network
        if step.kind == "long-partition":
            left, right = p["sides"]
            bounded = b.bound_backlogs(step.targets)
            for x in left:
                for y in right:
                    b.partition(x, y)

            def heal() -> None:
                b.heal_network()
                b.unbound_backlogs(bounded)
            return heal
        if step.kind == "link-faults":
            for i, x in enumerate(step.targets):
                for y in step.targets[i + 1:]:
                    b.impair(x, y, **p)
            return b.heal_network
        if step.kind == "clock":
            b.debug(first, "CLOCK-OFFSET", p["offset_ms"])
            return lambda: b.debug(first, "CLOCK-OFFSET", 0)
        if step.kind == "disk-full":
            b.debug(first, "DISK-FULL", "yes")
            return lambda: b.debug(first, "DISK-FULL", "no")
        if step.kind == "slow-fsync":
            b.debug(first, "FSYNC-DELAY", p["delay_ms"])
            return lambda: b.debug(first, "FSYNC-DELAY", 0)
        if step.kind == "restore":
            b.copy_folder(first)
            return lambda: b.restore(first)
        raise ValueError(f"unknown fault kind {step.kind!r}")


class MembershipNemesis(threading.Thread):
    """Membership changes during the faults phase, through braid-admin (a :class:`ProcessBackend`).

    At about 10 % of the run a region is added; the nemesis waits until it reports itself
    active, and clients write there from then on.  At about 35 % an active region is
    removed gracefully (clients stop writing there first; the region hands over all its
    operations and stops).  At about 55 % another is cut off from its peers for
    ``ISOLATED_S`` while clients write there (what it acknowledges meanwhile, only it
    holds: WAITs there time out), then killed and removed by force; its
    frozen point is recorded in the history (the checkers excuse acknowledged writes of it
    that may lie beyond), it is restarted (refused by every member), purged (it deletes
    its data and stops) and, on most seeds, added again under its name and a new number.
    A removal only happens while at least three regions take writes, so two always do.
    Every change is a ``membership`` fault in the history, healed when it is done."""

    def __init__(self, backend, seed: int, duration: float, history: History, stop: threading.Event) -> None:
        super().__init__(name="membership", daemon=True)
        self.backend, self.duration, self.history, self.stop_event = backend, duration, history, stop
        self.rng = random.Random(f"{seed}:membership")
        self.error: BaseException | None = None
        self.changes: list[str] = []  # what was done, in order (for the report)

    def run(self) -> None:
        try:
            if not self._at(0.10) or (added := self._add(None)) is None:
                return
            if not self._at(0.35) or not self._remove(force=False, spare=added):
                return
            if self._at(0.55):
                self._remove(force=True)
        except BaseException as e:
            self.error = e

    def _at(self, fraction: float) -> bool:
        return not self.stop_event.wait(max(0.0, fraction * self.duration - self.history.now()))

    def _retry(self, fault, what: str, attempt):
        """Run ``attempt`` until it succeeds or the phase ends (None); each refusal is noted."""
        from .backends import MembershipFailed

        refusals: list[str] = []
        try:
            while not self.stop_event.is_set():
                try:
                    return attempt()
                except MembershipFailed as e:
                    refusals.append(str(e))
                if self.stop_event.wait(1.0):
                    break
            return None
        finally:
            if refusals:
                fault.detail += (f"; {what} refused {len(refusals)}x, tried again each second "
                                 f"(first: {refusals[0]})")

    def _add(self, name: str | None) -> int | None:
        b = self.backend
        fault = self.history.fault("membership", [], f"add {name or 'a region'}")
        region = self._retry(fault, "add", lambda: b.add_region(name))
        if region is None:
            return None
        fault.targets = [region]
        fault.detail += f": region {region} joins"
        while b.member_status(region) != "active":
            if self.stop_event.wait(0.1):  # polling interval of a deadline wait
                fault.detail += " (not active before the end of the phase)"
                return region
        b.activated(region)
        fault.detail += ", caught up and active"
        self.changes.append(f"added {b.procs[region].region} as region {region} (active)")
        self.history.healed(fault)
        return region

    def _pick(self, spare: int | None) -> int | None:
        b = self.backend
        while not self.stop_event.is_set():
            writable = sorted(b.members.writable & set(b.members.addresses))
            if len(writable) >= 3:
                order = self.rng.sample(writable, len(writable))
                region = b.claim([r for r in order if r != spare] + [r for r in order if r == spare])
                if region is not None:
                    return region
            if self.stop_event.wait(0.2):  # polling interval: until a region is free of faults
                break
        return None

    def _remove(self, force: bool, spare: int | None = None) -> bool:
        """Remove an active region (``spare`` only if no other can go)."""
        b = self.backend
        region = self._pick(spare)
        if region is None:
            return False
        try:
            name = b.procs[region].region
            kind = "forced removal" if force else "graceful removal"
            fault = self.history.fault("membership", [region], f"{kind} of region {region} ({name})")
            if not force:
                out = self._retry(fault, "remove", lambda: b.remove_region(region))
                if out is None:
                    return False
                fault.detail += f": {out}"
                self.changes.append(f"removed region {region} gracefully")
                self.history.healed(fault)
                return True
            # the region's network fails first, then its machine: what it acknowledged meanwhile no
            # other region holds, so a WAIT there cannot be answered 1 and the removal loses those writes
            peers = b.isolate(region)
            self.stop_event.wait(ISOLATED_S)
            try:
                done = self._retry(fault, "forced removal", lambda: b.force_remove_region(region))
            finally:
                b.reconnect(region, peers)
            if done is None:
                return False
            out, frozen = done
            self.history.forced[region] = frozen
            per_shard = b.frozen_per_shard(region)  # a sharded region: each group froze it at its own point
            if per_shard is not None:
                self.history.forced_shards[region] = per_shard
            fault.detail += f": cut off from every peer for {ISOLATED_S:.1f} s, SIGKILL, then {out}"
            self.changes.append(f"removed region {region} by force (frozen at "
                                f"{frozen if per_shard is None else ' / '.join(map(str, per_shard))})")
            if self._retry(fault, "purge", lambda: b.purge_region(region)) is None:
                return False
            fault.detail += "; restarted, refused, purged"
            self.changes.append(f"purged region {region}")
            self.history.healed(fault)
        finally:
            with b.lock:
                b.busy.discard(region)
        if self.rng.random() < 0.7:  # most seeds bring it back as a new member
            self._add(name)
        return True


def _describe(step: Step) -> str:
    t, p, k = step.targets, step.params, step.kind
    if k == "kill" and p.get("shards"):
        return (f"SIGKILL region {t[0]}'s supervisor (its {p['shards']} shards die with it: a machine crash), "
                f"restart after {step.length:.1f}s")
    if k == "kill":
        return f"SIGKILL region {t[0]}, restart after {step.length:.1f}s"
    if k == "shard-kill":
        return f"SIGKILL shard {p['shard']} of region {t[0]}"
    if k == "pause":
        return f"SIGSTOP region {t[0]} for {step.length:.1f}s"
    if k == "partition":
        return f"cut link {t[0]}-{t[1]}"
    if k == "one-way":
        return f"hold what region {t[0]} sends region {t[1]}"
    if k == "bridge":
        return f"sides {p['sides'][0]} and {p['sides'][1]} joined only through region {t[0]}"
    if k == "long-partition":
        return f"sides {p['sides'][0]} and {p['sides'][1]} cut apart, every backlog bounded to nothing"
    if k == "link-faults":
        return f"all links: delay {p['delay_s']:.3f}s, jitter {p['jitter_s']:.3f}s, reset p={p['reset_p']:.3f}"
    if k == "clock":
        return f"region {t[0]} clock {p['offset_ms']:+d} ms"
    if k == "slow-fsync":
        return f"region {t[0]} fsync +{p['delay_ms']} ms"
    if k == "restore":
        return f"copy region {t[0]}'s folder, then after {step.length:.1f}s SIGKILL it and start it from the copy"
    return f"region {t[0]} disk full"
