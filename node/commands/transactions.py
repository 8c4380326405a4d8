"""MULTI / EXEC / DISCARD / WATCH / UNWATCH.

Commands sent after MULTI are queued by the dispatcher (``Server.call``): a
queue-time error (unknown command, wrong arity, NOPERM) marks the transaction so
EXEC aborts it, as Redis does.  EXEC runs the queue atomically (the server is
single threaded), checking each command's permissions again, with
``client.in_exec`` set so blocking reads answer at once instead of blocking.  WATCH records
each key's version (node/region/db.py keeps versions only for watched keys); EXEC returns a
null array when any watched key changed since.
EXEC, DISCARD, UNWATCH, RESET and a disconnection release the client's keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node.commands import command
from node.region.blocking import Blocked
from node.resp.encoder import NULL_ARRAY, ReplyError

if TYPE_CHECKING:
    from node.region.session import Session


@command("multi")
def multi(client: Session, argv: list[bytes]):
    if client.multi is not None:
        raise ReplyError("ERR MULTI calls can not be nested")
    client.multi = []
    client.multi_error = False
    return "OK"


@command("discard")
def discard(client: Session, argv: list[bytes]):
    if client.multi is None:
        raise ReplyError("ERR DISCARD without MULTI")
    discard_transaction(client)
    return "OK"


@command("exec")
def exec_(client: Session, argv: list[bytes]):
    if client.multi is None:
        raise ReplyError("ERR EXEC without MULTI")
    queued, client.multi = client.multi, None
    aborted, client.multi_error = client.multi_error, False
    db = client.region.db
    changed = any(db.version(k) != v for k, v in client.watched.items())
    db.unwatch(client.watched)  # released before the commands run, as Redis does
    if aborted:
        raise ReplyError("EXECABORT Transaction discarded because of previous errors.")
    if changed:
        return NULL_ARRAY
    replies = []
    client.in_exec = True
    try:
        for qargv in queued:
            reply = client.region.call(client, qargv)
            if type(reply) is Blocked:  # a blocking read inside EXEC never blocks
                reply = reply.timeout_reply
            replies.append(reply)
    finally:
        client.in_exec = False
    return replies


def discard_transaction(client: Session) -> None:
    """Redis's ``discardTransaction``: the queued commands are dropped, the keys unwatched."""
    client.multi = None
    client.multi_error = False
    client.region.db.unwatch(client.watched)


def abort_exec(client: Session, reason: str) -> ReplyError:
    """An EXEC refused before it runs (wrong arity, NOAUTH): as Redis's ``execCommandAbort``,
    the transaction is discarded and its keys unwatched, in MULTI or not, and the reply
    names the reason (a bare reason: Redis formats these without the ERR code)."""
    discard_transaction(client)
    reason = reason[4:] if reason.startswith("ERR ") else reason
    return ReplyError(f"EXECABORT Transaction discarded because of: {reason}")


@command("watch")
def watch(client: Session, argv: list[bytes]):
    if client.multi is not None:
        raise ReplyError("ERR WATCH inside MULTI is not allowed")
    db = client.region.db
    for key in argv[1:]:
        if key not in client.watched:
            client.watched[key] = db.watch(key)
    return "OK"


@command("unwatch")
def unwatch(client: Session, argv: list[bytes]):
    client.db.unwatch(client.watched)
    return "OK"
