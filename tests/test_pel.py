"""The PEL's map (crdt/pel.py) against a plain dict read in sorted order."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from crdt.pel import PendingMap

ids = st.tuples(st.integers(0, 40), st.integers(0, 3))
ops = st.lists(st.one_of(
    st.tuples(st.just("set"), ids, st.integers()),
    st.tuples(st.just("append"), st.integers(1, 3), st.integers()),  # above every ID, as deliveries are
    st.tuples(st.just("pop"), ids, st.none()),
    st.tuples(st.just("pop_head"), st.none(), st.none()),  # as XACK of the oldest is
), max_size=300)


@settings(max_examples=300)
@given(ops, st.sampled_from([1, 2, 4, 512]))
def test_the_map_agrees_with_a_sorted_dict_after_any_changes(changes, load):
    pm = PendingMap((), load)
    ref: dict = {}
    top = (41, 0)
    for op, key, value in changes:
        if op == "append":
            top = (top[0] + key, 0)
            key = top
        if op in ("set", "append"):
            pm[key] = value
            ref[key] = value
        elif op == "pop":
            assert pm.pop(key) == ref.pop(key, None)
        elif ref:
            head = min(ref)
            del pm[head]
            del ref[head]
        pm.check()
    keys = sorted(ref)
    assert list(pm) == list(pm.keys()) == keys
    assert list(pm.items()) == [(k, ref[k]) for k in keys]
    assert list(pm.values()) == [ref[k] for k in keys]
    assert len(pm) == len(ref) and bool(pm) == bool(ref)
    assert pm == ref and pm == PendingMap(ref.items(), 3) and (pm != {**ref, (99, 0): 1})
    if keys:
        assert (pm.first(), pm.last()) == (keys[0], keys[-1])
    for k in [(0, 0), (7, 1), (20, 3), (41, 0)] + keys[:3]:
        assert (k in pm) == (k in ref) and pm.get(k) == ref.get(k)
    for lo, hi in [((0, 0), (1 << 64, 0)), ((5, 0), (20, 2)), ((20, 2), (5, 0)), ((13, 1), (13, 1))]:
        assert list(pm.irange(lo, hi)) == [k for k in keys if lo <= k <= hi]


def test_a_deep_copy_keeps_values_shared_between_two_maps_shared():
    shared = [1]
    a, b = PendingMap([((1, 0), shared)]), PendingMap([((1, 0), shared), ((2, 0), [2])])
    a2, b2 = copy.deepcopy((a, b))
    assert a2[(1, 0)] is b2[(1, 0)] and a2[(1, 0)] is not shared and a2[(1, 0)] == [1]
    b2[(3, 0)] = 3
    assert list(b) == [(1, 0), (2, 0)] and list(b2) == [(1, 0), (2, 0), (3, 0)]


def test_missing_keys_behave_as_a_dicts():
    pm = PendingMap()
    assert pm.pop((1, 0)) is None and pm.pop((1, 0), "x") == "x" and pm.get((1, 0), 5) == 5
    for attempt in (lambda: pm[(1, 0)], lambda: pm.__delitem__((1, 0))):
        try:
            attempt()
        except KeyError:
            pass
        else:
            raise AssertionError("no KeyError")
    assert list(pm.irange((0, 0), (9, 9))) == [] and not pm
