"""The relay hold of a link (crdt.sync.RelayHold) on an injected clock: no timers, no sleeps.

Region 2's link to region 1 holds region 3's operations (a third region's) back; ``acked``
stands for what region 1 is known to hold (``LinkState.acked``), raised here by hand after
each ``on_ack`` as the link state raises it.
"""

from __future__ import annotations

import math

from crdt.causal import Envelope
from crdt.sync import RELAY_QUIET_FACTOR, RelayHold

DELAY = 0.05
HERE, PEER, THIRD = 2, 1, 3


def envs(origin: int, first: int, last: int) -> list[Envelope]:
    return [Envelope(origin, n, (), b"op-%d-%d" % (origin, n)) for n in range(first, last + 1)]


def ack(hold: RelayHold, acked: dict[int, int], vv: dict[int, int], now: float) -> None:
    """What a link does with an Ack: the hold's bookkeeping, then the link state's raise."""
    hold.on_ack(acked, vv, now)
    for o, n in vv.items():
        acked[o] = max(acked.get(o, 0), n)


def dots(envelopes: list[Envelope]) -> list[tuple[int, int]]:
    return [e.dot for e in envelopes]


def test_own_and_the_peers_operations_pass_third_regions_are_held():
    hold = RelayHold(HERE, PEER, now=0.0)
    mixed = [*envs(HERE, 1, 2), *envs(THIRD, 1, 2), *envs(PEER, 1, 1)]
    relays, direct = hold.outgoing(mixed, {}, 0.0, DELAY)
    assert relays == [] and dots(direct) == [(2, 1), (2, 2), (1, 1)]
    assert [e.dot for _at, e in hold.held] == [(3, 1), (3, 2)]
    # nothing else would look at the link: the hold asks for a look when the first hold ends
    assert hold.wake_at == DELAY


def test_a_relay_is_due_after_the_delay_while_the_peer_acknowledges_others():
    hold = RelayHold(HERE, PEER, now=0.0)
    acked: dict[int, int] = {}
    ack(hold, acked, {HERE: 4}, 0.01)  # the peer acknowledges this region's operations: it is working
    assert hold.hold(envs(THIRD, 1, 3), 0.02, DELAY) == []
    assert hold.due(acked, 0.02 + DELAY / 2, DELAY) == []
    assert hold.wake_at == 0.02 + DELAY  # the look it asks for: when the hold ends
    hold.woken()  # the driver's timer fired
    assert hold.wake_at == math.inf
    assert dots(hold.due(acked, 0.02 + DELAY, DELAY)) == [(3, 1), (3, 2), (3, 3)]
    assert not hold.held and hold.relayed == {THIRD: 3} and hold.wake_at == math.inf


def test_a_held_relay_is_dropped_once_the_peer_acknowledges_it():
    hold = RelayHold(HERE, PEER, now=0.0)
    acked: dict[int, int] = {}
    hold.hold(envs(THIRD, 1, 5), 0.0, DELAY)
    ack(hold, acked, {THIRD: 3}, 0.01)  # the peer got 3.1 to 3.3 from region 3 itself
    assert hold.due(acked, 0.02, DELAY) == [] and [e.n for _at, e in hold.held] == [4, 5]
    ack(hold, acked, {THIRD: 5}, 0.03)
    assert hold.due(acked, 10.0, DELAY) == [] and not hold.held  # long past any hold: nothing to relay
    assert hold.relayed == {}


def test_nothing_is_relayed_while_the_peers_acks_of_that_region_keep_rising():
    """The peer's direct link to region 3 works, far behind: its acks of region 3 rise a
    little every 30 ms, and every held operation goes once acknowledged, never as a copy."""
    hold = RelayHold(HERE, PEER, now=0.0)
    acked: dict[int, int] = {}
    hold.hold(envs(THIRD, 1, 40), 0.0, DELAY)
    now = 0.0
    for n in range(1, 41):
        now += 0.03  # less than the delay between two rises, for a second and more in all
        ack(hold, acked, {THIRD: n}, now)
        assert hold.due(acked, now, DELAY) == [], f"relayed at {now:.2f} s with the peer's acks at 3.{n}"
    assert not hold.held and hold.relayed == {}


def test_a_relay_waits_the_quiet_factor_when_the_peer_acknowledges_nothing():
    hold = RelayHold(HERE, PEER, now=0.0)
    hold.hold(envs(THIRD, 1, 2), 0.0, DELAY)
    quiet = DELAY * RELAY_QUIET_FACTOR
    assert RELAY_QUIET_FACTOR > 1
    assert hold.due({}, DELAY * 1.5, DELAY) == []  # held the delay, but the peer said nothing at all
    assert hold.wake_at == quiet
    assert hold.due({}, quiet - 0.001, DELAY) == []
    assert dots(hold.due({}, quiet, DELAY)) == [(3, 1), (3, 2)]


