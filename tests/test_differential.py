"""Braid against Debian's redis-server (7.0): the same commands, the same replies.

Each test sends a command script to both servers and compares every reply,
errors included (see tests/differential.py for the harness and the few fields
normalised).  Scripts use explicit IDs so that time does not enter.
"""

from __future__ import annotations

import pytest

from tests.differential import Pair


@pytest.fixture
def pair(braid_proc, redis_proc):
    p = Pair(braid_proc.port, redis_proc.port)
    for cmd in (("FLUSHALL",), ("CONFIG", "SET", "stream-node-max-entries", "100"),
                ("CONFIG", "SET", "stream-node-max-bytes", "4096")):
        p.check(*cmd)
    yield p
    p.close()


def run_script(pair: Pair, script: str) -> None:
    for line in script.strip().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            pair.check(*line.split())


def test_xadd_ids_and_errors(pair):
    run_script(pair, """
    XADD s 1-1 f v
    XADD s 1-1 f v
    XADD s 1-0 f v
    XADD s 1 f v
    XADD s 1-* f v
    XADD s 2-* a b c d
    XADD s 0-0 f v
    XADD s2 0-0 f v
    EXISTS s2
    XADD s 18446744073709551615-18446744073709551615 f v
    XADD s 5-5 f v
    XADD s 18446744073709551616 f v
    XADD s -1 f v
    XADD s 1-2-3 f v
    XADD s abc f v
    XADD s 3-1 f
    XADD s 3-1
    XADD s NOMKSTREAM 3-1 f v
    XADD missing NOMKSTREAM 3-1 f v
    EXISTS missing
    XADD s MAXLEN -1 3-1 f v
    XADD s MAXLEN abc 3-1 f v
    XADD s MAXLEN 1 MINID 1 3-1 f v
    XADD s LIMIT 10 3-1 f v
    XADD s MAXLEN 5 LIMIT 10 3-1 f v
    XADD s MAXLEN ~ 5 LIMIT -1 3-1 f v
    XADD s BOGUS 3-1 f v
    XLEN s
    XRANGE s - +
    """)


def test_xrange_bounds_and_count(pair):
    for i in range(1, 13):
        pair.check("XADD", "r", f"{i}-{i % 3}", "n", str(i), "x", "y" * i)
    run_script(pair, """
    XRANGE r - +
    XRANGE r - + COUNT 3
    XRANGE r - + COUNT 0
    XRANGE r - + COUNT -5
    XRANGE r 3 7
    XRANGE r (3-0 (7-1
    XRANGE r (3 7
    XRANGE r ( +
    XRANGE r (- +
    XRANGE r - (+
    XRANGE r (18446744073709551615-18446744073709551615 +
    XRANGE r - (0-0
    XRANGE r 5 3
    XRANGE r - + COUNT
    XRANGE r - + COUNT x
    XRANGE r - + LIMIT 1
    XREVRANGE r + -
    XREVRANGE r + - COUNT 2
    XREVRANGE r (7-1 (3-0
    XREVRANGE r 3 7
    XRANGE nokey - +
    XREVRANGE nokey + -
    XRANGE r abc +
    """)


def test_trimming_matches_block_layout(pair):
    pair.check("CONFIG", "SET", "stream-node-max-entries", "4")
    for i in range(1, 31):
        pair.check("XADD", "t", f"{i}-0", "f", "v")
    run_script(pair, """
    XTRIM t MAXLEN ~ 25
    XLEN t
    XTRIM t MAXLEN ~ 25
    XTRIM t MAXLEN = 24
    XRANGE t - + COUNT 2
    XTRIM t MINID ~ 12
    XRANGE t - + COUNT 2
    XTRIM t MINID 13
    XTRIM t MAXLEN ~ 2 LIMIT 4
    XLEN t
    XTRIM t MAXLEN 0
    XLEN t
    EXISTS t
    XINFO STREAM t
    XTRIM t
    XTRIM t MAXLEN
    XTRIM t FOO 1
    XTRIM nokey MAXLEN 1
    XADD t MAXLEN ~ 3 100-0 f v
    """)


def test_node_split_by_bytes(pair):
    pair.check("CONFIG", "SET", "stream-node-max-bytes", "120")
    for i in range(1, 40):
        pair.check("XADD", "b", f"{i}-0", "field", "v" * (i % 7), "n", str(i * 1000))
    pair.check("XINFO", "STREAM", "b")
    pair.check("XTRIM", "b", "MAXLEN", "~", "10")
    pair.check("XINFO", "STREAM", "b")
    pair.check("XDEL", "b", "35-0", "36-0")
    pair.check("XTRIM", "b", "MAXLEN", "~", "1")
    pair.check("XINFO", "STREAM", "b")


