"""Consumer-group commands: XGROUP, XACK, XACKDEL, XNACK, XPENDING, XCLAIM, XAUTOCLAIM.

Group creation and destruction are replicated operations (:mod:`crdt.ops`);
everything else here changes region-local state (consumers, the PEL) through
the pure functions of :mod:`crdt.groups`.  Argument checks follow the order of
Redis's ``t_stream.c`` so that the same bad input gets the same error.

XNACK (Redis 8.8) is region-local like the PEL it changes: it applies no
operation, so the append-only file logs it as a command and a restart runs it
again (node/persistence/oplog.py).  Entries it released have no owner: XPENDING
shows them with an empty consumer name and an idle time of -1 and the IDLE
filter keeps them, XINFO STREAM FULL with a delivery time of 0 (and counts them
as ``nacked-count``), and XCLAIM / XAUTOCLAIM skip the min-idle check for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crdt import groups as cg
from crdt import ops
from crdt.groups import ENTRIES_READ_UNKNOWN, Nack
from crdt.ids import MAX_ID, MIN_ID, U64, InvalidID, c_string, decr, incr, parse_id, parse_interval_id
from node.commands import command, subcommand
from node.commands.util import ERR_SYNTAX, parse_int, parse_stream_id, string2ll
from node.resp.encoder import NULL_ARRAY, ReplyError

if TYPE_CHECKING:
    from node.region.session import Session


def _s(b: bytes) -> str:
    """An argument in an error, as Redis's "%s" prints it (a C string: a NUL ends it)."""
    return c_string(b).decode("utf-8", "replace")


def _subcommand_syntax(argv: list[bytes]) -> ReplyError:
    return ReplyError(f"ERR unknown subcommand or wrong number of arguments for '{_s(argv[1][:128])}'. "
                      f"Try {argv[0].decode('utf-8', 'replace').upper()} HELP.")


def _fmt(id_) -> bytes:
    return b"%d-%d" % id_


# ---------------------------------------------------------------- XGROUP
def _xgroup_prologue(client: Session, argv: list[bytes], sub: str):
    """The checks ``xgroupCommand`` makes before dispatching on the subcommand."""
    mkstream = False
    entries_read = ENTRIES_READ_UNKNOWN
    i = 5
    while i < len(argv):
        opt = argv[i].lower()
        if sub == "create" and opt == b"mkstream":
            mkstream = True
            i += 1
        elif sub in ("create", "setid") and opt == b"entriesread" and i + 1 < len(argv):
            entries_read = parse_int(argv[i + 1])
            if entries_read < 0 and entries_read != ENTRIES_READ_UNKNOWN:
                raise ReplyError("ERR value for ENTRIESREAD must be positive or -1")
            i += 2
        else:
            raise _subcommand_syntax(argv)
    s = client.region.db.keys.get(argv[2])
    group = None
    if not mkstream:
        if s is None:
            raise ReplyError("ERR The XGROUP subcommand requires the key to exist. Note that for "
                             "CREATE you may want to use the MKSTREAM option to create an empty "
                             "stream automatically.")
        group = s.groups.get(argv[3])
        if group is None and sub in ("setid", "createconsumer", "delconsumer"):
            raise ReplyError(f"NOGROUP No such consumer group '{_s(argv[3])}' for key name '{_s(argv[2])}'")
    return s, group, mkstream, entries_read


@subcommand("xgroup", "create")
def xgroup_create(client: Session, argv: list[bytes]):
    s, _group, mkstream, entries_read = _xgroup_prologue(client, argv, "create")
    if len(argv) > 8:
        raise _subcommand_syntax(argv)
    if argv[4] == b"$":
        last = s.last_id if s is not None else MIN_ID
    else:
        last = parse_stream_id(argv[4], strict=True)
    added = s.entries_added if s is not None else 0
    if entries_read != ENTRIES_READ_UNKNOWN and entries_read > added:
        entries_read = added
    if s is not None and argv[3] in s.groups:
        raise ReplyError("BUSYGROUP Consumer Group name already exists")
    db = client.region.db
    db.apply(db.resolver.create_group(argv[2], argv[3], s, last, entries_read, mkstream, argv[4] == b"$"))
    return "OK"


