"""The region core (node/region/core.py) driven by hand, with no event loop: its effects.

The asyncio server and the simulation both drive :class:`node.region.core.RegionCore`; these
tests drive it the way they do - a command, the end of the turn, an fsync that
completes later, another region's operation - and check what comes back: the reply,
the records on the (simulated) disk, when a reply may leave, the envelopes for the
links, the keys woken for blocked readers, and a fail-stop.
"""

from __future__ import annotations

import msgspec
import pytest

from chaos.sim.disk import SimFile, SimOperationLog, read_back
from crdt import ops
from crdt.causal import CausalLog, Envelope
from crdt.ids import string2ll
from node.activeactive import opcodec
from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.persistence import replay
from node.persistence.aof import OP_REPLICATED
from node.persistence.oplog import decode_replicated, remote_record
from node.region import cron
from node.region.config import SETTINGS, Config
from node.region.core import RegionCore, Session
from node.resp.encoder import ReplyError
from node.runtime.server import Server
from node.testing import every_peer_answered

T0 = 1_700_000_000_000


def cluster() -> ClusterConfig:
    specs = [RegionSpec(f"region-{n}", n, "local", 0, 0) for n in (1, 2)]
    return ClusterConfig("core", "db", "token", 16, specs)


def region(policy: str, number: int = 1, file: SimFile | None = None) -> tuple[RegionCore, Session, SimFile]:
    cfg = cluster()
    clock = [T0]
    core = RegionCore(Config(appendfsync=policy), cluster=(cfg, cfg.regions[number - 1]), clock=lambda: clock[0])
    file = file or SimFile()
    records, _cut = read_back(file)
    replay.replay(core, records)
    core.attach_log(SimOperationLog(file, policy, len(records)))
    every_peer_answered(core)
    session = Session(core)
    session.authenticated = True
    return core, session, file


def test_the_server_is_a_driver_of_the_same_core():
    """The asyncio server holds a region core and drives it (composition): every rule is the
    core's, and the server is only the core's Driver (the end of a turn, blocked readers,
    BGSAVE in a thread, SHUTDOWN, a fail-stop's closing)."""
    server = Server(Config())
    assert type(server.core) is RegionCore and server.core.driver is server
    assert not isinstance(server, RegionCore)
    for rule in ("call", "execute", "end_turn", "reply_needs", "may_release", "apply_remote", "apply_remote_run",
                 "install_image", "fail_stop", "save"):
        assert not hasattr(server, rule), rule  # one rule, in the core only


def test_every_command_runs_on_a_bare_core_as_on_the_server():
    """A handler sees its session and the region's services (node/commands/context.py), never
    the driver: INFO's every section, BGSAVE, SHUTDOWN and DEBUG answer on a core with no
    sockets, as they do on the server (INFO server raised AttributeError here before)."""
    core = RegionCore(Config(**{"enable-debug-command": "yes"}))
    session = Session(core)
    for section in (b"server", b"clients", b"memory", b"persistence", b"stats", b"everything"):
        reply = core.call(session, [b"INFO", section])
        assert not isinstance(reply, ReplyError), (section, reply)
    text = bytes(core.call(session, [b"INFO", b"server"])).decode()
    assert f"run_id:{core.run_id}" in text and f"tcp_port:{core.port}" in text
    # without an append-only file there is nothing to snapshot: BGSAVE answers as SAVE does
    refused = core.call(session, [b"BGSAVE"])
    assert isinstance(refused, ReplyError) and refused.message == core.call(session, [b"SAVE"]).message
    assert core.call(session, [b"DEBUG", b"CLOCK-OFFSET", b"-5000"]) == "OK"
    assert core.clock_offset_ms == -5000
    assert not core.shutdown_requested
    core.call(session, [b"SHUTDOWN", b"NOSAVE"])
    assert core.shutdown_requested  # a driver stops the region (the server does once the turn ends)


def test_under_always_a_reply_leaves_only_after_the_fsync_that_covers_its_record():
    core, me, file = region("always")
    reply = core.call(me, [b"XADD", b"k", b"*", b"f", b"v"])
    assert reply == b"%d-1" % T0
    needs = core.reply_needs(me)
    assert needs == core.oplog.last_record == 1
    assert not core.may_release(needs)  # not even written yet
    assert core.end_turn() is True      # written; an fsync is wanted now
    assert file.cache and not file.durable
    assert not core.may_release(needs)
    assert core.oplog.begin_fsync() == 1
    # the operation may leave for the other region already: its record reached the OS (a
    # crash of the machine makes the region take its own back from its peers before it writes)
    assert core.aa.hub.sendable_upto() == 1
    core.oplog.fsync_done()
    assert core.may_release(needs)
    env = core.aa.causal.log[0]
    assert (env.origin, env.n) == (1, 1)
    assert opcodec.decode(env.op).key == b"k"
    # the record holds the bytes that left: the operation as sent, under its dot
    [(number, kind, payload)] = read_back(file)[0]
    assert (number, kind) == (1, OP_REPLICATED)
    [own] = decode_replicated(payload)
    assert (own.n, own.op) == (1, env.op)


