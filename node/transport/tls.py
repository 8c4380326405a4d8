"""Mutual TLS on the links between regions and on the admin service.

Theory of operation
-------------------
A region's gRPC port (replication and the admin service) is one TCP port.  With
``[tls]`` in the cluster file, what listens there is :class:`TlsFront`: it
accepts a connection, runs the TLS handshake itself (Python's ``ssl``, mutual:
the peer must present a certificate of the cluster's CA bundle, valid now),
and only then splices the decrypted bytes to the region's gRPC server, which
listens on a loopback port of its own.  Doing the handshake here, not inside
gRPC's C core, is what lets every refusal be seen: a certificate from another
CA, an expired one, plain text on the TLS port, a handshake that stalls - each
is logged with the peer's address and the reason and counted
(``crdt_refused_handshakes``), and the connection is closed before a byte of
it reaches gRPC.  A peer that gives up the handshake itself (it does not accept
this region's certificate) is logged and counted apart
(``crdt_denied_handshakes``); a connection that opens and closes without
sending a byte (a port probe) is no handshake and is not counted.

Who the peer is.  The front connects to the gRPC server from a fresh loopback
port and records, under that port, the names the verified certificate stands
for (its common name and DNS subjectAltNames) and the peer's real address.  The
services look the caller up by the port gRPC reports (:meth:`TlsFront.identity`)
and check the names: a replication peer's certificate must name the region its
Hello claims (a valid certificate of region-2 cannot pose as region-3); an admin
caller's must be braid-admin's or a region's.  A call that did not come through
the front (a local process dialing the loopback port directly) has no identity
and is refused.  The cluster token stays as a second factor, inside TLS.

The dialing side is gRPC's own TLS (``grpc.ssl_channel_credentials`` with this
region's certificate and the CA bundle, and ``grpc.ssl_target_name_override`` =
the peer region's name), so the peer's certificate must name the region dialed.

Rotation.  :class:`LinkCredentials` holds what was read from the files (CA
bundle, certificate, key) and re-reads them on :meth:`LinkCredentials.reload`
(``braid-admin tls reload``, SIGHUP).  A reload that finds a file unreadable,
malformed, or a key that does not match the certificate keeps the credentials in
use and reports the error.  New handshakes use the new credentials; the region
then closes its replication connections, so every link handshakes again (and
peers see the new certificate at once).  A CA move: put both CAs in the bundle
everywhere, re-issue certificates from the new CA, then drop the old CA (docs/security.md,
"Between regions (mutual TLS)").

This module does not import grpc; the services (grpc_links.py, admin.py) do.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

log = logging.getLogger("braid.tls")

SPLICE_CHUNK = 256 * 1024  # bytes read at once from either side of a spliced connection
ALPN = ["h2"]              # gRPC speaks HTTP/2 and its clients insist it is negotiated
PLAIN_TEXT_REASONS = {"HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL",
                      "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"}


PEER_ENDED = "the peer ended the TLS handshake"  # it refused this region, rather than the reverse


class LinkTlsError(ValueError):
    """A certificate, key or CA bundle that cannot be used (the message names the file)."""


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise LinkTlsError(f"cannot read the {what} {path}: {e.strerror or e}") from None


def cert_names(cert: x509.Certificate) -> set[str]:
    """The names a certificate stands for: its common name and DNS subjectAltNames."""
    names = {a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME) if isinstance(a.value, str)}
    try:
        names.update(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
                     .value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        pass
    return names


@dataclass(frozen=True, slots=True)
class Material:
    """One reading of the files: PEM bytes, checked to fit together."""

    ca: bytes
    cert: bytes
    key: bytes
    certificate: x509.Certificate  # the first certificate of ``cert``
    ca_count: int

    @property
    def serial(self) -> int:
        return self.certificate.serial_number


def read_material(ca_path: str, cert_path: str, key_path: str) -> Material:
    """Read and check a CA bundle, a certificate (chain) and its key; LinkTlsError says what is wrong."""
    ca, cert, key = _read(ca_path, "CA bundle"), _read(cert_path, "certificate"), _read(key_path, "private key")
    try:
        cas = x509.load_pem_x509_certificates(ca)
    except ValueError:
        raise LinkTlsError(f"{ca_path}: not a PEM CA bundle (no certificate could be read)") from None
    try:
        chain = x509.load_pem_x509_certificates(cert)
    except ValueError:
        raise LinkTlsError(f"{cert_path}: not a PEM certificate") from None
    try:
        private = serialization.load_pem_private_key(key, None)
    except (ValueError, TypeError) as e:
        detail = "it is encrypted" if "encrypted" in str(e).lower() or "password" in str(e).lower() else "not a PEM key"
        raise LinkTlsError(f"{key_path}: not a usable private key ({detail})") from None
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if (private.public_key().public_bytes(serialization.Encoding.DER, pub)
            != chain[0].public_key().public_bytes(serialization.Encoding.DER, pub)):
        raise LinkTlsError(f"{key_path} is not the key of the certificate {cert_path}")
    return Material(ca, cert, key, chain[0], len(cas))


class LinkCredentials:
    """The credentials one end presents and trusts, re-read from their files on :meth:`reload`."""

    def __init__(self, ca_path: str, cert_path: str, key_path: str) -> None:
        self.ca_path, self.cert_path, self.key_path = ca_path, cert_path, key_path
        self.material = read_material(ca_path, cert_path, key_path)
        self.server_context = self._server_context(self.material)
        self.generation = 0  # raised by every reload (dialers compare it)

    def reload(self) -> Material:
        """Read the files again; on any error keep what is in use and raise LinkTlsError."""
        material = read_material(self.ca_path, self.cert_path, self.key_path)
        context = self._server_context(material)
        self.material, self.server_context = material, context
        self.generation += 1
        return material

    def _server_context(self, m: Material) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.verify_mode = ssl.CERT_REQUIRED
        try:
            ctx.load_verify_locations(cadata=m.ca.decode("ascii", "replace"))
            # ssl loads a pair from files only: the files just read and checked (a rotation that
            # replaces them between the two reads is read again by the next reload)
            ctx.load_cert_chain(self.cert_path, self.key_path)
        except ssl.SSLError as e:
            raise LinkTlsError(f"{self.cert_path} / {self.key_path}: {e.reason or e}") from None
        ctx.set_alpn_protocols(ALPN)
        return ctx

    def describe(self) -> dict:
        c = self.material.certificate
        return {"cert_serial": format(c.serial_number, "x"),
                "cert_not_after": c.not_valid_after_utc.isoformat(),
                "cert_names": sorted(cert_names(c)), "ca_certificates": self.material.ca_count}


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a connection through the front is: the certificate's names, and where it came from."""

    names: frozenset[str]
    address: str


