"""The live chaos suite: its parts, a short run that must pass, and planted bugs it must catch.

Each checker is shown to fail on a history that breaks its rule (a checker
that never fails is not a checker); the relay's faults are checked on a plain
TCP echo server; a short live run (three real regions, kill + partition +
pause) passes, and so does one with membership changes; a region with a planted
bug makes the matching checker fail.
"""

from __future__ import annotations

import json
import re
import socket
import socketserver
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from chaos import checkers, report
from chaos.backends import ProcessBackend
from chaos.history import FAIL, INFO, OK, History, Op, Sample
from chaos.nemesis import KINDS, schedule
from chaos.relay import RelayHub
from chaos.run import RunConfig, run
from chaos.workloads import CHURN, GROUPS, IDMP, LOG, connect
from node.testing import BraidProcess, replication_status, wait_until


# ------------------------------------------------------------------ histories by hand
def op(f, key, region, t0, t1, outcome=OK, value=None, process="w", **args) -> Op:
    return Op(process, f, region, key, t0, t1, outcome, value, args)


def history(*ops: Op) -> History:
    h = History()
    h.ops = list(ops)
    return h


def dump(**keys) -> checkers.Dump:
    """dump(log=[("1-1", "p1")], groups_key=...) -> a region dump."""
    return keys


def entries(*pairs, field="v") -> dict:
    return {"entries": [[eid, {field: v}] for eid, v in pairs], "groups": []}


def test_convergence_fails_on_any_difference():
    a = {LOG: entries(("1-1", "p1"))}
    assert checkers.convergence({1: a, 2: dict(a), 3: dict(a)}).ok
    v = checkers.convergence({1: a, 2: {LOG: entries(("1-1", "p1"), ("2-1", "p2"))}, 3: a})
    assert not v.ok and "region 2" in v.problems[0] and "2-1" in v.problems[0]
    assert not checkers.convergence({1: a, 2: None}).ok  # a region that does not answer fails it too
    grouped = {LOG: {"entries": [], "groups": ["g"]}}
    assert not checkers.convergence({1: grouped, 2: {LOG: {"entries": [], "groups": []}}}).ok


def test_lost_writes_fails_on_a_missing_or_changed_entry():
    add = op("xadd", LOG, 1, 0.0, 0.1, value="5-1", payload="p1")
    assert checkers.lost_writes(history(add), {LOG: entries(("5-1", "p1"))}).ok
    assert not checkers.lost_writes(history(add), {LOG: entries()}).ok
    assert not checkers.lost_writes(history(add), {LOG: entries(("5-1", "other"))}).ok


def test_lost_writes_on_churn_needs_a_removal_that_could_have_seen_the_entry():
    add = op("xadd", CHURN, 1, 1.0, 1.1, value="5-1", payload="c1")
    early_del = op("del", CHURN, 2, 0.0, 0.5)        # completed before the XADD was invoked
    late_del = op("del", CHURN, 2, 0.9, 2.0)         # overlaps it: may have observed it
    low_trim = op("xtrim", CHURN, 3, 2.0, 2.1, minid="4-0")   # cutoff below the entry
    xdel = op("xdel", CHURN, 3, 2.0, 2.1, id="5-1")
    empty = {CHURN: entries()}
    assert not checkers.lost_writes(history(add, early_del, low_trim), empty).ok
    assert checkers.lost_writes(history(add, late_del), empty).ok
    assert checkers.lost_writes(history(add, xdel), empty).ok
    refused = op("del", CHURN, 2, 0.9, 2.0, outcome=FAIL)
    assert not checkers.lost_writes(history(add, refused), empty).ok


def test_observed_remove_fails_when_a_del_leaves_what_its_region_had():
    add = op("xadd", CHURN, 1, 0.0, 0.1, value="5-1", payload="c1")
    same_region_del = op("del", CHURN, 1, 0.2, 0.3)
    other_region_del = op("del", CHURN, 2, 0.2, 0.3)
    left = {CHURN: entries(("5-1", "c1"))}
    assert not checkers.observed_remove(history(add, same_region_del), left).ok
    assert checkers.observed_remove(history(add, other_region_del), left).ok  # may not have seen it yet


