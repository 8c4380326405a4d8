"""Connection, server, key and transaction commands on Braid alone (behaviour
that the reference Redis does not share: one database, streams only, Braid's
own INFO fields), through a region run in-process."""

from __future__ import annotations

import pytest
import redis

from node.commands.keys import glob_match
from node.region.config import Config
from node.testing import InProcessServer
from tests.differential import Err, RawClient


@pytest.fixture
def raw(inproc):
    c = RawClient(inproc.port)
    c.call("FLUSHALL")
    yield c
    c.close()


def info(raw, section: str) -> dict:
    text = raw.call("INFO", section).decode()
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def test_info_reports_redis_and_braid_versions(raw):
    server = info(raw, "server")
    assert server["redis_version"] == "8.10.2"
    assert server["braid_version"]
    assert server["arch_bits"] in ("32", "64")
    assert info(raw, "cluster")["cluster_enabled"] == "0"


def test_info_counters_are_real(raw):
    before = int(info(raw, "stats")["total_error_replies"])
    assert isinstance(raw.call("NOSUCH"), Err)
    assert isinstance(raw.call("XADD", "k"), Err)
    assert int(info(raw, "stats")["total_error_replies"]) == before + 2
    changes = int(info(raw, "persistence")["rdb_changes_since_last_save"])
    raw.call("XADD", "k", "1-0", "f", "v")
    assert int(info(raw, "persistence")["rdb_changes_since_last_save"]) > changes
    assert info(raw, "keyspace")["db0"].startswith("keys=1,")
    assert "errorstat_ERR" in info(raw, "errorstats")
    assert "cmdstat_xadd" in info(raw, "commandstats")


def test_other_types_and_databases_do_not_exist(raw):
    assert str(raw.call("GET", "x")) == "ERR unknown command 'GET', with args beginning with: 'x' "
    assert str(raw.call("LPUSH", "l", "a")).startswith("ERR unknown command 'LPUSH'")
    assert raw.call("SELECT", "0") == b"OK"
    assert str(raw.call("SELECT", "1")) == "ERR DB index is out of range"


def test_config_get_lists_every_setting_and_set_validates(raw):
    every = raw.call("CONFIG", "GET", "*")
    names = set(every[0::2])
    assert {b"stream-node-max-entries", b"stream-node-max-bytes", b"stream-idmp-duration",
            b"stream-idmp-maxsize", b"maxclients"} <= names
    assert raw.call("CONFIG", "SET", "stream-node-max-bytes", "8kb") == b"OK"
    assert raw.call("CONFIG", "GET", "stream-node-max-bytes") == [b"stream-node-max-bytes", b"8192"]
    assert str(raw.call("CONFIG", "SET", "stream-idmp-maxsize", "0")).startswith(
        "ERR CONFIG SET failed (possibly related to argument 'stream-idmp-maxsize')")
    assert str(raw.call("CONFIG", "SET", "nosuch", "1")).startswith("ERR Unknown option")
    assert str(raw.call("CONFIG", "SET", "port", "1")).endswith("can't set immutable config")
    assert raw.call("CONFIG", "SET", "stream-node-max-bytes", "4096") == b"OK"
    assert raw.call("CONFIG", "RESETSTAT") == b"OK"


def test_a_setting_set_in_code_takes_the_parsed_type_only():
    """What CONFIG SET parses goes in as it is; a "no" handed to a yes/no setting as a string
    would read as true where the server tests it, so the setter refuses it (and a string
    number, and a choice that is not one), at start too."""
    cfg = Config()
    cfg.set("appendonly", False)
    cfg.set("stream-node-max-entries", cfg.parse("stream-node-max-entries", b"50"))
    cfg.set("appendfsync", "always")
    assert (cfg["appendonly"], cfg["stream-node-max-entries"], cfg["appendfsync"]) == (False, 50, "always")
    for name, value in (("appendonly", "no"), ("appendonly", 0), ("stream-node-max-entries", "50"),
                        ("stream-node-max-entries", True), ("appendfsync", "sometimes")):
        with pytest.raises(TypeError, match=name):
            cfg.set(name, value)
        with pytest.raises(TypeError, match=name):
            Config(**{name.replace("-", "_"): value})
    assert cfg["appendonly"] is False and cfg["stream-node-max-entries"] == 50


