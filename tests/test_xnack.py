"""XNACK (Redis 8.8): releasing pending entries without acknowledging them.

The expected replies follow Redis's command page and its own test suite for
XNACK (``tests/unit/type/stream-cgroups.tcl``): the argument checks in Redis's
order, each mode's delivery counter, RETRYCOUNT, FORCE, the NACK zone (released
entries are claimed first, in the order they were released, and at once), how
XPENDING / XINFO / XCLAIM / XAUTOCLAIM show and treat released entries, a
blocked XREADGROUP ... CLAIM woken by an XNACK, and a restart (snapshot and log
replay) that gives back the same counters and the same NACK order.  The one
deliberate difference: Redis writes three of its messages with the error code
twice ("ERR ERR mode must be ..."); Braid sends it once.
"""

from __future__ import annotations

import threading

import pytest

from node.region.config import Config
from node.testing import BraidProcess, InProcessServer, wait_until
from tests.differential import Err, RawClient
from tests.test_convergence import Region, sync

LLONG_MAX = 9223372036854775807


@pytest.fixture
def raw(braid_proc):
    c = RawClient(braid_proc.port)
    c.call("FLUSHALL")
    yield c
    c.close()


def _stream(raw, n: int = 3, read: bool = True) -> None:
    """mystream with entries 1-0..n-0, group grp from 0; c1 read them all."""
    for i in range(1, n + 1):
        raw.call("XADD", "mystream", f"{i}-0", "f", f"v{i}")
    raw.call("XGROUP", "CREATE", "mystream", "grp", "0")
    if read:
        raw.call("XREADGROUP", "GROUP", "grp", "c1", "STREAMS", "mystream", ">")


def _pending(raw, *consumer) -> list:
    return raw.call("XPENDING", "mystream", "grp", "-", "+", "100", *consumer)


def _pel(raw) -> list:
    """The group PEL without the idle times of owned entries (they change as time passes)."""
    return [p if p[1] == b"" else [p[0], p[1], "idle", p[3]] for p in _pending(raw)]


def _claim_one(raw, consumer: str = "c2", idle: str = "0") -> bytes:
    rows = raw.call("XREADGROUP", "GROUP", "grp", consumer, "COUNT", "1", "CLAIM", idle, "STREAMS", "mystream", ">")
    return rows[0][1][0][0]


def _full_group(raw) -> dict:
    info = raw.call("XINFO", "STREAM", "mystream", "FULL")
    info = {info[i]: info[i + 1] for i in range(0, len(info), 2)}
    g = info[b"groups"][0]
    return {g[i]: g[i + 1] for i in range(0, len(g), 2)}


