"""Snapshots and full-resync images in the schema format (node/persistence/snapshot.py, stateformat.py).

- Exact round trip: states built through the real command layer (a ``RegionCore``
  driven through ``RegionCore.call`` with a pinned clock; Active-Active regions whose
  operations are delivered between them out of order, left pending, trimmed from
  the backlog) are encoded, decoded and compared object by object - every
  attribute of every core object, reached by walking their slots, so an attribute
  added later is covered without touching this test - then a copy of the region
  built from the decoded state answers a further random script exactly as the
  original does.
- Never code: the pickle of the known exploit (``crdt.causal`` +
  ``dataclass.__globals__.get`` -> ``sys`` -> ``os.mkdir``), which the old
  restricted unpickler ran, is refused as a snapshot, as a resync image and by the
  converter, and the directory it would create does not appear.
- Bad files: truncated at every length, every byte flipped, oversized, another
  format version, and checksummed bodies that break the schema's rules are refused
  with a SnapshotError (random damage never raises anything else).
- Old pickle snapshots: a region refuses to start from one, naming
  ``braid convert-snapshot``; after the command it starts with the same state.
"""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedDict
from xxhash import xxh3_64_intdigest

from crdt import ops
from crdt.blocks import Block, EntryLog
from crdt.causal import CausalLog
from crdt.groups import Consumer, ConsumerGroup, Nack
from crdt.idmp import IdmpState
from crdt.ops import Keyspace
from crdt.pel import PendingMap
from crdt.stream import Stream
from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.persistence import snapshot, stateformat
from node.region.config import Config
from node.region.core import RegionCore, Session
from node.resp.encoder import to_bytes
from node.testing import InProcessServer
from tests.test_differential_hypothesis import KEYS, PRELUDE, commands

T0 = 1_700_000_000_000


# ---------------------------------------------------------------- regions without sockets
class Region:
    """A real region core, no sockets: commands through ``RegionCore.call`` with a pinned clock."""

    def __init__(self, number: int = 1, cluster: ClusterConfig | None = None) -> None:
        me = None if cluster is None else next(r for r in cluster.regions if r.number == number)
        self.server = RegionCore(Config(appendonly=False), cluster=None if cluster is None else (cluster, me))
        self.client = Session(self.server)
        self.client.authenticated = True
        self.now = T0

    @property
    def causal(self) -> CausalLog | None:
        aa = self.server.aa
        return None if aa is None else aa.causal

    def call(self, *argv) -> bytes:
        """The reply as RESP bytes (what a client would read)."""
        self.now += 3
        with self.server.clock_pinned(self.now):
            reply = self.server.call(self.client, [a.encode() if isinstance(a, str) else a for a in argv])
        out = to_bytes(reply)
        assert b"internal error" not in out, (argv, out)
        return out

    def image(self, record: int = 7) -> bytes:
        aa = self.server.aa
        return snapshot.encode(self.server.db.keys, self.causal, record, 1234, aa is not None, self.server.region)

    def twin(self, cluster: ClusterConfig | None, s: snapshot.Snapshot) -> Region:
        """A new region holding a decoded state, as a restart installs it."""
        other = Region(self.server.region, cluster)
        other.now = self.now
        other.server.config.values.update(self.server.config.values)  # the layout settings in force
        other.server.config_changed()
        other.server.db.keys = s.keys
        if s.causal is not None:
            other.causal.take(s.causal)
        return other


def cluster_of(n: int) -> ClusterConfig:
    return ClusterConfig("c", "db", "tok", 16, [RegionSpec(f"r{i}", i, "127.0.0.1", 0, 0) for i in range(1, n + 1)])


# ---------------------------------------------------------------- the whole object graph, as data
_SHARED = (Block, EntryLog, Stream, ConsumerGroup, Consumer, Nack, IdmpState, CausalLog)
_CACHES = {(EntryLog, "_cache"), (EntryLog, "_memos"), (EntryLog, "_at"), (EntryLog, "decoded_bytes"),
           (EntryLog, "_next"), (Keyspace, "idmp_index")}  # rebuilt, never stored


