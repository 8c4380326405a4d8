"""The operation log records resolved operations: a replay never derives history again.

- A region of a cluster restarted with an *upgraded resolver* (another ID choice,
  trim cutoffs, IDMPAUTO hash and XACK watermark) rebuilds exactly the state and
  the causal log it had: every envelope's dot, dependencies and operation bytes.
- The common path (XADD, XDEL, XTRIM, DEL, XGROUP CREATE) is logged as operation
  records only; commands with region-local effects carry the operations they applied.
- A logged operation the causal log would stamp with another dot stops the region,
  naming the record.
- Files written before operations were logged (format 1: commands only) still load.

The regions here are real servers (``node.runtime.server.Server``, never started: no sockets),
each with a real operation log on disk and loaded by the real ``open_log``; envelopes
travel between them through the real causal logs (as the deterministic simulation does).
"""

from __future__ import annotations

import os

import msgspec
import pytest

from node.activeactive import opcodec
from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.persistence import aof
from node.persistence.replay import LoadError
from node.region.config import Config
from node.runtime.connection import ClientConnection
from node.runtime.server import Server
from node.testing import every_peer_answered
from tests.test_persistence import without_seen_times

SPECS = [RegionSpec(f"region-{i}", i, "127.0.0.1", 0, 0) for i in (1, 2)]


class Region:
    """One region of a two-region database, in this process, with its log in ``directory``."""

    def __init__(self, directory: str, number: int | None) -> None:
        cluster = (ClusterConfig("test", "db", "token", 16, SPECS), SPECS[number - 1]) if number else None
        self.directory = directory
        self.server = Server(Config(dir=directory), cluster=cluster)
        self.server.schedule_turn_end = lambda: None  # no event loop: close() writes everything
        self.server.open_log()
        every_peer_answered(self.server.core)
        self.client = ClientConnection(self.server)
        self.client.authenticated = True
        self.closed = False

    def __call__(self, *argv):
        return self.server.core.call(self.client, [a if isinstance(a, bytes) else str(a).encode() for a in argv])

    def receive_from(self, other: Region) -> None:
        for env in other.server.core.aa.causal.log:
            self.server.core.aa.hub.deliver(env)

    def envelopes(self) -> list:
        return [(e.origin, e.n, e.deps, e.op) for e in self.server.core.aa.causal.log]

    def state(self) -> list:
        """What a client sees of every key (XINFO STREAM FULL: entries, counters, groups, PEL,
        consumers, IDMP counters), and the version vector."""
        keys = sorted(self("KEYS", "*"))
        out = [keys] + [self("XINFO", "STREAM", k, "FULL", "COUNT", "0") for k in keys]
        if self.server.core.aa is not None:
            out.append(dict(self.server.core.aa.causal.vv))
        return out

    def close(self) -> None:
        self.server.core.oplog.close()
        self.closed = True

    def records(self) -> list:
        if not self.closed:
            self.server.core.oplog.write_out()
        return aof.scan(os.path.join(self.directory, "appendonlydir")).records


def _tags(region: Region) -> list:
    return [(kind, msgspec.msgpack.decode(payload)[0]) for _n, kind, payload in region.records()]


def _write_history(r1: Region, r2: Region) -> None:
    """Region 1 resolves every kind of decision an upgrade could change; region 2 writes too."""
    for i in range(4):
        r1("XADD", "s", "*", "n", i)
    r2("XADD", "s", "*", "from", "two")
    r1.receive_from(r2)
    r1("XADD", "s", "MAXLEN", "~", 3, "*", "n", "trimmed")           # ID choice and trim cutoffs
    first = r1("XRANGE", "s", "-", "+")[1][0]
    r1("XTRIM", "s", "MINID", first)                                  # MINID cutoffs
    r1("XADD", "s", "IDMPAUTO", "p", "*", "auto", "1")                # IDMPAUTO hash
    r1("XADD", "s", "IDMPAUTO", "p", "*", "auto", "1")                # its duplicate
    r1("XADD", "s", "IDMP", "p", "i1", "*", "n", "x")
    r1("XGROUP", "CREATE", "s", "g", "0")
    r1("XGROUP", "CREATECONSUMER", "s", "g", "idle")
    delivered = r1("XREADGROUP", "GROUP", "g", "c", "COUNT", 3, "STREAMS", "s", ">")[0][1]
    r1("XACK", "s", "g", delivered[0][0])                             # XACK watermark (region-local + op)
    r1("XACKDEL", "s", "g", "DELREF", "IDS", 1, delivered[1][0])
    r1("XGROUP", "SETID", "s", "g", "0")
    r1("XCLAIM", "s", "g", "other", 0, delivered[2][0])
    r1("XADD", "gone", "*", "f", "v")
    r1("DEL", "gone")
    r1("XSETID", "s", "99999999999999-0")                             # region-local in a cluster
    r1("XADD", "s", "*", "after", "setid")
    r2("XADD", "s", "*", "from", "two", "again", "1")
    r1.receive_from(r2)
    r2.receive_from(r1)
    r1("XADD", "s", "*", "last", "1")


