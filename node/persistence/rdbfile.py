"""Whole RDB files, as Redis writes them: read the keys of one, write one of streams.

Theory of operation
-------------------
An RDB file is ``REDIS`` and a four-digit version, then a sequence of records, each
opened by one byte: an *opcode* (243 and up) or the *type* of a key's value (0..26).
Opcodes carry everything around the keys: AUX fields (``redis-ver``, ``ctime``...),
SELECTDB (the database of the keys that follow), RESIZEDB and SLOT_INFO (size hints),
EXPIRETIME / EXPIRETIME_MS / IDLE / FREQ / KEY_META (attributes of the *next* key only),
FUNCTION2 (a function library), MODULE_AUX (a module's own data) and EOF, after which
come eight bytes of CRC-64 over everything before them (zero: the writer did not
compute one, ``rdbchecksum no``).  A key record is its type byte, the key as an RDB
string and the value in the type's encoding.

:class:`RdbFileReader` walks the records and yields every key as a :class:`RdbKey`
(database, key, type, the value's raw bytes, absolute expiry in ms or None).  It
never decodes a value: it only finds where each ends, by the rules of Redis 8.6's
``rdbLoadObject`` for every type Redis has written since 2.x (plain and ziplist /
listpack / quicklist / intset encodings, hashes with field TTLs, the four stream
encodings, self-describing module values).  The raw bytes are exactly what ``DUMP``
puts between its type byte and its version trailer, so a stream's value becomes a
``RESTORE`` payload with :func:`restore_payload` and is decoded only by the server that
restores it (``node.persistence.rdb`` in Braid).  Only a value Redis itself cannot
load without its code is refused: a module value of the 4.0 release candidates'
format (type 6).  Every other unreadable byte - a truncation, an unknown type or
opcode, a bad length encoding, a checksum that does not match - raises
:class:`RdbFileError` with the offset where reading failed and why, and nothing is
yielded past it.

:class:`RdbFileWriter` writes the other direction, streaming to a binary file: the
header for a chosen version, AUX fields, SELECTDB and RESIZEDB, key records whose
values the caller gives encoded (the bytes of a DUMP payload), EOF and the CRC-64
computed as it goes.  :func:`stream_type_for` says which stream encoding a version
may carry, so a file for an older Redis gets values that Redis can load.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterator

# Value types (src/rdb.h).  The names are what TYPE answers for a key of that type.
STRING, LIST, SET, ZSET, HASH, ZSET_2, MODULE_PRE_GA, MODULE_2 = 0, 1, 2, 3, 4, 5, 6, 7
HASH_ZIPMAP, LIST_ZIPLIST, SET_INTSET, ZSET_ZIPLIST, HASH_ZIPLIST = 9, 10, 11, 12, 13
LIST_QUICKLIST, STREAM_LISTPACKS, HASH_LISTPACK, ZSET_LISTPACK = 14, 15, 16, 17
LIST_QUICKLIST_2, STREAM_LISTPACKS_2, SET_LISTPACK, STREAM_LISTPACKS_3 = 18, 19, 20, 21
HASH_METADATA_PRE_GA, HASH_LISTPACK_EX_PRE_GA, HASH_METADATA, HASH_LISTPACK_EX = 22, 23, 24, 25
STREAM_LISTPACKS_4 = 26

STREAM_TYPES = (STREAM_LISTPACKS, STREAM_LISTPACKS_2, STREAM_LISTPACKS_3, STREAM_LISTPACKS_4)

TYPE_NAMES = {
    STRING: "string", LIST: "list", SET: "set", ZSET: "zset", HASH: "hash", ZSET_2: "zset",
    MODULE_PRE_GA: "module", MODULE_2: "module", HASH_ZIPMAP: "hash", LIST_ZIPLIST: "list",
    SET_INTSET: "set", ZSET_ZIPLIST: "zset", HASH_ZIPLIST: "hash", LIST_QUICKLIST: "list",
    STREAM_LISTPACKS: "stream", HASH_LISTPACK: "hash", ZSET_LISTPACK: "zset", LIST_QUICKLIST_2: "list",
    STREAM_LISTPACKS_2: "stream", SET_LISTPACK: "set", STREAM_LISTPACKS_3: "stream",
    HASH_METADATA_PRE_GA: "hash", HASH_LISTPACK_EX_PRE_GA: "hash", HASH_METADATA: "hash",
    HASH_LISTPACK_EX: "hash", STREAM_LISTPACKS_4: "stream",
}

# Opcodes (src/rdb.h)
OP_KEY_META, OP_SLOT_INFO, OP_FUNCTION2, OP_FUNCTION_PRE_GA, OP_MODULE_AUX = 243, 244, 245, 246, 247
OP_IDLE, OP_FREQ, OP_AUX, OP_RESIZEDB, OP_EXPIRETIME_MS, OP_EXPIRETIME = 248, 249, 250, 251, 252, 253
OP_SELECTDB, OP_EOF = 254, 255

# Module value annotations (RDB_MODULE_OPCODE_*): how a type-7 value is skipped without its module
_MOD_EOF, _MOD_SINT, _MOD_UINT, _MOD_FLOAT, _MOD_DOUBLE, _MOD_STRING = 0, 1, 2, 3, 4, 5

# The newest RDB version this reader knows (Redis 8.6 writes 13); a newer file may hold
# types or opcodes it has never seen, so it is refused rather than misread.
MAX_RDB_VERSION = 13

# RDB version -> the newest stream encoding a Redis writing that version loads
# (9: Redis 5 .. 6.2, 10: 7.0, 11: 7.2, 12: 7.4 .. 8.4, 13: 8.6).
_STREAM_TYPE_BY_VERSION = ((13, STREAM_LISTPACKS_4), (11, STREAM_LISTPACKS_3), (10, STREAM_LISTPACKS_2),
                           (9, STREAM_LISTPACKS))

# braid export --for-redis: the RDB version each Redis release writes
REDIS_RDB_VERSIONS = {"5.0": 9, "6.0": 9, "6.2": 9, "7.0": 10, "7.2": 11, "7.4": 12, "8.0": 12, "8.2": 12,
                      "8.4": 12, "8.6": 13}


def stream_type_for(version: int) -> int:
    """The stream value type a file of RDB ``version`` carries (ValueError before 9: no streams)."""
    for first, rdb_type in _STREAM_TYPE_BY_VERSION:
        if version >= first:
            return rdb_type
    raise ValueError(f"RDB version {version} predates streams (they need version 9, Redis 5, or later)")


def type_name(rdb_type: int) -> str:
    return TYPE_NAMES.get(rdb_type, f"type {rdb_type}")


def module_type_name(module_id: int) -> str:
    """The nine-character module type name packed in a module id (moduleTypeNameByID)."""
    charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    module_id >>= 10
    return "".join(charset[(module_id >> (6 * (8 - i))) & 63] for i in range(9))


class RdbFileError(Exception):
    """The file cannot be read: ``offset`` is where reading failed, ``reason`` why."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


