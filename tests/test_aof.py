"""The operation log's on-disk format (node/persistence/aof.py) and `braid check-log`."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from node.persistence import aof, aofformat, aofscan
from node.persistence.aof import (
    HEADER_SIZE,
    OP_LOCAL,
    OP_REPLICATED,
    AppendLog,
    CorruptLog,
    RecordError,
    RecordReader,
    TornTail,
    encode_record,
    scan,
    segment_name,
    truncate_torn,
)


def _decode_all(data: bytes) -> list[tuple[int, bytes]]:
    reader = RecordReader()
    reader.feed(data)
    out = []
    while (record := reader.next_record()) is not None:
        out.append(record)
    assert reader.pending == 0
    return out


def _write_log(directory, payloads, **kw) -> list[int]:
    """Append ``payloads`` (kind 1) to a log; returns each record's byte offset in the last segment."""
    with AppendLog.open(str(directory), **kw) as log:
        for p in payloads:
            log.append(OP_REPLICATED, p)
    return _offsets(payloads)


def _offsets(payloads) -> list[int]:
    offsets, at = [], 0
    for p in payloads:
        offsets.append(at)
        at += HEADER_SIZE + len(p)
    return offsets


def _flip(path, offset: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _only_segment(directory) -> str:
    (path,) = [os.path.join(directory, n) for n in os.listdir(directory)]
    return path


PAYLOADS = [b"first", b"", b"third record", b"x" * 40, b"last one here"]


# ------------------------------------------------------------------- records
def test_record_layout_is_as_documented():
    record = encode_record(OP_LOCAL, b"hello")
    length, checksum = struct.unpack_from("<IQ", record)
    assert length == 5
    assert checksum == xxhash.xxh3_64_intdigest(b"\x02hello")
    assert record[12] == OP_LOCAL and record[13:] == b"hello" and len(record) == HEADER_SIZE + 5


@pytest.mark.parametrize("payload", [b"", b"a", bytes(range(256)) * 4, os.urandom(3 * 1024 * 1024)])
@pytest.mark.parametrize("kind", [OP_REPLICATED, OP_LOCAL])
def test_round_trip(kind, payload):
    assert _decode_all(encode_record(kind, payload)) == [(kind, payload)]


def test_encode_rejects_unknown_kind_and_oversized_payload(monkeypatch):
    with pytest.raises(ValueError, match="kind 3"):
        encode_record(3, b"x")
    monkeypatch.setattr(aofformat, "MAX_PAYLOAD", 10)  # read where encode_record is
    encode_record(OP_REPLICATED, b"x" * 10)
    with pytest.raises(ValueError, match="exceeds"):
        encode_record(OP_REPLICATED, b"x" * 11)


records_st = st.lists(st.tuples(st.sampled_from([OP_REPLICATED, OP_LOCAL]), st.binary(max_size=300)), max_size=12)


@given(records=records_st)
def test_reader_one_byte_at_a_time(records):
    data = b"".join(encode_record(k, p) for k, p in records)
    reader = RecordReader()
    out, offsets = [], []
    for i in range(len(data)):
        reader.feed(data[i : i + 1])
        while (record := reader.next_record()) is not None:
            out.append(record)
            offsets.append(reader.last_offset)
    assert out == records
    assert offsets == _offsets([p for _, p in records])
    assert reader.offset == len(data) and reader.pending == 0


@given(records=records_st, cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=20))
def test_reader_random_chunks(records, cuts):
    data = b"".join(encode_record(k, p) for k, p in records)
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    reader = RecordReader()
    out = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        reader.feed(data[start:end])
        while (record := reader.next_record()) is not None:
            out.append(record)
    assert out == records


def _one_by_one(chunks: list[bytes], max_payload: int) -> tuple[list, object, list]:
    """next_record over ``chunks``: (records, the error's (offset, reason, may_be_torn) or None, last_offsets)."""
    reader, out, lasts = RecordReader(max_payload), [], []
    try:
        for chunk in chunks:
            reader.feed(chunk)
            while (record := reader.next_record()) is not None:
                out.append(record)
            lasts.append((reader.last_offset, reader.offset, reader.pending))
    except RecordError as e:
        return out, (e.offset, e.reason, e.may_be_torn), lasts
    return out, None, lasts


