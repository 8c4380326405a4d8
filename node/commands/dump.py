"""DUMP, RESTORE and RESTORE-ASKING: a stream in Redis's own serialization.

DUMP answers Redis's payload for a stream: the value in the RDB encoding
(:mod:`node.interop.rdb`), the RDB version (2 bytes) and a CRC-64.  By
default that is what Redis 8.10 writes, as Braid reports itself as 8.10 (RDB
version 15, stream type 27 with each group's NACK zone); the
``dump-rdb-version`` setting picks an older Redis's pair (14 for Redis 8.8, 13
for 8.6, 10 for 7.0), since a Redis refuses a payload whose version is newer
than its own.  Below 14 the payload cannot hold XNACK's released entries: they
are left out of the PEL (:mod:`node.interop.rdb` says why).
``rdbcompression`` (yes by default, as in Redis) LZF-compresses the listpacks.

RESTORE accepts a payload of any stream encoding Redis has written (5.0 to 8.10)
with an RDB version up to 15, and answers Redis's replies and errors, checked in
Redis's order: the options, an existing key without REPLACE (BUSYKEY), the TTL,
the footer (version and checksum), the value.  Braid keeps only streams: the
payload of another type is refused with an error naming it.  Braid keys never
expire, so RESTORE takes only TTL 0 (what DUMP/RESTORE of a key without expiry
and MIGRATE of one send); a TTL is refused rather than silently dropped.
IDLETIME and FREQ are checked as Redis checks them and have no further effect:
Braid evicts nothing.

The decoded stream is installed the way COPY installs its copy
(:func:`node.commands.keys.install_stream`): an exact image in one region, and
in an Active-Active database the resolver's rule (an observed-remove of what
the key held, the entries in a log of their own, the groups created again; the
consumers and PEL stay at the region that ran RESTORE).

RESTORE-ASKING is RESTORE as a Redis cluster's MIGRATE sends it; Braid is no
cluster, so it behaves as RESTORE, which lets a clustered Redis migrate into it.

A DUMP of a stream of a megabyte or more, and a RESTORE of such a payload, are prepared in
slices between other clients' turns (node/region/slicing.py): DUMP encodes a copy of the stream as
it was when the command arrived, RESTORE decodes its payload into a stream no one sees yet;
the command then completes at once - the payload answered, or the stream put in place after
its checks (BUSYKEY, memory) are made again.  Other clients wait for neither; the client that
sent it waits for its reply as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crdt.stream import Stream
from node.commands import command
from node.commands.keys import install_stream
from node.commands.util import ERR_NOT_INT, ERR_SYNTAX, string2ll
from node.interop import rdb
from node.region.slicing import NOT_PREPARED, Sliced, Steps, prepare, take_prepared
from node.resp.encoder import ReplyError

if TYPE_CHECKING:
    from node.commands.context import Region
    from node.region.session import Session

ERR_BUSYKEY = "BUSYKEY Target key name already exists."
ERR_PAYLOAD = "ERR DUMP payload version or checksum are wrong"
ERR_BAD_FORMAT = "ERR Bad data format"
ERR_TTL = "ERR Invalid TTL value, must be >= 0"
ERR_IDLETIME = "ERR Invalid IDLETIME value, must be >= 0"
ERR_FREQ = "ERR Invalid FREQ value, must be >= 0 and <= 255"
ERR_EXPIRY = ("ERR Braid keys do not expire: RESTORE accepts only TTL 0 "
              "(restore the key without a TTL)")

_DUMP_COMPLEXITY = ("O(1) to access the key and additional O(N*M) to serialize it, where N is the number of "
                    "Redis objects composing the value and M their average size. For small string values the "
                    "time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).")
_RESTORE_COMPLEXITY = ("O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, "
                       "where N is the number of Redis objects composing the value and M their average size. "
                       "For small string values the time complexity is thus O(1)+O(1*M) where M is small, so "
                       "simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because "
                       "inserting values into sorted sets is O(log(N)).")


def _ll(arg: bytes) -> int:
    v = string2ll(arg)
    if v is None:
        raise ReplyError(ERR_NOT_INT)
    return v


# A DUMP or RESTORE of at least this many bytes (the stream's blocks, the payload) is prepared
# in slices where the client can wait: 1 MB is ~10-20 ms of encoding or decoding, below which
# the extra turns of the loop would cost the client more than the others gain.
SLICED_BYTES = 1 << 20


def dump_value(server: Region, key: bytes) -> bytes | None:
    """The DUMP payload of ``key`` as this server's settings ask, None if it does not exist."""
    s = server.db.keys.get(key)
    if s is None:
        return None
    cfg = server.config
    return rdb.dump_payload(s, int(cfg["dump-rdb-version"]), compress=bool(cfg["rdbcompression"]))


