"""The deterministic simulation (chaos/sim/) and the sans-IO link it runs (crdt/sync.py).

Fixed seeds pass, a time-boxed batch of random seeds passes, a seed replays to
the identical trace, and every planted bug is caught by its checker within a
bounded number of seeds (a checker that never fails is not a checker).  The
cron's work (IDMP expiry, garbage collection, backlog trimming) happens in
schedules, and with the backlog fault full resyncs do, restarts from their
snapshots included.  Membership changes (a join during a partition, a graceful leave under
load, the forced removal of a crashed region that later comes back) happen in schedules too.
So do the operator's faults: a region started again from an older copy of its folder (it
takes back its own operations from its peers before it takes writes), a flipped bit in a
stopped region's log or snapshot (the start refuses it, the operator salvages), and a crash
between installing a full-resync image and its snapshot being on disk.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import types

import pytest

from chaos.sim import SimConfig, run_sim
from chaos.sim.bugs import BUGS, NEEDS_FAULTS, catches
from chaos.sim.checks import canonical, run_checks
from chaos.sim.cli import main as sim_main
from chaos.sim.disk import Damage, SimFile, held_vv, read_back, scan_bytes
from chaos.sim.world import DEFAULT_FAULTS, FAULTS, START_MS, Simulation
from crdt.causal import CausalLog
from crdt.membership import ACTIVATE, ACTIVE, FORCE_REMOVE, JOIN, LEAVE, REMOVE, REMOVED
from crdt.sync import LinkState, NeedsResync, opening
from node.activeactive.region import PROMISE_TIMEOUT_S, ActiveActive
from node.persistence import aof
from node.resp.encoder import ReplyError

SEEDS_PER_BUG = 100  # every planted bug is caught within this many seeds
# ... from these seeds on (default: 1).  The first seeds that catch the bugs the operator's faults
# are for: no-start-gate 2 (durability), gate-after-crash-only 3 (liveness: the history
# digests), cut-clean-tail 10 (damage), image-unsaved 108 (exceptions: with the backlog fault, full
# resyncs - and so image-crashes - are rare enough that the first catch comes late); lone-unheld
# is first caught at seed 134 (convergence) and removed-applied at seed 196 (removed): since the
# simulated link runs the relay hold and the backlog fault is in the default set, the schedules
# of the first hundred seeds no longer meet them; wait-counts-handshake needs a region holding
# records back behind an unsaved image while a link to it handshakes and a client WAITs: none of
# seeds 1-400 meets it, the random batch that found it did at seed 605924532
FIRST_SEED = {"image-unsaved": 101, "lone-unheld": 101, "removed-applied": 101, "wait-counts-handshake": 605924501}
# the operator's faults (restore, bitflip, image-crash) joined the default set after the cases
# below were found: their seeds replay them without (as chaos/README.md's replay commands say)
OPERATOR_FAULTS = ("restore", "bitflip", "image-crash", "stale-copies", "lone")  # (lone: not in the default set)
# braid-admin killed in the middle of a forced removal (admin-kill) joined the default set after
# every case below but its own was found: their seeds replay them without it
ADMIN_KILL = ("admin-kill",)
# the memory fault came after all of these: the seeds below replay their schedules without it
MEMORY = ("memory",)
FAULTS_BEFORE_OPERATOR = tuple(f for f in FAULTS if f not in OPERATOR_FAULTS + ADMIN_KILL + MEMORY)  # backlog too
DEFAULT_BEFORE_OPERATOR = tuple(f for f in DEFAULT_FAULTS if f not in OPERATOR_FAULTS + ADMIN_KILL)
DEFAULT_BEFORE_ADMIN_KILL = tuple(f for f in DEFAULT_FAULTS if f not in ADMIN_KILL)
# a bug whose window the operator's faults make rarer (regions stopped and refusing writes for a
# while) runs with the faults it was planted under: xcfgset-clears is first caught at seed 47
BUG_FAULTS = {"xcfgset-clears": DEFAULT_BEFORE_OPERATOR, "join-keeps-deleted": DEFAULT_BEFORE_OPERATOR}
# the fault kinds before membership changes joined them: the schedules of the cases found then
# (their seeds replay them with these, as chaos/README.md's replay commands do)
FAULTS_BEFORE_MEMBERSHIP = tuple(f for f in FAULTS_BEFORE_OPERATOR if f != "membership")
# schedules pinned for a case found before COPY joined the workload run without it
# (``copies=False``, ``--no-copies``): with it, their events happen differently
# schedules pinned for a case found under the earlier replication rule (operations left once
# fsynced, ``leave_when_written=False``, ``--leave-when-on-disk``) replay under it: with the
# rule regions use now, their events happen differently
ON_DISK = False
TIME_BOX = float(os.environ.get("BRAID_SIM_TIME_BOX", "20"))


# ------------------------------------------------------------------ the sans-IO link
def _issue(log: CausalLog, count: int) -> None:
    for i in range(count):
        log.stamp(b"op-%d-%d" % (log.region, i))


def _exchange(frames_from: LinkState, to_log: CausalLog, to_link: LinkState, sendable: int | None = None):
    """Send what ``frames_from`` decides, one envelope per frame; returns the envelopes applied."""
    applied = []
    upto = frames_from.causal.end if sendable is None else sendable
    for env in frames_from.outgoing(upto):
        for ready in to_log.receive(to_link.on_batch([env])[0]):
            applied.append(ready.dot)
        frames_from.on_ack(dict(to_log.vv))
    return applied


def test_link_sends_each_envelope_once_and_never_echoes():
    one, two = CausalLog(1), CausalLog(2)
    _issue(one, 3)
    a, b = LinkState(one, {}), LinkState(two, {})
    assert _exchange(a, two, b) == [(1, 1), (1, 2), (1, 3)]
    assert a.outgoing(one.end) == []          # nothing twice on one link
    assert b.outgoing(two.end) == []          # nor echoed back: the peer holds them
    assert a.acked == {1: 3}


def test_link_sends_only_what_is_sendable():
    one, two = CausalLog(1), CausalLog(2)
    _issue(one, 4)
    a, b = LinkState(one, {}), LinkState(two, {})
    assert _exchange(a, two, b, sendable=2) == [(1, 1), (1, 2)]  # the rest is not durable yet
    assert _exchange(a, two, b) == [(1, 3), (1, 4)]


def test_duplicated_and_reordered_frames_change_nothing():
    one, two = CausalLog(1), CausalLog(2)
    _issue(one, 3)
    a, b = LinkState(one, {}), LinkState(two, {})
    frames = [[e] for e in a.outgoing(one.end)]
    applied = []
    for frame in [frames[2], frames[0], frames[2], frames[1], frames[0]]:  # reordered, duplicated
        for env in b.on_batch(frame):
            applied += [r.dot for r in two.receive(env)]
    assert applied == [(1, 1), (1, 2), (1, 3)]
    b.on_ack({1: 1})
    a.on_ack({1: 3})
    a.on_ack({1: 2})  # a late ack does not move the register back
    assert a.acked == {1: 3}


def test_a_new_link_starts_from_the_peers_real_version_vector():
    """A peer that crashed and lost operations it had acknowledged gets them again."""
    one, two = CausalLog(1), CausalLog(2)
    _issue(one, 3)
    acked = {}
    a = LinkState(one, {}, acked)
    _exchange(a, two, LinkState(two, {}))
    assert acked == {1: 3}
    forgetful = CausalLog(2)  # region 2 restarted with nothing
    again = LinkState(one, dict(forgetful.vv), acked)
    assert acked == {}  # reset from the Hello
    assert [e.dot for e in again.outgoing(one.end)] == [(1, 1), (1, 2), (1, 3)]


def test_relayed_operations_travel_on_every_link():
    one, two, three = CausalLog(1), CausalLog(2), CausalLog(3)
    _issue(one, 2)
    _exchange(LinkState(one, {}), two, LinkState(two, {}))
    to_three = LinkState(two, dict(three.vv))
    assert _exchange(to_three, three, LinkState(three, {})) == [(1, 1), (1, 2)]


def test_trimmed_backlog_needs_a_full_resync():
    one = CausalLog(1)
    _issue(one, 4)
    at_handshake = LinkState(one, {})
    one.trim(2)
    assert opening(one.vv, one.floor, {}, {}, True).sends_image
    assert not opening(one.vv, one.floor, {1: 2}, {}, True).sends_image
    with pytest.raises(NeedsResync):
        at_handshake.outgoing(one.end)  # trimming overtook a running link
    at_handshake.image_sent({1: 4}, one.end)
    assert at_handshake.outgoing(one.end) == []


# ------------------------------------------------------------------ the simulated disk
def test_a_torn_tail_is_cut_at_restart():
    f = SimFile()
    records = [aof.encode_record(aof.OP_LOCAL, b"payload-%d" % i) for i in range(3)]
    for r in records[:2]:
        f.write(r)
    f.fsync()
    f.write(records[2])
    f.durable += f.cache[:7]  # a crash kept a prefix of the unsynced record
    f.cache.clear()
    got, cut = read_back(f)
    assert [p for _n, _k, p in got] == [b"payload-0", b"payload-1"] and cut == 7
    assert bytes(f.durable) == records[0] + records[1]


def _records(*payloads: bytes) -> list[bytes]:
    return [aof.encode_record(aof.OP_LOCAL, p) for p in payloads]


def _file_of(records: list[bytes], clean: bool) -> SimFile:
    f = SimFile()
    for r in records:
        f.write(r)
    f.stop_cleanly() if clean else f.fsync()
    return f


def test_a_bad_last_record_is_a_torn_tail_unless_the_log_closed_cleanly():
    """The real rules (aof.examine): after a clean close nothing can be torn, so a bad last
    record is damage and the start refuses it; otherwise it is cut, run mark ``recover`` first."""
    records = _records(b"one", b"two", b"three")
    for clean in (True, False):
        f = _file_of(records, clean)
        assert f.closed_cleanly == clean
        f.durable[-2] ^= 0x10  # a bit of the last record's payload
        if clean:
            with pytest.raises(Damage, match="closed cleanly"):
                read_back(f)
            assert len(f.durable) == sum(map(len, records))  # nothing cut
        else:
            got, cut = read_back(f)
            assert [p for _n, _k, p in got] == [b"one", b"two"] and cut == len(records[2])
            assert f.recover_mark  # the cut records may have left: the region takes them back


def test_damage_before_the_last_record_is_refused_and_salvaged_to_the_valid_prefix():
    records = _records(b"one", b"two", b"three")
    f = _file_of(records, clean=False)
    f.durable[len(records[0]) + 5] ^= 0x01  # the second record's checksum: a valid record follows
    with pytest.raises(Damage, match="a valid record follows"):
        read_back(f)
    assert "kept the log's first" in f.salvage()  # braid check-log --fix
    assert bytes(f.durable) == records[0] and f.recover_mark and not f.closed_cleanly
    got, cut = read_back(f)
    assert [p for _n, _k, p in got] == [b"one"] and cut == 0


def test_a_damaged_snapshot_leaves_nothing_to_start_from():
    """The records before a snapshot are gone from a real folder: without it the operator
    empties the folder (the region then takes everything from its peers)."""
    f = _file_of(_records(b"one"), clean=True)
    f.snapshot = (1, b"BRAID not a snapshot")
    assert "the folder was emptied" in f.salvage()
    assert (bytes(f.durable), f.snapshot, f.recover_mark, f.closed_cleanly) == (b"", None, False, False)


def test_a_copy_holds_what_is_durable_and_a_restore_puts_it_back():
    records = _records(b"one", b"two")
    f = _file_of(records[:1], clean=False)
    f.write(records[1])  # in the OS cache only: a backup does not see it
    c = f.copy(5)
    f.fsync()
    f.restore(c)
    assert (bytes(f.durable), bytes(f.cache), c.taken_ms) == (records[0], b"", 5)


def test_held_vv_reads_the_dots_a_folder_holds():
    sim = _settled_sim(1)
    for number, region in sim.regions.items():
        if region.up and region.file.snapshot is None:
            assert held_vv(region.file, number) == {o: n for o, n in region.causal.vv.items() if n}
    records, torn, damage = scan_bytes(sim.regions[1].file.contents(), closed_cleanly=False)
    assert records and torn is None and damage is None


def _settled_sim(seed: int, **kw) -> Simulation:
    sim = Simulation(SimConfig(seed=seed, **kw))
    sim.run()
    return sim


# ------------------------------------------------------------------ the operator's faults
def _watch_mints(monkeypatch) -> list[str]:
    """Every operation a region issues while another region that is up holds one under that
    number (the start gate's rule: minting it again forks the history)."""
    from chaos.sim.membership import MembershipDriver

    forks: list[str] = []
    on_issue = MembershipDriver.on_issue

    def watching(self, region):
        n = region.own_n() + 1
        forks.extend(f"seed {self.sim.config.seed}: r{region.number} minted {region.number}.{n}, which r{r.number} "
                     f"holds" for r in self.sim.regions.values()
                     if r is not region and r.up and r.causal.vv.get(region.number, 0) >= n)
        on_issue(self, region)

    monkeypatch.setattr(MembershipDriver, "on_issue", watching)
    return forks


def test_a_region_restored_from_an_older_copy_takes_its_operations_back_before_it_writes(monkeypatch):
    """Seed 6: a region starts from an older copy of its folder; it refuses writes (LOADING)
    until it took back from its peers its own operations they hold, then writes again, and
    every check passes.  In seeds 1-20 no region ever mints a number another region holds
    (restores, bit flips and crashes alike); without the start gate (the planted bug
    no-start-gate) one does."""
    forks = _watch_mints(monkeypatch)
    outcome = run_sim(SimConfig(seed=6, faults=DEFAULT_BEFORE_ADMIN_KILL))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    seen = []
    for i, line in enumerate(outcome.trace):
        restored = re.search(r"RESTORE r(\d) starts from its folder as copied at", line)
        if restored:
            n, after = restored.group(1), outcome.trace[i:]
            seen.append(any(f" r{n} " in a and "refused (LOADING this region is starting" in a for a in after)
                        and any(re.search(rf"#\d+ r{n} XADD .* -> ok", a) for a in after))
    assert any(seen), "no restored region was refused, then wrote again"
    for seed in range(1, 21):
        assert run_sim(SimConfig(seed=seed)).ok
    assert not forks, forks[:5]
    for seed in range(1, 21):
        run_sim(SimConfig(seed=seed, bug="no-start-gate"))
    assert forks, "without the start gate a restored region would mint numbers its peers hold"


def test_a_region_over_its_memory_limit_refuses_its_clients_and_applies_the_others_operations():
    """The memory fault: a region's maxmemory is set a little above what it holds for a while.
    Seeds 1-40 pass every check, in some of them clients' writes were refused with OOM at a
    region the other regions' operations kept reaching; with the planted bug oom-drops-remote
    (operations of other regions dropped over the limit) seed 3 fails."""
    faults = DEFAULT_FAULTS + ("memory",)
    refused = 0
    for seed in range(1, 41):
        outcome = run_sim(SimConfig(seed=seed, faults=faults))
        assert outcome.ok, f"seed {seed}: " + "\n".join(v.render() for v in outcome.verdicts if not v.ok)
        refused += _count(outcome, "-> err (OOM command not allowed when used memory > 'maxmemory'.)")
    assert refused > 20, refused
    assert not run_sim(SimConfig(seed=3, faults=faults, bug="oom-drops-remote")).ok


def test_regions_that_take_writes_alone_withdraw_and_issue_them_again_and_every_check_passes():
    """The lone fault: a region restarts (from an older copy when there is one) while another is
    away, takes writes alone after 200 ms, and withdraws them when a member shows operations of
    it the copy lacked, issuing them again once it took those back.  Seeds 1-200 pass every
    check, and some of them withdraw and issue again."""
    faults = DEFAULT_FAULTS + ("lone",)
    withdrawn = reissued = 0
    for seed in range(1, 201):
        outcome = run_sim(SimConfig(seed=seed, faults=faults))
        assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
        withdrawn += _count(outcome, "WITHDRAW r")
        reissued += _count(outcome, "REISSUE r")
    assert withdrawn >= 3 and reissued >= 3, (withdrawn, reissued)


def test_a_flipped_bit_in_a_log_closed_cleanly_is_refused_and_salvaged():
    """Seed 10: a bit of the last record of a cleanly closed log flips; the start refuses it
    (after a clean close nothing is torn), the operator salvages (check-log --fix keeps the
    prefix, the run mark says recover) and the region takes back what the cut held."""
    outcome = run_sim(SimConfig(seed=10, faults=DEFAULT_BEFORE_ADMIN_KILL))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    assert _count(outcome, "(its last record), run mark clean")
    assert _count(outcome, "at the end of a log closed cleanly (damage, not a torn append)")
    assert _count(outcome, "SALVAGE r") and _count(outcome, "check-log --fix kept the log's first")


def test_a_flipped_bit_in_a_snapshot_empties_the_folder():
    """Seed 278 with the backlog fault: a region's snapshot (of a full-resync image) gets a
    flipped bit; the start refuses it, nothing else in the folder can be started from, the
    operator empties it and the region takes everything back from its peers."""
    outcome = run_sim(SimConfig(seed=278, faults=tuple(f for f in FAULTS if f not in ("lone", *MEMORY))))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    assert _count(outcome, "BITFLIP r") and _count(outcome, "is damaged (checksum mismatch)")
    assert _count(outcome, "the folder was emptied")


def test_a_stale_copy_restored_after_a_salvage_forks_the_history():
    """Seed 588, 127 steps, with stale-copies (a finding, not fixed: see chaos/README.md; found
    as seed 15552195, whose schedule changed with the simulated link's).  Region 2's folder is
    copied while it is stopped (t=334); a flipped bit in its log's last record is salvaged
    away (operation 2.11, which never left it) and region 2, its peers holding nothing of it,
    mints 2.11 again - another operation.  Restored later from the copy, it holds the old 2.11
    and takes 2.12 onwards back from its peers on top: the same version vectors, different
    histories (the liveness check's digests; the real links see the fork at the handshake and
    stop).  The operator's default rule - new copies after a restore or a salvage - keeps the
    schedule from it."""
    faults = ("crash", "partition", "clog", "swizzle", "clock", "membership", "dup", "reorder", "restore", "bitflip")
    outcome = run_sim(SimConfig(seed=588, steps=127, faults=faults + ("stale-copies",)))
    liveness = next(v for v in outcome.verdicts if v.check == "liveness")
    assert not liveness.ok and any("histories differ under the same version vector" in p for p in liveness.offending)
    assert _count(outcome, "RESTORE r2 starts from its folder as copied at t=334")
    assert run_sim(SimConfig(seed=588, steps=127, faults=faults)).ok


@pytest.mark.parametrize("seed,what", [(11, "the machine went down while the snapshot of"),
                                       (175, "the machine goes down before the image's snapshot is written")])
def test_a_crash_before_a_full_resync_images_snapshot_is_on_disk(seed, what):
    """Seed 11: the machine goes down while an installed image's snapshot is being written;
    seed 175: the snapshot cannot be written (a full disk: later records wait in memory,
    writes are refused) and the machine goes down first.  Either way the region restarts
    from the log before the image, is sent one again, and every check passes."""
    outcome = run_sim(SimConfig(seed=seed))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    assert _count(outcome, what)
    if seed == 175:
        assert _count(outcome, "cannot be written (disk full)")


# ------------------------------------------------------------------ schedules
@pytest.mark.parametrize("seed", range(1, 13))
def test_fixed_seeds_pass(seed):
    outcome = run_sim(SimConfig(seed=seed))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)