def test_delete_wins_both_ways():
    create = op("xgroup-create", GROUPS, 1, 0.0, 0.1, group="a")
    later_destroy = op("xgroup-destroy", GROUPS, 1, 0.2, 0.3, group="a")
    alive = {GROUPS: {"entries": [], "groups": ["a"]}}
    gone = {GROUPS: {"entries": [], "groups": []}}
    assert checkers.delete_wins(history(create), alive).ok
    assert not checkers.delete_wins(history(create, later_destroy), alive).ok  # the destroy saw it: it wins
    assert checkers.delete_wins(history(create, later_destroy), gone).ok
    assert not checkers.delete_wins(history(create), gone).ok  # nothing could have removed it
    elsewhere = op("del", GROUPS, 2, 0.0, 0.05)  # another region: may have been concurrent
    assert checkers.delete_wins(history(create, elsewhere), gone).ok


def test_strict_ids_fails_on_a_duplicate():
    a = op("xadd", LOG, 1, 0, 0.1, value="5-1", payload="p1")
    b = op("xadd", LOG, 2, 0, 0.1, value="5-2", payload="p2")
    dup = op("xadd", LOG, 2, 0, 0.1, value="5-1", payload="p3")
    assert checkers.strict_ids(history(a, b)).ok
    assert not checkers.strict_ids(history(a, dup)).ok
    retry = [op("xadd-idmp", IDMP, r, 0, 0.1, value="6-1", iid="i1") for r in (1, 2)]
    assert checkers.strict_ids(history(*retry)).ok  # one iid, one entry: the same ID twice is right
    other = op("xadd-idmp", IDMP, 1, 0, 0.1, value="6-1", iid="i2")
    assert not checkers.strict_ids(history(retry[0], other)).ok


def test_never_skips_fails_on_an_entry_never_delivered():
    final = {LOG: entries(("5-1", "p1"), ("5-2", "p2"))}
    read = op("read", LOG, 1, 0, 0.1, value=["5-1"])
    claim = op("claim", LOG, 2, 0, 0.1, value=["5-2"])
    assert checkers.never_skips(history(read, claim), final).ok
    v = checkers.never_skips(history(read), final)
    assert not v.ok and "5-2" in v.problems[0]
    assert not checkers.never_skips(history(read, op("read", LOG, 2, 0, 0.1, INFO, None)), final).ok


def test_idmp_fails_on_a_duplicate_or_a_lost_iid():
    acked = op("xadd-idmp", IDMP, 1, 0, 0.1, value="6-1", iid="i1")
    assert checkers.idmp(history(acked), {IDMP: entries(("6-1", "i1"), field="iid")}).ok
    assert not checkers.idmp(history(acked), {IDMP: entries(("6-1", "i1"), ("6-2", "i1"), field="iid")}).ok
    assert not checkers.idmp(history(acked), {IDMP: entries(field="iid")}).ok


def test_history_round_trips_through_json():
    h = history(op("xadd", LOG, 1, 0.0, 0.1, value="5-1", payload="p1"))
    h.fault("kill", [2], "SIGKILL region 2")
    h.sample(1, True, {1: 3, 2: 4})
    h.mark("healed")
    back = History.from_json(json.loads(json.dumps(h.to_json())))
    assert back.ops == h.ops and back.faults == h.faults and back.samples == h.samples


# ------------------------------------------------------------------ the nemesis and the relay
def test_schedule_is_a_function_of_the_seed():
    a = schedule(7, 120, [1, 2, 3], list(KINDS))
    assert a == schedule(7, 120, [1, 2, 3], list(KINDS))
    assert a != schedule(8, 120, [1, 2, 3], list(KINDS))
    assert {s.kind for s in a} <= set(KINDS) and all(s.at + s.length <= 120 for s in a)
    assert all(s.targets[0] != s.targets[1] for s in a if s.kind in ("partition", "one-way"))


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(4096):
            self.request.sendall(data)
            self.server.echoed.set()  # the echo is back in the relay's hands


@pytest.fixture
def echo_relay():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    server.echoed = threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hub = RelayHub(seed=1)
    relay = hub.add(1, 2, server.server_address)
    yield hub, relay, server
    hub.close()
    server.shutdown()
    server.server_close()


def _connect(relay) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
    return s