@dataclass(frozen=True)
class RdbKey:
    db: int
    key: bytes
    rdb_type: int
    value: bytes  # the encoded value, as DUMP carries it between its type byte and its trailer
    expire_ms: int | None  # absolute Unix time in ms, None: no expiry
    offset: int  # where the key's record (its attributes' opcodes included) starts
    metadata: bool = False  # the record carried key metadata (KEY_META), which is not in ``value``

    @property
    def type_name(self) -> str:
        return type_name(self.rdb_type)

    @property
    def module_name(self) -> str | None:
        """The module type's name, for a module value (its id opens the value)."""
        if self.rdb_type != MODULE_2:
            return None
        return module_type_name(_Cursor(self.value).plain_length())


class _Truncated(Exception):
    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset  # where the read that ran out began


class _Bad(ValueError):
    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset  # where the bad item begins


class _Cursor:
    """Reads RDB encodings from a bytes-like object; ``pos`` is the next byte."""

    __slots__ = ("data", "pos")

    def __init__(self, data, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        start = self.pos
        self.skip(n)
        return bytes(self.data[start:self.pos])

    def skip(self, n: int) -> None:
        end = self.pos + n
        if end > len(self.data):
            raise _Truncated(self.pos, f"{n} bytes needed, the file ends {end - len(self.data)} bytes short")
        self.pos = end

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Truncated(self.pos, "the file ends here")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def bad(self, at: int, message: str):
        raise _Bad(at, message)

    def length(self) -> tuple[int, bool]:
        """(value, is_encoded): an RDB length, or (encoding, True) for a specially encoded string."""
        at = self.pos
        first = self.byte()
        kind = first >> 6
        if kind == 0:
            return first & 0x3F, False
        if kind == 1:
            return ((first & 0x3F) << 8) | self.byte(), False
        if kind == 3:
            return first & 0x3F, True
        if first == 0x80:
            return struct.unpack(">I", self.take(4))[0], False
        if first == 0x81:
            return struct.unpack(">Q", self.take(8))[0], False
        self.bad(at, f"unknown length encoding 0x{first:02x}")

    def plain_length(self) -> int:
        at = self.pos
        value, encoded = self.length()
        if encoded:
            self.bad(at, "an encoded string where a length belongs")
        return value

    def string(self) -> bytes:
        at = self.pos
        value, encoded = self.length()
        if not encoded:
            return self.take(value)
        if value == 0:
            return str(struct.unpack("<b", self.take(1))[0]).encode()
        if value == 1:
            return str(struct.unpack("<h", self.take(2))[0]).encode()
        if value == 2:
            return str(struct.unpack("<i", self.take(4))[0]).encode()
        if value == 3:
            compressed_len, out_len = self.plain_length(), self.plain_length()
            try:
                return lzf_decompress(self.take(compressed_len), out_len)
            except _Bad:
                raise
            except ValueError as e:
                self.bad(at, f"LZF-compressed string: {e}")
        self.bad(at, f"unknown string encoding {value}")

    def skip_string(self) -> None:
        at = self.pos
        value, encoded = self.length()
        if not encoded:
            self.skip(value)
        elif value in (0, 1, 2):
            self.skip(1 << value)
        elif value == 3:
            compressed_len = self.plain_length()
            self.plain_length()
            self.skip(compressed_len)
        else:
            self.bad(at, f"unknown string encoding {value}")

    def skip_module_value(self) -> None:
        """Skip annotated module data up to and including its EOF mark (rdbLoadCheckModuleValue)."""
        while True:
            at = self.pos
            opcode = self.plain_length()
            if opcode == _MOD_EOF:
                return
            if opcode in (_MOD_SINT, _MOD_UINT):
                self.plain_length()
            elif opcode == _MOD_FLOAT:
                self.skip(4)
            elif opcode == _MOD_DOUBLE:
                self.skip(8)
            elif opcode == _MOD_STRING:
                self.skip_string()
            else:
                self.bad(at, f"unknown module value opcode {opcode}")


def lzf_decompress(data: bytes, out_len: int) -> bytes:
    """LZF (lzf_d.c): literal runs and back references; ValueError when it does not add up."""
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        ctrl = data[i]
        i += 1
        if ctrl < 32:  # a literal run of ctrl + 1 bytes
            run = ctrl + 1
            if i + run > n:
                raise ValueError("LZF literal run past the end of the compressed data")
            out += data[i:i + run]
            i += run
        else:  # a back reference: length in the top 3 bits (7: one more byte), offset in 13 bits
            length = ctrl >> 5
            if length == 7:
                if i >= n:
                    raise ValueError("LZF back reference cut short")
                length += data[i]
                i += 1
            if i >= n:
                raise ValueError("LZF back reference cut short")
            ref = len(out) - ((ctrl & 0x1F) << 8) - data[i] - 1
            i += 1
            if ref < 0:
                raise ValueError("LZF back reference before the start of the data")
            for j in range(length + 2):  # may overlap what it writes: byte by byte
                out.append(out[ref + j])
        if len(out) > out_len:
            raise ValueError("LZF data longer than its stated length")
    if len(out) != out_len:
        raise ValueError(f"LZF data is {len(out)} bytes, its header says {out_len}")
    return bytes(out)


def _crc64_table() -> list[int]:
    poly = 0x95AC9329AC4BC9B5  # Jones polynomial 0xad93d23594c935a9, bit-reflected
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC64_TABLE = _crc64_table()


def crc64(data, crc: int = 0) -> int:
    """Redis's CRC-64 (Jones, reflected, crc64.c); pass the previous value to continue it."""
    table = _CRC64_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def restore_payload(rdb_type: int, value: bytes, version: int) -> bytes:
    """A RESTORE payload: type byte, value, the RDB version (2 bytes LE), CRC-64 of all that."""
    body = bytes([rdb_type]) + value + struct.pack("<H", version)
    return body + struct.pack("<Q", crc64(body))


def split_dump_payload(payload: bytes) -> tuple[int, bytes, int]:
    """(type, value, version) of a DUMP payload; ValueError when its checksum or size is wrong."""
    if len(payload) < 11:
        raise ValueError("a DUMP payload is at least 11 bytes")
    body, (crc,) = payload[:-8], struct.unpack("<Q", payload[-8:])
    if crc64(body) != crc:
        raise ValueError("the DUMP payload's checksum is wrong")
    return body[0], bytes(body[1:-2]), struct.unpack("<H", body[-2:])[0]


class RdbFileReader:
    """One pass over an RDB file held in memory; :meth:`keys` yields its keys in file order.

    While iterating, ``aux`` collects the AUX fields, ``functions`` counts function
    libraries and ``module_aux`` names the modules whose own data was skipped.  Once
    the iteration ends, ``checksum`` is True (verified), or False (the writer stored
    none), and ``trailing`` counts bytes after the checksum (an append-only file's
    tail after an RDB preamble, for instance).
    """

    def __init__(self, data) -> None:
        self.data = data
        self.version = 0
        self.aux: dict[bytes, bytes] = {}
        self.functions = 0
        self.module_aux: list[str] = []
        self.checksum: bool | None = None
        self.trailing = 0

    @classmethod
    def open(cls, path: str) -> "RdbFileReader":
        with open(path, "rb") as f:
            return cls(f.read())

    def _header(self, cur: _Cursor) -> None:
        magic = bytes(self.data[:9])
        if len(magic) < 9 or not magic.startswith(b"REDIS"):
            raise RdbFileError(0, "not an RDB file (it does not start with REDIS and a four-digit version)")
        digits = magic[5:9]
        if not digits.isdigit():
            raise RdbFileError(5, f"not an RDB file (bad version {digits!r})")
        self.version = int(digits)
        if not 1 <= self.version <= MAX_RDB_VERSION:
            raise RdbFileError(5, f"RDB version {self.version} is not supported (1 to {MAX_RDB_VERSION}: "
                                  f"files written by Redis up to 8.6)")
        cur.pos = 9

    def keys(self) -> Iterator[RdbKey]:
        cur = _Cursor(self.data)
        self._header(cur)
        db, expire_ms, start, metadata = 0, None, None, False
        what = "an opcode or a value type"
        while True:
            record = cur.pos
            if start is None:
                start = record
            try:
                what = "an opcode or a value type"
                op = cur.byte()
                if op == OP_EOF:
                    break
                if op == OP_SELECTDB:
                    what = "SELECTDB's database number"
                    db = cur.plain_length()
                elif op == OP_RESIZEDB:
                    what = "RESIZEDB's sizes"
                    cur.plain_length()
                    cur.plain_length()
                elif op == OP_SLOT_INFO:
                    what = "SLOT_INFO"
                    for _ in range(3):
                        cur.plain_length()
                elif op == OP_AUX:
                    what = "an AUX field"
                    name = cur.string()
                    self.aux[name] = cur.string()
                elif op == OP_EXPIRETIME:
                    what = "EXPIRETIME"
                    expire_ms = struct.unpack("<i", cur.take(4))[0] * 1000
                    continue
                elif op == OP_EXPIRETIME_MS:
                    what = "EXPIRETIME_MS"
                    expire_ms = struct.unpack("<q", cur.take(8))[0]
                    continue
                elif op == OP_IDLE:
                    what = "IDLE"
                    cur.plain_length()
                    continue
                elif op == OP_FREQ:
                    what = "FREQ"
                    cur.skip(1)
                    continue
                elif op == OP_FUNCTION2:
                    what = "a function library"
                    cur.skip_string()
                    self.functions += 1
                elif op == OP_FUNCTION_PRE_GA:
                    raise RdbFileError(record, "functions in the format of Redis 7.0's release candidates "
                                               "(Redis does not load it either)")
                elif op == OP_MODULE_AUX:
                    what = "a module's AUX data"
                    module_id = cur.plain_length()
                    at = cur.pos
                    if cur.plain_length() != _MOD_UINT:
                        cur.bad(at, "no 'when' field")
                    cur.plain_length()
                    cur.skip_module_value()
                    self.module_aux.append(module_type_name(module_id))
                elif op == OP_KEY_META:
                    what = "key metadata"
                    for _ in range(cur.plain_length()):
                        cur.skip(4)  # the class: name, version and flags
                        cur.skip_module_value()
                    metadata = True
                    continue
                elif op in TYPE_NAMES:
                    what = "a key name"
                    key = cur.string()
                    yield self._value(cur, db, key, op, expire_ms, start, metadata)
                else:
                    raise RdbFileError(record, f"unknown opcode or value type {op}")
            except _Truncated as e:
                raise RdbFileError(e.offset, f"truncated while reading {what}: {e}") from None
            except _Bad as e:
                raise RdbFileError(e.offset, f"cannot read {what}: {e}") from None
            expire_ms, start, metadata = None, None, False
        self._checksum(cur)

    def _value(self, cur: _Cursor, db: int, key: bytes, rdb_type: int, expire_ms, start: int,
               metadata: bool) -> RdbKey:
        begin = cur.pos
        shown = key.decode("utf-8", "backslashreplace")
        try:
            if rdb_type == MODULE_PRE_GA:
                raise RdbFileError(start, f"key '{shown}' holds a module value in the format of Redis 4.0's "
                                          f"release candidates, which cannot be read without its module")
            _skip_value(cur, rdb_type)
        except _Truncated as e:
            raise RdbFileError(e.offset, f"truncated in the value of key '{shown}' ({type_name(rdb_type)}): {e}") \
                from None
        except _Bad as e:
            raise RdbFileError(e.offset, f"bad value of key '{shown}' ({type_name(rdb_type)}): {e}") from None
        return RdbKey(db, key, rdb_type, bytes(self.data[begin:cur.pos]), expire_ms, start, metadata)

    def _checksum(self, cur: _Cursor) -> None:
        if self.version < 5:  # no checksum before RDB 5 (Redis 2.6)
            self.checksum = False
            self.trailing = len(self.data) - cur.pos
            return
        end = cur.pos
        try:
            stored = struct.unpack("<Q", cur.take(8))[0]
        except _Truncated:
            raise RdbFileError(end, "truncated: the file ends before its checksum") from None
        self.trailing = len(self.data) - cur.pos
        if stored == 0:  # written with rdbchecksum no
            self.checksum = False
            return
        computed = crc64(memoryview(self.data)[:end])
        if computed != stored:
            raise RdbFileError(end, f"checksum mismatch: the file says {stored:016x}, its contents give "
                                    f"{computed:016x}")
        self.checksum = True


def _skip_double_string(cur: _Cursor) -> None:
    n = cur.byte()
    if n < 253:  # 253, 254, 255: NaN, +inf, -inf, no bytes follow
        cur.skip(n)


def _skip_value(cur: _Cursor, rdb_type: int) -> None:
    """Move past one value of ``rdb_type`` (as rdbLoadObject reads it), decoding nothing."""
    if rdb_type == STRING:
        cur.skip_string()
    elif rdb_type in (LIST, SET, LIST_QUICKLIST):
        for _ in range(cur.plain_length()):
            cur.skip_string()
    elif rdb_type == LIST_QUICKLIST_2:
        for _ in range(cur.plain_length()):
            at = cur.pos
            container = cur.plain_length()
            if container not in (1, 2):  # QUICKLIST_NODE_CONTAINER_PLAIN / _PACKED
                cur.bad(at, f"unknown quicklist node container {container}")
            cur.skip_string()
    elif rdb_type == ZSET:
        for _ in range(cur.plain_length()):
            cur.skip_string()
            _skip_double_string(cur)
    elif rdb_type == ZSET_2:
        for _ in range(cur.plain_length()):
            cur.skip_string()
            cur.skip(8)
    elif rdb_type == HASH:
        for _ in range(cur.plain_length()):
            cur.skip_string()
            cur.skip_string()
    elif rdb_type in (HASH_METADATA, HASH_METADATA_PRE_GA):
        if rdb_type == HASH_METADATA:
            cur.skip(8)  # the earliest field expiry
        for _ in range(cur.plain_length()):
            cur.plain_length()  # the field's TTL
            cur.skip_string()
            cur.skip_string()
    elif rdb_type == HASH_LISTPACK_EX:
        cur.skip(8)
        cur.skip_string()
    elif rdb_type in (HASH_ZIPMAP, LIST_ZIPLIST, SET_INTSET, ZSET_ZIPLIST, HASH_ZIPLIST, HASH_LISTPACK,
                      ZSET_LISTPACK, SET_LISTPACK, HASH_LISTPACK_EX_PRE_GA):
        cur.skip_string()  # one blob: the ziplist, listpack, intset or zipmap
    elif rdb_type in STREAM_TYPES:
        _skip_stream(cur, rdb_type)
    elif rdb_type == MODULE_2:
        cur.plain_length()  # the module id
        cur.skip_module_value()
    else:
        cur.bad(cur.pos, f"unknown value type {rdb_type}")


def _skip_stream(cur: _Cursor, rdb_type: int) -> None:
    for _ in range(cur.plain_length()):  # listpack nodes: master ID (16 bytes) and the listpack
        cur.skip_string()
        cur.skip_string()
    ids = 3 if rdb_type == STREAM_LISTPACKS else 8  # length, last ID; then first ID, max deleted, entries added
    for _ in range(ids):
        cur.plain_length()
    for _ in range(cur.plain_length()):  # consumer groups
        cur.skip_string()
        cur.plain_length()
        cur.plain_length()
        if rdb_type != STREAM_LISTPACKS:
            cur.plain_length()  # entries read
        for _ in range(cur.plain_length()):  # the group's PEL: ID, delivery time, count
            cur.skip(16 + 8)
            cur.plain_length()
        for _ in range(cur.plain_length()):  # consumers: name, seen time (active time), their PEL's IDs
            cur.skip_string()
            cur.skip(16 if rdb_type in (STREAM_LISTPACKS_3, STREAM_LISTPACKS_4) else 8)
            for _ in range(cur.plain_length()):
                cur.skip(16)
    if rdb_type == STREAM_LISTPACKS_4:  # IDMP: duration, max entries, producers, totals
        cur.plain_length()
        cur.plain_length()
        for _ in range(cur.plain_length()):
            cur.skip_string()
            for _ in range(cur.plain_length()):
                cur.skip_string()
                cur.plain_length()
                cur.plain_length()
        cur.plain_length()
        cur.plain_length()


class RdbFileWriter:
    """Writes an RDB file to ``out`` (a binary file object), the CRC-64 computed as it goes.

    ``begin(aux)`` writes the header and AUX fields; then ``select_db`` and ``key``
    for each key; ``end()`` writes EOF and the checksum.
    """

    def __init__(self, out: BinaryIO, version: int) -> None:
        if not 1 <= version <= MAX_RDB_VERSION:
            raise ValueError(f"RDB version {version} is not supported (1 to {MAX_RDB_VERSION})")
        self.out = out
        self.version = version
        self.crc = 0
        self.keys = 0

    def _write(self, data: bytes) -> None:
        self.crc = crc64(data, self.crc)
        self.out.write(data)

    def begin(self, aux: dict[str, str] | None = None) -> None:
        self._write(b"REDIS%04d" % self.version)
        for name, value in (aux or {}).items():
            self._write(bytes([OP_AUX]) + encode_string(name.encode()) + encode_string(str(value).encode()))

    def select_db(self, db: int, keys: int, expires: int = 0) -> None:
        self._write(bytes([OP_SELECTDB]) + encode_length(db)
                    + bytes([OP_RESIZEDB]) + encode_length(keys) + encode_length(expires))

    def key(self, key: bytes, rdb_type: int, value: bytes, expire_ms: int | None = None) -> None:
        """A key record; ``value`` is the encoded value (a DUMP payload between type byte and trailer)."""
        head = b""
        if expire_ms is not None:
            head = bytes([OP_EXPIRETIME_MS]) + struct.pack("<q", expire_ms)
        self._write(head + bytes([rdb_type]) + encode_string(key))
        self._write(value)
        self.keys += 1

    def end(self) -> None:
        self._write(bytes([OP_EOF]))
        self.out.write(struct.pack("<Q", self.crc) if self.version >= 5 else b"")


def encode_length(n: int) -> bytes:
    if n < 1 << 6:
        return bytes([n])
    if n < 1 << 14:
        return bytes([0x40 | (n >> 8), n & 0xFF])
    if n < 1 << 32:
        return b"\x80" + struct.pack(">I", n)
    return b"\x81" + struct.pack(">Q", n)


def encode_string(s: bytes) -> bytes:
    return encode_length(len(s)) + s
