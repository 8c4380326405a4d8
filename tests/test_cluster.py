"""Seed 003's tables against a real three-region cluster (three processes, gRPC).

"— Sync —" rows: replication is paused at the writing regions before the
concurrent steps (BRAID.REPLICATION PAUSE) and resumed after; ``sync_wait``
returns when every region has applied the same operations.
"""

from __future__ import annotations

import threading

import pytest
import redis

from node.testing import LocalCluster, flushed_clients, replication_status, wait_until


@pytest.fixture(scope="module", params=["plain", "mtls"])
def cluster(request):
    """The tables run over plain-text links and again over mutual TLS (tests/test_tls_links.py)."""
    with LocalCluster(3, tls=request.param == "mtls") as c:
        yield c


@pytest.fixture
def regions(cluster):
    with flushed_clients(cluster) as clients:
        yield clients


def pause(*clients):
    for c in clients:
        c.execute_command("BRAID.REPLICATION", "PAUSE")


def resume(cluster, *clients):
    for c in clients:
        c.execute_command("BRAID.REPLICATION", "RESUME")
    cluster.sync_wait()


def ids(entries):
    return [e[0] for e in entries]


def test_links_wait_returns_only_once_every_link_is_up(cluster, regions):
    """The helper benchmarks use before measuring the steady state: it does not return while a
    link is paused, and does once the region resumed."""
    pause(regions[1])
    try:
        with pytest.raises(TimeoutError, match="every replication link up"):
            cluster.links_wait(timeout=1)
    finally:
        resume(cluster, regions[1])
    cluster.links_wait()
    assert all(peer["link"] == "up" for c in regions
               for key, peer in c.info("crdt").items() if key.startswith("crdt_peer_"))


def test_concurrent_writes_then_sync(cluster, regions):
    r1, r2, _ = regions
    pause(r1, r2)
    a = r1.xadd("messages", {"text": "hello"})
    b = r2.xadd("messages", {"text": "goodbye"})
    assert ids(r1.xrange("messages")) == [a] and ids(r2.xrange("messages")) == [b]
    assert a.endswith(b"-1") and b.endswith(b"-2")
    resume(cluster, r1, r2)
    assert ids(r1.xrange("messages")) == ids(r2.xrange("messages")) \
        == sorted([a, b], key=lambda i: tuple(map(int, i.split(b"-"))))


def test_delete_is_observed_remove(cluster, regions):
    r1, r2, _ = regions
    r1.xadd("messages", {"text": "hello"})
    cluster.sync_wait()
    pause(r1, r2)
    assert r1.delete("messages") == 1
    b = r2.xadd("messages", {"text": "goodbye"})
    resume(cluster, r1, r2)
    assert ids(r1.xrange("messages")) == ids(r2.xrange("messages")) == [b]


def test_strict_ids_and_the_xread_caveat(cluster, regions):
    r1, r2, _ = regions
    pause(r1, r2)
    assert r1.xadd("caveat", {"f1": "v1"}, id="110") == b"110-1"
    assert r2.xadd("caveat", {"f1": "v1"}, id="115") == b"115-2"
    assert r1.xadd("caveat", {"f1": "v1"}, id="120") == b"120-1"
    assert r1.xadd("caveat", {"f1": "v1"}, id="130") == b"130-1"
    assert ids(r1.xread({"caveat": "0"}, count=2)[0][1]) == [b"110-1", b"120-1"]
    resume(cluster, r1, r2)
    assert ids(r1.xread({"caveat": "120-1"}, count=2)[0][1]) == [b"130-1"]  # 115-2 was skipped
    for r in (r1, r2):
        assert ids(r.xread({"caveat": "0"})[0][1]) == [b"110-1", b"115-2", b"120-1", b"130-1"]
    with pytest.raises(Exception, match="strict ID mode"):
        r1.xadd("caveat", {"f": "v"}, id="200-5")


def _groups(r, key):
    return [g["name"] for g in r.xinfo_groups(key)]


