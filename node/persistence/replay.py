"""Loading a region from its append-only file at start-up.

The newest valid snapshot (:mod:`node.persistence.snapshot`) is the base: its
state is installed, and only the records after it are replayed.  A snapshot
that fails its checksum is skipped for an older one when the log still holds
every record after that one; otherwise the region does not start.

The file is scanned first (:func:`node.persistence.aof.scan`): a torn last
record - a crash in the middle of a write - is cut when ``aof-load-truncated``
is yes (the default, as in Redis) and stops the region otherwise; damage
anywhere else always stops it, with the file and offset in the message, and
nothing is loaded.  A log whose run mark says it was closed cleanly has no torn
tail: a bad last record there is damage too.  Before a torn tail is cut the run
mark becomes ``recover`` (the cut records may be operations peers hold: the
region takes its own back from them before it takes writes).  Then every record
is replayed in order (:mod:`node.persistence.oplog` says what the records are):

* this region's own operations (``o``) are applied as logged, and those it sent
  are stamped again by the causal log, which must give each the dot it was logged
  with (else the region does not start, naming the record);
* a command with region-local effects (``L``) runs again through the server with
  the clock and ID mode it first ran with, for its local part; the operations it
  applied are the logged ones, used in order instead of those it computes now
  (:class:`LoggedOperations`: any difference is counted and reported, a computed
  operation without a logged counterpart is neither applied nor stamped);
* a format-1 command (``c``, written before operations were logged) runs again
  as it did then, operations included;
* an operation of another region (``r``) goes through the causal log as when it
  arrived; an IDMP expiry (``x``) runs with its clock and stable vector.

Most records of a log of writes are this region's own operations, so those take a bulk
path (:class:`_OwnReplay`) with the same effect and the same checks, and the work only a
live region needs left out: a run of records per call, no per-operation tuples, an XADD
without IDMP decoded into its exact shape and appended to its stream without building the
operation, the expected dependencies kept between stamps instead of sorted again, and no
replication links woken.  Anything it does not recognise goes the general
way, which reports it.  How long a start may spend replaying is bounded by snapshots
(``auto-aof-rewrite-max-replay-ms``, :func:`node.persistence.oplog.rewrite_due`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import msgspec

from crdt import ops
from crdt.causal import CausalLog
from node.activeactive import opcodec
from node.persistence import snapshot as snap
from node.persistence.aof import OP_LOCAL, OP_REPLICATED, CorruptLog, scan, truncate_torn
from node.persistence.oplogformat import LoneMark, OwnOperation, decode_local, decode_replicated, lone_marks
from node.persistence.runmark import mark_for_recovery, read_run_mark
from node.region.core import Session

if TYPE_CHECKING:
    from crdt.causal import CausalLog
    from node.region.core import RegionCore as Server  # replay needs the core only, never a running server

log = logging.getLogger("braid.persistence")


class LoadError(Exception):
    """The region must not start: the message says which file and where."""


@dataclass(frozen=True)
class LoadReport:
    records: int = 0          # replayed from the log
    commands: int = 0         # command records (run again for their region-local part)
    remote: int = 0           # operations of other regions
    own: int = 0              # records of this region's own operations
    differences: int = 0      # operations replayed commands computed differently than logged
    truncated_bytes: int = 0
    snapshot_record: int = 0  # the snapshot loaded: the state after this record (0: none)
    scanned: object = field(default=None, compare=False, repr=False)  # the clean scan, for appending


def load(server: Server, directory: str, truncated_ok: bool) -> LoadReport:
    if not os.path.isdir(directory):
        return LoadReport()
    try:
        result = scan(directory, closed_cleanly=read_run_mark(directory) == "clean")
    except CorruptLog as e:
        raise LoadError(f"the append-only file is damaged: {e}; nothing was loaded. "
                        f"`braid check-log {directory}` reports the damage; `braid check-log {directory} --fix` "
                        "salvages the log (it keeps every record before the damage and cuts the rest); a region "
                        "of a cluster then gets what was cut back from its peers when it starts, a standalone "
                        "region loses it") from None
    cut = 0
    if result.torn is not None:
        path, offset = result.torn
        if not truncated_ok:
            raise LoadError(f"the append-only file ends with a torn record in {path} at offset {offset} "
                            f"({result.torn_reason}); set aof-load-truncated yes or run "
                            f"`braid check-log {directory} --fix` to cut it")
        mark_for_recovery(directory)  # on disk before the cut: a crash right after it still recovers
        cut = truncate_torn(result)
        log.warning("cut a torn record at the end of the append-only file: %d bytes of %s from offset %d (%s)",
                    cut, path, offset, result.torn_reason)
    base = _load_snapshot(server, directory, result)
    tail = [r for r in result.records if r[0] > base]
    counts = replay(server, tail)
    server.db.recount_memory()  # (a replay changes keys without touching them)
    return LoadReport(len(tail), counts.commands, counts.remote, counts.own, counts.differences, cut, base,
                      None if cut else result)


def _load_snapshot(server: Server, directory: str, result) -> int:
    """Install the newest snapshot the log continues; returns its record (0: none needed)."""
    first = result.segments[0].first_record if result.segments else result.last_record + 1
    for record, path in snap.list_snapshots(directory):
        if record + 1 < first:
            break  # the log no longer holds what follows this one, nor older ones
        try:
            s = snap.read(path)
        except snap.LegacySnapshot:
            raise LoadError(f"snapshot {path} is in the old pickle format (format version 1), which this "
                            f"version does not load; convert it with `braid convert-snapshot {path}`, "
                            "then start the region again") from None
        except (OSError, snap.SnapshotError) as e:
            log.error("skipping snapshot %s: %s", path, e)
            continue
        if record > result.last_record:
            raise LoadError(f"snapshot {path} is newer than the log's last record {result.last_record}: "
                            "segments are missing")
        install(server, s, path)
        return record
    if first > 1:
        raise LoadError(f"the append-only file in {directory} starts at record {first} and no valid snapshot "
                        "holds what came before it; nothing was loaded")
    return 0


def install(server: Server, s: snap.Snapshot, path: str) -> None:
    """Make a snapshot's state the region's (before any record is replayed)."""
    aa = server.aa
    if s.active_active != (aa is not None) or (aa is not None and s.region != server.region):
        raise LoadError(f"snapshot {path} belongs to another kind of region (active_active={s.active_active}, "
                        f"region {s.region})")
    server.db.replace_keys(cast(ops.Keyspace, s.keys))
    if aa is not None:
        aa.causal.take(cast(CausalLog, s.causal))
        # operations that waited for their dependencies when the snapshot was taken are not
        # taken back: their senders send them again, and one kept could be an operation its
        # origin lost in a crash of its machine and has since minted again under the same
        # dot (node/activeactive/hub.py: ReplicationHub.handshook)
        aa.causal.drop_pending()
        aa.hub.restart_arrivals()


@dataclass
class ReplayCounts:
    commands: int = 0
    remote: int = 0
    own: int = 0
    differences: int = 0


def replay(server: Server, records: list[tuple[int, int, bytes]]) -> ReplayCounts:
    """Apply records in order; returns what was replayed."""
    client = Session(server)  # no connection: replies are dropped
    client.authenticated = True
    counts = ReplayCounts()
    settings = dict(server.config.values)  # a replayed CONFIG SET lasts only for the replay
    try:
        marks = lone_marks(records)
    except ValueError as e:
        raise LoadError(f"the append-only file cannot be replayed: {e}") from None
    lone = _LoneReplay(server, marks) if marks else None
    server.replaying = True
    own = _OwnReplay(server)
    at, end = 0, len(records)
    try:
        while at < end:
            number, kind, payload = records[at]
            try:
                if lone is not None and lone.consumed(at, kind, payload):
                    at += 1
                    continue
                if kind == OP_LOCAL:
                    counts.differences += _replay_local(server, client, number, payload)
                    counts.commands += 1
                    at += 1
                    continue
                # this region's own operations, as many records as follow, without the general decoding
                # (one at a time where writes were taken alone: each is looked at)
                done = own.replay_run(records, at, end if lone is None else at + 1)
                if done > at:
                    counts.own += done - at
                    at = done
                    continue
                rec = decode_replicated(payload)
                if type(rec) is list:
                    for entry in rec:
                        apply_own(server, number, entry)
                    counts.own += 1
                else:
                    _replay_remote(server, rec)
                    counts.remote += 1
                at += 1
            except ValueError as e:
                number = records[own.failed_at][0] if own.failed_at is not None else number
                raise LoadError(f"record {number} of the append-only file cannot be replayed: {e}") from None
        if lone is not None:
            lone.finish()
    finally:
        server.replaying = False
        server.config.values.update(settings)
        server.config_changed()
        if server.aa is not None:
            server.aa.run_in_mode()  # the setting in force now
    if counts.differences:
        log.warning("%d operations computed by replayed commands differ from the logged ones (a newer version "
                    "resolves them differently): the logged ones were applied", counts.differences)
    return counts


def apply_own(server: Server, number: int, entry: OwnOperation) -> object:
    """Apply one of this region's logged operations; stamp it again if it was sent.

    ValueError when the causal log does not give it the dot it was logged with: the
    log and this region's history disagree, so the region must not start.
    """
    op = _decoded(entry.op if entry.applied is None else entry.applied)
    db = server.db
    aa = server.aa
    if entry.n is not None:  # checked first: nothing is applied or stamped under a wrong dot
        if aa is None:
            raise ValueError("an operation sent to other regions, but this region is not part of an "
                             "Active-Active database")
        vv = aa.causal.vv
        n, deps = vv.get(aa.region, 0) + 1, tuple(sorted(vv.items()))
        if n != entry.n or deps != entry.deps:
            raise ValueError(f"the operation was logged with dot ({aa.region}, {entry.n}) and dependencies "
                             f"{dict(entry.deps or ())}, but the causal log stamps it ({aa.region}, {n}) "
                             f"with {dict(deps)}")
    try:
        result = ops.apply(db.keys, op, db.limits)
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
        raise ValueError(f"the operation cannot be applied: {type(e).__name__}: {e}") from None
    if entry.n is not None:
        assert aa is not None  # (checked above)
        env = aa.hub.issue(entry.op)
        if env.n != entry.n or env.deps != entry.deps:  # the check above is CausalLog.stamp's rule
            raise ValueError(f"the operation was logged with dot ({aa.region}, {entry.n}), but the causal log "
                             f"stamped it ({env.origin}, {env.n})")
    return result


class _OwnReplay:
    """The bulk path for ``o`` records - this region's own operations, nearly every record of
    a log of writes - with exactly the effect of :func:`decode_replicated` and
    :func:`apply_own`, minus their per-record work: one call for a run of records, no
    :class:`OwnOperation` tuples, an XADD without IDMP appended to its stream straight from
    its msgpack array (:func:`crdt.ops.append_entry`), other operations built from theirs
    (:func:`_op`), and a sent operation stamped by the causal log itself (the hub's
    ``issue`` also wakes the replication links, which do not run during a load).  A record
    this path does not recognise - malformed, or another kind - ends the run before anything
    of it is changed, and is left to the general path, which decodes and reports it as before.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.db = server.db
        aa = server.aa
        hub = aa.hub if aa is not None else None
        # a hub with watchers (the simulation's membership checks) is called as is: its issue tells them
        self.causal = aa.causal if aa is not None and hub is not None and not hub.watchers else None
        self.arrivals = hub.arrivals if hub is not None else None
        self.loaded_at = time.monotonic()  # the arrival time of every operation stamped here
        self._deps_at = -1         # the causal log's end when _expected was right
        self._expected: list = []  # the dependencies the next operation must carry, as pairs
        self._own: list | None = None  # this region's pair in it
        self.failed_at: int | None = None  # the index of the record a run could not apply

    def replay_run(self, records: list, start: int, end: int) -> int:
        """Replay ``records[start:end]`` while they are ``o`` records this path recognises;
        returns the index of the first one it left (``start``: none replayed).  ValueError
        when a recognised record cannot be applied (``failed_at`` is its index)."""
        at = start
        decode = _raw_decode
        while at < end:
            _number, kind, payload = records[at]
            if kind != OP_REPLICATED:
                break
            try:
                rec = decode(payload)
            except msgspec.DecodeError:
                break
            if type(rec) is not list or len(rec) != 2 or rec[0] != b"o" or type(rec[1]) is not list:
                break
            entries = rec[1]
            if not _recognised(entries):  # checked first: nothing is applied from a malformed record
                break
            try:
                for e in entries:
                    self._apply(e)
            except ValueError:
                self.failed_at = at
                raise
            at += 1
        return at

    def _apply(self, e: bytes | list) -> None:
        """Apply one entry of an ``o`` record (its shape checked), as apply_own would."""
        causal = self.causal
        sent = None if type(e) is bytes else cast(list, e)  # [operation, n, dependencies]: it was sent
        if sent is None:
            data = cast(bytes, e)
        elif causal is None:
            apply_own(self.server, 0, OwnOperation(sent[0], sent[1], _deps(sent[2])))
            return
        else:
            data = sent[0]
        try:
            add = opcodec.decode_plain_add(data)  # (tag, key, origin, id, fields, None, None, None, None)
            op = None
        except msgspec.ValidationError:  # another operation, or an XADD with IDMP
            add, op = None, _op(data)
        except msgspec.DecodeError as err:
            raise ValueError(f"undecodable operation: {type(err).__name__}: {err}") from None
        if sent is not None and causal is not None:  # (causal is not None once sent is not: see above)
            self._check_dot(causal, sent[1], sent[2])
        db = self.db
        try:
            if add is not None:  # AddEntry(key, origin, id, fields): appended without building it
                ops.append_entry(db.keys, add[1], add[2], add[3], add[4], db.limits)
            else:
                ops.apply(db.keys, cast(ops.Op, op), db.limits)  # (op is not None without add)
        except (TypeError, AttributeError, KeyError, IndexError, ValueError) as err:
            raise ValueError(f"the operation cannot be applied: {type(err).__name__}: {err}") from None
        if sent is not None and causal is not None and self.arrivals is not None:  # (all three, once sent)
            causal.stamp(data)
            self.arrivals.append(self.loaded_at)
            if self._deps_at == causal.end - 1 and self._own is not None:
                self._deps_at += 1
                self._own[1] += 1  # the next operation depends on this one

    def _check_dot(self, causal: CausalLog, n: int, deps: list) -> None:
        """ValueError unless ``causal`` (the causal log) stamps the next operation with dot ``n``
        and dependencies ``deps`` (as logged: pairs), as :func:`apply_own` checks.  The
        dependencies expected are kept as pairs between stamps (only this region's own
        counter moves), and built again when the log grew otherwise."""
        region, vv = causal.region, causal.vv
        if self._deps_at != causal.end:
            self._expected = [[o, c] for o, c in sorted(vv.items())]
            self._own = next((p for p in self._expected if p[0] == region), None)
            self._deps_at = causal.end
        if n == vv.get(region, 0) + 1 and deps == self._expected:
            return
        wanted = tuple(sorted(vv.items()))
        if n == vv.get(region, 0) + 1 and _deps(deps) == wanted:  # equal once read as apply_own reads them
            return
        raise ValueError(f"the operation was logged with dot ({region}, {n}) and dependencies "
                         f"{dict(_deps(deps))}, but the causal log stamps it ({region}, {vv.get(region, 0) + 1}) "
                         f"with {dict(wanted)}")


