"""Stream commands that read or write entries: XADD, XRANGE, XREVRANGE, XLEN, ...

Each handler parses its arguments exactly as Redis's ``t_stream.c`` does (same
order of checks, same errors), resolves them into a :mod:`crdt.ops` operation,
and applies it through the keyspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from crdt import idgen, ops
from crdt.blocks import TrimSpec
from crdt.idmp import auto_iid
from crdt.ids import U64, InvalidID, StreamID, c_string, parse_id
from node.commands import command, subcommand
from node.commands.entryreply import range_entries, revrange_entries
from node.commands.groups import parse_ids_option
from node.commands.util import ERR_NOT_INT, ERR_SYNTAX, parse_int, parse_interval, parse_stream_id, string2ll
from node.resp.encoder import NULL_ARRAY, ReplyError

if TYPE_CHECKING:
    from node.commands.context import Region
    from node.region.session import Session

ERR_WRONG_ARGS_XADD = "ERR wrong number of arguments for 'xadd' command"


@dataclass(slots=True)
class AddTrimArgs:
    """What XADD and XTRIM share: trimming options, plus XADD's own."""

    maxlen: int | None = None
    minid: StreamID | None = None
    approx: bool = False
    limit: int = 0
    strategy: str | None = None
    nomkstream: bool = False
    pid: bytes | None = None
    iid: bytes | None = None
    idmp_auto: bool = False
    id: StreamID | None = None  # None: '*'
    seq_given: bool = True
    ms_only: bool = False
    idpos: int = 0

    @property
    def trims(self) -> bool:
        return self.maxlen is not None or self.minid is not None

    def spec(self) -> TrimSpec:
        return TrimSpec(self.maxlen, self.minid, self.approx, self.limit)