def test_node_size_settings_shape_new_blocks(raw):
    raw.call("CONFIG", "SET", "stream-node-max-entries", "3")
    try:
        for i in range(1, 8):
            raw.call("XADD", "n", f"{i}-0", "f", "v")
        r = raw.call("XINFO", "STREAM", "n")
        assert r[r.index(b"radix-tree-keys") + 1] == 3
        assert raw.call("XTRIM", "n", "MAXLEN", "~", "2") == 3
    finally:
        raw.call("CONFIG", "SET", "stream-node-max-entries", "100")


def test_command_table_introspection(raw):
    assert raw.call("COMMAND", "COUNT") >= 45
    xadd = raw.call("COMMAND", "INFO", "xadd", "nosuch")
    assert xadd[0][0] == b"xadd" and xadd[0][1] == -5 and xadd[1] is None
    docs = raw.call("COMMAND", "DOCS", "xgroup")
    body = dict(zip(docs[1][0::2], docs[1][1::2], strict=True))
    assert body[b"group"] == b"stream" and b"subcommands" in body
    assert raw.call("COMMAND", "GETKEYS", "XREAD", "STREAMS", "a", "b", "0", "0") == [b"a", b"b"]
    assert raw.call("COMMAND", "GETKEYS", "XADD", "k", "*", "f", "v") == [b"k"]
    assert str(raw.call("XINFO", "NOPE")) == "ERR unknown subcommand 'NOPE'. Try XINFO HELP."
    assert str(raw.call("XGROUP", "CREATE", "k")) == "ERR wrong number of arguments for 'xgroup|create' command"


def test_hello_client_and_reset(raw):
    hello = raw.call("HELLO", "2", "SETNAME", "conn1")
    m = dict(zip(hello[0::2], hello[1::2], strict=True))
    assert m[b"proto"] == 2 and m[b"version"] == b"8.10.2" and m[b"mode"] == b"standalone"
    assert raw.call("CLIENT", "GETNAME") == b"conn1"
    assert str(raw.call("HELLO", "4")) == "NOPROTO unsupported protocol version"
    assert str(raw.call("CLIENT", "SETNAME", "has space")).startswith("ERR Client names cannot contain spaces")
    assert raw.call("CLIENT", "SETINFO", "LIB-NAME", "tests") == b"OK"
    assert b"lib-name=tests" in raw.call("CLIENT", "INFO")
    my_id = raw.call("CLIENT", "ID")
    assert b"id=%d " % my_id in raw.call("CLIENT", "LIST")
    assert raw.call("MULTI") == b"OK"
    assert raw.call("RESET") == b"RESET"
    assert raw.call("CLIENT", "GETNAME") is None
    assert str(raw.call("EXEC")) == "ERR EXEC without MULTI"


def test_auth_with_requirepass():
    with InProcessServer(Config(requirepass="s3cret")) as srv:
        c = RawClient(srv.port)
        try:
            assert str(c.call("XLEN", "k")) == "NOAUTH Authentication required."
            assert str(c.call("AUTH", "wrong")) == "WRONGPASS invalid username-password pair or user is disabled."
            assert c.call("AUTH", "s3cret") == b"OK"
            assert c.call("XLEN", "k") == 0
        finally:
            c.close()
        r = redis.Redis(port=srv.port, password="s3cret", protocol=3)
        assert r.ping() is True
        r.close()


def test_auth_without_password_configured(raw):
    assert str(raw.call("AUTH", "x")).startswith("ERR AUTH <password> called without any password")


def test_keys_glob_and_scan_cover_every_key(raw):
    for k in ("user:1", "user:2", "user:10", "order:1", "u[x]"):
        raw.call("XADD", k, "1-0", "f", "v")
    assert sorted(raw.call("KEYS", "user:?")) == [b"user:1", b"user:2"]
    assert sorted(raw.call("KEYS", "u[a-z]er:*")) == [b"user:1", b"user:10", b"user:2"]
    assert raw.call("KEYS", "u\\[x\\]") == [b"u[x]"]
    seen, cursor = [], b"0"
    while True:
        cursor, keys = raw.call("SCAN", cursor, "COUNT", "2")
        seen += keys
        if cursor == b"0":
            break
    assert sorted(seen) == sorted(raw.call("KEYS", "*"))
    assert raw.call("SCAN", "0", "MATCH", "order:*", "COUNT", "100")[1] == [b"order:1"]
    assert raw.call("SCAN", "0", "TYPE", "string")[1] == []


