"""The sans-IO request parser, fed whole, in random chunks and one byte at a time.

Every behaviour test runs against both parsers: the Python one and the one that
parses well-formed multibulk requests with hiredis (``PARSERS``); the differential
tests at the end feed both the same random bytes in the same chunks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.resp.parser import (
    ARG_OVERHEAD,
    NATIVE_CHUNK,
    HiredisRequestParser,
    ProtocolError,
    RequestParser,
    split_args,
)

PARSERS = [RequestParser, HiredisRequestParser]
by_parser = pytest.mark.parametrize("cls", PARSERS, ids=["python", "hiredis"])


def parse_all(data: bytes, chunks: list[int] | None = None, cls=HiredisRequestParser, **kw) -> list[list[bytes]]:
    p = cls(**kw)
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


@by_parser
def test_multibulk_one_byte_at_a_time(cls):
    data = encode([b"XADD", b"s", b"*", b"f", b"v\r\nwith crlf"]) + encode([b"PING"])
    assert parse_all(data, cls=cls) == [[b"XADD", b"s", b"*", b"f", b"v\r\nwith crlf"], [b"PING"]]


@by_parser
def test_incomplete_command_waits(cls):
    p = cls()
    p.feed(b"*2\r\n$4\r\nECHO\r\n$5\r\nhel")
    assert p.next_command() is None
    p.feed(b"lo\r\n")
    assert p.next_command() == [b"ECHO", b"hello"]
    assert p.next_command() is None


@by_parser
def test_empty_multibulk_is_skipped(cls):
    assert parse_all(b"*0\r\n*-1\r\n" + encode([b"PING"]), cls=cls) == [[b"PING"]]


@by_parser
def test_inline_commands(cls):
    assert parse_all(b"PING\r\nSET a b\n\r\n   \r\nECHO \"a b\\n\" 'c d'\r\n", cls=cls) == [
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


@by_parser
@pytest.mark.parametrize("data,error", [
    (b"*2\r\n$4\r\nECHO\r\n:5\r\n", "Protocol error: expected '$', got ':'"),
    (b"*abc\r\n", "Protocol error: invalid multibulk length"),
    (b"*3000000000\r\n", "Protocol error: invalid multibulk length"),
    (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n$abc\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n$600000000\r\n", "Protocol error: invalid bulk length"),
    (b"ECHO \"oops\r\n", "Protocol error: unbalanced quotes in request"),
])
def test_protocol_errors(data, error, cls):
    with pytest.raises(ProtocolError) as e:
        parse_all(data, cls=cls)
    assert str(e.value) == error


@by_parser
def test_bulk_over_configured_limit(cls):
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        parse_all(b"*1\r\n$2000000\r\n", chunks=[100], max_bulk_len=1024 * 1024, cls=cls)


@by_parser
@pytest.mark.parametrize("prefix,error", [
    (b"", "Protocol error: too big inline request"),
    (b"*", "Protocol error: too big mbulk count string"),
    (b"*1\r\n$", "Protocol error: too big bulk count string"),
])
def test_unterminated_lines_are_bounded(prefix, error, cls):
    p = cls()
    p.feed(prefix + b"1" * (70 * 1024))
    with pytest.raises(ProtocolError) as e:
        p.next_command()
    assert str(e.value) == error


args = st.lists(st.binary(max_size=40), min_size=1, max_size=6)


@by_parser
@settings(max_examples=200, deadline=None)
@given(cmds=st.lists(args, min_size=1, max_size=5), cuts=st.lists(st.integers(0, 30), max_size=30))
def test_any_chunking_gives_the_same_commands(cmds, cuts, cls):
    data = b"".join(encode(c) for c in cmds)
    assert parse_all(data, chunks=cuts, cls=cls) == cmds
    assert parse_all(data, chunks=[], cls=cls) == cmds  # in one piece
    assert parse_all(data, cls=cls) == cmds


@by_parser
def test_parsed_arguments_count_as_pending_bytes(cls):
    """A huge multibulk count followed by small bulks: the arguments already parsed out
    of the buffer count against the client's query-buffer limit (pending_bytes)."""
    p = cls()
    data = b"*2147483647\r\n" + b"$1\r\na\r\n" * 1000
    for i in range(len(data)):
        p.feed(data[i:i + 1])
        assert p.next_command() is None
    assert p.buffered == 0
    assert p.pending_bytes == 1000 * (1 + ARG_OVERHEAD)
    p.feed(b"$3\r\nab")  # a partial bulk: its buffered bytes count too
    assert p.next_command() is None
    assert p.pending_bytes == 1000 * (1 + ARG_OVERHEAD) + 6


@by_parser
def test_pending_bytes_drop_when_a_command_completes(cls):
    p = cls()
    data = encode([b"ECHO", b"x" * 100]) + b"*2\r\n$4\r\nECHO\r\n"
    for i in range(len(data)):
        p.feed(data[i:i + 1])
        cmd = p.next_command()
        if cmd is not None:
            assert cmd == [b"ECHO", b"x" * 100]
            assert p.pending_bytes == 0
    assert p.pending_bytes == 4 + ARG_OVERHEAD


