"""TLS on a region's client port, with Redis's settings.

Theory of operation
-------------------
A region may serve RESP on two ports at once: the plain ``port`` (``port 0`` turns it
off; with ``tls-port 0`` too the region refuses to start) and ``tls-port``.  The TLS
port has an accept loop of its own; every accepted socket gets a task that first looks
at its first byte without reading it (a plain-text client is refused at once: OpenSSL
would wait for the rest of a "record"), then hands the socket to
``loop.connect_accepted_socket`` with the context and ``HANDSHAKE_TIMEOUT_S``, which
returns once the handshake is done or raises why it failed.  Only a connection whose
handshake completed becomes a client (:class:`node.runtime.server.ClientConnection`, made by the
factory the server hands :class:`ClientTls`: this module does not import the server), so a
client that sends plain text, stalls mid-handshake or presents a certificate the region
does not accept never reaches the command layer and never holds up another connection.
Each refusal is logged once at WARNING with the peer's address and the reason, and
counted (``INFO stats``, the ``tls_handshake_failures*`` fields, :data:`REASONS`).

The ``ssl.SSLContext`` is built from the settings, with Redis's meaning:

- ``tls-cert-file`` / ``tls-key-file`` (``tls-key-file-pass`` for an encrypted key): what
  the region presents;
- ``tls-ca-cert-file`` / ``tls-ca-cert-dir``: whom it trusts for client certificates;
- ``tls-auth-clients``: ``yes`` (default, as Redis) a client must present a certificate of
  that CA, ``optional`` one it presents is checked, ``no`` none is asked for;
- ``tls-protocols`` ("TLSv1.2 TLSv1.3", the default): the versions accepted (the range from
  the lowest to the highest named);
- ``tls-ciphers`` (TLS 1.2), ``tls-ciphersuites`` (TLS 1.3), ``tls-prefer-server-ciphers``;
- ``tls-session-caching`` with ``tls-session-cache-size`` / ``tls-session-cache-timeout``.

Every file is read and checked before the context is built, so a bad file is reported by
its setting and path.  ``CONFIG SET`` of any ``tls-*`` setting builds a new context first
(:meth:`ClientTls.prepare`); if that fails the reply is Redis's error and nothing
changes, else the new context serves new connections while established ones keep theirs
(:meth:`ClientTls.commit`).  ``CONFIG SET tls-port`` opens the new listener before closing
the old one.

Python's ``ssl`` module has no call for TLS 1.3 cipher suites nor for the server's session
cache size and timeout: those three go to OpenSSL directly (``_OpenSSL`` below, through
the ``SSL_CTX`` the context wraps), after checking that the pointer found is the context's.
"""

from __future__ import annotations

import _ssl
import asyncio
import ctypes
import logging
import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import serialization

if TYPE_CHECKING:
    from node.region.core import RegionCore

log = logging.getLogger("braid.tls")

HANDSHAKE_TIMEOUT_S = 10.0  # a client that has not finished its handshake by then is dropped
CONTEXT_SETTINGS = ("tls-cert-file", "tls-key-file", "tls-key-file-pass", "tls-ca-cert-file", "tls-ca-cert-dir",
                    "tls-auth-clients", "tls-protocols", "tls-ciphers", "tls-ciphersuites",
                    "tls-prefer-server-ciphers", "tls-session-caching", "tls-session-cache-size",
                    "tls-session-cache-timeout")