# ------------------------------------------------------------------ arguments
ERRORS = [
    # (arguments after XNACK, the error)
    ("", "ERR wrong number of arguments for 'xnack' command"),
    ("mystream grp SILENT IDS 1", "ERR wrong number of arguments for 'xnack' command"),
    ("mystream grp FAIL RETRYCOUNT", "ERR wrong number of arguments for 'xnack' command"),
    ("nosuchkey grp SILENT IDS 1 1-0", "NOGROUP No such key 'nosuchkey' or consumer group 'grp'"),
    ("mystream nogroup SILENT IDS 1 1-0", "NOGROUP No such key 'mystream' or consumer group 'nogroup'"),
    ("nosuchkey grp BADMODE IDS x 1-0", "NOGROUP No such key 'nosuchkey' or consumer group 'grp'"),  # group first
    ("mystream grp BADMODE IDS 1 1-0", "ERR mode must be SILENT, FAIL, or FATAL"),
    ("mystream grp FAIL BADOPT IDS 1 1-0", "ERR Unrecognized XNACK option 'BADOPT'"),
    ("mystream grp FAIL IDS 1 1-0 BADOPT", "ERR Unrecognized XNACK option 'BADOPT'"),
    ("mystream grp SILENT FORCE BADOPT IDS 1 1-0", "ERR Unrecognized XNACK option 'BADOPT'"),
    ("mystream grp FAIL RETRYCOUNT 5 BADOPT IDS 1 1-0", "ERR Unrecognized XNACK option 'BADOPT'"),
    ("mystream grp FAIL FORCE IDS 1 1-0 BADOPT RETRYCOUNT 5", "ERR Unrecognized XNACK option 'BADOPT'"),
    ("mystream grp FAIL FATAL IDS 1 1-0", "ERR Unrecognized XNACK option 'FATAL'"),  # one mode only
    ("mystream grp SILENT NOTIDS 1 1-0", "ERR Unrecognized XNACK option 'NOTIDS'"),
    ("mystream grp SILENT FORCE RETRYCOUNT 5", "ERR syntax error, expected IDS keyword"),
    ("mystream grp SILENT IDS abc 1-0", "ERR numids must be a positive integer"),
    ("mystream grp SILENT IDS 0 1-0", "ERR numids must be a positive integer"),
    ("mystream grp SILENT IDS -1 1-0", "ERR numids must be a positive integer"),
    ("mystream grp SILENT IDS 2147483648 1-0", "ERR numids must be a positive integer"),
    ("mystream grp SILENT IDS 2 1-0", "ERR number of IDs doesn't match numids"),
    ("mystream grp FAIL IDS 1 1-0 2-0", "ERR Unrecognized XNACK option '2-0'"),  # the surplus ID is an option
    ("mystream grp FAIL IDS 1 not-a-valid-id", "ERR Invalid stream ID specified as stream command argument"),
    ("mystream grp FAIL IDS 1 +", "ERR Invalid stream ID specified as stream command argument"),
    ("mystream grp FAIL IDS 1 1-0 RETRYCOUNT abc", "ERR value is not an integer or out of range"),
    ("mystream grp FAIL IDS 1 1-0 RETRYCOUNT 99999999999999999999", "ERR value is not an integer or out of range"),
    ("mystream grp FAIL IDS 1 1-0 RETRYCOUNT 1.5", "ERR value is not an integer or out of range"),
    ("mystream grp FAIL IDS 1 1-0 RETRYCOUNT -1", "ERR Invalid RETRYCOUNT value, must be >= 0"),
    ("mystream grp FAIL IDS 1 1-0 RETRYCOUNT", "ERR Unrecognized XNACK option 'RETRYCOUNT'"),
    ("mystream grp FAIL IDS 1 1-0 IDS", "ERR Unrecognized XNACK option 'IDS'"),
]


@pytest.mark.parametrize("args,error", ERRORS)
def test_argument_errors(raw, args, error):
    _stream(raw, 2)
    before = [(p[0], p[1], p[3]) for p in _pending(raw)]
    assert raw.call("XNACK", *args.split()) == Err(error)
    assert [(p[0], p[1], p[3]) for p in _pending(raw)] == before  # an error changes nothing
    assert raw.call("PING") == b"PONG"


def test_options_before_and_after_the_ids_block(raw):
    _stream(raw, 3, read=False)
    for args in ("FAIL FORCE IDS 1 1-0", "FAIL FORCE RETRYCOUNT 42 IDS 1 1-0", "FAIL RETRYCOUNT 5 IDS 1 1-0 FORCE",
                 "FAIL FORCE IDS 1 1-0 RETRYCOUNT 3", "FAIL IDS 1 1-0 RETRYCOUNT 20 FORCE", "fail ids 1 1-0 force"):
        assert raw.call("XNACK", "mystream", "grp", *args.split()) == 1, args
        assert raw.call("XACK", "mystream", "grp", "1-0") == 1
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "RETRYCOUNT", "10", "IDS", "3", "1-0", "2-0", "3-0",
                    "FORCE") == 3
    assert [p[3] for p in _pending(raw)] == [10, 10, 10]


