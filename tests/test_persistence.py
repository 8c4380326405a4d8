"""The operation log as the append-only file: replay, fsync policies, damage, crashes.

- Replay is exact: random command sequences (the differential suite's, plus
  IDMP, ``*`` IDs and layout settings) leave the same state after a restart,
  compared through XINFO STREAM FULL, which shows entries, counters, groups,
  every pending entry with its delivery time and count, and every consumer.
- Changes no command makes are logged too: a blocked XREADGROUP served later,
  the cron's IDMP expiry.
- A torn last record is cut at every byte it can be torn at; damage in the
  middle stops the region with the file and offset in the message.
- Real processes killed with SIGKILL under concurrent writes: with
  ``appendfsync always`` (and ``everysec``, since records reach the OS before
  any reply) every acknowledged write is there after the restart.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.persistence.aof import scan
from node.persistence.oplog import boot_id, read_run_mark, write_run_mark
from node.region.config import Config
from node.testing import BraidProcess, InProcessServer, replication_status, wait_until
from tests.differential import RawClient
from tests.test_differential_hypothesis import KEYS, PRELUDE, commands


def dump(c: redis.Redis) -> list:
    """Everything a client can see of the keyspace, with absolute times."""
    out = [sorted(c.keys("*"))]
    for key in sorted(c.keys("*")):
        out.append(c.execute_command("XINFO", "STREAM", key, "FULL", "COUNT", "0"))
    return out


def without_seen_times(state: list) -> list:
    """A dump without consumers' seen-times.  An XREADGROUP that changed nothing else (a
    history read of nothing) moves its consumer's seen-time but is not written to the log, as
    Redis does not propagate it, so a restart does not bring that one moment back (docs/commands.md,
    after the table).  Takes XINFO STREAM FULL replies as flat lists (RESP2) or maps."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != b"seen-time"}
        if isinstance(value, list):
            if len(value) % 2 == 0 and b"seen-time" in value[::2]:
                i = value[::2].index(b"seen-time") * 2
                value = value[:i] + value[i + 2:]
            return [strip(v) for v in value]
        return value
    return strip(state)


def run(directory: str, script: list[list[str]], **config) -> list:
    with InProcessServer(Config(dir=directory, **config)) as srv:
        raw = RawClient(srv.port)  # replies as they are: errors are part of the script
        for argv in script:
            raw.call(*argv)
        raw.close()
        c = srv.client()
        state = dump(c)
        c.close()
    return state


def reload(directory: str, **config) -> list:
    with InProcessServer(Config(dir=directory, **config)) as srv:
        c = srv.client()
        state = dump(c)
        c.close()
    return state


# ---------------------------------------------------------------- replay is exact
extra = st.one_of(
    st.builds(lambda k, p, i: ["XADD", k, "IDMP", p, i, "*", "f", "v"], st.sampled_from(KEYS),
              st.sampled_from(["p1", "p2"]), st.sampled_from(["a", "b", "c"])),
    st.builds(lambda k: ["XADD", k, "IDMPAUTO", "auto", "*", "f", "v"], st.sampled_from(KEYS)),
    st.builds(lambda k: ["XADD", k, "*", "f", "v"], st.sampled_from(KEYS)),
    st.builds(lambda k, n: ["XADD", k, "MAXLEN", "~", str(n), "*", "f", "v"], st.sampled_from(KEYS),
              st.integers(0, 4)),
    st.builds(lambda n: ["CONFIG", "SET", "stream-node-max-entries", str(n)], st.sampled_from([2, 3, 100])),
    st.builds(lambda k, n: ["XCFGSET", k, "IDMP-MAXSIZE", str(n)], st.sampled_from(KEYS), st.integers(1, 3)),
    st.sampled_from([["SAVE"], ["BGSAVE"], ["BGSAVE", "SCHEDULE"]]),  # a snapshot, then the tail after it
)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(script=st.lists(st.one_of(commands(), extra), min_size=5, max_size=40))
def test_a_restart_rebuilds_exactly_the_same_state(tmp_path_factory, script):
    directory = str(tmp_path_factory.mktemp("aof"))
    before = without_seen_times(run(directory, PRELUDE + script))
    assert without_seen_times(reload(directory)) == before
    assert without_seen_times(reload(directory)) == before  # loading twice changes nothing


