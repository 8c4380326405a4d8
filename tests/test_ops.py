"""Operations are pure and deterministic: the same operations, built and applied
independently - one copy straight from the script, the other after a round trip
through the replication codec (node/activeactive/opcodec.py), as a peer or a replay sees them -
give identical keyspaces, and both agree with a plain model of the streams
(what replay and replication rely on)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crdt import ops
from crdt.blocks import TrimSpec
from crdt.ids import MAX_ID, MIN_ID
from node.activeactive import opcodec

KEYS = [b"a", b"b"]


@st.composite
def scripts(draw):
    """Plain tuples describing operations (no operation objects: each side builds its own)."""
    out, top = [], {k: 0 for k in KEYS}
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["add", "add", "add", "trim", "del", "delkey", "group", "rename", "setid",
                                          "flush"]))
        key = draw(st.sampled_from(KEYS))
        if kind == "add":
            top[key] += draw(st.integers(1, 3))
            out.append(("add", key, top[key]))
        elif kind == "trim":
            out.append(("trim", key, draw(st.integers(0, 5)), draw(st.booleans())))
        elif kind == "del":
            out.append(("del", key, draw(st.integers(1, max(top[key], 1)))))
        elif kind == "delkey":
            out.append(("delkey", key))
        elif kind == "group":
            out.append(("group", key))
        elif kind == "flush":
            out.append(("flush", key))
        elif kind == "rename":
            out.append(("rename", key, draw(st.sampled_from(KEYS))))
            top = {k: max(top.values()) for k in KEYS}  # IDs must stay above any moved stream
        else:
            top[key] += 10
            out.append(("setid", key, top[key]))
    return out


def build(step: tuple) -> ops.Op:
    kind, key, *args = step
    if kind == "add":
        return ops.AddEntry(key, 1, (args[0], 0), [b"f", b"%d" % args[0]])
    if kind == "trim":
        return ops.Trim(key, TrimSpec(maxlen=args[0], approx=args[1], limit=100))
    if kind == "del":
        return ops.DeleteEntries(key, [(args[0], 0)])
    if kind == "delkey":
        return ops.DeleteKey(key)
    if kind == "group":
        return ops.CreateGroup(key, b"g", MIN_ID, -1, mkstream=True)
    if kind == "rename":
        return ops.RenameKey(key, args[0])
    if kind == "flush":
        return ops.FlushKeys(b"")
    return ops.SetStreamId(key, (args[0], 0))


def snapshot(keys: dict) -> dict:
    return {
        k: (s.range(MIN_ID, MAX_ID), s.last_id, s.first_id, s.max_deleted_id, s.entries_added,
            sorted(s.groups), s.node_count)
        for k, s in sorted(keys.items())
    }


def model_step(model: dict, step: tuple, after: dict) -> None:
    """The plain model: key -> {id: fields} of live entries, groups aside.  An approximate
    trim may keep more than asked (whole blocks only): the model takes the implementation's
    survivors, but only after checking they are the newest entries and no fewer than asked."""
    kind, key, *args = step
    live = model.get(key)
    if kind == "add":
        model.setdefault(key, {})[(args[0], 0)] = [b"f", b"%d" % args[0]]
    elif kind == "trim" and live is not None:
        ordered = sorted(live)
        if args[1]:
            kept = [i for i, _ in after[key].range(MIN_ID, MAX_ID)] if key in after else []
            assert kept == ordered[len(ordered) - len(kept):], "an approximate trim kept a non-suffix"
            assert len(kept) >= min(args[0], len(ordered)), "an approximate trim removed too much"
            assert len(ordered) - len(kept) <= 100, "an approximate trim went past its LIMIT"
        else:
            kept = ordered[max(len(ordered) - args[0], 0):]
        model[key] = {i: live[i] for i in kept}
    elif kind == "del" and live is not None:
        live.pop((args[0], 0), None)
    elif kind == "delkey":
        model.pop(key, None)
    elif kind == "flush":
        model.clear()
    elif kind == "group":
        model.setdefault(key, {})
    elif kind == "rename" and live is not None:
        model[args[0]] = model.pop(key)


@settings(max_examples=150, deadline=None)
@given(script=scripts(), max_entries=st.integers(1, 5))
def test_apply_is_deterministic(script, max_entries):
    limits = ops.Limits(node_max_entries=max_entries)
    direct, decoded, model = ops.Keyspace(), ops.Keyspace(), {}
    for step in script:
        op = build(step)
        raw = opcodec.encode(build(step))
        wire = opcodec.decode(raw)  # another object, as a peer reads it
        assert wire is not op and type(wire) is type(op) and opcodec.encode(wire) == raw
        r1 = ops.apply(direct, op, limits)
        r2 = ops.apply(decoded, wire, limits)
        assert r1 == r2, step
        model_step(model, step, direct)
        got = {k: dict((i, f) for i, f in s.range(MIN_ID, MAX_ID)) for k, s in direct.items()}
        assert got == model, step
    assert snapshot(direct) == snapshot(decoded)


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


def test_append_entry_is_apply_of_an_add_without_idmp():
    """What a replay calls per XADD record: the same stream, ID floor and restored IDMP maps as
    applying the AddEntry, in a one-region and an Active-Active keyspace."""
    limits = ops.Limits(node_max_entries=2)
    for active_active in (False, True):
        applied, appended = ops.Keyspace(active_active=active_active), ops.Keyspace(active_active=active_active)
        kept = {}
        for keys in (applied, appended):  # a dropped key's IDMP maps, taken back when it is created again
            kept[id(keys)] = keys.idmp_kept[b"k"] = ops.Stream(5, 5).idmp
        for n, (origin, id_) in enumerate([(1, (5, 1)), (2, (5, 2)), (1, (7, 1)), (2, (6, 2))]):
            fields = [b"f", b"v%d" % n, b"g", b"w"]
            assert ops.apply(applied, ops.AddEntry(b"k", origin, id_, list(fields)), limits) == id_
            ops.append_entry(appended, b"k", origin, id_, list(fields), limits)
        a, b = applied[b"k"], appended[b"k"]
        assert (a.last_id, a.first_id, a.entries_added, a.length) == (b.last_id, b.first_id, b.entries_added, b.length)
        assert a.last_id == (7, 1) and a.first_id == (5, 1) and a.length == 4
        assert [list(log.blocks[i].buf for i in range(len(log.blocks))) for log in a.logs.values()] == \
               [list(log.blocks[i].buf for i in range(len(log.blocks))) for log in b.logs.values()]
        assert applied.id_floor == appended.id_floor == ({b"k": (7, 1)} if active_active else {})
        assert a.idmp is kept[id(applied)] and b.idmp is kept[id(appended)] and not appended.idmp_kept
