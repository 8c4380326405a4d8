"""The admin service (proto/admin.proto): braid-admin's way into a region.

Theory of operation
-------------------
Every region serves ``Admin`` on its gRPC port, beside ``Replication``.  The
service is a thin skin: each call checks the cluster token (metadata entry
``braid-token``) and, with mutual TLS, that the caller's verified certificate is
braid-admin's (CN ``braid-admin``) or a region's (node/transport/tls.py), then calls
the region's :class:`node.activeactive.region.ActiveActive`, which holds the rules
(what a status is, which settings exist, what pausing a link means).  The RESP
commands ``BRAID.REPLICATION`` / ``BRAID.CONFIG`` call the same methods, so both
routes always agree.  ``Backup`` alone goes past it to the region core: it takes a
snapshot as SAVE does (its log fsynced up to the snapshot's record first) and
streams the bytes in pieces well under the channel's message limit, so a state of
any size crosses it.

:class:`AdminClient` is the blocking client braid-admin uses; it turns gRPC
failures into :class:`AdminCallError` with a sentence a person can act on.  With
:class:`AdminTls` it presents braid-admin's certificate and checks that the region
answering holds a certificate naming the region it meant to reach.
"""

from __future__ import annotations

import hmac
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import grpc

from crdt.membership import Change, MembershipError, Promise, Proposal, Standing
from node.activeactive.cluster_config import ClusterConfig
from node.resp.encoder import ReplyError
from node.security import ADMIN_NAME
from node.security.acl_shared import DELUSER, REPLACE, SETUSER, AclChange, AclChangeError, commit, stage, user_lines
from node.transport.admin_types import AdminCallError, AdminTls, FlushNotReady
from proto import admin_pb2
from proto import admin_pb2_grpc as pb_grpc

# protoc's generated module builds its message classes at run time and ships no type stubs
# (proto/build.py writes no .pyi): to a type checker its messages are Any
pb: Any = admin_pb2

TOKEN_KEY = "braid-token"
DEFAULT_FLUSH_TIMEOUT_S = 30.0  # how long a Flush waits for the operations it must cover
# words of gRPC's connection errors that mean the TLS handshake failed, not that nothing answered
TLS_FAILURE_WORDS = ("handshake", "ssl", "certificate", "verification")
BACKUP_CHUNK_BYTES = 1 << 20  # the largest piece of a snapshot one message of a Backup stream carries


