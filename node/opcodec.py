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

import msgspec

from crdt import ops
from crdt.blocks import TrimSpec

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


def encode(op: ops.Op) -> bytes:
    tag = _TAGS[type(op)]
    kinds = OPS[tag][1]
    return _encoder.encode([tag, op.key, *(_out(k, getattr(op, f)) for f, k in kinds.items())])


def decode(data: bytes) -> ops.Op:
    tag, key, *values = _decoder.decode(data)
    cls, kinds = OPS[tag]
    if not _REQUIRED[tag] <= len(values) <= len(kinds):
        raise ValueError(f"operation {cls.__name__} has {len(kinds)} fields, got {len(values)}")
    return cls(key, *(_in(k, v) for k, v in zip(kinds.values(), values)))


def _check_table() -> None:
    """Every field of every operation has a kind (fails at import if one is added without)."""
    for cls, kinds in OPS:
        names = [f.name for f in dataclasses.fields(cls) if f.name != "key"]
        if names != list(kinds):
            raise TypeError(f"opcodec table for {cls.__name__} lists {list(kinds)}, fields are {names}")


_check_table()
