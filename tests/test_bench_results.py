"""bench/run.py's results file: rewriting it keeps what other benchmarks recorded in it."""

from __future__ import annotations


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
