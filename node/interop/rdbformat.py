"""RDB's building blocks, shared by the stream value codec and the RDB file layer (sans-IO).

What Redis's ``rdb.h``, ``rdb.c``, ``crc64.c`` and ``lzf_d.c`` define below any value:

- the constants: RDB versions, value types (``RDB_TYPE_*``, :data:`STREAM_TYPES` and which
  RDB version writes which stream type), file opcodes (``RDB_OPCODE_*``), the length
  encoding, and the limits the stream codec checks;
- :func:`crc64` (Redis's Jones CRC-64, computed by ``anycrc``) and LZF
  (:func:`lzf_decompress`, :func:`lzf_compress`, from :mod:`node.interop.lzf`);
- :class:`Reader` / :class:`Writer`: the length encoding (6, 14, 32 or 64 bits, or an
  "encoded" marker for an integer or LZF string), strings (raw, integer-encoded,
  LZF-compressed), little-endian millisecond times, binary doubles.  A :class:`Reader`
  raises :class:`RdbError` on anything malformed or short: it never reads past its buffer,
  and a length it is given is checked against the bytes left before anything of that size
  is built, so hostile input cannot make it allocate or loop beyond the input's own size.

The stream value codec and DUMP payloads are :mod:`node.interop.rdb` (which re-exports
these names); the RDB file reader and writer are :mod:`node.interop.rdbfile`.
"""

from __future__ import annotations

import struct

import anycrc

from crdt.ids import StreamID, string2ll
from node.interop.listpack import U64 as _U64
from node.interop.listpack import RdbError
from node.interop.lzf import LzfError, lzf_compress
from node.interop.lzf import lzf_decompress as _lzf_decompress

# ---------------------------------------------------------------- constants
RDB_VERSION = 15         # what Redis 8.10 writes (DUMP footers, RDB file headers)
RDB_VERSION_REDIS_7_0 = 10
RDB_VERSION_REDIS_7_2 = 11
RDB_VERSION_REDIS_8_6 = 13
RDB_VERSION_REDIS_8_8 = 14

RDB_TYPE_STRING = 0
RDB_TYPE_LIST = 1
RDB_TYPE_SET = 2
RDB_TYPE_ZSET = 3
RDB_TYPE_HASH = 4
RDB_TYPE_ZSET_2 = 5
RDB_TYPE_MODULE_PRE_GA = 6
RDB_TYPE_MODULE_2 = 7
RDB_TYPE_HASH_ZIPMAP = 9
RDB_TYPE_LIST_ZIPLIST = 10
RDB_TYPE_SET_INTSET = 11
RDB_TYPE_ZSET_ZIPLIST = 12
RDB_TYPE_HASH_ZIPLIST = 13
RDB_TYPE_LIST_QUICKLIST = 14
RDB_TYPE_STREAM_LISTPACKS = 15
RDB_TYPE_HASH_LISTPACK = 16
RDB_TYPE_ZSET_LISTPACK = 17
RDB_TYPE_LIST_QUICKLIST_2 = 18
RDB_TYPE_STREAM_LISTPACKS_2 = 19
RDB_TYPE_SET_LISTPACK = 20
RDB_TYPE_STREAM_LISTPACKS_3 = 21
RDB_TYPE_HASH_METADATA_PRE_GA = 22
RDB_TYPE_HASH_LISTPACK_EX_PRE_GA = 23
RDB_TYPE_HASH_METADATA = 24
RDB_TYPE_HASH_LISTPACK_EX = 25
RDB_TYPE_STREAM_LISTPACKS_4 = 26
RDB_TYPE_STREAM_LISTPACKS_5 = 27
RDB_TYPE_ARRAY = 28
RDB_TYPE_HASH_TMPL_LP = 29
RDB_TYPE_HASH_TMPL_LP_REF = 30
RDB_TYPE_HASH_TMPL_ARRAY = 31
RDB_TYPE_HASH_TMPL_ARRAY_REF = 32

STREAM_TYPES = frozenset({RDB_TYPE_STREAM_LISTPACKS, RDB_TYPE_STREAM_LISTPACKS_2,
                          RDB_TYPE_STREAM_LISTPACKS_3, RDB_TYPE_STREAM_LISTPACKS_4,
                          RDB_TYPE_STREAM_LISTPACKS_5})
