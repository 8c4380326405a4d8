"""Sans-IO parser for client requests (the RESP request grammar).

Theory of operation
-------------------
Bytes go in with :meth:`RequestParser.feed`; complete commands (lists of
``bytes`` arguments) come out of :meth:`RequestParser.next_command`, which
returns ``None`` while a command is still incomplete.  No sockets, no asyncio:
tests feed it one byte at a time.

A request is either a multibulk (``*<n>\\r\\n`` then ``n`` bulk strings
``$<len>\\r\\n<bytes>\\r\\n``) or an *inline* command (a text line split on
spaces, with Redis's quoting rules).  Clients' reply parsers such as hiredis
accept a different grammar (nested types, nulls) and do not enforce a server's
limits, so this is a small parser of its own that reproduces
``processMultibulkBuffer`` / ``processInlineBuffer`` of Redis's
``networking.c``: the same limits, the same ``Protocol error: ...`` texts.
After a :class:`ProtocolError` the server replies with the error and closes
the connection, as Redis does.

Memory: :attr:`RequestParser.pending_bytes` is what the command being
assembled holds - the arguments already parsed out of the buffer (their bytes
plus :data:`ARG_OVERHEAD` each) and the bytes still buffered.  The server
closes a client whose ``pending_bytes`` (plus its queued MULTI commands) passes
``client-query-buffer-limit``.  Redis counts only its query buffer (and the
MULTI queue), so a ``*2147483647`` followed by endless one-byte bulks grows its
argument array without a bound; Braid counts the parsed arguments too.  While
``auth_required()`` says the client has not authenticated, Redis's tighter
limits apply: at most 10 arguments and bulks of at most 16384 bytes
(``Protocol error: unauthenticated multibulk length`` / ``bulk length``).

Parsing in C
------------
:class:`HiredisRequestParser` (what the server uses) has the same interface and
gives the same commands and errors; it parses well-formed multibulk requests with
``hiredis.Reader`` (a RESP reply parser in C) and leaves everything else to the
Python parser above, which stays the authority:

- At a command boundary whose first byte is ``*``, up to :data:`NATIVE_CHUNK`
  buffered bytes are handed to the reader, and ``gets()`` is called in a loop: every
  complete command of a pipelined read comes out in one go and waits in a queue.
- The reader accepts more than Redis does (nested arrays, ``+``/``:``/``=``...
  elements, nulls), so each reply is checked against the bytes: it must be a
  non-empty list of ``bytes`` whose canonical encoding (``*<n>``, then ``$<len>``
  before each argument) has a ``$`` at every place an argument starts.  hiredis
  reads numbers as strictly as Redis (no sign, no leading zero, no space), so the
  command then occupies exactly its canonical length and Redis would read the same
  arguments from the same bytes; the next command starts there.
- hiredis allocates a list as soon as it reads an aggregate's count, whatever
  follows: the bytes handed over stop before the first ``*``, ``~``, ``>`` or ``|``
  followed by four digits (a count of 1000 or more, or data that looks like one).
- Limits are checked when a queued command is handed out, against the client's
  state at that moment (an AUTH earlier in the same pipeline counts), as the Python
  parser checks them when it reads each length.
- Anything else - an incomplete command, a reply that fails the check, a hiredis
  error, a limit the command breaks, a first byte other than ``*`` - goes to the
  Python parser from the first byte of that command, which reads it (and raises the
  protocol error Redis would).  The buffer and ``pending_bytes`` stay the Python
  parser's: a queued command stays in the buffer until it is handed out.
"""

from __future__ import annotations

import re
import sys
from collections import deque
from collections.abc import Callable

import hiredis

from crdt.ids import string2ll

INLINE_MAX = 64 * 1024  # PROTO_INLINE_MAX_SIZE
MBULK_BIG_ARG = 32 * 1024
INT_MAX = (1 << 31) - 1
UNAUTH_MAX_ARGS = 10        # an unauthenticated client's multibulk count (Redis's authRequired checks)
UNAUTH_MAX_BULK = 16 * 1024  # and bulk length
# what one parsed argument costs beyond its bytes: a bytes object's header and its list slot
ARG_OVERHEAD = sys.getsizeof(b"") + 8


