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
    assert any(re.search(r"wait: \d+ WAIT\(s\) and WAITAOF\(s\) answered, [1-9]\d* confirmed", line)
               for line in outcome.trace)


def test_a_leaving_region_is_not_counted():
    """Found by a random batch (seed 1240365301): region 3's WAIT counted only region 1 for
    3.8 while region 1 was leaving.  A graceful removal waits only until the others hold the
    leaver's own operations, so region 1 left without handing 3.8 over; region 3 was then
    restored from an older copy and 3.8 was gone.  WAIT counts active members only: in the
    same seed no answer counts region 1 between its leave (epoch 2) and its removal."""
    outcome = run_sim(SimConfig(seed=1240365301))
    assert outcome.ok, [v.render() for v in outcome.verdicts if not v.ok]
    times = {line.split(" MEMBERSHIP ")[1]: int(line.split()[0])
             for line in outcome.trace if " MEMBERSHIP epoch" in line}
    leave, removed = times["epoch 2: leave r1"], times["epoch 3: remove r1 frozen at 1"]
    answers = [line for line in outcome.trace if " WAIT " in line and " -> " in line
               and leave <= int(line.split()[0]) <= removed]
    assert answers and not [line for line in answers if re.search(r"\((r\d+, )*r1[,)]", line)], answers


def test_a_peer_holding_records_behind_an_unsaved_image_is_not_counted_from_its_handshake():
    """Found by a random batch (seed 605924532; ``--bug wait-counts-handshake`` plants it back):
    region 4 installed a full-resync image whose snapshot its full disk refused, so later
    records waited in memory; its link to region 2 handshook again with a Welcome saying
    2.25, and region 2's WAIT counted region 4 for 2.25 although its log had handed none of
    it to its OS.  WAIT counts what acks said since the handshake (``hub.peer_said``).  Since
    a region holding such an image acknowledges only what its old log holds (the test below),
    this seed's schedule runs otherwise after the image; it still holds one, and passes."""
    outcome = run_sim(SimConfig(seed=605924532))
    assert outcome.ok, [v.render() for v in outcome.verdicts if not v.ok]
    assert any("IMAGE-CRASH r4: the snapshot of r1's image cannot be written" in line for line in outcome.trace)


def test_waitaof_answers_count_the_regions_with_the_write_on_disk():
    """WAITAOF in the simulation: answers name the regions whose acks said the write is on their
    disk; under ``appendfsync no`` a WAITAOF with numlocal 1 has its own fsync (the region does
    none otherwise), so its local count is 1; and the check counts what it confirmed on disk."""
    outcome = run_sim(SimConfig(seed=1))
    assert outcome.ok, [v.render() for v in outcome.verdicts if not v.ok]
    assert any(re.search(r" WAITAOF [01] \d+ \d+( \(timed out\))? -> \[1, [1-9]\] \(r\d", line)
               for line in outcome.trace)
    assert any(re.search(r"confirmed at 1 region or more \([1-9]\d* of them on disk, by WAITAOF\)", line)
               for line in outcome.trace)
    no_fsync = run_sim(SimConfig(seed=10, fsync="no"))
    assert no_fsync.ok, [v.render() for v in no_fsync.verdicts if not v.ok]
    assert any(re.search(r" WAITAOF 1 \d+ \d+( \(timed out\))? -> \[1, \d\]", line) for line in no_fsync.trace)


def test_a_peer_whose_link_came_back_counts_for_waitaof_by_its_acks_since():
    """Found by a random batch (seed 797191327): region 1's log was salvaged after a flipped bit
    (cut back to 2.50) and it restarted; its link to region 2 came back, but region 2 still
    counted it for WAITAOF by what its acks had said of its disk before (up to 2.83).  The
    real link forgets what a peer's acks said, of its OS and of its disk, when it starts
    (``Link.__init__``); the simulated link forgot only the first.  Now both, and region 2's
    WAITAOF for 2.83 right after the restart counts no one."""
    outcome = run_sim(SimConfig(seed=797191327))
    assert outcome.ok, [v.render() for v in outcome.verdicts if not v.ok]
    assert any("SALVAGE r1: check-log --fix kept" in line for line in outcome.trace)
    assert any(line.endswith("r2 WAITAOF 0 3 200 (timed out) -> [1, 0] (none) for 2.83") for line in outcome.trace)


def test_a_region_holding_an_image_its_disk_refused_acknowledges_only_what_its_old_log_holds():
    """Found by a random batch (seed 12948): region 2 took region 1's full-resync image (1.84)
    but its full disk refused the image's snapshot, so the image lived in memory only; its
    acks said it held the image's operations, and region 1's WAIT counted it for 1.77.  Region
    2 then stopped, started again from its old log, and 1.77 was lost with region 1's salvage.
    A region whose image is held acknowledges only what its log before the image holds
    (``ActiveActive.image_held``) until the snapshot is on disk: the same WAIT counts no one."""
    outcome = run_sim(SimConfig(seed=12948))
    assert outcome.ok, [v.render() for v in outcome.verdicts if not v.ok]
    assert any("IMAGE-CRASH r2: the snapshot of r1's image cannot be written" in line for line in outcome.trace)
    assert any(line.endswith("r1 WAIT 1 50 (timed out) -> 0 (none) for 1.84") for line in outcome.trace)
