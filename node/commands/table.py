"""Braid's commands, each described once: the one source of command metadata.

Theory of operation
-------------------
Redis keeps one description per command (``src/commands/*.json``) and generates the rest
of its command table from it.  Braid does the same with one Python file: this one, rather
than a file per command as Redis has, because Braid's 140-odd entries are short, read best
side by side (a container's subcommands, a family's commands), and Python's helpers write
an argument tree in a third of the JSON.  A command (or a subcommand, named
``container|sub``) is one :func:`describe` call below, in the section of the module that
handles it, and carries everything anyone asks about it:

- what dispatch checks: ``arity`` (positive: exactly that many arguments with the name;
  negative: at least), and the ``flags``, spelled as in Redis's JSON files
  (``write``, ``readonly``, ``denyoom``, ``fast``, ``no_auth``, ``skip_slowlog``...);
- what ACL decides with: the ``acl`` categories Redis names explicitly (``stream``,
  ``keyspace``, ``dangerous``...; the implicit ones - @write, @read, @admin, @fast or
  @slow, @blocking - follow from the flags) and the key specs (``keys``: where the search
  for keys begins, ``index(i)`` or ``keyword(word, startfrom)``, how keys are found from
  there, ``range_(lastkey, step, limit)`` or ``keynum(...)``, and what is done to them,
  ``RO``/``RW``/``OW``/``RM`` with ``ACCESS``/``UPDATE``/``INSERT``/``DELETE``), copied
  from Redis for the commands Braid shares with it, written the same way for Braid's own
  (XORIGINS...);
- what COMMAND DOCS shows: ``summary``, ``since``, ``group`` (top-level commands only: a
  subcommand is in its container's group), ``complexity``, ``history``, ``tips`` and the
  ``arguments`` tree (written with :func:`key`, :func:`string`, :func:`integer`,
  :func:`token`, :func:`oneof`, :func:`block`... in COMMAND DOCS' shapes);
- Braid's own facts, the ``braid`` words: ``resolved`` (the operation log records the
  operations the command applied and not the command: a replay never resolves it again),
  ``logged_if_changed`` (a write the log records only when it changed state) and
  ``reads_entries`` (it may fill a stream's caches of decoded blocks, so its keys' memory
  is counted again as a write's is);
- ``family``: the module of node/commands/ whose handler runs it.

Everything else is derived, never written again:

- node/commands/__init__.py builds the dispatch table (``COMMANDS``) from these
  descriptions as the handlers register (``@command("xadd")``: a name and nothing else),
  with the legacy first/last/step key positions and the ``movablekeys`` flag computed from
  the key specs as Redis's ``populateCommandLegacyRangeSpec`` computes them, COMMAND INFO's
  flags (Redis's order, without the ones Redis hides), and the name sets (``RESOLVED``,
  ``LOGGED_IF_CHANGED``, ``READS_ENTRIES``) from the ``braid`` words;
- node/security/acl_table.py gives ACL each command's flags, categories and key specs
  (node/security/acl.py adds the implicit categories);
- node/commands/docs.py gives COMMAND INFO its key specs and COMMAND DOCS its history,
  tips and argument trees.

Drift cannot set in: a handler registered under a name without a description fails at
import, and ``load_all`` fails when a description has no handler (a container - a command
some ``name|sub`` names - needs none).  tests/test_command_table.py pins the derived
tables.

To add a command: describe it here (from Redis's JSON file when Redis has it), then
decorate its handler with ``@command(name)`` or ``@subcommand(container, name)`` in the
family's module.

This module imports nothing from Braid: it is data, below every other layer.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------- the vocabulary
# Redis's command flags (its JSON files' "command_flags", lower case)
FLAGS = frozenset({"write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking",
                   "loading", "stale", "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth",
                   "may_replicate", "sentinel", "only_sentinel", "no_mandatory_keys", "protected",
                   "no_async_loading", "no_multi", "allow_busy", "touches_arbitrary_keys"})
# Braid's own facts about a command (the module docstring says what each means)
BRAID_WORDS = frozenset({"resolved", "logged_if_changed", "reads_entries"})
# Redis's key spec flags
KEY_FLAGS = frozenset({"RO", "RW", "OW", "RM", "ACCESS", "UPDATE", "INSERT", "DELETE", "NOT_KEY",
                       "INCOMPLETE", "VARIABLE_FLAGS"})

KeySpec = tuple  # (flags, begin_search, find_keys): ``(("RW", "UPDATE"), ("index", 1), ("range", 0, 1, 0))``


def index(pos: int) -> tuple:
    """begin_search: the key is argument ``pos``."""
    return ("index", pos)


def keyword(word: str, startfrom: int) -> tuple:
    """begin_search: keys start after ``word``, searched for from argument ``startfrom``
    (negative: from the end, backwards)."""
    return ("keyword", word, startfrom)


def range_(lastkey: int, step: int, limit: int) -> tuple:
    """find_keys: keys up to ``lastkey`` (relative to the first; -1 the last argument) every
    ``step``; with ``limit`` N, only 1/N of the remaining arguments."""
    return ("range", lastkey, step, limit)


def keynum(keynumidx: int, firstkey: int, step: int) -> tuple:
    """find_keys: the number of keys is argument ``keynumidx`` (relative to the begin)."""
    return ("keynum", keynumidx, firstkey, step)


def ks(flags: str, begin: tuple, find: tuple = range_(0, 1, 0)) -> KeySpec:
    """One key spec: its flags (``"RW UPDATE"``), where the search begins, how keys are found
    (one key by default)."""
    fl = tuple(flags.split())
    unknown = set(fl) - KEY_FLAGS
    if unknown:
        raise ValueError(f"unknown key spec flags {sorted(unknown)}")
    return (fl, begin, find)


# COMMAND DOCS' arguments
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
    """A key argument; ``index`` is its key spec's position in ``keys``."""
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


