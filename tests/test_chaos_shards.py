"""The live chaos suite on sharded regions: ``braid-chaos run --regions 2 --shards 2``.

Each region runs as its supervisor and two shard processes; the workloads send every
command to the shard owning its key's slot; the nemesis kills single shard processes
(their supervisor must start them again by itself) and once a whole region (the
supervisor with its shards: a machine crash).  The run must pass every checker -
convergence per shard group, every key at its own shard, no acknowledged write lost -
and its report must show the single-shard kills: each restarted, the region's other
shard answering and acknowledging operations meanwhile.

One short run (the seed's schedule kills shard 0 of a region, then a whole region, then
shard 1 of a region), as the command line starts it; the refusals are checked in this
process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from chaos.checkers import SIBLING_SILENCE_S
from chaos.cli import main
from chaos.nemesis import schedule
from chaos.run import RunConfig, run
from chaos.shards import ShardedProcessBackend
from node.activeactive.cluster_config import local_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED, DURATION = 2, 14  # the schedule below: both shards killed alone, and a region killed whole


def test_the_seed_kills_each_shard_alone_and_a_region_whole():
    steps = schedule(SEED, DURATION, [1, 2], ["shard-kill", "kill"], shards=2)
    assert [s.kind for s in steps] == ["shard-kill", "kill", "shard-kill"]
    assert {s.params["shard"] for s in steps if s.kind == "shard-kill"} == {0, 1}


def test_a_sharded_run_with_shard_kills_passes_and_reports_them(tmp_path):
    out = tmp_path / "report"
    res = subprocess.run([sys.executable, "-m", "chaos.cli", "run", "--regions", "2", "--shards", "2",
                          "--duration", str(DURATION), "--seed", str(SEED), "--faults", "shard-kill,kill",
                          "--out", str(out)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    text = " ".join(res.stdout.split())  # (rich wraps long lines)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "starting 2 regions of 2 shards each" in text and "shards=2" in text
    assert "shard 0 (slots 0-8191): chaos:churn, chaos:groups, chaos:log" in text

    with open(out / "report.json") as f:
        data = json.load(f)
    assert data["verdict"] == "pass" and data["config"]["shards"] == 2
    verdicts = {v["name"]: v for v in data["verdicts"]}
    assert all(v["ok"] for v in verdicts.values()), verdicts
    assert verdicts["convergence"]["summary"].startswith("2 shard groups, each identical in its 2 regions")
    assert "none answered MOVED" in verdicts["shard placement"]["summary"]
    assert "restarted by its supervisor" in verdicts["shard kills"]["summary"]
    assert data["shards"]["slots"] == ["0-8191", "8192-16383"]
    assert data["shards"]["keys"]["1"] == ["chaos:idmp", "chaos:trimmed"]

    kills = data["shards"]["kills"]
    assert kills, "no single shard process was killed"
    for kill in kills:
        assert kill["restarted"] and kill["new_pid"] not in (None, kill["pid"]) and kill["back_s"] < 30, kill
        (other, seen), = kill["siblings"].items()  # the region's other shard, pinged throughout
        assert int(other) != kill["shard"] and seen["answered"] >= 1, kill
        assert seen["longest_silence_s"] <= SIBLING_SILENCE_S, kill
        assert kill["others_acknowledged"] >= 1, kill  # and it took the workload's operations meanwhile
    assert data["stats"]["faults"].get("kill", 0) >= 1  # a whole region too: its supervisor and shards
    assert data["lag"]["1"]["down"] or data["lag"]["2"]["down"]


def test_membership_changes_of_a_sharded_database_pass_and_are_judged_shard_by_shard(tmp_path):
    """The membership fault on regions of two shards: a region joins every shard group, one leaves
    gracefully, one is removed by force - each group freezing it at its own point, by which the
    writes of each shard are judged - and purged; every checker passes."""
    backend = ShardedProcessBackend(3, str(tmp_path / "regions"), shards=2, seed=5, membership=True)
    backend.start()
    try:
        result = run(RunConfig(3, 24, 5, ["membership", "partition"], shards=2, out=str(tmp_path / "r")), backend)
        final = sorted(backend.members.addresses)
    finally:
        backend.stop()
    assert result.ok, [v.summary for v in result.verdicts if not v.ok] + result.errors
    changes = " | ".join(result.membership)
    assert re.match(r"added region-\d+ as region \d+ \(active\)", result.membership[0]), changes
    forced = re.search(r"removed region (\d+) by force \(frozen at (\d+) / (\d+)\)", changes)
    assert re.search(r"removed region \d+ gracefully", changes) and forced, changes
    assert f"purged region {forced[1]}" in changes
    assert result.history.forced_shards[int(forced[1])] == [int(forced[2]), int(forced[3])]
    assert {s.shard for s in result.history.shard_samples} == {0, 1}
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["convergence"].summary.startswith("2 shard groups, each identical in its "
                                                      f"{len(final)} regions"), verdicts["convergence"].summary
    assert "(shard by shard)" in verdicts["forced removals"].summary, verdicts["forced removals"].summary


def test_shards_are_refused_where_they_cannot_run(tmp_path, capsys):
    def refused(*argv: str) -> str:
        assert main(["run", *argv, "--out", str(tmp_path)]) == 2
        return " ".join(capsys.readouterr().out.split())

    assert "the netns backend runs unsharded regions only" in refused("--shards", "2", "--backend", "netns")
    assert "it needs --shards 2 or more" in refused("--faults", "shard-kill")
    sharded = tmp_path / "cluster.toml"
    local_cluster(2, 7001, str(tmp_path), shards=2).save(str(sharded))
    assert "attaching to one is not supported yet" in refused("--cluster", str(sharded))