def refusal_reason(e: BaseException) -> str | None:
    """Why a handshake failed, in words; None for a connection closed without a byte (no handshake)."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"certificate refused: {e.verify_message}"
    if isinstance(e, ssl.SSLError):
        reason = e.reason or ""
        if reason in PLAIN_TEXT_REASONS:
            return "plain text on a TLS port (no TLS handshake)"
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "no client certificate presented"
        if reason.startswith("TLSV1_ALERT_") or reason.startswith("SSLV3_ALERT_"):
            alert = reason.split("ALERT_", 1)[1].replace("_", " ").lower()
            return f"{PEER_ENDED} ({alert}): it does not accept this region's certificate"
        if isinstance(e, ssl.SSLEOFError):
            return None
        return f"TLS handshake failed: {reason or e}"
    if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
        return "no TLS handshake in time"
    return None


class TlsFront:
    """The TLS end of a region's gRPC port: handshake, identify, splice to gRPC on loopback.

    The TLS layer is an ``ssl.SSLObject`` over memory buffers driven by a plain protocol
    (not the event loop's ``start_tls``), so every failure is seen here and no byte the peer
    sends before its handshake completes goes anywhere but the TLS layer."""

    def __init__(self, credentials: LinkCredentials, backend_port: int, on_refused: Callable[[str, str], None],
                 on_denied: Callable[[str, str], None], handshake_timeout: float = 10.0) -> None:
        self.credentials = credentials
        self.backend_port = backend_port
        self.on_refused = on_refused  # (peer address, reason): this region refused the peer
        self.on_denied = on_denied    # (peer address, reason): the peer gave up on this region's certificate
        self.handshake_timeout = handshake_timeout
        self.identities: dict[int, Identity] = {}          # loopback port toward gRPC -> who is behind it
        self.connections: set[_TlsConnection] = set()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.get_running_loop().create_server(lambda: _TlsConnection(self), host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    @staticmethod
    def port_of(grpc_peer: str) -> int | None:
        """The loopback port of ``context.peer()`` ('ipv4:127.0.0.1:PORT')."""
        try:
            return int(grpc_peer.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            return None

    def identity(self, grpc_peer: str) -> Identity | None:
        """Who made a gRPC call through the front (None: the call did not come through it)."""
        host = grpc_peer.rsplit(":", 1)[0]
        if host not in ("ipv4:127.0.0.1", "ipv6:[::1]"):
            return None
        port = self.port_of(grpc_peer)
        return None if port is None else self.identities.get(port)

    def drop(self, ports: set[int] | None = None) -> None:
        """Close the connections behind these loopback ports (all: None); the peers connect again."""
        for conn in list(self.connections):
            if ports is None or conn.backend_port in ports:
                conn.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop()


class _Backend(asyncio.Protocol):
    """The loopback connection to the gRPC server, carrying one TLS connection's plain bytes."""

    def __init__(self, front_side: _TlsConnection) -> None:
        self.front_side = front_side
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.front_side.send(data)

    def pause_writing(self) -> None:   # gRPC reads slower than the peer writes: stop reading the peer
        self.front_side.pause_peer()

    def resume_writing(self) -> None:
        self.front_side.resume_peer()

    def connection_lost(self, exc) -> None:
        self.front_side.close()


class _TlsConnection(asyncio.Protocol):
    def __init__(self, front: TlsFront) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.address = "?"
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls: ssl.SSLObject | None = None
        self.handshaken = False
        self.received_any = False
        self.closed = False
        self.backend: _Backend | None = None
        self.backend_port: int | None = None
        self.pending: list[bytes] = []  # plain bytes from the peer before the backend is connected
        self.timer: asyncio.TimerHandle | None = None

    def _session(self) -> ssl.SSLObject:
        """The TLS session: made with the connection, before any data arrives."""
        tls = self.tls
        assert tls is not None, "data before the connection was made"
        return tls

    # ------------------------------------------------------------ the peer's side
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.tls = self.front.credentials.server_context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.front.connections.add(self)
        self.timer = asyncio.get_running_loop().call_later(self.front.handshake_timeout, self._handshake_late)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.received_any = True
        self.incoming.write(data)
        if not self.handshaken:
            try:
                self._session().do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                return
            except (ssl.SSLError, OSError) as e:
                self._flush()  # the alert tells the peer why
                self._refuse(refusal_reason(e) or f"TLS handshake failed: {e}")
                return
            self.handshaken = True
            if self.timer is not None:
                self.timer.cancel()
            self._flush()
            self._connect_backend()
        self._read_plain()

    def _read_plain(self) -> None:
        tls = self._session()
        while True:
            try:
                data = tls.read(SPLICE_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.close()
                return
            except (ssl.SSLError, OSError):
                self.close()
                return
            if not data:
                self.close()
                return
            if self.backend is None or self.backend.transport is None:
                self.pending.append(data)
            else:
                self.backend.transport.write(data)
        self._flush()  # key updates, session tickets

    def send(self, data: bytes) -> None:
        """Plain bytes from gRPC toward the peer."""
        if self.closed:
            return
        try:
            self._session().write(data)
        except (ssl.SSLError, OSError):
            self.close()
            return
        self._flush()

    def _flush(self) -> None:
        out = self.outgoing.read()
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(out)

    def pause_writing(self) -> None:   # the peer reads slower than gRPC writes: stop reading gRPC
        if self.backend is not None and self.backend.transport is not None:
            self.backend.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.backend is not None and self.backend.transport is not None:
            self.backend.transport.resume_reading()

    def pause_peer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_peer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def eof_received(self) -> bool:
        if not self.handshaken and self.received_any:
            self._refuse(f"{PEER_ENDED} (it closed the connection): it may not accept this region's certificate")
        else:
            self.close()
        return False

    def connection_lost(self, exc) -> None:
        self.close()

    # ------------------------------------------------------------ outcome
    def _handshake_late(self) -> None:
        if not self.handshaken and not self.closed:
            if self.received_any:
                self._refuse(f"no TLS handshake within {self.front.handshake_timeout:g} s")
            else:
                self.close()  # connected and said nothing: not a handshake

    def _refuse(self, reason: str) -> None:
        (self.front.on_denied if reason.startswith(PEER_ENDED) else self.front.on_refused)(self.address, reason)
        self.close()

    def _connect_backend(self) -> None:
        names = _peer_names(self._session().getpeercert())
        identity = Identity(frozenset(names), self.address)
        backend = self.backend = _Backend(self)

        async def connect() -> None:
            loop = asyncio.get_running_loop()
            try:
                transport, _ = await loop.create_connection(lambda: backend, "127.0.0.1", self.front.backend_port)
            except OSError as e:
                log.warning("cannot reach this region's gRPC server for %s: %s", self.address, e)
                self.close()
                return
            if self.closed:
                transport.abort()
                return
            self.backend_port = transport.get_extra_info("sockname")[1]
            self.front.identities[self.backend_port] = identity
            for data in self.pending:
                transport.write(data)
            self.pending.clear()

        asyncio.ensure_future(connect())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        self.front.connections.discard(self)
        if self.backend_port is not None:
            self.front.identities.pop(self.backend_port, None)
        if self.transport is not None:
            self.transport.abort()
        if self.backend is not None and self.backend.transport is not None:
            self.backend.transport.abort()


def _peer_names(peercert: dict | None) -> set[str]:
    names: set[str] = set()
    if not peercert:
        return names
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                names.add(value)
    for kind, value in peercert.get("subjectAltName", ()):
        if kind == "DNS":
            names.add(value)
    return names
