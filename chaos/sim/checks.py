"""What must hold after a schedule heals: one function per rule, each a verdict with reasons.

Theory of operation
-------------------
The checkers run once every fault is lifted and the world has gone quiet
(every region up and connected, nothing in flight).  The regions held to
convergence are the *live members* at the end (joining, active, leaving, in the
newest member list); a removed region keeps what it had and takes part no more.  They read the regions'
real state (keyspaces, causal logs, consumer groups) and the client history
(chaos/sim/workload.py), and each returns a :class:`Verdict`: ok, or a short
explanation and the offending IDs / operations.  A region's history is what its
backlog trimmed followed by its causal log (``Simulation.history``).

=================  ===================================================================
check              rule
=================  ===================================================================
exceptions         the regions' code never raised (an event that raises is recorded and
                   the world goes on)
damage             a start never takes a bit the world flipped (the bitflip fault): it
                   refuses a damaged snapshot, damage before a log's last record, and a
                   bad last record of a log closed cleanly (then the operator salvages);
                   only a bad last record of a log that did not close cleanly is cut,
                   as a torn tail
liveness           the heal settled: every region is up, the live members are at one
                   membership epoch, hold the same version vector with the same
                   history digests (crdt/causal.py), and nothing waits in their
                   causal logs; every membership change ended: no region holds a
                   promise or a forced removal's hold
convergence        every live member's replicated state is identical: entries per key
                   and origin log, groups (creation dot, XACK watermarks)
durability         every operation a region promised was durable - by replying
                   (``appendfsync always``; ``no`` across process crashes) or by an
                   fsync that returned (``everysec``) - is in every live member's
                   history, byte for byte, under its dot; a lost one would be minted
                   again.  A region that left gracefully handed all of its over; what
                   a region removed by force promised past its frozen point is lost
                   by the removal, and so is what no member holds of another region's
                   operations that only a region removed by force held (both counted
                   in the trace); so is an operation no member holds that a restore
                   from an older copy, or a salvage, took from the only folder that
                   held it (``Simulation.file_losses``, counted in the trace) - but
                   one a peer held must have been taken back
strict-ids         two regions never mint the same ID (``*`` and milliseconds-only
                   IDs, in strict and semi-strict mode): in the history and in the
                   final state (where the entries a COPY added, in logs of their own,
                   are copies of minted entries, not mints)
idmp               a (producer, iid) is added at most once, retries at other
                   regions included: no two entries carry the same write (a COPY's
                   copies of it aside); and an
                   iid two regions' IDMP maps both hold names the same entry (which
                   iids a map still holds depends on when its cron expired them)
observed-remove    Active-Active deletes: an entry that is gone was removed by an operation that
                   had observed it (DEL / FLUSHALL / trim per-origin tops, XDEL IDs,
                   the IDMP conflict rule) and an entry a DEL, FLUSHALL or trim had
                   observed is gone (an acknowledged XADD a later flush had observed
                   is removed, not lost); a group exists iff its creation saw every
                   DEL / FLUSHALL / DESTROY of it (delete wins), the highest such
                   creation
causal             every region applied each origin's operations in order and each
                   after its dependencies (the order of its causal log, from what
                   its backlog trimmed)
pel                every region's pending entries lists are consistent whatever XNACK
                   released (the PEL is local: XNACK issues no operation): a group PEL
                   is its consumers' PELs plus the entries released to the NACK zone,
                   which have no owner and a delivery time of 0 and come first in the
                   time-ordered PEL; every delivery count is within 0..LLONG_MAX
never-skip         XREADGROUP ``>`` never skips: at every region that takes writes,
                   every entry of every group is delivered there (history, pending
                   list, or a final drain) or covered by a replicated XACK watermark
                   or by the ID the group was created at (a COPY creates its groups
                   at the source groups' last-delivered IDs)
removed            no region applies an operation of a removed region past its frozen
                   point (seen at apply time, and in the final version vectors), and a
                   removed region that is up knows it was removed
read-only          no region issues an operation while it may not take writes
                   (joining and not caught up, leaving, removed)
wait               WAIT's promise (chaos/sim/waits.py): when WAIT answered k for a
                   client's operation, the k regions it counted were up and their
                   operation logs had handed it to their OS; and every live member
                   holds it at the end, byte for byte under its dot - unless no member
                   holds it and each of those k regions and its origin either is no
                   member any more or lost it after the answer through a machine
                   crash, a restore from an older copy or a salvage (``check_wait``)
=================  ===================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crdt import groups, ops
from crdt.causal import dominates
from crdt.ids import MAX_ID, MIN_ID
from crdt.membership import REMOVED
from node.activeactive import opcodec

from .workload import LAYOUT, XCFGSET_KEY, Call, delivered_ids, parse_id

if TYPE_CHECKING:
    from .region import SimRegion
    from .world import Simulation

CHECKS = ("exceptions", "damage", "liveness", "convergence", "durability", "strict-ids", "idmp", "observed-remove",
          "causal", "removed", "read-only", "pel", "never-skip", "wait")
MAX_LISTED = 8  # offending items listed per verdict


@dataclass
class Verdict:
    check: str
    ok: bool
    explanation: str = ""
    offending: list[str] = field(default_factory=list)

    def render(self) -> str:
        if self.ok:
            return f"  ok    {self.check}"
        lines = [f"  FAIL  {self.check}: {self.explanation}"]
        lines += [f"          {o}" for o in self.offending[:MAX_LISTED]]
        if len(self.offending) > MAX_LISTED:
            lines.append(f"          ... and {len(self.offending) - MAX_LISTED} more")
        return "\n".join(lines)


def _verdict(check: str, problems: list[str], explanation: str) -> Verdict:
    return Verdict(check, not problems, explanation if problems else "", problems)


def _id(i: tuple[int, int]) -> str:
    return f"{i[0]}-{i[1]}"


# ------------------------------------------------------------------ promises (durability)
class Promises:
    """Operations a region promised are durable: (origin, n) -> the operation's bytes, and why."""

    def __init__(self) -> None:
        self.ops: dict[tuple[int, int], bytes] = {}
        self.why: dict[tuple[int, int], str] = {}
        self._upto: dict[int, int] = {}
        # region -> promised operations it withdrew (taken alone) and has not issued again yet
        self.withdrawn: dict[int, int] = {}

    def withdraw(self, region: int, first: int, last: int) -> int:
        """Operations ``first``..``last`` of ``region`` were withdrawn: the numbers belong to other
        operations now, and the withdrawn ones wait to be issued again; returns how many were promised."""
        promised = 0
        for n in range(first, last + 1):
            if self.ops.pop((region, n), None) is not None:
                self.why.pop((region, n))
                promised += 1
        self.withdrawn[region] = self.withdrawn.get(region, 0) + promised
        self._upto[region] = min(self._upto.get(region, 0), first - 1)
        return promised

    def reissued(self, region: int) -> None:
        """``region`` issued its withdrawn operations again (promised again as its replies leave)."""
        self.withdrawn.pop(region, None)

    def hold(self, region: SimRegion, upto_n: int, why: str) -> None:
        start = self._upto.get(region.number, 0)
        if upto_n <= start:
            return
        own = {e.n: e.op for e in region.sim.history(region) if e.origin == region.number}
        # (a promise made before the region withdrew writes it took alone may name numbers it
        # no longer holds: what it held under them waits for its re-issue, see withdraw)
        upto_n = min(upto_n, max(own, default=0))
        for n in range(start + 1, upto_n + 1):
            self.ops[(region.number, n)] = own[n]
            self.why[(region.number, n)] = why
        self._upto[region.number] = upto_n


