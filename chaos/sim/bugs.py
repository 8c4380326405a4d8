"""Planted bugs: each breaks one rule for the length of a schedule, and one checker must notice.

A checker that never fails is not a checker.  ``--bug NAME`` runs a schedule
with one of these patches in place (applied at run time to the module that
holds the rule, undone afterwards; production code never knows).
``tests/test_sim.py`` requires each to be caught by its checker within a
bounded number of seeds.

===============  ================================================  ===============
bug              what it breaks                                    caught by
===============  ================================================  ===============
no-deps          causal delivery applies an operation as soon as   causal
                 it is next from its origin, without waiting for
                 its dependencies from other origins
lying-fsync      the simulated disk's fsync returns success        durability
                 without making the bytes durable
trim-unobserved  DEL and trims remove every entry of the key       observed-remove
                 where they are applied, not only what the
                 deleting region had observed
strict-dup       strict mode mints IDs without the region's        strict-ids
                 number (sequence = top + 1)
skip-late        XREADGROUP ``>`` uses one cursor for the merged   never-skip
                 stream instead of one per origin log
gc-unstable      the cron's garbage collection drops every delete  observed-remove
                 context, stable or not (a late concurrent group
                 creation then survives where it should lose)
no-resync        a link never starts with a full-resync image:     liveness
                 a peer that lacks trimmed operations never gets
                 them, and no state join happens either
xcfgset-clears   XCFGSET drops a key's IDMP iids at once, not      convergence
                 once their adds are stable (a concurrent
                 duplicate arriving later is then kept there only)
flush-unobserved a FLUSHALL removes every entry of the keys it     convergence
                 names where it is applied, not only what the
                 flushing region had observed (a concurrent write
                 then survives only where it arrived after it)
removed-applied  the membership gate lets every peer through -     removed
                 a removed region too, without handing it the
                 newer list - and applies every operation, past
                 a removed region's frozen point too
nack-keeps-own   XNACK takes the owner off an entry but leaves     pel
                 it in the consumer's own PEL
no-start-gate    a start never waits for its peers: a region       durability
                 restored from an older copy of its folder (or
                 whose machine lost its unsynced tail) mints
                 again numbers its peers hold
                 (``ActiveActive.recover_own_operations`` does
                 nothing)
gate-after-      a start waits for its peers only after a crash    liveness
crash-only       of its machine (the rule before restores were
                 thought of): a region started from an older
                 copy of its folder mints again numbers its peers
                 hold, and the regions end with the same version
                 vectors and different histories (the history
                 digests)
cut-clean-tail   a start cuts a bad last record of a log closed    damage
                 cleanly as a torn tail instead of refusing it
                 (the run mark ``clean`` is not read)
image-unsaved    the log does not hold records back after a        exceptions
                 full-resync image whose snapshot could not be
                 written (``hold_for_image`` does nothing, in the
                 simulated log that stands in for
                 ``OperationLog``): they follow the old log, writes
                 are taken, and after a crash the log replays
                 operations on the image onto the old state - the
                 region cannot start
no-settle        a voter never settles a promise its coordinator   liveness
                 left (``ActiveActive.left_promise`` finds none):
                 a forced removal whose braid-admin was killed
                 takes effect nowhere, its voters' holds stay
                 and the removed region is cut off for good
lone-unheld      writes a region takes alone leave at once instead  convergence
                 of waiting until every member answered (the hold
                 is ignored): a member that held other operations
                 under those numbers, back later, never converges
                 with the regions that took them
withdraw-forgets a region that withdraws writes it took alone     durability
                 forgets them instead of issuing them again
join-keeps-      a state join keeps every entry of the receiving   convergence
deleted          region that the other region deleted (DEL,
                 XDEL, trims: their tombstones are lost), so a
                 deletion made on one side of a long partition
                 is undone on the other
oom-drops-remote a region over its maxmemory drops the other        exceptions
                 regions' operations (counted as received,
                 neither applied nor logged) as its clients'
                 writes are refused: the region differs from
                 the others, and its restart finds its log
                 does not hold what it counted
wait-counts-     WAIT counts a peer once its link sent it the      wait
sent             operation, not once the peer acknowledged it
                 (``ActiveActive.holders`` reads the link's
                 ``sent``): the count includes regions the
                 operation has not reached yet
wait-counts-     WAIT counts what a peer's Hello or Welcome said   wait
handshake        it holds (``hub.peer_acked``: what it applied),
                 not only what its acks said (``peer_said``: what
                 its log handed to its OS), so a peer holding
                 records back behind a full-resync image's
                 snapshot counts for operations a SIGKILL there
                 would lose
waitaof-counts-  WAITAOF counts what a peer's acks said it holds   wait
written          (what its log handed to its OS), not what they
                 said is on its disk (``Ack.synced``): a crash of
                 that peer's machine may lose what WAITAOF
                 promised was on it
===============  ================================================  ===============

lone-unheld and withdraw-forgets need the lone fault (not in the default set).
oom-drops-remote needs the memory fault (not in the default set).
join-keeps-deleted needs a state join: the backlog fault with a partition longer than it.  The
four before no-settle need the operator's faults (restore, bitflip, image-crash), which the
default set holds; image-unsaved also the backlog fault (it makes full resyncs common).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from crdt import causal, groups, idgen, idmp, join, ops, sync
from crdt.ids import MAX_ID
from node.activeactive.hub import ReplicationHub
from node.activeactive.region import ActiveActive, MembershipGate
from node.region.core import RegionCore

from . import disk


def _no_deps_ready(self, env) -> bool:
    return env.n == self.vv.get(env.origin, 0) + 1


def _lying_fsync(self) -> None:
    self.fsyncs += 1  # says it did; the cache stays volatile


def _remove_everything(keys, key, s, cutoffs):
    return _real_remove_upto(keys, key, s, {origin: MAX_ID for origin in s.logs})


def _seq_without_region(floor: int, region: int, stride: int) -> int:
    return floor + 1


def _one_cursor_read(s, g, consumer, count, noack, now, take=None):
    out = groups.read_new(s, g, consumer, g.last_id, count, noack, now, take)
    for _id, _flat in out:  # keep the per-origin cursors XACK's watermark reads
        for origin, log in s.logs.items():
            if log.get(_id) is not None:
                g.cursors[origin] = _id
    return out


def _one_cursor_has_new(s, g) -> bool:
    return bool(s.length) and s.top_id() > g.last_id


def _collect_everything(keys, stable) -> int:
    dropped = len(keys.key_contexts) + len(keys.group_contexts)
    keys.key_contexts.clear()
    keys.group_contexts.clear()
    return dropped


def _never_an_image(vv, peer_floor) -> bool:
    return False


def _clear_at_once(self, duration, maxsize) -> None:
    if duration is not None:
        self.duration = duration
    if maxsize is not None:
        self.maxsize = maxsize
    self.producers.clear()
    self.dots.clear()
    self.cleared.clear()


def _flush_everything(keys, op) -> int:
    return sum(ops._observed_remove_key(keys, key, {origin: MAX_ID for origin in s.logs}, op.context)
               for key in op.observed if (s := keys.get(key)) is not None)


def _admit_every_peer(self, peer, epoch, blob) -> str:
    return ""


def _admit_every_operation(self, env) -> str:
    return ""


def _release_keeping_it_owned(self, id_, mode, retrycount=-1, force=False, exists=False) -> bool:
    nack = self.pel.get(id_)
    if nack is None:
        if not (force and exists):
            return False
        nack = self.pel[id_] = groups.Nack(None, 0, 0)
    nack.consumer = None  # the consumer's own PEL keeps it
    nack.delivery_count = groups.released_count(nack.delivery_count, mode, retrycount)
    self.touch(nack, 0)
    return True


def _no_start_gate(self, on_recovered, machine_crash=False) -> None:
    on_recovered()  # "nothing to take back": writes at once


_real_recover = ActiveActive.recover_own_operations


def _gate_after_crash_only(self, on_recovered, machine_crash=False) -> None:
    if machine_crash:  # the rule before restores were thought of: only a lost unsynced tail waits
        _real_recover(self, on_recovered, machine_crash)
    else:
        on_recovered()


def _no_left_promise(self, now=None):
    return None


def _tail_never_damage(closed_cleanly: bool) -> bool:
    return False


def _hold_nothing(self, data, record, error, saved) -> None:
    """The image's snapshot failed: the log goes on after the old state's records anyway."""


def _sendable_ignoring_the_hold(self) -> int:
    return self.causal.end if self.sendable is None else self.sendable


_real_withdraw_alone = ActiveActive.withdraw_alone


def _withdraw_forgetting(self):
    again = _real_withdraw_alone(self)
    self.lone.reissue = []
    return again


def _keep_what_the_other_deleted(s, sb, tops_b, losers) -> None:
    """The join removes nothing ``b`` deleted (only IDMP conflict losers would go)."""


_real_apply_remote_run = RegionCore.apply_remote_run


def _drop_remote_over_limit(self, run) -> None:
    """Over maxmemory, other regions' operations count as received and are neither applied
    nor logged."""
    if not (self.memory.limit and self.memory.out_of_memory()):
        _real_apply_remote_run(self, run)


def _holders_once_sent(self, n: int, on_disk: bool = False) -> list[int]:
    """WAIT counts the peers whose link sent the operation, whether they acknowledged it or not."""
    hub, me = self.hub, self.region
    return [peer for peer in self.membership.live()
            if peer != me and peer in hub.links and not hub.is_cut(peer) and hub.links[peer].state.sent.get(me, 0) >= n]


def _holders_by_handshake(self, n: int, on_disk: bool = False) -> list[int]:
    """WAIT counts from ``peer_acked``, which a handshake sets to what the peer applied."""
    hub, me = self.hub, self.region
    acked = hub.peer_acked
    return [peer for peer in self.membership.live()
            if peer != me and peer in hub.links and not hub.is_cut(peer) and acked.get(peer, {}).get(me, 0) >= n]


def _holders_on_disk_by_what_was_written(self, n: int, on_disk: bool = False) -> list[int]:
    """WAITAOF counts what peers' acks said they hold (handed to their OS), not what is on their disks."""
    return _real_holders(self, n, False)


