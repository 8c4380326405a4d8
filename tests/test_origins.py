"""XORIGINS, XRANGEORIGIN, XSPLITORIGIN: reading one origin log (node/commands/origins.py).

On one region (origin = the region's number, 1), against XRANGE as the
reference for bounds and COUNT; bad input with Redis's error texts; and on a
three-region cluster, the late arrival that a merged cursor would skip.
"""

from __future__ import annotations

import pytest

from node.testing import LocalCluster
from tests.differential import Err, RawClient

ERR_ID = "ERR Invalid stream ID specified as stream command argument"
ERR_INT = "ERR value is not an integer or out of range"
ERR_POSITIVE = "ERR value is out of range, must be positive"


@pytest.fixture
def raw(inproc):
    c = RawClient(inproc.port)
    c.call("FLUSHALL")
    c.call("CONFIG", "SET", "stream-node-max-entries", "10")
    yield c
    c.call("CONFIG", "SET", "stream-node-max-entries", "100")
    c.close()


def fill(raw, n: int, key: str = "s") -> None:
    for i in range(1, n + 1):
        raw.call("XADD", key, f"{i}-0", "i", str(i))


def test_xorigins_on_one_region(raw):
    assert raw.call("XORIGINS", "missing") == []
    fill(raw, 25)
    raw.call("XDEL", "s", "1-0", "25-0")
    assert raw.call("XORIGINS", "s") == [
        [b"origin", 1, b"length", 23, b"first-entry-id", b"2-0", b"last-id", b"25-0"]]


@pytest.mark.parametrize("bounds", [
    ("-", "+"), ("5", "12"), ("(5", "(12"), ("5-0", "+"), ("(24-0", "+"), ("-", "(1"), ("30", "+"), ("12", "5"),
])
@pytest.mark.parametrize("count", [None, "1", "7", "100", "-3"])
def test_xrangeorigin_is_xrange_on_a_single_log(raw, bounds, count):
    fill(raw, 25)
    raw.call("XDEL", "s", "7-0", "20-0")
    opt = [] if count is None else ["COUNT", count]
    assert raw.call("XRANGEORIGIN", "s", "1", *bounds, *opt) == raw.call("XRANGE", "s", *bounds, *opt)


def test_xrangeorigin_count_zero_and_missing(raw):
    fill(raw, 3)
    assert raw.call("XRANGEORIGIN", "s", "1", "-", "+", "COUNT", "0") == raw.call("XRANGE", "s", "-", "+", "COUNT", "0")
    assert raw.call("XRANGEORIGIN", "s", "2", "-", "+") == []  # no log of origin 2
    assert raw.call("XRANGEORIGIN", "nokey", "1", "-", "+") == []


def test_xsplitorigin_cuts_runs_that_cover_the_range(raw):
    fill(raw, 35)  # blocks of 10: 1-10, 11-20, 21-30, 31-35
    raw.call("XDEL", "s", "10-0", "20-0", "35-0")
    assert raw.call("XSPLITORIGIN", "s", "1", "-", "+", "10") == [
        [b"11-0", 10], [b"22-0", 10], [b"32-0", 10], [b"35-0", 2]]
    for start, end, size in [("(3", "+", "7"), ("-", "+", "1"), ("4", "33", "9"), ("(11", "(31", "100"),
                             ("-", "+", "32"), ("-", "+", "33")]:
        runs = raw.call("XSPLITORIGIN", "s", "1", start, end, size)
        # every run, read as XRANGEORIGIN (after previous, last], has exactly its length
        after = "(" + "0-0" if start == "-" else start
        got = []
        for last, n in runs:
            assert 0 < n <= int(size)
            part = raw.call("XRANGEORIGIN", "s", "1", after, last.decode())
            assert len(part) == n
            got += part
            after = "(" + last.decode()
        assert got == raw.call("XRANGE", "s", start, end)
        assert all(n == int(size) for _last, n in runs[:-1])
    assert raw.call("XSPLITORIGIN", "s", "1", "12", "5", "3") == []
    assert raw.call("XSPLITORIGIN", "nokey", "1", "-", "+", "3") == []