@subcommand("xgroup", "setid")
def xgroup_setid(client: Session, argv: list[bytes]):
    s, group, _mk, entries_read = _xgroup_prologue(client, argv, "setid")
    if len(argv) not in (5, 7):
        raise _subcommand_syntax(argv)
    last = s.last_id if argv[4] == b"$" else parse_stream_id(argv[4])
    if entries_read != ENTRIES_READ_UNKNOWN and entries_read > s.entries_added:
        entries_read = s.entries_added
    # Region-local: XGROUP SETID is not replicated (as in Redis Active-Active).
    group.set_id(last, entries_read)
    _local_change(client, argv[2])
    return "OK"


@subcommand("xgroup", "destroy")
def xgroup_destroy(client: Session, argv: list[bytes]):
    s, group, _mk, _er = _xgroup_prologue(client, argv, "destroy")
    if group is None:
        return 0
    db = client.region.db
    db.apply(db.resolver.destroy_group(argv[2], argv[3]))
    return 1


@subcommand("xgroup", "createconsumer")
def xgroup_createconsumer(client: Session, argv: list[bytes]):
    _s_, group, _mk, _er = _xgroup_prologue(client, argv, "createconsumer")
    _c, created = group.consumer(argv[4], client.region.now_ms())
    if created:
        _local_change(client, argv[2])
    return 1 if created else 0


@subcommand("xgroup", "delconsumer")
def xgroup_delconsumer(client: Session, argv: list[bytes]):
    _s_, group, _mk, _er = _xgroup_prologue(client, argv, "delconsumer")
    if argv[4] not in group.consumers:
        return 0
    pending = group.delete_consumer(argv[4])
    _local_change(client, argv[2])
    return pending


@subcommand("xgroup", "help")
def xgroup_help(client: Session, argv: list[bytes]):
    return [
        b"XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"CREATE <key> <groupname> <id|$> [option]",
        b"    Create a new consumer group. Options are:",
        b"    * MKSTREAM",
        b"      Create the empty stream if it does not exist.",
        b"    * ENTRIESREAD entries_read",
        b"      Set the group's entries_read counter (internal use).",
        b"CREATECONSUMER <key> <groupname> <consumer>",
        b"    Create a new consumer in the specified group.",
        b"DELCONSUMER <key> <groupname> <consumer>",
        b"    Remove the specified consumer.",
        b"DESTROY <key> <groupname>",
        b"    Remove the specified group.",
        b"SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
        b"    Set the current group ID and entries_read counter.",
        b"HELP",
        b"    Print this help.",
    ]


def _local_change(client: Session, key: bytes) -> None:
    db = client.region.db
    db.dirty += 1
    db.touch(key)


# ---------------------------------------------------------------- XACK / XACKDEL
@command("xack")
def xack(client: Session, argv: list[bytes]):
    s = client.region.db.keys.get(argv[1])
    group = s.groups.get(argv[2]) if s is not None else None
    if s is None or group is None:
        return 0
    ids = [parse_stream_id(a, strict=True) for a in argv[3:]]
    n = sum(1 for id_ in ids if group.ack(id_))
    db = client.region.db
    if n:
        db.dirty += n
        _replicate_acks(db, argv[1], argv[2], s, group)
    return n


def _replicate_acks(db, key: bytes, name: bytes, s, group) -> None:
    """What acknowledgements replicate, if anything (crdt/resolve.py: per-origin watermarks)."""
    for op in db.resolver.ack_watermarks(key, name, s, group):
        db.apply(op)