_real_holders = ActiveActive.holders
_real_remove_upto = ops._remove_upto

BUGS: dict[str, tuple[str, list[tuple[object, str, Callable]]]] = {
    "no-deps": ("causal", [(causal.CausalLog, "_ready", _no_deps_ready)]),
    "lying-fsync": ("durability", [(disk.SimFile, "fsync", _lying_fsync)]),
    "trim-unobserved": ("observed-remove", [(ops, "_remove_upto", _remove_everything)]),
    "strict-dup": ("strict-ids", [(idgen, "regional_seq", _seq_without_region)]),
    "skip-late": ("never-skip", [(groups, "read_new_per_origin", _one_cursor_read),
                                 (groups, "has_new_per_origin", _one_cursor_has_new)]),
    "gc-unstable": ("observed-remove", [(ops, "collect_garbage", _collect_everything)]),
    "no-resync": ("liveness", [(sync.LinkState, "peer_sends_image", staticmethod(_never_an_image))]),
    "xcfgset-clears": ("convergence", [(idmp.IdmpState, "configure", _clear_at_once)]),
    "flush-unobserved": ("convergence", [(ops, "_flush_keys", _flush_everything)]),
    "removed-applied": ("removed", [(MembershipGate, "check_peer", _admit_every_peer),
                                    (MembershipGate, "admits", _admit_every_operation)]),
    "nack-keeps-own": ("pel", [(groups.ConsumerGroup, "release", _release_keeping_it_owned)]),
    "no-start-gate": ("durability", [(ActiveActive, "recover_own_operations", _no_start_gate)]),
    "gate-after-crash-only": ("liveness", [(ActiveActive, "recover_own_operations", _gate_after_crash_only)]),
    "cut-clean-tail": ("damage", [(disk, "_clean_tail_is_damage", _tail_never_damage)]),
    "image-unsaved": ("exceptions", [(disk.SimOperationLog, "hold_for_image", _hold_nothing)]),
    "no-settle": ("liveness", [(ActiveActive, "left_promise", _no_left_promise)]),
    "lone-unheld": ("convergence", [(ReplicationHub, "sendable_upto", _sendable_ignoring_the_hold)]),
    "withdraw-forgets": ("durability", [(ActiveActive, "withdraw_alone", _withdraw_forgetting)]),
    "join-keeps-deleted": ("convergence", [(join, "_remove_deleted", _keep_what_the_other_deleted)]),
    "oom-drops-remote": ("exceptions", [(RegionCore, "apply_remote_run", _drop_remote_over_limit)]),
    "wait-counts-sent": ("wait", [(ActiveActive, "holders", _holders_once_sent)]),
    "wait-counts-handshake": ("wait", [(ActiveActive, "holders", _holders_by_handshake)]),
    "waitaof-counts-written": ("wait", [(ActiveActive, "holders", _holders_on_disk_by_what_was_written)]),
}
# fault kinds besides the default ones
NEEDS_FAULTS = {"no-resync": ("backlog",), "image-unsaved": ("backlog",), "lone-unheld": ("lone",),
                "withdraw-forgets": ("lone",), "join-keeps-deleted": ("backlog",), "oom-drops-remote": ("memory",)}


def catches(bug: str) -> str:
    """The checker that must report ``bug``."""
    return BUGS[bug][0]


@contextlib.contextmanager
def planted(bug: str | None) -> Iterator[None]:
    """Run the body with ``bug`` in place (None: no bug)."""
    if bug is None:
        yield
        return
    if bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r} (known: {', '.join(BUGS)})")
    patches = BUGS[bug][1]
    saved = [(target, name, getattr(target, name)) for target, name, _ in patches]
    try:
        for target, name, replacement in patches:
            setattr(target, name, replacement)
        yield
    finally:
        for target, name, original in saved:
            setattr(target, name, original)
