"""What an operation log record holds: the tags, the record encoders and the decoders.

Each function here builds or reads the payload of one append-only file record
(node/persistence/aofformat.py frames it); node/persistence/oplog.py writes them, and
node/persistence/replay.py reads them back at start.

Records (format 2, written by this version; the tag is the first element):

* ``OP_REPLICATED`` ``[b"o", [entry, ...]]``: this region's own operations
  (:mod:`crdt.ops`), everything one command resolved into, in the order they were
  applied.  An entry is the operation's bytes as :mod:`node.activeactive.opcodec` encodes them
  for the wire - encoded once, in :meth:`node.activeactive.region.ActiveActive.publish`,
  and the same bytes go to the file and to the peers - either alone (bytes: an
  operation that stayed in this region: any operation of a single region, or a
  region-local one such as XSETID's in a cluster, or one that changed nothing) or
  as ``[op, n, deps]``: sent under the dot ``(region, n)`` with dependencies
  ``deps`` (the version vector it was issued at, as sorted pairs).  A fourth
  element holds the operation as applied here when it differs from the one sent:
  a delete under ``DELREF``/``ACKED`` judged by this region's PELs is sent as the
  IDs it removed.  Replay applies each operation (:func:`crdt.ops.apply`), then,
  for one that was sent, the causal log stamps the logged bytes again, and the
  dot and dependencies it gives must be the logged ones: anything else means the
  file and the region's history disagree, and the region does not start (a
  ``LoadError`` naming the record).  Commands whose whole effect is their
  operations are listed in ``node.commands.RESOLVED``: XADD, XDEL, XDELEX, XTRIM,
  XSETID, XCFGSET, XIDMPRECORD, DEL, UNLINK, RENAME, FLUSH*, XGROUP CREATE/DESTROY.
  (A single region's trim operation is Redis's request - MAXLEN/MINID, ``~``,
  LIMIT - which :func:`crdt.ops.apply` evaluates on the stream; in a cluster it is
  resolved at the command into per-origin cutoffs, and those are logged.)
* ``OP_LOCAL`` ``[b"L", now_ms, argv, id_mode, [entry, ...]]``: a command that
  changed region-local state (consumers, the PEL, delivery counts, a group's
  cursors and last-delivered ID: XREADGROUP, XACK, XACKDEL, XCLAIM, XAUTOCLAIM,
  XGROUP SETID/CREATECONSUMER/DELCONSUMER, a layout ``CONFIG SET``...), with the
  clock it ran with (the server pins it for the length of a command), the ID mode
  in force in a cluster (nil in a single region) and the operations it applied,
  as in ``o``.  Replay runs the command again for its local part - local state is
  a deterministic function of (state, argv, clock) - but its operations come from
  the record: while it runs, :meth:`node.region.db.Database.apply` hands each operation
  it computes to the replay, which applies (and stamps) the next logged one
  instead, in order.  A computed operation that differs from its logged
  counterpart is counted (``LoadReport.differences``, a warning in the server's
  log); one without a counterpart is neither applied nor stamped; logged ones the
  command no longer computes are applied after it.
* ``OP_LOCAL`` ``[b"d", now_ms, key]``: an XADD answered from the key's IDMP map
  (it counts a duplicate and changes nothing else).
* ``OP_LOCAL`` ``[b"x", now_ms]`` (``[b"x", now_ms, stable]`` in a cluster): the
  server's once-a-second IDMP expiry, a change no command makes, with the stable
  vector it used.
* ``OP_REPLICATED`` ``[b"r", origin, n, deps, op]``: an operation of another
  region, logged when it is applied (so in causal order); replay hands it to
  the causal log and applies it as the replication link did.
* ``OP_LOCAL`` ``[b"a", g]``, ``[b"k", g]``, ``[b"w", g, [op, ...]]``: writes taken
  alone (node/activeactive/lone_writes.py).  ``a``: from here the region took writes before
  every member had answered; its own operations above ``g`` stay here until
  ``k`` (every member answered, none held more: they leave) or ``w`` (a member
  held operations of this region above ``g``: those minted since ``a`` are
  withdrawn - a replay skips them - and ``w`` lists them, as applied here, to be
  issued again under new numbers; the first ``o`` record after ``w`` is that
  re-issue).  A ``w`` without its ``a`` (logged again after a snapshot) only lists
  what waits to be issued again.

So the in-memory causal log - the replication feed - is exactly what replaying
the file rebuilds, and the file is its durable form.

Format 1, and reading an old file.  Before operations were logged, every
command was an ``OP_LOCAL`` ``[b"c", now_ms, argv]`` (``[b"c", now_ms, argv,
id_mode]`` in a cluster) and its operations were not in the file.  Such records
are still read, and replayed as they were then: the command runs again and
resolves its operations again, with the clock and the ID mode logged (FLUSHALL as
then too: one DEL per key, not today's single flush operation, so the dots stay).  A file
may hold both: a region upgraded in place appends format-2 records after its
format-1 ones (the next snapshot makes the old ones unnecessary).  The format is
carried by the tags: format 2 added ``o``, ``L`` and ``d``; a version that adds
another tag makes an older reader stop with "malformed record" naming the
record, never misread it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from crdt.causal import Envelope
from node.activeactive import opcodec
from node.activeactive.cluster_config import ID_MODES
from node.persistence import safe_encode
from node.persistence.aofformat import OP_LOCAL

if TYPE_CHECKING:
    from crdt import ops

_encode = safe_encode.encoder()  # not msgspec's Encoder().encode: it crashes when memory runs out
_decode = msgspec.msgpack.Decoder().decode


# ------------------------------------------------------------------ records
FORMAT = 2  # written by this version: tags o and L (see the module docstring); 1: tag c

_TAGS_LOCAL = (b"c", b"L", b"x", b"d", b"a", b"k", b"w")
LONE_TAGS = (b"a", b"k", b"w")  # writes taken alone (node/activeactive/lone_writes.py)


def own_entry(op: ops.Op, env: Envelope | None, sent: ops.Op) -> bytes | list:
    """One operation this region applied, as an ``o`` or ``L`` record holds it.

    ``env``: the envelope it was sent in (None: it stayed here); ``sent``: the operation
    sent, when it is not ``op`` itself (a delete whose strategy only this region can judge).
    A plain add comes as its encoded bytes (``Database.add_plain``).
    """
    if env is None:
        return op if type(op) is bytes else opcodec.encode(op)
    if sent is op:
        return [env.op, env.n, env.deps]
    return [env.op, env.n, env.deps, opcodec.encode(op)]


def own_record(own: list) -> bytes:
    """``[b"o", [entry, ...]]``: the operations one command resolved into (``own``: the
    ``(op, envelope, sent)`` triples :meth:`node.region.db.Database.apply` collected)."""
    return _encode([b"o", [own_entry(*t) for t in own]])


def command_record(now_ms: int, argv: list[bytes], id_mode: str | None = None, own: Sequence[tuple] = ()) -> bytes:
    """``[b"L", now_ms, argv, id_mode, [entry, ...]]``: a command with region-local effects,
    the clock it ran with, the ID mode in force (nil in one region) and the operations it
    applied (replayed instead of the ones it computes again)."""
    return _encode([b"L", now_ms, argv, None if id_mode is None else id_mode.encode(),
                    [own_entry(*t) for t in own]])


def idmp_duplicate_record(now_ms: int, key: bytes) -> bytes:
    """``[b"d", now_ms, key]``: an XADD answered from the IDMP map, which counts the duplicate."""
    return _encode([b"d", now_ms, key])


def idmp_expiry_record(now_ms: int, stable: dict[int, int] | None = None) -> bytes:
    """The cron's IDMP expiry; in a region of a cluster with the stable vector it used."""
    return _encode([b"x", now_ms] if stable is None else [b"x", now_ms, sorted(stable.items())])