@pytest.mark.parametrize("argv, error", [
    (["XORIGINS"], "ERR wrong number of arguments for 'xorigins' command"),
    (["XORIGINS", "s", "extra"], "ERR wrong number of arguments for 'xorigins' command"),
    (["XRANGEORIGIN", "s", "1", "-"], "ERR wrong number of arguments for 'xrangeorigin' command"),
    (["XRANGEORIGIN", "s", "one", "-", "+"], ERR_INT),
    (["XRANGEORIGIN", "s", "-1", "-", "+"], ERR_POSITIVE),
    (["XRANGEORIGIN", "s", "1", "nope", "+"], ERR_ID),
    (["XRANGEORIGIN", "s", "1", "-", "1-x"], ERR_ID),
    (["XRANGEORIGIN", "s", "1", "(-", "+"], ERR_ID),
    (["XRANGEORIGIN", "s", "1", "(18446744073709551615-18446744073709551615", "+"],
     "ERR invalid start ID for the interval"),
    (["XRANGEORIGIN", "s", "1", "-", "(0-0"], "ERR invalid end ID for the interval"),
    (["XRANGEORIGIN", "s", "1", "-", "+", "COUNT", "x"], ERR_INT),
    (["XRANGEORIGIN", "s", "1", "-", "+", "COUNT"], "ERR syntax error"),
    (["XRANGEORIGIN", "s", "1", "-", "+", "LIMIT", "3"], "ERR syntax error"),
    (["XSPLITORIGIN", "s", "1", "-", "+"], "ERR wrong number of arguments for 'xsplitorigin' command"),
    (["XSPLITORIGIN", "s", "1", "-", "+", "0"], ERR_POSITIVE),
    (["XSPLITORIGIN", "s", "1", "-", "+", "many"], ERR_INT),
    (["XSPLITORIGIN", "s", "x", "-", "+", "5"], ERR_INT),
    (["XSPLITORIGIN", "s", "1", "1-1-1", "+", "5"], ERR_ID),
])
def test_bad_input_gets_redis_errors_and_the_connection_stays(raw, argv, error):
    fill(raw, 3)
    reply = raw.call(*argv)
    assert isinstance(reply, Err) and str(reply) == error
    assert raw.call("PING") == b"PONG"


def test_command_table_metadata(raw):
    for name, arity in [(b"xorigins", 2), (b"xrangeorigin", -5), (b"xsplitorigin", 6)]:
        info = raw.call("COMMAND", "INFO", name)[0]
        assert info[:6] == [name, arity, [b"readonly"] + ([b"fast"] if name == b"xorigins" else []), 1, 1, 1]
        docs = raw.call("COMMAND", "DOCS", name)
        body = dict(zip(docs[1][0::2], docs[1][1::2], strict=True))
        assert body[b"group"] == b"stream" and body[b"since"] == b"0.1.0" and body[b"summary"]
    assert raw.call("COMMAND", "GETKEYS", "XRANGEORIGIN", "k", "1", "-", "+") == [b"k"]


def test_a_late_arrival_lands_after_the_origin_cursor():
    """Region 2's entry with a lower ID reaches region 1 after region 1's later entries were
    read: the merged stream has it *before* the read position, its origin log after the cursor."""
    with LocalCluster(3) as cluster:
        r1, r2, _r3 = cluster.clients()
        r2.execute_command("BRAID.REPLICATION", "PAUSE")
        late = r2.xadd("s", {"from": "2"})
        early = [r1.xadd("s", {"from": "1", "n": str(i)}, id=str(int(late.split(b"-")[0]) + 10 + i))
                 for i in range(3)]
        read = r1.xrange("s")
        assert [eid for eid, _ in read] == early
        merged_cursor = read[-1][0]
        origin_cursor = r1.execute_command("XORIGINS", "s")
        assert [o[1] for o in origin_cursor] == [1]
        r2.execute_command("BRAID.REPLICATION", "RESUME")
        cluster.sync_wait()
        assert r1.xrange("s", min=b"(" + merged_cursor) == []  # a merged cursor skips it
        assert r1.execute_command("XRANGEORIGIN", "s", "2", "(0-0", "+") == [[late, [b"from", b"2"]]]
        assert r1.execute_command("XRANGEORIGIN", "s", "1", b"(" + merged_cursor, "+") == []
        tops = {o[1]: o[7] for o in r1.execute_command("XORIGINS", "s")}
        assert tops == {1: early[-1], 2: late}