def test_layout_settings_changed_at_run_time_come_back_as_configured(tmp_path):
    script = [["CONFIG", "SET", "stream-node-max-entries", "2"],
              *(["XADD", "s", f"{i}-0", "f", "v"] for i in range(1, 8)),
              ["XTRIM", "s", "MAXLEN", "~", "3"]]
    before = run(str(tmp_path), script)
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        assert dump(c) == before  # trimmed by whole blocks of 2, as when it ran
        assert c.config_get("stream-node-max-entries") == {"stream-node-max-entries": "100"}
        c.close()


def test_a_blocked_read_served_later_is_logged(tmp_path):
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c, reader = srv.client(), srv.client()
        c.xgroup_create("jobs", "g", id="$", mkstream=True)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("r", reader.xreadgroup("g", "w", {"jobs": ">"}, block=0)))
        t.start()
        wait_until(lambda: int(c.info("clients")["blocked_clients"]) == 1, 10, what="reader blocked")
        new_id = c.xadd("jobs", {"f": "v"})
        t.join(10)
        assert got["r"][0][1][0][0] == new_id
        before = dump(c)
        c.close()
        reader.close()
    after = reload(str(tmp_path))
    assert after == before
    assert b"w" in repr(after).encode()  # the consumer and its pending entry came back


