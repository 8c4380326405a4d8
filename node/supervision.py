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

What stops a region (:meth:`node.core.RegionCore.fail_stop`):

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
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import RegionCore as Server  # the supervisor needs the core's failed / fail_stop only

log = logging.getLogger("braid.supervision")

# The exit status of a region process that fail-stopped (sysexits' EX_SOFTWARE):
# distinct from 1 (cannot load or listen) and 2 (bad command line or cluster file).
EXIT_FAIL_STOP = 70

# the cron's steps, in the order they run (INFO taskstats, DEBUG CRON-FAIL)
CRON_STEPS = ("idmp-expiry", "log-tick", "auto-snapshot", "backlog-trim", "gc")

BACKOFF_FIRST_S = 1.0   # a failed step waits this long before its next try, doubling
BACKOFF_MAX_S = 30.0


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

    def __init__(self, server: "Server") -> None:
        self.server = server
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
        if now < st.retry_at or self.server.failed is not None:
            return
        st.runs += 1
        try:
            if st.inject:
                st.inject -= 1
                if st.inject_bug:
                    raise InjectedFault(f"DEBUG CRON-FAIL {name}")
                raise OSError(errno.EIO, f"{os.strerror(errno.EIO)} (DEBUG CRON-FAIL {name})")
            t0 = self.server.latency_start()  # LATENCY's event cron-<step> (0: the monitor is off)
            result = step()
            if t0:
                self.server.latency_end(f"cron-{name}", t0)
        except Exception as e:
            self._failed(name, e)
            st.consecutive += 1
            delay = min(BACKOFF_FIRST_S * 2 ** (st.consecutive - 1), BACKOFF_MAX_S)
            st.retry_at = now + delay
            if changes_state and not isinstance(e, OSError):
                self.server.fail_stop(f"the background step {name} failed and may have left the state "
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
    def watch(self, task: "asyncio.Future", name: str) -> "asyncio.Future":
        """A long-lived task must never end with an exception unseen: if it does, fail-stop."""
        def done(t: asyncio.Future) -> None:
            if t.cancelled():
                return
            e = t.exception()
            if e is not None:
                self._failed(name, e)
                self.server.fail_stop(f"the background task {name} ended: {type(e).__name__}: {e}", e)
        task.add_done_callback(done)
        return task

    def loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """The event loop's handler: an exception nothing else caught (a callback, a task
        nobody awaited) is counted here and logged as the loop's default handler does."""
        self._failed("event-loop", context.get("exception") or RuntimeError(context.get("message", "")))
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
