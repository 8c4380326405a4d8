"""COPY for streams, and the resolver step that installs a stream image under a key.

- One region: the destination is an exact, independent copy of the source - entries
  (deleted-entry flags and blocks too), the counters, every group with its consumers
  and PEL, the IDMP configuration, maps and counters - with Redis's replies and errors.
- The command table: COPY's arity, flags, keys and ACL categories as Redis 8 has them.
- Active-Active (real region servers in this process, operations through the real
  codec and causal logs): Redis's answer where the copy is made, the Active-Active
  rule everywhere (entries in a log of their own, groups created with delete-wins,
  the IDMP configuration carried, consumers and PEL at the issuing region only),
  convergence when a DEL of the destination races the copy, and when a concurrent
  duplicate of an iid the destination holds arrives after the copy.
- The append-only file: a COPY replays exactly after a restart, from the log alone
  and from a snapshot, in one region and in a region of a database of regions.
- A reader blocked on the destination is woken by the COPY.

tests/test_differential.py compares COPY with redis-server itself.
"""

from __future__ import annotations

import signal
import threading

import pytest

from crdt import resolve
from crdt.ids import MAX_ID, MIN_ID
from node.region.config import Config
from node.region.core import RegionCore, Session
from node.resp.encoder import ReplyError
from node.testing import BraidProcess, InProcessServer, wait_until
from tests.test_convergence import STRIDE, deliver, sync
from tests.test_convergence import Region as ActiveRegion
from tests.test_replay_ops import Region as LoggedRegion


class OneRegion:
    """A standalone region (the real command handlers), called with str or int arguments;
    its clock moves ``step`` milliseconds after every command."""

    def __init__(self, step: int = 1, **settings: str) -> None:
        self.now, self.step = 1_000, step
        self.server = RegionCore(Config(), clock=lambda: self.now)
        self.client = Session(self.server)
        self.client.authenticated = True
        for name, value in settings.items():
            self("CONFIG", "SET", name, value)

    def __call__(self, *argv):
        reply = self.server.call(self.client, [a if isinstance(a, bytes) else str(a).encode() for a in argv])
        self.now += self.step
        return reply

    @property
    def keys(self):
        return self.server.db.keys


def _history(r) -> None:
    """A stream with everything a copy must carry: several blocks, deleted entries, counters
    moved by XSETID, two groups (one read by two consumers, one acknowledged, an idle
    consumer), IDMP maps under a configured window."""
    for i in range(1, 9):
        r("XADD", "s", f"{i}-0", "f", f"v{i}", *(["extra", "x"] if i % 3 == 0 else []))
    r("XDEL", "s", "2-0", "5-0")
    r("XCFGSET", "s", "IDMP-DURATION", 50, "IDMP-MAXSIZE", 7)
    r("XADD", "s", "IDMP", "p1", "a", "*", "f", "i1")
    r("XADD", "s", "IDMP", "p1", "a", "*", "f", "dup")      # a duplicate: counted
    r("XADD", "s", "IDMP", "p2", "b", "*", "f", "i2")
    r("XSETID", "s", "99999-0", "ENTRIESADDED", 40, "MAXDELETEDID", "15-0")
    r("XGROUP", "CREATE", "s", "g1", "0")
    r("XGROUP", "CREATE", "s", "g2", "4-0", "ENTRIESREAD", 3)
    r("XREADGROUP", "GROUP", "g1", "alice", "COUNT", 2, "STREAMS", "s", ">")
    r("XREADGROUP", "GROUP", "g1", "bob", "COUNT", 3, "STREAMS", "s", ">")
    r("XACK", "s", "g1", "3-0")
    r("XGROUP", "CREATECONSUMER", "s", "g1", "idle")
    r("XREADGROUP", "GROUP", "g2", "carol", "STREAMS", "s", ">")
    r("XCLAIM", "s", "g1", "carol", 0, "1-0", "RETRYCOUNT", 5)


def _full(r, key: str):
    return r("XINFO", "STREAM", key, "FULL")