@dataclass(frozen=True, slots=True)
class Description:
    """One command as :func:`describe` wrote it (the module docstring says what each field is)."""

    name: str  # the full name: "xadd", "xgroup|create"
    arity: int
    flags: tuple[str, ...]
    family: str
    group: str
    since: str
    summary: str
    complexity: str
    acl: tuple[str, ...]
    keys: tuple[KeySpec, ...]
    braid: tuple[str, ...]
    history: tuple[tuple[str, str], ...]
    tips: tuple[str, ...]
    arguments: tuple[dict, ...]

    @property
    def container(self) -> str | None:
        """The container of a subcommand ("xgroup" for "xgroup|create"), None for a command."""
        return self.name.partition("|")[0] if "|" in self.name else None


DESCRIPTIONS: dict[str, Description] = {}  # full name -> description, in the order written


def describe(name: str, arity: int, flags: str, family: str, *, since: str, summary: str,
             group: str | None = None, complexity: str = "", acl: str = "", keys=(), braid: str = "",
             history=(), tips=(), arguments=()) -> None:
    """Describe one command (``name``) or subcommand (``container|name``)."""
    if name in DESCRIPTIONS:
        raise ValueError(f"{name} is described twice")
    parent = name.partition("|")[0] if "|" in name else None
    if parent is not None:
        if parent not in DESCRIPTIONS:
            raise ValueError(f"{name}: describe its container {parent} first")
        if group is not None:
            raise ValueError(f"{name}: a subcommand is in its container's group")
        group = DESCRIPTIONS[parent].group
    elif group is None:
        raise ValueError(f"{name}: a command needs its group")
    flag_words, braid_words = tuple(flags.split()), tuple(braid.split())
    if set(flag_words) - FLAGS:
        raise ValueError(f"{name}: unknown flags {sorted(set(flag_words) - FLAGS)}")
    if set(braid_words) - BRAID_WORDS:
        raise ValueError(f"{name}: unknown braid words {sorted(set(braid_words) - BRAID_WORDS)}")
    DESCRIPTIONS[name] = Description(name, arity, flag_words, family, group, since, summary, complexity,
                                     tuple(acl.split()), tuple(keys), braid_words,
                                     tuple(tuple(h) for h in history), tuple(tips), tuple(arguments))


# ---------------------------------------------------------------- the commands
# In the order dispatch's table lists them (COMMAND, COMMAND LIST): family by family, as
# node.commands.load_all imports the families.

# ---------------------------------------------------------------- keys (node/commands/keys.py)
describe("del", -2, "write", "keys", group="generic", since="1.0.0",
         summary="Deletes one or more keys.",
         complexity="O(N) where N is the number of keys that will be removed.",
         acl="keyspace", keys=[ks("RM DELETE", index(1), range_(-1, 1, 0))], braid="resolved")
describe("unlink", -2, "write fast", "keys", group="generic", since="4.0.0",
         summary="Asynchronously deletes one or more keys.",
         complexity="O(1) for each key removed regardless of its size.",
         acl="keyspace", keys=[ks("RM DELETE", index(1), range_(-1, 1, 0))], braid="resolved")
describe("exists", -2, "readonly fast", "keys", group="generic", since="1.0.0",
         summary="Determines whether one or more keys exist.",
         complexity="O(N) where N is the number of keys to check.",
         acl="keyspace", keys=[ks("RO", index(1), range_(-1, 1, 0))])
describe("type", 2, "readonly fast", "keys", group="generic", since="1.0.0",
         summary="Determines the type of value stored at a key.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO", index(1))])
describe("ttl", 2, "readonly fast", "keys", group="generic", since="1.0.0",
         summary="Returns the expiration time in seconds of a key.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))])
describe("pttl", 2, "readonly fast", "keys", group="generic", since="2.6.0",
         summary="Returns the expiration time in milliseconds of a key.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))])
describe("expiretime", 2, "readonly fast", "keys", group="generic", since="7.0.0",
         summary="Returns the expiration time of a key as a Unix timestamp.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))])
describe("pexpiretime", 2, "readonly fast", "keys", group="generic", since="7.0.0",
         summary="Returns the expiration time of a key as a Unix milliseconds timestamp.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))])
describe("persist", 2, "write fast", "keys", group="generic", since="2.2.0",
         summary="Removes the expiration time of a key.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RW UPDATE", index(1))])
describe("rename", 3, "write", "keys", group="generic", since="1.0.0",
         summary="Renames a key and overwrites the destination.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RW ACCESS DELETE", index(1)), ks("OW UPDATE", index(2))], braid="resolved")
describe("renamenx", 3, "write fast", "keys", group="generic", since="1.0.0",
         summary="Renames a key only when the target key name doesn't exist.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RW ACCESS DELETE", index(1)), ks("OW INSERT", index(2))], braid="resolved")
describe("copy", -3, "write denyoom", "keys", group="generic", since="6.2.0",
         summary="Copies the value of a key to a new key.",
         complexity="O(N) worst case for collections, where N is the number of nested items. O(1) for string values.",
         acl="keyspace", keys=[ks("RO ACCESS", index(1)), ks("OW UPDATE", index(2))], braid="reads_entries",
         arguments=[
             key("source", 0),
             key("destination", 1),
             integer("destination-db", token="DB", optional=True),
             token("REPLACE", optional=True),
         ])
describe("keys", 2, "readonly", "keys", group="generic", since="1.0.0",
         summary="Returns all key names that match a pattern.",
         complexity="O(N) with N being the number of keys in the database",
         acl="keyspace dangerous")
describe("scan", -2, "readonly touches_arbitrary_keys", "keys", group="generic", since="2.8.0",
         summary="Iterates over the key names in the database.",
         complexity="O(1) for every call. O(N) for a complete iteration.",
         acl="keyspace")

# ---------------------------------------------------------------- connection (node/commands/connection.py)
describe("ping", -1, "fast sentinel", "connection", group="connection", since="1.0.0",
         summary="Returns the server's liveliness response.",
         complexity="O(1)",
         acl="connection")
describe("echo", 2, "loading stale fast", "connection", group="connection", since="1.0.0",
         summary="Returns the given string.",
         complexity="O(1)",
         acl="connection")
describe("auth", -2, "noscript loading stale fast no_auth sentinel allow_busy", "connection",
         group="connection", since="1.0.0",
         summary="Authenticates the connection.",
         complexity="O(N) where N is the number of passwords defined for the user",
         acl="connection")
