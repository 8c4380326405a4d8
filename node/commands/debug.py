"""DEBUG: fault injection for the chaos suite (Redis's DEBUG, with Braid's own subcommands).

Like Redis, the command is refused unless ``enable-debug-command`` is ``yes`` (or
``local`` and the client is on a loopback address), a setting that can only be
given at start-up.  The faults are the ones a real region meets and that the
chaos suite cannot make from outside the process:

* ``CLOCK-OFFSET ms``: move this region's wall clock (negative jumps it back).
  Strict IDs stay above everything the region holds whatever the clock says.
* ``FSYNC-DELAY ms``: every fsync of the append-only file first waits this long (a slow disk).
* ``DISK-FULL yes|no``: writes to the append-only file fail with ENOSPC; the
  region answers writes with MISCONF until the disk "frees up" and the cron
  manages to write the held records.
"""

from __future__ import annotations

from ..resp.encoder import ReplyError
from . import container, subcommand
from .util import parse_int

container("debug", -2, group="server", since="1.0.0",
          summary="A container for debugging commands (Braid: fault injection for chaos tests).")

NOT_ALLOWED = ("ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", "
               "you can run it from a local connection, otherwise you need to set this option in the "
               "configuration file, and then restart the server.")
LOCAL_PREFIXES = ("127.", "::1", "localhost", "unix")


def _allowed(client) -> None:
    mode = client.server.config["enable-debug-command"]
    if mode == "yes" or (mode == "local" and client.addr.startswith(LOCAL_PREFIXES)):
        return
    raise ReplyError(NOT_ALLOWED)


def _log(client):
    log = client.server.oplog
    if log is None:
        raise ReplyError("ERR this region keeps no append-only file (appendonly no)")
    return log


@subcommand("debug", "clock-offset", 3, "admin noscript loading stale", since="0.1.0",
            summary="Moves this region's wall clock by a number of milliseconds (negative: back).",
            complexity="O(1)")
def debug_clock_offset(client, argv: list[bytes]):
    _allowed(client)
    client.server.clock_offset_ms = parse_int(argv[2])
    return "OK"


@subcommand("debug", "fsync-delay", 3, "admin noscript loading stale", since="0.1.0",
            summary="Makes every fsync of the append-only file wait this many milliseconds.",
            complexity="O(1)")
def debug_fsync_delay(client, argv: list[bytes]):
    _allowed(client)
    ms = parse_int(argv[2])
    if ms < 0:
        raise ReplyError("ERR the delay must be zero or more milliseconds")
    _log(client).fsync_delay_s = ms / 1000
    return "OK"


@subcommand("debug", "disk-full", 3, "admin noscript loading stale", since="0.1.0",
            summary="Makes writes to the append-only file fail as on a full disk (yes) or succeed again (no).",
            complexity="O(1)")
def debug_disk_full(client, argv: list[bytes]):
    _allowed(client)
    flag = argv[2].lower()
    if flag not in (b"yes", b"no"):
        raise ReplyError("ERR syntax error")
    _log(client).disk_full = flag == b"yes"
    return "OK"


@subcommand("debug", "help", 2, "loading stale", since="0.1.0", summary="Shows helpful text about the different subcommands.",
            complexity="O(1)")
def debug_help(client, argv: list[bytes]):
    return ["DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CLOCK-OFFSET <milliseconds>", "    Move this region's wall clock (negative: back in time).",
            "FSYNC-DELAY <milliseconds>", "    Make every fsync of the append-only file wait this long.",
            "DISK-FULL <yes|no>", "    Make writes to the append-only file fail with ENOSPC, or stop that.",
            "HELP", "    Print this help."]