def test_relay_forwards_and_partitions(echo_relay):
    hub, relay, _echo = echo_relay
    with _connect(relay) as s:
        s.sendall(b"hello")
        assert s.recv(100) == b"hello"
        hub.partition(1, 2)
        assert s.recv(100) == b""  # the connection was cut
    with _connect(relay) as s:
        assert s.recv(100) == b""  # and new ones are refused while cut
    hub.heal()
    with _connect(relay) as s:
        s.sendall(b"again")
        assert s.recv(100) == b"again"


def test_relay_one_way_hold_keeps_bytes_until_healed(echo_relay):
    hub, relay, echo = echo_relay
    with _connect(relay) as s:
        hub.hold(2, 1)  # what the listener sends back is held
        s.sendall(b"ping")
        wait_until(lambda: relay.forward.moved >= 4, 5, what="the forward direction still flows")
        assert echo.echoed.wait(5), "the echo server never answered"
        # the echo came back to the relay, which holds it: nothing moved back, nothing to read
        assert relay.backward.moved == 0
        s.setblocking(False)
        with pytest.raises(BlockingIOError):
            s.recv(100)
        hub.heal()
        s.setblocking(True)
        s.settimeout(5)
        assert s.recv(100) == b"ping"
        wait_until(lambda: relay.backward.moved == 4, 5, what="the relay counting the healed bytes")


# ------------------------------------------------------------------ DEBUG fault injection
def test_debug_is_refused_unless_enabled():
    with BraidProcess() as p:
        c = p.client()
        with pytest.raises(redis.ResponseError, match="DEBUG command not allowed"):
            c.execute_command("DEBUG", "CLOCK-OFFSET", 1000)


def test_debug_faults_reach_the_region():
    with BraidProcess(extra_args=["--enable-debug-command", "yes"]) as p:
        c = p.client()
        before = int(c.xadd("s", {"f": "v"}).split(b"-")[0])
        c.execute_command("DEBUG", "CLOCK-OFFSET", 3_600_000)
        ahead = int(c.xadd("s", {"f": "v"}).split(b"-")[0])
        assert ahead >= before + 3_600_000
        c.execute_command("DEBUG", "CLOCK-OFFSET", -7_200_000)  # a jump back: IDs keep growing
        c.xadd("s", {"f": "v"}, id="*")
        assert c.xlen("s") == 3
        writer = p.client()
        with ThreadPoolExecutor(1) as pool:
            c.execute_command("DEBUG", "DISK-FULL", "yes")
            held = pool.submit(writer.xadd, "s", {"f": "held"})  # applied, but its record cannot be written
            wait_until(lambda: c.info("persistence")["aof_last_write_status"] == "err", 10,
                       what="the append-only file failing to be written")
            with pytest.raises(redis.ResponseError, match="MISCONF"):
                c.xadd("s", {"f": "v"})  # writes are refused while the disk is full
            assert not held.done()  # and the applied one is not acknowledged
            c.execute_command("DEBUG", "DISK-FULL", "no")
            assert held.result(timeout=20)  # acknowledged once the cron wrote it
        writer.close()
        wait_until(lambda: _writes(c), 10, what="writes accepted once the disk has room")
        c.execute_command("DEBUG", "FSYNC-DELAY", 50)
        assert c.xadd("s", {"f": "v"})
        with pytest.raises(redis.ResponseError, match="value is not an integer"):
            c.execute_command("DEBUG", "CLOCK-OFFSET", "soon")
        with pytest.raises(redis.ResponseError, match="unknown subcommand"):
            c.execute_command("DEBUG", "SEGFAULT")


def _writes(c) -> bool:
    try:
        return bool(c.xadd("s", {"f": "v"}))
    except redis.ResponseError:
        return False


