"""Operations <-> bytes, for the replication feed (and, later, the operation log).

Each operation is a msgpack array ``[tag, key, field, ...]`` in the order of its
dataclass fields; a table gives each field's kind so decoding restores the
exact Python values (IDs back to tuples, version vectors to int-keyed dicts).
Tags are positions in :data:`OPS`: append new operation types, never reorder.
A new field goes at the end of its operation, with a default: an operation
encoded before the field existed (an old file, an older peer) decodes with it.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import msgspec

from crdt import ops
from crdt.blocks import TrimSpec
from node.persistence import safe_encode

# kind of each field after ``key``: raw (as is), id, ids, id_map, vv, dot, spec, blist,
# key_id_maps (key -> id_map, as pairs: a key is bytes)
OPS: list[tuple[type, dict[str, str]]] = [
    (ops.AddEntry, {"origin": "raw", "id": "id", "fields": "blist", "pid": "raw", "iid": "raw", "dot": "dot",
                    "deps": "vv"}),
    (ops.Trim, {"spec": "spec", "strategy": "raw", "cutoffs": "id_map"}),
    (ops.DeleteEntries, {"ids": "ids", "strategy": "raw", "origins": "raw"}),
    (ops.DeleteKey, {"observed": "id_map", "context": "vv"}),
    (ops.RenameKey, {"new_key": "raw"}),
    (ops.RecordIdmp, {"pid": "raw", "iid": "raw", "id": "id"}),
    (ops.CreateGroup, {"group": "raw", "last_id": "id", "entries_read": "raw", "mkstream": "raw",
                       "deps": "vv", "dot": "dot", "cursors": "id_map"}),
    (ops.DestroyGroup, {"group": "raw", "context": "vv"}),
    (ops.AckWatermark, {"group": "raw", "origin": "raw", "id": "id", "created": "dot"}),
    (ops.SetStreamId, {"last_id": "id", "entries_added": "raw", "max_deleted_id": "id"}),
    (ops.ConfigureIdmp, {"duration": "raw", "maxsize": "raw"}),
    (ops.FlushKeys, {"observed": "key_id_maps", "context": "vv"}),
]
_TAGS = {cls: tag for tag, (cls, _kinds) in enumerate(OPS)}
# fields an encoded operation must have: those without a default (later ones were added since)
_REQUIRED = [sum(1 for f in dataclasses.fields(cls) if f.name != "key" and f.default is dataclasses.MISSING
                 and f.default_factory is dataclasses.MISSING) for cls, _kinds in OPS]
_encoder = msgspec.msgpack.Encoder()
# what encodes operations: _encoder's encode_into, not its encode, which crashes the process when
# an allocation fails (node/persistence/safe_encode.py)
_encode = safe_encode.encoder(_encoder)
_decoder = msgspec.msgpack.Decoder()


def _out(kind: str, v):
    if v is None or kind in ("raw", "blist"):
        return v
    if kind in ("id", "dot"):
        return list(v)
    if kind == "ids":
        return [list(i) for i in v]
    if kind == "id_map":
        return {o: list(i) for o, i in v.items()}
    if kind == "vv":
        return dict(v)
    if kind == "key_id_maps":
        return [[key, _out("id_map", m)] for key, m in v.items()]
    if kind == "spec":
        return [v.maxlen, None if v.minid is None else list(v.minid), v.approx, v.limit]
    raise ValueError(kind)


def _in(kind: str, v):
    if v is None or kind == "raw":
        return v
    if kind in ("id", "dot"):
        return tuple(v)
    if kind == "ids":
        return [tuple(i) for i in v]
    if kind == "id_map":
        return {int(o): tuple(i) for o, i in v.items()}
    if kind == "vv":
        return {int(o): n for o, n in v.items()}
    if kind == "key_id_maps":
        return {_key(key): _in("id_map", m) for key, m in v}
    if kind == "blist":
        return list(v)
    if kind == "spec":
        maxlen, minid, approx, limit = v
        return TrimSpec(maxlen, None if minid is None else tuple(minid), approx, limit)
    raise ValueError(kind)


def _key(v) -> bytes:
    if type(v) is not bytes:
        raise ValueError(f"a key must be bytes, got {type(v).__name__}")
    return v


def _converter(convert, kind: str):
    """``convert(kind, value)`` as a function of the value alone."""
    def one(v):
        return convert(kind, v)
    return one


def _id_out(v):
    return None if v is None else list(v)


def _id_in(v):
    return None if v is None else tuple(v)


def _vv_out(v):
    return None if v is None else dict(v)


def _vv_in(v):
    return None if v is None else {int(o): n for o, n in v.items()}


# Per tag: the field names and one converter per field, out and in (None: the value is kept
# as it is).  Every operation a region sends or receives is encoded or decoded here, so the
# kinds are resolved once, at import, not for every field of every operation; the values
# are those of _out and _in (msgspec decodes an array as a list: a ``blist`` needs no copy).
_FAST_OUT = {"raw": None, "blist": None, "id": _id_out, "dot": _id_out, "vv": _vv_out}
_FAST_IN = {"raw": None, "blist": None, "id": _id_in, "dot": _id_in, "vv": _vv_in}
_PLAN = [(tuple(kinds),
          tuple(_FAST_OUT[k] if k in _FAST_OUT else _converter(_out, k) for k in kinds.values()),
          tuple(_FAST_IN[k] if k in _FAST_IN else _converter(_in, k) for k in kinds.values()))
         for _cls, kinds in OPS]


def encode_plain_add(key: bytes, origin: int, id_: tuple[int, int], fields: list) -> bytes:
    """``encode(AddEntry(key, origin, id_, fields))``, from the parts: nearly every operation is
    an XADD without IDMP, written as the loop of :func:`encode` writes it (msgspec writes the
    ID's tuple as the array its list would be); :data:`decode_plain_add` reads it."""
    return _encode((0, key, origin, id_, fields, None, None, None, None))


def encode(op: ops.Op) -> bytes:
    if type(op) is ops.AddEntry and op.pid is None and op.iid is None and op.dot is None and op.deps is None:
        return encode_plain_add(op.key, op.origin, op.id, op.fields)
    tag = _TAGS[type(op)]
    names, outs, _ins = _PLAN[tag]
    values: list = [tag, op.key]
    for name, out in zip(names, outs, strict=True):
        v = getattr(op, name)
        values.append(v if out is None else out(v))
    return _encode(values)


def decode(data: bytes) -> ops.Op:
    tag, key, *values = _decoder.decode(data)
    cls = OPS[tag][0]
    names, _outs, ins = _PLAN[tag]
    if not _REQUIRED[tag] <= len(values) <= len(names):
        raise ValueError(f"operation {cls.__name__} has {len(names)} fields, got {len(values)}")
    # (the fields left out at the end keep their defaults: fewer values than converters)
    return cls(key, *[v if conv is None else conv(v) for conv, v in zip(ins, values, strict=False)])


# The operation nearly every operation a region receives (and nearly every record of a log of
# writes) holds: an AddEntry (tag 0) without IDMP - key, origin, ID, fields, and no producer,
# iid, dot or dependencies.  Decoding to this exact shape checks it in C and builds no
# AddEntry: the caller appends it (crdt.ops.append_entry); anything else is refused with
# msgspec.ValidationError (decode it with decode), bytes that are no msgpack with DecodeError.
decode_plain_add = msgspec.msgpack.Decoder(
    tuple[Literal[0], bytes, int, tuple[int, int], list[bytes], None, None, None, None]).decode


def _check_table() -> None:
    """Every field of every operation has a kind (fails at import if one is added without)."""
    for cls, kinds in OPS:
        names = [f.name for f in dataclasses.fields(cls) if f.name != "key"]
        if names != list(kinds):
            raise TypeError(f"opcodec table for {cls.__name__} lists {list(kinds)}, fields are {names}")


_check_table()