@command("dump")
def dump(client: Session, argv: list[bytes]):
    payload = take_prepared(client, argv)
    if payload is not NOT_PREPARED:
        return payload  # (the key as it was when the command arrived)
    server = client.region
    s = server.db.keys.get(argv[1])
    if s is None:
        return None
    large = sum(log.nbytes for log in s.logs.values()) >= SLICED_BYTES
    cfg = server.config
    steps = rdb.dump_payload_steps(s, int(cfg["dump-rdb-version"]), compress=bool(cfg["rdbcompression"]),
                                   snapshot=large)
    return prepare(client, steps, large)


def _restore_options(argv: list[bytes]) -> bool:
    """RESTORE's options, as ``restoreCommand`` reads them; returns REPLACE.  ABSTTL only
    changes how a TTL is read, and a TTL other than 0 is refused anyway."""
    replace = False
    idle = freq = -1
    j = 4
    while j < len(argv):
        opt = argv[j].lower()
        more = len(argv) - j - 1
        if opt == b"replace":
            replace = True
        elif opt == b"absttl":
            pass
        elif opt == b"idletime" and more >= 1 and freq == -1:
            idle = _ll(argv[j + 1])
            if idle < 0:
                raise ReplyError(ERR_IDLETIME)
            j += 1
        elif opt == b"freq" and more >= 1 and idle == -1:
            freq = _ll(argv[j + 1])
            if not 0 <= freq <= 255:
                raise ReplyError(ERR_FREQ)
            j += 1
        else:
            raise ReplyError(ERR_SYNTAX)
        j += 1
    return replace


def restore_payload(client: Session, key: bytes, ttl_arg: bytes, payload: bytes, replace: bool,
                    argv: list[bytes] | None = None) -> object:
    """RESTORE's checks and effect; ``argv``: the command, when its decoding may be sliced."""
    db = client.region.db
    if key in db.keys and not replace:
        raise ReplyError(ERR_BUSYKEY)
    ttl = _ll(ttl_arg)
    if ttl < 0:
        raise ReplyError(ERR_TTL)
    image = NOT_PREPARED if argv is None else take_prepared(client, argv)
    if image is NOT_PREPARED:
        try:
            rdb.verify_payload(payload)
        except rdb.PayloadError:
            raise ReplyError(ERR_PAYLOAD) from None
        large = argv is not None and len(payload) >= SLICED_BYTES
        image = prepare(client, _decoded(payload, client.region.region), large)
        if type(image) is Sliced:
            return image  # the command runs again once the payload is decoded
    if ttl:
        raise ReplyError(ERR_EXPIRY)
    assert isinstance(image, Stream)  # (the payload decoded)
    install_stream(db, key, image, replace)
    return "OK"


def _decoded(payload: bytes, region: int) -> Steps:
    """A verified payload's stream, decoded a node at a step; its faults as RESTORE's errors."""
    try:
        return (yield from rdb.load_payload_steps(payload, region))
    except rdb.NotAStream as e:
        raise ReplyError(f"{ERR_BAD_FORMAT}: the payload holds a {e.type_name}; Braid keys hold only streams") \
            from None
    except rdb.RdbError:
        raise ReplyError(ERR_BAD_FORMAT) from None


@command("restore")
def restore(client: Session, argv: list[bytes]):
    replace = _restore_options(argv)
    return restore_payload(client, argv[1], argv[2], argv[3], replace, argv)


@command("restore-asking")
def restore_asking(client: Session, argv: list[bytes]):
    return restore(client, argv)