class _LoneReplay:
    """The writes taken alone a log holds (node/activeactive/lone_writes.py), as a replay meets them.

    ``a`` opens a period and ``k`` or ``w`` ends it.  In a period a ``w`` ends, the region's
    own operations (``o`` records, and command records holding some) are skipped: they were
    withdrawn, and ``w`` lists them to be issued again - until the first record of own
    operations after it, which is that re-issue.  A period still open at the end is the one
    the region was in: its state at ``a`` is kept (the image to go back to), its own
    operations since are applied and noted, and what follows ``a`` is held from the peers."""

    def __init__(self, server: Server, marks: list[LoneMark]) -> None:
        self.server = server
        self.marks = {m.index: m for m in marks}
        self.withdrawn_spans: list[tuple[int, int]] = []  # (a, w) record indexes
        self.open_at: int | None = None  # the index of an ``a`` no record ends
        opened: LoneMark | None = None
        for m in marks:
            if m.tag == b"a":
                opened = m
            elif opened is not None:
                if m.tag == b"w":
                    self.withdrawn_spans.append((opened.index, m.index))
                opened = None
        if opened is not None:
            self.open_at = opened.index
        self.reissue: list[bytes] | None = None  # listed by the last ``w``, until their re-issue
        self.reissue_base = 0
        self.held = False  # in the open period: the region's own operations are noted (LoneWrites.ops)

    def consumed(self, at: int, kind: int, payload: bytes) -> bool:
        """Whether record ``at`` is dealt with here (a mark, or a withdrawn operation); notes
        what an own record it leaves to the replay means."""
        mark = self.marks.get(at)
        if mark is not None:
            if mark.tag == b"w":
                self.reissue, self.reissue_base = list(mark.withdrawn or ()), mark.confirmed  # (a list: lone_marks)
            elif at == self.open_at:
                self._reopen(mark.confirmed)
            return True
        own = _own_operations(kind, payload)
        if own is None:
            return False
        if any(a < at < w for a, w in self.withdrawn_spans):
            return True
        self.reissue = None  # the first own record after a ``w`` issues its list again
        aa = self.server.aa if self.held else None  # (held: it is an Active-Active region)
        if aa is not None:
            lone = aa.lone
            lone.ops.extend(e.op if e.applied is None else e.applied for e in own)
            minted = next((e.n for e in own if e.n is not None), None)
            if lone.first_minted is None and minted is not None:
                lone.first_minted = minted
                aa.hub.refuse_peers_own()
        return False

    def _reopen(self, confirmed: int) -> None:
        server = self.server
        aa = server.aa
        if aa is None:
            raise ValueError("writes taken alone, but this region is not part of an Active-Active database")
        image = snap.encode(server.db.keys, aa.causal, 0, server.system_ms(), True, server.region)
        aa.lone.confirmed, aa.lone.image, aa.lone.ops, aa.lone.first_minted = confirmed, image, [], None
        aa.lone.periods += 1
        aa.hub.hold_own_from(aa.causal.end)
        self.held = True

    def finish(self) -> None:
        aa = self.server.aa
        if aa is not None and self.reissue:
            aa.lone.reissue, aa.lone.reissue_base = self.reissue, self.reissue_base
        if self.held and aa is not None:  # (held: it is an Active-Active region)
            log.warning("this region was taking writes alone when it stopped: the %d operations it took since hold "
                        "until every member has answered", len(aa.lone.ops))


