"""Range replies built from the decoded blocks' memos (node/commands/entryreply.py) equal the
replies built entry by entry, in values and in bytes, while the log changes under them."""

from __future__ import annotations

from itertools import islice
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import groups as cg
from crdt.blocks import TrimSpec
from crdt.ids import MAX_ID, MIN_ID, incr
from crdt.stream import Stream
from node.commands.entryreply import first_entry, range_entries, revrange_entries
from node.commands.xread import GT_GROUP, _group_rows
from node.resp.encoder import Entries, to_bytes
from node.resp.entries import MEMO_ENTRY_MAX


def _reference(s: Stream, start, end, count: int) -> list:
    """Entry by entry, from the logs' generators (``EntryLog.range``)."""
    merged = ((eid, flat) for eid, _origin, flat in s.merged(start, end))
    return [[b"%d-%d" % eid, flat] for eid, flat in (islice(merged, count) if count else merged)]


def _check_rev(s: Stream, start, end, count: int) -> None:
    got = revrange_entries(s, start, end, count)
    want = [[b"%d-%d" % eid, flat] for eid, flat in s.revrange(start, end, count)]  # EntryLog.revrange
    assert got == want
    for resp3 in (False, True):
        assert to_bytes(got, resp3) == to_bytes(Entries(want), resp3)


def _check(s: Stream, start, end, count: int) -> None:
    ids: list = []
    got = range_entries(s, start, end, count, ids)
    want = _reference(s, start, end, count)
    assert [b"%d-%d" % eid for eid in ids] == [row[0] for row in want]  # what XREADGROUP delivers
    assert [[b"%d-%d" % eid, flat] for eid, flat in s.range(start, end, count)] == want  # range_list
    assert type(got) is Entries
    assert got == want
    for resp3 in (False, True):
        assert to_bytes(got, resp3) == to_bytes(Entries(want), resp3)
    if count == 1 and len(s.logs) == 1:  # a consumer's COUNT 1 read (XREADGROUP's shortcut)
        one_ids: list = []
        one = first_entry(next(iter(s.logs.values())), start, end, one_ids)
        if one is not None:  # None: the first block's run has no live entry; the general reader goes on
            assert type(one) is Entries and one == want and one_ids == ids
            for resp3 in (False, True):
                assert to_bytes(one, resp3) == to_bytes(Entries(want), resp3)


_op = st.one_of(
    st.tuples(st.just("add"), st.integers(1, 6), st.booleans()),
    st.tuples(st.just("del"), st.integers(0, 60)),
    st.tuples(st.just("trim"), st.integers(0, 40)),
    st.tuples(st.just("read"), st.integers(0, 70), st.integers(0, 70), st.integers(0, 12)),
    st.tuples(st.just("origin"), st.integers(2, 3)),
    st.tuples(st.just("twins"), st.integers(1, 3)),
    st.tuples(st.just("walk"), st.integers(1, 3), st.integers(0, 30)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_op, max_size=60))
def test_range_entries_match_the_entry_by_entry_reply(script):
    s = Stream()
    ms = 0
    origin = 1
    for op in script:
        if op[0] == "add":
            for _ in range(op[1]):
                ms += 1
                flat = [b"f", b"%d" % ms] if op[2] else [b"g%d" % (ms % 3), b"v" * (ms % 5)]
                s.add(origin, (ms, origin), flat, 4, 0)  # 4 entries a block: many blocks
        elif op[0] == "del":
            s.delete_ids([(op[1], 1)])
        elif op[0] == "trim":
            s.trim(TrimSpec(maxlen=op[1]))
        elif op[0] == "origin":
            origin = op[1]  # a second origin log: the merged path
        elif op[0] == "twins":  # one ID in two origin logs (full IDs outside strict mode)
            ms += 1
            for o in (1, op[1]) if op[1] != 1 else (1, 2):
                s.add(o, (ms, 0), [b"twin", b"%d" % o], 4, 0)
        elif op[0] == "walk":  # a reader going on in order, a few entries at a time (XREADGROUP >)
            cursor = (op[2], 0)
            while cursor is not None:
                ids: list = []
                range_entries(s, cursor, MAX_ID, op[1], ids)
                _check(s, cursor, MAX_ID, op[1])
                cursor = incr(ids[-1]) if ids else None
        else:
            lo, hi = sorted(op[1:3])
            _check(s, (lo, 0), (hi, 9), op[3])
            _check_rev(s, (lo, 0), (hi, 9), op[3])
        _check(s, MIN_ID, MAX_ID, 0)
        _check_rev(s, MIN_ID, MAX_ID, 0)


def test_a_memoized_tail_block_sees_later_appends_and_deletions():
    s = Stream()
    for ms in range(1, 4):
        s.add(1, (ms, 0), [b"f", b"%d" % ms], 100, 0)
    first = range_entries(s, MIN_ID, MAX_ID, 0)
    s.add(1, (4, 0), [b"f", b"4"], 100, 0)
    assert [r[0] for r in range_entries(s, MIN_ID, MAX_ID, 0)] == [b"1-0", b"2-0", b"3-0", b"4-0"]
    s.delete_ids([(2, 0)])
    again = range_entries(s, MIN_ID, MAX_ID, 0)
    assert [r[0] for r in again] == [b"1-0", b"3-0", b"4-0"]
    assert to_bytes(again).startswith(b"*3\r\n*2\r\n$3\r\n1-0\r\n")
    assert [r[0] for r in first] == [b"1-0", b"2-0", b"3-0"]  # a reply already made stays as it was
    assert range_entries(s, MIN_ID, MAX_ID, 2) == [[b"1-0", [b"f", b"1"]], [b"3-0", [b"f", b"3"]]]


