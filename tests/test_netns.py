"""Three regions on separate hosts: network namespaces, 40 ms one way between them.

The Active-Active tables of ``tests/test_cluster.py`` run here unchanged (the
same test functions, with this module's ``cluster``), over plain-text links and
over mutual TLS.  Then what only a real network shows: the delay line is in
the path (a round trip takes at least twice the one-way delay), a partition
cut in the network heals and converges, the regions' peers arrive from
translated addresses, and nothing the harness made outlives it.

These tests need root (network namespaces): without it they fail, never skip.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from chaos.netns import NetnsCluster, NetnsError, inner_address, leftovers, outer_address
from node.testing import wait_until
from tests import test_cluster as loopback
from tests.test_cluster import (  # noqa: F401  (the loopback scenarios, collected here against this cluster)
    test_concurrent_writes_then_sync,
    test_del_wins_over_a_concurrent_group_create,
    test_delete_is_observed_remove,
    test_destroy_wins_over_a_concurrent_create,
    test_idmp_retry_at_another_region_returns_the_original_id,
    test_relay_heals_a_cut_link,
    test_xreadgroup_never_skips_a_late_entry,
)

DELAY = 0.04
regions = loopback.regions  # a fresh keyspace and three clients, as on loopback


@pytest.fixture(scope="module", params=["plain", "mtls"])
def cluster(request):
    with NetnsCluster(3, delay=DELAY, tls=request.param == "mtls") as c:
        yield c


def test_a_round_trip_between_regions_crosses_the_delay_line_twice(cluster, regions):
    for a, b in ((1, 2), (3, 1)):
        assert cluster.rtt(a, b) >= 2 * DELAY
    cluster.impair(1, 3, delay=0.05)  # a slower link, both ways, on top of the base delay
    try:
        assert cluster.rtt(1, 3) >= 2 * (DELAY + 0.05)
    finally:
        cluster.heal_network()


def test_a_bandwidth_cap_paces_what_crosses_the_link(cluster, regions):
    """100 KB sent from region 1's namespace to region 2 over a 100 KB/s link take at least a second."""
    size, rate = 100_000, 100_000
    probe = ("import socket,sys,time\n"
             f"s=socket.create_connection(('{outer_address(2)}',6379),timeout=30)\n"
             f"v=b'x'*{size}\n"
             "cmd=b'*5\\r\\n$4\\r\\nXADD\\r\\n$2\\r\\nbw\\r\\n$1\\r\\n*\\r\\n$1\\r\\nf\\r\\n'"
             "+b'$%d\\r\\n'%len(v)+v+b'\\r\\n'\n"
             "t=time.monotonic()\ns.sendall(cmd)\nreply=s.recv(100)\nprint(time.monotonic()-t, reply[:1].decode())")
    cluster.wan.set(1, 2, rate=rate)
    try:
        done = subprocess.run(["ip", "netns", "exec", cluster.procs[0].netns, sys.executable, "-c", probe],
                              capture_output=True, text=True, timeout=60)
    finally:
        cluster.heal_network()
    took, kind = done.stdout.split()
    assert kind == "$" and float(took) >= size / rate  # the region answered with the new ID
    assert regions[1].xlen("bw") == 1


def test_a_network_partition_heals_and_converges(cluster, regions):
    r1, r2, r3 = regions
    cluster.cut(1, 3)
    cluster.cut(2, 3)
    try:
        moved = {link: counts[0] for link, counts in cluster.wan.stats().items()}
        a = r1.xadd("cut", {"from": "1"})
        c = r3.xadd("cut", {"from": "3"})
        wait_until(lambda: r2.xlen("cut") == 1, 20, what="region 2 gets region 1's entry")
        assert r3.xlen("cut") == 1 and [e[0] for e in r3.xrange("cut")] == [c]
        stats = cluster.wan.stats()
        # not one packet crossed a cut link, and the regions kept trying
        assert all(stats[link][0] == moved[link] for link in ("1-3", "3-1", "2-3", "3-2"))
        assert stats["1-2"][0] > moved["1-2"]
    finally:
        cluster.heal_network()
    cluster.sync_wait(60)  # reconnecting after the regions' keepalives gave the links up takes seconds
    for r in regions:
        assert [e[0] for e in r.xrange("cut")] == sorted([a, c], key=lambda i: tuple(map(int, i.split(b"-"))))


