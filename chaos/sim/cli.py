"""``braid-chaos sim``: run schedules, report failures with a replay command and a minimal trace.

A failing schedule is shrunk before it is reported: the same seed is run again
with fewer client steps (a binary search for the fewest that still fail the
same check; the world draws its events lazily, so a shorter run is a prefix of
the longer one plus a heal) and then without each fault kind in turn, keeping
every change that still fails.  The smallest failing run's command and trace
are printed; its command replays it exactly.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import os
import random
import sys
import time

from .bugs import BUGS
from .run import Outcome, run_sim
from .world import DEFAULT_FAULTS, FAULTS, POLICIES, SimConfig

TRACE_LINES = 400  # a minimal trace longer than this is printed from its tail


def _seed_range(text: str) -> range:
    lo, sep, hi = text.partition("..")
    if not sep:
        raise argparse.ArgumentTypeError("expected A..B")
    return range(int(lo), int(hi) + 1)


def _faults(text: str) -> tuple[str, ...]:
    if text == "none":
        return ()
    chosen = tuple(f for f in text.split(",") if f)
    unknown = [f for f in chosen if f not in FAULTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown faults {unknown} (known: {', '.join(FAULTS)})")
    return tuple(f for f in FAULTS if f in chosen)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="braid-chaos sim",
                                description="Deterministic simulation of an Active-Active Braid cluster: every "
                                            "region in one process on a virtual clock, a seeded network and "
                                            "simulated disks. A failing seed prints the command that replays it "
                                            "and a minimal trace; exit code 0: every schedule passed.")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, help="run the schedule of this one seed (default: seed 1)")
    which.add_argument("--seeds", type=_seed_range, metavar="A..B",
                       help="run the schedules of seeds A to B, both included (default: one seed, --seed)")
    which.add_argument("--time-box", type=float, metavar="SECONDS",
                       help="run consecutive seeds from --start-seed for this long (default: one seed, --seed)")
    p.add_argument("--start-seed", type=int,
                   help="first seed of a --time-box batch (default: a random one, printed so it can be replayed)")
    p.add_argument("--steps", type=int, default=SimConfig.steps,
                   help=f"client operations per schedule (default: {SimConfig.steps})")
    p.add_argument("--regions", type=int, default=SimConfig.regions,
                   help=f"regions at the start, 2 to 15 (default: {SimConfig.regions})")
    p.add_argument("--fsync", choices=POLICIES, default=SimConfig.fsync,
                   help=f"appendfsync policy of every region (default: {SimConfig.fsync})")
    p.add_argument("--faults", type=_faults, default=DEFAULT_FAULTS, metavar="KIND,...",
                   help=f"comma-separated fault kinds among {','.join(FAULTS)}, or none "
                        f"(default: {','.join(DEFAULT_FAULTS)})")
    p.add_argument("--bug", choices=sorted(BUGS), metavar="BUG",
                   help="plant a known bug, to see a check fail: "
                        + "; ".join(f"{name} (caught by {BUGS[name][0]})" for name in sorted(BUGS))
                        + " (default: none)")
    p.add_argument("--no-copies", action="store_true",
                   help="leave COPY out of the workload, to replay schedules recorded before it was added "
                        "(default: COPY included)")
    p.add_argument("--leave-when-on-disk", dest="leave_when_written", action="store_false",
                   help="the earlier replication rule: operations leave a region once their records are on "
                        "disk (fsynced), to replay schedules recorded under it (default: as regions do, they "
                        "leave once written to the OS, and a region whose machine crashed takes its own "
                        "back from its peers before it takes writes)")
    p.add_argument("--shards", type=int, default=SimConfig.shards,
                   help="shards per region, 1 to 8: each shard group replicates on its own, a machine crash "
                        f"stops every shard of a region (default: {SimConfig.shards}, an unsharded database)")
    p.add_argument("--jobs", type=int, default=1,
                   help="run independent seeds in this many processes, 0: one per CPU (default: 1)")
    p.add_argument("--trace", action="store_true", help="print the trace of every schedule (default: failures only)")
    p.add_argument("--no-shrink", action="store_true",
                   help="report a failure without first shrinking it to its smallest failing run "
                        "(default: shrink)")
    return p


def main(argv: list[str] | None = None, out=None) -> int:
    out = out or sys.stdout
    args = parser().parse_args(argv)
    if not 2 <= args.regions <= 15:
        print("--regions must be between 2 and 15", file=out)
        return 2
    if not 1 <= args.shards <= 8:
        print("--shards must be between 1 and 8", file=out)
        return 2
    base = SimConfig(seed=0, steps=args.steps, regions=args.regions, fsync=args.fsync, faults=args.faults,
                     bug=args.bug, copies=not args.no_copies, leave_when_written=args.leave_when_written,
                     shards=args.shards)
    if args.jobs == 0:
        args.jobs = os.cpu_count() or 1
    started = time.monotonic()
    if args.time_box is not None:
        start = args.start_seed if args.start_seed is not None else random.SystemRandom().randrange(1 << 31)
        print(f"random batch for {args.time_box:g} s from seed {start}", file=out)
        seeds = _until(started + args.time_box, start)
    elif args.seeds is not None:
        seeds = iter(args.seeds)
    else:
        seeds = iter([args.seed if args.seed is not None else 1])
    ran = failed = 0
    for outcome in _outcomes(base, seeds, args.jobs):
        ran += 1
        if args.trace:
            print("\n".join(outcome.trace), file=out)
        if not outcome.ok:
            failed += 1
            report(outcome, out, shrink=not args.no_shrink)
        elif ran == 1 and args.seed is not None:
            print(_verdicts(outcome), file=out)
    elapsed = time.monotonic() - started
    rate = ran / elapsed * 60 if elapsed > 0 else 0.0
    print(f"{ran} schedule(s), {failed} failed, {elapsed:.1f} s ({rate:.0f} schedules per minute)", file=out)
    return 1 if failed else 0


def _outcomes(base: SimConfig, seeds, jobs: int):
    """The outcome of each seed, in seed order; ``jobs`` > 1 runs schedules in that many processes
    (each schedule stays single-threaded and deterministic; only independent seeds run side by side)."""
    if jobs <= 1:
        for seed in seeds:
            yield run_sim(dataclasses.replace(base, seed=seed))
        return
    window: collections.deque = collections.deque()
    with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
        for seed in seeds:
            window.append(pool.submit(run_sim, dataclasses.replace(base, seed=seed)))
            if len(window) >= 2 * jobs:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def _until(deadline: float, start: int):
    seed = start
    while time.monotonic() < deadline:
        yield seed
        seed += 1


def _verdicts(outcome: Outcome) -> str:
    passed = [v.check for v in outcome.verdicts if v.ok]
    lines = [v.render() for v in outcome.verdicts if not v.ok]
    return "\n".join(lines + ([f"  ok    {', '.join(passed)}"] if passed else []))


def report(outcome: Outcome, out, shrink: bool = True) -> Outcome:
    """Print a failure: the verdicts, the replay command, and the smallest failing run's trace."""
    print(f"\nseed {outcome.config.seed} FAILED: {', '.join(outcome.failed)}", file=out)
    print(_verdicts(outcome), file=out)
    print(f"replay: {outcome.config.command()}", file=out)
    smallest = shrink_failure(outcome) if shrink else outcome
    if smallest is not outcome:
        print(f"minimal: {smallest.config.command()}", file=out)
        print(_verdicts(smallest), file=out)
    trace = smallest.trace
    print(f"trace ({len(trace)} lines{', the last ' + str(TRACE_LINES) if len(trace) > TRACE_LINES else ''}):",
          file=out)
    print("\n".join(trace[-TRACE_LINES:]), file=out)
    return smallest


def shrink_failure(outcome: Outcome) -> Outcome:
    """The smallest run of the same seed that still fails one of the same checks."""
    wanted = set(outcome.failed)

    def fails(config: SimConfig) -> Outcome | None:
        o = run_sim(config)
        return o if wanted & set(o.failed) else None

    best = outcome
    lo, hi = 1, best.config.steps
    while lo < hi:
        mid = (lo + hi) // 2
        smaller = fails(dataclasses.replace(best.config, steps=mid))
        if smaller is not None:
            best, hi = smaller, mid
        else:
            lo = mid + 1
    for fault in best.config.faults:
        fewer = fails(dataclasses.replace(best.config, faults=tuple(f for f in best.config.faults if f != fault)))
        if fewer is not None:
            best = fewer
    return best