def test_xdel_counters_and_first_id(pair):
    run_script(pair, """
    XADD d 1-0 a 1
    XADD d 2-0 a 2
    XADD d 3-0 a 3
    XDEL d 1-0 5-0 1-0
    XINFO STREAM d
    XDEL d 3-0
    XINFO STREAM d
    XDEL d 2-0
    XINFO STREAM d
    EXISTS d
    XDEL nokey 1-0
    XDEL d bad
    XSETID d 3-0
    XSETID d 9-0 ENTRIESADDED 2
    XSETID d 9-0 ENTRIESADDED -1
    XSETID d 9-0 MAXDELETEDID 10-0
    XSETID d 10-0 MAXDELETEDID 8-0 ENTRIESADDED 12
    XINFO STREAM d
    XSETID nokey 1-0
    XSETID d 10-0 FOO 1
    """)


def test_groups_lifecycle(pair):
    run_script(pair, """
    XGROUP CREATE g grp $
    XGROUP CREATE g grp $ MKSTREAM
    XGROUP CREATE g grp $ MKSTREAM
    XGROUP CREATE g grp2 0 ENTRIESREAD -5
    XGROUP CREATE g grp3 0 ENTRIESREAD 0
    XGROUP CREATE g grp4 bad
    XGROUP CREATE g grp5 0 BOGUS
    XINFO GROUPS g
    XADD g 1-0 f 1
    XADD g 2-0 f 2
    XADD g 3-0 f 3
    XINFO GROUPS g
    XGROUP CREATECONSUMER g grp alice
    XGROUP CREATECONSUMER g grp alice
    XGROUP CREATECONSUMER g nogrp alice
    XGROUP SETID g grp 1-0
    XGROUP SETID g grp $ ENTRIESREAD 3
    XGROUP SETID g nogrp 0
    XINFO GROUPS g
    XGROUP DELCONSUMER g grp alice
    XGROUP DELCONSUMER g grp nobody
    XGROUP DESTROY g grp
    XGROUP DESTROY g grp
    XGROUP DESTROY nokey grp
    XGROUP FOO g grp
    XGROUP CREATE g
    XINFO GROUPS g
    XINFO CONSUMERS g grp2
    XINFO CONSUMERS g nogrp
    XINFO GROUPS nokey
    """)


def test_readgroup_ack_pending_claim(pair):
    run_script(pair, """
    XADD q 1-0 f 1
    XADD q 2-0 f 2
    XADD q 3-0 f 3
    XADD q 4-0 f 4
    XGROUP CREATE q g 0
    XREADGROUP GROUP g alice COUNT 2 STREAMS q >
    XREADGROUP GROUP g bob STREAMS q >
    XREADGROUP GROUP g bob STREAMS q >
    XREADGROUP GROUP g alice STREAMS q 0
    XREADGROUP GROUP g alice COUNT 1 STREAMS q 0
    XPENDING q g
    XPENDING q g - + 10
    XPENDING q g - + 10 alice
    XPENDING q g (1-0 + 1
    XPENDING q g - + 10 nobody
    XPENDING q g IDLE 0 - + 10
    XPENDING q nogrp
    XPENDING q g - +
    XACK q g 1-0 9-0
    XACK q g 1-0
    XACK q nogrp 1-0
    XACK q g bad
    XDEL q 2-0
    XREADGROUP GROUP g alice STREAMS q 0
    XCLAIM q g carol 0 2-0 3-0
    XCLAIM q g carol 0 3-0 JUSTID
    XCLAIM q g carol 0 4-0 RETRYCOUNT 7 JUSTID
    XPENDING q g - + 10
    XCLAIM q g carol 0 1-0 FORCE JUSTID
    XCLAIM q g carol 0 3-0 BOGUS
    XCLAIM q g carol abc 3-0
    XCLAIM q nogrp carol 0 3-0
    XAUTOCLAIM q g dave 0 0 COUNT 2
    XAUTOCLAIM q g dave 0 0 JUSTID
    XAUTOCLAIM q g dave 0 0 COUNT 0
    XAUTOCLAIM q nogrp dave 0 0
    XINFO CONSUMERS q g
    XINFO GROUPS q
    XINFO STREAM q FULL
    XINFO STREAM q FULL COUNT 1
    XREADGROUP GROUP nogrp alice STREAMS q >
    XREADGROUP GROUP g alice STREAMS q $
    XREADGROUP GROUP g alice STREAMS q
    XREADGROUP alice STREAMS q >
    XREADGROUP GROUP g alice NOACK STREAMS q >
    XADD q 5-0 f 5
    XREADGROUP GROUP g alice NOACK STREAMS q >
    XPENDING q g
    """)


