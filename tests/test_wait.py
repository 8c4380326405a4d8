"""WAIT, WAITAOF and read-your-writes tokens across regions (node/commands/waits.py).

Real regions on loopback: a write for which WAIT answered k is applied at k other regions the
moment WAIT answers, survives its region's SIGKILL and forced removal; paused links do not
count; a token taken at one region makes another wait until it applied the write.  Argument
parsing and reply shapes are compared with a real redis-server."""

from __future__ import annotations

import pytest
import redis

from node.region.config import Config
from node.testing import InProcessServer, LocalCluster, RedisProcess, wait_in_sync

ODD_NUMBERS = ["0", "1", "-1", "1.5", "1e3", "+5", "-0", " 5", "5 ", "0x10", "", "9223372036854775807",
               "9223372036854775808", "-9223372036854775808", "99999999999999999999", "abc"]


def _reply(client: redis.Redis, *argv):
    try:
        return client.execute_command(*argv)
    except redis.ResponseError as e:
        return f"error: {e}"


@pytest.fixture(scope="module")
def pair():
    """A real redis-server without replicas or AOF, and a standalone region without a log."""
    config = Config()
    config.set("appendonly", False)
    with RedisProcess() as real, InProcessServer(config) as braid:
        a, b = real.client(), braid.client()
        yield a, b
        a.close()
        b.close()


def test_wait_parses_its_arguments_as_redis_does(pair):
    real, braid = pair
    cases = [("WAIT", odd, "1") for odd in ODD_NUMBERS] + [("WAIT", "0", odd) for odd in ODD_NUMBERS]
    cases += [("WAIT",), ("WAIT", "0"), ("WAIT", "0", "0", "0")]
    # (Redis 7.0 takes a timeout whose deadline overflows; Redis 7.2 on refuses it, as Braid does)
    overflows = [argv for argv in cases if argv[-1] == "9223372036854775807"]
    for argv in cases:
        if argv not in overflows:
            assert _reply(braid, *argv) == _reply(real, *argv), argv
    for argv in overflows:
        assert _reply(braid, *argv) == "error: timeout is out of range"


def _waitaof_as_redis(real: redis.Redis, numlocal: str, numregions: str, timeout: str):
    """What Redis 7.2+ answers WAITAOF without AOF or replicas, from the parsing the real server
    (7.0, which has no WAITAOF) does of the same arguments in WAIT: a long for each count
    (then numlocal within 0..1, numreplicas not negative), WAIT's timeout."""
    for arg, lo, hi, message in ((numlocal, 0, 1, "value is out of range, value must between 0 and 1"),
                                 (numregions, 0, 1 << 63, "value is out of range, must be positive")):
        parsed = _reply(real, "WAIT", arg, "1")
        if isinstance(parsed, str):
            return parsed
        if not lo <= int(arg) <= hi:
            return f"error: {message}"
    if timeout == "9223372036854775807":
        return "error: timeout is out of range"
    parsed = _reply(real, "WAIT", "0", timeout)
    if isinstance(parsed, str):
        return parsed
    if int(numlocal):
        return "error: WAITAOF cannot be used when numlocal is set but appendonly is disabled."
    return [0, 0]


def test_waitaof_parses_its_arguments_as_redis_does(pair):
    real, braid = pair
    cases = [(odd, "0", "1") for odd in ODD_NUMBERS] + [("0", odd, "1") for odd in ODD_NUMBERS]
    cases += [("0", "0", odd) for odd in ODD_NUMBERS] + [("1", "0", "0")]
    for argv in cases:
        assert _reply(braid, "WAITAOF", *argv) == _waitaof_as_redis(real, *argv), argv
    for argv in (("0", "0"), ("0", "0", "0", "0")):
        assert _reply(braid, "WAITAOF", *argv) == "error: wrong number of arguments for 'waitaof' command"


def test_wait_inside_multi_answers_at_once_as_in_redis(pair):
    real, braid = pair
    for client in pair:
        with client.pipeline(transaction=True) as p:
            p.execute_command("WAIT", "5", "0")
            assert p.execute() == [0]
    with braid.pipeline(transaction=True) as p:  # (Redis 7.2 on answers WAITAOF there at once too)
        p.execute_command("WAITAOF", "0", "5", "0")
        assert p.execute() == [[0, 0]]


def test_read_your_writes_commands_need_a_database(pair):
    _, braid = pair
    for argv in (("BRAID.TOKEN",), ("BRAID.WAITFOR", "", "0")):
        with pytest.raises(redis.ResponseError, match="not part of an Active-Active database"):
            braid.execute_command(*argv)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        c.links_wait()
        yield c


def _clients(cluster):
    return [p.client() for p in cluster.procs]


def test_wait_counts_the_regions_that_applied_the_write(cluster):
    r1, r2, r3 = _clients(cluster)
    try:
        entry = r1.xadd("wait:s", {"f": "v"})
        assert r1.execute_command("WAIT", "2", "10000") == 2
        # applied there the moment WAIT answered: no waiting here
        for other in (r2, r3):
            assert [e[0] for e in other.xrange("wait:s")] == [entry]
        # a client that wrote nothing counts every region it is linked to
        assert r2.execute_command("WAIT", "5", "1") == 2
    finally:
        for c in (r1, r2, r3):
            c.close()