def test_a_write_read_at_another_region_after_waitfor_must_be_found():
    wrote = op("xadd", LOG, 1, 1.0, 1.1, value="1-1", payload="reader-1")
    waited = op("waitfor", LOG, 2, 1.2, 1.3, value=1, token="1:1", origin=1)
    timed_out = op("waitfor", LOG, 3, 1.2, 1.8, value=0, token="1:2", origin=1)
    found = op("read-own", LOG, 2, 1.3, 1.4, value="found", id="1-1", payload="reader-1", origin=1, token="1:1")
    verdict = checkers.read_own_writes(history(wrote, waited, timed_out, found))
    assert verdict.ok and verdict.summary.startswith("1 write(s) read at another region") and \
        "(1 BRAID.WAITFOR timed out)" in verdict.summary
    missing = op("read-own", LOG, 2, 1.3, 1.4, value="missing", id="1-1", payload="reader-1", origin=1, token="1:1")
    verdict = checkers.read_own_writes(history(wrote, waited, missing))
    assert not verdict.ok and "BRAID.WAITFOR 1:1 answered 1 at region 2, whose XRANGE then lacked it" in \
        verdict.problems[0]


def test_forced_removal_excuses_only_writes_that_may_lie_beyond_the_frozen_point():
    h = history(op("xadd", LOG, 5, 1.0, 1.1, value="1-5", payload="early"),
                op("xadd", LOG, 5, 3.0, 3.1, value="2-5", payload="late"),
                op("xadd", LOG, 6, 3.0, 3.1, value="2-6", payload="other"))
    h.forced = {5: 10}
    h.samples = [Sample(2.0, 5, True, {5: 10}), Sample(4.0, 5, True, {5: 12})]
    final = dump(**{LOG: entries(("2-6", "other"))})
    verdicts = {v.name: v for v in checkers.check_all(h, {6: final})}
    # "early" was acknowledged before region 5 had made more than its frozen 10 operations: it must survive
    assert not verdicts["no lost writes"].ok and "1-5" in verdicts["no lost writes"].summary
    assert verdicts["forced removals"].ok  # "late" was never WAIT-confirmed: losing it is allowed
    assert "1 unconfirmed write(s) of the removed region(s) lost" in verdicts["forced removals"].summary
    assert "1 acknowledged possibly beyond the frozen point, excused" in verdicts["forced removals"].summary
    final = dump(**{LOG: entries(("1-5", "early"), ("2-6", "other"))})
    verdicts = {v.name: v for v in checkers.check_all(h, {6: final})}
    assert verdicts["no lost writes"].ok  # "late" may lie beyond the frozen point: excused
    assert h.ops[1].outcome == OK  # the recorded history itself is not changed
    back = History.from_json(json.loads(json.dumps(h.to_json())))
    assert back.forced == {5: 10}


def test_a_wait_confirmed_write_of_a_region_removed_by_force_must_survive():
    late = op("xadd", LOG, 5, 3.0, 3.1, value="2-5", payload="waiter-0-1", process="waiter-0")
    unconfirmed = op("xadd", LOG, 5, 3.2, 3.3, value="3-5", payload="producer-0-1", process="producer-0")
    waited = op("wait", LOG, 5, 3.1, 3.15, value=1, process="waiter-0", wanted=1, timeout_ms=500,
                covers=["waiter-0-1"])
    h = history(late, waited, unconfirmed)
    h.forced = {5: 10}
    h.samples = [Sample(4.0, 5, True, {5: 12})]  # both may lie beyond the frozen point
    verdicts = {v.name: v for v in checkers.check_all(h, {6: dump(**{LOG: entries()})})}
    forced = verdicts["forced removals"]
    assert not forced.ok and "1 of 1 WAIT-confirmed write(s) of the removed region(s) LOST" in forced.summary
    assert "2-5" in forced.problems[0] and "WAIT answered 1" in forced.problems[0]
    assert not verdicts["no lost writes"].ok  # not excused: judged as every acknowledged write
    kept = {v.name: v for v in checkers.check_all(h, {6: dump(**{LOG: entries(("2-5", "waiter-0-1"))})})}
    assert kept["forced removals"].ok and kept["no lost writes"].ok  # the unconfirmed one is excused
    assert "all 1 WAIT-confirmed write(s) of the removed region(s) kept" in kept["forced removals"].summary
    assert "1 unconfirmed write(s) of the removed region(s) lost" in kept["forced removals"].summary
    # a WAIT that timed out with 0 vouches for nothing; nor does one answered 1 when another region that
    # could have been the one counted was removed by force too
    h.ops[1] = op("wait", LOG, 5, 3.1, 3.6, value=0, process="waiter-0", wanted=1, timeout_ms=500,
                  covers=["waiter-0-1"])
    assert checkers.forced_removals(*checkers.excuse_forced(h), {}).ok
    h.ops[1], h.forced = waited, {5: 10, 7: 4}
    assert checkers.forced_removals(*checkers.excuse_forced(h), {}).ok
    assert report.wait_counts(h) == {"sent": 1, "reached": 1, "timed_out": 0, "unknown": 0, "refused": 0}


