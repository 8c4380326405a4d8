"""COMMAND DOCS and COMMAND INFO: the argument trees, histories and key specifications that
redis-cli's hints and cluster-aware clients read (node/commands/docs.py)."""

from __future__ import annotations

import pytest

from node.commands import COMMANDS, load_all
from node.commands.docs import DOCS, key_specs
from tests.differential import RawClient

load_all()

# Stream commands whose key specifications and tips did not change between Redis 7.0 (the
# reference server here) and 8.10.
SAME_SINCE_7 = ["xadd", "xrange", "xrevrange", "xlen", "xread", "xreadgroup", "xack", "xdel", "xtrim",
                "xsetid", "xpending", "xclaim", "xautoclaim", "xgroup|create", "xgroup|setid",
                "xgroup|destroy", "xgroup|createconsumer", "xgroup|delconsumer", "xinfo|stream",
                "xinfo|groups", "xinfo|consumers"]

# Braid's own stream commands (no Redis counterpart to describe them as).
BRAID_ONLY = {"xrangeorigin", "xsplitorigin", "xorigins", "xidmp|cfgset", "xidmp|cfgget"}


def _command(fullname: str):
    parent, _, sub = fullname.partition("|")
    cmd = COMMANDS.get(parent.encode())
    return cmd.subcommands.get(sub.encode()) if cmd is not None and sub else cmd


def test_every_stream_command_is_documented_and_every_entry_is_a_command():
    stream = [c.fullname for c in COMMANDS.values() if c.group == "stream" and c.handler is not None]
    stream += [s.fullname for c in COMMANDS.values() if c.group == "stream" for s in c.subcommands.values()]
    undocumented = [n for n in stream if n not in DOCS and not n.endswith("|help") and n not in BRAID_ONLY]
    assert not undocumented
    assert [n for n in DOCS if _command(n) is None] == []


def _walk(args):
    for a in args:
        yield a
        yield from _walk(a.get("arguments", ()))


@pytest.mark.parametrize("fullname", sorted(DOCS))
def test_key_spec_indexes_point_at_key_specs(fullname):
    indexes = {a["key_spec_index"] for a in _walk(DOCS[fullname].arguments) if a["type"] == "key"}
    assert indexes == set(range(len(key_specs(fullname))))


def test_docs_reply_shape(braid_proc):
    c = RawClient(braid_proc.port)
    try:
        reply = c.call("COMMAND", "DOCS", "XREAD")
        assert reply[0] == b"xread"
        fields = dict(zip(reply[1][::2], reply[1][1::2], strict=True))
        assert fields[b"history"] == [[b"8.10.0", b"Added the `MAXCOUNT` and `MAXSIZE` options."]]
        names = [dict(zip(a[::2], a[1::2], strict=True))[b"name"] for a in fields[b"arguments"]]
        assert names == [b"count", b"maxcount", b"maxsize", b"milliseconds", b"streams"]
        maxcount = dict(zip(fields[b"arguments"][1][::2], fields[b"arguments"][1][1::2], strict=True))
        assert maxcount == {b"name": b"maxcount", b"type": b"integer", b"display_text": b"maxcount",
                            b"token": b"MAXCOUNT", b"since": b"8.10.0", b"flags": [b"optional"]}
    finally:
        c.close()


def _without_notes(spec: list) -> list:
    """A key spec (RESP2: a flat list of name, value) without Redis's ``notes``: a comment for
    the reader of Redis's table, no client uses it."""
    pairs = [(spec[i], spec[i + 1]) for i in range(0, len(spec), 2) if spec[i] != b"notes"]
    return [x for pair in pairs for x in pair]


@pytest.mark.parametrize("fullname", SAME_SINCE_7)
def test_key_specs_and_tips_as_redis(braid_proc, redis_proc, fullname):
    braid, redis = RawClient(braid_proc.port), RawClient(redis_proc.port)
    try:
        ours = braid.call("COMMAND", "INFO", fullname)[0]
        theirs = redis.call("COMMAND", "INFO", fullname)[0]
        assert ours[7] == theirs[7]
        assert ours[8] == [_without_notes(s) for s in theirs[8]]
    finally:
        braid.close()
        redis.close()