@pytest.mark.parametrize("pattern,text,match", [
    (b"*", b"", True), (b"a*b", b"axxb", True), (b"a?c", b"abc", True), (b"a?c", b"ac", False),
    (b"[^a]x", b"bx", True), (b"[^a]x", b"ax", False), (b"h\\*", b"h*", True), (b"h\\*", b"hx", False),
    (b"[a-c]", b"b", True), (b"[c-a]", b"b", True), (b"**x", b"ax", True),
])
def test_glob(pattern, text, match):
    assert glob_match(pattern, text) is match


def test_transactions_queue_and_abort(raw):
    assert raw.call("MULTI") == b"OK"
    assert raw.call("XADD", "t", "1-0", "f", "v") == b"QUEUED"
    assert str(raw.call("XADD")).startswith("ERR wrong number of arguments")
    assert str(raw.call("EXEC")) == "EXECABORT Transaction discarded because of previous errors."
    assert raw.call("EXISTS", "t") == 0
    assert raw.call("MULTI") == b"OK"
    assert str(raw.call("WATCH", "t")) == "ERR WATCH inside MULTI is not allowed"
    assert raw.call("XREAD", "BLOCK", "0", "STREAMS", "t", "$") == b"QUEUED"
    assert raw.call("EXEC") == [None]  # blocking reads never block inside EXEC
    assert str(raw.call("DISCARD")) == "ERR DISCARD without MULTI"


def test_flush_time_dbsize_quit(raw, inproc):
    raw.call("XADD", "a", "1-0", "f", "v")
    assert raw.call("DBSIZE") == 1
    assert raw.call("FLUSHDB", "ASYNC") == b"OK"
    assert raw.call("DBSIZE") == 0
    assert str(raw.call("FLUSHALL", "BOGUS")) == "ERR syntax error"
    secs, usecs = raw.call("TIME")
    assert int(secs) > 1_600_000_000 and 0 <= int(usecs) < 1_000_000
    c = RawClient(inproc.port)
    assert c.call("QUIT") == b"OK"
    with pytest.raises(ConnectionError):
        c.call("PING")
    c.close()


def test_proto_max_bulk_len_applies_to_open_connections(raw, inproc):
    other = RawClient(inproc.port)
    try:
        assert other.call("PING") == b"PONG"
        assert raw.call("CONFIG", "SET", "proto-max-bulk-len", "1mb") == b"OK"
        other.sock.sendall(b"*2\r\n$4\r\nECHO\r\n$2000000\r\n")
        assert other.sock.recv(4096) == b"-ERR Protocol error: invalid bulk length\r\n"
    finally:
        raw.call("CONFIG", "SET", "proto-max-bulk-len", "512mb")
        other.close()


def test_watch_ignores_commands_that_change_nothing(raw, inproc):
    raw.call("XADD", "w", "1-0", "f", "v")
    other = RawClient(inproc.port)
    try:
        assert raw.call("WATCH", "w") == b"OK"
        assert other.call("XDEL", "w", "9-9") == 0        # nothing deleted
        assert other.call("XTRIM", "w", "MAXLEN", "5") == 0  # nothing trimmed
        assert raw.call("MULTI") == b"OK"
        raw.call("XLEN", "w")
        assert raw.call("EXEC") == [1]
        assert raw.call("WATCH", "w") == b"OK"
        assert other.call("XDEL", "w", "1-0") == 1
        assert raw.call("MULTI") == b"OK"
        raw.call("XLEN", "w")
        assert raw.call("EXEC") is None
    finally:
        other.close()


def test_a_block_timeout_whose_deadline_overflows_is_out_of_range():
    """Redis 8 refuses a timeout that, added to the time now, would overflow a long long
    (Redis 7.0 blocked forever on it)."""
    from node.region.config import Config
    from node.region.core import RegionCore, Session
    from node.resp.encoder import ReplyError

    core = RegionCore(Config())
    s = Session(core)
    s.authenticated = True
    for argv in ([b"XREAD", b"BLOCK", b"9223372036854775807", b"STREAMS", b"k", b"$"],
                 [b"XREADGROUP", b"GROUP", b"g", b"c", b"BLOCK", b"9223372036854775000", b"STREAMS", b"k", b">"]):
        reply = core.call(s, argv)
        assert isinstance(reply, ReplyError) and reply.message == "ERR timeout is out of range"
