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
from .workloads import GROUP, LOG, Members, Worker, claim_ids, connect, read_ids, start_workers


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


@dataclass
class RunResult:
    config: RunConfig
    history: History
    verdicts: list[checkers.Verdict]
    convergence_s: float | None
    errors: list[str]
    steps: list
    membership: list[str] = field(default_factory=list)  # the membership changes made, in order

    @property
    def ok(self) -> bool:
        return not self.errors and all(v.ok for v in self.verdicts)


def run(config: RunConfig, backend, progress=None) -> RunResult:
    """Run against a started backend.  ``progress(fraction, text)`` is told how far the faults phase is."""
    history, errors = History(), []
    members = backend.members if backend.members is not None else Members(backend.addresses)
    regions = sorted(members.addresses)
    kinds = [k for k in config.faults if k in backend.faults]
    steps = schedule(config.seed, config.duration, regions, kinds)
    # every region of a cluster takes writes only once its peers told it the last of its own
    # operations they hold (node/activeactive/region.py): the workloads start after that
    wait_until(lambda: all(writable(port, host) for host, port in members.addresses.values()), 60.0,
               what="every region taking writes")
    _create_group(members.addresses)
    wait_converged(members.addresses, 30.0)
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
    final = members.addresses  # the members at the end: convergence, the drain and the checkers are theirs
    convergence = wait_converged(final, config.converge_timeout)
    if convergence is None:
        forked = [r for r, a in final.items() if (st := replication_state(a)) is not None and st[3]]
        errors.append(f"regions {forked} found other histories under the same operation numbers (a fork)" if forked
                      else f"regions did not converge within {config.converge_timeout:.0f} s of the heal")
    else:
        history.mark("converged")
    drain(final, history)
    wait_converged(final, config.converge_timeout)
    history.mark("drained")
    sampler_stop.set()
    late_sampler.join(5)
    dumps = {r: dump_region(final[r]) for r in sorted(final)}
    done = threads[-1].changes if "membership" in kinds else []
    return RunResult(config, history, checkers.check_all(history, dumps), convergence, errors, steps, done)


def _wait_phase(duration: float, history: History, progress) -> None:
    start = history.now()
    while (elapsed := history.now() - start) < duration:
        if progress is not None:
            progress(elapsed / duration, f"{len(history.ops)} ops, {len(history.faults)} faults")
        time.sleep(min(0.25, duration - elapsed))  # the phase's own length, not synchronisation
    if progress is not None:
        progress(1.0, f"{len(history.ops)} ops, {len(history.faults)} faults")


def _create_group(addresses: dict) -> None:
    c = connect(addresses[min(addresses)], timeout=10)
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
    while not stop.wait(0.5):
        for region, address in members.addresses.items():
            state = replication_state(address)
            history.sample(region, state is not None, state[0] if state else {})


def wait_converged(addresses: dict, timeout: float) -> float | None:
    """Seconds until every region holds the same operations (the same numbers, and the same
    history digests) with none pending; None at the deadline, or at once when a region found
    another history under the same numbers (a fork: waiting cannot heal it)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        states = [replication_state(a) for a in addresses.values()]
        if any(s is not None and s[3] for s in states):
            return None
        if all(s is not None and s[1] == 0 for s in states) and \
                len({(tuple(sorted(s[0].items())), s[2]) for s in states}) == 1:
            return time.monotonic() - t0
        time.sleep(0.05)  # polling interval of a deadline wait
    return None


def drain(addresses: dict, history: History) -> None:
    """Claim every pending entry of group g and read ``>`` to the end, at every region."""
    drainer = Worker("drain", 0, history, addresses, threading.Event())

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
