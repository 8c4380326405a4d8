"""Damaged logs and snapshots: what a start refuses, what ``braid check-log [--fix]`` says and does.

- A log whose run mark says ``clean`` has no torn tail: a flipped bit in its last
  record stops the region (a real process), naming the damage and ``check-log
  --fix``; the fix drops exactly that record, and the region starts.
- Damage in the middle of a log of several segments: check-log reports it
  (exit 2) and changes nothing; ``--fix`` keeps the records before it, cuts the
  rest of that segment, removes the later segments, says what it dropped; the
  log then scans clean and a region starts from it.
- A snapshot with a flipped bit: check-log names it (exit 2); ``--fix`` moves it
  aside, and says when the folder can no longer give the state back.
- Whatever cuts records (a start cutting a torn tail, ``--fix``) leaves the run
  mark ``recover``, so the next ``OperationLog`` has ``may_have_lost``.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys

import pytest
import xxhash

from node.persistence import aof, snapshot
from node.persistence.aof import HEADER_SIZE, OP_REPLICATED, AppendLog, CorruptLog, RecordReader, examine, scan
from node.persistence.oplog import OperationLog, boot_id, read_run_mark, write_run_mark
from node.region.config import Config
from node.runtime.server import Server
from node.testing import BraidProcess, InProcessServer


def _log_dir(root) -> str:
    return os.path.join(str(root), "appendonlydir")


def _check_log(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", "check-log", *args], capture_output=True,
                          text=True, timeout=60)


def _record_offsets(path: str) -> list[int]:
    """Where each record of a (valid) segment starts."""
    reader = RecordReader()
    with open(path, "rb") as f:
        reader.feed(f.read())
    offsets = []
    while reader.next_record() is not None:
        offsets.append(reader.last_offset)
    assert reader.pending == 0
    return offsets


def _flip_bit(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x01]))


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- a cleanly closed log has no torn tail
def test_a_flipped_bit_in_the_last_record_of_a_cleanly_stopped_log_is_damage_and_fix_salvages(tmp_path):
    proc = BraidProcess(data_dir=str(tmp_path), extra_args=["--appendfsync", "always"])
    proc.start()
    try:
        c = proc.client()
        ids = [c.xadd("s", {"n": str(i)}) for i in range(5)]  # each acknowledged once fsynced
        c.close()
        proc.stop_keeping_data()
        log_dir = _log_dir(tmp_path)
        assert read_run_mark(log_dir) == "clean"
        result = scan(log_dir)
        assert result.last_record == 5
        path = result.segments[-1].path
        last = _record_offsets(path)[-1]
        size = os.path.getsize(path)
        _flip_bit(path, last + HEADER_SIZE + 1)  # one bit of the last record's payload
        damaged = _read(path)
        logged = os.path.getsize(proc.log_path)

        with pytest.raises(RuntimeError, match="exited with 1"):  # the old code started, without the 5th entry
            proc.restart()
        assert proc.proc.returncode == 1
        with open(proc.log_path, encoding="utf-8", errors="replace") as f:
            f.seek(logged)
            said = f.read()
        assert f"corrupt record in {path} at offset {last}: checksum mismatch at the end of a log closed cleanly" \
            in said and "(record 5)" in said
        assert f"braid check-log {log_dir} --fix" in said and "gets what was cut back from its peers" in said
        assert _read(path) == damaged  # a start cuts nothing

        run = _check_log(log_dir)
        assert run.returncode == 2, run.stdout + run.stderr
        assert "run mark: clean" in run.stdout
        assert f"damage: {path} at offset {last} (record 5)" in run.stderr
        assert _read(path) == damaged

        run = _check_log("--fix", log_dir)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "salvaged: kept every record before record 5" in run.stdout
        assert f"cut {size - last} bytes from {path} at offset {last}" in run.stdout
        assert "0 valid record(s) after the bad one" in run.stdout
        assert read_run_mark(log_dir) == "recover"
        assert scan(log_dir).last_record == 4 and os.path.getsize(path) == last

        proc.restart()
        c = proc.client()
        assert [e[0] for e in c.xrange("s")] == ids[:4]
        c.close()
    finally:
        proc.stop()


def test_scan_reports_a_bad_tail_as_damage_only_when_closed_cleanly(tmp_path):
    with AppendLog.open(str(tmp_path)) as log:
        for p in (b"one", b"two", b"three"):
            log.append(OP_REPLICATED, p)
    path = scan(str(tmp_path)).segments[0].path
    last = _record_offsets(path)[-1]
    os.truncate(path, os.path.getsize(path) - 2)
    assert scan(str(tmp_path)).torn == (path, last)  # a crash mid-append: a torn tail
    with pytest.raises(CorruptLog, match=r"closed cleanly .* \(record 3\)") as e:
        scan(str(tmp_path), closed_cleanly=True)
    assert (e.value.path, e.value.offset, e.value.record) == (path, last, 3)


# ---------------------------------------------------------------- damage in the middle
def _segmented_log(tmp_path, entries: int, segment_size: int) -> tuple[str, list[bytes]]:
    """A region's log of ``entries`` XADDs, cut into small segments; returns (data dir, entry ids)."""
    origin = tmp_path / "origin"
    with InProcessServer(Config(dir=str(origin))) as srv:
        c = srv.client()
        ids = [c.xadd("s", {"n": str(i)}) for i in range(entries)]
        c.close()
    records = scan(_log_dir(origin)).records
    assert len(records) == entries  # one record per XADD
    data = tmp_path / "data"
    with AppendLog.open(_log_dir(data), segment_size=segment_size) as log:
        for _number, kind, payload in records:
            log.append(kind, payload)
    return str(data), ids