describe("hello", -1, "noscript loading stale fast no_auth sentinel allow_busy", "connection",
         group="connection", since="6.0.0",
         summary="Handshakes with the Redis server.",
         complexity="O(1)",
         acl="connection")
describe("select", 2, "loading stale fast", "connection", group="connection", since="1.0.0",
         summary="Changes the selected database.",
         complexity="O(1)",
         acl="connection")
describe("quit", -1, "allow_busy noscript loading stale fast no_auth", "connection", group="connection", since="1.0.0",
         summary="Closes the connection.",
         complexity="O(1)",
         acl="connection")
describe("reset", 1, "noscript loading stale fast no_auth allow_busy", "connection", group="connection", since="6.2.0",
         summary="Resets the connection.",
         complexity="O(1)",
         acl="connection")
describe("client", -2, "sentinel", "connection", group="connection", since="2.4.0",
         summary="A container for client connection commands.")
describe("client|setname", 3, "noscript loading stale sentinel", "connection", since="2.6.9",
         summary="Sets the connection name.",
         complexity="O(1)",
         acl="connection")
describe("client|getname", 2, "noscript loading stale sentinel", "connection", since="2.6.9",
         summary="Returns the name of the connection.",
         complexity="O(1)",
         acl="connection")
describe("client|id", 2, "noscript loading stale sentinel", "connection", since="5.0.0",
         summary="Returns the unique client ID of the connection.",
         complexity="O(1)",
         acl="connection")
describe("client|info", 2, "noscript loading stale sentinel", "connection", since="6.2.0",
         summary="Returns information about the connection.",
         complexity="O(1)",
         acl="connection")
describe("client|list", -2, "admin noscript loading stale sentinel", "connection", since="2.4.0",
         summary="Lists open connections.",
         complexity="O(N) where N is the number of client connections",
         acl="connection")
describe("client|setinfo", 4, "noscript loading stale sentinel", "connection", since="7.2.0",
         summary="Sets information specific to the client or connection.",
         complexity="O(1)",
         acl="connection")
describe("client|kill", -3, "admin noscript loading stale sentinel", "connection", since="2.4.0",
         summary="Terminates open connections.",
         complexity="O(N) where N is the number of client connections",
         acl="connection")
describe("client|no-evict", 3, "admin noscript loading stale sentinel", "connection", since="7.0.0",
         summary="Sets the client eviction mode of the connection.",
         complexity="O(1)",
         acl="connection")
describe("client|no-touch", 3, "noscript loading stale", "connection", since="7.2.0",
         summary="Controls whether commands sent by the client affect the LRU/LFU of accessed keys.",
         complexity="O(1)",
         acl="connection")
describe("client|help", 2, "loading stale sentinel", "connection", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="connection")

# ---------------------------------------------------------------- server (node/commands/server.py)
describe("info", -1, "loading stale sentinel", "server", group="server", since="1.0.0",
         summary="Returns information and statistics about the server.",
         complexity="O(1)",
         acl="dangerous")
describe("config", -2, "", "server", group="server", since="2.0.0",
         summary="A container for server configuration commands.")
describe("config|get", -3, "admin noscript loading stale", "server", since="2.0.0",
         summary="Returns the effective values of configuration parameters.",
         complexity="O(N) when N is the number of configuration parameters provided")
describe("config|set", -4, "admin noscript loading stale", "server", since="2.0.0",
         summary="Sets configuration parameters in-flight.",
         complexity="O(N) when N is the number of configuration parameters provided")
describe("config|resetstat", 2, "admin noscript loading stale", "server", since="2.0.0",
         summary="Resets the server's statistics.",
         complexity="O(1)")
describe("config|help", 2, "loading stale", "server", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)")
describe("command", -1, "loading stale sentinel", "server", group="server", since="2.8.13",
         summary="Returns detailed information about all commands.",
         complexity="O(N) where N is the total number of Redis commands",
         acl="connection")
describe("command|count", 2, "loading stale sentinel", "server", since="2.8.13",
         summary="Returns a count of commands.",
         complexity="O(1)",
         acl="connection")
describe("command|list", -2, "loading stale sentinel", "server", since="7.0.0",
         summary="Returns a list of command names.",
         complexity="O(N) where N is the total number of Redis commands",
         acl="connection")
describe("command|info", -2, "loading stale sentinel", "server", since="2.8.13",
         summary="Returns information about one, multiple or all commands.",
         complexity="O(N) where N is the number of commands to look up",
         acl="connection")
describe("command|docs", -2, "loading stale sentinel", "server", since="7.0.0",
         summary="Returns documentary information about one, multiple or all commands.",
         complexity="O(N) where N is the number of commands to look up",
         acl="connection")
describe("command|getkeys", -3, "loading stale sentinel", "server", since="2.8.13",
         summary="Extracts the key names from an arbitrary command.",
         complexity="O(N) where N is the number of arguments to the command",
         acl="connection")
describe("command|help", 2, "loading stale sentinel", "server", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="connection")
describe("dbsize", 1, "readonly fast", "server", group="server", since="1.0.0",
         summary="Returns the number of keys in the database.",
         complexity="O(1)",
         acl="keyspace")
describe("flushdb", -1, "write", "server", group="server", since="1.0.0",
         summary="Removes all keys from the current database.",
         complexity="O(N) where N is the number of keys in the selected database",
         acl="keyspace dangerous", braid="resolved")
describe("flushall", -1, "write", "server", group="server", since="1.0.0",
         summary="Removes all keys from all databases.",
         complexity="O(N) where N is the total number of keys in all databases",
         acl="keyspace dangerous", braid="resolved")
describe("time", 1, "loading stale fast", "server", group="server", since="2.6.0",
         summary="Returns the server time.",
         complexity="O(1)")
describe("save", 1, "no_async_loading admin noscript no_multi", "server", group="server", since="1.0.0",
         summary="Synchronously saves the database(s) to disk.",
         complexity="O(N) where N is the total number of keys in all databases")
