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
* ``APPLY-FAIL n``: the next ``n`` operations of other regions fail to apply; the
  region fail-stops at the first (node/region/supervision.py).
* ``CRON-FAIL step n [IO|BUG]``: the next ``n`` runs of a cron step raise an I/O
  error (retried with backoff) or another exception (a bug: a step that changes
  state then stops the region).
* ``RAISE-AFTER command [arg ...]``: runs a command, then raises as a buggy handler
  would (a blocking read: once a retry serves it): the region answers ``ERR
  internal error`` if the command changed nothing, and fail-stops if it did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node.commands import COMMANDS, subcommand
from node.commands.util import parse_int
from node.region.blocking import Blocked
from node.region.supervision import CRON_STEPS, InjectedFault
from node.resp.encoder import ReplyError

if TYPE_CHECKING:
    from node.region.session import Session

NOT_ALLOWED = ("ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", "
               "you can run it from a local connection, otherwise you need to set this option in the "
               "configuration file, and then restart the server.")
LOCAL_PREFIXES = ("127.", "::1", "localhost", "unix")


def _allowed(client: Session) -> None:
    mode = client.region.config["enable-debug-command"]
    if mode == "yes" or (mode == "local" and client.addr.startswith(LOCAL_PREFIXES)):
        return
    raise ReplyError(NOT_ALLOWED)


def _log(client: Session):
    log = client.region.oplog
    if log is None:
        raise ReplyError("ERR this region keeps no append-only file (appendonly no)")
    return log


@subcommand("debug", "clock-offset")
def debug_clock_offset(client: Session, argv: list[bytes]):
    _allowed(client)
    client.region.skew_clock(parse_int(argv[2]))
    return "OK"


@subcommand("debug", "fsync-delay")
def debug_fsync_delay(client: Session, argv: list[bytes]):
    _allowed(client)
    ms = parse_int(argv[2])
    if ms < 0:
        raise ReplyError("ERR the delay must be zero or more milliseconds")
    _log(client).inject_faults(fsync_delay_s=ms / 1000)
    return "OK"


@subcommand("debug", "disk-full")
def debug_disk_full(client: Session, argv: list[bytes]):
    _allowed(client)
    flag = argv[2].lower()
    if flag not in (b"yes", b"no"):
        raise ReplyError("ERR syntax error")
    _log(client).inject_faults(disk_full=flag == b"yes")
    return "OK"


@subcommand("debug", "apply-fail")
def debug_apply_fail(client: Session, argv: list[bytes]):
    _allowed(client)
    n = parse_int(argv[2])
    if n < 0:
        raise ReplyError("ERR the count must be zero or more")
    if client.region.aa is None:
        raise ReplyError("ERR this region is not part of an Active-Active database")
    client.region.fail_next_applies(n)
    return "OK"


@subcommand("debug", "cron-fail")
def debug_cron_fail(client: Session, argv: list[bytes]):
    _allowed(client)
    step = argv[2].decode("utf-8", "replace").lower()
    if step not in CRON_STEPS:
        raise ReplyError(f"ERR unknown cron step '{step[:64]}' (known: {', '.join(CRON_STEPS)})")
    n = parse_int(argv[3])
    if n < 0 or len(argv) > 5:
        raise ReplyError("ERR syntax error" if len(argv) > 5 else "ERR the count must be zero or more")
    kind = argv[4].lower() if len(argv) == 5 else b"io"
    if kind not in (b"io", b"bug"):
        raise ReplyError("ERR syntax error")
    client.region.supervisor.inject(step, n, kind == b"bug")
    return "OK"


@subcommand("debug", "raise-after")
def debug_raise_after(client: Session, argv: list[bytes]):
    _allowed(client)
    inner = argv[2:]
    cmd = COMMANDS.get(inner[0].lower())
    if cmd is not None and cmd.subcommands and len(inner) >= 2:
        cmd = cmd.subcommands.get(inner[1].lower())
    if cmd is None or cmd.handler is None or not cmd.check_arity(len(inner)) or cmd.name in ("exec", "debug"):
        raise ReplyError("ERR RAISE-AFTER needs a command with its arguments (not EXEC or DEBUG)")
    fault = InjectedFault(f"DEBUG RAISE-AFTER {cmd.fullname}")
    try:
        reply = cmd.handler(client, inner)
    except ReplyError:
        raise fault from None  # its own error: the fault is the raise
    if type(reply) is Blocked:  # a blocking read raises once a retry serves it
        retry = reply.retry

        def retry_then_raise():
            if retry() is not None:
                raise fault
            return None
        reply.retry = retry_then_raise
        return reply
    raise fault


@subcommand("debug", "help")
def debug_help(client: Session, argv: list[bytes]):
    return ["DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CLOCK-OFFSET <milliseconds>", "    Move this region's wall clock (negative: back in time).",
            "FSYNC-DELAY <milliseconds>", "    Make every fsync of the append-only file wait this long.",
            "DISK-FULL <yes|no>", "    Make writes to the append-only file fail with ENOSPC, or stop that.",
            "APPLY-FAIL <count>", "    Make the next operations of other regions fail to apply (fail-stop).",
            "CRON-FAIL <step> <count> [IO|BUG]",
            f"    Make the next runs of a cron step ({', '.join(CRON_STEPS)}) raise.",
            "RAISE-AFTER <command> [<arg> ...]", "    Run a command, then raise as a buggy handler would.",
            "HELP", "    Print this help."]