def deep(obj, seen: dict | None = None):
    """Every attribute of every object reachable from ``obj``, with types and order; objects the
    core shares (a pending entry in its group's and its consumer's PEL) appear once, then by
    reference, so sharing must round-trip too."""
    seen = {} if seen is None else seen
    t = type(obj)
    if obj is None or t in (int, bool, str, bytes, float):
        return obj if t is not int else ("int", obj)
    if isinstance(obj, _SHARED):
        if id(obj) in seen:
            return ("ref", seen[id(obj)])
        seen[id(obj)] = len(seen)
    if t is bytearray:
        return ("bytearray", bytes(obj))
    if t in (list, tuple):
        return (t.__name__, [deep(x, seen) for x in obj])
    out = [t.__name__]
    if isinstance(obj, (dict, SortedDict, PendingMap)):
        out.append([(deep(k, seen), deep(v, seen)) for k, v in obj.items()])
    names = [n for c in t.__mro__ for n in getattr(c, "__slots__", ()) if not n.startswith("__")]
    names += sorted(getattr(obj, "__dict__", {}))
    if isinstance(obj, (SortedDict, PendingMap)):
        names = []
    for name in names:
        if (t, name) in _CACHES:
            continue
        out.append((name, deep(getattr(obj, name), seen)))
    return tuple(out)


def round_trip(region: Region, cluster: ClusterConfig | None, followup: list[list[str]]) -> None:
    data = region.image()
    s = snapshot.decode(data)
    assert (s.record, s.created_ms, s.active_active, s.region) == (7, 1234, cluster is not None, region.server.region)
    assert deep(s.keys) == deep(region.server.db.keys)
    assert deep(s.causal) == deep(region.causal)
    reencoded = snapshot.encode(s.keys, s.causal, 7, 1234, s.active_active, s.region)
    assert reencoded == data
    twin = region.twin(cluster, snapshot.decode(data))
    for argv in followup:
        assert twin.call(*argv) == region.call(*argv), argv
    assert deep(twin.server.db.keys) == deep(region.server.db.keys)


# ---------------------------------------------------------------- exact round trip, random states
more = st.one_of(
    st.builds(lambda k, p, i: ["XADD", k, "IDMP", p, i, "*", "f", "v"], st.sampled_from(KEYS),
              st.sampled_from(["p1", "p2"]), st.sampled_from(["a", "b", "c"])),
    st.builds(lambda k: ["XADD", k, "IDMPAUTO", "auto", "*", "f", "v"], st.sampled_from(KEYS)),
    st.builds(lambda k: ["XADD", k, "*", "f", "v"], st.sampled_from(KEYS)),
    st.builds(lambda k, n: ["XADD", k, "MAXLEN", "~", str(n), "*", "f", "v"], st.sampled_from(KEYS),
              st.integers(0, 4)),
    st.builds(lambda n: ["CONFIG", "SET", "stream-node-max-entries", str(n)], st.sampled_from([2, 3, 100])),
    st.builds(lambda k, n: ["XCFGSET", k, "IDMP-MAXSIZE", str(n)], st.sampled_from(KEYS), st.integers(1, 3)),
    st.builds(lambda k, g, c: ["XREADGROUP", "GROUP", g, c, "STREAMS", k, ">"], st.sampled_from(KEYS),
              st.sampled_from(["g1", "g2"]), st.sampled_from(["alice", "bob"])),
)
script_of = st.lists(st.one_of(commands(), more), min_size=5, max_size=40)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(script=script_of, followup=st.lists(st.one_of(commands(), more), max_size=15))
def test_one_region_round_trips_exactly(script, followup):
    r = Region()
    for argv in PRELUDE + script:
        r.call(*argv)
    round_trip(r, None, followup)


