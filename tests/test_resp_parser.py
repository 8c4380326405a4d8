"""The sans-IO request parser, fed whole, in random chunks and one byte at a time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.resp.parser import ARG_OVERHEAD, ProtocolError, RequestParser, split_args


def parse_all(data: bytes, chunks: list[int] | None = None, **kw) -> list[list[bytes]]:
    p = RequestParser(**kw)
    out: list[list[bytes]] = []
    pieces = []
    if chunks is None:
        pieces = [data[i:i + 1] for i in range(len(data))]
    else:
        i = 0
        for n in chunks:
            pieces.append(data[i:i + n])
            i += n
        pieces.append(data[i:])
    for piece in pieces:
        p.feed(piece)
        while (cmd := p.next_command()) is not None:
            out.append(cmd)
    return out


def encode(argv: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in argv)


def test_multibulk_one_byte_at_a_time():
    data = encode([b"XADD", b"s", b"*", b"f", b"v\r\nwith crlf"]) + encode([b"PING"])
    assert parse_all(data) == [[b"XADD", b"s", b"*", b"f", b"v\r\nwith crlf"], [b"PING"]]


def test_incomplete_command_waits():
    p = RequestParser()
    p.feed(b"*2\r\n$4\r\nECHO\r\n$5\r\nhel")
    assert p.next_command() is None
    p.feed(b"lo\r\n")
    assert p.next_command() == [b"ECHO", b"hello"]
    assert p.next_command() is None


def test_empty_multibulk_is_skipped():
    assert parse_all(b"*0\r\n*-1\r\n" + encode([b"PING"])) == [[b"PING"]]


def test_inline_commands():
    assert parse_all(b"PING\r\nSET a b\n\r\n   \r\nECHO \"a b\\n\" 'c d'\r\n") == [
        [b"PING"], [b"SET", b"a", b"b"], [b"ECHO", b"a b\n", b"c d"]]


@pytest.mark.parametrize("line,expected", [
    (b'"\\x41\\x4a" x', [b"AJ", b"x"]),
    (b"'it\\'s'", [b"it's"]),
    (b'"tab\\there"', [b"tab\there"]),
    (b'""', [b""]),
    (b"a\tb", [b"a", b"b"]),
    (b'"unbalanced', None),
    (b"'unbalanced", None),
    (b'"closing"x', None),
    (b"'closing'x", None),
])
def test_split_args_follows_redis(line, expected):
    assert split_args(line) == expected


@pytest.mark.parametrize("data,error", [
    (b"*2\r\n$4\r\nECHO\r\n:5\r\n", "Protocol error: expected '$', got ':'"),
    (b"*abc\r\n", "Protocol error: invalid multibulk length"),
    (b"*3000000000\r\n", "Protocol error: invalid multibulk length"),
    (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n$abc\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n$600000000\r\n", "Protocol error: invalid bulk length"),
    (b"ECHO \"oops\r\n", "Protocol error: unbalanced quotes in request"),
])
def test_protocol_errors(data, error):
    with pytest.raises(ProtocolError) as e:
        parse_all(data)
    assert str(e.value) == error


def test_bulk_over_configured_limit():
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        parse_all(b"*1\r\n$2000000\r\n", chunks=[100], max_bulk_len=1024 * 1024)


@pytest.mark.parametrize("prefix,error", [
    (b"", "Protocol error: too big inline request"),
    (b"*", "Protocol error: too big mbulk count string"),
    (b"*1\r\n$", "Protocol error: too big bulk count string"),
])
def test_unterminated_lines_are_bounded(prefix, error):
    p = RequestParser()
    p.feed(prefix + b"1" * (70 * 1024))
    with pytest.raises(ProtocolError) as e:
        p.next_command()
    assert str(e.value) == error


args = st.lists(st.binary(max_size=40), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(cmds=st.lists(args, min_size=1, max_size=5), cuts=st.lists(st.integers(0, 30), max_size=30))
def test_any_chunking_gives_the_same_commands(cmds, cuts):
    data = b"".join(encode(c) for c in cmds)
    assert parse_all(data, chunks=cuts) == cmds
    assert parse_all(data) == cmds


def test_parsed_arguments_count_as_pending_bytes():
    """A huge multibulk count followed by small bulks: the arguments already parsed out
    of the buffer count against the client's query-buffer limit (pending_bytes)."""
    p = RequestParser()
    data = b"*2147483647\r\n" + b"$1\r\na\r\n" * 1000
    for i in range(len(data)):
        p.feed(data[i:i + 1])
        assert p.next_command() is None
    assert p.buffered == 0
    assert p.pending_bytes == 1000 * (1 + ARG_OVERHEAD)
    p.feed(b"$3\r\nab")  # a partial bulk: its buffered bytes count too
    assert p.next_command() is None
    assert p.pending_bytes == 1000 * (1 + ARG_OVERHEAD) + 6


def test_pending_bytes_drop_when_a_command_completes():
    p = RequestParser()
    data = encode([b"ECHO", b"x" * 100]) + b"*2\r\n$4\r\nECHO\r\n"
    for i in range(len(data)):
        p.feed(data[i:i + 1])
        cmd = p.next_command()
        if cmd is not None:
            assert cmd == [b"ECHO", b"x" * 100]
            assert p.pending_bytes == 0
    assert p.pending_bytes == 4 + ARG_OVERHEAD


@pytest.mark.parametrize("data,error", [
    (b"*11\r\n", "Protocol error: unauthenticated multibulk length"),
    (b"*1\r\n$16385\r\n", "Protocol error: unauthenticated bulk length"),
    (b"*3000000000\r\n", "Protocol error: invalid multibulk length"),  # checked first, as in Redis
])
def test_unauthenticated_limits(data, error):
    with pytest.raises(ProtocolError) as e:
        parse_all(data, auth_required=lambda: True)
    assert str(e.value) == error
    if "unauthenticated" in error:  # an authenticated client: just an incomplete command
        assert parse_all(data, auth_required=lambda: False) == []


def test_unauthenticated_limits_follow_the_client_state():
    """AUTH pipelined before a large command: the limit is asked when the length is read."""
    authed = [False]
    p = RequestParser(auth_required=lambda: not authed[0])
    p.feed(encode([b"AUTH", b"pw"]) + encode([b"ECHO", b"x" * 20000]))
    assert p.next_command() == [b"AUTH", b"pw"]
    authed[0] = True
    assert p.next_command() == [b"ECHO", b"x" * 20000]
    assert parse_all(encode([b"ECHO"] * 10) + encode([b"x" * 16384]), auth_required=lambda: True) == [
        [b"ECHO"] * 10, [b"x" * 16384]]
