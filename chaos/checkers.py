"""Checkers: verdicts over a recorded history and the final state of every region.

Theory of operation
-------------------
A checker sees what a client could see: the operations with their real-time
interval ``[t0, t1]`` and outcome (ok / fail / info), and, after the faults
healed and the regions converged, a dump of every region.  Real time says
little about causality *between* regions (an operation acknowledged at one
region may reach another much later), but it says everything *within* one
region, whose own operations are applied in the order it acknowledged them.
So each rule below only convicts on what the history proves:

* **convergence**: every region's dump is identical (entries and their IDs,
  fields, key existence, group names).
* **lost writes**: an acknowledged XADD to ``chaos:log`` (never deleted) is in
  the final state with its payload.  On ``chaos:churn`` and ``chaos:trimmed``
  an acknowledged entry may be missing only if some removal could have
  observed it: an XDEL of it, or a DEL/XTRIM that had not completed before the
  XADD was invoked (for XTRIM MINID: a cutoff above the entry).
* **observed-remove**: a DEL acknowledged at region R removes every entry R
  had acknowledged before the DEL was invoked.
* **delete-wins**: a group is alive at the end only if some create of it was
  not followed, at its own region, by a destroy or DEL (which saw it and so
  wins); a group is gone only if each acknowledged create had a removal that
  could have been concurrent with it (at another region, or not completed
  before the create was invoked).
* **strict IDs**: no two acknowledged XADDs with ``*`` got the same ID on a
  key (IDMP retries of one iid are one entry and may repeat its ID).
* **never skips**: every entry in the final ``chaos:log`` was delivered to
  group ``g`` by some XREADGROUP or XAUTOCLAIM (a final drain reads what is
  left at every region), so ``>`` skipped nothing.
* **IDMP**: every iid is in ``chaos:idmp`` at most once, and an acknowledged
  one exactly once.

Shards (``--shards N``).  Every shard of every region is dumped.  **convergence** is
asked of each shard group (shard K of every region holds the same keys, entries and
groups); **shard placement**: every key found at shard K is of a slot shard K owns, and
no command was answered ``MOVED`` or ``CROSSSLOT`` (each went to its key's shard); the
other rules judge, per region, the union of its shards' own keys - so an acknowledged
write is present only if it is at the shard owning its key.  **shard kills**: every
shard process the nemesis killed alone was started again by its supervisor, and the
region's other shards answered throughout (the fault's watch: no silence longer than
``SIBLING_SILENCE_S``), with the operations they acknowledged meanwhile reported.

Membership.  The dumps are those of the final members (regions that left are not
judged).  A region removed by force keeps, at the others, only its operations up to
its frozen point; what it acknowledged beyond is lost by design.  A write it
acknowledged at ``t1`` is provably within the frozen point when a later sample of
that region's own count (its version vector's entry for itself, which counts every
operation it made) was at most the frozen point: such writes are checked like every
other.  The others (possibly beyond) are *excused*: the rules treat them as of
unknown outcome, and the **forced removals** verdict reports how many there were and
how many of them are indeed missing - the expected cost of asynchronous replication,
not a failure.  A sharded region is removed by each shard group on its own, frozen at
each group's point: a write is judged by its shard's frozen point and that shard's own
count (``History.forced_shards``, ``History.shard_samples``).

WAIT.  A waiter's ``wait`` op answered k for the writes it ``covers`` (every write of
its connection before it): they were applied at k other regions then, and a forced
removal keeps every operation of the removed region that a remaining member holds
(node/commands/waits.py).  So **a write for which WAIT answered k >= 1 is never
excused** by the forced removal of its region: it must be in the final state, like
any acknowledged write - unless at least k of the *other* regions were removed by
force too (any k of them may have been the ones that counted).  In a run with one
forced removal every WAIT-confirmed write of the removed region must survive.  The
**forced removals** verdict fails when one is missing, and counts them either way.

Read your writes.  ``BRAID.WAITFOR token`` answers 1 once the region it is sent to has
applied every write the token names, so the entry the reader wrote at another region
is there: **read your writes** fails for a ``read-own`` op (the XRANGE by its ID on
the same connection, right after) that did not find it, and counts the reads and
the BRAID.WAITFORs that timed out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from crdt.ids import parse_id
from node.region.slots import key_slot

from .history import FAIL, INFO, OK, History, Op
from .workloads import CHURN, GROUPS, IDMP, LOG, SPREAD, TRIMMED

SIBLING_SILENCE_S = 5.0  # a shard kill: the longest a sibling shard may go without answering PING

# A region's state as the checkers see it: key -> {"entries": [[id, {field: value}]], "groups": [names]}
Dump = dict[str, dict]


@dataclass
class Verdict:
    name: str
    ok: bool
    summary: str
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"name": self.name, "ok": self.ok, "summary": self.summary, "problems": self.problems[:50],
                "problem_count": len(self.problems)}


def _verdict(name: str, problems: list[str], checked: str) -> Verdict:
    if problems:
        return Verdict(name, False, f"{len(problems)} violation(s); first: {problems[0]}", problems)
    return Verdict(name, True, checked)


def _ids(dump: Dump, key: str) -> dict[str, dict]:
    return {eid: fields for eid, fields in dump.get(key, {}).get("entries", [])}


def _sid(eid: str) -> tuple[int, int]:
    return parse_id(eid.encode())[0]


# ------------------------------------------------------------------ the rules
def convergence(dumps: dict[int, Dump | None]) -> Verdict:
    problems = [f"region {r} did not answer after the heal" for r, d in dumps.items() if d is None]
    live = {r: d for r, d in dumps.items() if d is not None}
    if live:
        ref_region, ref = min(live.items())
        for r, d in sorted(live.items()):
            for key in sorted(set(ref) | set(d)):
                if ref.get(key) != d.get(key):
                    problems.append(f"key {key!r} differs between region {ref_region} and region {r}: "
                                    f"{_difference(ref.get(key), d.get(key))}")
    keys = len(next(iter(live.values()), {}))
    return _verdict("convergence", problems, f"the {len(live)} regions that are members at the end identical "
                                             f"({', '.join(map(str, sorted(live)))}; {keys} keys)")


def _difference(a: dict | None, b: dict | None) -> str:
    if a is None or b is None:
        return "exists at one region only"
    if a["groups"] != b["groups"]:
        return f"groups {a['groups']} vs {b['groups']}"
    ia, ib = {e[0] for e in a["entries"]}, {e[0] for e in b["entries"]}
    only_a, only_b = sorted(ia - ib)[:3], sorted(ib - ia)[:3]
    return f"{len(a['entries'])} vs {len(b['entries'])} entries (only in first: {only_a}, only in second: {only_b})"


def lost_writes(history: History, final: Dump) -> Verdict:
    problems: list[str] = []
    adds = history.select("xadd", key=LOG, outcome=OK)
    spread = [op for op in history.select("xadd", outcome=OK) if op.key.startswith(SPREAD)]
    logs = {key: _ids(final, key) for key in {LOG, *(op.key for op in spread)}}
    for op in adds + spread:
        got = logs[op.key].get(op.value)
        if got is None:
            problems.append(f"{op.process} added {op.value} at region {op.region} (t={op.t1:.2f}s): acknowledged, lost")
        elif got.get("v") != op.args["payload"]:
            problems.append(f"{op.value} holds {got} instead of payload {op.args['payload']!r}")
    explained = 0
    for key in (CHURN, TRIMMED):
        left = _ids(final, key)
        removals = [r for r in history.select("del", "xtrim", "xdel", key=key) if r.outcome != FAIL]
        for op in history.select("xadd", key=key, outcome=OK):
            explained += 1
            if op.value not in left and not any(_could_remove(r, op) for r in removals):
                problems.append(f"{op.process} added {op.value} to {key} at region {op.region} (t={op.t1:.2f}s): "
                                "gone, and no removal could have observed it")
    more = f" (and {len(spread)} of {', '.join(sorted(logs.keys() - {LOG}))})" if spread else ""
    return _verdict("no lost writes", problems, f"{len(adds)} acknowledged entries of {LOG}{more} present; "
                                                f"{explained} of {CHURN} and {TRIMMED} explained")


def _could_remove(removal: Op, add: Op) -> bool:
    if removal.f == "xdel":
        return removal.args.get("id") == add.value
    if removal.t1 <= add.t0:
        return False  # completed before the entry existed anywhere: it cannot have observed it
    if removal.f == "xtrim" and "minid" in removal.args:
        return _sid(add.value) < _sid(removal.args["minid"])
    return True


def observed_remove(history: History, final: Dump) -> Verdict:
    problems: list[str] = []
    churn = _ids(final, CHURN)
    adds = history.select("xadd", key=CHURN, outcome=OK)
    dels = history.select("del", key=CHURN, outcome=OK)
    for d in dels:
        for a in adds:
            if a.region == d.region and a.t1 < d.t0 and a.value in churn:
                problems.append(f"DEL at region {d.region} (t={d.t0:.2f}s) left {a.value}, which that region "
                                f"acknowledged before (t={a.t1:.2f}s)")
    return _verdict("observed-remove", problems, f"{len(dels)} acknowledged DELs removed what their region had")


def delete_wins(history: History, final: Dump) -> Verdict:
    problems: list[str] = []
    alive = set(final.get(GROUPS, {}).get("groups", []))
    creates: dict[str, list[Op]] = defaultdict(list)
    for op in history.select("xgroup-create", key=GROUPS):
        if op.outcome != FAIL:
            creates[op.args["group"]].append(op)
    def removals(group: str) -> list[Op]:
        return [op for op in history.select("xgroup-destroy", "del", key=GROUPS)
                if op.outcome != FAIL and (op.f == "del" or op.args.get("group") == group)]
    for group in sorted(set(creates) | alive):
        rem = removals(group)
        if group in alive:
            if not any(not any(r.outcome == OK and r.region == c.region and r.t0 > c.t1 for r in rem)
                       for c in creates[group]):
                problems.append(f"group {group!r} is alive, but every create of it was followed at its own "
                                "region by a destroy or DEL, which must win")
        else:
            for c in creates[group]:
                if c.outcome == OK and not any(r.region != c.region or r.t1 > c.t0 for r in rem):
                    problems.append(f"group {group!r} created at region {c.region} (t={c.t1:.2f}s) is gone, "
                                    "and no destroy or DEL could have been concurrent with it")
    n = sum(len(v) for v in creates.values())
    return _verdict("delete-wins", problems, f"{n} group creates, final groups {sorted(alive)} explained")


def strict_ids(history: History) -> Verdict:
    problems: list[str] = []
    for key in (LOG, CHURN, TRIMMED):
        seen = Counter(op.value for op in history.select("xadd", key=key, outcome=OK))
        problems += [f"{key}: ID {eid} was minted {n} times" for eid, n in seen.items() if n > 1]
    by_id: dict[str, set] = defaultdict(set)
    for op in history.select("xadd-idmp", key=IDMP, outcome=OK):
        by_id[op.value].add(op.args["iid"])
    problems += [f"{IDMP}: ID {eid} was returned for different iids {sorted(iids)}"
                 for eid, iids in by_id.items() if len(iids) > 1]
    n = len(history.select("xadd", "xadd-idmp", outcome=OK))
    return _verdict("unique IDs", problems, f"{n} acknowledged IDs, no duplicates")


def never_skips(history: History, final: Dump) -> Verdict:
    delivered: set[str] = set()
    for op in history.select("read", "claim", key=LOG, outcome=OK):
        delivered.update(op.value)
    present = _ids(final, LOG)
    problems = [f"{eid} ({fields.get('v')}) was never delivered to group g" for eid, fields in present.items()
                if eid not in delivered]
    return _verdict("XREADGROUP never skips", sorted(problems),
                    f"all {len(present)} entries of {LOG} delivered ({len(delivered)} distinct deliveries)")


def idmp(history: History, final: Dump) -> Verdict:
    copies = Counter(fields.get("iid") for _eid, fields in final.get(IDMP, {}).get("entries", []))
    problems = [f"iid {iid} is in {IDMP} {n} times" for iid, n in copies.items() if n > 1]
    acked = {op.args["iid"] for op in history.select("xadd-idmp", key=IDMP, outcome=OK)}
    problems += [f"iid {iid} was acknowledged and is not in {IDMP}" for iid in sorted(acked) if iid not in copies]
    return _verdict("IDMP no duplicates", problems, f"{len(acked)} acknowledged iids, each exactly once")


WRITES = ("xadd", "xadd-idmp", "del", "xtrim", "xdel", "xgroup-create", "xgroup-destroy")


def wait_confirmed(history: History) -> dict[str, int]:
    """Payload of a write -> the largest count a WAIT covering it answered (0: only timed-out WAITs)."""
    confirmed: dict[str, int] = {}
    for w in history.select("wait", outcome=OK):
        for payload in w.args.get("covers", ()):
            confirmed[payload] = max(confirmed.get(payload, 0), int(w.value))
    return confirmed


def _vouched(op: Op, confirmed: dict[str, int], forced: dict[int, int]) -> bool:
    """A write of a region removed by force that must survive: WAIT answered k >= 1 for it, and fewer
    than k other regions were removed by force (module doc, WAIT)."""
    k = confirmed.get(op.args.get("payload", ""), 0) if op.f == "xadd" else 0
    return k >= 1 and k > len(set(forced) - {op.region})


def excuse_forced(history: History) -> tuple[History, list[Op]]:
    """The history with every acknowledged write of a region removed by force that may lie beyond its
    frozen point and that no WAIT vouches for marked unknown (``info``), and those writes."""
    if not history.forced:
        return history, []
    # (region, shard or None) -> [(t, its own operation count)]: a sharded region's groups count
    # their own operations and were frozen each at its own point, so a write is judged by its shard's
    own = defaultdict(list)
    for s in [*history.samples, *history.shard_samples]:
        if s.region in history.forced and s.reachable:
            own[(s.region, s.shard)].append((s.t, s.vv.get(s.region, 0)))
    confirmed = wait_confirmed(history)
    excused, ops = [], []
    for op in history.ops:
        frozen, series = history.forced.get(op.region), own[(op.region, None)]
        per_shard, shard = history.forced_shards.get(op.region), op.args.get("shard")
        if per_shard is not None and shard is not None:
            frozen, series = per_shard[shard], own[(op.region, shard)]
        if frozen is not None and op.outcome == OK and op.f in WRITES and \
                not any(t >= op.t1 and n <= frozen for t, n in series) and \
                not _vouched(op, confirmed, history.forced):
            excused.append(op)
            op = Op(op.process, op.f, op.region, op.key, op.t0, op.t1, INFO, "excused: removed by force",
                    dict(op.args))
        ops.append(op)
    judged = History()
    judged.ops, judged.faults, judged.samples = ops, history.faults, history.samples
    judged.marks, judged.forced, judged.start = history.marks, history.forced, history.start
    judged.forced_shards, judged.shard_samples = history.forced_shards, history.shard_samples
    return judged, excused


def forced_removals(history: History, excused: list[Op], final: Dump) -> Verdict:
    """What the forced removals cost: writes beyond the frozen points that no WAIT vouched for may be
    lost (counted, allowed); a WAIT-confirmed write of a removed region must not be (FAIL)."""
    log, idmp_left = _ids(final, LOG), {f.get("iid") for _e, f in final.get(IDMP, {}).get("entries", [])}
    missing = [op for op in excused if (op.f == "xadd" and op.key == LOG and op.value not in log)
               or (op.f == "xadd-idmp" and op.args.get("iid") not in idmp_left)]
    confirmed = wait_confirmed(history)
    vouched = [op for op in history.select("xadd", key=LOG, outcome=OK)
               if op.region in history.forced and _vouched(op, confirmed, history.forced)]
    lost = [op for op in vouched if op.value not in log]
    parts = [f"region {r} frozen at {n}" if r not in history.forced_shards else
             f"region {r} frozen at {' / '.join(map(str, history.forced_shards[r]))} (shard by shard)"
             for r, n in sorted(history.forced.items())]
    cost = (f"{len(missing)} unconfirmed write(s) of the removed region(s) lost from {LOG}/{IDMP} (allowed: "
            f"asynchronous; {len(excused)} acknowledged possibly beyond the frozen point, excused)")
    if lost:
        kept = f"{len(lost)} of {len(vouched)} WAIT-confirmed write(s) of the removed region(s) LOST"
    elif vouched:
        kept = f"all {len(vouched)} WAIT-confirmed write(s) of the removed region(s) kept"
    else:
        kept = "no write of the removed region(s) was WAIT-confirmed"
    problems = [f"{op.process} added {op.value} at region {op.region} (t={op.t1:.2f}s), WAIT answered "
                f"{confirmed[op.args['payload']]}: lost by the forced removal" for op in lost]
    problems += [f"{op.process} {op.f} at region {op.region} (t={op.t1:.2f}s) excused"
                 f"{', missing' if op in missing else ''}" for op in excused]
    return Verdict("forced removals", not lost, f"{'; '.join(parts)}: {cost}; {kept}", problems)


def read_own_writes(history: History) -> Verdict:
    """A write read at another region after ``BRAID.WAITFOR`` answered 1 there was found."""
    reads = history.select("read-own", outcome=OK)
    waited = history.select("waitfor", outcome=OK)
    problems = [f"{op.process} wrote {op.args.get('payload')} ({op.args.get('id')}) at region "
                f"{op.args.get('origin')}; BRAID.WAITFOR {op.args.get('token')} answered 1 at region {op.region}, "
                f"whose XRANGE then lacked it (t={op.t1:.2f}s)" for op in reads if op.value != "found"]
    timed_out = sum(1 for op in waited if str(op.value) != "1")
    return _verdict("read your writes", problems, f"{len(reads)} write(s) read at another region after "
                                                  f"BRAID.WAITFOR answered 1 there, each found "
                                                  f"({timed_out} BRAID.WAITFOR timed out)")


def check_all(history: History, dumps: dict[int, Dump | None]) -> list[Verdict]:
    history, excused = excuse_forced(history)
    verdicts = [convergence(dumps)]
    final = next((d for _r, d in sorted(dumps.items()) if d is not None), {})
    verdicts += [lost_writes(history, final), observed_remove(history, final), delete_wins(history, final),
                 strict_ids(history), never_skips(history, final), idmp(history, final), read_own_writes(history)]
    if history.forced:
        verdicts.append(forced_removals(history, excused, final))
    return verdicts


# ------------------------------------------------------------------ shards
ByShard = dict[int, dict[int, "Dump | None"]]  # shard -> region -> that shard's dump


def convergence_by_shard(by_shard: ByShard) -> Verdict:
    """Each shard group on its own: shard K of every region holds the same keys."""
    problems, parts = [], []
    for k, dumps in sorted(by_shard.items()):
        v = convergence(dumps)
        problems += [f"shard {k}: {p}" for p in v.problems]
        live = [d for d in dumps.values() if d is not None]
        parts.append(f"shard {k}: {len(live[0]) if live else 0} keys")
    regions = len(next(iter(by_shard.values()), {}))
    return _verdict("convergence", problems, f"{len(by_shard)} shard groups, each identical in its {regions} "
                                             f"regions ({'; '.join(parts)})")


def placement(history: History, by_shard: ByShard, owners: bytes) -> Verdict:
    """Every key at the shard owning its slot; every command sent to its key's shard."""
    problems = []
    for k, dumps in sorted(by_shard.items()):
        for r, d in sorted(dumps.items()):
            for key in sorted(d or {}):
                slot = key_slot(key.encode())
                if owners[slot] != k:
                    problems.append(f"key {key!r} (slot {slot}, shard {owners[slot]}'s) is at shard {k} of region {r}")
    keyed = [op for op in history.ops if op.key and "shard" in op.args]
    for op in keyed:
        if op.outcome == FAIL and str(op.value).startswith(("MOVED", "CROSSSLOT")):
            problems.append(f"{op.process} {op.f} {op.key} at region {op.region} shard {op.args['shard']} "
                            f"(t={op.t0:.2f}s) was answered {op.value}")
        elif owners[key_slot(op.key.encode())] != op.args["shard"]:
            problems.append(f"{op.process} {op.f} {op.key} was sent to shard {op.args['shard']}, not its key's")
    acked = sum(op.outcome == OK for op in keyed)
    return _verdict("shard placement", problems, f"every key of every shard in its own slots; {acked} acknowledged "
                                                 "commands each at its key's shard, none answered MOVED")