def _in_bulk(chunks: list[bytes], max_payload: int) -> tuple[list, object, list]:
    reader, out, lasts = RecordReader(max_payload), [], []
    try:
        for chunk in chunks:
            reader.feed(chunk)
            reader.take_records(out, 10 + len(out))
            lasts.append((reader.last_offset, reader.offset, reader.pending))
    except RecordError as e:
        err = (e.offset, e.reason, e.may_be_torn)
        with pytest.raises(RecordError):  # sticky, as next_record's
            reader.take_records(out, 0)
        return _unnumbered(out), err, lasts
    return _unnumbered(out), None, lasts


def _unnumbered(out: list) -> list:
    assert [n for n, _, _ in out] == list(range(10, 10 + len(out)))
    return [(k, p) for _, k, p in out]


@given(records=records_st, cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=20),
       damage=st.one_of(st.none(), st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255))),
       max_payload=st.sampled_from([aof.MAX_PAYLOAD, 200]))
def test_take_records_reads_what_next_record_reads(records, cuts, damage, max_payload):
    """The bulk reader a load uses gives the same records, offsets and errors, damaged bytes included."""
    data = bytearray(b"".join(encode_record(k, p) for k, p in records))
    if damage is not None and data:
        data[damage[0] % len(data)] ^= damage[1]
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    chunks = [bytes(data[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    assert _in_bulk(chunks, max_payload) == _one_by_one(chunks, max_payload)


def test_reader_rejects_huge_length_without_waiting_for_the_payload():
    reader = RecordReader(max_payload=100)
    reader.feed(encode_record(OP_REPLICATED, b"ok") + struct.pack("<IQ", 101, 0) + b"\x01")
    assert reader.next_record() == (OP_REPLICATED, b"ok")
    with pytest.raises(RecordError, match="exceeds") as e:
        reader.next_record()
    assert e.value.offset == HEADER_SIZE + 2 and e.value.may_be_torn


def test_reader_errors_are_sticky():
    bad = bytearray(encode_record(OP_REPLICATED, b"payload"))
    bad[-1] ^= 1
    reader = RecordReader()
    reader.feed(bytes(bad) + encode_record(OP_REPLICATED, b"next"))
    for _ in range(2):
        with pytest.raises(RecordError, match="checksum mismatch"):
            reader.next_record()


def test_reader_unknown_kind_with_valid_checksum_is_not_torn():
    body = b"\x07newer"
    record = struct.pack("<IQ", 5, xxhash.xxh3_64_intdigest(body)) + body
    reader = RecordReader()
    reader.feed(record)
    with pytest.raises(RecordError, match="unknown record kind 7") as e:
        reader.next_record()
    assert not e.value.may_be_torn


# ------------------------------------------------------------------- torn tails
def test_truncated_last_record_at_every_offset_is_a_torn_tail(tmp_path):
    offsets = _write_log(tmp_path / "orig", PAYLOADS)
    original = _read(_only_segment(tmp_path / "orig"))
    last = offsets[-1]
    for cut in range(last + 1, len(original)):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        path = str(d / segment_name(1))
        with open(path, "wb") as f:
            f.write(original[:cut])
        result = scan(str(d))
        assert result.torn == (path, last), cut
        assert [p for _, _, p in result.records] == PAYLOADS[:-1]
        assert result.last_record == len(PAYLOADS) - 1
        with pytest.raises(TornTail, match=f"offset {last}"):
            AppendLog.open(str(d))
        assert os.path.getsize(path) == cut  # refusing to open changed nothing

        assert truncate_torn(result) == cut - last
        with AppendLog.open(str(d)) as log:
            assert log.append(OP_LOCAL, b"after the cut") == len(PAYLOADS)
        again = scan(str(d))
        assert again.torn is None
        assert again.records[-1] == (len(PAYLOADS), OP_LOCAL, b"after the cut")
        assert [p for _, _, p in again.records[:-1]] == PAYLOADS[:-1]


@pytest.mark.parametrize("where", ["length", "checksum", "kind", "payload"])
def test_damaged_last_record_with_nothing_after_is_a_torn_tail(tmp_path, where):
    offsets = _write_log(tmp_path, PAYLOADS)
    path = _only_segment(tmp_path)
    _flip(path, offsets[-1] + {"length": 0, "checksum": 6, "kind": 12, "payload": 15}[where], 0x01)
    result = scan(str(tmp_path))
    assert result.torn == (path, offsets[-1])
    assert len(result.records) == len(PAYLOADS) - 1


def test_torn_header_in_a_new_segment(tmp_path):
    with AppendLog.open(str(tmp_path), segment_size=30) as log:
        for p in [b"a" * 10, b"b" * 10]:
            log.append(OP_REPLICATED, p)
    second = str(tmp_path / segment_name(2))
    with open(second, "ab") as f:
        f.write(encode_record(OP_REPLICATED, b"c")[:5])
    result = scan(str(tmp_path))
    assert result.torn == (second, HEADER_SIZE + 10)
    truncate_torn(result)
    assert scan(str(tmp_path)).torn is None


def test_partial_record_then_zeros_is_a_torn_tail(tmp_path):
    """A crash can extend the file with zeros instead of the bytes written."""
    offsets = _write_log(tmp_path, PAYLOADS)
    path = _only_segment(tmp_path)
    os.truncate(path, offsets[-1] + HEADER_SIZE + 2)
    with open(path, "ab") as f:
        f.write(bytes(4096))
    result = scan(str(tmp_path))
    assert result.torn == (path, offsets[-1])


def test_the_search_for_valid_records_after_damage_is_bounded(tmp_path, monkeypatch):
    """Past the bound a torn tail is reported as corruption: never cut what could be valid."""
    offsets = _write_log(tmp_path, [b"ok", b"\x01" * 30])  # the torn payload holds kind bytes
    path = _only_segment(tmp_path)
    os.truncate(path, os.path.getsize(path) - 1)
    assert scan(str(tmp_path)).torn == (path, offsets[-1])
    monkeypatch.setattr(aofscan, "_SEARCH_MAX_CANDIDATES", 0)  # read where the search is
    with pytest.raises(CorruptLog, match="rule out valid records"):
        scan(str(tmp_path))


def test_truncate_refuses_a_log_that_changed_since_the_scan(tmp_path):
    _write_log(tmp_path, PAYLOADS)
    path = _only_segment(tmp_path)
    with open(path, "ab") as f:
        f.write(b"\x05")
    result = scan(str(tmp_path))
    with open(path, "ab") as f:
        f.write(b"\x00")
    with pytest.raises(ValueError, match="changed since"):
        truncate_torn(result)


# ------------------------------------------------------------------- corruption
def test_damage_with_valid_records_after_it_is_corruption(tmp_path):
    """Every byte of a middle record, header included, flipped two ways."""
    offsets = _write_log(tmp_path / "orig", PAYLOADS)
    original = _read(_only_segment(tmp_path / "orig"))
    bad = offsets[3]
    for at in range(bad, offsets[4]):
        for mask in (0x01, 0xFF):
            d = tmp_path / f"flip{at}-{mask}"
            d.mkdir()
            path = str(d / segment_name(1))
            damaged = bytearray(original)
            damaged[at] ^= mask
            with open(path, "wb") as f:
                f.write(damaged)
            with pytest.raises(CorruptLog) as e:
                scan(str(d))
            assert (e.value.path, e.value.offset) == (path, bad), (at, mask)
            assert f"corrupt record in {path} at offset {bad}:" in str(e.value)
            with pytest.raises(CorruptLog):
                AppendLog.open(str(d))
            assert _read(path) == damaged


def _two_segment_log(directory) -> tuple[str, str]:
    with AppendLog.open(str(directory), segment_size=70) as log:
        for i in range(4):
            log.append(OP_REPLICATED, b"%d" % i * 20)
    first, second = log.segments()
    return first, second


def test_damaged_last_record_of_an_earlier_segment_is_corruption(tmp_path):
    first, _ = _two_segment_log(tmp_path)
    _flip(first, os.path.getsize(first) - 1)
    with pytest.raises(CorruptLog, match="not the last") as e:
        scan(str(tmp_path))
    assert (e.value.path, e.value.offset) == (first, HEADER_SIZE + 20)


def test_short_earlier_segment_is_corruption(tmp_path):
    first, _ = _two_segment_log(tmp_path)
    os.truncate(first, os.path.getsize(first) - 3)
    with pytest.raises(CorruptLog, match="incomplete record") as e:
        scan(str(tmp_path))
    assert e.value.path == first


def test_unknown_kind_at_the_end_is_corruption_not_torn(tmp_path):
    _write_log(tmp_path, PAYLOADS)
    path = _only_segment(tmp_path)
    body = b"\x09from a newer braid"
    with open(path, "ab") as f:
        f.write(struct.pack("<IQ", len(body) - 1, xxhash.xxh3_64_intdigest(body)) + body)
    with pytest.raises(CorruptLog, match="unknown record kind 9"):
        scan(str(tmp_path))


def test_record_number_gap_between_segments_is_corruption(tmp_path):
    with AppendLog.open(str(tmp_path), segment_size=30) as log:
        for i in range(3):
            log.append(OP_REPLICATED, b"%d" % i * 10)
    first, second, third = log.segments()
    os.remove(second)
    with pytest.raises(CorruptLog, match="gap") as e:
        scan(str(tmp_path))
    assert (e.value.path, e.value.offset) == (third, 0)


# ------------------------------------------------------------------- segments
def test_segments_roll_by_size_and_number_records_across_them(tmp_path):
    payloads = [bytes([65 + i]) * 27 for i in range(7)]  # 40-byte records
    with AppendLog.open(str(tmp_path), segment_size=100) as log:
        numbers = [log.append(OP_REPLICATED, p) for p in payloads]
        big = log.append(OP_LOCAL, b"z" * 500)  # larger than a segment: alone in one
        log.append(OP_LOCAL, b"after")
    assert numbers == list(range(1, 8)) and big == 8
    assert [os.path.basename(p) for p in log.segments()] == [segment_name(n) for n in (1, 3, 5, 7, 8, 9)]
    result = scan(str(tmp_path))
    assert [s.records for s in result.segments] == [2, 2, 2, 1, 1, 1]
    assert all(s.size <= 100 for s in result.segments if s.first_record != 8)
    assert result.records[:7] == [(n, OP_REPLICATED, p) for n, p in zip(numbers, payloads, strict=True)]
    assert result.records[7:] == [(8, OP_LOCAL, b"z" * 500), (9, OP_LOCAL, b"after")]

    with AppendLog.open(str(tmp_path), segment_size=100) as log:  # continues the numbering
        assert log.last_record == 9
        assert log.append(OP_REPLICATED, b"ten") == 10
    assert scan(str(tmp_path)).records[-1] == (10, OP_REPLICATED, b"ten")


def test_explicit_roll_and_roll_of_an_empty_segment(tmp_path):
    with AppendLog.open(str(tmp_path)) as log:
        log.roll()  # empty: nothing to do
        log.append(OP_REPLICATED, b"one")
        log.roll()
        log.roll()
        log.append(OP_REPLICATED, b"two")
    assert [os.path.basename(p) for p in log.segments()] == [segment_name(1), segment_name(2)]
    assert [r[0] for r in scan(str(tmp_path)).records] == [1, 2]


def _record_fsyncs(monkeypatch) -> list[str]:
    """Replace os.fsync in aof by one that notes whether it synced a directory or a file."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    monkeypatch.setattr(aof.os, "fsync", recording_fsync)
    return synced


def test_drop_segments_before(tmp_path, monkeypatch):
    with AppendLog.open(str(tmp_path), segment_size=30) as log:
        for i in range(7):
            log.append(OP_REPLICATED, b"%d" % i * 10)  # one record per segment
        assert log.drop_segments_before(1) == []
        synced = _record_fsyncs(monkeypatch)
        dropped = log.drop_segments_before(4)
        assert [os.path.basename(p) for p in dropped] == [segment_name(n) for n in (1, 2, 3)]
        assert synced == ["dir"] * 3  # one per deletion: a crash never leaves a gap
        assert log.drop_segments_before(1000) == [os.path.join(str(tmp_path), segment_name(n)) for n in (4, 5, 6)]
        assert log.segments() == [os.path.join(str(tmp_path), segment_name(7))]  # the current one stays
        assert log.append(OP_REPLICATED, b"eight") == 8
    result = scan(str(tmp_path))
    assert [r[0] for r in result.records] == [7, 8]


def test_open_creates_the_directory_and_an_empty_log_scans_clean(tmp_path):
    d = tmp_path / "a" / "b"
    with AppendLog.open(str(d)) as log:
        assert log.last_record == 0
    result = scan(str(d))
    assert result.torn is None and result.records == [] and result.last_record == 0
    assert [s.first_record for s in result.segments] == [1]


def test_flush_hands_buffered_bytes_to_the_os(tmp_path):
    with AppendLog.open(str(tmp_path)) as log:
        log.append(OP_REPLICATED, b"buffered")
        path = log.segments()[0]
        assert os.path.getsize(path) == 0
        log.flush()
        assert os.path.getsize(path) == HEADER_SIZE + 8


def test_fsync_syncs_the_directory_only_after_a_segment_was_created(tmp_path, monkeypatch):
    synced = _record_fsyncs(monkeypatch)
    log = AppendLog.open(str(tmp_path))
    log.append(OP_REPLICATED, b"one")
    log.fsync()
    assert synced == ["file", "dir"]  # the first segment was just created
    log.fsync()
    assert synced == ["file", "dir", "file"]
    log.append(OP_REPLICATED, b"two")
    log.roll()  # fsyncs the finished segment
    log.append(OP_REPLICATED, b"three")
    log.fsync()
    assert synced == ["file", "dir", "file", "file", "file", "dir"]
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.append(OP_REPLICATED, b"late")


# ------------------------------------------------------------------- braid check-log
def _check_log(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", "check-log", *args], capture_output=True,
                          text=True, timeout=60)


def test_check_log_clean(tmp_path):
    with AppendLog.open(str(tmp_path), segment_size=70) as log:
        for i in range(5):
            log.append(OP_REPLICATED, b"%d" % i * 20)
    run = _check_log(str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert f"{segment_name(1)}: records 1..2 (2 records" in run.stdout
    assert "last record 5" in run.stdout and "clean" in run.stdout


def test_check_log_torn_then_fix(tmp_path):
    _write_log(tmp_path, PAYLOADS)
    path = _only_segment(tmp_path)
    size = os.path.getsize(path)
    os.truncate(path, size - 4)
    run = _check_log(str(tmp_path))
    assert run.returncode == 1, run.stderr
    assert f"torn tail: {path} at offset {size - HEADER_SIZE - len(PAYLOADS[-1])}" in run.stdout
    assert os.path.getsize(path) == size - 4  # without --fix nothing changes

    run = _check_log(str(tmp_path), "--fix")
    assert run.returncode == 0, run.stderr
    assert f"cut {HEADER_SIZE + len(PAYLOADS[-1]) - 4} bytes from {path}" in run.stdout
    run = _check_log(str(tmp_path))
    assert run.returncode == 0 and "clean" in run.stdout
    assert f"last record {len(PAYLOADS) - 1}" in run.stdout


def test_check_log_corrupt_changes_nothing_without_fix(tmp_path):
    """(--fix salvages: tests/test_log_damage.py.)"""
    offsets = _write_log(tmp_path, PAYLOADS)
    path = _only_segment(tmp_path)
    _flip(path, offsets[2] + HEADER_SIZE)
    before = _read(path)
    run = _check_log(str(tmp_path))
    assert run.returncode == 2, run.stdout
    assert f"{path} at offset {offsets[2]}" in run.stderr
    assert _read(path) == before
    assert not os.path.exists(tmp_path / "last-run")  # no run mark written either


def test_check_log_missing_directory(tmp_path):
    run = _check_log(str(tmp_path / "nope"))
    assert run.returncode == 2 and "no such directory" in run.stderr


@given(st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=6), min_size=1, max_size=8))
def test_appending_many_is_appending_each_in_turn(tmp_path_factory, runs):
    """``append_many`` writes the records ``append`` would, in the same segments (a run that
    would cross a segment's end rolls where appending one by one rolls), and numbers them alike."""
    one_by_one, together = tmp_path_factory.mktemp("each"), tmp_path_factory.mktemp("many")
    with AppendLog.open(str(one_by_one), segment_size=120) as a, AppendLog.open(str(together), segment_size=120) as b:
        for run in runs:
            for payload in run:
                a.append(OP_REPLICATED, payload)
            assert b.append_many(OP_REPLICATED, run) == a.last_record
            assert b.last_record == a.last_record
    each, many = scan(str(one_by_one)), scan(str(together))
    assert many.records == each.records
    assert [(s.first_record, s.records, os.path.basename(s.path)) for s in many.segments] == \
        [(s.first_record, s.records, os.path.basename(s.path)) for s in each.segments]