# ------------------------------------------------------------------ the documented example
def test_the_command_page_example(raw):
    raw.call("XADD", "mystream", "1526569498055-0", "field", "value1")
    raw.call("XADD", "mystream", "1526569498056-0", "field", "value2")
    assert raw.call("XGROUP", "CREATE", "mystream", "mygroup", "0") == b"OK"
    assert raw.call("XREADGROUP", "GROUP", "mygroup", "consumer1", "STREAMS", "mystream", ">") == [
        [b"mystream", [[b"1526569498055-0", [b"field", b"value1"]], [b"1526569498056-0", [b"field", b"value2"]]]]]
    assert raw.call("XNACK", "mystream", "mygroup", "FAIL", "IDS", "2", "1526569498055-0", "1526569498056-0") == 2
    assert raw.call("XPENDING", "mystream", "mygroup", "-", "+", "10") == [
        [b"1526569498055-0", b"", -1, 1], [b"1526569498056-0", b"", -1, 1]]


# ------------------------------------------------------------------ delivery counters
def test_silent_takes_one_delivery_off_and_stops_at_zero(raw):
    _stream(raw, 1)
    assert raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "1", "1-0") == 1
    assert _pending(raw) == [[b"1-0", b"", -1, 0]]
    raw.call("XCLAIM", "mystream", "grp", "c2", "0", "1-0", "RETRYCOUNT", "0")
    raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "1", "1-0")
    assert _pending(raw)[0][3] == 0  # not below 0
    for _ in range(3):
        raw.call("XCLAIM", "mystream", "grp", "c1", "0", "1-0")
    assert _pending(raw)[0][3] == 3
    raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "1", "1-0")
    assert _pending(raw) == [[b"1-0", b"", -1, 2]]


def test_fail_keeps_the_count_and_fatal_sets_the_maximum(raw):
    _stream(raw, 2)
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0") == 1
    assert raw.call("XNACK", "mystream", "grp", "FATAL", "IDS", "1", "2-0") == 1
    assert _pending(raw) == [[b"1-0", b"", -1, 1], [b"2-0", b"", -1, LLONG_MAX]]
    # a claim of a FATAL entry does not wrap the counter: it stays at the maximum
    assert raw.call("XCLAIM", "mystream", "grp", "c2", "0", "2-0", "JUSTID") == [b"2-0"]
    raw.call("XCLAIM", "mystream", "grp", "c2", "0", "2-0")
    assert _pending(raw)[1][3] == LLONG_MAX


def test_renacking_a_released_entry_applies_the_mode_again(raw):
    _stream(raw, 1)
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0") == 1
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0") == 1
    assert _pending(raw) == [[b"1-0", b"", -1, 1]]
    raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "1", "1-0")
    assert _pending(raw)[0][3] == 0
    raw.call("XNACK", "mystream", "grp", "FATAL", "IDS", "1", "1-0")
    assert _pending(raw) == [[b"1-0", b"", -1, LLONG_MAX]]


def test_retrycount_overrides_every_mode(raw):
    _stream(raw, 1)
    assert raw.call("XNACK", "mystream", "grp", "FATAL", "IDS", "1", "1-0", "RETRYCOUNT", "42") == 1
    assert _pending(raw) == [[b"1-0", b"", -1, 42]]
    raw.call("XCLAIM", "mystream", "grp", "c1", "0", "1-0")
    raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "1", "1-0", "RETRYCOUNT", "10")
    assert _pending(raw)[0][3] == 10
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0", "RETRYCOUNT", "0")
    assert _pending(raw) == [[b"1-0", b"", -1, 0]]
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0", "RETRYCOUNT", str(LLONG_MAX))
    assert _pending(raw)[0][3] == LLONG_MAX


def test_the_reply_counts_what_was_released(raw):
    _stream(raw, 3)
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "9-9") == 0  # not pending
    assert raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "3", "1-0", "2-0", "3-0") == 3
    assert _pending(raw) == [[b"1-0", b"", -1, 0], [b"2-0", b"", -1, 0], [b"3-0", b"", -1, 0]]
    raw.call("XCLAIM", "mystream", "grp", "c1", "0", "1-0", "2-0", "3-0")
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "5", "1-0", "9-9", "2-0", "8-8", "3-0") == 3
    raw.call("XCLAIM", "mystream", "grp", "c1", "0", "1-0")
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "2", "1-0", "1-0") == 2  # each occurrence counts
    assert len(_pending(raw)) == 3 and _pending(raw)[0] == [b"1-0", b"", -1, 2]
    raw.call("XACK", "mystream", "grp", "1-0", "2-0", "3-0")
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0") == 0  # empty PEL