def test_concurrent_group_creation(cluster, regions):
    r1, r2, _ = regions
    r1.xadd("x", {"f": "v"})
    cluster.sync_wait()
    pause(r1, r2)
    r1.xgroup_create("x", "group1", id="0")
    r2.xgroup_create("x", "group2", id="0")
    assert _groups(r1, "x") == [b"group1"] and _groups(r2, "x") == [b"group2"]
    resume(cluster, r1, r2)
    assert _groups(r1, "x") == _groups(r2, "x") == [b"group1", b"group2"]


def test_del_wins_over_a_concurrent_group_create(cluster, regions):
    r1, r2, _ = regions
    r1.xgroup_create("x", "group1", id="0", mkstream=True)
    cluster.sync_wait()
    assert _groups(r1, "x") == _groups(r2, "x") == [b"group1"]
    pause(r1, r2)
    r1.delete("x")
    r2.xgroup_create("x", "group2", id="0")
    resume(cluster, r1, r2)
    assert r1.exists("x") == r2.exists("x") == 0


def test_destroy_wins_over_a_concurrent_create(cluster, regions):
    r1, r2, r3 = regions
    pause(r3)
    r1.xgroup_create("x", "group1", id="0", mkstream=True)
    # regions 1 and 2 sync while 3 is away
    wait_until(lambda: r2.exists("x") == 1, 20, what="region 2 sees the group")
    assert _groups(r2, "x") == [b"group1"] and r3.exists("x") == 0
    pause(r1, r2)
    r2.xgroup_destroy("x", "group1")
    r3.xgroup_create("x", "group1", id="0", mkstream=True)
    resume(cluster, r1, r2, r3)
    assert r1.exists("x") == r2.exists("x") == r3.exists("x") == 0


def test_group_state_is_local_but_acks_replicate_as_a_watermark(cluster, regions):
    r1, r2, _ = regions
    for ms in (110, 120, 130):
        r1.xadd("acks", {"f1": "v1"}, id=str(ms))
    r1.xgroup_create("acks", "group1", id="0")
    assert ids(r1.xreadgroup("group1", "Alice", {"acks": ">"})[0][1]) == [b"110-1", b"120-1", b"130-1"]
    cluster.sync_wait()
    assert [c["name"] for c in r1.xinfo_consumers("acks", "group1")] == [b"Alice"]
    assert r2.xinfo_consumers("acks", "group1") == []
    assert r2.xpending_range("acks", "group1", "-", "+", 1) == []
    r1.xack("acks", "group1", "110-1")
    r1.xack("acks", "group1", "130-1")
    cluster.sync_wait()
    assert ids(r2.xreadgroup("group1", "Bob", {"acks": ">"})[0][1]) == [b"120-1", b"130-1"]
    r1.xack("acks", "group1", "120-1")
    cluster.sync_wait()
    # acknowledged everywhere up to 130-1: a reader redirected to region 3 re-reads nothing
    assert regions[2].xreadgroup("group1", "Carol", {"acks": ">"}) == []


def test_xreadgroup_never_skips_a_late_entry(cluster, regions):
    r1, r2, _ = regions
    r1.xgroup_create("late", "g", id="0", mkstream=True)
    cluster.sync_wait()
    pause(r1, r2)
    r2.xadd("late", {"f": "late"}, id="115")
    for ms in (110, 120, 130):
        r1.xadd("late", {"f": "v"}, id=str(ms))
    assert ids(r1.xreadgroup("g", "c", {"late": ">"})[0][1]) == [b"110-1", b"120-1", b"130-1"]
    resume(cluster, r1, r2)
    assert ids(r1.xreadgroup("g", "c", {"late": ">"})[0][1]) == [b"115-2"]


@pytest.mark.parametrize("how", ["xread", "xreadgroup"])
def test_blocked_reader_wakes_on_a_replicated_entry(cluster, regions, how):
    r1, r2, _ = regions
    key = f"wake-{how}"
    if how == "xreadgroup":
        r1.xgroup_create(key, "g", id="$", mkstream=True)
        cluster.sync_wait()
    got: dict = {}
    reader = cluster.procs[1].client()

    def read():
        if how == "xread":
            got["r"] = reader.xread({key: "$"}, block=20000)
        else:
            got["r"] = reader.xreadgroup("g", "c", {key: ">"}, block=20000)

    t = threading.Thread(target=read)
    t.start()
    wait_until(lambda: int(r2.info("clients")["blocked_clients"]) == 1, 10, what="reader blocked")
    new_id = r1.xadd(key, {"f": "v"})
    t.join(15)
    reader.close()
    assert not t.is_alive() and ids(got["r"][0][1]) == [new_id]


