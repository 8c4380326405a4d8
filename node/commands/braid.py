"""Braid's own commands for a region of an Active-Active database."""

from __future__ import annotations

from typing import TYPE_CHECKING

from node.commands import subcommand
from node.resp.encoder import ReplyError

if TYPE_CHECKING:
    from node.region.session import Session


def _aa(client: Session):
    aa = client.region.aa
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


def _on_links(client: Session, argv: list[bytes], action: str):
    aa, peer = _aa(client), _peer_arg(argv)
    try:
        getattr(aa, action)(peer)
    except ValueError as e:
        raise ReplyError(f"ERR {e}") from None
    return "OK"


@subcommand("braid.replication", "pause")
def replication_pause(client: Session, argv: list[bytes]):
    return _on_links(client, argv, "pause")


@subcommand("braid.replication", "resume")
def replication_resume(client: Session, argv: list[bytes]):
    return _on_links(client, argv, "resume")


@subcommand("braid.replication", "status")
def replication_status(client: Session, argv: list[bytes]):
    return "\n".join(_aa(client).info_lines()).encode()


@subcommand("braid.config", "get")
def braid_config_get(client: Session, argv: list[bytes]):
    aa = _aa(client)
    if argv[2].lower() != b"crdt_xadd_id_uniqueness_mode":
        raise ReplyError(f"ERR unknown database setting '{argv[2].decode('utf-8', 'replace')}'")
    return aa.mode.encode()


@subcommand("braid.config", "set")
def braid_config_set(client: Session, argv: list[bytes]):
    aa = _aa(client)
    try:
        aa.tune(aa.cluster.database, argv[2].decode("utf-8", "replace").lower(),
                argv[3].decode("utf-8", "replace").lower())
    except ValueError as e:
        raise ReplyError(f"ERR {e}") from None
    return "OK"


@subcommand("braid.replication", "cluster")
def replication_cluster(client: Session, argv: list[bytes]):
    return _aa(client).cluster_toml().encode()