# ------------------------------------------------------------------ helpers
def members(sim: Simulation) -> list[SimRegion]:
    """The regions that are live members at the end (joining, active, leaving): those held to
    convergence; a removed region keeps what it had and takes part no more."""
    return [sim.regions[n] for n in sim.membership.live_members() if sim.regions[n].up]


def canonical(region: SimRegion) -> dict:
    """The replicated state of a region, in a form two regions can be compared by."""
    keys = region.core.db.keys
    out = {}
    for key in sorted(keys):
        s = keys[key]
        entries = {o: [(i, tuple(flat)) for i, flat in log.range(MIN_ID, MAX_ID)]
                   for o, log in sorted(s.logs.items()) if log.length}
        groups = {name: (g.created_dot, sorted(g.watermarks.items())) for name, g in sorted(s.groups.items())}
        out[key] = (entries, groups)
    return {"keys": out}


def idmp_maps(region: SimRegion) -> dict[tuple[bytes, bytes, bytes], tuple[int, int]]:
    """(key, producer, iid) -> entry ID of every iid the region's IDMP maps hold (live keys and
    the maps kept for dropped keys)."""
    keys = region.core.db.keys
    states = [(key, s.idmp) for key, s in keys.items()] + list(keys.idmp_kept.items())
    return {(key, pid, iid): id_ for key, state in states for pid, m in state.producers.items()
            for iid, id_ in m.items()}


