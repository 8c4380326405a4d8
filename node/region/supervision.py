"""Fail-stop, and the supervision of a region's background work.

Theory of operation
-------------------
A region whose state may be wrong stops instead of serving, logging or
replicating it (fail-stop, as FoundationDB and TigerBeetle do).  Continuing
would be worse than stopping: an operation skipped here diverges this region
from every other one for good, and a half-applied command would be replicated
and logged as if it had run.  Stopping is safe because a restart replays the
append-only file - which holds only whole turns the region finished - and
catches up from the peers, which resend whatever this region never
acknowledged.

What stops a region (:meth:`node.region.core.RegionCore.fail_stop`):

* an operation of another region that cannot be decoded or applied
  (:class:`ApplyFailed`; the causal log has not counted it, see crdt/causal.py);
* a command whose handler raised after it changed state (the dirty counter
  moved or it issued operations) - a handler that raised having changed
  nothing is answered ``ERR internal error`` and counted, and the region keeps
  serving;
* a background step that changes state (IDMP expiry, backlog trim, garbage
  collection) failing other than by an I/O error;
* a background task ending with an exception.

On fail-stop the region logs a CRITICAL message saying why, then at once:
drops the records of the turn not yet handed to the OS (no reply covering them
was sent), drops the replies not yet sent, closes every client connection and
every replication link, stops listening and stops its cron.  The process then
exits with status :data:`EXIT_FAIL_STOP`.  An in-process server (tests) just
stops; the deterministic simulation crashes the simulated region.

Running out of memory stops the region too, wherever it happens (:func:`ran_out_of_memory`:
a MemoryError, ENOMEM, or a thread that cannot start): in a command - whether or not it
changed state, since an allocation can fail between two steps of a change that the dirty
counter does not see -, in applying another region's operations, in writing the log, in
a cron step, or in anything the event loop runs (the loop's handler,
:meth:`Supervisor.loop_exception`, fail-stops on it).  The log line says so: "FAIL-STOP:
region N stops: out of memory while ...".  A region keeps a small reserve of address space
(:func:`reserve_memory`, 16 MiB, mapped when ``braid node`` starts and never touched) and
gives it back first, so that the fail-stop can still log and close what it holds.  Nothing
acknowledged is lost: a reply leaves only after its records reached the OS (or the disk,
under ``appendfsync always``), and the records of the failing turn are dropped.  The
native code a region runs raises too (msgspec's ``encode_into``, hiredis, uvloop), with two
exceptions: msgspec's bytes-returning encoders crash on a failed allocation (so the log
and snapshots encode with node/persistence/safe_encode.py), and gRPC's C core aborts the
process (``gpr_malloc``: SIGABRT).  ``faulthandler`` is on in a region, so a native crash
leaves the Python stacks in its log (stderr).

Background steps (the once-a-second cron) run under a :class:`Supervisor`: each
step's failure is logged with its traceback and counted (``INFO stats``:
``background_task_failures``; ``INFO taskstats``: per step), and the step is
retried with exponential backoff while the others keep running; an I/O error
(``OSError``) is always retried.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import mmap
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from node.region.core import RegionCore  # the supervisor needs the core's failed / fail_stop only

log = logging.getLogger("braid.supervision")

# The exit status of a region process that fail-stopped (sysexits' EX_SOFTWARE):
# distinct from 1 (cannot load or listen) and 2 (bad command line or cluster file).
EXIT_FAIL_STOP = 70

# the cron's steps, in the order they run (INFO taskstats, DEBUG CRON-FAIL)
CRON_STEPS = ("idmp-expiry", "log-tick", "auto-snapshot", "backlog-trim", "gc")

BACKOFF_FIRST_S = 1.0   # a failed step waits this long before its next try, doubling
BACKOFF_MAX_S = 30.0


RESERVE_BYTES = 16 * 1024 * 1024  # address space kept for a fail-stop after memory ran out

_reserve: mmap.mmap | None = None


def reserve_memory(size: int = RESERVE_BYTES) -> None:
    """Map ``size`` bytes of address space and never touch them (no RAM is used): given back by
    :func:`release_memory_reserve` when memory runs out, so that the fail-stop can log and
    close what it holds under an address-space limit (``ulimit -v``, ``prlimit --as``)."""
    global _reserve
    if _reserve is None:
        try:
            _reserve = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, ValueError):
            _reserve = None  # (no room even for that: the region runs without it)


def release_memory_reserve() -> bool:
    """Give back the reserve (True if there was one)."""
    global _reserve
    reserve, _reserve = _reserve, None
    if reserve is None:
        return False
    reserve.close()
    return True


def ran_out_of_memory(e: BaseException | None) -> bool:
    """Did ``e`` come from memory running out: a MemoryError, an OSError ENOMEM, or a thread
    that could not start (its stack is address space too) - itself, or what caused it?"""
    for _ in range(16):  # the chain of causes and contexts (bounded: it may loop)
        if e is None:
            return False
        if isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno == errno.ENOMEM):
            return True
        if isinstance(e, RuntimeError) and "can't start new thread" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def oom_detail(e: BaseException) -> str:
    """How an out-of-memory failure is told in the log line: the exception, and the innermost
    place in Braid's own code it came from (the traceback follows the line)."""
    what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    where, tb = None, e.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        for top in ("/node/", "/crdt/"):
            if top in path:
                name = getattr(tb.tb_frame.f_code, "co_qualname", tb.tb_frame.f_code.co_name)
                where = f"{name} ({top[1:]}{path.rsplit(top, 1)[1]}:{tb.tb_lineno})"
        tb = tb.tb_next
    return f"{what} in {where}" if where else what


