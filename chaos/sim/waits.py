"""Clients in WAIT and WAITAOF: after a write, some wait until other regions hold it (or have
it on disk); what they were answered.

Theory of operation
-------------------
Some clients, once an XADD of theirs was answered, send ``WAIT numregions timeout``, or
``WAITAOF numlocal numregions timeout`` (node/commands/waits.py), to the same region on the
same connection (the region's session, whose ``wrote_upto`` names the last operation its
commands minted there, and ``logged_upto`` the last record they appended).  The
command runs through ``RegionCore.call``; when the count is reached at once it answers at
once, otherwise it answers a ``Blocked``, and the world plays the server's part: it
retries the waiting client whenever an ack raised what a peer of its region is known to
hold (``retry``), and at its timeout answers what ``timeout_reply_of`` says.  A crash or
a clean stop of the region closes the client's connection: it gets no answer.

The count is the region's own rule, ``ActiveActive.regions_holding`` (its
``holders``: live members whose link is up, not paused, whose acks since the link's
handshake said they hold the operation, ``hub.peer_said``).  The world's links register
themselves with the region's hub while they are up (links.py, ``SimLink``) and ack what
the real link acks: what the causal log holds up to where the operation log handed its
records to the OS (``hub.acknowledgement()``;
under ``--leave-when-on-disk``, whose schedules some scenario tests pin, what they acked
before: everything applied, which the end of each turn hands to the OS too).

WAITAOF counts the regions whose acks said the operation is on their disk (``Ack.synced``,
``hub.peer_synced``), and this region's fsync of the client's records; the simulated acks
carry what each region has on disk (links.py), and the simulated log fsyncs for WAITAOF
under any policy (disk.py, ``after_sync``).

Every answer is recorded - the operation (origin, n) and its bytes, the regions counted,
the virtual time - and, at that moment, each counted region must be up and acknowledge
the operation itself (its records are on its OS: a SIGKILL there keeps it), or for
WAITAOF have it on its disk (a crash of its machine keeps it), as the origin must when
WAITAOF counted it locally.  The
``wait`` check (chaos/sim/checks.py) judges the promise at the end, with what the starts of
regions showed here: which of them lost it, and through which fault (``started``).
Choices are drawn from a generator of their own (seeded from the schedule's seed), so the
schedule's other draws stay what they were without WAIT (only the fsyncs WAITAOF asks for
under ``appendfsync no`` add events of the world's own).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from node.region.blocking import Blocked
from node.region.lone import WITHDRAWN

from .disk import held_vv

if TYPE_CHECKING:
    from .region import SimRegion
    from .workload import Call
    from .world import Simulation

WAIT_SHARE = 0.2                          # of the XADDs answered ok, the share whose client then WAITs
WAITAOF_SHARE = 0.15                      # of the others, the share whose client then sends WAITAOF
WAIT_TIMEOUTS_MS = (10, 50, 200, 1000)    # WAIT's timeout, drawn
LOSES_WRITTEN = ("machine", "folder")     # starts after which a region may lack what it acknowledged
LOSES_SYNCED = ("folder",)                # ... what it had on disk (a machine crash keeps that)


@dataclass(frozen=True)
class Confirmed:
    """WAIT answered ``len(holders)`` for the client's operation (origin, n) at virtual time
    ``at``; or WAITAOF answered ``[int(local), len(holders)]``: the holders have it on disk,
    and the origin too when ``local``."""

    origin: int
    n: int
    op: bytes
    holders: tuple[int, ...]
    at: int
    command: str
    on_disk: bool = False
    local: bool = False

    def synced_at(self, region: int) -> bool:
        """Did the answer say ``region`` has the operation on disk (a machine crash keeps it)?"""
        return self.on_disk and (region in self.holders or (region == self.origin and self.local))


@dataclass
class Waiter:
    region: int
    incarnation: int
    blocked: Blocked
    n: int
    command: str
    record: int = 0       # WAITAOF: the last record of the client's writes (its local count)
    on_disk: bool = False  # WAITAOF


class Waits:
    """The WAITing clients of one simulation, what WAIT answered them, and what regions lost since."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        seed = sim.config.seed
        self.rng = random.Random(f"wait {seed}" if sim.config.shards == 1 else f"wait {seed} shard {sim.shard}")
        # WAITAOF's draws: a generator of their own too, so WAIT's are what they were before it
        self.aof_rng = random.Random(f"waitaof {seed}" if sim.config.shards == 1 else
                                     f"waitaof {seed} shard {sim.shard}")
        self.waiting: dict[int, list[Waiter]] = {}
        self.confirmed: list[Confirmed] = []
        self.answers = 0
        self.problems: list[str] = []  # seen at the moment WAIT answered
        # (index in confirmed, region): the region WAIT counted, or the origin, started since
        # without that operation after a fault that may take what its OS held, and has not
        # started with it again (see started)
        self.lost: set[tuple[int, int]] = set()

    # ------------------------------------------------------------ the clients
    def after_write(self, call: Call) -> None:
        """``call`` (an XADD) was answered: its client may WAIT now."""
        waits = self.rng.random() < WAIT_SHARE
        if call.status != "ok":
            return
        on_disk = not waits and self.aof_rng.random() < WAITAOF_SHARE
        if not (waits or on_disk):
            return
        region = self.sim.regions[call.region]
        others = len(region.aa.membership.live()) - 1
        rng = self.aof_rng if on_disk else self.rng
        local = [b"%d" % rng.randint(0, 1)] if on_disk else []
        argv = [b"WAITAOF" if on_disk else b"WAIT", *local, b"%d" % rng.randint(1, max(1, others)),
                b"%d" % rng.choice(WAIT_TIMEOUTS_MS)]
        n, record = region.client.wrote_upto, region.client.logged_upto
        command = f"r{region.number} {' '.join(a.decode() for a in argv)}"
        reply = region.read(argv)
        if type(reply) is Blocked:
            waiter = Waiter(region.number, region.incarnation, reply, n, command, record, on_disk)
            self.waiting.setdefault(region.number, []).append(waiter)
            self.sim.sched.after(reply.timeout_ms, self.timed_out, waiter)
            return
        self.answered(region, n, reply, command, record, on_disk)

    def progressed(self, region: SimRegion) -> None:
        """Replication progressed at ``region`` (an ack raised what a peer holds): its waiting
        clients are retried, oldest first (``RegionCore.replication_progressed``)."""
        waiting = self.waiting.get(region.number)
        if not waiting:
            return
        still = []
        for waiter in waiting:
            if waiter.incarnation != region.incarnation:
                continue  # its connection closed with the region
            reply = waiter.blocked.retry()
            if reply is None:
                still.append(waiter)
            else:
                self.answered(region, waiter.n, reply, waiter.command, waiter.record, waiter.on_disk)
        self.waiting[region.number] = still

    def timed_out(self, waiter: Waiter) -> None:
        region = self.sim.regions[waiter.region]
        waiting = self.waiting.get(waiter.region, [])
        if waiter not in waiting:
            return  # answered already
        waiting.remove(waiter)
        if region.up and region.incarnation == waiter.incarnation:
            self.answered(region, waiter.n, waiter.blocked.timeout_reply_of(), waiter.command + " (timed out)",
                          waiter.record, waiter.on_disk)

    def answered(self, region: SimRegion, n: int, reply: Any, command: str, record: int = 0,
                 on_disk: bool = False) -> None:
        """WAIT answered ``reply`` (WAITAOF: ``[local, regions]``): record it, and check that the
        regions counted hold the operation (on their disks, for WAITAOF), and the origin too
        when WAITAOF counted it."""
        self.answers += 1
        holders = tuple(region.aa.holders(n, on_disk))
        origin = region.number
        local = False
        self.sim.sched.log(f"{command} -> {reply} ({', '.join(f'r{h}' for h in holders) or 'none'}) for "
                           f"{origin}.{n}")
        if on_disk:
            local = reply[0] == 1
            if reply[1] != len(holders):
                self.problems.append(f"{command} answered {reply}, but {len(holders)} regions have {origin}.{n} on "
                                     f"disk: {list(holders)}")
            if local and region.core.oplog.synced < record:
                self.problems.append(f"{command} answered {reply}, but r{origin}'s log is on disk only up to record "
                                     f"{region.core.oplog.synced}, not the client's {record}")
        elif reply != len(holders):
            self.problems.append(f"{command} answered {reply}, but {len(holders)} regions hold {origin}.{n}: "
                                 f"{list(holders)}")
        if not n or n == WITHDRAWN or not holders:
            # (WAITAOF's local count alone: the fsync that made it made the durability check's
            # promise too, and a write taken alone that is withdrawn is issued again under a new number)
            return
        for h in holders:
            peer = self.sim.regions[h]
            if not peer.up:
                self.problems.append(f"{command} counted r{h} for {origin}.{n} while r{h} was down")
                continue
            if on_disk:  # what its disk holds: its snapshot and its fsynced records
                said, what = held_vv(peer.file, peer.number, on_platter=True).get(origin, 0), \
                    "whose disk holds it only up"
            else:  # what its acks say: what its operation log handed to its OS
                said, what = self.sim.acknowledged(peer).get(origin, 0), "whose acks say it holds only up"
            if said < n:
                applied = peer.causal.vv.get(origin, 0)
                self.problems.append(f"{command} counted r{h} for {origin}.{n}, {what} to {origin}.{said} (it "
                                     f"applied {origin}.{applied})")
        op = self._own_op(region, n)
        if op is None:
            self.problems.append(f"{command}: r{origin} does not hold its own operation {origin}.{n}")
            return
        self.confirmed.append(Confirmed(origin, n, op, holders, self.sim.sched.now, command, on_disk, local))

    def _own_op(self, region: SimRegion, n: int) -> bytes | None:
        """The bytes of ``region``'s operation ``n`` (the newest are at the end of its log)."""
        number = region.number
        for e in reversed(region.causal.log):
            if e.origin == number and e.n == n:
                return e.op
        return next((e.op for e in self.sim.trimmed[number] if e.origin == number and e.n == n), None)

    # ------------------------------------------------------------ what the check needs
    def started(self, region: SimRegion, how: str) -> None:
        """``region`` started again after going down ``how`` - "machine" (a crash of its machine:
        what its OS held unsynced may be gone), "process", "clean", or "folder" (an older copy
        of its folder put back, or damaged files salvaged).  For each confirmed operation it was
        counted for, or is the origin of: a start that holds it (the same bytes under its dot -
        the origin may have minted its number again) ends a loss; one without it after
        "machine" or "folder" is a loss a fault explains (a process crash or a clean stop keeps
        what was handed to the OS: a start without it after one of those explains nothing)."""
        number = region.number
        relevant = [(i, c) for i, c in enumerate(self.confirmed) if number == c.origin or number in c.holders]
        if not relevant:
            return
        held = {e.dot: e.op for e in self.sim.history(region)}
        for i, c in relevant:
            if held.get((c.origin, c.n)) == c.op:
                self.lost.discard((i, number))
            elif how in (LOSES_SYNCED if c.synced_at(number) else LOSES_WRITTEN):
                self.lost.add((i, number))