def _entries(region: SimRegion) -> list[tuple[bytes, int, tuple[int, int], list]]:
    """(key, origin, id, fields) of every live entry."""
    keys = region.core.db.keys
    return [(key, o, i, flat) for key in sorted(keys) for o, log in sorted(keys[key].logs.items())
            for i, flat in log.range(MIN_ID, MAX_ID)]


def _copied(region: SimRegion, origin: int) -> bool:
    """Is ``origin`` the log of a COPY's entries (numbered from the stride up, crdt/resolve.py)?"""
    return origin >= region.aa.stride


def _writes(history: list[Call]) -> dict[bytes, Call]:
    """Field value ``w<uid>`` -> the (first) call that wrote it."""
    out: dict[bytes, Call] = {}
    for call in history:
        if call.kind == "xadd":
            out.setdefault(call.argv[-1], call)
    return out


# ------------------------------------------------------------------ the checks
def check_liveness(sim: Simulation) -> Verdict:
    problems = []
    if not sim.settled:
        problems.append(f"the heal did not settle within {sim.sched.events} events")
    down = [r.number for r in sim.regions.values() if not r.up]
    if down:
        problems.append(f"regions down after the heal: {down}")
        return _verdict("liveness", problems, "the cluster did not settle")
    regions = members(sim)
    epochs = {r.number: r.aa.membership.epoch for r in regions}
    if len(set(epochs.values())) > 1:
        held = "; ".join(f"r{n} epoch {e}" for n, e in epochs.items())
        problems.append(f"members hold different member lists: {held}")
    vvs = {r.number: dict(sorted(r.causal.vv.items())) for r in regions}
    if len({tuple(v.items()) for v in vvs.values()}) > 1:
        problems.append("version vectors differ: " + "; ".join(f"r{n} {v}" for n, v in vvs.items()))
    else:  # the same numbers must be the same operations: the histories' digests agree
        heads = {r.number: dict(sorted(r.causal.held_heads().items())) for r in regions}
        if len({tuple(h.items()) for h in heads.values()}) > 1:
            problems.append("histories differ under the same version vector: " +
                            "; ".join(f"r{n} {' '.join(f'{o}={d:016x}' for o, d in h.items())}"
                                      for n, h in heads.items()))
    for r in sorted(sim.regions.values(), key=lambda r: r.number):
        m = r.aa.membership
        left = m.left_promise()
        if left is not None or m.holding:
            what = f"the {left.change.kind} of r{left.change.number} for epoch {left.epoch}" if left else "none"
            problems.append(f"r{r.number} still holds a membership promise ({what}; holds {m.holding}): "
                            "the change never ended")
    for r in regions:
        if r.causal.pending:
            problems.append(f"r{r.number} holds {len(r.causal.pending)} operations it never applied: "
                            f"{sorted(r.causal.pending)[:5]}")
    return _verdict("liveness", problems, "the cluster did not settle")


def check_convergence(sim: Simulation) -> Verdict:
    regions = members(sim)
    if len(regions) < 2:
        return Verdict("convergence", True)
    first, dumps = regions[0], {r.number: canonical(r) for r in regions}
    problems = []
    for r in regions[1:]:
        a, b = dumps[first.number], dumps[r.number]
        for key in sorted(set(a["keys"]) | set(b["keys"])):
            if a["keys"].get(key) != b["keys"].get(key):
                problems.append(f"key {key.decode()}: r{first.number} {_brief(a['keys'].get(key))} "
                                f"!= r{r.number} {_brief(b['keys'].get(key))}")
    return _verdict("convergence", problems, "regions hold different replicated state")


def _brief(state) -> str:
    if state is None:
        return "(absent)"
    entries, groups = state
    logs = {o: [_id(i) for i, _ in rows] for o, rows in entries.items()}
    return f"entries {logs} groups {groups}"


