"""Fail-stop instead of silent divergence, and supervised background work (node/region/supervision.py).

- A peer's operation that fails to apply (``DEBUG APPLY-FAIL``) or cannot be
  decoded (sent by a peer holding the token) stops a real region process with
  exit status 70 and a CRITICAL line saying why; nothing of it was counted or
  relayed, and a restart converges with the other regions.
- A handler that raises after changing state stops an in-process region: no
  reply, and neither its record nor the unwritten records of its turn reach
  the log (a restart does not see them); inside EXEC nothing after it runs; a
  blocked read whose retry raises after serving does the same.  A handler that
  raises having changed nothing is answered and counted.
- A cron step that fails is counted in INFO and retried while the other steps
  keep running (the everysec fsync still happens); one that changes state and
  fails with a bug stops the region.
- In the deterministic simulation a fail-stop is a crash of the simulated
  region, which restarts and converges.
"""

from __future__ import annotations

import asyncio
import re
import socket

import pytest
import redis

from chaos.sim.checks import run_checks
from chaos.sim.world import MAX_EVENTS, SimConfig, Simulation
from crdt.causal import CausalLog
from node.activeactive.hub import ReplicationHub
from node.region.config import Config
from node.region.supervision import EXIT_FAIL_STOP
from node.testing import InProcessServer, LocalCluster, replication_status, version_vector, wait_until
from node.transport.grpc_links import GrpcLinks


def _debug_config(directory, **settings) -> Config:
    cfg = Config(dir=str(directory), **settings)
    cfg.set("enable-debug-command", "yes")
    return cfg


