"""The ways a replication link ends that the link's rules decide, not its transport (pure).

They subclass the connection errors a transport already ends a link on.  Kept apart from
crdt/sync.py because that module is compiled (setup.py) and a compiled class cannot
subclass ``ConnectionError``; crdt/sync.py exports the first two.  Every driver of a link -
the gRPC transport, the simulation - catches them from here.
"""

from __future__ import annotations


class ProtocolError(ConnectionError):
    """A peer broke the link protocol: the link ends and nothing of the offending frames is applied."""


class NeedsResync(ConnectionResetError):
    """The peer needs envelopes the backlog no longer holds: restart the link for a full resync."""

    def __init__(self) -> None:
        super().__init__("the peer needs trimmed operations: reconnect for a full resync")


class MembershipBehind(ConnectionResetError):
    """An operation of (or depending on) a region this region's member list does not know:
    the link restarts, and the handshake brings the newer list."""