def test_xread(pair):
    run_script(pair, """
    XADD a 1-0 f 1
    XADD a 2-0 f 2
    XADD b 5-0 g 1
    XREAD STREAMS a b 0 0
    XREAD COUNT 1 STREAMS a b 0 0
    XREAD STREAMS a b 2-0 5-0
    XREAD STREAMS a $
    XREAD STREAMS a
    XREAD STREAMS a nokey 0 0
    XREAD COUNT -1 STREAMS a 0
    XREAD STREAMS a >
    XREAD BLOCK -1 STREAMS a 0
    XREAD GROUP g c STREAMS a 0
    XREAD NOACK STREAMS a 0
    XREAD BOGUS STREAMS a 0
    """)


def test_lag_and_entries_read(pair):
    run_script(pair, """
    XADD l 1-0 f 1
    XADD l 2-0 f 2
    XADD l 3-0 f 3
    XADD l 4-0 f 4
    XGROUP CREATE l g 0
    XGROUP CREATE l h $
    XREADGROUP GROUP g c COUNT 1 STREAMS l >
    XINFO GROUPS l
    XDEL l 3-0
    XINFO GROUPS l
    XREADGROUP GROUP g c COUNT 1 STREAMS l >
    XINFO GROUPS l
    XREADGROUP GROUP g c STREAMS l >
    XINFO GROUPS l
    XTRIM l MAXLEN 0
    XINFO GROUPS l
    XINFO STREAM l
    """)


def test_keys_and_transactions(pair):
    run_script(pair, """
    XADD k1 1-0 f v
    XADD k2 1-0 f v
    EXISTS k1 k2 k3 k1
    TYPE k1
    TYPE nokey
    RENAME k1 k3
    RENAME nokey k4
    RENAMENX k2 k3
    RENAMENX k2 k4
    RENAME k4 k4
    EXISTS k1 k2 k3 k4
    DEL k3 k4 nokey
    DBSIZE
    MULTI
    XADD m 1-0 f v
    XLEN m
    XADD m 1-0 f v
    EXEC
    MULTI
    XADD m 2-0 f v
    NOSUCHCOMMAND
    EXEC
    XLEN m
    EXEC
    DISCARD
    MULTI
    MULTI
    DISCARD
    SELECT 0
    SELECT x
    PING
    PING hello
    PING a b
    ECHO hi
    XADD
    """)


@pytest.mark.parametrize("command", ["XREAD", "XREADGROUP"])
@pytest.mark.parametrize("timeout", ["1.5", "500.9", "1e3", "+5", " 5", "5 ", "1_0", "-0", "00", "0x10", "",
                                     "18446744073709551616", "-9223372036854775809", "inf", "nan", "-1", "-1.5"])
def test_block_timeouts_are_integers_in_redis_spelling_only(pair, command, timeout):
    """Every odd spelling of a BLOCK timeout is refused as Redis refuses it (none blocks)."""
    pair.check("XADD", "a", "1-0", "f", "1")
    pair.check("XGROUP", "CREATE", "a", "g", "0")
    head = ["XREADGROUP", "GROUP", "g", "c"] if command == "XREADGROUP" else ["XREAD"]
    pair.check(*head, "BLOCK", timeout, "STREAMS", "a", ">" if command == "XREADGROUP" else "$")


# ---------------------------------------------------------------- blocked readers, call statistics and
# the change counter: what Redis 8.6 does that Redis 7.0 shares (the rest is in tests/test_xread_810.py).
def _info(client, section: str) -> dict[str, str]:
    text = client.call("INFO", section).decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


def _call_stats(client, name: str) -> tuple[int, int, int]:
    """(calls, rejected_calls, failed_calls) of one command in INFO commandstats."""
    fields = dict(kv.split("=") for kv in _info(client, "commandstats")[f"cmdstat_{name}"].split(","))
    return int(fields["calls"]), int(fields["rejected_calls"]), int(fields["failed_calls"])