def _length(b: bytes) -> int | None:
    """A length line's number; the common case without calling string2ll."""
    if b.isdigit() and len(b) < 19 and (b[0] != 0x30 or len(b) == 1):
        return int(b)
    return string2ll(b)


class ProtocolError(Exception):
    """The reply text (without the ``ERR`` prefix) is ``str(error)``."""


class RequestParser:
    __slots__ = ("buf", "pos", "max_bulk_len", "auth_required", "_argv", "_remaining", "_argv_bytes")

    def __init__(self, max_bulk_len: int = 512 * 1024 * 1024,
                 auth_required: Callable[[], bool] | None = None) -> None:
        self.buf: bytes | bytearray = b""
        self.pos = 0
        self.max_bulk_len = max_bulk_len
        self.auth_required = auth_required  # asked when a length is read: the unauthenticated limits apply
        self._argv: list[bytes] | None = None  # multibulk being read
        self._remaining = 0
        self._argv_bytes = 0  # what the arguments parsed into _argv hold (see pending_bytes)

    def feed(self, data: bytes) -> None:
        # Common case: nothing left over, so parse the received bytes object
        # itself (slices of bytes are bytes: no copies).  Leftovers move into a
        # bytearray that grows in place, so a slow large upload stays linear.
        buf = self.buf
        if self.pos >= len(buf):
            self.buf = data
        elif type(buf) is bytearray:
            if self.pos and self.pos >= len(buf) // 2:
                del buf[: self.pos]
                self.pos = 0
            buf += data
            return
        else:
            rest = bytearray(memoryview(buf)[self.pos:])
            rest += data
            self.buf = rest
        self.pos = 0

    @property
    def buffered(self) -> int:
        return len(self.buf) - self.pos

    @property
    def pending_bytes(self) -> int:
        """Memory the command being assembled holds: its parsed arguments and the buffer."""
        return len(self.buf) - self.pos + self._argv_bytes

    def next_command(self) -> list[bytes] | None:
        """The next complete command, or None if more bytes are needed."""
        while True:
            if self._argv is None:
                if self.pos >= len(self.buf):
                    return None
                if self.buf[self.pos] == 0x2A:  # '*'
                    n = self._read_count()
                    if n is None:
                        return None
                    if n <= 0:
                        continue  # empty multibulk: skipped, as Redis does
                    self._argv = []
                    self._remaining = n
                else:
                    argv = self._read_inline()
                    if argv is None:
                        return None
                    if not argv:
                        continue
                    return argv
            if not self._read_bulks():
                return None
            argv, self._argv = self._argv, None
            self._argv_bytes = 0
            return argv

    # ------------------------------------------------------------ multibulk
    def _read_count(self) -> int | None:
        buf, pos = self.buf, self.pos
        nl = buf.find(b"\r", pos)
        if nl < 0 or nl + 1 >= len(buf):
            if len(buf) - pos > INLINE_MAX:
                raise ProtocolError("Protocol error: too big mbulk count string")
            return None
        n = _length(bytes(buf[pos + 1 : nl]))
        if n is None or n > INT_MAX:
            raise ProtocolError("Protocol error: invalid multibulk length")
        if n > UNAUTH_MAX_ARGS and self.auth_required is not None and self.auth_required():
            raise ProtocolError("Protocol error: unauthenticated multibulk length")
        self.pos = nl + 2
        return n

    def _read_bulks(self) -> bool:
        buf = self.buf
        copy = type(buf) is bytearray  # slices of a bytearray must become bytes
        argv = self._argv
        assert argv is not None
        size = len(buf)
        pos = self.pos
        remaining = self._remaining
        held = self._argv_bytes
        while remaining:
            if pos >= size:
                break
            if buf[pos] != 0x24:  # '$'
                self.pos, self._remaining = pos, remaining
                raise ProtocolError(f"Protocol error: expected '$', got '{chr(buf[pos])}'")
            nl = buf.find(b"\r", pos)
            if nl < 0 or nl + 1 >= size:
                if size - pos > INLINE_MAX:
                    raise ProtocolError("Protocol error: too big bulk count string")
                break
            digits = buf[pos + 1 : nl]
            if digits.isdigit() and len(digits) < 19 and (digits[0] != 0x30 or len(digits) == 1):
                n = int(digits)
            else:
                parsed = string2ll(bytes(digits))
                if parsed is None or parsed < 0:
                    raise ProtocolError("Protocol error: invalid bulk length")
                n = parsed
            if n > self.max_bulk_len:
                raise ProtocolError("Protocol error: invalid bulk length")
            if n > UNAUTH_MAX_BULK and self.auth_required is not None and self.auth_required():
                raise ProtocolError("Protocol error: unauthenticated bulk length")
            start = nl + 2
            end = start + n
            if end + 2 > size:
                break
            argv.append(bytes(buf[start:end]) if copy else buf[start:end])  # type: ignore[arg-type]
            held += n + ARG_OVERHEAD
            pos = end + 2
            remaining -= 1
        self.pos, self._remaining, self._argv_bytes = pos, remaining, held
        return not remaining

    # ------------------------------------------------------------ inline
    def _read_inline(self) -> list[bytes] | None:
        buf, pos = self.buf, self.pos
        nl = buf.find(b"\n", pos)
        if nl < 0:
            if len(buf) - pos > INLINE_MAX:
                raise ProtocolError("Protocol error: too big inline request")
            return None
        line = bytes(buf[pos:nl])
        if line.endswith(b"\r"):
            line = line[:-1]
        self.pos = nl + 1
        argv = split_args(line)
        if argv is None:
            raise ProtocolError("Protocol error: unbalanced quotes in request")
        return argv


