"""The log's fsync thread (node/persistence/fsyncthread.py): jobs run in order in one thread
of their own, and each caller is told its result or its exception on the event loop."""

from __future__ import annotations

import asyncio
import threading

from node.persistence import oplog
from node.persistence.fsyncthread import FsyncThread


def test_results_and_exceptions_come_back_on_the_event_loop_in_order():
    async def scenario():
        worker = FsyncThread()
        loop_thread = threading.get_ident()
        told: list = []
        done = asyncio.Event()

        def job(n: int) -> tuple[int, int]:
            if n == 2:
                raise OSError(5, "Input/output error")
            return n, threading.get_ident()

        def tell(result, error) -> None:
            told.append((result, error, threading.get_ident()))
            if len(told) == 4:
                done.set()

        for n in range(4):
            worker.run(job, (n,), tell)
        await asyncio.wait_for(done.wait(), 10)
        worker.stop()
        assert [r[0] if r is not None else None for r, _, _ in told] == [0, 1, None, 3]  # in order
        assert isinstance(told[2][1], OSError) and told[2][1].errno == 5
        assert all(e is None for i, (_, e, _) in enumerate(told) if i != 2)
        assert {t for _, _, t in told} == {loop_thread}  # told on the event loop's thread
        ran_in = {r[1] for r, _, _ in told if r is not None}
        assert len(ran_in) == 1 and loop_thread not in ran_in  # one thread, not the loop's

    asyncio.run(scenario())


def test_a_stopped_thread_ends_after_its_jobs_and_a_new_job_starts_another():
    async def scenario():
        worker = FsyncThread()
        told: list = []
        first = asyncio.Event()
        worker.run(lambda: "before", (), lambda r, e: (told.append(r), first.set()))
        thread = worker._thread
        worker.stop()
        await asyncio.wait_for(first.wait(), 10)
        thread.join(10)
        assert told == ["before"] and not thread.is_alive()
        second = asyncio.Event()
        worker.run(lambda: "after", (), lambda r, e: (told.append(r), second.set()))
        await asyncio.wait_for(second.wait(), 10)
        assert told == ["before", "after"] and worker._thread is not thread
        worker.stop()

    asyncio.run(scenario())


def test_a_job_finishing_after_its_event_loop_closed_is_dropped_quietly():
    release, finished = threading.Event(), threading.Event()
    worker = FsyncThread()

    def slow() -> str:
        release.wait(10)
        return "late"

    async def scenario():
        worker.run(slow, (), lambda r, e: None)
        worker.run(finished.set, (), lambda r, e: None)  # runs after the late one: the thread lived on

    asyncio.run(scenario())
    release.set()
    assert finished.wait(10)
    worker.stop()


def test_the_log_fsyncs_in_its_thread_and_stops_it_when_closed(tmp_path, monkeypatch):
    ran_in: list[int] = []
    real = oplog._fsync

    def spy(fd, directory, delay_s=0.0, seal=None):
        ran_in.append(threading.get_ident())
        return real(fd, directory, delay_s, seal)

    monkeypatch.setattr(oplog, "_fsync", spy)

    async def scenario():
        log = oplog.OperationLog(str(tmp_path), policy="everysec")
        log.log_idmp_expiry(1_764_000_000_000)  # a record to fsync
        log.write_out()
        before = log.fsyncs
        log.tick()  # the everysec fsync
        for _ in range(500):  # up to 5 s for the thread's answer
            if log.fsyncs > before:
                break
            await asyncio.sleep(0.01)
        thread = log._fsync_thread._thread
        assert log.fsyncs == before + 1 and ran_in and ran_in[0] != threading.get_ident()
        log.close()
        thread.join(10)
        assert not thread.is_alive()

    asyncio.run(scenario())


def test_an_fsync_finishing_after_the_log_closed_starts_no_other(tmp_path, monkeypatch):
    """A region of a cluster stopped under writes: the fsync its log started ends after the log
    closed (which fsyncs everything itself), and must not start the next one on the closed file."""
    release = threading.Event()
    real = oplog._fsync

    def held(fd, directory, delay_s=0.0, seal=None):
        release.wait(10)
        return real(fd, directory, delay_s, seal)

    monkeypatch.setattr(oplog, "_fsync", held)

    async def scenario():
        errors: list[dict] = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
        log = oplog.OperationLog(str(tmp_path), policy="everysec")
        log.replicate(lambda mark: None, lambda: 0.0)
        log.log_idmp_expiry(1_764_000_000_000)
        log.write_out()
        log.tick()  # the fsync starts, and waits for `release`
        thread = log._fsync_thread._thread
        assert thread is not None
        log.log_idmp_expiry(1_764_000_000_001)  # written while it runs: the next fsync's
        log.write_out()
        log.close()
        fsyncs = log.fsyncs
        release.set()
        await asyncio.to_thread(thread.join, 10)
        assert not thread.is_alive()
        await asyncio.sleep(0)  # the loop runs the callback the thread handed it before it ended
        assert errors == []
        assert log.fsyncs == fsyncs + 1  # the callback has run

    asyncio.run(scenario())
