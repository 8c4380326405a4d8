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
kill           SIGKILL a region; restarted on the same data when the fault heals
pause          SIGSTOP a region (clients time out, links stall); SIGCONT
partition      cut the link between two regions, both ways
one-way        what one region sends another is held; the other way flows
bridge         split the regions in two sides; one region stays connected to both
link-faults    every link delays (with jitter) and resets now and then (loss)
clock          a region's clock jumps (forwards or backwards, up to a minute)
disk-full      a region's append-only file cannot be written (ENOSPC)
slow-fsync     a region's fsyncs take hundreds of milliseconds
=============  =====================================================================
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

import redis

from .history import History

KINDS = ("kill", "pause", "partition", "one-way", "bridge", "link-faults", "clock", "disk-full", "slow-fsync")


@dataclass(frozen=True)
class Step:
    at: float
    kind: str
    targets: tuple
    length: float
    params: dict = field(default_factory=dict, hash=False, compare=False)


def schedule(seed: int, duration: float, regions: list[int], kinds: list[str]) -> list[Step]:
    rng = random.Random(seed)
    steps, t = [], 1.5  # let the workloads warm up first
    while kinds and t < duration - 1.5:
        kind = rng.choice(kinds)
        length = min(rng.uniform(2.0, 7.0), duration - t)
        steps.append(_step(rng, t, kind, length, regions))
        t += length + rng.uniform(0.5, 2.0)
    return steps


def _step(rng: random.Random, t: float, kind: str, length: float, regions: list[int]) -> Step:
    if kind in ("partition", "one-way"):
        return Step(t, kind, tuple(rng.sample(regions, 2)), length)
    if kind == "bridge":
        rest = rng.sample(regions, len(regions))
        bridge, others = rest[0], rest[1:]
        cut = max(1, len(others) // 2)
        left, right = sorted(others[:cut]), sorted(others[cut:])
        return Step(t, kind, (bridge, *left, *right), length, {"sides": (left, right)})
    if kind == "link-faults":
        return Step(t, kind, tuple(regions), length,
                    {"delay_s": rng.uniform(0.01, 0.2), "jitter_s": rng.uniform(0.0, 0.1),
                     "reset_p": rng.uniform(0.005, 0.05)})
    target = (rng.choice(regions),)
    if kind == "clock":
        return Step(t, kind, target, length, {"offset_ms": rng.choice((-1, 1)) * rng.randint(1000, 60000)})
    if kind == "slow-fsync":
        return Step(t, kind, target, length, {"delay_ms": rng.randint(100, 800)})
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
                fault = self.history.fault(step.kind, list(step.targets), _describe(step))
                try:
                    undo = self.inject(step)
                except (redis.RedisError, OSError) as e:  # e.g. DEBUG at a region that is down
                    fault.detail += f" (not injected: {e})"
                    undo = None
                if self.stop_event.wait(step.length):
                    return  # the run is over: the heal undoes this fault, and marks it healed
                if undo is not None:
                    try:
                        undo()
                    except (redis.RedisError, OSError) as e:
                        fault.detail += f" (heal failed: {e})"
                self.history.healed(fault)
        except BaseException as e:  # surfaces in the report instead of dying silently
            self.error = e

    def inject(self, step: Step):
        b, (first, *rest), p = self.backend, step.targets, step.params
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
        raise ValueError(f"unknown fault kind {step.kind!r}")


def _describe(step: Step) -> str:
    t, p, k = step.targets, step.params, step.kind
    if k == "kill":
        return f"SIGKILL region {t[0]}, restart after {step.length:.1f}s"
    if k == "pause":
        return f"SIGSTOP region {t[0]} for {step.length:.1f}s"
    if k == "partition":
        return f"cut link {t[0]}-{t[1]}"
    if k == "one-way":
        return f"hold what region {t[0]} sends region {t[1]}"
    if k == "bridge":
        return f"sides {p['sides'][0]} and {p['sides'][1]} joined only through region {t[0]}"
    if k == "link-faults":
        return f"all links: delay {p['delay_s']:.3f}s, jitter {p['jitter_s']:.3f}s, reset p={p['reset_p']:.3f}"
    if k == "clock":
        return f"region {t[0]} clock {p['offset_ms']:+d} ms"
    if k == "slow-fsync":
        return f"region {t[0]} fsync +{p['delay_ms']} ms"
    return f"region {t[0]} disk full"