def _state(s) -> tuple:
    """Everything a stream holds, compared by value (blocks byte for byte)."""
    groups = {name: (g.last_id, g.entries_read, [i for i, _ in g.by_delivery_time()],
                     [(i, n.consumer.name if n.consumer else None, n.delivery_time, n.delivery_count)
                      for i, n in g.pel.items()],
                     {c.name: (c.seen_time, c.active_time, list(c.pel)) for c in g.consumers.values()})
              for name, g in s.groups.items()}
    logs = {o: [(b.first, bytes(b.buf), b.live, b.dead) for b in log.blocks] for o, log in s.logs.items()}
    idmp = s.idmp
    return (logs, s.last_id, s.first_id, s.max_deleted_id, s.entries_added, groups,
            (idmp.duration, idmp.maxsize, {p: dict(m) for p, m in idmp.producers.items()},
             idmp.iids_added, idmp.iids_duplicates))


# ------------------------------------------------------------------ one region
def test_a_copy_is_exact_and_independent():
    r = OneRegion(**{"stream-node-max-entries": "3"})
    _history(r)
    assert r("COPY", "s", "d") == 1
    assert _state(r.keys[b"d"]) == _state(r.keys[b"s"])
    assert _full(r, "d") == _full(r, "s")
    log = r.keys[b"d"].logs[1]  # blocks as they were, deleted entries included (compared above)
    assert log.node_count > 1 and sum(b.dead for b in log.blocks) == 2
    before = _full(r, "d")
    original = r.keys[b"s"].idmp.lookup(b"p1", b"a")
    assert original is not None

    # the source changes: the copy does not (entries, counters, groups, PEL, consumers, IDMP)
    r("XADD", "s", "*", "f", "new")
    r("XACK", "s", "g1", "1-0", "4-0")
    r("XGROUP", "DELCONSUMER", "s", "g1", "idle")
    r("XGROUP", "SETID", "s", "g2", "$")
    r("XCFGSET", "s", "IDMP-MAXSIZE", 9)
    r("XADD", "s", "IDMP", "p3", "c", "*", "f", "v")
    assert _full(r, "d") == before
    # and the copy changes alone
    r("XADD", "d", "*", "f", "only-d")
    r("XREADGROUP", "GROUP", "g1", "dave", "STREAMS", "d", ">")
    assert [b"f", b"only-d"] not in [flat for _id, flat in r("XRANGE", "s", "-", "+")]
    assert b"dave" not in r.keys[b"s"].groups[b"g1"].consumers
    # the copied IDMP map answers a retry with the original ID
    assert r("XADD", "d", "IDMP", "p1", "a", "*", "f", "again") == b"%d-%d" % original


def test_copy_replies_and_errors():
    r = OneRegion()
    r("XADD", "s", "1-0", "f", "v")
    r("XADD", "t", "5-0", "f", "w")
    assert r("COPY", "missing", "d") == 0
    assert r("COPY", "s", "t") == 0                      # the destination exists: untouched
    assert r("XRANGE", "t", "-", "+") == [[b"5-0", [b"f", b"w"]]]
    assert r("COPY", "s", "t", "REPLACE") == 1
    assert r("XRANGE", "t", "-", "+") == [[b"1-0", [b"f", b"v"]]]
    assert r("COPY", "s", "u", "DB", 0, "REPLACE", "replace") == 1
    assert r("COPY", "s", "v", "db", "0") == 1
    errors = {
        ("s", "s"): "ERR source and destination objects are the same",
        ("missing", "missing"): "ERR source and destination objects are the same",
        ("s", "w", "DB", "1"): "ERR DB index is out of range",   # one database, as SELECT
        ("s", "w", "DB", "-1"): "ERR DB index is out of range",
        ("s", "w", "DB", "16"): "ERR DB index is out of range",
        ("s", "w", "DB", "x"): "ERR value is not an integer or out of range",
        ("s", "w", "DB", "2147483648"): "ERR value is out of range, value must between -2147483648 and 2147483647",
        ("s", "w", "DB", "9223372036854775808"): "ERR value is not an integer or out of range",
        ("s", "w", "DB", " 0"): "ERR value is not an integer or out of range",
        ("s", "w", "DB"): "ERR syntax error",
        ("s", "w", "BOGUS"): "ERR syntax error",
        ("s", "s", "DB", "x"): "ERR value is not an integer or out of range",  # options first, as Redis
        ("s",): "ERR wrong number of arguments for 'copy' command",
    }
    for args, message in errors.items():
        reply = r("COPY", *args)
        assert isinstance(reply, ReplyError) and reply.message == message, (args, reply)
    assert b"w" not in r.keys


