"""The two resolvers (crdt/resolve.py): one region's Redis rules, and the multi-region ones."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from crdt import ops
from crdt.blocks import TrimSpec
from crdt.causal import CausalLog
from crdt.resolve import ActiveActive, SingleRegion


@dataclass
class Rules:
    causal: CausalLog = field(default_factory=lambda: CausalLog(2))
    mode: str = "strict"
    region: int = 2
    stride: int = 16


def _apply_all(keys, resolver, rules, steps):
    """Apply resolved operations one by one, stamping each as the region does."""
    out = []
    for op in steps:
        ops.apply(keys, op)
        rules.causal.stamp(b"op")
        out.append(op)
    return out


def _stream(keys, key, ids, origin=1):
    for i in ids:
        ops.apply(keys, ops.AddEntry(key, origin, (i, origin), [b"f", b"v"]))


def test_single_region_follows_redis():
    keys = ops.Keyspace()
    _stream(keys, b"s", [5, 6])
    r = SingleRegion()
    assert r.top_id(keys, b"s") == (6, 1)
    assert r.new_id((6, 1), 3, None, False, False) == (6, 2)  # the clock behind the top: next sequence
    assert r.delete_key(b"s", keys[b"s"]) == ops.DeleteKey(b"s")
    assert list(r.rename(keys, b"s", b"t")) == [ops.RenameKey(b"s", b"t")]
    assert list(r.ack_watermarks(b"s", b"g", keys[b"s"], None)) == []
    assert r.trim(keys[b"s"], b"s", TrimSpec(maxlen=5), ops.KEEPREF) is not None  # even with nothing to trim


def test_active_active_ids_carry_the_region_number():
    rules = Rules()
    r = ActiveActive(rules)
    assert r.new_id((0, 0), 115, None, False, False) == (115, 2)
    assert r.new_id((115, 2), 115, None, False, False) == (115, 18)
    rules.mode = "liberal"  # the resolver reads the tuned mode live
    assert r.new_id((115, 2), 115, None, False, False) == (115, 3)


def test_active_active_trim_resolves_cutoffs_or_nothing():
    keys = ops.Keyspace(active_active=True)
    _stream(keys, b"s", [1, 2, 3], origin=1)
    _stream(keys, b"s", [4], origin=3)
    r = ActiveActive(Rules())
    assert r.trim(keys[b"s"], b"s", TrimSpec(maxlen=4), ops.KEEPREF) is None
    op = r.trim(keys[b"s"], b"s", TrimSpec(maxlen=1), ops.ACKED)
    assert op.cutoffs == {1: (3, 1)} and op.strategy == ops.KEEPREF


def test_active_active_rename_resolves_each_step_after_the_previous():
    rules = Rules()
    keys = ops.Keyspace(active_active=True)
    _stream(keys, b"src", [1, 2])
    _stream(keys, b"dst", [9])
    r = ActiveActive(rules)
    done = _apply_all(keys, r, rules, r.rename(keys, b"src", b"dst"))
    assert [type(op) for op in done] == [ops.DeleteKey, ops.AddEntry, ops.AddEntry, ops.DeleteKey]
    first, last = done[0], done[-1]
    assert first.context == {2: 1} and first.observed == {1: (9, 1)}
    assert last.context == {2: 4}  # resolved after the three operations before it were applied
    assert b"src" not in keys and [e[0] for e in keys[b"dst"].range((0, 0), (2**64 - 1,) * 2)] == [(1, 1), (2, 1)]


def test_active_active_group_creation_carries_deps_dot_and_cursors():
    rules = Rules()
    rules.causal.stamp(b"earlier")
    keys = ops.Keyspace(active_active=True)
    _stream(keys, b"s", [7], origin=3)
    op = ActiveActive(rules).create_group(b"s", b"g", keys[b"s"], (7, 3), 0, False, from_top=True)
    assert op.deps == {2: 1} and op.dot == (2, 2) and op.cursors == {3: (7, 3)}
    op = ActiveActive(rules).create_group(b"s", b"g", keys[b"s"], (0, 0), 0, False, from_top=False)
    assert op.cursors is None


def test_xdel_removes_an_id_only_from_the_origin_logs_it_was_removed_from():
    """Two origins may hold one ID (semi-strict, liberal).  Region A deletes 5-0 while it holds
    only origin 1's; region B holds both: B must keep origin 2's, as A will once it arrives."""
    from node.activeactive import opcodec

    x = (5, 0)
    a, b = ops.Keyspace(active_active=True), ops.Keyspace(active_active=True)
    for keys in (a, b):
        ops.apply(keys, ops.AddEntry(b"s", 1, x, [b"f", b"1"]))
        ops.apply(keys, ops.AddEntry(b"s", 3, (9, 3), [b"f", b"9"]))
    ops.apply(b, ops.AddEntry(b"s", 2, x, [b"f", b"2"]))
    op = ActiveActive(Rules()).delete_entries(a[b"s"], b"s", [x])
    sent = opcodec.decode(opcodec.encode(ops.replicated_form(op, ops.apply(a, op))))
    ops.apply(b, sent)
    ops.apply(a, ops.AddEntry(b"s", 2, x, [b"f", b"2"]))  # origin 2's entry reaches A late
    for keys in (a, b):
        assert [(e, o) for e, o, _f in keys[b"s"].merged((0, 0), (2**64 - 1,) * 2)] == [(x, 2), ((9, 3), 3)]


def test_an_operation_encoded_before_a_field_was_added_decodes_with_its_default():
    from node.activeactive import opcodec

    old = opcodec._encoder.encode([opcodec._TAGS[ops.DeleteEntries], b"s", [[5, 0]], ops.KEEPREF])
    assert opcodec.decode(old) == ops.DeleteEntries(b"s", [(5, 0)], ops.KEEPREF, origins=None)
    with pytest.raises(ValueError, match="fields"):
        opcodec.decode(opcodec._encoder.encode([opcodec._TAGS[ops.DeleteEntries], b"s"]))


def test_concurrent_idempotent_adds_with_equal_ids_keep_one_entry_everywhere():
    """Liberal or full IDs let two regions give one (producer, iid) the same ID: the origin
    breaks the tie, so every region keeps the same single entry (found by the simulation)."""
    x = (5, 0)
    adds = [ops.AddEntry(b"s", o, x, [b"f", b"%d" % o], b"p", b"i", dot=(o, 1), deps={}) for o in (1, 2)]
    a, b = ops.Keyspace(active_active=True), ops.Keyspace(active_active=True)
    for keys, order in ((a, adds), (b, adds[::-1])):
        for op in order:
            ops.apply(keys, op)
    for keys in (a, b):
        assert [(e, o) for e, o, _f in keys[b"s"].merged((0, 0), (2**64 - 1,) * 2)] == [(x, 1)]
        assert keys[b"s"].idmp.lookup(b"p", b"i") == x and keys[b"s"].idmp.dot_of(b"p", b"i") == (1, 1)


def test_single_region_flush_removes_every_key():
    keys = ops.Keyspace()
    _stream(keys, b"a", [1])
    _stream(keys, b"b", [2])
    op = SingleRegion().flush(keys)
    assert op == ops.FlushKeys(b"")
    assert ops.touched_keys(keys, op) == [b"a", b"b"]
    assert ops.apply(keys, op) == 2 and not keys


def _ids(keys, key):
    return [e[0] for e in keys[key].range((0, 0), (2**64 - 1,) * 2)] if key in keys else []


def test_active_active_flush_is_the_observed_remove_of_every_key_in_one_operation():
    """A flush names each key this region holds with what a DEL of it would carry, and one
    context; applied at another region it removes exactly that: entries it had not seen
    survive, a key it did not know is untouched, and a concurrent group creation loses
    (delete wins), as with DEL."""
    rules = Rules()
    issuer, other = ops.Keyspace(active_active=True), ops.Keyspace(active_active=True)
    for keys in (issuer, other):
        _stream(keys, b"a", [1, 2], origin=1)
        _stream(keys, b"b", [3], origin=3)
    r = ActiveActive(rules)
    rules.causal.stamp(b"op")  # this region applied one operation of its own before
    op = r.flush(issuer)
    assert op == ops.FlushKeys(b"", observed={b"a": {1: (2, 1)}, b"b": {3: (3, 3)}}, context={2: 2})
    # meanwhile, at the other region: a later entry of origin 1, a group created on a key
    # (concurrent: its dependencies lack the flush), and a key the issuer never saw
    concurrent = ops.CreateGroup(b"b", b"g", (0, 0), 0, deps={1: 5}, dot=(1, 6))
    _stream(other, b"a", [4], origin=1)
    assert ops.apply(other, concurrent) is True
    _stream(other, b"c", [5], origin=1)
    assert ops.apply(issuer, op) == 2 and not issuer
    assert issuer.key_contexts == {b"a": {2: 2}, b"b": {2: 2}}  # kept for the garbage collector
    assert ops.apply(other, op) == 2
    assert _ids(other, b"a") == [(4, 1)]      # added after what the issuer saw
    assert b"b" not in other                  # the concurrent group creation lost
    assert _ids(other, b"c") == [(5, 1)]      # a key the issuer did not know
    assert other.key_contexts == {b"a": {2: 2}, b"b": {2: 2}}
    # at the issuer the concurrent creation arrives after the flush and loses too; one made
    # after the flush was seen stays
    assert ops.apply(issuer, concurrent) is False
    assert ops.apply(issuer, ops.CreateGroup(b"b", b"g", (0, 0), 0, deps={1: 5, 2: 2}, dot=(1, 7))) is True