def backup_chunk_bytes(max_message: int) -> int:
    """Bytes of a snapshot per message of a Backup stream: well under what the region may send
    (``crdt-repl-max-message``, at least 1 MiB) and what braid-admin's channel receives (gRPC's
    default, 4 MiB), with room for the message's own few bytes."""
    return min(BACKUP_CHUNK_BYTES, max_message // 2)


def _status(st: dict) -> pb.RegionStatus:
    return pb.RegionStatus(**{**st, "links": [pb.Link(**link) for link in st["links"]],
                              "members": [pb.Member(**m) for m in st["members"]]})


def proposal_to_proto(p: Proposal) -> pb.MembershipProposal:
    c = p.change
    host, port, repl_port, *per_shard = c.endpoint or ("", 0, 0)
    ports, repl_ports = per_shard or ((), ())  # a sharded database's join: every shard's ports
    return pb.MembershipProposal(epoch=p.epoch, kind=c.kind, number=c.number, name=c.name, host=host, port=port,
                                 repl_port=repl_port, ballot_region=p.ballot[0], ballot_counter=p.ballot[1],
                                 ports=list(ports), repl_ports=list(repl_ports))


def proposal_from_proto(m: pb.MembershipProposal) -> Proposal:
    endpoint: tuple = ()
    if m.host:
        endpoint = (m.host, m.port, m.repl_port)
        if m.ports:
            endpoint += (tuple(m.ports), tuple(m.repl_ports))
    return Proposal(m.epoch, Change(m.kind, m.number, m.name, endpoint), (m.ballot_region, m.ballot_counter))


class AdminServicer(pb_grpc.AdminServicer):
    def __init__(self, region) -> None:
        self.region = region  # an ActiveActive

    def add_to(self, server) -> None:
        pb_grpc.add_AdminServicer_to_server(self, server)

    async def _check(self, context) -> None:
        hub = self.region.hub
        if hub.tls is not None:
            caller = hub.caller(context.peer())
            allowed = {ADMIN_NAME, *(r.name for r in self.region.cluster.regions)}
            if caller is None or not caller.names & allowed:
                who = ", ".join(sorted(caller.names)) if caller else "a caller outside the TLS port"
                reason = f"admin call refused: the certificate of {who} is neither braid-admin's nor a region's"
                hub.refuse(caller.address if caller else context.peer(), reason)
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, reason)
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

    async def ReloadTls(self, request, context):  # noqa: N802
        await self._check(context)
        try:
            state = self.region.reload_tls()
        except ValueError as e:  # LinkTlsError too: the credentials in use stay
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return pb.TlsState(**state)

    async def Flush(self, request, context):  # noqa: N802
        await self._check(context)
        try:
            removed, vv = await self.region.flush_when_caught_up(
                request.database, dict(request.context), request.timeout_s or DEFAULT_FLUSH_TIMEOUT_S)
        except FlushNotReady as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except ValueError as e:
            code = (grpc.StatusCode.INVALID_ARGUMENT if request.database != self.region.cluster.database
                    else grpc.StatusCode.FAILED_PRECONDITION)
            await context.abort(code, str(e))
        return pb.FlushResult(region=self.region.me.name, keys_removed=removed, vv=vv)

    async def Backup(self, request, context):  # noqa: N802
        await self._check(context)
        if self.region.snapshot_now is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no region core runs here to take a snapshot")
        try:
            # SAVE's own serialisation, between two commands; it rolls the log, which fsyncs every
            # record the snapshot covers first: a backup never holds an operation the region could
            # still lose in a crash and then mint again under the same dot
            data, record = self.region.snapshot_now()
        except ReplyError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e).removeprefix("ERR "))
        aa = self.region
        yield pb.BackupChunk(info=pb.BackupInfo(
            region=aa.me.name, number=aa.region, cluster_id=aa.cluster.cluster_id, database=aa.cluster.database,
            record=record, vv=dict(aa.causal.vv), size=len(data), epoch=aa.membership.epoch,
            log_dir=str(aa.config["appenddirname"])))  # read with the snapshot: no await between
        step = backup_chunk_bytes(aa.hub.limits.max_message)
        view = memoryview(data)
        for at in range(0, len(data), step):
            yield pb.BackupChunk(data=bytes(view[at:at + step]))

    def _acl_state(self, removed: int = 0) -> pb.AclState:
        core = self.region.side
        return pb.AclState(region=self.region.me.name, users=user_lines(core.acl.users),
                           aclfile=str(core.acl.config["aclfile"] or ""), removed=removed)

    async def AclUsers(self, request, context):  # noqa: N802
        await self._check(context)
        return self._acl_state()

    async def ChangeAcl(self, request, context):  # noqa: N802
        # past the Active-Active part to the region core's users (as Backup goes to its state):
        # staged, saved and installed within this one call, with no await between, so no
        # command of a client runs while a user is half changed
        await self._check(context)
        core = self.region.side
        try:
            staged = stage(core.acl, acl_change_from_proto(request))
        except AclChangeError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if request.check_only:
            return self._acl_state()
        try:
            commit(core.acl, staged, list(core.clients.values()))
        except AclChangeError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return self._acl_state(staged.removed)

    async def Promise(self, request, context):  # noqa: N802
        await self._check(context)
        answer = self.region.promise(proposal_from_proto(request))
        return pb.PromiseReply(ok=answer.ok, reason=answer.reason, held=answer.held)

    async def Commit(self, request, context):  # noqa: N802
        await self._check(context)
        try:
            self.region.commit(proposal_from_proto(request.proposal), request.frozen)
        except MembershipError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return _status(self.region.status())

    async def Abort(self, request, context):  # noqa: N802
        await self._check(context)
        self.region.abort(proposal_from_proto(request))
        return pb.Empty()

    async def Standing(self, request, context):  # noqa: N802
        await self._check(context)
        answer = self.region.standing(proposal_from_proto(request))
        return pb.ProposalStanding(epoch=answer.epoch, state=answer.state, held=answer.held)

    async def Purge(self, request, context):  # noqa: N802
        await self._check(context)
        try:
            self.region.purge(request.members)
        except ValueError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return pb.Empty()


def acl_change_to_proto(change: AclChange, check_only: bool) -> pb.AclChange:
    if change.kind == SETUSER:
        return pb.AclChange(setuser=pb.AclSetUser(name=change.name, rules=change.rules), check_only=check_only)
    if change.kind == DELUSER:
        return pb.AclChange(deluser=pb.AclDelUser(names=change.names), check_only=check_only)
    return pb.AclChange(replace=pb.AclReplace(lines=change.lines), check_only=check_only)


def acl_change_from_proto(m: pb.AclChange) -> AclChange:
    which = m.WhichOneof("change")
    if which == "setuser":
        return AclChange(SETUSER, name=m.setuser.name, rules=list(m.setuser.rules))
    if which == "deluser":
        return AclChange(DELUSER, names=list(m.deluser.names))
    if which == "replace":
        return AclChange(REPLACE, lines=list(m.replace.lines))
    return AclChange(which or "")  # nothing: stage() refuses it


