"""Bad input never crashes a region, never changes stored data, and gets Redis's
error (or, for protocol errors, the error and a closed connection, as Redis)."""

from __future__ import annotations

import socket

import pytest

from node.testing import wait_until
from tests.differential import Pair, RawClient


def _raw_exchange(port: int, data: bytes, timeout: float = 10.0) -> tuple[bytes, bool]:
    """Send bytes; return everything read until the server closes or goes quiet."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        s.settimeout(1.0)
        out = b""
        closed = False
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            out += chunk
        return out, closed
    finally:
        s.close()


PROTOCOL_ERRORS = [
    b"*2\r\n$4\r\nECHO\r\n:5\r\n",
    b"*abc\r\n",
    b"*1\r\n$-5\r\n",
    b"*1\r\n$x\r\n",
    b"ECHO \"unbalanced\r\n",
]


@pytest.mark.parametrize("data", PROTOCOL_ERRORS)
def test_protocol_errors_match_redis_and_close(braid_proc, redis_proc, braid, data):
    braid.xadd("keep", {"f": "v"}, id="1-0")
    got, closed = _raw_exchange(braid_proc.port, data)
    want, ref_closed = _raw_exchange(redis_proc.port, data)
    assert got == want and got.startswith(b"-ERR Protocol error")
    assert closed and ref_closed
    assert braid.xrange("keep") == [(b"1-0", {b"f": b"v"})]


def test_errors_keep_the_connection_usable(braid_proc, redis_proc):
    pair = Pair(braid_proc.port, redis_proc.port)
    try:
        pair.check("FLUSHALL")
        for argv in (["NOSUCH", "a", "b"], ["XADD"], ["XRANGE", "s"], ["XADD", "s", "1-2-3", "f", "v"],
                     ["XADD", "s", "18446744073709551616-0", "f", "v"], ["XADD", "s", "-1", "f", "v"],
                     ["XADD", "s", "1" * 200, "f", "v"], ["XRANGE", "s", "-", "+", "COUNT", "-1"],
                     ["XRANGE", "s", "-", "+", "COUNT", "99999999999999999999"],
                     ["XREAD", "COUNT", "-5", "STREAMS", "s", "0"], ["XTRIM", "s", "MAXLEN", "-1"],
                     ["XADD", "s", "MAXLEN", "9999999999999999999", "1-1", "f", "v"],
                     ["XCLAIM", "s", "g", "c", "-1", "1-1"], ["XGROUP", "CREATE", "s", "g", "1-1", "MKSTREAM"],
                     ["XREADGROUP", "GROUP", "g", "c", "COUNT", "99999999999999999999", "STREAMS", "s", ">"],
                     ["XPENDING", "s", "g", "-", "+", "-10"], ["PING"]):
            pair.check(*argv)
    finally:
        pair.close()


def test_bulk_over_proto_max_bulk_len(braid_proc, braid):
    got, closed = _raw_exchange(braid_proc.port, b"*1\r\n$600000000\r\n")
    assert got == b"-ERR Protocol error: invalid bulk length\r\n" and closed
    assert braid.ping()


def test_flood_without_a_complete_command_is_cut_off(braid_proc, braid):
    """A client streaming data that never completes a command is disconnected once
    its query buffer passes client-query-buffer-limit; others keep being served."""
    braid.config_set("client-query-buffer-limit", 1024 * 1024)
    try:
        s = socket.create_connection(("127.0.0.1", braid_proc.port), timeout=10)
        s.sendall(b"*2\r\n$4\r\nECHO\r\n$400000000\r\n")
        chunk = b"x" * 65536
        closed = False
        for _ in range(200):  # at most ~13 MB
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            assert braid.ping()  # the server keeps answering others meanwhile
        if not closed:
            s.settimeout(5)
            try:
                closed = s.recv(1) == b""
            except ConnectionResetError:
                closed = True
        s.close()
        assert closed
        wait_until(lambda: braid.ping(), 5, what="server still serving")
    finally:
        braid.config_set("client-query-buffer-limit", 1024 * 1024 * 1024)


def test_huge_counts_do_not_allocate(braid):
    braid.xadd("h", {"f": "v"}, id="1-0")
    raw_reply = braid.execute_command("XRANGE", "h", "-", "+", "COUNT", str(2**62))
    assert raw_reply == [(b"1-0", {b"f": b"v"})]
    assert braid.xgroup_create("h", "g", id="0")
    # Redis preallocates COUNT slots here (and answers "Insufficient memory" for
    # huge values); Braid allocates per result, so a huge COUNT is simply served.
    reply = braid.execute_command("XAUTOCLAIM", "h", "g", "c", "0", "0", "COUNT", str(2**40))
    assert reply[0] == b"0-0" and reply[1] == []
    with pytest.raises(Exception, match="COUNT must be > 0"):
        braid.execute_command("XAUTOCLAIM", "h", "g", "c", "0", "0", "COUNT", str(2**62))


def test_many_clients_survive_one_bad_one(braid_proc):
    good = [RawClient(braid_proc.port) for _ in range(5)]
    try:
        _raw_exchange(braid_proc.port, b"*1\r\n$abc\r\n")
        assert all(c.call("PING") == b"PONG" for c in good)
    finally:
        for c in good:
            c.close()


def _exchange_until(port: int, data: bytes, end: bytes = b"+PONG\r\n") -> tuple[bytes, bool]:
    """Send bytes; read until the server closes the connection or the reply ends with ``end``."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(data)
        out = b""
        while not out.endswith(end):
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return out, True
            if not chunk:
                return out, True
            out += chunk
        return out, False
    finally:
        s.close()


# Multibulk and bulk lengths at and past Redis's limits; each ends with a PING, so a
# request still waiting for bulks meets "expected '$'" and one that was skipped gets PONG.
LENGTH_LIMITS = [
    b"*2147483648\r\n",
    b"*2147483647\r\nPING\r\n",
    b"*1048577\r\nPING\r\n",
    b"*-5\r\nPING\r\n",
    b"*-2147483649\r\nPING\r\n",
    b"*-9223372036854775808\r\nPING\r\n",
    b"*9223372036854775808\r\n",
    b"*-0\r\nPING\r\n",
    b"*+1\r\nPING\r\n",
    b"*01\r\nPING\r\n",
    b"*1\r\n$536870913\r\n",
    b"*1\r\n$-0\r\n",
    b"*1\r\n$04\r\nPING\r\n",
]


@pytest.mark.parametrize("data", LENGTH_LIMITS)
def test_length_limits_match_redis(braid_proc, redis_proc, data):
    got = _exchange_until(braid_proc.port, data)
    want = _exchange_until(redis_proc.port, data)
    assert got == want
    assert want[0].startswith((b"-ERR Protocol error", b"+PONG"))


@pytest.mark.parametrize("data", [b"*11\r\n", b"*1\r\n$16385\r\n",
                                  b"*1\r\n$4\r\nPING\r\n"])
def test_unauthenticated_limits_match_redis(braid_proc, redis_proc, data):
    """Before AUTH, Redis allows at most 10 arguments and bulks of 16384 bytes."""
    admins = [braid_proc.client(), redis_proc.client()]
    for c in admins:
        c.config_set("requirepass", "secret")
    try:
        got = _exchange_until(braid_proc.port, data, end=b"\r\n")
        want = _exchange_until(redis_proc.port, data, end=b"\r\n")
        assert got == want and want[0].startswith((b"-ERR Protocol error", b"-NOAUTH"))
    finally:
        for c in admins:
            c.execute_command("AUTH", "secret")
            c.config_set("requirepass", "")
            c.close()
