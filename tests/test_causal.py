"""Causal, exactly-once delivery (crdt/causal.py) under a hostile network.

Three regions issue operations; envelopes travel over links that drop,
duplicate and reorder them, and one link may be cut for the whole run (relay
through the third region must heal it).  After a final anti-entropy round every
region has applied every operation exactly once, each after all of its
dependencies.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt.causal import CausalLog, Envelope, dominates, merge

REGIONS = (1, 2, 3)


def test_version_vector_helpers():
    assert dominates({1: 2, 2: 1}, {1: 1}) and not dominates({1: 1}, {1: 2})
    assert merge({1: 2}, {1: 1, 3: 4}) == {1: 2, 3: 4}


def test_waits_for_dependencies_and_drops_duplicates():
    a, b, c = CausalLog(1), CausalLog(2), CausalLog(3)
    e1 = a.stamp("a1")
    assert b.receive(e1) == [e1]
    e2 = b.stamp("b1")  # depends on a1
    assert c.receive(e2) == []  # waits: a1 not there yet
    assert c.receive(e1) == [e1, e2]
    assert c.receive(e1) == [] and c.receive(e2) == []
    assert c.vv == {1: 1, 2: 1}


actions = st.lists(
    st.one_of(
        st.tuples(st.just("issue"), st.sampled_from(REGIONS)),
        st.tuples(st.just("send"), st.sampled_from(REGIONS), st.sampled_from(REGIONS),
                  st.integers(0, 1000), st.booleans(), st.booleans()),
    ),
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(script=actions, cut=st.sampled_from([None, (1, 3)]))
def test_exactly_once_in_causal_order(script, cut):
    logs = {r: CausalLog(r) for r in REGIONS}
    applied = {r: [] for r in REGIONS}
    issued = []

    def deliver(dst, env):
        for e in logs[dst].receive(env):
            applied[dst].append(e)

    for action in script:
        if action[0] == "issue":
            env = logs[action[1]].stamp(len(issued))
            issued.append(env)
            applied[action[1]].append(env)
            continue
        _, src, dst, pick, duplicate, drop = action
        if src == dst or (cut and {src, dst} == set(cut)):
            continue
        lacking = logs[src].missing(logs[dst].vv)
        if not lacking or drop:
            continue
        env = lacking[pick % len(lacking)]  # any one of them: reordering
        deliver(dst, env)
        if duplicate:
            deliver(dst, env)
    # heal: anti-entropy rounds over the links that exist
    for _ in range(3):
        for src in REGIONS:
            for dst in REGIONS:
                if src != dst and not (cut and {src, dst} == set(cut)):
                    for env in logs[src].missing(logs[dst].vv):
                        deliver(dst, env)
    for r in REGIONS:
        dots = [e.dot for e in applied[r]]
        assert sorted(dots) == sorted(e.dot for e in issued)  # everything, exactly once
        seen: dict[int, int] = {}
        for e in applied[r]:  # each after its dependencies
            assert all(seen.get(o, 0) >= n for o, n in e.deps if o != e.origin)
            assert e.n == seen.get(e.origin, 0) + 1
            seen[e.origin] = e.n
        assert not logs[r].pending


def test_trim_keeps_positions_absolute_and_knows_what_a_peer_lacks():
    from crdt.causal import CausalLog

    log = CausalLog(1)
    for i in range(5):
        log.stamp(f"op{i}")
    assert [e.n for e in log.since(3)] == [4, 5]
    dropped = log.trim(2)
    assert [e.n for e in dropped] == [1, 2] and log.base == 2 and log.end == 5
    assert [e.n for e in log.since(0)] == [3, 4, 5]  # what was dropped is simply not there
    assert [e.n for e in log.since(3, 4)] == [4]
    assert log.floor == {1: 2}
    assert log.lacks_dropped({1: 1}) and log.lacks_dropped({})
    assert not log.lacks_dropped({1: 2}) and not log.lacks_dropped({1: 5})
    assert log.missing({1: 3}) == log.since(3)


# ------------------------------------------------------------------ an operation counts once applied
class ApplyFailed(Exception):
    pass


def _state(log: CausalLog):
    return (dict(log.vv), list(log.log), dict(log.pending), {o: dict(v) for o, v in log.seen.items()})


def _failing_on(dot, applied: list):
    def apply(env):
        if env.dot == dot:
            raise ApplyFailed(env.dot)
        applied.append(env.dot)
    return apply


def test_an_envelope_counts_as_applied_only_after_apply_returns():
    a, b = CausalLog(1), CausalLog(2)
    e1, e2 = a.stamp("a1"), a.stamp("a2")
    seen_when_applied = []
    assert b.receive(e1, lambda env: seen_when_applied.append((env.dot, dict(b.vv), len(b.log)))) == [e1]
    assert seen_when_applied == [((1, 1), {}, 0)]  # apply ran before the log took it in
    assert b.receive(e2, lambda env: None) == [e2] and b.vv == {1: 2}


def test_an_apply_that_raises_leaves_the_log_as_if_the_envelope_never_came():
    a, b, c = CausalLog(1), CausalLog(2), CausalLog(3)
    e1 = a.stamp("a1")
    before = _state(c)
    applied: list = []
    with pytest.raises(ApplyFailed):
        c.receive(e1, _failing_on((1, 1), applied))
    assert _state(c) == before and applied == []
    assert c.missing({}) == []  # nothing to relay to another region
    assert c.receive(e1, _failing_on(None, applied)) == [e1]  # a resend is not taken for a duplicate
    assert applied == [(1, 1)] and c.vv == {1: 1}
    assert b.receive(e1) == [e1]
    assert c.missing(b.vv) == []


def test_a_failure_in_the_middle_of_a_batch_counts_only_what_was_applied():
    """Operations made ready by one arrival are applied one by one: if the second fails,
    the first stays applied, the failing one is forgotten, and the rest wait."""
    a, c = CausalLog(1), CausalLog(3)
    e1, e2, e3 = a.stamp("a1"), a.stamp("a2"), a.stamp("a3")
    applied: list = []
    assert c.receive(e3, _failing_on(None, applied)) == [] and c.receive(e2, _failing_on(None, applied)) == []
    with pytest.raises(ApplyFailed):
        c.receive(e1, _failing_on((1, 2), applied))
    assert applied == [(1, 1)]
    assert c.vv == {1: 1} and [e.dot for e in c.log] == [(1, 1)] and c.seen == {1: {1: 1}}
    assert list(c.pending) == [(1, 3)]               # still waits for a2
    assert [e.dot for e in c.missing({})] == [(1, 1)]  # only a1 may be relayed
    assert c.receive(e2, _failing_on(None, applied)) == [e2, e3]
    assert applied == [(1, 1), (1, 2), (1, 3)] and c.vv == {1: 3} and not c.pending


def test_an_acknowledgement_counts_for_stability_once_the_peers_own_operations_are_here():
    """A peer that never writes is known by its acknowledgements; but an acknowledgement of V
    counts only once every operation the peer issued before it (up to V[peer]) is applied
    here, since those may be concurrent with what V covers."""
    me = CausalLog(1)
    me.stamp(b"delete")  # 1.1
    assert me.stable([1, 2]) == {}  # region 2 never wrote: nothing known of it
    assert me.stable([1, 2], {2: {1: 1}}) == {1: 1}  # it acknowledged 1.1
    # region 2 issued 2.1 (not here yet) before acknowledging 1.1: the ack waits for it
    assert me.view(2, {1: 1, 2: 1}) == {}
    assert me.stable([1, 2], {2: {1: 1, 2: 1}}) == {}
    me.receive(Envelope(2, 1, (), b"op"))
    assert me.stable([1, 2], {2: {1: 1, 2: 1}}) == {1: 1, 2: 1}


def _receive_by_scanning(log: CausalLog, env: Envelope) -> list[Envelope]:
    """The rule as first written: after each arrival, scan every pending dot in sorted order
    until a pass applies nothing (what ``receive`` must still do, looking at less)."""
    if env.n <= log.vv.get(env.origin, 0) or env.dot in log.pending:
        return []
    log.pending[env.dot] = env
    out = []
    progress = True
    while progress:
        progress = False
        for dot in sorted(log.pending):
            cand = log.pending[dot]
            if cand.n == log.vv.get(cand.origin, 0) + 1 and \
                    all(log.vv.get(o, 0) >= n for o, n in cand.deps if o != cand.origin):
                del log.pending[dot]
                log.vv[cand.origin] = cand.n
                log.log.append(cand)
                out.append(cand)
                progress = True
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(REGIONS), st.sampled_from(REGIONS)), min_size=1, max_size=60),
       st.randoms(use_true_random=False))
def test_receive_applies_in_the_order_of_a_scan_of_every_pending_dot(history, rnd):
    """However envelopes of three regions' causal histories arrive (any order, duplicates),
    ``receive`` applies the same envelopes in the same order as scanning every pending
    dot after each arrival, and leaves the same ones waiting."""
    regions = {r: CausalLog(r) for r in REGIONS}
    issued = []
    for writer, learns_from in history:  # the writer first takes in what another region has
        for e in regions[learns_from].log:
            regions[writer].receive(e)
        issued.append(regions[writer].stamp(b"%d" % len(issued)))
    arrivals = issued + rnd.sample(issued, len(issued) // 3)  # some twice
    rnd.shuffle(arrivals)
    if len(arrivals) > 3:
        del arrivals[rnd.randrange(len(arrivals))]  # and one lost (others then wait for good)
    fast, reference = CausalLog(9), CausalLog(9)
    for env in arrivals:
        assert fast.receive(env) == _receive_by_scanning(reference, env)
    assert fast.vv == reference.vv and fast.log == reference.log
    assert set(fast.pending) == set(reference.pending)


class _RunFailed(Exception):
    def __init__(self, applied: int) -> None:
        super().__init__(applied)
        self.applied = applied


def _history(steps, rnd) -> list[Envelope]:
    """Operations of three regions, each writer first taking in what another region has."""
    regions = {r: CausalLog(r) for r in REGIONS}
    issued = []
    for writer, learns_from in steps:
        for e in regions[learns_from].log:
            regions[writer].receive(e)
        issued.append(regions[writer].stamp(b"%d" % len(issued)))
    return issued


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(REGIONS), st.sampled_from(REGIONS)), min_size=1, max_size=50),
       st.randoms(use_true_random=False), st.booleans(), st.integers(0, 60))
def test_receiving_a_batch_at_once_is_receiving_each_of_it_in_turn(steps, rnd, in_order, fail_at):
    """``receive_all`` of each batch applies the same envelopes in the same order as ``receive``
    of each envelope in turn, counts the same duplicates, and leaves the same log, waiting
    envelopes and views - batches in causal order (a peer's) or shuffled with duplicates and
    a loss, and when applying one of them fails (then both stop at it)."""
    issued = _history(steps, rnd)
    arrivals = list(issued)
    if not in_order:
        arrivals += rnd.sample(issued, len(issued) // 3)
        rnd.shuffle(arrivals)
        if len(arrivals) > 3:
            del arrivals[rnd.randrange(len(arrivals))]
    batches, at = [], 0
    while at < len(arrivals):
        size = rnd.randint(1, 8)
        batches.append(arrivals[at:at + size])
        at += size
    failing = issued[fail_at].dot if fail_at < len(issued) else None

    fast, reference = CausalLog(9), CausalLog(9)
    fast_applied: list = []
    reference_applied: list = []
    reference_duplicates = 0

    def apply_run(run):
        for k, env in enumerate(run):
            if env.dot == failing:
                raise _RunFailed(k)
            fast_applied.append(env.dot)

    def apply_one(env):
        if env.dot == failing:
            raise _RunFailed(0)
        reference_applied.append(env.dot)

    fast_failed = reference_failed = False
    fast_duplicates = 0
    for batch in batches:
        try:
            fast_duplicates += fast.receive_all(batch, apply_run)
        except _RunFailed:
            fast_failed = True
        try:
            for env in batch:
                if env.n <= reference.vv.get(env.origin, 0):
                    reference_duplicates += 1
                reference.receive(env, apply_one)
        except _RunFailed:
            reference_failed = True
        assert fast_applied == reference_applied
        assert fast_failed == reference_failed
        if fast_failed:
            break
        assert fast_duplicates == reference_duplicates
    assert fast.vv == reference.vv and fast.log == reference.log
    assert set(fast.pending) == set(reference.pending)
    assert fast.seen == reference.seen


def test_a_run_whose_apply_fails_counts_only_what_it_applied():
    a, c = CausalLog(1), CausalLog(3)
    e1, e2, e3 = a.stamp("a1"), a.stamp("a2"), a.stamp("a3")

    def fail_third(run):
        raise _RunFailed(2)

    with pytest.raises(_RunFailed):
        c.receive_all([e1, e2, e3], fail_third)
    assert c.vv == {1: 2} and c.log == [e1, e2] and not c.pending
    assert [e.dot for e in c.missing({})] == [(1, 1), (1, 2)]  # only what was applied may be relayed
    runs = []
    assert c.receive_all([e2, e3], runs.append) == 1  # e2 is a duplicate now
    assert runs == [[e3]] and c.vv == {1: 3}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(REGIONS), st.sampled_from(REGIONS)), min_size=0, max_size=40),
       st.randoms(use_true_random=False), st.integers(0, 45), st.booleans())
def test_the_acked_prefix_is_the_oldest_envelopes_every_peer_has(steps, rnd, stop, no_peer):
    """``acked_prefix``: the leading envelopes with ``n <= acked[origin]`` (all of them without
    a peer), at most ``stop``, and their bytes - what a scan of the log one by one finds."""
    log = CausalLog(9)
    for env in _history(steps, rnd):
        log.receive(env)
    acked = None if no_peer else {o: rnd.randint(0, 20) for o in REGIONS if rnd.random() < 0.8}
    k = 0
    while k < min(stop, len(log.log)) and (acked is None or acked.get(log.log[k].origin, 0) >= log.log[k].n):
        k += 1
    assert log.acked_prefix(acked, stop) == (k, sum(len(e.op) for e in log.log[:k]))


def test_a_batch_whose_dependencies_shrink_never_raises_the_views_past_one_by_one():
    """A peer that breaks the rules (an origin's later operation claiming less than an earlier
    one): the run counts the last one's view, never more than receiving each would."""
    batch = [Envelope(2, 1, ((1, 5),), b"a"), Envelope(2, 2, ((1, 0),), b"b")]
    fast, reference = CausalLog(9), CausalLog(9)
    fast.vv[1] = reference.vv[1] = 5
    assert fast.receive_all(batch, lambda run: None) == 0
    for env in batch:
        reference.receive(env)
    assert fast.vv == reference.vv and fast.log == reference.log
    assert all(fast.seen[2].get(o, 0) <= n for o, n in reference.seen[2].items())


def test_a_relayed_operation_does_not_stand_for_the_relaying_peers_acknowledgement():
    """Peer 3 sends its 3.1, then relays 2.1 while its own 3.2 (concurrent with 2.1) has not
    left yet: region 1 knows peer 3 holds 2.1 (nothing to send back), but peer 3 reported no
    version vector holding it, so 2.1 is not stable here - 3.2 may still come and meet it."""
    from crdt.sync import LinkState

    here = CausalLog(1)
    to_three = LinkState(here, {})
    for batch in ([Envelope(3, 1, (), b"3.1")], [Envelope(2, 1, (), b"2.1")]):
        here.receive_all(to_three.on_batch(batch), lambda run: None)
    assert to_three.acked == {3: 1, 2: 1}
    assert here.stable([1, 2, 3], {3: to_three.reported}).get(2, 0) == 0
    to_three.on_ack({3: 2, 2: 1, 1: 0})  # peer 3's whole version vector, 3.2 in it
    assert here.stable([1, 2, 3], {3: to_three.reported}).get(2, 0) == 0  # 3.2 not here yet
    here.receive_all(to_three.on_batch([Envelope(3, 2, ((3, 1),), b"3.2")]), lambda run: None)
    assert here.stable([1, 2, 3], {3: to_three.reported}).get(2, 0) == 1