def parse_ids_option(argv: list[bytes], start: int) -> tuple[str, list[bytes]]:
    """``streamParseAckDelArgsOrReply``: [KEEPREF|DELREF|ACKED] IDS numids id..."""
    strategy = None
    ids_start, numids = -1, 0
    j = start
    while j < len(argv):
        opt = argv[j].lower()
        if opt in (b"keepref", b"delref", b"acked") and strategy is None:
            strategy = opt.decode()
            j += 1
        elif opt == b"ids" and j + 1 < len(argv):
            n = string2ll(argv[j + 1])
            if n is None or n < 1:
                raise ReplyError("ERR Number of IDs must be a positive integer")
            if n > len(argv) - j - 2:
                raise ReplyError("ERR The `numids` parameter must match the number of arguments")
            numids, ids_start = n, j + 2
            j = ids_start + numids
        else:
            raise ReplyError(ERR_SYNTAX)
    if ids_start == -1:
        raise ReplyError("ERR IDS option is required")
    return strategy or ops.KEEPREF, argv[ids_start:ids_start + numids]


@command("xackdel")
def xackdel(client: Session, argv: list[bytes]):
    strategy, idargs = parse_ids_option(argv, 3)
    db = client.region.db
    s = db.keys.get(argv[1])
    group = s.groups.get(argv[2]) if s is not None else None
    if s is None or group is None:
        return [-1] * len(idargs)
    ids = [parse_stream_id(a, strict=True) for a in idargs]
    out = []
    for id_ in ids:
        if not group.ack(id_):
            out.append(-1)
            continue
        db.dirty += 1
        res = db.apply(db.resolver.delete_entries(s, argv[1], [id_], strategy))
        out.append(2 if res == [2] else 1)
    if any(r != -1 for r in out) and argv[1] in db.keys:
        _replicate_acks(db, argv[1], argv[2], s, group)
    return out


# ---------------------------------------------------------------- XNACK
XNACK_MODES = {b"silent": cg.SILENT, b"fail": cg.FAIL, b"fatal": cg.FATAL}


@command("xnack")
def xnack(client: Session, argv: list[bytes]):
    """XNACK key group SILENT|FAIL|FATAL IDS numids id [id ...] [RETRYCOUNT count] [FORCE].

    The checks run in the order of Redis's ``xnackCommand``: the group first, then
    the mode, then the options (before or after the IDS block, in any order), then
    the IDs.  Redis writes three of its messages with the code twice ("ERR ERR mode
    must be ..."); Braid sends the code once.
    """
    s = client.region.db.keys.get(argv[1])
    group = s.groups.get(argv[2]) if s is not None else None
    if s is None or group is None:
        raise ReplyError(f"NOGROUP No such key '{_s(argv[1])}' or consumer group '{_s(argv[2])}'")
    mode = XNACK_MODES.get(argv[3].lower())
    if mode is None:
        raise ReplyError("ERR mode must be SILENT, FAIL, or FATAL")
    ids_start = numids = 0
    force = False
    retrycount = -1
    argc = len(argv)
    i = 4
    while i < argc:
        more = argc - 1 - i
        opt = argv[i].lower()
        if opt == b"ids" and more:
            n = string2ll(argv[i + 1])
            if n is None or not 1 <= n <= 2**31 - 1:
                raise ReplyError("ERR numids must be a positive integer")
            numids, ids_start = n, i + 2
            if numids > argc - ids_start:
                raise ReplyError("ERR number of IDs doesn't match numids")
            i = ids_start + numids - 1
        elif opt == b"force":
            force = True
        elif opt == b"retrycount" and more:
            i += 1
            retrycount = parse_int(argv[i])
            if retrycount < 0:
                raise ReplyError("ERR Invalid RETRYCOUNT value, must be >= 0")
        else:
            raise ReplyError(f"ERR Unrecognized XNACK option '{_s(argv[i])}'")
        i += 1
    if not ids_start:
        raise ReplyError("ERR syntax error, expected IDS keyword")
    ids = [parse_stream_id(a, strict=True) for a in argv[ids_start:ids_start + numids]]
    released = sum(1 for id_ in ids
                   if group.release(id_, mode, retrycount, force, force and s.get(id_) is not None))
    if released:
        db = client.region.db
        db.dirty += released
        db.touch(argv[1])  # released entries are claimable at once: wake blocked XREADGROUP ... CLAIM
    return released


