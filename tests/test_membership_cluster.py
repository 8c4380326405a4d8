"""Membership changes of a running database, with real region processes.

A three-region cluster grows to four under write load (the new region catches up
before it takes writes, then its writes reach everyone), shrinks by a graceful
removal (nothing it acknowledged is lost) and by a forced removal of a killed
region; that region, restarted, is refused and learns it was removed; purged, it
is added again under a new number.  Every remaining region ends identical.
"""

from __future__ import annotations

import shutil
import threading

import pytest
import redis

from crdt.membership import FORCE_REMOVE, PROMISED, Change
from node.testing import LocalCluster, wait_in_sync, wait_until
from node.transport.admin import clients

KEY = b"orders"


def info_field(client: redis.Redis, name: str) -> str:
    info = client.info("crdt")
    assert name in info, f"INFO crdt has no {name}"
    return str(info[name])


class Writers:
    """One thread per region writing XADD without pause; every acknowledged ID is kept."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.acked: dict[str, list[bytes]] = {}
        self.refused: dict[str, set[str]] = {}
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def write_at(self, name: str) -> None:
        self.acked.setdefault(name, [])
        self.refused.setdefault(name, set())
        t = threading.Thread(target=self._run, args=(name,), daemon=True)
        self.threads.append(t)
        t.start()

    def _run(self, name: str) -> None:
        client = self.cluster.proc(name).client(socket_timeout=5)
        i = 0
        while not self.stop.is_set():
            i += 1
            try:
                self.acked[name].append(client.xadd(KEY, {"region": name, "i": str(i)}))
            except redis.exceptions.ReadOnlyError:
                self.refused[name].add("READONLY")
                return  # it left the database: write elsewhere
            except (redis.ConnectionError, redis.TimeoutError):
                return  # killed

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


def ids_at(client: redis.Redis) -> set[bytes]:
    return {i for i, _ in client.xrange(KEY)}


@pytest.fixture
def cluster():
    with LocalCluster(3) as c:
        yield c


def test_grow_to_four_and_shrink_to_two_under_writes(cluster: LocalCluster, tmp_path):
    writers = Writers(cluster)
    for name in ("region-1", "region-2", "region-3"):
        writers.write_at(name)
    wait_until(lambda: all(len(writers.acked[n]) > 20 for n in ("region-1", "region-2", "region-3")), 30)

    # ---- grow: region-4 joins under load, catches up, then takes writes
    new = cluster.add_region("region-4")
    c4 = new.client()
    try:
        c4.xadd(KEY, {"too": "early"})
    except redis.exceptions.BusyLoadingError as e:  # LOADING: it is still catching up
        assert "joining the database" in str(e)
    wait_until(lambda: info_field(c4, "crdt_member_status") == "active", 60, what="region-4 to become active")
    assert info_field(c4, "crdt_membership_epoch") == "3"  # join, then its activation
    writers.write_at("region-4")
    wait_until(lambda: len(writers.acked["region-4"]) > 20, 30)
    mine = writers.acked["region-4"][0]
    for c in cluster.clients():
        wait_until(lambda c=c: mine in ids_at(c), 30, what="region-4's write everywhere")

    # ---- a graceful removal under load: region-2 hands over everything it acknowledged
    code, out = cluster.admin("region", "remove", "region-2")
    assert code == 0, out
    assert "left the database" in out
    wait_until(lambda: not writers.threads[1].is_alive(), 10)  # its writer got READONLY
    assert "READONLY" in writers.refused["region-2"]
    c2 = cluster.proc("region-2").client()
    assert info_field(c2, "crdt_member_status") == "removed"
    with pytest.raises(redis.exceptions.ReadOnlyError, match="removed from the database"):
        c2.xadd(KEY, {"late": "1"})

    # ---- a forced removal of a killed region
    stale = tmp_path / "stale-cluster.toml"
    shutil.copy(cluster.file, stale)  # region-3's own copy: it never hears of its removal
    cluster.proc("region-3").kill()
    code, out = cluster.admin("region", "remove", "region-3", "--force")
    assert code == 0, out
    assert "removed by force" in out and "lost" in out

    writers.join()
    remaining = [cluster.proc(n).client() for n in ("region-1", "region-4")]
    cluster_ids = None
    for c in remaining:
        wait_until(lambda c=c: int(info_field(c, "crdt_pending")) == 0, 30)
    from node.testing import wait_in_sync

    wait_in_sync(remaining, 30)
    cluster_ids = [ids_at(c) for c in remaining]
    assert cluster_ids[0] == cluster_ids[1]
    for name in ("region-1", "region-2", "region-4"):  # every acknowledged write of a member that stayed or left
        missing = set(writers.acked[name]) - cluster_ids[0]
        assert not missing, f"{len(missing)} acknowledged writes of {name} lost"
    for c in remaining:
        assert info_field(c, "crdt_membership_epoch") == "6"  # 3, then leave, remove, force-remove
        assert info_field(c, "crdt_stability_held_by") == ""   # nobody waits for the removed regions

    # ---- the killed region comes back with its stale file: refused, and it learns it was removed
    r3 = cluster.proc("region-3")
    r3.cluster_file = str(stale)
    r3.restart()
    c3 = r3.client()
    wait_until(lambda: info_field(c3, "crdt_member_status") == "removed", 30,
               what="the removed region to learn it was removed")
    with pytest.raises(redis.exceptions.ReadOnlyError, match="removed from the database"):
        c3.xadd(KEY, {"late": "1"})
    assert all(c.xlen(KEY) == len(cluster_ids[0]) for c in remaining)

    # ---- purge it and add it again: a new number, the same name
    code, out = cluster.admin("region", "purge", "--region", "region-3")
    assert code == 0, out
    wait_until(lambda: r3.proc.poll() is not None, 30, what="the purged region to stop")
    r3.stop()  # it exited: this closes its log
    cluster.procs.remove(r3)
    again = cluster.add_region("region-3")
    c3 = again.client()
    wait_until(lambda: info_field(c3, "crdt_member_status") == "active", 60)
    assert info_field(c3, "crdt_region") == "5"  # numbers are never reused
    c3.xadd(KEY, {"back": "1"})
    wait_in_sync([*remaining, c3], 30)
    assert ids_at(c3) == ids_at(remaining[0])


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def members_everywhere(cluster: LocalCluster) -> set[tuple]:
    """Each reachable region's (epoch, member list)."""
    from node.transport.admin import AdminClient

    out = set()
    for r in cluster.config.regions:
        with AdminClient(f"127.0.0.1:{r.repl_port}", cluster.config.token) as c:
            st = c.status()
        out.add((st.epoch, tuple((m.number, m.name, m.status) for m in st.members)))
    return out


