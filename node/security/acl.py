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
DELETE, UPDATE), comes from Redis's key specs (node/commands/table/, as
node/security/acl_table.py gives them);
categories are Redis's explicit ones plus the implicit ones from the command flags
(``write`` -> @write, ``readonly`` -> @read, ``admin`` -> @admin @dangerous,
``fast`` -> @fast else @slow, ``blocking`` -> @blocking).

The check runs once per command in ``Server.call`` (:meth:`AccessControl.deny`),
after the command is known and its arity right, and before it is queued by MULTI or
run; EXEC checks its commands again as they run.  A denial is answered with
Redis 8.6's NOPERM text, counted in INFO (``acl_access_denied_*``) and recorded in
the ACL LOG.  Users are per region: nothing here is replicated (braid-admin acl makes
the same change at every region through the admin service: node/security/acl_shared.py).

The ACL file (``aclfile``) holds one ``user <name> <rules...>`` line per user, as
Redis writes it; :func:`parse_acl_file` checks a whole file before anything of it
is used, :func:`save_acl_file` replaces it atomically.

Where things are: this module holds :class:`AccessControl` (a region's users, the
check, the ACL LOG and counters) and the NOPERM texts; the users and their selectors
(the rules, the check of one command) are node/security/acl_users.py, the command table
as ACL sees it (categories, key specs, :func:`keys_of`) node/security/acl_table.py, and
the ACL file node/security/acl_file.py.  Their public names are importable from here too.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from node.commands import lookup
from node.region.clientinfo import client_info_line
from node.resp.encoder import ReplyError

# What node/commands/acl.py, the server and the tests reach as ``acl.<name>``, from the
# modules that define it:
from node.security.acl_file import (  # noqa: F401
    load_acl_file,
    parse_acl_file,
    render_acl_file,
    save_acl_file,
    split_line,
)
from node.security.acl_table import (  # noqa: F401
    CATEGORIES,
    READ,
    WRITE,
    CommandAcl,
    CommandTable,
    command_table,
    keys_of,
)
from node.security.acl_users import (  # noqa: F401
    DENIED_AUTH,
    DENIED_CHANNEL,
    DENIED_CMD,
    DENIED_KEY,
    REASON_NAMES,
    RuleError,
    Selector,
    User,
    _has_spaces,
    _text,
    default_user,
    hash_password,
    merge_selector_args,  # noqa: F401
    new_user,
    set_user_rules,
)

WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
NO_ACLFILE = ("ERR This Redis instance is not configured to use an ACL file. You may want to specify users "
              "via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis "
              "configuration file set) in order to store users in the Redis configuration.")


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