# ---------------------------------------------------------------- XPENDING
@command("xpending")
def xpending(client: Session, argv: list[bytes]):
    argc = len(argv)
    if argc != 3 and not 6 <= argc <= 9:
        raise ReplyError(ERR_SYNTAX)
    consumer_name = None
    if argc >= 6:
        startidx = 3
        minidle = 0
        if argv[3].lower() == b"idle":
            minidle = parse_int(argv[4])
            if argc < 8:
                raise ReplyError(ERR_SYNTAX)
            startidx += 2
        count = max(parse_int(argv[startidx + 2]), 0)
        start, start_ex = _interval(argv[startidx], 0)
        if start_ex:
            start = incr(start)
            if start is None:
                raise ReplyError("ERR invalid start ID for the interval")
        end, end_ex = _interval(argv[startidx + 1], U64)
        if end_ex:
            end = decr(end)
            if end is None:
                raise ReplyError("ERR invalid end ID for the interval")
        if startidx + 3 < argc:
            consumer_name = argv[startidx + 3]
    s = client.region.db.keys.get(argv[1])
    group = s.groups.get(argv[2]) if s is not None else None
    if s is None or group is None:
        raise ReplyError(f"NOGROUP No such key '{_s(argv[1])}' or consumer group '{_s(argv[2])}'")
    if argc == 3:
        return _pending_summary(group)
    if consumer_name is not None:
        consumer = group.consumers.get(consumer_name)
        if consumer is None:
            return []
        pel = consumer.pel
    else:
        pel = group.pel
    now = client.region.now_ms()
    out = []
    for id_ in pel.irange(start, end):
        if not count:
            break
        nack = pel[id_]
        if nack.released:  # XNACKed: no owner, no idle time, never filtered out by IDLE
            count -= 1
            out.append([_fmt(id_), b"", -1, nack.delivery_count])
            continue
        if minidle and now - nack.delivery_time < minidle:
            continue
        count -= 1
        out.append([_fmt(id_), nack.consumer.name, max(now - nack.delivery_time, 0), nack.delivery_count])
    return out


def _interval(arg: bytes, missing_seq: int):
    try:
        return parse_interval_id(arg, missing_seq)
    except InvalidID as e:
        raise ReplyError(str(e)) from None


def _pending_summary(group) -> list:
    if not group.pel:
        return [0, None, None, NULL_ARRAY]
    consumers = [[c.name, b"%d" % len(c.pel)] for c in group.sorted_consumers() if c.pel]
    return [len(group.pel), _fmt(group.pel.first()), _fmt(group.pel.last()), consumers]