describe("bgsave", -1, "no_async_loading admin noscript", "server", group="server", since="1.0.0",
         summary="Asynchronously saves the database(s) to disk.",
         complexity="O(1)")
describe("bgrewriteaof", 1, "no_async_loading admin noscript", "server", group="server", since="1.0.0",
         summary="Asynchronously rewrites the append-only file to disk.",
         complexity="O(1)")
describe("shutdown", -1, "admin noscript loading stale no_multi sentinel allow_busy", "server",
         group="server", since="1.0.0",
         summary="Synchronously saves the database(s) to disk and shuts down the Redis server.",
         complexity="O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise O(1)")
describe("lastsave", 1, "loading stale fast", "server", group="server", since="1.0.0",
         summary="Returns the Unix timestamp of the last successful save to disk.",
         complexity="O(1)",
         acl="admin dangerous")

# ---------------------------------------------------------------- dump (node/commands/dump.py)
describe("dump", 2, "readonly", "dump", group="generic", since="2.6.0",
         summary="Returns a serialized representation of the value stored at a key.",
         complexity="O(1) to access the key and additional O(N*M) to serialize it, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))], braid="reads_entries",
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
         ])
# RESTORE-ASKING is RESTORE for a cluster's MIGRATE: the same arguments and history
_RESTORE_DOCS = dict(
    history=[
        ("3.0.0", "Added the `REPLACE` modifier."),
        ("5.0.0", "Added the `ABSTTL` modifier."),
        ("5.0.0", "Added the `IDLETIME` and `FREQ` options."),
    ],
    arguments=[
        key("key", 0),
        integer("ttl"),
        string("serialized-value"),
        token("REPLACE", since="3.0.0", optional=True),
        token("ABSTTL", since="5.0.0", optional=True),
        integer("seconds", token="IDLETIME", since="5.0.0", optional=True),
        integer("frequency", token="FREQ", since="5.0.0", optional=True),
    ],
)
describe("restore", -4, "write denyoom", "dump", group="generic", since="2.6.0",
         summary="Creates a key from the serialized representation of a value.",
         complexity="O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).",
         acl="keyspace dangerous", keys=[ks("OW UPDATE", index(1))], **_RESTORE_DOCS)
describe("restore-asking", -4, "write denyoom asking", "dump", group="server", since="3.0.0",
         summary="An internal command for migrating keys in a cluster.",
         complexity="O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).",
         acl="keyspace dangerous", keys=[ks("OW UPDATE", index(1))], **_RESTORE_DOCS)

# ---------------------------------------------------------------- migrate (node/commands/migrate.py)
describe("migrate", -6, "write", "migrate", group="generic", since="2.6.0",
         summary="Atomically transfers a key from one Redis instance to another.",
         complexity="This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target instance. See the pages of these commands for time complexity. Also an O(N) data transfer between the two instances is performed.",
         acl="keyspace dangerous",
         keys=[ks("RW ACCESS DELETE", index(3)),
               ks("RW ACCESS DELETE INCOMPLETE", keyword("KEYS", -2), range_(-1, 1, 0))], braid="resolved",
         history=[
             ("3.0.0", "Added the `COPY` and `REPLACE` options."),
             ("3.0.6", "Added the `KEYS` option."),
             ("4.0.7", "Added the `AUTH` option."),
             ("6.0.0", "Added the `AUTH2` option."),
         ],
         tips=["nondeterministic_output"],
         arguments=[
             string("host"),
             integer("port"),
             oneof("key-selector",
                 key("key", 0),
                 token('""', name="empty-string")),
             integer("destination-db"),
             integer("timeout"),
             token("COPY", since="3.0.0", optional=True),
             token("REPLACE", since="3.0.0", optional=True),
             oneof("authentication",
                 string("auth", token="AUTH", since="4.0.7"),
                 block("auth2",
                     string("username"),
                     string("password"),
                     token="AUTH2", since="6.0.0"),
                 optional=True),
             key("keys", 1, token="KEYS", since="3.0.6", optional=True, multiple=True),
         ])

# ---------------------------------------------------------------- transactions (node/commands/transactions.py)
describe("multi", 1, "noscript loading stale fast allow_busy", "transactions", group="transactions", since="1.2.0",
         summary="Starts a transaction.",
         complexity="O(1)",
         acl="transaction")
describe("discard", 1, "noscript loading stale fast allow_busy", "transactions", group="transactions", since="2.0.0",
         summary="Discards a transaction.",
         complexity="O(N), when N is the number of queued commands",
         acl="transaction")
describe("exec", 1, "noscript loading stale skip_slowlog", "transactions", group="transactions", since="1.2.0",
         summary="Executes all commands in a transaction.",
         complexity="Depends on commands in the transaction",
         acl="transaction")
describe("watch", -2, "noscript loading stale fast allow_busy", "transactions", group="transactions", since="2.2.0",
         summary="Monitors changes to keys to determine the execution of a transaction.",
         complexity="O(1) for every key.",
         acl="transaction", keys=[ks("RO", index(1), range_(-1, 1, 0))])
describe("unwatch", 1, "noscript loading stale fast allow_busy", "transactions", group="transactions", since="2.2.0",
         summary="Forgets about watched keys of a transaction.",
         complexity="O(1)",
         acl="transaction")

# ---------------------------------------------------------------- streams (node/commands/streams.py)
describe("xadd", -5, "write denyoom fast", "streams", group="stream", since="5.0.0",
         summary="Appends a new message to a stream. Creates the key if it doesn't exist.",
         complexity="O(1) when adding a new entry, O(N) when trimming where N being the number of entries evicted.",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="resolved",
         history=[
             ("6.2.0", "Added the `NOMKSTREAM` option, `MINID` trimming strategy and the `LIMIT` option."),
             ("7.0.0", "Added support for the `<ms>-*` explicit ID form."),
             ("8.2.0", "Added the `KEEPREF`, `DELREF` and `ACKED` options."),
         ],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             token("NOMKSTREAM", since="6.2.0", optional=True),
             oneof("condition",
                 token("KEEPREF"),
                 token("DELREF"),
                 token("ACKED"),
                 optional=True),
             oneof("idmp",
                 block("idmpauto-with-pid",
                     token("IDMPAUTO", name="idmpauto-token"),
                     string("pid", display="producer-id")),
                 block("idmp-with-pid-iid",
                     token("IDMP", name="idmp-token"),
                     string("pid", display="producer-id"),
                     string("iid", display="idempotent-id")),
                 optional=True),
             block("trim",
                 oneof("strategy",
                     token("MAXLEN"),
                     token("MINID", since="6.2.0")),
                 oneof("operator",
                     token("=", name="equal"),
                     token("~", name="approximately"),
                     optional=True),
                 string("threshold"),
                 integer("count", token="LIMIT", since="6.2.0", optional=True),
                 optional=True),
             oneof("id-selector",
                 token("*", name="auto-id"),
                 string("id")),
             block("data",
                 string("field"),
                 string("value"),
                 multiple=True),
         ])
