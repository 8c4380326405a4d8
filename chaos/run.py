"""One live chaos run: start, load, break, heal, converge, drain, check, report.

Phases (each marked in the history, so the report's timeline shows them):

1. ``setup``: the backend starts the regions; group ``g`` is created on
   ``chaos:log`` and the regions are let to agree on it.
2. ``faults``: the workloads run for ``duration`` seconds while the nemesis
   plays its seeded schedule and a sampler records every region's version
   vector twice a second (the lag plot).
3. ``healed``: workloads stop, every fault is undone (processes restarted or
   continued, links healed, clocks and disks fixed).
4. ``converged``: every region answers and holds the same version vector with
   nothing pending - the time this takes is the convergence time.
5. ``drained``: at every region the group's pending entries are claimed and
   ``>`` is read to the end (deliveries are recorded like any read).
6. The checkers run over the history and a dump of every region.

With the ``membership`` fault (:class:`chaos.nemesis.MembershipNemesis`) the regions
change during phase 2: clients, the sampler, the heal, the convergence wait, the
drain and the dumps all follow the backend's members of the moment, so the checkers
judge the final members; regions removed by force are recorded with their frozen
point for the checkers.

Sharded regions (``--shards N``, :mod:`chaos.shards`): each shard group - shard K of
every region - is a replication group of its own, so "every region holds the same
operations" is asked of each group (convergence is reached when every group
converged), the sampler adds up a region's shards (a region answers when all its
shards do), the drain reads at the shard owning ``chaos:log``, and every shard of
every region is dumped: the checkers compare each group's regions and check that
every key lies in its own shard.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import redis

from node.testing import replication_status, version_vector, wait_until
from node.tools.cluster_processes import writable

from . import checkers
from .history import History
from .nemesis import KINDS, MembershipNemesis, Nemesis, schedule
from .workloads import GROUP, KEYS, LOG, Members, Worker, claim_ids, connect, read_ids, spread_keys, start_workers


@dataclass
class RunConfig:
    regions: int = 3
    duration: float = 60.0
    seed: int = 0
    faults: list[str] = field(default_factory=lambda: list(KINDS))
    fsync: str = "everysec"
    bug: str | None = None
    out: str = "chaos-report"
    converge_timeout: float = 90.0
    shards: int = 1  # shard processes per region


@dataclass
class RunResult:
    config: RunConfig
    history: History
    verdicts: list[checkers.Verdict]
    convergence_s: float | None
    errors: list[str]
    steps: list
    membership: list[str] = field(default_factory=list)  # the membership changes made, in order
    shards: dict = field(default_factory=dict)  # sharded: {"count", "slots" (per shard), "keys" (per shard)}
    regions: list[int] = field(default_factory=list)  # the numbers of the regions the run started with

    @property
    def ok(self) -> bool:
        return not self.errors and all(v.ok for v in self.verdicts)


def run(config: RunConfig, backend, progress=None) -> RunResult:
    """Run against a started backend.  ``progress(fraction, text)`` is told how far the faults phase is."""
    history, errors = History(), []
    members = backend.members if backend.members is not None else Members(backend.addresses)
    regions = sorted(members.addresses)
    kinds = [k for k in config.faults if k in backend.faults]
    steps = schedule(config.seed, config.duration, regions, kinds, members.shard_count)
    # every region of a cluster takes writes only once its peers told it the last of its own
    # operations they hold (node/activeactive/region.py): the workloads start after that
    wait_until(lambda: all(writable(port, host) for r in members.addresses for host, port in
                           members.region_addresses(r)), 60.0, what="every region taking writes")
    _create_group(members)
    wait_converged(members.groups(), 30.0)
    history.mark("faults")
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(members, history, stop), daemon=True)
    sampler.start()
    workers = start_workers(config.seed, history, members, stop)
    nemesis = Nemesis(backend, steps, history, stop)
    nemesis.start()
    threads = [*workers, nemesis]
    if "membership" in kinds:
        changes = MembershipNemesis(backend, config.seed, config.duration, history, stop)
        changes.start()
        threads.append(changes)
    _wait_phase(config.duration, history, progress)
    stop.set()
    for t in threads:
        t.join(30)
        if t.is_alive():
            errors.append(f"{t.name} did not stop within 30 s")
        if t.error is not None:
            errors.append(f"{t.name} crashed: {t.error!r}")
    backend.heal_all()
    history.mark("healed")
    for fault in history.faults:
        if fault.t1 is None:
            history.healed(fault)
    sampler_stop = threading.Event()
    late_sampler = threading.Thread(target=_sample, args=(members, history, sampler_stop), daemon=True)
    late_sampler.start()
    sampler.join(5)
    final = members.frozen()  # the members at the end: convergence, the drain and the checkers are theirs
    groups = final.groups()
    convergence = wait_converged(groups, config.converge_timeout)
    if convergence is None:
        forked = sorted({r for g in groups for r, a in g.items()
                         if (st := replication_state(a)) is not None and st[3]})
        errors.append(f"regions {forked} found other histories under the same operation numbers (a fork)" if forked
                      else f"regions did not converge within {config.converge_timeout:.0f} s of the heal")
    else:
        history.mark("converged")
    drain(final, history)
    wait_converged(groups, config.converge_timeout)
    history.mark("drained")
    sampler_stop.set()
    late_sampler.join(5)
    done = threads[-1].changes if "membership" in kinds else []
    if final.shards is None:
        dumps = {r: dump_region(a) for r, a in sorted(final.addresses.items())}
        return RunResult(config, history, checkers.check_all(history, dumps), convergence, errors, steps, done,
                         regions=regions)
    by_shard = {k: {r: dump_region(a) for r, a in sorted(g.items())} for k, g in enumerate(groups)}
    verdicts = checkers.check_all_sharded(history, by_shard, final.owners or b"")
    return RunResult(config, history, verdicts, convergence, errors, steps, done, shard_summary(final, backend),
                     regions=regions)


def shard_summary(members: Members, backend) -> dict:
    """What the report says of the shards: how many, each one's slots and workload keys."""
    keys = sorted([*KEYS, *spread_keys(members)])
    slots = backend.slots_of() if hasattr(backend, "slots_of") else []
    return {"count": members.shard_count, "slots": slots,
            "keys": {str(k): [key for key in keys if members.shard_of(key) == k] for k in range(members.shard_count)}}


