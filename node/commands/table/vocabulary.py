"""How a command is described: the vocabulary of node/commands/table/'s family modules.

Holds the words a description may use (Redis's command flags, Braid's own ``braid``
words, key-spec flags), the helpers that write key specs (:func:`ks` with :func:`index` /
:func:`keyword` and :func:`range_` / :func:`keynum`) and argument trees (:func:`key`,
:func:`string`, :func:`integer`, :func:`token`, :func:`oneof`, :func:`block`...),
:class:`Description`, and :func:`describe`, which checks one description and adds it to
:data:`DESCRIPTIONS`.  The package's docstring (``node/commands/table/__init__.py``) says
what each field means and what is derived from it.

Imports nothing from Braid.
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
