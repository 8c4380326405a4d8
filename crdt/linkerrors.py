"""The two ways a replication link ends that crdt/sync.py decides (pure).

They subclass the connection errors a transport already ends a link on.  Kept apart from
crdt/sync.py because that module is compiled (setup.py) and a compiled class cannot
subclass ``ConnectionError``; crdt/sync.py exports both.
"""

from __future__ import annotations


class ProtocolError(ConnectionError):
    """A peer broke the link protocol: the link ends and nothing of the offending frames is applied."""


class NeedsResync(ConnectionResetError):
    """The peer needs envelopes the backlog no longer holds: restart the link for a full resync."""

    def __init__(self) -> None:
        super().__init__("the peer needs trimmed operations: reconnect for a full resync")
