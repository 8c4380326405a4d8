"""bench/run.py's results file: rewriting it keeps what other benchmarks recorded in it."""

from __future__ import annotations

import os


def test_rewriting_the_results_keeps_the_sections_other_benchmarks_wrote(tmp_path):
    from bench.run import write_results

    path = tmp_path / "RESULTS.md"
    section = "<!-- bench.pipeline:start -->\n## Spark pipeline\n\n| run | rows |\n<!-- bench.pipeline:end -->"
    path.write_text("# Benchmark results\n\nthe previous run's tables\n\n" + section + "\n")
    machine = {"date": "2026-11-27 05:52 UTC", "commit": "0000000", "cpu": "a CPU", "cores": 2, "memory": "1 GiB",
               "kernel": "Linux", "python": "CPython 3.11", "redis": "Redis 8.6.3", "redis_path": "$REDIS_SERVER",
               "benchmark": "redis-benchmark 7.0.15", "cores_used": (0, 1), "repeat": 3}
    write_results(str(path), machine, [], {}, "python -m bench.run", ("0.00 0.00 0.00", "0.00 0.00 0.00"),
                  {"braid": "python -m node", "redis": "redis-server"})
    text = path.read_text()
    assert section in text
    assert "the previous run's tables" not in text


def test_the_results_give_region_1s_cpu_per_request_beside_the_standalone_regions(tmp_path):
    """The Active-Active scenario reports CPU per request (a number the core layout does not
    move) from the median of the runs, besides the throughput ratio."""
    from bench.run import SCENARIOS, Result, cpu_seconds, write_results

    assert cpu_seconds(os.getpid()) > 0  # this process has run: /proc is read as the runs read it
    scenario = next(s for s in SCENARIOS if s.against == "standalone")
    result = Result(scenario, 1000)
    result.runs = {"braid": [{"rps": 24000.0 + k, "cpu_us": cpu, "peer_cpu_us": [9.0 + k, 10.0 + k]}
                             for k, cpu in enumerate((33.0, 31.0, 32.0))],
                   "redis": [{"rps": 48000.0 + k, "cpu_us": cpu, "peer_cpu_us": []}
                             for k, cpu in enumerate((21.0, 20.0, 22.0))]}
    result.braid, result.redis = result.runs["braid"][1], result.runs["redis"][1]
    result.checks = {"braid": "ok", "redis": "ok"}
    machine = {"date": "2026-11-27 05:52 UTC", "commit": "0000000", "cpu": "a CPU", "cores": 2, "memory": "1 GiB",
               "kernel": "Linux", "python": "CPython 3.11", "redis": "Redis 8.6.3", "redis_path": "$REDIS_SERVER",
               "benchmark": "redis-benchmark 7.0.15", "cores_used": (0, 1), "repeat": 3}
    path = tmp_path / "RESULTS.md"
    write_results(str(path), machine, [result], {}, "python -m bench.run", ("0.00 0.00 0.00", "0.00 0.00 0.00"),
                  {"braid": "python -m node", "redis": "redis-server"})
    text = path.read_text()
    assert ("region 1 32.0 µs, the standalone region 21.0 µs (standalone / region 1: 0.66); "
            "regions 2 and 3, applying region 1's operations: 10.0 µs, 11.0 µs") in text
    assert "| 33.0 |" in text and "| 20.0 |" in text  # every run's own number, in the raw table


def test_peers_nice_renices_every_thread_of_a_running_process():
    import subprocess
    import sys
    import time

    from bench.run import parse_args, renice_process

    child = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"])
    try:
        def threads():
            return os.listdir(f"/proc/{child.pid}/task")
        deadline = time.monotonic() + 10
        while len(threads()) < 2:  # the second thread started (a poll with a deadline)
            assert time.monotonic() < deadline, "the child's thread never started"
            time.sleep(0.01)
        renice_process(child.pid, 7)
        assert [os.getpriority(os.PRIO_PROCESS, int(t)) for t in threads()] == [7] * len(threads())
    finally:
        child.kill()
        child.wait()
    assert parse_args(["--peers-nice", "7"]).peers_nice == 7


def test_colocation_refuses_a_share_outside_a_core_an_unknown_placement_a_bad_setting_and_no_rounds(capsys):
    import pytest

    from bench.colocation import main

    for argv in (["--shares", "0.1,1.5"], ["--shares", "x"], ["--only", "peers,elsewhere"],
                 ["--with", "crdt-repl-send-interval-ms=20,oops"], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'1.5'" in err and "'x'" in err and "unknown placements: elsewhere" in err
    assert "--with takes NAME=VALUE, not 'oops'" in err and "--rounds takes a number of rounds of at least 1" in err


def test_the_replication_benchmark_takes_settings_as_name_equals_value(capsys):
    import pytest

    from bench.replication import main

    with pytest.raises(SystemExit) as exc:
        main(["--set", "crdt-repl-send-interval-ms"])
    assert exc.value.code == 2
    assert "--set takes NAME=VALUE, not 'crdt-repl-send-interval-ms'" in capsys.readouterr().err
    from bench.peercost import main as peercost

    with pytest.raises(SystemExit) as exc:
        peercost(["--against", "=10"])  # the same parser: a name is needed too
    assert exc.value.code == 2
    assert "--against takes NAME=VALUE, not '=10'" in capsys.readouterr().err
