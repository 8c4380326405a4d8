"""The append-only file's bytes: segment names, one record's framing, durable file changes.

Holds the record kinds (:data:`OP_REPLICATED`, :data:`OP_LOCAL`), the header layout and
:data:`MAX_PAYLOAD`, :func:`segment_name`, :func:`encode_record`, the sans-IO
:class:`RecordReader` (with :class:`RecordError`), and the fsync helpers the scanner and
the writer share.  The layout and why it is so are in node/persistence/aof.py's theory of
operation; scanning and damage are node/persistence/aofscan.py.
"""

from __future__ import annotations

import os
import re
import struct

from xxhash import xxh3_64_intdigest

OP_REPLICATED = 1
OP_LOCAL = 2
KINDS = frozenset({OP_REPLICATED, OP_LOCAL})
_KINDS_OR_ZERO = KINDS | {0}
_KIND_BYTES = {k: bytes((k,)) for k in KINDS}

MAX_PAYLOAD = (1 << 32) - 1  # the largest length the u32 field holds

_PREFIX = struct.Struct("<IQ")  # payload length, checksum
HEADER_SIZE = _PREFIX.size + 1  # + the kind byte: 13
_KIND_AT = _PREFIX.size  # the kind byte's offset in a record; the checksummed bytes start there

SEGMENT_SUFFIX = ".aof"
NEXT_SUFFIX = ".next"  # a segment whose predecessor was not yet sealed (see the theory of operation)
_SEGMENT_NAME = re.compile(r"^(\d{20})\.aof$")


def segment_name(first_record: int) -> str:
    return f"{first_record:020d}{SEGMENT_SUFFIX}"


def encode_record(kind: int, payload: bytes) -> bytes:
    """One record's bytes: header, kind, payload (layout in the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind}")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    body = _KIND_BYTES[kind] + payload
    return _PREFIX.pack(len(payload), xxh3_64_intdigest(body)) + body


class RecordError(ValueError):
    """A record that cannot be decoded, at byte ``offset`` of the bytes fed.

    ``may_be_torn`` is False when the record is intact but not ours (unknown
    kind): such a record is never cut as a torn tail.
    """

    def __init__(self, offset: int, reason: str, may_be_torn: bool = True) -> None:
        super().__init__(f"at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason
        self.may_be_torn = may_be_torn


class RecordReader:
    """Sans-IO record decoder: ``feed(bytes)``, then ``next_record()`` until None.

    ``offset`` is where the next record starts (bytes consumed), ``last_offset``
    where the record last returned started, ``pending`` how many bytes of an
    incomplete record are buffered.  After a :class:`RecordError` the reader
    raises the same error again: nothing after damage is decoded.
    """

    __slots__ = ("max_payload", "last_offset", "_buf", "_pos", "_base", "_error")

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self.last_offset: int | None = None
        self._buf = bytearray()
        self._pos = 0  # start of the next record in _buf
        self._base = 0  # offset of _buf[0] in the stream
        self._error: RecordError | None = None

    @property
    def offset(self) -> int:
        return self._base + self._pos

    @property
    def pending(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        # Drop consumed bytes once they are half the buffer: amortised linear even
        # when a large record arrives one byte at a time.
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._base += self._pos
            self._pos = 0
        self._buf += data

    def next_record(self) -> tuple[int, bytes] | None:
        if self._error is not None:
            raise self._error
        buf, pos = self._buf, self._pos
        if len(buf) - pos < HEADER_SIZE:
            return None
        length, checksum = _PREFIX.unpack_from(buf, pos)
        if length > self.max_payload:
            self._fail(f"record length {length} exceeds the maximum {self.max_payload}")
        end = pos + HEADER_SIZE + length
        if len(buf) < end:
            return None
        with memoryview(buf) as view:
            actual = xxh3_64_intdigest(view[pos + _KIND_AT : end])
        if actual != checksum:
            self._fail("checksum mismatch")
        kind = buf[pos + _KIND_AT]
        if kind not in KINDS:
            self._fail(f"unknown record kind {kind}", may_be_torn=False)
        self.last_offset = self.offset
        self._pos = end
        return kind, bytes(buf[pos + HEADER_SIZE : end])

    def take_records(self, out: list, number: int) -> int:
        """Append ``(number, kind, payload)`` to ``out`` for every complete record buffered,
        numbering from ``number``; returns how many.  The same records, checks and errors as
        calling :meth:`next_record` until None (a load reads a whole log: one call per chunk
        instead of one per record).  On damage the records before it are in ``out`` already
        when :class:`RecordError` is raised."""
        if self._error is not None:
            raise self._error
        buf, pos = self._buf, self._pos
        size, limit = len(buf), self.max_payload
        unpack, digest, kinds, append = _PREFIX.unpack_from, xxh3_64_intdigest, KINDS, out.append
        taken, last = 0, -1
        reason, may_be_torn = None, True
        with memoryview(buf) as view:
            while size - pos >= HEADER_SIZE:
                length, checksum = unpack(buf, pos)
                if length > limit:
                    reason = f"record length {length} exceeds the maximum {limit}"
                    break
                start = pos + _KIND_AT
                end = start + 1 + length
                if end > size:
                    break
                if digest(view[start:end]) != checksum:
                    reason = "checksum mismatch"
                    break
                kind = buf[start]
                if kind not in kinds:
                    reason, may_be_torn = f"unknown record kind {kind}", False
                    break
                append((number + taken, kind, view[start + 1:end].tobytes()))
                taken += 1
                last, pos = pos, end
        if taken:
            self.last_offset = self._base + last
        self._pos = pos
        if reason is not None:
            self._fail(reason, may_be_torn)
        return taken

    def _fail(self, reason: str, may_be_torn: bool = True) -> None:
        self._error = RecordError(self.offset, reason, may_be_torn)
        raise self._error


# ------------------------------------------------------------------- durable file changes
def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: str) -> None:
    """Make file creations and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