@pytest.mark.parametrize("fsync,regions,seed", [("everysec", 3, 101), ("everysec", 3, 102), ("no", 3, 103),
                                                ("always", 2, 104), ("always", 4, 105), ("everysec", 5, 106)])
def test_fixed_seeds_pass_in_other_shapes(fsync, regions, seed):
    outcome = run_sim(SimConfig(seed=seed, fsync=fsync, regions=regions))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)


def test_a_seed_where_a_relay_overtook_a_concurrent_idmp_add_passes():
    """Seed 105212586 (found by a random batch): region 3 relayed region 2's IDMP add to region
    1 before its own concurrent add of the same iid (still waiting for its fsync); region 1
    took the relay for an acknowledgement, counted the add as stable, let the iid go, and
    later kept both entries while the others kept one."""
    outcome = run_sim(SimConfig(seed=105212586, faults=DEFAULT_BEFORE_OPERATOR))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)


def test_a_seed_where_a_crashed_region_had_an_operation_waiting_at_a_peer_passes():
    """Found by a random batch (seed 293921961, 104 steps, before the simulated link's schedule
    changed): region 2's machine crashed after its operation 2.112 reached region 4 - waiting
    there for 2.28-2.111, which a reordered frame had not brought yet - but before its records
    from 2.93 on were on disk.  Region 2 came back at 2:92 and recovered from its peers'
    handshakes, which count applied operations only, so region 4 waited for 2.112's
    predecessors for ever, and region 2 could mint 2.93-2.112 again, a second operation under
    the dot region 4 held.  Now a region forgets a peer's own waiting operations whenever that
    peer handshakes with it.  Seed 4396, 104 steps: region 4 (joined during a partition) sent
    its operations 4.1-4.14 to region 2, where they wait for region 3's 3.12-3.13; region 4's
    machine crashes before 4.14's record is on disk, it comes back at 4:13, and at the
    handshake region 2 forgets the 14 (4.14 among them) and takes 4.1-4.13 again later."""
    outcome = run_sim(SimConfig(seed=4396, steps=104, faults=DEFAULT_BEFORE_OPERATOR))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    assert any("r2 forgot 14 waiting operations of r4" in line for line in outcome.trace)


