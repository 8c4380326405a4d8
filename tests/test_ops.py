"""Operations are pure and deterministic: the same operations applied to two
empty keyspaces give identical streams (what replay and replication rely on)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import ops
from crdt.blocks import TrimSpec
from crdt.ids import MAX_ID, MIN_ID

KEYS = [b"a", b"b"]


@st.composite
def op_lists(draw):
    out, top = [], {k: 0 for k in KEYS}
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["add", "add", "add", "trim", "del", "delkey", "group", "rename", "setid"]))
        key = draw(st.sampled_from(KEYS))
        if kind == "add":
            top[key] += draw(st.integers(1, 3))
            out.append(ops.AddEntry(key, 1, (top[key], 0), [b"f", b"%d" % top[key]]))
        elif kind == "trim":
            out.append(ops.Trim(key, TrimSpec(maxlen=draw(st.integers(0, 5)), approx=draw(st.booleans()),
                                              limit=100)))
        elif kind == "del":
            out.append(ops.DeleteEntries(key, [(draw(st.integers(1, max(top[key], 1))), 0)]))
        elif kind == "delkey":
            out.append(ops.DeleteKey(key))
        elif kind == "group":
            out.append(ops.CreateGroup(key, b"g", MIN_ID, -1, mkstream=True))
        elif kind == "rename":
            out.append(ops.RenameKey(key, draw(st.sampled_from(KEYS))))
            top = {k: max(top.values()) for k in KEYS}  # IDs must stay above any moved stream
        else:
            out.append(ops.SetStreamId(key, (top[key] + 10, 0)))
            top[key] += 10
    return out


def snapshot(keys: dict) -> dict:
    return {
        k: (s.range(MIN_ID, MAX_ID), s.last_id, s.first_id, s.max_deleted_id, s.entries_added,
            sorted(s.groups), s.node_count)
        for k, s in sorted(keys.items())
    }


@settings(max_examples=150, deadline=None)
@given(op_list=op_lists(), max_entries=st.integers(1, 5))
def test_apply_is_deterministic(op_list, max_entries):
    limits = ops.Limits(node_max_entries=max_entries)
    one = ops.Keyspace()
    two = ops.Keyspace()
    for op in op_list:
        r1 = ops.apply(one, op, limits)
        r2 = ops.apply(two, op, limits)
        assert r1 == r2
    assert snapshot(one) == snapshot(two)


def test_rename_moves_everything():
    keys = ops.Keyspace()
    ops.apply(keys, ops.AddEntry(b"src", 1, (1, 0), [b"f", b"v"]))
    ops.apply(keys, ops.CreateGroup(b"src", b"g", MIN_ID, -1))
    ops.apply(keys, ops.AddEntry(b"dst", 1, (5, 0), [b"x", b"y"]))
    assert ops.apply(keys, ops.RenameKey(b"src", b"dst")) is True
    assert list(keys) == [b"dst"]
    assert keys[b"dst"].range(MIN_ID, MAX_ID) == [((1, 0), [b"f", b"v"])]
    assert list(keys[b"dst"].groups) == [b"g"]
    assert ops.apply(keys, ops.RenameKey(b"nope", b"x")) is False


# ------------------------------------------------------------------ IDMP across regions
PID, X = b"producer", b"iid-x"


def _idmp_add(origin: int, n: int, id_, iid: bytes = X, deps: dict | None = None) -> ops.AddEntry:
    return ops.AddEntry(b"k", origin, id_, [b"iid", iid], PID, iid, dot=(origin, n), deps=deps or {})


def _entries(keys: ops.Keyspace) -> list:
    return [e[0] for e in keys[b"k"].range(MIN_ID, MAX_ID)]


def test_a_concurrent_idmp_duplicate_converges_even_past_the_size_window():
    """Found by the chaos suite (braid-chaos run --faults pause --seed 11): region 1 let the
    iid go (its producer's map passed IDMP-MAXSIZE) before region 2's concurrent duplicate
    arrived, so region 1 kept both entries while region 2 kept one."""
    limits = ops.Limits(idmp_maxsize=2)
    a = _idmp_add(1, 1, (10, 1))                       # region 1's add of X
    b = _idmp_add(2, 1, (5, 2))                        # region 2's, concurrent (deps: nothing of region 1)
    others = [_idmp_add(1, n, (10 + n, 1), iid=b"other-%d" % n, deps={1: n - 1}) for n in range(2, 6)]
    r1, r2 = ops.Keyspace(active_active=True), ops.Keyspace(active_active=True)
    for op in [a, *others, b]:
        ops.apply(r1, op, limits)
    for op in [b, a, *others]:
        ops.apply(r2, op, limits)
    assert _entries(r1) == _entries(r2) and (10, 1) not in _entries(r1) and (5, 2) in _entries(r1)
    assert r1[b"k"].idmp.lookup(PID, X) == r2[b"k"].idmp.lookup(PID, X) == (5, 2)
    assert len(r1[b"k"].idmp.producers[PID]) == 5  # past IDMP-MAXSIZE until the adds are stable


def test_an_iid_leaves_the_map_only_once_stable_and_a_later_add_is_kept_everywhere():
    limits = ops.Limits(idmp_maxsize=1)
    a = _idmp_add(1, 1, (10, 1))
    newer = _idmp_add(1, 2, (11, 1), iid=b"newer", deps={1: 1})
    r1, r3 = ops.Keyspace(active_active=True), ops.Keyspace(active_active=True)
    for keys in (r1, r3):
        ops.apply(keys, a, limits)
        ops.apply(keys, newer, limits)
    m1 = r1[b"k"].idmp
    assert m1.expire(0, stable={1: 0}) == 0 and m1.lookup(PID, X) == (10, 1)  # not stable: kept
    assert m1.expire(0, stable={1: 2}) == 1 and m1.lookup(PID, X) is None     # stable and past the size
    # region 2 had let X go too, and adds it again on purpose, after seeing region 1's add
    again = _idmp_add(2, 1, (20, 2), deps={1: 2})
    ops.apply(r1, again, limits)   # forgot X: a new entry
    ops.apply(r3, again, limits)   # still holds X -> (10, 1), but the add came after it: kept too
    assert _entries(r1) == _entries(r3) == [(10, 1), (11, 1), (20, 2)]
