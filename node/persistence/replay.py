"""Loading a region from its append-only file at start-up.

The newest valid snapshot (:mod:`node.persistence.snapshot`) is the base: its
state is installed, and only the records after it are replayed.  A snapshot
that fails its checksum is skipped for an older one when the log still holds
every record after that one; otherwise the region does not start.

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
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import snapshot as snap
from .aof import OP_LOCAL, CorruptLog, scan, truncate_torn
from .oplog import decode_local, decode_remote

if TYPE_CHECKING:
    from ..server import Server

log = logging.getLogger("braid.persistence")


class LoadError(Exception):
    """The region must not start: the message says which file and where."""


@dataclass(frozen=True)
class LoadReport:
    records: int = 0          # replayed from the log
    commands: int = 0
    remote: int = 0
    truncated_bytes: int = 0
    snapshot_record: int = 0  # the snapshot loaded: the state after this record (0: none)
    scanned: object = field(default=None, compare=False, repr=False)  # the clean scan, for appending


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
    base = _load_snapshot(server, directory, result)
    tail = [r for r in result.records if r[0] > base]
    commands, remote = replay(server, tail)
    return LoadReport(len(tail), commands, remote, cut, base, None if cut else result)


def _load_snapshot(server: "Server", directory: str, result) -> int:
    """Install the newest snapshot the log continues; returns its record (0: none needed)."""
    first = result.segments[0].first_record if result.segments else result.last_record + 1
    for record, path in snap.list_snapshots(directory):
        if record + 1 < first:
            break  # the log no longer holds what follows this one, nor older ones
        try:
            s = snap.read(path)
        except snap.LegacySnapshot:
            raise LoadError(f"snapshot {path} is in the old pickle format (format version 1), which this "
                            f"version does not load; convert it with `braid convert-snapshot {path}`, "
                            "then start the region again") from None
        except (OSError, snap.SnapshotError) as e:
            log.error("skipping snapshot %s: %s", path, e)
            continue
        if record > result.last_record:
            raise LoadError(f"snapshot {path} is newer than the log's last record {result.last_record}: "
                            "segments are missing")
        install(server, s, path)
        return record
    if first > 1:
        raise LoadError(f"the append-only file in {directory} starts at record {first} and no valid snapshot "
                        "holds what came before it; nothing was loaded")
    return 0


def install(server: "Server", s: "snap.Snapshot", path: str) -> None:
    """Make a snapshot's state the region's (before any record is replayed)."""
    aa = server.db.aa
    if s.active_active != (aa is not None) or (aa is not None and s.region != server.region):
        raise LoadError(f"snapshot {path} belongs to another kind of region (active_active={s.active_active}, "
                        f"region {s.region})")
    server.db.keys = s.keys
    if aa is not None:
        aa.causal.take(s.causal)
        aa.hub.arrivals = [time.monotonic()] * len(aa.causal.log)


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
        if server.db.aa is not None:
            server.db.aa.mode = server.db.aa.cluster.id_mode  # the setting in force now
    return commands, remote


def _replay_local(server: "Server", client, payload: bytes) -> None:
    tag, now, argv, extra = decode_local(payload)
    with server.clock_pinned(now):
        if tag == b"c":
            if extra is not None and server.db.aa is not None:
                server.db.aa.mode = extra  # the mode it ran with, not today's (a full ID may be refused now)
            server.call(client, argv)  # a Blocked reply is dropped: nothing waits during a load
        else:
            server.expire_idmp(now, extra)


def _replay_remote(server: "Server", payload: bytes) -> None:
    env = decode_remote(payload)
    if server.db.aa is None:
        raise ValueError("an operation of another region, but this region is not part of an Active-Active database")
    server.db.aa.hub.deliver(env)
