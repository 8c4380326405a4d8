"""One client's session with a region, without a connection.

A handler of a command (node/commands/) sees its client as a :class:`Session`: the protocol
version, the name, the user and authentication, a MULTI queue, watched keys, a blocked read -
and, through :attr:`Session.region`, what the region offers commands
(:class:`node.commands.context.Region`: the keyspace, the settings, the clock, the logs and
counters), never the driver that runs it.  The asyncio server's
:class:`node.runtime.connection.ClientConnection` is a session with a socket; a replay, the
region's own commands and the simulation use a bare one (their replies go nowhere or to the
simulated client).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from node import commands as cmdtable
from node.region.blocking import Blocked

if TYPE_CHECKING:
    from node.commands.context import Region
    from node.region.db import Database
    from node.security.acl_users import User


class Session:
    """One client's session state, without a connection (see the module's docstring)."""

    # whether a long command may be prepared in slices while this client waits (node/region/slicing.py):
    # a bare session gets every reply at once
    may_slice = False

    def __init__(self, region: Region) -> None:
        self.region = region
        self.id = region.next_client_id()
        self.resp3 = False
        self.name: bytes = b""
        self.lib_name: bytes = b""
        self.lib_ver: bytes = b""
        # as Redis: authenticated at once when default needs no password; None: the region's own
        # commands (braid-admin flush), which no ACL rule applies to
        self.user: User | None = region.acl.default
        self.authenticated = not region.acl.auth_required()
        self.multi: list[list[bytes]] | None = None
        self.multi_error = False
        self.watched: dict[bytes, int] = {}
        self.blocked: Blocked | None = None
        self.closing = False
        self.created = time.time()
        self.last_interaction = self.created
        self.last_command = b"NULL"
        self.addr = "?:0"
        self.laddr = "?:0"
        self.in_exec = False
        # a long command's value prepared in slices, for its run again: (its argv, the value)
        self.prepared: tuple[list[bytes], Any] | None = None
        self.logged_upto = 0        # the last operation-log record this client's own commands appended
        # the number of this region's last operation its writes minted (WAIT), and per origin the
        # writes of read-your-writes tokens it waited for (BRAID.WAITFOR): node/commands/waits.py
        self.wrote_upto = 0
        self.fence: dict[int, int] = {}

    @property
    def db(self) -> Database:
        return self.region.db

    def input_buffered(self) -> int:
        """Bytes of this client's input not yet run (a bare session has no input buffer)."""
        return 0

    def output_buffered(self) -> int:
        """Bytes of replies this client has not read yet (a bare session keeps none)."""
        return 0

    def queued_denyoom(self) -> bool:
        """Does this client's transaction hold a command that adds data (EXEC is refused then)?"""
        for argv in self.multi or ():
            cmd = cmdtable.COMMANDS.get(argv[0].lower())
            if cmd is not None and cmd.subcommands and len(argv) >= 2:
                cmd = cmd.subcommands.get(argv[1].lower(), cmd)
            if cmd is not None and cmd.denyoom:
                return True
        return False

    def needs_auth(self) -> bool:
        return not self.authenticated and self.region.acl.auth_required()