# ---------------------------------------------------------------- XCLAIM
@command("xclaim")
def xclaim(client: Session, argv: list[bytes]):
    server = client.region
    s = server.db.keys.get(argv[1])
    group = s.groups.get(argv[2]) if s is not None else None
    if s is None or group is None:
        raise ReplyError(f"NOGROUP No such key '{_s(argv[1])}' or consumer group '{_s(argv[2])}'")
    minidle = parse_int(argv[4], "ERR Invalid min-idle-time argument for XCLAIM")
    minidle = max(minidle, 0)
    ids = []
    j = 5
    while j < len(argv):
        try:
            ids.append(parse_id(argv[j], 0, strict=True)[0])
        except InvalidID:
            break
        j += 1
    now = server.now_ms()
    force = justid = False
    retrycount = -1
    deliverytime = -1
    last_id = MIN_ID
    while j < len(argv):
        more = len(argv) - 1 - j
        opt = argv[j].lower()
        if opt == b"force":
            force = True
        elif opt == b"justid":
            justid = True
        elif opt == b"idle" and more:
            j += 1
            deliverytime = now - parse_int(argv[j], "ERR Invalid IDLE option argument for XCLAIM")
        elif opt == b"time" and more:
            j += 1
            deliverytime = parse_int(argv[j], "ERR Invalid TIME option argument for XCLAIM")
        elif opt == b"retrycount" and more:
            j += 1
            retrycount = parse_int(argv[j], "ERR Invalid RETRYCOUNT option argument for XCLAIM")
        elif opt == b"lastid" and more:
            j += 1
            last_id = parse_stream_id(argv[j], strict=True)
        else:
            raise ReplyError(f"ERR Unrecognized XCLAIM option '{_s(argv[j])}'")
        j += 1
    if last_id > group.last_id:
        group.last_id = last_id
    if deliverytime == -1 or deliverytime < 0 or deliverytime > now:
        deliverytime = now
    consumer, _created = group.consumer(argv[3], now)
    consumer.seen_time = now
    out = []
    for id_ in ids:
        nack = group.pel.get(id_)
        flat = s.get(id_)
        if flat is None:
            if nack is not None:
                group.ack(id_)
            continue
        if force and nack is None:
            # Redis creates the NACK without an owner (so IDLE does not filter it)
            nack = group.pel[id_] = Nack(None, now, 1)
        if nack is None:
            continue
        if nack.consumer is not None and minidle and now - nack.delivery_time < minidle:
            continue
        group.touch(nack, deliverytime)
        if retrycount >= 0:
            nack.delivery_count = retrycount
        elif not justid:
            nack.delivered_again()
        group.assign(id_, nack, consumer)
        out.append(_fmt(id_) if justid else [_fmt(id_), flat])
        consumer.active_time = now
    server.db.dirty += 1
    server.db.touch(argv[1], ready=False)
    return out


@command("xautoclaim")
def xautoclaim(client: Session, argv: list[bytes]):
    server = client.region
    minidle = max(parse_int(argv[4], "ERR Invalid min-idle-time argument for XAUTOCLAIM"), 0)
    start, start_ex = _interval(argv[5], 0)
    if start_ex:
        start = incr(start)
        if start is None:
            raise ReplyError("ERR invalid start ID for the interval")
    count, justid = 100, False
    j = 6
    while j < len(argv):
        more = len(argv) - 1 - j
        opt = argv[j].lower()
        if opt == b"count" and more:
            v = string2ll(argv[j + 1])
            if v is None or not 1 <= v <= (2**63 - 1) // 16:
                raise ReplyError("ERR COUNT must be > 0")
            count = v
            j += 1
        elif opt == b"justid":
            justid = True
        else:
            raise ReplyError(ERR_SYNTAX)
        j += 1
    s = server.db.keys.get(argv[1])
    group = s.groups.get(argv[2]) if s is not None else None
    if s is None or group is None:
        raise ReplyError(f"NOGROUP No such key '{_s(argv[1])}' or consumer group '{_s(argv[2])}'")
    now = server.now_ms()
    consumer, _created = group.consumer(argv[3], now)
    consumer.seen_time = now
    attempts = count * 10
    claimed, deleted = [], []
    pending = list(group.pel.irange(start, MAX_ID))
    k = 0
    while attempts and count and k < len(pending):
        attempts -= 1
        id_ = pending[k]
        k += 1
        nack = group.pel[id_]
        flat = s.get(id_)
        if flat is None:
            group.ack(id_)
            deleted.append(_fmt(id_))
            count -= 1
            continue
        if not nack.released and minidle and now - nack.delivery_time < minidle:
            continue
        group.assign(id_, nack, consumer)
        group.touch(nack, now)
        if not justid:
            nack.delivered_again()
        claimed.append(_fmt(id_) if justid else [_fmt(id_), flat])
        count -= 1
        consumer.active_time = now
    next_id = _fmt(pending[k]) if k < len(pending) else b"0-0"
    server.db.dirty += 1
    server.db.touch(argv[1], ready=False)
    return [next_id, claimed, deleted]