def test_a_change_needs_every_member_and_then_changes_nothing(cluster: LocalCluster):
    before = read(cluster.file)
    cluster.proc("region-3").kill()
    code, out = cluster.admin("region", "add", "region-4", "--host", "127.0.0.1", "--port", "1",
                              "--repl-port", "2")
    assert code == 1 and "every member reachable; region-3 is not" in out and "nothing changed" in out
    code, out = cluster.admin("region", "remove", "region-2")
    assert code == 1 and "region-3 is not" in out
    assert read(cluster.file) == before
    cluster.proc("region-3").restart()
    assert members_everywhere(cluster) == {(1, ((1, "region-1", "active"), (2, "region-2", "active"),
                                                (3, "region-3", "active")))}
    code, out = cluster.admin("region", "add", "region-4", "--host", "127.0.0.1", "--port", "1",
                              "--repl-port", "2", "--number", "16")
    assert code == 1 and "region numbers go from 1 to 15" in out
    code, out = cluster.admin("region", "purge", "--region", "region-2")
    assert code == 1 and "is active, not removed" in out


def test_concurrent_changes_never_leave_two_member_lists(cluster: LocalCluster):
    """Several coordinators propose at once; every voter promises one proposal per epoch, so
    at most one change per epoch takes effect and every region ends with the same list."""
    from crdt.membership import JOIN, Change, MembershipError
    from node.activeactive.coordinator import MembershipChangeError, agree
    from node.transport.admin import clients

    cfg = cluster.config
    outcomes: list[str] = []

    def coordinate(i: int) -> None:
        m = cfg.membership()
        voters = clients(cfg, m.live(), None)
        try:
            agree(Change(JOIN, 4 + i, f"new-{i}", ("127.0.0.1", 1, 2)), m, voters, (0, i), {})
            outcomes.append("agreed")
        except (MembershipChangeError, MembershipError) as e:
            outcomes.append(str(e))
        finally:
            for c in voters.values():
                c.close()

    threads = [threading.Thread(target=coordinate, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(outcomes) == 4 and outcomes.count("agreed") <= 1, outcomes
    lists = members_everywhere(cluster)
    assert len(lists) == 1, lists
    (epoch, members), = lists
    assert epoch == 1 + outcomes.count("agreed")
    assert len(members) == 3 + outcomes.count("agreed")


def test_a_region_joins_a_cluster_with_mutual_tls():
    """The newcomer's certificate comes from the cluster CA; it activates itself by calling the
    other regions' admin service with that certificate."""
    with LocalCluster(2, tls=True) as cluster:
        c1 = cluster.proc("region-1").client()
        c1.xadd(KEY, {"before": "1"})
        new = cluster.add_region("region-3")
        c3 = new.client()
        wait_until(lambda: info_field(c3, "crdt_member_status") == "active", 60, what="region-3 active")
        assert c3.xlen(KEY) == 1
        mine = c3.xadd(KEY, {"after": "1"})
        wait_until(lambda: mine in ids_at(c1), 30, what="region-3's write at region-1")
        assert info_field(c3, "crdt_link_tls") == "mutual"


def test_a_removed_or_unknown_region_is_refused_at_the_handshake_and_counted():
    import asyncio

    import grpc

    from proto import replication_pb2 as pb
    from tests.test_replication_transport import _forge

    with LocalCluster(2) as cluster:
        cluster.proc("region-2").kill()
        code, out = cluster.admin("region", "remove", "region-2", "--force")
        assert code == 0, out
        r1 = cluster.config.region("region-1")
        cfg = cluster.config

        def hello(region: int, epoch: int) -> tuple[grpc.StatusCode, str]:
            return asyncio.run(_forge(r1.repl_port, [pb.Frame(hello=pb.Hello(
                cluster_id=cfg.cluster_id, database=cfg.database, region=region, token=cfg.token, epoch=epoch))]))

        code, details = hello(2, 1)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "region 2 (region-2) was removed" in details
        code, details = hello(9, 2)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "not a member" in details
        c1 = cluster.proc("region-1").client()
        assert info_field(c1, "crdt_membership_refused") == "2"
        assert c1.xadd(KEY, {"alone": "1"})  # the last active region takes writes


def test_a_commit_that_reached_no_voter_is_sent_again_until_one_has_it(cluster: LocalCluster, monkeypatch):
    """Both voters of region-3's forced removal promised it, then were killed before the commit
    reached them: braid-admin sends the commit again, and once they are back (each kept its
    promise on disk) the removal takes effect; without that, their holds on region-3's
    operations would stand forever."""
    from crdt.membership import FORCE_REMOVE, Change
    from node.tools import admin_regions
    from node.transport.admin import clients

    cfg = cluster.config
    cluster.proc("region-3").kill()
    m = cfg.membership()
    change = Change(FORCE_REMOVE, 3)
    needed = m.voters(change)
    assert sorted(needed) == [1, 2]
    voters = clients(cfg, needed, None, timeout=2.0)
    try:
        p = m.propose(change, (0, 7))
        answers = [voters[n].promise(p) for n in needed]
        assert all(a.ok for a in answers), answers
        frozen = max(a.held for a in answers)
        for name in ("region-1", "region-2"):
            cluster.proc(name).kill()
        monkeypatch.setattr(admin_regions, "COMMIT_RETRY_S", 0.2)
        names = {r.number: r.name for r in cfg.regions}
        result: dict = {}

        def coordinator() -> None:
            try:
                result["unreached"] = admin_regions._commit_again(p, frozen, voters, needed, names,
                                                            ["region-1 (down)", "region-2 (down)"])
            except Exception as e:  # reported below
                result["error"] = e

        t = threading.Thread(target=coordinator)
        t.start()
        for name in ("region-1", "region-2"):
            cluster.proc(name).restart()
        t.join(admin_regions.COMMIT_RETRY_FOR_S + 10)
        assert not t.is_alive()
        assert "error" not in result, result
        assert len(result["unreached"]) < len(needed), result  # one has it; the other adopts it at a handshake
    finally:
        for c in voters.values():
            c.close()
    remaining = [cluster.proc(n).client() for n in ("region-1", "region-2")]
    for c in remaining:
        wait_until(lambda c=c: info_field(c, "crdt_membership_epoch") == "2", 30, what="the removal everywhere")
        assert info_field(c, "crdt_stability_held_by") == ""
    c1, c2 = remaining
    c1.xadd(KEY, {"after": "1"})
    from node.testing import wait_in_sync

    wait_in_sync(remaining, 30)


def test_braid_admin_says_when_no_voter_ever_received_the_commit(monkeypatch):
    """A commit that reaches no voter within the retry window: the change did not take effect
    yet, and the error says so and how it ends (the voters complete it once they answer)."""
    from crdt.membership import Proposal
    from node.activeactive.coordinator import MembershipChangeError
    from node.tools import admin_regions
    from node.transport.admin import AdminCallError

    class Down:
        calls = 0

        def commit(self, p: Proposal, frozen: int) -> None:
            Down.calls += 1
            raise AdminCallError("unreachable", True)

    monkeypatch.setattr(admin_regions, "COMMIT_RETRY_S", 0.01)
    monkeypatch.setattr(admin_regions, "COMMIT_RETRY_FOR_S", 0.05)
    with pytest.raises(MembershipChangeError, match="has not taken effect yet.*they complete it themselves"):
        admin_regions._commit_again(None, 0, {1: Down(), 2: Down()}, [1, 2], {1: "region-1", 2: "region-2"},
                                ["region-1 (unreachable)", "region-2 (unreachable)"])
    assert Down.calls >= 2  # it was sent again


def test_voters_settle_over_the_admin_service_a_change_whose_coordinator_left_it(cluster: LocalCluster):
    """Both voters of region-3's forced removal promised it, and its coordinator vanished.
    Each was then asked where it stands (a settling voter's question: it holds the promise),
    and the coordinator's abort came after: a voter that said it holds a promise does not take
    that abort, it settles the change with the other voters at once, over their admin
    service.  Both hold the promise, so it is committed at both: region-3's operations are held
    no more, and the two converge."""
    cfg = cluster.config
    cluster.proc("region-3").kill()
    m = cfg.membership()
    change = Change(FORCE_REMOVE, 3)
    needed = m.voters(change)
    voters = clients(cfg, needed, None, timeout=2.0)
    try:
        p = m.propose(change, (0, 11))
        assert all(voters[n].promise(p).ok for n in needed)
        assert {voters[n].standing(p).state for n in needed} == {PROMISED}
        for n in needed:
            voters[n].abort(p)  # the coordinator's abort, after the voters counted each other
    finally:
        for c in voters.values():
            c.close()
    remaining = [cluster.proc(n).client() for n in ("region-1", "region-2")]
    for c in remaining:
        wait_until(lambda c=c: info_field(c, "crdt_membership_epoch") == "2", 30, what="the settled removal")
        wait_until(lambda c=c: info_field(c, "crdt_stability_held_by") == "", 30, what="no hold on region-3")
    remaining[0].xadd(KEY, {"after": "1"})
    wait_in_sync(remaining, 30)