DEFAULT_STREAM_TYPE = RDB_TYPE_STREAM_LISTPACKS_5

# The stream type each RDB version writes (a DUMP for an older Redis must use its pair).
STREAM_TYPE_FOR_VERSION = {9: RDB_TYPE_STREAM_LISTPACKS, 10: RDB_TYPE_STREAM_LISTPACKS_2,
                           11: RDB_TYPE_STREAM_LISTPACKS_3, 12: RDB_TYPE_STREAM_LISTPACKS_3,
                           13: RDB_TYPE_STREAM_LISTPACKS_4, 14: RDB_TYPE_STREAM_LISTPACKS_5,
                           15: RDB_TYPE_STREAM_LISTPACKS_5}
# The oldest RDB version that can hold each stream type.
MIN_VERSION_FOR_STREAM_TYPE = {RDB_TYPE_STREAM_LISTPACKS: 9, RDB_TYPE_STREAM_LISTPACKS_2: 10,
                               RDB_TYPE_STREAM_LISTPACKS_3: 11, RDB_TYPE_STREAM_LISTPACKS_4: 13,
                               RDB_TYPE_STREAM_LISTPACKS_5: 14}

# Names for messages ("a hash payload"), by value type.
TYPE_NAMES = {
    RDB_TYPE_STRING: "string", RDB_TYPE_LIST: "list", RDB_TYPE_SET: "set", RDB_TYPE_ZSET: "zset",
    RDB_TYPE_HASH: "hash", RDB_TYPE_ZSET_2: "zset", RDB_TYPE_MODULE_PRE_GA: "module",
    RDB_TYPE_MODULE_2: "module", RDB_TYPE_HASH_ZIPMAP: "hash", RDB_TYPE_LIST_ZIPLIST: "list",
    RDB_TYPE_SET_INTSET: "set", RDB_TYPE_ZSET_ZIPLIST: "zset", RDB_TYPE_HASH_ZIPLIST: "hash",
    RDB_TYPE_LIST_QUICKLIST: "list", RDB_TYPE_STREAM_LISTPACKS: "stream", RDB_TYPE_HASH_LISTPACK: "hash",
    RDB_TYPE_ZSET_LISTPACK: "zset", RDB_TYPE_LIST_QUICKLIST_2: "list", RDB_TYPE_STREAM_LISTPACKS_2: "stream",
    RDB_TYPE_SET_LISTPACK: "set", RDB_TYPE_STREAM_LISTPACKS_3: "stream", RDB_TYPE_HASH_METADATA_PRE_GA: "hash",
    RDB_TYPE_HASH_LISTPACK_EX_PRE_GA: "hash", RDB_TYPE_HASH_METADATA: "hash",
    RDB_TYPE_HASH_LISTPACK_EX: "hash", RDB_TYPE_STREAM_LISTPACKS_4: "stream",
    RDB_TYPE_STREAM_LISTPACKS_5: "stream", RDB_TYPE_ARRAY: "array", RDB_TYPE_HASH_TMPL_LP: "hash",
    RDB_TYPE_HASH_TMPL_LP_REF: "hash", RDB_TYPE_HASH_TMPL_ARRAY: "hash", RDB_TYPE_HASH_TMPL_ARRAY_REF: "hash",
}

# Special opcodes of an RDB file (and the key-metadata prefix of a DUMP payload).
RDB_OPCODE_KEY_META = 243
RDB_OPCODE_SLOT_INFO = 244
RDB_OPCODE_FUNCTION2 = 245
RDB_OPCODE_FUNCTION_PRE_GA = 246
RDB_OPCODE_MODULE_AUX = 247
RDB_OPCODE_IDLE = 248
RDB_OPCODE_FREQ = 249
RDB_OPCODE_AUX = 250
RDB_OPCODE_RESIZEDB = 251
RDB_OPCODE_EXPIRETIME_MS = 252
RDB_OPCODE_EXPIRETIME = 253
RDB_OPCODE_SELECTDB = 254
RDB_OPCODE_EOF = 255

