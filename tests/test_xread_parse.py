"""XREAD / XREADGROUP keep their recent parses (node/commands/xread.py, ``_parse_memo``)."""

from __future__ import annotations

import pytest

from node.commands import xread
from node.resp.encoder import ReplyError


def _argv(*args: str) -> list[bytes]:
    return [a.encode() for a in args]


def test_the_same_arguments_reuse_one_parse_and_others_get_their_own(monkeypatch):
    monkeypatch.setattr(xread, "_PARSED", {})
    one = xread._parse_memo(_argv("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"), True,
                            "xreadgroup", 1000)
    again = xread._parse_memo(_argv("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"), True,
                              "xreadgroup", 2000)
    other = xread._parse_memo(_argv("XREADGROUP", "GROUP", "g", "d", "COUNT", "1", "STREAMS", "s", ">"), True,
                              "xreadgroup", 2000)
    assert again is one and (one.consumer, one.count, one.keys) == (b"c", 1, [b"s"])
    assert other is not one and other.consumer == b"d"
    # XREAD with the same words after the name is another command: parsed on its own
    plain = xread._parse_memo(_argv("XREAD", "COUNT", "1", "STREAMS", "s", "$"), False, "xread", 0)
    assert plain.group is None


def test_a_failing_parse_fails_every_time_and_is_not_kept(monkeypatch):
    monkeypatch.setattr(xread, "_PARSED", {})
    bad = _argv("XREADGROUP", "GROUP", "g", "c", "COUNT", "1.5", "STREAMS", "s", ">")
    for _ in range(2):
        with pytest.raises(ReplyError, match="not an integer"):
            xread._parse_memo(bad, True, "xreadgroup", 0)
    assert xread._PARSED == {}


def test_a_timeout_whose_check_depends_on_the_clock_is_not_kept(monkeypatch):
    monkeypatch.setattr(xread, "_PARSED", {})
    late = str((1 << 63) - 1 - 5000)
    argv = _argv("XREAD", "BLOCK", late, "STREAMS", "s", "$")
    assert xread._parse_memo(argv, False, "xread", 1000).timeout == int(late)
    assert xread._PARSED == {}
    with pytest.raises(ReplyError, match="timeout is out of range"):  # later, the deadline would overflow
        xread._parse_memo(argv, False, "xread", 10_000)


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(xread, "_PARSED", {})
    for n in range(xread.PARSED_KEPT + 5):
        xread._parse_memo(_argv("XREAD", "COUNT", str(n), "STREAMS", "s", "0"), False, "xread", 0)
    assert 0 < len(xread._PARSED) <= xread.PARSED_KEPT
    # a long command is parsed each time, never kept: many keys, or a long key name
    monkeypatch.setattr(xread, "_PARSED", {})
    many = _argv("XREAD", "STREAMS", *[f"k{n}" for n in range(40)], *["0"] * 40)
    long_key = _argv("XREAD", "STREAMS", "k" * (xread.PARSED_BYTES_KEPT + 1), "0")
    for argv in (many, long_key):
        assert xread._parse_memo(argv, False, "xread", 0).keys == argv[2:2 + (len(argv) - 2) // 2]
    assert xread._PARSED == {}


def test_ids_that_depend_on_no_stream_are_resolved_once_and_errors_keep_their_order():
    from node.region.config import Config
    from node.region.core import RegionCore, Session

    def args(*words: str):
        return xread._parse(_argv(*words), words[0] == "XREADGROUP", words[0].lower(), 0)

    assert args("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "b", ">", "5-1").fixed_ids == [xread.GT_GROUP, (5, 1)]
    assert args("XREAD", "STREAMS", "a", "7").fixed_ids == [(7, 0)]
    for words in (("XREAD", "STREAMS", "a", "$"), ("XREAD", "STREAMS", "a", "+"), ("XREAD", "STREAMS", "a", ">"),
                  ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "b", ">", "x-1")):
        assert args(*words).fixed_ids is None, words

    core = RegionCore(Config())
    client = Session(core)
    client.authenticated = True

    def call(*words: str):
        return core.call(client, _argv(*words))

    call("XGROUP", "CREATE", "b", "g", "0", "MKSTREAM")
    for _ in range(2):  # parsed, then from the memo: the same errors, in the streams' order
        assert str(call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "b", ">", ">")).startswith(
            "NOGROUP No such key 'a'")
        assert str(call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "b", "a", "bad", ">")) == \
            "ERR Invalid stream ID specified as stream command argument"
    for n in (1, 2):  # the second read takes its IDs from the memo: '>' still means the group's cursor
        call("XADD", "b", f"{n}-1", "f", "v")
        reply = call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "b", ">")
        assert [[k, [row[0] for row in rows]] for k, rows in reply] == [[b"b", [b"%d-1" % n]]]