def test_damage_in_the_middle_is_reported_then_salvaged_to_the_prefix(tmp_path):
    data, ids = _segmented_log(tmp_path, 12, 150)
    log_dir = _log_dir(data)
    segments = scan(log_dir).segments
    assert len(segments) >= 4
    second = segments[1]
    at = _record_offsets(second.path)[1]
    bad = second.first_record + 1  # the second record of the second segment
    _flip_bit(second.path, at + HEADER_SIZE + 3)
    before = {s.path: _read(s.path) for s in segments}

    run = _check_log(log_dir)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"damage: {second.path} at offset {at} (record {bad}): checksum mismatch" in run.stderr
    assert f"--fix would keep every record before record {bad}" in run.stdout
    for later in segments[2:]:
        assert f"remove {later.path} ({later.size} bytes" in run.stdout
    assert {s.path: _read(s.path) for s in segments} == before  # nothing changed
    assert read_run_mark(log_dir) is None

    run = _check_log(log_dir, "--fix")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"salvaged: kept every record before record {bad}" in run.stdout
    assert f"cut {second.size - at} bytes from {second.path} at offset {at}" in run.stdout
    for later in segments[2:]:
        assert f"removed {later.path} ({later.size} bytes" in run.stdout
        assert not os.path.exists(later.path)
    assert f"{12 - bad} valid record(s) after the bad one" in run.stdout  # the rest of the log, identified
    assert f"a start replays the log, records 1..{bad - 1}" in run.stdout
    assert read_run_mark(log_dir) == "recover"

    result = scan(log_dir)
    assert result.torn is None and result.last_record == bad - 1
    assert [s.path for s in result.segments] == [segments[0].path, second.path]
    assert _check_log(log_dir).returncode == 0

    proc = BraidProcess(data_dir=data)
    proc.start()
    try:
        c = proc.client()
        assert [e[0] for e in c.xrange("s")] == ids[:bad - 1]
        c.close()
    finally:
        proc.stop()


def test_a_segment_out_of_place_goes_whole(tmp_path):
    with AppendLog.open(str(tmp_path), segment_size=30) as log:
        for i in range(4):
            log.append(OP_REPLICATED, b"%d" % i * 10)
    first, second, third, fourth = log.segments()
    os.remove(second)  # a record-number gap: the third and fourth no longer follow the first
    result = examine(str(tmp_path))
    plan = aof.plan_salvage(result)
    assert (plan.path, plan.offset, plan.record, plan.cut) == (third, 0, 2, None)
    assert [p for p, _ in plan.removed] == [third, fourth] and plan.identified == 2
    aof.salvage(plan)
    assert scan(str(tmp_path)).last_record == 1 and os.listdir(tmp_path) == [os.path.basename(first)]


def test_fix_never_cuts_an_intact_record_of_an_unknown_kind(tmp_path):
    with AppendLog.open(str(tmp_path)) as log:
        log.append(OP_REPLICATED, b"ours")
    path = scan(str(tmp_path)).segments[0].path
    body = b"\x09from a newer braid"
    with open(path, "ab") as f:
        f.write(struct.pack("<IQ", len(body) - 1, xxhash.xxh3_64_intdigest(body)) + body)
    before = _read(path)
    run = _check_log(str(tmp_path), "--fix")
    assert run.returncode == 2 and "unknown record kind 9" in run.stderr and "nothing was cut" in run.stderr
    assert _read(path) == before and read_run_mark(str(tmp_path)) is None