def merged(by_shard: ByShard, owners: bytes, region: int) -> Dump | None:
    """A region's keys: each shard's own (a key at a shard that does not own it is not counted)."""
    out: Dump = {}
    for k, dumps in sorted(by_shard.items()):
        d = dumps.get(region)
        if d is None:
            return None
        out.update({key: v for key, v in d.items() if owners[key_slot(key.encode())] == k})
    return out


def served_meanwhile(history: History, fault) -> int:
    """A shard kill: the operations the region's other shards acknowledged from the kill until the
    killed shard answered again (until the fault healed, if it never did)."""
    info, region = fault.info, fault.targets[0]
    end = fault.t0 + info["back_s"] if info.get("back_s") is not None else (fault.t1 or fault.t0)
    killed = info.get("shard")
    return sum(1 for op in history.ops if op.region == region and op.outcome == OK and op.key
               and op.args.get("shard", killed) != killed and fault.t0 <= op.t1 <= end)


def shard_kills(history: History) -> Verdict:
    """Each shard killed alone was restarted by its supervisor, its siblings answering meanwhile."""
    kills = [f for f in history.faults if f.kind == "shard-kill" and "not injected" not in f.detail]
    problems, times, served = [], [], 0
    for f in kills:
        info, region = f.info, f.targets[0]
        where = f"shard {info.get('shard')} of region {region} (killed at t={f.t0:.2f}s)"
        if not info.get("restarted"):
            problems.append(f"{where} was not started again by its supervisor")
            continue
        times.append(info["back_s"])
        for k, s in sorted(info.get("siblings", {}).items()):
            if s["answered"] == 0 or s["longest_silence_s"] > SIBLING_SILENCE_S:
                problems.append(f"{where}: its sibling shard {k} answered {s['answered']} of {s['asked']} pings, "
                                f"silent for up to {s['longest_silence_s']:.1f} s")
        served += served_meanwhile(history, f)
    if not kills:
        return Verdict("shard kills", True, "no shard process was killed alone")
    span = "-" if not times else f"{times[0]:.2f} s" if len(times) == 1 else f"{min(times):.2f}-{max(times):.2f} s"
    return _verdict("shard kills", problems, f"{len(kills)} single-shard kill(s), each restarted by its supervisor "
                                             f"({span}); the region's other shards answered throughout and "
                                             f"acknowledged {served} operations while it was down")


def check_all_sharded(history: History, by_shard: ByShard, owners: bytes) -> list[Verdict]:
    """:func:`check_all` for sharded regions: convergence per shard group, placement, and the
    other rules over each region's shards together."""
    judged, excused = excuse_forced(history)
    regions = sorted(next(iter(by_shard.values()), {}))
    final = next((d for r in regions if (d := merged(by_shard, owners, r)) is not None), {})
    verdicts = [convergence_by_shard(by_shard), placement(judged, by_shard, owners),
                lost_writes(judged, final), observed_remove(judged, final), delete_wins(judged, final),
                strict_ids(judged), never_skips(judged, final), idmp(judged, final), read_own_writes(judged)]
    if any(f.kind == "shard-kill" for f in history.faults):
        verdicts.append(shard_kills(history))
    if history.forced:
        verdicts.append(forced_removals(judged, excused, final))
    return verdicts