def test_a_forced_removal_that_takes_the_only_copies_of_an_earlier_removed_regions_operations():
    """Found by a random batch (seed 1083394374, 130 steps, before the simulated link's
    schedule changed); seed 26516, 130 steps, is the first of the seeds from 1 that meets it
    again: region 4 joins while a partition cuts regions 2 and 3, and partitions keep region
    2's operations 2.5-2.104 from regions 1 and 3 - they reach only region 4 - before region
    2's machine crashes; its forced removal freezes it at 104 (region 4 held them), then region
    4 crashes and is removed by force too (frozen at 0), taking the only copies.  A forced
    removal loses what no remaining member received - its own operations and, as here, an
    earlier removed region's that only it held (docs/active-active.md, "A forced removal"); the members
    converge without them, and the durability check counts them as lost with the removal
    instead of reporting a loss."""
    outcome = run_sim(SimConfig(seed=26516, steps=130, faults=DEFAULT_BEFORE_OPERATOR))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    assert any("100 operation(s) of r2 that only r4 held are lost with r4's forced removal" in line
               for line in outcome.trace)


def test_a_region_holding_an_unsaved_image_promises_no_removal():
    """Found by a random batch (seed 1433216936): region 3 took region 2's full-resync image
    (2:126) but its disk was full, so the image's snapshot waited in memory; braid-admin then
    removed region 2 by force, frozen at 128 on region 3's word; region 3 stopped cleanly and
    started again from its older log (a flipped bit cut its last record too), and 2.2-2.128
    were gone with region 2.  Now a region whose image is not on disk refuses to promise a
    removal (what it would say it holds could be lost), so region 2 is not removed and
    hands its operations over once it is back."""
    outcome = run_sim(SimConfig(seed=1433216936))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    assert any("r3 refused: this region holds a full-resync image whose snapshot is not on disk yet" in line
               for line in outcome.trace)