_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_SPACE = b" \n\r\t\0\x0b\x0c"
_HEX = b"0123456789abcdefABCDEF"


def split_args(line: bytes) -> list[bytes] | None:
    """Redis's ``sdssplitargs``: None when quotes are unbalanced."""
    out: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return out
        cur = bytearray()
        inq = insq = False
        while True:
            if inq:
                if i >= n:
                    return None
                c = line[i]
                if (c == 0x5C and i + 3 < n and line[i + 1] == 0x78
                        and line[i + 2] in _HEX and line[i + 3] in _HEX):
                    cur.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == 0x5C and i + 1 < n:
                    i += 1
                    cur.append(_ESCAPES.get(line[i], line[i]))
                elif c == 0x22:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            elif insq:
                if i >= n:
                    return None
                c = line[i]
                if c == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    i += 1
                    cur.append(0x27)
                elif c == 0x27:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            else:
                if i >= n:
                    break
                c = line[i]
                if c in _SPACE:
                    break
                if c == 0x22:
                    inq = True
                elif c == 0x27:
                    insq = True
                else:
                    cur.append(c)
            i += 1
        out.append(bytes(cur))


# ------------------------------------------------------------------ parsing in C
NATIVE_CHUNK = 64 * 1024  # the most bytes handed to hiredis at once (bounds its copy and the queue)
# An aggregate count of four digits or more: hiredis would allocate a list that large
# before reading any element, so the bytes handed to it stop before one (see above).  The
# bytes are searched with every aggregate type byte (``*~>|``) turned into ``*``: a pattern
# that starts with one literal byte is scanned for four times faster than a class of four
# (a pipelined read of sixteen XADDs: 1.4 against 5.6 us).
_AGGREGATE_AS_STAR = bytes.maketrans(b"~>|", b"***")
_LARGE_COUNT = re.compile(rb"\*[0-9]{4}").search


def _large_aggregate(buf: bytes | bytearray, start: int, end: int) -> int:
    """Where in ``buf[start:end]`` the first aggregate header with a count of four digits or
    more starts (``[*~>|][0-9]{4}``), or -1."""
    whole = start == 0 and end == len(buf)
    m = _LARGE_COUNT(buf.translate(_AGGREGATE_AS_STAR) if whole else buf[start:end].translate(_AGGREGATE_AS_STAR))
    return -1 if m is None else start + m.start()

