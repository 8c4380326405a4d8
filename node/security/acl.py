"""Users and permissions: Redis's ACL, rule for rule.

Theory of operation
-------------------
A region holds a table of :class:`User` s (``AccessControl.users``); every client
connection points at one (``default`` until AUTH / HELLO AUTH names another).  A
user has flags (``on``/``off``, ``nopass``, ``sanitize-payload``), password hashes
(SHA-256, hex) and one or more :class:`Selector` s: the root selector (the rules
written outside parentheses) and any ``(...)`` selectors.  A command runs when ANY
selector allows it; a selector allows a command when the command is in its allowed
set (or the command is ``no-auth``: AUTH, HELLO...) and every key the command names
matches one of its key patterns with the access the key needs, as Redis does.

Rules are Redis's grammar (``ACLSetUser`` / ``ACLSetSelector`` in Redis's acl.c):
``on off nopass resetpass >pw <pw #hash !hash reset +cmd -cmd +cmd|sub +@cat -@cat
allcommands nocommands ~pat %R~pat %W~pat %RW~pat allkeys resetkeys &pat
allchannels resetchannels clearselectors (rules...)``.  ACL SETUSER applies the rules
to a copy and installs it only when every rule is valid.  The command rules are kept
as Redis keeps them (an ordered list where a later rule for the same command or
category replaces the earlier one), which is what ACL GETUSER and ACL LIST show
after ``+@all`` or ``-@all``.

Which keys a command names, and whether each is read (ACCESS) or written (INSERT,
DELETE, UPDATE), comes from Redis's key specs (node/commands/table.py, as
node/security/acl_table.py gives them);
categories are Redis's explicit ones plus the implicit ones from the command flags
(``write`` -> @write, ``readonly`` -> @read, ``admin`` -> @admin @dangerous,
``fast`` -> @fast else @slow, ``blocking`` -> @blocking).

The check runs once per command in ``Server.call`` (:meth:`AccessControl.deny`),
after the command is known and its arity right, and before it is queued by MULTI or
run; EXEC checks its commands again as they run.  A denial is answered with
Redis 8.6's NOPERM text, counted in INFO (``acl_access_denied_*``) and recorded in
the ACL LOG.  Users are per region: nothing here is replicated.

The ACL file (``aclfile``) holds one ``user <name> <rules...>`` line per user, as
Redis writes it; :func:`parse_acl_file` checks a whole file before anything of it
is used, :func:`save_acl_file` replaces it atomically.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
import time
from dataclasses import dataclass, field

from ..clientinfo import client_info_line
from ..commands import load_all, lookup
from ..glob import glob_match
from ..keypositions import migrate_key_positions
from ..resp.encoder import ReplyError
from .acl_table import REDIS_COMMANDS

CATEGORIES = ("keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
              "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking",
              "dangerous", "connection", "transaction", "scripting")

# Reasons (Redis's ACL_DENIED_*; the order decides which error a user with several
# selectors gets: the largest reason, then the last argument position).
DENIED_CMD, DENIED_KEY, DENIED_AUTH, DENIED_CHANNEL = 1, 2, 3, 4
REASON_NAMES = {DENIED_CMD: "command", DENIED_KEY: "key", DENIED_AUTH: "auth", DENIED_CHANNEL: "channel"}

READ, WRITE = 1, 2  # key pattern permissions (%R~, %W~; ~ is both)

WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
NO_ACLFILE = ("ERR This Redis instance is not configured to use an ACL file. You may want to specify users "
              "via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis "
              "configuration file set) in order to store users in the Redis configuration.")

# ACLSetUserStringError: errno -> text
_ERRORS = {
    "ENOENT": "Unknown command or category name in ACL",
    "EINVAL": "Syntax error",
    "EEXIST": ("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not "
               "have any effect. Try 'resetkeys' to start with an empty list of patterns"),
    "EISDIR": ("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does "
               "not have any effect. Try 'resetchannels' to start with an empty list of channels"),
    "ENODEV": "The password you are trying to remove from the user does not exist",
    "EBADMSG": ("The password hash must be exactly 64 characters and contain only lowercase "
                "hexadecimal characters"),
    "EALREADY": "Duplicate user found. A user can only be defined once in config files",
    "ECHILD": "Allowing first-arg of a subcommand is not supported",
}


class RuleError(ValueError):
    """A rule ACL SETUSER cannot apply; ``code`` is Redis's errno name."""

    def __init__(self, code: str) -> None:
        super().__init__(_ERRORS[code])
        self.code = code


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _has_spaces(b: bytes) -> bool:
    """Redis's ACLStringHasSpaces: isspace() or NUL anywhere."""
    return any(c in b" \t\n\v\f\r\x00" for c in b)