UPGRADES = ("id-choice", "trim-cutoffs", "idmpauto-hash", "ack-watermark")


def _upgrade_the_resolver(monkeypatch, upgrades) -> None:
    """A newer version that decides differently where a command resolves something."""
    from crdt import groups, idgen, resolve
    from node.commands import streams

    if "id-choice" in upgrades:
        choose = idgen.choose
        monkeypatch.setattr(idgen, "choose", lambda mode, last, now, *a: choose(mode, last, now + 7_000, *a))
    if "trim-cutoffs" in upgrades:
        monkeypatch.setattr(resolve, "trim_cutoffs", lambda s, spec: {})
    if "idmpauto-hash" in upgrades:
        monkeypatch.setattr(streams, "auto_iid", lambda flat: b"another hash")
    if "ack-watermark" in upgrades:  # an XACK is a command record (it changes the PEL): its operation is logged
        watermark = groups.ack_watermark
        monkeypatch.setattr(groups, "ack_watermark", lambda s, g, origin: watermark(s, g, origin) and (0, 1))


@pytest.mark.parametrize("upgrades", [*((u,) for u in UPGRADES), UPGRADES], ids=[*UPGRADES, "all"])
def test_a_region_restarted_with_an_upgraded_resolver_keeps_every_dot_and_its_content(tmp_path, monkeypatch,
                                                                                        upgrades):
    r1, r2 = Region(str(tmp_path / "r1"), 1), Region(str(tmp_path / "r2"), 2)
    _write_history(r1, r2)
    envelopes, state = r1.envelopes(), r1.state()
    assert len([e for e in envelopes if e[0] == 1]) >= 12  # region 1 issued operations of every kind
    r1.close()

    _upgrade_the_resolver(monkeypatch, upgrades)
    again = Region(r1.directory, 1)
    assert again.envelopes() == envelopes  # same dots, same dependencies, same operation bytes
    assert again.state() == state
    report, _seconds = again.server.core.loading_report
    assert report.own >= 12
    # the replayed XACK computed another watermark: counted, and the logged one was applied
    assert (report.differences > 0) == ("ack-watermark" in upgrades)

    # and the region goes on where it was: its next operation takes the next dot, which region 2 applies
    again("XADD", "s", "*", "after", "restart")
    r2.receive_from(again)
    assert r2("XRANGE", "s", "-", "+") == again("XRANGE", "s", "-", "+")
    assert r2.server.core.aa.causal.vv == again.server.core.aa.causal.vv


