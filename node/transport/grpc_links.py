"""Replication links over gRPC: the ``Sync`` service a region serves and the calls it dials.

The links' logic - handshake checks, sending, receiving, acknowledging - is the hub's
(node/activeactive/hub.py, which does not import gRPC, so the simulation can run real
hubs over its own network without loading it).  This module is what moves their frames:
:class:`GrpcLinks` is a hub's ``transport``; it serves ``Replication`` (and the admin service
the region adds, node/transport/admin.py) on the region's gRPC port, behind the TLS front
when the cluster uses TLS, and dials each peer's ``Sync`` stream.  The region's start hands
it to the hub (node/runtime/server.py, ``ActiveActive.start``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable
from typing import Any

import grpc

from crdt.linkerrors import MembershipBehind
from crdt.sync import ProtocolError
from node.activeactive.hub import CERTIFICATE_REFUSED, ReplicationHub
from node.activeactive.link import Link, LinkStalled
from node.transport.tls import TlsFront
from proto import replication_pb2
from proto import replication_pb2_grpc as pb_grpc

# protoc's generated module builds its message classes at run time and ships no type stubs
# (proto/build.py writes no .pyi): to a type checker its messages are Any
pb: Any = replication_pb2

log = logging.getLogger("braid.replication")


class _Servicer(pb_grpc.ReplicationServicer):
    def __init__(self, hub: ReplicationHub) -> None:
        self.hub = hub

    async def Sync(self, request_iterator, context):  # noqa: N802 (gRPC's name)
        hub = self.hub
        try:
            first = await asyncio.wait_for(request_iterator.__anext__(), hub.limits.handshake_timeout)
        except (TimeoutError, StopAsyncIteration):
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no Hello")
        hello = first.hello if first.WhichOneof("body") == "hello" else None
        caller = hub.caller(context.peer())
        reason = hub.check_hello(hello) or hub.check_certificate(hello, caller)
        if not reason and hub.gate is not None:
            reason = hub.gate.check_peer(hello.region, hello.epoch, hello.members)
            if reason:
                hub.gate.refused()
        if reason:
            hub.refuse(caller.address if caller else context.peer(), reason)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, reason)
        if hub.is_cut(hello.region):
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the link to this region is paused")
        my_vv, my_floor, my_heads = dict(hub.causal.vv), dict(hub.causal.floor), hub.causal.held_heads()
        link = Link(hub, hello.region, dict(hello.vv), peer_floor=dict(hello.floor),
                    peer_max_message=hello.max_message, my_vv=my_vv, my_floor=my_floor,
                    packed=hello.packed_batches, peer_heads=dict(hello.heads), peer_joins=hello.joins_states)
        epoch, members = hub.membership_hello()
        yield pb.Frame(welcome=pb.Welcome(region=hub.region, vv=my_vv, floor=my_floor,
                                          max_message=hub.limits.max_message, epoch=epoch, members=members,
                                          packed_batches=hub.packed_batches, heads=my_heads,
                                          joins_states=hub.joins_states, shard=hub.shard,
                                          slot_map=hub.slot_map))
        running = asyncio.ensure_future(hub.run_link(link, request_iterator))
        hub.serving(link.peer, link.outbox, None if hub.front is None else hub.front.port_of(context.peer()))
        try:
            while (frame := await link.outbox.get()) is not None:
                hub.sent_frame()
                yield frame
        finally:
            running.cancel()
            hub.served_ended(link.peer, link.outbox)
            error = running.exception() if running.done() and not running.cancelled() else None
        if isinstance(error, ProtocolError):  # tell the peer why (it logs it)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))


class GrpcLinks:
    """A hub's links over gRPC (see the module's docstring); one per hub."""

    def __init__(self) -> None:
        self.server: grpc.aio.Server | None = None

    async def serve(self, hub: ReplicationHub, host: str, port: int, extra: Iterable) -> int:
        """Serve Replication for ``hub``, and the ``extra`` services (each ``.add_to(server)``), on one port."""
        self.server = grpc.aio.server(options=hub.limits.server_options())
        pb_grpc.add_ReplicationServicer_to_server(_Servicer(hub), self.server)
        for service in extra:
            service.add_to(self.server)
        if hub.tls is None:
            bound = self.server.add_insecure_port(f"{host}:{port}")
            await self.server.start()
            hub.listening(bound)
            return bound
        # TLS: gRPC on a loopback port of its own, behind the front that does the handshakes
        backend = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        front = TlsFront(hub.tls, backend, hub.refuse, hub.denied_by, hub.limits.handshake_timeout)
        hub.listening(hub.port, front)  # in place before the front takes its first connection
        hub.listening(await front.start(host, port), front)
        return hub.port

    async def dial_forever(self, hub: ReplicationHub, peer: int, address: str) -> None:
        """Keep a link of ``hub`` to ``peer`` up, reconnecting with backoff and jitter."""
        delay = 0.05
        while True:
            try:
                await self._dial_once(hub, peer, address)
                delay = 0.05
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.PERMISSION_DENIED:
                    hub.refused_by(peer, e.details())
                elif hub.tls is not None and any(w in (e.details() or "") for w in CERTIFICATE_REFUSED):
                    # this region's check of the peer's certificate failed: a refusal like any other
                    hub.refuse(address, f"the certificate of the region dialed as {hub.names.get(peer, peer)} "
                                         f"was refused: {e.details()}")
                elif hub.tls is not None and any(w in (e.details() or "").lower() for w in ("handshake", "ssl")):
                    log.warning("no TLS link to region %d (%s): %s", peer, address, e.details())
                elif e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    log.error("region %d ended the link: %s", peer, e.details())
                else:
                    log.info("link to region %d down: %s", peer, e.code().name)
            except (ProtocolError, LinkStalled):
                pass  # logged and counted by run_link
            except MembershipBehind as e:
                log.info("link to region %d restarts: %s", peer, e)
            except Exception as e:  # whatever ended the link, the region keeps dialing
                log.warning("link to region %d ended: %s", peer, e)
            await asyncio.sleep(delay * (0.5 + random.random()))  # backoff with jitter
            delay = min(delay * 2, 1.0)

    def _channel(self, hub: ReplicationHub, peer: int, address: str) -> grpc.aio.Channel:
        options: list[tuple[str, int | str]] = [*hub.limits.channel_options()]
        if hub.tls is None:
            return grpc.aio.insecure_channel(address, options=options)
        m = hub.tls.material
        credentials = grpc.ssl_channel_credentials(m.ca, m.key, m.cert)
        # the peer's certificate must name the region dialed; a connection of its own per
        # dial (no shared subchannel), so a re-dial after a reload handshakes again
        options += [("grpc.ssl_target_name_override", hub.names.get(peer, str(peer))),
                    ("grpc.use_local_subchannel_pool", 1)]
        return grpc.aio.secure_channel(address, credentials, options=options)

    async def _dial_once(self, hub: ReplicationHub, peer: int, address: str) -> None:
        limits = hub.limits
        async with self._channel(hub, peer, address) as channel:
            call = pb_grpc.ReplicationStub(channel).Sync()
            my_vv, my_floor, my_heads = dict(hub.causal.vv), dict(hub.causal.floor), hub.causal.held_heads()
            epoch, members = hub.membership_hello()
            await call.write(pb.Frame(hello=pb.Hello(cluster_id=hub.cluster_id, database=hub.database,
                                                     region=hub.region, token=hub.token, vv=my_vv,
                                                     floor=my_floor, max_message=limits.max_message,
                                                     epoch=epoch, members=members,
                                                     packed_batches=hub.packed_batches, heads=my_heads,
                                                     joins_states=hub.joins_states, shard=hub.shard,
                                                     slot_map=hub.slot_map)))
            frames = call.__aiter__()  # one reader API only: grpc.aio forbids mixing read() and iteration
            try:
                first = await asyncio.wait_for(frames.__anext__(), limits.handshake_timeout)
            except TimeoutError:
                raise ConnectionError(f"region {peer} did not answer the handshake") from None
            if first.WhichOneof("body") != "welcome" or first.welcome.region != peer:
                raise ConnectionError(f"region {peer} did not welcome this region")
            w = first.welcome
            reason = hub.check_shard(peer, w.shard, w.slot_map)
            if reason:
                hub.refuse(address, reason)
                return
            if hub.gate is not None:
                reason = hub.gate.check_peer(peer, w.epoch, w.members)
                if reason:
                    hub.gate.refused()
                    hub.refuse(address, reason)
                    return
            if hub.is_cut(peer):
                return  # the newer list it brought removed this region, or the peer
            link = Link(hub, peer, dict(w.vv), peer_floor=dict(w.floor), peer_max_message=w.max_message,
                        my_vv=my_vv, my_floor=my_floor, packed=w.packed_batches, peer_heads=dict(w.heads),
                        peer_joins=w.joins_states)

            async def writer() -> None:
                while (frame := await link.outbox.get()) is not None:
                    hub.sent_frame()
                    await call.write(frame)

            await hub.run_link(link, frames, writer())

    async def stop(self, hub: ReplicationHub) -> None:
        if hub.front is not None:
            await hub.front.stop()
        if self.server is not None:
            await self.server.stop(grace=0.5)