def test_a_waiting_operation_that_depends_on_what_its_peer_lost_is_forgotten():
    """Found by a random batch (seed 1830893237): region 2 wrote 2:8 after applying 3:14
    and sent it to region 3 only; a flipped bit cost region 2 its log's tail, region 3 sent
    2:8 back, where it waited for 3:14; then region 3 restarted from a copy holding 3:6, so
    3:14 was gone from every region and 2:8 waited at region 2 for ever.  Now a handshake
    forgets, with the peer's own waiting operations, those that depend on one of its
    operations past what it holds."""
    outcome = run_sim(SimConfig(seed=1830893237))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    assert any(re.search(r"r2 forgot \d+ waiting operations of r3", line) for line in outcome.trace)


def test_the_links_that_brought_forgotten_operations_handshake_again():
    """Found by a random batch (seed 164128152): region 1 was restored from an older copy and
    region 3's log was salvaged, so both lost operations region 2 had applied.  Region 2's
    operations 2.16-2.30 depended on them and waited at regions 1 and 3; each forgot them at
    its handshake with the other, and region 2, whose links had sent them, never sent them
    again: regions 1 and 3 stayed at 2:15.  Now a handshake that forgets a third region's
    operations ends the other links, whose senders learn what this region holds and send again."""
    outcome = run_sim(SimConfig(seed=164128152, steps=150, fsync="always"))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    assert any("forgot operations this link brought: it handshakes again" in line for line in outcome.trace)


