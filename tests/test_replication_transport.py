"""Replication links over real gRPC on loopback (node/activeactive/hub.py).

Three hubs, each with its own causal log: operations issued at one region reach
the others exactly once; with the 1–3 link absent, 1 and 3 still converge
through 2 (relay); a peer with a wrong token or cluster id is refused and
nothing it sent is applied.  Frames are planned by bytes and large operations
travel in parts; a peer with the right token that breaks the protocol (parts out
of order, an image nobody announced or larger than stated...) is cut and nothing
of it is applied; acks never wait for room; the watchdog closes a link whose
peer reads but never acknowledges; keepalive notices a peer that froze.
"""

from __future__ import annotations

import asyncio
import time
import zlib

import grpc
import msgspec
import pytest

from crdt.causal import CausalLog
from crdt.sync import LinkState, Opening, opening
from node.activeactive.frames import pack_batch, unpack_batch
from node.activeactive.hub import Callbacks, ReplicationHub
from node.activeactive.link import Link
from node.region.config import Config
from node.transport.grpc_links import GrpcLinks
from proto import replication_pb2 as pb
from proto import replication_pb2_grpc as pb_grpc

TOKEN = "s3cret"


def make_hub(region: int, token: str = TOKEN, cluster: str = "c1", make_image=None,
             **side) -> tuple[ReplicationHub, list]:
    """A hub that records what it applies; ``side``: the rest of its side (``install``, ``join``,
    ``frame_arrives``: node/activeactive/hub.py's Callbacks); ``make_image``: how it makes its image."""
    applied: list = []
    given = {} if make_image is None else {"make_image": make_image}
    hub = ReplicationHub(region, cluster, "db", token, CausalLog(region), Callbacks(apply=applied.append, **side),
                         transport=GrpcLinks(), **given)
    return hub, applied


