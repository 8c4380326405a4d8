"""bench/wait.py: its arguments, what it expects of a wait, its results file, and one tiny run."""

from __future__ import annotations

import pytest

from bench.wait import WAITFOR, expectation, main, write_section

PACE = {"crdt-repl-send-interval-ms": 5.0, "crdt-repl-ack-interval-ms": 10.0, "crdt-repl-fsync-interval-ms": 10.0}


def test_the_expected_wait_is_the_round_trip_and_the_pacing():
    assert expectation("WAIT 2 0", 0.0, 0.0, PACE) == (0.0, 5.0)  # loopback: the batch's send interval at most
    assert expectation("WAIT 1 0", 80.0, 0.1, PACE) == (80.0, 85.0)  # the round trip, and the same
    assert expectation("WAITAOF 0 1 0", 80.0, 0.0, PACE) == (80.0, 95.0)  # ... and the peers' fsync interval
    assert expectation(WAITFOR, 80.0, 0.0, PACE) == (40.0, 45.0)  # one way


def test_each_part_replaces_its_own_section_and_a_run_with_settings_keeps_its_own(tmp_path):
    path = str(tmp_path / "RESULTS-wait.md")
    write_section(path, "cost", ["first cost"])
    write_section(path, "loopback", ["loopback numbers"])
    write_section(path, "cost", ["second cost"])
    write_section(path, "cost", ["cost with acks every 2 ms"], {"crdt-repl-ack-interval-ms": "2"})
    with open(path) as f:
        text = f.read()
    assert "first cost" not in text
    assert text.count("second cost") == 1 and "loopback numbers" in text and "cost with acks every 2 ms" in text
    assert "<!-- bench.wait:cost crdt-repl-ack-interval-ms=2:start -->" in text


def test_an_unknown_part_or_a_setting_without_a_value_is_refused(capsys):
    for argv in (["--part", "cost,elsewhere"], ["--set", "crdt-repl-ack-interval-ms"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--part takes some of cost,loopback,wan" in err
    assert "--set takes NAME=VALUE, not 'crdt-repl-ack-interval-ms'" in err


def test_a_tiny_run_on_loopback_writes_both_sections(tmp_path):
    out = tmp_path / "RESULTS-wait.md"
    assert main(["--part", "cost,loopback", "--runs", "1", "--seconds", "0.3", "--ops", "2", "--gap-ms", "1",
                 "--out", str(out)]) == 0
    text = out.read_text()
    for row in ("| alone |", "| beside a WAIT client |", "| beside a paced writer |", "| `WAIT 2 0` | none |",
                "| `WAITAOF 1 2 0` | 1 ms |", "| `BRAID.WAITFOR at region 2` |"):
        assert row in text
    assert "replies short" in text and "0 of 2 |" in text  # every wait with timeout 0 reached its count
