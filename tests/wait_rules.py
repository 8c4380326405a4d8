"""WAIT in the convergence state machine (tests/test_convergence_stateful.py): its rules and invariants.

The machine has no links: its network delivers envelopes one at a time.  Here a link's acks
are a rule of their own (``acknowledge``: a region learns what a peer acknowledges, as the
link's ``Ack`` tells it - ``hub.acknowledgement()``, which, without an operation log, is
everything the peer applied - through ``ReplicationHub.ack_said``), every live member's link
is taken to be up when a client WAITs, and a restored region's links are new connections,
whose handshake forgets what its acks said (``Link``: the next acks say it again).

A client WAITs after its writes at a region (``WAIT numregions 1`` through the region's own
command path; a client that would block gets what the count is at its timeout), and the
regions it was counted at (``ActiveActive.holders``, the rule ``regions_holding`` counts by)
are recorded.  Invariants: each of those regions that is still the same member holds the
operation (its version vector covers it); and after full delivery a write WAIT confirmed at
one region or more is held by every live region, under its dot with the same bytes, while
one of the regions it was counted at remains (restored regions and removed ones are gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from node.region.blocking import Blocked


class _LinkUp:
    """What the WAITing region's hub holds for a peer whose link is up: WAIT only asks it to
    ack soon (the machine's acks cross when its rule says so)."""

    peer_wants_ack = 0

    def want_ack(self, n: int) -> None:
        pass


LINK_UP: Any = _LinkUp()


@dataclass(frozen=True)
class Confirmed:
    origin: int
    n: int
    op: bytes | None
    holders: tuple[tuple[int, object], ...]  # (number, the region object it was then)


class WaitRules:
    """Mixed into the machine, which has ``regions`` (live members), ``_link`` and ``wait_confirmed``."""

    regions: dict[int, Any]
    wait_confirmed: list[Confirmed]

    @rule()
    def acknowledge(self):
        """Acks cross every link: each region learns what each peer acknowledges now."""
        for a in self.regions.values():
            for b in self.regions.values():
                if a is not b:
                    a.aa.hub.ack_said(b.number, b.aa.hub.acknowledgement()[0])

    def links_restart(self, number: int) -> None:
        """Region ``number``'s links are new connections: what its acks said goes (``Link``)."""
        for n, r in self.regions.items():
            if n != number:
                r.aa.hub.peer_said[number] = {}

    @rule(data=st.data(), wanted=st.integers(1, 3), acks_came=st.booleans())
    def wait(self, data, wanted, acks_came):
        """A client that wrote at a region WAITs for ``wanted`` other regions (1 ms), maybe
        once acks crossed every link (``acks_came``)."""
        if acks_came:
            self.acknowledge()
        writers = sorted(n for n, r in self.regions.items() if r.client.wrote_upto and r.aa.writable)
        if not writers:
            return
        r = self.regions[data.draw(st.sampled_from(writers), label="waiter")]
        n = r.client.wrote_upto
        links = r.aa.hub.links
        links.update({p: LINK_UP for p in self.regions if p != r.number})
        try:
            reply = r.call(b"WAIT", b"%d" % wanted, b"1")
            if type(reply) is Blocked:  # not reached: the count at its timeout
                reply = reply.timeout_reply_of()
            holders = r.aa.holders(n)
        finally:
            links.clear()
        assert reply == len(holders), (reply, holders)
        for h in holders:
            assert self.regions[h].causal.vv.get(r.number, 0) >= n, f"WAIT counted region {h} for {r.number}.{n}"
        if holders:
            op = next((e.op for e in r.causal.log if e.origin == r.number and e.n == n), None)  # (None: trimmed)
            self.wait_confirmed.append(Confirmed(r.number, n, op, tuple((h, self.regions[h]) for h in holders)))

    def _remaining(self, c: Confirmed) -> list[Any]:
        """The regions WAIT counted that are still the members they were (not removed, not restored)."""
        return [obj for h, obj in c.holders if self.regions.get(h) is obj]

    @invariant()
    def wait_counted_regions_hold_the_write(self):
        for c in self.wait_confirmed:
            for r in self._remaining(c):
                assert r.causal.vv.get(c.origin, 0) >= c.n, f"region {r.number} lost {c.origin}.{c.n}"

    def check_wait_confirmed_held(self) -> None:
        """After full delivery: a write WAIT confirmed is held everywhere while a region it was counted at remains."""
        for c in self.wait_confirmed:
            if not self._remaining(c):
                continue
            for r in self.regions.values():
                assert r.causal.vv.get(c.origin, 0) >= c.n, f"region {r.number} lacks {c.origin}.{c.n} WAIT confirmed"
                held = next((e.op for e in r.causal.log if e.dot == (c.origin, c.n)), c.op)
                assert c.op is None or held == c.op, f"region {r.number} holds another operation under {c.origin}.{c.n}"
