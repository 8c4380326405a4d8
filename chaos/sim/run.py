"""One schedule: build the world from its configuration, run it, judge it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .bugs import planted
from .checks import Verdict, run_checks
from .shards import ShardedSimulation
from .world import SimConfig, Simulation


@dataclass
class Outcome:
    config: SimConfig
    verdicts: list[Verdict]
    trace: list[str] = field(repr=False)
    events: int = 0
    operations: int = 0

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)

    @property
    def failed(self) -> list[str]:
        return [v.check for v in self.verdicts if not v.ok]


def run_sim(config: SimConfig) -> Outcome:
    """Run the schedule of ``config.seed`` (with ``config.bug`` planted, if any) and check it."""
    quiet = logging.getLogger("braid")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the regions' own logging is noise here; the trace says what happened
    try:
        with planted(config.bug):
            if config.shards > 1:
                sharded = ShardedSimulation(config)
                sharded.run()
                verdicts, sched, operations = sharded.verdicts(), sharded.sched, sharded.operations
            else:
                sim = Simulation(config)
                sim.run()
                verdicts, sched, operations = run_checks(sim), sim.sched, len(sim.workload.history)
    finally:
        quiet.setLevel(level)
    return Outcome(config, verdicts, sched.trace, sched.events, operations)
