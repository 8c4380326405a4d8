"""A Hypothesis state machine over the regions of a database: convergence step by step.

Theory of operation
-------------------
``tests/test_convergence.py`` checks convergence on whole random scripts; here a
:class:`hypothesis.stateful.RuleBasedStateMachine` drives the same ``Region``
objects (real region servers, never started: commands through the real
handlers, operations through the real codec and causal log) one step at a time,
checking invariants after every step, and shrinks a failure to a short, printed
list of steps.

What is modelled:

- three regions at first, each with its own clock (rules advance one clock - by a few
  milliseconds or past the IDMP duration - or catch it up with another's, so
  clocks skew and two regions often share a millisecond), and its own node
  size (``stream-node-max-entries`` 2, 100 and 3: blocks split all the time at
  two regions, and a burst of more than 100 entries splits them at the third);
- the ID mode of each region, tuned one region at a time (as ``braid-admin
  tune`` reaches regions one after another) between strict, semi-strict and
  liberal; full IDs are sent in every mode (strict must refuse them);
- writes at any region: XADD with ``*``, a milliseconds-only or a full ID
  (refused, like Redis, when below the stream's top), bursts of entries,
  idempotent XADD with a producer and iid from a tiny alphabet (so retries land
  at other regions, before and after replication, before and after the iid
  expired; XCFGSET clears a key's maps meanwhile), XDEL (also of an ID two origins hold: it names the logs it removed it
  from, see test_xdel_of_an_id_two_origins_hold_converges), XTRIM MAXLEN /
  MINID, exact or ``~``, with or without LIMIT,
  DEL, XGROUP CREATE / DESTROY, XREADGROUP ``>``, XACK and XNACK (any mode, maybe
  RETRYCOUNT, maybe FORCE on an entry nobody read) by local consumers, COPY
  (with and without REPLACE, onto missing and existing keys, of any key but the
  reader's onto the others: the Active-Active rule of crdt/resolve.py), RENAME
  (onto missing and existing keys; the entries go to an origin log of their own);
- FLUSHALL at one region right after another region wrote an entry it lacks,
  then full delivery (see the invariants);
- the cron's work at any region: IDMP expiry (time and size, with the region's
  stable vector), garbage collection of delete contexts, and trimming the
  oldest operations of the replication backlog (at region 1 whoever lacks them,
  so that full resyncs happen; at the others only what every live region holds);
- the network: one envelope from one live region to another at a time (or a
  few in a row), picked at random among those it lacks (random order; a delay
  is simply not delivering), duplicates (an envelope the receiver already
  applied or holds pending), and a full-resync image where the sender trimmed
  operations the receiver lacks; the first delivery over a link stands for its
  handshake (each end records what the other held: ``hub.handshake_vv``), and a
  reconnection handshakes again (each end forgets the other's own operations that
  wait there for their dependencies: the other sends them again);
- membership (crdt/membership.py), every change agreed by every voter through
  ``node.activeactive.coordinator.agree`` with the regions' own ``promise`` / ``commit``:
  up to two regions join (numbers 4 and 5), start empty with the newest list,
  get their data from the network like any region (an image from region 1 when
  it trimmed what they lack), refuse writes with LOADING until they caught up
  (they hold what every active peer held when they first met) and are then
  activated by themselves; an active region leaves (never below two active:
  READONLY, then REMOVE once a sync gave every other region all its operations,
  frozen at its own count); a region - active, joining or leaving - is removed
  by force while some of its envelopes are still on their way (frozen at the
  most any other region holds).  Write rules draw the active regions (the
  ``regions_st`` bundle); dedicated rules write where a region is not active, and
  have a removed region (which keeps taking writes until it learns it was
  removed: they are lost) meet a member;
- an operator's restore: a region's folder is copied at any step (its keyspace and
  causal log as a snapshot holds them: ``snapshot.encode``), and an active region
  is later replaced by a new process started from one of its older copies (with
  the newest member list: the cluster file is not in the folder).  It handshakes
  with every live member at once (each forgets its waiting operations) and the
  real start gate (``ActiveActive.recover_own_operations``, as ``attach_log``
  calls it at every start) refuses its writes (LOADING) until it holds its own
  operations every member held then; the write rules draw only writable regions
  (it leaves the ``regions_st`` bundle until it recovered).  Its own operations
  no other region held are lost with the restore (and their numbers minted
  again); its consumer groups' local state goes back in time (the failing-over
  reader there starts over);
- a reader that fails over: one consumer of group ``rg`` on key ``r`` reads at
  one region, acknowledges, and is redirected to another region, with or without
  a sync first.  Key ``r`` gets entries, deletions and trims from every region,
  but no DEL and no group changes, so the group lives until a FLUSHALL (which
  removes it; it is created again and the reader starts over).

Invariants:

- strict and semi-strict modes never mint an ID twice in a key for ``*`` or a
  milliseconds-only ID, and two regions never mint the same one (the sequence
  is congruent to the region's number, a joining region's too); strict mode
  refuses full IDs;
- every live region holds the same member list (epoch, statuses, frozen
  points; in its cluster configuration too), one epoch per agreed change; no
  live region applies, or holds pending, an operation of a removed region past
  its frozen point; a member refuses a removed region's handshake and drops
  its operations past that point; writes are refused with LOADING while
  joining (until caught up) and READONLY while leaving or removed;
- each causal log applies every envelope exactly once: the version vector only
  grows (but at a restore), and the log holds every dot ``(o, floor[o]+1 .. vv[o])``
  and none above (those below were trimmed, or a joined state brought them without
  their envelopes); a duplicate envelope changes nothing;
- no operation is lost: after full delivery every region holds every operation any
  region ever held, but those a restore took from the only folder that held them;
  a restored region takes writes again only once it holds every operation of its
  own any member held when it started, with the same history (the digests of
  crdt/causal.py agree there);
- after full delivery (the ``sync_all_and_check`` rule, and at teardown) every
  live region (the removed ones are out of the comparison) has the same version
  vector and the same history digests (the same operations under the same dots:
  a region that minted again a number its peers hold differs here), the same
  snapshot, the same replies to XRANGE / groups / EXISTS for every key, and
  IDMP maps that agree: an iid held by two regions (live or kept for a dropped
  key) names the same entry at both (which iids are still held differs: each
  region expires on its own clock, and past IDMP-MAXSIZE evicts the oldest
  arrivals, in the order it received them);
- causal stability waits for the live members only: after every live region
  wrote once it had seen everything, and full delivery, everything before is
  stable at every region and every delete context is collected, whoever was
  removed;
- a FLUSHALL, once delivered everywhere, has removed at every region every entry
  the flushing region had observed and every group of the keys it held, and no
  entry it had not received (one every other region held live, not an idempotent
  add that may lose to a duplicate): observed-remove, as DEL key by key;
- a region's PEL stays consistent whatever XNACK released (it is local: it issues no
  operation, so it never changes what the regions converge to): the group PEL is the
  disjoint union of its consumers' PELs and the released entries, a released entry
  has no owner and a delivery time of 0, the NACK zone comes first in the
  time-ordered PEL (claims serve it first), every count is within 0..LLONG_MAX, and
  each XNACK leaves the counts its mode and RETRYCOUNT document;
- a region over its ``maxmemory`` refuses its client's XADD (OOM: nothing minted, nothing
  replicated) and still applies another region's operations (the ``memory_full`` rule);
- XREADGROUP ``>`` never skips an entry (``test_xreadgroup_never_skips_an_entry``'s
  guarantee, with deletions): after the reader reads everything new at a region,
  every entry live there has been delivered to it at some region; at one region
  ``>`` never hands out an entry twice; and after a synced redirect, entries it
  had delivered and acknowledged (empty PEL) are not handed out again;
- WAIT (tests/wait_rules.py: acks cross links as a rule of their own): the regions WAIT
  counted for a client's write hold it while they are the same members, and after full
  delivery every live region holds it, under its dot, while one of them remains.

The machine found that an XACK watermark of a group creation that lost to a
concurrent one moved the winner at some regions only; watermarks now name their
creation (``AckWatermark.created``), are compared after full delivery, and the
found case is a regression test at the end of this file.  It also found that an
envelope of a region removed by force, waiting at a voter for its dependencies,
was applied past the frozen point once they arrived (now such envelopes are
dropped when the list refuses them: test_a_waiting_operation_of_a_region_removed_by_force_is_dropped).
"""