def _own_operations(kind: int, payload: bytes) -> list[OwnOperation] | None:
    """A record of this region's own operations: them (None: another record)."""
    if kind == OP_REPLICATED:
        if not payload.startswith(b"\x92\xc4\x01o"):
            return None
        decoded = decode_replicated(payload)
        return decoded if isinstance(decoded, list) else None  # (an ``o`` record: always its list)
    if not payload.startswith(b"\x95\xc4\x01L"):
        return None
    own = decode_local(payload).own
    if not own:
        return None
    return own


def _deps(pairs: list) -> tuple:
    try:
        return tuple((int(o), int(n)) for o, n in pairs)
    except (TypeError, ValueError):
        raise ValueError("malformed dependencies of an operation in a record") from None


_raw_decode = msgspec.msgpack.Decoder().decode
_ADD_ENTRY_TAG = 0  # node/activeactive/opcodec.py's OPS


def _recognised(entries: list) -> bool:
    """Whether each of an ``o`` record's entries has the shape :func:`decode_replicated` reads:
    an operation's bytes, or [operation, n, dependencies] for one that was sent."""
    for e in entries:
        if type(e) is not bytes and (type(e) is not list or len(e) != 3 or type(e[0]) is not bytes
                                     or type(e[1]) is not int or type(e[2]) is not list):
            return False
    return True