def lone_record(tag: bytes, confirmed: int, withdrawn: Sequence[bytes] = ()) -> bytes:
    """``[b"a", g]`` / ``[b"k", g]`` / ``[b"w", g, [op, ...]]`` (see the module docstring)."""
    return _encode([tag, confirmed] if tag != b"w" else [tag, confirmed, list(withdrawn)])


@dataclass(frozen=True, slots=True)
class LoneMark:
    """A record of writes taken alone, found in a log: its index among the records replayed."""

    index: int
    tag: bytes
    confirmed: int                  # g: the region's own operations up to here were confirmed
    withdrawn: list[bytes] | None  # ``w``: the operations to issue again


# a lone record's first bytes: a msgpack array of 2 or 3, then the tag as a 1-byte bin
_LONE_PREFIXES = tuple(bytes([0x92 + (t == b"w"), 0xC4, 1]) + t for t in LONE_TAGS)


def lone_marks(records: list[tuple[int, int, bytes]]) -> list[LoneMark]:
    """The lone records among ``records`` (found by their first bytes: no decoding of the
    others), decoded; ValueError if one is malformed."""
    marks = []
    for i, (number, kind, payload) in enumerate(records):
        if kind == OP_LOCAL and payload.startswith(_LONE_PREFIXES):
            rec = _decode(payload)
            if (rec[0] == b"w" and (len(rec) != 3 or not isinstance(rec[2], list)
                                    or not all(type(o) is bytes for o in rec[2]))) \
                    or type(rec[1]) is not int or rec[1] < 0:
                raise ValueError(f"malformed record {number} of writes taken alone")
            marks.append(LoneMark(i, rec[0], rec[1], rec[2] if rec[0] == b"w" else None))
    return marks


