"""Snapshots: a region's whole state at one record of its operation log.

Theory of operation
-------------------
A snapshot is the state after record R of the append-only file, so a restart
is "load the newest valid snapshot, replay the records after R" and the
segments holding only records <= R can be deleted (compaction).  It is taken
between two commands on the event loop, so it is a consistent point in time;
serialising is quick (entry blocks are stored as packed bytes: about 60 ms and
6 MB for a million small entries) and only writing and fsyncing the file
happen in a worker thread (BGSAVE), so clients barely notice.

File layout (``snapshot-<R, 20 digits>.bsnap`` beside the segments)::

    +------------+-------------+------------------+-----------------+------------+
    | magic      | header len  | header           | body            | checksum   |
    | 10 bytes   | u32 LE      | msgpack map      | pickle, proto 5 | u64 LE     |
    +------------+-------------+------------------+-----------------+------------+
    header: record R, created_ms, active_active, region, body_len
    body:   {"keys": the Keyspace (entry blocks as stored, groups, PELs,
             consumers, IDMP maps, multi-region contexts), "causal": the causal
             log (version vector, operations, pending) or None}
    checksum: xxh3_64 of everything before it

The body is a pickle of the pure core's objects (crdt/): it follows the data
structures exactly, with no second schema to keep in step.  It is read with an
unpickler that only builds Braid's own core types and plain containers, so a
damaged or foreign file cannot run code; it is written to a temporary file,
fsynced and renamed, so a crash never leaves half a snapshot under the name.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import struct
from dataclasses import dataclass

import msgspec
from xxhash import xxh3_64_intdigest

MAGIC = b"BRAIDSNAP1"
SUFFIX = ".bsnap"
_NAME = re.compile(r"^snapshot-(\d{20})\.bsnap$")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class SnapshotError(ValueError):
    pass


@dataclass
class Snapshot:
    record: int
    created_ms: int
    active_active: bool
    region: int
    keys: object
    causal: object


def encode(keys, causal, record: int, created_ms: int, active_active: bool, region: int) -> bytes:
    body = pickle.dumps({"keys": keys, "causal": causal}, protocol=5)
    header = msgspec.msgpack.encode({"record": record, "created_ms": created_ms, "active_active": active_active,
                                     "region": region, "body_len": len(body)})
    out = b"".join((MAGIC, _U32.pack(len(header)), header, body))
    return out + _U64.pack(xxh3_64_intdigest(out))


def decode(data: bytes) -> Snapshot:
    if len(data) < len(MAGIC) + _U32.size + _U64.size or not data.startswith(MAGIC):
        raise SnapshotError("not a Braid snapshot")
    (checksum,) = _U64.unpack_from(data, len(data) - _U64.size)
    if xxh3_64_intdigest(memoryview(data)[:-_U64.size]) != checksum:
        raise SnapshotError("checksum mismatch")
    at = len(MAGIC)
    (header_len,) = _U32.unpack_from(data, at)
    at += _U32.size
    try:
        header = msgspec.msgpack.decode(data[at:at + header_len])
        body = _Unpickler(io.BytesIO(data[at + header_len:len(data) - _U64.size])).load()
    except (msgspec.DecodeError, pickle.UnpicklingError, EOFError, AttributeError, TypeError) as e:
        raise SnapshotError(f"unreadable: {e}") from None
    return Snapshot(header["record"], header["created_ms"], header["active_active"], header["region"],
                    body["keys"], body["causal"])


_ALLOWED = {
    ("copyreg", "__newobj__"), ("copyreg", "_reconstructor"), ("builtins", "object"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"), ("builtins", "getattr"),
    ("collections", "OrderedDict"), ("collections", "deque"),
    ("sortedcontainers.sorteddict", "SortedDict"), ("sortedcontainers.sortedlist", "SortedList"),
}


class _Unpickler(pickle.Unpickler):
    """Builds only Braid's core types (crdt.*) and plain containers."""

    def find_class(self, module: str, name: str):
        if module.startswith("crdt.") or (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a snapshot may not contain {module}.{name}")


# ------------------------------------------------------------------ files
def file_name(record: int) -> str:
    return f"snapshot-{record:020d}{SUFFIX}"


def list_snapshots(directory: str) -> list[tuple[int, str]]:
    """``(record, path)`` of every snapshot file, newest first."""
    found = []
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            m = _NAME.match(name)
            if m:
                found.append((int(m.group(1)), os.path.join(directory, name)))
    return sorted(found, reverse=True)


def write(directory: str, data: bytes, record: int) -> str:
    """Write atomically and durably (temporary file, fsync, rename, fsync the directory)."""
    path = os.path.join(directory, file_name(record))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def read(path: str) -> Snapshot:
    with open(path, "rb") as f:
        return decode(f.read())


def drop_older(directory: str, record: int) -> list[str]:
    """Delete snapshots older than the one at ``record`` (and leftover temporary files)."""
    dropped = []
    for rec, path in list_snapshots(directory):
        if rec < record:
            os.remove(path)
            dropped.append(path)
    for name in os.listdir(directory):
        if name.endswith(SUFFIX + ".tmp"):
            os.remove(os.path.join(directory, name))
    return dropped