from __future__ import annotations

import collections
import copy
import sys

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from crdt import groups as cg
from crdt import ops
from crdt.idgen import LIBERAL, SEMI_STRICT, STRICT, IdError
from crdt.ids import MAX_ID, MIN_ID
from crdt.membership import ACTIVATE, ACTIVE, FORCE_REMOVE, JOIN, JOINING, LEAVE, LEAVING, REMOVE, REMOVED, Change
from node.activeactive import opcodec
from node.activeactive.cluster_config import ClusterConfig
from node.activeactive.coordinator import agree
from node.persistence import replay, snapshot
from node.region.config import Config
from node.region.core import RegionCore, Session
from node.resp.encoder import ReplyError
from tests.test_convergence import STRIDE, Region, deliver, sync
from tests.wait_rules import WaitRules

REGIONS = (1, 2, 3)              # the regions the database is created with
JOINERS = (4, 5)                 # the numbers of the regions a run may add, in this order
KEYS = [b"a", b"b"]              # every operation, DEL and group changes included
R, RG, READER = b"r", b"rg", b"reader"  # the failing-over reader's key, group, consumer
STREAM_KEYS = KEYS + [R]         # entry writes, deletions and trims
GROUPS = [b"g1", b"g2"]
CONSUMERS = [b"c1", b"c2"]
START_MS = 100
NODE_SIZES = {1: "2", 2: "100", 3: "3", 4: "2", 5: "100"}   # stream-node-max-entries per region
IDMP_SETTINGS = {"stream-idmp-duration": "1", "stream-idmp-maxsize": "2"}  # 1 s, 2 iids per producer
MAX_ENTRIES = 400                # bursts stop once a region holds this many entries
COPIES_KEPT = 3                  # the newest copies of each region's folder the operator keeps

# The regions that take writes (active members): the founders, a joining region once it is
# activated; a region that leaves or is removed by force is taken out (``consumes``).
regions_st = Bundle("active")


# Envelopes of a region removed by force still on their way when it is cut off (a pick each).
IN_FLIGHT = st.lists(st.integers(0, 1000), max_size=4)
# Network work between an agreement's promises and each of its commits (a pick each).
MEANWHILE = st.lists(st.integers(0, 1000), max_size=3)


class LateVoter:
    """A region voting on a membership change (its own ``promise`` / ``commit`` / ``abort``)
    whose commit comes after the network did some more work (``meanwhile``): a member that
    committed meets one that only promised, a removed region's envelopes still arrive."""

    def __init__(self, aa, meanwhile) -> None:
        self.aa, self.meanwhile = aa, meanwhile

    def promise(self, p):
        return self.aa.promise(p)

    def commit(self, p, frozen):
        self.meanwhile()
        return self.aa.commit(p, frozen)

    def abort(self, p):
        return self.aa.abort(p)


class AddedRegion(Region):
    """A region added to the running database: a region server created with the newest
    member list (where it is joining), empty; it catches up from its peers.  Also a region
    started again from a copy of its folder (the ``restore`` rule installs the copy)."""

    def __init__(self, number: int, cluster: ClusterConfig, settings: dict[str, str]) -> None:
        self.number = number
        self.server = RegionCore(Config(), cluster=(cluster, cluster.by_number(number)), clock=lambda: self.clock)
        self.aa = self.server.aa
        self.client = Session(self.server)
        self.client.authenticated = True
        self.clock = 0
        for name, value in settings.items():
            self.call(b"CONFIG", b"SET", name.encode(), value.encode())


