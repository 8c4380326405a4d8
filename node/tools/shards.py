"""``braid node`` of a sharded region: the supervisor of its shard processes.

Theory of operation.  In a database whose cluster file has ``[shards] count = N`` (N > 1),
``braid node --config FILE --region NAME`` runs no region server itself: it starts one
child ``braid node ... --shard K`` per shard (its own command line with ``--shard K``
added, so every option reaches every shard), and watches them.  Each shard is a region
server of its own (node/tools/cli.py runs it on the file's shard view), with its own
ports and data folder; the children write to the supervisor's stdout and stderr, each of
their log lines tagged ``shard-K``.

Restarts.  A shard that exits - a fail-stop, a crash, a kill - is logged (how it ended) and
started again at once, while the others keep serving.  One that dies within
``QUICK_CRASH_S`` of its start is started again after 1 s, then 2 s, and given up after
``MAX_QUICK_CRASHES`` such deaths in a row, with the command that runs it by hand (the
policy ``braid up`` applies to regions); the other shards serve on, and the supervisor
exits (status 1) only when no shard is left.  A shard that could not be started at all
(no interpreter to run it) stops the others, and the supervisor exits 1.

Stopping.  SIGTERM or SIGINT to the supervisor is forwarded (as SIGTERM) to every shard;
the supervisor exits 0 once they have all exited.  SIGHUP is passed on to every shard (each
re-reads its TLS credentials, as a region does on SIGHUP).  A machine-level stop of the supervisor
alone (SIGKILL, an out-of-memory kill) must not leave its shards running unwatched: each
child asks the kernel, between its fork and its exec, to be sent SIGKILL when its parent
dies (``prctl(PR_SET_PDEATHSIG)``, Linux), and exits at once if the supervisor died before
that request took effect.  So a killed supervisor takes its shards with it, as a machine
crash would, and whoever restarts the region restarts all of it.  (Elsewhere than Linux
the children are not tied to their supervisor.)
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.tools.cluster_processes import exit_how

QUICK_CRASH_S = 10.0      # a shard dying sooner after its start crashed "at once"
MAX_QUICK_CRASHES = 3     # in a row: the supervisor stops restarting it
POLL_S = 0.1              # the supervisor's look at its shards
PR_SET_PDEATHSIG = 1      # <linux/prctl.h>

log = logging.getLogger("braid.shards")


@dataclass(slots=True)
class ShardChild:
    number: int
    port: int
    cmd: list[str]
    proc: subprocess.Popen | None = None
    started: float = 0.0
    quick_crashes: int = 0
    restart_at: float | None = None
    given_up: bool = False
    last_code: int = 0


def shard_command(argv: list[str], k: int) -> list[str]:
    """The supervisor's own command line (``argv``: what follows the program name), run as shard ``k``."""
    return [sys.executable, "-m", "node", *argv, "--shard", str(k)]