def test_xnack_of_a_key_without_groups_or_a_deleted_key(raw):
    raw.call("XADD", "s", "1-0", "f", "v")
    assert raw.call("XNACK", "s", "grp", "FAIL", "IDS", "1", "1-0") == \
        Err("NOGROUP No such key 's' or consumer group 'grp'")
    raw.call("XGROUP", "CREATE", "s", "grp", "0")
    raw.call("DEL", "s")
    assert raw.call("XNACK", "s", "grp", "FAIL", "IDS", "1", "1-0") == \
        Err("NOGROUP No such key 's' or consumer group 'grp'")


# ------------------------------------------------------------------ FORCE
def test_force_creates_unowned_entries_for_entries_of_the_stream(raw):
    _stream(raw, 3, read=False)
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0", "FORCE") == 1
    assert _pending(raw) == [[b"1-0", b"", -1, 0]]  # counted from 0: it was never delivered
    assert raw.call("XCLAIM", "mystream", "grp", "c1", "0", "1-0") == [[b"1-0", [b"f", b"v1"]]]
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "9-9", "FORCE") == 0  # no such entry
    raw.call("XACK", "mystream", "grp", "1-0")
    assert raw.call("XNACK", "mystream", "grp", "FATAL", "IDS", "1", "1-0", "FORCE") == 1
    assert _pending(raw) == [[b"1-0", b"", -1, LLONG_MAX]]
    raw.call("XACK", "mystream", "grp", "1-0")
    assert raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "2", "1-0", "2-0", "FORCE") == 2
    assert _pending(raw) == [[b"1-0", b"", -1, 0], [b"2-0", b"", -1, 0]]
    raw.call("XACK", "mystream", "grp", "1-0", "2-0")
    raw.call("XREADGROUP", "GROUP", "grp", "c1", "STREAMS", "mystream", ">")
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "3", "1-0", "2-0", "3-0", "FORCE") == 3
    assert _pending(raw) == [[b"1-0", b"", -1, 1], [b"2-0", b"", -1, 1], [b"3-0", b"", -1, 1]]
    assert _pending(raw, "c1") == []
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0", "FORCE") == 1  # no second entry
    assert len(_pending(raw)) == 3


def test_force_with_retrycount_and_a_deleted_entry(raw):
    _stream(raw, 3, read=False)
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0", "RETRYCOUNT", "7", "FORCE") == 1
    assert raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "1", "2-0", "RETRYCOUNT", "5", "FORCE") == 1
    raw.call("XDEL", "mystream", "3-0")
    assert raw.call("XNACK", "mystream", "grp", "FATAL", "IDS", "1", "3-0", "RETRYCOUNT", "99", "FORCE") == 0
    assert _pending(raw) == [[b"1-0", b"", -1, 7], [b"2-0", b"", -1, 5]]


