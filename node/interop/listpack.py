"""Redis's listpack, and a stream node (one listpack) as a Braid block and back.

Theory of operation
-------------------
An RDB stream value (a DUMP payload, a stream in an RDB file) is a radix tree of nodes,
each a *listpack*: a byte count, an element count, elements, and a 0xFF terminator.  An
element is an integer in one of six widths or a string with a 6-, 12- or 32-bit length,
followed by its *back-length* (its own encoded size, 7 bits a byte, read right to left, so
the list can be walked backwards).  A stream node's elements are its master entry (live
and deleted counts, the master fields, a 0), then each entry: flags, the ID as deltas from
the node's master ID, either the values alone (``SAMEFIELDS``: the master's fields) or a
field count and the fields and values, and a back count of the entry's elements.

Decoding checks every count, length and back-length against the bytes (a corrupt payload
is :class:`RdbError`, never a crash or a wrong stream).  A Braid block keeps the same
entries in its own layout (crdt/blocks.py), so a node maps to one block and back.

This module is compiled with mypyc (setup.py), with crdt/blocks.py: DUMP and RESTORE of a
large stream spend their time here, one element at a time, and as plain Python a
50,000-entry stream held the event loop for half a second each way.
"""

from __future__ import annotations

from typing import Final

from crdt.blocks import DELETED, SAMEFIELDS, Block
from crdt.ids import MIN_ID, StreamID, string2ll

U64: Final = (1 << 64) - 1


class RdbError(ValueError):
    """Malformed or unsupported RDB data; ``str()`` says what and where."""


def signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


# ---------------------------------------------------------------- elements
def backlen_size(n: int) -> int:
    return 1 if n <= 127 else 2 if n < 16383 else 3 if n < 2097151 else 4 if n < 268435455 else 5


_BACKLEN_SMALL: Final[list[bytes]] = [bytes((n,)) for n in range(128)]
_SMALL_INT_ELEMENTS: Final[list[bytes]] = [bytes((v, 1)) for v in range(128)]


def backlen(n: int) -> bytes:
    """``lpEncodeBacklen``: the element's length, 7 bits a byte, read right to left."""
    if n <= 127:
        return _BACKLEN_SMALL[n]
    if n < 16383:  # two bytes: an element of 128 to 16382 bytes, as a 1 KB value
        return bytes((n >> 7, (n & 127) | 128))
    size = backlen_size(n)
    out = bytearray()
    for k in range(size - 1, -1, -1):
        b = (n >> (7 * k)) & 127
        out.append(b if k == size - 1 else b | 128)
    return bytes(out)


def _lp_int(v: int) -> bytes:
    if 0 <= v <= 127:
        return bytes((v,))
    if -4096 <= v <= 4095:
        u = v & 0x1FFF
        return bytes((0xC0 | (u >> 8), u & 0xFF))
    if -32768 <= v <= 32767:
        return b"\xf1" + (v & 0xFFFF).to_bytes(2, "little")
    if -8388608 <= v <= 8388607:
        return b"\xf2" + (v & 0xFFFFFF).to_bytes(3, "little")
    if -2147483648 <= v <= 2147483647:
        return b"\xf3" + (v & 0xFFFFFFFF).to_bytes(4, "little")
    return b"\xf4" + (v & U64).to_bytes(8, "little")


def _is_numeric_start(c: int) -> bool:
    return c == 0x2D or 0x30 <= c <= 0x39  # "-" or a digit


def lp_element(x: bytes | int) -> bytes:
    """One element as the listpack holds it, back-length included (a string that is a
    canonical integer is written as the integer, as Redis does)."""
    if isinstance(x, int):
        if 0 <= x <= 127:
            return _SMALL_INT_ELEMENTS[x]
        enc = _lp_int(x)
    elif len(x) < 64 and not (len(x) > 0 and _is_numeric_start(x[0])):
        return bytes((0x80 | len(x),)) + x + _BACKLEN_SMALL[len(x) + 1]
    else:
        v = string2ll(x) if len(x) > 0 and len(x) <= 20 else None
        if v is not None:
            enc = _lp_int(v)
        else:
            n = len(x)
            if n < 64:
                enc = bytes((0x80 | n,)) + x
            elif n < 4096:
                enc = bytes((0xE0 | (n >> 8), n & 0xFF)) + x
            else:
                enc = b"\xf0" + n.to_bytes(4, "little") + x
    return enc + backlen(len(enc))