def test_a_changed_entries_value_is_encoded_from_its_rows():
    s = Stream()
    s.add(1, (1, 0), [b"f", b"1"], 100, 0)
    rows = range_entries(s, MIN_ID, MAX_ID, 0)
    rows.append([b"9-0", [b"x", b"y"]])
    assert to_bytes(rows) == to_bytes(Entries(list(rows)))


def test_a_large_entry_keeps_no_encoding_and_its_reply_is_encoded_row_by_row():
    s = Stream()
    big = b"x" * (MEMO_ENTRY_MAX + 1)
    s.add(1, (1, 0), [b"f", b"1"], 100, 0)
    s.add(1, (2, 0), [b"f", big], 100, 0)
    reply = range_entries(s, MIN_ID, MAX_ID, 0)
    assert reply.parts is None
    assert to_bytes(reply) == to_bytes(Entries([[b"1-0", [b"f", b"1"]], [b"2-0", [b"f", big]]]))
    assert range_entries(s, MIN_ID, (1, 0), 0).parts is not None  # the small one alone: joined
    ids: list = []
    one = first_entry(next(iter(s.logs.values())), (2, 0), MAX_ID, ids)  # a group read of COUNT 1
    assert one is not None and one.parts is None and ids == [(2, 0)]
    assert to_bytes(one) == to_bytes(Entries([[b"2-0", [b"f", big]]]))


@pytest.mark.parametrize("noack", [False, True])
def test_an_active_active_group_read_of_one_origin_log_is_the_per_origin_read(noack):
    """XREADGROUP ``>`` at a region of a cluster, on a stream holding one origin log, replies
    from the memos: the same entries, cursors, entries-read and pending entries as the read
    over every origin log after its own cursor (``read_new_per_origin``), including after a
    replicated ack watermark moved that log's cursor ahead and after deletions."""
    def build():
        s = Stream()
        for i in range(1, 301):
            s.add(2, (1000 + i, 2), [b"f", b"%d" % i], 100, 4096)
        s.delete_ids([(1000 + i, 2) for i in range(5, 300, 7)])
        return s, cg.ConsumerGroup(b"g", MIN_ID, 0)

    (memo_s, memo_g), (ref_s, ref_g) = build(), build()
    args = SimpleNamespace(noack=noack)
    for step, count in enumerate([1, 1, 3, 10, 2, 1, 0]):
        if step == 3:  # another region's acks moved the log's cursor past what was read here
            memo_g.watermarks[2] = ref_g.watermarks[2] = (1000 + 40, 2)
        if step == 5:
            memo_s.delete_ids([(1000 + 60, 2)])
            ref_s.delete_ids([(1000 + 60, 2)])
        mine, _ = memo_g.consumer(b"c", step)
        theirs, _ = ref_g.consumer(b"c", step)
        rows, delivered = _group_rows(memo_s, memo_g, mine, GT_GROUP, args, count, -1, False, False, step, None)
        want = cg.read_new_per_origin(ref_s, ref_g, theirs, count, noack, step)
        assert rows == [[b"%d-%d" % eid, flat] for eid, flat in want] and delivered == bool(want)
        assert want and getattr(rows, "parts", None) is not None  # from the memos
        assert (memo_g.cursors, memo_g.last_id, memo_g.entries_read) \
            == (ref_g.cursors, ref_g.last_id, ref_g.entries_read)
        assert list(memo_g.pel) == list(ref_g.pel) and list(mine.pel) == list(theirs.pel)
        assert [(n.delivery_time, n.delivery_count) for n in memo_g.pel.values()] == \
            [(n.delivery_time, n.delivery_count) for n in ref_g.pel.values()]
    rows, delivered = _group_rows(memo_s, memo_g, mine, GT_GROUP, args, 1, -1, False, False, 9, None)
    assert rows == [] and not delivered  # nothing left after the cursor


def test_a_runs_slice_is_taken_whole_either_way_and_an_empty_one_adds_nothing():
    from node.commands.entryreply import _take_run

    entries = [((n, 0), [b"f", b"%d" % n], False, 0) for n in range(1, 5)]
    for i, j, descending, want in [(0, 4, False, [1, 2, 3, 4]), (0, 4, True, [4, 3, 2, 1]), (1, 3, True, [3, 2]),
                                   (0, 0, True, []), (2, 2, True, []), (0, 0, False, [])]:
        rows: list = []
        encs: list = []
        ids: list = []
        _take_run((entries, [], i, j, 0), 0, rows, encs, ids, descending)
        assert [r[0] for r in rows] == [b"%d-0" % n for n in want] and ids == [(n, 0) for n in want]
        assert len(encs) == len(rows)