TLS_SETTINGS = frozenset(CONTEXT_SETTINGS) | {"tls-port"}
FILE_SETTINGS = ("tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-ca-cert-dir")
_PROTOCOLS = {"tlsv1": ssl.TLSVersion.TLSv1, "tlsv1.1": ssl.TLSVersion.TLSv1_1,
              "tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}
UPDATE_FAILED = "Unable to update TLS configuration. Check server logs."  # Redis's CONFIG SET replies
LISTEN_FAILED = "Unable to listen on this port. Check server logs."


class TlsConfigError(ValueError):
    """A TLS setting or file the region cannot use; the message names the setting and file.
    ``setting``/``reply``: what CONFIG SET's error names and says (Redis's words)."""

    def __init__(self, message: str, setting: str | None = None, reply: str = UPDATE_FAILED) -> None:
        super().__init__(message)
        self.setting, self.reply = setting, reply


# ------------------------------------------------------------------ the context
def _read(setting: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsConfigError(f"{setting} {path}: {e.strerror or e}") from None


def _check_certs(setting: str, path: str, data: bytes) -> None:
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TlsConfigError(f"{setting} {path}: not a PEM certificate") from None


def _check_key(path: str, data: bytes, password: str) -> None:
    try:
        serialization.load_pem_private_key(data, password.encode() if password else None)
    except TypeError:  # encrypted without a password given, or a password for a clear key
        need = "is encrypted: set tls-key-file-pass" if not password else "is not encrypted: clear tls-key-file-pass"
        raise TlsConfigError(f"tls-key-file {path} {need}") from None
    except ValueError:
        raise TlsConfigError(f"tls-key-file {path}: not a PEM private key, or tls-key-file-pass is wrong") from None
    except Exception as e:  # cryptography reports some malformed keys with its own errors
        raise TlsConfigError(f"tls-key-file {path}: cannot be read as a private key ({e})") from None


def _protocols(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    names = text.lower().split() or ["tlsv1.2", "tlsv1.3"]
    bad = [n for n in names if n not in _PROTOCOLS]
    if bad:
        raise TlsConfigError(f"tls-protocols: unknown protocol {bad[0]!r} (TLSv1, TLSv1.1, TLSv1.2, TLSv1.3)")
    versions = sorted(_PROTOCOLS[n] for n in names)
    return versions[0], versions[-1]


def build_context(settings) -> ssl.SSLContext:
    """The server context of the TLS port, from a :class:`node.region.config.Config` (or a dict)."""
    cert, key = settings["tls-cert-file"], settings["tls-key-file"]
    password = settings["tls-key-file-pass"]
    cafile, capath = settings["tls-ca-cert-file"], settings["tls-ca-cert-dir"]
    auth = settings["tls-auth-clients"]
    if not cert:
        raise TlsConfigError("tls-port is set but tls-cert-file is not")
    if not key:
        raise TlsConfigError("tls-port is set but tls-key-file is not")
    if auth != "no" and not (cafile or capath):
        raise TlsConfigError("tls-auth-clients is yes or optional: set tls-ca-cert-file or tls-ca-cert-dir")
    _check_certs("tls-cert-file", cert, _read("tls-cert-file", cert))
    _check_key(key, _read("tls-key-file", key), password)
    if cafile:
        _check_certs("tls-ca-cert-file", cafile, _read("tls-ca-cert-file", cafile))
    if capath and not os.path.isdir(capath):
        raise TlsConfigError(f"tls-ca-cert-dir {capath}: not a directory")
    lo, hi = _protocols(settings["tls-protocols"])

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.minimum_version, ctx.maximum_version = lo, hi
    except ValueError as e:
        raise TlsConfigError(f"tls-protocols: {e}") from None
    try:
        ctx.load_cert_chain(cert, key, password=lambda: password.encode())
    except ssl.SSLError as e:
        raise TlsConfigError(f"tls-key-file {key} does not go with tls-cert-file {cert} ({e.reason or e})") from None
    if cafile or capath:
        try:
            ctx.load_verify_locations(cafile=cafile or None, capath=capath or None)
        except (ssl.SSLError, OSError) as e:
            raise TlsConfigError(f"tls-ca-cert-file/tls-ca-cert-dir: {getattr(e, 'reason', None) or e}") from None
    ctx.verify_mode = _VERIFY[auth]
    if settings["tls-ciphers"]:
        try:
            ctx.set_ciphers(settings["tls-ciphers"])
        except ssl.SSLError:
            raise TlsConfigError(f"tls-ciphers: no cipher can be used from {settings['tls-ciphers']!r}") from None
    if settings["tls-prefer-server-ciphers"]:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if settings["tls-ciphersuites"]:
        _OpenSSL.set_ciphersuites(ctx, settings["tls-ciphersuites"])
    if settings["tls-session-caching"]:
        _OpenSSL.session_cache(ctx, int(settings["tls-session-cache-size"]),
                               int(settings["tls-session-cache-timeout"]))
    else:
        ctx.options |= ssl.OP_NO_TICKET
        _OpenSSL.session_cache(ctx, None, 0)
    return ctx


class _OpenSSL:
    """The three OpenSSL calls Python's ``ssl`` module lacks, on the ``SSL_CTX`` of a context."""

    _lib = None
    SSL_CTRL_SET_SESS_CACHE_SIZE = 42
    SSL_CTRL_SET_SESS_CACHE_MODE = 44
    SSL_SESS_CACHE_OFF, SSL_SESS_CACHE_SERVER = 0, 2

    @classmethod
    def _ctx(cls, ctx: ssl.SSLContext) -> tuple[ctypes.CDLL, int]:
        if cls._lib is None:
            lib = ctypes.CDLL(_ssl.__file__)  # resolves libssl's symbols through _ssl's own dependencies
            lib.SSL_CTX_get_options.restype = ctypes.c_uint64
            lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
            lib.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            lib.SSL_CTX_ctrl.restype = ctypes.c_long
            lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
            lib.SSL_CTX_set_timeout.restype = ctypes.c_long
            lib.SSL_CTX_set_timeout.argtypes = [ctypes.c_void_p, ctypes.c_long]
            cls._lib = lib
        # CPython's context object: the object header, then the SSL_CTX pointer
        ptr = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
        if not ptr or cls._lib.SSL_CTX_get_options(ptr) != ctx.options:
            raise TlsConfigError("this Python's ssl module does not expose its OpenSSL context: "
                                 "tls-ciphersuites and the session cache settings cannot be applied")
        return cls._lib, ptr

    @classmethod
    def set_ciphersuites(cls, ctx: ssl.SSLContext, suites: str) -> None:
        lib, ptr = cls._ctx(ctx)
        if lib.SSL_CTX_set_ciphersuites(ptr, suites.encode()) != 1:
            raise TlsConfigError(f"tls-ciphersuites: invalid TLS 1.3 cipher suites {suites!r}")

    @classmethod
    def session_cache(cls, ctx: ssl.SSLContext, size: int | None, timeout: int) -> None:
        lib, ptr = cls._ctx(ctx)
        if size is None:
            lib.SSL_CTX_ctrl(ptr, cls.SSL_CTRL_SET_SESS_CACHE_MODE, cls.SSL_SESS_CACHE_OFF, None)
            return
        lib.SSL_CTX_ctrl(ptr, cls.SSL_CTRL_SET_SESS_CACHE_MODE, cls.SSL_SESS_CACHE_SERVER, None)
        lib.SSL_CTX_ctrl(ptr, cls.SSL_CTRL_SET_SESS_CACHE_SIZE, size, None)
        lib.SSL_CTX_set_timeout(ptr, timeout)


# ------------------------------------------------------------------ refusals
# why a handshake failed -> the INFO field that counts it (docs/security.md: "TLS for clients");
# plain text is told by the connection's first byte, before OpenSSL sees it (_first_byte)
REASONS = ("plaintext", "no_client_cert", "unknown_ca", "expired_cert", "bad_cert", "timeout", "other")
_X509_EXPIRED = (9, 10)  # not yet valid, expired
_X509_UNKNOWN_ISSUER = (2, 18, 19, 20, 21)  # no issuer certificate / self-signed / not in the trusted CAs


def classify(exc: BaseException) -> tuple[str, str]:
    """(the counter, a sentence for the log) for a failed handshake."""
    if isinstance(exc, _NotTls):
        return ("other" if exc.closed else "plaintext"), str(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        kind = ("expired_cert" if code in _X509_EXPIRED else
                "unknown_ca" if code in _X509_UNKNOWN_ISSUER else "bad_cert")
        return kind, f"client certificate refused: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or ""
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "no_client_cert", "the client presented no certificate (tls-auth-clients yes)"
        if "CERTIFICATE" in reason:
            return "bad_cert", f"client certificate refused: {reason}"
        return "other", f"handshake failed: {reason or exc}"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or "taking longer" in str(exc):
        return "timeout", f"no complete handshake within {HANDSHAKE_TIMEOUT_S:g}s"
    return "other", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass(slots=True)
class TlsStats:
    handshakes: int = 0  # completed
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))

    def info(self) -> list[str]:
        """``INFO stats`` fields (docs/security.md: "TLS for clients")."""
        return ([f"tls_handshakes:{self.handshakes}", f"tls_handshake_failures:{sum(self.failures.values())}"]
                + [f"tls_handshake_failures_{k}:{n}" for k, n in self.failures.items()])


# ------------------------------------------------------------------ the listener
@dataclass(slots=True)
class _Change:
    context: ssl.SSLContext | None  # None: TLS off (tls-port 0)
    sock: socket.socket | None      # a new listening socket (tls-port changed), else None
    port: int


class ClientTls:
    """The TLS port of one region: its listener, context and counters.

    The listener is an accept loop of its own (not ``create_server(ssl=...)``, which hides
    why a handshake failed): each accepted socket gets a task that looks at its first byte
    (:func:`_first_byte`) and then hands it to ``loop.connect_accepted_socket`` with the
    context, which raises when the handshake fails or takes longer than the timeout."""

    def __init__(self, server: RegionCore, new_client: Callable[[], asyncio.Protocol]) -> None:
        """``server``: the region (its ``config``, its supervisor); ``new_client``: makes the protocol of one
        client whose handshake completed (node/runtime/server.py's ``ClientConnection``)."""
        self.server = server
        self.new_client = new_client
        self.context: ssl.SSLContext | None = None
        self.port = 0
        self.host = "127.0.0.1"
        self.stats = TlsStats()
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._handshakes: set[asyncio.Task] = set()

    @property
    def config(self):
        return self.server.config

    def check(self) -> None:
        """Build the context now if TLS is on: a bad setting or file raises TlsConfigError."""
        if int(self.config["tls-port"]):
            self.context = build_context(self.config)

    async def start(self, host: str, plain: bool = True) -> None:
        """Listen on tls-port (nothing when it is 0).  ``plain``: the plain port serves (else,
        with tls-port 0 too, the region would not listen anywhere: an OSError, as Redis exits)."""
        self.host = host
        port = int(self.config["tls-port"])
        if not port and not plain:
            raise OSError(0, "port 0 and tls-port 0: configured to not listen anywhere")
        if not port:
            return
        if self.context is None:
            self.context = build_context(self.config)
        self._listen(self._bind(host, port))

    def _bind(self, host: str, port: int) -> socket.socket:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _name, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(511)
        except OSError as e:
            sock.close()
            raise OSError(e.errno, f"tls-port {port}: {e.strerror}") from None
        sock.setblocking(False)
        return sock

    def _listen(self, sock: socket.socket) -> None:
        self._sock = sock
        self.port = sock.getsockname()[1]
        self.config.set("tls-port", self.port)
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(sock))
        self.server.supervisor.watch(self._accepting, "tls-accept")
        log.info("TLS client port listening on %s:%d", self.host, self.port)

    async def _accept_loop(self, lsock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(lsock)
            except OSError as e:  # out of descriptors, a connection reset while queued: keep serving
                log.warning("TLS port: accept failed: %s", e.strerror or e)
                await asyncio.sleep(0.1)  # pace retries while descriptors are short, as Redis does
                continue
            task = loop.create_task(self._handshake(conn, peer))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def close(self) -> None:
        """Stop accepting (fail-stop, shutdown, tls-port changed); handshakes under way are dropped."""
        sock, self._sock = self._sock, None
        if self._accepting is not None:  # the socket closes once the accept waiting on it is gone
            if sock is not None:  # (it is: _listen sets both)
                self._accepting.add_done_callback(lambda _t: sock.close())
            self._accepting.cancel()
            self._accepting = None
        elif sock is not None:
            sock.close()
        for task in list(self._handshakes):
            task.cancel()
        self.port = 0

    async def stop(self) -> None:
        tasks = list(self._handshakes) + ([self._accepting] if self._accepting is not None else [])
        self.close()
        if tasks:
            await asyncio.wait(tasks)

    def info_stats(self) -> list[str]:
        return self.stats.info()

    # ------------------------------------------------------------ one connection
    async def _handshake(self, conn: socket.socket, peer) -> None:
        addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        context = self.context
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        try:
            if context is None:
                raise ConnectionError("TLS is off")
            first = await _first_byte(conn)
            if first != _TLS_HANDSHAKE_RECORD:
                raise _NotTls(first)
            # the client is made by the TLS layer once the handshake is done
            await loop.connect_accepted_socket(self.new_client, conn, ssl=context,
                                               ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except asyncio.CancelledError:
            conn.close()
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is a refusal of this one connection
            conn.close()
            kind, why = classify(exc)
            self.stats.failures[kind] += 1
            log.warning("TLS client %s refused: %s", addr, why)
            return
        self.stats.handshakes += 1

    # ------------------------------------------------------------ CONFIG SET
    def prepare(self, staged: dict[str, object]) -> _Change | None:
        """What a CONFIG SET of tls-* settings would serve with; ``TlsConfigError`` (logged) if it
        cannot, and then nothing has changed.  None when no TLS setting is staged."""
        if not TLS_SETTINGS.intersection(staged):
            return None
        values = {name: staged.get(name, self.config[name]) for name in TLS_SETTINGS}
        port = values["tls-port"]
        assert isinstance(port, int)  # Config.set and Config.parse make it an int
        try:
            context = build_context(values) if port else None
        except TlsConfigError as e:
            log.warning("CONFIG SET refused, the TLS settings in use are kept: %s", e)
            raise
        sock = None
        if port and (port != self.port or self._sock is None):
            try:
                sock = self._bind(self.host, port)
            except OSError as e:
                log.warning("CONFIG SET refused: cannot listen on %s: %s", self.host, e.strerror)
                raise TlsConfigError(str(e.strerror), "tls-port", LISTEN_FAILED) from None
        return _Change(context, sock, port)

    def commit(self, change: _Change) -> None:
        """Serve with what :meth:`prepare` built: new connections get the new context, the
        established ones keep theirs."""
        if change.context is None or change.sock is not None:
            self.close()
        self.context = change.context
        if change.sock is not None:
            self._listen(change.sock)
        log.info("TLS settings changed: new connections on the TLS port use them")


_TLS_HANDSHAKE_RECORD = b"\x16"  # every TLS connection opens with a handshake record (ClientHello)


class _NotTls(Exception):
    def __init__(self, first: bytes) -> None:
        super().__init__("the connection closed before the handshake" if not first else
                         f"not a TLS client: its first byte is {first!r} (plain text on the TLS port?)")
        self.closed = not first


async def _first_byte(conn: socket.socket) -> bytes:
    """The connection's first byte, left unread for the TLS layer (b"" if it closed first).

    OpenSSL would take a plain-text command's first bytes for a record header and wait for
    the rest of a record that never comes: looking first refuses such a client at once."""
    loop = asyncio.get_running_loop()
    readable = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), ready)
    try:
        await asyncio.wait_for(readable, HANDSHAKE_TIMEOUT_S)
    finally:
        loop.remove_reader(conn.fileno())
    try:
        return conn.recv(1, socket.MSG_PEEK)
    except OSError:
        return b""
