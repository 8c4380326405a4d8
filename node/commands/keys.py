"""Generic key commands: DEL, UNLINK, EXISTS, TYPE, TTL and its family, RENAME, RENAMENX, COPY,
KEYS, SCAN.

Every key in Braid is a stream.  Removing a key is the replicated operation
``DeleteKey``; RENAME is "copy under the new name, then delete the source".
COPY installs a copy of the source under the destination (:func:`install_stream`,
which RESTORE uses too): the resolver (crdt/resolve.py) says how, exactly in one
region, by its Active-Active rule in a database of regions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import xxhash

from crdt import resolve
from crdt.stream import Stream
from node.commands import command
from node.commands.util import ERR_NOT_INT, ERR_SYNTAX, parse_unsigned, string2ll
from node.region.glob import glob_match
from node.resp.encoder import ReplyError

if TYPE_CHECKING:
    from node.region.session import Session

ERR_SAME_OBJECT = "ERR source and destination objects are the same"
ERR_DB_INDEX = "ERR DB index is out of range"
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1  # getIntFromObjectOrReply's range
ERR_NOT_AN_INT32 = f"ERR value is out of range, value must between {INT_MIN} and {INT_MAX}"


def delete_key(db, key: bytes) -> bool:
    """DEL of one key; in an Active-Active database an observed-remove (crdt/ops.py)."""
    s = db.keys.get(key)
    if s is None:
        return False
    db.apply(db.resolver.delete_key(key, s))
    return True


@command("del")
def del_(client: Session, argv: list[bytes]):
    db = client.region.db
    return sum(1 for key in argv[1:] if delete_key(db, key))


@command("unlink")
def unlink(client: Session, argv: list[bytes]):
    return del_(client, argv)


@command("exists")
def exists(client: Session, argv: list[bytes]):
    keys = client.region.db.keys
    return sum(1 for k in argv[1:] if k in keys)


@command("type")
def type_(client: Session, argv: list[bytes]):
    return "stream" if argv[1] in client.region.db.keys else "none"


# ---------------------------------------------------------------- time to live
# Braid's keys never expire (a stream is trimmed, not expired), so every key has no time to
# live: Redis's replies for such a key (-1; -2 when the key does not exist).  Clients and
# tools ask (redis-cli --bigkeys, migration scripts, Redis's own tests); EXPIRE and its
# family, which would set one, are not implemented.
def _no_expiry(client: Session, argv: list[bytes]) -> int:
    return -1 if argv[1] in client.region.db.keys else -2


for _name in ("ttl", "pttl", "expiretime", "pexpiretime"):
    command(_name)(_no_expiry)


@command("persist")
def persist(client: Session, argv: list[bytes]):
    return 0  # no key has a time to live to remove


def _rename(client: Session, argv: list[bytes], nx: bool):
    db = client.region.db
    src, dst = argv[1], argv[2]
    s = db.keys.get(src)
    if s is None:
        raise ReplyError("ERR no such key")
    if src == dst:
        return 0 if nx else "OK"
    if nx and dst in db.keys:
        return 0
    for op in db.resolver.rename(db.keys, src, dst):  # Active-Active: crdt/resolve.py says how
        db.apply(op)
    db.touch(dst)
    return 1 if nx else "OK"


@command("rename")
def rename(client: Session, argv: list[bytes]):
    return _rename(client, argv, nx=False)


@command("renamenx")
def renamenx(client: Session, argv: list[bytes]):
    return _rename(client, argv, nx=True)


def install_stream(db, dst: bytes, image: Stream, replace: bool) -> bool:
    """Put ``image`` (a stream not in the keyspace, handed over: one region puts it in place
    as it is) under ``dst``: the resolver's operations, applied one by one, then its
    region-local part (crdt/resolve.py).
    False, and nothing done, when ``dst`` exists and not ``replace``.  One change for the
    dirty counter, as Redis counts a COPY; blocked readers of ``dst`` are woken."""
    if dst in db.keys and not replace:
        return False
    dirty = db.dirty
    for op in db.resolver.install(db.keys, dst, image, replace):
        db.apply(op)
    db.resolver.install_local(db.keys, dst, image)
    db.touch(dst)
    db.dirty = dirty + 1
    return True


def _copy_options(argv: list[bytes], sharded: bool) -> bool:
    """COPY's options as Redis's ``copyCommand`` reads them, in order (the first bad one
    answers); returns REPLACE.  Braid has one database: ``DB 0`` is the only index (and a
    shard, as a Redis Cluster node, refuses another in its own words)."""
    replace = False
    j = 3
    while j < len(argv):
        opt = argv[j].lower()
        if opt == b"replace":
            replace = True
        elif opt == b"db" and j + 1 < len(argv):
            index = string2ll(argv[j + 1])
            if index is None:
                raise ReplyError(ERR_NOT_INT)
            if not INT_MIN <= index <= INT_MAX:
                raise ReplyError(ERR_NOT_AN_INT32)
            if index != 0 and sharded:
                raise ReplyError("ERR Copying to another database is not allowed in cluster mode")
            if index != 0:
                raise ReplyError(ERR_DB_INDEX)
            j += 1
        else:
            raise ReplyError(ERR_SYNTAX)
        j += 1
    return replace


@command("copy")
def copy_(client: Session, argv: list[bytes]):
    """1 when copied; 0 when the source is missing or the destination exists without REPLACE."""
    replace = _copy_options(argv, client.region.routing is not None)
    src, dst = argv[1], argv[2]
    if src == dst:
        raise ReplyError(ERR_SAME_OBJECT)
    db = client.region.db
    s = db.keys.get(src)
    if s is None or (dst in db.keys and not replace):
        return 0
    return int(install_stream(db, dst, resolve.duplicate(s), replace))


@command("keys")
def keys_(client: Session, argv: list[bytes]):
    pat = argv[1]
    every = pat == b"*"
    return [k for k in client.region.db.keys if every or glob_match(pat, k)]


def _scan_hash(key: bytes) -> int:
    return xxhash.xxh32_intdigest(key)


@command("scan")
def scan(client: Session, argv: list[bytes]):
    """The cursor is a position in hash order: a 32-bit hash of each key.

    A call returns keys whose hash is at or after the cursor, in hash order,
    and the next cursor is one past the last hash returned.  A key present for
    the whole scan keeps its hash, so it is returned exactly once unless keys
    with the very same hash straddle a call (then all of them are returned
    together, never split).  Cursor 0 starts and ends a scan.
    """
    # unsigned, in string2ull's lenient spelling (Redis 7.2 on; 7.0 took strtoul's)
    cursor = parse_unsigned(argv[1], "ERR invalid cursor")
    count, pattern, kind = 10, None, None
    j = 2
    while j < len(argv):
        opt = argv[j].lower()
        if j + 1 >= len(argv):
            raise ReplyError(ERR_SYNTAX)
        if opt == b"count":
            given = string2ll(argv[j + 1])
            if given is None:
                raise ReplyError(ERR_NOT_INT)
            count = given
            if count < 1:
                raise ReplyError(ERR_SYNTAX)
        elif opt == b"match":
            pattern = argv[j + 1]
        elif opt == b"type":
            kind = argv[j + 1].lower()
        else:
            raise ReplyError(ERR_SYNTAX)
        j += 2
    ordered = sorted((_scan_hash(k), k) for k in client.region.db.keys)
    out: list[bytes] = []
    next_cursor = 0
    taken = 0
    for i, (h, k) in enumerate(ordered):
        if h < cursor:
            continue
        if taken >= count and h != ordered[i - 1][0]:
            next_cursor = h
            break
        taken += 1
        if pattern is not None and not glob_match(pattern, k):
            continue
        if kind is not None and kind != b"stream":
            continue
        out.append(k)
    return [b"%d" % next_cursor, out]