class ConvergenceMachine(WaitRules, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.regions = {n: Region(n, {"stream-node-max-entries": NODE_SIZES[n], **IDMP_SETTINGS})
                        for n in REGIONS}
        for r in self.regions.values():
            r.clock = START_MS  # equal clocks: every region starts in the same millisecond
        self.regions[1].create_group(R, RG)
        sync(*self.regions.values())
        self.modes = {n: STRICT for n in REGIONS}
        self.minted: list[tuple[bytes, tuple, int]] = []   # (key, id, region), every region-unique ID minted
        self.minted_keyed: set[tuple[bytes, tuple]] = set()
        self.minted_by: dict[tuple, set[int]] = {}         # id -> the regions that minted it
        self.seen_vv = {n: {} for n in REGIONS}
        self.images = 0                                    # full resyncs installed
        self.shared_ids: set[bytes] = set()                # keys where two origins may hold one ID
        self.expired = self.collected = 0                  # iids expired, delete contexts collected
        # the failing-over reader
        self.reader_at = 1
        self.delivered: set[tuple] = set()                 # every ID handed to it, anywhere
        self.delivered_at = {n: set() for n in REGIONS}    # ... and at each region
        self.settled: set[tuple] = set()                   # acknowledged, then a synced redirect
        # membership: self.regions holds the live members (joining, active, leaving)
        self.removed: dict[int, Region] = {}               # removed regions, out of every comparison
        self.joins = 0                                     # regions added so far (JOINERS[:joins])
        self.ballots = 0                                   # the coordinators' ballot counter
        # restores: the operator's copies of each region's folder (snapshots), the restored
        # regions still taking their own operations back (-> the most of them a member held
        # when it started), and per origin the operations every region must end up holding
        self.copies: dict[int, list[bytes]] = {}
        self.restoring: dict[int, int] = {}
        self.must_hold: dict[int, int] = {}
        self.restores = 0
        self.minted_n: list[int] = []                      # the dot counter of each self.minted entry
        self.wait_confirmed = []                           # writes WAIT counted regions for (tests/wait_rules.py)

    @initialize(target=regions_st)
    def founders(self):
        return multiple(*REGIONS)

    # ------------------------------------------------------------ helpers
    def _mint(self, region: Region, key: bytes, id_: tuple) -> None:
        """An ID the region chose itself: region-unique unless the region runs liberal."""
        if self.modes[region.number] == LIBERAL:
            self.shared_ids.add(key)
            return
        self.minted.append((key, id_, region.number))
        self.minted_n.append(region.causal.vv.get(region.number, 0))  # the XADD is its last operation
        self.minted_keyed.add((key, id_))
        self.minted_by.setdefault(id_, set()).add(region.number)

    def _unique_ids(self, region: int, key: bytes) -> bool:
        """The reader's key gets only region-unique IDs: it tells entries apart by ID alone
        (equal IDs from two origins, liberal's and full IDs' caveat, are tested on the others)."""
        return key != R or self.modes[region] != LIBERAL

    def _sync(self) -> None:
        for a in self.regions.values():
            for b in self.regions.values():
                if a is not b:
                    self._meet(a, b)
        before = [r.aa.hub.resyncs_received for r in self.regions.values()]
        sync(*self.regions.values())
        self.images += sum(r.aa.hub.resyncs_received for r in self.regions.values()) - sum(before)

    @staticmethod
    def _stream_view(region: Region, key: bytes) -> tuple:
        s = region.keys.get(key)
        entries = list(s.range(MIN_ID, MAX_ID)) if s is not None else []
        return region.exists(key), region.xrange(key), entries, region.groups(key)

    @staticmethod
    def _idmp_view(region: Region) -> dict:
        """Every key's IDMP maps, live or kept for a dropped key (pid -> iid -> ID)."""
        out = {}
        for key in STREAM_KEYS:
            s = region.keys.get(key)
            state = s.idmp if s is not None else region.keys.idmp_kept.get(key)
            if state is not None:
                maps = {pid: dict(m) for pid, m in state.producers.items() if m}
                if maps:
                    out[key] = maps
        return out

    def _check_converged(self) -> None:
        rs = list(self.regions.values())
        for r in rs:
            assert not r.causal.pending, f"region {r.number} still waits for {sorted(r.causal.pending)}"
        assert all(r.causal.vv == rs[0].causal.vv for r in rs)
        heads = [r.causal.held_heads() for r in rs]  # the same numbers are the same operations
        assert all(h == heads[0] for h in heads), f"histories differ under one version vector: {heads}"
        self.check_wait_confirmed_held()
        lost = {o: n for o, n in self.must_hold.items() if rs[0].causal.vv.get(o, 0) < n}
        assert not lost, f"operations lost: every region holds {rs[0].causal.vv}, some held {lost}"
        snaps = [r.snapshot() for r in rs]
        assert all(snap == snaps[0] for snap in snaps)
        for key in STREAM_KEYS:
            views = [self._stream_view(r, key) for r in rs]
            assert all(view == views[0] for view in views), key
        # IDMP maps: each region's cron expires iids at its own time, with what it knows is
        # stable, and past IDMP-MAXSIZE the oldest *arrivals* go (an order each region sees
        # differently), so the maps may hold different iids; an iid two regions both hold
        # must stand for the same entry at both (so a retry gets one answer everywhere)
        maps = [self._idmp_view(r) for r in rs]
        held: dict[tuple, set] = {}
        for m in maps:
            for key, producers in m.items():
                for pid, iids in producers.items():
                    for iid, id_ in iids.items():
                        held.setdefault((key, pid, iid), set()).add(id_)
        split = {k: v for k, v in held.items() if len(v) > 1}
        assert not split, f"regions map one iid to different entries: {split}"
        marks = [{(k, n): dict(g.watermarks) for k, s in r.keys.items() for n, g in s.groups.items()}
                 for r in rs]
        assert all(m == marks[0] for m in marks)  # the replicated XACK watermarks too

    def _reader_group(self, region: Region):
        return region.keys[R].groups[RG]  # never DEL'd nor destroyed: always there

    # ------------------------------------------------------------ clocks and modes
    @rule(region=regions_st, delta=st.sampled_from([0, 1, 2, 3, 1500]))
    def tick(self, region, delta):
        """A few milliseconds, or past the IDMP duration (1 s)."""
        self.regions[region].clock += delta

    @rule(region=regions_st, other=regions_st)
    def catch_up_clock(self, region, other):
        """The first region's clock reaches the second's: both in one millisecond."""
        a, b = self.regions[region], self.regions[other]
        a.clock = max(a.clock, b.clock)

    @rule(region=regions_st, mode=st.sampled_from([STRICT, SEMI_STRICT, LIBERAL]))
    def tune(self, region, mode):
        self.regions[region].tune(mode)
        self.modes[region] = mode

    # ------------------------------------------------------------ writes
    @rule(region=regions_st, key=st.sampled_from(STREAM_KEYS),
          ms=st.none() | st.integers(START_MS, START_MS + 6), field=st.sampled_from([b"f", b"g"]))
    def xadd(self, region, key, ms, field):
        r = self.regions[region]
        if not self._unique_ids(region, key):
            return
        try:
            new = r.xadd(key, ms, field)
        except IdError:
            return  # a milliseconds-only ID below the top: refused, nothing replicated
        self._mint(r, key, new)

    @rule(region=regions_st, writer=regions_st, key=st.sampled_from(STREAM_KEYS))
    def memory_full(self, region, writer, key):
        """``region`` runs out of memory for a while: its client's write is refused, and an
        operation of ``writer`` (another region) is applied there all the same."""
        full = self.regions[region]
        if region == writer or not full.aa.writable or not self.regions[writer].aa.writable:
            return
        before = dict(full.aa.causal.vv)
        full.call(b"CONFIG", b"SET", b"maxmemory", b"1")
        try:
            refused = full.call(b"XADD", key, b"*", b"f", b"v", check=False)
            assert isinstance(refused, ReplyError) and refused.message.startswith("OOM "), refused
            assert full.aa.causal.vv == before  # nothing minted
            self.xadd(writer, key, None, b"f")
            deliver(self.regions[writer], full)
            assert full.aa.causal.vv.get(writer, 0) >= self.regions[writer].aa.causal.vv.get(writer, 0)
        finally:
            full.call(b"CONFIG", b"SET", b"maxmemory", b"0")

    @rule(region=regions_st, key=st.sampled_from(STREAM_KEYS), ms=st.integers(START_MS, START_MS + 6),
          seq=st.integers(0, 40))
    def xadd_full_id(self, region, key, ms, seq):
        """A full ID: refused in strict mode, taken above the top in the others (may collide)."""
        r = self.regions[region]
        if key == R and self.modes[region] != STRICT:
            return
        before = r.causal.vv.get(region, 0)
        try:
            new = r.xadd(key, ms, seq=seq)
        except IdError as e:
            assert r.causal.vv.get(region, 0) == before  # refused: nothing replicated
            if self.modes[region] == STRICT:
                assert "strict ID mode" in str(e)
            return
        assert self.modes[region] != STRICT, "strict mode accepted a full ID"
        assert new == (ms, seq)
        self.shared_ids.add(key)

    @precondition(lambda self: max(sum(s.length for s in r.keys.values())
                                   for r in self.regions.values()) < MAX_ENTRIES)
    @rule(region=regions_st, key=st.sampled_from(STREAM_KEYS), count=st.sampled_from([20, 101]))
    def xadd_burst(self, region, key, count):
        """Many entries at once: blocks split (more than 100 entries in one key)."""
        r = self.regions[region]
        if not self._unique_ids(region, key):
            return
        for _ in range(count):
            self._mint(r, key, r.xadd(key))

    @rule(region=regions_st, key=st.sampled_from(STREAM_KEYS),
          pid=st.sampled_from([b"p1", b"p2"]), iid=st.sampled_from([b"i1", b"i2", b"i3"]))
    def xadd_idmp(self, region, key, pid, iid):
        r = self.regions[region]
        if not self._unique_ids(region, key):
            return
        before = r.causal.vv.get(region, 0)
        new = r.xadd_idmp(key, pid, iid)
        if r.causal.vv.get(region, 0) > before:  # not a retry this region still knew: minted
            self._mint(r, key, new)

    @rule(region=regions_st, key=st.sampled_from(STREAM_KEYS), pick=st.integers(0, 50))
    def xdel(self, region, key, pick):
        self.regions[region].xdel(key, pick)  # also where two origins hold one ID: it names their logs

    @rule(region=regions_st, key=st.sampled_from(STREAM_KEYS), maxlen=st.integers(0, 4), approx=st.booleans(),
          limit=st.none() | st.integers(1, 3))
    def xtrim(self, region, key, maxlen, approx, limit):
        r = self.regions[region]
        before = r.entry_ids(key)
        removed = r.xtrim(key, maxlen=maxlen, approx=approx, limit=limit if approx else None)
        assert before[removed:] == r.entry_ids(key), "a trim removed other than the oldest entries"
        if not approx:
            assert len(r.entry_ids(key)) == min(len(before), maxlen)

    @rule(region=regions_st, key=st.sampled_from(STREAM_KEYS), pick=st.integers(0, 50), approx=st.booleans(),
          limit=st.none() | st.integers(1, 3))
    def xtrim_minid(self, region, key, pick, approx, limit):
        r = self.regions[region]
        before = r.entry_ids(key)
        minid = before[pick % len(before)] if before else (START_MS, 0)
        removed = r.xtrim(key, minid=minid, approx=approx, limit=limit if approx else None)
        assert before[removed:] == r.entry_ids(key), "a trim removed other than the oldest entries"
        if not approx:
            assert all(i >= minid for i in r.entry_ids(key))

    @rule(region=regions_st, key=st.sampled_from(KEYS))
    def delete(self, region, key):
        self.regions[region].delete(key)

    @rule(region=regions_st, src=st.sampled_from(STREAM_KEYS), dst=st.sampled_from(KEYS), replace=st.booleans())
    def copy(self, region, src, dst, replace):
        """COPY at one region, with and without REPLACE, onto a missing or an existing key
        (whose entries and groups other regions may be changing meanwhile): Redis's reply,
        and there the destination holds the source's entries (one per ID), its groups with
        their cursors, consumers and PEL, and its IDMP configuration; the source is untouched."""
        if src == dst:
            return
        r = self.regions[region]
        source, held = r.keys.get(src), dst in r.keys
        before = self._stream_view(r, src)
        reply = r.call(b"COPY", src, dst, *([b"REPLACE"] if replace else []))
        assert self._stream_view(r, src) == before
        if source is None or (held and not replace):
            assert reply == 0
            return
        assert reply == 1
        assert r.xrange(dst) == list(dict.fromkeys(r.xrange(src)))  # entries sharing an ID collapse
        copied = r.keys[dst]
        assert sorted(copied.groups) == sorted(source.groups)
        for name, g in source.groups.items():
            c = copied.groups[name]
            assert (c.last_id, c.entries_read, list(c.pel), sorted(c.consumers)) == \
                (g.last_id, g.entries_read, list(g.pel), sorted(g.consumers))
        assert (copied.idmp.duration, copied.idmp.maxsize) == (source.idmp.duration, source.idmp.maxsize)
        if len(copied.logs) > 1 or src in self.shared_ids:
            self.shared_ids.add(dst)  # the copy's IDs may equal other origins' there

    @rule(region=regions_st, src=st.sampled_from(KEYS), dst=st.sampled_from(KEYS))
    def rename(self, region, src, dst):
        """RENAME at one region onto a missing or an existing key: the destination holds what the
        source held there (one entry per ID, in an origin log of their own, no groups) and the
        source is gone there; concurrent writes elsewhere merge by the observed-remove rules."""
        if src == dst:
            return
        r = self.regions[region]
        entries, existed = list(dict.fromkeys(r.xrange(src))), src in r.keys
        reply = r.call(b"RENAME", src, dst, check=False)
        if not existed:
            assert isinstance(reply, ReplyError)  # ERR no such key
            return
        assert reply == "OK" and src not in r.keys
        assert r.xrange(dst) == entries
        assert (r.keys[dst].groups == {}) if entries else dst not in r.keys  # no entries, no groups: no key
        self.shared_ids.add(dst)  # its IDs may equal those another origin holds there

    @rule(region=regions_st, key=st.sampled_from(KEYS), group=st.sampled_from(GROUPS))
    def create_group(self, region, key, group):
        self.regions[region].create_group(key, group)

    @precondition(lambda self: self._groups_here())
    @rule(region=regions_st, key=st.sampled_from(KEYS), group=st.sampled_from(GROUPS))
    def destroy_group(self, region, key, group):
        self.regions[region].destroy_group(key, group)

    @rule(region=regions_st, writer=regions_st, key=st.sampled_from(STREAM_KEYS))
    def flushall(self, region, writer, key):
        """FLUSHALL at one region right after another wrote an entry it has not received (it
        may lack more), then full delivery: every entry the flushing region had observed is
        gone everywhere, and so is every group of the keys it held (delete wins over
        concurrent creations too); every entry it had not seen survives everywhere.  The
        reader's group goes with the flush: it is created again and the reader starts over."""
        f = self.regions[region]
        if writer != region and self._unique_ids(writer, key):
            w = self.regions[writer]
            self._mint(w, key, w.xadd(key))
        unseen = self._unseen_by(f)
        before = f.causal.vv.get(region, 0)
        assert f.call(b"FLUSHALL") == "OK"
        assert not f.keys, "FLUSHALL left keys where it was sent"
        if f.causal.vv.get(region, 0) == before:
            return  # nothing was there to flush: nothing was sent
        assert f.causal.vv[region] == before + 1, "a flush is one operation"
        flush = opcodec.decode(f.causal.log[-1].op)
        self._sync()
        for r in self.regions.values():
            for key_, tops in flush.observed.items():
                s = r.keys.get(key_)
                if s is None:
                    continue
                assert not s.groups, f"region {r.number}: a group of {key_!r} survived the flush"
                for o, top in tops.items():
                    log = s.logs.get(o)
                    kept = [eid for eid, _ in log.range(MIN_ID, top)] if log is not None else []
                    assert not kept, f"region {r.number}: {key_!r} kept {kept} that the flush had observed"
            lost = unseen - self._live(r)
            assert not lost, f"region {r.number}: the flush removed {sorted(lost)}, which it had not seen"
        self.regions[region].create_group(R, RG)
        self._sync()
        self.reader_at = region
        self.delivered, self.settled = set(), set()
        self.delivered_at = {n: set() for n in self.regions}

    @staticmethod
    def _live(region: Region) -> set[tuple]:
        """(key, origin, ID) of every live entry."""
        return {(key, o, eid) for key, s in region.keys.items() for o, log in s.logs.items()
                for eid, _ in log.range(MIN_ID, MAX_ID)}

    def _unseen_by(self, region: Region) -> set[tuple]:
        """Entries whose add ``region`` has not applied and that are live at every region that
        has: no removal of them can have been issued anywhere (its issuer would have removed
        them there), so only a flush that ignored observed-remove could take them.
        Idempotent adds are left out: an add that loses to a concurrent duplicate goes once
        they meet."""
        others = [r for r in self.regions.values() if r is not region]
        live = {r.number: self._live(r) for r in others}
        vv = region.causal.vv
        unseen = set()
        for r in others:  # an add this region lacks is in the backlog of whoever holds it
            for env in r.causal.log:
                if env.n <= vv.get(env.origin, 0):
                    continue
                op = opcodec.decode(env.op)
                if type(op) is not ops.AddEntry or op.pid is not None:
                    continue
                entry = (op.key, op.origin, op.id)
                holders = [h.number for h in others if h.causal.vv.get(env.origin, 0) >= env.n]
                if all(entry in live[h] for h in holders):
                    unseen.add(entry)
        return unseen

    @rule(region=regions_st, key=st.sampled_from(STREAM_KEYS), maxsize=st.sampled_from([b"2", b"3"]))
    def xcfgset(self, region, key, maxsize):
        """XCFGSET clears the key's IDMP maps where it runs (its iids go once stable), while
        duplicates of those iids may still be on their way (XCFGSET on a missing key is an error)."""
        self.regions[region].call(b"XCFGSET", key, b"IDMP-MAXSIZE", maxsize, check=False)

    # ------------------------------------------------------------ local consumers
    def _groups_here(self, pending_only: bool = False) -> list[tuple[int, bytes, bytes]]:
        """(region, key, group) of every group that exists somewhere (with a PEL), where
        consumers may read (XREADGROUP and XACK are writes: refused while joining or leaving)."""
        return [(n, k, name) for n, r in self.regions.items() if r.aa.writable for k in KEYS if k in r.keys
                for name, g in sorted(r.keys[k].groups.items()) if g.pel or not pending_only]

    @precondition(lambda self: self._groups_here())
    @rule(data=st.data(), consumer=st.sampled_from(CONSUMERS), count=st.integers(0, 2))
    def xreadgroup(self, data, consumer, count):
        region, key, group = data.draw(st.sampled_from(self._groups_here()), label="group")
        r = self.regions[region]
        held = collections.Counter(r.xrange(key))  # two origins may hold one ID (full IDs, liberal)
        got = r.xreadgroup(key, group, consumer, count)
        assert all(n <= held[i] for i, n in collections.Counter(got).items()), "`>` handed out an entry twice"
        assert not count or len(got) <= count

    @precondition(lambda self: self._groups_here(pending_only=True))
    @rule(data=st.data(), how=st.sampled_from(["all", "first", "last"]))
    def xack(self, data, how):
        region, key, group = data.draw(st.sampled_from(self._groups_here(pending_only=True)), label="group")
        pel = list(self.regions[region].keys[key].groups[group].pel)
        self.regions[region].xack(key, group, *(pel if how == "all" else [pel[0] if how == "first" else pel[-1]]))

    @precondition(lambda self: self._groups_here())
    @rule(data=st.data(), mode=st.sampled_from([b"SILENT", b"FAIL", b"FATAL"]),
          how=st.sampled_from(["all", "first", "last", "unread"]),
          retrycount=st.none() | st.integers(0, 3), force=st.booleans())
    def xnack(self, data, mode, how, retrycount, force):
        """XNACK at one region: released entries move to the NACK zone with the documented counts."""
        region, key, group = data.draw(st.sampled_from(self._groups_here()), label="group")
        r = self.regions[region]
        s = r.keys[key]
        g = s.groups[group]
        pel = list(g.pel)
        if how == "unread" or not pel:  # an entry of the stream that is not pending (FORCE creates it)
            ids = [i for i in r.entry_ids(key) if i not in g.pel][:1] or [(START_MS, 0)]
        else:
            ids = pel if how == "all" else [pel[0] if how == "first" else pel[-1]]
        before = {i: g.pel[i].delivery_count for i in ids if i in g.pel}
        live = {i for i in ids if s.get(i) is not None}
        argv = [b"XNACK", key, group, mode, b"IDS", b"%d" % len(ids), *(b"%d-%d" % i for i in ids)]
        argv += [b"RETRYCOUNT", b"%d" % retrycount] if retrycount is not None else []
        argv += [b"FORCE"] if force else []
        ops_before = r.causal.vv.get(region, 0)
        released = r.call(*argv)
        assert r.causal.vv.get(region, 0) == ops_before, "XNACK issued an operation: it is region-local"
        expected = [i for i in ids if i in before or (force and i in live)]
        assert released == len(expected)
        zone = [i for i, nack in g.by_delivery_time() if nack.consumer is None]
        assert zone[len(zone) - len(expected):] == expected, "released entries are not last in the NACK zone"
        for i in expected:
            nack = g.pel[i]
            assert nack.consumer is None and nack.delivery_time == 0
            had = before.get(i, 0)
            want = {b"SILENT": max(had - 1, 0), b"FAIL": had, b"FATAL": cg.DELIVERIES_MAX}[mode]
            assert nack.delivery_count == (retrycount if retrycount is not None else want)

    # ------------------------------------------------------------ the cron's work
    @rule(region=regions_st, later=st.booleans())
    def cron(self, region, later):
        """The region's once-a-second work (node/runtime/server.py), maybe after the IDMP duration
        passed: IDMP expiry by time and size with the region's stable vector, and garbage
        collection of the delete contexts it knows every region has seen."""
        r = self.regions[region]
        if later:
            r.clock += 1500
        self.expired += r.expire_idmp()
        self.collected += r.collect_garbage()

    @rule(region=regions_st, count=st.integers(1, 40))
    def trim_backlog(self, region, count):
        """Region 1's backlog passed its size bound: its oldest operations go, whoever lacks
        them (a full resync brings them).  Regions 2 and 3 drop only what every region has
        here (``both_backlogs_drop`` drops more)."""
        r = self.regions[region]
        if region != 1:
            everywhere = [all(o.causal.vv.get(e.origin, 0) >= e.n for o in self.regions.values())
                          for e in r.causal.log]
            count = min(count, everywhere.index(False) if False in everywhere else len(everywhere))
        r.trim_backlog(count)

    @rule(data=st.data(), count=st.integers(1, 40))
    def both_backlogs_drop(self, data, count):
        """A partition outlasts two regions' backlogs: both drop their oldest operations,
        whoever lacks them.  When each then lacks some the other dropped, neither image may
        replace the other's state: the link joins them (crdt/join.py), and the invariants
        after full delivery say nothing was lost and every region holds the same state."""
        a, b = self._link(data)
        a.trim_backlog(count)
        b.trim_backlog(count)

    # ------------------------------------------------------------ the network
    def _link(self, data) -> tuple[Region, Region]:
        """A link between two live members (drawn: the members change during a run)."""
        live = sorted(self.regions)
        src, dst = data.draw(st.sampled_from([(a, b) for a in live for b in live if a != b]), label="link")
        return self.regions[src], self.regions[dst]

    @rule(data=st.data(), pick=st.integers(0, 1000))
    def deliver_one(self, data, pick):
        src, dst = self._link(data)
        self._meet(src, dst)
        self.images += deliver(src, dst, pick)

    @rule(data=st.data(), picks=st.lists(st.integers(0, 1000), min_size=2, max_size=8))
    def deliver_some(self, data, picks):
        """A busy network: several envelopes, each over a random link (out of order, so the
        receivers often hold some pending; a region removed by force may leave some there)."""
        for pick in picks:
            self.deliver_one(data, pick)

    @rule(data=st.data(), pick=st.integers(0, 1000))
    def redeliver(self, data, pick):
        """A duplicate: an envelope the receiver already applied, or already holds pending."""
        src, dst = self._link(data)
        dupes = [e for e in src.causal.log
                 if e.n <= dst.causal.vv.get(e.origin, 0) or e.dot in dst.causal.pending]
        if not dupes:
            return
        env = dupes[pick % len(dupes)]
        vv, log, pending, snap = (dict(dst.causal.vv), list(dst.causal.log),
                                  dict(dst.causal.pending), dst.snapshot())
        assert dst.causal.receive(env) == []
        assert dst.causal.vv == vv and dst.causal.log == log and dst.causal.pending == pending
        assert dst.snapshot() == snap

    @rule(data=st.data())
    def reconnect(self, data):
        """A link breaks and its ends handshake again: each forgets the other's own
        operations that wait for their dependencies (``ReplicationHub.handshook``: one kept
        could share its dot with one its origin minted again after losing it in a crash).
        Nothing applied changes, and nothing is lost: the other end sends again what this
        end has not applied (the invariants after full delivery)."""
        a, b = self._link(data)
        for x, y in ((a, b), (b, a)):
            vv, log, waiting = dict(x.causal.vv), list(x.causal.log), dict(x.causal.pending)
            forgotten = x.aa.hub.handshook(y.number, dict(y.causal.vv))
            assert x.causal.vv == vv and x.causal.log == log
            assert x.causal.pending == {d: e for d, e in waiting.items() if e.origin != y.number}
            assert forgotten == len(waiting) - len(x.causal.pending)

    @rule()
    def every_region_writes_after_a_sync(self):
        """Every region issues an operation after seeing everything: what came before becomes
        causally stable, so IDMP expiry and garbage collection have something to drop."""
        self._sync()
        synced = dict(next(iter(self.regions.values())).causal.vv)
        writers = [r for r in self.regions.values() if r.aa.writable]  # not a leaving region
        for r in writers:
            self._mint(r, b"b", r.xadd(b"b"))
        self._sync()
        if len(writers) == len(self.regions):
            self._check_stable(synced)

    @rule()
    def sync_all_and_check(self):
        self._sync()
        self._check_converged()

    # ------------------------------------------------------------ the failing-over reader
    @rule(count=st.integers(0, 2))
    def reader_reads(self, count):
        r = self.regions[self.reader_at]
        if not r.aa.writable:
            return  # XREADGROUP is a write: refused (LOADING) where a restored region recovers
        got = [tuple(map(int, i.split(b"-"))) for i in r.xreadgroup(R, RG, READER, count)]
        assert not count or len(got) <= count
        assert len(got) == len(set(got))
        again = self.delivered_at[self.reader_at] & set(got)
        assert not again, f"`>` at region {self.reader_at} handed out {sorted(again)} a second time"
        settled = self.settled & set(got)
        assert not settled, f"acknowledged before a synced redirect, handed out again: {sorted(settled)}"
        self.delivered_at[self.reader_at].update(got)
        self.delivered.update(got)
        # `>` hands out the smallest entries above the group's per-origin cursors, so
        # every entry live here up to the last one handed out (all of them, if the
        # read was not cut short by COUNT) has now been delivered, here or elsewhere
        upto = max(got) if count and len(got) == count else MAX_ID
        skipped = {eid for eid, _ in r.keys[R].range(MIN_ID, upto)} - self.delivered
        assert not skipped, f"XREADGROUP > at region {self.reader_at} skipped {sorted(skipped)}"

    @precondition(lambda self: self.regions[self.reader_at].aa.writable
                  and self._reader_group(self.regions[self.reader_at]).pel)
    @rule(how=st.sampled_from(["all", "first", "last"]))
    def reader_acks(self, how):
        r = self.regions[self.reader_at]
        pel = list(self._reader_group(r).pel)
        r.xack(R, RG, *(pel if how == "all" else [pel[0] if how == "first" else pel[-1]]))

    @rule(to=regions_st, synced=st.booleans())
    def reader_redirected(self, to, synced):
        """Fail the reader over to another region, after a full sync or without one."""
        here = self.regions[self.reader_at]
        if synced:
            self._sync()
            if not self._reader_group(here).pel:  # all it got here was acknowledged
                self.settled |= self.delivered_at[self.reader_at]
        self.reader_at = to

    # ------------------------------------------------------------ restores
    @rule(region=regions_st)
    def back_up(self, region):
        """The operator copies a region's folder: its state as a snapshot holds it."""
        r = self.regions[region]
        data = snapshot.encode(r.keys, r.causal, 0, r.clock, True, region)
        self.copies.setdefault(region, []).append(data)
        del self.copies[region][:-COPIES_KEPT]

    # (one restore at a time: overlapping ones are test_a_recovering_region_does_not_wait_for_what_a_
    # restored_peer_no_longer_holds)
    @precondition(lambda self: not self.restoring and any(n in self.copies for n in self._with_status(ACTIVE)))
    @rule(target=regions_st, region=consumes(regions_st), pick=st.integers(0, COPIES_KEPT - 1))
    def restore(self, region, pick):
        """An active region is stopped and started again from an older copy of its folder (its
        cluster file is the newest: membership is not in the folder).  It connects to every
        live member (both ends handshake: each forgets the other's waiting operations) and the
        start gate refuses its writes until it holds its own operations they held; it leaves
        the writers' bundle until then (restored_region_recovers).  Its own operations no
        other region held are lost with the restore: their numbers are minted again."""
        copies = self.copies.get(region)
        if not copies or self._status(region) != ACTIVE:
            return region  # nothing to restore it from: it stays a writer
        old = self.regions[region]
        r = AddedRegion(region, copy.deepcopy(old.aa.cluster),
                        {"stream-node-max-entries": NODE_SIZES[region], **IDMP_SETTINGS})
        r.clock = old.clock
        replay.install(r.server, snapshot.decode(copies[pick % len(copies)]), "a copy of its folder")
        r.aa.recover_own_operations(lambda: None)  # as attach_log does at every start
        others = [o for n, o in self.regions.items() if n != region]
        held = max(o.causal.vv.get(region, 0) for o in others)  # of its own, what a member holds
        gone = range(max(held, r.causal.vv.get(region, 0)) + 1, old.causal.vv.get(region, 0) + 1)
        self.regions[region] = r
        self.restores += 1
        for o in others:  # its links are new connections: both ends handshake
            o.aa.hub.handshook(region, dict(r.causal.vv))
            r.aa.hub.handshook(o.number, dict(o.causal.vv))
        self.links_restart(region)
        self._forget_what_went()  # what only the old folder held
        keep = [i for i, (_key, _id, number) in enumerate(self.minted) if number != region
                or self.minted_n[i] not in gone]
        self.minted = [self.minted[i] for i in keep]
        self.minted_n = [self.minted_n[i] for i in keep]
        self.minted_keyed = {(key, id_) for key, id_, _n in self.minted}
        self.minted_by = {}
        for _key, id_, number in self.minted:
            self.minted_by.setdefault(id_, set()).add(number)
        self.seen_vv[region] = dict(r.causal.vv)
        self.modes[region] = r.aa.mode
        # its consumer groups' local state went back in time: what the reader was handed there
        # may be handed out again there (at least once), so its bookkeeping starts over
        self.delivered_at[region] = set()
        self.settled = set()
        self._leaves(region)
        if r.causal.vv.get(region, 0) < held:  # it lacks its own operations a member holds: LOADING
            before = dict(r.causal.vv)
            reply = r.call(b"XADD", b"a", b"*", b"f", b"v", check=False)
            assert isinstance(reply, ReplyError) and str(reply).startswith("LOADING"), reply
            assert r.causal.vv == before
        self.restoring[region] = held
        return multiple()

    @precondition(lambda self: self.restoring)
    @rule(target=regions_st, data=st.data())
    def restored_region_recovers(self, data):
        """A restored region that took back every operation of its own its members held when
        it started (the network rules bring them) takes writes again: it holds them under the
        same history (the digests agree with a member's), and it rejoins the writers."""
        number = data.draw(st.sampled_from(sorted(self.restoring)), label="restored")
        r = self.regions[number]
        if not r.aa.writable:
            return multiple()
        held = self.restoring.pop(number)
        assert r.causal.vv.get(number, 0) >= held, f"region {number} took writes before it held {held}"
        peer = next((o for n, o in self.regions.items() if n != number and o.causal.vv.get(number, 0) >= held), None)
        if held and peer is not None:  # (a digest this far back may be out of a region's window: None)
            mine, theirs = r.causal.digest_at(number, held), peer.causal.digest_at(number, held)
            assert mine is None or theirs is None or mine == theirs, f"region {number} took back another history"
        return number if self._status(number) == ACTIVE else multiple()

    # ------------------------------------------------------------ membership
    def _meet(self, a: Region, b: Region) -> None:
        """A link's handshake: each end records what the other held when they first met
        (``hub.handshake_vv``; a joining region has caught up once it holds all of that)."""
        for x, y in ((a, b), (b, a)):
            if y.number not in x.aa.hub.handshake_vv:
                x.aa.hub.handshook(y.number, dict(y.causal.vv))
        if a.aa.membership.epoch != b.aa.membership.epoch:  # (mid-agreement) the newer list is adopted
            assert not a.aa.hub.gate.check_peer(b.number, *b.aa.hub.gate.hello())
            assert not b.aa.hub.gate.check_peer(a.number, *a.aa.hub.gate.hello())
            assert a.aa.membership.epoch == b.aa.membership.epoch

    def _status(self, number: int) -> str | None:
        return next(iter(self.regions.values())).aa.membership.status(number)

    def _with_status(self, *statuses: str) -> list[int]:
        return [n for n in sorted(self.regions) if self._status(n) in statuses]

    def _agree(self, change: Change, meanwhile: list[int], coordinator: int = 0) -> int:
        """Every voter agrees ``change`` (node/activeactive/coordinator.py: ``aa.promise`` at each,
        then ``aa.commit``), coordinated by braid-admin (number 0) or by a joining region
        activating itself; before each commit the network delivers one envelope per pick of
        ``meanwhile``.  Returns the frozen point of a removal."""
        self.ballots += 1
        current = copy.deepcopy(self.regions[min(self.regions)].aa.membership)
        picks = list(meanwhile)

        def network() -> None:
            if picks:
                self._deliver_meanwhile(change, picks.pop(0))

        voters = {n: LateVoter(r.aa, network) for n, r in self.regions.items()}
        _p, frozen, unreached = agree(change, current, voters, (coordinator, self.ballots), {})
        assert not unreached
        return frozen

    def _deliver_meanwhile(self, change: Change, pick: int) -> None:
        """One envelope over a live link while a change is being agreed.  A region being
        removed by force is cut off: only its envelopes already on their way arrive (never an
        image); a leaver being removed has handed everything over."""
        gone = change.number if change.kind in (REMOVE, FORCE_REMOVE) else None
        live = sorted(self.regions)
        links = [(a, b) for a in live for b in live if a != b and b != gone
                 and not (a == gone and change.kind == REMOVE)]
        src, dst = (self.regions[n] for n in links[pick % len(links)])
        pick //= len(links)
        if src.number == gone:
            lacking = src.causal.missing(dst.causal.vv)
            if lacking:
                dst.aa.hub.deliver(lacking[pick % len(lacking)])  # dropped past what dst promised
            return
        self._meet(src, dst)
        self.images += deliver(src, dst, pick)

    def _check_stable(self, synced: dict[int, int]) -> None:
        """Every live region wrote after seeing ``synced``, and everything was delivered: what
        ``synced`` holds is causally stable at every region (a removed region, which saw none
        of those writes, holds stability back no more), so every delete context goes."""
        for r in self.regions.values():
            stable = r.aa.stable()
            assert all(stable.get(o, 0) >= n for o, n in synced.items() if n), \
                f"region {r.number}: {stable} is not stable up to {synced}"
            self.collected += r.collect_garbage()
            assert not r.keys.key_contexts and not r.keys.group_contexts, f"region {r.number} kept delete contexts"

    def _leaves(self, number: int) -> None:
        """A region stops serving clients: the reader there fails over to an active region
        that takes writes (not one still taking its operations back after a restore)."""
        if self.reader_at == number:
            active = [n for n in self._with_status(ACTIVE) if n != number]
            self.reader_at = next((n for n in active if self.regions[n].aa.writable), active[0])

    def _forget_what_went(self) -> None:
        """A region's state left the database (a restore replaced it, a removal took it): what
        only it held need not be held any more - its own operations past what the members
        hold, another origin's that no member holds (a region removed by force)."""
        self.must_hold = {o: max(x.causal.vv.get(o, 0) for x in self.regions.values()) for o in self.must_hold}

    def _removed(self, number: int) -> None:
        self.removed[number] = self.regions.pop(number)
        self._forget_what_went()
        self.seen_vv.pop(number)
        self._leaves(number)

    @precondition(lambda self: self.joins < len(JOINERS))
    @rule(meanwhile=MEANWHILE)
    def join(self, meanwhile):
        """braid-admin region add: every live member agrees the JOIN, then the new region starts,
        empty, with the newest list (it is joining there); the network rules now deliver to and
        from it, with a full-resync image where the sender trimmed what it lacks."""
        number = JOINERS[self.joins]
        self.joins += 1
        self._agree(Change(JOIN, number, f"region-{number}", ("local", 0, 0)), meanwhile)
        cluster = copy.deepcopy(self.regions[min(self.regions)].aa.cluster)
        assert cluster.by_number(number).status == JOINING
        r = AddedRegion(number, cluster, {"stream-node-max-entries": NODE_SIZES[number], **IDMP_SETTINGS})
        r.clock = max(o.clock for o in self.regions.values())
        assert r.aa.membership.epoch == self.regions[min(self.regions)].aa.membership.epoch
        self.regions[number] = r
        self.modes[number] = r.aa.mode
        self.seen_vv[number] = {}
        self.delivered_at[number] = set()

    @precondition(lambda self: self._with_status(JOINING))
    @rule(target=regions_st, data=st.data(), meanwhile=MEANWHILE)
    def activate(self, data, meanwhile):
        """A joining region that caught up (it holds everything each active peer held when
        they first met) has itself activated: from then on it is an active region like any."""
        number = data.draw(st.sampled_from(self._with_status(JOINING)), label="joining")
        if not self.regions[number].aa.caught_up():
            return multiple()
        self._agree(Change(ACTIVATE, number), meanwhile, coordinator=number)
        return number

    @precondition(lambda self: len(self._with_status(ACTIVE)) >= 3)
    @rule(region=consumes(regions_st), meanwhile=MEANWHILE)
    def leave(self, region, meanwhile):
        """A graceful removal starts (never below two active regions): the region takes no
        more writes (READONLY) and hands its operations over."""
        self._agree(Change(LEAVE, region), meanwhile)
        self._leaves(region)

    @precondition(lambda self: self._with_status(LEAVING))
    @rule(data=st.data(), meanwhile=MEANWHILE)
    def remove_leaver(self, data, meanwhile):
        """Once every other live region holds all the leaver's operations (a sync brings them),
        its removal: frozen at its own count."""
        number = data.draw(st.sampled_from(self._with_status(LEAVING)), label="leaving")
        self._sync()
        own = self.regions[number].causal.vv.get(number, 0)
        assert all(r.causal.vv.get(number, 0) == own for r in self.regions.values())
        assert self._agree(Change(REMOVE, number), meanwhile) == own
        self._removed(number)

    def _force_remove(self, number: int, in_flight: list[int], meanwhile: list[int]) -> None:
        """The region is cut off while some of its envelopes are on their way: they reach
        other regions (in any order: some wait there, pending), then its removal is agreed."""
        others = [r for n, r in sorted(self.regions.items()) if n != number]
        for pick in in_flight:
            dst = others[pick % len(others)]
            self._meet(self.regions[number], dst)
            self.images += deliver(self.regions[number], dst, pick // len(others))
        held = max(r.causal.vv.get(number, 0) for r in others)
        assert self._agree(Change(FORCE_REMOVE, number), meanwhile) == held  # the most the others hold
        self._removed(number)

    @precondition(lambda self: len(self._with_status(ACTIVE)) >= 3)
    @rule(region=consumes(regions_st), in_flight=IN_FLIGHT, meanwhile=MEANWHILE)
    def force_remove(self, region, in_flight, meanwhile):
        """braid-admin region remove --force of an active region cut off from the others (it is
        not asked): its operations are frozen at the most any other region holds."""
        self._force_remove(region, in_flight, meanwhile)

    @precondition(lambda self: self._with_status(JOINING, LEAVING))
    @rule(data=st.data(), in_flight=IN_FLIGHT, meanwhile=MEANWHILE)
    def force_remove_joining_or_leaving(self, data, in_flight, meanwhile):
        """A joining or leaving region removed by force (the active ones are left as they are)."""
        self._force_remove(data.draw(st.sampled_from(self._with_status(JOINING, LEAVING)), label="region"),
                           in_flight, meanwhile)

    def _not_active(self) -> list[int]:
        return self._with_status(JOINING, LEAVING) + sorted(self.removed)

    @precondition(lambda self: self._not_active())
    @rule(data=st.data(), key=st.sampled_from(KEYS))
    def write_where_not_active(self, data, key):
        """Writes at a joining region are refused (LOADING) until it caught up; at a leaving or
        removed one (READONLY).  A region removed by force while cut off does not know it and
        takes writes until it meets a member: they are lost (never applied anywhere else)."""
        number = data.draw(st.sampled_from(self._not_active()), label="region")
        r = self.regions.get(number) or self.removed[number]
        status, writable, before = r.aa.membership.status(number), r.aa.writable, dict(r.causal.vv)
        reply = r.call(b"XADD", key, b"*", b"f", b"v", check=False)
        if writable:
            assert status == ACTIVE and number in self.removed or status == JOINING and r.aa.caught_up()
            self._mint(r, key, tuple(map(int, reply.split(b"-"))))
            return
        assert isinstance(reply, ReplyError), f"region {number} ({status}) took a write"
        assert str(reply).startswith("LOADING" if status == JOINING else "READONLY"), str(reply)
        assert r.causal.vv == before

    @precondition(lambda self: self.removed)
    @rule(data=st.data(), pick=st.integers(0, 1000))
    def removed_region_meets_a_member(self, data, pick):
        """A removed region reaches a member: the member refuses it at the handshake, the
        member's list tells it that it was removed (it then refuses writes), and an operation
        of it past its frozen point that reaches a member anyway is dropped, not applied."""
        gone = self.removed[data.draw(st.sampled_from(sorted(self.removed)), label="removed")]
        member = self.regions[data.draw(st.sampled_from(sorted(self.regions)), label="member")]
        assert "was removed" in member.aa.hub.gate.check_peer(gone.number, *gone.aa.hub.gate.hello())
        assert gone.aa.hub.gate.check_peer(member.number, *member.aa.hub.gate.hello())
        assert gone.aa.membership.status(gone.number) == REMOVED and not gone.aa.writable
        frozen = member.aa.membership.frozen[gone.number]
        beyond = [e for e in gone.causal.log if e.origin == gone.number and e.n > frozen]
        if beyond:
            env, dropped, vv = beyond[pick % len(beyond)], member.aa.membership_dropped, dict(member.causal.vv)
            member.aa.hub.deliver(env)
            assert member.causal.vv == vv and env.dot not in member.causal.pending
            assert member.aa.membership_dropped == dropped + 1

    @invariant()
    def member_lists_agree(self):
        """Every live region holds the same member list (epoch, statuses, frozen points), in its
        cluster configuration too; the live ones are exactly the machine's live regions."""
        lists = [(r.aa.membership.epoch, r.aa.membership.members, r.aa.membership.frozen)
                 for r in self.regions.values()]
        assert all(m == lists[0] for m in lists), f"member lists differ: {lists}"
        files = [(r.aa.cluster.epoch, sorted((s.number, s.status, s.frozen) for s in r.aa.cluster.regions))
                 for r in self.regions.values()]
        assert all(f == files[0] for f in files), f"cluster files differ: {files}"
        m = next(iter(self.regions.values())).aa.membership
        assert m.live() == sorted(self.regions)
        assert all(m.status(n) == REMOVED for n in self.removed)
        assert m.epoch == 1 + self.ballots  # one epoch per agreed change

    @invariant()
    def removed_regions_stay_frozen(self):
        """No live region applies (or holds pending) an operation of a removed region past its frozen point."""
        frozen = next(iter(self.regions.values())).aa.membership.frozen
        for r in self.regions.values():
            for origin, upto in frozen.items():
                assert r.causal.vv.get(origin, 0) <= upto, f"region {r.number} applied {origin}'s past {upto}"
                late = [dot for dot in r.causal.pending if dot[0] == origin and dot[1] > upto]
                assert not late, f"region {r.number} holds {late} of removed region {origin} (frozen at {upto})"

    # ------------------------------------------------------------ invariants
    @invariant()
    def pels_are_consistent(self):
        """Each group PEL is its consumers' PELs plus the NACK zone, which comes first in time order."""
        for r in self.regions.values():
            for key, s in r.keys.items():
                for name, g in s.groups.items():
                    owned = {}
                    for c in g.consumers.values():
                        for i, nack in c.pel.items():
                            assert nack.consumer is c and g.pel.get(i) is nack, f"{key}/{name} {i}: two PELs differ"
                            owned[i] = nack
                    unowned = [i for i, nack in g.pel.items() if nack.consumer is None]
                    assert len(owned) + len(unowned) == len(g.pel), f"{key}/{name}: a pending entry has no PEL"
                    assert all(g.pel[i].delivery_time == 0 for i in unowned)
                    assert all(0 <= n.delivery_count <= cg.DELIVERIES_MAX for n in g.pel.values())
                    order = [nack.consumer is None for _i, nack in g.by_delivery_time()]
                    assert order == sorted(order, reverse=True), f"{key}/{name}: the NACK zone is not first"

    @invariant()
    def strict_ids_are_unique(self):
        assert len(self.minted_keyed) == len(self.minted), "strict mode minted an ID twice in one key"
        clash = sorted(i for i, numbers in self.minted_by.items() if len(numbers) > 1)
        assert not clash, f"IDs minted at two regions: {clash}"
        assert all(seq % STRIDE == number for _key, (_ms, seq), number in self.minted)

    @invariant()
    def nothing_is_lost_yet(self):
        """What some region holds now every region must hold after full delivery (checked by
        _check_converged); only a restore lowers it (what only the restored folder lacked)."""
        for r in self.regions.values():
            for o, n in r.causal.vv.items():
                if n > self.must_hold.get(o, 0):
                    self.must_hold[o] = n

    @invariant()
    def each_envelope_applied_once(self):
        for n, r in self.regions.items():
            causal = r.causal
            vv = causal.vv
            old = self.seen_vv[n]
            assert all(vv.get(o, 0) >= c for o, c in old.items()), f"region {n}: {old} -> {vv}"
            self.seen_vv[n] = dict(vv)
            dots = [e.dot for e in causal.log]
            assert len(dots) == len(set(dots)), f"region {n} applied an envelope twice"
            held = {(o, i) for o, c in vv.items() for i in range(causal.floor.get(o, 0) + 1, c + 1)}
            assert held <= set(dots), f"region {n}: log lacks {sorted(held - set(dots))} (vv {vv})"
            # below the floor only what the region held when a joined state raised it
            assert all(i <= vv.get(o, 0) for o, i in dots), f"region {n}: log above vv {vv}"
            assert all(dot[1] > vv.get(dot[0], 0) for dot in causal.pending)

    def teardown(self):
        if sys.exc_info()[1] is not None:
            return  # a step failed: let its error through, unmasked
        self._sync()
        for number, held in self.restoring.items():  # full delivery gave them back their own operations
            r = self.regions[number]
            assert r.aa.writable and r.causal.vv.get(number, 0) >= held, f"restored region {number} did not recover"
        self._check_converged()
        self.reader_reads(0)  # after full delivery nothing live anywhere was skipped


ConvergenceMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None,
)
TestConvergenceMachine = ConvergenceMachine.TestCase


# Found by this machine: AckWatermark named a group but not which creation of it.
# When two regions create the same group concurrently the higher dot wins
# everywhere, but a watermark of the losing creation moved the winner only where
# the winner was created before the watermark arrived; XREADGROUP > at region 3
# then never handed the winning group entry 100-1, which regions 1 and 2 did.
def test_ack_watermark_of_a_losing_group_creation_converges():
    r1, r2, r3 = Region(1), Region(2), Region(3)
    r1.clock = r3.clock = START_MS
    r1.create_group(b"a", b"g1")         # creation (1, 1)
    r1.xadd(b"a")                        # 100-1
    assert r1.xreadgroup(b"a", b"g1", b"c1") == [b"100-1"]
    r1.xack(b"a", b"g1", (100, 1))       # replicates watermark 100-1 for creation (1, 1)
    r3.create_group(b"a", b"g1")         # concurrent creation (3, 1): wins everywhere
    sync(r1, r2, r3)
    assert r1.snapshot() == r2.snapshot() == r3.snapshot()
    marks = [r.keys[b"a"].groups[b"g1"].watermarks for r in (r1, r2, r3)]
    assert marks[0] == marks[1] == marks[2]  # was [{}, {}, {1: (100, 1)}]
    reads = [r.xreadgroup(b"a", b"g1", b"c2") for r in (r1, r2, r3)]
    assert reads[0] == reads[1] == reads[2]


# Found by this machine: an envelope of a region removed by force that waited at a voter
# for its dependencies stayed there; once they arrived from another member it was applied,
# past the frozen point, at that voter only (the others refuse it), and the regions diverged.
def test_a_waiting_operation_of_a_region_removed_by_force_is_dropped():
    r1, r2, r3 = Region(1), Region(2), Region(3)
    r2.xadd(b"a")                            # (2, 1)
    deliver(r2, r3)
    r3.xadd(b"a")                            # (3, 1), which depends on (2, 1)
    r1.aa.hub.deliver(r3.causal.log[-1])     # reaches region 1 before (2, 1) does: it waits
    assert (3, 1) in r1.causal.pending
    # region 3 is cut off and removed by force; no voter holds (3, 1): frozen at 0
    _p, frozen, _ = agree(Change(FORCE_REMOVE, 3), copy.deepcopy(r1.aa.membership), {1: r1.aa, 2: r2.aa},
                          (0, 1), {})
    assert frozen == 0 and not r1.causal.pending
    sync(r1, r2)                             # (2, 1) reaches region 1
    assert r1.causal.vv == r2.causal.vv == {2: 1}  # was {2: 1, 3: 1} at region 1
    assert r1.snapshot() == r2.snapshot()


# Found by this machine when restores could overlap: a region started from an older copy waited
# for its own operations up to what each member held when they first met.  When that member was
# itself restored meanwhile from a copy that lacks them, nobody held them any more, and the
# region refused writes (LOADING) until it was restarted.  The gate now reads each member's
# latest handshake (``ReplicationHub.last_handshake_vv``).
def test_a_recovering_region_does_not_wait_for_what_a_restored_peer_no_longer_holds():
    settings_ = {"stream-node-max-entries": "100"}
    r1, r2, r3 = (Region(n, settings_) for n in REGIONS)
    old1, old2 = (snapshot.encode(r.keys, r.causal, 0, 0, True, r.number) for r in (r1, r2))  # both empty
    r2.xadd(b"a")
    deliver(r2, r1)  # only region 1 holds 2.1

    def restarted(r: Region, data: bytes) -> AddedRegion:
        new = AddedRegion(r.number, copy.deepcopy(r.aa.cluster), settings_)
        replay.install(new.server, snapshot.decode(data), "a copy of its folder")
        new.aa.recover_own_operations(lambda: None)  # as attach_log does at every start
        for peer in (r1, r2, r3):  # it connects to every member: both ends handshake
            if peer.number != r.number:
                peer.aa.hub.handshook(r.number, dict(new.causal.vv))
                new.aa.hub.handshook(peer.number, dict(peer.causal.vv))
        return new

    r2 = restarted(r2, old2)  # region 1 holds 2.1: region 2 waits for it
    assert not r2.aa.writable
    r1 = restarted(r1, old1)  # before it sent 2.1 back, region 1 starts from a copy without it
    assert r1.aa.writable
    sync(r1, r2, r3)
    assert r1.causal.vv == r2.causal.vv == r3.causal.vv == {}  # 2.1 is gone everywhere ...
    assert r2.aa.writable  # ... so region 2 may mint it again (region 1's latest handshake says so)
