"""ACL: users and permissions, with Redis's subcommands, replies and errors.

The rules, the check and the ACL file live in node/security/acl.py; this module
is the command surface (SETUSER, GETUSER, DELUSER, LIST, USERS, WHOAMI, CAT, LOG,
SAVE, LOAD, GENPASS, DRYRUN, HELP).  Users are per region: nothing here is
replicated to other regions (braid-admin acl makes the same change at every region:
node/security/acl_shared.py).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from node.commands import COMMANDS, subcommand
from node.commands.util import ERR_NOT_INT, string2ll
from node.resp.encoder import ReplyError
from node.security import acl as rules

if TYPE_CHECKING:
    from node.region.session import Session

log = logging.getLogger("braid.acl")

def _acl(client: Session) -> rules.AccessControl:
    return client.region.acl


def _name(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


@subcommand("acl", "setuser")
def acl_setuser(client: Session, argv: list[bytes]):
    if rules._has_spaces(argv[2]):
        raise ReplyError("ERR Usernames can't contain spaces or null characters")
    ac = _acl(client)
    name = _name(argv[2])
    existing = ac.users.get(name)
    try:
        staged = rules.set_user_rules(existing, name, argv[3:])
    except ValueError as e:
        raise ReplyError(f"ERR {e}") from None
    if existing is None:
        ac.users[name] = staged
    else:
        existing.copy_from(staged)  # in place: connected clients of the user follow the new rules
    return "OK"


@subcommand("acl", "getuser")
def acl_getuser(client: Session, argv: list[bytes]):
    user = _acl(client).users.get(_name(argv[2]))
    if user is None:
        return None
    flags = [f.encode() for f in user.flag_names()]
    reply = {
        b"flags": set(flags) if client.resp3 else flags,
        b"passwords": [p.encode() for p in user.passwords],
        **_selector_reply(user.root),
        b"selectors": [_selector_reply(s) for s in user.selectors[1:]],
    }
    return reply


def _selector_reply(s: rules.Selector) -> dict:
    return {
        b"commands": s.describe_commands().encode(),
        b"keys": s.describe_keys().encode("utf-8", "surrogateescape"),
        b"channels": s.describe_channels().encode("utf-8", "surrogateescape"),
    }


@subcommand("acl", "deluser")
def acl_deluser(client: Session, argv: list[bytes]):
    if any(a == b"default" for a in argv[2:]):
        raise ReplyError("ERR The 'default' user cannot be removed")
    ac = _acl(client)
    clients = client.region.clients.values()
    return sum(ac.delete(_name(a), clients, client) for a in argv[2:])


def _sorted_users(ac: rules.AccessControl) -> list[rules.User]:
    return [ac.users[n] for n in sorted(ac.users, key=lambda n: n.encode("utf-8", "surrogateescape"))]


@subcommand("acl", "list")
def acl_list(client: Session, argv: list[bytes]):
    return [f"user {u.name} {u.describe()}".encode("utf-8", "surrogateescape") for u in _sorted_users(_acl(client))]


@subcommand("acl", "users")
def acl_users(client: Session, argv: list[bytes]):
    return [u.name.encode("utf-8", "surrogateescape") for u in _sorted_users(_acl(client))]


@subcommand("acl", "whoami")
def acl_whoami(client: Session, argv: list[bytes]):
    return client.user.name.encode("utf-8", "surrogateescape") if client.user is not None else None


def _syntax(argv: list[bytes]) -> ReplyError:
    """addReplySubcommandSyntaxError."""
    return ReplyError(f"ERR unknown subcommand or wrong number of arguments for "
                      f"'{argv[1][:128].decode('utf-8', 'replace')}'. "
                      f"Try {argv[0].decode('utf-8', 'replace').upper()} HELP.")


def _aclfile(client: Session) -> str:
    path = client.region.config["aclfile"]
    if not path:
        raise ReplyError(rules.NO_ACLFILE)
    return path


@subcommand("acl", "load")
def acl_load(client: Session, argv: list[bytes]):
    users, error = rules.load_acl_file(_aclfile(client))
    if error is not None:
        raise ReplyError(f"ERR {error}")
    _acl(client).install(users, client.region.clients.values(), client)
    return "OK"


@subcommand("acl", "save")
def acl_save(client: Session, argv: list[bytes]):
    path = _aclfile(client)
    try:
        rules.save_acl_file(path, _acl(client).users)
    except OSError as e:
        log.warning("ACL SAVE: cannot write %s: %s", path, e.strerror or e)
        raise ReplyError("ERR There was an error trying to save the ACLs. Please check the server logs "
                         "for more information") from None
    return "OK"


@subcommand("acl", "cat")
def acl_cat(client: Session, argv: list[bytes]):
    if len(argv) == 2:
        return [c.encode() for c in rules.CATEGORIES]
    if len(argv) > 3:
        raise _syntax(argv)
    category = argv[2].decode("utf-8", "replace").lower()
    if category not in rules.CATEGORIES:
        raise ReplyError(f"ERR Unknown category '{argv[2][:128].decode('utf-8', 'replace')}'")
    return [n.encode() for n in rules.command_table().in_category(category)]


@subcommand("acl", "genpass")
def acl_genpass(client: Session, argv: list[bytes]):
    if len(argv) > 3:
        raise _syntax(argv)
    bits = 256
    if len(argv) == 3:
        v = string2ll(argv[2])
        if v is None:
            raise ReplyError(ERR_NOT_INT)
        bits = v
    if bits <= 0 or bits > 4096:
        raise ReplyError("ERR ACL GENPASS argument must be the number of bits for the output password, "
                         "a positive number up to 4096")
    return rules.genpass(bits).encode()


@subcommand("acl", "log")
def acl_log(client: Session, argv: list[bytes]):
    if len(argv) > 3:
        raise _syntax(argv)
    ac = _acl(client)
    count = 10
    if len(argv) == 3:
        if argv[2].lower() == b"reset":
            ac.log.clear()
            return "OK"
        v = string2ll(argv[2])
        if v is None:
            raise ReplyError(ERR_NOT_INT)
        count = max(v, 0)
    now = int(time.time() * 1000)
    return [{
        b"count": e.count,
        b"reason": rules.REASON_NAMES[e.reason].encode(),
        b"context": e.context.encode(),
        b"object": e.object,
        b"username": e.username,
        b"age-seconds": (now - e.ctime) / 1000,
        b"client-info": e.client_info,
        b"entry-id": e.entry_id,
        b"timestamp-created": e.created,
        b"timestamp-last-updated": e.ctime,
    } for e in ac.log[:count]]


@subcommand("acl", "dryrun")
def acl_dryrun(client: Session, argv: list[bytes]):
    user = _acl(client).users.get(_name(argv[2]))
    if user is None:
        raise ReplyError(f"ERR User '{_name(argv[2])}' not found")
    args = argv[3:]
    cmd = client_command(args)
    if cmd is None:
        raise ReplyError(f"ERR Command '{_name(argv[3])}' not found")
    if not cmd.check_arity(len(args)):
        raise ReplyError(f"ERR wrong number of arguments for '{cmd.fullname}' command")
    meta = rules.command_table().by_name[cmd.fullname]
    reason, pos = user.check(meta, args)
    if reason:
        message = rules.denial_message(reason, user, meta.fullname, args[pos], verbose=True)
        return message.encode("utf-8", "surrogateescape")
    return "OK"


def client_command(args: list[bytes]):
    """Redis's lookupCommand with one argument: the command itself, even a container."""
    cmd = COMMANDS.get(args[0].lower())
    if cmd is not None and cmd.subcommands and len(args) >= 2:
        cmd = cmd.subcommands.get(args[1].lower())
    return cmd


@subcommand("acl", "help")
def acl_help(client: Session, argv: list[bytes]):
    return [
        b"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"CAT [<category>]",
        b"    List all commands that belong to <category>, or all command categories",
        b"    when no category is specified.",
        b"DELUSER <username> [<username> ...]",
        b"    Delete a list of users.",
        b"DRYRUN <username> <command> [<arg> ...]",
        b"    Returns whether the user can execute the given command without executing the command.",
        b"GETUSER <username>",
        b"    Get the user's details.",
        b"GENPASS [<bits>]",
        b"    Generate a secure 256-bit user password. The optional `bits` argument can",
        b"    be used to specify a different size.",
        b"LIST",
        b"    Show users details in config file format.",
        b"LOAD",
        b"    Reload users from the ACL file.",
        b"LOG [<count> | RESET]",
        b"    Show the ACL log entries.",
        b"SAVE",
        b"    Save the current config to the ACL file.",
        b"SETUSER <username> <attribute> [<attribute> ...]",
        b"    Create or modify a user with the specified attributes.",
        b"USERS",
        b"    List all the registered usernames.",
        b"WHOAMI",
        b"    Return the current connection username.",
        b"HELP",
        b"    Print this help.",
    ]