def test_a_time_boxed_batch_of_random_seeds_passes():
    out = io.StringIO()
    status = sim_main(["--time-box", str(TIME_BOX)], out=out)
    assert status == 0, out.getvalue()


def test_the_same_seed_gives_the_identical_trace():
    first = run_sim(SimConfig(seed=7, bug="skip-late"))
    second = run_sim(SimConfig(seed=7, bug="skip-late"))
    assert first.trace == second.trace and len(first.trace) > 100
    assert [v.render() for v in first.verdicts] == [v.render() for v in second.verdicts]


def _patches_compiled_code(bug: str) -> bool:
    """Does ``bug`` patch a module or class compiled with mypyc (setup.py)?  Compiled code calls
    compiled functions directly, past a patch, so the bug may not take effect there."""
    for target, _name, _replacement in BUGS[bug][1]:
        module = sys.modules[target.__name__ if isinstance(target, types.ModuleType) else target.__module__]
        if (module.__file__ or "").endswith(".so"):
            return True
    return False


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_planted_bug_is_caught_by_its_checker(bug):
    if _patches_compiled_code(bug):
        # compiled callers call past the patch: check this bug on the pure source, in a process of its own
        test = f"{__file__}::test_each_planted_bug_is_caught_by_its_checker[{bug}]"
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                              env={**os.environ, "BRAID_PURE": "1"}, capture_output=True, text=True, timeout=600,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
        return
    faults = BUG_FAULTS.get(bug, DEFAULT_FAULTS) + NEEDS_FAULTS.get(bug, ())
    first = FIRST_SEED.get(bug, 1)
    for seed in range(first, first + SEEDS_PER_BUG):
        if catches(bug) in run_sim(SimConfig(seed=seed, faults=faults, bug=bug)).failed:
            clean = run_sim(SimConfig(seed=seed, faults=faults))
            if not clean.ok and _count(clean, "in conflict"):
                continue  # both backlogs overflowed: the clean run cannot converge either (reported)
            assert clean.ok, f"seed {seed} fails without {bug} too: {clean.failed}"
            return
    pytest.fail(f"{catches(bug)} never caught {bug} in {SEEDS_PER_BUG} seeds")


def test_a_failure_prints_its_replay_command_and_a_minimal_trace():
    out = io.StringIO()
    assert sim_main(["--seed", "2", "--bug", "lying-fsync"], out=out) == 1
    text = out.getvalue()
    assert "replay: braid-chaos sim --seed 2 --steps 150 --regions 3 --fsync always --bug lying-fsync" in text
    minimal = next(line for line in text.splitlines() if line.startswith("minimal: "))
    argv = minimal.removeprefix("minimal: braid-chaos sim ").split()
    again = io.StringIO()
    assert sim_main(argv + ["--no-shrink"], out=again) == 1  # the minimal command replays the failure
    assert "durability" in again.getvalue()


