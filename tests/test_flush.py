"""Flushing an Active-Active database: FLUSHALL at one region, and ``braid-admin flush db``.

A flush is one operation (crdt/ops.py ``FlushKeys``): one record of the append-only file,
one envelope, the observed-remove of every key the flushing region held.  FLUSHALL sent
to one region removes what that region had received; ``braid-admin flush db`` first has
the region wait until it holds every operation any region had applied when the call
started, so it removes everything acknowledged anywhere before it.  Writes concurrent
with a flush survive in both cases.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from chaos.sim.disk import SimFile, SimOperationLog, read_back
from crdt import ops
from crdt.causal import CausalLog
from node.activeactive import opcodec
from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.activeactive.region import FlushNotReady
from node.persistence import replay
from node.persistence.aof import OP_REPLICATED
from node.persistence.oplog import decode_replicated
from node.region.config import Config
from node.region.core import RegionCore, Session
from node.testing import (
    LocalCluster,
    every_peer_answered,
    flushed_clients,
    replication_status,
    version_vector,
    wait_until,
)
from node.tools import admin_cli

T0 = 1_700_000_000_000


# ------------------------------------------------------------------ one region core, no sockets
def _core(number: int = 1, file: SimFile | None = None, **config) -> tuple[RegionCore, SimFile]:
    specs = [RegionSpec(f"region-{n}", n, "local", 0, 0) for n in (1, 2)]
    cfg = ClusterConfig("flush", "db", "token", 16, specs)
    core = RegionCore(Config(appendfsync="always", **config), cluster=(cfg, specs[number - 1]), clock=lambda: T0)
    file = file or SimFile()
    records, _cut = read_back(file)
    replay.replay(core, records)
    core.attach_log(SimOperationLog(file, "always", len(records)))
    every_peer_answered(core)
    return core, file


def _client(core: RegionCore) -> Session:
    s = Session(core)
    s.authenticated = True
    return s


def test_a_flush_is_one_record_one_envelope_and_replays():
    core, file = _core()
    me = _client(core)
    for key in (b"a", b"b", b"c"):
        core.call(me, [b"XADD", key, b"*", b"f", b"v"])
    core.call(me, [b"XGROUP", b"CREATE", b"a", b"g", b"0"])
    core.end_turn()
    before = len(read_back(file)[0])
    assert core.call(me, [b"FLUSHALL"]) == "OK"
    core.end_turn()
    records = read_back(file)[0]
    assert len(records) == before + 1  # one record for the whole flush
    _n, kind, payload = records[-1]
    [own] = decode_replicated(payload)
    assert kind == OP_REPLICATED and own.n == 5  # one operation, under one dot
    flush = opcodec.decode(own.op)
    assert type(flush) is ops.FlushKeys and sorted(flush.observed) == [b"a", b"b", b"c"]
    assert flush.context == {1: 5}
    assert core.aa.causal.log[-1].op == own.op and len(core.aa.causal.log) == 5  # one envelope
    assert not core.db.keys
    # a restart replays it: the same empty keyspace, the same history
    core.oplog.begin_fsync()
    core.oplog.fsync_done()
    again, _f = _core(file=file)
    assert not again.db.keys and again.aa.causal.vv == {1: 5}
    assert again.db.keys.key_contexts == core.db.keys.key_contexts


def test_a_flush_of_an_empty_database_sends_nothing():
    core, _file = _core()
    assert core.call(_client(core), [b"FLUSHALL"]) == "OK"
    assert core.aa.causal.vv == {}


def test_another_region_applies_a_flush_at_once_and_keeps_what_it_had_not_seen():
    issuer, _f1 = _core(1)
    other, _f2 = _core(2)
    a, b = _client(issuer), _client(other)
    issuer.call(a, [b"XADD", b"k", b"*", b"f", b"1"])
    issuer.call(a, [b"XADD", b"j", b"*", b"f", b"1"])
    for env in issuer.aa.causal.log:
        other.aa.hub.deliver(env)
    late = other.call(b, [b"XADD", b"k", b"*", b"f", b"late"])  # concurrent with the flush
    issuer.call(a, [b"FLUSHALL"])
    other.db.watch(b"j")
    version = other.db.version(b"j")
    other.aa.hub.deliver(issuer.aa.causal.log[-1])
    assert list(other.db.keys) == [b"k"] and other.db.keys[b"k"].last_id == (T0, 2)
    assert late == b"%d-2" % T0
    assert other.db.version(b"j") != version  # WATCH saw the key go


def test_the_region_runs_the_flush_once_it_holds_what_it_was_asked_to_cover():
    """braid-admin's Flush (node/transport/admin.py) through ActiveActive: waits for the
    context, then flushes through the region core even when clients must authenticate."""
    core, _file = _core(requirepass="secret")
    other = CausalLog(2)
    env = other.stamp(opcodec.encode(ops.AddEntry(b"k", 2, (T0, 2), [b"f", b"v"])))
    with pytest.raises(FlushNotReady, match="lacks operations 1..1 of region-2"):
        asyncio.run(core.aa.flush_when_caught_up("db", {2: 1}, 0.05, poll_s=0.01))
    with pytest.raises(ValueError, match="no database named 'other'"):
        asyncio.run(core.aa.flush_when_caught_up("other", {}, 1.0))
    core.aa.hub.deliver(env)
    assert asyncio.run(core.aa.flush_when_caught_up("db", {2: 1}, 1.0)) == (1, {1: 1, 2: 1})
    assert not core.db.keys


# ------------------------------------------------------------------ real processes
@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c


@pytest.fixture
def regions(cluster):
    with flushed_clients(cluster) as clients:
        yield clients


def _admin(cluster, capsys, *args) -> tuple[int, str, str]:
    code = admin_cli.main(["--cluster", cluster.file, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _write_everywhere(regions, tag: str) -> dict[str, list[bytes]]:
    """One entry per region in a shared key, and one in a key of each region's own."""
    written: dict[str, list[bytes]] = {}
    for n, c in enumerate(regions, 1):
        written.setdefault("shared", []).append(c.xadd("shared", {"w": f"{tag}-{n}"}))
        written[f"own-{n}"] = [c.xadd(f"own-{n}", {"w": f"{tag}-{n}"})]
    return written


