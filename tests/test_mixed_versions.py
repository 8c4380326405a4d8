"""Regions of the previous release and of this tree in one database: what docs/deploy.md
("Upgrades and changes, one region at a time") promises an operator.

The previous release (tests/previous_release.py's ``PREVIOUS_RELEASE``) is built from its git
tag into a virtual environment of its own, cached by the tag's commit; its regions run that
environment's ``python -m node`` (node/testing.py's ``python``), the others this tree's.
Checked:

- replication both ways: writes at old and new regions reach every region, ``braid-admin sync
  wait`` agrees, every region holds the same entries;
- a rolling upgrade under writes: each old region stopped and started with this tree's code
  on its data folder, one at a time, while a writer keeps writing to every region; every
  acknowledged write is then everywhere;
- what the old release cannot do it refuses as Redis does: this release's new commands are
  unknown commands there, and its regions never count an old one for WAITAOF (an old region's
  acks say nothing of its disk);
- a downgrade: the old release on a data folder this tree wrote loads it (the log and snapshot
  formats did not change between the two) and replicates on.

A previous release that cannot be built fails these tests (never skips them).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from node.testing import LocalCluster, wait_in_sync, wait_until
from node.version import BRAID_VERSION
from tests.previous_release import Release, build_release

OLD, NEW = "region-1", "region-3"  # in the first cluster: region-1 runs the old release, the others this one
SYNC_TIMEOUT_S = 120  # the old release runs its pure-Python build, on two cores shared with the suite


@pytest.fixture(scope="module")
def release() -> Release:
    built = build_release()
    assert built.version != BRAID_VERSION, f"{built.tag} installs version {built.version}, this tree's own"
    return built


def _versions(cluster: LocalCluster) -> dict[str, str]:
    out = {}
    for proc in cluster.procs:
        with proc.client() as c:
            out[proc.region] = c.info("server")["braid_version"]
    return out


def _entries(cluster: LocalCluster, keys: list[str]) -> list[dict[str, list]]:
    """Every region's entries of ``keys``, in region order."""
    out = []
    for proc in cluster.procs:
        with proc.client() as c:
            out.append({k: c.xrange(k) for k in keys})
    return out


def _tracebacks(log: str) -> list[str]:
    """The tracebacks in a region's log, each up to the exception's line."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in log.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            current = [line]
        elif current is not None:
            current.append(line)
            if not line.startswith(" "):  # the exception's own line ends it
                blocks.append("\n".join(current))
                current = None
    if current is not None:
        blocks.append("\n".join(current))
    return blocks


def _a_fault_of_the_old_release(traceback: str, release: Release) -> bool:
    """0.1.0's log raised at a stop under writes (an fsync that ended after the log closed started
    another on the closed file; harmless, as the close had fsynced everything): fixed in 0.2.0,
    and accepted in the old release's own code only."""
    installed_at = os.path.dirname(os.path.dirname(release.python))
    return installed_at in traceback and traceback.endswith("ValueError: the append log is closed")


def _sync_wait(cluster: LocalCluster, release: Release) -> None:
    """braid-admin sync wait (this tree's, talking to regions of both releases), then the regions'
    own status: the same operations and history digests everywhere; and no region of either
    release logged a traceback on the way (but the old release's known one)."""
    code, out = cluster.admin("sync", "wait", "--timeout", str(SYNC_TIMEOUT_S))
    assert code == 0, out
    assert "in sync" in out
    wait_in_sync(cluster.clients(), SYNC_TIMEOUT_S)
    for proc in cluster.procs:
        with open(proc.log_path, "rb") as f:
            log = f.read().decode("utf-8", "replace")
        unexpected = [tb for tb in _tracebacks(log) if not _a_fault_of_the_old_release(tb, release)]
        assert not unexpected, f"{proc.region} logged a traceback:\n{unexpected[0]}"


@pytest.fixture(scope="module")
def mixed(release: Release) -> Iterator[LocalCluster]:
    """region-1 of the previous release, region-2 and region-3 of this one."""
    with LocalCluster(3, pythons={OLD: release.python}) as cluster:
        yield cluster


def test_regions_of_both_releases_replicate_both_ways(mixed: LocalCluster, release: Release) -> None:
    assert _versions(mixed) == {OLD: release.version, "region-2": BRAID_VERSION, NEW: BRAID_VERSION}
    written: dict[str, list[bytes]] = {}
    for proc in mixed.procs:
        with proc.client() as c:
            key = f"from-{proc.region}"
            written[key] = [c.xadd(key, {"n": i, "at": proc.region}) for i in range(20)]
            c.xadd("shared", {"at": proc.region})
    _sync_wait(mixed, release)
    everywhere = _entries(mixed, [*written, "shared"])
    assert all(regions == everywhere[0] for regions in everywhere)
    for key, ids in written.items():
        assert [entry_id for entry_id, _ in everywhere[0][key]] == ids
    assert sorted(fields[b"at"] for _, fields in everywhere[0]["shared"]) == [b"region-1", b"region-2", b"region-3"]