def die_with_parent() -> Callable[[], None] | None:
    """What a child runs between its fork and its exec so that it dies with this process
    (None where the kernel offers no such request)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def request() -> None:
        if prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the supervisor died before the request: nobody would stop this one
            os._exit(1)

    return request


class ShardSupervisor:
    def __init__(self, region: str, children: list[ShardChild], hand_command: Callable[[int], str]) -> None:
        self.region = region
        self.children = children
        self.hand_command = hand_command
        self.stopping = False
        self.gave_up_code = 1  # the exit status of the last shard given up: the supervisor's when none is left
        self.forwarded: set[int] = set()  # pids told to stop since the last signal
        self.hangup = False  # a SIGHUP to pass on (each shard re-reads its TLS credentials)
        self._preexec = die_with_parent()

    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGHUP:
            self.hangup = True
            return
        self.stopping = True
        self.forwarded.clear()  # (a second signal is forwarded again)

    def _pass_hangup(self) -> None:
        self.hangup = False
        running = [c for c in self._running() if c.proc is not None and c.proc.poll() is None]
        log.info("%s: SIGHUP passed on to %s (each re-reads its TLS credentials)", self.region,
                 ", ".join(f"shard {c.number}" for c in running) or "no shard")
        for c in running:
            assert c.proc is not None
            try:
                c.proc.send_signal(signal.SIGHUP)
            except ProcessLookupError:
                pass

    def _start(self, c: ShardChild) -> None:
        c.proc = subprocess.Popen(c.cmd, preexec_fn=self._preexec)
        c.started = time.monotonic()

    def _running(self) -> list[ShardChild]:
        return [c for c in self.children if c.proc is not None]

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self) -> int:
        for c in self.children:
            if self.stopping:
                break
            try:
                self._start(c)
            except (OSError, subprocess.SubprocessError) as e:
                log.error("%s: cannot start shard %d: %s; stopping the others", self.region, c.number, e)
                self.stopping = True
                self._stop_all()
                return 1
        log.info("%s: %d shards started by this supervisor (pid %d): %s", self.region, len(self.children),
                 os.getpid(), ", ".join(f"shard {c.number} on port {c.port} (pid {c.proc.pid})"
                                        for c in self.children if c.proc is not None))
        told = False
        while True:
            if self.hangup and not self.stopping:
                self._pass_hangup()
            if self.stopping:
                if not told:
                    told = True
                    log.info("%s: stopping its shards", self.region)
                self._forward()
                if not self._reap():
                    log.info("%s: every shard stopped", self.region)
                    return 0
            else:
                self._watch(time.monotonic())
                if all(c.given_up for c in self.children):
                    log.error("%s: no shard left to run: the supervisor stops", self.region)
                    return self.gave_up_code if self.gave_up_code > 0 else 1
            time.sleep(POLL_S)  # the supervisor's look at its shards, not synchronisation

    def _forward(self) -> None:
        for c in self._running():
            assert c.proc is not None
            if c.proc.pid not in self.forwarded and c.proc.poll() is None:
                self.forwarded.add(c.proc.pid)
                try:
                    c.proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def _reap(self) -> bool:
        """While stopping: True as long as a shard runs."""
        for c in self._running():
            assert c.proc is not None
            if c.proc.poll() is not None:
                c.proc = None
        return bool(self._running())

    def _stop_all(self) -> None:
        while True:
            self._forward()
            if not self._reap():
                return
            time.sleep(POLL_S)

    def _watch(self, now: float) -> None:
        for c in self.children:
            if c.given_up:
                continue
            if c.proc is not None:
                code = c.proc.poll()
                if code is None:
                    continue
                self._died(c, code, now)
            elif c.restart_at is not None and now >= c.restart_at:
                c.restart_at = None
                try:
                    self._start(c)
                except (OSError, subprocess.SubprocessError) as e:
                    c.given_up = True
                    log.error("%s: cannot start shard %d again: %s", self.region, c.number, e)
                    continue
                log.info("%s: shard %d started again on port %d (pid %d)", self.region, c.number, c.port,
                         c.proc.pid if c.proc is not None else 0)

    def _died(self, c: ShardChild, code: int, now: float) -> None:
        assert c.proc is not None
        pid, c.proc, c.last_code = c.proc.pid, None, code
        quick = now - c.started < QUICK_CRASH_S
        c.quick_crashes = c.quick_crashes + 1 if quick else 0
        others = [f"shard {o.number}" for o in self.children if o is not c and o.proc is not None]
        log.warning("%s: shard %d (port %d, pid %d) %s%s", self.region, c.number, c.port, pid, exit_how(code),
                    f"; {', '.join(others)} {'keep' if len(others) > 1 else 'keeps'} serving" if others else "")
        if c.quick_crashes >= MAX_QUICK_CRASHES:
            c.given_up, self.gave_up_code = True, code
            log.error("%s: shard %d died %d times in a row within %.0f s of its start: not starting it again "
                      "%s. Once its log lines (tagged shard-%d) say why and it is fixed, run it with: %s, or "
                      "restart the region", self.region, c.number, c.quick_crashes, QUICK_CRASH_S,
                      "(the other shards serve on)" if others else "(no other shard runs)", c.number,
                      self.hand_command(c.number))
            return
        delay = 0 if c.quick_crashes == 0 else 2 ** (c.quick_crashes - 1)
        c.restart_at = now + delay
        log.info("%s: starting shard %d again%s", self.region, c.number, f" in {delay} s" if delay else "")


def run_shards(args: argparse.Namespace, ccfg: ClusterConfig, me: RegionSpec) -> int:
    """``braid node`` of a sharded region: start its shards, restart one that exits, stop them on a signal."""
    argv: list[str] = list(getattr(args, "argv", None) or sys.argv[1:])
    ports = me.shard_ports()
    children = [ShardChild(k, ports[k], shard_command(argv, k)) for k in range(ccfg.shards.count)]

    def by_hand(k: int) -> str:
        return shlex.join(["braid", *argv, "--shard", str(k)])

    return ShardSupervisor(me.name, children, by_hand).run()