key_ = st.sampled_from(KEYS)
group_ = st.sampled_from(["g1", "g2"])
aa_command = st.one_of(
    st.builds(lambda k, v: ["XADD", k, "*", "f", v], key_, st.sampled_from(["1", "v", "22"])),
    st.builds(lambda k: ["XADD", k, "*", "other", "x", "f", "y"], key_),
    st.builds(lambda k, p, i: ["XADD", k, "IDMP", p, i, "*", "f", "v"], key_, st.sampled_from(["p1", "p2"]),
              st.sampled_from(["a", "b", "c"])),
    st.builds(lambda k, n: ["XADD", k, "MAXLEN", "~", str(n), "*", "f", "v"], key_, st.integers(0, 4)),
    st.builds(lambda k, n: ["XTRIM", k, "MAXLEN", str(n)], key_, st.integers(0, 6)),
    st.builds(lambda k, g, i: ["XGROUP", "CREATE", k, g, i, "MKSTREAM"], key_, group_, st.sampled_from(["0", "$"])),
    st.builds(lambda k, g: ["XGROUP", "DESTROY", k, g], key_, group_),
    st.builds(lambda k, g, c, n: ["XREADGROUP", "GROUP", g, c, "COUNT", str(n), "STREAMS", k, ">"],
              key_, group_, st.sampled_from(["alice", "bob"]), st.integers(1, 3)),
    st.builds(lambda k, g: ["XAUTOCLAIM", k, g, "carol", "0", "0"], key_, group_),
    st.builds(lambda k: ["DEL", k], key_),
    st.builds(lambda k, n: ["XCFGSET", k, "IDMP-MAXSIZE", str(n)], key_, st.integers(1, 3)),
    st.builds(lambda n: ["CONFIG", "SET", "stream-node-max-entries", str(n)], st.sampled_from([2, 3, 100])),
)
region_ = st.integers(1, 3)
aa_step = st.one_of(
    st.tuples(st.just("cmd"), region_, aa_command),
    st.tuples(st.just("cmd"), region_, aa_command),
    st.tuples(st.just("cmd"), region_, commands()),
    st.tuples(st.just("xdel"), region_, key_, st.integers(0, 20)),
    st.tuples(st.just("xack"), region_, key_, group_, st.integers(0, 20)),
    st.tuples(st.just("deliver"), region_, region_, st.integers(0, 60)),
    st.tuples(st.just("deliver"), region_, region_, st.integers(0, 60)),
    st.tuples(st.just("sync"), region_, region_),
    st.tuples(st.just("trim"), region_, st.integers(1, 4)),
    st.tuples(st.just("expire"), region_, st.integers(0, 300_000)),
)


def run_aa(regions: dict[int, Region], steps) -> None:
    for step in steps:
        kind, r = step[0], regions[step[1]]
        if kind == "cmd":
            r.call(*step[2])
        elif kind in ("xdel", "xack"):  # an ID the region holds (a live entry, a pending one)
            s = r.server.db.keys.get(step[2].encode())
            g = None if s is None or kind == "xdel" else s.groups.get(step[3].encode())
            ids = [i for i, _ in s.range((0, 0), (2**64 - 1, 2**64 - 1))] if kind == "xdel" and s else \
                list(g.pel) if g is not None else []
            if ids:
                i = b"%d-%d" % ids[step[-1] % len(ids)]
                r.call("XDEL", step[2], i) if kind == "xdel" else r.call("XACK", step[2], step[3], i)
        elif kind == "deliver":  # any envelope the source holds, in any order: some wait as pending
            src, dst = r, regions[step[2]]
            if src is not dst and src.causal.log:
                dst.server.aa.hub.deliver(src.causal.log[step[3] % len(src.causal.log)])
        elif kind == "sync":
            if step[1] != step[2]:
                for env in list(r.causal.log):
                    regions[step[2]].server.aa.hub.deliver(env)
        elif kind == "trim":
            r.server.aa.hub.trim(min(step[2], len(r.causal.log)))
        else:
            r.server.db.expire_idmp(r.now + step[2], r.server.aa.stable())
            r.server.aa.collect_garbage()


AA_PRELUDE = [["XADD", "s1", "*", "f", "1"], ["XADD", "s1", "*", "f", "2", "g", "x"], ["XADD", "s2", "*", "h", "1"],
              ["XGROUP", "CREATE", "s1", "g1", "0"], ["XGROUP", "CREATE", "s2", "g2", "$"]]


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(aa_step, min_size=30, max_size=80),
       followup=st.lists(st.one_of(aa_command, commands()), max_size=10))