describe("xrange", -4, "readonly", "streams", group="stream", since="5.0.0",
         summary="Returns the messages from a stream within a range of IDs.",
         complexity="O(N) with N being the number of elements being returned.",
         acl="stream", keys=[ks("RO ACCESS", index(1))], braid="reads_entries",
         history=[("6.2.0", "Added exclusive ranges.")],
         arguments=[
             key("key", 0),
             string("start"),
             string("end"),
             integer("count", token="COUNT", optional=True),
         ])
describe("xrevrange", -4, "readonly", "streams", group="stream", since="5.0.0",
         summary="Returns the messages from a stream within a range of IDs in reverse order.",
         complexity="O(N) with N being the number of elements returned.",
         acl="stream", keys=[ks("RO ACCESS", index(1))], braid="reads_entries",
         history=[("6.2.0", "Added exclusive ranges.")],
         arguments=[
             key("key", 0),
             string("end"),
             string("start"),
             integer("count", token="COUNT", optional=True),
         ])
describe("xlen", 2, "readonly fast", "streams", group="stream", since="5.0.0",
         summary="Return the number of messages in a stream.",
         complexity="O(1)",
         acl="stream", keys=[ks("RO", index(1))],
         arguments=[
             key("key", 0),
         ])
describe("xdel", -3, "write fast", "streams", group="stream", since="5.0.0",
         summary="Returns the number of messages after removing them from a stream.",
         complexity="O(1) for each single item to delete in the stream, regardless of the stream size.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="resolved",
         arguments=[
             key("key", 0),
             string("id", multiple=True),
         ])
describe("xdelex", -5, "write fast", "streams", group="stream", since="8.2.0",
         summary="Deletes one or multiple entries from the stream.",
         complexity="O(1) for each single item to delete in the stream, regardless of the stream size.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="resolved reads_entries",
         arguments=[
             key("key", 0),
             oneof("condition",
                 token("KEEPREF"),
                 token("DELREF"),
                 token("ACKED"),
                 optional=True),
             block("ids",
                 integer("numids"),
                 string("id", multiple=True),
                 token="IDS"),
         ])
describe("xtrim", -4, "write", "streams", group="stream", since="5.0.0",
         summary="Deletes messages from the beginning of a stream.",
         complexity="O(N), with N being the number of evicted entries. Constant times are very small however, since entries are organized in macro nodes containing multiple entries that can be released with a single deallocation.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="resolved",
         history=[
             ("6.2.0", "Added the `MINID` trimming strategy and the `LIMIT` option."),
             ("8.2.0", "Added the `KEEPREF`, `DELREF` and `ACKED` options."),
         ],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             block("trim",
                 oneof("strategy",
                     token("MAXLEN"),
                     token("MINID", since="6.2.0")),
                 oneof("operator",
                     token("=", name="equal"),
                     token("~", name="approximately"),
                     optional=True),
                 string("threshold"),
                 integer("count", token="LIMIT", since="6.2.0", optional=True),
                 oneof("condition",
                     token("KEEPREF"),
                     token("DELREF"),
                     token("ACKED"),
                     optional=True)),
         ])
describe("xsetid", -3, "write denyoom fast", "streams", group="stream", since="5.0.0",
         summary="An internal command for replicating stream values.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="resolved",
         history=[("7.0.0", "Added the `entries_added` and `max_deleted_entry_id` arguments.")],
         arguments=[
             key("key", 0),
             string("last-id"),
             integer("entries-added", token="ENTRIESADDED", since="7.0.0", optional=True),
             string("max-deleted-id", token="MAXDELETEDID", since="7.0.0", optional=True),
         ])
describe("xcfgset", -2, "write fast", "streams", group="stream", since="8.6.0",
         summary="Sets the IDMP configuration parameters for a stream.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="resolved",
         arguments=[
             key("key", 0),
             block("idmp-duration-block",
                 token("IDMP-DURATION", name="idmp-duration-token"),
                 integer("duration"),
                 optional=True),
             block("idmp-maxsize-block",
                 token("IDMP-MAXSIZE", name="idmp-maxsize-token"),
                 integer("maxsize"),
                 optional=True),
         ])
describe("xidmp", -2, "", "streams", group="stream", since="8.6.0",
         summary="Braid alias (the IDMP proposal's spelling) for a stream's IDMP settings: XIDMP CFGSET / CFGGET.")
describe("xidmp|cfgset", -4, "write fast", "streams", since="8.6.0",
         summary="Alias of XCFGSET: XIDMP CFGSET key [DURATION seconds] [MAXSIZE entries].",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(2))], braid="resolved")
describe("xidmp|cfgget", -3, "readonly fast", "streams", since="8.6.0",
         summary="XIDMP CFGGET key [DURATION] [MAXSIZE]: the stream's IDMP settings as a map (both when no option is named).",
         complexity="O(1)",
         acl="stream", keys=[ks("RO ACCESS", index(2))])