def test_the_old_release_answers_new_commands_as_unknown(mixed: LocalCluster) -> None:
    with mixed.proc(OLD).client() as old:
        old.xadd("waited", {"at": "old"})
        for argv in (("WAIT", "1", "0"), ("WAITAOF", "0", "1", "0"), ("BRAID.TOKEN",)):
            with pytest.raises(redis.ResponseError) as refused:
                old.execute_command(*argv)
            assert str(refused.value).startswith(f"unknown command '{argv[0]}', with args beginning with:")


def test_new_regions_count_an_old_one_for_wait_but_not_for_waitaof(mixed: LocalCluster) -> None:
    with mixed.proc(NEW).client() as new:
        new.xadd("waited", {"at": "new"})
        assert new.execute_command("WAIT", "2", "0") == 2  # both others hold it: acks of either release count
        # on disk at one other region (region-2: the old one's acks never say what is on its disk) ...
        assert new.execute_command("WAITAOF", "0", "1", "0")[1] == 1
        # ... and never at two: the wait's deadline passes with the one
        assert new.execute_command("WAITAOF", "0", "2", "300")[1] == 1


class Writer(threading.Thread):
    """XADDs to every region in turn until stopped, keeping what each region acknowledged; a
    region that is down or loading refuses, and the writer goes on with the next one."""

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(daemon=True)
        self.ports = [p.port for p in cluster.procs]
        self.stopping = threading.Event()
        self.acked: list[tuple[str, bytes]] = []
        self.refused = 0

    def run(self) -> None:
        # no retries: a write to a region that is down fails at once, and the next goes elsewhere
        clients = [redis.Redis(host="127.0.0.1", port=port, protocol=2, socket_timeout=10, retry=Retry(NoBackoff(), 0))
                   for port in self.ports]
        n = 0
        while not self.stopping.is_set():
            key = f"rolling-{n % 4}"
            try:
                entry_id = clients[n % len(clients)].xadd(key, {"n": n})
            except redis.RedisError:
                self.refused += 1
            else:
                self.acked.append((key, entry_id))
            n += 1
        for c in clients:
            c.close()

    def wait_for_more(self, count: int, what: str) -> None:
        """Until ``count`` more writes than now were acknowledged (the writer must be running)."""
        goal = len(self.acked) + count

        def written() -> bool:
            assert self.is_alive(), "the writer stopped"
            return len(self.acked) >= goal

        wait_until(written, 60, what=what)


def test_a_rolling_upgrade_under_writes_keeps_every_acknowledged_write(release: Release) -> None:
    olds = ("region-1", "region-2")
    with LocalCluster(3, pythons=dict.fromkeys(olds, release.python)) as cluster:
        writer = Writer(cluster)
        writer.start()
        try:
            for name in olds:
                writer.wait_for_more(50, f"writes before {name}'s upgrade")
                proc = cluster.proc(name)
                proc.stop_keeping_data()
                proc.python = sys.executable  # this tree's code, on the old release's data folder
                proc.restart().wait_writable(SYNC_TIMEOUT_S)
                writer.wait_for_more(50, f"writes after {name}'s upgrade")
        finally:
            writer.stopping.set()
            writer.join(30)
        assert not writer.is_alive()
        assert _versions(cluster) == dict.fromkeys(("region-1", "region-2", "region-3"), BRAID_VERSION)
        _sync_wait(cluster, release)
        keys = sorted({key for key, _ in writer.acked})
        everywhere = _entries(cluster, keys)
        assert all(regions == everywhere[0] for regions in everywhere)
        held = {(key, entry_id) for key in keys for entry_id, _ in everywhere[0][key]}
        lost = [w for w in writer.acked if w not in held]
        assert not lost, f"{len(lost)} acknowledged writes are missing after the upgrade: {lost[:5]}"


def test_a_downgrade_loads_what_this_release_wrote(release: Release) -> None:
    with LocalCluster(3) as cluster:
        with cluster.proc("region-1").client() as c:
            ids = [c.xadd("before", {"n": i}) for i in range(50)]
            c.xgroup_create("before", "readers", id="0")
            c.xreadgroup("readers", "alice", {"before": ">"}, count=10)
            c.save()  # a snapshot, and log records on top of it
            ids += [c.xadd("before", {"n": i}) for i in range(50, 60)]
        _sync_wait(cluster, release)
        expected = _entries(cluster, ["before"])[0]
        proc = cluster.proc("region-1")
        proc.stop_keeping_data()
        proc.python = release.python  # the old release, on a data folder this release wrote
        proc.restart().wait_writable(SYNC_TIMEOUT_S)
        assert _versions(cluster)["region-1"] == release.version
        with proc.client() as c:
            assert c.xrange("before") == expected["before"]
            assert [e[0] for e in c.xrange("before")] == ids
            assert c.xpending("before", "readers")["pending"] == 10
            c.xadd("after", {"at": "downgraded"})
        with cluster.proc("region-2").client() as c:
            c.xadd("after", {"at": "new"})
        _sync_wait(cluster, release)
        everywhere = _entries(cluster, ["before", "after"])
        assert all(regions == everywhere[0] for regions in everywhere)
        assert len(everywhere[0]["after"]) == 2
