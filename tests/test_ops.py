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