def check_durability(sim: Simulation) -> Verdict:
    """Every member holds every promised operation - a region that left gracefully handed all of
    its over first - except what a region removed by force promised past its frozen point
    (lost by the removal: counted in the trace), and what such a region promised up to its
    frozen point that no member holds while a region removed by force later held it (the
    only copies went with that second removal: counted in the trace too)."""
    promises = sim.promises
    logs = {r.number: {e.dot: e.op for e in sim.history(r)} for r in members(sim)}
    forced = sim.membership.forced()
    # what each region removed by force held when it went: a later forced removal may take
    # the only copies of an earlier removed region's operations up to its frozen point
    removed_held = {n: {e.dot for e in sim.history(sim.regions[n])} for n in forced}
    problems = []
    excused: dict[int, int] = {}
    orphaned: dict[tuple[int, int], int] = {}  # (origin, the removed region that held them) -> count
    gone_with_files: dict[str, int] = {}  # why -> operations only a restored or salvaged folder held
    for dot in sorted(promises.ops):
        want = promises.ops[dot]
        if dot[0] in forced and dot[1] > forced[dot[0]]:
            excused[dot[0]] = excused.get(dot[0], 0) + 1
            continue
        bad = [n for n, log in sorted(logs.items()) if log.get(dot) != want]
        if bad and dot[0] in forced and not any(dot in log for log in logs.values()):
            # no member holds it: lost with a later forced removal if a removed region held it
            holders = [n for n, held in sorted(removed_held.items()) if n != dot[0] and dot in held]
            if holders:
                orphaned[(dot[0], holders[0])] = orphaned.get((dot[0], holders[0]), 0) + 1
                continue
        if bad and not any(log.get(dot) == want for log in logs.values()):
            # no member holds it: lost if a restore or a salvage took it from a folder (the only
            # one that held it, or peers would have given it back before the region wrote again)
            why = next((why for _n, before, after, why in sim.file_losses
                        if after.get(dot[0], 0) < dot[1] <= before.get(dot[0], 0)), None)
            if why is not None:
                gone_with_files[why] = gone_with_files.get(why, 0) + 1
                continue
        if bad:
            held = "another operation" if any(dot in logs[n] for n in bad) else "nothing"
            problems.append(f"operation {dot[0]}.{dot[1]} ({_op(want)}), promised by {promises.why[dot]}: "
                            f"regions {bad} hold {held} under that dot")
    for origin, count in sorted(excused.items()):
        sim.sched.log(f"durability: {count} operation(s) r{origin} promised past its frozen point {forced[origin]} "
                      "are lost, as its forced removal allows")
    for (origin, holder), count in sorted(orphaned.items()):
        sim.sched.log(f"durability: {count} operation(s) of r{origin} that only r{holder} held are lost with "
                      f"r{holder}'s forced removal, as it allows")
    for why, count in sorted(gone_with_files.items()):
        sim.sched.log(f"durability: {count} operation(s) no region holds any more went with {why}")
    for region, count in sorted(promises.withdrawn.items()):
        if count and region in logs:
            problems.append(f"{count} promised operation(s) r{region} took alone and withdrew were never issued again")
    return _verdict("durability", problems, "an operation a region promised was durable was lost")


def _op(raw: bytes) -> str:
    try:
        op = opcodec.decode(raw)
    except (ValueError, TypeError, KeyError):
        return "undecodable"
    if type(op) is ops.AddEntry:
        return f"XADD {op.key.decode()} {_id(op.id)}"
    if type(op) is ops.FlushKeys:
        return f"FLUSHALL of {len(op.observed or ())} keys"
    return f"{type(op).__name__} {op.key.decode()}"