def test_acks_of_what_this_link_relayed_do_not_show_the_direct_link_working():
    """The peer acknowledging the copies it was sent is no sign its own link to region 3 is
    back: the next operation of region 3 goes after the delay, not after a new wait from that
    ack; an ack past what was relayed is such a sign, and holds the next one back again."""
    hold = RelayHold(HERE, PEER, now=0.0)
    acked: dict[int, int] = {}
    ack(hold, acked, {HERE: 1}, 0.001)  # the peer works (it acknowledges others')
    hold.hold(envs(THIRD, 1, 2), 0.0, DELAY)
    assert dots(hold.due(acked, DELAY, DELAY)) == [(3, 1), (3, 2)]
    ack(hold, acked, {THIRD: 2}, 0.06)  # it acknowledges the copies
    assert THIRD not in hold.ack_moved
    hold.hold(envs(THIRD, 3, 3), 0.07, DELAY)
    assert dots(hold.due(acked, 0.07 + DELAY, DELAY)) == [(3, 3)]  # not 0.06 + a wait
    hold.hold(envs(THIRD, 5, 5), 0.13, DELAY)
    ack(hold, acked, {THIRD: 4}, 0.2)  # past the relayed 3.3: it got 3.4 from region 3 itself
    assert hold.ack_moved[THIRD] == 0.2
    ack(hold, acked, {HERE: 2}, 0.21)  # and it goes on acknowledging others'
    # 3.5's own hold ended at 0.18, but the acks of region 3 rose at 0.2: it waits a delay from then
    assert hold.due(acked, 0.22, DELAY) == [] and hold.wake_at == 0.2 + DELAY
    assert dots(hold.due(acked, 0.2 + DELAY, DELAY)) == [(3, 5)]


def test_the_wake_time_follows_the_earliest_relay_that_may_come_due():
    hold = RelayHold(HERE, PEER, now=0.0)
    acked: dict[int, int] = {}
    ack(hold, acked, {HERE: 1}, 0.0)
    hold.hold(envs(THIRD, 1, 1), 0.01, DELAY)
    first_ends, second_ends = 0.01 + DELAY, 0.03 + DELAY
    assert hold.due(acked, 0.01, DELAY) == [] and hold.wake_at == first_ends
    hold.hold(envs(THIRD, 2, 2), 0.03, DELAY)
    assert hold.due(acked, 0.03, DELAY) == [] and hold.wake_at == first_ends  # the earlier look stands
    ack(hold, acked, {THIRD: 1}, 0.04)  # the peer got 3.1 from region 3 itself: its acks of 3 rose
    hold.woken()
    # 3.1 is dropped; 3.2 waits for the acks of region 3 to stand still - and since the peer
    # acknowledged nothing after they rose, the quiet wait
    assert hold.due(acked, first_ends, DELAY) == [] and [e.n for _at, e in hold.held] == [2]
    assert hold.wake_at == 0.04 + DELAY * RELAY_QUIET_FACTOR
    ack(hold, acked, {HERE: 2}, 0.05)  # it acknowledges this region's operations again
    # a look before 3.2's own hold ends asks for one then (a bound from below: it may be due later)
    assert hold.due(acked, 0.07, DELAY) == [] and hold.wake_at == second_ends
    hold.woken()
    assert hold.due(acked, second_ends, DELAY) == [] and hold.wake_at == 0.04 + DELAY
    hold.woken()
    assert dots(hold.due(acked, 0.04 + DELAY, DELAY)) == [(3, 2)] and hold.wake_at == math.inf


def test_a_relay_delay_of_zero_relays_at_once():
    hold = RelayHold(HERE, PEER, now=0.0)
    relays, direct = hold.outgoing([*envs(THIRD, 1, 2), *envs(HERE, 1, 1)], {}, 0.0, 0.0)
    assert relays == [] and dots(direct) == [(3, 1), (3, 2), (2, 1)] and not hold.held
    # what a non-zero delay held before goes when its own hold ends: no wait for the acks
    hold.hold(envs(THIRD, 3, 3), 0.0, DELAY)
    assert hold.outgoing([], {}, DELAY / 2, 0.0) == ([], [])
    relays, direct = hold.outgoing([], {}, DELAY, 0.0)
    assert dots(relays) == [(3, 3)] and direct == []
