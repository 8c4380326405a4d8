"""Braid's own commands for a region of an Active-Active database."""

from __future__ import annotations

from ..resp.encoder import ReplyError
from . import container, subcommand

container("braid.replication", -2, group="server", since="0.1.0",
          summary="Controls this region's replication (Active-Active databases).")


def _aa(client):
    aa = client.server.db.aa
    if aa is None:
        raise ReplyError("ERR this region is not part of an Active-Active database")
    return aa


@subcommand("braid.replication", "pause", 2, "admin noscript", since="0.1.0",
            summary="Stops all syncing of this region with the others (writes stay local).",
            complexity="O(1)")
def replication_pause(client, argv: list[bytes]):
    _aa(client).pause()
    return "OK"


@subcommand("braid.replication", "resume", 2, "admin noscript", since="0.1.0",
            summary="Resumes syncing: the regions exchange what the other lacks.", complexity="O(1)")
def replication_resume(client, argv: list[bytes]):
    _aa(client).resume()
    return "OK"


@subcommand("braid.replication", "status", 2, "admin noscript", since="0.1.0",
            summary="This region's version vector and links, as INFO crdt reports them.", complexity="O(1)")
def replication_status(client, argv: list[bytes]):
    return "\n".join(_aa(client).info_lines()).encode()