def test_regions_bind_one_address_and_are_reached_at_another(cluster, regions):
    """As behind NAT: the cluster file's host is not on the region's interfaces, and its
    replication peers arrive from their outer addresses."""
    cluster.sync_wait()
    for number, proc in enumerate(cluster.procs, 1):
        assert cluster.config.regions[number - 1].host == outer_address(number)
        mine = subprocess.run(["ip", "-n", proc.netns, "-4", "-o", "addr"], capture_output=True, text=True).stdout
        assert inner_address(number) in mine and outer_address(number) not in mine
        peers = subprocess.run(["ip", "netns", "exec", proc.netns, "ss", "-Htn", "state", "established"],
                               capture_output=True, text=True).stdout
        others = {outer_address(o) for o in range(1, 4) if o != number}
        assert others <= set(re.findall(r"10\.213\.\d+\.\d+", peers))


def test_the_harness_leaves_nothing_behind():
    with NetnsCluster(2, delay=0.01) as c:
        made = leftovers(c.slot)
        assert len(made["namespaces"]) == 2 and len(made["links"]) == 2  # the host ends of the veth pairs
    assert leftovers(c.slot) == {"namespaces": [], "links": []}


def test_a_failed_start_leaves_nothing_behind():
    c = NetnsCluster(2, delay=0.01, extra_args=["--appendfsync", "sometimes"])
    with pytest.raises(RuntimeError, match="exited"):
        c.start()
    assert c.slot is not None and leftovers(c.slot) == {"namespaces": [], "links": []}


def test_cleanup_removes_what_a_killed_run_left():
    c = NetnsCluster(2, delay=0.01).start()
    slot, pids = c.slot, [p.pid for p in c.procs]
    c.wan.proc.kill()  # as if the harness died: its namespaces and region processes stay
    c.wan.proc.wait(10)
    assert len(leftovers(slot)["namespaces"]) == 2
    done = subprocess.run([sys.executable, "-m", "chaos.netns", "cleanup", str(slot)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert leftovers(slot) == {"namespaces": [], "links": []}
    for p, _pid in zip(c.procs, pids, strict=True):
        assert p.proc.wait(10) is not None  # killed with its namespace
    c.stop()


def test_per_pair_delays_and_errors_are_explicit():
    c = NetnsCluster(3, delay={(1, 2): 0.03, (1, 3): 0.06, (2, 3): 0.09})
    assert [c.base_shape(a, b).delay for a, b in ((2, 1), (3, 1), (2, 3))] == [0.03, 0.06, 0.09]
    with pytest.raises(ValueError, match="2 to 15 regions"):
        NetnsCluster(1)
    assert issubclass(NetnsError, RuntimeError)


def test_the_chaos_suite_passes_across_the_wan(tmp_path):
    """``braid-chaos run --backend netns``: network faults are cut in the delay line."""
    from chaos.cli import main

    before = set(leftovers()["namespaces"])
    out = tmp_path / "report"
    code = main(["run", "--backend", "netns", "--wan-delay", "40ms", "--regions", "3", "--duration", "10",
                 "--seed", "3", "--faults", "partition,one-way,bridge,kill", "--out", str(out)])
    with open(out / "report.json") as f:
        data = json.load(f)
    assert code == 0 and data["verdict"] == "pass", [v["summary"] for v in data["verdicts"] if not v["ok"]]
    assert {f["kind"] for f in data["faults"]} & {"partition", "one-way", "bridge"}
    assert set(leftovers()["namespaces"]) <= before


@pytest.mark.parametrize("option, value, error", [("--wan-delay", "fast", "not a duration"),
                                                  ("--wan-delay", "20s", "between 0 and 10 s"),
                                                  ("--wan-loss", "1.5", r"not in \[0, 1\)")])
def test_wan_options_are_checked(capsys, option, value, error):
    from chaos.cli import main

    with pytest.raises(SystemExit) as exit:
        main(["run", "--backend", "netns", option, value])
    assert exit.value.code == 2 and re.search(error, capsys.readouterr().err)