describe("xidmp|help", 2, "loading stale", "streams", since="8.6.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="stream")
describe("xidmprecord", 5, "write denyoom fast", "streams", group="stream", since="8.6.0",
         summary="Records IDMP metadata (producer id and idempotent id) for an existing stream entry.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="resolved",
         arguments=[
             key("key", 0),
             string("pid"),
             string("iid"),
             string("stream-id"),
         ])

# ---------------------------------------------------------------- xread (node/commands/xread.py)
describe("xread", -4, "blocking readonly", "xread", group="stream", since="5.0.0",
         summary="Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a message is available otherwise.",
         complexity="For each stream mentioned: O(N) with N being the number of elements being returned, it means that XREAD-ing with a fixed COUNT is O(1).",
         acl="stream", keys=[ks("RO ACCESS", keyword("STREAMS", 1), range_(-1, 1, 2))], braid="reads_entries",
         history=[("8.10.0", "Added the `MAXCOUNT` and `MAXSIZE` options.")],
         arguments=[
             integer("count", token="COUNT", optional=True),
             integer("maxcount", token="MAXCOUNT", since="8.10.0", optional=True),
             integer("maxsize", token="MAXSIZE", since="8.10.0", optional=True),
             integer("milliseconds", token="BLOCK", optional=True),
             block("streams",
                 key("key", 0, multiple=True),
                 string("id", multiple=True),
                 token="STREAMS"),
         ])
describe("xreadgroup", -7, "blocking write", "xread", group="stream", since="5.0.0",
         summary="Returns new or historical messages from a stream for a consumer in a group. Blocks until a message is available otherwise.",
         complexity="For each stream mentioned: O(M) with M being the number of elements returned. If M is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1). On the other side when XREADGROUP blocks, XADD will pay the O(N) time in order to serve the N clients blocked on the stream getting new data.",
         acl="stream", keys=[ks("RO ACCESS", keyword("STREAMS", 4), range_(-1, 1, 2))], braid="logged_if_changed reads_entries",
         history=[("8.4.0", "Added the `CLAIM` option."), ("8.10.0", "Added the `MAXCOUNT` and `MAXSIZE` options.")],
         arguments=[
             block("group-block",
                 string("group"),
                 string("consumer"),
                 token="GROUP"),
             integer("count", token="COUNT", optional=True),
             integer("maxcount", token="MAXCOUNT", since="8.10.0", optional=True),
             integer("maxsize", token="MAXSIZE", since="8.10.0", optional=True),
             integer("milliseconds", token="BLOCK", optional=True),
             integer("min-idle-time", token="CLAIM", since="8.4.0", optional=True),
             token("NOACK", optional=True),
             block("streams",
                 key("key", 0, multiple=True),
                 string("id", multiple=True),
                 token="STREAMS"),
         ])

# ---------------------------------------------------------------- groups (node/commands/groups.py)
describe("xgroup", -2, "", "groups", group="stream", since="5.0.0",
         summary="A container for consumer groups commands.")
describe("xgroup|create", -5, "write denyoom", "groups", since="5.0.0",
         summary="Creates a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW INSERT", index(2))], braid="resolved",
         history=[("7.0.0", "Added the `entries_read` named argument.")],
         arguments=[
             key("key", 0),
             string("group"),
             oneof("id-selector",
                 string("id"),
                 token("$", name="new-id")),
             token("MKSTREAM", optional=True),
             integer("entriesread", token="ENTRIESREAD", optional=True),
         ])
describe("xgroup|setid", -5, "write", "groups", since="5.0.0",
         summary="Sets the last-delivered ID of a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(2))],
         history=[("7.0.0", "Added the optional `entries_read` argument.")],
         arguments=[
             key("key", 0),
             string("group"),
             oneof("id-selector",
                 string("id"),
                 token("$", name="new-id")),
             integer("entriesread", token="ENTRIESREAD", optional=True),
         ])
describe("xgroup|destroy", 4, "write", "groups", since="5.0.0",
         summary="Destroys a consumer group.",
         complexity="O(N) where N is the number of entries in the group's pending entries list (PEL).",
         acl="stream", keys=[ks("RW DELETE", index(2))], braid="resolved",
         arguments=[
             key("key", 0),
             string("group"),
         ])
describe("xgroup|createconsumer", 5, "write denyoom", "groups", since="6.2.0",
         summary="Creates a consumer in a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW INSERT", index(2))],
         arguments=[
             key("key", 0),
             string("group"),
             string("consumer"),
         ])
describe("xgroup|delconsumer", 5, "write", "groups", since="5.0.0",
         summary="Deletes a consumer from a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW DELETE", index(2))],
         arguments=[
             key("key", 0),
             string("group"),
             string("consumer"),
         ])
describe("xgroup|help", 2, "loading stale", "groups", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="stream")
describe("xack", -4, "write fast", "groups", group="stream", since="5.0.0",
         summary="Returns the number of messages that were successfully acknowledged by the consumer group member of a stream.",
         complexity="O(1) for each message ID processed.",
         acl="stream", keys=[ks("RW UPDATE", index(1))],
         arguments=[
             key("key", 0),
             string("group"),
             string("id", multiple=True),
         ])
describe("xackdel", -6, "write fast", "groups", group="stream", since="8.2.0",
         summary="Acknowledges and conditionally deletes one or multiple entries for a stream consumer group.",
         complexity="O(1) for each entry ID processed.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="reads_entries",
         arguments=[
             key("key", 0),
             string("group"),
             oneof("condition",
                 token("KEEPREF"),
                 token("DELREF"),
                 token("ACKED"),
                 optional=True),
             block("ids",
                 integer("numids"),
                 string("id", multiple=True),
                 token="IDS"),
         ])
describe("xnack", -7, "write fast", "groups", group="stream", since="8.8.0",
         summary="Releases pending messages back to the group's PEL without acknowledging them, making them available for re-delivery.",
         complexity="O(1) for each message ID processed.",
         acl="stream", keys=[ks("RW UPDATE", index(1))],
         arguments=[
             key("key", 0),
             string("group"),
             oneof("mode",
                 token("SILENT"),
                 token("FAIL"),
                 token("FATAL")),
             block("ids",
                 integer("numids"),
                 string("id", multiple=True),
                 token="IDS"),
             integer("count", token="RETRYCOUNT", optional=True),
             token("FORCE", optional=True),
         ])
