"""A sharded database in the simulation: one replication group per shard, one world.

Theory of operation.  Shard K of every region replicates with shard K of the others only
(docs/sharding.md), so a database of S shards is S databases that share their regions'
machines.  :class:`ShardedSimulation` runs S :class:`~chaos.sim.world.Simulation` groups
on one scheduler (one virtual clock; each group's trace lines start ``sK``), each with
the real region cores of its shard view (``ClusterConfig.shard_view``: they route by the
slot map, and answer MOVED and CROSSSLOT), its own seeded randomness, workload, network
faults and checks.  What ties the groups together is what ties shards together:

- a machine crash of a region takes down its shard of every group (each loses its own
  unsynced tail, and each restarts on its own), while a process crash takes one shard;
- the workload of a group writes keys of its shard's slots (a hash tag of its own), and
  now and then sends a command for another group's key (MOVED expected) or for keys of two
  slots (CROSSSLOT expected) to one of its regions: the routing check asserts the refusal
  and that nothing changed, and that every key any region of a group holds is one of the
  group's slots (no operation ever crossed groups).

Every other check runs per group, unchanged, and so does the membership fault: each group's
braid-admin changes that group's member list (a join carries every shard's ports), as a change
run group by group does when it ends in some groups only (braid-admin killed, ``--shard K``), so
the groups' lists differ for a while; a region number names the same region in every group,
whose machine crash takes its shard of each group that has it.
"""

from __future__ import annotations

import dataclasses

from .checks import Verdict, run_checks
from .scheduler import Scheduler
from .world import MAX_EVENTS, SimConfig, Simulation


class ShardedSimulation:
    """S shard groups on one scheduler (see the module's docstring)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.sched = Scheduler()
        self.groups = [Simulation(config, shard=k, sched=self.sched) for k in range(config.shards)]
        for g in self.groups:
            g.siblings = [o for o in self.groups if o is not g]
        self.settled = False

    def run(self) -> None:
        for g in self.groups:
            g.start()
        self.settled = self.sched.run(MAX_EVENTS)
        for g in self.groups:
            g.settled = self.settled

    @property
    def operations(self) -> int:
        return sum(len(g.workload.history) for g in self.groups)

    def verdicts(self) -> list[Verdict]:
        out = []
        for g in self.groups:
            for v in [*run_checks(g), check_routing(g)]:
                out.append(dataclasses.replace(v, check=f"s{g.shard} {v.check}"))
        return out


def check_routing(sim: Simulation) -> Verdict:
    """Commands sent to the wrong shard were refused and changed nothing, and no region of
    the group holds a key of another shard's slots."""
    problems = list(sim.routing_problems)
    for r in sim.regions.values():
        if not r.up:
            continue
        routing = r.core.routing
        assert routing is not None
        foreign = [k for k in r.core.db.keys if not routing.owns(k)]
        if foreign:
            problems.append(f"r{r.number} holds keys of another shard: {sorted(foreign)[:5]}")
    ok = not problems
    return Verdict("routing", ok, "" if ok else "a command reached a shard that does not own its keys", problems)