def check_strict_ids(sim: Simulation) -> Verdict:
    problems = []
    minted: dict[tuple[bytes, tuple[int, int]], Call] = {}
    for call in sim.workload.history:
        if call.kind != "xadd" or call.status != "ok" or call.dot is None or not _unique(call):
            continue
        key = (call.argv[1], parse_id(call.reply))
        other = minted.setdefault(key, call)
        if other.region != call.region:
            problems.append(f"{key[0].decode()} {_id(key[1])} minted by r{other.region} (#{other.uid}) "
                            f"and r{call.region} (#{call.uid})")
    writes = _writes(sim.workload.history)
    liberal = {c.argv[-1] for c in sim.workload.history if c.kind == "xadd" and not _unique(c)}  # retries too
    region = next(iter(members(sim)), None)
    if region is not None:
        seen: dict[tuple[bytes, tuple[int, int]], int] = {}
        for key, origin, i, flat in _entries(region):
            call = writes.get(flat[-1])
            if call is None or flat[-1] in liberal or _copied(region, origin):
                continue
            if (key, i) in seen and seen[(key, i)] != origin:
                problems.append(f"{key.decode()} holds {_id(i)} in the logs of r{seen[(key, i)]} and r{origin}")
            seen[(key, i)] = origin
    return _verdict("strict-ids", problems, "two regions minted the same entry ID")


def _unique(call: Call) -> bool:
    """An ID the region chose itself under strict or semi-strict: unique across regions."""
    return bool(call.extra.get("auto")) and call.extra.get("mode") != "liberal"


def check_idmp(sim: Simulation) -> Verdict:
    region = next(iter(members(sim)), None)
    if region is None:
        return Verdict("idmp", True)
    writes = _writes(sim.workload.history)
    holders: dict[bytes, list[str]] = {}
    minted: dict[bytes, list[int]] = {}  # the milliseconds of each copy's ID
    for key, origin, i, flat in _entries(region):
        call = writes.get(flat[-1])
        if call is not None and "idmp" in call.extra and not _copied(region, origin):
            holders.setdefault(flat[-1], []).append(f"{key.decode()} {_id(i)} (r{origin})")
            minted.setdefault(flat[-1], []).append(i[0])
    problems = [f"{w.decode()} {writes[w].extra['idmp']} added {len(h)} times: {', '.join(h)}"
                for w, h in sorted(holders.items())
                if len(h) > 1 and not _cleared_between(sim, writes[w]) and not _expired_between(minted[w])]
    named: dict[tuple, dict[tuple, list[int]]] = {}
    for r in members(sim):
        for iid, id_ in idmp_maps(r).items():
            named.setdefault(iid, {}).setdefault(id_, []).append(r.number)
    problems += [f"{key.decode()} {pid.decode()}/{iid.decode()} names "
                 f"{', '.join(f'{_id(i)} at r{ns}' for i, ns in sorted(ids.items()))}"
                 for (key, pid, iid), ids in sorted(named.items()) if len(ids) > 1]
    return _verdict("idmp", problems, "an idempotent XADD was added more than once, or regions' IDMP maps "
                                      "name different entries for one iid")


IDMP_DURATION_MS = int(dict(LAYOUT)[b"stream-idmp-duration"]) * 1000  # every key's window (XCFGSET sets the same)


def _expired_between(minted: list[int]) -> bool:
    """Was the iid past its IDMP-DURATION, by the clock of the region that added it again?
    An iid's age is its entry ID's milliseconds against the region's own clock (crdt/idmp.py),
    and a retry's ``*`` ID is at least that clock: a later copy minted more than the duration
    after the first may rightly be a new entry (with the clock fault's skew, even a retry made
    moments after the first add)."""
    return max(minted) - min(minted) > IDMP_DURATION_MS


def _cleared_between(sim: Simulation, first: Call) -> bool:
    """Did an XCFGSET clear the key's IDMP maps before the last retry of ``first``'s write?
    Then a retry may rightly add the iid again (a region forgets the cleared iids once
    every region applied their adds)."""
    if first.argv[1] != XCFGSET_KEY:
        return False
    attempts = [c.invoked for c in sim.workload.history if c.kind == "xadd" and c.argv == first.argv]
    return any(c.kind == "xcfgset" and c.invoked <= max(attempts) for c in sim.workload.history)


def check_observed_remove(sim: Simulation) -> Verdict:
    region = next(iter(members(sim)), None)
    if region is None:
        return Verdict("observed-remove", True)
    history = [opcodec.decode(e.op) for e in sim.history(region)]
    present = {(key, o, i) for key, o, i, _ in _entries(region)}
    problems = _entry_removals(history, present) + _group_outcomes(history, region)
    return _verdict("observed-remove", problems,
                    "a removal took what it had not observed, missed what it had, or a concurrent "
                    "group creation beat a delete")


