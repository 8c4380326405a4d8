"""The Prometheus endpoint (node/runtime/metrics.py) against real region processes.

The documented list (docs/metrics.md) is the contract: a scrape exposes exactly the
metrics it names, with their types and labels, and the dashboard uses only those.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from node.region.config import Config
from node.testing import InProcessServer, LocalCluster, free_port, free_ports, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "metrics.md")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "braid-dashboard.json")


# ---------------------------------------------------------------- helpers
def documented() -> dict[str, tuple[str, frozenset[str]]]:
    """docs/metrics.md's tables: name -> (type, labels)."""
    out = {}
    row = re.compile(r"^\| `([a-z_:]+)` \| (counter|gauge|histogram) \|([^|]*)\|")
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            m = row.match(line)
            if m:
                name, kind, labels = m.groups()
                assert name not in out, f"{name} is documented twice"
                out[name] = (kind, frozenset(re.findall(r"`([a-z_]+)`", labels)))
    return out


def scrape(port: int) -> dict[str, tuple[str, list]]:
    """One scrape: exposed name (a counter's with _total, as documented) -> (type, samples)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        out[name] = (family.type, family.samples)
    return out


def value(metrics: dict, name: str, **labels) -> float:
    """The sample of ``name`` with exactly these labels (histograms: name_count, name_sum...)."""
    family = name
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix) and name[: -len(suffix)] in metrics:
            family = name[: -len(suffix)]
    for sample in metrics[family][1]:
        if sample.name == name and sample.labels == labels:
            return sample.value
    raise KeyError(f"no sample {name}{labels}")


class MetricsCluster(LocalCluster):
    """A LocalCluster whose regions serve metrics, each on its own port set in its
    [regions.config] (the cluster file's way; --metrics-port is tested below)."""

    def _place(self) -> None:
        super()._place()
        self.metrics_ports = free_ports(len(self.config.regions))
        for region, port in zip(self.config.regions, self.metrics_ports, strict=True):
            region.config["metrics-port"] = port
        self.config.save(self.file)


@pytest.fixture(scope="module")
def cluster():
    with MetricsCluster(2) as c:
        yield c


# ---------------------------------------------------------------- the contract
def test_every_documented_metric_is_exposed_with_its_type_and_labels(cluster):
    docs = documented()
    r1 = cluster.procs[0].client()
    r1.xadd("orders", {"item": "tea"})
    with pytest.raises(redis.ResponseError):
        r1.execute_command("XADD", "orders")  # an error: braid_error_replies_total has a sample
    exposed = scrape(cluster.metrics_ports[0])
    assert set(docs) == set(exposed), (f"exposed, not documented: {sorted(set(exposed) - set(docs))}; "
                                       f"documented, not exposed: {sorted(set(docs) - set(exposed))}")
    for name, (kind, labels) in docs.items():
        got_kind, samples = exposed[name]
        assert got_kind == kind, f"{name} is a {got_kind}, documented as a {kind}"
        assert samples, f"{name} has no sample"
        seen = {k for s in samples for k in s.labels if k != "le"}
        assert seen == labels, f"{name} has labels {sorted(seen)}, documented {sorted(labels)}"


def test_values_move_when_the_cluster_does(cluster):
    r1 = cluster.procs[0].client()
    port = cluster.metrics_ports[0]
    wait_until(lambda: value(scrape(port), "braid_peer_link_state", peer="region-2", state="up") == 1,
               what="the link up")
    before = scrape(port)
    xadds = value(before, "braid_commands_total", command="xadd") if any(
        s.labels == {"command": "xadd"} for s in before["braid_commands_total"][1]) else 0
    timed = value(before, "braid_command_duration_seconds_count", command="xadd")

    r1.xadd("moves", {"n": "1"})
    after = scrape(port)
    assert value(after, "braid_commands_total", command="xadd") == xadds + 1
    assert value(after, "braid_command_duration_seconds_count", command="xadd") == timed + 1
    assert value(after, "braid_command_duration_seconds_sum", command="xadd") > value(
        before, "braid_command_duration_seconds_sum", command="xadd")
    r1.execute_command("XGROUP", "CREATE", "moves", "g", "0")
    r1.execute_command("XREADGROUP", "GROUP", "g", "c", "STREAMS", "moves", ">")
    entry = r1.xrange("moves")[0][0]
    r1.execute_command("XACK", "moves", "g", entry)
    after = scrape(port)
    for command in ("xreadgroup", "xack"):
        assert value(after, "braid_command_duration_seconds_count", command=command) >= 1
    cluster.sync_wait()
    assert value(scrape(cluster.metrics_ports[1]), "braid_operations_applied_total", origin="region-1") >= 1

    # a paused link: its state, and a lag that grows with every write it holds back
    r1.execute_command("BRAID.REPLICATION", "PAUSE", "PEER", "region-2")
    try:
        paused = wait_until(lambda: (m := scrape(port)) and value(
            m, "braid_peer_link_state", peer="region-2", state="paused") == 1 and m, what="the link paused")
        assert value(paused, "braid_peer_link_state", peer="region-2", state="up") == 0
        r1.xadd("moves", {"n": "2"})
        one = value(scrape(port), "braid_peer_lag_operations", peer="region-2")
        r1.xadd("moves", {"n": "3"})
        behind = scrape(port)
        assert value(behind, "braid_peer_lag_operations", peer="region-2") == one + 1 >= 2
        assert value(behind, "braid_peer_lag_seconds", peer="region-2") > 0
        assert value(behind, "braid_backlog_operations") >= 2
        assert value(behind, "braid_backlog_bytes") > 0
    finally:
        r1.execute_command("BRAID.REPLICATION", "RESUME", "PEER", "region-2")
    wait_until(lambda: (m := scrape(port)) and value(m, "braid_peer_link_state", peer="region-2", state="up") == 1
               and value(m, "braid_peer_lag_operations", peer="region-2") == 0, what="the link back, caught up")

    # a peer that is gone: the link is down, and what it misses is still counted
    cluster.procs[1].kill()
    wait_until(lambda: value(scrape(port), "braid_peer_link_state", peer="region-2", state="down") == 1,
               what="the link down")
    r1.xadd("moves", {"n": "4"})
    gone = scrape(port)
    assert value(gone, "braid_peer_lag_operations", peer="region-2") >= 1
    assert value(gone, "braid_peer_link_state", peer="region-2", state="up") == 0
    cluster.procs[1].restart()
    wait_until(lambda: value(scrape(port), "braid_peer_link_state", peer="region-2", state="up") == 1,
               what="the link up again")


# ---------------------------------------------------------------- one region, the endpoint itself
def test_a_region_without_a_cluster_or_a_log_has_no_such_metrics_and_answers_only_metrics():
    port = free_port()
    with InProcessServer(Config(metrics_port=port, appendonly=False)) as srv:
        c = srv.client()
        assert c.config_get("metrics-port") == {"metrics-port": str(port)}
        c.xadd("s", {"f": "v"})
        exposed = scrape(port)
        assert value(exposed, "braid_commands_total", command="xadd") == 1
        assert value(exposed, "braid_connected_clients") == 1
        assert not [n for n in exposed if n.startswith(("braid_aof_", "braid_peer_", "braid_backlog_"))]
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=30)
        assert e.value.code == 404
        e.value.close()  # the error holds the response's socket
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            assert r.read().decode().rstrip().endswith("# EOF")
        # a scraper that connects and says nothing holds only its own connection
        with socket.create_connection(("127.0.0.1", port)):
            assert c.ping()
            assert value(scrape(port), "braid_connected_clients") == 1


