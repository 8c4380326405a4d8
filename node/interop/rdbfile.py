"""Whole RDB files, as Redis writes them: read the keys of one, write one of streams.

Theory of operation
-------------------
An RDB file is ``REDIS`` and a four-digit version, then a sequence of records, each
opened by one byte: an *opcode* (242 and up) or the *type* of a key's value (0..32).
Opcodes carry everything around the keys: AUX fields (``redis-ver``, ``ctime``...),
SELECTDB (the database of the keys that follow), RESIZEDB and SLOT_INFO (size hints),
EXPIRETIME / EXPIRETIME_MS / IDLE / FREQ / KEY_META (attributes of the *next* key only),
FUNCTION2 (a function library), MODULE_AUX (a module's own data), HASH_TEMPLATE (a
field-name list that later hashes refer to) and EOF, after which come eight bytes of
CRC-64 over everything before them (zero: the writer did not compute one,
``rdbchecksum no``).  A key record is its type byte, the key as an RDB string and the
value in the type's encoding.

:class:`RdbFileReader` walks the records and yields every key as a :class:`RdbKey`
(database, key, type, the value's raw bytes, absolute expiry in ms or None).  It
never decodes a value: it only finds where each ends, by the rules of Redis's
``rdbLoadObject`` for every type Redis has written since 2.x (plain and ziplist /
listpack / quicklist / intset encodings, hashes with field TTLs, the five stream
encodings, arrays, compact hashes, self-describing module values).  The raw bytes are
exactly what ``DUMP`` puts between its type byte and its version trailer, so a
stream's value becomes a ``RESTORE`` payload with :func:`restore_payload` and is
decoded only by the server that restores it (``node.interop.rdb`` in Braid).  Only
a value that cannot be skipped without its code is refused, naming its key: a module
value of the 4.0 release candidates' format (type 6) and a GCRA rate limiter (type
33, written only by Redis Enterprise builds, its layout unpublished).  Every other
unreadable byte - a truncation, an unknown type or opcode, a bad length encoding, a
checksum that does not match - raises :class:`RdbFileError` with the offset where the
bad item begins and why, and nothing is yielded past it.

What each version added (``MAX_RDB_VERSION`` is the newest read and written):

- 13 (Redis 8.6): stream type 26 (idempotent producers), KEY_META.
- 14 (Redis 8.8): stream type 27 (each consumer group's NACK zone after its
  consumers: a count, then 16-byte IDs) and type 28, an array: its element count,
  an insert-index flag (0 or 1) and, with 1, the index; then per element its index
  (a length), a tag (0 string, 1 64-bit integer, 2 double, 3 short string) and the
  value (a string for 0 and 3, eight bytes for 1 and 2).
- 15 (Redis 8.10): compact hashes.  Opcode 242 defines a template: its id, its field
  count (never 0) and the field names; ids are unique in a file.  Type 30 is a
  listpack (the template id, then the values); type 32 the template id, then one
  string per field of that template, so the reader keeps each template's field count
  and refuses an id the file has not defined, or a values listpack whose stated
  count is not the fields' and the id's.  Types 29 and 31 (what ``DUMP`` writes)
  carry their field names: a format (0: one listpack of names, 1: a count then the
  names), then the values - one listpack (29) or one string per field (31).  Redis
  8.10 writes no new AUX field.

These layouts are taken from the parsers that read them (redis/librdb 2.3 and its
v14 / v15 fixtures, Redis's own hash-template tests, which spell out DUMP payloads
and patch RDB files byte by byte, and two independent RDB readers in Go and Rust);
Redis's source for 8.8 and 8.10 was not at hand.

:class:`RdbFileWriter` writes the other direction, streaming to a binary file: the
header for a chosen version, AUX fields, SELECTDB and RESIZEDB, key records whose
values the caller gives encoded (the bytes of a DUMP payload), EOF and the CRC-64
computed as it goes.  :func:`stream_type_for` says which stream encoding a version
may carry, so a file for an older Redis gets values that Redis can load.

The RDB primitives (``node.interop.rdbformat``) supply the constants, CRC-64, LZF
and the :class:`~node.interop.rdbformat.Writer` encodings, ``listpack.py`` the
listpack decoder, and the value codec (``node.interop.rdb``) DUMP payloads; the file
layer keeps its own cursor because it skips rather than decodes, and reports where a
bad item *begins*.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, NoReturn

from node.interop.listpack import listpack_decode
from node.interop.rdb import verify_payload
from node.interop.rdbformat import (
    RDB_OPCODE_AUX,
    RDB_OPCODE_EOF,
    RDB_OPCODE_EXPIRETIME,
    RDB_OPCODE_EXPIRETIME_MS,
    RDB_OPCODE_FREQ,
    RDB_OPCODE_FUNCTION2,
    RDB_OPCODE_FUNCTION_PRE_GA,
    RDB_OPCODE_IDLE,
    RDB_OPCODE_KEY_META,
    RDB_OPCODE_MODULE_AUX,
    RDB_OPCODE_RESIZEDB,
    RDB_OPCODE_SELECTDB,
    RDB_OPCODE_SLOT_INFO,
    RDB_TYPE_ARRAY,
    RDB_TYPE_HASH,
    RDB_TYPE_HASH_LISTPACK,
    RDB_TYPE_HASH_LISTPACK_EX,
    RDB_TYPE_HASH_LISTPACK_EX_PRE_GA,
    RDB_TYPE_HASH_METADATA,
    RDB_TYPE_HASH_METADATA_PRE_GA,
    RDB_TYPE_HASH_TMPL_ARRAY,
    RDB_TYPE_HASH_TMPL_ARRAY_REF,
    RDB_TYPE_HASH_TMPL_LP,
    RDB_TYPE_HASH_TMPL_LP_REF,
    RDB_TYPE_HASH_ZIPLIST,
    RDB_TYPE_HASH_ZIPMAP,
    RDB_TYPE_LIST,
    RDB_TYPE_LIST_QUICKLIST,
    RDB_TYPE_LIST_QUICKLIST_2,
    RDB_TYPE_LIST_ZIPLIST,
    RDB_TYPE_MODULE_2,
    RDB_TYPE_MODULE_PRE_GA,
    RDB_TYPE_SET,
    RDB_TYPE_SET_INTSET,
    RDB_TYPE_SET_LISTPACK,
    RDB_TYPE_STREAM_LISTPACKS,
    RDB_TYPE_STREAM_LISTPACKS_3,
    RDB_TYPE_STREAM_LISTPACKS_4,
    RDB_TYPE_STREAM_LISTPACKS_5,
    RDB_TYPE_STRING,
    RDB_TYPE_ZSET,
    RDB_TYPE_ZSET_2,
    RDB_TYPE_ZSET_LISTPACK,
    RDB_TYPE_ZSET_ZIPLIST,
    RDB_VERSION,
    STREAM_TYPE_FOR_VERSION,
    STREAM_TYPES,
    TYPE_NAMES,
    Writer,
    crc64,
    lzf_decompress,
)

# Module value annotations (RDB_MODULE_OPCODE_*): how a type-7 value is skipped without its module
_MOD_EOF, _MOD_SINT, _MOD_UINT, _MOD_FLOAT, _MOD_DOUBLE, _MOD_STRING = 0, 1, 2, 3, 4, 5

# The newest RDB version this reader knows: the one Braid writes (rdb.RDB_VERSION, Redis
# 8.10's 15); a newer file may hold types or opcodes it has never seen, so it is refused
# rather than misread.
MAX_RDB_VERSION = RDB_VERSION

# braid export --for-redis: the RDB version each Redis release writes
REDIS_RDB_VERSIONS = {"5.0": 9, "6.0": 9, "6.2": 9, "7.0": 10, "7.2": 11, "7.4": 12, "8.0": 12, "8.2": 12,
                      "8.4": 12, "8.6": 13, "8.8": 14, "8.10": 15}

# Redis 8.10's hash templates: the opcode that defines one, the two forms of the field names
# in a self-contained (DUMP) compact hash
RDB_OPCODE_HASH_TEMPLATE = 242
_TMPL_FIELDS_LISTPACK, _TMPL_FIELDS_RAW = 0, 1

# Array elements (type 28): the tag before each value
_AR_TAG_STRING, _AR_TAG_INT, _AR_TAG_FLOAT, _AR_TAG_SHORT_STRING = 0, 1, 2, 3

# Value types whose end cannot be found without their code: refused, naming the key
RDB_TYPE_GCRA = 33
UNSKIPPABLE_TYPES = {
    RDB_TYPE_MODULE_PRE_GA: "a module value in the format of Redis 4.0's release candidates, which cannot be read "
                            "without its module",
    RDB_TYPE_GCRA: "a GCRA rate limiter (type 33, written only by Redis Enterprise builds), whose encoding this "
                   "reader does not know",
}


def stream_type_for(version: int) -> int:
    """The stream value type a file of RDB ``version`` carries (ValueError before 9: no streams)."""
    if version < min(STREAM_TYPE_FOR_VERSION):
        raise ValueError(f"RDB version {version} predates streams (they need version 9, Redis 5, or later)")
    return STREAM_TYPE_FOR_VERSION[min(version, max(STREAM_TYPE_FOR_VERSION))]


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
        if self.rdb_type != RDB_TYPE_MODULE_2:
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

    def bad(self, at: int, message: str) -> NoReturn:
        raise _Bad(at, message)

    def length(self) -> tuple[int, bool]:
        """(value, is_encoded): an RDB length, or (encoding, True) for a specially encoded string."""
        at = self.pos
        if at >= len(self.data):
            raise _Truncated(at, "the file ends here")
        first = self.data[at]
        self.pos = at + 1
        kind = first >> 6
        if kind == 0:
            return first, False
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
        if at < len(self.data) and self.data[at] < 0x40:  # the common case: a short raw string
            end = at + 1 + self.data[at]
            if end <= len(self.data):
                self.pos = end
                return
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


def restore_payload(rdb_type: int, value: bytes, version: int) -> bytes:
    """A RESTORE payload: type byte, value, the RDB version (2 bytes LE), CRC-64 of all that."""
    body = bytes([rdb_type]) + value + struct.pack("<H", version)
    return body + struct.pack("<Q", crc64(body))


def split_dump_payload(payload: bytes) -> tuple[int, bytes, int]:
    """(type, value, version) of a DUMP payload; ValueError when its footer is wrong."""
    version = verify_payload(payload, MAX_RDB_VERSION)
    if len(payload) < 11:
        raise ValueError("a DUMP payload holds at least a type byte and its 10-byte footer")
    return payload[0], bytes(payload[1:-10]), version


class RdbFileReader:
    """One pass over an RDB file held in memory; :meth:`keys` yields its keys in file order.

    While iterating, ``aux`` collects the AUX fields, ``functions`` counts function
    libraries, ``module_aux`` names the modules whose own data was skipped and
    ``templates`` maps each hash template's id to its number of fields.  Once
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
        self.templates: dict[int, int] = {}
        self.checksum: bool | None = None
        self.trailing = 0

    @classmethod
    def open(cls, path: str) -> RdbFileReader:
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
                                  f"files written by Redis up to 8.10)")
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
                if op == RDB_OPCODE_EOF:
                    break
                if op == RDB_OPCODE_SELECTDB:
                    what = "SELECTDB's database number"
                    db = cur.plain_length()
                elif op == RDB_OPCODE_RESIZEDB:
                    what = "RESIZEDB's sizes"
                    cur.plain_length()
                    cur.plain_length()
                elif op == RDB_OPCODE_SLOT_INFO:
                    what = "SLOT_INFO"
                    for _ in range(3):
                        cur.plain_length()
                elif op == RDB_OPCODE_AUX:
                    what = "an AUX field"
                    name = cur.string()
                    self.aux[name] = cur.string()
                elif op == RDB_OPCODE_EXPIRETIME:
                    what = "EXPIRETIME"
                    expire_ms = struct.unpack("<i", cur.take(4))[0] * 1000
                    continue
                elif op == RDB_OPCODE_EXPIRETIME_MS:
                    what = "EXPIRETIME_MS"
                    expire_ms = struct.unpack("<q", cur.take(8))[0]
                    continue
                elif op == RDB_OPCODE_IDLE:
                    what = "IDLE"
                    cur.plain_length()
                    continue
                elif op == RDB_OPCODE_FREQ:
                    what = "FREQ"
                    cur.skip(1)
                    continue
                elif op == RDB_OPCODE_FUNCTION2:
                    what = "a function library"
                    cur.skip_string()
                    self.functions += 1
                elif op == RDB_OPCODE_FUNCTION_PRE_GA:
                    raise RdbFileError(record, "functions in the format of Redis 7.0's release candidates "
                                               "(Redis does not load it either)")
                elif op == RDB_OPCODE_MODULE_AUX:
                    what = "a module's AUX data"
                    module_id = cur.plain_length()
                    at = cur.pos
                    if cur.plain_length() != _MOD_UINT:
                        cur.bad(at, "no 'when' field")
                    cur.plain_length()
                    cur.skip_module_value()
                    self.module_aux.append(module_type_name(module_id))
                elif op == RDB_OPCODE_KEY_META:
                    what = "key metadata"
                    for _ in range(cur.plain_length()):
                        cur.skip(4)  # the class: name, version and flags
                        cur.skip_module_value()
                    metadata = True
                    continue
                elif op == RDB_OPCODE_HASH_TEMPLATE:
                    what = "a hash template"
                    self._template(cur, record)
                elif op in TYPE_NAMES or op in UNSKIPPABLE_TYPES:
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
        try:
            if rdb_type in UNSKIPPABLE_TYPES:
                raise RdbFileError(start, f"key '{_shown(key)}' holds {UNSKIPPABLE_TYPES[rdb_type]}")
            _skip_value(cur, rdb_type, self.templates)
        except _Truncated as e:
            raise RdbFileError(e.offset, f"truncated in the value of key '{_shown(key)}' ({type_name(rdb_type)}): "
                                         f"{e}") from None
        except _Bad as e:
            raise RdbFileError(e.offset, f"bad value of key '{_shown(key)}' ({type_name(rdb_type)}): {e}") from None
        return RdbKey(db, key, rdb_type, bytes(self.data[begin:cur.pos]), expire_ms, start, metadata)

    def _template(self, cur: _Cursor, record: int) -> None:
        """A HASH_TEMPLATE record: its id, field count and field names (rdbLoadHashTemplates)."""
        template_id = cur.plain_length()
        at = cur.pos
        fields = cur.plain_length()
        if fields == 0:
            cur.bad(at, f"hash template {template_id} has no fields")
        if template_id in self.templates:
            cur.bad(record, f"hash template {template_id} is defined twice")
        for _ in range(fields):
            cur.skip_string()
        self.templates[template_id] = fields

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