_READER_KEEP = 16 * 1024  # a reader fed more than this is replaced by a new, empty one
_BULK_TABLE = 1 << 14
# bytes a bulk argument of each length occupies: ``$<len>\r\n<bytes>\r\n``
_BULK_SIZE = [len(b"$%d\r\n\r\n" % n) + n for n in range(_BULK_TABLE)]


class HiredisRequestParser(RequestParser):
    """:class:`RequestParser` with well-formed multibulk requests parsed in C (see the module doc)."""

    __slots__ = ("_reader", "_ready", "_native_stop")

    def __init__(self, max_bulk_len: int = 512 * 1024 * 1024,
                 auth_required: Callable[[], bool] | None = None) -> None:
        super().__init__(max_bulk_len, auth_required)
        self._reader = hiredis.Reader()
        self._ready: deque[tuple[list[bytes], int]] = deque()  # parsed ahead: (argv, bytes it occupies)
        self._native_stop = -1  # where the C path stopped: the Python parser reads the command there

    def feed(self, data: bytes) -> None:
        super().feed(data)  # appends: queued commands keep their bytes, relative to pos
        self._native_stop = -1

    def next_command(self) -> list[bytes] | None:
        ready = self._ready
        if not ready and self._argv is None and self.pos != self._native_stop:
            buf = self.buf
            if self.pos < len(buf) and buf[self.pos] == 0x2A:  # '*'
                self._parse_ahead()
        if ready:
            argv, size = ready.popleft()
            if (size <= UNAUTH_MAX_BULK and size <= self.max_bulk_len and len(argv) <= UNAUTH_MAX_ARGS) \
                    or not self._over_limits(argv):
                self.pos += size
                return argv
            # the Python parser reads this command again and raises the error it breaks
            ready.clear()
            self._native_stop = self.pos
        return super().next_command()

    def _over_limits(self, argv: list[bytes]) -> bool:
        """Whether the Python parser would refuse ``argv`` (the limits it checks as it reads)."""
        longest = max(map(len, argv))
        if longest > self.max_bulk_len:
            return True
        auth_required = self.auth_required
        return bool(auth_required is not None and (len(argv) > UNAUTH_MAX_ARGS or longest > UNAUTH_MAX_BULK)
                    and auth_required())

    def _parse_ahead(self) -> None:
        """Queue the complete, well-formed commands at the start of the buffer (parsed by hiredis)."""
        buf, start = self.buf, self.pos
        end = len(buf)
        if end - start > NATIVE_CHUNK:
            end = start + NATIVE_CHUNK
        hazard = _large_aggregate(buf, start, end)
        if hazard >= 0:
            end = hazard
        pos = start
        if end > start:
            reader = self._reader
            ready = self._ready
            if start == 0 and end == len(buf):
                reader.feed(buf)  # type: ignore[arg-type]  # a whole read (hiredis takes any buffer; its stub says bytes)
            else:
                reader.feed(buf, start, end - start)  # type: ignore[arg-type]
            try:
                while pos < end:
                    argv = reader.gets()
                    if type(argv) is not list or not argv or buf[pos] != 0x2A:
                        break
                    n = len(argv)
                    p = pos + (4 if n < 10 else 5 if n < 100 else 6)  # "*<n>\r\n" (n < 1000: see hazard)
                    for arg in argv:
                        # an argument starts at p: it must be a bulk string read from there
                        if buf[p] != 0x24 or type(arg) is not bytes:
                            break
                        k = len(arg)
                        p += _BULK_SIZE[k] if k < _BULK_TABLE else k + len(str(k)) + 5
                    else:
                        ready.append((argv, p - pos))
                        pos = p
                        continue
                    break
            except Exception:  # noqa: BLE001 - hiredis refused the bytes: the Python parser decides
                pass
            if pos != end or end - start > _READER_KEEP:
                # it holds a partial or refused reply, or a buffer as large as the bytes fed
                # (kept until its next feed: an idle client would hold it)
                self._reader = hiredis.Reader()
        if pos < end or hazard >= 0:
            self._native_stop = pos
