"""What a replication handshake checks of its peer: the cluster, database and token its Hello
names, its shard and slot map, and (with TLS) that its certificate speaks for the region it
claims.  Mixed into :class:`node.activeactive.hub.ReplicationHub`, whose attributes these read.

Each check answers '' when the peer passes, else why it is refused (the link logs and counts
it, node/activeactive/link.py).
"""

from __future__ import annotations

import hmac
from typing import Any

from node.transport.tls import Identity, LinkCredentials
from proto import replication_pb2

pb: Any = replication_pb2  # (protoc ships no type stubs: its messages are Any to a type checker)


class HandshakeChecks:
    """The hub's handshake checks (see the module's docstring)."""

    region: int
    shard: int
    slot_map: str
    cluster_id: str
    database: str
    token: str
    tls: LinkCredentials | None
    names: dict[int, str]

    def check_hello(self, hello: pb.Hello | None) -> str:
        if hello is None:
            return "the first frame was not Hello"
        if hello.cluster_id != self.cluster_id:
            return f"cluster id {hello.cluster_id!r} is not {self.cluster_id!r}"
        if hello.database != self.database:
            return f"database {hello.database!r} is not {self.database!r}"
        if not hmac.compare_digest(hello.token.encode(), self.token.encode()):
            return f"region {hello.region} presented a wrong token"
        if hello.region == self.region:
            return f"region number {hello.region} is this region's own"
        return self.check_shard(hello.region, hello.shard, hello.slot_map)

    def check_shard(self, peer: int, shard: int, slot_map: str) -> str:
        """Only shard K of one slot map replicates with shard K of the same map: every other
        pair holds other keys, so one operation would reach a shard that does not own it."""
        if (shard, slot_map) == (self.shard, self.slot_map):
            return ""
        def what(k: int, digest: str) -> str:
            return f"shard {k} of slot map {digest}" if digest else "unsharded"
        return (f"region {peer} is {what(shard, slot_map)}, this region's shard is "
                f"{what(self.shard, self.slot_map)}: the cluster files' [shards] or the shard started differ")

    def check_certificate(self, hello: pb.Hello, caller: Identity | None) -> str:
        """With TLS: does the caller's verified certificate name the region its Hello claims?"""
        if self.tls is None:
            return ""
        if caller is None:
            return "the call did not come through this region's TLS port"
        claimed = self.names.get(hello.region)
        if claimed is None:
            return f"region number {hello.region} is not in the cluster file"
        if claimed not in caller.names:
            return (f"a certificate of {', '.join(sorted(caller.names)) or 'no name'} "
                    f"cannot speak for {claimed} (region {hello.region})")
        return ""