def standalone(file: SimFile) -> tuple[RegionCore, Session]:
    clock = [T0]
    core = RegionCore(Config(appendfsync="everysec"), clock=lambda: clock[0])
    records, _cut = read_back(file)
    replay.replay(core, records)
    core.attach_log(SimOperationLog(file, "everysec", len(records)))
    session = Session(core)
    session.authenticated = True
    return core, session


@pytest.mark.parametrize("clustered", [True, False], ids=["region-of-a-cluster", "standalone"])
def test_a_plain_xadd_is_logged_and_sent_as_the_operation_it_stands_for(clustered):
    """``XADD key * field value ...`` does not build its operation (``Database.add_plain``):
    its record, and in a cluster the envelope that leaves, hold the bytes the operation
    encodes to, and a start that replays the file has the same stream."""
    file = SimFile()
    if clustered:
        core, me, _file = region("everysec", file=file)
    else:
        core, me = standalone(file)
    replies = [core.call(me, [b"XADD", b"k", b"*", b"f%d" % i, b"v", b"g", b"w"]) for i in range(3)]
    replies.append(core.call(me, [b"XADD", b"k", b"MAXLEN", b"5", b"*", b"h", b"x"]))  # with options
    assert core.end_turn() is not None
    ids = [tuple(int(x) for x in r.split(b"-")) for r in replies]
    ops_ = [ops.AddEntry(b"k", core.region, ids[i], [b"f%d" % i, b"v", b"g", b"w"]) for i in range(3)]
    [*plain, _with_options] = [payload for _n, kind, payload in read_back(file)[0] if kind == OP_REPLICATED]
    logged = [own.op for payload in plain for own in decode_replicated(payload)]
    assert logged == [opcodec.encode(op) for op in ops_]
    if clustered:
        assert [e.op for e in core.aa.causal.log][:3] == logged
    assert core.db.dirty == 4
    again, me2 = (region("everysec", file=file)[:2] if clustered else standalone(file))
    assert again.call(me2, [b"XRANGE", b"k", b"-", b"+"]) == core.call(me, [b"XRANGE", b"k", b"-", b"+"])


def test_under_everysec_a_reply_waits_for_its_own_records_only():
    core, writer, _file = region("everysec")
    reader = Session(core)
    reader.authenticated = True
    core.call(writer, [b"XADD", b"k", b"*", b"f", b"v"])
    assert core.call(reader, [b"XLEN", b"k"]) == 1
    assert core.reply_needs(reader) == 0 and core.may_release(0)  # a read that logged nothing
    assert not core.may_release(core.reply_needs(writer))       # the write is not written yet
    assert core.end_turn() is True  # in a cluster: fsync soon so that the operation can leave
    assert core.may_release(core.reply_needs(writer))           # reached the OS: the reply leaves


def test_an_operation_of_another_region_is_applied_logged_and_wakes_its_key():
    core, _me, file = region("always")
    other = CausalLog(2)
    op = ops.AddEntry(b"k", 2, (T0, 2), [b"f", b"v"])
    env = other.stamp(opcodec.encode(op))
    core.aa.hub.deliver(env)
    assert core.aa.causal.vv == {2: 1}
    assert core.db.keys[b"k"].length == 1
    assert b"k" not in core.db.ready  # the core's keys_ready served (here: cleared) the woken key
    core.end_turn()
    [(_n, kind, payload)] = read_back(file)[0]
    assert kind == OP_REPLICATED and decode_replicated(payload).dot == (2, 1)
    # the record's layout: [b"r", origin, n, [[origin, n], ...], operation]
    assert msgspec.msgpack.decode(payload) == [b"r", 2, 1, [list(d) for d in env.deps], env.op]
    later = Envelope(2, 7, ((1, 3), (2, 6)), b"op")
    assert msgspec.msgpack.decode(remote_record(later)) == [b"r", 2, 7, [[1, 3], [2, 6]], b"op"]
    assert decode_replicated(remote_record(later)) == later
    # a restart replays it through the causal log: same version vector, same entry
    core.oplog.begin_fsync()
    core.oplog.fsync_done()
    again, _s, _f = region("always", file=file)
    assert again.aa.causal.vv == {2: 1} and again.db.keys[b"k"].length == 1


