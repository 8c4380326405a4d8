"""The keyspace of one region (mini-redis's ``Db``): key -> Stream.

It owns the bookkeeping around the pure state: the changes-since-last-save
counter, per-key versions for WATCH, and the set of keys made "ready" for
blocked readers.

WATCH versions exist only for keys some client watches (``watched``: key ->
[version, watchers]), as Redis keeps its ``watched_keys`` table: a change to a
watched key (a write, a DEL, a FLUSHALL of it, a replicated operation) moves
its version; a key nobody watches costs nothing, so touching millions of keys
keeps no memory.  A client releases its keys at EXEC, DISCARD, UNWATCH, RESET
and when it disconnects (:meth:`Database.unwatch`).  Replicated changes go through :meth:`Database.apply`, which
hands the operation to the pure apply rules in :mod:`crdt.ops`.

What the keyspace holds in memory (:meth:`Database.memory`, for ``maxmemory`` and INFO
memory) is kept as a total of each key's estimate (``Stream.memory_bytes``, a few steps per
key).  A change marks its key (:meth:`touch`); the total takes the marked keys' new
estimates when it is next read - once per command that could be refused, not once per
change.  A keyspace replaced whole (a full resync, a state join, a snapshot loaded) is
counted again key by key.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from crdt import ops, resolve
from crdt.stream import Stream
from node.activeactive import opcodec

if TYPE_CHECKING:
    from crdt.causal import Envelope


class Publisher(Protocol):
    """Where the keyspace hands what changed for the other regions (the region's Active-Active
    part, node/activeactive/region.py): each returns the envelope the operation is sent in
    (None: the operation stays in this region)."""

    def publish(self, op: ops.Op) -> Envelope | None: ...
    def publish_add(self, key: bytes, origin: int, id_: tuple[int, int], fields: list) -> Envelope: ...


class LoggedSource(Protocol):
    """While a replay runs a logged command again: the operations it logged, applied instead
    of the ones the command computes now (node/persistence/replay.py)."""

    def instead_of(self, op: ops.Op) -> object: ...

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


class Database:
    def __init__(self, limits: ops.Limits | None = None, active_active: bool = False) -> None:
        self.limits = limits or ops.Limits()
        self.keys: ops.Keyspace = ops.Keyspace(active_active=active_active)  # key -> Stream
        # where operations that changed something go to the other regions (None: standalone)
        self.publisher: Publisher | None = None
        # how commands resolve into operations: Redis's rules, or the multi-region ones
        self.resolver: resolve.SingleRegion = resolve.SingleRegion()
        self.dirty = 0  # changes since the last save (INFO rdb_changes_since_last_save)
        # a command changed region-local state that Redis does not count as a change (an
        # XREADGROUP history read moves delivery counts): it is logged all the same
        self.local_change = False
        self.watched: dict[bytes, list[int]] = {}  # WATCH: key -> [version, watchers], while watched
        self._clock = 0
        self.ready: set[bytes] = set()  # keys with news for blocked clients
        # memory: each key's estimate when last counted, their total, the keys changed since,
        # and the keyspace they were counted in (another one is counted again from scratch)
        self.footprints: dict[bytes, int] = {}
        self.dataset_bytes = 0
        self.changed: set[bytes] = set()
        self._counted_keys: object = None

    def __len__(self) -> int:
        return len(self.keys)

    def get(self, key: bytes) -> Stream | None:
        return self.keys.get(key)

    def touch(self, key: bytes, ready: bool = True) -> None:
        """Record a modification: WATCH sees it, blocked readers are woken, memory is counted."""
        self.changed.add(key)
        entry = self.watched.get(key)
        if entry is not None:
            self._clock += 1
            entry[0] = self._clock
        if ready:
            self.ready.add(key)

    def memory(self) -> int:
        """What the keyspace holds in memory, in bytes (estimated: see the theory above)."""
        keys = self.keys
        if keys is not self._counted_keys:
            self.recount_memory()
        elif self.changed:
            footprints, total = self.footprints, self.dataset_bytes
            for key in self.changed:
                s = keys.get(key)
                now = s.memory_bytes() + len(key) if s is not None else 0
                total += now - footprints.pop(key, 0)
                if now:
                    footprints[key] = now
            self.changed.clear()
            self.dataset_bytes = total
        return self.dataset_bytes

    def recount_memory(self) -> None:
        """Count every key's memory again (the keyspace was replaced, or changed without
        :meth:`touch`: a snapshot or log replayed)."""
        self.footprints = {key: s.memory_bytes() + len(key) for key, s in self.keys.items()}
        self.dataset_bytes = sum(self.footprints.values())
        self.changed.clear()
        self._counted_keys = self.keys

    def watch(self, key: bytes) -> int:
        """A client starts watching ``key``; returns the version EXEC compares with."""
        entry = self.watched.get(key)
        if entry is None:
            entry = self.watched[key] = [self._clock, 0]
        entry[1] += 1
        return entry[0]

    def version(self, key: bytes) -> int | None:
        """The version of a watched key (None: nobody watches it)."""
        entry = self.watched.get(key)
        return None if entry is None else entry[0]

    def unwatch(self, keys: dict[bytes, int]) -> None:
        """A client stops watching ``keys`` (its WATCH table, emptied here)."""
        for key in keys:
            entry = self.watched.get(key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self.watched[key]
        keys.clear()

    # The operation log (node/persistence/oplog.py) records what commands resolved into:
    # ``own_ops`` collects (operation, envelope it was sent in or None, operation sent)
    # for every operation applied since the server last logged a command (None: not
    # collected), an operation and the one sent being its encoded bytes for a plain add
    # (add_plain); ``logged_ops``, set while a replay runs a logged command again, supplies
    # the operations it logged, applied instead of the ones the command computes now.
    own_ops: list | None = None
    logged_ops: LoggedSource | None = None

    def publish_to(self, publisher: Publisher) -> None:
        """Send what changes to the other regions through ``publisher`` from now on."""
        self.publisher = publisher

    @contextlib.contextmanager
    def applying_logged(self, logged: LoggedSource) -> Iterator[LoggedSource]:
        """While a replay runs a logged command again: ``logged`` supplies its operations."""
        self.logged_ops = logged
        try:
            yield logged
        finally:
            self.logged_ops = None

    def replace_keys(self, keys: ops.Keyspace) -> None:
        """The whole keyspace replaced (a snapshot loaded, a full-resync image, a state
        joined, writes taken alone withdrawn): memory is counted again when next read."""
        self.keys = keys

    def apply(self, op: ops.Op) -> object:
        """Apply an operation a command resolved and do the bookkeeping it implies.

        Only an operation that changed something counts as a change (Redis's
        dirty counter and WATCH ignore, e.g., an XDEL of a missing ID), and only
        such an operation is sent to other regions.
        """
        if self.logged_ops is not None:
            return self.logged_ops.instead_of(op)
        flush = type(op) is ops.FlushKeys
        touched = ops.touched_keys(self.keys, op) if flush else None  # a flush names its keys first
        result = ops.apply(self.keys, op, self.limits)
        env = None
        sent = op
        if any(r == 1 for r in result) if type(result) is list else result:
            if flush:
                assert isinstance(result, int) and touched is not None  # (a flush counts its keys)
                self.dirty += result  # one change per key, as Redis counts
                for key in touched:
                    self.touch(key)
            else:
                self.dirty += 1
                self.touch(op.key)
            if self.publisher is not None:
                sent = ops.replicated_form(op, result)
                env = self.publisher.publish(sent)
        if self.own_ops is not None:
            self.own_ops.append((op, env, sent))
        return result

    def add_plain(self, key: bytes, origin: int, id_: tuple[int, int], fields: list) -> None:
        """:meth:`apply` of ``AddEntry(key, origin, id_, fields)`` (an XADD without IDMP: every
        resolver resolves one into exactly that operation), with the same outcome, without
        building the operation: the bytes it is sent and logged as are made from its parts."""
        if self.logged_ops is not None:  # a replay applies the logged operation instead
            self.apply(ops.AddEntry(key, origin, id_, fields))
            return
        ops.append_entry(self.keys, key, origin, id_, fields, self.limits)
        self.dirty += 1
        # touch(key), inlined: every XADD passes here
        self.changed.add(key)
        watched = self.watched
        if watched:
            entry = watched.get(key)
            if entry is not None:
                self._clock += 1
                entry[0] = self._clock
        self.ready.add(key)
        own = self.own_ops
        if self.publisher is not None:
            env = self.publisher.publish_add(key, origin, id_, fields)
            if own is not None:
                own.append((env.op, env, env.op))
        elif own is not None:
            encoded = opcodec.encode_plain_add(key, origin, id_, fields)
            own.append((encoded, None, encoded))

    def expire_idmp(self, now: int, stable: dict[int, int] | None = None) -> int:
        """IDMP's time-based expiry (idmp-duration) over every stream; returns how many iids went.
        ``stable`` (a region of a cluster): only adds every region has applied go, and
        the size window is kept here too (crdt/idmp.py)."""
        dropped = 0
        keys = self.keys
        index = keys.idmp_keys()  # only the keys that hold maps: not a walk over every key
        for key in list(index):
            s = keys.get(key)
            if s is not None and s.idmp.producers:
                dropped += s.idmp.expire(now, stable)
            if s is None or not s.idmp.producers:
                index.discard(key)
        kept = keys.idmp_kept  # maps of dropped keys expire too, then go
        for key in list(kept):
            dropped += kept[key].expire(now, stable)
            if not kept[key].producers:
                del kept[key]
        return dropped

    def apply_remote(self, op: ops.Op) -> None:
        """An operation another region issued (delivered in causal order)."""
        if type(op) is ops.FlushKeys:
            touched = ops.touched_keys(self.keys, op)
            ops.apply(self.keys, op, self.limits)
            for key in touched:
                self.touch(key)
        else:
            ops.apply(self.keys, op, self.limits)
            self.touch(op.key)
        self.dirty += 1

    def append_remote(self, key: bytes, origin: int, id_: tuple[int, int], fields: list) -> None:
        """:meth:`apply_remote` of an AddEntry without IDMP, given its parts."""
        ops.append_entry(self.keys, key, origin, id_, fields, self.limits)
        self.touch(key)
        self.dirty += 1
