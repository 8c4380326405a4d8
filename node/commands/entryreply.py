"""Stream entries as reply values, made from the entry logs' decoded blocks a slice at a time.

Theory of operation
-------------------
A range read (XRANGE, XREVRANGE, XREAD, XREADGROUP) answers ``[[b"ms-seq", [f1, v1, ...]], ...]``
(:class:`~node.resp.encoder.Entries`).  Building that list entry by entry and then
encoding it entry by entry is most of such a read's cost, and a stream read over and
over (a dashboard's XRANGE, readers catching up on the same blocks) would redo it
each time.  So, for a key with a single origin log (every key of a single region),
the reply is built from each decoded block's *memo* (``EntryLog.runs``, filled by the
compiled node/resp/entries.py): two lists
aligned with the block's entries, the reply row of each entry (``[b"ms-seq", flat]``,
the same list object in every reply) and its RESP encoding (only bulk strings: the
same bytes in RESP2 and RESP3).  A read then takes slices of both, and the encoder
writes the joined encodings without looking at the rows.

The memo of a block is filled the first time a read reaches the block, and extended
when entries were appended to it since; the log drops it with the decoded block (on
XDEL, a trim, or when the block leaves the log's small cache of decoded blocks), so
its memory is bounded by what that cache holds (and an entry larger than
``node.resp.entries.MEMO_ENTRY_MAX`` keeps no encoding: a reply holding one is encoded row by row).
Rows are shared between replies:
nothing may change a reply value after the command returned it (nothing does).

A key with several origin logs (a region of a cluster where several regions write it)
takes each log's slices the same way and merges them by ID: a stable sort of the logs'
sorted runs, in C, rather than a merge of generators entry by entry.
"""

from __future__ import annotations

from operator import itemgetter

from node.resp.encoder import Entries
from node.resp.entries import fill_memo, first_live

_entry_id = itemgetter(0)  # a decoded entry's ID


def _log_range(log, start, end, count: int, rows: list, encs: list, ids: list | None) -> None:
    """One log's live entries with start <= id <= end, ascending, at most ``count`` (0: all),
    appended to ``rows`` and ``encs`` (both empty on the way in), their IDs to ``ids``."""
    run = log.first_run(start, end)  # a read of a few entries ends in the first block
    if run is None or _take_run(run, count, rows, encs, ids):
        return
    rest = log.runs(start, end)
    next(rest)  # the first run: taken
    for run in rest:
        if _take_run(run, count, rows, encs, ids):
            return


def _take_run(run: tuple, count: int, rows: list, encs: list, ids: list | None,
              descending: bool = False) -> bool:
    """Append one block's run to the reply (see ``EntryLog.runs``; ``descending``: from its last
    entry down, as ``revruns`` is read); True once ``count`` is reached."""
    entries, memo, i, j, dead = run
    mrows, mencs = fill_memo(memo, entries)
    if dead:  # skip the deleted entries (their rows are None)
        for k in range(j - 1, i - 1, -1) if descending else range(i, j):
            row = mrows[k]
            if row is not None:
                rows.append(row)
                encs.append(mencs[k])
                if ids is not None:
                    ids.append(entries[k][0])
                if len(rows) == count:  # (count 0: never)
                    return True
    else:
        left = count - len(rows)
        if descending:
            if count > 0 and j - i > left:
                i = j - left
            # entries[i:j] backwards (a stop of -1 would mean the list's end, a start of -1 its last)
            part = slice(j - 1, i - 1, -1) if i else slice(j - 1, None, -1) if j else slice(0)
        else:
            if count > 0 and j - i > left:
                j = i + left
            part = slice(i, j)
        rows += mrows[part]
        encs += mencs[part]
        if ids is not None:
            ids += map(_entry_id, entries[part])
    return count > 0 and len(rows) >= count


def _log_revrange(log, start, end, count: int, rows: list, encs: list, ids: list | None) -> None:
    """:func:`_log_range`, descending."""
    for run in log.revruns(start, end):
        if _take_run(run, count, rows, encs, ids, descending=True):
            return


def _merged(logs: dict, start, end, count: int, ids: list | None, descending: bool) -> tuple[list, list]:
    """Several origin logs' rows and encodings in one ID order (ties: the lower origin first
    ascending, the higher first descending, as ``Stream.range`` / ``revrange`` merge): each
    log gives at most ``count`` entries from its memos, their concatenation (in origin order)
    is sorted by ID - a stable sort of a few sorted runs - and cut to ``count``."""
    read = _log_revrange if descending else _log_range
    tagged: list = []
    for origin in sorted(logs, reverse=descending):
        rows: list = []
        encs: list = []
        found: list = []
        read(logs[origin], start, end, count, rows, encs, found)
        tagged += zip(found, rows, encs, strict=True)
    tagged.sort(key=_entry_id, reverse=descending)
    if count > 0:
        del tagged[count:]
    if ids is not None:
        ids += map(_entry_id, tagged)
    return [t[1] for t in tagged], [t[2] for t in tagged]


def _entries(s, start, end, count: int, ids: list | None, descending: bool) -> Entries:
    logs = s.logs
    if len(logs) != 1:
        rows, encs = _merged(logs, start, end, count, ids, descending)
    else:
        rows, encs = [], []
        read = _log_revrange if descending else _log_range
        read(next(iter(logs.values())), start, end, count, rows, encs, ids)
    reply = Entries(rows)
    if None not in encs:
        reply.parts = encs
    return reply


def range_entries(s, start, end, count: int, ids: list | None = None) -> Entries:
    """XRANGE's reply: live entries with start <= id <= end, ascending, at most ``count``
    (0: all).  ``ids``, when given, gets their IDs (for the group's bookkeeping of a
    XREADGROUP that replies this way)."""
    return _entries(s, start, end, count, ids, descending=False)


def first_entry(log, start, end, ids: list) -> Entries | None:
    """``range_entries`` of COUNT 1 for a stream whose only log is ``log`` (a consumer taking
    one entry at a time), from the first block's run without the general reader's slices;
    None when that run holds no live entry (the general reader then looks further)."""
    run = log.first_run(start, end)
    if run is None:
        reply = Entries([])
        reply.parts = []
        return reply
    entries, memo, i, j, _dead = run
    found = first_live(memo, entries, i, j, ids)
    if found is None:
        return None
    row, enc = found
    reply = Entries([row])
    if enc is not None:
        reply.parts = [enc]
    return reply


def revrange_entries(s, start, end, count: int) -> Entries:
    """XREVRANGE's reply: live entries with start <= id <= end, descending, at most
    ``count`` (0: all)."""
    return _entries(s, start, end, count, None, descending=True)