def test_an_operation_that_cannot_be_applied_stops_the_region_and_is_not_counted():
    core, me, _file = region("always")
    other = CausalLog(2)
    bad = other.stamp(b"\xff\x00 not an operation")
    with pytest.raises(ValueError):
        core.aa.hub.deliver(bad)
    assert core.failed is not None and "cannot apply operation 2.1" in core.failed
    assert core.aa.causal.vv.get(2, 0) == 0  # not counted: a restart asks the peer for it again
    assert core.call(me, [b"PING"]) is not None
    assert core.end_turn() is False  # nothing more is written


def _peer_adds(count: int) -> list[Envelope]:
    other = CausalLog(2)
    return [other.stamp(opcodec.encode(ops.AddEntry(b"k", 2, (T0, 2 + i), [b"f", b"v"]))) for i in range(count)]


def test_a_peers_batch_is_applied_as_one_run_with_one_write_of_its_records():
    core, _me, file = region("always")
    run = _peer_adds(3)
    core.aa.hub.deliver_batch(run)
    assert core.aa.causal.vv == {2: 3} and core.aa.causal.log == run
    assert core.db.keys[b"k"].length == 3
    core.end_turn()
    assert [decode_replicated(payload).dot for _n, _kind, payload in read_back(file)[0]] == [(2, 1), (2, 2), (2, 3)]


def test_applying_a_peers_batch_offers_the_core_to_other_processes_every_so_many_operations():
    """Every crdt-repl-apply-yield-ops operations of a peer's run, the region calls its
    ``offer_cpu`` (the server's is os.sched_yield) between two operations; 0 never does."""
    core, me, _file = region("always")
    offered_after = []
    core.offer_cpu = lambda: offered_after.append(core.db.keys[b"k"].length)
    core.aa.hub.deliver_batch(_peer_adds(40))
    assert offered_after == [16, 32] and core.db.keys[b"k"].length == 40
    assert core.call(me, [b"CONFIG", b"SET", b"crdt-repl-apply-yield-ops", b"10"]) == "OK"
    core.aa.hub.deliver_batch(_peer_adds(60)[40:])
    assert offered_after == [16, 32, 50] and core.db.keys[b"k"].length == 60  # none after the last
    assert core.call(me, [b"CONFIG", b"SET", b"crdt-repl-apply-yield-ops", b"0"]) == "OK"
    core.aa.hub.deliver_batch(_peer_adds(100)[60:])
    assert len(offered_after) == 3 and core.db.keys[b"k"].length == 100


def test_the_core_is_offered_before_each_frame_of_a_peer_unless_the_setting_is_0():
    core, me, _file = region("always")
    offers = []
    core.offer_cpu = lambda: offers.append(1)
    assert core.aa.hub.side is core  # a link calls its peer_frame_arrives (transport)
    core.aa.hub.side.peer_frame_arrives()
    assert offers == [1]
    assert core.call(me, [b"CONFIG", b"SET", b"crdt-repl-apply-yield-ops", b"0"]) == "OK"
    core.aa.hub.side.peer_frame_arrives()
    assert offers == [1]


def test_replaying_the_log_never_offers_the_core():
    core, _me, file = region("always")
    core.aa.hub.deliver_batch(_peer_adds(40))
    core.end_turn()
    again = RegionCore(Config(appendfsync="always"), cluster=(cluster(), cluster().regions[0]), clock=lambda: T0)
    offers = []
    again.offer_cpu = lambda: offers.append(1)
    replay.replay(again, read_back(file)[0])
    assert again.db.keys[b"k"].length == 40 and offers == []


def test_a_server_offers_its_core_with_sched_yield():
    import os

    assert Server(Config()).core.offer_cpu is os.sched_yield
    assert RegionCore(Config()).offer_cpu is None  # a core without a process of its own does not