def _entry_removals(history: list, present: set) -> list[str]:
    observed: dict[bytes, list[dict]] = {}   # key -> per-origin tops of every DEL and trim
    named: dict[bytes, set] = {}              # key -> IDs some XDEL removed
    adds = []
    for op in history:
        t = type(op)
        if t is ops.AddEntry:
            adds.append(op)
        elif t is ops.DeleteKey and op.observed is not None:
            observed.setdefault(op.key, []).append(op.observed)
        elif t is ops.FlushKeys and op.observed is not None:  # a DEL of every key it names
            for key, tops in op.observed.items():
                observed.setdefault(key, []).append(tops)
        elif t is ops.Trim and op.cutoffs is not None:
            observed.setdefault(op.key, []).append(op.cutoffs)
        elif t is ops.DeleteEntries:
            named.setdefault(op.key, set()).update(op.ids)
    idmp_winner: dict[tuple, tuple] = {}  # the smallest (ID, origin) wins (equal IDs: the origin decides)
    for op in adds:
        if op.pid is not None:
            k = (op.key, op.pid, op.iid)
            idmp_winner[k] = min(idmp_winner.get(k, (op.id, op.origin)), (op.id, op.origin))
    problems = []
    for op in adds:
        covered = any(tops.get(op.origin, MIN_ID) >= op.id for tops in observed.get(op.key, ()))
        here = (op.key, op.origin, op.id) in present
        if here and covered:
            problems.append(f"{op.key.decode()} {_id(op.id)} (r{op.origin}) survived a DEL/trim that had observed it")
        lost_idmp = op.pid is not None and idmp_winner[(op.key, op.pid, op.iid)] < (op.id, op.origin)
        if not here and not (covered or op.id in named.get(op.key, ()) or lost_idmp):
            problems.append(f"{op.key.decode()} {_id(op.id)} (r{op.origin}) is gone, but no DEL, trim or XDEL "
                            "had observed it")
    return problems


def _group_outcomes(history: list, region: SimRegion) -> list[str]:
    contexts: dict[tuple, list[dict]] = {}  # (key, group or None for every group) -> contexts
    creations: dict[tuple[bytes, bytes], list] = {}
    for op in history:
        t = type(op)
        if t is ops.DeleteKey and op.context is not None:
            contexts.setdefault((op.key, None), []).append(op.context)
        elif t is ops.FlushKeys and op.context is not None:
            for key in op.observed:
                contexts.setdefault((key, None), []).append(op.context)
        elif t is ops.DestroyGroup and op.context is not None:
            contexts.setdefault((op.key, op.group), []).append(op.context)
        elif t is ops.CreateGroup and op.deps is not None:
            creations.setdefault((op.key, op.group), []).append(op)
    keys = region.core.db.keys
    problems = []
    for (key, group), made in sorted(creations.items()):
        applying = contexts.get((key, None), []) + contexts.get((key, group), [])
        survivors = [op.dot for op in made if all(dominates(op.deps, ctx) for ctx in applying)]
        want = max(survivors) if survivors else None
        s = keys.get(key)
        g = s.groups.get(group) if s is not None else None
        have = g.created_dot if g is not None else None
        if want != have:
            problems.append(f"group {key.decode()}/{group.decode()}: the creation that saw every delete is "
                            f"{want}, the region holds {have}")
    return problems


def check_causal(sim: Simulation) -> Verdict:
    problems = []
    for r in sim.regions.values():
        if not r.up:
            continue
        floor = r.causal.floor
        vv: dict[int, int] = dict(floor)  # what the backlog trimmed (or a joined state brought) came before
        for pos, e in enumerate(r.causal.log):
            if e.n <= floor.get(e.origin, 0):
                continue  # applied before a joined state raised the floor past it (CausalLog.absorb)
            missing = [f"{o}.{n}" for o, n in e.deps if o != e.origin and vv.get(o, 0) < n]
            if e.n != vv.get(e.origin, 0) + 1 or missing:
                problems.append(f"r{r.number} applied {e.origin}.{e.n} at log position {pos} before "
                                f"{', '.join(missing) or f'{e.origin}.{vv.get(e.origin, 0) + 1}'}")
            vv[e.origin] = max(vv.get(e.origin, 0), e.n)
    return _verdict("causal", problems, "an operation was applied before what it depends on")


