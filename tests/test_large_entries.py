"""Large entries replicate, in a real three-region cluster (node/activeactive/hub.py).

Frames are bounded by bytes: an entry larger than a frame travels in parts, a burst
of medium entries in several batches, and the links keep flowing afterwards. Two
regions catching up large backlogs from each other at once do not stop each other.
A forged peer with the right token that sends an image nobody announced is cut,
and nothing it sent is installed.
"""

from __future__ import annotations

import random

import grpc
import pytest

from node.testing import LocalCluster, flushed_clients, replication_status
from proto import replication_pb2 as pb
from proto import replication_pb2_grpc as pb_grpc

MB = 1024 * 1024


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        for client in c.clients():
            # a 64 MB entry would pass the 64 MB automatic-snapshot threshold and make each region
            # write a snapshot (seconds on a loaded machine); this module times replication only
            client.config_set("auto-aof-rewrite-min-size", "1gb")
            client.close()
        yield c


@pytest.fixture
def regions(cluster):
    with flushed_clients(cluster, socket_timeout=120) as clients:
        yield clients


def _same_everywhere(cluster, clients, key: str) -> list:
    cluster.sync_wait(120)
    views = [c.xrange(key) for c in clients]
    assert views[0] == views[1] == views[2]
    assert len({c.xlen(key) for c in clients}) == 1
    return views[0]


def _later_writes_flow(cluster, clients) -> None:
    """Small writes of every region still reach every other one."""
    made = [c.xadd("after", {"from": str(i)}) for i, c in enumerate(clients)]
    got = _same_everywhere(cluster, clients, "after")
    assert sorted(e[0] for e in got) == sorted(made)


@pytest.mark.parametrize("size_mb", [1, 5, 64])
def test_a_large_entry_reaches_every_region(cluster, regions, size_mb):
    value = random.Random(size_mb).randbytes(size_mb * MB)  # incompressible: the worst case
    eid = regions[0].xadd("big", {"v": value})
    cluster.sync_wait(120)
    for c in regions[1:]:  # what replication brought (reading it back at region 1 adds nothing)
        assert c.xrange("big") == [(eid, {b"v": value})]
    assert [c.xlen("big") for c in regions] == [1, 1, 1]
    _later_writes_flow(cluster, regions)


def test_a_burst_of_medium_entries_reaches_every_region(cluster, regions):
    rng = random.Random(300)
    pipe = regions[0].pipeline(transaction=False)
    for i in range(300):
        pipe.xadd("burst", {"i": str(i), "v": rng.randbytes(20 * 1024)})
    made = pipe.execute()
    got = _same_everywhere(cluster, regions, "burst")
    assert [e[0] for e in got] == made
    _later_writes_flow(cluster, regions)


def test_two_regions_catching_up_large_backlogs_at_once(cluster, regions):
    r1, r2, _ = regions
    for c in (r1, r2):
        c.execute_command("BRAID.REPLICATION", "PAUSE")
    made = []
    for i, c in enumerate((r1, r2)):
        rng = random.Random(i)
        pipe = c.pipeline(transaction=False)
        for j in range(400):
            pipe.xadd("both", {"j": str(j), "v": rng.randbytes(16 * 1024)})
        made += pipe.execute()
    for c in (r1, r2):
        c.execute_command("BRAID.REPLICATION", "RESUME")  # both send ~6 MB to each other at once
    got = _same_everywhere(cluster, regions, "both")
    assert sorted(e[0] for e in got) == sorted(made)
    _later_writes_flow(cluster, regions)


def _counter(client, name: str) -> int:
    return int(replication_status(client)[name])


def test_a_forged_peer_sending_an_unannounced_image_is_cut(cluster, regions):
    """Right token, right cluster, a member's number: it may replicate, but an image it never
    announced is refused (a number that is no member is refused at Hello already)."""
    r2 = regions[1]
    spec, me = cluster.config, cluster.config.regions[1]
    errors = _counter(r2, "crdt_link_protocol_errors")
    vv = {int(o): int(n) for o, n in (p.split("=") for p in replication_status(r2)["crdt_vv"].split(",") if p)}

    def frames():
        yield pb.Frame(hello=pb.Hello(cluster_id=spec.cluster_id, database=spec.database, region=3,
                                      token=spec.token, vv=vv))  # no floor: no image to come
        yield pb.Frame(resync=pb.Resync(data=b"\x80\x04not an image", total=15, offset=0, last=True))

    with grpc.insecure_channel(f"{me.host}:{me.repl_port}") as channel:
        replies = pb_grpc.ReplicationStub(channel).Sync(frames(), timeout=20)
        with pytest.raises(grpc.RpcError) as ended:
            for _ in replies:
                pass
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "did not announce" in ended.value.details()
    assert _counter(r2, "crdt_link_protocol_errors") == errors + 1
    assert _counter(r2, "crdt_full_resyncs_received") == 0
    _later_writes_flow(cluster, regions)
