"""The admin service (proto/admin.proto): braid-admin's way into a region.

Theory of operation
-------------------
Every region serves ``Admin`` on its gRPC port, beside ``Replication``.  The
service is a thin skin: each call checks the cluster token (metadata entry
``braid-token``), then calls the region's :class:`node.activeactive.ActiveActive`,
which holds the rules (what a status is, which settings exist, what pausing a
link means).  The RESP commands ``BRAID.REPLICATION`` / ``BRAID.CONFIG`` call the
same methods, so both routes always agree.

:class:`AdminClient` is the blocking client braid-admin uses; it turns gRPC
failures into :class:`AdminCallError` with a sentence a person can act on.
"""

from __future__ import annotations

import hmac

import grpc

from proto import admin_pb2 as pb
from proto import admin_pb2_grpc as pb_grpc

TOKEN_KEY = "braid-token"


def _status(st: dict) -> pb.RegionStatus:
    return pb.RegionStatus(**{**st, "links": [pb.Link(**link) for link in st["links"]]})


class AdminServicer(pb_grpc.AdminServicer):
    def __init__(self, region) -> None:
        self.region = region  # an ActiveActive

    def add_to(self, server) -> None:
        pb_grpc.add_AdminServicer_to_server(self, server)

    async def _check(self, context) -> None:
        token = dict(context.invocation_metadata() or ()).get(TOKEN_KEY, "")
        if not hmac.compare_digest(token.encode(), self.region.cluster.token.encode()):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong cluster token")

    async def Status(self, request, context):  # noqa: N802 (gRPC's names)
        await self._check(context)
        return _status(self.region.status())

    async def Cluster(self, request, context):  # noqa: N802
        await self._check(context)
        return pb.ClusterFile(toml=self.region.cluster_toml())

    async def Tune(self, request, context):  # noqa: N802
        await self._check(context)
        try:
            self.region.tune(request.database, request.name, request.value)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return _status(self.region.status())

    async def _links(self, request, context, action: str):
        await self._check(context)
        try:
            getattr(self.region, action)(request.peer or None)
        except ValueError as e:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        return _status(self.region.status())

    async def PauseReplication(self, request, context):  # noqa: N802
        return await self._links(request, context, "pause")

    async def ResumeReplication(self, request, context):  # noqa: N802
        return await self._links(request, context, "resume")


class AdminCallError(Exception):
    """A call that failed; ``unreachable`` tells a down region from a refused request."""

    def __init__(self, message: str, unreachable: bool) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class AdminClient:
    """Blocking client of one region's admin service."""

    def __init__(self, address: str, token: str, timeout: float = 5.0) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata = ((TOKEN_KEY, token),)
        self._channel = grpc.insecure_channel(address)
        self._stub = pb_grpc.AdminStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, request):
        try:
            return getattr(self._stub, method)(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            code = e.code()
            unreachable = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            raise AdminCallError("unreachable" if unreachable else e.details(), unreachable) from None

    def status(self) -> pb.RegionStatus:
        return self._call("Status", pb.Empty())

    def cluster_toml(self) -> str:
        return self._call("Cluster", pb.Empty()).toml

    def tune(self, database: str, name: str, value: str) -> pb.RegionStatus:
        return self._call("Tune", pb.DatabaseSetting(database=database, name=name, value=value))

    def pause(self, peer: str = "") -> pb.RegionStatus:
        return self._call("PauseReplication", pb.LinkSelector(peer=peer))

    def resume(self, peer: str = "") -> pb.RegionStatus:
        return self._call("ResumeReplication", pb.LinkSelector(peer=peer))