def test_the_common_path_is_logged_as_operations_only(tmp_path):
    for number in (None, 1):
        r = Region(str(tmp_path / f"r{number}"), number)
        r("XADD", "s", "*", "f", "v")
        r("XADD", "s", "MAXLEN", 1, "*", "f", "v")
        r("XDEL", "s", "1-1")
        r("XTRIM", "s", "MAXLEN", 0)
        r("XGROUP", "CREATE", "t", "g", "$", "MKSTREAM")
        r("XGROUP", "DESTROY", "t", "g")
        r("XADD", "gone", "*", "f", "v")
        r("DEL", "gone")
        r("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
        r("XADD", "s", "IDMP", "p", "i", "*", "f", "v")  # a duplicate: counted, nothing else
        r("XADD", "missing", "NOMKSTREAM", "*", "f", "v")  # did nothing: nothing logged
        r("XGROUP", "CREATE", "s", "g", "0")
        r("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")  # region-local: a command record
        tags = _tags(r)
        assert tags == [(aof.OP_REPLICATED, b"o")] * 9 + [(aof.OP_LOCAL, b"d"), (aof.OP_REPLICATED, b"o"),
                                                          (aof.OP_LOCAL, b"L")], number
        state = r.state()
        r.close()
        assert Region(r.directory, number).state() == state


def test_a_logged_operation_the_causal_log_stamps_with_another_dot_stops_the_region(tmp_path):
    r = Region(str(tmp_path / "good"), 1)
    r("XADD", "s", "*", "f", "v")
    r("XADD", "s", "*", "f", "w")
    r.close()
    records = r.records()
    bad = tmp_path / "bad"
    log = aof.AppendLog.open(str(bad / "appendonlydir"))
    tag, ((op, n, deps),) = msgspec.msgpack.decode(records[1][2])
    log.append(records[0][1], records[0][2])
    log.append(aof.OP_REPLICATED, msgspec.msgpack.encode([tag, [[op, n + 1, deps]]]))  # (1, 3) after (1, 1)
    log.close()
    with pytest.raises(LoadError, match=r"record 2 of the append-only file cannot be replayed: .*dot \(1, 3\).*"
                                        r"stamps it \(1, 2\)"):
        Region(str(bad), 1)


@pytest.mark.parametrize("entry,number,why", [
    (b"\x93\x63\xc4\x01s\x01", None, "undecodable operation"),        # an operation tag no version has
    ([b"\x94\x03\xc4\x01s\xc0\xc0", 1, []], None, "not part of an Active-Active database"),  # sent, yet one region
    (b"\x94\x03\xc4\x01s\x01\x02", None, "undecodable operation"),  # DeleteKey with an observed map that is no map
])
def test_a_malformed_operation_record_stops_the_load_naming_it(tmp_path, entry, number, why):
    log = aof.AppendLog.open(str(tmp_path / "appendonlydir"))
    log.append(aof.OP_REPLICATED, msgspec.msgpack.encode([b"o", [entry]]))
    log.close()
    with pytest.raises(LoadError, match=f"record 1 of the append-only file cannot be replayed: .*{why}"):
        Region(str(tmp_path), number)


GOOD_ADD = b"\x99\x00\xc4\x01s\x01\x92\x05\x00\x92\xc4\x01f\xc4\x01v\xc0\xc0\xc0\xc0"  # AddEntry s 5-0 f v


@pytest.mark.parametrize("entry,why", [
    (GOOD_ADD[:8], "undecodable operation"),                                  # an XADD cut short
    (GOOD_ADD.replace(b"\x92\x05\x00", b"\x91\x06"), "the operation cannot be applied"),  # an ID of one number
])
def test_a_bad_xadd_after_good_ones_stops_the_load_naming_its_record(tmp_path, entry, why):
    """The bulk path replays a run of records in one call: an error names the record it is in."""
    log = aof.AppendLog.open(str(tmp_path / "appendonlydir"))
    log.append(aof.OP_REPLICATED, msgspec.msgpack.encode([b"o", [GOOD_ADD]]))
    log.append(aof.OP_REPLICATED, msgspec.msgpack.encode([b"o", [GOOD_ADD.replace(b"\x05", b"\x06")]]))
    log.append(aof.OP_REPLICATED, msgspec.msgpack.encode([b"o", [entry]]))
    log.close()
    with pytest.raises(LoadError, match=f"record 3 of the append-only file cannot be replayed: .*{why}"):
        Region(str(tmp_path), None)


def _v1_command(now_ms: int, argv: list[str], id_mode: str | None = None) -> bytes:
    rec = [b"c", now_ms, [a.encode() for a in argv]]
    return msgspec.msgpack.encode(rec if id_mode is None else [*rec, id_mode.encode()])


SCRIPT = [["XADD", "s", "*", "f", "v"], ["XADD", "s", "*", "f", "w"], ["XGROUP", "CREATE", "s", "g", "0"],
          ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"], ["XADD", "s", "MAXLEN", "1", "*", "f", "x"],
          ["XADD", "s", "IDMP", "p", "i", "*", "f", "y"], ["XADD", "s", "IDMP", "p", "i", "*", "f", "y"]]


@pytest.mark.parametrize("number", [None, 1])
def test_a_file_of_commands_from_before_operations_were_logged_still_loads(tmp_path, number):
    """Format 1 (every record a command): replayed as then, resolving again; new records follow it."""
    live = Region(str(tmp_path / "live"), number)
    with live.server.core.clock_pinned(1_700_000_000_000):
        for argv in SCRIPT:
            live(*argv)
    expected = live.state()
    old = tmp_path / "old"
    log = aof.AppendLog.open(str(old / "appendonlydir"))
    for argv in SCRIPT:
        log.append(aof.OP_LOCAL, _v1_command(1_700_000_000_000, argv, "strict" if number else None))
    log.close()
    upgraded = Region(str(old), number)
    assert upgraded.state() == expected
    upgraded("XADD", "s", "*", "f", "new")
    upgraded("XACK", "s", "g", upgraded("XRANGE", "s", "-", "+")[0][0])
    expected = upgraded.state()
    upgraded.close()
    assert [t for _k, t in _tags(upgraded)] == [b"c"] * len(SCRIPT) + [b"o", b"L"]  # a mixed file
    assert Region(str(old), number).state() == expected


def test_a_flushall_of_a_format_1_file_replays_key_by_key_as_it_was_sent(tmp_path):
    """Format 1 resolved FLUSHALL into one DEL per key, each under its own dot (which peers
    hold); a replay keeps that history, so the operations after it keep their dots too."""
    old = tmp_path / "old"
    log = aof.AppendLog.open(str(old / "appendonlydir"))
    for argv in (["XADD", "a", "*", "f", "v"], ["XADD", "b", "*", "f", "v"], ["FLUSHALL"],
                 ["XADD", "c", "*", "f", "v"]):
        log.append(aof.OP_LOCAL, _v1_command(1_700_000_000_000, argv, "strict"))
    log.close()
    region = Region(str(old), 1)
    kinds = [type(opcodec.decode(e[3])).__name__ for e in region.envelopes()]
    assert kinds == ["AddEntry", "AddEntry", "DeleteKey", "DeleteKey", "AddEntry"]
    assert region("KEYS", "*") == [b"c"]
    region("FLUSHALL")  # this version's: one operation
    assert type(opcodec.decode(region.envelopes()[-1][3])).__name__ == "FlushKeys"
    assert dict(region.server.core.aa.causal.vv) == {1: 6}


# ---------------------------------------------------------------- random histories of a cluster region
PENDING, EXISTING = "<pending>", "<existing>"  # the first pending entry of g1 / the first entry, found when run


def _random_steps():
    from hypothesis import strategies as st

    from tests.test_differential_hypothesis import KEYS, commands
    from tests.test_persistence import extra

    key, strategy = st.sampled_from(KEYS), st.sampled_from(["KEEPREF", "DELREF", "ACKED"])
    on_real_ids = st.one_of(  # commands that reach entries of this cluster (IDs minted with `*`)
        st.builds(lambda k: ["XACK", k, "g1", PENDING], key),
        st.builds(lambda k, s: ["XACKDEL", k, "g1", s, "IDS", "1", PENDING], key, strategy),
        st.builds(lambda k, c: ["XCLAIM", k, "g1", c, "0", PENDING], key, st.sampled_from(["alice", "bob"])),
        st.builds(lambda k, s, w: ["XDELEX", k, s, "IDS", "1", w], key, strategy, st.sampled_from([PENDING, EXISTING])),
        st.builds(lambda k: ["XDEL", k, EXISTING], key),
        st.builds(lambda k, a: ["XTRIM", k, "MINID", *a, EXISTING], key, st.sampled_from([[], ["~"], ["="]])),
        st.builds(lambda k, i: ["XGROUP", "SETID", k, "g1", i], key, st.sampled_from(["0", EXISTING])),
        st.builds(lambda k, c, n: ["XREADGROUP", "GROUP", "g1", c, "COUNT", str(n), "STREAMS", k, ">"],
                  key, st.sampled_from(["alice", "bob"]), st.integers(1, 3)),
    )
    return st.one_of(
        commands(), on_real_ids, on_real_ids,
        extra.filter(lambda argv: argv[0] != "BGSAVE"),  # BGSAVE writes in a worker of the (absent) event loop
        st.builds(lambda k: ["XADD", k, "*", "f", "v"], key),
        st.builds(lambda k: ["FROM-REGION-2", k], key),  # region 2 writes; region 1 receives it
        st.just(["TO-REGION-2"]),                         # region 2 receives what region 1 did
    )


def _resolve(r: Region, argv: list) -> list | None:
    if PENDING in argv:
        got = r("XPENDING", argv[1], "g1", "-", "+", "1")
        if not isinstance(got, list) or not got:
            return None
        argv = [got[0][0] if a == PENDING else a for a in argv]
    if EXISTING in argv:
        got = r("XRANGE", argv[1], "-", "+", "COUNT", "1")
        if not isinstance(got, list) or not got:
            return None
        argv = [got[0][0] if a == EXISTING else a for a in argv]
    return argv


PRELUDE = [["XADD", k, "*", "f", str(i)] for i in range(3) for k in ("s1", "s2")] + [
    ["XGROUP", "CREATE", "s1", "g1", "0"], ["XGROUP", "CREATE", "s1", "g2", "$"], ["XGROUP", "CREATE", "s2", "g1", "0"],
    ["XREADGROUP", "GROUP", "g1", "alice", "COUNT", "2", "STREAMS", "s1", ">"]]


def test_random_histories_of_a_cluster_region_replay_to_the_same_state_and_causal_log(tmp_path_factory):
    """Region-local state (consumers, PEL, delivery counts, cursors, SETID) and every envelope
    come back after a restart, whatever sequence of commands and deliveries made them."""
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    applied_local_ops = []  # command records that carried operations (XACK, XACKDEL...)

    @settings(max_examples=50, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(script=st.lists(_random_steps(), min_size=5, max_size=40))
    # histories sure to write command records with operations (the random ones may not)
    @example(script=[["XACK", "s1", "g1", PENDING], ["XADD", "s1", "*", "f", "v"], ["TO-REGION-2"],
                     ["XACKDEL", "s1", "g1", "ACKED", "IDS", "1", PENDING], ["XREADGROUP", "GROUP", "g1", "bob",
                                                                             "STREAMS", "s1", "0"]])
    @example(script=[["FROM-REGION-2", "s1"], ["XREADGROUP", "GROUP", "g1", "bob", "COUNT", "3", "STREAMS", "s1", ">"],
                     ["XACK", "s1", "g1", PENDING], ["XACK", "s1", "g1", PENDING], ["XACK", "s1", "g1", PENDING]])
    def check(script):
        directory = tmp_path_factory.mktemp("cluster")
        r1, r2 = Region(str(directory / "r1"), 1), Region(str(directory / "r2"), 2)
        for argv in PRELUDE + script:
            if argv[0] == "FROM-REGION-2":
                r2("XADD", argv[1], "*", "from", "two")
                r1.receive_from(r2)
            elif argv[0] == "TO-REGION-2":
                r2.receive_from(r1)
            elif (argv := _resolve(r1, argv)) is not None:
                r1(*argv)
        envelopes, state = r1.envelopes(), r1.state()
        r1.close()
        applied_local_ops.append(sum(1 for _n, kind, p in r1.records()
                                     if kind == aof.OP_LOCAL and msgspec.msgpack.decode(p)[-1:] not in ([[]], [None])
                                     and msgspec.msgpack.decode(p)[0] == b"L"))
        again = Region(r1.directory, 1)
        assert again.envelopes() == envelopes
        assert without_seen_times(again.state()) == without_seen_times(state)
        assert again.server.core.loading_report[0].differences == 0
        again.close()
        r2.close()

    check()
    assert sum(applied_local_ops) >= 5, applied_local_ops  # command records with operations were exercised
