"""Snapshots: a region's whole state at one record of its operation log.

Theory of operation
-------------------
A snapshot is the state after record R of the append-only file, so a restart
is "load the newest valid snapshot, replay the records after R" and the
segments holding only records <= R can be deleted (compaction).  It is taken
between two commands on the event loop, so it is a consistent point in time;
serialising is quick (entry blocks are stored as the packed bytes they are in
memory) and only writing and fsyncing the file happen in a worker thread
(BGSAVE), so clients barely notice.  A full-resync image sent to a peer is the
same format (record 0).

File layout (``snapshot-<R, 20 digits>.bsnap`` beside the segments)::

    +------------+-------------+------------------+------------------+------------+
    | magic      | header len  | header           | body             | checksum   |
    | BRAIDSTATE | u32 LE      | msgpack map      | msgpack, schema  | u64 LE     |
    +------------+-------------+------------------+------------------+------------+
    header: format (the body's schema version, FORMAT_VERSION), record R,
            created_ms, active_active, region, body_len
    body:   the keyspace and the causal log, in the schema of
            node/persistence/stateformat.py
    checksum: xxh3_64 of everything before it

Reading never runs code: the header and the body are read with msgspec decoders
typed by fixed Structs, after the size, the checksum, the lengths and the format
version were checked (stateformat.py says what else is checked, and what is
trusted).  A file larger than ``MAX_SIZE`` is refused before it is read (or
hashed).  Every entry block of a full-resync image is walked entry by entry
(``decode``'s default: a peer's bytes); a snapshot file a region loads at start
is its own, checksummed, and :func:`read` skips that walk, which costs about a
second per million entries.  A file is written to a temporary file, fsynced and
renamed, so a crash never leaves half a snapshot under the name.

Format versions: 2 is this one.  Version 1 (magic ``BRAIDSNAP1``) was a pickle
of the core's objects; it is never read by a region: loading one fails with a
:class:`LegacySnapshot` error naming ``braid convert-snapshot``, which converts
an operator's own files (node/persistence/legacy.py).
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from xxhash import xxh3_64, xxh3_64_intdigest

from node.persistence import safe_encode, stateformat

MAGIC = b"BRAIDSTATE"
LEGACY_MAGIC = b"BRAIDSNAP1"  # format 1: a pickle (see node/persistence/legacy.py)
FORMAT_VERSION = 2
SUFFIX = ".bsnap"
# The largest snapshot or image read: far above any state a region holds in memory, low enough
# that a forged length cannot make a region allocate without bound.
MAX_SIZE = 16 << 30
_MAX_HEADER = 4096
_NAME = re.compile(r"^snapshot-(\d{20})\.bsnap$")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_OVERHEAD = len(MAGIC) + _U32.size + _U64.size


class SnapshotError(ValueError):
    pass


class LegacySnapshot(SnapshotError):
    """A snapshot in the old pickle format: converted by ``braid convert-snapshot``, never loaded."""


@dataclass
class Snapshot:
    record: int
    created_ms: int
    active_active: bool
    region: int
    keys: object
    causal: object


class Header(msgspec.Struct):
    format: int
    record: int
    created_ms: int
    active_active: bool
    region: int
    body_len: int


class _Version(msgspec.Struct):
    format: int


_header_decoder = msgspec.msgpack.Decoder(Header)
_encode = safe_encode.encoder()  # not msgspec.msgpack.encode: it crashes when memory runs out
_version_decoder = msgspec.msgpack.Decoder(_Version)


def encode(keys, causal, record: int, created_ms: int, active_active: bool, region: int,
           digests: bool = True) -> bytes:
    """``digests``: hold the histories' digests (a full-resync image for a region of an older
    version, which refuses them, leaves them out: stateformat.py)."""
    # the body stays in the encoder's bytearray and is copied once, into the result: the state
    # takes about 2.5 times its encoded size at the peak, not 3.5 (bytes joined, then extended)
    body = stateformat.encode_into_buffer(keys, causal, digests)
    header = _encode(Header(FORMAT_VERSION, record, created_ms, active_active, region, len(body)))
    head = b"".join((MAGIC, _U32.pack(len(header)), header))
    digest = xxh3_64(head)
    digest.update(body)
    return b"".join((head, body, _U64.pack(digest.intdigest())))


def decode(data: bytes, max_size: int | None = None, verify_blocks: bool = True) -> Snapshot:
    """Read a snapshot or an image; SnapshotError (LegacySnapshot for the pickle format) if it is not one.

    ``verify_blocks``: walk every entry block (stateformat.py); a file this region wrote
    and checksummed may skip it, an image from a peer does not.
    """
    limit = MAX_SIZE if max_size is None else max_size
    if data[:len(LEGACY_MAGIC)] == LEGACY_MAGIC:
        raise LegacySnapshot("a snapshot in the old pickle format (format version 1), which this version "
                             "does not load; `braid convert-snapshot PATH` converts it")
    if len(data) < _OVERHEAD or data[:len(MAGIC)] != MAGIC:
        raise SnapshotError("not a Braid snapshot")
    if len(data) > limit:
        raise SnapshotError(f"{len(data)} bytes, larger than the largest snapshot read ({limit} bytes)")
    view = memoryview(data)
    (checksum,) = _U64.unpack_from(data, len(data) - _U64.size)
    if xxh3_64_intdigest(view[:-_U64.size]) != checksum:
        raise SnapshotError("checksum mismatch")
    at = len(MAGIC)
    (header_len,) = _U32.unpack_from(data, at)
    at += _U32.size
    if header_len > min(_MAX_HEADER, len(data) - _OVERHEAD):
        raise SnapshotError(f"a header of {header_len} bytes does not fit")
    header_bytes = view[at:at + header_len]
    try:
        version = _version_decoder.decode(header_bytes).format
    except msgspec.DecodeError as e:
        raise SnapshotError(f"unreadable header: {e}") from None
    if version != FORMAT_VERSION:
        raise SnapshotError(f"format version {version}; this version of Braid reads format {FORMAT_VERSION}")
    try:
        header = _header_decoder.decode(header_bytes)
    except msgspec.DecodeError as e:
        raise SnapshotError(f"unreadable header: {e}") from None
    body = view[at + header_len:len(data) - _U64.size]
    if header.body_len != len(body):
        raise SnapshotError(f"the header says {header.body_len} bytes of body, the file holds {len(body)}")
    try:
        keys, causal = stateformat.decode(body, verify_blocks)
    except stateformat.StateFormatError as e:
        raise SnapshotError(f"unreadable: {e}") from None
    if header.active_active != (causal is not None):
        raise SnapshotError("the header and the body disagree on the kind of region")
    return Snapshot(header.record, header.created_ms, header.active_active, header.region, keys, causal)


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
    """Write the snapshot at ``record`` atomically and durably."""
    path = os.path.join(directory, file_name(record))
    replace_file(path, data)
    return path


def replace_file(path: str, data: bytes, before_rename: Callable[[], None] | None = None) -> None:
    """Put ``data`` at ``path`` atomically and durably: a temporary file, fsynced, renamed
    over it (``before_rename`` runs just before), then the directory fsynced."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if before_rename is not None:
        before_rename()
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: str, max_size: int | None = None) -> Snapshot:
    """Read a snapshot file this region wrote (checksummed: its blocks are not walked again)."""
    limit = MAX_SIZE if max_size is None else max_size
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:  # refused before it is read
            if f.read(len(LEGACY_MAGIC)) == LEGACY_MAGIC:
                decode(LEGACY_MAGIC)  # raises LegacySnapshot
            raise SnapshotError(f"{size} bytes, larger than the largest snapshot read ({limit} bytes)")
        return decode(f.read(), limit, verify_blocks=False)