def _wait_phase(duration: float, history: History, progress) -> None:
    start = history.now()
    while (elapsed := history.now() - start) < duration:
        if progress is not None:
            progress(elapsed / duration, f"{len(history.ops)} ops, {len(history.faults)} faults")
        time.sleep(min(0.25, duration - elapsed))  # the phase's own length, not synchronisation
    if progress is not None:
        progress(1.0, f"{len(history.ops)} ops, {len(history.faults)} faults")


def _create_group(members: Members) -> None:
    c = connect(members.at(min(members.addresses), members.shard_of(LOG)), timeout=10)
    try:
        c.execute_command("XGROUP", "CREATE", LOG, GROUP, "0", "MKSTREAM")
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise
    finally:
        c.close()


def replication_state(address) -> tuple[dict[int, int], int, str, int] | None:
    """(version vector, operations pending, history digests, forks found) of a region, or None if
    it does not answer."""
    c = connect(address, timeout=0.5)
    try:
        status = replication_status(c)
    except (redis.RedisError, OSError):
        return None
    finally:
        c.close()
    return (version_vector(status), int(status["crdt_pending"]), status.get("crdt_history", ""),
            int(status.get("crdt_history_forks", 0)))


def _sample(members: Members, history: History, stop: threading.Event) -> None:
    """Every region's version vector, twice a second; a sharded region's is the sum of its shards'
    (each shard group counts its own operations), and it answers only when every shard does;
    each shard's is kept too (``History.shard_samples``)."""
    while not stop.wait(0.5):
        for region, address in members.addresses.items():
            states = [replication_state(a) for a in (members.region_addresses(region) if members.shards else [address])]
            vv: dict[int, int] = {}
            for state in states:
                for origin, n in (state[0] if state else {}).items():
                    vv[origin] = vv.get(origin, 0) + n
            up = all(s is not None for s in states)
            history.sample(region, up, vv if up else {})
            if members.shards:  # each group's own (a forced removal is judged by each group's frozen point)
                for k, state in enumerate(states):
                    history.sample(region, state is not None, state[0] if state else {}, shard=k)


def wait_converged(groups: dict | list[dict], timeout: float) -> float | None:
    """Seconds until every region holds the same operations (the same numbers, and the same
    history digests) with none pending; None at the deadline, or at once when a region found
    another history under the same numbers (a fork: waiting cannot heal it).  ``groups``: the
    regions' addresses, or one such dict per shard group (each must converge)."""
    pending = [groups] if isinstance(groups, dict) else list(groups)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        left = []
        for addresses in pending:
            states = [replication_state(a) for a in addresses.values()]
            if any(s is not None and s[3] for s in states):
                return None
            answered = [s for s in states if s is not None]
            if not (len(answered) == len(states) and all(s[1] == 0 for s in answered) and
                    len({(tuple(sorted(s[0].items())), s[2]) for s in answered}) == 1):
                left.append(addresses)
        if not left:
            return time.monotonic() - t0
        pending = left
        time.sleep(0.05)  # polling interval of a deadline wait
    return None


def drain(addresses: dict | Members, history: History) -> None:
    """Claim every pending entry of group g and read ``>`` to the end, at every region (at the
    shard of ``chaos:log``)."""
    drainer = Worker("drain", 0, history, addresses, threading.Event())
    addresses = drainer.addresses

    def ack(region: int, ids: list[str]) -> None:
        drainer.call("ack", region, LOG, lambda c: c.execute_command("XACK", LOG, GROUP, *ids), ids=ids)

    for region in sorted(addresses):
        cursor = ["0-0"]

        def claim(c, cursor: list[str] = cursor) -> list[str]:
            cursor[0], ids = claim_ids(c, "drain", 0, 500, cursor[0])
            return ids

        while True:  # XAUTOCLAIM walks the PEL once, cursor by cursor
            outcome, ids = drainer.call("claim", region, LOG, claim, consumer="drain")
            if outcome != "ok":
                break
            if ids:
                ack(region, ids)
            if cursor[0] == "0-0":
                break
        while True:
            outcome, ids = drainer.call("read", region, LOG, lambda c: read_ids(c, "drain", 500), consumer="drain")
            if outcome != "ok" or not ids:
                break
            ack(region, ids)


def dump_region(address) -> checkers.Dump | None:
    """A region's replicated state: every key's entries (ID and fields) and group names."""
    c = redis.Redis(host=address[0], port=address[1], socket_timeout=10, decode_responses=True, protocol=2)
    try:
        out: checkers.Dump = {}
        for key in sorted(c.scan_iter(count=1000)):
            entries = [[eid, fields] for eid, fields in c.xrange(key)]
            groups = sorted(g["name"] for g in c.xinfo_groups(key))
            out[key] = {"entries": entries, "groups": groups}
        return out
    except (redis.RedisError, OSError):
        return None
    finally:
        c.close()
