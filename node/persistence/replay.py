"""Loading a region from its append-only file at start-up.

The file is scanned first (:func:`node.persistence.aof.scan`): a torn last
record - a crash in the middle of a write - is cut when ``aof-load-truncated``
is yes (the default, as in Redis) and stops the region otherwise; damage
anywhere else always stops it, with the file and offset in the message, and
nothing is loaded.  Then every record is replayed in order
(:mod:`node.persistence.oplog` says what the records are): commands run again
through the server with the clock they first ran with, operations of other
regions go through the causal log as when they arrived.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .aof import OP_LOCAL, CorruptLog, scan, truncate_torn
from .oplog import decode_local, decode_remote

if TYPE_CHECKING:
    from ..server import Server

log = logging.getLogger("braid.persistence")


class LoadError(Exception):
    """The region must not start: the message says which file and where."""


@dataclass(frozen=True)
class LoadReport:
    records: int = 0
    commands: int = 0
    remote: int = 0
    truncated_bytes: int = 0


def load(server: "Server", directory: str, truncated_ok: bool) -> LoadReport:
    if not os.path.isdir(directory):
        return LoadReport()
    try:
        result = scan(directory)
    except CorruptLog as e:
        raise LoadError(f"the append-only file is damaged: {e}; nothing was loaded "
                        f"(`braid check-log {directory}` reports the damage)") from None
    cut = 0
    if result.torn is not None:
        path, offset = result.torn
        if not truncated_ok:
            raise LoadError(f"the append-only file ends with a torn record in {path} at offset {offset} "
                            f"({result.torn_reason}); set aof-load-truncated yes or run "
                            f"`braid check-log {directory} --fix` to cut it")
        cut = truncate_torn(result)
        log.warning("cut a torn record at the end of the append-only file: %d bytes of %s from offset %d (%s)",
                    cut, path, offset, result.torn_reason)
    commands, remote = replay(server, result.records)
    return LoadReport(len(result.records), commands, remote, cut)


def replay(server: "Server", records: list[tuple[int, int, bytes]]) -> tuple[int, int]:
    """Apply records in order; returns (commands, operations of other regions)."""
    from ..server import ClientConnection

    client = ClientConnection(server)  # no socket: replies are dropped
    client.authenticated = True
    commands = remote = 0
    settings = dict(server.config.values)  # a replayed CONFIG SET lasts only for the replay
    server.replaying = True
    try:
        for number, kind, payload in records:
            try:
                if kind == OP_LOCAL:
                    _replay_local(server, client, payload)
                    commands += 1
                else:
                    _replay_remote(server, payload)
                    remote += 1
            except ValueError as e:
                raise LoadError(f"record {number} of the append-only file cannot be replayed: {e}") from None
    finally:
        server.replaying = False
        server.config.values.update(settings)
        server.config_changed()
    return commands, remote


def _replay_local(server: "Server", client, payload: bytes) -> None:
    tag, now, argv = decode_local(payload)
    with server.clock_pinned(now):
        if tag == b"c":
            server.call(client, argv)  # a Blocked reply is dropped: nothing waits during a load
        else:
            server.expire_idmp(now)


def _replay_remote(server: "Server", payload: bytes) -> None:
    env = decode_remote(payload)
    if server.db.aa is None:
        raise ValueError("an operation of another region, but this region is not part of an Active-Active database")
    server.db.aa.hub.deliver(env)
