"""The thread that runs an open log's fsyncs and hands each result back to the event loop.

Why a thread of its own rather than the event loop's default executor: a region of a
cluster fsyncs up to a hundred times a second (``crdt-repl-fsync-interval-ms``, 10 ms), and
each hand-off through ``run_in_executor`` costs the event loop's thread a
``concurrent.futures.Future`` (with a lock and a condition of its own), an asyncio future
chained to it, the pool's bookkeeping and a check that the function is no coroutine
function.  Here a job goes through a ``SimpleQueue`` (its ``put`` and ``get`` are C calls)
and comes back with one ``call_soon_threadsafe``.

The log never starts an fsync before the previous one returned, so one thread is enough;
a region's log starts it when it opens (:meth:`FsyncThread.start`; else it starts with the
first fsync) and it ends once the log closes (after the jobs queued before).  A second one
seals the log's full segments (aof.py): the log starts no thread while the region runs.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

# what a job's caller is told on the event loop: the function's result, or the exception it raised
Done = Callable[[Any, BaseException | None], None]


class FsyncThread:
    def __init__(self, name: str = "braid-fsync") -> None:
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread now, if it is not running (:meth:`run` starts it otherwise).  A region's
        log starts it when it opens, while memory is plentiful: a thread started once memory ran
        out may never boot, and CPython 3.11's ``Thread.start`` then waits for it for ever (the
        region would hang instead of stopping)."""
        if self._thread is None:  # (it ends only when stopped: a job's exception goes to its caller)
            self._jobs = queue.SimpleQueue()  # the thread's own: one stopped never takes another's job
            thread = threading.Thread(target=self._work, args=(self._jobs,), name=self.name, daemon=True)
            # RuntimeError when it cannot start (out of memory for its stack, node/region/supervision.py's
            # ran_out_of_memory): not kept as started, or every later job would wait for it for ever
            thread.start()
            self._thread = thread

    def run(self, fn: Callable[..., Any], args: tuple, done: Done | None) -> None:
        """Run ``fn(*args)`` in the thread; then ``done(result, error)`` on this event loop
        (``done`` None: nobody is told, and no event loop is needed)."""
        loop = asyncio.get_running_loop() if done is not None else None
        self.start()
        self._jobs.put((loop, fn, args, done))

    def stop(self) -> None:
        """The thread ends once the jobs queued before this are done (their callers are told)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    @staticmethod
    def _work(jobs: queue.SimpleQueue) -> None:
        while (job := jobs.get()) is not None:
            loop, fn, args, done = job
            result, error = None, None
            try:
                result = fn(*args)
            except BaseException as e:  # noqa: BLE001 - the caller decides (the log fails the fsync)
                error = e
            if done is None:
                continue
            try:
                loop.call_soon_threadsafe(done, result, error)
            except RuntimeError:
                pass  # the event loop closed meanwhile: nobody waits for this result