def test_a_blocked_reader_gets_a_replicated_batch_in_one_reply(cluster, regions):
    """Operations of one transaction at region 1 reach region 2 in one batch; its blocked reader
    is served once the whole batch is applied, so one reply holds every entry (not the first
    alone, then the rest on its next read)."""
    r1, r2, _ = regions
    key = "wake-batch"
    got: dict = {}
    reader = cluster.procs[1].client()

    def read():
        got["r"] = reader.xread({key: "$"}, block=20000)

    t = threading.Thread(target=read)
    t.start()
    wait_until(lambda: int(r2.info("clients")["blocked_clients"]) == 1, 10, what="reader blocked")
    pipe = r1.pipeline(transaction=True)  # MULTI/EXEC: one turn of region 1, one batch to each peer
    for i in range(20):
        pipe.xadd(key, {"i": str(i)})
    added = pipe.execute()
    t.join(15)
    reader.close()
    assert not t.is_alive() and ids(got["r"][0][1]) == added


def test_rename_moves_observed_entries_and_drops_groups(cluster, regions):
    r1, r2, _ = regions
    a = r1.xadd("src", {"f": "1"})
    b = r2.xadd("src", {"f": "2"})
    r1.xgroup_create("src", "g", id="0")
    cluster.sync_wait()
    pause(r1, r2)
    assert r1.rename("src", "dst") is True
    late = r2.xadd("src", {"f": "concurrent"})  # not seen by the rename
    resume(cluster, r1, r2)
    for r in (r1, r2):
        assert ids(r.xrange("dst")) == sorted([a, b], key=lambda i: tuple(map(int, i.split(b"-"))))
        assert r.xinfo_groups("dst") == []
        assert ids(r.xrange("src")) == [late]
        assert r.xinfo_groups("src") == []


def test_setid_moves_every_origin_cursor_locally(cluster, regions):
    r1, r2, _ = regions
    r1.xadd("sid", {"f": "v"}, id="10")
    r2.xadd("sid", {"f": "v"}, id="20")
    r1.xgroup_create("sid", "g", id="0")
    cluster.sync_wait()
    assert r1.xgroup_setid("sid", "g", id="15") is True
    assert ids(r1.xreadgroup("g", "c", {"sid": ">"})[0][1]) == [b"20-2"]
    # not replicated: region 2 still reads from the start
    assert ids(r2.xreadgroup("g", "c", {"sid": ">"})[0][1]) == [b"10-1", b"20-2"]


def test_idmp_retry_at_another_region_returns_the_original_id(cluster, regions):
    r1, r2, _ = regions
    first = r1.execute_command("XADD", "orders", "IDMP", "checkout", "order-42", "*", "total", "9.99")
    cluster.sync_wait()
    retry = r2.execute_command("XADD", "orders", "IDMP", "checkout", "order-42", "*", "total", "9.99")
    assert retry == first
    cluster.sync_wait()
    assert r1.xlen("orders") == r2.xlen("orders") == 1


@pytest.mark.parametrize("mode", ["semi-strict", "liberal"])
def test_full_ids_can_duplicate_outside_strict_mode(cluster, regions, mode):
    """Seed 003's ID-modes table: with full IDs, two regions can write 100-1."""
    r1, r2, r3 = regions
    key = f"dup-{mode}"  # a region never reuses a deleted key's IDs: one key per run
    for r in (r1, r2, r3):
        r.execute_command("BRAID.CONFIG", "SET", "crdt_xadd_id_uniqueness_mode", mode)
    try:
        pause(r1, r2)
        assert r1.xadd(key, {"f1": "v1"}, id="100-1") == b"100-1"
        assert r2.xadd(key, {"f1": "v1"}, id="100-1") == b"100-1"
        resume(cluster, r1, r2)
        assert ids(r1.xrange(key)) == ids(r2.xrange(key)) == [b"100-1", b"100-1"]
        if mode == "liberal":  # milliseconds only: sequence 0, not the region's number
            assert r1.xadd(key, {"f1": "v1"}, id="200") == b"200-0"
        else:
            assert r1.xadd(key, {"f1": "v1"}, id="200") == b"200-1"
    finally:
        for r in (r1, r2, r3):
            r.execute_command("BRAID.CONFIG", "SET", "crdt_xadd_id_uniqueness_mode", "strict")


