"""Seeded client operations against random regions, and the history they leave.

Theory of operation
-------------------
Each step, one client sends one command to one region (chosen by the world's
random generator; a region that is down refuses the connection).  Every
operation is recorded as a :class:`Call`: invoked at a virtual time, then
``ok`` (a reply), ``err`` (an error reply: definite, nothing changed),
``info`` (no reply: the region crashed first, the write may or may not have
happened) or ``refused`` (the region was down, or takes no writes: LOADING while
it joins and catches up, READONLY while it leaves or once it was removed).  Writes carry a unique field
value ``w<uid>`` so an entry can be traced back to the call that added it.

The mix: XADD (``*``, a milliseconds-only ID, a full ID - more often where the
region's mode accepts them - sometimes with a MAXLEN or MINID trim, exact or
``~``, with or without LIMIT), bursts of XADD (one key past 100 entries: blocks
split), XADD IDMP (a call that gets no reply is retried with the same producer
and iid at another region, as a client fails over; every region's IDMP window
is set to one second and three iids per producer at the first step, so the
cron's expiry drops iids within a schedule), XDEL, XTRIM (MAXLEN / MINID, exact or ``~``, LIMIT), DEL, XGROUP
CREATE (from 0, MKSTREAM) / DESTROY, XREADGROUP ``>`` followed later by XACK of
what it read - unless the consumer "crashes" and never acknowledges; what it does
not acknowledge it may release with XNACK (SILENT, FAIL or FATAL, sometimes with
RETRYCOUNT or FORCE), and a consumer then takes the released entries back with
XREADGROUP ... CLAIM (they come first) and acknowledges them -, a rare FLUSHALL
(one observed-remove of every key the region holds), COPY of ``k0`` onto ``k1`` or back, with
or without REPLACE (the copy's entries join the destination in a log of their own, its
groups are created again, its consumers and PEL stay at the copying region), and the
ID mode tuned between strict, semi-strict and liberal on every region that is up (as
``braid-admin tune`` does).  Each XADD records the mode its region ran it under: liberal
IDs may collide across regions.  Full IDs and the writes of a region in liberal mode go to key ``k2`` (two origins may
hold one ID there), where there is no XDEL: an XDEL of such an ID diverges
today (tests/test_convergence.py, test_xdel_of_an_id_two_origins_hold_converges).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from node.resp.encoder import ReplyError

from .region import INDETERMINATE

if TYPE_CHECKING:
    from .world import Simulation

KEYS = (b"k0", b"k1")
# full IDs and liberal IDs go to their own key, where two origins may hold one ID: no XDEL
# there (an XDEL of such an ID diverges today: XDEL replicates IDs without their origins)
SHARED_IDS = b"k2"
GROUPS = (b"g0", b"g1")
PRODUCERS = (b"p0", b"p1", b"p2")
MIX = (("xadd", 30), ("xadd_idmp", 10), ("xdel", 5), ("xtrim", 5), ("del", 3), ("group_create", 6),
       ("group_destroy", 2), ("xreadgroup", 14), ("tune", 2), ("xadd_burst", 1), ("xcfgset", 4),
       ("flushall", 1))
# the share of steps that also send a COPY; it draws from a generator of its own (seeded
# from the schedule's seed), so the main one's sequence stays as it was without it
# (``--no-copies`` runs a schedule as it ran before COPY was in the mix)
COPY_SHARE = 0.03
# a sharded database: the share of steps that also send a command to the wrong shard
MISROUTED_SHARE = 0.05
# of the steps that draw ``flushall``, the share that sends it (about one schedule in two has
# one): a flush empties the state every other check judges
FLUSHALL_SHARE = 0.5
# set at every region at the first step: an IDMP window of one second and three iids per
# producer (the cron's expiry drops iids within a schedule)
LAYOUT = ((b"stream-idmp-duration", b"1"), (b"stream-idmp-maxsize", b"3"))
# XCFGSET (the same window, and the key's IDMP maps cleared) races IDMP double sends in a
# key of its own, which nothing deletes or trims (that would hide a divergence); a retry
# after a clearing is rightly a new entry, so the idmp check excuses duplicates there
XCFGSET_KEY = b"kc"
MODES = (b"strict", b"semi-strict", b"liberal")
XNACK_MODES = (b"SILENT", b"FAIL", b"FATAL")
# of the reads a consumer does not fully acknowledge, the share whose rest it releases with XNACK;
# and the share of all reads whose consumer fails to process them and releases them all
XNACK_SHARE = 0.5
XNACK_FAILS = 0.15
# the errors of a region that takes no writes (joining and catching up; leaving or removed)
NOT_TAKING_WRITES = ("LOADING", "READONLY")


@dataclass
class Call:
    uid: int
    kind: str
    region: int
    argv: list[bytes]
    invoked: int
    status: str = "invoke"   # ok | err | info | refused
    reply: Any = None
    done: int | None = None
    dot: tuple[int, int] | None = None   # the AddEntry an XADD issued (region, n)
    extra: dict = field(default_factory=dict)

    def describe(self) -> str:
        args = " ".join(a.decode("utf-8", "replace") for a in self.argv)
        return f"#{self.uid} r{self.region} {args}"


def parse_id(raw: bytes) -> tuple[int, int]:
    ms, seq = raw.split(b"-")
    return int(ms), int(seq)


class Workload:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.history: list[Call] = []
        self.consumers: dict[int, int] = {}   # region -> consumer generation (a crash starts a new one)
        self.iids = 0
        self._kinds = [k for k, _ in MIX]
        self._weights = [w for _, w in MIX]
        self.copy_rng = random.Random(f"copy {sim.config.seed}")
        # a shard group's keys carry a hash tag of its own slots (chaos/sim/shards.py): every
        # command of its workload belongs to its shard; the other groups' tags, for probes
        tag = sim.key_tag
        self.keys = tuple(tag + k for k in KEYS)
        self.shared_ids = tag + SHARED_IDS
        self.xcfgset_key = tag + XCFGSET_KEY

    # ------------------------------------------------------------ one step
    def step(self, step: int) -> None:
        if step == 0:
            for number in sorted(self.sim.regions):
                for name, value in LAYOUT:
                    self.issue("layout", number, [b"CONFIG", b"SET", name, value])
        if self.sim.config.copies and self.copy_rng.random() < COPY_SHARE:
            self._copy(self.copy_rng.choice(sorted(self.sim.regions)))
        kind = self.rng.choices(self._kinds, self._weights)[0]
        region = self.rng.choice(sorted(self.sim.regions))
        getattr(self, f"_{kind}")(region)
        if self.sim.other_tags and self.rng.random() < MISROUTED_SHARE:
            self._misrouted(self.rng.choice(sorted(self.sim.regions)))

    def issue(self, kind: str, region: int, argv: list[bytes], on_done=None, **extra) -> Call:
        """Send ``argv`` to ``region``; the call is recorded and completes when the reply arrives."""
        sim = self.sim
        call = Call(len(self.history) + 1, kind, region, argv, sim.sched.now, extra=extra)
        self.history.append(call)
        r = sim.regions[region]
        if not r.up:
            self._done(call, "refused", None, on_done)
            return call
        before = r.own_n()
        incarnation = r.incarnation

        def issued() -> int:
            """This region's own operations once the command ran (taken right after it ran)."""
            own = call.extra.setdefault("own_n", r.own_n())
            if own > before and kind == "xadd":
                call.dot = (region, before + 1)
            return own

        def reply(value: Any) -> None:
            if value is INDETERMINATE:
                self._done(call, "info", None, on_done)
                return
            own = issued()
            status = "err" if isinstance(value, ReplyError) else "ok"
            if status == "err" and value.message.startswith(NOT_TAKING_WRITES):
                status = "refused"  # joining, leaving or removed: a client writes elsewhere
            if status == "ok" and sim.config.fsync != "everysec" and r.incarnation == incarnation:
                sim.promise(r, own, f"acknowledged {call.describe()}")  # always / no: a reply is a promise
            self._done(call, status, value, on_done)

        if kind == "xadd":
            call.extra["mode"] = r.core.aa.mode
        if kind == "xreadgroup":
            s = r.core.db.keys.get(argv[-2])
            g = s.groups.get(argv[2]) if s is not None else None
            call.extra["created"] = g.created_dot if g is not None else None
        r.call(argv, reply)
        if r.up:
            issued()
        return call

    def _done(self, call: Call, status: str, reply: Any, on_done) -> None:
        call.status, call.reply, call.done = status, reply, self.sim.sched.now
        self.sim.sched.log(f"{call.describe()} -> {status} {_show(reply)}")
        if on_done is not None:
            on_done(call)
        if call.kind == "xadd":
            self.sim.waits.after_write(call)

    # ------------------------------------------------------------ the operations
    def _fields(self) -> list[bytes]:
        return [b"w", b"w%d" % (len(self.history) + 1)]

    def _mode(self, region: int) -> bytes:
        r = self.sim.regions[region]
        return r.core.aa.mode.encode() if r.up else b"strict"

    def _trim_args(self, region: int, key: bytes) -> list[bytes]:
        """MAXLEN or MINID, exact or ``~`` (maybe with LIMIT)."""
        approx = self.rng.random() < 0.5
        ids = self._entry_ids(region, key)
        if ids and self.rng.random() < 0.4:
            args = [b"MINID", b"~" if approx else b"=", self.rng.choice(ids)]
        else:
            args = [b"MAXLEN", b"~" if approx else b"=", b"%d" % self.rng.randint(0, 8)]
        if approx and self.rng.random() < 0.5:
            args += [b"LIMIT", b"%d" % self.rng.randint(1, 20)]
        return args

    def _xadd(self, region: int) -> None:
        key = self.rng.choice(self.keys)
        roll = self.rng.random()
        now = self.sim.sched.now
        full = 0.3 if self._mode(region) != b"strict" else 0.1
        if roll < 0.9 - full:
            id_arg, auto = b"*", True
        elif roll < 1.0 - full:
            id_arg, auto = b"%d" % now, True  # milliseconds only: the region derives the sequence
        else:
            id_arg, auto = b"%d-%d" % (now, self.rng.randint(0, 40)), False
        if not auto or self._mode(region) == b"liberal":
            key = self.shared_ids
        trim = self._trim_args(region, key) if self.rng.random() < 0.15 else []
        self.issue("xadd", region, [b"XADD", key, *trim, id_arg, *self._fields()], auto=auto, key=key)

    def _xadd_burst(self, region: int) -> None:
        """Many entries in one key at once: more than 100 split blocks at every node size."""
        key = self.rng.choice(self.keys) if self._mode(region) != b"liberal" else self.shared_ids
        for _ in range(self.rng.randint(30, 120)):
            self.issue("xadd", region, [b"XADD", key, b"*", *self._fields()], auto=True, key=key)

    def _xadd_idmp(self, region: int, attempt: int = 0, argv: list[bytes] | None = None) -> None:
        if argv is None:
            self.iids += 1
            key = self.rng.choice(self.keys) if self._mode(region) != b"liberal" else self.shared_ids
            pid = self.rng.choice(PRODUCERS)
            argv = [b"XADD", key, b"IDMP", pid, b"i%d" % self.iids, b"*", *self._fields()]

        def failover(call: Call) -> None:
            if call.status in ("info", "refused") and attempt < 3:
                # not to a liberal region unless the key takes shared IDs (see SHARED_IDS)
                others = [n for n in sorted(self.sim.regions)
                          if n != region and (argv[1] == self.shared_ids or self._mode(n) != b"liberal")]
                if others:
                    self.sim.sched.after(self.rng.randint(1, 50), self._xadd_idmp,
                                         self.rng.choice(others), attempt + 1, argv)

        self.issue("xadd", region, argv, on_done=failover, auto=True, key=argv[1], idmp=(argv[3], argv[4]))
        if attempt == 0 and self.rng.random() < 0.25:
            # a double send (a producer that posts to two regions at once): a concurrent duplicate
            others = [n for n in sorted(self.sim.regions)
                      if n != region and (argv[1] == self.shared_ids or self._mode(n) != b"liberal")]
            if others:
                self.issue("xadd", self.rng.choice(others), argv, auto=True, key=argv[1], idmp=(argv[3], argv[4]))

    def _entry_ids(self, region: int, key: bytes) -> list[bytes]:
        r = self.sim.regions[region]
        if not r.up:
            return []
        rows = r.read([b"XRANGE", key, b"-", b"+", b"COUNT", b"30"])
        return [row[0] for row in rows] if isinstance(rows, list) else []

    def _xdel(self, region: int) -> None:
        key = self.rng.choice(self.keys)
        ids = self._entry_ids(region, key)
        target = self.rng.choice(ids) if ids else b"1-1"
        self.issue("xdel", region, [b"XDEL", key, target])

    def _xtrim(self, region: int) -> None:
        key = self.rng.choice(self.keys + (self.shared_ids,))
        self.issue("xtrim", region, [b"XTRIM", key, *self._trim_args(region, key)])

    def _del(self, region: int) -> None:
        self.issue("del", region, [b"DEL", self.rng.choice(self.keys + (self.shared_ids,))])

    def _flushall(self, region: int) -> None:
        """FLUSHALL at one region: one observed-remove of every key it holds; writes it has not
        received yet (concurrent ones) survive.  Otherwise an XADD, so the mix stays as it was."""
        if self.rng.random() < FLUSHALL_SHARE:
            self.issue("flushall", region, [b"FLUSHALL"])
        else:
            self._xadd(region)

    def _copy(self, region: int) -> None:
        """COPY of one key onto the other: entries, groups (their consumers and PEL at this
        region only) and IDMP maps; with REPLACE (mostly) an observed-remove of what the
        destination held first, without it nothing when the destination exists here."""
        src, dst = self.copy_rng.sample(self.keys, 2)
        replace = [b"REPLACE"] if self.copy_rng.random() < 0.7 else []
        self.issue("copy", region, [b"COPY", src, dst, *replace])

    def _group_create(self, region: int) -> None:
        argv = [b"XGROUP", b"CREATE", self.rng.choice(self.keys), self.rng.choice(GROUPS), b"0", b"MKSTREAM"]
        self.issue("group_create", region, argv)

    def _group_destroy(self, region: int) -> None:
        self.issue("group_destroy", region,
                   [b"XGROUP", b"DESTROY", self.rng.choice(self.keys), self.rng.choice(GROUPS)])

    def _consumer(self, region: int) -> bytes:
        return b"c%d-%d" % (region, self.consumers.get(region, 0))

    def _xreadgroup(self, region: int, key: bytes | None = None, group: bytes | None = None,
                    claim: bool = False) -> None:
        """XREADGROUP ``>`` (with ``claim``: CLAIM 0 first, which serves released entries first)."""
        if key is None:
            key, group = self.rng.choice(self.keys), self.rng.choice(GROUPS)
        consumer = self._consumer(region)
        argv = [b"XREADGROUP", b"GROUP", group, consumer, b"COUNT", b"%d" % self.rng.randint(1, 6),
                *([b"CLAIM", b"0"] if claim else []), b"STREAMS", key, b">"]

        def then_ack(call: Call) -> None:
            ids = delivered_ids(call)
            if not ids:
                return
            roll = self.rng.random()
            if roll < 0.2:
                self.consumers[region] = self.consumers.get(region, 0) + 1
                self.sim.sched.log(f"consumer {consumer.decode()} at r{region} crashes: never acknowledges")
                return
            if roll < 0.2 + XNACK_FAILS:  # the consumer fails to process them: it releases them all
                self.sim.sched.after(self.rng.randint(1, 200), self._xnack, region, key, group, ids)
                return
            acked = [i for i in ids if self.rng.random() < 0.85]
            if acked:
                self.sim.sched.after(self.rng.randint(1, 200), self._xack, region, key, group, acked)
            rest = [i for i in ids if i not in acked]
            if rest and self.rng.random() < XNACK_SHARE:
                self.sim.sched.after(self.rng.randint(1, 200), self._xnack, region, key, group, rest)

        self.issue("xreadgroup", region, argv, on_done=then_ack, key=key, group=group)

    def _xack(self, region: int, key: bytes, group: bytes, ids: list[bytes]) -> None:
        self.issue("xack", region, [b"XACK", key, group, *ids])

    def _xnack(self, region: int, key: bytes, group: bytes, ids: list[bytes]) -> None:
        """Release what was not acknowledged (region-local, like the PEL); sometimes with
        RETRYCOUNT, or FORCE and an ID nobody read; later a consumer claims them back."""
        argv = [b"XNACK", key, group, self.rng.choice(XNACK_MODES), b"IDS", b"%d" % len(ids), *ids]
        if self.rng.random() < 0.2:
            argv += [b"RETRYCOUNT", b"%d" % self.rng.randint(0, 3)]
        if self.rng.random() < 0.2:
            argv[5:6 + len(ids)] = [b"%d" % (len(ids) + 1), *ids, b"%d-0" % self.sim.sched.now]
            argv.append(b"FORCE")

        def then_claim(call: Call) -> None:
            if call.status == "ok" and call.reply and self.rng.random() < 0.7:
                self.sim.sched.after(self.rng.randint(1, 200), self._xreadgroup, region, key, group, True)

        self.issue("xnack", region, argv, on_done=then_claim, key=key, group=group)

    def _xcfgset(self, region: int) -> None:
        """XCFGSET at one region, racing an IDMP producer that double-sends to the others
        (the race a clearing must survive: a concurrent duplicate arriving after it)."""
        argv = [b"XCFGSET", self.xcfgset_key, b"IDMP-DURATION", LAYOUT[0][1], b"IDMP-MAXSIZE", LAYOUT[1][1]]
        others = [n for n in sorted(self.sim.regions) if n != region and self._mode(n) != b"liberal"]
        if len(others) >= 2 and self._mode(region) != b"liberal":
            self.iids += 1
            add = [b"XADD", self.xcfgset_key, b"IDMP", self.rng.choice(PRODUCERS), b"i%d" % self.iids, b"*",
                   *self._fields()]
            first, second = self.rng.sample(others, 2)
            self.issue("xadd", first, add, auto=True, key=self.xcfgset_key, idmp=(add[3], add[4]))
            self.sim.sched.after(self.rng.randint(0, 8), self._send_late, second, add)
            self.sim.sched.after(self.rng.randint(5, 30), self.issue, "xcfgset", region, argv, None)
        else:
            self.issue("xcfgset", region, argv, key=self.xcfgset_key)

    def _send_late(self, region: int, argv: list[bytes]) -> None:
        self.issue("xadd", region, argv, auto=True, key=argv[1], idmp=(argv[3], argv[4]))

    def _tune(self, region: int) -> None:
        mode = self.rng.choice(MODES)
        for number in sorted(self.sim.regions):
            self.issue("tune", number, [b"BRAID.CONFIG", b"SET", b"crdt_xadd_id_uniqueness_mode", mode])


    def _misrouted(self, region: int) -> None:
        """A sharded database: a command for a key of another shard is answered MOVED, one
        for keys of two slots CROSSSLOT, and neither changes anything (the routing check)."""
        foreign = self.rng.choice(self.sim.other_tags) + KEYS[0]
        if self.rng.random() < 0.5:
            argv, want = [b"XADD", foreign, b"*", b"f", b"v"], "MOVED "
        else:
            argv, want = [b"XREAD", b"STREAMS", self.keys[0], foreign, b"0", b"0"], "CROSSSLOT "
        r = self.sim.regions[region]
        before = r.own_n() if r.up else 0

        def judge(call: Call) -> None:
            if call.status in ("refused", "info"):
                return  # the region was down, or went down before it answered
            error = call.reply.message if isinstance(call.reply, ReplyError) else None
            if error is None or not error.startswith(want) or call.extra.get("own_n", before) != before:
                self.sim.routing_problems.append(f"{call.describe()} -> {_show(call.reply)} (wanted {want.strip()} "
                                                 f"and no change)")

        self.issue("misrouted", region, argv, judge)


def delivered_ids(call: Call) -> list[bytes]:
    """The entry IDs an XREADGROUP reply handed out."""
    if call.status != "ok" or not isinstance(call.reply, list):
        return []
    return [row[0] for _key, rows in call.reply for row in rows]


def _show(reply: Any) -> str:
    if reply is None:
        return ""
    if isinstance(reply, ReplyError):
        return f"({reply.message[:60]})"
    if isinstance(reply, bytes):
        return reply.decode("utf-8", "replace")
    if isinstance(reply, list) and reply and isinstance(reply[0], list) and len(reply[0]) == 2 \
            and isinstance(reply[0][1], list):
        return "[" + " ".join(row[0].decode() for _k, rows in reply for row in rows) + "]"
    return repr(reply)[:60]
