"""The Spark reader's decoding of ``XRANGEORIGIN ... PACKED`` pages and its task planning (pipeline/source.py).

Pages are made by the region's own ``packed_blocks`` from logs built with
``crdt.blocks``; what the reader gets out of them must be exactly the log's live
entries in the range, whichever of its two decoders (whole-array columns or
entry by entry) reads the page.  No Spark and no region needed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from crdt.blocks import EntryLog, entry_starts
from crdt.ids import fmt
from node.commands.origins import packed_blocks
from pipeline.source import _decode_columns, _decode_entries, decode_page, last_id

MASTER = [b"ride", b"note"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

values = st.one_of(st.text(max_size=5), st.text(min_size=120, max_size=300)).map(str.encode)
entries = st.lists(st.tuples(
    st.one_of(st.integers(0, 3), st.integers(100, 1 << 40)),  # ms step: one-byte and long varint deltas
    st.integers(0, 300),  # seq when the ms moved (a negative seq delta within a block)
    st.one_of(st.tuples(values, values).map(lambda v: [MASTER[0], v[0], MASTER[1], v[1]]),
              st.tuples(values, values).map(lambda v: [b"other", v[0], "é".encode(), v[1]])),
    st.booleans(),  # deleted
), min_size=1, max_size=60)


def build(spec, own_fields: bool) -> tuple[EntryLog, list]:
    log, ms, seq, ids = EntryLog(), 1_000_000, 0, []
    for step, new_seq, flat, deleted in spec:
        if step:
            ms, seq = ms + step, new_seq
        else:
            seq += 1
        if not own_fields:
            flat = [MASTER[0], flat[1], MASTER[1], flat[3]]
        log.append((ms, seq), flat, 7, 1 << 20)
        ids.append(((ms, seq), deleted))
    for id_, deleted in ids:
        if deleted:
            log.delete(id_)
    return log, [i for i, _d in ids]


def rows(page) -> list:
    return [(r["id"], [x.encode() for kv in r["fields"] for x in kv],
             (r["timestamp"] - EPOCH) // timedelta(milliseconds=1))
            for r in page.record_batch("k", 1).to_pylist()]


@given(entries, st.booleans(), st.data())
def test_pages_decode_to_the_live_entries_of_the_range(spec, own_fields, data):
    log, ids = build(spec, own_fields)
    lo = data.draw(st.sampled_from([(0, 0), *ids]))
    hi = data.draw(st.sampled_from([((1 << 64) - 1, (1 << 64) - 1), *ids]))
    count = data.draw(st.sampled_from([1, 5, -1]))
    # what the reader asks for, "(lo" to hi, as the region answers it
    blocks = packed_blocks(log, (lo[0], lo[1] + 1), hi, count)
    expected = [(fmt(id_).decode(), flat, id_[0]) for id_, flat in log.range((0, 0), hi) if id_ > lo]
    if not blocks:
        assert expected == [] or count == 0
        return
    page, last = decode_page(blocks, lo, hi)
    got = rows(page)
    assert got == (expected if count < 0 else expected[:len(got)])
    assert last == _last_of(log, blocks) == last_id(blocks)
    firsts = [(int(b[0].split(b"-")[0]), int(b[0].split(b"-")[1])) for b in blocks]
    entry_by_entry = _decode_entries(blocks, firsts, lo, hi)
    assert rows(entry_by_entry[0]) == got and entry_by_entry[1] == last
    columns = _decode_columns(blocks, firsts, lo, hi)
    if own_fields:
        assert columns is None or rows(columns[0]) == got
    else:
        assert columns is not None  # the fast path reads every page whose entries use the master fields
        assert rows(columns[0]) == got and columns[1] == last


def _last_of(log: EntryLog, blocks: list):
    """The last ID (deleted or not) of the last block in the page."""
    first = blocks[-1][0]
    for b in log.blocks:
        if fmt(b.first) == first:
            return b.last
    raise AssertionError(first)


@given(entries, st.booleans())
def test_entry_starts_finds_every_entry_of_a_block(spec, own_fields):
    log, _ids = build(spec, own_fields)
    for block in log.blocks:
        out = [-1]
        assert entry_starts(bytes(block.buf), len(block.fields), 100, out) == len(block.decode())
        assert out == [-1] + [100 + offset for _id, _flat, _deleted, offset in block.decode()]


def test_short_ranges_are_grouped_into_tasks_of_at_most_partition_size_entries():
    from pipeline.braid import LogRange
    from pipeline.source import tasks

    ranges = [LogRange("a", "1", "0-0", "5-1", 500), LogRange("a", "1", "5-1", "9-1", 500),  # one long log, cut
              LogRange("a", "2", "0-0", "3-2", 40), LogRange("b", "1", "0-0", "4-1", 300),
              LogRange("c", "1", "0-0", "7-1", 200), LogRange("d", "3", "0-0", "8-3", 1)]
    got = tasks("redis://x", ranges, 500, 77)
    assert [t.ranges for t in got] == [ranges[0:1], ranges[1:2], ranges[2:4], ranges[4:6]]
    assert {(t.url, t.read_count) for t in got} == {("redis://x", 77)}
    assert [r for t in tasks("redis://x", ranges, 1, 77) for r in t.ranges] == ranges  # every range, in order
