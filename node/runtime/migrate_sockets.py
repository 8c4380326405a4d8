"""MIGRATE's connections to other servers: the sockets the asyncio server hands the region core.

The command (node/commands/migrate.py) sees a :class:`~node.commands.migrate.MigrateTransport`;
this is the one the server gives it: Redis's connection cache (one connection per
``host:port`` as written in the command, at most 64, each closed after 10 idle seconds by the
server's cron) whose reads and writes wait, each at most the command's timeout, as Redis's
``syncWrite`` / ``syncReadLine`` do.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time

CACHE_ITEMS = 64        # Redis's MIGRATE_SOCKET_CACHE_ITEMS
CACHE_IDLE_SECONDS = 10  # Redis's MIGRATE_SOCKET_CACHE_TTL
WRITE_CHUNK = 64 * 1024  # the request is written in chunks of this size, each with the whole timeout
LINE_MAX = 1023          # a reply line is read up to this many bytes (Redis's 1024-byte buffers)


class SocketLink:
    """A connection to a target over a non-blocking socket, every operation bounded by the
    command's timeout (Redis's ``syncWrite`` / ``syncReadLine``)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.last_dbid = -1
        self.last_use = time.monotonic()
        self.timed_out = False
        self._in = bytearray()

    def _wait(self, event: int, timeout_ms: float) -> bool:
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, event)
            return bool(sel.select(timeout_ms / 1000))

    def write(self, data: bytes, timeout_ms: int) -> bool:
        self.timed_out = False
        view = memoryview(data)
        for start in range(0, len(view), WRITE_CHUNK):
            chunk = view[start:start + WRITE_CHUNK]
            deadline = time.monotonic() + timeout_ms / 1000
            while chunk:
                try:
                    n = self.sock.send(chunk)
                except (BlockingIOError, InterruptedError):
                    n = 0
                except OSError:
                    return False
                chunk = chunk[n:]
                if chunk:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._wait(selectors.EVENT_WRITE, left * 1000.0):
                        self.timed_out = True
                        return False
        return True

    def read_line(self, timeout_ms: int) -> bytes | None:
        """A line as ``syncReadLine`` reads it: up to LINE_MAX bytes or the newline, a CR
        before it dropped; nothing at all before the newline counts as a failure."""
        self.timed_out = False
        while True:
            nl = self._in.find(b"\n", 0, LINE_MAX + 1)
            if nl >= 0 or len(self._in) >= LINE_MAX:
                end = nl if nl >= 0 else LINE_MAX
                line = bytes(self._in[:end])
                del self._in[:end + 1 if nl >= 0 else end]
                if not line:
                    return None
                return line[:-1] if nl >= 0 and line.endswith(b"\r") else line
            if not self._wait(selectors.EVENT_READ, timeout_ms):
                self.timed_out = True
                return None
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return None
            if not data:
                return None  # the target closed the connection
            self._in += data

    def close(self) -> None:
        self.sock.close()


def _atoi(b: bytes) -> int:
    """C's ``atoi``: leading spaces, a sign, digits, anything after ignored (Redis reads the port so)."""
    s = b.lstrip(b" \t\n\v\f\r")
    sign = 1
    if s[:1] in (b"+", b"-"):
        sign = -1 if s[:1] == b"-" else 1
        s = s[1:]
    n = 0
    for c in s:
        if not 48 <= c <= 57:
            break
        n = n * 10 + c - 48
    return sign * n


class SocketMigrateTransport:
    """Redis's MIGRATE connection cache (``migrateGetSocket``): one connection per
    ``host:port``, at most CACHE_ITEMS (the least recently used goes first when full), closed
    after CACHE_IDLE_SECONDS idle (:meth:`close_idle`, from the server's cron)."""

    def __init__(self) -> None:
        self.links: dict[bytes, SocketLink] = {}

    def link(self, host: bytes, port: bytes, timeout_ms: int) -> SocketLink | None:
        name = host + b":" + port
        cached = self.links.get(name)
        if cached is not None:
            cached.last_use = time.monotonic()
            return cached
        if len(self.links) >= CACHE_ITEMS:
            oldest = min(self.links, key=lambda n: self.links[n].last_use)
            self.links.pop(oldest).close()
        sock = _connect(host, _atoi(port), timeout_ms)
        if sock is None:
            return None
        link = self.links[name] = SocketLink(sock)
        return link

    def close(self, host: bytes, port: bytes) -> None:
        link = self.links.pop(host + b":" + port, None)
        if link is not None:
            link.close()

    def close_idle(self, now: float | None = None) -> int:
        """Close the connections idle for more than CACHE_IDLE_SECONDS; returns how many."""
        now = time.monotonic() if now is None else now
        idle = [n for n, link in self.links.items() if now - link.last_use > CACHE_IDLE_SECONDS]
        for name in idle:
            self.links.pop(name).close()
        return len(idle)

    def close_all(self) -> None:
        for link in self.links.values():
            link.close()
        self.links.clear()


def _connect(host: bytes, port: int, timeout_ms: int) -> socket.socket | None:
    """``connBlockingConnect``: the first address a non-blocking connect starts on, then a wait
    until it is writable.  A refused connection is writable too (the write then fails), as in
    Redis; an address that cannot be resolved, or no answer in time, is None."""
    portstr = str(port)[:5]  # Redis formats it into a 6-byte buffer
    try:
        infos = socket.getaddrinfo(host.decode("utf-8", "surrogateescape"), portstr, socket.AF_UNSPEC,
                                   socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return None
    for family, kind, proto, _, addr in infos:
        try:
            sock = socket.socket(family, kind, proto)
        except OSError:
            continue
        sock.setblocking(False)
        rc = sock.connect_ex(addr)
        if rc not in (0, errno.EINPROGRESS):
            sock.close()
            continue
        with selectors.DefaultSelector() as sel:
            sel.register(sock, selectors.EVENT_WRITE)
            writable = bool(sel.select(timeout_ms / 1000))
        if not writable:
            sock.close()
            return None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        return sock
    return None