@pytest.mark.parametrize("where", ["applying the second", "logging", "serving the readers"])
def test_a_failure_in_a_run_stops_the_region_and_counts_only_what_was_logged(where, monkeypatch):
    """Decoding or applying one of a peer's run, writing their records or serving the readers
    after them: any failure stops the region, and the causal log counts exactly the
    operations whose records were appended (the fail-stop then drops the turn's records:
    nothing was acknowledged, and peers resend them to the restarted region)."""
    core, me, file = region("always")
    run = _peer_adds(3)
    if where == "applying the second":
        run[1] = Envelope(2, 2, run[1].deps, b"\xff\x00 not an operation")
        counted, named = 1, "2.2"
    elif where == "logging":
        def no_room(_run):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(core.oplog, "log_remote_run", no_room)
        counted, named = 0, "2.1"
    else:
        def reader_bug():
            raise RuntimeError("a reader's bug")
        monkeypatch.setattr(core, "keys_ready", reader_bug)
        counted, named = 3, "2.3"
    with pytest.raises(ValueError) as failed:
        core.aa.hub.deliver_batch(run)
    assert failed.value.applied == counted
    assert core.failed is not None and f"cannot apply operation {named} of region 2" in core.failed
    assert core.aa.causal.vv.get(2, 0) == counted and core.aa.causal.log == run[:counted]
    assert len(core.aa.hub.arrivals) == len(core.aa.causal.log)  # one arrival time per log entry
    assert core.call(me, [b"PING"]) is not None
    assert core.end_turn() is False  # the turn's records go with the region: peers resend them
    assert read_back(file)[0] == []


def test_the_cron_steps_are_the_same_for_every_driver():
    core, me, _file = region("always")
    assert [name for name, _step, _changes in cron.steps(core, 0.0)] \
        == ["idmp-expiry", "backlog-trim", "gc", "lone-writes"]
    standalone = RegionCore(Config())
    assert [name for name, _step, _changes in cron.steps(standalone, 0.0)] == ["idmp-expiry"]
    first = core.call(me, [b"XADD", b"k", b"IDMP", b"p", b"i", b"*", b"f", b"v"])
    assert isinstance(first, bytes)
    assert core.call(me, [b"XADD", b"k", b"IDMP", b"p", b"i", b"*", b"f", b"v"]) == first  # a duplicate
    # the IDMP step of the cron keeps the iid while region 2 has not applied its add (not stable)
    name, step, _changes = cron.steps(core, 0.0)[0]
    core.system_ms = lambda: T0 + 10**9  # far past the IDMP duration
    assert name == "idmp-expiry" and step() == 0 and core.db.keys[b"k"].idmp.lookup(b"p", b"i") is not None


@pytest.mark.parametrize("name", [s.name for s in SETTINGS if s.name.startswith("crdt-repl-") and s.kind == "int"
                                  and s.mutable])
def test_a_replication_setting_takes_an_integer_in_redis_spelling_only_and_keeps_its_value_when_refused(name):
    """Braid's own integer settings go through the parser CONFIG SET's Redis settings use
    (tests/test_numeric_args.py compares those with redis-server): every odd spelling is
    refused with Redis's text and changes nothing; a value in Redis's spelling is taken
    within the setting's bounds."""
    from tests.test_numeric_args import SPELLINGS

    setting = next(s for s in SETTINGS if s.name == name)
    core, me, _file = region("always")
    problems = []
    for value in SPELLINGS:
        before = core.call(me, [b"CONFIG", b"GET", name.encode()])
        yields_before = core.apply_yield_ops
        reply = core.call(me, [b"CONFIG", b"SET", name.encode(), value.encode()])
        n = string2ll(value.encode())
        prefix = f"ERR CONFIG SET failed (possibly related to argument '{name}') - argument "
        if n is None:
            expected = prefix + "couldn't be parsed into an integer"
        elif not setting.lo <= n <= setting.hi:
            expected = prefix + f"must be between {setting.lo} and {setting.hi} inclusive"
        else:
            expected = "OK"
        got = str(reply) if isinstance(reply, ReplyError) else reply
        if got != expected:
            problems.append(f"{value!r}: {reply!r}, expected {expected!r}")
        after = core.call(me, [b"CONFIG", b"GET", name.encode()])
        if expected == "OK":
            if after != {name.encode(): str(n).encode()}:
                problems.append(f"{value!r} taken, but CONFIG GET says {after!r}")
        elif after != before or core.apply_yield_ops != yields_before:
            problems.append(f"{value!r} refused, but the setting changed: {before!r} -> {after!r}")
    assert not problems, "\n".join(problems)
    if name == "crdt-repl-apply-yield-ops":  # what the apply path reads follows the setting
        assert core.call(me, [b"CONFIG", b"SET", name.encode(), b"3"]) == "OK" and core.apply_yield_ops == 3
