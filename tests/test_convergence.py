"""Multi-region rules of the core: seed 003's tables and convergence.

A :class:`Region` here is a real region server (``node.region.core.RegionCore`` with its
Active-Active part) that is never started: no sockets, no event loop, no
operation log.  Writes are real commands (``RegionCore.call``: the command table,
the handlers that resolve them into operations under the region's ID mode, the
causal log that stamps them), at a clock the test sets.  Replication is the
test's: "delivering" hands an envelope of one region's causal log - the
operation's bytes as the codec (node/activeactive/opcodec.py) encoded them - to another
region's replication hub, which decodes and applies it in causal order; "- Sync -"
is delivering every envelope everywhere, by a full-resync image
(``RegionCore.resync_image`` / ``install_image``) where the sender trimmed
operations the receiver lacks.  The Hypothesis test runs random writes,
deletes, trims and group changes at three regions with random delivery order
and duplication, then syncs and requires identical entries, groups and key
existence everywhere, and no duplicate ID in strict mode.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import ops
from crdt.idgen import IdError
from crdt.ids import MAX_ID, MIN_ID
from crdt.sync import LinkState
from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.region.config import Config
from node.region.core import RegionCore, Session
from node.resp.encoder import ReplyError

STRIDE = 16
NUMBERS = (1, 2, 3)  # the regions of the database (a test may leave one silent)


def _id(raw: bytes) -> tuple[int, int]:
    ms, seq = raw.split(b"-")
    return int(ms), int(seq)


class Region:
    """One region of a database of regions 1, 2 and 3, driven by commands at a test-set clock."""

    def __init__(self, number: int, settings: dict[str, str] | None = None) -> None:
        specs = [RegionSpec(f"region-{n}", n, "local", 0, 0) for n in NUMBERS]
        cluster = ClusterConfig("convergence", "db", "token", STRIDE, specs)
        self.number = number
        self.server = RegionCore(Config(), cluster=(cluster, specs[number - 1]), clock=lambda: self.clock)
        self.aa = self.server.aa
        self.client = Session(self.server)
        self.client.authenticated = True
        self.clock = 0
        for name, value in (settings or {}).items():
            self.call(b"CONFIG", b"SET", name.encode(), value.encode())

    @property
    def keys(self) -> ops.Keyspace:
        return self.server.db.keys

    @property
    def causal(self):
        return self.aa.causal

    def call(self, *argv: bytes, check: bool = True):
        reply = self.server.call(self.client, list(argv))
        if check and isinstance(reply, ReplyError):
            raise IdError(reply.message) if b"XADD" in argv[:1] else AssertionError(reply.message)
        return reply

    # -- writes: real commands, resolved here into operations, applied, then stamped
    def tune(self, mode: str) -> None:
        self.call(b"BRAID.CONFIG", b"SET", b"crdt_xadd_id_uniqueness_mode", mode.encode())

    def xadd(self, key: bytes, ms: int | None = None, field: bytes = b"f", seq: int | None = None) -> tuple:
        """``*``, a milliseconds-only ID, or (``seq`` given) a full ID; IdError when refused."""
        id_arg = b"*" if ms is None else b"%d" % ms if seq is None else b"%d-%d" % (ms, seq)
        return _id(self.call(b"XADD", key, id_arg, field, b"v"))

    def xadd_idmp(self, key: bytes, pid: bytes, iid: bytes) -> tuple:
        return _id(self.call(b"XADD", key, b"IDMP", pid, iid, b"*", b"f", b"v"))

    def entry_ids(self, key: bytes) -> list[tuple]:
        s = self.keys.get(key)
        return [eid for eid, _ in s.range(MIN_ID, MAX_ID)] if s is not None else []

    def xdel(self, key: bytes, pick: int) -> None:
        ids = self.entry_ids(key)
        if ids:
            self.call(b"XDEL", key, b"%d-%d" % ids[pick % len(ids)])

    def xtrim(self, key: bytes, maxlen: int | None = None, minid: tuple | None = None, approx: bool = False,
              limit: int | None = None) -> int:
        argv = [b"XTRIM", key, b"MAXLEN" if minid is None else b"MINID"]
        argv += [b"~"] if approx else []
        argv += [b"%d" % maxlen if minid is None else b"%d-%d" % minid]
        argv += [b"LIMIT", b"%d" % limit] if limit is not None else []
        return self.call(*argv)

    def delete(self, key: bytes) -> None:
        self.call(b"DEL", key)

    def create_group(self, key: bytes, group: bytes) -> bool:
        reply = self.call(b"XGROUP", b"CREATE", key, group, b"0", b"MKSTREAM", check=False)
        return not isinstance(reply, ReplyError)

    def destroy_group(self, key: bytes, group: bytes) -> None:
        self.call(b"XGROUP", b"DESTROY", key, group, check=False)

    def xreadgroup(self, key: bytes, group: bytes, consumer: bytes, count: int = 0) -> list:
        argv = [b"XREADGROUP", b"GROUP", group, consumer] + ([b"COUNT", b"%d" % count] if count else [])
        reply = self.call(*argv, b"STREAMS", key, b">")
        return [row[0] for _key, rows in reply for row in rows] if isinstance(reply, list) else []

    def xack(self, key: bytes, group: bytes, *ids: tuple) -> None:
        self.call(b"XACK", key, group, *(b"%d-%d" % i for i in ids))

    # -- the cron's work (node/runtime/server.py's once-a-second loop), at this region's clock
    def expire_idmp(self) -> int:
        return self.server.db.expire_idmp(self.clock, self.aa.stable())

    def collect_garbage(self) -> int:
        return self.aa.collect_garbage()

    def trim_backlog(self, count: int) -> int:
        """Drop the ``count`` oldest operations of the backlog, whoever lacks them (a size bound)."""
        count = min(count, len(self.causal.log))
        self.aa.hub.trim(count)
        return count

    # -- reads
    def xrange(self, key: bytes) -> list:
        return [b"%d-%d" % eid for eid in self.entry_ids(key)]

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


def deliver(src: Region, dst: Region, pick: int | None = None) -> bool:
    """Envelopes ``src`` holds and ``dst`` lacks reach ``dst`` (one, if ``pick``); a full-resync
    image first when ``src`` trimmed some ``dst`` lacks; when both dropped what the other
    lacks, each joins the other's image, as the link does.  True if an image was installed
    or joined."""
    if LinkState.image_conflict(src.causal.vv, src.causal.floor, dst.causal.vv, dst.causal.floor):
        (to_dst, _), (to_src, _) = src.server.resync_image(), dst.server.resync_image()
        assert dst.server.join_image(to_dst) and src.server.join_image(to_src)
        return True
    if src.causal.lacks_dropped(dst.causal.vv):
        image, _vv = src.server.resync_image()
        if dst.server.install_image(image):
            return True
    lacking = src.causal.missing(dst.causal.vv)
    if not lacking:
        return False
    chosen = lacking if pick is None else [lacking[pick % len(lacking)]]
    for env in chosen:
        dst.aa.hub.deliver(env)  # the bytes src's codec made; dst decodes its own operation
    return False


def sync(*regions: Region) -> None:
    for _ in range(len(regions) + 1):
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


# ---------------------------------------------------------------- backlog trimming and full resync

def test_a_full_resync_brings_what_the_sender_trimmed():
    r1, r2, r3 = Region(1), Region(2), Region(3)
    r1.create_group(b"x", b"g")
    r1.xadd(b"x", ms=110)
    sync(r1, r2)                       # region 3 was away
    r2.xadd(b"x", ms=120)
    sync(r1, r2)
    assert r1.trim_backlog(10) == 3    # past its size bound: gone, though region 3 lacks them
    r3.xadd(b"y", ms=130)              # region 3's own, which region 1 lacks too
    assert deliver(r1, r3)             # region 1 cannot send what it dropped: a full resync
    sync(r1, r2, r3)
    assert r1.snapshot() == r2.snapshot() == r3.snapshot()
    assert r3.xrange(b"x") == [b"110-1", b"120-2"] and r1.xrange(b"y") == [b"130-3"]
    assert r1.causal.vv == r2.causal.vv == r3.causal.vv == {1: 2, 2: 1, 3: 1}


def _both_dropped_what_the_other_lacks() -> tuple[Region, Region]:
    r1, r2 = Region(1), Region(2)
    r1.xadd(b"x", ms=110)
    r2.xadd(b"x", ms=120)
    r1.trim_backlog(10)
    r2.trim_backlog(10)
    return r1, r2


def test_a_full_resync_never_loses_what_the_receiver_trimmed():
    """Found by the convergence machine: two regions apart long enough for both to trim their
    backlog past its size bound.  Each used to send the other an image; the one region 2
    installed lacked region 2's own trimmed entry, and its version vector went back (its next
    operation would reuse the dot 2.1).  Now such an image is refused, and the regions join
    their states instead: nothing is lost."""
    r1, r2 = _both_dropped_what_the_other_lacks()
    image, _vv = r1.server.resync_image()
    assert not r2.server.install_image(image)  # refused: it lacks 2.1, which region 2 dropped
    assert r1.causal.vv == {1: 1} and r2.causal.vv == {2: 1}
    sync(r1, r2)
    assert r1.causal.vv == r2.causal.vv == {1: 1, 2: 1}


def test_regions_that_both_dropped_what_the_other_lacks_converge():
    """Each joins the other's image into its own state (crdt/join.py), and operation-based
    replication goes on from there: later writes cross as usual."""
    r1, r2 = _both_dropped_what_the_other_lacks()
    sync(r1, r2)
    assert r1.xrange(b"x") == r2.xrange(b"x") == [b"110-1", b"120-2"]
    assert r1.causal.vv == r2.causal.vv == {1: 1, 2: 1}
    assert r1.causal.floor == r2.causal.floor == {1: 1, 2: 1}
    r1.xadd(b"x", ms=130)
    r2.xadd(b"y", ms=140)
    sync(r1, r2)
    assert r1.snapshot() == r2.snapshot()
    assert r1.xrange(b"x") == [b"110-1", b"120-2", b"130-1"] and r2.xrange(b"y") == [b"140-2"]


def test_idmp_size_eviction_follows_each_regions_arrival_order():
    """Found by the convergence machine: past IDMP-MAXSIZE a region evicts the iids that
    arrived first *there*, so two regions may keep different iids of one producer.  The
    entries still converge, and an iid both keep names the same entry; but a retry of an
    evicted iid is deduplicated at one region and added again at the other."""
    settings = {"stream-idmp-maxsize": "2"}
    r1, r2, r3 = Region(1, settings), Region(2, settings), Region(3, settings)
    r1.clock = r2.clock = r3.clock = 100
    r1.xadd_idmp(b"a", b"p1", b"i1")
    r1.xadd_idmp(b"a", b"p1", b"i3")
    r2.xadd_idmp(b"a", b"p1", b"i2")  # concurrent: region 2 holds it first
    sync(r1, r2, r3)
    for r in (r1, r2, r3):
        r.xadd(b"b")                  # every region has seen every add: they are stable
    sync(r1, r2, r3)
    for r in (r1, r2, r3):
        assert r.expire_idmp() == 1
    assert r1.snapshot() == r2.snapshot() == r3.snapshot()
    kept = [dict(r.keys[b"a"].idmp.producers[b"p1"]) for r in (r1, r2, r3)]
    assert kept[0] == kept[2] and set(kept[0]) == {b"i3", b"i2"} and set(kept[1]) == {b"i1", b"i3"}
    assert all(kept[0][i] == kept[1][i] for i in set(kept[0]) & set(kept[1]))


def test_xcfgset_concurrent_with_an_idmp_duplicate_converges():
    """Found by the simulation (an XCFGSET in the workload): region 3 applies region 1's add of
    iid i, then its own XCFGSET, which used to clear the key's maps at once; region 2's
    concurrent add of i then looked new there and both entries stayed, while regions 1 and
    2 kept one.  Now the cleared iids go only once stable."""
    r1, r2, r3 = Region(1), Region(2), Region(3)
    for r in (r1, r2, r3):
        r.clock = 100
    r1.xadd(b"k")
    sync(r1, r2, r3)
    r1.xadd_idmp(b"k", b"p", b"i")
    r2.xadd_idmp(b"k", b"p", b"i")   # concurrent duplicate: one of the two must go everywhere
    deliver(r1, r3)
    r3.call(b"XCFGSET", b"k", b"IDMP-MAXSIZE", b"5")
    assert r3.keys[b"k"].idmp.lookup(b"p", b"i") is not None  # cleared, but kept until stable
    sync(r1, r2, r3)
    assert r1.xrange(b"k") == r2.xrange(b"k") == r3.xrange(b"k")
    assert len(r1.xrange(b"k")) == 2
    for r in (r1, r2, r3):
        r.xadd(b"b")                  # every region has seen every add: they are stable
    sync(r1, r2, r3)
    assert [r.expire_idmp() for r in (r1, r2, r3)] == [1, 1, 1]  # now the XCFGSET's clearing is done
    for r in (r1, r2, r3):
        assert r.keys[b"k"].idmp.producers == {} and r.keys[b"k"].idmp.cleared == set()
    r2.xadd_idmp(b"k", b"p", b"i")    # a new add of the iid, after the clearing: a new entry everywhere
    sync(r1, r2, r3)
    assert r1.xrange(b"k") == r2.xrange(b"k") == r3.xrange(b"k") and len(r1.xrange(b"k")) == 3


def test_xcfgset_clears_a_standalone_regions_maps_at_once():
    core = RegionCore(Config())
    me = Session(core)
    assert core.call(me, [b"XADD", b"k", b"IDMP", b"p", b"i", b"*", b"f", b"v"]) == core.call(
        me, [b"XADD", b"k", b"IDMP", b"p", b"i", b"*", b"f", b"v"])
    assert core.call(me, [b"XCFGSET", b"k", b"IDMP-MAXSIZE", b"5"]) == "OK"
    assert core.db.keys[b"k"].idmp.producers == {}
    core.call(me, [b"XADD", b"k", b"IDMP", b"p", b"i", b"*", b"f", b"v"])
    assert core.db.keys[b"k"].length == 2


def test_xdel_of_an_id_two_origins_hold_converges():
    """Found by the convergence machine (a random seed): with liberal IDs two origins can both
    hold 100-1; region 1 deletes its own 100-1 before region 2's arrives, so region 1 keeps
    region 2's entry while region 2 removes both."""
    r1, r2 = Region(1), Region(2)
    r1.clock = r2.clock = 100
    r2.tune("liberal")
    assert r1.xadd(b"a") == (100, 1)
    assert [r2.xadd(b"a"), r2.xadd(b"a")] == [(100, 0), (100, 1)]
    r1.call(b"XDEL", b"a", b"100-1")
    sync(r1, r2)
    assert r1.snapshot() == r2.snapshot()
