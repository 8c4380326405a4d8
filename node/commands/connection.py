"""Connection commands: PING, ECHO, HELLO, AUTH, CLIENT, SELECT, QUIT, RESET."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from node.commands import command, subcommand
from node.commands.util import ERR_SYNTAX, INT_MAX, INT_MIN, parse_int, parse_range_long, string2ll
from node.region.clientinfo import client_info_line
from node.resp.encoder import ReplyError, Verbatim
from node.security.acl import DENIED_AUTH, WRONGPASS
from node.version import REDIS_COMPAT_VERSION

if TYPE_CHECKING:
    from node.region.session import Session


@command("ping")
def ping(client: Session, argv: list[bytes]):
    if len(argv) > 2:
        raise ReplyError("ERR wrong number of arguments for 'ping' command")
    return argv[1] if len(argv) == 2 else "PONG"


@command("echo")
def echo(client: Session, argv: list[bytes]):
    return argv[1]


def _authenticate(client: Session, argv0: bytes, user: bytes, password: bytes) -> bool:
    """Redis's ACLAuthenticateUser: the client becomes ``user``; a failure is counted and logged
    in ACL LOG (reason auth, object the command as sent)."""
    ac = client.region.acl
    found = ac.authenticate(user, password)
    if found is None:
        context = "multi" if client.in_exec or client.multi is not None else "toplevel"
        ac.add_log(client, DENIED_AUTH, context, argv0, user)
        return False
    client.user, client.authenticated = found, True
    return True


@command("auth")
def auth(client: Session, argv: list[bytes]):
    if len(argv) > 3:
        raise ReplyError(ERR_SYNTAX)
    if len(argv) == 2 and client.region.acl.default.nopass:
        raise ReplyError("ERR AUTH <password> called without any password configured for the "
                         "default user. Are you sure your configuration is correct?")
    user, password = (b"default", argv[1]) if len(argv) == 2 else (argv[1], argv[2])
    if not _authenticate(client, argv[0], user, password):
        raise ReplyError(WRONGPASS)
    return "OK"


@command("hello")
def hello(client: Session, argv: list[bytes]):
    ver = 0
    if len(argv) >= 2:
        v = string2ll(argv[1])
        if v is None:
            raise ReplyError("ERR Protocol version is not an integer or out of range")
        ver = v
        if ver < 2 or ver > 3:
            raise ReplyError("NOPROTO unsupported protocol version")
    name = None
    credentials = None
    j = 2
    while j < len(argv):
        more = len(argv) - j - 1
        opt = argv[j].lower()
        if opt == b"auth" and more >= 2:
            credentials = (argv[j + 1], argv[j + 2])
            j += 3
        elif opt == b"setname" and more >= 1:
            name = argv[j + 1]
            _validate_name(name)
            j += 2
        else:
            raise ReplyError(f"ERR Syntax error in HELLO option '{argv[j].decode('utf-8', 'replace')}'")
    if credentials is not None and not _authenticate(client, argv[0], *credentials):
        raise ReplyError(WRONGPASS)
    if client.needs_auth():
        raise ReplyError("NOAUTH HELLO must be called with the client already authenticated, "
                         "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                         "authenticate the client and select the RESP protocol version at the same time")
    if name is not None:
        client.name = name
    if ver:
        client.resp3 = ver == 3
    return {
        b"server": b"redis",
        b"version": REDIS_COMPAT_VERSION.encode(),
        b"proto": 3 if client.resp3 else 2,
        b"id": client.id,
        b"mode": b"standalone",
        b"role": b"master",
        b"modules": [],
    }


@command("select")
def select(client: Session, argv: list[bytes]):
    idx = parse_range_long(argv[1], INT_MIN, INT_MAX)  # getIntFromObjectOrReply
    if idx != 0 and client.region.routing is not None:
        raise ReplyError("ERR SELECT is not allowed in cluster mode")
    if idx != 0:
        raise ReplyError("ERR DB index is out of range")
    return "OK"


@command("quit")
def quit_(client: Session, argv: list[bytes]):
    client.closing = True
    return "OK"


@command("reset")
def reset(client: Session, argv: list[bytes]):
    client.multi = None
    client.multi_error = False
    client.db.unwatch(client.watched)
    client.resp3 = False
    client.name = b""
    client.user = client.region.acl.default  # clientSetDefaultAuth
    client.authenticated = not client.region.acl.auth_required()
    return "RESET"


# ---------------------------------------------------------------- CLIENT
def _validate_name(name: bytes) -> None:
    if any(c < 0x21 or c > 0x7E for c in name):
        raise ReplyError("ERR Client names cannot contain spaces, newlines or special characters.")


@subcommand("client", "setname")
def client_setname(client: Session, argv: list[bytes]):
    _validate_name(argv[2])
    client.name = argv[2]
    return "OK"


@subcommand("client", "getname")
def client_getname(client: Session, argv: list[bytes]):
    return client.name or None


@subcommand("client", "id")
def client_id(client: Session, argv: list[bytes]):
    return client.id


@subcommand("client", "info")
def client_info(client: Session, argv: list[bytes]):
    return Verbatim(client_info_line(client, time.time()))


@subcommand("client", "list")
def client_list(client: Session, argv: list[bytes]):
    clients = list(client.region.clients.values())
    j = 2
    while j < len(argv):
        opt = argv[j].lower()
        if opt == b"type" and j + 1 < len(argv):
            kind = argv[j + 1].lower()
            if kind not in (b"normal", b"master", b"replica", b"slave", b"pubsub"):
                raise ReplyError(f"ERR Unknown client type '{argv[j + 1].decode('utf-8', 'replace')}'")
            if kind != b"normal":
                clients = []
            j += 2
        elif opt == b"id" and j + 1 < len(argv):
            ids = set()
            for a in argv[j + 1:]:
                ids.add(parse_int(a, "ERR Invalid client ID"))  # any integer: no client has id <= 0
            clients = [c for c in clients if c.id in ids]
            j = len(argv)
        else:
            raise ReplyError(ERR_SYNTAX)
    now = time.time()
    return Verbatim(b"".join(client_info_line(c, now) for c in sorted(clients, key=lambda c: c.id)))


@subcommand("client", "setinfo")
def client_setinfo(client: Session, argv: list[bytes]):
    attr = argv[2].lower()
    value = argv[3]
    if attr not in (b"lib-name", b"lib-ver"):
        raise ReplyError(f"ERR Unrecognized option '{argv[2].decode('utf-8', 'replace')}'")
    if any(c < 0x21 or c > 0x7E for c in value):
        raise ReplyError(f"ERR {attr.decode()} cannot contain spaces, newlines or special characters.")
    if attr == b"lib-name":
        client.lib_name = value
    else:
        client.lib_ver = value
    return "OK"


@subcommand("client", "kill")
def client_kill(client: Session, argv: list[bytes]):
    clients = client.region.clients
    if len(argv) == 3:  # old form: CLIENT KILL addr:port
        addr = argv[2].decode("utf-8", "replace")
        victims = [c for c in clients.values() if c.addr == addr]
        if not victims:
            raise ReplyError("ERR No such client")
        _kill(client, victims)
        return "OK"
    victims = list(clients.values())
    skipme = True
    j = 2
    while j < len(argv):
        if j + 1 >= len(argv):
            raise ReplyError(ERR_SYNTAX)
        opt, val = argv[j].lower(), argv[j + 1]
        if opt == b"id":
            v = string2ll(val)
            if v is None or v <= 0:
                raise ReplyError("ERR client-id should be greater than 0")
            victims = [c for c in victims if c.id == v]
        elif opt == b"addr":
            victims = [c for c in victims if c.addr == val.decode("utf-8", "replace")]
        elif opt == b"laddr":
            victims = [c for c in victims if c.laddr == val.decode("utf-8", "replace")]
        elif opt == b"user":
            user = client.region.acl.users.get(val.decode("utf-8", "surrogateescape"))
            if user is None:
                raise ReplyError(f"ERR No such user '{val.decode('utf-8', 'replace')}'")
            victims = [c for c in victims if c.user is user]
        elif opt == b"skipme":
            if val.lower() not in (b"yes", b"no"):
                raise ReplyError(ERR_SYNTAX)
            skipme = val.lower() == b"yes"
        elif opt == b"type":
            if val.lower() != b"normal":
                victims = []
        else:
            raise ReplyError(ERR_SYNTAX)
        j += 2
    if skipme:
        victims = [c for c in victims if c is not client]
    _kill(client, victims)
    return len(victims)


def _kill(me, victims) -> None:
    for c in victims:
        if c is me:
            c.closing = True  # after this reply, as Redis does
        else:
            c.close()


def _on_off(argv: list[bytes]) -> str:
    if argv[2].lower() not in (b"on", b"off"):
        raise ReplyError(ERR_SYNTAX)
    return "OK"


@subcommand("client", "no-evict")
def client_no_evict(client: Session, argv: list[bytes]):
    return _on_off(argv)


@subcommand("client", "no-touch")
def client_no_touch(client: Session, argv: list[bytes]):
    return _on_off(argv)


@subcommand("client", "help")
def client_help(client: Session, argv: list[bytes]):
    return [
        b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"GETNAME", b"    Return the name of the current connection.",
        b"ID", b"    Return the ID of the current connection.",
        b"INFO", b"    Return information about the current client connection.",
        b"KILL <ip:port>", b"    Kill connection made from <ip:port>.",
        b"KILL <option> <value> [<option> <value> [...]]",
        b"    Kill connections. Options are: ID <client-id>, ADDR <ip:port>, LADDR <ip:port>,",
        b"    TYPE NORMAL, USER <username>, SKIPME (YES|NO).",
        b"LIST [TYPE NORMAL] [ID <id> [<id> ...]]", b"    Return information about client connections.",
        b"NO-EVICT (ON|OFF)", b"    Accepted for compatibility; Braid does not evict clients.",
        b"NO-TOUCH (ON|OFF)", b"    Accepted for compatibility; Braid keeps no LRU/LFU data.",
        b"SETINFO <option> <value>", b"    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
        b"SETNAME <name>", b"    Assign the name <name> to the current connection.",
        b"HELP", b"    Print this help.",
    ]

