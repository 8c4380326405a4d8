"""Every operation survives encode -> decode unchanged (node/activeactive/opcodec.py)."""

from __future__ import annotations

import pytest

from crdt import ops
from crdt.blocks import TrimSpec
from crdt.ids import U64
from node.activeactive import opcodec

SAMPLES = [
    ops.AddEntry(b"k", 3, (U64, U64), [b"f", b"v", b"", b"\x00\xff"], b"pid", b"iid"),
    ops.AddEntry(b"k", 1, (1, 0), [b"f", b"v"]),
    ops.Trim(b"k", TrimSpec(maxlen=5, approx=True, limit=100), "acked"),
    ops.Trim(b"k", TrimSpec(minid=(7, 1)), cutoffs={1: (5, 1), 2: (6, 2)}),
    ops.Trim(b"k", None, cutoffs={3: (1, 3)}),
    ops.DeleteEntries(b"k", [(1, 1), (2, 2)], "delref"),
    ops.DeleteKey(b"k"),
    ops.DeleteKey(b"k", observed={1: (9, 1)}, context={1: 4, 2: 7}),
    ops.RenameKey(b"a", b"b"),
    ops.RecordIdmp(b"k", b"p", b"i", (3, 0)),
    ops.CreateGroup(b"k", b"g", (0, 0), -1, True, deps={1: 2}, dot=(1, 3)),
    ops.CreateGroup(b"k", b"g", (9, 1), -1, False, deps={1: 2}, dot=(1, 3), cursors={1: (9, 1), 2: (4, 2)}),
    ops.CreateGroup(b"k", b"g", (5, 5), 10),
    ops.DestroyGroup(b"k", b"g", context={2: 9}),
    ops.AckWatermark(b"k", b"g", 2, (130, 2)),
    ops.SetStreamId(b"k", (9, 9), 12, (3, 3)),
    ops.SetStreamId(b"k", (9, 9)),
    ops.ConfigureIdmp(b"k", 60, None),
    ops.FlushKeys(b""),
    ops.FlushKeys(b"", observed={b"a": {1: (9, 1), 2: (4, 2)}, b"": {}, b"\x00\xff": {3: (1, 3)}},
                  context={1: 4, 2: 7, 3: 1}),
]


def _same(a, b) -> bool:
    if isinstance(a, ops.Trim) and a.spec is not None:
        sa, sb = a.spec, b.spec
        return ((sa.maxlen, sa.minid, sa.approx, sa.limit) == (sb.maxlen, sb.minid, sb.approx, sb.limit)
                and (a.key, a.strategy, a.cutoffs) == (b.key, b.strategy, b.cutoffs))
    return a == b


@pytest.mark.parametrize("op", SAMPLES, ids=lambda o: type(o).__name__)
def test_round_trip(op):
    back = opcodec.decode(opcodec.encode(op))
    assert type(back) is type(op) and _same(op, back)


def test_every_operation_type_is_in_the_table():
    sampled = {type(o) for o in SAMPLES}
    assert sampled == {cls for cls, _ in opcodec.OPS}


def test_malformed_input_is_an_error_not_a_crash():
    with pytest.raises(ValueError):  # msgspec's DecodeError
        opcodec.decode(b"\xc1")
    with pytest.raises(ValueError):
        opcodec.decode(opcodec.encode(ops.RenameKey(b"a", b"b"))[:-2] + b"\x90\x90")
    with pytest.raises(ValueError, match="key must be bytes"):  # a flush naming a key that is not one
        opcodec.decode(opcodec._encoder.encode([opcodec._TAGS[ops.FlushKeys], b"", [[5, {}]], {1: 1}]))


def _encode_by_the_table(op) -> bytes:
    """Every operation as the table writes it (what encode's shortcut for a plain XADD must match)."""
    tag = opcodec._TAGS[type(op)]
    names, outs, _ins = opcodec._PLAN[tag]
    values = [tag, op.key]
    for name, out in zip(names, outs, strict=True):
        v = getattr(op, name)
        values.append(v if out is None else out(v))
    return opcodec._encoder.encode(values)


@pytest.mark.parametrize("op", SAMPLES + [ops.AddEntry(b"", 0, (0, 0), []),
                                          ops.AddEntry(b"k", 2, (U64, 7), [b"x"] * 40),
                                          ops.AddEntry(b"k", 1, (1, 0), [b"f", b"v"], iid=b"i"),
                                          ops.AddEntry(b"k", 1, (1, 0), [b"f", b"v"], deps={1: 2})],
                         ids=lambda o: type(o).__name__)
def test_every_operation_is_written_as_the_table_says(op):
    data = opcodec.encode(op)
    assert data == _encode_by_the_table(op)
    if type(op) is ops.AddEntry and op.pid is None and op.iid is None and op.dot is None and op.deps is None:
        assert opcodec.decode_plain_add(data) == (0, op.key, op.origin, op.id, op.fields, None, None, None, None)