def _count(outcome, text: str) -> int:
    trace = outcome.trace if hasattr(outcome, "trace") else outcome.sched.trace
    return sum(text in line for line in trace)


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_trimmed_backlogs_resync_under_the_seeded_network(seed):
    """With the backlog bounded, a region that was away gets a full-resync image, installs it
    and snapshots it (a later restart starts from that snapshot); every check still passes."""
    outcome = run_sim(SimConfig(seed=seed, faults=FAULTS_BEFORE_OPERATOR, copies=False, leave_when_written=ON_DISK))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
    assert _count(outcome, "operations trimmed") and _count(outcome, "full-resync image")
    assert _count(outcome, "installed r") and _count(outcome, "snapshot at record")


def test_mutual_full_resyncs_keep_both_sides_trimmed_operations():
    """Found with the backlog fault: regions 1 and 2, apart for a while, both trim past their
    bound; at the reconnection each sent the other an image, region 1 installed region 2's
    and its version vector fell back from 1:37 to 1:3, region 2 installed region 1's and
    lost its 140 operations.  An image is now refused when it lacks what the receiver
    dropped, and the run converges through what the regions still hold."""
    outcome = run_sim(SimConfig(seed=239, faults=FAULTS_BEFORE_MEMBERSHIP))
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)


def test_regions_that_both_dropped_what_the_other_lacks_join_their_states():
    """Seed 4 with the backlog fault: a region isolated longer than every backlog, so both
    sides dropped operations the other lacks.  No image replaces either state: each end sends
    its own and joins the other's, and the run converges with every promised operation."""
    sim = Simulation(SimConfig(seed=4, faults=DEFAULT_BEFORE_OPERATOR))
    sim.run()
    assert sim.joins >= 2, "the seed no longer makes both backlogs overflow"
    assert any("both dropped operations the other lacks" in line and "merging" in line for line in sim.sched.trace)
    assert any(" joined r" in line for line in sim.sched.trace)
    failed = [v.render() for v in run_checks(sim) if not v.ok]
    assert not failed, "\n".join(failed)


def test_a_region_restarts_from_its_full_resync_snapshot():
    """An installed image is the base of the region's file: a restart installs the snapshot and
    replays only the records after it, and comes back with the same state and version vector."""
    sim = Simulation(SimConfig(seed=23, faults=FAULTS_BEFORE_OPERATOR, copies=False))
    sim.run()
    snapshotted = [n for n, r in sorted(sim.regions.items()) if r.file.snapshot is not None]
    assert snapshotted, "no region installed an image"
    for number in snapshotted:
        region = sim.regions[number]
        before = canonical(region), dict(region.causal.vv), sim.history(region)
        region.crash(machine=False)
        sim.restart(number, region.incarnation)
        assert (canonical(region), dict(region.causal.vv), sim.history(region)) == before


def test_the_cron_expires_iids_and_collects_delete_contexts():
    # (without the operator's faults: regions that stop and refuse writes while they take their
    # operations back leave these seeds too few writes to expire and collect)
    expired = collected = 0
    for seed in range(9, 17):
        outcome = run_sim(SimConfig(seed=seed, faults=DEFAULT_BEFORE_OPERATOR))
        assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)
        expired += sum(" 0 iids expired" not in line for line in outcome.trace if "cron:" in line)
        collected += sum(" 0 delete contexts" not in line for line in outcome.trace if "cron:" in line)
    assert expired and collected


def test_the_workload_covers_block_splits_approximate_trims_and_every_id_mode():
    # (the workload's coverage, measured without the operator's faults, which refuse writes for a while)
    text = "\n".join(line for seed in range(1, 7)
                     for line in run_sim(SimConfig(seed=seed, faults=DEFAULT_BEFORE_OPERATOR)).trace)
    assert "MAXLEN ~" in text and "MINID =" in text and "MINID ~" in text and "LIMIT" in text
    for mode in ("strict", "semi-strict", "liberal"):
        assert f"crdt_xadd_id_uniqueness_mode {mode} -> ok" in text
    assert "(ERR strict ID mode" in text  # full IDs sent in strict mode are refused ...
    assert re.search(r"XADD k\d \d+-\d+ w w\d+ -> ok", text)  # ... and taken in the others
    assert "XADD k0 * w" in text and len(re.findall(r"XADD k\d \* w w\d+ -> ok", text)) > 300  # bursts


# ------------------------------------------------------------------ membership changes
WRITES = ("xadd", "xdel", "xtrim", "del", "group_create", "group_destroy", "xreadgroup", "xack", "xcfgset")


def _settled(seed: int, copies: bool = True, faults: tuple[str, ...] = DEFAULT_BEFORE_OPERATOR) -> Simulation:
    sim = Simulation(SimConfig(seed=seed, copies=copies, leave_when_written=ON_DISK, faults=faults))
    sim.run()
    verdicts = run_checks(sim)
    assert all(v.ok for v in verdicts), "\n".join(v.render() for v in verdicts if not v.ok)
    return sim


def _changes(sim: Simulation, kind: str) -> list:
    return [p for p in sim.membership.committed if p.change.kind == kind]


def _when(sim: Simulation, text: str) -> int:
    """The virtual time of the first trace line holding ``text`` (the trace counts from the start)."""
    return START_MS + int(next(line for line in sim.sched.trace if text in line).split()[0])