def listpack_encode(elements: list[bytes | int]) -> bytes:
    """A listpack of ``elements`` (ints, or byte strings that become ints when canonical)."""
    body = bytearray(b"\0\0\0\0\0\0")  # the header, filled in at the end: one buffer, one copy out
    count = 0
    for x in elements:
        count += 1
        # the common elements written here, without a call or a copy of the value: a stream
        # node is mostly small ints (flags, ID deltas, counts) and values
        if isinstance(x, int):
            if 0 <= x <= 127:
                body += _SMALL_INT_ELEMENTS[x]
                continue
        else:
            n = len(x)
            if 64 <= n < 4096:  # too long to be an integer
                body.append(0xE0 | (n >> 8))
                body.append(n & 0xFF)
                body += x
                body += backlen(n + 2)
                continue
        body += lp_element(x)
    body.append(0xFF)
    total = len(body)
    if total > 0xFFFFFFFF:
        raise ValueError("listpack over 4 GiB")
    body[0:4] = total.to_bytes(4, "little")
    body[4:6] = min(count, 0xFFFF).to_bytes(2, "little")
    return bytes(body)


def listpack_decode(lp: bytes) -> list[bytes | int]:
    """Every element of a listpack: ints for integer encodings, bytes for strings.

    Checks the header's byte count, each element's back-length, the element count
    (unless the header says it is unknown) and the terminator."""
    n = len(lp)
    if n < 7:
        raise RdbError("listpack shorter than its header")
    if int.from_bytes(lp[0:4], "little") != n:
        raise RdbError("listpack header size disagrees with its length")
    declared = lp[4] | (lp[5] << 8)
    out: list[bytes | int] = []
    i = 6
    end = n - 1
    while i < end:
        start = i
        b = lp[i]
        val: bytes | int
        if b < 0x80:
            val = b
            i += 1
        elif b < 0xC0:
            ln = b & 0x3F
            val = lp[i + 1:i + 1 + ln]
            i += 1 + ln
        elif b < 0xE0:
            if i + 2 > end:
                raise RdbError("listpack element past the end")
            u = ((b & 0x1F) << 8) | lp[i + 1]
            val = u - 0x2000 if u >= 0x1000 else u
            i += 2
        elif b < 0xF0:
            if i + 2 > end:
                raise RdbError("listpack element past the end")
            ln = ((b & 0x0F) << 8) | lp[i + 1]
            val = lp[i + 2:i + 2 + ln]
            i += 2 + ln
        elif b == 0xF0:
            if i + 5 > end:
                raise RdbError("listpack element past the end")
            ln = int.from_bytes(lp[i + 1:i + 5], "little")
            val = lp[i + 5:i + 5 + ln]
            i += 5 + ln
        elif 0xF1 <= b <= 0xF4:
            w = 2 if b == 0xF1 else 3 if b == 0xF2 else 4 if b == 0xF3 else 8
            if i + 1 + w > end:
                raise RdbError("listpack element past the end")
            val = int.from_bytes(lp[i + 1:i + 1 + w], "little", signed=True)
            i += 1 + w
        else:
            raise RdbError(f"listpack element with unknown encoding {b:#x}")
        if i > end:
            raise RdbError("listpack element past the end")
        enc_len = i - start
        if enc_len <= 127:
            if i >= end or lp[i] != enc_len:
                raise RdbError("listpack element with a wrong back-length")
            i += 1
        elif enc_len < 16383:  # two bytes, as backlen writes them
            if i + 2 > end or lp[i] != enc_len >> 7 or lp[i + 1] != (enc_len & 127) | 128:
                raise RdbError("listpack element with a wrong back-length")
            i += 2
        else:
            bl = backlen_size(enc_len)
            if i + bl > end or lp[i:i + bl] != backlen(enc_len):
                raise RdbError("listpack element with a wrong back-length")
            i += bl
        out.append(val)
    if i != end or lp[end] != 0xFF:
        raise RdbError("listpack without its terminator")
    if declared != 0xFFFF and declared != len(out):
        raise RdbError("listpack element count disagrees with its header")
    return out


# ---------------------------------------------------------------- stream nodes
def _lp_integer(x: bytes | int, what: str) -> int:
    """``lpGetIntegerIfValid``: an integer element, or a string that is one."""
    if isinstance(x, int):
        return x
    v = string2ll(x)
    if v is None:
        raise RdbError(f"stream node: {what} is not an integer")
    return v


