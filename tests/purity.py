"""The guard that keeps a test marked ``pure`` pure: no process started, no socket opened.

While a ``pure`` test sets up and runs (tests/conftest.py), starting a process
(``subprocess``, ``os.fork``, ``os.posix_spawn``, ``os.system``), binding or connecting a
socket (``socket.socket.bind`` / ``connect`` / ``connect_ex``, which every client and
server written in Python goes through) or making a gRPC server or channel raises
:class:`ImpureCall`.  It is a ``BaseException``, so a retry loop's ``except Exception``
does not swallow it, and every call is also recorded: a test that swallows it anyway
still fails, naming the call.  An unnamed ``socket.socketpair`` (asyncio's self-pipe) is
allowed.  Threads running before the test began (a server an earlier test left running)
are not watched; the test's own threads are.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import sys
import threading


class ImpureCall(BaseException):
    """A test marked ``pure`` started a process or opened a socket."""


class _Guard:
    def __init__(self) -> None:
        self.active = False
        self.ignored_threads: set[int] = set()
        self.calls: list[str] = []

    def check(self, what: str) -> None:
        if self.active and threading.get_ident() not in self.ignored_threads:
            self.calls.append(what)
            raise ImpureCall(f"a test marked pure {what}: it belongs under `process` or `external` "
                             f"(tests/kinds.py)")


_GUARD = _Guard()


def _watched(what: str, fn):
    @functools.wraps(fn)
    def watched(*args, **kwargs):
        _GUARD.check(what)
        return fn(*args, **kwargs)
    return watched


def _targets() -> list[tuple[object, str, str]]:
    """(owner, attribute, what calling it does) for every call a pure test may not make."""
    targets: list[tuple[object, str, str]] = [
        (subprocess.Popen, "__init__", "started a process (subprocess)"),
        (socket.socket, "bind", "bound a socket"),
        (socket.socket, "connect", "connected a socket"),
        (socket.socket, "connect_ex", "connected a socket"),
    ]
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            targets.append((os, name, f"started a process (os.{name})"))
    grpc = sys.modules.get("grpc")
    if grpc is not None:
        for name in ("server", "insecure_channel", "secure_channel"):
            targets.append((grpc, name, f"made a gRPC {name.replace('_', ' ')} (grpc.{name})"))
        aio = getattr(grpc, "aio", None)
        if aio is not None:
            for name in ("server", "insecure_channel", "secure_channel"):
                targets.append((aio, name, f"made a gRPC {name.replace('_', ' ')} (grpc.aio.{name})"))
    return targets


@contextlib.contextmanager
def guarded(phase: str):
    """Watch the calls above while the body runs; fail if any was made, even if it was caught."""
    saved = []
    for owner, name, what in _targets():
        own = vars(owner).get(name)  # None: inherited (socket.socket's methods are _socket.socket's)
        saved.append((owner, name, own))
        setattr(owner, name, _watched(what, getattr(owner, name)))
    _GUARD.ignored_threads = {t.ident for t in threading.enumerate()
                              if t.ident is not None and t is not threading.current_thread()}
    _GUARD.calls = []
    _GUARD.active = True
    try:
        yield
    finally:
        _GUARD.active = False
        for owner, name, own in reversed(saved):
            if own is None:
                delattr(owner, name)
            else:
                setattr(owner, name, own)
        calls, _GUARD.calls = _GUARD.calls, []
    if calls:  # reached only when the test itself did not fail: it swallowed ImpureCall
        raise ImpureCall(f"a test marked pure made these calls during {phase}, and caught the error: "
                         f"{sorted(set(calls))} (tests/kinds.py)")
