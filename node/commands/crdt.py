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


def _peer_arg(argv: list[bytes]) -> str | None:
    """``PAUSE`` / ``RESUME`` take an optional ``PEER name`` (one link instead of all)."""
    if len(argv) == 2:
        return None
    if len(argv) == 4 and argv[2].lower() == b"peer":
        return argv[3].decode("utf-8", "replace")
    raise ReplyError("ERR syntax error")


def _on_links(client, argv: list[bytes], action: str):
    aa, peer = _aa(client), _peer_arg(argv)
    try:
        getattr(aa, action)(peer)
    except ValueError as e:
        raise ReplyError(f"ERR {e}") from None
    return "OK"


@subcommand("braid.replication", "pause", -2, "admin noscript", since="0.1.0",
            summary="Stops all syncing of this region with the others, or with one peer "
                    "(PEER name): writes stay local.",
            complexity="O(1)")
def replication_pause(client, argv: list[bytes]):
    return _on_links(client, argv, "pause")


@subcommand("braid.replication", "resume", -2, "admin noscript", since="0.1.0",
            summary="Resumes syncing (all links, or the link to PEER name): the regions exchange "
                    "what the other lacks.", complexity="O(1)")
def replication_resume(client, argv: list[bytes]):
    return _on_links(client, argv, "resume")


@subcommand("braid.replication", "status", 2, "admin noscript", since="0.1.0",
            summary="This region's version vector and links, as INFO crdt reports them.", complexity="O(1)")
def replication_status(client, argv: list[bytes]):
    return "\n".join(_aa(client).info_lines()).encode()


container("braid.config", -2, group="server", since="0.1.0",
          summary="Database-level settings of an Active-Active region (set by braid-admin on every region).")


@subcommand("braid.config", "get", 3, "admin noscript", since="0.1.0",
            summary="BRAID.CONFIG GET crdt_xadd_id_uniqueness_mode", complexity="O(1)")
def braid_config_get(client, argv: list[bytes]):
    aa = _aa(client)
    if argv[2].lower() != b"crdt_xadd_id_uniqueness_mode":
        raise ReplyError(f"ERR unknown database setting '{argv[2].decode('utf-8', 'replace')}'")
    return aa.mode.encode()


@subcommand("braid.config", "set", 4, "admin noscript", since="0.1.0",
            summary="BRAID.CONFIG SET crdt_xadd_id_uniqueness_mode strict|semi-strict|liberal, or appendfsync "
                    "(also recorded in this region's cluster file)",
            complexity="O(1)")
def braid_config_set(client, argv: list[bytes]):
    aa = _aa(client)
    try:
        aa.tune(aa.cluster.database, argv[2].decode("utf-8", "replace").lower(),
                argv[3].decode("utf-8", "replace").lower())
    except ValueError as e:
        raise ReplyError(f"ERR {e}") from None
    return "OK"


@subcommand("braid.replication", "cluster", 2, "admin noscript", since="0.1.0",
            summary="The cluster file this region runs with (token left out).", complexity="O(1)")
def replication_cluster(client, argv: list[bytes]):
    return _aa(client).cluster_toml().encode()