def _block_both(ports: tuple[int, int], *argv):
    """Send a blocking command to each server on a connection of its own; wait until both are
    blocked.  Returns a function that waits for and returns both replies."""
    import threading

    from node.testing import wait_until
    from tests.differential import RawClient

    replies: list = [None, None]
    threads = []
    for i, port in enumerate(ports):
        def run(i=i, port=port):
            c = RawClient(port)
            try:
                replies[i] = c.call(*argv)
            finally:
                c.close()
        threads.append(threading.Thread(target=run))
        threads[-1].start()
    watchers = [RawClient(p) for p in ports]
    try:
        wait_until(lambda: all(_info(w, "clients")["blocked_clients"] == "1" for w in watchers), 10,
                   what="both servers to block the reader")
    finally:
        for w in watchers:
            w.close()

    def replies_when_done():
        for t in threads:
            t.join(10)
            assert not t.is_alive()
        return replies
    return replies_when_done


@pytest.fixture
def ports(braid_proc, redis_proc):
    return braid_proc.port, redis_proc.port


def test_a_blocked_command_ending_in_an_error_is_one_failed_call(pair, ports):
    pair.check("XADD", "mystream", "1-0", "a", "1")
    pair.check("XGROUP", "CREATE", "mystream", "mygroup", "$")
    pair.check("CONFIG", "RESETSTAT")
    done = _block_both(ports, "XREADGROUP", "GROUP", "mygroup", "c1", "BLOCK", "0", "STREAMS", "mystream", ">")
    assert _info(pair.braid, "clients")["clients_in_timeout_table"] == _info(pair.redis, "clients")[
        "clients_in_timeout_table"] == "0"
    pair.check("XGROUP", "DESTROY", "mystream", "mygroup")
    b, r = done()
    # both answer NOGROUP (7.0's text differs from 8.6's, which Braid has)
    assert str(b).split()[0] == str(r).split()[0] == "NOGROUP"
    assert _call_stats(pair.braid, "xreadgroup") == _call_stats(pair.redis, "xreadgroup") == (1, 0, 1)
    assert _info(pair.braid, "errorstats")["errorstat_NOGROUP"] == _info(pair.redis, "errorstats")[
        "errorstat_NOGROUP"]
    # a deleted key: 7.0 answers UNBLOCKED, 8.6 (and Braid) NOGROUP; both count one failed call
    pair.check("XGROUP", "CREATE", "mystream", "mygroup", "$")
    done = _block_both(ports, "XREADGROUP", "GROUP", "mygroup", "c1", "BLOCK", "0", "STREAMS", "mystream", ">")
    pair.check("DEL", "mystream")
    done()
    assert _call_stats(pair.braid, "xreadgroup") == _call_stats(pair.redis, "xreadgroup") == (2, 0, 2)


def test_a_blocked_command_counts_once_when_it_ends(pair, ports):
    pair.check("XADD", "s", "1-0", "f", "v")
    pair.check("XGROUP", "CREATE", "s", "g", "$")
    pair.check("CONFIG", "RESETSTAT")
    pair.check("XREADGROUP", "GROUP", "g", "c", "BLOCK", "1", "STREAMS", "s", ">")  # times out
    done = _block_both(ports, "XREAD", "BLOCK", "100000", "STREAMS", "s", "$")
    assert _info(pair.braid, "clients")["clients_in_timeout_table"] == _info(pair.redis, "clients")[
        "clients_in_timeout_table"] == "1"
    pair.check("XADD", "s", "2-0", "f", "v")
    b, r = done()
    assert b == r
    for name in ("xreadgroup", "xread"):
        assert _call_stats(pair.braid, name) == _call_stats(pair.redis, name) == (1, 0, 0)


def test_a_blocked_xread_waits_on_through_a_delete(pair, ports):
    pair.check("XADD", "mystream", "1-0", "a", "1")
    done = _block_both(ports, "XREAD", "BLOCK", "0", "STREAMS", "mystream", "$")
    pair.check("DEL", "mystream")
    pair.check("XADD", "mystream", "0-1", "a", "2")  # not after the '$' it blocked with: still waiting
    assert _info(pair.braid, "clients")["blocked_clients"] == _info(pair.redis, "clients")["blocked_clients"] == "1"
    pair.check("XADD", "mystream", "2-0", "a", "3")
    b, r = done()
    assert b == r == [[b"mystream", [[b"2-0", [b"a", b"3"]]]]]