def _lp_bytes(x: bytes | int) -> bytes:
    return b"%d" % x if isinstance(x, int) else bytes(x)


def _element(els: list[bytes | int], pos: int, what: str) -> bytes | int:
    if pos >= len(els):
        raise RdbError(f"stream node ends before its {what}")
    return els[pos]


def read_node(master: StreamID, lp: bytes) -> Block | None:
    """One listpack node as a Braid block (None if it holds no live entry)."""
    els = listpack_decode(lp)
    total = len(els)
    if not total:
        raise RdbError("empty listpack inside stream")
    live = _lp_integer(els[0], "the entry count")
    dead = _lp_integer(_element(els, 1, "deleted count"), "the deleted count")
    nfields = _lp_integer(_element(els, 2, "master field count"), "the master field count")
    if live < 0 or dead < 0 or nfields < 0 or nfields > total:
        raise RdbError("stream node with negative or impossible counts")
    pos = 3
    if pos + nfields > total:
        raise RdbError("stream node ends before its master fields")
    fields = tuple([_lp_bytes(els[pos + k]) for k in range(nfields)])
    pos += nfields
    if _lp_integer(_element(els, pos, "master terminator"), "the master terminator") != 0:
        raise RdbError("stream node master entry not terminated by 0")
    pos += 1
    block: Block | None = None
    seen_live = seen_dead = 0
    mms, mseq = master
    for _ in range(live + dead):
        if pos >= total:
            raise RdbError("stream node holds fewer entries than it counts")
        flags = _lp_integer(els[pos], "an entry's flags")
        if flags & ~(DELETED | SAMEFIELDS):
            raise RdbError(f"stream entry with unknown flags {flags}")
        ms = (mms + _lp_integer(_element(els, pos + 1, "entry ID"), "an entry's ID")) & U64
        seq = (mseq + _lp_integer(_element(els, pos + 2, "entry ID"), "an entry's ID")) & U64
        pos += 3
        flat: list[bytes]
        if flags & SAMEFIELDS:
            n = nfields
            if pos + n > total:
                raise RdbError("stream node ends before its entry values")
            flat = [b""] * (2 * n)
            for k in range(n):
                flat[2 * k] = fields[k]
                flat[2 * k + 1] = _lp_bytes(els[pos + k])
            pos += n
            extra = 3
        else:
            n = _lp_integer(_element(els, pos, "entry field count"), "an entry's field count")
            pos += 1
            if n < 0 or 2 * n > total - pos:
                raise RdbError("stream entry with an impossible field count")
            flat = [_lp_bytes(els[pos + k]) for k in range(2 * n)]
            pos += 2 * n
            extra = 4 + n
        if _lp_integer(_element(els, pos, "entry back count"), "an entry's back count") != n + extra:
            raise RdbError("stream entry back count disagrees with its fields")
        pos += 1
        if n == 0:
            raise RdbError("stream entry without fields")
        id_ = (ms, seq)
        if id_ == MIN_ID:
            raise RdbError("stream entry with ID 0-0")
        if block is None:
            block = Block(id_, fields)
        elif id_ <= block.last:
            raise RdbError("stream node entries out of ID order")
        offset = len(block.buf)
        block.append(id_, flat)
        if flags & DELETED:
            block.mark_deleted(offset)
            seen_dead += 1
        else:
            seen_live += 1
    if pos != total:
        raise RdbError("stream node holds more elements than its entries")
    if seen_live != live or seen_dead != dead:
        raise RdbError("stream node counts disagree with its entries")
    if block is None or block.live == 0:
        return None
    return block


def node_listpack(block: Block) -> bytes:
    """A block as one stream node (its listpack)."""
    fields = block.fields
    els: list[bytes | int] = [block.live, block.dead, len(fields)]
    els.extend(fields)
    els.append(0)
    fms, fseq = block.first
    buf = block.buf
    for entry in block.decode():
        ms, seq = entry[0]
        flat = entry[1]
        flags = buf[entry[3]]
        els.append(flags)
        els.append(signed64((ms - fms) & U64))
        els.append(signed64((seq - fseq) & U64))
        n = len(flat) // 2
        if flags & SAMEFIELDS:
            for k in range(n):
                els.append(flat[2 * k + 1])
            els.append(n + 3)
        else:
            els.append(n)
            els.extend(flat)
            els.append(2 * n + 4)
    return listpack_encode(els)