async def until(predicate, timeout: float = 15.0) -> None:
    """Poll with a deadline (no sleeping as synchronisation)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.01)


def run(coro):
    return asyncio.run(coro)


def ack_of(vv: dict[int, int]):
    """What builds an Ack of ``vv`` (Outbox.put_ack calls it when the ack leaves)."""
    return lambda: pb.Frame(ack=pb.Ack(vv=vv))


def test_relay_heals_a_cut_link():
    async def scenario():
        hubs = {r: make_hub(r) for r in (1, 2, 3)}
        ports = {r: await h.serve() for r, (h, _) in hubs.items()}
        try:
            # links 1–2 and 2–3 only (the lower number dials); no 1–3 link
            hubs[1][0].dial(2, f"127.0.0.1:{ports[2]}")
            hubs[2][0].dial(3, f"127.0.0.1:{ports[3]}")
            for i in range(50):
                hubs[1][0].issue(b"from-1-%d" % i)
                hubs[3][0].issue(b"from-3-%d" % i)
            want = {(o, n) for o in (1, 3) for n in range(1, 51)}
            await until(lambda: all(h.causal.vv.get(1) == 50 and h.causal.vv.get(3) == 50
                                    for h, _ in hubs.values()))
            assert {e.dot for e in hubs[2][1]} == want
            assert {e.dot for e in hubs[1][1]} == {d for d in want if d[0] == 3}
            assert {e.dot for e in hubs[3][1]} == {d for d in want if d[0] == 1}
            for _h, applied in hubs.values():
                assert len(applied) == len({e.dot for e in applied})  # exactly once
        finally:
            for h, _ in hubs.values():
                await h.stop()

    run(scenario())


@pytest.mark.parametrize("token,cluster", [("wrong", "c1"), (TOKEN, "other-cluster")])
def test_mismatched_peer_is_refused(token, cluster):
    async def scenario():
        good, good_applied = make_hub(1)
        bad, bad_applied = make_hub(2, token=token, cluster=cluster)
        port = await good.serve()
        try:
            good.issue(b"secret-op")
            bad.issue(b"intruder-op")
            dialer = ReplicationHub(3, cluster, "db", token, bad.causal, lambda e: bad_applied.append(e),
                                    transport=GrpcLinks())
            dialer.dial(1, f"127.0.0.1:{port}")
            await until(lambda: good.refused >= 1 and dialer.denied >= 1)
            assert good_applied == [] and good.causal.vv == {1: 1}
            assert bad_applied == [] and bad.causal.vv == {2: 1}
            await dialer.stop()
        finally:
            await good.stop()
            await bad.stop()

    run(scenario())


@pytest.mark.parametrize("dialer_shard,dialer_map", [(1, "aaaa"), (0, "bbbb"), (0, "")])
def test_a_peer_of_another_shard_or_slot_map_is_refused(dialer_shard, dialer_map):
    """Shard 0 of slot map aaaa serves; a dialer of another shard, another map or no map
    at all (unsharded) is refused at Hello - counted and logged like a wrong token - and
    nothing crosses in either direction."""
    async def scenario():
        server = ReplicationHub(1, "c1", "db", TOKEN, CausalLog(1), Callbacks(apply=lambda e: None),
                                transport=GrpcLinks(), shard=0, slot_map="aaaa")
        applied: list = []
        dialer = ReplicationHub(2, "c1", "db", TOKEN, CausalLog(2), Callbacks(apply=applied.append),
                                transport=GrpcLinks(), shard=dialer_shard, slot_map=dialer_map)
        port = await server.serve()
        try:
            server.issue(b"op-of-shard-0")
            dialer.issue(b"op-of-the-other")
            dialer.dial(1, f"127.0.0.1:{port}")
            await until(lambda: server.refused >= 1 and dialer.denied >= 1)
            assert applied == [] and server.causal.vv == {1: 1} and dialer.causal.vv == {2: 1}
        finally:
            await dialer.stop()
            await server.stop()

    run(scenario())


def test_a_dialer_refuses_a_welcome_of_another_shard():
    """The dialer checks the Welcome too: a server of another shard (an old region that
    does not check, or a misrouted port) is refused by the dialer, counted as a refusal."""
    async def scenario():
        server, server_applied = make_hub(1)  # unsharded: it does not refuse the dialer
        server.shard, server.slot_map = 1, "aaaa"  # ... but it is shard 1 of map aaaa
        server.check_shard = lambda peer, shard, slot_map: ""  # as a region that does not check
        dialer = ReplicationHub(2, "c1", "db", TOKEN, CausalLog(2), Callbacks(apply=lambda e: None),
                                transport=GrpcLinks(), shard=0, slot_map="aaaa")
        port = await server.serve()
        try:
            dialer.issue(b"op")
            dialer.dial(1, f"127.0.0.1:{port}")
            await until(lambda: dialer.refused >= 1)
            assert server_applied == [] and dialer.causal.vv == {2: 1}
        finally:
            await dialer.stop()
            await server.stop()

    run(scenario())


def test_link_comes_back_after_the_peer_restarts():
    async def scenario():
        one, applied_one = make_hub(1)
        two, applied_two = make_hub(2)
        port = await two.serve()
        await one.serve()
        one.dial(2, f"127.0.0.1:{port}")
        try:
            one.issue(b"before")
            await until(lambda: two.causal.vv.get(1) == 1)
            await two.stop()  # the peer goes away, keeping its state (its causal log)
            one.issue(b"while-down")
            revived = ReplicationHub(2, "c1", "db", TOKEN, two.causal, lambda e: applied_two.append(e),
                                     transport=GrpcLinks())
            await revived.serve(port=port)
            revived.issue(b"after")
            await until(lambda: revived.causal.vv.get(1) == 2 and one.causal.vv.get(2) == 1)
            assert [e.op for e in applied_two] == [b"before", b"while-down"]
            assert [e.op for e in applied_one] == [b"after"]
            await revived.stop()
        finally:
            await one.stop()

    run(scenario())


def test_lag_counts_unacknowledged_operations_and_their_age():
    async def scenario():
        hub, _ = make_hub(1)
        for op in (b"a", b"b", b"c"):
            hub.issue(op)
        hub.arrivals[:] = [100.0, 101.0, 102.0]  # when each was issued (monotonic seconds)
        from node.activeactive.link import Link

        link = Link(hub, 2, {})
        assert link.lag(103.0) == (3, 3000.0)
        link.acked = {1: 2}
        assert link.lag(103.0) == (1, 1000.0)
        link.acked = {1: 3}
        assert link.lag(103.0) == (0, 0.0)

    run(scenario())


def test_a_dialer_keeps_dialing_whatever_ended_its_link():
    """A link that fails for a reason of its own (not gRPC's) is dialed again."""
    async def scenario():
        one, got_one = make_hub(1)
        two, got_two = make_hub(2)
        port = await two.serve()
        failures = {"left": 1}
        real = one.deliver_batch

        def flaky_deliver(envs):
            if failures["left"]:
                failures["left"] -= 1
                raise ValueError("a bug while applying")  # ends the link at region 1
            real(envs)

        one.deliver_batch = flaky_deliver
        one.dial(2, f"127.0.0.1:{port}")
        two.issue(b"op-1")
        await until(lambda: len(got_one) == 1)  # after the failure, the link came back and delivered
        assert failures["left"] == 0
        await one.stop()
        await two.stop()

    run(scenario())


# ------------------------------------------------------------------ frames bounded by bytes
def test_frames_are_planned_by_bytes_and_a_large_operation_goes_in_parts():
    from crdt.causal import Envelope
    from crdt.sync import plan_frames, wire_size

    small = [Envelope(1, n, ((2, 3),), b"x" * 300) for n in range(1, 11)]
    big = Envelope(1, 11, (), b"y" * 5000)
    frames = plan_frames([*small[:5], big, *small[5:]], 1000)
    assert [(parts, [e.n for e in envs]) for parts, envs in frames] == [
        (False, [1, 2]), (False, [3, 4]), (False, [5]), (True, [11]), (False, [6, 7]), (False, [8, 9]),
        (False, [10])]
    assert all(sum(wire_size(e) for e in envs) <= 1000 for parts, envs in frames if not parts)


def _parts(op: bytes, step: int, origin=2, n=1, deps=None):
    return [dict(origin=origin, n=n, deps=(deps or {}) if at == 0 else {}, total=len(op), offset=at,
                 data=op[at:at + step], last=at + step >= len(op)) for at in range(0, len(op), step)]


def test_parts_join_into_the_operation_only_when_every_rule_holds():
    from crdt.sync import PartsAssembler, ProtocolError

    op = bytes(range(256)) * 40
    joiner = PartsAssembler(cap=1 << 20, part_cap=4096)
    got = [joiner.add(**p) for p in _parts(op, 1000, deps={1: 4})]
    assert got[:-1] == [None] * (len(got) - 1) and got[-1].op == op and got[-1].deps == ((1, 4),)
    assert not joiner.open

    def broken(parts):
        joiner = PartsAssembler(cap=1 << 20, part_cap=4096)
        with pytest.raises(ProtocolError):
            for p in parts:
                joiner.add(**p)

    good = _parts(op, 1000)
    broken([good[0], good[2]])                                   # a gap
    broken([good[1]])                                            # not from the start
    broken([good[0], {**good[1], "n": 2}])                       # another dot
    broken([good[0], {**good[1], "total": len(op) + 1}])         # another total
    broken([good[0], {**good[1], "deps": {1: 1}}])               # dependencies after the first part
    broken([good[0], {**good[1], "last": True}])                 # last before the total
    broken(good[:-1] + [{**good[-1], "last": False}])            # the total reached, not last
    broken(_parts(op, 5000))                                     # a part larger than a frame
    broken(_parts(b"z" * (2 << 20), 4096))                       # a total above the cap
    broken([{**good[0], "data": b""}])                           # an empty part


def test_an_image_is_taken_only_when_announced_and_as_announced():
    from crdt.sync import ImageAssembler, LinkState, ProtocolError

    assert LinkState.peer_sends_image({1: 3}, {1: 4}) and not LinkState.peer_sends_image({1: 4}, {1: 4})
    with pytest.raises(ProtocolError, match="did not announce"):
        ImageAssembler(False, 1 << 20, 100).add(5, 0, b"12345", True)
    with pytest.raises(ProtocolError, match="accepts 1 to"):
        ImageAssembler(True, 1000, 100).add(1001, 0, b"x" * 100, False)
    with pytest.raises(ProtocolError):
        ImageAssembler(True, 1000, 100).add(5, 0, b"x" * 101, False)  # a piece larger than a frame
    image = ImageAssembler(True, 1000, 100)
    assert image.add(150, 0, b"a" * 100, False) is None
    with pytest.raises(ProtocolError, match="add up to"):
        image.add(150, 100, b"b" * 60, True)  # more than announced
    image = ImageAssembler(True, 1000, 100)
    image.add(150, 0, b"a" * 100, False)
    assert image.add(150, 100, b"b" * 50, True) == b"a" * 100 + b"b" * 50
    with pytest.raises(ProtocolError, match="did not announce"):
        image.add(5, 0, b"12345", True)  # one image per link


# ------------------------------------------------------------------ acks never wait
def test_an_ack_never_waits_for_room_and_the_latest_one_goes_first():
    from node.activeactive.outbox import Outbox
    from proto import replication_pb2 as pb

    async def scenario():
        out = Outbox(capacity=2000)
        data = [pb.Frame(batch=pb.Batch(envelopes=[pb.Envelope(origin=1, n=i, op=b"x" * 1000)]))
                for i in range(1, 4)]
        await out.put(data[0])
        await out.put(data[1])
        blocked = asyncio.ensure_future(out.put(data[2]))  # full: the sender waits
        await asyncio.sleep(0)
        assert not blocked.done()
        for n in (1, 2, 3):  # the receiver acknowledges three times without waiting
            out.put_ack(ack_of({2: n}))
        first = await out.get()
        assert first.WhichOneof("body") == "ack" and dict(first.ack.vv) == {2: 3}  # only the latest
        assert (await out.get()).batch.envelopes[0].n == 1  # then data...
        out.put_ack(ack_of({2: 4}))
        assert dict((await out.get()).ack.vv) == {2: 4}      # ...and acks take turns with it
        assert (await out.get()).batch.envelopes[0].n == 2
        await blocked  # room was made
        assert (await out.get()).batch.envelopes[0].n == 3
        out.close()
        assert await out.get() is None

    run(scenario())


def test_two_regions_catching_up_large_backlogs_from_each_other_at_once():
    """Small frames and a small outbox: each side's writer waits on the other's reader, which
    never waits on its own writer (the old ack put into the sender's queue could stop both)."""
    async def scenario():
        from node.region.config import Config

        small = Config(crdt_repl_frame_bytes=64 * 1024)
        hubs, got = {}, {}
        for r in (1, 2):
            got[r] = []
            hubs[r] = ReplicationHub(r, "c1", "db", TOKEN, CausalLog(r), got[r].append, small, transport=GrpcLinks())
        port = await hubs[2].serve()
        try:
            for r in (1, 2):
                for i in range(1500):
                    hubs[r].issue(b"%d-%d-" % (r, i) + bytes(8000))  # ~12 MB each way
            hubs[1].dial(2, f"127.0.0.1:{port}")
            await until(lambda: len(got[1]) == 1500 and len(got[2]) == 1500, 60)
            assert [e.n for e in got[1]] == [e.n for e in got[2]] == list(range(1, 1501))
        finally:
            for h in hubs.values():
                await h.stop()

    run(scenario())


# ------------------------------------------------------------------ forged peers
async def _forge(port: int, frames) -> tuple[grpc.StatusCode, str]:
    """A raw peer speaking the protocol: send ``frames``, read until the region ends the call."""
    async def requests():  # an iterator, not call.write: a write racing the region's abort
        for frame in frames:  # would end the call with the client's error, not the region's
            yield frame

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ReplicationStub(channel).Sync(requests(), timeout=20)
        try:
            async for _reply in call:
                pass
        except grpc.aio.AioRpcError as e:
            return e.code(), e.details()
        return grpc.StatusCode.OK, ""


def _hello(vv=None, floor=None, region=2):
    return pb.Frame(hello=pb.Hello(cluster_id="c1", database="db", region=region, token=TOKEN,
                                   vv=vv or {}, floor=floor or {}))


def _fragments(op: bytes, step: int, changes: dict[int, dict] | None = None):
    """The parts of ``op`` as frames; ``changes``: fields to change in some parts, by index."""
    changes = changes or {}
    return [pb.Frame(fragment=pb.Fragment(**{**p, **changes.get(i, {})})) for i, p in enumerate(_parts(op, step))]


OP = bytes(range(256)) * 64  # 16 KB


@pytest.mark.parametrize("case", ["gap", "other dot", "too long", "batch inside", "above the cap",
                                  "part above a frame", "deps later", "unannounced image",
                                  "image larger than stated", "image above the cap", "batch before the image",
                                  "unreadable compressed batch", "unreadable packed batch",
                                  "packed batch of another shape", "negative counter in a packed batch",
                                  "region beyond 32 bits in a packed batch", "packed batch above the limit"])
def test_a_peer_that_breaks_the_protocol_is_cut_and_nothing_of_it_is_applied(case):
    batch = pb.Frame(batch=pb.Batch(envelopes=[pb.Envelope(origin=2, n=1, op=b"sneaked")]))
    frames = {
        "gap": [_hello(), *_fragments(OP, 4096)[:1], *_fragments(OP, 4096)[2:]],
        "other dot": [_hello(), *_fragments(OP, 4096, {1: {"n": 7}})],
        "too long": [_hello(), *_fragments(OP, 4096, {3: {"last": False}}),
                     pb.Frame(fragment=pb.Fragment(origin=2, n=1, total=len(OP), offset=len(OP), data=b"!",
                                                   last=True))],
        "batch inside": [_hello(), *_fragments(OP, 4096)[:2], batch],
        "above the cap": [_hello(), pb.Frame(fragment=pb.Fragment(origin=2, n=1, total=1 << 40, offset=0,
                                                                  data=b"x" * 100))],
        "part above a frame": [_hello(), *_fragments(b"p" * (5 << 20), 5 << 20)],  # the frame cap is 4 MB
        "deps later": [_hello(), *_fragments(OP, 4096, {1: {"deps": {1: 1}}})],
        "unannounced image": [_hello(), pb.Frame(resync=pb.Resync(data=b"\x80\x04x", total=3, last=True))],
        "image larger than stated": [_hello(floor={2: 5}),
                                     pb.Frame(resync=pb.Resync(data=b"x" * 10, total=10)),
                                     pb.Frame(resync=pb.Resync(data=b"x" * 10, total=10, offset=10, last=True))],
        "image above the cap": [_hello(floor={2: 5}), pb.Frame(resync=pb.Resync(data=b"x", total=9 << 30))],
        "batch before the image": [_hello(floor={2: 5}), batch],
        "unreadable compressed batch": [_hello(), pb.Frame(batch_zlib=zlib.compress(b"\0" * (20 << 20), 9))],
        "unreadable packed batch": [_hello(), pb.Frame(packed=b"\xc1")],
        "packed batch of another shape": [_hello(), pb.Frame(packed=msgspec.msgpack.encode([[2, 1, b"sneaked"]]))],
        "negative counter in a packed batch": [_hello(), pb.Frame(packed=msgspec.msgpack.encode([[2, -1, {}, b"x"]]))],
        "region beyond 32 bits in a packed batch":
            [_hello(), pb.Frame(packed=msgspec.msgpack.encode([[2 ** 32 + 2, 1, {}, b"x"]]))],
        "packed batch above the limit": [_hello(), pb.Frame(packed_zlib=zlib.compress(b"\x90" * (20 << 20), 9))],
    }[case]

    async def scenario():
        installed = []
        hub, applied = make_hub(1, install=lambda image: installed.append(image) or True)
        port = await hub.serve()
        try:
            code, details = await _forge(port, frames)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
            assert hub.protocol_errors == 1
            assert applied == [] and installed == [] and hub.causal.vv == {} and hub.causal.pending == {}
            # the same peer speaking correctly is served (the checks are not just refusing everything)
            assert await _forge(port, [_hello(), *_fragments(OP, 4096), pb.Frame(hello=pb.Hello())]) \
                == (grpc.StatusCode.INVALID_ARGUMENT, "an unexpected hello frame")
            assert [e.op for e in applied] == [OP] and hub.causal.vv == {2: 1}
        finally:
            await hub.stop()

    run(scenario())


@pytest.mark.parametrize("bound", ["ops", "bytes"])
def test_a_peer_piling_up_operations_that_can_never_apply_is_cut_and_they_are_dropped(bound):
    """An honest peer sends in causal order, so what waits for its dependencies stays small.
    A peer that sends operations whose predecessors never come would grow ``pending``
    without a bound: past crdt-repl-pending-max-ops (or -bytes) its link ends, and what
    waited is dropped (none of it was applied, counted or acknowledged)."""
    size = 2000 if bound == "bytes" else 10
    orphans = [pb.Envelope(origin=2, n=n, op=b"o" * size) for n in range(2, 2 + 12)]  # 2.1 never comes
    config = Config(**{"crdt-repl-pending-max-ops": 10 if bound == "ops" else 1000,
                       "crdt-repl-pending-max-bytes": 1024 * 1024})

    async def scenario():
        hub, applied = make_hub(1)
        hub.config = config
        if bound == "bytes":
            config.set("crdt-repl-pending-max-bytes", 20_000)  # below the 24,000 bytes sent
        port = await hub.serve()
        try:
            code, details = await _forge(port, [_hello(), pb.Frame(batch=pb.Batch(envelopes=orphans))])
            assert code == grpc.StatusCode.INVALID_ARGUMENT and "never come" in details, (code, details)
            assert hub.protocol_errors == 1
            assert applied == [] and hub.causal.pending == {} and hub.causal.pending_bytes == 0
            # the same operations with their predecessor apply, in order
            first = pb.Envelope(origin=2, n=1, op=b"first")
            await _forge(port, [_hello(), pb.Frame(batch=pb.Batch(envelopes=[first, *orphans[:5]])),
                                pb.Frame(hello=pb.Hello())])
            assert [e.n for e in applied] == [1, 2, 3, 4, 5, 6] and hub.causal.vv == {2: 6}
        finally:
            await hub.stop()

    run(scenario())


def test_an_announced_image_is_installed():
    async def scenario():
        installed = []
        hub, _ = make_hub(1, install=lambda image: installed.append(image) or True)
        port = await hub.serve()
        try:
            image = b"i" * 10_000
            pieces = [pb.Frame(resync=pb.Resync(data=image[at:at + 4000], total=len(image), offset=at,
                                                last=at + 4000 >= len(image))) for at in range(0, len(image), 4000)]
            await _forge(port, [_hello(floor={2: 5}), *pieces, pb.Frame(hello=pb.Hello())])
            assert installed == [image] and hub.protocol_errors == 1  # the stray Hello ended it, after
        finally:
            await hub.stop()

    run(scenario())


# ------------------------------------------------------------------ the watchdog and keepalive
class _SilentPeer(pb_grpc.ReplicationServicer):
    """Welcomes, reads every frame, acknowledges nothing."""

    def __init__(self) -> None:
        self.calls = 0
        self.frames = 0

    async def Sync(self, request_iterator, context):  # noqa: N802 (gRPC's name)
        self.calls += 1
        await request_iterator.__anext__()
        yield pb.Frame(welcome=pb.Welcome(region=2))
        async for _frame in request_iterator:
            self.frames += 1


def test_the_watchdog_closes_a_link_whose_peer_reads_but_never_acknowledges():
    async def scenario():
        from node.region.config import Config

        peer = _SilentPeer()
        server = grpc.aio.server()
        pb_grpc.add_ReplicationServicer_to_server(peer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        applied: list = []
        hub = ReplicationHub(1, "c1", "db", TOKEN, CausalLog(1), applied.append,
                             Config(crdt_repl_stall_timeout_ms=300), transport=GrpcLinks())
        try:
            hub.issue(b"never acknowledged")
            hub.dial(2, f"127.0.0.1:{port}")
            await until(lambda: hub.stalls >= 2)  # closed, dialed again, closed again
            assert peer.calls >= 2 and peer.frames >= 2
            idle = ReplicationHub(1, "c1", "db", TOKEN, CausalLog(1), applied.append,
                                  Config(crdt_repl_stall_timeout_ms=300), transport=GrpcLinks())
            idle.dial(2, f"127.0.0.1:{port}")  # nothing to acknowledge: no stall
            await until(lambda: 2 in idle.links)
            calls = peer.calls
            await until(lambda: hub.stalls >= 4)  # (the first hub's link keeps stalling meanwhile)
            assert idle.stalls == 0 and 2 in idle.links and peer.calls > calls
            await idle.stop()
        finally:
            await hub.stop()
            await server.stop(None)

    run(scenario())


_PEER = """
import asyncio, sys
import node  # first: node/build.py chooses the build of crdt (BRAID_PURE)
from crdt.causal import CausalLog
from node.region.config import Config
from node.transport.grpc_links import GrpcLinks
from node.activeactive.link import Link
from node.activeactive.hub import ReplicationHub

async def main():
    hub = ReplicationHub(2, "c1", "db", "s3cret", CausalLog(2), lambda e: None,
                         Config(crdt_repl_keepalive_ms=200, crdt_repl_keepalive_timeout_ms=300), transport=GrpcLinks())
    print(await hub.serve(), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def test_keepalive_notices_a_peer_that_froze():
    """A frozen peer (SIGSTOP: its kernel still holds the connection, nothing answers) is seen
    down by keepalive, with no operation in flight; it comes back when it thaws."""
    import os
    import signal
    import subprocess
    import sys

    from node.region.config import Config

    with subprocess.Popen([sys.executable, "-c", _PEER], stdout=subprocess.PIPE, env=os.environ) as proc:
        try:
            port = int(proc.stdout.readline())

            async def scenario():
                hub = ReplicationHub(1, "c1", "db", TOKEN, CausalLog(1), lambda e: None,
                                     Config(crdt_repl_keepalive_ms=200, crdt_repl_keepalive_timeout_ms=300,
                                            crdt_repl_stall_timeout_ms=0), transport=GrpcLinks())
                hub.dial(2, f"127.0.0.1:{port}")
                try:
                    await until(lambda: 2 in hub.links)
                    os.kill(proc.pid, signal.SIGSTOP)
                    await until(lambda: 2 not in hub.links)
                    os.kill(proc.pid, signal.SIGCONT)
                    hub.issue(b"after the thaw")
                    await until(lambda: 2 in hub.links and hub.links[2].acked.get(1) == 1)
                finally:
                    await hub.stop()

            run(scenario())
        finally:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()


# ------------------------------------------------------------------ both backlogs overflowed
def _both_dropped(joins: tuple[bool, bool]):
    """Hubs of regions 1 and 2 that each issued ten operations and dropped five before any
    peer received them; ``joins``: whether each announces that it joins states.  Images are
    tagged with their sender; what each hub was given to join or install is recorded."""
    taken: dict[int, list] = {1: [], 2: []}
    hubs: dict[int, tuple[ReplicationHub, list]] = {}
    for region, j in zip((1, 2), joins, strict=True):
        def join(data, region=region):  # what a region's join does to its log (RegionCore.join_image)
            hub = hubs[region][0]
            theirs = CausalLog(3 - region)
            theirs.vv = {theirs.region: 10}
            taken[region].append(("join", data))
            assert hub.causal.absorb(theirs) == []
            hub.joined(theirs.vv)
            return True

        hubs[region] = make_hub(
            region, make_image=lambda digests=True, region=region: (b"image of %d" % region,
                                                                    dict(hubs[region][0].causal.vv)),
            join=join, install=lambda data, region=region: taken[region].append(("install", data)) or True)
        hub = hubs[region][0]
        hub.joins_states = j
        for i in range(10):
            hub.issue(b"op-%d" % i)
        hub.trim(5)
    (one, got1), (two, got2) = hubs[1], hubs[2]
    return one, two, taken, got1, got2


def test_regions_that_both_dropped_what_the_other_lacks_exchange_images_and_join_them():
    """Regions 1 and 2 each issued operations the other never received, then dropped them
    from their backlogs: an image either way would lose the receiver's dropped operations.
    Both see it at the handshake; each sends its image and joins the other's (never installs
    it), the link is ``merging`` until then, and operations flow after it as usual."""
    assert LinkState.image_conflict({1: 10}, {1: 5}, {2: 8}, {2: 3})
    assert not LinkState.image_conflict({1: 10, 2: 8}, {1: 5}, {2: 8}, {2: 3})  # 1 holds what 2 dropped
    assert LinkState.image_loses({1: 4}, {1: 5}) and not LinkState.image_loses({1: 5, 2: 1}, {1: 5})
    # the opening each end decides from the handshake, mirrored
    one, two = opening({1: 10}, {1: 5}, {2: 8}, {2: 3}, True), opening({2: 8}, {2: 3}, {1: 10}, {1: 5}, True)
    assert one == two == Opening(merging=True, conflict=False, sends_image=True, expects_image=True)
    assert opening({1: 10}, {1: 5}, {2: 8}, {2: 3}, False) == Opening(False, True, False, False)
    behind = opening({1: 10}, {1: 5}, {1: 2}, {}, True)  # the peer lacks what this end dropped
    assert behind == Opening(False, False, True, False)
    assert opening({1: 2}, {}, {1: 10}, {1: 5}, True) == Opening(False, False, False, True)

    async def scenario():
        one, two, taken, got1, got2 = _both_dropped((True, True))
        port = await two.serve()
        try:
            one.dial(2, f"127.0.0.1:{port}")
            await until(lambda: taken[1] and taken[2])
            assert taken == {1: [("join", b"image of 2")], 2: [("join", b"image of 1")]}
            assert one.joins == two.joins == 1 and one.resyncs_sent == two.resyncs_sent == 1
            await until(lambda: not one.merging and not two.merging)
            assert not one.links[2].conflict and not two.links[1].conflict and not one.conflicts
            one.issue(b"later")  # after the join, operations cross as usual
            await until(lambda: [e.op for e in got2] == [b"later"])
            assert got1 == []
        finally:
            await one.stop()
            await two.stop()

    run(scenario())


def test_a_peer_that_cannot_join_states_gets_nothing_when_both_dropped_what_the_other_lacks():
    """A peer of an older version does not announce that it joins states: no image either
    way (it would install it and lose its own dropped operations), nothing crosses, the
    link is in conflict and says so, and it is not a stall."""
    async def scenario():
        one, two, taken, got1, got2 = _both_dropped((True, False))
        port = await two.serve()
        try:
            one.dial(2, f"127.0.0.1:{port}")
            await until(lambda: 1 in two.links and 2 in one.links)
            assert one.links[2].conflict and two.links[1].conflict
            assert one.conflicts == {2} and two.conflicts == {1} and not one.merging and not two.merging
            one.issue(b"later")  # owed to region 2, which cannot take it: not a stall either
            assert not one.links[2].stalled(time.monotonic() + 3600, 1.0)
            assert taken == {1: [], 2: []} and got1 == [] and got2 == []  # nothing crossed, nothing was lost
            assert one.resyncs_sent == two.resyncs_sent == 0
        finally:
            await one.stop()
            await two.stop()

    run(scenario())


def test_a_batch_frame_is_built_once_for_the_peers_that_send_the_same_envelopes():
    """A region's own operations go to every peer: the frame built for one link is reused by
    the next link sending exactly those envelopes; other envelopes get a frame of their own."""
    async def scenario():
        hub, _ = make_hub(1)
        for i in range(1, 6):
            hub.issue(b"op-%d" % i)
        to_2, to_3 = Link(hub, 2, {}), Link(hub, 3, {})
        envelopes = list(hub.causal.log)
        first = await to_2.batch_frame(envelopes)
        assert await to_3.batch_frame(list(envelopes)) is first  # another list, the same envelopes
        assert [(e.origin, e.n, dict(e.deps), e.op) for e in first.batch.envelopes] == \
            [(e.origin, e.n, dict(e.deps), e.op) for e in envelopes]
        rest = await to_3.batch_frame(envelopes[1:])
        assert rest is not first and [e.n for e in rest.batch.envelopes] == [2, 3, 4, 5]
        assert await to_2.batch_frame(envelopes[1:]) is rest

    run(scenario())


def test_a_peer_that_reads_packed_batches_gets_them_and_each_form_is_built_once():
    """Toward a peer whose handshake said ``packed_batches`` a batch is one MessagePack array
    (compressed when that helps); toward an older peer, a protobuf Batch: the same envelopes,
    a frame per form, each shared by the links that send it."""
    async def scenario():
        hub, _ = make_hub(1)
        for i in range(1, 6):
            hub.issue(b"op-%d" % i)
        packed_2, packed_3, older_4 = Link(hub, 2, {}, packed=True), Link(hub, 3, {}, packed=True), Link(hub, 4, {})
        envelopes = list(hub.causal.log)
        first = await packed_2.batch_frame(envelopes)
        assert first.WhichOneof("body") == "packed"
        assert unpack_batch(first.packed) == envelopes
        assert [e.op for e in unpack_batch(first.packed)] == [e.op for e in envelopes]  # ops are not compared
        assert await packed_3.batch_frame(list(envelopes)) is first
        older = await older_4.batch_frame(envelopes)
        assert older.WhichOneof("body") == "batch" and [e.n for e in older.batch.envelopes] == [1, 2, 3, 4, 5]
        for i in range(6, 200):
            hub.issue(b"operation number %d" % i)
        large = await packed_2.batch_frame(list(hub.causal.log))
        assert large.WhichOneof("body") == "packed_zlib"
        assert [e.op for e in unpack_batch(zlib.decompress(large.packed_zlib))] == [e.op for e in hub.causal.log]

    run(scenario())


def test_packed_batches_keep_every_field_a_protobuf_batch_can_carry():
    """Counters up to 2**64 - 1, regions up to 2**32 - 1, empty and binary operations, deps in
    any order (sorted on arrival, as from protobuf's map)."""
    from crdt.causal import Envelope
    envelopes = [Envelope(2 ** 32 - 1, 2 ** 64 - 1, ((1, 2 ** 64 - 1), (7, 3)), b""),
                 Envelope(0, 1, (), bytes(range(256)))]
    back = unpack_batch(pack_batch(envelopes))
    assert [(e.origin, e.n, e.deps, e.op) for e in back] == [(e.origin, e.n, e.deps, e.op) for e in envelopes]
    unsorted = msgspec.msgpack.encode([[3, 9, {5: 1, 2: 4}, b"op"]])
    assert unpack_batch(unsorted)[0].deps == ((2, 4), (5, 1))


def test_regions_of_two_versions_replicate_both_ways():
    """A region that does not announce packed batches (an earlier version) gets protobuf
    batches and sends them; a newer one reads both."""
    async def scenario():
        (new, got_new), (old, got_old) = make_hub(1), make_hub(2)
        old.packed_batches = False
        port = await old.serve()
        try:
            new.dial(2, f"127.0.0.1:{port}")
            await until(lambda: 2 in new.links and 1 in old.links)
            assert new.links[2].packed is False and old.links[1].packed is True
            for i in range(300):
                new.issue(b"new-%d" % i)
                old.issue(b"old-%d" % i)
            await until(lambda: new.causal.vv == old.causal.vv == {1: 300, 2: 300})
            assert [e.op for e in got_old] == [b"new-%d" % i for i in range(300)]
            assert [e.op for e in got_new] == [b"old-%d" % i for i in range(300)]
        finally:
            await new.stop()
            await old.stop()

    run(scenario())


def test_a_newer_ack_waiting_for_its_interval_replaces_the_older_and_data_goes_first():
    from node.activeactive.outbox import Outbox

    async def scenario():
        out = Outbox(capacity=2000)
        out.ack_interval = 0.05
        out.put_ack(ack_of({2: 1}))
        assert dict((await out.get()).ack.vv) == {2: 1}  # the first ack after a quiet spell goes at once
        out.put_ack(ack_of({2: 2}))
        waiting = asyncio.ensure_future(out.get())  # holds the ack until the interval passed
        await asyncio.sleep(0)
        assert not waiting.done()
        out.put_ack(ack_of({2: 3}))  # replaces the held one
        await asyncio.sleep(0)
        assert not waiting.done()
        data = pb.Frame(batch=pb.Batch(envelopes=[pb.Envelope(origin=1, n=1, op=b"x")]))
        await out.put(data)  # data does not wait for the ack interval
        assert await asyncio.wait_for(waiting, 5) is data
        assert dict((await asyncio.wait_for(out.get(), 5)).ack.vv) == {2: 3}  # only the latest
        out.close()
        assert await out.get() is None

    run(scenario())


def test_an_ack_that_only_tells_a_peer_its_own_operations_arrived_may_wait():
    """Region 2 acknowledges what it receives to every peer; to the region whose own operations
    they are the ack is lazy (that region holds no relays of them), to a third region it is
    paced by the relay delay (it holds them as relays toward region 2 until it learns region 2
    has them)."""
    from node.activeactive.pacing import AckPace

    async def scenario():
        hub, _ = make_hub(2)
        from_1, to_3 = Link(hub, 1, {}), Link(hub, 3, {})
        hub.links.update({1: from_1, 3: to_3})
        origin1 = CausalLog(1)
        own = [origin1.stamp(b"op-%d" % i) for i in range(3)]
        from_1.deliver(own)
        assert hub.causal.vv[1] == 3
        assert from_1.outbox.ack is not None and from_1.outbox._ack_pace == AckPace.LAZY  # region 1's own
        assert to_3.outbox.ack is not None and to_3.outbox._ack_pace == AckPace.RELAYS    # region 3 may hold them
        origin3 = CausalLog(3)
        relayed = [origin3.stamp(b"op3-%d" % i) for i in range(2)]
        from_1.deliver(relayed)  # region 3's operations, relayed by region 1
        # region 1 holds them as relays: a sooner ack replaces the lazy one
        assert from_1.outbox._ack_pace == AckPace.RELAYS
        assert dict(from_1.outbox.ack().ack.vv) == {1: 3, 3: 2}  # (built when it leaves)
        assert to_3.outbox._ack_pace == AckPace.RELAYS  # the sooner one still waiting keeps its pace
        first = await to_3.outbox.get()  # the first ack after a quiet spell goes at once
        assert dict(first.ack.vv) == {1: 3, 3: 2}
        to_3.deliver([origin3.stamp(b"op3-2")])
        assert to_3.outbox._ack_pace == AckPace.LAZY  # region 3's own operation, told to region 3: lazy
        assert from_1.outbox._ack_pace == AckPace.RELAYS

    run(scenario())


def test_a_prompt_ack_does_not_wait_for_a_lazy_ones_interval():
    from node.activeactive.outbox import Outbox
    from node.activeactive.pacing import LAZY_ACK_FACTOR, AckPace

    async def scenario():
        out = Outbox(capacity=2000)
        out.ack_interval = 0.02
        assert LAZY_ACK_FACTOR > 1
        out.put_ack(ack_of({2: 1}), AckPace.LAZY)
        assert dict((await out.get()).ack.vv) == {2: 1}  # the first after a quiet spell goes at once
        out.put_ack(ack_of({2: 2}), AckPace.LAZY)
        waiting = asyncio.ensure_future(out.get())  # a lazy ack: held for LAZY_ACK_FACTOR intervals
        await asyncio.sleep(0)
        assert not waiting.done()
        out.put_ack(ack_of({2: 3}), AckPace.RELAYS)  # a sooner one wakes the writer to wait less
        assert out._readable.is_set() and out._ack_pace == AckPace.RELAYS
        out.put_ack(ack_of({2: 4}), AckPace.LAZY)  # a lazier one keeps the sooner pace
        assert out._ack_pace == AckPace.RELAYS
        assert dict((await asyncio.wait_for(waiting, 5)).ack.vv) == {2: 4}
        out.close()

    run(scenario())


def test_an_ack_for_relays_waits_a_third_of_the_relay_delay_within_the_ack_intervals_bounds():
    """What each pace waits after the previous ack: the relay pace follows the relay delay
    (CONFIG SET crdt-repl-relay-delay-ms), never sooner than an ack interval nor later than a
    lazy ack."""
    from node.activeactive.outbox import Outbox
    from node.activeactive.pacing import LAZY_ACK_FACTOR, RELAY_ACKS_PER_DELAY, AckPace

    out = Outbox(capacity=2000)
    out.ack_interval, out.relay_delay = 0.01, 0.05
    assert out.ack_wait(AckPace.PARTS) == 0.01
    assert out.ack_wait(AckPace.LAZY) == 0.01 * LAZY_ACK_FACTOR
    assert out.ack_wait(AckPace.RELAYS) == 0.05 / RELAY_ACKS_PER_DELAY
    assert out.ack_wait(AckPace.PARTS) < out.ack_wait(AckPace.RELAYS) < out.ack_wait(AckPace.LAZY)
    out.relay_delay = 0.0  # every relay at once: nothing to hurry
    assert out.ack_wait(AckPace.RELAYS) == 0.01
    out.relay_delay = 10.0
    assert out.ack_wait(AckPace.RELAYS) == out.ack_wait(AckPace.LAZY)


def test_operations_reach_every_region_directly_without_relayed_copies():
    """With every link up, a region holds back relaying a third region's operations for a
    moment, the peer acknowledges getting them from their origin, and no copy arrives twice;
    with the direct link cut the relay still delivers them (test_relay_heals_a_cut_link)."""
    async def scenario():
        hubs = {r: make_hub(r) for r in (1, 2, 3)}
        ports = {r: await h.serve() for r, (h, _) in hubs.items()}
        try:
            for a, b in ((1, 2), (1, 3), (2, 3)):
                hubs[a][0].dial(b, f"127.0.0.1:{ports[b]}")
            await until(lambda: all(len(h.links) == 2 for h, _ in hubs.values()))
            for i in range(200):
                hubs[1][0].issue(b"from-1-%d" % i)
                if i % 20 == 0:
                    await asyncio.sleep(0)  # operations issued over several loop turns
            await until(lambda: all(h.causal.vv.get(1) == 200 for h, _ in hubs.values()))
            # every peer acknowledged region 1's operations to every region (the acks go to all)
            await until(lambda: all(h.peer_acked.get(p, {}).get(1) == 200
                                    for r, (h, _) in hubs.items() for p in (1, 2, 3) if p != r))
            for r in (2, 3):
                h, applied = hubs[r]
                assert [e.dot for e in applied] == [(1, n) for n in range(1, 201)]  # once, in order
                assert h.duplicates == 0
        finally:
            for h, _ in hubs.values():
                await h.stop()

    run(scenario())


def test_a_third_regions_operations_are_relayed_only_while_the_peers_acks_of_it_stand_still():
    """Region 2 holds region 3's operations on its link to region 1.  While region 1's
    acknowledgements of region 3 keep rising (its own link to 3 works, even far behind),
    nothing is relayed and what it acknowledged is dropped; once they stand still for the
    relay delay while region 1 acknowledges other things (the 1-3 link is down), the held
    operations go - four delays when it acknowledges nothing at all; acks that only reflect
    what was relayed do not count as the direct link working."""
    delay = 0.05

    async def scenario():
        hub, applied = make_hub(2)
        link = Link(hub, 1, {})
        t0 = time.monotonic()
        link.relays.started = t0 - 10  # an old link
        try:
            from crdt.causal import Envelope

            for n in range(1, 11):
                hub.deliver(Envelope(3, n, (), b"from-3-%d" % n))
            assert len(applied) == 10
            link.on_ack(pb.Ack(vv={3: 1}))  # region 1 got 3's first operation from region 3
            moved = time.monotonic()
            out = link.state.outgoing(hub.sendable_upto())
            assert [e.dot for e in out] == [(3, n) for n in range(2, 11)]
            # nothing of region 3 goes at once, nor while its acks rose less than the delay ago
            assert link.relays.hold(out, moved, delay) == []
            assert link._sift_relays([], moved + delay / 2, delay) == []
            # a look before the hold ends arms the link's wake-up for then: nothing else need wake it
            link.wakeup.clear()
            await asyncio.wait_for(link.wakeup.wait(), timeout=30)
            # far behind but working: acks keep rising; what they cover is dropped, not relayed
            link.on_ack(pb.Ack(vv={3: 4}))
            moved = time.monotonic()
            assert link._sift_relays([], moved + delay / 2, delay) == []
            assert [e.n for _, e in link.relays.held] == [5, 6, 7, 8, 9, 10]
            # the acks stand still for the delay, but region 1 acknowledged nothing else either
            # (it may be short of CPU): copies would not help it yet
            assert link._sift_relays([], moved + delay * 1.5, delay) == []
            # four delays of standing still: the rest is relayed
            due = link._sift_relays([], moved + delay * 4.5, delay)
            assert [e.dot for e in due] == [(3, n) for n in range(5, 11)] and hub.relayed == 6
            assert not link.relays.held
            # region 1 acknowledges what region 2 relayed: not a sign its own link to 3 is back
            link.on_ack(pb.Ack(vv={3: 10}))
            hub.deliver(Envelope(3, 11, (), b"from-3-11"))
            now = time.monotonic()
            assert link.relays.hold(link.state.outgoing(hub.sendable_upto()), now, delay) == []
            assert [e.n for e in link._sift_relays([], now + delay * 1.5, delay)] == [11]
            # an ack past what was relayed: region 1 gets region 3's operations directly again
            link.on_ack(pb.Ack(vv={3: 12}))
            moved = time.monotonic()
            hub.deliver(Envelope(3, 12, (), b"from-3-12"))
            hub.deliver(Envelope(3, 13, (), b"from-3-13"))
            assert link.relays.hold(link.state.outgoing(hub.sendable_upto()), moved, delay) == []
            assert link._sift_relays([], moved + delay / 2, delay) == [] and [e.n for _, e in link.relays.held] == [13]
            assert hub.relayed == 7
        finally:
            if link._relay_timer is not None:
                link._relay_timer.cancel()

    run(scenario())


def test_the_pacing_of_links_is_a_setting():
    """crdt-repl-send-interval-ms, -ack-interval-ms and -relay-delay-ms: read by the links
    at every batch (CONFIG SET applies at once), bounded like every setting."""
    from node.region.config import ConfigError

    config = Config()
    hub = ReplicationHub(1, "c1", "db", TOKEN, CausalLog(1), lambda env: None, config)
    assert (hub.pacing().send_interval, hub.pacing().ack_interval, hub.pacing().relay_delay) == (0.005, 0.01, 0.05)
    for name, value in (("crdt-repl-send-interval-ms", b"40"), ("crdt-repl-ack-interval-ms", b"80"),
                        ("crdt-repl-relay-delay-ms", b"0")):
        config.set(name, config.parse(name, value))
    assert (hub.pacing().send_interval, hub.pacing().ack_interval, hub.pacing().relay_delay) == (0.04, 0.08, 0.0)
    for name in ("crdt-repl-send-interval-ms", "crdt-repl-ack-interval-ms", "crdt-repl-relay-delay-ms",
                 "crdt-repl-fsync-interval-ms"):
        with pytest.raises(ConfigError, match="between 0 and 60000"):
            config.parse(name, b"60001")


def test_a_link_tells_the_hub_before_it_handles_each_frame_of_operations_of_its_peer():
    """The region offers its core to other processes before a peer's frame of operations is
    handled (node/region/core.py): the link calls ``frame_arrives`` before anything of the frame is
    applied - not for an ack, which applies nothing."""

    async def scenario():
        seen = []
        hub, applied = make_hub(2, frame_arrives=lambda: seen.append(len(applied)))
        link = Link(hub, 1, {})
        hub.links[1] = link
        origin1 = CausalLog(1)
        link.on_frame(pb.Frame(packed=pack_batch([origin1.stamp(b"op-%d" % i) for i in range(3)])))
        link.on_frame(pb.Frame(ack=pb.Ack(vv={2: 0})))
        link.on_frame(pb.Frame(packed=pack_batch([origin1.stamp(b"op-3")])))
        assert seen == [0, 3] and len(applied) == 4

    run(scenario())


def test_a_peers_handshake_forgets_its_own_waiting_operations_and_supersedes_its_older_link():
    """A region back from a crash of its machine may have lost operations a peer holds only
    waiting for their dependencies (never applied, so no handshake counted them); it then
    mints other operations under their dots.  So each handshake of region 2 makes region 1
    forget region 2's own waiting operations (others' stay), and region 2's older link,
    still up here (its machine went down without closing it), applies nothing more."""
    old_1, old_2 = pb.Envelope(origin=2, n=1, op=b"old-1"), pb.Envelope(origin=2, n=2, op=b"old-2")
    third = pb.Envelope(origin=3, n=2, op=b"3.2")  # region 3's, waiting for 3.1: stays

    async def scenario():
        hub, applied = make_hub(1)
        port = await hub.serve()
        late = asyncio.Event()

        async def old_frames():  # the incarnation before the crash: its link stays up
            yield _hello()
            yield pb.Frame(batch=pb.Batch(envelopes=[old_2, third]))
            await late.wait()
            yield pb.Frame(batch=pb.Batch(envelopes=[old_1]))  # a frame from before the restart, late
            await asyncio.Event().wait()

        new_batch = asyncio.Event()

        async def new_frames():  # the incarnation after it, with other operations under 2.1 and 2.2
            yield _hello()
            await new_batch.wait()
            yield pb.Frame(batch=pb.Batch(envelopes=[pb.Envelope(origin=2, n=1, op=b"new-1"),
                                                     pb.Envelope(origin=2, n=2, op=b"new-2")]))
            await asyncio.Event().wait()

        async def read(call) -> None:  # what the region sends back (Welcome, acks) until it ends the call
            async for _frame in call:
                pass

        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            old = asyncio.ensure_future(read(pb_grpc.ReplicationStub(channel).Sync(old_frames())))
            new = None
            try:
                await until(lambda: set(hub.causal.pending) == {(2, 2), (3, 2)})
                assert hub.forgotten_at_handshake == 0
                new = asyncio.ensure_future(read(pb_grpc.ReplicationStub(channel).Sync(new_frames())))
                await until(lambda: hub.forgotten_at_handshake == 1)
                assert set(hub.causal.pending) == {(3, 2)} and applied == []
                late.set()
                await asyncio.wait_for(old, 15)  # the older link ended without applying its late frame
                assert applied == [] and hub.causal.vv == {} and set(hub.causal.pending) == {(3, 2)}
                new_batch.set()
                await until(lambda: hub.causal.vv.get(2) == 2)
                assert [e.op for e in applied] == [b"new-1", b"new-2"]
            finally:
                for task in (old, new):
                    if task is not None:
                        task.cancel()
                await hub.stop()

    run(scenario())


def _forked_pair(own: int, theirs: int) -> tuple[tuple[ReplicationHub, list], tuple[ReplicationHub, list]]:
    """Region 1 holds ``own`` operations of region 2 that region 2 never made; region 2 made
    ``theirs`` others under the same numbers (as a region restored from an older copy of its
    folder would, were it allowed to write before its peers answered)."""
    one, two = make_hub(1), make_hub(2)
    impostor = CausalLog(2)
    for i in range(own):
        one[0].causal.receive(impostor.stamp(b"first-%d" % i))
    for i in range(theirs):
        two[0].issue(b"second-%d" % i)
    return one, two


@pytest.mark.parametrize("own,theirs", [(3, 3), (3, 5), (5, 3)])
def test_regions_holding_other_operations_under_the_same_numbers_find_the_fork_and_exchange_nothing(own, theirs):
    """Version vectors alone would call (3, 3) in sync, and (3, 5) a lag that region 2's two
    operations fill - on top of the wrong three.  The digests find the fork at the handshake
    wherever one region holds the other's count (here or there), the link is reported as
    forked on both ends, and nothing crosses it in either direction."""
    async def scenario():
        (one, applied_one), (two, applied_two) = _forked_pair(own, theirs)
        ports = {1: await one.serve(), 2: await two.serve()}
        try:
            one.dial(2, f"127.0.0.1:{ports[2]}")
            await until(lambda: 2 in one.forks and 1 in two.forks)
            one.issue(b"later-1")
            two.issue(b"later-2")
            await until(lambda: 2 in one.links and 1 in two.links)
            for hub, peer in ((one, 2), (two, 1)):
                (fork,) = hub.forks[peer]
                assert fork.origin == 2 and fork.n == min(own, theirs) and fork.here != fork.there
                assert hub.history_forks == 1
                assert hub.links[peer].forked
            assert applied_one == [] and applied_two == []  # nothing crossed
            assert one.causal.vv == {1: 1, 2: own} and two.causal.vv == {2: theirs + 1}
        finally:
            await one.stop()
            await two.stop()

    run(scenario())


def test_the_same_history_is_no_fork_and_an_unknown_one_is_learnt():
    """Regions holding the same operations agree on every digest, at every count of them a
    region still remembers; a region whose history is unknown (a state written before digests
    existed) learns its peer's where both hold as many operations."""
    from crdt.causal import forks

    a, b = CausalLog(1), CausalLog(2)
    for i in range(10):
        b.receive(a.stamp(b"op-%d" % i))
    assert a.held_heads() == b.held_heads() and a.heads[1] != 0
    for n in range(1, 11):
        assert forks(b, {1: n}, {1: a.digest_at(1, n)}) == []
    assert forks(b, {1: 4}, {1: a.digest_at(1, 5)})[0].n == 4  # another history at 4
    b.heads.clear()
    assert forks(b, a.vv, a.held_heads()) == []  # unknown: never compared ...
    assert b.learn_heads({1: 9}, a.held_heads()) == []  # ... nor learnt at another count
    assert b.learn_heads(a.vv, a.held_heads()) == [1] and b.held_heads() == a.held_heads()
    b.receive(a.stamp(b"op-10"))
    assert b.held_heads() == a.held_heads()  # the chain goes on from what it learnt