def _call_error(e: grpc.RpcError) -> AdminCallError:
    code = e.code()
    unreachable = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    details = e.details() or ""
    if unreachable and any(w in details.lower() for w in TLS_FAILURE_WORDS):
        return AdminCallError(f"TLS handshake failed: {details}", False)
    timed_out = code == grpc.StatusCode.DEADLINE_EXCEEDED
    return AdminCallError("unreachable" if unreachable else details, unreachable, timed_out,
                          wrong_token=code == grpc.StatusCode.UNAUTHENTICATED)


def answers_tls(address: str, timeout: float = 2.0) -> bool:
    """Does the server at ``HOST:PORT`` speak TLS?  Asked after a plain-text call failed to connect:
    gRPC's error then says only that the socket closed.  A server that completes a TLS handshake (its
    certificate unchecked: nothing is sent over it) or ends it with an alert of its own is a TLS
    server; one that answers something else (a plain HTTP/2 server) or nothing is not."""
    host, _, port = address.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            with context.wrap_socket(sock):
                return True
    except ssl.SSLError as e:
        return "ALERT" in str(e.reason or "")  # (the server's alert: it spoke TLS)
    except (OSError, ValueError):
        return False


class AdminClient:
    """Blocking client of one region's admin service."""

    def __init__(self, address: str, token: str, timeout: float = 5.0, tls: AdminTls | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata = ((TOKEN_KEY, token),)
        self._plain = tls is None
        if tls is None:
            self._channel = grpc.insecure_channel(address)
        else:
            options = [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(tls.ca, tls.key, tls.cert),
                                                options=options)
        self._stub = pb_grpc.AdminStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, request, timeout: float | None = None):
        try:
            return getattr(self._stub, method)(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            error = _call_error(e)
            if self._plain and error.unreachable and not error.timed_out and answers_tls(self.address):
                raise AdminCallError("it answers only over TLS", True, tls_only=True) from None
            raise error from None

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

    def reload_tls(self) -> pb.TlsState:
        return self._call("ReloadTls", pb.Empty())

    # membership (node/activeactive/coordinator.py drives these)
    def promise(self, p: Proposal) -> Promise:
        r = self._call("Promise", proposal_to_proto(p))
        return Promise(r.ok, r.reason, r.held)

    def commit(self, p: Proposal, frozen: int) -> pb.RegionStatus:
        return self._call("Commit", pb.MembershipCommit(proposal=proposal_to_proto(p), frozen=frozen))

    def abort(self, p: Proposal) -> None:
        self._call("Abort", proposal_to_proto(p))

    def standing(self, p: Proposal) -> Standing:
        r = self._call("Standing", proposal_to_proto(p))
        return Standing(r.epoch, r.state, r.held)

    def purge(self, members: bytes) -> None:
        self._call("Purge", pb.MemberList(members=members))

    def acl_users(self) -> pb.AclState:
        return self._call("AclUsers", pb.Empty())

    def change_acl(self, change: AclChange, check_only: bool = False) -> pb.AclState:
        """Make ``change`` of the region's users in one step (``check_only``: only check it)."""
        return self._call("ChangeAcl", acl_change_to_proto(change, check_only))

    def flush(self, database: str, context: dict[int, int], timeout_s: float) -> pb.FlushResult:
        """Flush the database at this region once it holds ``context`` (waits at most ``timeout_s``)."""
        return self._call("Flush", pb.FlushRequest(database=database, context=context, timeout_s=timeout_s),
                          timeout=timeout_s + self.timeout)

    def backup(self, timeout_s: float) -> Iterator[pb.BackupChunk]:
        """The region's snapshot, taken now: a BackupInfo, then the file's bytes in order, as
        they arrive (the whole stream within ``timeout_s``); AdminCallError when it fails."""
        try:
            yield from self._stub.Backup(pb.BackupRequest(), timeout=timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            error = _call_error(e)
            if self._plain and error.unreachable and not error.timed_out and answers_tls(self.address):
                raise AdminCallError("it answers only over TLS", True, tls_only=True) from None
            raise error from None


def clients(cfg: ClusterConfig, numbers, tls: tuple[bytes, bytes, bytes] | None,
            timeout: float = 5.0) -> dict[int, AdminClient]:
    """Admin clients of the regions ``numbers`` of ``cfg``; ``tls``: (CA, certificate, key) PEM.
    The coordinator of a membership change reaches the voters through these
    (node/activeactive/coordinator.py takes this function as its ``connect``)."""
    out = {}
    for n in numbers:
        r = cfg.by_number(n)
        if r is None:
            continue
        t = None if tls is None else AdminTls(tls[0], tls[1], tls[2], r.name)
        out[n] = AdminClient(f"{r.host}:{r.repl_port}", cfg.token, timeout, t)
    return out