def test_active_active_regions_round_trip_exactly(steps, followup):
    cluster = cluster_of(3)
    regions = {n: Region(n, cluster) for n in (1, 2, 3)}
    for argv in AA_PRELUDE:
        regions[1].call(*argv)
    for n in (2, 3):
        for env in regions[1].causal.log:
            regions[n].server.aa.hub.deliver(env)
        regions[n].call("XREADGROUP", "GROUP", "g1", "alice", "COUNT", "1", "STREAMS", "s1", ">")
    run_aa(regions, steps)
    for r in regions.values():
        round_trip(r, cluster, followup)


def full_feature_regions() -> tuple[ClusterConfig, dict[int, Region]]:
    """Two regions whose states hold every feature the format stores (asserted by the caller)."""
    cluster = cluster_of(2)
    r1, r2 = Region(1, cluster), Region(2, cluster)
    r1.call("CONFIG", "SET", "stream-node-max-entries", "3")
    ids = [r1.call("XADD", "s", "*", "f", "v", "n", str(i)).split(b"\r\n")[1] for i in range(8)]
    r1.call("XADD", "s", "*", "other", "fields")
    r1.call("XADD", "s", "IDMP", "p1", "a", "*", "f", "v")
    r1.call("XGROUP", "CREATE", "s", "g", "0")
    r1.call("XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">")
    r1.call("XREADGROUP", "GROUP", "g", "bob", "COUNT", "2", "STREAMS", "s", ">")
    r1.call("XGROUP", "CREATECONSUMER", "s", "g", "carol")
    r1.call("XACK", "s", "g", ids[0])
    r1.call("XDEL", "s", ids[4])
    r1.call("XADD", "kept", "IDMP", "p2", "b", "*", "f", "v")
    kept_id = r1.call("XRANGE", "kept", "-", "+").split(b"\r\n")[3]
    r1.call("XDEL", "kept", kept_id)  # the key goes, its IDMP map stays
    r1.call("XADD", "gone", "*", "f", "v")
    r1.call("DEL", "gone")  # a delete context and an ID floor
    r1.call("XGROUP", "CREATE", "s", "g2", "$")
    r1.call("XGROUP", "DESTROY", "s", "g2")  # a group context
    r2.call("XADD", "s", "*", "from", "two")
    hub1, hub2 = r1.server.aa.hub, r2.server.aa.hub
    for env in r2.causal.log:
        hub1.deliver(env)
    for env in r1.causal.log[1:]:  # the first held back: everything after it waits
        hub2.deliver(env)
    r1.call("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")  # cursors of two origin logs
    r1.call("XACK", "s", "g", *[ids[i] for i in range(1, 6)])  # a watermark, sent
    hub1.trim(2)
    return cluster, {1: r1, 2: r2}


def test_a_state_with_every_feature_round_trips_exactly():
    cluster, regions = full_feature_regions()
    r1, r2 = regions[1], regions[2]
    keys, causal = r1.server.db.keys, r1.causal
    s = keys[b"s"]
    g = s.groups[b"g"]
    assert set(s.logs) == {1, 2} and any(b.dead for b in s.logs[1].blocks) and len(s.logs[1].blocks) > 1
    assert any(not b.decode()[-1][1][0] == b"f" for b in s.logs[1].blocks)  # an entry with other fields
    assert g.pel and set(g.consumers) == {b"alice", b"bob", b"carol"} and g.consumers[b"alice"].pel
    assert g.cursors and g.acked_sent and g.created_dot and g.created_deps is not None
    assert s.idmp.producers and s.idmp.dots
    assert keys.key_contexts and keys.group_contexts and keys.id_floor and keys.idmp_kept
    assert causal.log and causal.base == 2 and causal.floor and causal.seen
    assert r2.causal.pending
    for r in regions.values():
        round_trip(r, cluster, [["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0"],
                                ["XAUTOCLAIM", "s", "g", "carol", "0", "0"], ["XADD", "s", "*", "f", "v"],
                                ["XINFO", "STREAM", "s", "FULL"], ["XADD", "kept", "IDMP", "p2", "b", "*", "f", "v"]])


def test_a_single_region_file_round_trips_through_a_real_restart(tmp_path):
    """SAVE on a running region, restart: the same replies (the file path of snapshot.read)."""
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        for i in range(250):
            c.xadd("s", {"n": str(i)})
        c.xgroup_create("s", "g", id="0")
        c.xreadgroup("g", "alice", {"s": ">"}, count=10)
        c.xdel("s", c.xrange("s", count=3)[2][0])
        c.execute_command("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
        c.save()
        before = [c.execute_command("XINFO", "STREAM", "s", "FULL"), c.execute_command("XINFO", "GROUPS", "s")]
        c.close()
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        assert c.info("persistence")["aof_loaded_snapshot_record"] > 0
        assert [c.execute_command("XINFO", "STREAM", "s", "FULL"), c.execute_command("XINFO", "GROUPS", "s")] == before
        c.close()


# ---------------------------------------------------------------- the exploit pickle
def _exploit(target: str) -> bytes:
    """Protocol 4 pickle: crdt.ops's dataclass.__globals__.get('sys').modules.get('os').mkdir(target)."""
    def s(text: str) -> bytes:
        b = text.encode()
        return pickle.SHORT_BINUNICODE + bytes([len(b)]) + b

    def glob(module: str, name: str) -> bytes:
        return s(module) + s(name) + pickle.STACK_GLOBAL

    getattr_ = glob("builtins", "getattr")
    sys_ = glob("crdt.ops", "dataclass.__globals__.get") + s("sys") + pickle.TUPLE1 + pickle.REDUCE
    modules = getattr_ + sys_ + s("modules") + pickle.TUPLE2 + pickle.REDUCE
    os_ = getattr_ + modules + s("get") + pickle.TUPLE2 + pickle.REDUCE + s("os") + pickle.TUPLE1 + pickle.REDUCE
    mkdir = getattr_ + os_ + s("mkdir") + pickle.TUPLE2 + pickle.REDUCE + s(target) + pickle.TUPLE1 + pickle.REDUCE
    return pickle.PROTO + bytes([4]) + pickle.EMPTY_DICT + s("keys") + mkdir + pickle.SETITEM + s("causal") + \
        pickle.NONE + pickle.SETITEM + pickle.STOP


class _OldUnpickler(pickle.Unpickler):
    """The restricted unpickler snapshots were read with before format 2 (kept here only to show
    that the exploit below is real)."""

    _ALLOWED = {("copyreg", "__newobj__"), ("copyreg", "_reconstructor"), ("builtins", "object"),
                ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"), ("builtins", "getattr"),
                ("collections", "OrderedDict"), ("collections", "deque"),
                ("sortedcontainers.sorteddict", "SortedDict"), ("sortedcontainers.sortedlist", "SortedList")}

    def find_class(self, module, name):
        if module.startswith("crdt.") or (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a snapshot may not contain {module}.{name}")


def _framed(magic: bytes, header: dict, body: bytes) -> bytes:
    h = msgspec.msgpack.encode({**header, "body_len": len(body)})
    out = magic + len(h).to_bytes(4, "little") + h + body
    return out + xxh3_64_intdigest(out).to_bytes(8, "little")


HEADER = {"record": 1, "created_ms": 0, "active_active": False, "region": 1}


def test_the_exploit_pickle_is_real_for_the_old_unpickler(tmp_path):
    target = tmp_path / "pwned-by-old"
    _OldUnpickler(io.BytesIO(_exploit(str(target)))).load()
    assert target.is_dir()  # the hole this format closes


def test_the_exploit_pickle_is_refused_everywhere_and_runs_nothing(tmp_path):
    from node.persistence import legacy

    target = tmp_path / "pwned"
    body = _exploit(str(target))
    as_legacy = _framed(snapshot.LEGACY_MAGIC, HEADER, body)
    as_current = _framed(snapshot.MAGIC, {"format": snapshot.FORMAT_VERSION, **HEADER}, body)
    with pytest.raises(snapshot.LegacySnapshot, match="convert-snapshot"):
        snapshot.decode(as_legacy)
    with pytest.raises(snapshot.SnapshotError, match="unreadable"):
        snapshot.decode(as_current)
    path = tmp_path / snapshot.file_name(1)
    path.write_bytes(as_legacy)
    with pytest.raises(snapshot.LegacySnapshot):
        snapshot.read(str(path))
    with pytest.raises(snapshot.SnapshotError, match="may not contain"):
        legacy.convert(str(path))  # even the converter, on a file its operator was fooled into trusting
    assert path.read_bytes() == as_legacy and not (tmp_path / (path.name + legacy.BACKUP_SUFFIX)).exists()
    # a full-resync image from a peer
    cluster = cluster_of(2)
    r = Region(1, cluster)
    for image in (as_legacy, as_current):
        with pytest.raises(snapshot.SnapshotError):
            r.server.install_image(image)
    assert not target.exists()


# ---------------------------------------------------------------- damaged and hostile files
def _sample_image() -> bytes:
    r = Region()
    for argv in PRELUDE + [["XDEL", "s1", "2-0"], ["XADD", "s3", "IDMP", "p", "i", "*", "f", "v"]]:
        r.call(*argv)
    return r.image()


def test_every_truncation_and_every_flipped_byte_is_refused():
    data = _sample_image()
    snapshot.decode(data)
    for n in range(len(data)):
        with pytest.raises(snapshot.SnapshotError):
            snapshot.decode(data[:n])
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(snapshot.SnapshotError):
            snapshot.decode(bytes(bad))


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path):
    data = _sample_image()
    with pytest.raises(snapshot.SnapshotError, match="larger than the largest"):
        snapshot.decode(data, max_size=len(data) - 1)
    path = tmp_path / snapshot.file_name(7)
    path.write_bytes(data)
    with pytest.raises(snapshot.SnapshotError, match="larger than the largest"):
        snapshot.read(str(path), max_size=len(data) - 1)
    assert snapshot.read(str(path), max_size=len(data)).record == 7


def test_another_format_version_is_refused_by_name():
    data = _sample_image()
    header_len = int.from_bytes(data[10:14], "little")
    header = msgspec.msgpack.decode(data[14:14 + header_len])
    body = data[14 + header_len:-8]
    with pytest.raises(snapshot.SnapshotError, match="format version 3; this version of Braid reads format 2"):
        snapshot.decode(_framed(snapshot.MAGIC, {**header, "format": 3}, body))
    with pytest.raises(snapshot.SnapshotError, match="trailing"):
        snapshot.decode(_framed(snapshot.MAGIC, header, body + b"\xc0"))  # a body with something after it
    h = msgspec.msgpack.encode({**header, "body_len": len(body) + 1})
    out = snapshot.MAGIC + len(h).to_bytes(4, "little") + h + body
    with pytest.raises(snapshot.SnapshotError, match="the header says"):
        snapshot.decode(out + xxh3_64_intdigest(out).to_bytes(8, "little"))


def _reframe(state: stateformat.StateS, active_active: bool = False) -> bytes:
    body = msgspec.msgpack.encode(state)
    return _framed(snapshot.MAGIC, {"format": snapshot.FORMAT_VERSION, **HEADER, "active_active": active_active}, body)


def _state_of(data: bytes) -> stateformat.StateS:
    header_len = int.from_bytes(data[10:14], "little")
    return msgspec.msgpack.decode(data[14 + header_len:-8], type=stateformat.StateS)


def test_checksummed_bodies_that_break_the_rules_are_refused():
    good = _state_of(_sample_image())
    s1 = next(s for s in good.keys.streams if s.key == b"s1")
    g1 = next(g for g in s1.groups if g.name == b"g1")
    block = s1.logs[0].blocks[0]

    def refused(mutate, match: str) -> None:
        state = _state_of(_sample_image())
        mutate(state, next(s for s in state.keys.streams if s.key == b"s1"))
        with pytest.raises(snapshot.SnapshotError, match=match):
            snapshot.decode(_reframe(state))

    def blk(s):
        return s.logs[0].blocks[0]

    refused(lambda st_, s: st_.keys.streams.append(s), "appears twice")
    refused(lambda st_, s: setattr(s.groups[0].pel[0], "consumer", 9), "names no consumer")
    refused(lambda st_, s: s.groups[0].pel.append(s.groups[0].pel[0]), "pending twice")
    refused(lambda st_, s: setattr(blk(s), "buf", blk(s).buf[:-1]), "runs past the end|do not match")
    refused(lambda st_, s: setattr(blk(s), "buf", blk(s).buf + b"\x00"), "past the end|out of order")
    refused(lambda st_, s: setattr(blk(s), "live", blk(s).live + 1), "do not match")
    refused(lambda st_, s: setattr(blk(s), "last", (blk(s).last[0] + 1, 0)), "do not match")
    refused(lambda st_, s: setattr(blk(s), "first", (0, 5)), "do not match")
    refused(lambda st_, s: setattr(blk(s), "buf", bytearray(b"\x07\x00\x00")), "not its first ID|unknown flags")
    refused(lambda st_, s: s.logs[0].blocks.append(blk(s)), "out of order")
    refused(lambda st_, s: setattr(s, "last_id", (-1, 0)), "unreadable")
    # the state itself is fine
    assert snapshot.decode(_reframe(good)).keys[b"s1"].groups[b"g1"].pel
    assert g1.pel and block.live


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=st.data())
def test_random_damage_with_a_valid_checksum_is_a_clean_error_or_a_valid_state(data):
    image = _sample_image()
    header_len = int.from_bytes(image[10:14], "little")
    body = bytearray(image[14 + header_len:-8])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.integers(0, 255))
    forged = _framed(snapshot.MAGIC, {"format": snapshot.FORMAT_VERSION, **HEADER}, bytes(body))
    try:
        s = snapshot.decode(forged)
    except snapshot.SnapshotError:
        return
    for stream in s.keys.values():  # what decoded is usable: every read walks cleanly
        stream.range((0, 0), (2**64 - 1, 2**64 - 1))
        for g in stream.groups.values():
            g.by_delivery_time()