def test_a_metrics_port_in_use_stops_the_region_with_a_clear_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "node", "--log-level", "WARNING", "node", "--port",
                               str(free_port()), "--data-dir", str(tmp_path), "--appendonly", "no",
                               "--metrics-port", str(taken)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1: metrics-port {taken}: Address already in use" in proc.stderr
    assert "Traceback" not in proc.stderr
    bad = subprocess.run([sys.executable, "-m", "node", "node", "--metrics-port", "70000"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "'70000' is not a port number" in bad.stderr


# ---------------------------------------------------------------- shards
def test_every_series_of_a_shard_says_which_shard_and_an_unsharded_region_has_no_such_label():
    """A shard's exposition labels every sample with its shard number, process metrics
    included; a region of an unsharded database keeps exactly its documented labels."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

    from node.activeactive.cluster_config import local_cluster
    from node.region.core import RegionCore
    from node.runtime.metrics import RegionMetrics

    docs = documented()
    sharded = local_cluster(2, 7000, shards=3)
    for k in range(3):
        view = sharded.shard_view(k)
        metrics = RegionMetrics(RegionCore(Config(), cluster=(view, view.region("region-2"))))
        body, _ = metrics.scrape()
        families = list(text_string_to_metric_families(body.decode()))
        assert {f.name for f in families} >= {"braid_region_info", "braid_peer_link_state", "process_cpu_seconds"}
        for family in families:
            name = family.name + "_total" if family.type == "counter" else family.name
            for sample in family.samples:
                assert sample.labels.get("shard") == str(k), f"{sample.name}{sample.labels}"
                assert set(sample.labels) - {"le", "shard"} == docs[name][1], f"{sample.name}{sample.labels}"
        open_body, _ = metrics.scrape("application/openmetrics-text; version=1.0.0")
        assert all(s.labels["shard"] == str(k)
                   for f in openmetrics_families(open_body.decode()) for s in f.samples)
    plain = local_cluster(2, 7000)
    for cluster in ((plain, plain.regions[0]), None):
        body, _ = RegionMetrics(RegionCore(Config(), cluster=cluster)).scrape()
        assert not [s for f in text_string_to_metric_families(body.decode()) for s in f.samples
                    if "shard" in s.labels]


# ---------------------------------------------------------------- the dashboard
def test_the_dashboard_parses_and_uses_only_documented_metrics():
    with open(DASHBOARD, encoding="utf-8") as f:
        dash = json.load(f)
    docs = documented()
    variables = dash["templating"]["list"]
    datasource = [v for v in variables if v["type"] == "datasource"]
    assert datasource and datasource[0]["query"] == "prometheus"
    ds_ref = "${" + datasource[0]["name"] + "}"
    panels = [p for p in dash["panels"] if p.get("type") != "row"]
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    used = set()
    for panel in panels:
        assert panel["datasource"]["uid"] == ds_ref, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for name in re.findall(r"\b((?:braid|process)_[a-z_]+)", target["expr"]):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                assert name in docs or (base in docs and docs[base][0] == "histogram"), \
                    f"panel {panel['title']!r} uses {name}, which docs/metrics.md does not list"
                used.add(base if base in docs else name)
    for needed in ("braid_commands_total", "braid_command_duration_seconds", "braid_peer_link_state",
                   "braid_peer_lag_operations", "braid_peer_lag_seconds", "braid_backlog_bytes",
                   "braid_aof_fsync_duration_seconds", "braid_error_replies_total"):
        assert needed in used, f"no panel graphs {needed}"


def test_the_dashboard_filters_every_graph_by_shard_and_graphs_the_shards():
    """A shard variable (empty and "All" for an unsharded database: ".*" matches a missing
    label too), used by every query, and a row that compares the shards."""
    with open(DASHBOARD, encoding="utf-8") as f:
        dash = json.load(f)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    shard = variables["shard"]
    assert shard["query"]["query"] == "label_values(braid_region_info, shard)"
    assert shard["includeAll"] and shard["allValue"] == ".*"
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names.index("shard") < names.index("instance") and "$shard" in variables["instance"]["query"]["query"]
    panels = [p for p in dash["panels"] if p.get("type") != "row"]
    for panel in panels:
        for target in panel["targets"]:
            selectors = re.findall(r"\b(?:braid|process)_[a-z_]+(\{[^}]*\})?", target["expr"])
            assert selectors and all('shard=~"$shard"' in s for s in selectors), (panel["title"], target["expr"])
    by_shard = [p["title"] for p in panels if any("by (shard" in t["expr"] for t in p["targets"])]
    assert len(by_shard) >= 3, by_shard
