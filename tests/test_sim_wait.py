"""WAIT in the deterministic simulation (chaos/sim/waits.py, the ``wait`` check of chaos/sim/checks.py).

The planted bug that proves the check can fail (``wait-counts-sent``) runs with the others in
tests/test_sim.py (``-k planted``).
"""

from __future__ import annotations

import re

from chaos.sim import SimConfig, run_sim


def test_wait_answers_are_traced_with_the_regions_counted():
    outcome = run_sim(SimConfig(seed=1))
    assert outcome.ok, [v.render() for v in outcome.verdicts if not v.ok]
    answers = [line for line in outcome.trace if re.search(r" WAIT \d+ \d+( \(timed out\))? -> \d+ \(", line)]
    assert any(re.search(r"-> [1-9] \(r\d", line) for line in answers), answers
    assert any(re.search(r"wait: \d+ WAIT\(s\) answered, [1-9]\d* confirmed", line) for line in outcome.trace)


def test_a_write_counted_only_at_a_leaving_region_goes_with_it_and_its_origins_restore():
    """Found by a random batch (seed 1240365301): region 3's WAIT counted only region 1 for
    3.8, while region 1 was leaving (a leaving region is a live member: WAIT counts it).
    Region 3 was then restored from a copy older than 3.8, region 1's leave completed - a
    graceful removal waits only until the others hold the leaver's own operations - and
    region 3 minted 3.8 again.  WAIT's promise holds while one of the regions it counted
    stays a member: here none did, and the origin lost it to a restore, so the check
    excuses it (counted in the trace)."""
    outcome = run_sim(SimConfig(seed=1240365301))
    assert outcome.ok, [v.render() for v in outcome.verdicts if not v.ok]
    assert any(line.endswith("r3 WAIT 1 1000 -> 1 (r1) for 3.8") for line in outcome.trace)
    assert any("1 of them lost with every region that held them" in line for line in outcome.trace)


def test_a_peer_holding_records_behind_an_unsaved_image_is_not_counted_from_its_handshake():
    """Found by a random batch (seed 605924532; ``--bug wait-counts-handshake`` plants it back):
    region 4 installed a full-resync image whose snapshot its full disk refused, so later
    records waited in memory; its link to region 2 handshook again with a Welcome saying
    2.25, and region 2's WAIT counted region 4 for 2.25 although its log had handed none of
    it to its OS.  WAIT counts what acks said since the handshake (``hub.peer_said``)."""
    outcome = run_sim(SimConfig(seed=605924532))
    assert outcome.ok, [v.render() for v in outcome.verdicts if not v.ok]
    assert any("IMAGE-CRASH r4: the snapshot of r1's image cannot be written" in line for line in outcome.trace)
    assert any("link 2-4 up (connection 12): hello vv 1:13,2:25,3:10, welcome vv 1:16,2:25" in line
               for line in outcome.trace)
    assert any(line.endswith("r2 WAIT 3 200 (timed out) -> 0 (none) for 2.25") for line in outcome.trace)