def test_xreadgroup_changes_counted_as_redis_counts_them(pair):
    """The cases where Redis 7.0 and 8.6 agree (history reads and a consumer created by a
    read of nothing differ: tests/test_xread_810.py has 8.6's numbers)."""
    for line in ("XADD s 1-0 f v", "XADD s 2-0 f v", "XADD t 1-0 f v",
                 "XGROUP CREATE s g 0", "XGROUP CREATE t g 0"):
        pair.check(*line.split())

    def changes(client) -> int:
        return int(_info(client, "persistence")["rdb_changes_since_last_save"])

    for line in ("XREADGROUP GROUP g c1 STREAMS s t > >",  # two consumers, two streams delivered: 4
                 "XREADGROUP GROUP g c1 STREAMS s t > >",  # nothing new: 0
                 "XADD s 3-0 f v",
                 "XREADGROUP GROUP g c1 COUNT 1 STREAMS s t > >",  # one stream delivered: 1
                 "XADD s 4-0 f v", "XADD t 4-0 f v",
                 "XREADGROUP GROUP g c1 NOACK STREAMS s t > >",  # NOACK moves the cursors: 2
                 "XADD s 5-0 f v",
                 "XREADGROUP GROUP g c2 COUNT 1 STREAMS s >"):  # a consumer and a delivery: 2
        before = changes(pair.braid), changes(pair.redis)
        pair.check(*line.split())
        assert changes(pair.braid) - before[0] == changes(pair.redis) - before[1], line


# ---------------------------------------------------------------- COPY
# Braid has one database: DB indexes other than 0 are left out (Redis copies into them;
# Braid answers "ERR DB index is out of range", as its SELECT does).
def test_copy_of_a_stream_with_groups_and_deleted_entries(pair):
    run_script(pair, """
    CONFIG SET stream-node-max-entries 3
    XADD s 1-0 f 1
    XADD s 2-0 f 2 g x
    XADD s 3-0 f 3
    XADD s 4-0 f 4
    XADD s 5-0 f 5
    XADD s 6-0 f 6 g y
    XADD s 7-0 f 7
    XDEL s 2-0 6-0
    XSETID s 9-0 ENTRIESADDED 12 MAXDELETEDID 8-0
    XGROUP CREATE s g1 0
    XGROUP CREATE s g2 4-0 ENTRIESREAD 3
    XREADGROUP GROUP g1 alice COUNT 2 STREAMS s >
    XREADGROUP GROUP g1 bob STREAMS s >
    XACK s g1 3-0
    XGROUP CREATECONSUMER s g1 idle
    XREADGROUP GROUP g2 carol COUNT 1 STREAMS s >
    COPY s d
    XINFO STREAM d FULL
    XINFO STREAM s FULL
    XINFO GROUPS d
    XINFO CONSUMERS d g1
    XPENDING d g1
    XPENDING d g1 - + 10
    XPENDING d g2 - + 10
    XRANGE d - +
    XREADGROUP GROUP g1 alice STREAMS d 0
    XREADGROUP GROUP g2 dave STREAMS d >
    XINFO GROUPS s
    XADD d 10-0 f 10
    XLEN s
    XLEN d
    XADD s 11-0 f 11
    XRANGE d 10 +
    XRANGE s 10 +
    """)


def test_copy_replies_and_options(pair):
    run_script(pair, """
    XADD s 1-0 f v
    XADD t 5-0 f w
    COPY missing d
    EXISTS d
    COPY s t
    XRANGE t - +
    COPY s t REPLACE
    XRANGE t - +
    COPY s u DB 0
    COPY s u DB 0 REPLACE
    COPY s u REPLACE DB 0
    COPY s u replace replace
    COPY s u db 0 db 0 REPLACE
    COPY s s
    COPY s s REPLACE
    COPY missing missing
    COPY s w DB 16
    COPY s w DB -1
    COPY s w DB abc
    COPY s w DB 2147483648
    COPY s w DB -2147483649
    COPY s w DB 9223372036854775807
    COPY s w DB 9223372036854775808
    COPY s w DB -9223372036854775809
    COPY s w DB 0x10
    COPY s w DB 1.5
    COPY s w DB
    COPY s w BOGUS
    COPY s w REPLACE BOGUS
    COPY s s DB abc
    COPY s
    COPY
    EXISTS w
    XADD e 1-0 f v
    XDEL e 1-0
    COPY e e2
    EXISTS e2
    XINFO STREAM e2
    XLEN e2
    """)
