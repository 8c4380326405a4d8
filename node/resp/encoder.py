"""Reply encoding: Python values -> RESP2 or RESP3 bytes.

Commands return plain values and never see the protocol version; one function
here turns them into bytes for the connection's protocol (mini-redis's
"frame" layer).  The mapping:

=====================  ==========================  ===========================
value                  RESP2                       RESP3
=====================  ==========================  ===========================
``bytes``/bytearray    bulk string                 bulk string
``str``                simple string (``+OK``)     simple string
``int``                integer                     integer
``None``               null bulk ``$-1``           null ``_``
``NULL_ARRAY``         null array ``*-1``          null ``_``
``list``/``tuple``     array                       array
``dict``               flat array k1 v1 k2 v2      map ``%``
``set``/``frozenset``  array                       set ``~``
``float``              bulk string                 double ``,``
``bool``               integer 1/0                 boolean ``#t``/``#f``
``ReplyError``         error ``-ERR ...``          error
``Verbatim``           bulk string                 verbatim ``=``
``Push``               array                       push ``>``
``Entries``            array (as a list)           array
=====================  ==========================  ===========================

:class:`Entries` is a list of stream entries, ``[[b"ms-seq", [f1, v1, ...]], ...]``,
that XRANGE, XREAD and XREADGROUP return: the same value to whoever reads it, but
encoded in one join of its parts rather than one call per entry and field (a
reply of 100 entries is over 600 values).  The bulk-string headers of short
values come from a table, and the encoding of an entry is kept for the next
reply that holds the same field list object (and ID): the entry logs hand out the same
lists for as long as a block stays decoded (crdt/blocks.py), and an entry never
changes, so a range read again is mostly joins of encodings already made.  The
cache holds the list it was made from (so its identity cannot be reused) and
forgets its oldest quarter when it holds ``_ROWS_CACHED`` encodings; an entry larger than
``_ROW_CACHED_MAX`` bytes is not kept.
"""

from __future__ import annotations

from itertools import islice