# ---------------------------------------------------------------- snapshots
def _saved_region(root) -> tuple[str, str]:
    """A region with entries 1-3 in a snapshot (the log compacted) and entry 4 after it;
    returns the log directory and a copy of the segment the snapshot replaced."""
    kept = os.path.join(str(root), "kept-segment")
    with InProcessServer(Config(dir=str(root))) as srv:
        c = srv.client()
        for i in range(1, 4):
            c.xadd("s", {"n": "v"}, id=f"{i}-0")
        shutil.copy(scan(_log_dir(root)).segments[0].path, kept)
        c.save()
        c.xadd("s", {"n": "v"}, id="4-0")
        c.close()
    return _log_dir(root), kept


def _flip_snapshot(log_dir: str) -> str:
    (_record, path), = snapshot.list_snapshots(log_dir)
    _flip_bit(path, os.path.getsize(path) // 2)
    return path


def test_a_damaged_snapshot_is_named_and_fix_moves_it_aside(tmp_path):
    log_dir, kept = _saved_region(tmp_path)
    shutil.copy(kept, os.path.join(log_dir, aof.segment_name(1)))  # the log still holds records 1-3
    run = _check_log(log_dir)
    assert run.returncode == 0 and run.stdout.endswith("clean\n"), run.stdout + run.stderr
    path = _flip_snapshot(log_dir)
    name = os.path.basename(path)

    run = _check_log(log_dir)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"damaged snapshot {name}: checksum mismatch" in run.stderr
    assert os.path.exists(path)

    run = _check_log(log_dir, "--fix")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"moved {name} aside to {name}.damaged" in run.stdout
    assert "a start replays the log, records 1..4" in run.stdout
    assert not os.path.exists(path) and os.path.exists(path + ".damaged")
    assert read_run_mark(log_dir) == "clean"  # no record was cut
    with InProcessServer(Config(dir=str(tmp_path))) as srv:
        c = srv.client()
        assert [e[0] for e in c.xrange("s")] == [b"1-0", b"2-0", b"3-0", b"4-0"]
        c.close()


def test_a_damaged_snapshot_the_log_cannot_replace_is_unrecoverable_from_the_folder(tmp_path):
    log_dir, _kept = _saved_region(tmp_path)
    path = _flip_snapshot(log_dir)
    run = _check_log(log_dir, "--fix")
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"moved {os.path.basename(path)} aside" in run.stdout
    assert "the state before record 4 cannot be recovered from this folder" in run.stderr
    assert "restore the region from its peers (a full resync) or from a backup" in run.stderr


# ---------------------------------------------------------------- cuts make the next start recover
def _log_of_a_region(root) -> str:
    with InProcessServer(Config(dir=str(root))) as srv:
        c = srv.client()
        for i in range(1, 4):
            c.xadd("s", {"n": "v"}, id=f"{i}-0")
        c.close()
    return _log_dir(root)


def test_a_start_that_cut_a_torn_tail_may_have_lost_operations(tmp_path):
    log_dir = _log_of_a_region(tmp_path)
    write_run_mark(log_dir, boot_id() or "unknown")  # a process killed in this boot...
    path = scan(log_dir).segments[-1].path
    os.truncate(path, os.path.getsize(path) - 3)  # ...in the middle of an append
    server = Server(Config(dir=str(tmp_path)))
    server.open_log()  # cuts the torn tail (aof-load-truncated yes) and opens the OperationLog
    try:
        assert server.core.loading_report is not None and server.core.loading_report[0].truncated_bytes > 0
        # the cut marked the log for recovery before it changed it (a region of a cluster then
        # takes back from its peers what was cut); a standalone region has no peers: its log
        # is all there is, so it is marked as this boot's again ...
        assert not server.core.oplog.may_have_lost and read_run_mark(log_dir) == (boot_id() or "unknown")
    finally:
        server.core.oplog.close()
    # ... and closed cleanly, so a bad last record found later is refused as damage, not cut
    assert read_run_mark(log_dir) == "clean"


def test_after_check_log_fix_the_next_operation_log_may_have_lost_operations(tmp_path):
    log_dir = _log_of_a_region(tmp_path)
    assert read_run_mark(log_dir) == "clean"
    path = scan(log_dir).segments[-1].path
    _flip_bit(path, _record_offsets(path)[-1] + HEADER_SIZE)
    assert _check_log(log_dir, "--fix").returncode == 0
    assert read_run_mark(log_dir) == "recover"
    oplog = OperationLog(log_dir, "everysec")
    try:
        assert oplog.may_have_lost and oplog.last_record == 2
    finally:
        oplog.close()