def _op(data: bytes) -> ops.Op:
    """:func:`node.activeactive.opcodec.decode` (ValueError if undecodable), with an AddEntry - the
    operation nearly every record holds - built from its array without the generic field
    table (the same values: IDs and dots as tuples, the version vector with int keys)."""
    try:
        v = _raw_decode(data)
        if type(v) is list and len(v) == 9 and v[0] == _ADD_ENTRY_TAG and type(v[0]) is int:
            _tag, key, origin, id_, fields, pid, iid, dot, deps = v
            # (an ID or fields of None: decoded as opcodec.decode would, and refused as it is applied)
            return ops.AddEntry(key, origin, cast("tuple[int, int]", None if id_ is None else tuple(id_)),
                                cast(list, None if fields is None else list(fields)), pid, iid,
                                None if dot is None else tuple(dot),
                                None if deps is None else {int(o): n for o, n in deps.items()})
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, msgspec.DecodeError) as e:
        raise ValueError(f"undecodable operation: {type(e).__name__}: {e}") from None
    return _decoded(data)


def _decoded(data: bytes):
    try:
        return opcodec.decode(data)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, msgspec.DecodeError) as e:
        raise ValueError(f"undecodable operation: {type(e).__name__}: {e}") from None


class LoggedOperations:
    """While a command record (``L``) is replayed: the operations it logged, in order.

    :meth:`node.region.db.Database.apply` hands each operation the command computes now to
    :meth:`instead_of`, which applies the next logged one instead (an operation is
    history: what this region applied, and sent under a dot peers hold).  A computed
    operation that differs from its logged counterpart, or has none, counts as a
    difference; one without a counterpart is neither applied nor stamped.  Logged
    operations the command no longer computes are applied at the end (:meth:`finish`).
    An error is kept and raised after the command: inside it a handler would turn
    it into an error reply.
    """

    def __init__(self, server: Server, number: int, entries: list[OwnOperation]) -> None:
        self.server = server
        self.number = number
        self.entries = entries
        self.next = 0
        self.differences = 0
        self.error: ValueError | None = None

    def instead_of(self, op: ops.Op) -> object:
        if self.error is None and self.next < len(self.entries):
            entry = self.entries[self.next]
            self.next += 1
            if opcodec.encode(op) != (entry.op if entry.applied is None else entry.applied):
                self.differences += 1
            try:
                return apply_own(self.server, self.number, entry)
            except ValueError as e:
                self.error = e
        else:
            self.differences += 1
        return _unapplied(op)

    def finish(self) -> None:
        if self.error is not None:
            raise self.error
        while self.next < len(self.entries):
            self.differences += 1
            apply_own(self.server, self.number, self.entries[self.next])
            self.next += 1


