"""What COMMAND DOCS and COMMAND INFO say about a command's arguments: data, not code.

Clients read this: ``redis-cli`` draws its argument hints from COMMAND DOCS' ``arguments``,
cluster-aware clients find keys from COMMAND INFO's key specifications, and tools show a
command's ``history`` to tell which options a server has.  The table describes the interface
Braid implements (Redis 8.10's, for the commands below) with the shapes Redis replies with:

- an argument is ``name``, ``type`` (key, string, integer, double, pattern, unix-time,
  pure-token, oneof, block), ``display_text`` (what redis-cli shows; the name unless said
  otherwise), and optionally ``token`` (the keyword before it), ``since``,
  ``key_spec_index`` and ``flags`` (optional, multiple, multiple_token);
  a oneof or block holds its own ``arguments``;
- a command's key specifications (its flags, where the search for keys begins and how keys
  are found from there) are not repeated here: :func:`key_specs` reads them from the table
  the ACL checks use.

Commands without an entry here report only their summary, version and group.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Doc:
    history: tuple[tuple[str, str], ...] = ()
    tips: tuple[str, ...] = ()
    arguments: tuple[dict, ...] = ()


DOCS: dict[str, Doc] = {}  # full name ("xadd", "xgroup|create") -> its documentation


def doc(fullname: str, history=(), tips=(), arguments=()) -> None:
    DOCS[fullname] = Doc(tuple(history), tuple(tips), tuple(arguments))


# ---------------------------------------------------------------- how entries are written
def _arg(name: str, type_: str, children=(), *, token: str | None = None, since: str | None = None,
         display: str | None = None, optional: bool = False, multiple: bool = False,
         multiple_token: bool = False, key_spec_index: int | None = None) -> dict:
    """One argument in COMMAND DOCS' reply order (name, type, display_text, key_spec_index,
    token, since, flags, arguments)."""
    out: dict = {"name": name, "type": type_}
    if type_ not in ("block", "oneof"):  # Redis 8 names every plain argument for redis-cli's hints
        out["display_text"] = name if display is None else display
    if key_spec_index is not None:
        out["key_spec_index"] = key_spec_index
    if token is not None:
        out["token"] = token
    if since is not None:
        out["since"] = since
    flags = [f for f, on in (("optional", optional), ("multiple", multiple),
                             ("multiple_token", multiple_token)) if on]
    if flags:
        out["flags"] = flags
    if children:
        out["arguments"] = list(children)
    return out


def key(name: str, index: int, **kw) -> dict:
    return _arg(name, "key", key_spec_index=index, **kw)


def string(name: str, **kw) -> dict:
    return _arg(name, "string", **kw)


def integer(name: str, **kw) -> dict:
    return _arg(name, "integer", **kw)


def unix_time(name: str, **kw) -> dict:
    return _arg(name, "unix-time", **kw)


def token(tok: str, name: str | None = None, **kw) -> dict:
    """A bare keyword (``pure-token``), named after itself unless given a name."""
    return _arg(tok.lower() if name is None else name, "pure-token", token=tok, **kw)


def oneof(name: str, *children: dict, **kw) -> dict:
    return _arg(name, "oneof", children, **kw)


def block(name: str, *children: dict, **kw) -> dict:
    return _arg(name, "block", children, **kw)


def key_specs(fullname: str) -> list[dict]:
    """COMMAND INFO's key specifications of a command, from the table the ACL checks use
    (node/security/acl_table.py, Redis's own key specs): one source for both.  Access flags
    (RW, RO, OW, RM) are upper case in Redis's reply, the others lower case."""
    from ..security.acl_table import REDIS_COMMANDS

    row = REDIS_COMMANDS.get(fullname)
    out = []
    for flags, begin, find in row[2] if row else ():
        if begin[0] == "index":
            search = {"type": "index", "spec": {"index": begin[1]}}
        else:
            search = {"type": "keyword", "spec": {"keyword": begin[1], "startfrom": begin[2]}}
        if find[0] == "range":
            keys = {"type": "range", "spec": {"lastkey": find[1], "keystep": find[2], "limit": find[3]}}
        else:
            keys = {"type": "keynum", "spec": {"keynumidx": find[1], "firstkey": find[2], "keystep": find[3]}}
        out.append({"flags": [f if f in ("RW", "RO", "OW", "RM") else f.lower() for f in flags],
                    "begin_search": search, "find_keys": keys})
    return out


# ---------------------------------------------------------------- the table
doc('xack',
    arguments=[
        key('key', 0),
        string('group'),
        string('id', multiple=True),
    ],
)

doc('xackdel',
    arguments=[
        key('key', 0),
        string('group'),
        oneof('condition',
            token('KEEPREF'),
            token('DELREF'),
            token('ACKED'),
            optional=True),
        block('ids',
            integer('numids'),
            string('id', multiple=True),
            token='IDS'),
    ],
)

doc('xadd',
    history=[('6.2.0', 'Added the `NOMKSTREAM` option, `MINID` trimming strategy and the `LIMIT` option.'), ('7.0.0', 'Added support for the `<ms>-*` explicit ID form.'), ('8.2.0', 'Added the `KEEPREF`, `DELREF` and `ACKED` options.')],
    tips=['nondeterministic_output'],
    arguments=[
        key('key', 0),
        token('NOMKSTREAM', since='6.2.0', optional=True),
        oneof('condition',
            token('KEEPREF'),
            token('DELREF'),
            token('ACKED'),
            optional=True),
        oneof('idmp',
            block('idmpauto-with-pid',
                token('IDMPAUTO', name='idmpauto-token'),
                string('pid', display='producer-id')),
            block('idmp-with-pid-iid',
                token('IDMP', name='idmp-token'),
                string('pid', display='producer-id'),
                string('iid', display='idempotent-id')),
            optional=True),
        block('trim',
            oneof('strategy',
                token('MAXLEN'),
                token('MINID', since='6.2.0')),
            oneof('operator',
                token('=', name='equal'),
                token('~', name='approximately'),
                optional=True),
            string('threshold'),
            integer('count', token='LIMIT', since='6.2.0', optional=True),
            optional=True),
        oneof('id-selector',
            token('*', name='auto-id'),
            string('id')),
        block('data',
            string('field'),
            string('value'),
            multiple=True),
    ],
)

doc('xautoclaim',
    history=[('7.0.0', 'Added an element to the reply array, containing deleted entries the command cleared from the PEL')],
    tips=['nondeterministic_output'],
    arguments=[
        key('key', 0),
        string('group'),
        string('consumer'),
        string('min-idle-time'),
        string('start'),
        integer('count', token='COUNT', optional=True),
        token('JUSTID', optional=True),
    ],
)

doc('xcfgset',
    arguments=[
        key('key', 0),
        block('idmp-duration-block',
            token('IDMP-DURATION', name='idmp-duration-token'),
            integer('duration'),
            optional=True),
        block('idmp-maxsize-block',
            token('IDMP-MAXSIZE', name='idmp-maxsize-token'),
            integer('maxsize'),
            optional=True),
    ],
)

doc('xclaim',
    tips=['nondeterministic_output'],
    arguments=[
        key('key', 0),
        string('group'),
        string('consumer'),
        string('min-idle-time'),
        string('id', multiple=True),
        integer('ms', token='IDLE', optional=True),
        unix_time('unix-time-milliseconds', token='TIME', optional=True),
        integer('count', token='RETRYCOUNT', optional=True),
        token('FORCE', optional=True),
        token('JUSTID', optional=True),
        string('lastid', token='LASTID', optional=True),
    ],
)

doc('xdel',
    arguments=[
        key('key', 0),
        string('id', multiple=True),
    ],
)

doc('xdelex',
    arguments=[
        key('key', 0),
        oneof('condition',
            token('KEEPREF'),
            token('DELREF'),
            token('ACKED'),
            optional=True),
        block('ids',
            integer('numids'),
            string('id', multiple=True),
            token='IDS'),
    ],
)

doc('xgroup|create',
    history=[('7.0.0', 'Added the `entries_read` named argument.')],
    arguments=[
        key('key', 0),
        string('group'),
        oneof('id-selector',
            string('id'),
            token('$', name='new-id')),
        token('MKSTREAM', optional=True),
        integer('entriesread', token='ENTRIESREAD', optional=True),
    ],
)

doc('xgroup|createconsumer',
    arguments=[
        key('key', 0),
        string('group'),
        string('consumer'),
    ],
)

doc('xgroup|delconsumer',
    arguments=[
        key('key', 0),
        string('group'),
        string('consumer'),
    ],
)

doc('xgroup|destroy',
    arguments=[
        key('key', 0),
        string('group'),
    ],
)

doc('xgroup|help',
)

doc('xgroup|setid',
    history=[('7.0.0', 'Added the optional `entries_read` argument.')],
    arguments=[
        key('key', 0),
        string('group'),
        oneof('id-selector',
            string('id'),
            token('$', name='new-id')),
        integer('entriesread', token='ENTRIESREAD', optional=True),
    ],
)

doc('xgroup',
)

doc('xidmprecord',
    arguments=[
        key('key', 0),
        string('pid'),
        string('iid'),
        string('stream-id'),
    ],
)

doc('xinfo|consumers',
    history=[('7.2.0', 'Added the `inactive` field, and changed the meaning of `idle`.')],
    tips=['nondeterministic_output'],
    arguments=[
        key('key', 0),
        string('group'),
    ],
)

doc('xinfo|groups',
    history=[('7.0.0', 'Added the `entries-read` and `lag` fields')],
    arguments=[
        key('key', 0),
    ],
)

doc('xinfo|help',
)

doc('xinfo|stream',
    history=[('6.0.0', 'Added the `FULL` modifier.'), ('7.0.0', 'Added the `max-deleted-entry-id`, `entries-added`, `recorded-first-entry-id`, `entries-read` and `lag` fields'), ('7.2.0', 'Added the `active-time` field, and changed the meaning of `seen-time`.'), ('8.6.0', 'Added the `idmp-duration`, `idmp-maxsize`, `pids-tracked`, `iids-tracked`, `iids-added` and `iids-duplicates` fields for IDMP tracking.')],
    arguments=[
        key('key', 0),
        block('full-block',
            token('FULL'),
            integer('count', token='COUNT', optional=True),
            optional=True),
    ],
)

doc('xinfo',
)

doc('xlen',
    arguments=[
        key('key', 0),
    ],
)

doc('xnack',
    arguments=[
        key('key', 0),
        string('group'),
        oneof('mode',
            token('SILENT'),
            token('FAIL'),
            token('FATAL')),
        block('ids',
            integer('numids'),
            string('id', multiple=True),
            token='IDS'),
        integer('count', token='RETRYCOUNT', optional=True),
        token('FORCE', optional=True),
    ],
)

doc('xpending',
    history=[('6.2.0', 'Added the `IDLE` option and exclusive range intervals.')],
    tips=['nondeterministic_output'],
    arguments=[
        key('key', 0),
        string('group'),
        block('filters',
            integer('min-idle-time', token='IDLE', since='6.2.0', optional=True),
            string('start'),
            string('end'),
            integer('count'),
            string('consumer', optional=True),
            optional=True),
    ],
)

doc('xrange',
    history=[('6.2.0', 'Added exclusive ranges.')],
    arguments=[
        key('key', 0),
        string('start'),
        string('end'),
        integer('count', token='COUNT', optional=True),
    ],
)

doc('xread',
    history=[('8.10.0', 'Added the `MAXCOUNT` and `MAXSIZE` options.')],
    arguments=[
        integer('count', token='COUNT', optional=True),
        integer('maxcount', token='MAXCOUNT', since='8.10.0', optional=True),
        integer('maxsize', token='MAXSIZE', since='8.10.0', optional=True),
        integer('milliseconds', token='BLOCK', optional=True),
        block('streams',
            key('key', 0, multiple=True),
            string('id', multiple=True),
            token='STREAMS'),
    ],
)

doc('xreadgroup',
    history=[('8.4.0', 'Added the `CLAIM` option.'), ('8.10.0', 'Added the `MAXCOUNT` and `MAXSIZE` options.')],
    arguments=[
        block('group-block',
            string('group'),
            string('consumer'),
            token='GROUP'),
        integer('count', token='COUNT', optional=True),
        integer('maxcount', token='MAXCOUNT', since='8.10.0', optional=True),
        integer('maxsize', token='MAXSIZE', since='8.10.0', optional=True),
        integer('milliseconds', token='BLOCK', optional=True),
        integer('min-idle-time', token='CLAIM', since='8.4.0', optional=True),
        token('NOACK', optional=True),
        block('streams',
            key('key', 0, multiple=True),
            string('id', multiple=True),
            token='STREAMS'),
    ],
)

doc('xrevrange',
    history=[('6.2.0', 'Added exclusive ranges.')],
    arguments=[
        key('key', 0),
        string('end'),
        string('start'),
        integer('count', token='COUNT', optional=True),
    ],
)

doc('xsetid',
    history=[('7.0.0', 'Added the `entries_added` and `max_deleted_entry_id` arguments.')],
    arguments=[
        key('key', 0),
        string('last-id'),
        integer('entries-added', token='ENTRIESADDED', since='7.0.0', optional=True),
        string('max-deleted-id', token='MAXDELETEDID', since='7.0.0', optional=True),
    ],
)

doc('xtrim',
    history=[('6.2.0', 'Added the `MINID` trimming strategy and the `LIMIT` option.'), ('8.2.0', 'Added the `KEEPREF`, `DELREF` and `ACKED` options.')],
    tips=['nondeterministic_output'],
    arguments=[
        key('key', 0),
        block('trim',
            oneof('strategy',
                token('MAXLEN'),
                token('MINID', since='6.2.0')),
            oneof('operator',
                token('=', name='equal'),
                token('~', name='approximately'),
                optional=True),
            string('threshold'),
            integer('count', token='LIMIT', since='6.2.0', optional=True),
            oneof('condition',
                token('KEEPREF'),
                token('DELREF'),
                token('ACKED'),
                optional=True)),
    ],
)

doc('copy',
    arguments=[
        key('source', 0),
        key('destination', 1),
        integer('destination-db', token='DB', optional=True),
        token('REPLACE', optional=True),
    ],
)

doc('dump',
    tips=['nondeterministic_output'],
    arguments=[
        key('key', 0),
    ],
)

doc('restore',
    history=[('3.0.0', 'Added the `REPLACE` modifier.'), ('5.0.0', 'Added the `ABSTTL` modifier.'), ('5.0.0', 'Added the `IDLETIME` and `FREQ` options.')],
    arguments=[
        key('key', 0),
        integer('ttl'),
        string('serialized-value'),
        token('REPLACE', since='3.0.0', optional=True),
        token('ABSTTL', since='5.0.0', optional=True),
        integer('seconds', token='IDLETIME', since='5.0.0', optional=True),
        integer('frequency', token='FREQ', since='5.0.0', optional=True),
    ],
)

DOCS['restore-asking'] = DOCS['restore']  # the same command, for a cluster's MIGRATE

doc('migrate',
    history=[('3.0.0', 'Added the `COPY` and `REPLACE` options.'), ('3.0.6', 'Added the `KEYS` option.'), ('4.0.7', 'Added the `AUTH` option.'), ('6.0.0', 'Added the `AUTH2` option.')],
    tips=['nondeterministic_output'],
    arguments=[
        string('host'),
        integer('port'),
        oneof('key-selector',
            key('key', 0),
            token('""', name='empty-string')),
        integer('destination-db'),
        integer('timeout'),
        token('COPY', since='3.0.0', optional=True),
        token('REPLACE', since='3.0.0', optional=True),
        oneof('authentication',
            string('auth', token='AUTH', since='4.0.7'),
            block('auth2',
                string('username'),
                string('password'),
                token='AUTH2', since='6.0.0'),
            optional=True),
        key('keys', 1, token='KEYS', since='3.0.6', optional=True, multiple=True),
    ],
)

# ---------------------------------------------------------------- SLOWLOG and LATENCY (node/commands/slowlog.py)
doc('slowlog|get',
    history=[('4.0.0', 'Added client IP address, port and name to the reply.'),
             ('8.10.0', 'Added original command argument count to the reply.')],
    tips=['request_policy:all_nodes', 'nondeterministic_output'],
    arguments=[integer('count', optional=True)],
)
doc('slowlog|len', tips=['request_policy:all_nodes', 'response_policy:agg_sum', 'nondeterministic_output'])
doc('slowlog|reset', tips=['request_policy:all_nodes', 'response_policy:all_succeeded'])
_LATENCY_TIPS = ['nondeterministic_output', 'request_policy:all_nodes', 'response_policy:special']
doc('latency|latest', tips=_LATENCY_TIPS)
doc('latency|history', tips=_LATENCY_TIPS, arguments=[string('event')])
doc('latency|graph', tips=_LATENCY_TIPS, arguments=[string('event')])
doc('latency|doctor', tips=_LATENCY_TIPS)
doc('latency|reset', tips=['request_policy:all_nodes', 'response_policy:agg_sum'],
    arguments=[string('event', optional=True, multiple=True)])