def hash_password(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


def _rule_hash(op: bytes) -> str:
    """The SHA-256 a password rule names: of the password (``>pass``, ``<pass``), or given
    as 64 hex digits (``#hash``, ``!hash``; anything else is Redis's EBADMSG)."""
    if op[:1] in (b">", b"<"):
        return hash_password(op[1:])
    if not _valid_hash(op[1:]):
        raise RuleError("EBADMSG")
    return op[1:].decode()


def _valid_hash(h: bytes) -> bool:
    return len(h) == 64 and all(c in b"0123456789abcdef" for c in h)


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


# ---------------------------------------------------------------- users
@dataclass(slots=True)
class Selector:
    root: bool = False
    allkeys: bool = False
    allchannels: bool = False
    allcommands: bool = False   # Redis's SELECTOR_FLAG_ALLCOMMANDS (the fast path)
    future: bool = False        # set by +@all only: "can run commands added later" (+@all vs -@all)
    allowed: set[str] = field(default_factory=set)
    firstargs: dict[str, list[bytes]] = field(default_factory=dict)
    rules: list[str] = field(default_factory=list)  # "+xadd", "-@write"... in order
    patterns: list[list] = field(default_factory=list)  # [pattern bytes, READ|WRITE]
    channels: list[bytes] = field(default_factory=list)

    def copy(self) -> "Selector":
        return Selector(self.root, self.allkeys, self.allchannels, self.allcommands, self.future,
                        set(self.allowed), {k: list(v) for k, v in self.firstargs.items()},
                        list(self.rules), [list(p) for p in self.patterns], list(self.channels))

    # -------------------------------------------------------- rules
    def _all(self, on: bool) -> None:
        self.allowed = set(command_table().by_name) if on else set()
        self.allcommands = self.future = on
        self.rules.clear()
        self.firstargs.clear()

    def _set_bit(self, name: str, on: bool) -> None:
        if on:
            self.allowed.add(name)
        else:
            self.allowed.discard(name)
            self.allcommands = False

    def _change_perm(self, meta: CommandAcl, on: bool) -> None:
        self._set_bit(meta.fullname, on)
        self.firstargs.pop(meta.fullname, None)
        for sub in meta.subcommands:
            self._set_bit(sub, on)

    def _update_rules(self, rule: str, allow: bool) -> None:
        """ACLUpdateCommandRules: drop the rules this one supersedes, append it."""
        rule = rule.lower()
        kept = []
        for r in self.rules:
            name = r[1:]
            if name == rule or (len(name) > len(rule) and name.startswith(rule) and name[len(rule)] == "|"):
                continue
            kept.append(r)
        kept.append(("+" if allow else "-") + rule)
        self.rules = kept

    def apply(self, op: bytes) -> None:
        low = op.lower()
        if low in (b"allkeys", b"~*"):
            self.allkeys = True
            self.patterns.clear()
        elif low == b"resetkeys":
            self.allkeys = False
            self.patterns.clear()
        elif low in (b"allchannels", b"&*"):
            self.allchannels = True
            self.channels.clear()
        elif low == b"resetchannels":
            self.allchannels = False
            self.channels.clear()
        elif low in (b"allcommands", b"+@all"):
            self._all(True)
        elif low in (b"nocommands", b"-@all"):
            self._all(False)
        elif op[:1] in (b"~", b"%"):
            if self.allkeys:
                raise RuleError("EEXIST")
            flags, offset = 0, 1
            if op[:1] == b"%":
                while True:
                    if offset >= len(op):
                        raise RuleError("EINVAL")
                    c = op[offset:offset + 1]
                    if c.upper() == b"R" and not flags & READ:
                        flags |= READ
                    elif c.upper() == b"W" and not flags & WRITE:
                        flags |= WRITE
                    elif c == b"~" and flags:
                        offset += 1
                        break
                    else:
                        raise RuleError("EINVAL")
                    offset += 1
            else:
                flags = READ | WRITE
            pattern = op[offset:]
            if _has_spaces(pattern):
                raise RuleError("EINVAL")
            for p in self.patterns:
                if p[0] == pattern:
                    p[1] |= flags
                    break
            else:
                self.patterns.append([pattern, flags])
            self.allkeys = False
        elif op[:1] == b"&":
            if self.allchannels:
                raise RuleError("EISDIR")
            pattern = op[1:]
            if _has_spaces(pattern):
                raise RuleError("EINVAL")
            if pattern not in self.channels:
                self.channels.append(pattern)
            self.allchannels = False
        elif op[:1] == b"+" and op[1:2] != b"@":
            self._allow_command(_text(op[1:]))
        elif op[:1] == b"-" and op[1:2] != b"@":
            meta = command_table().lookup(_text(op[1:]))
            if meta is None:
                raise RuleError("ENOENT")
            self._change_perm(meta, False)
            self._update_rules(meta.fullname, False)
        elif op[:1] in (b"+", b"-") and op[1:2] == b"@":
            category = _text(op[2:]).lower()
            if category not in CATEGORIES:
                raise RuleError("ENOENT")
            allow = op[:1] == b"+"
            self._update_rules("@" + category, allow)
            table = command_table()
            for meta in table.by_name.values():
                if category in meta.categories:
                    self._change_perm(meta, allow)
        else:
            raise RuleError("EINVAL")

    def _allow_command(self, name: str) -> None:
        table = command_table()
        if "|" not in name:
            meta = table.lookup(name)
            if meta is None:
                raise RuleError("ENOENT")
            self._change_perm(meta, True)
            self._update_rules(meta.fullname, True)
            return
        base, _, sub = name.rpartition("|")
        meta = table.lookup(base)
        if meta is None:
            raise RuleError("ENOENT")
        if meta.parent is not None:
            raise RuleError("ECHILD")
        if not sub:
            raise RuleError("EINVAL")
        if meta.has_subcommands:
            submeta = table.lookup(name)
            if submeta is None:
                raise RuleError("ENOENT")
            self._change_perm(submeta, True)
        else:  # SELECT|0: one first argument of an otherwise blocked command
            args = self.firstargs.setdefault(meta.fullname, [])
            if not any(a.lower() == sub.lower().encode() for a in args):
                args.append(sub.encode("utf-8", "surrogateescape"))
        self._update_rules(name, True)

    # -------------------------------------------------------- description
    def describe_commands(self) -> str:
        head = "+@all" if self.future else "-@all"
        return " ".join([head, *self.rules])

    def describe_keys(self) -> str:
        if self.allkeys:
            return "~*"
        return " ".join(_pattern_string(p, f) for p, f in self.patterns)

    def describe_channels(self) -> str:
        if self.allchannels:
            return "&*"
        return " ".join("&" + _text(c) for c in self.channels)

    def describe(self) -> str:
        """ACLDescribeSelector: keys, channels, then commands."""
        parts = []
        if self.allkeys:
            parts.append("~*")
        else:
            parts += [_pattern_string(p, f) for p, f in self.patterns]
        if self.allchannels:
            parts.append("&*")
        else:
            parts.append("resetchannels")
            parts += ["&" + _text(c) for c in self.channels]
        parts.append(self.describe_commands())
        return " ".join(parts)

    # -------------------------------------------------------- checks
    def check(self, meta: CommandAcl, argv: list[bytes], keys: list | None) -> tuple[int, int]:
        """(0, 0) when allowed, else (reason, argument position): ACLSelectorCheckCmd."""
        if not self.allcommands and not meta.no_auth and meta.fullname not in self.allowed:
            allowed_args = self.firstargs.get(meta.fullname)
            if len(argv) < 2 or not allowed_args:
                return DENIED_CMD, 0
            idx = 2 if meta.parent else 1
            if not any(a.lower() == argv[idx].lower() for a in allowed_args):
                return DENIED_CMD, 0
        if not self.allkeys and meta.key_specs:
            for pos, bits in keys if keys is not None else keys_of(meta, argv):
                if not self.key_allowed(argv[pos], bits):
                    return DENIED_KEY, pos
        return 0, 0

    def key_allowed(self, key: bytes, bits: int) -> bool:
        if self.allkeys:
            return True
        for pattern, flags in self.patterns:
            if (flags & bits) == bits and glob_match(pattern, key):
                return True
        return False


def _pattern_string(pattern: bytes, flags: int) -> str:
    prefix = "~" if flags == READ | WRITE else "%R~" if flags == READ else "%W~"
    return prefix + _text(pattern)


@dataclass(slots=True)
class User:
    name: str
    enabled: bool = False
    nopass: bool = False
    sanitize_skip: bool = False
    passwords: list[str] = field(default_factory=list)  # SHA-256 hex
    selectors: list[Selector] = field(default_factory=lambda: [Selector(root=True)])
    unrestricted: bool = False  # one selector with every command, key and channel: nothing to check

    def copy_from(self, other: "User") -> None:
        """ACLCopyUser: every rule of ``other`` (the name stays)."""
        self.enabled, self.nopass, self.sanitize_skip = other.enabled, other.nopass, other.sanitize_skip
        self.passwords = list(other.passwords)
        self.selectors = [s.copy() for s in other.selectors]
        self.refresh()

    def clone(self) -> "User":
        u = User(self.name)
        u.copy_from(self)
        return u

    def refresh(self) -> None:
        root = self.selectors[0]
        self.unrestricted = (len(self.selectors) == 1 and root.allcommands and root.allkeys
                             and root.allchannels)

    @property
    def root(self) -> Selector:
        return self.selectors[0]

    def flag_names(self) -> list[str]:
        """In Redis's order: on, off, nopass, skip-sanitize-payload, sanitize-payload."""
        return (["on" if self.enabled else "off"] + (["nopass"] if self.nopass else [])
                + (["skip-sanitize-payload"] if self.sanitize_skip else ["sanitize-payload"]))

    def apply(self, op: bytes) -> None:
        """ACLSetUser: one rule (raises RuleError)."""
        if not op:
            return
        low = op.lower()
        if low == b"on":
            self.enabled = True
        elif low == b"off":
            self.enabled = False
        elif low == b"skip-sanitize-payload":
            self.sanitize_skip = True
        elif low == b"sanitize-payload":
            self.sanitize_skip = False
        elif low == b"nopass":
            self.nopass = True
            self.passwords.clear()
        elif low == b"resetpass":
            self.nopass = False
            self.passwords.clear()
        elif op[:1] in (b">", b"#"):
            h = _rule_hash(op)
            if h not in self.passwords:
                self.passwords.append(h)
            self.nopass = False
        elif op[:1] in (b"<", b"!"):
            h = _rule_hash(op)
            if h not in self.passwords:
                raise RuleError("ENODEV")
            self.passwords.remove(h)
        elif op[:1] == b"(" and op[-1:] == b")":
            selector = Selector()
            for inner in op[1:-1].split():
                selector.apply(inner)
            self.selectors.append(selector)
        elif low == b"clearselectors":
            del self.selectors[1:]
        elif low == b"reset":
            for rule in (b"resetpass", b"resetkeys", b"resetchannels", b"off", b"sanitize-payload",
                         b"clearselectors", b"-@all"):
                self.apply(rule)
        else:
            self.root.apply(op)
        self.refresh()

    def describe(self) -> str:
        """ACLDescribeUser: what ACL LIST and the ACL file show after ``user <name>``."""
        parts = self.flag_names() + ["#" + h for h in self.passwords]
        text = " ".join(parts) + " " + self.root.describe()
        for s in self.selectors[1:]:
            text += f" ({s.describe()})"
        return text

    def check_password(self, password: bytes) -> bool:
        if not self.enabled:
            return False
        if self.nopass:
            return True
        h = hash_password(password)
        return any(hmac.compare_digest(h, p) for p in self.passwords)

    def check(self, meta: CommandAcl, argv: list[bytes]) -> tuple[int, int]:
        """ACLCheckAllUserCommandPerm: (0, 0) or the most relevant (reason, position)."""
        keys = keys_of(meta, argv) if meta.key_specs else []
        relevant, last = DENIED_CMD, 0
        for s in self.selectors:
            reason, pos = s.check(meta, argv, keys)
            if not reason:
                return 0, 0
            if reason > relevant or (reason == relevant and pos > last):
                relevant, last = reason, pos
        return relevant, last


def merge_selector_args(args: list[bytes]) -> list[bytes] | int:
    """ACLMergeSelectorArguments: ``(`` ... ``)`` spread over several arguments become one;
    an unclosed one returns the index of the argument that opened it."""
    merged: list[bytes] = []
    opened = -1
    current = b""
    for j, op in enumerate(args):
        if opened == -1 and op[:1] == b"(" and op[-1:] != b")":
            current, opened = op, j
            continue
        if opened != -1:
            current += b" " + op
            if op[-1:] == b")":
                opened = -1
                merged.append(current)
            continue
        merged.append(op)
    return opened if opened != -1 else merged


def new_user(name: str) -> User:
    """ACLCreateUser: off, no passwords, no commands, no keys, no channels."""
    return User(name)


def default_user() -> User:
    u = User("default")
    for rule in (b"+@all", b"~*", b"&*", b"on", b"nopass"):
        u.apply(rule)
    return u


def set_user_rules(existing: User | None, name: str, args: list[bytes]) -> User:
    """ACLStringSetUser: every rule applied to a copy; raises ValueError with Redis's text."""
    merged = merge_selector_args(args)
    if isinstance(merged, int):
        raise ValueError(f"Unmatched parenthesis in acl selector starting at '{_text(args[merged])}'.")
    temp = existing.clone() if existing is not None else new_user(name)
    for op in merged:
        try:
            temp.apply(op)
        except RuleError as e:
            raise ValueError(f"Error in ACL SETUSER modifier '{_text(op)}': {e}") from None
    return temp


# ---------------------------------------------------------------- the ACL file
def split_line(line: bytes) -> list[bytes]:
    """sdssplitlen(line, " "): single spaces separate; empty pieces stay (and are no-ops)."""
    return line.split(b" ")


def parse_acl_file(data: bytes, filename: str) -> tuple[dict[str, User], str | None]:
    """ACLLoadFromFile's checks: the users of a whole file, or Redis's one-line error."""
    users: dict[str, User] = {}
    errors = ""
    for i, raw in enumerate(data.split(b"\n")):
        linenum = i + 1
        line = raw.strip(b" \t\r\n")
        if not line:
            continue
        argv = split_line(line)
        if argv[0] != b"user" or len(argv) < 2:
            errors += f"{filename}:{linenum} should start with user keyword followed by the username. "
            continue
        name = argv[1]
        if _has_spaces(name):
            errors += f"'{filename}:{linenum}: username '{_text(name)}' contains invalid characters. "
            continue
        uname = _text(name)
        if uname in users:
            errors += f"WARNING: Duplicate user '{uname}' found on line {linenum}. "
            continue
        user = new_user(uname)
        users[uname] = user
        merged = merge_selector_args(argv[2:])
        if isinstance(merged, int):
            errors += f"{filename}:{linenum}: Unmatched parenthesis in selector definition."
            merged = []
        syntax_error = False
        for op in merged:
            op = op.strip(b"\t\r\n")
            try:
                user.apply(op)
            except RuleError as e:
                if e.code == "ENOENT":
                    errors += f"{filename}:{linenum}: Error in applying operation '{_text(op)}': {e}. "
                elif not syntax_error:
                    errors += f"{filename}:{linenum}: {e}. "
                    syntax_error = True
    if errors:
        return {}, errors + "WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
    return users, None


def render_acl_file(users: dict[str, User]) -> bytes:
    return b"".join(f"user {name} {users[name].describe()}\n".encode("utf-8", "surrogateescape")
                    for name in sorted(users, key=lambda n: n.encode("utf-8", "surrogateescape")))


def save_acl_file(path: str, users: dict[str, User]) -> None:
    """ACLSaveToFile: a temporary file beside it, fsynced, renamed over it, directory fsynced."""
    data = render_acl_file(users)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_acl_file(path: str) -> tuple[dict[str, User], str | None]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return {}, f"Error loading ACLs, opening file '{path}': {e.strerror}"
    return parse_acl_file(data, path)


# ---------------------------------------------------------------- the ACL log
@dataclass(slots=True)
class LogEntry:
    count: int
    reason: int
    context: str
    object: bytes
    username: bytes
    ctime: int          # ms, last update
    client_info: bytes
    entry_id: int
    created: int        # ms


GROUPING_MS = 60000  # ACL_LOG_GROUPING_MAX_TIME_DELTA


class AclFileError(Exception):
    """The ACL file named by ``aclfile`` cannot be used at start (Redis exits then too)."""


class AccessControl:
    """One region's users, its ACL log and counters; the permission check of Server.call."""

    def __init__(self, config) -> None:
        """The default user (its password ``requirepass``), then the ACL file if ``aclfile``
        names one: a file with an error raises AclFileError (``braid node`` exits 1)."""
        self.config = config
        self.default = default_user()
        self.users: dict[str, User] = {"default": self.default}
        self.log: list[LogEntry] = []  # newest first
        self.log_entries_created = 0
        self.denied = {DENIED_AUTH: 0, DENIED_CMD: 0, DENIED_KEY: 0, DENIED_CHANNEL: 0}
        if config["requirepass"]:
            self.set_default_password(config["requirepass"])
        if config["aclfile"]:
            users, error = load_acl_file(config["aclfile"])
            if error is not None:
                raise AclFileError(error)
            self.install(users, ())

    # -------------------------------------------------------- users
    def auth_required(self) -> bool:
        d = self.default
        return not d.nopass or not d.enabled

    def set_default_password(self, password: str | None) -> None:
        """requirepass: ACLUpdateDefaultUserPassword (``resetpass`` then ``>pw``, or ``nopass``)."""
        self.default.apply(b"resetpass")
        if password:
            self.default.apply(b">" + password.encode("utf-8", "surrogateescape"))
        else:
            self.default.apply(b"nopass")

    def authenticate(self, username: bytes, password: bytes) -> User | None:
        user = self.users.get(_text(username))
        if user is None or not user.check_password(password):
            return None
        return user

    def install(self, users: dict[str, User], clients, current=None) -> None:
        """ACL LOAD / the file at start: the default user is updated in place (clients point at
        it); clients of a user that is gone are closed, the others follow their user's new rules."""
        new_default = users.get("default") or default_user()
        self.default.copy_from(new_default)
        users = dict(users)
        users["default"] = self.default
        old, self.users = self.users, users
        for c in list(clients):
            user = getattr(c, "user", None)
            if user is None or user is self.default:
                continue
            new = users.get(user.name)
            if new is None:
                _drop(c, self.default, current)
            else:
                c.user = new
        del old

    def delete(self, name: str, clients, current=None) -> bool:
        """ACL DELUSER: the user's clients are deauthenticated and closed."""
        user = self.users.pop(name, None)
        if user is None:
            return False
        for c in list(clients):
            if getattr(c, "user", None) is user:
                _drop(c, self.default, current)
        return True

    # -------------------------------------------------------- the check
    def deny(self, server, client, argv: list[bytes]):
        """The check ``Server.call`` makes before a command is queued or run: None, or the
        NOPERM reply (logged and counted).  Unknown commands, wrong arity and clients that
        must AUTH first are left to the dispatcher's own errors."""
        user = client.user
        if user is None or user.unrestricted or server.replaying:
            return None
        cmd = lookup(argv)
        if cmd is None or not cmd.check_arity(len(argv)) or client.needs_auth():
            return None
        meta = command_table().by_name.get(cmd.fullname)
        if meta is None:
            return None
        reason, pos = user.check(meta, argv)
        if not reason:
            return None
        in_exec = client.in_exec
        self.add_log(client, reason, "multi" if in_exec or client.multi is not None else "toplevel",
                     meta.fullname.encode() if reason == DENIED_CMD else argv[pos], user.name.encode())
        if client.multi is not None:
            client.multi_error = True  # a refused command aborts the transaction, as Redis's flagTransaction
        if in_exec:
            why = {DENIED_CMD: "no permission to execute the command or subcommand",
                   DENIED_KEY: "no permission to touch the specified keys",
                   DENIED_CHANNEL: "no permission to access one of the channels used as arguments"}[reason]
            return ReplyError("NOPERM ACLs rules changed between the moment the transaction was accumulated "
                              "and the EXEC call. This command is no longer allowed for the following "
                              f"reason: {why}")
        return ReplyError("NOPERM " + denial_message(reason, user, meta.fullname, argv[pos], verbose=False))

    # -------------------------------------------------------- the log
    def add_log(self, client, reason: int, context: str, obj: bytes, username: bytes) -> None:
        """addACLLogEntry: count it; a similar entry of the last minute (among the newest 10)
        is bumped and moved to the front instead of adding one."""
        self.denied[reason] += 1
        max_len = int(self.config["acllog-max-len"])
        if max_len == 0:
            self.log.clear()
            return
        now = int(time.time() * 1000)
        info = client_info_line(client, now / 1000).rstrip(b"\n")
        for i, e in enumerate(self.log[:10]):
            if (e.reason == reason and e.context == context and abs(e.ctime - now) <= GROUPING_MS
                    and e.object == obj and e.username == username):
                e.client_info, e.ctime = info, now
                e.count += 1
                self.log.insert(0, self.log.pop(i))
                return
        self.log.insert(0, LogEntry(1, reason, context, obj, username, now, info,
                                    self.log_entries_created, now))
        self.log_entries_created += 1
        del self.log[max_len:]

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT (Redis's resetServerStats clears these counters too)."""
        for reason in self.denied:
            self.denied[reason] = 0

    def info_lines(self) -> list[str]:
        d = self.denied
        return [f"acl_access_denied_auth:{d[DENIED_AUTH]}", f"acl_access_denied_cmd:{d[DENIED_CMD]}",
                f"acl_access_denied_key:{d[DENIED_KEY]}", f"acl_access_denied_channel:{d[DENIED_CHANNEL]}"]


def _drop(client, default: User, current) -> None:
    """deauthenticateAndCloseClient: back to the default user, unauthenticated, and closed
    (the client running the command is closed after its reply)."""
    client.user, client.authenticated = default, False
    if client is current:
        client.closing = True
    else:
        client.close()


def denial_message(reason: int, user: User, fullname: str, value: bytes, verbose: bool) -> str:
    """getAclErrorMessage (Redis 8.x): what NOPERM (not verbose) and ACL DRYRUN (verbose) say."""
    if reason == DENIED_CMD:
        return f"User {user.name} has no permissions to run the '{fullname}' command"
    what = "key" if reason == DENIED_KEY else "channel"
    if verbose:
        return f"User {user.name} has no permissions to access the '{_text(value)}' {what}"
    return f"No permissions to access a {what}"


def genpass(bits: int) -> str:
    chars = (bits + 3) // 4
    return secrets.token_hex((chars + 1) // 2)[:chars]