def test_a_region_joins_during_a_partition_and_takes_writes_once_caught_up():
    sim = _settled(9, copies=False)
    join = _changes(sim, JOIN)[0]
    n = join.change.number
    assert n == 4 and sim.config.regions == 3  # the next number; --regions stays the initial count
    assert _count(sim, f"JOIN r{n} starts with an empty file") == 1
    assert any(f"JOIN r{n}" in line and "while partitions cut" in line for line in sim.sched.trace)
    assert _count(sim, f"-> r{n} full-resync image")  # its peers had trimmed what it lacked
    activated = _when(sim, f"MEMBERSHIP epoch {_changes(sim, ACTIVATE)[0].epoch}: activate r{n}")
    loading = [c for c in sim.workload.history if c.region == n and isinstance(c.reply, ReplyError)
               and c.reply.message.startswith("LOADING")]
    assert loading and all(c.status == "refused" and c.done < activated for c in loading)  # never acknowledged
    # (the read-only check saw it issue no operation before it caught up)
    assert any(c.region == n and c.status == "ok" and c.dot is not None for c in sim.workload.history)
    for r in sim.regions.values():
        if r.aa.membership.status(r.number) != REMOVED:
            assert r.aa.membership.status(n) == ACTIVE
    assert sim.regions[n].causal.vv == sim.regions[1].causal.vv


def test_a_region_leaves_gracefully_under_load():
    sim = _settled(1)
    leave = _changes(sim, LEAVE)[0]
    n = leave.change.number
    (remove,) = [p for p in _changes(sim, REMOVE) if p.change.number == n]
    left = _when(sim, f"MEMBERSHIP epoch {leave.epoch}: leave r{n}")
    after = [c for c in sim.workload.history if c.region == n and c.kind in WRITES and c.invoked > left]
    assert after and all(c.status == "refused" for c in after)
    assert any(isinstance(c.reply, ReplyError) and c.reply.message.startswith("READONLY") for c in after)
    frozen = sim.membership.frozen[n]
    assert frozen == sim.regions[n].causal.vv[n] > 0  # every operation it made was handed over ...
    assert any(dot[0] == n for dot in sim.promises.ops)  # ... acknowledged ones among them (durability)
    for r in sim.regions.values():
        if r.number != n:
            assert r.causal.vv.get(n, 0) == frozen
    assert sim.regions[n].aa.membership.status(n) == REMOVED and remove.epoch > leave.epoch


def test_a_crashed_region_removed_by_force_is_refused_when_it_comes_back():
    sim = _settled(225)
    (force,) = _changes(sim, FORCE_REMOVE)
    n = force.change.number
    promised = _when(sim, f"force-remove of r{n} promised for epoch {force.epoch}")
    assert _when(sim, f"CRASH r{n}") < promised < _when(sim, f"RESTART r{n}")  # it was down: no vote
    refusals = [line for line in sim.sched.trace if "refused by r" in line and f"region {n} (region-{n}) was removed"
                in line]
    assert refusals
    removed = sim.regions[n]
    assert removed.aa.membership.status(n) == REMOVED and removed.aa.hub.retired  # it learned it
    frozen = sim.membership.frozen[n]
    for r in sim.regions.values():
        if r.number != n:
            assert r.causal.vv.get(n, 0) <= frozen
    excused = [line for line in sim.sched.trace if f"r{n} promised past its frozen point {frozen}" in line]
    assert excused  # what it acknowledged beyond the frozen point is counted as lost
    for p in sim.membership.committed:  # the trace shows every change: epoch, kind, region
        assert _count(sim, f"MEMBERSHIP epoch {p.epoch}: {p.change.kind} r{p.change.number}")


def test_waiting_operations_of_a_removed_region_are_dropped(monkeypatch):
    """Found by the simulation: region 2 kept region 3's operation 3.3 waiting for a dependency;
    region 3 crashed and was removed by force, frozen at 2.  The waiting operation was applied
    once its dependency came (at region 2, and at region 4, which joined from region 2's image)
    while region 1 dropped it, so region 2's later operations never applied at region 1.  What
    waits and is no longer accepted is now dropped: at the promise, at the change, after an image.
    (Seed 10 has regions drop such waiting operations - seed 349's schedule changed when a
    peer's handshake began to forget its waiting operations, and seed 3693's when the simulated
    link began to run the relay hold and the backlog fault joined the default set; every check
    passes.)"""
    from node.activeactive.membership import MembershipChanges

    dropped = []
    drop = MembershipChanges.drop_refused_pending

    def counting(self):
        before = self.counts.dropped
        drop(self)
        dropped.append(self.counts.dropped - before)

    monkeypatch.setattr(MembershipChanges, "drop_refused_pending", counting)
    sim = _settled(10, copies=False)
    (force,) = _changes(sim, FORCE_REMOVE)
    n = force.change.number
    assert sum(dropped) > 0
    for live in sim.membership.live_members():
        assert sim.regions[live].causal.vv.get(n, 0) <= sim.membership.frozen[n]


def _took_effect_nowhere(outcome) -> list[str]:
    """The liveness check's complaints about a membership change that never ended."""
    liveness = next(v for v in outcome.verdicts if v.check == "liveness")
    return [p for p in liveness.offending if "still holds a membership promise" in p]


