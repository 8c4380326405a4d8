"""Multi-region rules of the pure core: seed 003's tables and convergence.

Regions here are pure objects (a keyspace, a causal log, strict ID generation);
"— Sync —" is delivering every envelope everywhere.  The Hypothesis test runs
random writes, deletes, trims and group changes at three regions with random
delivery order and duplication, then syncs and requires identical entries,
groups and key existence everywhere, and no duplicate ID in strict mode.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import groups as cg
from crdt import idgen, ops
from crdt.causal import CausalLog
from crdt.ids import MAX_ID, MIN_ID

STRIDE = 16


class Region:
    def __init__(self, number: int) -> None:
        self.number = number
        self.keys = ops.Keyspace(active_active=True)
        self.causal = CausalLog(number)
        self.clock = 0

    # -- writes, each resolved here into an operation, applied, then stamped
    def _issue(self, op) -> object:
        result = ops.apply(self.keys, op)
        self.causal.stamp(op)
        return result

    def _next_context(self) -> dict:
        ctx = dict(self.causal.vv)
        ctx[self.number] = ctx.get(self.number, 0) + 1  # includes the operation itself
        return ctx

    def xadd_idmp(self, key: bytes, pid: bytes, iid: bytes) -> tuple:
        s = self.keys.get(key)
        held = s.idmp.lookup(pid, iid) if s is not None else None
        if held is not None:
            return held  # a retry this region already knows: deduplicated locally
        new = idgen.choose(idgen.STRICT, self.keys.top_id(key), self.clock, self.number, STRIDE, None, False)
        self._issue(ops.AddEntry(key, self.number, new, [b"f", b"v"], pid, iid))
        return new

    def xadd(self, key: bytes, ms: int | None = None, field: bytes = b"f") -> tuple:
        new = idgen.choose(idgen.STRICT, self.keys.top_id(key), self.clock, self.number, STRIDE,
                           None if ms is None else (ms, 0), False)
        self._issue(ops.AddEntry(key, self.number, new, [field, b"v"]))
        return new

    def xdel(self, key: bytes, pick: int) -> None:
        s = self.keys.get(key)
        if s is not None and s.length:
            entries = s.range(MIN_ID, MAX_ID)
            self._issue(ops.DeleteEntries(key, [entries[pick % len(entries)][0]]))

    def xtrim(self, key: bytes, maxlen: int) -> None:
        s = self.keys.get(key)
        if s is None:
            return
        cutoffs: dict = {}
        merged = sorted((eid, o) for o, log in s.logs.items() for eid, _ in log.range(MIN_ID, MAX_ID))
        for eid, origin in merged[: max(len(merged) - maxlen, 0)]:
            cutoffs[origin] = max(cutoffs.get(origin, MIN_ID), eid)
        if cutoffs:
            self._issue(ops.Trim(key, None, cutoffs=cutoffs))

    def delete(self, key: bytes) -> None:
        s = self.keys.get(key)
        observed = {o: log.last_any() for o, log in s.logs.items() if log.last_any()} if s is not None else {}
        self._issue(ops.DeleteKey(key, observed=observed, context=self._next_context()))

    def create_group(self, key: bytes, group: bytes) -> bool:
        s = self.keys.get(key)
        if s is not None and group in s.groups:
            return False
        dot = (self.number, self.causal.vv.get(self.number, 0) + 1)
        return self._issue(ops.CreateGroup(key, group, MIN_ID, -1, mkstream=True,
                                           deps=dict(self.causal.vv), dot=dot))

    def destroy_group(self, key: bytes, group: bytes) -> None:
        s = self.keys.get(key)
        if s is not None and group in s.groups:
            self._issue(ops.DestroyGroup(key, group, context=self._next_context()))

    def xreadgroup(self, key: bytes, group: bytes, consumer: bytes, count: int = 0) -> list:
        s = self.keys[key]
        g = s.groups[group]
        c, _ = g.consumer(consumer, self.clock)
        return [b"%d-%d" % eid for eid, _ in cg.read_new_per_origin(s, g, c, count, False, self.clock)]

    def xack(self, key: bytes, group: bytes, *ids: tuple) -> None:
        s = self.keys[key]
        g = s.groups[group]
        for id_ in ids:
            g.ack(id_)
        for origin in list(s.logs):
            mark = cg.ack_watermark(s, g, origin)
            if mark is not None:  # replicated only when the consecutive watermark moves
                self._issue(ops.AckWatermark(key, group, origin, mark, g.created_dot))

    # -- reads
    def xrange(self, key: bytes) -> list:
        s = self.keys.get(key)
        return [b"%d-%d" % eid for eid, _ in s.range(MIN_ID, MAX_ID)] if s is not None else []

    def groups(self, key: bytes) -> list:
        s = self.keys.get(key)
        return sorted(s.groups) if s is not None else []

    def exists(self, key: bytes) -> int:
        return int(key in self.keys)

    def snapshot(self) -> dict:
        return {
            k: ({o: list(log.range(MIN_ID, MAX_ID)) for o, log in sorted(s.logs.items()) if log.length},
                {n: g.created_dot for n, g in sorted(s.groups.items())})
            for k, s in sorted(self.keys.items())
        }


def deliver(src: Region, dst: Region, pick: int | None = None) -> None:
    lacking = src.causal.missing(dst.causal.vv)
    if not lacking:
        return
    chosen = lacking if pick is None else [lacking[pick % len(lacking)]]
    for env in chosen:
        for ready in dst.causal.receive(env):
            ops.apply(dst.keys, ready.op)


def sync(*regions: Region) -> None:
    for _ in range(len(regions)):
        for a in regions:
            for b in regions:
                if a is not b:
                    deliver(a, b)


# ---------------------------------------------------------------- seed 003's tables

def test_concurrent_writes_merge_without_duplicates():
    r1, r2 = Region(1), Region(2)
    r1.clock, r2.clock = 1589929244828, 1589929246795
    r1.xadd(b"messages")
    r2.xadd(b"messages")
    assert r1.xrange(b"messages") == [b"1589929244828-1"]
    assert r2.xrange(b"messages") == [b"1589929246795-2"]
    sync(r1, r2)
    assert r1.xrange(b"messages") == r2.xrange(b"messages") == [b"1589929244828-1", b"1589929246795-2"]


def test_delete_is_observed_remove():
    r1, r2 = Region(1), Region(2)
    r1.clock, r2.clock = 1589929244828, 1589929246795
    r1.xadd(b"messages")
    sync(r1, r2)
    assert r1.xrange(b"messages") == r2.xrange(b"messages") == [b"1589929244828-1"]
    r1.delete(b"messages")
    r2.xadd(b"messages")
    sync(r1, r2)
    assert r1.xrange(b"messages") == r2.xrange(b"messages") == [b"1589929246795-2"]


def test_strict_ids_show_the_region_and_xread_caveat_ids():
    r1, r2 = Region(1), Region(2)
    assert r1.xadd(b"x", ms=110) == (110, 1)
    assert r2.xadd(b"x", ms=115) == (115, 2)
    assert r1.xadd(b"x", ms=120) == (120, 1)
    assert r1.xadd(b"x", ms=130) == (130, 1)
    sync(r1, r2)
    assert r1.xrange(b"x") == r2.xrange(b"x") == [b"110-1", b"115-2", b"120-1", b"130-1"]


def test_concurrent_group_creations_both_survive():
    r1, r2 = Region(1), Region(2)
    r1.create_group(b"x", b"group1")
    r2.create_group(b"x", b"group2")
    assert r1.groups(b"x") == [b"group1"] and r2.groups(b"x") == [b"group2"]
    sync(r1, r2)
    assert r1.groups(b"x") == r2.groups(b"x") == [b"group1", b"group2"]


def test_del_wins_over_concurrent_group_create():
    r1, r2 = Region(1), Region(2)
    r1.create_group(b"x", b"group1")
    sync(r1, r2)
    assert r1.groups(b"x") == r2.groups(b"x") == [b"group1"]
    r1.delete(b"x")
    r2.create_group(b"x", b"group2")
    sync(r1, r2)
    assert r1.exists(b"x") == r2.exists(b"x") == 0


def test_destroy_wins_over_concurrent_create_of_the_same_group():
    r1, r2, r3 = Region(1), Region(2), Region(3)
    r1.create_group(b"x", b"group1")
    sync(r1, r2)
    assert r1.groups(b"x") == r2.groups(b"x") == [b"group1"] and r3.groups(b"x") == []
    r2.destroy_group(b"x", b"group1")
    r3.create_group(b"x", b"group1")
    sync(r1, r2, r3)
    assert r1.exists(b"x") == r2.exists(b"x") == r3.exists(b"x") == 0


def test_idmp_retry_at_another_region_after_sync_is_deduplicated():
    r1, r2 = Region(1), Region(2)
    first = r1.xadd_idmp(b"s", b"producer", b"order-1")
    sync(r1, r2)
    assert r2.xadd_idmp(b"s", b"producer", b"order-1") == first  # failover retry: same ID
    assert r1.xrange(b"s") == r2.xrange(b"s") == [b"%d-%d" % first]


def test_idmp_concurrent_at_two_regions_keeps_the_smaller_id_everywhere():
    r1, r2 = Region(1), Region(2)
    r1.clock = r2.clock = 50
    a = r1.xadd_idmp(b"s", b"p", b"i")
    b = r2.xadd_idmp(b"s", b"p", b"i")
    assert a != b
    sync(r1, r2)
    winner = b"%d-%d" % min(a, b)
    assert r1.xrange(b"s") == r2.xrange(b"s") == [winner]
    assert r1.keys[b"s"].idmp.lookup(b"p", b"i") == r2.keys[b"s"].idmp.lookup(b"p", b"i") == min(a, b)


def test_a_destroy_counts_even_where_the_key_is_already_gone():
    """Found by the convergence property: region 3 had no key when region 1's
    XGROUP DESTROY arrived; it must still remember the destroy, or a create that
    did not see it would survive there only."""
    r1, r2, r3 = Region(1), Region(2), Region(3)
    r3.delete(b"k")
    r1.create_group(b"k", b"g")
    r1.destroy_group(b"k", b"g")
    deliver(r3, r2)
    r2.create_group(b"k", b"g")  # saw region 3's DEL, not region 1's DESTROY
    sync(r1, r2, r3)
    assert r1.snapshot() == r2.snapshot() == r3.snapshot() == {}


def test_a_create_after_seeing_the_delete_survives():
    r1, r2 = Region(1), Region(2)
    r1.create_group(b"x", b"g")
    r1.delete(b"x")
    sync(r1, r2)
    r2.create_group(b"x", b"g")
    sync(r1, r2)
    assert r1.groups(b"x") == r2.groups(b"x") == [b"g"]


def test_xack_replicates_only_a_consecutive_watermark():
    r1, r2 = Region(1), Region(2)
    for ms in (110, 120, 130):
        r1.xadd(b"x", ms=ms)
    r1.create_group(b"x", b"group1")
    assert r1.xreadgroup(b"x", b"group1", b"Alice") == [b"110-1", b"120-1", b"130-1"]
    sync(r1, r2)
    ops_before = len(r1.causal.log)
    r1.xack(b"x", b"group1", (110, 1))
    assert len(r1.causal.log) == ops_before + 1  # 110-1 and everything before it: replicated
    r1.xack(b"x", b"group1", (130, 1))
    assert len(r1.causal.log) == ops_before + 1  # 120-1 still pending: nothing replicated
    r1.xack(b"x", b"group1", (120, 1))
    assert len(r1.causal.log) == ops_before + 2  # now up to 130-1
    sync(r1, r2)
    # redirecting the readers to region 2 does not re-read acknowledged entries
    assert r2.xreadgroup(b"x", b"group1", b"Bob") == []
    r1.xadd(b"x", ms=140)
    sync(r1, r2)
    assert r2.xreadgroup(b"x", b"group1", b"Bob") == [b"140-1"]


def test_xreadgroup_delivers_entries_that_arrive_late():
    r1, r2 = Region(1), Region(2)
    r1.create_group(b"x", b"g")
    sync(r1, r2)
    r2.xadd(b"x", ms=115)            # written at region 2, not yet at region 1
    for ms in (110, 120, 130):
        r1.xadd(b"x", ms=ms)
    assert r1.xreadgroup(b"x", b"g", b"c") == [b"110-1", b"120-1", b"130-1"]
    sync(r1, r2)                     # 115-2 arrives after 130-1 was delivered
    assert r1.xreadgroup(b"x", b"g", b"c") == [b"115-2"]
    assert r1.xreadgroup(b"x", b"g", b"c") == []


# ---------------------------------------------------------------- convergence

KEYS = [b"k1", b"k2"]
actions = st.lists(
    st.one_of(
        st.tuples(st.just("xadd"), st.integers(1, 3), st.sampled_from(KEYS), st.integers(0, 3)),
        st.tuples(st.just("xdel"), st.integers(1, 3), st.sampled_from(KEYS), st.integers(0, 50)),
        st.tuples(st.just("xtrim"), st.integers(1, 3), st.sampled_from(KEYS), st.integers(0, 4)),
        st.tuples(st.just("del"), st.integers(1, 3), st.sampled_from(KEYS), st.just(0)),
        st.tuples(st.just("create"), st.integers(1, 3), st.sampled_from(KEYS), st.integers(0, 1)),
        st.tuples(st.just("destroy"), st.integers(1, 3), st.sampled_from(KEYS), st.integers(0, 1)),
        st.tuples(st.just("idmp"), st.integers(1, 3), st.sampled_from(KEYS), st.integers(0, 2)),
        st.tuples(st.just("deliver"), st.integers(1, 3), st.integers(1, 3), st.integers(0, 1000)),
        st.tuples(st.just("deliver_all"), st.integers(1, 3), st.integers(1, 3), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(script=actions)
def test_regions_converge_whatever_the_delivery_order(script):
    regions = {n: Region(n) for n in (1, 2, 3)}
    minted: set = set()
    for kind, a, b, c in script:
        r = regions[a]
        r.clock += 1 if c % 2 else 0  # a slow clock: many IDs share a millisecond
        if kind == "xadd":
            new = r.xadd(b, field=b"f%d" % c)
            assert (b, new) not in minted  # strict mode never mints a duplicate ID in a stream
            minted.add((b, new))
        elif kind == "idmp":
            r.xadd_idmp(b, b"p", b"iid-%d" % c)
        elif kind == "xdel":
            r.xdel(b, c)
        elif kind == "xtrim":
            r.xtrim(b, c)
        elif kind == "del":
            r.delete(b)
        elif kind == "create":
            r.create_group(b, b"g%d" % c)
        elif kind == "destroy":
            r.destroy_group(b, b"g%d" % c)
        elif kind == "deliver" and a != b:
            deliver(regions[a], regions[b], c)
            deliver(regions[a], regions[b], c)  # duplicates are absorbed
        elif kind == "deliver_all" and a != b:
            deliver(regions[a], regions[b])
    sync(*regions.values())
    snaps = [r.snapshot() for r in regions.values()]
    assert snaps[0] == snaps[1] == snaps[2]
    maps = [{k: dict(s.idmp.producers.get(b"p", {})) for k, s in r.keys.items()} for r in regions.values()]
    assert maps[0] == maps[1] == maps[2]
    for r in regions.values():
        assert not r.causal.pending


reads = st.lists(
    st.one_of(
        st.tuples(st.just("xadd"), st.integers(1, 3), st.integers(0, 3)),
        st.tuples(st.just("read"), st.just(1), st.integers(0, 3)),
        st.tuples(st.just("deliver"), st.integers(1, 3), st.integers(1, 3)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(script=reads)
def test_xreadgroup_never_skips_an_entry(script):
    """Region 1's group reads `>` while entries from all regions arrive in any order:
    every entry is delivered, exactly once (seed 003's guarantee)."""
    regions = {n: Region(n) for n in (1, 2, 3)}
    regions[1].create_group(b"x", b"g")
    sync(*regions.values())
    written, delivered = set(), []
    for kind, a, b in script:
        r = regions[a]
        if kind == "xadd":
            r.clock += b
            written.add(b"%d-%d" % r.xadd(b"x"))
        elif kind == "read":
            delivered += r.xreadgroup(b"x", b"g", b"c", count=b)
        elif a != b:
            deliver(regions[a], regions[b])
    sync(*regions.values())
    delivered += regions[1].xreadgroup(b"x", b"g", b"c")
    assert sorted(delivered) == sorted(written)
    assert len(delivered) == len(set(delivered))


def test_equal_ids_from_two_origins_read_in_origin_order():
    """Seed 003: with full IDs (semi-strict / liberal) two regions can write 100-1;
    both entries are kept and every read returns them in the same order."""
    from crdt.stream import Stream

    s = Stream()
    s.add(1, (50, 0), [b"f1", b"early"], 100, 4096)
    s.add(2, (100, 1), [b"f1", b"from-2"], 100, 4096)
    s.add(1, (100, 1), [b"f1", b"from-1"], 100, 4096)
    assert [f[1] for _, f in s.range(MIN_ID, MAX_ID)] == [b"early", b"from-1", b"from-2"]
    assert [f[1] for _, f in s.revrange(MIN_ID, MAX_ID)] == [b"from-2", b"from-1", b"early"]


def test_delete_contexts_are_collected_once_every_region_has_seen_them():
    regions = Region(1), Region(2), Region(3)
    r1, r2, r3 = regions
    r1.create_group(b"x", b"g1")
    sync(*regions)
    r1.delete(b"x")
    r2.create_group(b"x", b"g2")  # concurrent with the DEL: loses everywhere
    sync(*regions)
    assert [r.exists(b"x") for r in regions] == [0, 0, 0]
    # region 1 knows region 2's last operation was issued before it saw the DEL: not stable yet
    assert ops.collect_garbage(r1.keys, r1.causal.stable([1, 2, 3])) == 0 and r1.keys.key_contexts
    for r in regions:
        r.xadd(b"other")  # every region issues something after seeing the DEL
    sync(*regions)
    for r in regions:
        assert ops.collect_garbage(r.keys, r.causal.stable([1, 2, 3])) >= 1
        assert not r.keys.key_contexts and not r.keys.group_contexts
    r3.create_group(b"x", b"g3")  # after the DEL everywhere: survives everywhere
    sync(*regions)
    assert [r.groups(b"x") for r in regions] == [[b"g3"]] * 3