@by_parser
@pytest.mark.parametrize("data,error", [
    (b"*11\r\n", "Protocol error: unauthenticated multibulk length"),
    (b"*1\r\n$16385\r\n", "Protocol error: unauthenticated bulk length"),
    (b"*3000000000\r\n", "Protocol error: invalid multibulk length"),  # checked first, as in Redis
])
def test_unauthenticated_limits(data, error, cls):
    with pytest.raises(ProtocolError) as e:
        parse_all(data, auth_required=lambda: True, cls=cls)
    assert str(e.value) == error
    if "unauthenticated" in error:  # an authenticated client: just an incomplete command
        assert parse_all(data, auth_required=lambda: False, cls=cls) == []


@by_parser
def test_unauthenticated_limits_follow_the_client_state(cls):
    """AUTH pipelined before a large command: the limit is asked when the length is read."""
    authed = [False]
    p = cls(auth_required=lambda: not authed[0])
    p.feed(encode([b"AUTH", b"pw"]) + encode([b"ECHO", b"x" * 20000]))
    assert p.next_command() == [b"AUTH", b"pw"]
    authed[0] = True
    assert p.next_command() == [b"ECHO", b"x" * 20000]
    assert parse_all(encode([b"ECHO"] * 10) + encode([b"x" * 16384]), auth_required=lambda: True, cls=cls) == [
        [b"ECHO"] * 10, [b"x" * 16384]]


# ------------------------------------------------------------------ the two parsers side by side
def run(cls, data: bytes, cuts: list[int], max_bulk_len: int = 512 * 1024 * 1024):
    """Feed ``data`` in the given chunks, as the server does: after each feed, take the
    commands until None or an error.  The client counts as authenticated once it has
    sent a command named AUTH (the limits depend on that, between two commands of one
    read).  Returns the commands, the error text (or None) and pending_bytes after each feed."""
    authed = [False]
    p = cls(max_bulk_len, lambda: not authed[0])
    out: list[list[bytes]] = []
    pending = []
    pieces, i = [], 0
    for n in cuts:
        pieces.append(data[i:i + n])
        i += n
    pieces.append(data[i:])
    try:
        for piece in pieces:
            p.feed(piece)
            pending.append(p.pending_bytes)
            while (cmd := p.next_command()) is not None:
                out.append(cmd)
                if cmd[0].upper() == b"AUTH":
                    authed[0] = True
        pending.append(p.pending_bytes)
    except ProtocolError as e:
        return out, str(e), pending
    return out, None, pending


def same_result(data: bytes, cuts: list[int] = (), max_bulk_len: int = 512 * 1024 * 1024):
    python = run(RequestParser, data, list(cuts), max_bulk_len)
    native = run(HiredisRequestParser, data, list(cuts), max_bulk_len)
    assert native == python
    return python