def test_a_forced_removal_whose_voters_all_crashed_after_promising_is_settled_by_them():
    """Seed 6 (issue 34): braid-admin is killed after regions 1 and 3 promised the forced
    removal of region 2, before any commit; then both voters go down (a restore, a crash of
    the machine) and come back holding the promise and the hold on region 2's operations.
    Once the coordinator had PROMISE_TIMEOUT_S since they came back, region 1 settles it with
    region 3: both hold the promise, so it is committed everywhere, the holds end, and region
    2, back too, learns it was removed.  With the planted bug no-settle (no voter settles, as
    before) the change takes effect nowhere, the holds stay, and the liveness check says so."""
    sim = Simulation(SimConfig(seed=6))
    sim.run()
    verdicts = run_checks(sim)
    assert all(v.ok for v in verdicts), "\n".join(v.render() for v in verdicts if not v.ok)
    killed = _when(sim, "MEMBERSHIP braid-admin killed before the commit")
    assert "force-remove of r2 is left to its voters" in next(line for line in sim.sched.trace
                                                              if "killed before the commit" in line)
    settled = _when(sim, "MEMBERSHIP r1 settled the force-remove of r2 for epoch 2 with its voters: every one "
                         "holds its promise, committed")
    for voter in (1, 3):  # each went down between its promise and the settlement, and came back
        assert killed < _when(sim, f"CRASH r{voter}") < settled
        back = max(_when(sim, line.split(maxsplit=1)[1]) for line in sim.sched.trace
                   if f"RESTART r{voter}:" in line and _when(sim, line.split(maxsplit=1)[1]) < settled)
        assert settled - back >= PROMISE_TIMEOUT_S * 1000  # the coordinator had its time first
    (force,) = _changes(sim, FORCE_REMOVE)
    assert force.change.number == 2 and sim.membership.frozen[2] == 0
    for r in sim.regions.values():
        m = r.aa.membership
        assert (m.epoch, m.status(2), m.left_promise(), m.holding) == (2, REMOVED, None, {})
    assert sim.regions[2].aa.hub.retired  # it learned it was removed
    stuck = run_sim(SimConfig(seed=6, bug="no-settle"))
    assert _took_effect_nowhere(stuck) == [
        f"r{n} still holds a membership promise (the force-remove of r2 for epoch 2; holds {{2: 0}}): the change "
        "never ended" for n in (1, 3)]


def test_a_forced_removal_a_voter_never_promised_is_aborted_by_the_one_that_did(monkeypatch):
    """Seed 214: braid-admin is killed after region 1 promised the forced removal of region 3
    and before it asked region 2.  Region 1 settles it: region 2 never promised it (and now
    never will), so region 1 aborts it, its hold ends, and region 3 - a member still - links
    with everyone again and converges."""
    settled = []
    settle = ActiveActive.settle

    def recording(self, p, standings):
        outcome = settle(self, p, standings)
        settled.append((self.region, p, outcome))
        return outcome

    monkeypatch.setattr(ActiveActive, "settle", recording)
    sim = Simulation(SimConfig(seed=214))
    sim.run()
    verdicts = run_checks(sim)
    assert all(v.ok for v in verdicts), "\n".join(v.render() for v in verdicts if not v.ok)
    assert _count(sim, "MEMBERSHIP braid-admin killed before the promise request to r2")
    ((number, p, outcome),) = [s for s in settled if s[2].outcome == "abort"]
    assert (number, p.change.kind, p.change.number) == (1, FORCE_REMOVE, 3)
    assert outcome.reason == "region 2 never promised it"
    assert not sim.regions[2].aa.membership.promise(p).ok  # its promise request, had it come late
    assert not _changes(sim, FORCE_REMOVE)
    for r in sim.regions.values():
        assert r.aa.membership.status(3) == ACTIVE and r.aa.membership.holding == {}
    assert sim.regions[1].causal.vv == sim.regions[2].causal.vv == sim.regions[3].causal.vv


def test_a_voter_that_restarts_before_the_commit_keeps_its_promise(monkeypatch):
    """Found with crash faults on voters between a promise and its commit: region 3 promised the
    forced removal of region 1 (frozen at 2), crashed before the commit and came back at the old
    epoch; region 1, back too, dialed it, and region 3 took its operations up to 12 before a
    handshake with region 2 brought the change.  Region 2 never takes them: the two could not
    converge.  The promise and its hold are now on disk (node/persistence/promise.py): here a
    voter of a forced removal crashes before the commit, restarts holding it, and every check
    passes."""
    from node.activeactive.region import ActiveActive

    restored = []
    attach = ActiveActive.attach_promise_store

    def recording(self, store):
        attach(self, store)
        if self.membership.holding:
            restored.append((self.region, dict(self.membership.holding)))

    monkeypatch.setattr(ActiveActive, "attach_promise_store", recording)
    faults = ("crash", "partition", "clog", "swizzle", "clock", "membership", "reorder")
    outcome = run_sim(SimConfig(seed=315, faults=faults, copies=False, leave_when_written=ON_DISK))
    assert _count(outcome, "MEMBERSHIP epoch 2: force-remove")
    assert _count(outcome, "MEMBERSHIP epoch 2: the commit did not reach r")
    assert restored  # the crashed voter came back holding the removed region's operations
    assert outcome.ok, "\n".join(v.render() for v in outcome.verdicts if not v.ok)


def test_sharded_schedules_pass_and_a_machine_crash_stops_every_shard():
    """Two shard groups on one world (chaos/sim/shards.py): every check per group, the
    routing check, and a machine crash that takes the region's shard in the other group."""
    machine_crashes = 0
    for seed in range(1, 13):
        outcome = run_sim(SimConfig(seed=seed, shards=2))
        assert outcome.ok, f"seed {seed}: " + "\n".join(v.render() for v in outcome.verdicts if not v.ok)
        assert {"s0 routing", "s1 routing", "s0 convergence", "s1 convergence"} <= {v.check for v in outcome.verdicts}
        machine_crashes += sum("MACHINE r" in line and "(with its shard" in line for line in outcome.trace)
        assert any(re.search(r" s[01] #\d+ r\d XADD \{s\d\}k0 \* f v -> err \(MOVED ", line)
                   or "CROSSSLOT" in line for line in outcome.trace)
    assert machine_crashes > 0


def test_a_shard_that_takes_keys_of_another_is_caught(monkeypatch):
    """With routing off, a command sent to the wrong shard runs there: the routing check sees
    the refusal missing and a key of another shard's slots in the group."""
    from node.region.routing import ShardRouting
    monkeypatch.setattr(ShardRouting, "check", lambda self, keys, client: None)
    outcome = run_sim(SimConfig(seed=1, shards=2))
    assert {"s0 routing", "s1 routing"} & set(outcome.failed), outcome.failed