# ---------------------------------------------------------------- old pickle snapshots
_PICKLE_STATE = """
import pickle, sys
from sortedcontainers import SortedDict
from node.persistence import snapshot
s = snapshot.decode(sys.stdin.buffer.read())
for stream in s.keys.values():  # format 1 held each PEL as sortedcontainers' SortedDict
    for g in stream.groups.values():
        g.pel = SortedDict(g.pel.items())
        for c in g.consumers.values():
            c.pel = SortedDict(c.pel.items())
sys.stdout.buffer.write(pickle.dumps({"keys": s.keys, "causal": s.causal}, protocol=5))
"""


def _legacy_bytes(current: bytes) -> bytes:
    """Format 1, as Braid wrote it before the schema format: a pickle (protocol 5) of the state's
    pure-Python objects, made by a pure-build process (the compiled classes do not pickle)."""
    s = snapshot.decode(current)
    env = {**os.environ, "BRAID_PURE": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), os.environ.get("PYTHONPATH", "")])}
    body = subprocess.run([sys.executable, "-c", _PICKLE_STATE], input=current, capture_output=True, check=True,
                          env=env, timeout=60).stdout
    return _framed(snapshot.LEGACY_MAGIC, {"record": s.record, "created_ms": s.created_ms,
                                           "active_active": s.active_active, "region": s.region}, body)