def test_a_copy_of_an_empty_stream_exists():
    """One region keeps an emptied stream (with its counters): so does its copy."""
    r = OneRegion()
    r("XADD", "e", "3-0", "f", "v")
    r("XDEL", "e", "3-0")
    assert r("COPY", "e", "f") == 1
    assert r("EXISTS", "f") == 1
    assert _full(r, "f") == _full(r, "e")


def test_the_copied_pel_orders_deliveries_of_one_millisecond_by_id():
    """Redis's copy builds the time-ordered PEL list entry by entry in ID order: deliveries
    of the same millisecond end up in ID order (XREADGROUP CLAIM serves that order)."""
    r = OneRegion(step=0)
    for i in (1, 2, 3):
        r("XADD", "s", f"{i}-0", "f", "v")
    r("XGROUP", "CREATE", "s", "g", "0")
    r("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    r("XCLAIM", "s", "g", "c", 0, "1-0", "JUSTID")           # redelivered in the same millisecond: last
    order = [i for i, _ in r.keys[b"s"].groups[b"g"].by_delivery_time()]
    assert order == [(2, 0), (3, 0), (1, 0)]
    r("COPY", "s", "d")
    assert [i for i, _ in r.keys[b"d"].groups[b"g"].by_delivery_time()] == [(1, 0), (2, 0), (3, 0)]


def test_a_copy_keeps_the_nack_zone_in_release_order():
    """Entries XNACK released come first in the copy's PEL, in the order they were released
    (not by ID), so XREADGROUP ... CLAIM serves the copy as it serves the source."""
    r = OneRegion(step=0)
    for i in (1, 2, 3, 4):
        r("XADD", "s", f"{i}-0", "f", "v")
    r("XGROUP", "CREATE", "s", "g", "0")
    r("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    r("XNACK", "s", "g", "FAIL", "IDS", "1", "3-0")
    r("XNACK", "s", "g", "FAIL", "IDS", "1", "1-0")
    source = [i for i, _ in r.keys[b"s"].groups[b"g"].by_delivery_time()]
    assert source[:2] == [(3, 0), (1, 0)]
    r("COPY", "s", "d")
    assert [i for i, _ in r.keys[b"d"].groups[b"g"].by_delivery_time()] == source


def test_command_info_and_docs():
    r = OneRegion()
    info = r("COMMAND", "INFO", "copy")[0]
    assert info[:6] == [b"copy", -3, [b"write", b"denyoom"], 1, 2, 1]
    assert info[6] == ["@keyspace", "@write", "@slow"]
    docs = r("COMMAND", "DOCS", "copy")[b"copy"]
    assert docs[b"since"] == b"6.2.0" and docs[b"group"] == b"generic"
    assert r("COMMAND", "GETKEYS", "COPY", "a", "b", "REPLACE") == [b"a", b"b"]


# ------------------------------------------------------------------ the resolver step
def test_install_puts_an_image_under_a_key():
    """The step RESTORE uses too: an image that is not in the keyspace becomes the key."""
    r = OneRegion()
    _history(r)
    image = resolve.duplicate(r.keys[b"s"])
    expected = _state(image)
    db = r.server.db
    ops = list(db.resolver.install(db.keys, b"s", image, replace=False))
    assert ops == []                                       # the key exists: nothing to do
    ops = list(db.resolver.install(db.keys, b"new", image, replace=False))
    assert ops == []                                       # a missing key: nothing to remove first
    db.resolver.install_local(db.keys, b"new", image)
    assert _state(db.keys[b"new"]) == expected


# ------------------------------------------------------------------ Active-Active
def _database() -> list[ActiveRegion]:
    regions = [ActiveRegion(n) for n in (1, 2, 3)]
    for region in regions:
        region.clock = 1000
    return regions


def test_active_active_copy(monkeypatch):
    r1, r2, r3 = _database()
    r1.call(b"XADD", b"s", b"*", b"f", b"one")
    r2.call(b"XADD", b"s", b"*", b"f", b"two")
    r1.call(b"XCFGSET", b"s", b"IDMP-MAXSIZE", b"9")
    r1.call(b"XADD", b"s", b"IDMP", b"p", b"i", b"*", b"f", b"idmp")
    r1.call(b"XADD", b"d", b"*", b"f", b"old")            # what the destination held
    sync(r1, r2, r3)
    r1.call(b"XGROUP", b"CREATE", b"s", b"g", b"0")
    sync(r1, r2, r3)
    r1.call(b"XREADGROUP", b"GROUP", b"g", b"alice", b"COUNT", b"2", b"STREAMS", b"s", b">")
    r2.call(b"XREADGROUP", b"GROUP", b"g", b"bob", b"COUNT", b"1", b"STREAMS", b"s", b">")
    before = {r.number: r.xrange(b"s") for r in (r1, r2, r3)}

    assert r1.call(b"COPY", b"s", b"d") == 0              # exists: Redis's answer
    vv = dict(r1.causal.vv)
    assert r1.call(b"COPY", b"s", b"d", b"REPLACE") == 1
    copied = r1.keys[b"d"]
    n = vv[1] + 2                                         # after the observed-remove of what d held
    assert list(copied.logs) == [1 + STRIDE * n]         # the copy's own log: the region's number modulo the stride
    assert r1.xrange(b"d") == r1.xrange(b"s")
    # the group: its last-delivered ID and entries-read, and - here only - its consumers and PEL
    g, source = copied.groups[b"g"], r1.keys[b"s"].groups[b"g"]
    assert (g.last_id, g.entries_read) == (source.last_id, source.entries_read)
    assert sorted(g.consumers) == [b"alice"] and list(g.pel) == list(source.pel)
    assert g.created_dot[0] == 1
    sync(r1, r2, r3)
    for r in (r1, r2, r3):
        assert r.xrange(b"d") == r1.xrange(b"s"), r.number
        assert r.xrange(b"s") == before[r.number]         # the source is untouched
        assert r.groups(b"d") == [b"g"]
        assert r.keys[b"d"].groups[b"g"].created_dot == g.created_dot
        d = r.keys[b"d"]
        assert (d.idmp.maxsize, d.idmp.producers) == (9, {})   # the configuration, not the maps
    assert r2.keys[b"d"].groups[b"g"].pel == {} and not r2.keys[b"d"].groups[b"g"].consumers
    assert r1.snapshot() == r2.snapshot() == r3.snapshot()
    # the copied group reads on where the source's was
    assert r2.call(b"XREADGROUP", b"GROUP", b"g", b"x", b"STREAMS", b"d", b">") == \
        [[b"d", [[i, f] for i, f in r2.call(b"XRANGE", b"d", b"-", b"+")
                 if tuple(map(int, i.split(b"-"))) > g.last_id]]]


def test_a_del_racing_a_copy_converges():
    """Region 2 deletes the destination, having seen region 1's entries there, while region 1
    copies onto it entries with lower IDs: the copy survives everywhere (the DEL had not seen
    it) - it would have been removed at region 1 only, had the copy reused region 1's own log."""
    r1, r2, r3 = _database()
    r1.call(b"XADD", b"s", b"*", b"f", b"early")
    r1.clock += 50
    r1.call(b"XADD", b"d", b"*", b"f", b"later")         # d's log of region 1 is above s's IDs
    sync(r1, r2, r3)
    r2.call(b"DEL", b"d")                                 # concurrent with the copy
    r1.call(b"COPY", b"s", b"d", b"REPLACE")
    sync(r1, r2, r3)
    assert r1.snapshot() == r2.snapshot() == r3.snapshot()
    assert r1.xrange(b"d") == r1.xrange(b"s") == r2.xrange(b"d")


def test_a_del_racing_a_copy_wins_over_the_copied_groups():
    """The copied entries were not observed by a concurrent DEL of the destination: they
    stay; the copied group's creation had not seen that DEL: delete wins, as for XGROUP
    CREATE."""
    r1, r2, r3 = _database()
    r1.call(b"XADD", b"s", b"*", b"f", b"v")
    r1.call(b"XGROUP", b"CREATE", b"s", b"g", b"0")
    r1.call(b"XADD", b"d", b"*", b"f", b"w")
    sync(r1, r2, r3)
    r1.call(b"COPY", b"s", b"d", b"REPLACE")
    r2.call(b"DEL", b"d")                                 # concurrent: saw d's old entry only
    sync(r1, r2, r3)
    assert r1.snapshot() == r2.snapshot() == r3.snapshot()
    assert r1.xrange(b"d") == r1.xrange(b"s")
    assert r1.groups(b"d") == r2.groups(b"d") == []


def test_a_duplicate_racing_a_copy_is_still_one_entry():
    """Regions 2 and 3 add one (producer, iid) to the destination concurrently while region 1
    copies onto it a stream whose map holds that producer's iids; region 3 applies the copy
    between its own add and region 2's.  The duplicate is found there too: one entry
    everywhere (an iid the copy recorded would have pushed region 3's out of the size window)."""
    regions = [ActiveRegion(n, {"stream-idmp-maxsize": "2"}) for n in (1, 2, 3)]
    for region in regions:
        region.clock = 1000
    r1, r2, r3 = regions
    for iid in (b"a", b"b", b"c"):
        r1.call(b"XADD", b"s", b"IDMP", b"p", iid, b"*", b"f", iid)
    r1.call(b"XADD", b"d", b"*", b"f", b"old")
    sync(*regions)
    r3.call(b"XADD", b"d", b"IDMP", b"p", b"x", b"*", b"f", b"x")
    r2.call(b"XADD", b"d", b"IDMP", b"p", b"x", b"*", b"f", b"x")
    assert r1.call(b"COPY", b"s", b"d", b"REPLACE") == 1
    deliver(r1, r3)
    sync(*regions)
    assert r1.snapshot() == r2.snapshot() == r3.snapshot()
    assert [flat for _id, flat in r1.call(b"XRANGE", b"d", b"-", b"+")].count([b"f", b"x"]) == 1


# ------------------------------------------------------------------ the append-only file
@pytest.mark.parametrize("number", [None, 1], ids=["one-region", "active-active"])
@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_a_copy_replays_exactly(tmp_path, number, snapshot):
    r = LoggedRegion(str(tmp_path / "r"), number)
    _history(r) if number is None else _history_aa(r)
    assert r("COPY", "s", "d") == 1
    r("XADD", "d", "*", "f", "after")
    if snapshot:
        assert r("SAVE") == "OK"
        r("XADD", "t", "*", "f", "v")
        assert r("COPY", "t", "d", "REPLACE") == 1          # a copy after the snapshot too
        r("XADD", "d", "*", "f", "after")
    state = r.state()
    d_state = _state(r.server.core.db.keys[b"d"])
    r.close()
    again = LoggedRegion(r.directory, number)
    assert again.state() == state
    assert _state(again.server.core.db.keys[b"d"]) == d_state
    assert again.server.core.loading_report is not None and again.server.core.loading_report[0].differences == 0


def test_a_copy_survives_sigkill_of_a_real_region(tmp_path):
    """A region process killed right after its COPY was acknowledged (appendfsync always)
    comes back with the copy exactly as it was."""
    proc = BraidProcess(data_dir=str(tmp_path), extra_args=["--appendfsync", "always"]).start()
    try:
        c = proc.client()
        for i in range(1, 6):
            c.xadd("s", {"f": i}, id=f"{i}-0")
        c.xdel("s", "2-0")
        c.xgroup_create("s", "g", id="0")
        c.xreadgroup("g", "alice", {"s": ">"}, count=2)
        c.xadd("t", {"f": "old"}, id="9-0")
        assert c.copy("s", "t", replace=True) is True
        before = [c.execute_command("XINFO", "STREAM", key, "FULL") for key in ("s", "t")]
        c.close()
        proc.kill(signal.SIGKILL)
        proc.restart()
        c = proc.client()
        assert [c.execute_command("XINFO", "STREAM", key, "FULL") for key in ("s", "t")] == before
        c.close()
    finally:
        proc.stop()


def _history_aa(r) -> None:
    """_history's spirit in a region of a database: explicit IDs are refused in strict mode."""
    for i in range(6):
        r("XADD", "s", "*", "f", f"v{i}")
    first = r("XRANGE", "s", "-", "+")[1][0]
    r("XDEL", "s", first)
    r("XADD", "s", "IDMP", "p1", "a", "*", "f", "i1")
    r("XCFGSET", "s", "IDMP-MAXSIZE", 7)
    r("XADD", "s", "IDMP", "p2", "b", "*", "f", "i2")
    r("XGROUP", "CREATE", "s", "g1", "0")
    r("XREADGROUP", "GROUP", "g1", "alice", "COUNT", 2, "STREAMS", "s", ">")
    r("XREADGROUP", "GROUP", "g1", "bob", "COUNT", 1, "STREAMS", "s", ">")
    r("XGROUP", "CREATECONSUMER", "s", "g1", "idle")


# ------------------------------------------------------------------ blocked readers
def test_a_copy_wakes_readers_blocked_on_the_destination():
    with InProcessServer() as srv:
        c = srv.client()
        c.xadd("src", {"f": "v"}, id="5-0")
        c.xgroup_create("src", "g", id="0")
        c.xadd("dst", {"f": "old"}, id="1-0")
        c.xgroup_create("dst", "g", id="$")
        replies: dict[str, object] = {}

        def read(name, fn):
            replies[name] = fn(srv.client())

        readers = [
            threading.Thread(target=read, args=("xread", lambda cl: cl.xread({"dst": "$"}, block=0))),
            threading.Thread(target=read, args=("xreadgroup", lambda cl: cl.xreadgroup(
                "g", "reader", {"dst": ">"}, block=0))),
        ]
        for t in readers:
            t.start()
        wait_until(lambda: c.info("clients")["blocked_clients"] == 2, what="both readers blocked")
        assert c.copy("src", "dst", replace=True) is True
        for t in readers:
            t.join(timeout=20)
            assert not t.is_alive()
        assert replies["xread"] == [[b"dst", [(b"5-0", {b"f": b"v"})]]]
        assert replies["xreadgroup"] == [[b"dst", [(b"5-0", {b"f": b"v"})]]]
        assert c.xpending("dst", "g")["pending"] == 1


def test_copied_entries_never_break_an_origin_logs_order():
    """Every origin log grows at its top after any number of copies onto one key."""
    r1, r2, r3 = _database()
    for _ in range(3):
        r1.call(b"XADD", b"s", b"*", b"f", b"v")
        r1.clock += 10
        r2.call(b"XADD", b"d", b"*", b"f", b"w")
        sync(r1, r2, r3)
        r1.call(b"COPY", b"s", b"d", b"REPLACE")
        r3.call(b"XADD", b"d", b"*", b"f", b"x")
        sync(r1, r2, r3)
    for r in (r1, r2, r3):
        for log in r.keys[b"d"].logs.values():
            ids = [i for i, _ in log.range(MIN_ID, MAX_ID)]
            assert ids == sorted(ids)
    assert r1.snapshot() == r2.snapshot() == r3.snapshot()