def _wait_same(a, b) -> None:
    """Until regions ``a`` and ``b`` have applied the same operations (both cut off from a third)."""
    wait_until(lambda: version_vector(replication_status(a)) == version_vector(replication_status(b)),
               what="two regions in sync")


def _contents(client) -> dict[bytes, list[bytes]]:
    return {key: [e[0] for e in client.xrange(key)] for key in sorted(client.keys("*"))}


def test_flushall_at_one_region_removes_only_what_it_had_received(cluster, regions):
    r1, r2, r3 = regions
    _write_everywhere(regions, "before")
    cluster.sync_wait()
    r3.execute_command("BRAID.REPLICATION", "PAUSE")  # region-3 cut off: the others lack its writes
    late = _write_everywhere(regions, "late")
    _wait_same(r1, r2)  # region-1 has region-2's writes
    assert late["own-3"][0] not in _contents(r1)[b"own-3"]
    assert r1.flushall() is True
    assert r1.dbsize() == 0
    r3.execute_command("BRAID.REPLICATION", "RESUME")
    cluster.sync_wait()
    unseen = {b"shared": [late["shared"][2]], b"own-3": late["own-3"]}  # region-3's writes region-1 lacked
    for c in regions:
        assert _contents(c) == unseen


def test_braid_admin_flush_waits_for_every_acknowledged_write(cluster, regions, capsys):
    r1, r2, r3 = regions
    r3.execute_command("BRAID.REPLICATION", "PAUSE")
    _write_everywhere(regions, "w")
    _wait_same(r1, r2)
    before = {n: _contents(c) for n, c in enumerate(regions, 1)}
    assert b"own-3" not in before[1]
    # region-3's writes cannot reach region-1 while it stays cut off: the flush gives up
    code, _out, err = _admin(cluster, capsys, "flush", "db", "db", "--timeout", "0.3")
    assert code == 1
    assert "nothing flushed" in err and "region region-1 still lacks operations" in err and "of region-3" in err
    assert {n: _contents(c) for n, c in enumerate(regions, 1)} == before  # nothing flushed anywhere
    # now it waits for them: region-3 is resumed only once the flush is seen waiting
    result: list = []
    run = threading.Thread(target=lambda: result.append(_admin(cluster, capsys, "flush", "db", "db",
                                                               "--timeout", "60")))
    run.start()
    try:
        wait_until(lambda: replication_status(r1)["crdt_flushes_waiting"] == "1", 30, what="the flush waiting")
    finally:
        r3.execute_command("BRAID.REPLICATION", "RESUME")
        run.join(90)
    [(code, out, err)] = result
    assert code == 0, err
    assert "flushed at region-1" in out and "4 keys removed" in out
    after = r2.xadd("after", {"w": "after the flush"})
    cluster.sync_wait()
    for c in regions:
        assert _contents(c) == {b"after": [after]}  # everything before is gone; a later write stays


def test_braid_admin_flush_needs_every_region(cluster, regions, capsys):
    r1, r2, r3 = regions
    r1.xadd("kept", {"f": "v"})
    cluster.sync_wait()
    cluster.procs[2].stop_keeping_data()
    try:
        code, _out, err = _admin(cluster, capsys, "flush", "db", "db")
        assert code == 1
        assert "nothing flushed" in err and "region-3" in err and "unreachable" in err
        assert r1.xlen("kept") == r2.xlen("kept") == 1
    finally:
        cluster.procs[2].restart()
    cluster.sync_wait()
    assert cluster.procs[2].client().xlen("kept") == 1


@pytest.mark.parametrize("args,message", [
    (("flush", "db", "other"), "no database named 'other'"),
    (("flush", "db", "db", "--region", "mars"), "no region named 'mars'"),
    (("flush", "db", "db", "--timeout", "0"), "--timeout must be a positive number"),
])
def test_braid_admin_flush_clear_errors(cluster, capsys, args, message):
    code, _out, err = _admin(cluster, capsys, *args)
    assert code == 1 and message in err