def check_pel(sim: Simulation) -> Verdict:
    problems = []
    for r in sim.regions.values():
        if not r.up:
            continue
        keys = r.core.db.keys
        for key in sorted(keys):
            for name, g in sorted(keys[key].groups.items()):
                where = f"r{r.number} group {key.decode()}/{name.decode()}"
                owned = 0
                for c in g.consumers.values():
                    for i, nack in c.pel.items():
                        owned += 1
                        if nack.consumer is not c or g.pel.get(i) is not nack:
                            problems.append(f"{where}: {_id(i)} is in {c.name.decode()}'s PEL but owned by "
                                            f"{'nobody' if nack.consumer is None else nack.consumer.name.decode()}")
                released = [i for i, nack in g.pel.items() if nack.consumer is None]
                if owned + len(released) != len(g.pel):
                    problems.append(f"{where}: {len(g.pel)} pending, {owned} in consumers' PELs, "
                                    f"{len(released)} released")
                problems += [f"{where}: released {_id(i)} has delivery time {g.pel[i].delivery_time}"
                             for i in released if g.pel[i].delivery_time != 0]
                problems += [f"{where}: {_id(i)} was delivered {n.delivery_count} times"
                             for i, n in g.pel.items() if not 0 <= n.delivery_count <= groups.DELIVERIES_MAX]
                order = [nack.consumer is None for _i, nack in g.by_delivery_time()]
                if order != sorted(order, reverse=True):
                    problems.append(f"{where}: the NACK zone is not at the head of the time-ordered PEL")
    return _verdict("pel", problems, "a pending entries list is inconsistent")


def check_never_skip(sim: Simulation) -> Verdict:
    """Drains every group at every region (so it runs last: it changes local group state)."""
    delivered: dict[tuple, set] = {}
    for call in sim.workload.history:
        if call.kind == "xreadgroup" and call.status == "ok":
            k = (call.region, call.extra["key"], call.extra["group"], call.extra["created"])
            delivered.setdefault(k, set()).update(parse_id(i) for i in delivered_ids(call))
    problems = []
    for r in sim.regions.values():
        if not r.up or not r.aa.writable:  # leaving, removed, or still catching up: no group is read there
            continue
        keys = r.core.db.keys
        for key in sorted(keys):
            s = keys[key]
            for name in sorted(s.groups):
                g = s.groups[name]
                drained = r.read([b"XREADGROUP", b"GROUP", name, b"final-drain", b"STREAMS", key, b">"])
                seen = delivered.get((r.number, key, name, g.created_dot), set()) | set(g.pel)
                if isinstance(drained, list):
                    seen |= {parse_id(row[0]) for _k, rows in drained for row in rows}
                for o, log in sorted(s.logs.items()):
                    mark = max(g.watermarks.get(o, MIN_ID), g.floor)
                    for i, _flat in log.range(MIN_ID, MAX_ID):
                        if i not in seen and i > mark:
                            problems.append(f"r{r.number} group {key.decode()}/{name.decode()} never delivered "
                                            f"{_id(i)} (r{o}'s log; watermark {_id(mark)})")
    return _verdict("never-skip", problems, "XREADGROUP > skipped an entry")


def check_removed(sim: Simulation) -> Verdict:
    """No region applied an operation of a removed region past its frozen point (seen as it
    happened, and in the final version vectors); a removed region that is up knows it."""
    problems = list(sim.membership.past_frozen)
    m = sim.membership.newest()
    if m is None:
        return Verdict("removed", True)
    for origin, frozen in sorted(m.frozen.items()):
        for r in members(sim):
            if r.causal.vv.get(origin, 0) > frozen:
                problems.append(f"r{r.number} holds r{origin}'s operations up to {r.causal.vv[origin]}, "
                                f"past its frozen point {frozen}")
        removed = sim.regions.get(origin)
        if removed is not None and removed.up and removed.aa.membership.status(origin) != REMOVED:
            problems.append(f"r{origin} was removed at membership epoch {m.epoch} but believes it is "
                            f"{removed.aa.membership.status(origin)} (epoch {removed.aa.membership.epoch})")
    return _verdict("removed", problems, "a removed region's operations were taken past its frozen point, "
                                         "or it does not know it was removed")