def remote_record(env: Envelope) -> bytes:
    # the deps pairs as they are: msgpack writes a tuple as the array a list would be
    return _encode([b"r", env.origin, env.n, env.deps, env.op])


class OwnOperation(NamedTuple):
    """An operation of this region, as logged: ``op`` the bytes sent (or, when it stayed
    here, applied); ``n``/``deps`` its dot's counter and dependencies (None: not sent);
    ``applied`` the bytes applied here when they differ from ``op``."""

    op: bytes
    n: int | None = None
    deps: tuple | None = None
    applied: bytes | None = None


class LocalRecord(NamedTuple):
    """An OP_LOCAL record: ``tag`` c (format 1: a command), L (a command with its
    operations ``own``), x (an IDMP expiry with its ``stable`` vector, if any), d (an
    IDMP duplicate of the key ``argv[0]``)."""

    tag: bytes
    now_ms: int
    argv: list | None = None
    id_mode: str | None = None
    own: list | None = None     # None: a format-1 command, whose operations are re-derived
    stable: dict | None = None


def _decode_own(entries) -> list[OwnOperation]:
    if not isinstance(entries, list):
        raise ValueError("malformed operation list")
    out = []
    for e in entries:
        if type(e) is bytes:
            out.append(OwnOperation(e))
            continue
        if (not isinstance(e, list) or len(e) not in (3, 4) or type(e[0]) is not bytes or type(e[1]) is not int
                or not isinstance(e[2], list) or (len(e) == 4 and type(e[3]) is not bytes)):
            raise ValueError("malformed operation in a record")
        try:
            deps = tuple((int(o), int(n)) for o, n in e[2])
        except (TypeError, ValueError):
            raise ValueError("malformed dependencies of an operation in a record") from None
        out.append(OwnOperation(e[0], e[1], deps, e[3] if len(e) == 4 else None))
    return out


def decode_local(payload: bytes) -> LocalRecord:
    """An OP_LOCAL record (ValueError if malformed)."""
    rec = _decode(payload)
    if not isinstance(rec, list) or len(rec) < 2 or rec[0] not in _TAGS_LOCAL or type(rec[1]) is not int:
        raise ValueError("malformed local record")
    tag = rec[0]
    if tag == b"x":
        if len(rec) == 3:
            try:
                return LocalRecord(tag, rec[1], stable={int(o): int(n) for o, n in rec[2]})
            except (TypeError, ValueError):
                raise ValueError("malformed stable vector in an IDMP expiry record") from None
        return LocalRecord(tag, rec[1])
    if tag == b"d":
        if len(rec) != 3 or type(rec[2]) is not bytes:
            raise ValueError("malformed IDMP duplicate record")
        return LocalRecord(tag, rec[1], [rec[2]])
    if tag in LONE_TAGS:
        return LocalRecord(tag, rec[1])  # replay reads them first (lone_marks)
    if len(rec) not in ((3, 4) if tag == b"c" else (5,)) or not isinstance(rec[2], list) or not rec[2] \
            or not all(type(a) is bytes for a in rec[2]):
        raise ValueError("malformed command record")
    mode = rec[3] if len(rec) > 3 else None
    if mode is not None and (type(mode) is not bytes or mode.decode("latin-1") not in ID_MODES):
        raise ValueError("malformed ID mode in a command record")
    own = _decode_own(rec[4]) if tag == b"L" else None
    return LocalRecord(tag, rec[1], rec[2], None if mode is None else mode.decode(), own)


def decode_replicated(payload: bytes) -> Envelope | list[OwnOperation]:
    """An OP_REPLICATED record: another region's envelope (``r``), or this region's own
    operations (``o``) (ValueError if malformed)."""
    rec = _decode(payload)
    if isinstance(rec, list) and len(rec) == 2 and rec[0] == b"o":
        return _decode_own(rec[1])
    if not isinstance(rec, list) or len(rec) != 5 or rec[0] != b"r" or type(rec[4]) is not bytes:
        raise ValueError("malformed replicated record")
    try:
        return Envelope(int(rec[1]), int(rec[2]), tuple((int(o), int(n)) for o, n in rec[3]), rec[4])
    except (TypeError, ValueError):
        raise ValueError("malformed replicated record") from None
