"""The dispatch table: one handler per described command.

Every command is described once, in :mod:`node.commands.table` (arity, flags, ACL
categories, key specs, documentation, Braid's own facts; its docstring tells what is
derived from what).  Each command family lives in its own module (``streams.py``,
``groups.py``, ``keys.py``, ``dump.py``, ``migrate.py``, ``server.py``,
``connection.py``, ``transactions.py``, ``slowlog.py``, ``cluster.py``...: a description's ``family``)
and registers its handlers with :func:`command` / :func:`subcommand`, which name a
described command and add nothing else.  A handler is ``handler(client, argv) -> reply``
(:data:`node.commands.context.Handler`: ``client`` is a session, through which it sees the
region's services, :class:`node.commands.context.Region`, and never the driver) where
``argv[0]`` is the command name as sent and the reply is a plain value for
:mod:`node.resp.encoder`; a handler aborts with ``raise ReplyError("ERR ...")``.
Blocking commands may return a :class:`node.region.blocking.Blocked`.

A :class:`Command` is what dispatch reads, built from the description when its handler
(or, for a container, its first subcommand's) registers: the fields dispatch tests on
every command are computed once here (``is_write``, ``denyoom``, ``min_argc``...), as are
the legacy first/last/step key positions COMMAND INFO and GETKEYS report (from the key
specs, as Redis's ``populateCommandLegacyRangeSpec``).  A handler registered under a name
without a description fails at import; :func:`load_all` fails when a description has no
handler, so the table and the handlers cannot drift apart.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from node.commands.context import Handler
from node.commands.table import DESCRIPTIONS, Description

# The flags COMMAND INFO shows, in the order Redis's addReplyCommandFlags lists them; Redis
# hides the others (sentinel, only_sentinel, may_replicate, protected, touches_arbitrary_keys).
INFO_FLAGS = ("write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking", "loading",
              "stale", "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth", "no_mandatory_keys",
              "no_async_loading", "no_multi", "movablekeys", "allow_busy")


def legacy_range(keys: tuple) -> tuple[tuple[int, int, int], bool]:
    """(first, last, step) of the keys, and whether they are movable: what Redis derives from
    the key specs for COMMAND INFO (populateCommandLegacyRangeSpec and
    populateCommandMovableKeys): the consecutive index+range specs of step 1 make the range;
    any other spec (a keyword search, a step, an incomplete spec) makes the keys movable."""
    if not keys:
        return (0, 0, 0), False
    if len(keys) == 1 and keys[0][1][0] == "index" and keys[0][2][0] == "range":
        flags, (_, pos), (_, lastkey, step, _limit) = keys[0]
        return (pos, lastkey + pos if lastkey >= 0 else lastkey, step), "INCOMPLETE" in flags
    first, last, prev_last, movable = None, 0, 0, False
    for flags, begin, find in keys:
        if begin[0] != "index" or find[0] != "range" or find[2] != 1 or (prev_last and prev_last != begin[1] - 1):
            movable = True
            continue
        movable = movable or "INCOMPLETE" in flags
        first = begin[1] if first is None else min(first, begin[1])
        lastkey = find[1] + begin[1] if find[1] >= 0 else find[1]
        last = max(last, lastkey, key=lambda k: k % (1 << 32))  # unsigned, as Redis: -1 (the end) is the largest
        prev_last = last
    if first is None:
        return (0, 0, 0), True
    return (first, last, 1), movable


@dataclass(slots=True)
class Command:
    desc: Description
    handler: Handler | None = None
    parent: Command | None = None
    subcommands: dict[bytes, Command] = field(default_factory=dict)
    # from the description, as attributes (dispatch reads them on every command):
    name: str = field(init=False)  # "create" for "xgroup|create"
    fullname: str = field(init=False)  # "xgroup|create"
    arity: int = field(init=False)
    flags: tuple[str, ...] = field(init=False)  # Redis's spelling: "no_auth", "skip_slowlog"
    group: str = field(init=False)
    summary: str = field(init=False)
    since: str = field(init=False)
    complexity: str = field(init=False)
    # derived once from the description:
    first_key: int = field(init=False)  # the legacy key range (COMMAND INFO, COMMAND GETKEYS)
    last_key: int = field(init=False)
    step: int = field(init=False)
    info_flags: tuple[str, ...] = field(init=False)  # COMMAND INFO's flags
    is_write: bool = field(init=False)  # the "write" flag
    denyoom: bool = field(init=False)  # the "denyoom" flag: refused while used memory > maxmemory
    resolved: bool = field(init=False)  # see RESOLVED
    logged_if_changed: bool = field(init=False)  # see LOGGED_IF_CHANGED
    reads_entries: bool = field(init=False)  # see READS_ENTRIES
    # a write the operation log records when it did not fail (see RegionCore.log_command)
    always_logged: bool = field(init=False)
    # the argument counts the arity allows, as two bounds (dispatch compares, calls nothing)
    min_argc: int = field(init=False)
    max_argc: int = field(init=False)

    def __post_init__(self) -> None:
        d = self.desc
        self.fullname = d.name
        self.name = d.name.rpartition("|")[2]
        self.arity, self.flags, self.group = d.arity, d.flags, d.group
        self.summary, self.since, self.complexity = d.summary, d.since, d.complexity
        (self.first_key, self.last_key, self.step), movable = legacy_range(d.keys)
        shown = set(d.flags) | ({"movablekeys"} if movable else set())
        self.info_flags = tuple(f for f in INFO_FLAGS if f in shown)
        self.is_write = "write" in d.flags
        self.denyoom = "denyoom" in d.flags
        self.resolved = "resolved" in d.braid
        self.logged_if_changed = "logged_if_changed" in d.braid
        self.reads_entries = "reads_entries" in d.braid
        self.always_logged = self.is_write and not self.logged_if_changed
        self.min_argc = abs(self.arity)
        self.max_argc = self.arity if self.arity > 0 else 1 << 62

    def check_arity(self, argc: int) -> bool:
        a = self.arity
        return argc == a if a > 0 else argc >= -a

    @property
    def is_container(self) -> bool:
        return bool(self.subcommands)


COMMANDS: dict[bytes, Command] = {}
# Every top-level command under its lower-case and upper-case names: how clients spell
# them, so dispatch finds most commands without lower-casing the name first.
SPELLINGS: dict[bytes, Command] = {}

# Braid's facts about commands (the ``braid`` words of node/commands/table/), as name sets:
# commands whose whole effect is the operations (crdt/ops.py) they apply: the operation
# log records those operations and not the command (node/persistence/oplog.py), so a
# replay never resolves them again.  A command that also changes region-local state
# (consumers, the PEL, cursors, settings), or an XADD answered from its IDMP map (it
# counts the duplicate), is logged as a command with the operations it applied.
RESOLVED = frozenset(n for n, d in DESCRIPTIONS.items() if "resolved" in d.braid)
# Writes logged only when they changed state (the change counter moved, or they marked a
# region-local change, ``Database.local_change``): an XREADGROUP that delivered nothing and
# created no consumer (a history read of nothing, a blocked read not yet served) logs nothing.
LOGGED_IF_CHANGED = frozenset(n for n, d in DESCRIPTIONS.items() if "logged_if_changed" in d.braid)
# Commands that read a stream's entries and so may fill its logs' caches of decoded blocks
# (crdt/blocks.py, "Memory") without changing it: their keys' memory is counted again
# (``Database.memory``) as a write's is.
READS_ENTRIES = frozenset(n for n, d in DESCRIPTIONS.items() if "reads_entries" in d.braid)

# The containers: commands some ``name|sub`` description names (they need no handler).
CONTAINERS = frozenset(d.container for d in DESCRIPTIONS.values() if d.container)

# A handler's reply meaning "send nothing and close the connection" (SHUTDOWN, as Redis).
CLOSE_WITHOUT_REPLY = object()


def _described(fullname: str, fn: Handler) -> Description:
    desc = DESCRIPTIONS.get(fullname)
    if desc is None:
        raise LookupError(f"{fn.__module__}.{fn.__qualname__} handles {fullname!r}, which node/commands/table/ "
                          "does not describe")
    if fn.__module__ != f"{__name__}.{desc.family}":
        raise LookupError(f"{fullname!r} is described as handled in {__name__}.{desc.family}, "
                          f"not {fn.__module__}")
    return desc


def _top(name: str) -> Command:
    """The top-level command ``name``, in the dispatch table from now on."""
    cmd = COMMANDS.get(name.encode())
    if cmd is None:
        cmd = COMMANDS[name.encode()] = Command(DESCRIPTIONS[name])
        SPELLINGS[name.encode()] = SPELLINGS[name.upper().encode()] = cmd
    return cmd


def command(name: str) -> Callable[[Handler], Handler]:
    """Register the handler of the described top-level command ``name``."""

    def register(fn: Handler) -> Handler:
        _described(name, fn)
        cmd = _top(name)
        if cmd.handler is not None:
            raise LookupError(f"{name!r} has two handlers")
        cmd.handler = fn
        return fn

    return register


def subcommand(parent: str, name: str) -> Callable[[Handler], Handler]:
    """Register the handler of the described subcommand ``parent|name``."""

    def register(fn: Handler) -> Handler:
        desc = _described(f"{parent}|{name}", fn)
        p = _top(parent)
        if name.encode() in p.subcommands:
            raise LookupError(f"{desc.name!r} has two handlers")
        p.subcommands[name.encode()] = Command(desc, handler=fn, parent=p)
        return fn

    return register


# The modules holding the handlers, in the order load_all imports them (it decides the
# order of COMMAND's and COMMAND LIST's replies, as registration fills COMMANDS).
FAMILIES = ("connection", "server", "keys", "dump", "migrate", "transactions", "streams", "xread", "groups",
            "xinfo", "braid", "debug", "origins", "acl", "slowlog", "cluster", "waits")


def load_all() -> dict[bytes, Command]:
    """Import every family's handlers; fails if a description has no handler."""
    for fam in FAMILIES:
        importlib.import_module(f"{__name__}.{fam}")
    missing = [n for n, d in DESCRIPTIONS.items() if n not in CONTAINERS and _registered(d) is None]
    strays = sorted({d.family for d in DESCRIPTIONS.values()} - set(FAMILIES))
    if missing or strays:
        raise LookupError(f"described without a handler: {missing}; families not in FAMILIES: {strays}")
    # COMMAND lists them in FAMILIES' order, each family's in its module's order, whichever
    # module was imported first (a stable sort by family: within one the order is the file's)
    rank = {fam: i for i, fam in enumerate(FAMILIES)}

    def by_family(item: tuple[bytes, Command]) -> int:
        return rank[DESCRIPTIONS[item[1].fullname].family]

    for table in [COMMANDS] + [c.subcommands for c in COMMANDS.values() if c.subcommands]:
        ordered = sorted(table.items(), key=by_family)
        table.clear()
        table.update(ordered)
    return COMMANDS


def _registered(desc: Description) -> Handler | None:
    top = COMMANDS.get((desc.container or desc.name).encode())
    if top is not None and desc.container:
        sub = top.subcommands.get(desc.name.partition("|")[2].encode())
        return sub.handler if sub is not None else None
    return top.handler if top is not None else None


def lookup(argv: list[bytes]) -> Command | None:
    """The command (or subcommand) ``argv`` runs, None if unknown."""
    cmd = COMMANDS.get(argv[0].lower())
    if cmd is not None and cmd.subcommands:
        cmd = cmd.subcommands.get(argv[1].lower()) if len(argv) >= 2 else None
    return cmd