def _shown(key: bytes) -> str:
    return key.decode("utf-8", "backslashreplace")


def _skip_double_string(cur: _Cursor) -> None:
    n = cur.byte()
    if n < 253:  # 253, 254, 255: NaN, +inf, -inf, no bytes follow
        cur.skip(n)


def _skip_value(cur: _Cursor, rdb_type: int, templates: dict[int, int]) -> None:
    """Move past one value of ``rdb_type`` (as rdbLoadObject reads it), decoding nothing but
    what says where it ends; ``templates`` gives the field count of each hash template."""
    if rdb_type == RDB_TYPE_STRING:
        cur.skip_string()
    elif rdb_type in (RDB_TYPE_LIST, RDB_TYPE_SET, RDB_TYPE_LIST_QUICKLIST):
        for _ in range(cur.plain_length()):
            cur.skip_string()
    elif rdb_type == RDB_TYPE_LIST_QUICKLIST_2:
        for _ in range(cur.plain_length()):
            at = cur.pos
            container = cur.plain_length()
            if container not in (1, 2):  # QUICKLIST_NODE_CONTAINER_PLAIN / _PACKED
                cur.bad(at, f"unknown quicklist node container {container}")
            cur.skip_string()
    elif rdb_type == RDB_TYPE_ZSET:
        for _ in range(cur.plain_length()):
            cur.skip_string()
            _skip_double_string(cur)
    elif rdb_type == RDB_TYPE_ZSET_2:
        for _ in range(cur.plain_length()):
            cur.skip_string()
            cur.skip(8)
    elif rdb_type == RDB_TYPE_HASH:
        for _ in range(cur.plain_length()):
            cur.skip_string()
            cur.skip_string()
    elif rdb_type in (RDB_TYPE_HASH_METADATA, RDB_TYPE_HASH_METADATA_PRE_GA):
        if rdb_type == RDB_TYPE_HASH_METADATA:
            cur.skip(8)  # the earliest field expiry
        for _ in range(cur.plain_length()):
            cur.plain_length()  # the field's TTL
            cur.skip_string()
            cur.skip_string()
    elif rdb_type == RDB_TYPE_HASH_LISTPACK_EX:
        cur.skip(8)
        cur.skip_string()
    elif rdb_type in (RDB_TYPE_HASH_ZIPMAP, RDB_TYPE_LIST_ZIPLIST, RDB_TYPE_SET_INTSET, RDB_TYPE_ZSET_ZIPLIST,
                      RDB_TYPE_HASH_ZIPLIST, RDB_TYPE_HASH_LISTPACK, RDB_TYPE_ZSET_LISTPACK, RDB_TYPE_SET_LISTPACK,
                      RDB_TYPE_HASH_LISTPACK_EX_PRE_GA):
        cur.skip_string()  # one blob: the ziplist, listpack, intset or zipmap
    elif rdb_type in STREAM_TYPES:
        _skip_stream(cur, rdb_type)
    elif rdb_type == RDB_TYPE_ARRAY:
        _skip_array(cur)
    elif rdb_type == RDB_TYPE_HASH_TMPL_LP_REF:
        _skip_values_listpack(cur, None, templates)
    elif rdb_type == RDB_TYPE_HASH_TMPL_ARRAY_REF:
        at = cur.pos
        template_id = cur.plain_length()
        if template_id not in templates:
            cur.bad(at, f"a compact hash of hash template {template_id}, which the file does not define before it")
        for _ in range(templates[template_id]):
            cur.skip_string()
    elif rdb_type in (RDB_TYPE_HASH_TMPL_LP, RDB_TYPE_HASH_TMPL_ARRAY):
        fields = _skip_template_fields(cur)
        if rdb_type == RDB_TYPE_HASH_TMPL_LP:
            _skip_values_listpack(cur, fields, templates)
        else:
            for _ in range(fields):
                cur.skip_string()
    elif rdb_type == RDB_TYPE_MODULE_2:
        cur.plain_length()  # the module id
        cur.skip_module_value()
    else:
        cur.bad(cur.pos, f"unknown value type {rdb_type}")


