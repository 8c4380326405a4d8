"""The command table: metadata kept as data, one handler per command.

Each command family lives in its own module (``streams.py``, ``groups.py``,
``keys.py``, ``dump.py``, ``migrate.py``, ``server.py``, ``connection.py``, ``transactions.py``,
``slowlog.py``) and
registers its handlers with :func:`command` / :func:`subcommand`.  A handler is
``handler(client, argv) -> reply`` where ``argv[0]`` is the command name as
sent and the reply is a plain value for :mod:`node.resp.encoder`; a handler
aborts with ``raise ReplyError("ERR ...")``.  Blocking commands may return a
:class:`node.blocking.Blocked`.

Metadata follows Redis's command table (``COMMAND INFO`` shows it): arity
(positive = exact, negative = at least), flags, and the first/last/step key
positions clients use to find keys.  ``resolved`` (Braid's own, from
:data:`RESOLVED`) marks a command whose whole effect is the operations it applies.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Handler = Callable[[Any, list[bytes]], Any]


@dataclass(slots=True)
class Command:
    name: str
    arity: int
    flags: tuple[str, ...]
    first_key: int = 0
    last_key: int = 0
    step: int = 0
    group: str = "generic"
    summary: str = ""
    since: str = "1.0.0"
    complexity: str = ""
    acl: tuple[str, ...] = ()
    handler: Handler | None = None
    subcommands: dict[bytes, "Command"] = field(default_factory=dict)
    parent: "Command | None" = None
    resolved: bool = False  # see RESOLVED
    logged_if_changed: bool = False  # see LOGGED_IF_CHANGED
    # derived once from the fields above (every command dispatched reads them):
    fullname: str = field(init=False)   # "xgroup|create" for a subcommand
    is_write: bool = field(init=False)  # the "write" flag
    denyoom: bool = field(init=False)  # the "denyoom" flag: refused while used memory > maxmemory
    reads_entries: bool = field(init=False)  # see READS_ENTRIES
    # a write the operation log records when it did not fail (see RegionCore._log_command)
    always_logged: bool = field(init=False)
    # the argument counts the arity allows, as two bounds (dispatch compares, calls nothing)
    min_argc: int = field(init=False)
    max_argc: int = field(init=False)

    def __post_init__(self) -> None:
        self.fullname = f"{self.parent.name}|{self.name}" if self.parent else self.name
        self.is_write = "write" in self.flags
        self.denyoom = "denyoom" in self.flags
        self.reads_entries = self.fullname in READS_ENTRIES
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


def _register(name: str, cmd: Command) -> None:
    COMMANDS[name.encode()] = cmd
    SPELLINGS[name.encode()] = SPELLINGS[name.upper().encode()] = cmd

# Commands whose whole effect is the operations (crdt/ops.py) they apply: the operation
# log records those operations and not the command (node/persistence/oplog.py), so a
# replay never resolves them again.  A command that also changes region-local state
# (consumers, the PEL, cursors, settings), or an XADD answered from its IDMP map (it
# counts the duplicate), is logged as a command with the operations it applied.
RESOLVED = frozenset({"xadd", "xdel", "xdelex", "xtrim", "xsetid", "xcfgset", "xidmp|cfgset", "xidmprecord",
                      "del", "unlink", "rename", "renamenx", "flushdb", "flushall", "migrate",
                      "xgroup|create", "xgroup|destroy"})

# Writes logged only when they changed state (the change counter moved, or they marked a
# region-local change, ``Database.local_change``): an XREADGROUP that delivered nothing and
# created no consumer (a history read of nothing, a blocked read not yet served) logs nothing.
LOGGED_IF_CHANGED = frozenset({"xreadgroup"})

# Commands that read a stream's entries and so may fill its logs' caches of decoded blocks
# (crdt/blocks.py, "Memory") without changing it: their keys' memory is counted again
# (``Database.memory``) as a write's is.
READS_ENTRIES = frozenset({"xrange", "xrevrange", "xread", "xreadgroup", "xclaim", "xautoclaim", "xinfo|stream",
                           "dump", "copy", "xdelex", "xackdel"})

# A handler's reply meaning "send nothing and close the connection" (SHUTDOWN, as Redis).
CLOSE_WITHOUT_REPLY = object()


def _flags(flags: str | tuple[str, ...]) -> tuple[str, ...]:
    return tuple(flags.split()) if isinstance(flags, str) else tuple(flags)


def command(name: str, arity: int, flags: str = "", keys: tuple[int, int, int] = (0, 0, 0),
            group: str = "generic", summary: str = "", since: str = "1.0.0",
            complexity: str = "", acl: str = "") -> Callable[[Handler], Handler]:
    """Register a top-level command (or, with no handler use, a container)."""

    def register(fn: Handler) -> Handler:
        cmd = COMMANDS.get(name.encode())
        if cmd is None:
            cmd = Command(name, arity, _flags(flags), *keys, group=group, summary=summary,
                          since=since, complexity=complexity, acl=_flags(acl), resolved=name in RESOLVED,
                          logged_if_changed=name in LOGGED_IF_CHANGED)
            _register(name, cmd)
        cmd.handler = fn
        return fn

    return register


def container(name: str, arity: int = -2, group: str = "generic", summary: str = "",
              since: str = "1.0.0", flags: str = "") -> Command:
    """Register a command that only dispatches to subcommands (XGROUP, XINFO...)."""
    cmd = COMMANDS.get(name.encode())
    if cmd is None:
        cmd = Command(name, arity, _flags(flags), group=group, summary=summary, since=since)
        _register(name, cmd)
    return cmd


def subcommand(parent: str, name: str, arity: int, flags: str = "",
               keys: tuple[int, int, int] = (0, 0, 0), summary: str = "",
               since: str = "1.0.0", complexity: str = "", acl: str = "") -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        p = COMMANDS[parent.encode()]
        sub = Command(name, arity, _flags(flags), *keys, group=p.group, summary=summary,
                      since=since, complexity=complexity, acl=_flags(acl), handler=fn, parent=p,
                      resolved=f"{parent}|{name}" in RESOLVED)
        p.subcommands[name.encode()] = sub
        return fn

    return register


FAMILIES = ("connection", "server", "keys", "dump", "migrate", "transactions", "streams", "xread", "groups", "xinfo", "crdt", "debug", "origins", "acl", "slowlog")


def load_all() -> dict[bytes, Command]:
    for fam in FAMILIES:
        try:
            importlib.import_module(f"node.commands.{fam}")
        except ModuleNotFoundError as e:
            if e.name != f"node.commands.{fam}":
                raise
    return COMMANDS


def lookup(argv: list[bytes]) -> Command | None:
    """The command (or subcommand) ``argv`` runs, None if unknown."""
    cmd = COMMANDS.get(argv[0].lower())
    if cmd is not None and cmd.subcommands:
        cmd = cmd.subcommands.get(argv[1].lower()) if len(argv) >= 2 else None
    return cmd