# ------------------------------------------------------------------ the NACK zone
def test_released_entries_leave_their_consumer_but_not_the_group(raw):
    _stream(raw, 3, read=False)
    raw.call("XREADGROUP", "GROUP", "grp", "c1", "COUNT", "2", "STREAMS", "mystream", ">")
    raw.call("XREADGROUP", "GROUP", "grp", "c2", "COUNT", "1", "STREAMS", "mystream", ">")
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "3-0") == 1
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0") == 1
    pending = _pending(raw)
    assert pending[0] == [b"1-0", b"", -1, 1] and pending[2] == [b"3-0", b"", -1, 1]
    assert pending[1][:2] == [b"2-0", b"c1"]
    assert [p[0] for p in _pending(raw, "c1")] == [b"2-0"] and _pending(raw, "c2") == []
    # the summary: released entries count, but belong to no consumer
    assert raw.call("XPENDING", "mystream", "grp") == [3, b"1-0", b"3-0", [[b"c1", b"1"]]]
    # IDLE never filters a released entry out
    assert [p[0] for p in raw.call("XPENDING", "mystream", "grp", "IDLE", "99999999", "-", "+", "10")] == \
        [b"1-0", b"3-0"]
    groups = raw.call("XINFO", "GROUPS", "mystream")[0]
    assert dict(zip(groups[::2], groups[1::2], strict=True))[b"consumers"] == 2  # no consumer created or removed
    assert dict(zip(groups[::2], groups[1::2], strict=True))[b"pending"] == 3
    consumers = {c[1]: c[3] for c in raw.call("XINFO", "CONSUMERS", "mystream", "grp")}
    assert consumers == {b"c1": 1, b"c2": 0}


def test_xinfo_stream_full_shows_the_nacked_count_and_unowned_entries(raw):
    _stream(raw, 4)
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "3-0")
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0")
    g = _full_group(raw)
    keys = list(g)
    assert keys[keys.index(b"pel-count") + 1] == b"nacked-count"  # right after pel-count, as Redis
    assert (g[b"pel-count"], g[b"nacked-count"]) == (4, 2)
    pel = g[b"pending"]
    assert pel[0] == [b"1-0", b"", 0, 1] and pel[2] == [b"3-0", b"", 0, 1]
    assert pel[1][1] == b"c1" and pel[3][1] == b"c1"
    consumer = g[b"consumers"][0]
    consumer = dict(zip(consumer[::2], consumer[1::2], strict=True))
    assert consumer[b"pel-count"] == 2 and [p[0] for p in consumer[b"pending"]] == [b"2-0", b"4-0"]


def test_claim_serves_released_entries_first_in_release_order(raw):
    _stream(raw, 3)
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "3", "1-0", "2-0", "3-0")
    assert _full_group(raw)[b"nacked-count"] == 3
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0")  # to the end of the zone
    g = _full_group(raw)
    assert (g[b"nacked-count"], g[b"pel-count"]) == (3, 3)
    # a large min-idle-time: released entries are claimable at once
    assert [_claim_one(raw, "c2", "5000") for _ in range(3)] == [b"2-0", b"3-0", b"1-0"]
    assert _full_group(raw)[b"nacked-count"] == 0
    assert [p[1] for p in _pending(raw)] == [b"c2"] * 3


def test_released_entries_come_before_idle_owned_ones(raw):
    _stream(raw, 3)
    raw.call("XNACK", "mystream", "grp", "FATAL", "IDS", "1", "3-0")
    rows = raw.call("XREADGROUP", "GROUP", "grp", "c2", "CLAIM", "0", "STREAMS", "mystream", ">")[0][1]
    assert [r[0] for r in rows] == [b"3-0", b"1-0", b"2-0"]
    assert rows[0][3] == LLONG_MAX  # the count before this delivery
    assert rows[0][2] > 10 ** 12  # idle since delivery time 0: "now" in milliseconds, as Redis reports it
    assert _pending(raw)[2][3] == LLONG_MAX  # saturated, not wrapped


def test_xclaim_and_xautoclaim_take_released_entries_whatever_the_min_idle(raw):
    _stream(raw, 2)
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0")
    assert raw.call("XCLAIM", "mystream", "grp", "c2", "99999", "1-0", "2-0", "JUSTID") == [b"1-0"]
    raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "1", "2-0")
    assert raw.call("XAUTOCLAIM", "mystream", "grp", "c3", "99999", "0-0", "JUSTID") == [b"0-0", [b"2-0"], []]
    assert _pending(raw, "c3") [0][:2] == [b"2-0", b"c3"]
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0")
    assert raw.call("XACK", "mystream", "grp", "1-0") == 1  # XACK takes a released entry too
    assert [p[0] for p in _pending(raw)] == [b"2-0"]


