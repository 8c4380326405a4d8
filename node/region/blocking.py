"""Blocked clients (XREAD / XREADGROUP with BLOCK; WAIT, WAITAOF and BRAID.WAITFOR).

A handler that finds nothing to return and was asked to block returns a
:class:`Blocked`.  The server parks the client on the listed keys; whenever a
command (or replication) touches one of them, the server calls ``retry()`` for
the clients parked there, oldest first: ``retry`` returns the reply to send,
or ``None`` to stay blocked.  A timeout sends ``timeout_reply``.  The client
processes no further input while blocked, as in Redis.

A client in WAIT, WAITAOF or BRAID.WAITFOR waits on no key (``wakes_on_progress``): the
server retries it whenever replication progresses, and at its timeout it gets what
``timeout_reply_of`` says then (the count reached).

A blocked XREADGROUP is woken when one of its keys is deleted (``unblock_on_nokey``,
Redis's flag of the same name): its retry answers NOGROUP.  The registry counts the
keys such readers wait on (INFO ``total_blocking_keys_on_nokey``) and the readers
with a timeout (``clients_in_timeout_table``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Blocked:
    keys: list[bytes]
    timeout_ms: int  # 0 = forever
    retry: Callable[[], Any]
    timeout_reply: Any = None
    # also retry at the time this returns (XREADGROUP CLAIM: when an entry turns idle)
    next_wake_ms: Callable[[], int | None] | None = None
    handle: Any = field(default=None)  # the loop timer, set by the server
    wake_handle: Any = field(default=None)
    argv: list[bytes] | None = None  # the command, set by the server: a served retry is logged as it
    unblock_on_nokey: bool = False  # XREADGROUP: a deleted key wakes it (the retry answers NOGROUP)
    ran_us: int = 0  # how long the command ran before it blocked: its slow log time once it ends (core.py)
    # the reply at the timeout when it is not a constant (WAIT: the count reached by then)
    timeout_reply_of: Callable[[], Any] | None = None
    # retried whenever replication progresses, not when a key changes (WAIT, WAITAOF,
    # BRAID.WAITFOR: node/commands/waits.py)
    wakes_on_progress: bool = False


class BlockingRegistry:
    def __init__(self) -> None:
        self.by_key: dict[bytes, list[Any]] = {}  # key -> clients, FIFO
        self.on_nokey: dict[bytes, int] = {}  # key -> how many unblock_on_nokey clients wait on it
        self.count = 0
        self.with_timeout = 0
        self.on_progress: list[Any] = []  # clients retried when replication progresses, FIFO

    def park(self, client: Any, blocked: Blocked) -> None:
        client.blocked = blocked
        for key in blocked.keys:
            self.by_key.setdefault(key, []).append(client)
            if blocked.unblock_on_nokey:
                self.on_nokey[key] = self.on_nokey.get(key, 0) + 1
        self.count += 1
        if blocked.timeout_ms > 0:
            self.with_timeout += 1
        if blocked.wakes_on_progress:
            self.on_progress.append(client)

    def unpark(self, client: Any) -> None:
        blocked = client.blocked
        if blocked is None:
            return
        client.blocked = None
        if blocked.handle is not None:
            blocked.handle.cancel()
        if blocked.wake_handle is not None:
            blocked.wake_handle.cancel()
        for key in blocked.keys:
            waiters = self.by_key.get(key)
            if waiters and client in waiters:
                waiters.remove(client)
                if not waiters:
                    del self.by_key[key]
            if blocked.unblock_on_nokey:
                n = self.on_nokey[key] - 1
                if n:
                    self.on_nokey[key] = n
                else:
                    del self.on_nokey[key]
        self.count -= 1
        if blocked.timeout_ms > 0:
            self.with_timeout -= 1
        if blocked.wakes_on_progress:
            self.on_progress.remove(client)

    def waiting_on(self, key: bytes) -> list[Any]:
        return list(self.by_key.get(key, ()))