def test_a_paused_or_unreachable_region_does_not_count(cluster):
    r1, r2, r3 = _clients(cluster)
    try:
        r1.execute_command("BRAID.REPLICATION", "PAUSE", "PEER", "region-3")
        r1.xadd("wait:p", {"f": "1"})
        # region-3 may get it relayed through region-2, but a paused region never counts
        assert r1.execute_command("WAIT", "2", "300") == 1
        assert r1.execute_command("WAIT", "1", "0") == 1
        r1.execute_command("BRAID.REPLICATION", "PAUSE")
        r1.xadd("wait:p", {"f": "2"})
        assert r1.execute_command("WAIT", "1", "200") == 0  # the timeout's count: nobody holds it
        with r1.pipeline(transaction=True) as p:  # inside MULTI: at once, whatever the count
            p.xadd("wait:p", {"f": "3"})
            p.execute_command("WAIT", "2", "0")
            assert p.execute()[1] == 0
    finally:
        r1.execute_command("BRAID.REPLICATION", "RESUME")
        assert r1.execute_command("WAIT", "2", "10000") == 2  # resumed: both hold all three
        for c in (r1, r2, r3):
            c.close()


def test_waitaof_counts_this_regions_fsync_and_the_others(cluster):
    r1, r2, r3 = _clients(cluster)
    try:
        r1.xadd("wait:aof", {"f": "v"})
        # the regions run appendfsync everysec: WAITAOF has the fsyncs done (here at once)
        assert r1.execute_command("WAITAOF", "1", "2", "10000") == [1, 2]
        assert r1.execute_command("WAITAOF", "1", "0", "0") == [1, 2]
        with pytest.raises(redis.ResponseError, match="must between 0 and 1"):
            r1.execute_command("WAITAOF", "2", "0", "0")
    finally:
        for c in (r1, r2, r3):
            c.close()


def test_a_token_makes_another_region_wait_for_the_write(cluster):
    r1, r2, r3 = _clients(cluster)
    try:
        assert r2.execute_command("BRAID.TOKEN") == b""  # nothing written yet
        r1.execute_command("BRAID.REPLICATION", "PAUSE")
        entry = r1.xadd("wait:t", {"f": "v"})
        token = r1.execute_command("BRAID.TOKEN")
        assert token.startswith(b"1:")
        assert r2.execute_command("BRAID.WAITFOR", token, "200") == 0  # it never left region-1
        assert r2.xrange("wait:t") == []
        blocked = cluster.proc("region-2").client()
        try:
            r1.execute_command("BRAID.REPLICATION", "RESUME")
            assert blocked.execute_command("BRAID.WAITFOR", token, "0") == 1  # for ever, until applied
            assert [e[0] for e in blocked.xrange("wait:t")] == [entry]
            # the session carries the token on, with its own writes
            blocked.xadd("wait:t", {"f": "w"})
            carried = dict(part.split(b":") for part in blocked.execute_command("BRAID.TOKEN").split(b","))
            assert carried[b"1"] == token.split(b":")[1] and b"2" in carried
            assert r3.execute_command("BRAID.WAITFOR", blocked.execute_command("BRAID.TOKEN"), "10000") == 1
            assert len(r3.xrange("wait:t")) == 2
        finally:
            blocked.close()
        for bad in ("1", "x:1", "1:x", "1:2,1:3", "0:1", "1:-1", "1:2,", ",", "1:1.5"):
            with pytest.raises(redis.ResponseError, match="invalid read-your-writes token"):
                r2.execute_command("BRAID.WAITFOR", bad, "0")
        with pytest.raises(redis.ResponseError, match="region 9, which is not a member"):
            r2.execute_command("BRAID.WAITFOR", "9:1", "0")
        with pytest.raises(redis.ResponseError, match="timeout is negative"):
            r2.execute_command("BRAID.WAITFOR", token, "-1")
    finally:
        r1.execute_command("BRAID.REPLICATION", "RESUME")
        for c in (r1, r2, r3):
            c.close()


def test_a_write_wait_confirmed_survives_the_loss_of_its_region(tmp_path):
    """The promise: WAIT 2 answered 2, then the region is SIGKILLed at once and removed for
    good; the write is still at both others (and a write it did not wait for may be lost)."""
    with LocalCluster(3) as cluster:
        cluster.links_wait()
        r1 = cluster.proc("region-1").client()
        try:
            confirmed = [r1.xadd("wait:k", {"i": str(i)}) for i in range(50)]
            assert r1.execute_command("WAIT", "2", "10000") == 2
        finally:
            r1.close()
        cluster.proc("region-1").kill()
        code, out = cluster.admin("region", "remove", "region-1", "--force")
        assert code == 0, out
        others = [cluster.proc(n).client() for n in ("region-2", "region-3")]
        held = [[e[0] for e in c.xrange("wait:k")] for c in others]
        assert held[0] == held[1] == confirmed
        wait_in_sync(others, 30)