class ReplyError(Exception):
    """An error reply; also raised by commands to abort with that reply.

    The message includes its code, e.g. ``"ERR syntax error"`` or
    ``"WRONGTYPE ..."``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _NullArray:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"


NULL_ARRAY = _NullArray()


class Verbatim(bytes):
    """A verbatim text reply (RESP3 ``=``, format ``txt``)."""


class Push(list):
    """An out-of-band push (RESP3 ``>``)."""


class Entries(list):
    """Stream entries ``[[b"ms-seq", [f1, v1, ...]], ...]`` (a row that is not this
    shape, such as a deleted entry's ``[id, NULL_ARRAY]`` or XREADGROUP CLAIM's four
    values, is encoded as any other value).

    ``parts``, when given, is the encoding of each row (``node.resp.entries.entry_encoding``), made
    beforehand (node/commands/entryreply.py): the reply is then their join.  A value
    with ``parts`` is not changed afterwards (a row count that no longer matches sends
    the encoder back to the rows)."""

    # a class default rather than an ``__init__``: Entries are made on every read, and
    # list's own constructor is much cheaper than a Python one
    parts: list | None = None


_HEADERS = 1024
_BULK_HEADER = [b"$%d\r\n" % n for n in range(_HEADERS)]  # "$<len>\r\n" of the short bulk strings
# "*<n>\r\n" of the short arrays: a list index, where formatting the header took 0.07 us more
# (a consumer's XREADGROUP reply has three arrays)
_ARRAY_HEADER = [b"*%d\r\n" % n for n in range(_HEADERS)]


_ROWS_CACHED = 4096  # entries
_ROW_CACHED_MAX = 512  # bytes of one entry's encoding: at most 2 MB held, and never a large entry
_rows_encoded: dict[int, tuple[list, bytes, bytes]] = {}  # id(field list) -> (the list, the ID, the row's encoding)


def _encode_row(eid: bytes, flat: list, resp3: bool) -> bytes:
    """An entry ``[eid, flat]`` as RESP, from the cache when it has it."""
    hit = _rows_encoded.get(id(flat))
    if hit is not None and hit[0] is flat and hit[1] == eid:
        return hit[2]
    headers = _BULK_HEADER
    parts = [b"*2\r\n$%d\r\n%b\r\n*%d\r\n" % (len(eid), eid, len(flat))]
    add = parts.append
    cacheable = True  # only bulk strings: the same bytes in RESP2 and RESP3
    for x in flat:
        if type(x) is bytes:
            n = len(x)
            add(headers[n] if n < _HEADERS else b"$%d\r\n" % n)
            add(x)
            add(b"\r\n")
        else:
            one = bytearray()
            encode(one, x, resp3)
            add(bytes(one))
            cacheable = False
    data = b"".join(parts)
    if cacheable and len(data) <= _ROW_CACHED_MAX:
        if len(_rows_encoded) >= _ROWS_CACHED:
            # forget the oldest quarter at once: deleting one key at a time from the front
            # leaves a run of dead slots that every later ``next(iter(...))`` walks again
            # (µs per reply once the cache is full)
            for key in list(islice(_rows_encoded, _ROWS_CACHED // 4)):
                del _rows_encoded[key]
        _rows_encoded[id(flat)] = (flat, eid, data)
    return data


def _encode_entries(out: bytearray, rows: Entries, resp3: bool) -> None:
    made = rows.parts
    n = len(rows)
    if made is not None and len(made) == n:
        out += _ARRAY_HEADER[n] if n < _HEADERS else b"*%d\r\n" % n
        if n == 1:  # (XREADGROUP COUNT 1: no join)
            out += made[0]
        else:
            out += b"".join(made)
        return
    parts: list[bytes | bytearray] = [b"*%d\r\n" % len(rows)]
    add = parts.append
    for row in rows:
        if len(row) == 2 and type(row[1]) is list and type(row[0]) is bytes:
            add(_encode_row(row[0], row[1], resp3))
        else:
            one = bytearray()
            encode(one, row, resp3)
            add(one)
    out += b"".join(parts)


def _fmt_double(v: float) -> bytes:
    if v != v:
        return b"nan"
    if v in (float("inf"), float("-inf")):
        return b"inf" if v > 0 else b"-inf"
    r = repr(v)
    if r.endswith(".0"):
        r = r[:-2]
    return r.encode()


def encode(out: bytearray, v, resp3: bool) -> None:
    t = type(v)
    if t is bytes or t is bytearray:
        out += b"$%d\r\n%b\r\n" % (len(v), v)
    elif t is list or t is tuple:
        n = len(v)
        out += _ARRAY_HEADER[n] if n < _HEADERS else b"*%d\r\n" % n
        for x in v:
            if type(x) is bytes:  # the common element (entry fields): no call
                out += b"$%d\r\n%b\r\n" % (len(x), x)
            elif type(x) is Entries:  # a stream's entries in a read's reply: one call fewer
                _encode_entries(out, x, resp3)
            else:
                encode(out, x, resp3)
    elif t is Entries:
        _encode_entries(out, v, resp3)
    elif t is int:
        out += b":%d\r\n" % v
    elif t is str:
        out += b"+%b\r\n" % v.encode()
    elif v is None:
        out += b"_\r\n" if resp3 else b"$-1\r\n"
    elif t is dict:
        out += (b"%%%d\r\n" if resp3 else b"*%d\r\n") % (len(v) * (1 if resp3 else 2))
        for k, x in v.items():
            encode(out, k, resp3)
            encode(out, x, resp3)
    elif isinstance(v, ReplyError):
        out += b"-%b\r\n" % v.message.replace("\r", " ").replace("\n", " ").encode()
    elif v is NULL_ARRAY:
        out += b"_\r\n" if resp3 else b"*-1\r\n"
    elif t is bool:
        out += (b"#t\r\n" if v else b"#f\r\n") if resp3 else (b":1\r\n" if v else b":0\r\n")
    elif t is float:
        d = _fmt_double(v)
        out += b",%b\r\n" % d if resp3 else b"$%d\r\n%b\r\n" % (len(d), d)
    elif t is set or t is frozenset:
        out += (b"~%d\r\n" if resp3 else b"*%d\r\n") % len(v)
        for x in v:
            encode(out, x, resp3)
    elif t is Verbatim:
        if resp3:
            out += b"=%d\r\ntxt:%b\r\n" % (len(v) + 4, v)
        else:
            out += b"$%d\r\n%b\r\n" % (len(v), v)
    elif t is Push:
        out += (b">%d\r\n" if resp3 else b"*%d\r\n") % len(v)
        for x in v:
            encode(out, x, resp3)
    elif isinstance(v, memoryview):
        encode(out, bytes(v), resp3)
    else:
        raise TypeError(f"cannot encode reply value {v!r}")


def to_bytes(v, resp3: bool = False) -> bytes:
    out = bytearray()
    encode(out, v, resp3)
    return bytes(out)
