"""MIGRATE: move streams from Braid into a Redis (or another Braid).

Theory of operation
-------------------
``MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password |
AUTH2 username password] [KEYS key ...]`` is Redis's ``migrateCommand`` (cluster.c),
step for step, with its replies:

1. The options are read in Redis's order (a syntax error, the KEYS rule about the
   empty key argument), then the timeout and the destination DB (integers; a
   timeout of 0 or less is 1000 ms).
2. The keys that exist are kept; none left: ``+NOKEY`` (not an error: nothing to move).
3. One request is written to the target, pipelined: ``AUTH [user] password`` when
   given, ``SELECT db`` unless the cached connection has that DB selected already,
   then ``RESTORE key 0 payload [REPLACE]`` per key (RESTORE, not RESTORE-ASKING:
   Braid is not a Redis cluster).  The payload is DUMP's (:func:`node.commands.dump.
   dump_value`): the RDB version written is ``dump-rdb-version``'s, so a MIGRATE to
   a Redis older than 8.6 needs that setting set to what the target reads (10 for
   Redis 7.0), exactly as Redis refuses a payload newer than its own.  Braid keys
   never expire: the TTL sent is always 0.
4. One reply line is read per command.  An error from the target (AUTH's, SELECT's,
   then the first RESTORE's) is answered ``ERR Target instance replied with error:
   ...``; every key whose RESTORE succeeded is deleted unless COPY, the others stay.
5. A socket error closes the cached connection; it is tried once more on a fresh one
   when it was not a timeout and no key's reply had been read yet (the common case of
   a cached connection the target closed).  Otherwise ``IOERR error or timeout
   writing|reading to target instance``; a connection that cannot even be set up
   (an unknown host, a connect that times out) is ``IOERR error or timeout connecting
   to the client``.  Like Redis, a refused connection shows up as a failed write.

The delete after a successful migration is a plain DEL (:func:`node.commands.keys.
delete_key`): in an Active-Active database an observed-remove through the resolver,
replicated like any DEL, so the key leaves every region.  MIGRATE is one of the
commands the operation log records by the operations they applied
(``node.commands.RESOLVED``): a replay deletes the keys again and never talks to the
target.

Connections and the region
--------------------------
The region core is sans-IO: the network is a port, :class:`MigrateTransport`, that
the driver hands the core (``RegionCore.migrate_transport``; a core without one
answers an error).  The asyncio server gives it a ``SocketMigrateTransport`` (node/runtime/migrate_sockets.py):
Redis's connection cache (one connection per ``host:port`` as written in the
command, at most 64, each closed after 10 idle seconds by the server's cron) whose
reads and writes wait, each at most the command's timeout.  As in Redis the region
waits for the exchange - up to the timeout per operation - and serves nothing else
meanwhile: MIGRATE stays atomic (the keys sent are the keys deleted, no command can
change one in between), inside MULTI/EXEC too.  Plain TCP only (no TLS to the target).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from node.commands import command
from node.commands.dump import dump_value
from node.commands.keys import delete_key
from node.commands.util import ERR_SYNTAX, parse_int
from node.resp.encoder import ReplyError

if TYPE_CHECKING:
    from node.region.session import Session

ERR_KEYS_NEEDS_EMPTY_KEY = ("ERR When using MIGRATE KEYS option, the key argument must be set to the "
                            "empty string")
ERR_CONNECT = "IOERR error or timeout connecting to the client"
ERR_NO_TRANSPORT = "ERR MIGRATE needs a network connection, which this region's driver does not provide"



# ---------------------------------------------------------------- the port
class MigrateLink(Protocol):
    """One connection to a target: what ``migrateCommand`` does with a ``connection``."""

    last_dbid: int  # the DB the target has selected on this connection (-1: unknown)
    timed_out: bool  # the last failed operation failed by its timeout (Redis's errno ETIMEDOUT)

    def write(self, data: bytes, timeout_ms: int) -> bool:
        """Write all of ``data`` (False: it could not be written in time)."""

    def read_line(self, timeout_ms: int) -> bytes | None:
        """One reply line without its CRLF (None: nothing could be read)."""


class MigrateTransport(Protocol):
    """The network as MIGRATE needs it, handed to the core by its driver."""

    def link(self, host: bytes, port: bytes, timeout_ms: int) -> MigrateLink | None:
        """The cached connection to ``host:port``, or a new one (None: it cannot be set up)."""

    def close(self, host: bytes, port: bytes) -> None:
        """Forget and close the cached connection to ``host:port`` (after an error)."""


# ---------------------------------------------------------------- the command
def _bulk(out: bytearray, *args: bytes) -> None:
    out += b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%b\r\n" % (len(a), a)


class _Options:
    __slots__ = ("copy", "replace", "username", "password", "first_key", "num_keys")

    def __init__(self, argv: list[bytes]) -> None:
        self.copy = self.replace = False
        self.username: bytes | None = None
        self.password: bytes | None = None
        self.first_key, self.num_keys = 3, 1
        argc = len(argv)
        j = 6
        while j < argc:
            more = argc - 1 - j
            opt = argv[j].lower()
            if opt == b"copy":
                self.copy = True
            elif opt == b"replace":
                self.replace = True
            elif opt == b"auth":
                if not more:
                    raise ReplyError(ERR_SYNTAX)
                j += 1
                self.password = argv[j]
            elif opt == b"auth2":
                if more < 2:
                    raise ReplyError(ERR_SYNTAX)
                self.username, self.password = argv[j + 1], argv[j + 2]
                j += 2
            elif opt == b"keys":
                if argv[3]:
                    raise ReplyError(ERR_KEYS_NEEDS_EMPTY_KEY)
                self.first_key, self.num_keys = j + 1, argc - j - 1
                break
            else:
                raise ReplyError(ERR_SYNTAX)
            j += 1


@command("migrate")
def migrate(client: Session, argv: list[bytes]):
    opts = _Options(argv)
    timeout = parse_int(argv[5])
    dbid = parse_int(argv[4])
    if timeout <= 0:
        timeout = 1000
    server = client.region
    keys = [k for k in argv[opts.first_key:opts.first_key + opts.num_keys] if k in server.db.keys]
    if not keys:
        return "NOKEY"
    transport: MigrateTransport | None = server.migrate_transport
    if transport is None:
        raise ReplyError(ERR_NO_TRANSPORT)
    host, port = argv[1], argv[2]
    payloads: list[bytes] = []  # nothing runs before the replies: the same keys, each still there
    for k in keys:
        payload = dump_value(server, k)
        assert payload is not None  # (keys are the ones that exist)
        payloads.append(payload)
    may_retry = True
    while True:
        link = transport.link(host, port, timeout)
        if link is None:
            return ReplyError(ERR_CONNECT)
        request = bytearray()
        if opts.password is not None:
            _bulk(request, b"AUTH", *((opts.username,) if opts.username is not None else ()), opts.password)
        select = link.last_dbid != dbid
        if select:
            _bulk(request, b"SELECT", b"%d" % dbid)
        for key, payload in zip(keys, payloads, strict=True):
            _bulk(request, b"RESTORE", key, b"0", payload, *((b"REPLACE",) if opts.replace else ()))
        try:
            return _exchange(server.db, link, bytes(request), keys, opts, select, dbid, timeout)
        except _SocketError as e:
            transport.close(host, port)  # the next attempt (or MIGRATE) starts on a fresh connection
            if e.reply is not None:
                return e.reply
            if e.retry and may_retry and not link.timed_out:
                may_retry = False
                continue
            return ReplyError(f"IOERR error or timeout {'writing' if e.writing else 'reading'} to target instance")


class _SocketError(Exception):
    """An attempt failed on the socket: ``writing`` the request or reading a reply; ``retry``:
    nothing was processed, so a fresh connection may be tried (Redis: not after keys moved);
    ``reply``: an error the target answered before the socket failed, which stays the reply."""

    def __init__(self, writing: bool, retry: bool = True, reply: ReplyError | None = None) -> None:
        self.writing, self.retry, self.reply = writing, retry, reply


def _exchange(db, link: MigrateLink, request: bytes, keys: list[bytes], opts: _Options, select: bool,
              dbid: int, timeout: int):
    """One attempt: write the request, read the replies, delete what moved (unless COPY)."""
    if not link.write(request, timeout):
        raise _SocketError(writing=True)
    auth_reply = select_reply = b""
    if opts.password is not None:
        got = link.read_line(timeout)
        if got is None:
            raise _SocketError(writing=False)
        auth_reply = got
    if select:
        got = link.read_line(timeout)
        if got is None:
            raise _SocketError(writing=False)
        select_reply = got
    error = None
    read = 0
    for key in keys:
        line = link.read_line(timeout)
        if line is None:
            raise _SocketError(writing=False, retry=read == 0, reply=error)  # a target's error stays the reply
        read += 1
        failed = next((r for r in (auth_reply, select_reply, line) if r[:1] == b"-"), None)
        if failed is not None:
            if error is None:
                link.last_dbid = -1  # on an error the selected DB is no longer known
                error = ReplyError("ERR Target instance replied with error: "
                                   + failed[1:].decode("utf-8", "replace"))
        elif not opts.copy:
            delete_key(db, key)  # a DEL: in an Active-Active database an observed-remove, replicated
    if error is not None:
        return error
    link.last_dbid = dbid
    return "OK"


# ---------------------------------------------------------------- the driver's implementation