def _info(c: redis.Redis, section: str) -> dict:
    return c.info(section)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def _raw_exchange(port: int, payload: bytes) -> bytes:
    """Send ``payload`` in one write; everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        return got


def _resp(*argv: str) -> bytes:
    out = b"*%d\r\n" % len(argv)
    for a in argv:
        out += b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode())
    return out


def _fail_stop_records(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "CRITICAL" and "FAIL-STOP" in r.getMessage()]


# ------------------------------------------------------------------ command handlers
def test_a_handler_that_raises_after_a_change_stops_the_region_unlogged_and_unanswered(tmp_path, caplog):
    with InProcessServer(_debug_config(tmp_path)) as srv:
        c = srv.client()
        kept = c.xadd("kept", {"f": "v"})
        c.close()
        # one turn: an XADD, then a command that changes state and raises
        got = _raw_exchange(srv.port, _resp("XADD", "s", "*", "a", "1")
                            + _resp("DEBUG", "RAISE-AFTER", "XADD", "s", "*", "b", "2"))
        assert got == b""  # no reply at all: neither write was acknowledged
        assert srv.server.core.failed is not None and "debug|raise-after" in srv.server.core.failed
        assert _refused(srv.port)  # it stopped listening
        [message] = _fail_stop_records(caplog)
        assert "region 1 stops: command debug|raise-after failed after it changed state" in message
        assert "InjectedFault" in message
    with InProcessServer(Config(dir=str(tmp_path))) as again:  # a restart replays the log
        c = again.client()
        assert [i for i, _ in c.xrange("kept")] == [kept]
        assert c.exists("s") == 0  # the failing turn never reached the log
        c.close()


def test_a_failure_inside_exec_stops_the_region_before_the_next_command(tmp_path):
    with InProcessServer(_debug_config(tmp_path)) as srv:
        got = _raw_exchange(srv.port, _resp("MULTI") + _resp("XADD", "s", "*", "a", "1")
                            + _resp("DEBUG", "RAISE-AFTER", "XADD", "s", "*", "b", "2")
                            + _resp("XADD", "s", "*", "c", "3") + _resp("EXEC"))
        assert got == b""  # not even the +OK / +QUEUED of this turn left
        assert srv.server.core.failed is not None
        assert srv.call(lambda: srv.server.core.db.keys[b"s"].length) == 2  # the third XADD never ran
    with InProcessServer(Config(dir=str(tmp_path))) as again:
        c = again.client()
        assert c.exists("s") == 0
        c.close()


def test_a_handler_that_raises_having_changed_nothing_is_answered_and_counted(tmp_path, caplog):
    with InProcessServer(_debug_config(tmp_path)) as srv:
        c = srv.client()
        c.xadd("s", {"f": "v"})
        with pytest.raises(redis.ResponseError, match=r"internal error running 'debug\|raise-after': InjectedFault"):
            c.execute_command("DEBUG", "RAISE-AFTER", "XLEN", "s")
        assert _info(c, "stats")["command_internal_errors"] == 1
        assert c.xlen("s") == 1 and c.xadd("s", {"f": "w"})  # the region keeps serving
        assert srv.server.core.failed is None and not _fail_stop_records(caplog)
        c.close()


def test_debug_fault_hooks_are_refused_unless_enabled(tmp_path):
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        for argv in (("APPLY-FAIL", "1"), ("CRON-FAIL", "gc", "1"), ("RAISE-AFTER", "XADD", "s", "*", "f", "v")):
            with pytest.raises(redis.ResponseError, match="DEBUG command not allowed"):
                c.execute_command("DEBUG", *argv)
        assert c.exists("s") == 0
        c.close()
    with InProcessServer(_debug_config(tmp_path)) as srv:
        c = srv.client()
        with pytest.raises(redis.ResponseError, match="not part of an Active-Active database"):
            c.execute_command("DEBUG", "APPLY-FAIL", "1")
        with pytest.raises(redis.ResponseError, match="unknown cron step 'nope'"):
            c.execute_command("DEBUG", "CRON-FAIL", "nope", "1")
        with pytest.raises(redis.ResponseError, match="syntax error"):
            c.execute_command("DEBUG", "CRON-FAIL", "gc", "1", "sometimes")
        c.close()


# ------------------------------------------------------------------ the cron
def _taskstat(c: redis.Redis, step: str) -> dict:
    return _info(c, "taskstats").get(f"taskstat_{step}", {})


def test_a_failing_cron_step_is_counted_and_the_cron_keeps_running(tmp_path, caplog):
    with InProcessServer(_debug_config(tmp_path, appendfsync="everysec")) as srv:
        c = srv.client()
        c.execute_command("DEBUG", "CRON-FAIL", "idmp-expiry", "1")
        wait_until(lambda: _taskstat(c, "idmp-expiry").get("failures") == 1, 10, what="the injected failure")
        assert _taskstat(c, "idmp-expiry")["last_error"] == "OSError"
        fsyncs = int(_info(c, "persistence")["aof_fsyncs"])
        c.xadd("s", {"f": "v"})
        wait_until(lambda: int(_info(c, "persistence")["aof_fsyncs"]) > fsyncs, 10,
                   what="the everysec fsync after the failed step")
        # the log's own step failing: retried after a backoff, then the fsync happens
        c.execute_command("DEBUG", "CRON-FAIL", "log-tick", "1")
        c.xadd("s", {"f": "w"})
        wait_until(lambda: _info(c, "persistence")["aof_pending_fsync"] == 0, 20, what="the fsync after retries")
        assert _taskstat(c, "log-tick")["failures"] == 1
        assert int(_taskstat(c, "idmp-expiry")["runs"]) >= 2  # it ran again after its failure
        assert _info(c, "stats")["background_task_failures"] == 2
        assert srv.server.core.failed is None and not _fail_stop_records(caplog)
        assert any("background step idmp-expiry failed" in r.getMessage() and r.exc_info for r in caplog.records)
        c.close()


def test_a_cron_step_that_changes_state_failing_with_a_bug_stops_the_region(tmp_path, caplog):
    with InProcessServer(_debug_config(tmp_path)) as srv:
        c = srv.client()
        c.execute_command("DEBUG", "CRON-FAIL", "idmp-expiry", "1", "BUG")
        wait_until(lambda: srv.server.core.failed is not None, 10, what="the fail-stop")
        assert "background step idmp-expiry failed" in srv.server.core.failed
        [message] = _fail_stop_records(caplog)
        assert "InjectedFault" in message
        wait_until(lambda: _refused(srv.port), 10, what="the region to stop listening")
        c.close()


def test_a_long_lived_task_that_dies_stops_the_region_and_an_unseen_exception_is_counted(tmp_path, caplog):
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        async def dies():
            raise RuntimeError("a task that should run forever")

        def start_both():
            asyncio.get_running_loop().call_soon(lambda: 1 / 0)  # a callback raising: the loop's handler sees it
            srv.server.core.supervisor.watch(asyncio.ensure_future(dies()), "test-task")

        srv.call(start_both)
        wait_until(lambda: srv.server.core.failed is not None, 10, what="the fail-stop")
        assert "the background task test-task ended: RuntimeError" in srv.server.core.failed
        supervisor = srv.server.core.supervisor
        wait_until(lambda: supervisor.steps.get("event-loop") is not None, 10, what="the loop's handler")
        assert srv.server.core.supervisor.steps["event-loop"].last_error == "ZeroDivisionError"
        assert srv.server.core.supervisor.failures == 2
        # the fail-stop is recorded before its log line is written (from the loop's thread)
        wait_until(lambda: _fail_stop_records(caplog), 10, what="the fail-stop's log line")
        [message] = _fail_stop_records(caplog)
        assert "test-task" in message


# ------------------------------------------------------------------ real regions
def _log_text(proc) -> str:
    with open(proc.log_path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _ids(c: redis.Redis, key: str) -> list:
    return [i for i, _ in c.xrange(key)]


def test_a_peer_operation_that_fails_to_apply_stops_the_region_and_a_restart_converges():
    with LocalCluster(3, extra_args=["--enable-debug-command", "yes"]) as cluster:
        r1, r2, r3 = cluster.procs
        c1, c2 = r1.client(), r2.client()
        c1.xadd("log", {"n": "0"})
        cluster.sync_wait()
        assert c2.execute_command("DEBUG", "APPLY-FAIL", "1") == b"OK"
        c2.close()
        written = [c1.xadd("log", {"n": str(i)}) for i in range(1, 4)]
        wait_until(lambda: r2.proc.poll() is not None, 30, what="region 2 to stop")
        assert r2.proc.returncode == EXIT_FAIL_STOP
        text = _log_text(r2)
        assert re.search(r"CRITICAL FAIL-STOP: region 2 stops: cannot apply operation 1\.\d+ of region 1: "
                         r"InjectedFault: DEBUG APPLY-FAIL", text), text[-3000:]
        assert "region 2 fail-stopped" in text  # the command line's last word
        c3 = r3.client()
        wait_until(lambda: _ids(c3, "log")[-1:] == written[-1:], 20, what="region 3 to get region 1's writes")
        r2.restart()
        cluster.sync_wait(30)
        clients = cluster.clients()
        ids = [_ids(c, "log") for c in clients]
        assert ids[0] == ids[1] == ids[2] and set(written) <= set(ids[0])
        for c in clients + [c1, c3]:
            c.close()


def test_an_undecodable_operation_from_a_peer_stops_the_region_unapplied_and_unrelayed():
    """A peer holding the token sends bytes that are no operation: region 2 stops without
    counting it, so neither region 1 nor region 2 after its restart ever holds it."""
    with LocalCluster(3) as cluster:
        r1, r2, r3 = cluster.procs
        r3.stop_keeping_data()  # the rogue poses as region 3
        cfg = cluster.config

        async def rogue() -> None:
            hub = ReplicationHub(3, cfg.cluster_id, cfg.database, cfg.token, CausalLog(3), lambda env: None,
                                 transport=GrpcLinks())
            hub.issue(b"\xc1 not an operation")
            hub.dial(2, f"127.0.0.1:{cfg.regions[1].repl_port}")
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 30
                while r2.proc.poll() is None:
                    assert loop.time() < deadline, "region 2 did not stop"
                    await asyncio.sleep(0.02)
            finally:
                await hub.stop()

        asyncio.run(rogue())
        assert r2.proc.returncode == EXIT_FAIL_STOP
        assert re.search(r"FAIL-STOP: region 2 stops: cannot apply operation 3\.1 of region 3", _log_text(r2))
        c1 = r1.client()
        assert 3 not in version_vector(replication_status(c1))  # never relayed
        r2.restart()
        c2 = r2.client()
        assert 3 not in version_vector(replication_status(c2))  # never logged
        r3.restart()  # the real region 3: region 2 takes writes once every peer answered
        r2.wait_writable()
        c2.xadd("after", {"f": "v"})
        wait_until(lambda: c1.exists("after"), 20, what="region 2 replicating again")
        c1.close()
        c2.close()


# ------------------------------------------------------------------ the simulation
def test_a_fail_stop_in_the_simulation_is_a_crash_and_the_region_comes_back():
    sim = Simulation(SimConfig(seed=5, steps=80, faults=()))
    for region in sim.regions.values():
        region.boot()
    sim.regions[2].core.apply_faults = 1  # its first operation of another region fails
    for a, b in sim.pairs():
        sim.connect(a, b)
    sim.sched.after(0, sim.client_step, 0)
    sim.settled = sim.sched.run(MAX_EVENTS)
    assert sim.regions[2].fail_stops == 1 and sim.regions[2].incarnation == 2
    assert any(line.split(None, 1)[1].startswith("FAIL-STOP r2: cannot apply operation") for line in sim.sched.trace)
    verdicts = {v.check: v for v in run_checks(sim)}
    assert not verdicts["exceptions"].ok  # reported as what it is: the code met something it could not handle
    assert all(e.startswith("FAIL-STOP r2:") for e in sim.sched.errors), sim.sched.errors
    failed = [name for name, v in verdicts.items() if name != "exceptions" and not v.ok]
    assert failed == [], [verdicts[n] for n in failed]  # and the restarted region converged


def test_a_blocked_read_whose_retry_raises_after_serving_stops_the_region(tmp_path):
    with InProcessServer(_debug_config(tmp_path)) as srv:
        c = srv.client()
        c.xgroup_create("s", "g", id="$", mkstream=True)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as reader:
            reader.sendall(_resp("DEBUG", "RAISE-AFTER", "XREADGROUP", "GROUP", "g", "c", "BLOCK", "0",
                                 "STREAMS", "s", ">"))
            wait_until(lambda: c.info("clients")["blocked_clients"] == 1, 10, what="the reader blocked")
            # serving the reader fails the turn: no reply to anyone
            assert _raw_exchange(srv.port, _resp("XADD", "s", "*", "f", "v")) == b""
            assert reader.recv(65536) == b""
        assert srv.server.core.failed is not None and "failed after it changed state" in srv.server.core.failed
        c.close()
    with InProcessServer(Config(dir=str(tmp_path))) as again:
        c = again.client()
        assert c.xlen("s") == 0  # the turn that failed is not in the log
        assert c.xinfo_groups("s")[0]["consumers"] == 0
        c.close()


def test_a_turn_scheduled_before_the_log_closed_writes_nothing_after_it(tmp_path, caplog):
    """A reply turn the loop runs after stop() closed the append log (a record appended during
    stop's last wait) finds nothing to do: closing wrote and fsynced the records."""
    srv = InProcessServer(Config(dir=str(tmp_path))).start()
    c = srv.client()
    c.xadd("k", {"f": "v"})
    srv.stop()
    # the state a record appended during stop's last wait leaves: its turn still scheduled,
    # the record written by closing, not by the turn
    srv.server.core.oplog.written -= 1
    srv.server.finish_turn()  # the turn runs after the log closed: nothing to do
    assert "the append log is closed" not in caplog.text
    with InProcessServer(Config(dir=str(tmp_path))) as again:
        assert again.client().xlen("k") == 1
