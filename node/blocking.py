"""Blocked clients (XREAD / XREADGROUP with BLOCK).

A handler that finds nothing to return and was asked to block returns a
:class:`Blocked`.  The server parks the client on the listed keys; whenever a
command (or replication) touches one of them, the server calls ``retry()`` for
the clients parked there, oldest first: ``retry`` returns the reply to send,
or ``None`` to stay blocked.  A timeout sends ``timeout_reply``.  The client
processes no further input while blocked, as in Redis.
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


class BlockingRegistry:
    def __init__(self) -> None:
        self.by_key: dict[bytes, list[Any]] = {}  # key -> clients, FIFO
        self.count = 0

    def park(self, client: Any, blocked: Blocked) -> None:
        client.blocked = blocked
        for key in blocked.keys:
            self.by_key.setdefault(key, []).append(client)
        self.count += 1

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
        self.count -= 1

    def waiting_on(self, key: bytes) -> list[Any]:
        return list(self.by_key.get(key, ()))
