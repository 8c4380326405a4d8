"""The command table as ACL sees it, derived from the commands' descriptions.

Holds :class:`CommandTable` (:func:`command_table`): each command's and subcommand's ACL
categories (Redis's explicit ones plus the implicit ones from its flags), its key specs
with the read/write bits they grant (:data:`READ`, :data:`WRITE`) and whether it is
``no-auth``; :func:`keys_of`, the keys a command line names (Redis's
``getKeysUsingKeySpecs``); and :data:`CATEGORIES`, every category name.

Every command's flags, explicit ACL categories and key specs are written once, in
node/commands/table/ (Redis's own for the commands Braid shares with Redis, so that
``+@read``, ``%R~`` and the rest decide exactly as Redis does).  They are given here as
``full name -> (flags, explicit categories, key specs)``, where a key spec is
``(flags, begin_search, find_keys)`` with ``begin_search`` either ``("index", pos)`` or
``("keyword", word, startfrom)`` and ``find_keys`` either
``("range", lastkey, step, limit)`` or ``("keynum", keynumidx, firstkey, step)``, read as
Redis's ``getKeysUsingKeySpecs`` reads them.  The implicit categories (@write, @read,
@admin, @fast or @slow...) follow from the flags (``_categories``).
"""

from __future__ import annotations

from dataclasses import dataclass

from node.commands import load_all
from node.commands.keypositions import migrate_key_positions
from node.commands.table import DESCRIPTIONS

# Named after Redis's command table, whose shape it has; it holds every command Braid has.
REDIS_COMMANDS: dict[str, tuple] = {name: (d.flags, d.acl, d.keys) for name, d in DESCRIPTIONS.items()}

CATEGORIES = ("keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
              "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking",
              "dangerous", "connection", "transaction", "scripting")

READ, WRITE = 1, 2  # key pattern permissions (%R~, %W~; ~ is both)


# ---------------------------------------------------------------- the command table, as ACL sees it
@dataclass(slots=True)
class CommandAcl:
    fullname: str
    categories: frozenset[str]
    key_specs: tuple  # ((read/write bits, begin_search, find_keys), ...)
    no_auth: bool
    parent: str | None
    subcommands: tuple[str, ...]
    has_subcommands: bool


def _key_bits(flags) -> int:
    bits = 0
    if "ACCESS" in flags:
        bits |= READ
    if "INSERT" in flags or "DELETE" in flags or "UPDATE" in flags:
        bits |= WRITE
    return bits


def _categories(flags, explicit) -> frozenset[str]:
    cats = set(explicit)
    if "write" in flags:
        cats.add("write")
    if "readonly" in flags and "scripting" not in cats:
        cats.add("read")
    if "admin" in flags:
        cats |= {"admin", "dangerous"}
    if "pubsub" in flags:
        cats.add("pubsub")
    if "fast" in flags:
        cats.add("fast")
    if "blocking" in flags:
        cats.add("blocking")
    if "fast" not in cats:
        cats.add("slow")
    return frozenset(cats)


class CommandTable:
    """The ACL view of the command table (built once from node.commands.COMMANDS)."""

    def __init__(self) -> None:
        self.by_name: dict[str, CommandAcl] = {}
        self.top: dict[str, object] = {}
        for cmd in load_all().values():
            self._add(cmd)
            for sub in cmd.subcommands.values():
                self._add(sub)
        self.top = {name: c for name, c in self.by_name.items() if c.parent is None}

    def _add(self, cmd) -> None:
        flags, explicit, specs = REDIS_COMMANDS[cmd.fullname]
        self.by_name[cmd.fullname] = CommandAcl(
            cmd.fullname, _categories(flags, explicit),
            tuple((_key_bits(f), b, fk) for f, b, fk in specs),
            "no_auth" in flags, cmd.parent.name if cmd.parent else None,
            tuple(s.fullname for s in cmd.subcommands.values()), bool(cmd.subcommands))

    def lookup(self, name: str) -> CommandAcl | None:
        """Redis's lookupCommandBySdsLogic: ``cmd`` or ``container|sub``, case-insensitive."""
        parts = name.lower().split("|")
        if len(parts) > 2:
            return None
        base = self.by_name.get(parts[0])
        if base is None or base.parent is not None:
            return None
        if len(parts) == 1:
            return base
        if not base.has_subcommands:
            return None
        return self.by_name.get(f"{parts[0]}|{parts[1]}")

    def in_category(self, category: str) -> list[str]:
        return [n for n, c in self.by_name.items() if category in c.categories]


_TABLE: CommandTable | None = None


def command_table() -> CommandTable:
    global _TABLE
    if _TABLE is None:
        _TABLE = CommandTable()
    return _TABLE


def keys_of(meta: CommandAcl, argv: list[bytes]) -> list[tuple[int, int]]:
    """(argument position, read/write bits) of every key: Redis's getKeysUsingKeySpecs."""
    if meta.fullname == "migrate":  # incomplete key specs: Redis reads the keys with migrateGetKeys
        return [(i, meta.key_specs[0][0]) for i in migrate_key_positions(argv)]
    out = []
    argc = len(argv)
    for bits, bs, fk in meta.key_specs:
        first = 0
        if bs[0] == "index":
            first = bs[1]
        else:
            _, word, startfrom = bs
            start = startfrom if startfrom > 0 else argc + startfrom
            end, step = (argc - 1, 1) if startfrom > 0 else (0, -1)
            i = start
            while (i <= end) if step > 0 else (i >= end):
                if i >= argc or i < 1:
                    break
                if argv[i].lower() == word.lower().encode():
                    first = i + 1
                    break
                i += step
        if first == 0 or first >= argc:
            continue
        if fk[0] == "range":
            _, lastkey, step, limit = fk
            if lastkey >= 0:
                last = first + lastkey
            elif not limit:
                last = argc + lastkey
            else:
                last = first + ((argc - first) // limit + lastkey)
        else:
            _, keynumidx, firstkey, step = fk
            idx = first + keynumidx
            try:
                n = int(argv[idx]) if idx < argc else -1
            except ValueError:
                n = -1
            if n < 0:
                continue
            first = idx + firstkey
            last = first + (n - 1) * step
        i = first
        while i <= last:
            if i >= argc:
                break
            out.append((i, bits))
            i += step
    return out
