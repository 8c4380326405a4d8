"""Memory a client or a peer can make a region hold has a bound, and the
once-a-second work does not grow with the data (each test failed before its fix)."""

from __future__ import annotations

import os
import socket

import pytest

from node.testing import wait_until

MB = 1024 * 1024


def _flood(port: int, first: bytes, chunk: bytes, max_bytes: int) -> tuple[bool, int]:
    """Send ``first``, then ``chunk`` until the server closes the connection or
    ``max_bytes`` were sent; (closed, bytes sent).  Replies are read and dropped."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sent = 0
    try:
        s.sendall(first)
        while sent < max_bytes:
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                return True, sent
            sent += len(chunk)
            s.setblocking(False)
            try:
                while s.recv(1 << 20):
                    pass
                return True, sent  # recv returned b"": closed
            except BlockingIOError:
                pass
            except ConnectionResetError:
                return True, sent
            finally:
                s.setblocking(True)
        s.shutdown(socket.SHUT_WR)  # the server answers what it holds, or has closed already
        s.settimeout(10)
        try:
            while s.recv(1 << 20):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
        return False, sent
    finally:
        s.close()


@pytest.fixture
def small_query_limit(braid_proc):
    clients = [braid_proc.client()]
    for c in clients:
        c.config_set("client-query-buffer-limit", MB)
    yield
    for c in clients:
        c.config_set("client-query-buffer-limit", 1024 * MB)
        c.close()


def test_endless_small_bulks_are_cut_off(braid_proc, braid, small_query_limit):
    """``*2147483647`` then one-byte bulks for ever: the parsed arguments count
    against client-query-buffer-limit.  (Redis 7 counts only its buffer and grows
    its argument array without a bound; before, Braid did too.)"""
    closed, sent = _flood(braid_proc.port, b"*2147483647\r\n", b"$1\r\na\r\n" * 10000, 64 * MB)
    assert closed, f"still connected after {sent} bytes of one command"
    assert braid.ping()


def test_multi_queue_counts_against_the_query_buffer_limit(braid_proc, braid, small_query_limit):
    """Commands queued by MULTI count against client-query-buffer-limit, as in the
    Redis releases Braid follows (``mstate.argv_len_sums``; Debian's 7.0 does not)."""
    command = b"*2\r\n$4\r\nECHO\r\n$1000\r\n" + b"x" * 1000 + b"\r\n"
    closed, sent = _flood(braid_proc.port, b"*1\r\n$5\r\nMULTI\r\n", command * 64, 64 * MB)
    assert closed, f"still connected after queueing {sent} bytes"
    assert braid.ping()
    assert braid.info("stats")["client_query_buffer_limit_disconnections"] >= 1


# ---------------------------------------------------------------- WATCH
# (connection, command) steps run on Braid and on Redis; each EXEC's reply must match.
WATCH_SCENARIOS = {
    "write to a watched key": [(0, "WATCH k"), (1, "XADD k 1-1 f v"), (0, "MULTI"), (0, "PING"), (0, "EXEC")],
    "nothing changed": [(1, "XADD k 1-1 f v"), (0, "WATCH k"), (0, "MULTI"), (0, "PING"), (0, "EXEC")],
    "deleted and recreated": [(1, "XADD k 1-1 f v"), (0, "WATCH k"), (1, "DEL k"), (1, "XADD k 2-1 f v"),
                              (0, "MULTI"), (0, "PING"), (0, "EXEC")],
    "watched while missing, then created": [(0, "WATCH k"), (1, "XADD k 1-1 f v"), (0, "MULTI"), (0, "EXEC")],
    "FLUSHALL of a watched key": [(1, "XADD k 1-1 f v"), (0, "WATCH k"), (1, "FLUSHALL"), (0, "MULTI"),
                                  (0, "PING"), (0, "EXEC")],
    "FLUSHALL of a missing watched key": [(0, "WATCH k"), (1, "XADD other 1-1 f v"), (1, "FLUSHALL"),
                                          (0, "MULTI"), (0, "PING"), (0, "EXEC")],
    "another client unwatches the same key": [(0, "WATCH k"), (1, "WATCH k"), (1, "UNWATCH"),
                                              (1, "XADD k 1-1 f v"), (0, "MULTI"), (0, "PING"), (0, "EXEC")],
    "another client's EXEC releases its watch": [(0, "WATCH k"), (1, "WATCH k"), (1, "MULTI"), (1, "EXEC"),
                                                 (1, "XADD k 1-1 f v"), (0, "MULTI"), (0, "EXEC")],
    "watch again after EXEC": [(0, "WATCH k"), (1, "XADD k 1-1 f v"), (0, "MULTI"), (0, "EXEC"),
                               (0, "WATCH k"), (0, "MULTI"), (0, "PING"), (0, "EXEC")],
    "RESET releases": [(0, "WATCH k"), (0, "RESET"), (1, "XADD k 1-1 f v"), (0, "MULTI"), (0, "PING"),
                       (0, "EXEC")],
    "DISCARD releases": [(0, "WATCH k"), (0, "MULTI"), (0, "DISCARD"), (1, "XADD k 1-1 f v"), (0, "MULTI"),
                         (0, "PING"), (0, "EXEC")],
    "XDEL of a missing ID changes nothing": [(1, "XADD k 1-1 f v"), (0, "WATCH k"), (1, "XDEL k 9-9"),
                                             (0, "MULTI"), (0, "PING"), (0, "EXEC")],
}


@pytest.mark.parametrize("steps", WATCH_SCENARIOS.values(), ids=WATCH_SCENARIOS.keys())
def test_watch_semantics_match_redis(braid_proc, redis_proc, braid, ref, steps):
    from tests.differential import RawClient

    sides = {port: [RawClient(port), RawClient(port)] for port in (braid_proc.port, redis_proc.port)}
    try:
        for conn, command in steps:
            argv = command.split()
            got, want = (sides[port][conn].call(*argv) for port in (braid_proc.port, redis_proc.port))
            assert got == want, f"{command}: braid {got!r}, redis {want!r}"
    finally:
        for clients in sides.values():
            for c in clients:
                c.close()


def test_watch_versions_are_kept_only_while_watched():
    """Keys nobody watches cost nothing; a watch ends with EXEC, UNWATCH, RESET or the
    connection.  (Before, a version stayed for every key ever changed.)"""
    from node.testing import InProcessServer
    from tests.differential import RawClient

    with InProcessServer() as srv:
        c = srv.client()
        for i in range(2000):
            c.xadd(f"k{i}", {"f": "v"})
        c.delete(*[f"k{i}" for i in range(0, 2000, 2)])
        assert srv.call(lambda: len(srv.server.core.db.watched)) == 0

        watcher = RawClient(srv.port)
        watcher.call("WATCH", "k1", "k3", "gone")
        assert srv.call(lambda: sorted(srv.server.core.db.watched)) == [b"gone", b"k1", b"k3"]
        c.xadd("k1", {"f": "v"})
        watcher.call("UNWATCH")
        assert srv.call(lambda: len(srv.server.core.db.watched)) == 0
        watcher.call("WATCH", "k5")
        watcher.close()  # the disconnection releases it
        wait_until(lambda: srv.call(lambda: len(srv.server.core.db.watched)) == 0, what="watch released")
        c.close()


# ---------------------------------------------------------------- once-a-second work
class _CountedKeyspace:
    """Counts how often the whole keyspace is walked (a wrapper around the real one)."""

    def __init__(self, keys) -> None:
        self.walks = 0
        cls = type(keys)
        outer = self

        class Counted(cls):
            def values(self):
                outer.walks += 1
                return super().values()

            def items(self):
                outer.walks += 1
                return super().items()

            def __iter__(self):
                outer.walks += 1
                return super().__iter__()

        keys.__class__ = Counted


def _server(cluster: bool = False):
    from node.activeactive.cluster_config import local_cluster
    from node.region.config import Config
    from node.runtime.server import Server

    if not cluster:
        return Server(Config()).core
    cfg = local_cluster(3, 17000)  # never started: no sockets
    return Server(Config(), cluster=(cfg, cfg.regions[0])).core


def test_idmp_expiry_visits_only_keys_with_maps():
    """The once-a-second IDMP expiry walks the keys that hold maps, not every key.
    (Before, it walked every stream every second.)"""
    from crdt import ops

    srv = _server()
    keys, limits = srv.db.keys, srv.db.limits
    for i in range(500):
        ops.apply(keys, ops.AddEntry(b"k%d" % i, 1, (1, 0), [b"f", b"v"]), limits)
    for i in range(3):
        ops.apply(keys, ops.AddEntry(b"k%d" % i, 1, (5000, 0), [b"f", b"v"], pid=b"p", iid=b"i%d" % i), limits)
    ops.apply(keys, ops.RenameKey(b"k0", new_key=b"renamed"), limits)  # its maps move with it
    counter = _CountedKeyspace(keys)
    assert srv.db.expire_idmp(1000) == 0  # first use builds the index from every stream
    counter.walks = 0
    assert srv.db.expire_idmp(2000) == 0
    assert srv.db.expire_idmp(3000) == 0
    assert counter.walks == 0
    assert keys.idmp_keys() == {b"renamed", b"k1", b"k2"}
    ops.apply(keys, ops.AddEntry(b"late", 1, (9000, 0), [b"f", b"v"], pid=b"p", iid=b"x"), limits)
    assert srv.db.expire_idmp(5000 + 100 * 1000 + 1) == 3  # the duration (100 s) passed for the first three
    assert keys.idmp_keys() == {b"late"} and counter.walks == 0
    assert srv.db.expire_idmp(9000 + 100 * 1000 + 1) == 1
    assert keys.idmp_keys() == set()


class _CountedOp(bytes):
    """An operation's bytes that count how often their size is asked."""

    asked = 0

    def __len__(self) -> int:
        _CountedOp.asked += 1
        return super().__len__()


def test_backlog_trim_counts_only_new_operations():
    """The once-a-second backlog trim keeps a running byte count instead of summing
    every operation of the backlog each time.  (Before, it summed them all.)"""
    srv = _server(cluster=True)
    aa = srv.aa
    for i in range(1000):
        aa.hub.issue(_CountedOp(b"%04d" % i))
    _CountedOp.asked = 0
    assert aa.trim_backlog(1 << 30, 0, 0.0) == 0  # nothing left for peers yet
    assert _CountedOp.asked == 1000  # counted once, as they joined
    _CountedOp.asked = 0
    assert aa.trim_backlog(1 << 30, 0, 0.0) == 0
    assert _CountedOp.asked == 0
    for i in range(10):
        aa.hub.issue(_CountedOp(b"%04d" % i))
    assert aa.trim_backlog(1 << 30, 0, 0.0) == 0
    assert _CountedOp.asked == 10 and aa.backlog_bytes() == 1010 * 4
    # over the size limit: the oldest go, and the count follows
    assert aa.trim_backlog(400, 0, 0.0) == 910
    assert aa.backlog_bytes() == 400 == sum(len(e.op) for e in aa.causal.log)
    aa.causal.trim(50)  # trimmed elsewhere (a resync): counted again
    assert aa.backlog_bytes() == 200


# ---------------------------------------------------------------- what waits for a region
def test_metadata_waiting_for_a_region_is_reported():
    """IDMP maps past their size and delete contexts wait until every region has applied
    what they guard: while a region is cut off they grow.  INFO and braid-admin status
    report their sizes and the region holding them back; they shrink once it is back."""
    import os
    import subprocess
    import sys

    from node.testing import LocalCluster, replication_status

    status = replication_status
    with LocalCluster(3) as cluster:
        r1, r2, r3 = cluster.clients()
        try:
            r1.execute_command("XADD", "s", "*", "f", "v")
            r1.execute_command("XCFGSET", "s", "IDMP-MAXSIZE", "5")
            cluster.sync_wait()
            r3.execute_command("BRAID.REPLICATION", "PAUSE")
            for i in range(30):
                r1.execute_command("XADD", "s", "IDMP", "p", f"iid-{i}", "*", "f", "v")
            for i in range(4):
                r1.xadd(f"gone-{i}", {"f": "v"})
                r1.delete(f"gone-{i}")
            wait_until(lambda: status(r2)["crdt_vv"] == status(r1)["crdt_vv"], what="region 2 caught up")
            # region 2 acknowledges what it applied; region 3, cut off, cannot

            def held_back():
                st = status(r1)
                return (st["crdt_stability_held_by"] == "region-3" and int(st["crdt_delete_contexts"]) == 4
                        and int(st["crdt_idmp_iids_tracked"]) == 30)
            wait_until(held_back, what="region 3 holding the metadata back")
            st = status(r1)
            assert int(st["crdt_idmp_keys"]) == 1 and int(st["crdt_idmp_producers"]) == 1
            assert "unstable_ops=0" in st["crdt_peer_2"] and "unstable_ops=0" not in st["crdt_peer_3"]
            assert int(st["crdt_backlog_bytes"]) > 0

            res = subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--cluster", cluster.file, "status"],
                                 capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "250"})
            assert res.returncode == 0, res.stderr
            rows = [[c.strip() for c in line.split("│")] for line in res.stdout.splitlines()
                    if line.startswith("│ region-1 ")]
            assert ["30", "4", "region-3"] in [cells[-4:-1] for cells in rows], res.stdout  # iids, contexts, held by

            r3.execute_command("BRAID.REPLICATION", "RESUME")
            cluster.sync_wait()  # regions 2 and 3 never write again: their acknowledgements tell

            def collected():
                st = status(r1)
                return (st["crdt_delete_contexts"] == "0" and st["crdt_idmp_iids_tracked"] == "5"
                        and "unstable_ops=0" in st["crdt_peer_2"] and "unstable_ops=0" in st["crdt_peer_3"])
            wait_until(collected, what="metadata collected once region 3 is back, though it never writes")
        finally:
            for c in (r1, r2, r3):
                c.close()


