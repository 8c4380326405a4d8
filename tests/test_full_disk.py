"""A full disk, on a real (small) filesystem: what a region answers, what it logs, and that
it always starts again once space is back.

Each test mounts a tmpfs of a few hundred kilobytes (root only: they fail, never skip,
without it) and fills it, so the region meets the ENOSPC of a real write, at the point
where it really happens.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from node.region.config import Config
from node.testing import InProcessServer, LocalCluster, free_port, replication_status, wait_until

MISCONF = "MISCONF Errors writing to the AOF file: "
BIG = "x" * 20_000  # a record of several pages: it cannot fit in the last page of a segment already there


@contextlib.contextmanager
def small_disk(directory: str, size: str):
    """A tmpfs of ``size`` mounted on ``directory`` for the length of the block."""
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs to fill a real filesystem: run it as root")
    os.makedirs(directory, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", directory], check=True)
    try:
        yield directory
    finally:
        if subprocess.run(["umount", directory]).returncode != 0:
            subprocess.run(["umount", "-l", directory], check=True)  # something still holds a file


def resize(directory: str, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", directory], check=True)


def fill(directory: str) -> str:
    """Take every free byte of the filesystem holding ``directory``; returns the file to delete."""
    path = os.path.join(directory, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (b"\0" * 65536, b"\0" * 4096, b"\0"):
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    assert os.statvfs(directory).f_bavail == 0
    return path


# ---------------------------------------------------------------- 1. a write that met ENOSPC is answered
@pytest.mark.parametrize("policy", ["everysec", "always"])
def test_a_write_that_met_a_full_disk_is_answered_misconf_in_bounded_time_and_logged_once_space_is_back(
        tmp_path, policy):
    disk = str(tmp_path / "disk")
    with small_disk(disk, "1m"):
        config = Config(dir=disk, appendfsync=policy)
        with InProcessServer(config) as srv, ThreadPoolExecutor(1) as pool:
            c, writer = srv.client(), srv.client()
            c.config_set("aof-write-error-timeout-ms", 200)
            before = c.xadd("s", {"n": "before"})
            filler = fill(disk)
            # the pipeline's XADD is applied, but its record cannot be written: its reply is held,
            # then answered MISCONF (not acknowledged); the PING behind it is answered as it is
            pipe = writer.pipeline(transaction=False)
            pipe.xadd("s", {"n": "while full", "pad": BIG}).ping()
            held = pool.submit(pipe.execute, raise_on_error=False)
            replies = held.result(timeout=20)
            assert isinstance(replies[0], redis.ResponseError)
            assert str(replies[0]).startswith(MISCONF + "write failed: No space left on device")
            assert replies[1] is True
            # readers see it (it was applied in memory); under `always` their replies waited too
            entries = c.xrange("s")
            assert [e[1][b"n"] for e in entries] == [b"before", b"while full"]
            with pytest.raises(redis.ResponseError, match=MISCONF):  # later writes: refused at once
                writer.xadd("s", {"n": "refused"})
            os.remove(filler)
            wait_until(lambda: c.info("persistence")["aof_last_write_status"] == "ok", 10,
                       what="the cron writing the held record once space is back")
            after = c.xadd("s", {"n": "after"})
            c.close()
            writer.close()
        # the region kept running and space came back: the write was logged after all
        with InProcessServer(Config(dir=disk)) as srv:
            c = srv.client()
            assert [e[0] for e in c.xrange("s")] == [before, entries[1][0], after]
            c.close()


# ---------------------------------------------------------------- 2. a full-resync image on a full disk
def _trimmed(c) -> int:
    return int(replication_status(c)["crdt_backlog_trimmed"])


def _resyncs(c) -> int:
    return int(replication_status(c)["crdt_full_resyncs_received"])


def _image_not_saved(p3):
    """A client of region 3 once it took a full-resync image it could not save: its start is
    over (the gate's LOADING is behind it) and a write meets the image's MISCONF."""
    r3 = p3.client()
    wait_until(lambda: _resyncs(r3) >= 1, 20, what="region 3 taking a full-resync image")
    p3.wait_writable()  # (its start took its own operations back: MISCONF is the disk's doing)
    with pytest.raises(redis.ResponseError, match=MISCONF):
        r3.xadd("s", {"n": "on the image"})  # the image is not on disk: nothing may be logged on it
    return r3


@contextlib.contextmanager
def region_3_resyncs_on_a_small_disk(cluster: LocalCluster, free: int = 256 * 1024):
    """Region 3 is killed, its peers drop what it lacks from their backlogs and write an image
    far larger than ``free``, and region 3 starts again with its append-only directory on a
    tmpfs holding its log and ``free`` bytes more.  Yields (its process, the mount, what every
    region should end up holding); the mount goes with the block."""
    p3 = cluster.procs[2]
    r1, r2, r3 = cluster.clients()
    made = [r3.xadd("s", {"n": str(i)}) for i in range(20)]
    cluster.sync_wait()
    r3.close()
    p3.kill()
    for c in (r1, r2):
        c.config_set("crdt-repl-backlog-size", 1)
    trimmed = [_trimmed(c) for c in (r1, r2)]
    made += [r1.xadd("s", {"n": str(i), "pad": BIG}) for i in range(150)]  # an image of about 3 MB
    wait_until(lambda: all(_trimmed(c) > t + 100 for c, t in zip((r1, r2), trimmed, strict=True)), 20,
               what="regions 1 and 2 trimming what region 3 lacks")
    r1.close()
    r2.close()
    log_dir = os.path.join(p3.data_dir, "appendonlydir")
    kept = tempfile.mkdtemp(prefix="braid-log-")
    shutil.copytree(log_dir, kept, dirs_exist_ok=True)
    shutil.rmtree(log_dir)
    used = sum(os.path.getsize(os.path.join(kept, f)) for f in os.listdir(kept))
    with small_disk(log_dir, str(used + 64 * 1024 + free)):  # (and room for its run mark, a new segment)
        try:
            shutil.copytree(kept, log_dir, dirs_exist_ok=True)
            p3.restart()
            yield p3, log_dir, made
        finally:
            p3.kill()
            shutil.rmtree(kept, ignore_errors=True)


def test_a_resync_image_that_cannot_be_saved_is_not_logged_on_and_the_region_starts_once_space_is_back():
    """The operator's trial: the image could not be snapshotted, a client's write was logged on
    top of it once space came back, and the region could never start again."""
    with LocalCluster(3) as cluster:
        with region_3_resyncs_on_a_small_disk(cluster) as (p3, log_dir, made):
            r3 = _image_not_saved(p3)
            resize(log_dir, "64m")  # space comes back

            def written():
                try:
                    return r3.xadd("s", {"n": "on the image"})
                except redis.ResponseError as e:
                    assert str(e).startswith(MISCONF)
                    return None
            made.append(wait_until(written, 20, what="region 3 taking writes once its image is on disk"))
            r3.close()
            p3.kill()  # killed: only what reached the OS is left
            p3.restart()  # ... and it starts (before: "record N cannot be replayed", for good)
            r3 = p3.client()
            assert [e[0] for e in r3.xrange("s")] == made
            r3.close()
            _converge(cluster, made)


def _converge(cluster: LocalCluster, made: list) -> None:
    """Every region, region 3 on its small disk among them, ends up holding ``made``."""
    cluster.sync_wait(60)
    for c in cluster.clients():
        assert [e[0] for e in c.xrange("s")] == made
        c.close()


def test_a_region_killed_before_its_resync_image_was_saved_starts_from_its_old_log_and_takes_it_again():
    with LocalCluster(3) as cluster:
        with region_3_resyncs_on_a_small_disk(cluster) as (p3, log_dir, made):
            r3 = _image_not_saved(p3)
            assert r3.xlen("s") == len(made)  # readers are served the image meanwhile
            r3.close()
            p3.kill()
            resize(log_dir, "64m")
            p3.restart()
            r3 = p3.client()
            wait_until(lambda: r3.xlen("s") == len(made), 20, what="region 3 holding the image again")
            assert _resyncs(r3) >= 1  # its old log did not hold the image: it was sent again
            p3.wait_writable()
            made.append(r3.xadd("s", {"n": "after"}))
            r3.close()
            p3.kill()
            p3.restart()
            r3 = p3.client()
            assert [e[0] for e in r3.xrange("s")] == made
            r3.close()
            _converge(cluster, made)


def _log_of(proc) -> str:
    with open(proc.log_path, encoding="utf-8", errors="replace") as f:
        return f.read()


def test_a_resync_image_is_refused_while_the_log_before_it_cannot_be_written_then_taken_once_it_can():
    with LocalCluster(3) as cluster:
        p3 = cluster.procs[2]
        r1, r2, r3 = cluster.clients()
        made = [r3.xadd("s", {"n": str(i)}) for i in range(20)]
        cluster.sync_wait()
        r3.close()
        p3.stop_keeping_data()
        log_dir = os.path.join(p3.data_dir, "appendonlydir")
        kept = tempfile.mkdtemp(prefix="braid-log-")
        shutil.copytree(log_dir, kept, dirs_exist_ok=True)
        shutil.rmtree(log_dir)
        with small_disk(log_dir, "1m"), ThreadPoolExecutor(1) as pool:
            try:
                shutil.copytree(kept, log_dir, dirs_exist_ok=True)
                p3.restart()
                r3 = p3.client()
                r3.config_set("aof-write-error-timeout-ms", 0)
                p3.wait_writable()
                r3.execute_command("BRAID.REPLICATION", "PAUSE")
                for c in (r1, r2):
                    c.config_set("crdt-repl-backlog-size", 1)
                trimmed = [_trimmed(c) for c in (r1, r2)]
                made += [r1.xadd("s", {"n": str(i)}) for i in range(150)]
                wait_until(lambda: all(_trimmed(c) > t + 100 for c, t in zip((r1, r2), trimmed, strict=True)), 20,
                           what="regions 1 and 2 trimming what region 3 lacks")
                filler = fill(log_dir)
                writer = p3.client()
                held = pool.submit(writer.xadd, "s", {"n": "while full", "pad": BIG})
                with pytest.raises(redis.ResponseError, match=MISCONF):
                    held.result(timeout=20)
                writer.close()
                r3.execute_command("BRAID.REPLICATION", "RESUME")
                refused = "refusing a full-resync image: the append-only file cannot be put on disk first"
                wait_until(lambda: refused in _log_of(p3), 20,
                           what="region 3 refusing the image while its own record cannot be written")
                assert _resyncs(r3) == 0 and r3.xlen("s") == 21  # its old state, and the write it holds
                os.remove(filler)
                # the record is written, then the image is taken and saved: region 3 takes writes on it
                wait_until(lambda: _resyncs(r3) >= 1 and r3.xlen("s") == len(made) + 1, 30,
                           what="region 3 taking the image once its log is on disk")
                ids = [e[0] for e in r3.xrange("s")]
                assert set(made) < set(ids)
                wait_until(lambda: r3.info("persistence")["aof_last_write_status"] == "ok", 20,
                           what="region 3 writing again")
                ids.append(r3.xadd("s", {"n": "after"}))
                r3.close()
                p3.kill()
                p3.restart()
                r3 = p3.client()
                assert [e[0] for e in r3.xrange("s")] == ids
                r3.close()
                cluster.sync_wait(60)
                for c in (r1, r2):
                    assert [e[0] for e in c.xrange("s")] == ids
            finally:
                p3.kill()
                shutil.rmtree(kept, ignore_errors=True)
        r1.close()
        r2.close()


# ---------------------------------------------------------------- 3. a start on a full disk
def test_a_start_on_a_full_disk_says_the_disk_is_full(tmp_path):
    disk = str(tmp_path / "disk")
    port = free_port()
    argv = [sys.executable, "-m", "node", "node", "--port", str(port), "--data-dir", disk]
    with small_disk(disk, "256k"):
        with InProcessServer(Config(dir=disk)) as srv:  # a log, as a region that ran before leaves it
            srv.client().xadd("s", {"f": "v"})
        fill(disk)
        started = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert started.returncode != 0
    assert "cannot listen" not in started.stderr
    log_dir = os.path.join(disk, "appendonlydir")
    assert f"the disk holding {log_dir} is full" in started.stderr, started.stderr
