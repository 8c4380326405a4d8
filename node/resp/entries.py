"""Stream entries as RESP, a decoded block at a time: the memo of node/commands/entryreply.py.

A decoded block's memo is two lists aligned with its entries: the reply row of each entry
(``[b"ms-seq", [f1, v1, ...]]``, the same list object in every reply) and the row's RESP
encoding (bulk strings only: the same bytes in RESP2 and RESP3), or None for a deleted
entry.  A range read of a large stream fills a memo per block it reaches, entry by entry,
so this module is compiled with mypyc (setup.py): filling it was half of a 50,000-entry
XRANGE's time as plain Python.
"""

from __future__ import annotations

MEMO_ENTRY_MAX = 16384  # bytes of fields and values past which an entry's encoding is not kept

_HEADERS = 1024
_BULK_HEADER: list[bytes] = [b"$%d\r\n" % n for n in range(_HEADERS)]  # "$<len>\r\n" of short bulk strings


def entry_encoding(eid: bytes, flat: list) -> bytes | None:
    """An entry ``[eid, flat]`` as RESP when its fields are all bulk strings (the same
    bytes in RESP2 and RESP3), else None."""
    headers = _BULK_HEADER
    parts: list[bytes] = [b"*2\r\n$%d\r\n%b\r\n*%d\r\n" % (len(eid), eid, len(flat))]
    for x in flat:
        if type(x) is not bytes:
            return None
        n = len(x)
        parts.append(headers[n] if n < _HEADERS else b"$%d\r\n" % n)
        parts.append(x)
        parts.append(b"\r\n")
    return b"".join(parts)


def fill_memo(memo: list, entries: list) -> tuple[list, list]:
    """The block's memo [rows, encodings], extended to every entry decoded so far
    (``entries``: the block's decoded entries, ``(id, flat, dead, offset)``)."""
    if not memo:
        memo.append([])
        memo.append([])
    rows: list = memo[0]
    encs: list = memo[1]
    n = len(rows)
    total = len(entries)
    for k in range(n, total):
        entry: tuple = entries[k]
        if entry[2]:  # deleted
            rows.append(None)
            encs.append(None)
            continue
        eid: tuple = entry[0]
        flat: list = entry[1]
        idb = b"%d-%d" % (eid[0], eid[1])
        rows.append([idb, flat])
        size = 0
        for x in flat:
            size += len(x)
        # a large entry is not copied into the memo: its reply encodes it on the spot
        encs.append(entry_encoding(idb, flat) if size <= MEMO_ENTRY_MAX else None)
    return rows, encs


def first_live(memo: list, entries: list, i: int, j: int, ids: list) -> tuple[list, bytes | None] | None:
    """The first live entry of ``entries[i:j]`` (a run of ``EntryLog.first_run``) from the
    block's memo: its reply row and encoding, its ID appended to ``ids``; None when every
    one of them is deleted.  A consumer reading one entry at a time (XREADGROUP COUNT 1)
    runs this for every entry: compiled, with the memo's filling, it is one native call."""
    rows, encs = fill_memo(memo, entries)
    for k in range(i, j):
        row = rows[k]
        if row is not None:  # (None: a deleted entry)
            entry: tuple = entries[k]
            ids.append(entry[0])
            return row, encs[k]
    return None
