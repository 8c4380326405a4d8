"""ACL users and their selectors: Redis's rules, applied and checked.

Holds :class:`User` (flags, password hashes, selectors; ``apply`` takes one rule) and
:class:`Selector` (allowed commands and categories, key and channel patterns; ``check``
decides one command), the rule errors (:class:`RuleError`, Redis's errno names and texts),
the denial reasons (``DENIED_*``), password hashing, and the constructors ACL SETUSER and
the ACL file use (:func:`new_user`, :func:`default_user`, :func:`set_user_rules`,
:func:`merge_selector_args`).  node/security/acl.py tells the theory of operation.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from node.region.glob import glob_match
from node.security.acl_table import CATEGORIES, READ, WRITE, CommandAcl, command_table, keys_of

# Reasons (Redis's ACL_DENIED_*; the order decides which error a user with several
# selectors gets: the largest reason, then the last argument position).
DENIED_CMD, DENIED_KEY, DENIED_AUTH, DENIED_CHANNEL = 1, 2, 3, 4
REASON_NAMES = {DENIED_CMD: "command", DENIED_KEY: "key", DENIED_AUTH: "auth", DENIED_CHANNEL: "channel"}

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

    def copy(self) -> Selector:
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

    def copy_from(self, other: User) -> None:
        """ACLCopyUser: every rule of ``other`` (the name stays)."""
        self.enabled, self.nopass, self.sanitize_skip = other.enabled, other.nopass, other.sanitize_skip
        self.passwords = list(other.passwords)
        self.selectors = [s.copy() for s in other.selectors]
        self.refresh()

    def clone(self) -> User:
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
