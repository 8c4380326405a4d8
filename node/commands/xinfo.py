"""XINFO STREAM [FULL [COUNT n]], XINFO GROUPS, XINFO CONSUMERS, XINFO HELP.

As in Redis 8.8, a group of XINFO STREAM FULL counts the entries XNACK released
(``nacked-count``, after ``pel-count``) and lists them among its pending entries
with an empty consumer name and a delivery time of 0; they belong to no
consumer, so no consumer's ``pending`` shows them (XINFO GROUPS' ``pending``
counts them, XINFO CONSUMERS' does not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crdt import groups as cg
from crdt.ids import MAX_ID, MIN_ID, c_string
from node.commands import subcommand
from node.commands.util import parse_int
from node.resp.encoder import ReplyError

if TYPE_CHECKING:
    from node.region.session import Session


def _fmt(id_) -> bytes:
    return b"%d-%d" % id_


def _s(b: bytes) -> str:
    """An argument in an error, as Redis's "%s" prints it (a C string: a NUL ends it)."""
    return c_string(b).decode("utf-8", "replace")


def _stream(client: Session, key: bytes):
    s = client.region.db.keys.get(key)
    if s is None:
        raise ReplyError("ERR no such key")
    return s


def _entry(e):
    return [_fmt(e[0]), e[1]] if e is not None else None


def radix_tree_nodes(block_count: int) -> int:
    """An estimate of Redis's rax node count for this many 16-byte node keys.

    Redis reports the internal node count of its radix tree; Braid indexes blocks
    with a sorted array instead, so it reports the size a radix tree over the same
    keys typically has (one node per key plus the shared-prefix nodes).
    """
    return 0 if block_count == 0 else 2 * block_count + 1


@subcommand("xinfo", "stream")
def xinfo_stream(client: Session, argv: list[bytes]):
    full = False
    count = 10
    opts = argv[3:]
    if opts:
        if len(opts) not in (1, 3) or opts[0].lower() != b"full" or (len(opts) == 3 and opts[1].lower() != b"count"):
            raise ReplyError(f"ERR unknown subcommand or wrong number of arguments for '{_s(argv[1])}'. "
                             "Try XINFO HELP.")
        full = True
        if len(opts) == 3:
            count = parse_int(opts[2])
            if count < 0:
                count = 10
    s = _stream(client, argv[2])
    idmp = s.idmp
    info: dict = {
        b"length": s.length,
        b"radix-tree-keys": s.node_count,
        b"radix-tree-nodes": radix_tree_nodes(s.node_count),
        b"last-generated-id": _fmt(s.last_id),
        b"max-deleted-entry-id": _fmt(s.max_deleted_id),
        b"entries-added": s.entries_added,
        b"recorded-first-entry-id": _fmt(s.first_id),
        b"idmp-duration": idmp.duration,
        b"idmp-maxsize": idmp.maxsize,
        b"pids-tracked": idmp.pids_tracked,
        b"iids-tracked": idmp.iids_tracked,
        b"iids-added": idmp.iids_added,
        b"iids-duplicates": idmp.iids_duplicates,
    }
    if not full:
        info[b"groups"] = len(s.groups)
        info[b"first-entry"] = _entry(s.first_entry())
        info[b"last-entry"] = _entry(s.last_entry())
        return info
    info[b"entries"] = [[_fmt(i), f] for i, f in s.range(MIN_ID, MAX_ID, count)]
    info[b"groups"] = [_full_group(s, g, count) for _n, g in sorted(s.groups.items())]
    return info


def _limited(items, count):
    out = []
    for x in items:
        if count and len(out) >= count:
            break
        out.append(x)
    return out


def _full_group(s, g, count: int) -> dict:
    return {
        b"name": g.name,
        b"last-delivered-id": _fmt(g.last_id),
        b"entries-read": g.entries_read if g.entries_read != cg.ENTRIES_READ_UNKNOWN else None,
        b"lag": cg.lag(s, g),
        b"pel-count": len(g.pel),
        b"nacked-count": g.nacked_count(),
        b"pending": _limited(([_fmt(i), n.consumer.name if n.consumer is not None else b"", n.delivery_time,
                               n.delivery_count] for i, n in g.pel.items()), count),
        b"consumers": [
            {
                b"name": c.name,
                b"seen-time": c.seen_time,
                b"active-time": c.active_time,
                b"pel-count": len(c.pel),
                b"pending": _limited(([_fmt(i), n.delivery_time, n.delivery_count]
                                      for i, n in c.pel.items()), count),
            }
            for c in g.sorted_consumers()
        ],
    }


@subcommand("xinfo", "groups")
def xinfo_groups(client: Session, argv: list[bytes]):
    s = _stream(client, argv[2])
    return [
        {
            b"name": g.name,
            b"consumers": len(g.consumers),
            b"pending": len(g.pel),
            b"last-delivered-id": _fmt(g.last_id),
            b"entries-read": g.entries_read if g.entries_read != cg.ENTRIES_READ_UNKNOWN else None,
            b"lag": cg.lag(s, g),
        }
        for _n, g in sorted(s.groups.items())
    ]


@subcommand("xinfo", "consumers")
def xinfo_consumers(client: Session, argv: list[bytes]):
    s = _stream(client, argv[2])
    g = s.groups.get(argv[3])
    if g is None:
        raise ReplyError(f"NOGROUP No such consumer group '{_s(argv[3])}' for key name '{_s(argv[2])}'")
    now = client.region.now_ms()
    return [
        {
            b"name": c.name,
            b"pending": len(c.pel),
            b"idle": max(now - c.seen_time, 0),
            b"inactive": now - c.active_time if c.active_time != -1 else -1,
        }
        for c in g.sorted_consumers()
    ]


@subcommand("xinfo", "help")
def xinfo_help(client: Session, argv: list[bytes]):
    return [
        b"XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"CONSUMERS <key> <groupname>",
        b"    Show consumers of <groupname>.",
        b"GROUPS <key>",
        b"    Show the stream consumer groups.",
        b"STREAM <key> [FULL [COUNT <count>]",
        b"    Show information about the stream.",
        b"HELP",
        b"    Print this help.",
    ]