def _dump(c) -> list:
    out = [sorted(c.keys("*"))]
    for key in sorted(c.keys("*")):
        out.append(c.execute_command("XINFO", "STREAM", key, "FULL", "COUNT", "0"))
    return out


def test_an_old_pickle_snapshot_stops_the_region_until_converted(tmp_path):
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        for i in range(120):
            c.xadd("s", {"n": str(i)})
        c.xgroup_create("s", "g", id="0")
        c.xreadgroup("g", "alice", {"s": ">"}, count=5)
        c.execute_command("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
        c.save()
        c.xadd("s", {"n": "tail"})  # a record after the snapshot: the log continues it
        before = _dump(c)
        c.close()
    log_dir = tmp_path / "appendonlydir"
    (_record, path), = snapshot.list_snapshots(str(log_dir))
    new_format = Path(path).read_bytes()
    Path(path).write_bytes(_legacy_bytes(new_format))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent),
                                                          os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "node", "node", "--port", "0", "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1
    assert f"braid convert-snapshot {path}" in res.stderr and "old pickle format" in res.stderr

    res = subprocess.run([sys.executable, "-m", "node", "convert-snapshot", path],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    assert "converted" in res.stdout
    assert Path(path + ".pickle-backup").read_bytes()[:10] == snapshot.LEGACY_MAGIC
    assert snapshot.read(path).record == _record
    assert snapshot.list_snapshots(str(log_dir)) == [(_record, path)]  # the backup is no snapshot

    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        assert _dump(c) == before
        assert c.info("persistence")["aof_loaded_snapshot_record"] == _record
        c.close()

    res = subprocess.run([sys.executable, "-m", "node", "convert-snapshot", str(log_dir), str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1 and f"{path}: already in the current format" in res.stdout  # found in the directory
    assert "missing" in res.stderr


def test_an_active_active_pickle_converts_to_the_same_state(tmp_path):
    from node.persistence import legacy

    cluster, regions = full_feature_regions()
    for n, r in regions.items():
        path = tmp_path / f"r{n}" / snapshot.file_name(7)
        path.parent.mkdir()
        path.write_bytes(_legacy_bytes(r.image()))
        assert legacy.convert(str(path)) == (str(path), str(path) + legacy.BACKUP_SUFFIX)
        back = snapshot.read(str(path))
        assert deep(back.keys) == deep(r.server.db.keys) and deep(back.causal) == deep(r.causal)
        assert legacy.convert(str(path)) is None  # already converted


# [Envelope(2, 7, ((1, 3), (2, 6)), b"op-bytes")] as a format-1 snapshot pickled it, when the
# envelope was a frozen dataclass (its state a list of the four values)
_OLD_ENVELOPE_PICKLE = (b"\x80\x05\x95D\x00\x00\x00\x00\x00\x00\x00]\x94\x8c\x0bcrdt.causal\x94\x8c\x08Envelope"
                        b"\x94\x93\x94)\x81\x94]\x94(K\x02K\x07K\x01K\x03\x86\x94K\x02K\x06\x86\x94\x86\x94C\x08"
                        b"op-bytes\x94eba.")


def test_the_converter_reads_envelopes_pickled_as_the_old_frozen_dataclass():
    import io

    from crdt.causal import Envelope
    from node.persistence import legacy

    [env] = legacy._Unpickler(io.BytesIO(_OLD_ENVELOPE_PICKLE)).load()
    assert (env.origin, env.n, env.deps, env.op, env.dot) == (2, 7, ((1, 3), (2, 6)), b"op-bytes", (2, 7))
    assert env.__class__.__name__ == "Envelope" and repr(env) == repr(Envelope(2, 7, ((1, 3), (2, 6)), b"op-bytes"))


def test_an_image_for_an_older_peer_leaves_the_history_digests_out():
    """Snapshots and images hold each origin's history digest (a ninth element of the causal
    log's array, which versions before digests refuse); an image for a peer whose handshake
    carried no digests leaves it out: the array they read, decoded here as unknown histories
    (learnt from a peer later, crdt/causal.py)."""
    log = CausalLog(1)
    for i in range(3):
        log.stamp(b"op-%d" % i)
    full, older = stateformat.encode(Keyspace(), log), stateformat.encode(Keyspace(), log, digests=False)
    assert len(msgspec.msgpack.decode(full)[1]) == 8 and len(msgspec.msgpack.decode(older)[1]) == 7
    assert stateformat.decode(full)[1].heads == log.heads
    taken = stateformat.decode(older)[1]
    assert taken.vv == log.vv and taken.heads == {} and taken.digest_at(1, 3) is None


def test_an_image_for_an_older_peer_leaves_the_highest_added_ids_out():
    """The keyspace holds the highest ID each origin log of a key ever received (a seventh
    element, crdt/ops.py: what a state join needs); an image for a peer without history
    digests - a version before both - leaves it out: the six elements it reads."""
    keys = Keyspace(active_active=True)
    ops.apply(keys, ops.AddEntry(b"s", 2, (5, 2), [b"f", b"v"]))
    ops.apply(keys, ops.DeleteKey(b"s", observed={2: (5, 2)}, context={2: 2}))
    assert b"s" not in keys and keys.highest_added == {b"s": {2: (5, 2)}}
    full, older = stateformat.encode(keys, None), stateformat.encode(keys, None, digests=False)
    assert len(msgspec.msgpack.decode(full)[0]) == 7 and len(msgspec.msgpack.decode(older)[0]) == 6
    assert stateformat.decode(full)[0].highest_added == {b"s": {2: (5, 2)}}
    assert stateformat.decode(older)[0].highest_added == {}