describe("xpending", -3, "readonly", "groups", group="stream", since="5.0.0",
         summary="Returns the information and entries from a stream consumer group's pending entries list.",
         complexity="O(N) with N being the number of elements returned, so asking for a small fixed number of entries per call is O(1). O(M), where M is the total number of entries scanned when used with the IDLE filter. When the command returns just the summary and the list of consumers is small, it runs in O(1) time; otherwise, an additional O(N) time for iterating every consumer.",
         acl="stream", keys=[ks("RO ACCESS", index(1))],
         history=[("6.2.0", "Added the `IDLE` option and exclusive range intervals.")],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             string("group"),
             block("filters",
                 integer("min-idle-time", token="IDLE", since="6.2.0", optional=True),
                 string("start"),
                 string("end"),
                 integer("count"),
                 string("consumer", optional=True),
                 optional=True),
         ])
describe("xclaim", -6, "write fast", "groups", group="stream", since="5.0.0",
         summary="Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a consumer group member.",
         complexity="O(log N) with N being the number of messages in the PEL of the consumer group.",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="reads_entries",
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             string("group"),
             string("consumer"),
             string("min-idle-time"),
             string("id", multiple=True),
             integer("ms", token="IDLE", optional=True),
             unix_time("unix-time-milliseconds", token="TIME", optional=True),
             integer("count", token="RETRYCOUNT", optional=True),
             token("FORCE", optional=True),
             token("JUSTID", optional=True),
             string("lastid", token="LASTID", optional=True),
         ])
describe("xautoclaim", -6, "write fast", "groups", group="stream", since="6.2.0",
         summary="Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered to as consumer group member.",
         complexity="O(1) if COUNT is small.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="reads_entries",
         history=[
             ("7.0.0", "Added an element to the reply array, containing deleted entries the command cleared from the PEL"),
         ],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             string("group"),
             string("consumer"),
             string("min-idle-time"),
             string("start"),
             integer("count", token="COUNT", optional=True),
             token("JUSTID", optional=True),
         ])

# ---------------------------------------------------------------- xinfo (node/commands/xinfo.py)
describe("xinfo", -2, "", "xinfo", group="stream", since="5.0.0",
         summary="A container for stream introspection commands.")
describe("xinfo|stream", -3, "readonly", "xinfo", since="5.0.0",
         summary="Returns information about a stream.",
         complexity="O(1)",
         acl="stream", keys=[ks("RO ACCESS", index(2))], braid="reads_entries",
         history=[
             ("6.0.0", "Added the `FULL` modifier."),
             ("7.0.0", "Added the `max-deleted-entry-id`, `entries-added`, `recorded-first-entry-id`, `entries-read` and `lag` fields"),
             ("7.2.0", "Added the `active-time` field, and changed the meaning of `seen-time`."),
             ("8.6.0", "Added the `idmp-duration`, `idmp-maxsize`, `pids-tracked`, `iids-tracked`, `iids-added` and `iids-duplicates` fields for IDMP tracking."),
         ],
         arguments=[
             key("key", 0),
             block("full-block",
                 token("FULL"),
                 integer("count", token="COUNT", optional=True),
                 optional=True),
         ])
describe("xinfo|groups", 3, "readonly", "xinfo", since="5.0.0",
         summary="Returns a list of the consumer groups of a stream.",
         complexity="O(1)",
         acl="stream", keys=[ks("RO ACCESS", index(2))],
         history=[("7.0.0", "Added the `entries-read` and `lag` fields")],
         arguments=[
             key("key", 0),
         ])
describe("xinfo|consumers", 4, "readonly", "xinfo", since="5.0.0",
         summary="Returns a list of the consumers in a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RO ACCESS", index(2))],
         history=[("7.2.0", "Added the `inactive` field, and changed the meaning of `idle`.")],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             string("group"),
         ])
describe("xinfo|help", 2, "loading stale", "xinfo", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="stream")

# ---------------------------------------------------------------- crdt (node/commands/crdt.py)
describe("braid.replication", -2, "", "crdt", group="server", since="0.1.0",
         summary="Controls this region's replication (Active-Active databases).")
describe("braid.replication|pause", -2, "admin noscript", "crdt", since="0.1.0",
         summary="Stops all syncing of this region with the others, or with one peer (PEER name): writes stay local.",
         complexity="O(1)")
describe("braid.replication|resume", -2, "admin noscript", "crdt", since="0.1.0",
         summary="Resumes syncing (all links, or the link to PEER name): the regions exchange what the other lacks.",
         complexity="O(1)")
describe("braid.replication|status", 2, "admin noscript", "crdt", since="0.1.0",
         summary="This region's version vector and links, as INFO crdt reports them.",
         complexity="O(1)")
describe("braid.replication|cluster", 2, "admin noscript", "crdt", since="0.1.0",
         summary="The cluster file this region runs with (token left out).",
         complexity="O(1)")
describe("braid.config", -2, "", "crdt", group="server", since="0.1.0",
         summary="Database-level settings of an Active-Active region (set by braid-admin on every region).")
describe("braid.config|get", 3, "admin noscript", "crdt", since="0.1.0",
         summary="BRAID.CONFIG GET crdt_xadd_id_uniqueness_mode",
         complexity="O(1)")
describe("braid.config|set", 4, "admin noscript", "crdt", since="0.1.0",
         summary="BRAID.CONFIG SET crdt_xadd_id_uniqueness_mode strict|semi-strict|liberal, or appendfsync (also recorded in this region's cluster file)",
         complexity="O(1)")

# ---------------------------------------------------------------- debug (node/commands/debug.py)
describe("debug", -2, "admin noscript loading stale protected", "debug", group="server", since="1.0.0",
         summary="A container for debugging commands (Braid: fault injection for chaos tests).")
describe("debug|clock-offset", 3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Moves this region's wall clock by a number of milliseconds (negative: back).",
         complexity="O(1)")
describe("debug|fsync-delay", 3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Makes every fsync of the append-only file wait this many milliseconds.",
         complexity="O(1)")
describe("debug|disk-full", 3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Makes writes to the append-only file fail as on a full disk (yes) or succeed again (no).",
         complexity="O(1)")
describe("debug|apply-fail", 3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Makes the next operations of other regions fail to apply (the region fail-stops).",
         complexity="O(1)")