def _skip_array(cur: _Cursor) -> None:
    count = cur.plain_length()
    at = cur.pos
    has_insert_index = cur.plain_length()
    if has_insert_index not in (0, 1):
        cur.bad(at, f"array insert-index flag {has_insert_index} (0 or 1)")
    if has_insert_index:
        cur.plain_length()
    for _ in range(count):
        cur.plain_length()  # the element's index
        at = cur.pos
        tag = cur.plain_length()
        if tag in (_AR_TAG_STRING, _AR_TAG_SHORT_STRING):
            cur.skip_string()
        elif tag in (_AR_TAG_INT, _AR_TAG_FLOAT):
            cur.skip(8)
        else:
            cur.bad(at, f"unknown array element tag {tag}")


def _skip_template_fields(cur: _Cursor) -> int:
    """Move past a self-contained compact hash's field names; their number."""
    at = cur.pos
    form = cur.plain_length()
    if form == _TMPL_FIELDS_RAW:
        at = cur.pos
        fields = cur.plain_length()
        for _ in range(fields):
            cur.skip_string()
    elif form == _TMPL_FIELDS_LISTPACK:
        at = cur.pos
        try:
            fields = len(listpack_decode(cur.string()))  # the values that follow are counted by it
        except ValueError as e:  # RdbError, or an LZF string that does not decompress
            cur.bad(at, f"the field names' listpack: {e}")
    else:
        cur.bad(at, f"unknown hash template field format {form}")
    if fields == 0:
        cur.bad(at, "a compact hash with no fields")
    return fields


