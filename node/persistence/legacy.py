"""Converting snapshots of the old pickle format (format version 1) to the current one.

Theory of operation
-------------------
Until format version 2 a snapshot's body was a pickle of the core's objects.
A pickle can name any importable object and call it, and the restricted
unpickler that read it could be led outside its allow-list (with protocol 4 a
class name may be a dotted path: ``crdt.ops`` + ``dataclass.__globals__.get``
reaches ``sys``), so a region never unpickles anything any more: loading a
format-1 snapshot stops the region with a message naming
``braid convert-snapshot``.

This module is that command's reader, and nothing else imports it.  The
operator runs it on their own files, which they trust.  It still uses a
tightened unpickler (exact allow-list of the core's classes and containers,
no dotted names), then writes the same state in the current format under the
same name - same record, so the log continues it - and keeps the old file
beside it as ``<name>.pickle-backup`` (never loaded; delete it once the
region has started).  The replacement is atomic: the new file is written and
fsynced under a temporary name, the backup is a hard link made before the
rename, so a crash at any point leaves the snapshot either old and whole or
new and whole.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import pickle

import msgspec
from xxhash import xxh3_64_intdigest

from node.persistence import snapshot

BACKUP_SUFFIX = ".pickle-backup"

_ALLOWED = {
    ("copyreg", "__newobj__"), ("copyreg", "_reconstructor"), ("builtins", "object"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"),
    ("collections", "OrderedDict"), ("collections", "deque"),
    ("sortedcontainers.sorteddict", "SortedDict"), ("sortedcontainers.sortedlist", "SortedList"),
    ("crdt.blocks", "Block"), ("crdt.blocks", "EntryLog"), ("crdt.blocks", "TrimSpec"),
    ("crdt.stream", "Stream"), ("crdt.groups", "ConsumerGroup"), ("crdt.groups", "Consumer"),
    ("crdt.groups", "Nack"), ("crdt.idmp", "IdmpState"), ("crdt.ops", "Keyspace"),
    ("crdt.causal", "CausalLog"), ("crdt.causal", "Envelope"),
}


_source_modules: dict[str, object] = {}


def _source_class(module: str, name: str):
    """The class as its ``.py`` source defines it.  Format 1 pickled the pure-Python classes; a
    class compiled with mypyc (setup.py) cannot be rebuilt from their pickled state, so the
    converter rebuilds the objects with the source's classes (it only reads them)."""
    mod = _source_modules.get(module)
    if mod is None:
        compiled = importlib.util.find_spec(module)
        origin = compiled.origin if compiled is not None else None
        if origin is None or origin.endswith(".py"):
            return getattr(importlib.import_module(module), name)
        source = os.path.join(os.path.dirname(origin), module.rpartition(".")[2] + ".py")
        spec = importlib.util.spec_from_file_location(module, source)
        if spec is None or spec.loader is None:  # (not for a .py file's path)
            raise ImportError(f"cannot load {source}")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # not put in sys.modules: the region keeps the compiled one
        _source_modules[module] = mod
    return getattr(mod, name)


class _Unpickler(pickle.Unpickler):
    """Builds only the core's state classes and plain containers, by exact name."""

    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED:
            if module.startswith("crdt."):
                return _source_class(module, name)
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a snapshot may not contain {module}.{name}")


def read_legacy(data: bytes) -> snapshot.Snapshot:
    """The state of a format-1 snapshot file (trusted: the operator's own)."""
    magic = snapshot.LEGACY_MAGIC
    if len(data) < len(magic) + 12 or not data.startswith(magic):
        raise snapshot.SnapshotError("not a snapshot of the old pickle format")
    (checksum,) = snapshot._U64.unpack_from(data, len(data) - 8)
    if xxh3_64_intdigest(memoryview(data)[:-8]) != checksum:
        raise snapshot.SnapshotError("checksum mismatch")
    at = len(magic)
    (header_len,) = snapshot._U32.unpack_from(data, at)
    at += 4
    try:
        header = msgspec.msgpack.decode(data[at:at + header_len], type=dict)
        body = _Unpickler(io.BytesIO(data[at + header_len:len(data) - 8])).load()
        return snapshot.Snapshot(header["record"], header["created_ms"], header["active_active"],
                                 header["region"], body["keys"], body["causal"])
    except (msgspec.DecodeError, pickle.UnpicklingError, EOFError, AttributeError, TypeError, KeyError,
            ValueError, IndexError) as e:
        raise snapshot.SnapshotError(f"unreadable: {e}") from None


def convert(path: str) -> tuple[str, str] | None:
    """Rewrite one format-1 snapshot in the current format; returns (path, backup), or None
    if the file already is in the current format.  SnapshotError if it is neither."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(snapshot.MAGIC):
        snapshot.decode(data)  # readable as it is
        return None
    old = read_legacy(data)
    try:
        new = snapshot.encode(old.keys, old.causal, old.record, old.created_ms, old.active_active, old.region)
    except (AttributeError, TypeError, KeyError, ValueError) as e:
        raise snapshot.SnapshotError(f"the pickled state does not have the shape this version expects: {e}") \
            from None
    check = snapshot.decode(new)  # what a region will load: refuse to write what it would refuse
    if check.record != old.record:
        raise snapshot.SnapshotError("the converted snapshot does not read back")
    backup = path + BACKUP_SUFFIX

    def keep_the_old_file() -> None:
        if os.path.exists(backup):
            os.remove(backup)
        os.link(path, backup)

    snapshot.replace_file(path, new, keep_the_old_file)
    return path, backup