# ---------------------------------------------------------------- segment roll
def _fsyncs_by_thread(monkeypatch) -> list[tuple[int, str]]:
    """Note (thread, file name) of every fsync (the real one still runs)."""
    import os
    import threading

    calls: list[tuple[int, str]] = []
    real = os.fsync

    def noting(fd):
        calls.append((threading.get_ident(), os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real(fd)

    monkeypatch.setattr(os, "fsync", noting)
    return calls


def test_a_segment_roll_inside_an_append_leaves_the_fsync_to_a_worker(tmp_path, monkeypatch):
    """A segment filling up during an append no longer fsyncs on the caller's thread
    (the event loop).  (Before, the roll fsynced the finished segment right there.)"""
    import threading

    from node.persistence.aof import OP_LOCAL, AppendLog, scan, segment_name

    calls = _fsyncs_by_thread(monkeypatch)
    with AppendLog.open(str(tmp_path), segment_size=200) as log:
        log.fsync()
        calls.clear()
        numbers = [log.append(OP_LOCAL, b"%03d" % i * 20) for i in range(20)]  # 73-byte records
        assert not [c for c in calls if c[0] == threading.get_ident()]
        log.fsync()  # waits for the seals
    assert numbers == list(range(1, 21))
    assert sorted(os.path.basename(p) for p in log.segments()) == [segment_name(n) for n in range(1, 21, 2)]
    assert [r[0] for r in scan(str(tmp_path)).records] == numbers


def _unsealed_log(directory, monkeypatch):
    """A log whose last roll's seal has not run (its worker never started)."""
    from node.persistence import aof

    monkeypatch.setattr(aof._Seal, "start", lambda self: None)
    log = aof.AppendLog.open(str(directory), segment_size=100)
    for i in range(3):
        log.append(aof.OP_LOCAL, b"%d" % i * 50)  # 63 bytes: one record per segment
    log.flush()  # the records reached the OS
    return log


def test_records_after_an_unsealed_roll_are_durable_only_after_the_seal(tmp_path, monkeypatch):
    from node.persistence import aof

    log = _unsealed_log(tmp_path, monkeypatch)
    names = sorted(os.listdir(tmp_path))
    assert names == [aof.segment_name(1), aof.segment_name(2), aof.segment_name(3) + ".next"]
    assert log.sealing() is not None
    calls = _fsyncs_by_thread(monkeypatch)
    log.fsync()  # what makes records durable seals the previous segment first
    files = [name for _, name in calls]
    assert files.index(aof.segment_name(2)) < files.index(aof.segment_name(3))
    assert sorted(os.listdir(tmp_path)) == [aof.segment_name(n) for n in (1, 2, 3)]
    assert log.sealing() is None
    log.close()


def test_a_crash_before_the_seal(tmp_path, monkeypatch):
    """A process crash: the .next segment follows an intact one and is taken in.
    A machine crash that tore the unsealed segment: the .next one goes with the torn tail."""
    import shutil

    from node.persistence import aof

    log = _unsealed_log(tmp_path / "log", monkeypatch)
    process_crash = shutil.copytree(tmp_path / "log", tmp_path / "process")
    machine_crash = shutil.copytree(tmp_path / "log", tmp_path / "machine")
    log.close()

    result = aof.scan(str(process_crash))
    assert [r[0] for r in result.records] == [1, 2, 3] and result.torn is None
    with aof.AppendLog.open(str(process_crash), segment_size=100) as reopened:
        assert reopened.append(aof.OP_LOCAL, b"four") == 4
    assert sorted(os.listdir(process_crash)) == [aof.segment_name(n) for n in (1, 2, 3)]
    assert [r[0] for r in aof.scan(str(process_crash)).records] == [1, 2, 3, 4]

    second = machine_crash / aof.segment_name(2)
    os.truncate(second, os.path.getsize(second) - 5)  # its tail never reached the disk
    result = aof.scan(str(machine_crash))
    assert result.torn == (str(second), 0) and result.discarded_next is not None
    assert [r[0] for r in result.records] == [1]
    with pytest.raises(aof.TornTail):
        aof.AppendLog.open(str(machine_crash))
    aof.truncate_torn(result)
    assert sorted(os.listdir(machine_crash)) == [aof.segment_name(1), aof.segment_name(2)]
    with aof.AppendLog.open(str(machine_crash), segment_size=100) as reopened:
        assert reopened.append(aof.OP_LOCAL, b"again") == 2


def test_operation_log_fsync_in_a_worker_covers_the_seal(tmp_path, monkeypatch):
    """An operation log (everysec, in a region of a cluster) across many rolls: nothing
    fsyncs on the event loop's thread, and ``synced`` covers every record once done."""
    import asyncio
    import threading

    from node.persistence.oplog import OperationLog

    async def run():
        log = OperationLog(str(tmp_path), "everysec", segment_size=300)
        log.replicating, log.leave_when_written = True, False  # on_durable then tells the fsyncs
        durable = asyncio.Event()
        log.on_durable = lambda mark: durable.set() if mark >= 40 else None
        calls = _fsyncs_by_thread(monkeypatch)
        for i in range(40):
            log.log_command(1, [b"XADD", b"k", b"*", b"f", b"%d" % i * 20])
            if i % 7 == 0:
                assert log.write_out()
                log.sync_for_replication()
        assert log.write_out()
        log.sync_for_replication()
        await asyncio.wait_for(durable.wait(), 30)
        assert log.synced == log.last_record == 40
        assert not [c for c in calls if c[0] == threading.get_ident()]
        log.close()

    asyncio.run(run())


# ---------------------------------------------------------------- replies nobody reads
def test_a_client_that_never_reads_its_replies_is_closed(braid_proc, braid):
    """client-output-buffer-limit for normal clients (Redis's syntax): replies the client
    does not read pile up only to the limit.  (Before, they grew without a bound.)"""
    assert braid.config_get("client-output-buffer-limit")["client-output-buffer-limit"].startswith(
        "normal 1073741824 0 0 ")
    for _i in range(100):
        braid.xadd("big", {"f": "x" * 1000})
    before = braid.info("stats")["client_output_buffer_limit_disconnections"]
    braid.config_set("client-output-buffer-limit", "normal 1mb 0 0")
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", braid_proc.port))
        s.sendall(b"CLIENT SETNAME silent\r\n" + b"XRANGE big - +\r\n" * 500)  # ~50 MB of replies
        wait_until(lambda: braid.info("stats")["client_output_buffer_limit_disconnections"] == before + 1,
                   what="the silent client closed")
        assert b"name=silent" not in braid.execute_command("CLIENT", "LIST")
        s.close()
        assert len(braid.xrange("big")) == 100
    finally:
        braid.config_set("client-output-buffer-limit", "normal 1gb 0 0")


def test_client_output_buffer_limit_config_follows_redis(braid, ref):
    for c in (braid, ref):
        with pytest.raises(Exception, match="Wrong number of arguments in buffer limit configuration"):
            c.config_set("client-output-buffer-limit", "normal 1mb 0")
        with pytest.raises(Exception, match="Invalid client class specified in buffer limit configuration"):
            c.config_set("client-output-buffer-limit", "other 1mb 0 0")
        assert c.config_set("client-output-buffer-limit", "normal 0 0 0 replica 256mb 64mb 60")
        assert c.config_get("client-output-buffer-limit")["client-output-buffer-limit"] == (
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60")
    braid.config_set("client-output-buffer-limit", "normal 1gb 0 0")


def test_replies_held_for_a_failing_disk_count_against_the_output_limit():
    """Under ``appendfsync always`` a full disk holds every reply; a client that keeps
    sending meanwhile is closed at the limit instead of piling them up without a bound."""
    from node.region.config import Config
    from node.testing import InProcessServer

    with InProcessServer(Config(appendfsync="always", enable_debug_command="yes")) as srv:
        admin = srv.client()
        for _i in range(100):
            admin.xadd("big", {"f": "x" * 1000})
        admin.config_set("client-output-buffer-limit", "normal 1mb 0 0")
        admin.execute_command("DEBUG", "DISK-FULL", "yes")
        try:
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(b"XADD k * f v\r\n" + b"XRANGE big - +\r\n" * 50)  # ~5 MB of replies, all held
            wait_until(lambda: srv.call(lambda: srv.server.core.stats.client_outbuf_limit_disconnections) == 1,
                       what="the client holding replies closed")
            s.close()
        finally:
            admin.execute_command("DEBUG", "DISK-FULL", "no")
            admin.close()


def test_every_command_the_query_buffer_admits_fits_one_log_record():
    """A record holds a command's arguments and its operations: with the default limits the
    largest command fits twice over, so no write is refused and none can fail to be logged
    after it changed the state (which would stop the region)."""
    from node.persistence import aof
    from node.region.config import Config

    limit = Config()["client-query-buffer-limit"]
    assert 2 * int(limit) + (1 << 20) <= aof.MAX_PAYLOAD
    assert int(Config()["proto-max-bulk-len"]) < aof.MAX_PAYLOAD // 2


def test_a_write_too_large_for_one_log_record_is_refused_before_it_runs(monkeypatch):
    """Raised past what a record holds, the query-buffer limit would admit a write the log
    cannot take: it is refused with an error, nothing changes, and the region keeps serving."""
    import redis

    from node.persistence import aofformat
    from node.testing import InProcessServer

    monkeypatch.setattr(aofformat, "MAX_PAYLOAD", 4 << 20)  # read where encode_record is
    with InProcessServer() as srv:
        c = srv.client()
        c.config_set("client-query-buffer-limit", "64mb")  # the cap is computed from both
        with pytest.raises(redis.ResponseError, match="too large for the append-only file"):
            c.xadd("big", {"v": b"x" * (3 << 20)})
        assert c.exists("big") == 0
        assert c.xadd("big", {"v": b"x" * (1 << 20)})
        assert c.xlen("big") == 1