def test_group_created_with_dollar_still_gets_concurrent_entries(cluster, regions):
    r1, r2, _ = regions
    r1.xadd("dollar", {"f": "old"}, id="100")
    cluster.sync_wait()
    pause(r1, r2)
    late = r2.xadd("dollar", {"f": "concurrent"}, id="150")  # region 1 has not seen it
    r1.xadd("dollar", {"f": "before"}, id="200")
    r1.xgroup_create("dollar", "g", id="$")
    new = r1.xadd("dollar", {"f": "after"}, id="300")
    resume(cluster, r1, r2)
    got = ids(r1.xreadgroup("g", "c", {"dollar": ">"})[0][1])
    assert got == [late, new]  # 100-1 and 200-1 were there when the group started


def test_xsetid_fails_below_the_current_id(cluster, regions):
    """Seed 003's summary: XSETID fails when the new ID is less than the current one."""
    r1, r2, _ = regions
    r1.xadd("setid", {"f": "v"}, id="200")
    cluster.sync_wait()
    with pytest.raises(redis.ResponseError, match="smaller than the target stream top item"):
        r2.execute_command("XSETID", "setid", "150-0")
    assert r2.execute_command("XSETID", "setid", "300-0") == b"OK"


def _link(client, peer: int) -> str:
    status = replication_status(client)
    return dict(kv.split("=") for kv in status[f"crdt_peer_{peer}"].split(","))["link"]


def test_relay_heals_a_cut_link(cluster, regions):
    """With the region-1 – region-3 link cut, 1 and 3 still converge through region 2."""
    r1, r2, r3 = regions
    assert r1.execute_command("BRAID.REPLICATION", "PAUSE", "PEER", "region-3") == b"OK"
    wait_until(lambda: _link(r3, 1) == "down", 20, what="region 3 sees the cut")
    a = r1.xadd("relay", {"from": "1"})
    c = r3.xadd("relay", {"from": "3"})
    r1.xgroup_create("relay", "g", id="0")
    cluster.sync_wait()
    for r in (r1, r2, r3):
        assert ids(r.xrange("relay")) == sorted([a, c], key=lambda i: tuple(map(int, i.split(b"-"))))
        assert _groups(r, "relay") == [b"g"]
    # the operations went around: the direct link stayed cut the whole time
    assert _link(r1, 3) == "paused" and _link(r3, 1) == "down" and _link(r1, 2) == "up"
    assert r1.execute_command("BRAID.REPLICATION", "RESUME", "PEER", "region-3") == b"OK"
    wait_until(lambda: _link(r1, 3) == "up" and _link(r3, 1) == "up", 20, what="the link back up")


def test_pausing_a_link_names_a_real_peer(cluster, regions):
    r1 = regions[0]
    with pytest.raises(Exception, match="no region named 'mars'"):
        r1.execute_command("BRAID.REPLICATION", "PAUSE", "PEER", "mars")
    with pytest.raises(Exception, match="is this region"):
        r1.execute_command("BRAID.REPLICATION", "PAUSE", "PEER", "region-1")
    with pytest.raises(Exception, match="syntax error"):
        r1.execute_command("BRAID.REPLICATION", "PAUSE", "region-2")


def _refused(client) -> int:
    return int(replication_status(client)["crdt_refused_handshakes"])