def test_released_entries_stay_pending_after_xdel_and_xtrim(raw):
    _stream(raw, 3)
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0")
    raw.call("XDEL", "mystream", "1-0")
    raw.call("XTRIM", "mystream", "MAXLEN", "1")
    assert _pending(raw)[0] == [b"1-0", b"", -1, 1] and len(_pending(raw)) == 3
    # a claim of an entry that is gone drops it, as for an owned one
    assert raw.call("XAUTOCLAIM", "mystream", "grp", "c2", "0", "0-0", "COUNT", "1") == [b"2-0", [], [b"1-0"]]


def test_delref_deletion_drops_released_entries(raw):
    _stream(raw, 2)
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0")
    assert raw.call("XDELEX", "mystream", "DELREF", "IDS", "1", "1-0") == [1]
    assert [p[0] for p in _pending(raw)] == [b"2-0"]
    assert _full_group(raw)[b"nacked-count"] == 0


def test_a_blocked_xreadgroup_claim_is_woken_by_xnack(braid_proc, raw):
    _stream(raw, 1)
    got = {}
    blocked = RawClient(braid_proc.port)

    def read():
        got["reply"] = blocked.call("XREADGROUP", "GROUP", "grp", "c2", "BLOCK", "0", "CLAIM", "3600000",
                                    "STREAMS", "mystream", ">")

    t = threading.Thread(target=read, daemon=True)
    t.start()

    def is_blocked():
        info = raw.call("INFO", "clients").decode()
        return "blocked_clients:1" in info

    wait_until(is_blocked, 10, what="the XREADGROUP to block")
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0") == 1
    t.join(10)
    assert not t.is_alive()
    rows = got["reply"][0][1]
    assert [r[0] for r in rows] == [b"1-0"] and rows[0][3] == 1
    assert _pending(raw)[0][:2] == [b"1-0", b"c2"]
    blocked.close()


def test_a_blocked_xreadgroup_without_claim_does_not_get_released_entries(braid_proc, raw):
    """Only CLAIM serves released entries: a plain ``>`` reader woken by the XNACK keeps waiting."""
    _stream(raw, 1)
    got = {}
    blocked = RawClient(braid_proc.port)

    def read():
        got["reply"] = blocked.call("XREADGROUP", "GROUP", "grp", "c2", "BLOCK", "0", "STREAMS", "mystream", ">")

    t = threading.Thread(target=read, daemon=True)
    t.start()
    wait_until(lambda: "blocked_clients:1" in raw.call("INFO", "clients").decode(), 10,
               what="the XREADGROUP to block")
    assert raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "1-0") == 1
    raw.call("XADD", "mystream", "9-0", "f", "v9")
    t.join(10)
    assert not t.is_alive()
    assert got["reply"] == [[b"mystream", [[b"9-0", [b"f", b"v9"]]]]]
    assert _pending(raw)[0][:2] == [b"1-0", b""]  # still released
    blocked.close()


def test_command_metadata(raw):
    info = raw.call("COMMAND", "INFO", "XNACK")[0]
    assert info[:6] == [b"xnack", -7, [b"write", b"fast"], 1, 1, 1]
    assert info[6] == [b"@write", b"@stream", b"@fast"]
    docs = raw.call("COMMAND", "DOCS", "XNACK")
    doc = dict(zip(docs[1][::2], docs[1][1::2], strict=True))
    assert doc[b"since"] == b"8.8.0" and doc[b"group"] == b"stream"


