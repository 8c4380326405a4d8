"""LZF, as RDB strings use it: :func:`lzf_compress` and :func:`lzf_decompress` (sans-IO).

Theory of operation
-------------------
An LZF stream is a sequence of tokens (``lzf_d.c``): a control byte below 32 starts a
literal run of that many bytes plus one; any other control byte is a back reference,
its top three bits the length minus two (7: one more byte follows to add), its low five
bits and the next byte the distance minus one, up to 8 KiB back.  A back reference may
overlap what it writes (distance 1 repeats the last byte).

The compressor is Braid's own, not ``lzf_c.c`` (a DUMP with ``rdbcompression yes`` is any
valid LZF, which Redis reads; the differential tests compare payloads with compression
off): at each position it looks up the *last position so far* whose next three bytes are
the same (positions inside a back reference are skipped, never recorded); if that is at
most 8 KiB back, it extends the match as far as the bytes agree (at most 264) and emits it,
else the byte joins the literal run.  Its output is a function of the input alone, so two
regions, or the compiled and the pure build, write the same bytes.

Two implementations of each function, with the same results, byte for byte:

- the *native* ones (:func:`compress_native`, :func:`decompress_native`), written for
  mypyc (setup.py compiles this module): ``i64`` locals, the table of last positions an
  open-addressing hash table in a ``librt.vecs.vec[i64]`` (each slot the 24-bit key and
  the position plus one; the key is compared, so the table is exact), the output built
  in a ``librt.strings.BytesWriter``; compiled, every step is a C operation on machine
  integers: 20-30 times faster than the plain ones on data that compresses little, twice
  as fast on very repetitive data (where the plain ones compare and copy whole matches);
- the *plain* ones (:func:`compress_plain`, :func:`decompress_plain`): a dict of 3-byte
  keys and slices, what CPython runs fastest interpreted.

``lzf_compress`` and ``lzf_decompress`` are the native ones when this module is compiled
and the plain ones otherwise (the pure build: ``BRAID_PURE=1``, a machine without a C
compiler, the Docker image), where the native ones would run 2 to 20 times slower.
``tests/test_rdb.py`` checks that both give the same bytes.

A malformed input makes :func:`lzf_decompress` raise :class:`LzfError` (``rdb`` turns it
into its ``RdbError``); it never writes more than ``expected_len`` bytes, so a stated
length does not make it allocate beyond what the input can expand to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from librt.strings import BytesWriter
from librt.vecs import vec
from mypy_extensions import i64, u8

MAX_OFF: Final = 1 << 13              # a back reference reaches at most 8 KiB back
MAX_REF: Final = (1 << 8) + (1 << 3)  # ...and copies at most 264 bytes
MAX_LIT: Final = 1 << 5               # a literal run holds at most 32 bytes
_MAX_TABLE: Final = 1 << 25           # 2**24 keys at most: a bigger table would be emptier still


class LzfError(ValueError):
    """Malformed LZF data; ``str()`` says what is wrong."""


# ---------------------------------------------------------------- native (for mypyc)
def compress_native(data: bytes) -> bytes | None:
    """LZF-compress ``data``; None unless that saves at least 4 bytes
    (``rdbSaveLzfStringObject``'s rule: Redis then stores the string raw)."""
    n: i64 = len(data)
    if n <= 4:
        return None
    size: i64 = 64
    while size < 2 * n and size < _MAX_TABLE:
        size <<= 1
    mask: i64 = size - 1
    # key | (position + 1) << 24 for each 3-byte key seen, the last position; 0: empty
    table = vec[i64]([0] * size)
    out = BytesWriter()
    limit: i64 = n - 4
    lit_start: i64 = 0  # the literal run not yet written starts here
    i: i64 = 0
    key: i64 = 0
    keyed: i64 = -2  # the position whose three bytes ``key`` holds
    s: i64
    e: i64
    run: i64
    while i + 2 < n:
        if keyed == i - 1:
            key = ((key << 8) | data[i + 2]) & 0xFFFFFF
        else:
            key = (i64(data[i]) << 16) | (i64(data[i + 1]) << 8) | data[i + 2]
        keyed = i
        h: i64 = ((key * 0x278DDE6D) >> 20) & mask
        ref: i64 = -1
        while True:
            v: i64 = table[h]
            if v == 0:
                table[h] = key | ((i + 1) << 24)
                break
            if (v & 0xFFFFFF) == key:
                ref = (v >> 24) - 1
                table[h] = key | ((i + 1) << 24)
                break
            h = (h + 1) & mask
        if ref >= 0 and i - ref - 1 < MAX_OFF:
            off: i64 = i - ref - 1
            maxlen: i64 = n - i
            if maxlen > MAX_REF:
                maxlen = MAX_REF
            length: i64 = 3
            while length < maxlen and data[ref + length] == data[i + length]:
                length += 1
            s = lit_start
            while s < i:
                run = i - s
                if run > MAX_LIT:
                    run = MAX_LIT
                out.append(u8(run - 1))
                e = s + run
                while s < e:
                    out.append(data[s])
                    s += 1
            enc: i64 = length - 2
            if enc < 7:
                out.append(u8((enc << 5) | (off >> 8)))
            else:
                out.append(u8((7 << 5) | (off >> 8)))
                out.append(u8(enc - 7))
            out.append(u8(off & 0xFF))
            i += length
            lit_start = i
            if len(out) > limit:
                return None
            continue
        i += 1
    s = lit_start
    while s < n:
        run = n - s
        if run > MAX_LIT:
            run = MAX_LIT
        out.append(u8(run - 1))
        e = s + run
        while s < e:
            out.append(data[s])
            s += 1
    if len(out) > limit:
        return None
    return out.getvalue()


def decompress_native(data: bytes, expected_len: int) -> bytes:
    """``lzf_decompress``: exactly ``expected_len`` bytes or :class:`LzfError`."""
    # a length no input can expand to fails as too short, whatever it is
    want: i64 = expected_len if expected_len < (1 << 62) else (1 << 62)
    out = BytesWriter()
    i: i64 = 0
    n: i64 = len(data)
    o: i64 = 0  # len(out)
    e: i64
    while i < n:
        ctrl: i64 = data[i]
        i += 1
        if ctrl < 32:  # a literal run of ctrl + 1 bytes
            run: i64 = ctrl + 1
            if i + run > n:
                raise LzfError("LZF literal run past the end of the input")
            if o + run > want:
                raise LzfError("LZF data longer than its stated length")
            e = i + run
            while i < e:
                out.append(data[i])
                i += 1
            o += run
            continue
        length: i64 = ctrl >> 5
        if length == 7:
            if i >= n:
                raise LzfError("LZF back reference cut short")
            length += data[i]
            i += 1
        if i >= n:
            raise LzfError("LZF back reference cut short")
        back: i64 = ((ctrl & 0x1F) << 8) + data[i] + 1
        i += 1
        length += 2
        start: i64 = o - back
        if start < 0:
            raise LzfError("LZF back reference before the start of the output")
        if o + length > want:
            raise LzfError("LZF data longer than its stated length")
        e = start + length
        while start < e:  # byte by byte: the copy may overlap what it writes
            out.append(out[start])
            start += 1
        o += length
    if o != want:
        raise LzfError("LZF data shorter than its stated length")
    return out.getvalue()


# ---------------------------------------------------------------- plain (interpreted)
def compress_plain(data: bytes) -> bytes | None:
    """:func:`compress_native`'s result, computed the way the interpreter does fastest."""
    n = len(data)
    if n <= 4:
        return None
    out = bytearray()
    table: dict[bytes, int] = {}
    lit_start = 0
    i = 0
    while i + 2 < n:
        key = data[i:i + 3]
        ref = table.get(key)
        table[key] = i
        if ref is not None and i - ref - 1 < MAX_OFF:
            off = i - ref - 1
            maxlen = min(n - i, MAX_REF)
            if data[ref + 3:ref + maxlen] == data[i + 3:i + maxlen]:
                length = maxlen  # repetitive data: the longest match, compared in C
            else:  # they differ before maxlen
                length = 3
                while data[ref + length] == data[i + length]:
                    length += 1
            while lit_start < i:
                run = min(MAX_LIT, i - lit_start)
                out.append(run - 1)
                out += data[lit_start:lit_start + run]
                lit_start += run
            enc = length - 2
            if enc < 7:
                out.append((enc << 5) | (off >> 8))
            else:
                out.append((7 << 5) | (off >> 8))
                out.append(enc - 7)
            out.append(off & 0xFF)
            i += length
            lit_start = i
            if len(out) > n - 4:
                return None
            continue
        i += 1
    while lit_start < n:
        run = min(MAX_LIT, n - lit_start)
        out.append(run - 1)
        out += data[lit_start:lit_start + run]
        lit_start += run
    return bytes(out) if len(out) <= n - 4 else None


def decompress_plain(data: bytes, expected_len: int) -> bytes:
    """:func:`decompress_native`'s result, computed the way the interpreter does fastest."""
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        ctrl = data[i]
        i += 1
        if ctrl < 32:  # a literal run of ctrl + 1 bytes
            run = ctrl + 1
            if i + run > n:
                raise LzfError("LZF literal run past the end of the input")
            if len(out) + run > expected_len:
                raise LzfError("LZF data longer than its stated length")
            out += data[i:i + run]
            i += run
            continue
        length = ctrl >> 5
        if length == 7:
            if i >= n:
                raise LzfError("LZF back reference cut short")
            length += data[i]
            i += 1
        if i >= n:
            raise LzfError("LZF back reference cut short")
        back = ((ctrl & 0x1F) << 8) + data[i] + 1
        i += 1
        length += 2
        start = len(out) - back
        if start < 0:
            raise LzfError("LZF back reference before the start of the output")
        if len(out) + length > expected_len:
            raise LzfError("LZF data longer than its stated length")
        if back >= length:
            out += out[start:start + length]
        else:  # the copy overlaps what it writes: the last ``back`` bytes, repeated
            out += (out[start:] * (length // back + 1))[:length]
    if len(out) != expected_len:
        raise LzfError("LZF data shorter than its stated length")
    return bytes(out)


def _compiled() -> bool:
    """Is this module running compiled?  mypyc's functions are not Python functions."""
    return type(_compiled).__name__ != "function"


COMPILED: Final = _compiled()
lzf_compress: Final[Callable[[bytes], bytes | None]] = compress_native if COMPILED else compress_plain
lzf_decompress: Final[Callable[[bytes, int], bytes]] = decompress_native if COMPILED else decompress_plain