def _loop_activity(context: dict) -> str:
    """What the event loop was running when an exception reached its handler, for the log."""
    handle = context.get("handle")
    if handle is not None:  # asyncio's Handle has its callback; uvloop's only names it: <Handle S.f>
        callback = getattr(handle, "_callback", None)
        name = getattr(callback, "__qualname__", None) or repr(handle).removeprefix("<Handle ").removesuffix(">")
        if name.endswith("finish_turn"):
            return f"ending a turn: writing this turn's records to the append-only file and sending replies ({name})"
        return f"running {name}"
    protocol = context.get("protocol")
    if protocol is not None:
        return f"serving a connection ({type(protocol).__name__}: reading, running or answering its commands)"
    task = context.get("task") or context.get("future")
    if task is not None:
        get_name = getattr(task, "get_name", None)
        return f"running the task {get_name() if get_name is not None else task!r}"
    return context.get("message") or "running the event loop"


class RegionStopped(Exception):
    """The region fail-stopped while a command ran: nothing after it may run (EXEC)."""


class ApplyFailed(ValueError):
    """An operation of another region could not be decoded or applied.  A ValueError, so
    that a replay of the append-only file reports it as a record it cannot load.
    ``applied``: of a run of operations applied together, how many were applied before
    this one (crdt/causal.py counts them)."""

    def __init__(self, reason: str, applied: int = 0) -> None:
        super().__init__(reason)
        self.applied = applied


class InjectedFault(RuntimeError):
    """A failure injected by ``DEBUG`` (tests and the chaos suite)."""


@dataclass
class StepStats:
    """One supervised step: INFO taskstats."""

    runs: int = 0
    failures: int = 0
    consecutive: int = 0        # failures since the last success
    last_error: str = ""
    retry_at: float = 0.0       # monotonic time before which the step is not run again
    inject: int = 0             # DEBUG CRON-FAIL: runs still to fail
    inject_bug: bool = False    # ...with a non-I/O error (a bug) rather than an I/O error


