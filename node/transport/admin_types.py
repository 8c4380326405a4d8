"""What both sides of the admin service share, without gRPC.

The region raises :class:`FlushNotReady` (node/activeactive/region.py) and the admin service
(node/transport/admin.py) turns it into FAILED_PRECONDITION; a coordinator of a membership
change (node/activeactive/coordinator.py) catches :class:`AdminCallError` from whichever voters it
is given.  Kept here so those modules, and the simulation that drives them, need not load
the gRPC client or server to name them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AdminTls:
    """What braid-admin presents and trusts: PEM bytes, and the name the region's
    certificate must carry (None: the host name dialed)."""

    ca: bytes
    cert: bytes
    key: bytes
    server_name: str | None = None


class AdminCallError(Exception):
    """A call that failed; ``unreachable`` tells a down region from a refused request."""

    def __init__(self, message: str, unreachable: bool, timed_out: bool = False, tls_only: bool = False,
                 wrong_token: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        self.timed_out = timed_out  # connected (or connecting) but no answer within the call's timeout
        self.tls_only = tls_only  # called in plain text, the port speaks TLS only
        self.wrong_token = wrong_token  # the region's cluster token is another


class FlushNotReady(ValueError):
    """A cluster-wide flush whose region still lacked operations when its time was up."""