describe("debug|cron-fail", -4, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Makes the next runs of a cron step raise an I/O error (IO) or a bug (BUG).",
         complexity="O(1)")
describe("debug|raise-after", -3, "admin noscript loading stale", "debug", since="0.1.0",
         summary="Runs a command, then raises as a buggy handler would.",
         complexity="Depends on the command")
describe("debug|help", 2, "loading stale", "debug", since="0.1.0",
         summary="Shows helpful text about the different subcommands.",
         complexity="O(1)")

# ---------------------------------------------------------------- origins (node/commands/origins.py)
describe("xorigins", 2, "readonly fast", "origins", group="stream", since="0.1.0",
         summary="Lists a stream's origin logs (Braid): per origin region its number, live entries, first live ID and highest ID stored.",
         complexity="O(R) with R being the number of origin regions.",
         acl="stream", keys=[ks("RO ACCESS", index(1))])
describe("xrangeorigin", -5, "readonly", "origins", group="stream", since="0.1.0",
         summary="Returns the entries of one origin region's log of a stream within a range of IDs (Braid).",
         complexity="O(N) with N being the number of elements being returned.",
         acl="stream", keys=[ks("RO ACCESS", index(1))])
describe("xsplitorigin", 6, "readonly", "origins", group="stream", since="0.1.0",
         summary="Cuts the entries of one origin region's log within a range of IDs into runs of at most size entries; returns each run's last ID and length (Braid).",
         complexity="O(B + S) with B the number of blocks in the range and S the number of runs, plus decoding the blocks where runs end.",
         acl="stream", keys=[ks("RO ACCESS", index(1))])

# ---------------------------------------------------------------- acl (node/commands/acl.py)
describe("acl", -2, "sentinel", "acl", group="server", since="6.0.0",
         summary="A container for Access List Control commands.")
describe("acl|setuser", -3, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Creates and modifies an ACL user and its rules.",
         complexity="O(N). Where N is the number of rules provided.")
describe("acl|getuser", 3, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Lists the ACL rules of a user.",
         complexity="O(N). Where N is the number of password, command and pattern rules that the user has.")
describe("acl|deluser", -3, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Deletes ACL users, and terminates their connections.",
         complexity="O(1) amortized time considering the typical user.")
describe("acl|list", 2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Dumps the effective rules in ACL file format.",
         complexity="O(N). Where N is the number of configured users.")
describe("acl|users", 2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Lists all ACL users.",
         complexity="O(N). Where N is the number of configured users.")
describe("acl|whoami", 2, "noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Returns the authenticated username of the current connection.",
         complexity="O(1)")
describe("acl|load", 2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Reloads the rules from the configured ACL file.",
         complexity="O(N). Where N is the number of configured users.")
describe("acl|save", 2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Saves the effective ACL rules in the configured ACL file.",
         complexity="O(N). Where N is the number of configured users.")
describe("acl|cat", -2, "noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Lists the ACL categories, or the commands inside a category.",
         complexity="O(1) since the categories and commands are a fixed set.")
describe("acl|genpass", -2, "noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Generates a pseudorandom, secure password that can be used to identify ACL users.",
         complexity="O(N)")
describe("acl|log", -2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Lists recent security events generated due to ACL rules.",
         complexity="O(N) with N being the number of entries shown.")
describe("acl|dryrun", -4, "admin noscript loading stale sentinel", "acl", since="7.0.0",
         summary="Simulates the execution of a command by a user, without executing the command.",
         complexity="O(1).")
describe("acl|help", 2, "loading stale sentinel", "acl", since="6.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)")

# ---------------------------------------------------------------- slowlog (node/commands/slowlog.py)
describe("slowlog", -2, "", "slowlog", group="server", since="2.2.12",
         summary="A container for slow log commands.")
describe("slowlog|get", -2, "admin loading stale", "slowlog", since="2.2.12",
         summary="Returns the slow log's entries.",
         complexity="O(N) where N is the number of entries returned",
         history=[("4.0.0", "Added client IP address, port and name to the reply."),
                  ("8.10.0", "Added original command argument count to the reply.")],
         tips=["request_policy:all_nodes", "nondeterministic_output"],
         arguments=[integer("count", optional=True)])
describe("slowlog|len", 2, "admin loading stale", "slowlog", since="2.2.12",
         summary="Returns the number of entries in the slow log.",
         complexity="O(1)",
         tips=["request_policy:all_nodes", "response_policy:agg_sum", "nondeterministic_output"])
describe("slowlog|reset", 2, "admin loading stale", "slowlog", since="2.2.12",
         summary="Clears all entries from the slow log.",
         complexity="O(N) where N is the number of entries in the slowlog",
         tips=["request_policy:all_nodes", "response_policy:all_succeeded"])
describe("slowlog|help", 2, "loading stale", "slowlog", since="6.2.0",
         summary="Show helpful text about the different subcommands",
         complexity="O(1)")
_LATENCY_TIPS = ["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"]
describe("latency", -2, "", "slowlog", group="server", since="2.8.13",
         summary="A container for latency diagnostics commands.")
describe("latency|latest", 2, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Returns the latest latency samples for all events.",
         complexity="O(1)",
         tips=_LATENCY_TIPS)
describe("latency|history", 3, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Returns timestamp-latency samples for an event.",
         complexity="O(1)",
         tips=_LATENCY_TIPS,
         arguments=[string("event")])
describe("latency|reset", -2, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Resets the latency data for one or more events.",
         complexity="O(1)",
         tips=["request_policy:all_nodes", "response_policy:agg_sum"],
         arguments=[string("event", optional=True, multiple=True)])
describe("latency|graph", 3, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Returns a latency graph for an event.",
         complexity="O(1)",
         tips=_LATENCY_TIPS,
         arguments=[string("event")])
describe("latency|doctor", 2, "admin noscript loading stale", "slowlog", since="2.8.13",
         summary="Returns a human-readable latency analysis report.",
         complexity="O(1)",
         tips=_LATENCY_TIPS)
describe("latency|help", 2, "loading stale", "slowlog", since="2.8.13",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)")
