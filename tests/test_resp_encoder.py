"""Reply values -> RESP2 / RESP3 bytes, one row of the encoder's table each."""

from __future__ import annotations

import pytest

from node.resp.encoder import NULL_ARRAY, Entries, Push, ReplyError, Verbatim, to_bytes


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


def _as_list(entries: Entries) -> list:
    """The same value as a plain list: what the general encoder makes of it."""
    return [list(row) for row in entries]


@pytest.mark.parametrize("resp3", [False, True])
def test_entries_encode_as_the_plain_list(resp3):
    """Stream entries (XRANGE, XREAD, XREADGROUP) come out as the same value as a plain
    list would, rows of other shapes included (a deleted entry's nil, CLAIM's counters)."""
    big = b"v" * 5000  # past the table of bulk headers and the cache's bound
    rows = Entries([[b"1-0", [b"f", b"v"]], [b"2-0", [b"f", big]], [b"3-0", NULL_ARRAY],
                    [b"4-0", [b"f", b"x"], 12, 3], [b"5-0", [b"n", 7]], [b"6-0", []]])
    assert to_bytes(rows, resp3) == to_bytes(_as_list(rows), resp3)
    assert to_bytes(rows, resp3) == to_bytes(_as_list(rows), resp3)  # again, from the cache


def test_entries_cache_follows_the_field_list_and_the_id():
    """An entry's encoding is reused only for the same field list object with the same ID:
    another list with other values, or the same list under another ID, is encoded anew."""
    flat = [b"f", b"one"]
    assert to_bytes(Entries([[b"1-0", flat]])) == b"*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$3\r\none\r\n"
    assert to_bytes(Entries([[b"2-0", flat]])) == b"*1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$3\r\none\r\n"
    other = [b"f", b"two"]
    assert to_bytes(Entries([[b"2-0", other]])) == b"*1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$3\r\ntwo\r\n"
    # an entry with a value that is not a bulk string differs between RESP2 and RESP3: never kept
    mixed = [b"f", None]
    assert to_bytes(Entries([[b"3-0", mixed]]), resp3=False).endswith(b"$-1\r\n")
    assert to_bytes(Entries([[b"3-0", mixed]]), resp3=True).endswith(b"_\r\n")