def check_read_only(sim: Simulation) -> Verdict:
    """A region issues no operation while it may not take writes: joining (until it caught up),
    leaving, removed."""
    return _verdict("read-only", list(sim.membership.issued_read_only),
                    "a region took a write while joining, leaving or removed")


def check_wait(sim: Simulation) -> Verdict:
    """WAIT's and WAITAOF's promise: if WAIT answered k for a client's operation (origin, n), the k regions
    it counted held it then (checked as WAIT answered: chaos/sim/waits.py), and it is never
    lost while one of them stays a member, whatever becomes of its origin (a crash, a forced
    removal).  So every live member holds it at the end, byte for byte under its dot.

    The excuse, exactly: the operation may be missing only if no live member holds it and
    *every* region of the k and its origin either is not a live member at the end (removed,
    by force or gracefully, after the answer) or lost it after the answer through a fault
    that may take what was handed to the OS - its last start without the operation, since
    the answer, followed a machine crash (the unsynced tail), a restore from an older copy
    of its folder or a salvage of damaged files (and no later start held it again; its
    origin may have minted the number again since, so holding is by the bytes under the
    dot).  A process crash (SIGKILL, a fail-stop, a shard's process, every crash under
    ``appendfsync no``) or a clean stop never excuses it: WAIT counts only what a region's
    operation log handed to its OS.  WAITAOF promises more: where it counted a region (or
    the origin, for its numlocal 1) as having the operation on disk, a crash of that
    region's machine does not excuse the loss either - only a restore or a salvage does."""
    waits = sim.waits
    problems = list(waits.problems)
    regions = members(sim)
    live = {r.number for r in regions}
    logs = {r.number: {e.dot: e.op for e in sim.history(r)} for r in regions} if waits.confirmed else {}
    excused = 0
    for i, c in enumerate(waits.confirmed):
        dot = (c.origin, c.n)
        bad = [n for n, log in sorted(logs.items()) if log.get(dot) != c.op]
        if not bad:
            continue
        if not any(log.get(dot) == c.op for log in logs.values()) and all(
                x not in live or (i, x) in waits.lost for x in (*c.holders, c.origin)):
            excused += 1
            continue
        held = "another operation" if any(dot in logs[n] for n in bad) else "nothing"
        problems.append(f"{c.command} answered {len(c.holders)} ({', '.join(f'r{h}' for h in c.holders)}) for "
                        f"{c.origin}.{c.n} ({_op(c.op)}) at t={c.at}: regions {bad} hold {held} under that dot")
    on_disk = sum(c.on_disk for c in waits.confirmed)
    sim.sched.log(f"wait: {waits.answers} WAIT(s) and WAITAOF(s) answered, {len(waits.confirmed)} confirmed at 1 "
                  f"region or more ({on_disk} of them on disk, by WAITAOF)"
                  + (f", {excused} of them lost with every region that held them, as faults allow" if excused else ""))
    return _verdict("wait", problems, "an operation WAIT counted regions for was lost while one of them "
                                      "kept it, or was counted where it was not")


def check_damage(sim: Simulation) -> Verdict:
    return _verdict("damage", list(sim.damage_problems), "a start took files with a flipped bit")


def check_exceptions(sim: Simulation) -> Verdict:
    return _verdict("exceptions", list(sim.sched.errors), "the regions' code raised while the world ran")


def run_checks(sim: Simulation) -> list[Verdict]:
    """Every check, in an order where the last (never-skip) may change local group state."""
    verdicts = [check_exceptions(sim), check_damage(sim), check_liveness(sim)]
    if any(not r.up for r in sim.regions.values()):
        return verdicts
    for check in (check_convergence, check_durability, check_strict_ids, check_idmp, check_observed_remove,
                  check_causal, check_removed, check_read_only, check_wait, check_pel, check_never_skip):
        verdicts.append(_guarded(check, sim))
    return verdicts


def _guarded(check, sim: Simulation) -> Verdict:
    """A check that cannot even read the state (a region's code broke it) fails with the reason."""
    name = check.__name__.removeprefix("check_").replace("_", "-")
    try:
        return check(sim)
    except Exception as e:
        return Verdict(name, False, f"the state cannot be read: {type(e).__name__}: {e}")