# Length encoding (the top two bits of the first byte).
RDB_6BITLEN = 0
RDB_14BITLEN = 1
RDB_32BITLEN = 0x80
RDB_64BITLEN = 0x81
RDB_ENCVAL = 3
RDB_ENC_INT8 = 0
RDB_ENC_INT16 = 1
RDB_ENC_INT32 = 2
RDB_ENC_LZF = 3

# IDMP limits Redis 8.6 enforces when loading (server.h).
IDMP_DURATION_RANGE = (1, 86400)
IDMP_MAXSIZE_RANGE = (1, 10000)

# Redis's defaults for a node's size, used when merged logs are packed anew.
STREAM_NODE_MAX_ENTRIES = 100
STREAM_NODE_MAX_BYTES = 4096

# ---------------------------------------------------------------- CRC-64 (Jones)
# Redis's crc64 is the reflected Jones polynomial 0xad93d23594c935a9, init 0, no final
# xor (crc64.c; RevEng's CRC-64/REDIS); anycrc computes it in C, gigabytes a second.
# ``check`` makes anycrc verify the model against crc64.c's test vector as it is built.
_CRC64 = anycrc.CRC(width=64, poly=0xad93d23594c935a9, init=0, refin=True, refout=True, xorout=0,
                    check=0xe9c6d914c4b8d9ca)