def parse_add_or_trim(client: Session, argv: list[bytes], xadd: bool) -> AddTrimArgs:
    """``streamParseAddOrTrimArgsOrReply``."""
    a = AddTrimArgs()
    limit_given = False
    argc = len(argv)
    i = 2
    while i < argc:
        more = argc - 1 - i
        opt = argv[i]
        lo = opt.lower()
        if xadd and opt == b"*":
            break
        if lo == b"maxlen" and more:
            if a.trims:
                raise ReplyError("ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
            a.approx = False
            nxt = argv[i + 1]
            if more >= 2 and nxt in (b"~", b"="):
                a.approx = nxt == b"~"
                i += 1
            v = parse_int(argv[i + 1])
            if v < 0:
                raise ReplyError("ERR The MAXLEN argument must be >= 0.")
            a.maxlen = v
            i += 1
        elif lo == b"minid" and more:
            if a.trims:
                raise ReplyError("ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
            a.approx = False
            nxt = argv[i + 1]
            if more >= 2 and nxt in (b"~", b"="):
                a.approx = nxt == b"~"
                i += 1
            try:
                a.minid = parse_id(argv[i + 1], 0, strict=True)[0]
            except InvalidID as e:
                raise ReplyError(str(e)) from None
            i += 1
        elif lo == b"limit" and more:
            v = parse_int(argv[i + 1])
            if v < 0:
                raise ReplyError("ERR The LIMIT argument must be >= 0.")
            a.limit = v
            limit_given = True
            i += 1
        elif lo in (b"keepref", b"delref", b"acked") and a.strategy is None:
            a.strategy = lo.decode()
        elif xadd and lo == b"nomkstream":
            a.nomkstream = True
        elif xadd and lo == b"idmpauto" and more:
            if a.pid is not None:
                raise ReplyError("ERR syntax error, IDMP/IDMPAUTO specified multiple times")
            if not argv[i + 1]:
                raise ReplyError("ERR syntax error, IDMPAUTO requires a non-empty producer ID")
            a.pid = argv[i + 1]
            a.idmp_auto = True
            i += 1
        elif xadd and lo == b"idmp" and more >= 2:
            if a.pid is not None:
                raise ReplyError("ERR syntax error, IDMP/IDMPAUTO specified multiple times")
            if not argv[i + 1]:
                raise ReplyError("ERR syntax error, IDMP requires a non-empty producer ID")
            if not argv[i + 2]:
                raise ReplyError("ERR syntax error, IDMP requires a non-empty idempotent ID")
            a.pid, a.iid = argv[i + 1], argv[i + 2]
            i += 2
        elif xadd:
            try:
                a.id, a.seq_given = parse_id(opt, 0, strict=True, allow_seq_star=True)
                # "110": Redis reads 110-0; strict mode derives the sequence (a NUL ends the ID)
                a.ms_only = b"-" not in c_string(opt)
            except InvalidID as e:
                raise ReplyError(str(e)) from None
            if a.pid is not None and opt[:1] != b"*":
                raise ReplyError("ERR syntax error, IDMP/IDMPAUTO can be used only with auto-generated IDs")
            break
        else:
            raise ReplyError(ERR_SYNTAX)
        i += 1
    if a.limit and not a.trims:
        raise ReplyError("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
    if not xadd and not a.trims:
        raise ReplyError("ERR syntax error, XTRIM must be called with a trimming strategy")
    if limit_given:
        if not a.approx:
            raise ReplyError("ERR syntax error, LIMIT cannot be used without the special ~ option")
    elif a.approx:
        lim = 100 * client.region.db.limits.node_max_entries
        a.limit = 10000 if lim <= 0 else min(lim, 1000000)
    else:
        a.limit = 0
    if a.strategy is None:
        a.strategy = ops.KEEPREF
    a.idpos = i
    return a


@command("xadd")
def xadd(client: Session, argv: list[bytes]):
    if argv[2] == b"*":  # nearly every XADD: "XADD key * field value ...", nothing to parse
        nfields = len(argv) - 3
        if nfields < 2 or nfields % 2:
            raise ReplyError(ERR_WRONG_ARGS_XADD)
        key = argv[1]
        server = client.region
        db = server.db
        rules = db.resolver  # _new_entry_id for '*', inlined: nearly every XADD passes here
        last = rules.top_id(db.keys, key)
        if last == (U64, U64):
            raise ReplyError(idgen.ERR_EXHAUSTED)
        try:
            new_id = rules.new_id(last, server.now_ms(), None, False, False)
        except idgen.IdError as e:
            raise ReplyError(str(e)) from None
        db.add_plain(key, server.region, new_id, argv[3:])
        return b"%d-%d" % new_id
    return _xadd(client, argv, parse_add_or_trim(client, argv, xadd=True))


def _new_entry_id(server: Region, key: bytes, wanted: StreamID | None, seq_given: bool, ms_only: bool) -> StreamID:
    """The ID of XADD's new entry under ``key`` (``wanted`` None: ``*``), as the database's
    resolver chooses it, or Redis's error."""
    db = server.db
    rules = db.resolver
    last = rules.top_id(db.keys, key)
    if last == (U64, U64):
        raise ReplyError(idgen.ERR_EXHAUSTED)
    try:
        return rules.new_id(last, server.now_ms(), wanted, seq_given, ms_only)
    except idgen.IdError as e:
        raise ReplyError(str(e)) from None


def _xadd(client: Session, argv: list[bytes], a: AddTrimArgs):
    """XADD with options (NOMKSTREAM, a trim, IDMP, an explicit ID)."""
    field_pos = a.idpos + 1
    nfields = len(argv) - field_pos
    if nfields < 2 or nfields % 2:
        raise ReplyError(ERR_WRONG_ARGS_XADD)
    if a.id is not None and a.seq_given and a.id == (0, 0):
        raise ReplyError(idgen.ERR_ZERO)
    key = argv[1]
    server = client.region
    db = server.db
    s = db.keys.get(key)
    if s is None and a.nomkstream:
        return None
    flat = argv[field_pos:]
    iid = None
    if a.pid is not None:
        iid = auto_iid(flat) if a.idmp_auto else a.iid
        assert iid is not None  # (IDMP names one)
        # Active-Active: a dropped key's maps are kept (crdt/ops.py), so a late retry is still a duplicate
        idmp = s.idmp if s is not None else db.keys.idmp_kept.get(key)
        if idmp is not None:
            found = idmp.lookup(a.pid, iid)
            if found is not None:
                idmp.iids_duplicates += 1
                db.dirty += 1
                db.touch(key, ready=False)
                return b"%d-%d" % found
    new_id = _new_entry_id(server, key, a.id, a.seq_given, a.ms_only)
    db.apply(db.resolver.add_entry(key, server.region, new_id, flat, a.pid, iid))
    if a.trims:
        _trim(db, key, a)
    return b"%d-%d" % new_id


def _trim(db, key: bytes, a: AddTrimArgs) -> int:
    """A trim as the database's resolver (crdt/resolve.py) decides it."""
    op = db.resolver.trim(db.keys[key], key, a.spec(), a.strategy)
    return 0 if op is None else db.apply(op)


def _range(client: Session, argv: list[bytes], rev: bool):
    """``xrangeGenericCommand``."""
    if rev:
        start_arg, end_arg = argv[3], argv[2]
    else:
        start_arg, end_arg = argv[2], argv[3]
    start, end = parse_interval(start_arg, end_arg)
    count = -1
    argc = len(argv)
    j = 4
    while j < argc:
        additional = argc - j - 1
        if argv[j].lower() == b"count" and additional >= 1:
            given = string2ll(argv[j + 1])
            if given is None:
                raise ReplyError(ERR_NOT_INT)
            count = given
            if count < 0:
                count = 0
            j += 1
        else:
            raise ReplyError(ERR_SYNTAX)
        j += 1
    s = client.region.db.keys.get(argv[1])
    if s is None:
        return []
    if count == 0:
        return NULL_ARRAY
    if count < 0:
        count = 0
    if rev:
        return revrange_entries(s, start, end, count)
    return range_entries(s, start, end, count)


@command("xrange")
def xrange(client: Session, argv: list[bytes]):
    return _range(client, argv, rev=False)


@command("xrevrange")
def xrevrange(client: Session, argv: list[bytes]):
    return _range(client, argv, rev=True)


@command("xlen")
def xlen(client: Session, argv: list[bytes]):
    s = client.region.db.keys.get(argv[1])
    return 0 if s is None else s.length


@command("xdel")
def xdel(client: Session, argv: list[bytes]):
    db = client.region.db
    if argv[1] not in db.keys:
        return 0
    ids = [parse_stream_id(a, strict=True) for a in argv[2:]]
    res = db.apply(db.resolver.delete_entries(db.keys[argv[1]], argv[1], ids))
    assert isinstance(res, list)  # (one outcome per ID)
    return sum(1 for r in res if r == 1)


@command("xdelex")
def xdelex(client: Session, argv: list[bytes]):
    db = client.region.db
    strategy, idargs = parse_ids_option(argv, 2)
    if argv[1] not in db.keys:
        return [-1] * len(idargs)
    ids = [parse_stream_id(a, strict=True) for a in idargs]
    return db.apply(db.resolver.delete_entries(db.keys[argv[1]], argv[1], ids, strategy))


@command("xtrim")
def xtrim(client: Session, argv: list[bytes]):
    a = parse_add_or_trim(client, argv, xadd=False)
    db = client.region.db
    if argv[1] not in db.keys:
        return 0
    deleted = _trim(db, argv[1], a)
    if deleted > 1:
        db.dirty += deleted - 1
    return deleted


@command("xsetid")
def xsetid(client: Session, argv: list[bytes]):
    new_id = parse_stream_id(argv[2], strict=True)
    entries_added = -1
    max_xdel = (0, 0)
    i = 3
    while i < len(argv):
        more = len(argv) - 1 - i
        opt = argv[i].lower()
        if opt == b"entriesadded" and more:
            entries_added = parse_int(argv[i + 1])
            if entries_added < 0:
                raise ReplyError("ERR entries_added must be positive")
        elif opt == b"maxdeletedid" and more:
            max_xdel = parse_stream_id(argv[i + 1], strict=True)
            if new_id < max_xdel:
                raise ReplyError("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
        else:
            raise ReplyError(ERR_SYNTAX)
        i += 2
    db = client.region.db
    s = db.keys.get(argv[1])
    if s is None:
        raise ReplyError("ERR no such key")
    if new_id < s.max_deleted_id:
        raise ReplyError("ERR The ID specified in XSETID is smaller than current max_deleted_entry_id")
    if s.length:
        if new_id < s.top_id():
            raise ReplyError("ERR The ID specified in XSETID is smaller than the target stream top item")
        if entries_added != -1 and s.length > entries_added:
            raise ReplyError("ERR The entries_added specified in XSETID is smaller than the target stream length")
    db.apply(ops.SetStreamId(argv[1], new_id, None if entries_added == -1 else entries_added,
                             None if max_xdel == (0, 0) else max_xdel))
    return "OK"


IDMP_DURATION_RANGE = (1, 86400)
IDMP_MAXSIZE_RANGE = (1, 10000)


def _idmp_settings(argv: list[bytes], start: int, names: tuple[bytes, bytes]) -> tuple[int, int]:
    """XCFGSET's option loop; ``names`` are the spellings of the two options."""
    rules = {names[0]: (0, IDMP_DURATION_RANGE, "seconds"), names[1]: (1, IDMP_MAXSIZE_RANGE, "entries")}
    values = [-1, -1]
    i = start
    while i < len(argv):
        rule = rules.get(argv[i].lower())
        if rule is None or i + 1 >= len(argv):
            raise ReplyError(ERR_SYNTAX)
        slot, (lo, hi), unit = rule
        label = argv[i].decode().upper()
        if values[slot] != -1:
            raise ReplyError(f"ERR {label} specified multiple times")
        values[slot] = parse_int(argv[i + 1])
        if not lo <= values[slot] <= hi:
            raise ReplyError(f"ERR {label} must be between {lo} and {hi} {unit}")
        i += 2
    if values == [-1, -1]:
        raise ReplyError("ERR At least one parameter must be specified")
    return values[0], values[1]


def _configure_idmp(client: Session, key: bytes, duration: int, maxsize: int) -> str:
    """Apply new IDMP settings; changing either clears the producers' maps (as Redis)."""
    db = client.region.db
    s = db.keys[key]
    new_d = duration if duration != -1 and duration != s.idmp.duration else None
    new_m = maxsize if maxsize != -1 and maxsize != s.idmp.maxsize else None
    if new_d is not None or new_m is not None:
        db.apply(ops.ConfigureIdmp(key, new_d, new_m))
    return "OK"


@command("xcfgset")
def xcfgset(client: Session, argv: list[bytes]):
    if argv[1] not in client.region.db.keys:
        raise ReplyError("ERR no such key")
    duration, maxsize = _idmp_settings(argv, 2, (b"idmp-duration", b"idmp-maxsize"))
    return _configure_idmp(client, argv[1], duration, maxsize)


@subcommand("xidmp", "cfgset")
def xidmp_cfgset(client: Session, argv: list[bytes]):
    if argv[2] not in client.region.db.keys:
        raise ReplyError("ERR no such key")
    duration, maxsize = _idmp_settings(argv, 3, (b"duration", b"maxsize"))
    return _configure_idmp(client, argv[2], duration, maxsize)


@subcommand("xidmp", "cfgget")
def xidmp_cfgget(client: Session, argv: list[bytes]):
    s = client.region.db.keys.get(argv[2])
    if s is None:
        raise ReplyError("ERR no such key")
    wanted = [a.lower() for a in argv[3:]] or [b"duration", b"maxsize"]
    out = {}
    for w in wanted:
        if w == b"duration":
            out[b"duration"] = s.idmp.duration
        elif w == b"maxsize":
            out[b"maxsize"] = s.idmp.maxsize
        else:
            raise ReplyError(ERR_SYNTAX)
    return out


@subcommand("xidmp", "help")
def xidmp_help(client: Session, argv: list[bytes]):
    return [
        b"XIDMP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"CFGSET <key> [DURATION <seconds>] [MAXSIZE <entries>]",
        b"    Same as XCFGSET <key> [IDMP-DURATION <seconds>] [IDMP-MAXSIZE <entries>].",
        b"CFGGET <key> [DURATION] [MAXSIZE]",
        b"    Return the stream's IDMP settings.",
        b"HELP",
        b"    Print this help.",
    ]


@command("xidmprecord")
def xidmprecord(client: Session, argv: list[bytes]):
    id_ = parse_stream_id(argv[4], strict=True)
    pid, iid = argv[2], argv[3]
    if not pid:
        raise ReplyError("ERR producer ID must be non-empty")
    if not iid:
        raise ReplyError("ERR idempotent ID must be non-empty")
    db = client.region.db
    s = db.keys.get(argv[1])
    if s is None:
        raise ReplyError("ERR no such key")
    if s.get(id_) is None:
        raise ReplyError("ERR No such message in stream")
    found = s.idmp.lookup(pid, iid)
    if found is not None:
        if found == id_:
            return "OK"
        raise ReplyError("ERR IID already exists for this producer with a different stream ID")
    db.apply(ops.RecordIdmp(argv[1], pid, iid, id_))
    return "OK"
