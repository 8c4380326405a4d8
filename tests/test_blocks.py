"""The packed per-origin entry log (crdt/blocks.py), tested as pure code."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crdt.blocks import EntryLog, TrimSpec, lp_int_size, lp_str_size
from crdt.ids import U64


def fill(n: int, max_entries: int = 100, max_bytes: int = 4096, start: int = 1) -> EntryLog:
    log = EntryLog()
    for i in range(start, start + n):
        log.append((i, 0), [b"f", b"v%d" % i], max_entries, max_bytes)
    return log


def test_listpack_sizes_follow_redis_encoding():
    assert lp_int_size(0) == 2 and lp_int_size(127) == 2 and lp_int_size(128) == 3
    assert lp_int_size(-4096) == 3 and lp_int_size(40000) == 5 and lp_int_size(2**40) == 10
    assert lp_str_size(b"12") == 2          # integer-looking strings are packed as integers
    assert lp_str_size(b"012") == 5         # ... but not with a leading zero
    assert lp_str_size(b"abc") == 5         # 1 header + 3 + 1 back-length
    assert lp_str_size(b"x" * 64) == 67     # 2-byte header from 64 bytes on


def test_blocks_split_by_entry_count():
    log = fill(250, max_entries=100)
    assert [len(b.decode()) for b in log.blocks] == [100, 100, 50]
    assert log.firsts == [(1, 0), (101, 0), (201, 0)]


def test_blocks_split_by_bytes():
    log = EntryLog()
    for i in range(1, 50):
        log.append((i, 0), [b"field", b"x" * 30], 0, 200)
    assert len(log.blocks) > 1
    assert all(b.lp_bytes < 200 + 40 for b in log.blocks)


def test_round_trip_with_extreme_ids_and_field_shapes():
    log = EntryLog()
    ids = [(5, 10), (6, 0), (6, 1), (2**40, 3), (U64, 0), (U64, U64)]
    rows = [[b"a", b"1"], [b"a", b"2"], [b"b", b"x", b"c", b""], [b"a", b"y" * 300],
            [b"k" * 200, b"v"], [b"a", b"z"]]
    for id_, flat in zip(ids, rows, strict=True):
        log.append(id_, flat, 100, 10**9)
    assert list(log.range((0, 0), (U64, U64))) == list(zip(ids, rows, strict=True))
    assert list(log.revrange((0, 0), (U64, U64))) == list(zip(ids, rows, strict=True))[::-1]
    assert log.get((6, 1)) == [b"b", b"x", b"c", b""]


def test_delete_flags_then_drops_empty_block():
    log = fill(3, max_entries=2)
    assert log.delete((1, 0)) and not log.delete((1, 0))
    assert len(log.blocks) == 2 and log.length == 2
    assert log.delete((2, 0))
    assert len(log.blocks) == 1 and log.firsts == [(3, 0)]


def test_approx_maxlen_removes_whole_blocks_only():
    log = fill(250, max_entries=100)
    assert log.trim(TrimSpec(maxlen=120, approx=True, limit=10000), None, True) == 100
    assert log.length == 150
    assert log.trim(TrimSpec(maxlen=120, approx=True, limit=10000), None, True) == 0


def test_exact_trim_flags_inside_a_block():
    log = fill(250, max_entries=100)
    assert log.trim(TrimSpec(maxlen=120), None, True) == 130
    assert next(iter(log.range((0, 0), (U64, U64))))[0] == (131, 0)


def test_limit_stops_trimming():
    log = fill(250, max_entries=100)
    assert log.trim(TrimSpec(maxlen=0, approx=True, limit=150), None, True) == 100


def test_minid_and_acked_strategy():
    log = fill(10, max_entries=4)
    keep = {(2, 0), (3, 0)}
    removed = log.trim(TrimSpec(minid=(6, 0)), lambda i: i not in keep, False)
    assert removed == 3
    assert [i for i, _ in log.range((0, 0), (U64, U64))][:3] == [(2, 0), (3, 0), (6, 0)]


class BlockModel:
    """Redis's stream layout, written from its description and not from crdt/blocks.py: nodes of
    at most ``max_entries`` entries (live and deleted), an XDEL flags an entry and a node with no
    live entry goes; ``streamTrim`` removes whole nodes while the rest is still long enough (or,
    for MINID, while the node's last entry is below it), stops at LIMIT, and - unless ``~`` -
    then flags entries one by one in the first node that cannot go whole."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.nodes: list[list[list]] = []   # [[id, flat, deleted], ...] per node

    @property
    def length(self) -> int:
        return sum(not dead for node in self.nodes for _i, _f, dead in node)

    def live(self) -> list:
        return [(i, f) for node in self.nodes for i, f, dead in node if not dead]

    def append(self, id_, flat) -> None:
        if not self.nodes or len(self.nodes[-1]) >= self.max_entries:
            self.nodes.append([])
        self.nodes[-1].append([id_, flat, False])

    def delete(self, id_) -> bool:
        for node in self.nodes:
            for row in node:
                if row[0] == id_ and not row[2]:
                    row[2] = True
                    if all(dead for _i, _f, dead in node):
                        self.nodes.remove(node)
                    return True
        return False

    def trim(self, maxlen, minid, approx: bool, limit: int) -> int:
        removed = 0
        while self.nodes:
            if maxlen is not None and self.length <= maxlen:
                break
            node = self.nodes[0]
            live = sum(not dead for _i, _f, dead in node)
            if limit and removed + live > limit:
                break
            whole = self.length - live >= maxlen if maxlen is not None else node[-1][0] < minid
            if whole:
                self.nodes.pop(0)
                removed += live
                continue
            if approx:
                break
            for row in node:
                if (maxlen is not None and self.length <= maxlen) or (maxlen is None and row[0] >= minid):
                    break
                if not row[2]:
                    row[2] = True
                    removed += 1
            break
        return removed


trims = st.one_of(
    st.tuples(st.just("maxlen"), st.integers(0, 40), st.booleans(), st.sampled_from([0, 0, 3, 7])),
    st.tuples(st.just("minid"), st.integers(0, 120), st.booleans(), st.sampled_from([0, 0, 3, 7])),
)


@settings(max_examples=150, deadline=None)
@given(script=st.lists(st.one_of(st.tuples(st.just("add"), st.integers(0, 40)),
                                 st.tuples(st.just("del"), st.integers(0, 40)), trims), max_size=120),
       max_entries=st.integers(1, 6))
def test_log_matches_an_independent_model_of_the_node_layout(script, max_entries):
    """Whatever the block layout, reads, counts, node counts and trims equal the model's."""
    log, model, top = EntryLog(), BlockModel(max_entries), 0
    for step in script:
        op, n = step[0], step[1]
        if op == "add":
            top += 1 + n % 3
            id_ = (top, n % 4)
            flat = [b"f", b"%d" % n] if n % 2 else [b"g%d" % n, b"v"]
            log.append(id_, flat, max_entries, 4096)
            model.append(id_, flat)
        elif op == "del":
            live = model.live()
            target = live[n % len(live)][0] if live else (n, 0)
            assert log.delete(target) == model.delete(target)
        else:
            approx, limit = step[2], step[3]
            maxlen, minid = (n, None) if op == "maxlen" else (None, (n, 0))
            want = model.trim(maxlen, minid, approx, limit)
            spec = TrimSpec(maxlen=maxlen, approx=approx, limit=limit) if maxlen is not None else \
                TrimSpec(minid=minid, approx=approx, limit=limit)
            assert log.trim(spec, None, True) == want, step
        assert log.length == model.length
        assert len(log.blocks) == len(model.nodes)
        assert list(log.range((0, 0), (U64, U64))) == model.live()


def test_a_counted_read_of_several_origin_logs_decodes_only_what_it_returns():
    """``Stream.range`` / ``revrange`` with a count over several origin logs (XINFO STREAM's
    first and last entry, XREAD with MAXCOUNT, XINFO FULL) stop the merge once they have
    ``count`` entries: only the block each log's first entries are in gets decoded.  (The
    compiled build once ran the whole merge first: every block of every log, every time.)"""
    from crdt.stream import Stream

    s = Stream()
    for ms in range(1, 601):
        origin = 1 + ms % 3
        s.add(origin, (ms, origin), [b"f", b"%d" % ms], 10, 4096)  # 20 blocks per log
    assert s.range((0, 0), (10**6, 0), 2) == [((1, 2), [b"f", b"1"]), ((2, 3), [b"f", b"2"])]
    assert all(len(log._cache) == 1 for log in s.logs.values())
    assert s.first_entry() == ((1, 2), [b"f", b"1"])
    assert s.last_entry() == ((600, 1), [b"f", b"600"])
    assert all(len(log._cache) == 2 for log in s.logs.values())  # its first and its last block
    assert s.revrange((0, 0), (10**6, 0), 3) == [((600, 1), [b"f", b"600"]), ((599, 3), [b"f", b"599"]),
                                                  ((598, 2), [b"f", b"598"])]
    assert all(len(log._cache) == 2 for log in s.logs.values())