def crc64(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """Redis's ``crc64(crc, data, len)``; continue a running CRC by passing it back."""
    return _CRC64.calc(data, crc)


# ---------------------------------------------------------------- LZF
def lzf_decompress(data: bytes, expected_len: int) -> bytes:
    """``lzf_decompress`` (node/interop/lzf.py): exactly ``expected_len`` bytes or
    :class:`RdbError`."""
    try:
        return _lzf_decompress(data, expected_len)
    except LzfError as e:
        raise RdbError(str(e)) from None


# ---------------------------------------------------------------- reader
class Reader:
    """RDB primitives over an in-memory buffer, from ``pos`` up to ``end`` (its end by default)."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def at_end(self) -> bool:
        return self.pos >= self.end

    def read(self, n: int) -> bytes:
        """Exactly ``n`` raw bytes."""
        p = self.pos
        if n < 0 or p + n > self.end:
            raise RdbError(f"unexpected end of data at byte {p} (wanted {n} more)")
        self.pos = p + n
        return self.data[p:p + n]

    def byte(self) -> int:
        p = self.pos
        if p >= self.end:
            raise RdbError(f"unexpected end of data at byte {p}")
        self.pos = p + 1
        return self.data[p]

    def uint_le(self, n: int) -> int:
        return int.from_bytes(self.read(n), "little")

    def int_le(self, n: int) -> int:
        return int.from_bytes(self.read(n), "little", signed=True)

    def length(self) -> tuple[int, bool]:
        """``rdbLoadLenByRef``: (value, is_encoded); encoded: value is an RDB_ENC_* kind."""
        first = self.byte()
        kind = first >> 6
        if kind == RDB_ENCVAL:
            return first & 0x3F, True
        if kind == RDB_6BITLEN:
            return first & 0x3F, False
        if kind == RDB_14BITLEN:
            return ((first & 0x3F) << 8) | self.byte(), False
        if first == RDB_32BITLEN:
            return int.from_bytes(self.read(4), "big"), False
        if first == RDB_64BITLEN:
            return int.from_bytes(self.read(8), "big"), False
        raise RdbError(f"unknown length encoding {first:#x} at byte {self.pos - 1}")

    def length_value(self) -> int:
        """A plain length (``rdbLoadLen`` where an encoded one is an error)."""
        value, encoded = self.length()
        if encoded:
            raise RdbError(f"an encoded value where a length was expected at byte {self.pos - 1}")
        return value

    def string(self) -> bytes:
        """``rdbGenericLoadStringObject``: raw, integer-encoded or LZF-compressed."""
        value, encoded = self.length()
        if not encoded:
            return self.read(value)
        if value == RDB_ENC_INT8:
            return b"%d" % self.int_le(1)
        if value == RDB_ENC_INT16:
            return b"%d" % self.int_le(2)
        if value == RDB_ENC_INT32:
            return b"%d" % self.int_le(4)
        if value == RDB_ENC_LZF:
            clen = self.length_value()
            ulen = self.length_value()
            packed = self.read(clen)
            # An LZF back reference expands at most 264 bytes from 2 input bytes: a
            # stated length beyond that cannot be honest (and is never allocated).
            if ulen > 132 * max(clen, 1) + 32:
                raise RdbError("LZF string claims more bytes than its data can hold")
            return lzf_decompress(packed, ulen)
        raise RdbError(f"unknown string encoding {value}")

    def millis(self) -> int:
        """``rdbLoadMillisecondTime``: signed 64-bit little-endian."""
        return self.int_le(8)

    def double(self) -> float:
        """``rdbLoadBinaryDoubleValue``: IEEE 754, little-endian."""
        return struct.unpack("<d", self.read(8))[0]

    def string_double(self) -> float:
        """``rdbLoadDoubleValue`` (old ZSET scores): a length byte then ASCII."""
        n = self.byte()
        if n == 255:
            return float("-inf")
        if n == 254:
            return float("inf")
        if n == 253:
            return float("nan")
        try:
            return float(self.read(n))
        except ValueError:
            raise RdbError("malformed double") from None

    def stream_id(self) -> StreamID:
        """A raw 128-bit big-endian stream ID (PEL entries)."""
        raw = self.read(16)
        return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")

    def len_id(self) -> StreamID:
        """A stream ID stored as two lengths (ms, seq)."""
        return self.length_value(), self.length_value()


# ---------------------------------------------------------------- writer
class Writer:
    """Builds RDB bytes; :meth:`getvalue` returns them."""

    __slots__ = ("buf", "compress", "nodes_live")

    def __init__(self, compress: bool = False) -> None:
        self.buf = bytearray()
        self.compress = compress  # LZF-compress strings over 20 bytes, as rdbcompression does
        self.nodes_live = 0  # the live entries of the stream nodes written (_write_nodes_steps)

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def raw(self, data: bytes | bytearray) -> None:
        self.buf += data

    def byte(self, b: int) -> None:
        self.buf.append(b)

    def length(self, n: int) -> None:
        """``rdbSaveLen``."""
        if n < 0 or n > _U64:
            raise ValueError(f"length {n} out of range")
        if n < 1 << 6:
            self.buf.append(n)
        elif n < 1 << 14:
            self.buf += bytes(((n >> 8) | 0x40, n & 0xFF))
        elif n <= 0xFFFFFFFF:
            self.buf.append(RDB_32BITLEN)
            self.buf += n.to_bytes(4, "big")
        else:
            self.buf.append(RDB_64BITLEN)
            self.buf += n.to_bytes(8, "big")

    def string(self, s: bytes) -> None:
        """``rdbSaveRawString``: integer encoding when it fits, else LZF or raw."""
        if len(s) <= 11:
            v = string2ll(s)
            if v is not None:
                if -(1 << 7) <= v < 1 << 7:
                    self.buf.append(0xC0 | RDB_ENC_INT8)
                    self.buf += v.to_bytes(1, "little", signed=True)
                    return
                if -(1 << 15) <= v < 1 << 15:
                    self.buf.append(0xC0 | RDB_ENC_INT16)
                    self.buf += v.to_bytes(2, "little", signed=True)
                    return
                if -(1 << 31) <= v < 1 << 31:
                    self.buf.append(0xC0 | RDB_ENC_INT32)
                    self.buf += v.to_bytes(4, "little", signed=True)
                    return
        if self.compress and len(s) > 20:
            packed = lzf_compress(s)
            if packed is not None:
                self.buf.append(0xC0 | RDB_ENC_LZF)
                self.length(len(packed))
                self.length(len(s))
                self.buf += packed
                return
        self.length(len(s))
        self.buf += s

    def millis(self, t: int) -> None:
        self.buf += (t & _U64).to_bytes(8, "little")

    def double(self, x: float) -> None:
        self.buf += struct.pack("<d", x)

    def stream_id(self, id_: StreamID) -> None:
        self.buf += id_[0].to_bytes(8, "big") + id_[1].to_bytes(8, "big")

    def len_id(self, id_: StreamID) -> None:
        self.length(id_[0])
        self.length(id_[1])