# ------------------------------------------------------------------ Active-Active
def test_xnack_is_region_local():
    """XNACK issues no operation: the other regions keep their own PEL for the entry, the replicated
    state still converges, and an XACK of the released entry moves the XACK watermark as any XACK."""
    r1, r2 = Region(1), Region(2)
    r1.clock = r2.clock = 100
    r1.create_group(b"a", b"g")
    r1.xadd(b"a")
    sync(r1, r2)
    assert r1.xreadgroup(b"a", b"g", b"c1") == [b"100-1"]
    assert r2.xreadgroup(b"a", b"g", b"c2") == [b"100-1"]
    ops_before = dict(r1.causal.vv)
    assert r1.call(b"XNACK", b"a", b"g", b"FATAL", b"IDS", b"1", b"100-1") == 1
    assert r1.causal.vv == ops_before  # nothing to replicate
    sync(r1, r2)
    assert r1.snapshot() == r2.snapshot()
    released, kept = r1.keys[b"a"].groups[b"g"].pel[(100, 1)], r2.keys[b"a"].groups[b"g"].pel[(100, 1)]
    assert (released.consumer, released.delivery_count) == (None, LLONG_MAX)
    assert (kept.consumer.name, kept.delivery_count) == (b"c2", 1)
    r1.xack(b"a", b"g", (100, 1))  # the released entry acknowledged: the watermark replicates
    sync(r1, r2)
    assert r2.keys[b"a"].groups[b"g"].watermarks == {1: (100, 1)}


# ------------------------------------------------------------------ persistence
def _script(raw) -> None:
    _stream(raw, 6)
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "5-0")
    raw.call("XNACK", "mystream", "grp", "FATAL", "IDS", "2", "2-0", "1-0")
    raw.call("XNACK", "mystream", "grp", "SILENT", "IDS", "1", "4-0", "RETRYCOUNT", "9")
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "3-0", "FORCE")
    raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "5-0")  # to the end of the zone


@pytest.mark.parametrize("snapshot", [False, True], ids=["log-replay", "snapshot"])
def test_a_restart_gives_back_counters_and_nack_order(tmp_path, snapshot):
    """The log replays every XNACK exactly; a snapshot keeps the NACK zone (unowned entries, their
    delivery time of 0 and their order) - a format snapshots written before XNACK also have."""
    directory = str(tmp_path)
    with InProcessServer(Config(dir=directory)) as srv:
        raw = RawClient(srv.port)
        try:
            _script(raw)
            if snapshot:
                assert raw.call("SAVE") == b"OK"
                raw.call("XNACK", "mystream", "grp", "FAIL", "IDS", "1", "6-0")  # one more after the snapshot
            pending = _pel(raw)
            info = raw.call("XINFO", "STREAM", "mystream", "FULL", "COUNT", "0")
        finally:
            raw.close()
    assert [p[3] for p in pending] == [LLONG_MAX, LLONG_MAX, 1, 9, 1, 1]
    assert [p[1] for p in pending] == [b"", b"", b"", b"", b"", b"" if snapshot else b"c1"]
    with InProcessServer(Config(dir=directory)) as srv:
        raw = RawClient(srv.port)
        try:
            assert _pel(raw) == pending
            assert raw.call("XINFO", "STREAM", "mystream", "FULL", "COUNT", "0") == info
            claimed = raw.call("XREADGROUP", "GROUP", "grp", "c9", "CLAIM", "0", "STREAMS", "mystream", ">")[0][1]
            assert [r[0] for r in claimed] == [b"2-0", b"1-0", b"4-0", b"3-0", b"5-0", b"6-0"]
        finally:
            raw.close()


def test_a_killed_region_replays_xnack_from_its_log(tmp_path):
    """A real process killed with SIGKILL: the records of its XNACKs are replayed at the restart."""
    with BraidProcess(data_dir=str(tmp_path), extra_args=["--appendfsync", "always"]) as p:
        raw = RawClient(p.port)
        try:
            _script(raw)
            before = _pel(raw)
        finally:
            raw.close()
        p.kill()
        p.restart()
        raw = RawClient(p.port)
        try:
            assert _pel(raw) == before
            assert _full_group(raw)[b"nacked-count"] == 5
            claimed = raw.call("XREADGROUP", "GROUP", "grp", "c9", "CLAIM", "0", "STREAMS", "mystream", ">")[0][1]
            assert [r[0] for r in claimed] == [b"2-0", b"1-0", b"4-0", b"3-0", b"5-0", b"6-0"]
        finally:
            raw.close()
