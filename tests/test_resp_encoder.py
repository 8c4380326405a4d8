"""Reply values -> RESP2 / RESP3 bytes, one row of the encoder's table each."""

from __future__ import annotations

import pytest

from node.resp.encoder import NULL_ARRAY, Push, ReplyError, Verbatim, to_bytes


@pytest.mark.parametrize("value,resp2,resp3", [
    (b"hi", b"$2\r\nhi\r\n", b"$2\r\nhi\r\n"),
    ("OK", b"+OK\r\n", b"+OK\r\n"),
    (42, b":42\r\n", b":42\r\n"),
    (-1, b":-1\r\n", b":-1\r\n"),
    (None, b"$-1\r\n", b"_\r\n"),
    (NULL_ARRAY, b"*-1\r\n", b"_\r\n"),
    ([b"a", 1], b"*2\r\n$1\r\na\r\n:1\r\n", b"*2\r\n$1\r\na\r\n:1\r\n"),
    ({b"k": 1}, b"*2\r\n$1\r\nk\r\n:1\r\n", b"%1\r\n$1\r\nk\r\n:1\r\n"),
    ({b"x"}, b"*1\r\n$1\r\nx\r\n", b"~1\r\n$1\r\nx\r\n"),
    (1.5, b"$3\r\n1.5\r\n", b",1.5\r\n"),
    (True, b":1\r\n", b"#t\r\n"),
    (ReplyError("ERR bad\r\nthing"), b"-ERR bad  thing\r\n", b"-ERR bad  thing\r\n"),
    (Verbatim(b"a:1"), b"$3\r\na:1\r\n", b"=7\r\ntxt:a:1\r\n"),
    (Push([b"m"]), b"*1\r\n$1\r\nm\r\n", b">1\r\n$1\r\nm\r\n"),
    ([], b"*0\r\n", b"*0\r\n"),
])
def test_encoding(value, resp2, resp3):
    assert to_bytes(value, resp3=False) == resp2
    assert to_bytes(value, resp3=True) == resp3


def test_unknown_type_is_a_bug_not_silence():
    with pytest.raises(TypeError):
        to_bytes(object())
