"""Which shard of its region a command belongs to: MOVED and CROSSSLOT, as Redis Cluster.

Theory of operation.  In a sharded database (node/region/slots.py) every shard of a
region is a node of a Redis Cluster whose primaries are the region's shards.  Before a
command runs, the core asks :meth:`ShardRouting.check` about its keys (the positions
``COMMAND GETKEYS`` reports): keys of more than one slot are refused with ``-CROSSSLOT``
and a key of a slot another shard owns with ``-MOVED <slot> <host>:<port>`` (that
shard's endpoint in this region), so cluster-aware clients learn the map and a command
never touches a key this shard's replication group does not carry.  Keyless commands
run at the shard for its own keys (DBSIZE, SCAN, FLUSHALL...), as at a Redis Cluster
node.  A transaction is checked twice, as Redis does: each command when it is queued
(a key elsewhere answers MOVED and EXEC then fails), and the whole of it at EXEC (keys
of two slots: CROSSSLOT, and nothing runs).

Also here: what the CLUSTER command reports of the region's shards (``Shard``) and the
stable node ids clients see.  Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.region.slots import SlotMap, key_slot
from node.resp.encoder import ReplyError

if TYPE_CHECKING:
    from node.region.session import Session

CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard of this region as clients reach it."""

    number: int
    host: str
    port: int           # the plain client port (0: none)
    tls_port: int       # the TLS client port (0: none)
    node_id: str        # 40 hex digits, stable across restarts
    slots: tuple[tuple[int, int], ...]


def node_id(cluster_id: str, region: int, shard: int) -> str:
    """A shard's node id: derived from what names it, so it survives restarts, and differs
    in every region (a client talks to one region's shards)."""
    return hashlib.sha1(f"{cluster_id}/{region}/{shard}".encode()).hexdigest()


class ShardRouting:
    """This shard's place in its region: who owns which slot, and where each shard is."""

    def __init__(self, slot_map: SlotMap, me: int, shards: list[Shard]) -> None:
        self.map = slot_map
        self.me = me
        self.shards = shards
        self._owner = slot_map.owners()

    def owner(self, slot: int) -> Shard:
        return self.shards[self._owner[slot]]

    def moved(self, slot: int, tls: bool) -> ReplyError:
        """Where a key of ``slot`` is served, on the kind of port the client came through."""
        return ReplyError(f"MOVED {slot} {self.owner(slot).host}:{client_port(self.owner(slot), tls)}")

    def check(self, keys: list[bytes], client: Session) -> ReplyError | None:
        """None when every key is of one slot this shard owns, else the error to answer."""
        if not keys:
            return None
        slot = key_slot(keys[0])
        for key in keys[1:]:
            if key_slot(key) != slot:
                return ReplyError(CROSSSLOT)
        if self._owner[slot] != self.me:
            return self.moved(slot, over_tls(client))
        return None

    def owns(self, key: bytes) -> bool:
        return self._owner[key_slot(key)] == self.me


def over_tls(client: Session) -> bool:
    """Did ``client`` connect to the TLS port (Redis's ``shouldReturnTlsInfo``)?  Redirections
    and the slot maps it is shown then name TLS ports."""
    tls = client.region.tls
    return tls is not None and tls.port != 0 and client.laddr.rpartition(":")[2] == str(tls.port)


def client_port(shard: Shard, tls: bool) -> int:
    """The port a client reaches ``shard`` on: its TLS port for a TLS client (the plain one
    when it has none), else its plain port (the TLS one when it has none)."""
    return (shard.tls_port or shard.port) if tls else (shard.port or shard.tls_port)

