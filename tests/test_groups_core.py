"""Consumer-group rules (crdt/groups.py) as pure code: deliveries, history,
claims, and the entries-read / lag arithmetic of Redis's t_stream.c."""

from __future__ import annotations

from crdt import groups as cg
from crdt.blocks import TrimSpec
from crdt.ids import MAX_ID, MIN_ID
from crdt.stream import Stream


def stream_with(n: int) -> Stream:
    s = Stream()
    for i in range(1, n + 1):
        s.add(1, (i, 0), [b"f", b"%d" % i], 100, 4096)
    return s


def test_read_new_moves_cursor_and_fills_pels():
    s = stream_with(5)
    g = cg.ConsumerGroup(b"g", MIN_ID, 0)
    c, created = g.consumer(b"alice", now=1000)
    assert created and c.active_time == -1
    got = cg.read_new(s, g, c, g.last_id, 2, noack=False, now=1000)
    assert [i for i, _ in got] == [(1, 0), (2, 0)]
    assert g.last_id == (2, 0) and g.entries_read == 2
    assert list(g.pel) == list(c.pel) == [(1, 0), (2, 0)]
    assert c.active_time == 1000
    assert cg.lag(s, g) == 3


def test_noack_reads_leave_no_pending_entries():
    s = stream_with(3)
    g = cg.ConsumerGroup(b"g")
    c, _ = g.consumer(b"c", 0)
    cg.read_new(s, g, c, g.last_id, 0, noack=True, now=5)
    assert not g.pel and g.last_id == (3, 0)


def test_history_counts_deliveries_and_reports_deleted_entries():
    s = stream_with(3)
    g = cg.ConsumerGroup(b"g")
    c, _ = g.consumer(b"c", 0)
    cg.read_new(s, g, c, g.last_id, 0, False, now=10)
    s.delete_ids([(2, 0)])
    hist = cg.read_history(s, g, c, MIN_ID, 0, now=20)
    assert hist == [((1, 0), [b"f", b"1"]), ((2, 0), None), ((3, 0), [b"f", b"3"])]
    assert g.pel[(1, 0)].delivery_count == 2 and g.pel[(1, 0)].delivery_time == 20
    assert g.pel[(2, 0)].delivery_count == 1  # deleted: not counted as a delivery


def test_claim_idle_moves_ownership_oldest_first():
    s = stream_with(3)
    g = cg.ConsumerGroup(b"g")
    a, _ = g.consumer(b"a", 0)
    b, _ = g.consumer(b"b", 0)
    cg.read_new(s, g, a, g.last_id, 1, False, now=100)
    cg.read_new(s, g, a, g.last_id, 1, False, now=200)
    assert cg.first_claimable(s, g, 150, now=240) == (False, 100)
    assert cg.first_claimable(s, g, 150, now=260) == (True, 100)
    got = cg.claim_idle(s, g, b, min_idle=150, count=0, now=260)
    assert [(i, idle, n) for i, _f, idle, n in got] == [((1, 0), 160, 1)]
    assert list(b.pel) == [(1, 0)] and list(a.pel) == [(2, 0)]
    assert g.pel[(1, 0)].delivery_count == 2


def test_ack_and_delete_consumer():
    s = stream_with(2)
    g = cg.ConsumerGroup(b"g")
    c, _ = g.consumer(b"c", 0)
    cg.read_new(s, g, c, g.last_id, 0, False, now=1)
    assert g.ack((1, 0)) and not g.ack((1, 0))
    assert g.delete_consumer(b"c") == 1
    assert not g.pel and not g.consumers


def test_entries_read_estimates_follow_redis():
    s = stream_with(4)
    assert cg.estimate_distance(s, (4, 0)) == 4           # the last entry: exact
    assert cg.estimate_distance(s, (1, 0)) == 1           # the first entry: exact
    assert cg.estimate_distance(s, (0, 5)) == 0           # before the first entry
    assert cg.estimate_distance(s, (9, 0)) == -1          # a future ID: unknown
    s.delete_ids([(2, 0)])
    assert cg.estimate_distance(s, (1, 0)) == -1          # before a deletion: unknown
    g = cg.ConsumerGroup(b"g", (1, 0), cg.ENTRIES_READ_UNKNOWN)
    assert cg.lag(s, g) is None
    s.trim(TrimSpec(maxlen=0))
    assert cg.lag(s, g) == 0 and s.range(MIN_ID, MAX_ID) == []