def read_header(path: str) -> Header:
    """The header of a snapshot file, after its size, checksum, format version and body length
    were checked; its body is not decoded (braid-admin checks a backup this way, without the
    memory a whole state takes).  SnapshotError if the file is not a valid snapshot."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < _OVERHEAD or size > MAX_SIZE:
            raise SnapshotError(f"{size} bytes: not a Braid snapshot")
        head = f.read(min(size - _U64.size, len(MAGIC) + _U32.size + _MAX_HEADER))
        digest, left = xxh3_64(), size - _U64.size
        f.seek(0)
        while left:
            piece = f.read(min(left, 1 << 20))
            if not piece:
                raise SnapshotError("the file shrank while it was read")
            digest.update(piece)
            left -= len(piece)
        (checksum,) = _U64.unpack(f.read(_U64.size))
    if head[:len(MAGIC)] != MAGIC:
        raise SnapshotError("not a Braid snapshot")
    if digest.intdigest() != checksum:
        raise SnapshotError("checksum mismatch")
    (header_len,) = _U32.unpack_from(head, len(MAGIC))
    at = len(MAGIC) + _U32.size
    if header_len > min(_MAX_HEADER, size - _OVERHEAD):
        raise SnapshotError(f"a header of {header_len} bytes does not fit")
    try:
        if _version_decoder.decode(head[at:at + header_len]).format != FORMAT_VERSION:
            raise SnapshotError(f"not format version {FORMAT_VERSION}")
        header = _header_decoder.decode(head[at:at + header_len])
    except msgspec.DecodeError as e:
        raise SnapshotError(f"unreadable header: {e}") from None
    if header.body_len != size - _OVERHEAD - header_len:
        raise SnapshotError(f"the header says {header.body_len} bytes of body, the file holds "
                            f"{size - _OVERHEAD - header_len}")
    return header


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
