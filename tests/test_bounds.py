"""Memory a client or a peer can make a region hold has a bound, and the
once-a-second work does not grow with the data (each test failed before its fix)."""

from __future__ import annotations

import socket

import pytest


MB = 1024 * 1024


def _flood(port: int, first: bytes, chunk: bytes, max_bytes: int) -> tuple[bool, int]:
    """Send ``first``, then ``chunk`` until the server closes the connection or
    ``max_bytes`` were sent; (closed, bytes sent).  Replies are read and dropped."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sent = 0
    try:
        s.sendall(first)
        while sent < max_bytes:
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                return True, sent
            sent += len(chunk)
            s.setblocking(False)
            try:
                while s.recv(1 << 20):
                    pass
                return True, sent  # recv returned b"": closed
            except BlockingIOError:
                pass
            except ConnectionResetError:
                return True, sent
            finally:
                s.setblocking(True)
        s.shutdown(socket.SHUT_WR)  # the server answers what it holds, or has closed already
        s.settimeout(10)
        try:
            while s.recv(1 << 20):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
        return False, sent
    finally:
        s.close()


@pytest.fixture
def small_query_limit(braid_proc):
    clients = [braid_proc.client()]
    for c in clients:
        c.config_set("client-query-buffer-limit", MB)
    yield
    for c in clients:
        c.config_set("client-query-buffer-limit", 1024 * MB)
        c.close()


def test_endless_small_bulks_are_cut_off(braid_proc, braid, small_query_limit):
    """``*2147483647`` then one-byte bulks for ever: the parsed arguments count
    against client-query-buffer-limit.  (Redis 7 counts only its buffer and grows
    its argument array without a bound; before, Braid did too.)"""
    closed, sent = _flood(braid_proc.port, b"*2147483647\r\n", b"$1\r\na\r\n" * 10000, 64 * MB)
    assert closed, f"still connected after {sent} bytes of one command"
    assert braid.ping()


def test_multi_queue_counts_against_the_query_buffer_limit(braid_proc, braid, small_query_limit):
    """Commands queued by MULTI count against client-query-buffer-limit, as in the
    Redis releases Braid follows (``mstate.argv_len_sums``; Debian's 7.0 does not)."""
    command = b"*2\r\n$4\r\nECHO\r\n$1000\r\n" + b"x" * 1000 + b"\r\n"
    closed, sent = _flood(braid_proc.port, b"*1\r\n$5\r\nMULTI\r\n", command * 64, 64 * MB)
    assert closed, f"still connected after queueing {sent} bytes"
    assert braid.ping()
    assert braid.info("stats")["client_query_buffer_limit_disconnections"] >= 1