@pytest.mark.parametrize("wrong", ["token", "cluster_id"])
def test_a_peer_with_a_wrong_token_or_cluster_id_is_refused(cluster, regions, tmp_path, wrong):
    """A real region process started with a forged cluster file: refused, nothing applied."""
    import dataclasses

    from node.testing import BraidProcess, free_port

    forged = dataclasses.replace(cluster.config, **{wrong: "forged"})
    me = dataclasses.replace(forged.regions[0], port=free_port(), repl_port=free_port())
    forged.regions = [me, *forged.regions[1:]]  # poses as region 1, dials regions 2 and 3
    path = tmp_path / "forged.toml"
    path.write_text(forged.to_toml())
    r2 = regions[1]
    with BraidProcess(me.port, str(tmp_path / "rogue"), str(path), me.name) as rogue:
        c = rogue.client()
        seen = _refused(r2)
        wait_until(lambda: _refused(r2) >= seen + 2, 20, what="region 2 refusing the rogue")
        # refused by every peer, it never hears how much of its own they hold: it takes no write
        with pytest.raises(redis.exceptions.BusyLoadingError, match="waiting for region-2, region-3"):
            c.xadd("forged", {"f": "v"})
        c.close()
    assert all(r.exists("forged") == 0 for r in regions)
    cluster.sync_wait()
    assert all(r.exists("forged") == 0 for r in regions)


def _lags(client) -> list[int]:
    text = client.execute_command("BRAID.REPLICATION", "STATUS").decode()
    return [int(part.split("=")[1]) for line in text.splitlines() if line.startswith("crdt_peer_")
            for part in line.split(":", 1)[1].split(",") if part.startswith("lag_ops=")]


def test_no_link_reports_lag_once_every_region_holds_everything(cluster, regions):
    """A region must not count, as a peer's lag, operations that peer sent it."""
    r1, r2, r3 = regions
    r1.xadd("lag", {"f": "v"})
    r3.xadd("lag", {"f": "v"})
    cluster.sync_wait()
    wait_until(lambda: all(_lags(r) == [0, 0] for r in regions), 20, what="every link acknowledged")


def test_a_conditional_delete_is_decided_where_it_was_issued(cluster, regions):
    """XDELEX ACKED reads region-local PELs: other regions remove what the issuer removed."""
    r1, r2, _ = regions
    kept, gone = r1.xadd("cond", {"f": "v"}), r1.xadd("cond", {"f": "v"})
    r1.xgroup_create("cond", "g", id="0")
    cluster.sync_wait()
    pause(r1, r2)
    assert ids(r2.xreadgroup("g", "c", {"cond": ">"}, count=1)[0][1]) == [kept]  # pending at region 2
    assert ids(r1.xreadgroup("g", "c", {"cond": ">"})[0][1]) == [kept, gone]
    assert r1.xack("cond", "g", gone) == 1  # acknowledged at region 1 only
    assert r1.execute_command("XDELEX", "cond", "ACKED", "IDS", 2, kept, gone) == [2, 1]
    resume(cluster, r1, r2)
    assert ids(r1.xrange("cond")) == ids(r2.xrange("cond")) == [kept]


def test_xackdel_moves_the_ack_watermark(cluster, regions):
    r1, r2, _ = regions
    for ms in (110, 120, 130):
        r1.xadd("ackdel", {"f": "v"}, id=str(ms))
    r1.xgroup_create("ackdel", "g1", id="0")
    r1.xgroup_create("ackdel", "g2", id="0")
    assert len(r1.xreadgroup("g1", "Alice", {"ackdel": ">"})[0][1]) == 3
    assert r1.xack("ackdel", "g1", "110-1", "120-1") == 2
    # acknowledged in g1; kept, since g2 has not read it
    assert r1.execute_command("XACKDEL", "ackdel", "g1", "ACKED", "IDS", 1, "130-1") == [2]
    cluster.sync_wait()
    assert r2.xreadgroup("g1", "Bob", {"ackdel": ">"}) == []  # a redirected reader re-reads nothing
    assert len(r2.xreadgroup("g2", "Bob", {"ackdel": ">"})[0][1]) == 3


def test_an_idmp_retry_after_the_key_was_deleted_is_still_a_duplicate(cluster, regions):
    """IDMP maps outlive a dropped key (docs/active-active.md): the retry answers the original ID, adds nothing."""
    r1, r2, _ = regions
    first = r1.execute_command("XADD", "paid", "IDMP", "checkout", "order-7", "*", "total", "1")
    cluster.sync_wait()
    assert r2.delete("paid") == 1
    cluster.sync_wait()
    for r in (r1, r2):
        assert r.execute_command("XADD", "paid", "IDMP", "checkout", "order-7", "*", "total", "1") == first
        assert r.exists("paid") == 0
