"""WAIT, WAITAOF and read-your-writes: a client that waits until other regions hold its writes.

Theory of operation
-------------------
Replication between regions is asynchronous: a write is acknowledged by the region that took
it, and a region that dies for good takes with it what it had not sent yet.  These commands
let one client, for the writes that matter, wait until they are held elsewhere.

*A client's writes.*  Every operation a region mints carries the next number of its own
origin, and depends on the one before, so a region that applied operation ``n`` of region R
holds every earlier one of R and everything they depended on.  A session keeps the number of
the last operation its commands minted here (``Session.wrote_upto``) and the last record
they appended to the operation log (``Session.logged_upto``).

*Who holds them.*  Peers acknowledge what they hold, and an acknowledgement covers only what
the peer's operation log handed to its OS (node/activeactive/hub.py, ``acknowledgement``): a
SIGKILL of that peer loses none of it.  Acknowledgements also say what is on the peer's disk
(``Ack.synced``).  ``WAIT numregions timeout`` counts the other regions that are active
members, have their link up and not paused, and acknowledged ``wrote_upto`` since the link came
up (a region joining, leaving, removed, paused or unreachable does not count: a leaving region
hands over its own operations, not everything it holds); ``WAITAOF numlocal numregions timeout`` counts this region's
fsync of ``logged_upto`` (0 or 1) and the regions that have ``wrote_upto`` on disk.  Counting
reads what the links already exchange: no round trip is added when enough have arrived.

*Waiting.*  As in Redis, the count is answered at once when it is reached, and inside MULTI
(where nothing blocks); otherwise the client blocks until it is reached or the timeout (ms, 0:
for ever) passes, and then gets the count reached.  The region retries waiting clients
whenever replication progresses (an ack raised what a peer holds, a batch of operations was
applied here, an fsync ended: ``RegionCore.replication_progressed``).  WAITAOF with numlocal
1 starts an fsync of the client's records at once, whatever ``appendfsync`` says.  A client
that blocks has the links ask their peers to acknowledge its writes at once (``Ack.ack_wanted``):
acks are otherwise paced, and a link that carries only this region's own operations is
acknowledged lazily, five ack intervals apart.

*Read your writes elsewhere.*  ``BRAID.TOKEN`` answers a token naming, per origin region, the
last operation the session made or waited for (``"1:42,3:7"``); ``BRAID.WAITFOR token
timeout`` at any region blocks until that region applied them (1), or the timeout passed
(0).  A session that waited for a token carries it on: the token it gets next names those
writes too, so a client moving between regions keeps one token.  A token naming a region
that is not a member, or writes of a removed region past what the others kept of it, can
never be applied: an error says so.

The promise is WAIT's, not consensus: a region that acknowledged can still be removed by
force, and the count says nothing of regions that apply the writes later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crdt.membership import REMOVED
from node.commands import command
from node.commands.util import parse_int, parse_positive_long, parse_range_long, parse_timeout_ms
from node.region.blocking import Blocked
from node.region.lone import WITHDRAWN
from node.resp.encoder import ReplyError

if TYPE_CHECKING:
    from node.activeactive.region import ActiveActive
    from node.region.session import Session

ERR_BAD_TOKEN = "ERR invalid read-your-writes token (expected origin:number pairs separated by commas)"


def _held_by(aa: ActiveActive | None, n: int, on_disk: bool) -> int:
    return 0 if aa is None else aa.regions_holding(n, on_disk)


@command("wait")
def wait(client: Session, argv: list[bytes]) -> Any:
    wanted = parse_int(argv[1])
    timeout = parse_timeout_ms(argv[2], client.region.now_ms())
    aa, n = client.region.aa, client.wrote_upto

    def count() -> int:
        return _held_by(aa, n, False)

    def retry() -> int | None:
        now = count()
        return now if now >= wanted else None

    reached = count()
    if reached >= wanted or client.in_exec:
        return reached
    if aa is not None and n != WITHDRAWN:
        aa.hub.ask_acks(n)
    return Blocked([], timeout, retry, timeout_reply_of=count, wakes_on_progress=True)


@command("waitaof")
def waitaof(client: Session, argv: list[bytes]) -> Any:
    numlocal = parse_range_long(argv[1], 0, 1)
    wanted = parse_positive_long(argv[2])
    region = client.region
    timeout = parse_timeout_ms(argv[3], region.now_ms())
    oplog = region.oplog
    if numlocal and oplog is None:
        raise ReplyError("ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.")
    aa, n, record = region.aa, client.wrote_upto, client.logged_upto

    def counts() -> list[int]:
        local = 0 if oplog is None else int(oplog.synced >= record)
        return [local, _held_by(aa, n, True)]

    reached = counts()
    if (reached[0] >= numlocal and reached[1] >= wanted) or client.in_exec:
        return reached
    if numlocal and not reached[0]:
        assert oplog is not None  # (refused above)
        oplog.after_sync(record, region.replication_progressed)  # an fsync of its records, now
    if aa is not None and reached[1] < wanted and n != WITHDRAWN:
        aa.hub.ask_acks(n)

    def retry() -> list[int] | None:
        now = counts()
        return now if now[0] >= numlocal and now[1] >= wanted else None

    return Blocked([], timeout, retry, timeout_reply_of=counts, wakes_on_progress=True)


# ------------------------------------------------------------ read your writes
def format_token(fence: dict[int, int]) -> bytes:
    return ",".join(f"{origin}:{n}" for origin, n in sorted(fence.items()) if n).encode()


def parse_token(arg: bytes) -> dict[int, int]:
    fence: dict[int, int] = {}
    if not arg:
        return fence
    for part in arg.split(b","):
        origin_s, sep, n_s = part.partition(b":")
        origin, n = (parse_int(origin_s, ERR_BAD_TOKEN), parse_int(n_s, ERR_BAD_TOKEN)) if sep else (-1, -1)
        if origin < 1 or n < 0 or origin in fence:
            raise ReplyError(ERR_BAD_TOKEN)
        fence[origin] = n
    return fence


def session_fence(client: Session) -> dict[int, int]:
    """What the session wrote here and waited for anywhere, per origin."""
    fence = dict(client.fence)
    own = client.region.region
    if client.wrote_upto > fence.get(own, 0):
        fence[own] = client.wrote_upto
    return fence


def _member_region(client: Session) -> ActiveActive:
    aa = client.region.aa
    if aa is None:
        raise ReplyError("ERR this region is not part of an Active-Active database")
    return aa


@command("braid.token")
def braid_token(client: Session, argv: list[bytes]) -> Any:
    _member_region(client)
    return format_token(session_fence(client))


@command("braid.waitfor")
def braid_waitfor(client: Session, argv: list[bytes]) -> Any:
    aa = _member_region(client)
    fence = parse_token(argv[1])
    timeout = parse_timeout_ms(argv[2], client.region.now_ms())
    membership = aa.membership
    for origin, n in fence.items():
        status = membership.status(origin)
        if status is None:
            raise ReplyError(f"ERR the token names region {origin}, which is not a member of this database")
        if status == REMOVED and n > membership.frozen.get(origin, 0):
            raise ReplyError(f"ERR the token names writes of region {origin} that the database dropped when it "
                             f"removed that region: they can never be applied here")
    def applied() -> int | None:
        vv = aa.causal.vv
        if all(vv.get(origin, 0) >= n for origin, n in fence.items()):
            for origin, n in fence.items():
                if n > client.fence.get(origin, 0):
                    client.fence[origin] = n
            return 1
        return None

    if applied() is not None:
        return 1
    if client.in_exec:
        return 0
    return Blocked([], timeout, applied, timeout_reply_of=lambda: 0, wakes_on_progress=True)