def test_the_cron_s_idmp_expiry_is_logged(tmp_path):
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        c.xadd("s", {"f": "v"})
        c.execute_command("XCFGSET", "s", "IDMP-DURATION", "1")  # the shortest: one second
        first = c.execute_command("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
        assert _info(c, "s")[b"iids-tracked"] == 1
        wait_until(lambda: _info(c, "s")[b"iids-tracked"] == 0, 10, what="the cron expiring the iid")
        second = c.execute_command("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
        assert second != first  # expired: a new entry, not a duplicate
        before = dump(c)
        c.close()
    assert reload(str(tmp_path)) == before


def _info(c, key) -> dict:
    flat = c.execute_command("XINFO", "STREAM", key)
    return dict(zip(flat[::2], flat[1::2], strict=True))


# ---------------------------------------------------------------- damage
def _log_dir(root) -> str:
    return os.path.join(str(root), "appendonlydir")


def _as_if_killed(root) -> None:
    """The run mark a process killed in this boot leaves (a clean close's "clean" says the log
    has no torn tail: a bad last record there is damage, tests/test_log_damage.py)."""
    write_run_mark(_log_dir(root), boot_id() or "unknown")


def test_a_torn_last_record_is_cut_at_every_byte(tmp_path):
    origin = tmp_path / "origin"
    script = [["XADD", "s", f"{i}-0", "f", "v" * i] for i in range(1, 6)]
    before_last = run(str(origin), script[:-1])
    run(str(origin), [script[-1]])  # the last record, appended by a second run
    result = scan(_log_dir(origin))
    last_start = sum(len(r[2]) + 13 for r in result.records[:-1])
    size = result.segments[-1].size
    for cut in range(last_start + 1, size):
        trial = tmp_path / f"cut{cut}"
        shutil.copytree(origin, trial)
        with open(result.segments[-1].path.replace(str(origin), str(trial)), "r+b") as f:
            f.truncate(cut)
        _as_if_killed(trial)
        assert reload(str(trial)) == before_last, f"torn at byte {cut}"
        # the cut marked the log "recover" before it changed it (tests/test_log_damage.py); a
        # standalone region has nothing to take back from peers, so its close marks it clean
        assert read_run_mark(_log_dir(trial)) == "clean"
        with InProcessServer(Config(dir=str(trial))) as srv:  # and the cut log takes new records
            c = srv.client()
            assert c.xadd("s", {"f": "again"}, id="9-0") == b"9-0"
            info = c.info("persistence")
            assert info["aof_loaded_records"] == len(script) - 1 and info["aof_load_truncated_bytes"] == 0
            c.close()


def test_a_torn_record_is_refused_without_aof_load_truncated(tmp_path):
    run(str(tmp_path), [["XADD", "s", "1-0", "f", "v"], ["XADD", "s", "2-0", "f", "v"]])
    seg = scan(_log_dir(tmp_path)).segments[-1].path
    with open(seg, "r+b") as f:
        f.truncate(os.path.getsize(seg) - 3)
    _as_if_killed(tmp_path)
    from node.persistence.replay import LoadError
    from node.runtime.server import Server

    server = Server(Config(dir=str(tmp_path), aof_load_truncated=False))
    with pytest.raises(LoadError, match=r"torn record in .*\.aof at offset \d+"):
        server.open_log()


def _braid_node(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", "node", "--port", "0", "--data-dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=60)


def test_damage_in_the_middle_stops_the_region_and_names_file_and_offset(tmp_path):
    run(str(tmp_path), [["XADD", "s", f"{i}-0", "f", "value"] for i in range(1, 6)])
    result = scan(_log_dir(tmp_path))
    seg = result.segments[-1].path
    data = bytearray(Path(seg).read_bytes())
    second = len(result.records[0][2]) + 13
    data[second + 20] ^= 0xFF  # inside the second record's payload; three valid records follow
    Path(seg).write_bytes(bytes(data))
    res = _braid_node(tmp_path)
    assert res.returncode == 1
    assert f"corrupt record in {seg} at offset {second}: checksum mismatch" in res.stderr
    assert "nothing was loaded" in res.stderr
    assert Path(seg).read_bytes() == bytes(data)  # nothing cut


# ---------------------------------------------------------------- crashes
def _writer(proc: BraidProcess, key: str, acked: list, stop: threading.Event) -> None:
    c = proc.client(socket_timeout=10)
    try:
        while not stop.is_set():
            acked.append(c.xadd(key, {"n": str(len(acked))}))
    except (redis.ConnectionError, redis.TimeoutError):
        pass
    finally:
        c.close()


def _consumer(proc: BraidProcess, acked: list, stop: threading.Event) -> None:
    c = proc.client(socket_timeout=10)
    try:
        while not stop.is_set():
            got = c.xreadgroup("g", "worker", {"w0": ">"}, count=5)
            for _key, entries in got or []:
                for eid, _fields in entries:
                    c.xack("w0", "g", eid)
                    acked.append(eid)
    except (redis.ConnectionError, redis.TimeoutError):
        pass
    finally:
        c.close()


def _churn(proc: BraidProcess, stop: threading.Event) -> None:
    c = proc.client(socket_timeout=10)
    steps = [lambda: c.xadd("tmp", {"f": "v"}), lambda: c.xgroup_create("tmp", "gg", id="0"),
             lambda: c.xgroup_destroy("tmp", "gg"), lambda: c.delete("tmp")]
    try:
        while not stop.is_set():
            for step in steps:
                try:
                    step()
                except redis.ResponseError:  # BUSYGROUP after a crash cut a round short: go on
                    pass
    except (redis.ConnectionError, redis.TimeoutError):
        pass
    finally:
        c.close()


@pytest.mark.parametrize("policy,seed", [("always", 1), ("always", 2), ("everysec", 3)])
def test_sigkill_under_load_loses_no_acknowledged_write(tmp_path, policy, seed):
    proc = BraidProcess(data_dir=str(tmp_path), extra_args=["--appendfsync", policy])
    proc.start()
    try:
        setup = proc.client()
        setup.xgroup_create("w0", "g", id="0", mkstream=True)
        setup.close()
        stop = threading.Event()
        written = {f"w{i}": [] for i in range(3)}
        acked: list = []
        threads = [threading.Thread(target=_writer, args=(proc, k, ids, stop)) for k, ids in written.items()]
        threads += [threading.Thread(target=_consumer, args=(proc, acked, stop)),
                    threading.Thread(target=_churn, args=(proc, stop))]
        for t in threads:
            t.start()
        target = random.Random(seed).randint(200, 1500)  # a moment in the run, reproducible
        wait_until(lambda: sum(map(len, written.values())) >= target, 60, what="writes before the kill")
        proc.kill(signal.SIGKILL)
        stop.set()
        for t in threads:
            t.join(30)
        proc.restart()
        c = proc.client()
        for key, ids in written.items():
            present = {e[0] for e in c.xrange(key)}
            missing = [i for i in ids if i not in present]
            assert not missing, f"{len(missing)} acknowledged XADDs to {key} lost ({policy})"
        pending = {p["message_id"] for p in c.xpending_range("w0", "g", "-", "+", 1_000_000)}
        assert not pending & set(acked), "acknowledged XACKs came back as pending"
        assert c.xadd("w1", {"after": "restart"})  # and the region takes writes again
        c.close()
    finally:
        proc.stop()


# ---------------------------------------------------------------- appendfsync always
def test_always_replies_only_after_the_fsync_and_clients_share_fsyncs(tmp_path, monkeypatch):
    from node.persistence import aof

    first_fsync, others_sent = threading.Event(), threading.Event()
    socks: list = []
    seen_before_fsync: list = []
    real_fsync = aof.AppendLog.fsync

    durable = [0]  # records covered by the fsyncs done so far (one record per socket's XADD)

    def fsync(self):
        # runs on the server's loop: at most as many replies may be out as records are on disk
        if socks:
            readable, _, _ = select.select(socks, [], [], 0)
            if len(readable) > durable[0]:
                seen_before_fsync.append((len(readable), durable[0]))
        if not first_fsync.is_set():
            first_fsync.set()
            assert others_sent.wait(10)  # the other nine commands arrive while this fsync runs
        target = self.last_record
        real_fsync(self)
        durable[0] = target

    monkeypatch.setattr(aof.AppendLog, "fsync", fsync)
    with InProcessServer(Config(dir=str(tmp_path), appendfsync="always")) as srv:
        socks.extend(socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(10))
        xadd = [b"*5\r\n$4\r\nXADD\r\n$%d\r\nk%d\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n" % (len(b"k%d" % i), i)
                for i in range(10)]
        socks[0].sendall(xadd[0])
        assert first_fsync.wait(10)
        for sock, cmd in zip(socks[1:], xadd[1:], strict=True):
            sock.sendall(cmd)
        others_sent.set()
        for sock in socks:
            assert sock.recv(100).startswith(b"$15\r\n")  # a bulk string: the new entry's ID
        opened = socks[:]
        socks.clear()  # what the shutdown's fsync sees no longer matters
        for sock in opened:
            sock.close()
        assert seen_before_fsync == []  # no reply left before the fsync that covers it
        # one fsync for the first; the nine that arrived meanwhile share the next (two, if the
        # event loop happened to read them in two turns)
        assert 2 <= srv.call(lambda: srv.server.core.oplog.fsyncs) <= 3


# ---------------------------------------------------------------- where a region's settings come from
def test_a_regions_own_settings_in_the_cluster_file_hold_and_its_options_come_after_them():
    """[regions.config]'s appendonly, appendfsync and enable-debug-command reach the region (the
    file's top-level appendfsync is every region's, a region's own comes after it), and
    `braid node`'s options, when given, come after the file."""
    from node.testing import LocalCluster

    own = {"appendonly": "no", "appendfsync": "always", "enable-debug-command": "local"}
    with LocalCluster(1, settings=own) as cluster:
        [c] = cluster.clients()
        assert c.config_get("append*") | c.config_get("enable-debug-command") == {
            "appendonly": "no", "appendfsync": "always", "appenddirname": "appendonlydir",
            "enable-debug-command": "local"}
        assert not os.path.exists(os.path.join(cluster.procs[0].data_dir, "appendonlydir"))  # nothing kept
        c.close()
    with LocalCluster(1, settings=own, extra_args=["--appendonly", "yes", "--appendfsync", "no",
                                                   "--enable-debug-command", "no"]) as cluster:
        [c] = cluster.clients()
        assert c.config_get("appendonly") | c.config_get("appendfsync") | c.config_get("enable-debug-command") == {
            "appendonly": "yes", "appendfsync": "no", "enable-debug-command": "no"}
        c.close()


# ---------------------------------------------------------------- a region of a cluster comes back
def _xrange_ids(c, key) -> list:
    return [e[0] for e in c.xrange(key)]


@pytest.mark.parametrize("how", ["sigkill", "stop"])
def test_a_region_that_was_away_comes_back_identical(how):
    from node.testing import LocalCluster

    with LocalCluster(3, extra_args=["--appendfsync", "always"]) as cluster:
        r1, r2, r3 = cluster.procs
        setup = r2.client()
        setup.xgroup_create("w0", "g", id="0", mkstream=True)
        setup.close()
        stop = threading.Event()
        written = {"at1": [], "at2": []}
        acked: list = []
        threads = [threading.Thread(target=_writer, args=(r1, "log", written["at1"], stop)),
                   threading.Thread(target=_writer, args=(r2, "log", written["at2"], stop)),
                   threading.Thread(target=_writer, args=(r1, "w0", [], stop)),
                   threading.Thread(target=_consumer, args=(r2, acked, stop)),  # XREADGROUP + XACK at 2
                   threading.Thread(target=_churn, args=(r2, stop))]  # XADD, XGROUP CREATE/DESTROY, DEL
        for t in threads:
            t.start()
        wait_until(lambda: len(written["at2"]) >= 300, 60, what="writes at region 2")
        if how == "sigkill":
            r2.kill(signal.SIGKILL)
        else:
            r2.stop_keeping_data()
        wait_until(lambda: len(written["at1"]) >= len(written["at2"]) + 300, 60,
                   what="region 1 writing while region 2 is away")
        r2.restart()
        stop.set()
        for t in threads:
            t.join(30)
        cluster.sync_wait(60)
        clients = cluster.clients()
        ids = [_xrange_ids(c, "log") for c in clients]
        assert ids[0] == ids[1] == ids[2]
        everything = set(ids[0])
        assert all(i in everything for i in written["at1"] + written["at2"]), "an acknowledged write was lost"
        assert len(everything) == len(ids[0])  # no duplicates
        for key in ("w0", "tmp"):  # the other keys, and the groups, agree too
            assert _xrange_ids(clients[0], key) == _xrange_ids(clients[1], key) == _xrange_ids(clients[2], key)
            names = [[g["name"] for g in c.xinfo_groups(key)] if c.exists(key) else None for c in clients]
            assert names[0] == names[1] == names[2]  # the same groups (PEL and consumers are per region)
        pending = {p["message_id"] for p in clients[1].xpending_range("w0", "g", "-", "+", 1_000_000)}
        assert not pending & set(acked), "acknowledged XACKs at region 2 came back as pending"
        for c in clients:
            c.close()


# ---------------------------------------------------------------- snapshots
def test_save_compacts_the_log_and_a_restart_loads_snapshot_plus_tail(tmp_path):
    directory = str(tmp_path)
    with InProcessServer(Config(dir=directory)) as srv:
        c = srv.client()
        for i in range(50):
            c.xadd("s", {"n": str(i)})
        c.xgroup_create("s", "g", id="0")
        c.xreadgroup("g", "alice", {"s": ">"}, count=10)
        before_save = c.lastsave()
        assert c.save() is True
        assert c.lastsave() >= before_save
        assert c.info("persistence")["rdb_changes_since_last_save"] == 0
        c.xack("s", "g", *[e[0] for e in c.xrange("s", count=3)])
        c.xadd("s", {"n": "after"})
        before = dump(c)
        c.close()
    result = scan(_log_dir(tmp_path))
    assert result.segments[0].first_record > 1 and len(result.records) == 2  # only the tail is left
    with InProcessServer(Config(dir=directory)) as srv:
        c = srv.client()
        assert dump(c) == before
        info = c.info("persistence")
        assert info["aof_loaded_records"] == 2 and info["aof_loaded_snapshot_record"] > 0
        c.close()


def test_bgsave_and_the_snapshot_survives_alone(tmp_path):
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        for i in range(20):
            c.xadd("s", {"n": str(i)})
        assert c.bgsave() is True
        wait_until(lambda: c.info("persistence")["rdb_bgsave_in_progress"] == 0, 10, what="BGSAVE done")
        assert c.info("persistence")["rdb_last_bgsave_status"] == "ok"
        before = dump(c)
        c.close()
    assert reload(str(tmp_path)) == before


def test_a_damaged_snapshot_stops_the_region_when_the_log_cannot_replace_it(tmp_path):
    from node.persistence import snapshot

    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        c.xadd("s", {"f": "v"})
        c.save()
        c.close()
    (_record, path), = snapshot.list_snapshots(_log_dir(tmp_path))
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    res = _braid_node(tmp_path)
    assert res.returncode == 1 and "no valid snapshot" in res.stderr


def test_a_snapshot_body_is_never_unpickled(tmp_path):
    """A pickle where the schema body belongs is unreadable (tests/test_snapshot_format.py has the exploit)."""
    import pickle

    from node.persistence import snapshot

    good = snapshot.encode({}, None, 1, 0, False, 1)
    header_len = int.from_bytes(good[10:14], "little")
    body = pickle.dumps({"keys": os.system, "causal": None}, protocol=5)
    import msgspec

    header = msgspec.msgpack.decode(good[14:14 + header_len])
    header["body_len"] = len(body)
    h = msgspec.msgpack.encode(header)
    forged = snapshot.MAGIC + len(h).to_bytes(4, "little") + h + body
    from xxhash import xxh3_64_intdigest

    forged += xxh3_64_intdigest(forged).to_bytes(8, "little")
    with pytest.raises(snapshot.SnapshotError, match="unreadable"):
        snapshot.decode(forged)
    assert snapshot.decode(good).record == 1


def test_config_get_and_set_of_the_persistence_settings(tmp_path):
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        assert c.config_get("append*") == {"appendonly": "yes", "appendfsync": "everysec",
                                           "appenddirname": "appendonlydir"}
        assert c.config_set("appendfsync", "always") is True
        assert c.info("persistence")["aof_fsync_policy"] == "always"
        assert c.xadd("s", {"f": "v"})
        with pytest.raises(redis.ResponseError, match="must be one of the following: always, everysec, no"):
            c.config_set("appendfsync", "sometimes")
        with pytest.raises(redis.ResponseError, match="can't set immutable config"):
            c.config_set("appendonly", "no")
        c.close()


def _crdt(c) -> dict:
    return replication_status(c)


def test_a_full_id_accepted_before_the_id_mode_changed_is_replayed_under_its_mode():
    """Found by the deterministic simulation: the replay used today's ID mode (strict) for a
    full-ID XADD accepted under semi-strict, refused it, and re-minted later dots."""
    from node.testing import LocalCluster

    with LocalCluster(2) as cluster:
        r1, r2 = cluster.clients()
        r1.execute_command("BRAID.CONFIG", "SET", "crdt_xadd_id_uniqueness_mode", "semi-strict")
        r1.xadd("s", {"f": "v"}, id="5-3")
        r1.execute_command("BRAID.CONFIG", "SET", "crdt_xadd_id_uniqueness_mode", "strict")
        r1.xadd("s", {"f": "w"})
        cluster.sync_wait()
        before = r1.xrange("s")
        r1.close()
        cluster.procs[0].kill()
        cluster.procs[0].restart()
        r1 = cluster.procs[0].client()
        assert r1.xrange("s") == before
        assert r1.execute_command("BRAID.CONFIG", "GET", "crdt_xadd_id_uniqueness_mode") == b"strict"
        r1.xadd("s", {"f": "after"})  # a new dot: region 2 applies it (a re-minted one it would drop)
        cluster.sync_wait()
        assert r2.xrange("s") == r1.xrange("s") and len(r1.xrange("s")) == 3
        for c in (r1, r2):
            c.close()


def test_a_region_away_past_the_backlog_gets_a_full_resync_and_keeps_its_own_writes():
    from node.testing import LocalCluster

    with LocalCluster(3) as cluster:
        r1, r2, r3 = cluster.clients()
        r1.xgroup_create("jobs", "g", id="0", mkstream=True)
        cluster.sync_wait()
        assert r3.xreadgroup("g", "c3", {"jobs": ">"}) == []  # a consumer of region 3's own
        r3.execute_command("BRAID.REPLICATION", "PAUSE")
        for c in (r1, r2):
            c.config_set("crdt-repl-backlog-size", 1)  # keep nothing a peer may still need
        made = [r1.xadd("jobs", {"n": str(i)}) for i in range(150)] + [r2.xadd("jobs", {"m": str(i)})
                                                                          for i in range(150)]
        r1.xadd("gone", {"f": "v"})
        wait_until(lambda: r2.exists("gone"), 20, what="region 2 seeing the key")
        assert r2.delete("gone") == 1  # an observed-remove region 3 never saw happen
        own = [r3.xadd("jobs", {"mine": str(i)}) for i in range(5)]  # written while away
        wait_until(lambda: int(_crdt(r1)["crdt_backlog_trimmed"]) > 0 and int(_crdt(r2)["crdt_backlog_trimmed"]) > 0,
                   20, what="regions 1 and 2 trimming what region 3 lacks")
        r3.execute_command("BRAID.REPLICATION", "RESUME")
        cluster.sync_wait(60)
        assert int(_crdt(r3)["crdt_full_resyncs_received"]) >= 1
        views = [[e[0] for e in c.xrange("jobs")] for c in (r1, r2, r3)]
        assert views[0] == views[1] == views[2]
        assert set(made + own) == set(views[0]) and len(views[0]) == len(made) + len(own)
        assert r1.exists("gone") == r2.exists("gone") == r3.exists("gone") == 0
        assert [c["name"] for c in r3.xinfo_consumers("jobs", "g")] == [b"c3"]  # its local state stayed
        got = r3.xreadgroup("g", "c3", {"jobs": ">"}, count=1000)
        assert len(got[0][1]) == len(views[0])  # nothing skipped after the resync
        for c in (r1, r2, r3):
            c.close()


@pytest.mark.parametrize("wiped", [False, True])
def test_a_region_stopped_past_the_backlog_comes_back_by_full_resync(wiped):
    from node.testing import LocalCluster

    with LocalCluster(3) as cluster:
        p3 = cluster.procs[2]
        r1, r2, r3 = cluster.clients()
        before = [r3.xadd("log", {"n": str(i)}) for i in range(20)]
        cluster.sync_wait()
        r3.close()
        p3.stop_keeping_data()
        if wiped:  # its disk is gone too: it starts empty
            shutil.rmtree(os.path.join(p3.data_dir, "appendonlydir"))
        for c in (r1, r2):
            c.config_set("crdt-repl-backlog-size", 1)
        trimmed = [int(_crdt(c)["crdt_backlog_trimmed"]) for c in (r1, r2)]
        after = [r1.xadd("log", {"m": str(i)}) for i in range(200)]
        wait_until(lambda: all(int(_crdt(c)["crdt_backlog_trimmed"]) > t + 150
                               for c, t in zip((r1, r2), trimmed, strict=True)),
                   20, what="regions 1 and 2 trimming what region 3 lacks")
        p3.restart()
        r3 = p3.client()
        cluster.sync_wait(60)
        views = [[e[0] for e in c.xrange("log")] for c in (r1, r2, r3)]
        assert views[0] == views[1] == views[2] == sorted(before + after, key=lambda i: tuple(map(int, i.split(b"-"))))
        assert int(_crdt(r3)["crdt_full_resyncs_received"]) >= 1
        p3.stop_keeping_data()  # and the resynced state is its new base on disk
        p3.restart()
        r3b = p3.client()
        assert [e[0] for e in r3b.xrange("log")] == views[0]
        for c in (r1, r2, r3, r3b):
            c.close()


def test_a_full_disk_refuses_writes_then_loses_nothing_once_space_is_back(tmp_path, monkeypatch):
    import errno

    from node.persistence import aof

    real_write = os.write
    full = threading.Event()

    def write(fd, data):
        if full.is_set() and os.readlink(f"/proc/self/fd/{fd}").endswith(".aof"):
            if len(data) > 10:
                return real_write(fd, bytes(data[:7]))  # part of a record reaches the disk...
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # ...then nothing more fits
        return real_write(fd, data)

    monkeypatch.setattr(aof.os, "write", write)
    with InProcessServer(Config(dir=str(tmp_path))) as srv, ThreadPoolExecutor(1) as pool:
        c, writer = srv.client(), srv.client()
        acked = [c.xadd("s", {"n": "before"})]
        full.set()
        # everysec: applied, but its record did not reach the OS, so its reply waits for the disk
        while_full = pool.submit(writer.xadd, "s", {"n": "while full"})
        wait_until(lambda: c.info("persistence")["aof_last_write_status"] == "err", 10, what="the write failing")
        with pytest.raises(redis.ResponseError, match="MISCONF Errors writing to the AOF file: write failed"):
            c.xadd("s", {"n": "refused"})
        assert len(c.xrange("s", "-", "+")) == 2  # reads go on, and see the entry in memory
        assert not while_full.done()  # not acknowledged while a crash could lose it
        full.clear()
        acked.append(while_full.result(timeout=20))  # acknowledged once the cron wrote it
        wait_until(lambda: c.info("persistence")["aof_last_write_status"] == "ok", 10, what="the cron writing again")
        acked.append(c.xadd("s", {"n": "after"}))
        c.close()
        writer.close()
    assert reload(str(tmp_path))[0] == [b"s"]
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        assert [e[0] for e in c.xrange("s")] == acked  # the half-written record was completed, once
        c.close()


@pytest.mark.parametrize("policy,when_written,leaves_after", [
    ("always", True, "write"), ("everysec", True, "write"), ("no", True, "write"),
    ("always", False, "fsync"), ("everysec", False, "fsync"), ("no", False, "write")])
def test_operations_leave_for_other_regions_once_written_or_once_durable(tmp_path, policy, when_written, leaves_after):
    """A region hands peers an operation once its record reached the OS (a killed process keeps
    it; a crashed machine's region recovers it from its peers: test_replication_recovery.py);
    a log told not to leave when written hands only what a machine crash cannot make it
    forget (except with `no`)."""
    import asyncio

    from node.persistence.oplog import OperationLog

    async def scenario() -> list:
        log = OperationLog(str(tmp_path / "log"), policy)
        log.leave_when_written = when_written
        told: list = []
        log.on_durable, log.replicating = told.append, True
        log.log_command(1, [b"XADD", b"s", b"*", b"f", b"v"])
        assert log.write_out()
        after_write = list(told)
        if policy == "always":
            log.fsync_now()
        else:
            log.sync_for_replication()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while log.synced < 1 and policy != "no":
            assert loop.time() < deadline
            await asyncio.sleep(0.001)
        log.close()
        return [after_write, told]

    after_write, told = asyncio.run(scenario())
    assert after_write == ([1] if leaves_after == "write" else [])
    assert told == [1]


def test_replication_fsyncs_are_shared_by_records_written_close_together(tmp_path, monkeypatch):
    """``everysec`` in a region of a cluster: the fsync that lets operations leave starts at
    once after a quiet spell, then at most once per ``REPLICATION_FSYNC_INTERVAL``: records
    written meanwhile wait and share the next one (here the cron's, the interval being long)."""
    import asyncio

    from node.persistence import oplog as oplog_module
    from node.persistence.oplog import OperationLog

    monkeypatch.setattr(oplog_module, "REPLICATION_FSYNC_INTERVAL", 3600.0)

    async def until(predicate) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not predicate():
            assert loop.time() < deadline
            await asyncio.sleep(0.001)

    async def scenario() -> None:
        log = OperationLog(str(tmp_path / "log"), "everysec")
        log.leave_when_written = False  # on_durable then tells the fsyncs
        told: list = []
        log.on_durable, log.replicating = told.append, True
        log.log_command(1, [b"XADD", b"s", b"*", b"f", b"0"])
        assert log.write_out()
        log.sync_for_replication()  # the first after a quiet spell: at once
        await until(lambda: told == [1])
        for i in range(1, 10):
            log.log_command(1, [b"XADD", b"s", b"*", b"f", b"%d" % i])
            assert log.write_out()
            log.sync_for_replication()
            await asyncio.sleep(0)  # the next turn of the event loop
        assert log.fsyncs == 1 and told == [1]  # not on disk yet: nothing more may leave
        log.tick()  # the once-a-second fsync covers all of them
        await until(lambda: told[-1] == 10)
        assert log.fsyncs == 2 and told == [1, 10]
        log.close()

    asyncio.run(scenario())


def test_shutdown_stops_the_region_and_keeps_everything(tmp_path):
    proc = BraidProcess(data_dir=str(tmp_path))
    proc.start()
    try:
        c = proc.client()
        new_id = c.xadd("s", {"f": "v"})
        with pytest.raises(redis.ResponseError, match="No shutdown in progress"):
            c.shutdown(abort=True)
        with pytest.raises(redis.ResponseError, match="syntax error"):
            c.execute_command("SHUTDOWN", "SAVE", "NOSAVE")
        with pytest.raises(redis.ConnectionError):
            c.execute_command("SHUTDOWN", "SAVE")  # no reply: the connection closes
        assert proc.proc.wait(30) == 0
        proc.restart()
        c = proc.client()
        assert [e[0] for e in c.xrange("s")] == [new_id]
        assert c.info("persistence")["aof_loaded_snapshot_record"] == 1  # SAVE wrote a snapshot first
        c.close()
    finally:
        proc.stop()


def test_replies_held_for_the_log_still_leave_before_quit_closes(tmp_path):
    """XADD then QUIT in one packet: the XADD's reply waits for this turn's log write, QUIT must not drop it."""
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        sock.sendall(b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$3\r\n1-1\r\n$1\r\nf\r\n$1\r\nv\r\n*1\r\n$4\r\nQUIT\r\n")
        got = b""
        while chunk := sock.recv(100):  # until the server closes
            got += chunk
        sock.close()
    assert got == b"$3\r\n1-1\r\n+OK\r\n"