class Supervisor:
    """Runs a region's background steps and watches its long-lived tasks."""

    def __init__(self, core: RegionCore) -> None:
        self.core = core
        self.steps: dict[str, StepStats] = {}
        self.failures = 0  # every background failure: steps, tasks, exceptions the loop caught

    def stats(self, name: str) -> StepStats:
        st = self.steps.get(name)
        if st is None:
            st = self.steps[name] = StepStats()
        return st

    # ------------------------------------------------------------ steps
    def run_step(self, name: str, step: Callable[[], Any], changes_state: bool, now: float | None = None) -> Any:
        """Run one step of the cron unless it is backing off after a failure; returns what
        the step returned (None when it did not run or failed).

        A failure is logged and counted, and the step backs off.  When the step changes
        state and the failure is not an I/O error, the state may be wrong: fail-stop.
        """
        st = self.stats(name)
        now = time.monotonic() if now is None else now
        if now < st.retry_at or self.core.failed is not None:
            return
        st.runs += 1
        try:
            if st.inject:
                st.inject -= 1
                if st.inject_bug:
                    raise InjectedFault(f"DEBUG CRON-FAIL {name}")
                raise OSError(errno.EIO, f"{os.strerror(errno.EIO)} (DEBUG CRON-FAIL {name})")
            t0 = self.core.latency_start()  # LATENCY's event cron-<step> (0: the monitor is off)
            result = step()
            if t0:
                self.core.latency_end(f"cron-{name}", t0)
        except Exception as e:
            self._failed(name, e)
            st.consecutive += 1
            delay = min(BACKOFF_FIRST_S * 2 ** (st.consecutive - 1), BACKOFF_MAX_S)
            st.retry_at = now + delay
            if ran_out_of_memory(e):  # whatever the step: a region out of memory stops (see above)
                self.core.fail_stop(f"out of memory while running the background step {name}: {oom_detail(e)}", e)
            elif changes_state and not isinstance(e, OSError):
                self.core.fail_stop(f"the background step {name} failed and may have left the state "
                                      f"half changed: {type(e).__name__}: {e}", e)
            else:
                log.error("background step %s failed (failure %d in a row): retrying in %.0fs",
                          name, st.consecutive, delay, exc_info=e)
            return None
        st.consecutive = 0
        return result

    def inject(self, name: str, count: int, bug: bool) -> None:
        """DEBUG CRON-FAIL: the next ``count`` runs of step ``name`` raise."""
        st = self.stats(name)
        st.inject, st.inject_bug = count, bug

    def _failed(self, name: str, e: BaseException) -> None:
        st = self.stats(name)
        st.failures += 1
        st.last_error = type(e).__name__
        self.failures += 1

    # ------------------------------------------------------------ long-lived tasks
    def watch(self, task: asyncio.Future, name: str) -> asyncio.Future:
        """A long-lived task must never end with an exception unseen: if it does, fail-stop."""
        def done(t: asyncio.Future) -> None:
            if t.cancelled():
                return
            e = t.exception()
            if e is not None:
                self._failed(name, e)
                self.core.fail_stop(f"the background task {name} ended: {type(e).__name__}: {e}", e)
        task.add_done_callback(done)
        return task

    def loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """The event loop's handler: an exception nothing else caught (a callback, a task
        nobody awaited) is counted here and logged as the loop's default handler does.  One
        that says memory ran out - a client's input, a command's log record or reply, the end
        of a turn's log write - stops the region: what it interrupted may have changed state
        half way (fail-stop drops the turn's records and replies)."""
        e = context.get("exception")
        if e is not None and ran_out_of_memory(e):
            release_memory_reserve()  # first: what follows allocates
            self._failed("event-loop", e)
            self.core.fail_stop(f"out of memory while {_loop_activity(context)}: {oom_detail(e)}", e)
            return
        self._failed("event-loop", e or RuntimeError(context.get("message", "")))
        loop.default_exception_handler(context)

    # ------------------------------------------------------------ INFO
    def info_stats(self) -> list[str]:
        return [f"background_task_failures:{self.failures}"]

    def info_taskstats(self, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        out = []
        for name, st in sorted(self.steps.items()):
            backoff = max(0, int((st.retry_at - now) * 1000))
            out.append(f"taskstat_{name}:runs={st.runs},failures={st.failures},"
                       f"consecutive_failures={st.consecutive},last_error={st.last_error or 'none'},"
                       f"retry_in_ms={backoff}")
        return out