@pytest.mark.parametrize("data,error", [
    # elements hiredis reads but Redis refuses: the Python parser's error
    (b"*2\r\n+OK\r\n$2\r\nab\r\n", "Protocol error: expected '$', got '+'"),
    (b"*2\r\n$1\r\na\r\n:5\r\n", "Protocol error: expected '$', got ':'"),
    (b"*1\r\n=8\r\ntxt:abcd\r\n", "Protocol error: expected '$', got '='"),
    (b"*1\r\n(12345678901234567890\r\n", "Protocol error: expected '$', got '('"),
    (b"*2\r\n*1\r\n$1\r\na\r\n$1\r\nb\r\n", "Protocol error: expected '$', got '*'"),
    (b"*1\r\n~2\r\n$1\r\na\r\n$1\r\nb\r\n", "Protocol error: expected '$', got '~'"),
    (b"*1\r\n%1\r\n$1\r\na\r\n$1\r\nb\r\n", "Protocol error: expected '$', got '%'"),
    (b"*1\r\n_\r\n", "Protocol error: expected '$', got '_'"),
    (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n$01\r\na\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n$+1\r\na\r\n", "Protocol error: invalid bulk length"),
    (b"*01\r\n$1\r\na\r\n", "Protocol error: invalid multibulk length"),
    # a status and a verbatim string whose lengths cancel out: the command has the
    # canonical length of [b"0123456789", b"abcd"], but not its bytes
    (b"*2\r\n+0123456789\r\n=8\r\ntxt:abcd\r\n", "Protocol error: expected '$', got '+'"),
    # a huge nested count after valid commands: hiredis never sees it (it would allocate the list)
    (encode([b"PING"]) + b"*1\r\n*4000000000\r\n", "Protocol error: expected '$', got '*'"),
    (encode([b"PING"]) + b"*1\r\n>4000000000\r\n", "Protocol error: expected '$', got '>'"),
    (encode([b"PING"]) + b"*1\r\n~4000000000\r\n", "Protocol error: expected '$', got '~'"),
    (encode([b"PING"]) + b"*1\r\n|4000000000\r\n", "Protocol error: expected '$', got '|'"),
    (encode([b"PING"]) + encode([b"AUTH", b"x"]) + b"*1\r\n$16385\r\n",
     None),  # authenticated by then: just incomplete
    (encode([b"PING"]) + b"*1\r\n$16385\r\n" + b"x" * 16385 + b"\r\n",
     "Protocol error: unauthenticated bulk length"),
    (encode([b"PING"]) + encode([b"ECHO"] * 11), "Protocol error: unauthenticated multibulk length"),
    (encode([b"AUTH"]) + encode([b"ECHO"] * 11) + encode([b"x" * 16385]), None),
])
def test_both_parsers_refuse_alike(data, error):
    for cuts in ([], [len(data) // 2], [1] * len(data)):
        assert same_result(data, cuts)[1] == error


def test_both_parsers_accept_what_redis_accepts():
    """Redis does not check the two bytes after a bulk, nor that ``\\r`` is followed by
    ``\\n`` on a length line: neither parser does."""
    data = b"*2\r\n$1\r\naXY$1\r\nb\r\n" + b"*1\r\n$2\r\nok\r\n" + b"*1\rX$1\r\nc\r\n"
    assert same_result(data) == ([[b"a", b"b"], [b"ok"], [b"c"]], None, [len(data), 0])


def test_large_commands_and_bulk_limit():
    big = [b"XADD", b"s", b"*"] + [b"f%d" % i for i in range(1200)]  # 1203 arguments
    data = encode([b"AUTH", b"pw"]) + encode(big) + encode([b"ECHO", b"y" * 70000]) + encode([b"PING"])
    assert same_result(data)[0] == [[b"AUTH", b"pw"], big, [b"ECHO", b"y" * 70000], [b"PING"]]
    assert same_result(data, max_bulk_len=50000)[1] == "Protocol error: invalid bulk length"
    assert same_result(encode([b"AUTH"]) + encode([b"x" * 21]), max_bulk_len=20)[1] == \
        "Protocol error: invalid bulk length"


def test_a_pipelined_read_is_parsed_in_one_go():
    cmds = [[b"XADD", b"s", b"*", b"f1", b"%012d" % i] for i in range(16)]
    p = HiredisRequestParser()
    p.feed(b"".join(encode(c) for c in cmds) + b"*2\r\n$4\r\nECHO\r\n$3\r\nab")
    assert p.next_command() == cmds[0]
    assert len(p._ready) == 15  # the rest waits, parsed, in the queue
    assert p.pending_bytes == sum(len(encode(c)) for c in cmds[1:]) + 20
    assert [p.next_command() for _ in range(15)] == cmds[1:]
    assert p.next_command() is None  # the incomplete one is the Python parser's
    p.feed(b"c\r\n" + encode([b"PING"]))
    assert p.next_command() == [b"ECHO", b"abc"]
    assert p.next_command() == [b"PING"]
    assert p.pending_bytes == 0


def test_more_than_a_chunk_is_parsed_in_several_goes():
    cmds = [[b"SET", b"k%d" % i, b"v" * 100] for i in range(2 * NATIVE_CHUNK // 120)]
    assert same_result(b"".join(encode(c) for c in cmds))[0] == cmds


# pieces of requests, well-formed or not, in the forms hiredis reads differently from Redis
_piece = st.one_of(
    st.lists(st.binary(max_size=20), min_size=1, max_size=5).map(encode),
    st.lists(st.binary(max_size=20), min_size=1, max_size=12).map(lambda a: encode([b"AUTH", *a])),
    st.builds(lambda t, d: b"%b%d\r\n" % (t, d), st.sampled_from([bytes([c]) for c in b"*$+:=(~>|%_#,-"]),
              st.integers(-3, 20000)),
    st.sampled_from([b"*0\r\n", b"*-1\r\n", b"$-1\r\n", b"\r\n", b"\r", b"\n", b"+OK\r\n", b"txt:", b"01",
                     b"PING\r\n", b"ECHO 'a b'\r\n", b"\"x\r\n", b"*1\r\n$16385\r\n", b"*2147483648\r\n"]),
    st.binary(max_size=12),
)


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(_piece, max_size=12), cuts=st.lists(st.integers(0, 40), max_size=8),
       small_limit=st.booleans())
def test_random_input_gives_the_same_commands_and_errors(pieces, cuts, small_limit):
    same_result(b"".join(pieces), cuts, 20 if small_limit else 512 * 1024 * 1024)


@given(st.lists(st.sampled_from([b"*", b"~", b">", b"|", b"%", b"1", b"9", b"x", b"\r"]), max_size=60).map(b"".join),
       st.integers(0, 70), st.integers(0, 70), st.booleans())
def test_the_large_aggregate_search_finds_what_the_pattern_does(data, a, b, as_bytearray):
    """``_large_aggregate`` (a translated buffer, a literal pattern) against ``[*~>|][0-9]{4}``."""
    import re

    from node.resp.parser import _large_aggregate

    buf = bytearray(data) if as_bytearray else data
    start, end = sorted((min(a, len(buf)), min(b, len(buf))))
    m = re.compile(rb"[*~>|][0-9]{4}").search(buf, start, end)
    assert _large_aggregate(buf, start, end) == (m.start() if m else -1)