def _skip_values_listpack(cur: _Cursor, fields: int | None, templates: dict[int, int]) -> None:
    """Move past a compact hash's values listpack: a template id (an integer element; for type 30
    one the file defined, whose field count is then ``fields``), then one element per field.  Only
    the header and the first element are read: the count is checked when the header states it."""
    at = cur.pos
    blob = cur.string()
    if len(blob) < 7 or int.from_bytes(blob[:4], "little") != len(blob):
        cur.bad(at, "a compact hash's values listpack whose header disagrees with its length")
    template_id = _listpack_first_int(blob)
    if template_id is None:
        cur.bad(at, "a compact hash's values listpack that does not open with a template id")
    if fields is None:
        if template_id not in templates:
            cur.bad(at, f"a compact hash of hash template {template_id}, which the file does not define before it")
        fields = templates[template_id]
    count = int.from_bytes(blob[4:6], "little")
    if count != 0xFFFF and count != fields + 1:
        cur.bad(at, f"a compact hash's values listpack of {count} elements for {fields} fields and the template id")


def _listpack_first_int(lp: bytes) -> int | None:
    """The first element of a listpack when it is an integer (lpGetValue), else None."""
    b = lp[6]
    if b < 0x80:
        return b
    if 0xC0 <= b < 0xE0 and len(lp) > 7:
        u = ((b & 0x1F) << 8) | lp[7]
        return u - 0x2000 if u >= 0x1000 else u
    width = {0xF1: 2, 0xF2: 3, 0xF3: 4, 0xF4: 8}.get(b)
    if width is None or len(lp) < 7 + width:
        return None
    return int.from_bytes(lp[7:7 + width], "little", signed=True)