def test_the_schedule_leaves_membership_to_its_own_nemesis():
    steps = schedule(3, 60, [1, 2, 3], list(KINDS))
    assert steps and "membership" not in {s.kind for s in steps}


# ------------------------------------------------------------------ live runs
def _live(tmp_path, seed: int, duration: float, faults: list[str], bug: str | None = None):
    backend = ProcessBackend(3, str(tmp_path / "regions"), bug=bug, seed=seed)
    backend.start()
    try:
        return run(RunConfig(3, duration, seed, faults, bug=bug, out=str(tmp_path / "report")), backend)
    finally:
        backend.stop()


def test_short_live_run_passes_and_reports(tmp_path):
    result = _live(tmp_path, seed=11, duration=45, faults=["kill", "partition", "pause"])
    assert result.ok, [v.summary for v in result.verdicts if not v.ok] + result.errors
    assert {f.kind for f in result.history.faults} <= {"kill", "partition", "pause"}
    assert result.history.faults, "the schedule injected no fault"
    assert result.convergence_s is not None
    paths = report.write_all(result, str(tmp_path / "report"))
    with open(paths["json"]) as f:
        data = json.load(f)
    assert data["verdict"] == "pass" and len(data["verdicts"]) == 8 and data["stats"]["operations"]
    own = next(v for v in data["verdicts"] if v["name"] == "read your writes")  # reads at another region
    assert own["ok"] and not own["summary"].startswith("0 write(s)"), own
    assert data["full_history"] is None and "history" not in paths  # a passing run keeps only the summary
    killed = {r for f in result.history.faults if f.kind == "kill" and "not injected" not in f.detail
              for r in f.targets}
    assert not killed or any(data["lag"][str(r)]["down"] for r in killed)  # a killed region is shown down
    with open(paths["timeline"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_live_run_with_membership_changes_passes_and_reports_them(tmp_path):
    backend = ProcessBackend(3, str(tmp_path / "regions"), seed=5, membership=True)
    backend.start()
    try:
        result = run(RunConfig(3, 24, 5, ["membership", "partition", "link-faults"], out=str(tmp_path / "r")),
                     backend)
        final = sorted(backend.members.addresses)
    finally:
        backend.stop()
    assert result.ok, [v.summary for v in result.verdicts if not v.ok] + result.errors
    changes = " | ".join(result.membership)
    assert result.membership[0] == "added region-12 as region 12 (active)", changes
    left = re.search(r"removed region (\d+) gracefully", changes)
    forced = re.search(r"removed region (\d+) by force \(frozen at \d+\)", changes)
    assert left and forced and f"purged region {forced[1]}" in changes, changes
    assert not {int(left[1]), int(forced[1])} & set(final)  # neither is judged: they are no members
    assert len(final) in (2, 3)  # 3 + 1 - 1 - 1 (+ 1 if the purged one came back)
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["convergence"].summary.startswith(f"the {len(final)} regions that are members at the end identical")
    assert "frozen at" in verdicts["forced removals"].summary
    # the waiters wrote at the region removed by force, and every write WAIT confirmed there survived it
    assert re.search(r"all \d+ WAIT-confirmed write\(s\) of the removed region\(s\) kept",
                     verdicts["forced removals"].summary), verdicts["forced removals"].summary
    kinds = {f.kind for f in result.history.faults}
    assert "membership" in kinds and kinds & {"partition", "link-faults"}
    with open(report.write_json(result, str(tmp_path / "report.json"))) as f:
        data = json.load(f)
    assert data["membership"] == result.membership and data["verdict"] == "pass"
    waits = data["stats"]["waits"]
    assert waits["sent"] == waits["reached"] + waits["timed_out"] + waits["unknown"] + waits["refused"] > 0


def test_a_wait_that_counts_peers_that_did_not_acknowledge_is_caught_by_a_forced_removal(tmp_path):
    """The planted bug wait-counts-all: WAIT answers every live peer at once.  The region removed by
    force was cut off from its peers for a second first, so writes it confirmed then reached no one:
    the forced removal loses them, and the checker says so."""
    backend = ProcessBackend(3, str(tmp_path / "regions"), bug="wait-counts-all", seed=5, membership=True)
    backend.start()
    try:
        result = run(RunConfig(3, 14, 5, ["membership"], bug="wait-counts-all", out=str(tmp_path / "r")), backend)
    finally:
        backend.stop()
    assert result.history.forced, result.membership  # the forced removal happened within the run
    forced = {v.name: v for v in result.verdicts}["forced removals"]
    assert not forced.ok and "WAIT-confirmed write(s) of the removed region(s) LOST" in forced.summary, forced.summary
    assert "lost by the forced removal" in forced.problems[0]


def test_membership_is_refused_where_regions_cannot_be_added(tmp_path, capsys):
    import os

    from chaos.cli import main

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = main(["run", "--cluster", os.path.join(here, "deploy", "cluster.example.toml"), "--faults",
                 "membership", "--out", str(tmp_path)])
    assert code == 2
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "the membership fault needs regions it can start during the run" in out


@pytest.mark.parametrize("bug, checker", [("lost-delete", "convergence"), ("strict-dup", "unique IDs"),
                                         ("waitfor-at-once", "read your writes")])
def test_a_planted_bug_fails_its_checker(tmp_path, bug, checker):
    result = _live(tmp_path, seed=4, duration=12, faults=["one-way", "link-faults"], bug=bug)
    failed = {v.name for v in result.verdicts if not v.ok}
    assert checker in failed and not result.ok


def test_regions_restored_from_older_copies_of_their_folders_lose_nothing(tmp_path):
    """The restore fault: a copy of a region's folder taken while it ran, put back seconds later.
    Its peers hold operations of its own that the copy lacks; it takes them back before it
    writes again, so no acknowledged write is lost and the regions end identical."""
    result = _live(tmp_path, seed=3, duration=20, faults=["restore"])
    assert result.ok, [v.summary for v in result.verdicts if not v.ok] + result.errors
    restored = [f for f in result.history.faults if f.kind == "restore" and "not injected" not in f.detail
                and "heal failed" not in f.detail]
    assert restored, "the schedule restored no region"


def test_sides_apart_longer_than_every_backlog_join_their_states_and_lose_nothing(tmp_path):
    """The long-partition fault: two sides cut apart while every backlog holds nothing, so
    each side drops operations the other lacks.  At the heal they join their states: the
    regions end identical with every acknowledged write, and a join happened."""
    backend = ProcessBackend(3, str(tmp_path / "regions"), seed=2)
    backend.start()
    try:
        result = run(RunConfig(3, 20, 2, ["long-partition"], out=str(tmp_path / "report")), backend)
        joins = {}
        for region, address in backend.addresses.items():
            c = connect(address)
            try:
                joins[region] = int(replication_status(c)["crdt_state_joins"])
            finally:
                c.close()
    finally:
        backend.stop()
    assert result.ok, [v.summary for v in result.verdicts if not v.ok] + result.errors
    cuts = [f for f in result.history.faults if f.kind == "long-partition" and "not injected" not in f.detail]
    assert cuts, "the schedule cut no sides apart"
    assert sum(joins.values()) >= 2, joins  # (at least one pair of regions joined, each end once)


def test_a_region_that_writes_before_its_peers_answered_is_caught_after_a_restore(tmp_path):
    """The same schedule with the start gate planted away: the restored region mints again numbers
    its peers hold, and the writes it acknowledged under them are lost or kept at some regions
    only (which checker sees it first depends on which workload wrote there)."""
    result = _live(tmp_path, seed=3, duration=30, faults=["restore"], bug="no-start-gate")
    failed = {v.name for v in result.verdicts if not v.ok}
    # a write in its second alone forks region 1's history: the links find it (the run ends with
    # the fork named) and the regions hold different writes
    forked = any("a fork" in e for e in result.errors)
    assert not result.ok and (forked or failed & {"convergence", "no lost writes", "IDMP no duplicates"}), \
        (failed, result.errors, [f.detail for f in result.history.faults])
