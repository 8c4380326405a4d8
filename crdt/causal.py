"""Causal, exactly-once delivery of replicated operations (pure).

Theory of operation
-------------------
Every replicated operation travels in an :class:`Envelope` stamped with its
*dot* ``(origin, n)`` - ``n`` counts the operations the origin region issued -
and ``deps``, the origin's version vector when it issued the operation.  A
region's version vector ``vv[o]`` is the highest ``n`` it has applied from
origin ``o``.  An envelope is applied when

- ``n == vv[origin] + 1`` (FIFO per origin), and
- ``deps[o] <= vv[o]`` for every other origin (everything it depended on is here);

``n <= vv[origin]`` means a duplicate, which is dropped; anything else waits.
So each operation is applied exactly once and after everything it depends on,
whatever the network does (loss is healed by resending, duplication and
reordering are absorbed here).

Applying is the caller's, and an envelope counts as applied only once it is:
:meth:`CausalLog.receive` hands each envelope that becomes ready to the
caller's ``apply`` *before* ``vv``, the log and ``seen`` take it in.  If
``apply`` raises, that envelope is forgotten (as if it never came: a resend
brings it again), nothing after it is applied, and the exception reaches the
caller - so an operation a region failed to apply is never counted as applied,
never acknowledged and never relayed.  A region cannot skip an operation and
stay convergent: the region stops instead (fail-stop) and a restart resumes.
:meth:`CausalLog.receive_all` takes a peer's whole batch with the same outcome as
receiving each envelope in turn, but hands the run of envelopes that are ready in
order (nearly all of a batch: peers send in causal order) to one ``apply_run`` call,
so the caller can apply and log them together.

What waits (``pending``) is counted (``pending_bytes``) so that the caller can
bound it: a peer that keeps the protocol sends a region's log in causal order,
so only duplicates and reordering ever wait; envelopes piling up past a bound
come from a peer that does not.  :meth:`CausalLog.drop_pending` forgets them -
safe, since nothing pending was counted, acknowledged or relayed, and a peer
sends again what it was never acknowledged.

The applied envelopes, in the order they were applied, form the region's log.
That order is causal, so a peer can be sent "every envelope of the log it has
not applied" in log order - including operations of third regions, which is
how a region relays: two regions whose direct link is cut still converge
through any region that talks to both.

The log is a backlog: its oldest envelopes can be dropped (:meth:`CausalLog.trim`)
once every peer has them, or when it grows too old or too large.  Positions in
it are absolute (``base`` counts what was dropped), and ``floor[o]`` is the
highest ``n`` of origin ``o`` dropped, so :meth:`CausalLog.lacks_dropped` tells
whether a peer needs what is no longer here - a full resync instead.  A state join
(crdt/join.py) brings operations without their envelopes: :meth:`CausalLog.absorb`
raises ``vv`` and ``floor`` to them, so a peer lacking them is sent an image too.

Causal stability: ``seen[o]`` is what region ``o`` had applied when it issued
the last of its operations applied here.  :meth:`CausalLog.stable` is the
pointwise minimum of that over every region: an operation at or below it has
been seen by every region, and every operation concurrent with it has already
been applied here (each region's operations arrive in order), so metadata kept
only to judge late concurrent operations (delete contexts) can be dropped.

A region that never writes would hold stability back for good if its view came
only from its operations' dependencies, so a peer's acknowledgement counts too
(:meth:`CausalLog.view`): a peer that acknowledged ``V`` has applied ``V``, and
once this region holds every operation of that peer up to ``V[peer]`` it holds
every operation the peer issued before acknowledging - the ones that could be
concurrent with what ``V`` covers.  Before that, the acknowledgement waits.

Histories that can be checked.  Two regions that hold *different* operations under the
same dot (a region restored from an older copy of its folder mints again numbers its
peers hold) would each drop the other's as duplicates and never converge, while their
version vectors agree.  So every origin's history carries a digest: a hash chain,
``heads[o]`` = H(H(...H(0, op1)..., op n-1), op n) over the operations' bytes (the same
bytes at every region: the wire's, the log's), xxh3-64 with the previous digest as its
seed.  ``heads`` holds the chain at ``vv[o]``, and ``recent`` the last
``HISTORY_WINDOW`` digests of each origin, so a peer's digest at a lower ``n`` can be
checked too.  Handshakes and acknowledgements carry ``(vv, heads)``; :func:`forks` says
where a peer's history differs from this region's (:class:`Fork`: the origin, the
``n`` and both digests).  Where a peer is ahead, this region cannot check, but the
peer can: once it sends what this region lacks, this region's chain at the same
``n`` differs from the peer's if their earlier histories did, and the next
acknowledgement shows it.  A state written by an older version has no digest for an
origin (absent from ``heads`` while ``vv[o] > 0``): it is unknown, never compared, and
learnt from a peer holding the same ``n`` (:meth:`CausalLog.learn_heads`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from xxhash import xxh3_64_intdigest

VersionVector = dict[int, int]

# per origin, how many of the latest history digests a region keeps (to check a peer's
# digest at an ``n`` below its own): a few seconds of a busy origin's operations
HISTORY_WINDOW = 4096


def chain(previous: int, op: Any) -> int:
    """The history digest after ``op``, the previous one being ``previous`` (0: empty)."""
    if isinstance(op, (bytes, bytearray, memoryview)):
        return xxh3_64_intdigest(op, previous)
    return xxh3_64_intdigest(repr(op).encode(), previous)  # pure models carry other values


class Fork(NamedTuple):
    """Two regions hold different histories of ``origin``: their digests at its ``n``-th
    operation differ (``here`` this region's, ``there`` the peer's)."""
    origin: int
    n: int
    here: int
    there: int


def dominates(a: VersionVector, b: VersionVector) -> bool:
    """True when ``a`` has seen everything ``b`` has (a >= b pointwise)."""
    return all(a.get(o, 0) >= n for o, n in b.items())


def merge(a: VersionVector, b: VersionVector) -> VersionVector:
    out = dict(a)
    for o, n in b.items():
        if n > out.get(o, 0):
            out[o] = n
    return out


class Envelope:
    """One replicated operation: its dot ``(origin, n)``, ``deps`` (the origin's version vector
    at issue, as sorted pairs) and ``op`` (the operation's bytes; pure models carry any value).

    Treated as immutable: the same envelope sits in the log, in every link's frames and in
    the relays.  Equal when the dot and deps are (``op`` is not compared), hashable.  A plain
    class rather than a frozen dataclass: compiled (setup.py), building one - once per
    operation at the issuing region and at every peer - costs a fifth of a frozen
    dataclass's ``__init__``."""

    __slots__ = ("origin", "n", "deps", "op")

    def __init__(self, origin: int, n: int, deps: tuple[tuple[int, int], ...], op: Any) -> None:
        self.origin = origin
        self.n = n
        self.deps = deps
        self.op = op

    @property
    def dot(self) -> tuple[int, int]:
        return (self.origin, self.n)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Envelope:
            return NotImplemented
        return self.origin == other.origin and self.n == other.n and self.deps == other.deps

    def __hash__(self) -> int:
        return hash((self.origin, self.n, self.deps))

    def __repr__(self) -> str:
        return f"Envelope(origin={self.origin!r}, n={self.n!r}, deps={self.deps!r}, op={self.op!r})"

    def __reduce__(self) -> tuple:
        # copy.deepcopy and pickle rebuild it from its four values
        return (Envelope, (self.origin, self.n, self.deps, self.op))

    def __setstate__(self, state: list) -> None:
        # a snapshot of the old pickle format (``braid convert-snapshot``) holds an envelope
        # as the frozen dataclass Envelope once was: created empty, then given its values
        self.origin, self.n, self.deps, self.op = state


class CausalLog:
    """One region's view: what it applied (``vv``, ``log``) and what waits."""

    def __init__(self, region: int) -> None:
        self.region = region
        self.vv: VersionVector = {}
        self.log: list[Envelope] = []
        self.pending: dict[tuple[int, int], Envelope] = {}
        self.pending_bytes = 0         # what ``pending`` holds (operation bytes)
        # origins that may have envelopes in ``pending`` (a superset; see receive): only the
        # next envelope of each can be ready, so receive looks at one per origin, not at all
        self.pending_origins: set[int] = set()
        self.base = 0                  # absolute position of log[0]: envelopes dropped so far
        self.floor: VersionVector = {}  # per origin, the highest n dropped from the log
        self.seen: dict[int, VersionVector] = {}  # per origin: its version vector at its last op here
        # per origin, the history digest at vv[o] (absent while vv[o] > 0: unknown, see the
        # module's theory) and the latest HISTORY_WINDOW digests, the last one at vv[o]
        self.heads: dict[int, int] = {}
        self.recent: dict[int, deque[int]] = {}

    def take(self, other: CausalLog) -> None:
        """Become ``other`` (a snapshot's or a full-resync image's log), keeping what this
        region knows of what others had seen (it only grows)."""
        self.vv, self.log, self.pending = other.vv, other.log, other.pending
        self.heads, self.recent = other.heads, other.recent
        self.pending_bytes = sum(_size(e.op) for e in self.pending.values())
        self.index_pending()
        self.base, self.floor = other.base, other.floor
        for origin, view in other.seen.items():
            self.seen[origin] = merge(self.seen.get(origin, {}), view)

    def absorb(self, other: CausalLog) -> list[Envelope]:
        """The region's state was joined with ``other``'s (crdt/join.py): it now holds every
        operation ``other`` held, most of them without their envelopes.  Where ``other`` held
        more of an origin, ``vv`` rises to it and so does ``floor`` (this log cannot send
        those operations: a peer lacking them needs an image), and the history digests are
        ``other``'s there (unknown if it did not know them).  This log's envelopes stay: a
        peer may still lack them.  Returns the envelopes that waited here (``pending``, taken
        out): the caller hands those the join did not bring to :meth:`receive` again."""
        vv, floor, heads, recent = self.vv, self.floor, self.heads, self.recent
        for origin, n in other.vv.items():
            if n <= vv.get(origin, 0):
                continue
            vv[origin] = n
            if n > floor.get(origin, 0):
                floor[origin] = n
            if origin in other.heads:
                heads[origin] = other.heads[origin]
                recent[origin] = deque(other.recent.get(origin, (other.heads[origin],)), maxlen=HISTORY_WINDOW)
            else:
                heads.pop(origin, None)
                recent.pop(origin, None)
        for origin, view in other.seen.items():
            self.seen[origin] = merge(self.seen.get(origin, {}), view)
        waiting = list(self.pending.values())
        self.drop_pending()
        return waiting

    def view(self, region: int, acked: VersionVector | None = None) -> VersionVector:
        """What ``region`` is known to have applied: the dependencies of its last operation
        applied here, raised by its acknowledgement ``acked`` once this region holds every
        operation ``region`` issued before acknowledging (see the module's theory)."""
        if region == self.region:
            return self.vv
        view = self.seen.get(region, {})
        if acked and self.vv.get(region, 0) >= acked.get(region, 0):
            view = merge(view, acked)
        return view

    def stable(self, regions, acked: dict[int, VersionVector] | None = None) -> VersionVector:
        """What every one of ``regions`` has seen, as far as this region knows (``acked``: per
        peer, the version vector it acknowledged on its link)."""
        acked = acked or {}
        views = [self.view(r, acked.get(r)) for r in regions]
        origins = set().union(*views) if views else set()
        return {o: min(v.get(o, 0) for v in views) for o in origins if all(v.get(o, 0) for v in views)}

    def _saw(self, env: Envelope) -> None:
        view = dict(env.deps)
        view[env.origin] = env.n
        self.seen[env.origin] = merge(self.seen.get(env.origin, {}), view)

    @property
    def end(self) -> int:
        """Absolute position after the last envelope."""
        return self.base + len(self.log)

    def vv_before(self, position: int) -> VersionVector:
        """The version vector without the envelopes at absolute positions ``position`` on: what
        this region held when its log ended there (what it may acknowledge once the operation
        log holds everything before ``position``).  An origin's envelopes sit in the log in the
        order of their numbers, so its first one from ``position`` on bounds it.  The result
        may be ``vv`` itself: the caller copies what it keeps."""
        rest = self.log[max(position - self.base, 0):]
        if not rest:
            return self.vv
        vv = dict(self.vv)
        bounded: set[int] = set()
        for e in rest:
            if e.origin not in bounded:
                bounded.add(e.origin)
                vv[e.origin] = e.n - 1
        return vv

    def since(self, start: int, stop: int | None = None) -> list[Envelope]:
        """Envelopes at absolute positions [start, stop) still held."""
        lo = max(start - self.base, 0)
        return self.log[lo:] if stop is None else self.log[lo:max(stop - self.base, lo)]

    def trim(self, count: int) -> list[Envelope]:
        """Drop the ``count`` oldest envelopes (they stay applied); returns them."""
        dropped, self.log = self.log[:count], self.log[count:]
        self.base += len(dropped)
        for e in dropped:
            if e.n > self.floor.get(e.origin, 0):
                self.floor[e.origin] = e.n
        return dropped

    def acked_prefix(self, acked: VersionVector | None, stop: int) -> tuple[int, int]:
        """How many of the oldest envelopes (at most ``stop``) have ``n <= acked[origin]`` -
        ``acked`` being per origin what every peer acknowledged (None: there is no peer, all
        count) - and their operations' bytes: what trimming the backlog may drop first."""
        log = self.log
        stop = min(stop, len(log))
        if acked is None:
            return stop, sum(len(e.op) for e in log[:stop])
        k = 0
        size = 0
        while k < stop:
            e = log[k]
            if acked.get(e.origin, 0) < e.n:
                break
            size += len(e.op)
            k += 1
        return k, size

    def lacks_dropped(self, peer_vv: VersionVector) -> bool:
        """Does a peer with ``peer_vv`` miss envelopes this log no longer holds?"""
        return any(peer_vv.get(o, 0) < n for o, n in self.floor.items())

    def stamp(self, op: Any) -> Envelope:
        """Issue a local operation: it is applied here at once (the caller applies it)."""
        n = self.vv.get(self.region, 0) + 1
        env = Envelope(self.region, n, tuple(sorted(self.vv.items())), op)
        self._chain(env)
        self.vv[self.region] = n
        self.log.append(env)
        return env

    # ------------------------------------------------------------ history digests
    def _chain(self, env: Envelope) -> None:
        """Extend ``env.origin``'s history digest by ``env`` (before ``vv`` counts it)."""
        origin = env.origin
        heads = self.heads
        previous = heads.get(origin)
        if previous is None:
            if env.n != 1:
                return  # unknown history: it stays unknown until learnt (learn_heads)
            previous = 0
        digest = chain(previous, env.op)
        heads[origin] = digest
        recent = self.recent.get(origin)
        if recent is None:
            recent = self.recent[origin] = deque(maxlen=HISTORY_WINDOW)
        recent.append(digest)

    def digest_at(self, origin: int, n: int) -> int | None:
        """This region's digest of ``origin``'s history up to its ``n``-th operation, if it
        holds that many and still knows it (None otherwise)."""
        held = self.vv.get(origin, 0)
        if n <= 0:
            return 0
        if n > held:
            return None
        if n == held:
            return self.heads.get(origin)
        recent = self.recent.get(origin)
        back = held - n
        if recent is None or back >= len(recent) or origin not in self.heads:
            return None
        return recent[len(recent) - 1 - back]

    def learn_heads(self, vv: VersionVector, heads: dict[int, int]) -> list[int]:
        """Take a peer's digests for the origins whose history this region does not know (a
        state of an older version) and where both hold as many operations; returns them."""
        learnt = []
        for origin, digest in heads.items():
            n = self.vv.get(origin, 0)
            if n and origin not in self.heads and vv.get(origin, 0) == n:
                self.heads[origin] = digest
                self.recent[origin] = deque([digest], maxlen=HISTORY_WINDOW)
                learnt.append(origin)
        return learnt

    def held_heads(self) -> dict[int, int]:
        """The digests of every origin whose history this region knows (vv's origins)."""
        return {o: d for o, d in self.heads.items() if self.vv.get(o, 0)}

    def _ready(self, env: Envelope) -> bool:
        return env.n == self.vv.get(env.origin, 0) + 1 and self._deps_held(env, _NO_TIP)

    def receive(self, env: Envelope, apply: Callable[[Envelope], Any] | None = None) -> list[Envelope]:
        """Accept an envelope from a peer: apply it and every envelope it makes ready, in
        causal order; returns them.

        ``apply(e)`` runs before ``e`` counts as applied; only once it returns do ``vv``,
        the log and ``seen`` take ``e`` in.  If it raises, ``e`` is dropped from
        ``pending`` (as if it had never been delivered), the envelopes applied before it
        stay applied, the rest stay pending, and the exception propagates.  Without
        ``apply`` (pure models whose applying cannot fail) the envelopes are only counted.
        """
        if env.n <= self.vv.get(env.origin, 0) or env.dot in self.pending:
            return []  # a duplicate
        pending, vv = self.pending, self.vv
        pending[env.dot] = env
        self.pending_bytes += _size(env.op)
        self.pending_origins.add(env.origin)
        out: list[Envelope] = []
        # Passes in origin order, each applying every origin's run of ready envelopes, until
        # one applies nothing: the order of a scan of every pending dot in sorted order, but
        # looking only at each origin's next dot (only it can be ready: FIFO per origin), so
        # a joining region holding thousands of envelopes that wait for another peer's does
        # not sort and test them all for each one that arrives.
        progress = True
        while progress:
            progress = False
            for origin in sorted(self.pending_origins):
                while True:
                    cand = pending.get((origin, vv.get(origin, 0) + 1))
                    if cand is None or not self._ready(cand):
                        break
                    del pending[cand.dot]
                    self.pending_bytes -= _size(cand.op)
                    if apply is not None:
                        apply(cand)  # raises: cand is forgotten, nothing counts it
                    self._chain(cand)
                    vv[cand.origin] = cand.n
                    self.log.append(cand)
                    self._saw(cand)
                    out.append(cand)
                    progress = True
        if not pending:
            self.pending_origins.clear()
        return out

    def receive_all(self, envs: list[Envelope], apply_run: Callable[[list[Envelope]], Any]) -> int:
        """Accept a peer's batch: the same applications, in the same order, as :meth:`receive`
        of each envelope in turn with ``apply = lambda e: apply_run([e])``; returns how many
        were already applied when their turn came (duplicates).

        A peer sends its log in causal order, so with nothing waiting a batch is nearly always
        a run of envelopes each ready once the ones before it are: those go to
        ``apply_run(run)`` in one call (one log record write and one count for the run, not
        one per envelope).  The first envelope that is not ready, and everything after it,
        go through :meth:`receive` one by one.  If ``apply_run`` raises, the exception's
        ``applied`` attribute (0 without one) says how many of the run it applied first:
        those count as applied, the rest are forgotten as :meth:`receive` forgets a failed
        one, and the exception propagates.
        """
        vv = self.vv
        run: list[Envelope] = []
        duplicates = 0
        at = 0
        if not self.pending:
            # the run's effect on vv, kept aside until the run is applied (``tip``)
            tip: dict[int, int] = {}
            for env in envs:
                origin = env.origin
                last = tip[origin] if origin in tip else vv.get(origin, 0)
                if env.n <= last:
                    duplicates += 1
                elif env.n == last + 1 and self._deps_held(env, tip):
                    run.append(env)
                    tip[origin] = env.n
                else:
                    break
                at += 1
            if run:
                try:
                    apply_run(run)
                except BaseException as e:
                    self._count_run(run[:getattr(e, "applied", 0)])
                    raise
                self._count_run(run)
        if at < len(envs):
            apply = _apply_one(apply_run)
            for env in envs[at:]:
                if env.n <= vv.get(env.origin, 0):
                    duplicates += 1
                self.receive(env, apply)
        return duplicates

    def _deps_held(self, env: Envelope, tip: VersionVector) -> bool:
        """Every region ``env`` depends on (but its own) applied up to its dependency, counting
        ``tip`` (per origin, what a run about to be applied brings) over ``vv``."""
        vv = self.vv
        for o, n in env.deps:
            if o != env.origin and (tip[o] if o in tip else vv.get(o, 0)) < n:
                return False
        return True

    def _count_run(self, run: list[Envelope]) -> None:
        """Take in an applied run: ``vv``, the log, and ``seen``.  An origin's view only grows
        along its operations, so the last of each origin's in the run says what all of them
        would; a peer sending dependencies that shrink gets no more than that (a lower view
        only holds stability back, never lets it run ahead)."""
        if not run:
            return
        vv = self.vv
        last: dict[int, Envelope] = {}
        for env in run:
            self._chain(env)
            vv[env.origin] = env.n
            last[env.origin] = env
        self.log.extend(run)
        for env in last.values():
            self._saw(env)

    def index_pending(self) -> None:
        """Call after setting ``pending`` from outside (a snapshot's, an image's log)."""
        self.pending_origins = {origin for origin, _n in self.pending}

    def drop_pending(self, which: Callable[[Envelope], bool] | None = None) -> int:
        """Forget the envelopes waiting for their dependencies (none was counted): every one, or
        those ``which`` picks; returns how many."""
        dropped = [dot for dot, e in self.pending.items() if which is None or which(e)]
        for dot in dropped:
            self.pending_bytes -= _size(self.pending.pop(dot).op)
        return len(dropped)

    def missing(self, peer_vv: VersionVector) -> list[Envelope]:
        """Envelopes this region holds that a peer with ``peer_vv`` has not applied."""
        return [e for e in self.log if e.n > peer_vv.get(e.origin, 0)]


_NO_TIP: VersionVector = {}  # no run under way (never written)


def forks(causal: CausalLog, peer_vv: VersionVector, peer_heads: dict[int, int]) -> list[Fork]:
    """Where a peer that holds ``peer_vv`` with digests ``peer_heads`` holds another history
    than this region: every origin whose digest this region knows at the peer's ``n`` and
    which differs (an origin the peer holds more of is checked by the peer, or here once
    this region caught up: see the module's theory)."""
    out: list[Fork] = []
    for origin, there in peer_heads.items():
        n = peer_vv.get(origin, 0)
        if not n:
            continue
        here = causal.digest_at(origin, n)
        if here is not None and here != there:
            out.append(Fork(origin, n, here, there))
    return out


def envelopes_of(rows: list) -> list[Envelope]:
    """Envelopes from ``(origin, n, deps, op)`` rows, ``deps`` a map of region to n (a packed
    batch as decoded, node/activeactive/hub.py), their deps as sorted pairs: once per
    operation a peer receives, so compiled with this module rather than a comprehension."""
    out: list[Envelope] = []
    for row in rows:
        origin, n, deps, op = row
        out.append(Envelope(origin, n, tuple(sorted(deps.items())), op))
    return out


def _apply_one(apply_run: Callable[[list[Envelope]], Any]) -> Callable[[Envelope], Any]:
    def apply(env: Envelope) -> Any:
        return apply_run([env])
    return apply


def _size(op: Any) -> int:
    """An operation's bytes (pure models carry other values: they count nothing)."""
    return len(op) if isinstance(op, (bytes, bytearray, memoryview)) else 0