def _skip_stream(cur: _Cursor, rdb_type: int) -> None:
    for _ in range(cur.plain_length()):  # listpack nodes: master ID (16 bytes) and the listpack
        cur.skip_string()
        cur.skip_string()
    # length, last ID; then first ID, max deleted, entries added
    ids = 3 if rdb_type == RDB_TYPE_STREAM_LISTPACKS else 8
    for _ in range(ids):
        cur.plain_length()
    for _ in range(cur.plain_length()):  # consumer groups
        cur.skip_string()
        cur.plain_length()
        cur.plain_length()
        if rdb_type != RDB_TYPE_STREAM_LISTPACKS:
            cur.plain_length()  # entries read
        for _ in range(cur.plain_length()):  # the group's PEL: ID, delivery time, count
            cur.skip(16 + 8)
            cur.plain_length()
        for _ in range(cur.plain_length()):  # consumers: name, seen time (active time), their PEL's IDs
            cur.skip_string()
            cur.skip(16 if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_3 else 8)
            for _ in range(cur.plain_length()):
                cur.skip(16)
        if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_5:  # the NACK zone: XNACK's released IDs
            for _ in range(cur.plain_length()):
                cur.skip(16)
    if rdb_type >= RDB_TYPE_STREAM_LISTPACKS_4:  # IDMP: duration, max entries, producers, totals
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

    def begin(self, aux: dict[str, str | int] | None = None) -> None:
        w = Writer()
        w.raw(b"REDIS%04d" % self.version)
        for name, value in (aux or {}).items():
            w.byte(RDB_OPCODE_AUX)
            w.string(name.encode())
            w.string(str(value).encode())
        self._write(w.getvalue())

    def select_db(self, db: int, keys: int, expires: int = 0) -> None:
        w = Writer()
        w.byte(RDB_OPCODE_SELECTDB)
        w.length(db)
        w.byte(RDB_OPCODE_RESIZEDB)
        w.length(keys)
        w.length(expires)
        self._write(w.getvalue())

    def key(self, key: bytes, rdb_type: int, value: bytes, expire_ms: int | None = None) -> None:
        """A key record; ``value`` is the encoded value (a DUMP payload between type byte and footer)."""
        w = Writer()
        if expire_ms is not None:
            w.byte(RDB_OPCODE_EXPIRETIME_MS)
            w.millis(expire_ms)
        w.byte(rdb_type)
        w.string(key)
        self._write(w.getvalue())
        self._write(value)
        self.keys += 1

    def end(self) -> None:
        self._write(bytes([RDB_OPCODE_EOF]))
        self.out.write(struct.pack("<Q", self.crc) if self.version >= 5 else b"")