def _unapplied(op: ops.Op) -> object:
    """What a handler gets back for an operation that was not applied: "nothing changed"."""
    if type(op) is ops.AddEntry:
        return op.id
    if type(op) is ops.DeleteEntries:
        return [-1] * len(op.ids)
    if type(op) is ops.Trim:
        return 0
    return False


def _replay_local(server: Server, client, number: int, payload: bytes) -> int:
    """Replay an OP_LOCAL record; returns the differences found (see LoggedOperations)."""
    rec = decode_local(payload)
    with server.clock_pinned(rec.now_ms):
        if rec.tag == b"x":
            server.db.expire_idmp(rec.now_ms, rec.stable)
            return 0
        argv = rec.argv
        assert argv is not None, "every local record but an expiry and the lone marks (read first) holds one"
        if rec.tag == b"d":
            _count_idmp_duplicate(server, argv[0])
            return 0
        if rec.id_mode is not None and server.aa is not None:
            server.aa.run_in_mode(rec.id_mode)  # the mode it ran with, not today's (a full ID may be refused now)
        if rec.own is None:  # format 1: the command resolves its operations again
            server.call(client, argv)  # a Blocked reply is dropped: nothing waits during a load
            return 0
        logged = LoggedOperations(server, number, rec.own)
        with server.db.applying_logged(logged):
            server.call(client, argv)
        logged.finish()
        return logged.differences


def _count_idmp_duplicate(server: Server, key: bytes) -> None:
    keys = server.db.keys
    s = keys.get(key)
    idmp = s.idmp if s is not None else keys.idmp_kept.get(key)  # as XADD finds it
    if idmp is None:
        raise ValueError("an IDMP duplicate of a key with no IDMP map")
    idmp.iids_duplicates += 1


def _replay_remote(server: Server, env) -> None:
    if server.aa is None:
        raise ValueError("an operation of another region, but this region is not part of an Active-Active database")
    server.aa.hub.deliver(env)
