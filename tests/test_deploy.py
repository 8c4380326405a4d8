"""The Docker deployment files, checked without a Docker engine.

``deploy/compose.yaml`` must agree with the cluster file it mounts (service
names are region names and hosts, ports, one network and one volume per region
plus the shared replication network), and the Dockerfile's entry point must be
a command line ``braid node`` accepts.

``deploy/compose.sharded.yaml`` (three regions of two shards, one container per
shard) must agree with its cluster file too, loaded with
``node.activeactive.cluster_config``: per region, a service under the region's
host name that holds its network namespace and publishes every shard's ports
under their own numbers, and per shard one service in that namespace running
``--region R --shard K`` with a health check of its own port and the region's
volume.  Its containers are not started here (nor by tests/test_docker.py);
``docker-compose config`` checks that compose accepts both files.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from chaos.docker_backend import ComposePlan, DockerBackend, check_deployment
from node.activeactive.cluster_config import ClusterConfig, load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPOSE = os.path.join(ROOT, "deploy", "compose.yaml")
SHARDED = os.path.join(ROOT, "deploy", "compose.sharded.yaml")
CLUSTER_FILE_AT = "/etc/braid/cluster.toml"
DOCKERFILE = os.path.join(ROOT, "deploy", "Dockerfile")


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_compose_file_agrees_with_its_cluster_file():
    assert check_deployment(COMPOSE) == []
    plan = ComposePlan(COMPOSE)
    assert [r.name for r in plan.cluster.regions] == ["region-1", "region-2", "region-3"]
    assert plan.addresses() == {1: ("127.0.0.1", 7001), 2: ("127.0.0.1", 7002), 3: ("127.0.0.1", 7003)}
    assert DockerBackend(COMPOSE).faults >= {"kill", "pause", "partition", "clock"}


@pytest.mark.parametrize("breakage, complaint", [
    (lambda d: d["services"]["region-2"].__setitem__("networks", ["wan"]), "own network"),
    (lambda d: d["services"]["region-3"]["volumes"].pop(), "volume at /data"),
    (lambda d: d["services"]["region-1"]["command"].__setitem__(3, "region-2"), "does not start region"),
    (lambda d: d["services"]["region-2"].__setitem__("ports", ["7001:6379", "7102:7000"]), "collide"),
])
def test_check_deployment_finds_a_broken_compose_file(tmp_path, breakage, complaint):
    doc = yaml.safe_load(read(COMPOSE))
    breakage(doc)
    broken = tmp_path / "deploy" / "compose.yaml"
    broken.parent.mkdir()
    broken.write_text(yaml.safe_dump(doc))
    (tmp_path / "deploy" / "cluster.compose.toml").write_text(
        read(os.path.join(ROOT, "deploy", "cluster.compose.toml")))
    problems = check_deployment(str(broken))
    assert any(complaint in p for p in problems), problems


def _dockerfile() -> list[tuple[str, str]]:
    lines, joined = [], ""
    for raw in read(DOCKERFILE).splitlines():
        if raw.startswith("#") or not raw.strip():
            continue
        joined += raw.rstrip("\\") + " "
        if not raw.endswith("\\"):
            word, _, rest = joined.strip().partition(" ")
            lines.append((word.upper(), rest))
            joined = ""
    return lines


def test_dockerfile_copies_what_exists_and_starts_a_region():
    instructions = _dockerfile()
    for word, rest in instructions:
        if word == "COPY":
            *sources, _dest = rest.split()
            for src in sources:
                assert os.path.exists(os.path.join(ROOT, src)), f"COPY {src}: no such file in the repository"
    exposed = {int(p) for word, rest in instructions if word == "EXPOSE" for p in rest.split()}
    plan = ComposePlan(COMPOSE)
    assert {plan.cluster.regions[0].port, plan.cluster.regions[0].repl_port} <= exposed
    entry = [yaml.safe_load(rest) for word, rest in instructions if word == "ENTRYPOINT"][0]
    assert entry[:2] == ["braid", "node"]
    help_text = subprocess.run([sys.executable, "-m", "node", "node", "--help"], capture_output=True,
                               text=True, check=True).stdout
    service_command = yaml.safe_load(read(COMPOSE))["services"]["region-1"]["command"]
    for arg in entry[2:] + service_command:
        if arg.startswith("--"):
            assert arg in help_text, f"braid node does not know {shlex.quote(arg)}"


def test_image_constraints_keep_pyproject_pins():
    """deploy/docker/constraints.txt pins the image's packages; Braid's own pins must be among them."""
    import tomllib

    from packaging.requirements import Requirement

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        pins = {Requirement(r).name.lower(): str(Requirement(r).specifier)
                for r in tomllib.load(f)["project"]["dependencies"]}
    constraints = {}
    for line in read(os.path.join(ROOT, "deploy", "docker", "constraints.txt")).splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{line!r} pins no version"
            constraints[name.lower()] = f"=={version}"
    assert {name: constraints.get(name) for name in pins} == pins


# ---------------------------------------------------------------- the sharded compose file
def sharded_cluster(compose_file: str) -> tuple[dict, ClusterConfig]:
    """The compose file and the cluster file its services mount (one file for all)."""
    doc = yaml.safe_load(read(compose_file))
    sources = {v.rsplit(":", 2)[0] for svc in doc["services"].values() for v in svc.get("volumes", [])
               if v.split(":")[1] == CLUSTER_FILE_AT}
    assert len(sources) == 1, sources
    return doc, load(os.path.join(os.path.dirname(compose_file), sources.pop()))


def sharded_problems(compose_file: str) -> list[str]:
    """What disagrees between a sharded compose file and its cluster file (empty: nothing)."""
    doc, cfg = sharded_cluster(compose_file)
    services, problems = doc["services"], []
    if not cfg.shards.sharded:
        return [f"{compose_file} mounts an unsharded cluster file"]
    expected = {r.name for r in cfg.regions} | {f"{r.name}-shard-{k}" for r in cfg.regions
                                                for k in range(cfg.shards.count)}
    if set(services) != expected:
        problems.append(f"services {sorted(services)} are not {sorted(expected)}")
    published: list[int] = []
    data_volumes = {}
    for r in cfg.regions:
        host = services.get(r.name, {})
        if r.host != r.name or host.get("hostname") != r.name:
            problems.append(f"region {r.name}: host {r.host!r} must be its service's name and hostname")
        if host.get("networks") != [r.name, "wan"]:
            problems.append(f"service {r.name} must be on its own network and on wan (has {host.get('networks')})")
        if host.get("healthcheck") != {"disable": True} or "command" in host:
            problems.append(f"service {r.name} holds the namespace: no command, no health check of a shard's port")
        ports = [p.split(":") for p in host.get("ports", [])]
        if any(outside != inside for outside, inside in ports):
            problems.append(f"service {r.name} publishes ports under other numbers: {host.get('ports')}")
        published += [int(outside) for outside, _ in ports]
        shard_ports = {int(inside) for _, inside in ports}
        for k in range(cfg.shards.count):
            view = cfg.shard_view(k)
            spec = view.region(r.name)
            metrics = int(view.shard_settings(spec).get("metrics-port", 0))
            needed = {spec.port, spec.repl_port} | ({metrics} if metrics else set())
            if not needed <= shard_ports:
                problems.append(f"region {r.name} shard {k}: ports {sorted(needed - shard_ports)} are not published")
            shard_ports -= needed
            name = f"{r.name}-shard-{k}"
            svc = services.get(name, {})
            if svc.get("network_mode") != f"service:{r.name}" or r.name not in svc.get("depends_on", []):
                problems.append(f"service {name} must run in {r.name}'s network namespace (and after it)")
            if "ports" in svc or "networks" in svc:
                problems.append(f"service {name} has ports or networks of its own: {r.name}'s are its")
            command = svc.get("command", [])
            option = {a: command[i + 1] for i, a in enumerate(command[:-1]) if a.startswith("--")}
            if (option.get("--region"), option.get("--shard"), option.get("--config")) != (r.name, str(k),
                                                                                           CLUSTER_FILE_AT):
                problems.append(f"service {name} does not start shard {k} of region {r.name}")
            check = " ".join(svc.get("healthcheck", {}).get("test", []))
            if f"('127.0.0.1', {spec.port})" not in check or "PING" not in check:
                problems.append(f"service {name}'s health check does not PING shard {k}'s port {spec.port}")
            if svc.get("restart") != "unless-stopped":
                problems.append(f"service {name} is not restarted when its process dies")
            volumes = [v.split(":")[0] for v in svc.get("volumes", []) if v.split(":")[1] == "/data"]
            if len(volumes) != 1:
                problems.append(f"service {name} keeps no volume at /data")
            else:
                data_volumes.setdefault(r.name, set()).add(volumes[0])
        if shard_ports:
            problems.append(f"service {r.name} publishes ports no shard listens on: {sorted(shard_ports)}")
    if any(len(v) != 1 for v in data_volumes.values()) or \
            len({next(iter(v)) for v in data_volumes.values()}) != len(data_volumes):
        problems.append(f"the shards of a region share one volume, and regions do not: {data_volumes}")
    if len(set(published)) != len(published):
        problems.append(f"published ports collide: {sorted(published)}")
    return problems


def test_sharded_compose_file_agrees_with_its_cluster_file():
    assert sharded_problems(SHARDED) == []
    doc, cfg = sharded_cluster(SHARDED)
    assert [r.name for r in cfg.regions] == ["region-1", "region-2", "region-3"] and cfg.shards.count == 2
    assert sorted(n for n in doc["services"] if "-shard-" in n) == [
        f"region-{n}-shard-{k}" for n in (1, 2, 3) for k in (0, 1)]
    # on the host as in the containers: a MOVED's region-N:PORT is reached at 127.0.0.1:PORT
    assert [r.ports for r in cfg.regions] == [[7010, 7011], [7020, 7021], [7030, 7031]]
    assert [r.repl_ports for r in cfg.regions] == [[7110, 7111], [7120, 7121], [7130, 7131]]
    assert [cfg.shard_view(k).shard_settings(r)["metrics-port"] for r in cfg.regions for k in (0, 1)] == \
        [9110, 9111, 9120, 9121, 9130, 9131]
    routing = cfg.routing(cfg.region("region-2"))
    assert [(routing.owner(slot).host, routing.owner(slot).port) for slot in (0, 16383)] == \
        [("region-2", 7020), ("region-2", 7021)]
    # the unsharded compose file's ports are not taken: both can run side by side
    plan = ComposePlan(COMPOSE)
    unsharded = {int(p.split(":")[0]) for svc in plan.doc["services"].values() for p in svc["ports"]}
    sharded = {int(p.split(":")[0]) for svc in doc["services"].values() for p in svc.get("ports", [])}
    assert not unsharded & sharded


def test_sharded_compose_runs_braid_node_with_options_it_knows():
    help_text = subprocess.run([sys.executable, "-m", "node", "node", "--help"], capture_output=True,
                               text=True, check=True).stdout
    # --shard K: the one shard a container runs (docs/sharding.md, "Processes and files")
    known = set(re.findall(r"--[a-z][a-z0-9-]*", help_text)) | {"--shard"}
    for name, svc in yaml.safe_load(read(SHARDED))["services"].items():
        options = {a for a in svc.get("command", []) if a.startswith("--")}
        assert options <= known, f"{name}: braid node does not know {options - known}"


@pytest.mark.parametrize("breakage, complaint", [
    (lambda d: d["services"]["region-2-shard-1"].__setitem__("network_mode", "service:region-1"), "namespace"),
    (lambda d: d["services"]["region-1-shard-1"]["command"].__setitem__(5, "0"), "does not start shard 1"),
    (lambda d: d["services"]["region-3-shard-0"]["volumes"].__setitem__(1, "region-2-data:/data"), "one volume"),
    (lambda d: d["services"]["region-3-shard-1"]["volumes"].__setitem__(1, "other-data:/data"), "one volume"),
    (lambda d: d["services"]["region-2"]["ports"].pop(1), "7021] are not published"),
    (lambda d: d["services"]["region-1"]["ports"].__setitem__(0, "17010:7010"), "other numbers"),
    (lambda d: d["services"]["region-1-shard-1"]["healthcheck"].__setitem__(
        "test", d["services"]["region-1-shard-0"]["healthcheck"]["test"]), "health check"),
    (lambda d: d["services"].pop("region-3-shard-1"), "are not"),
    (lambda d: d["services"]["region-1"].__setitem__("networks", ["wan"]), "own network"),
])
def test_a_broken_sharded_compose_file_is_caught(tmp_path, breakage, complaint):
    doc = yaml.safe_load(read(SHARDED))
    breakage(doc)
    broken = tmp_path / "deploy" / "compose.sharded.yaml"
    broken.parent.mkdir()
    broken.write_text(yaml.safe_dump(doc))
    shutil.copy(os.path.join(ROOT, "deploy", "cluster.compose.sharded.toml"), broken.parent)
    problems = sharded_problems(str(broken))
    assert any(complaint in p for p in problems), problems


@pytest.mark.parametrize("compose_file", [COMPOSE, SHARDED])
def test_compose_accepts_the_compose_files(compose_file):
    """docker-compose's own reading of the file (its schema, anchors, network_mode), with no engine."""
    found = shutil.which("docker-compose")
    if found is None:
        pytest.fail("docker-compose not found on PATH (deploy/docker/build.sh installs Debian's)")
    # docker-compose v1 is a Python program with Debian's docker library: a PYTHONPATH that
    # holds another version of that library must not reach it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([found, "-p", "braidcheck", "-f", compose_file, "config"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    assert set(services) == set(yaml.safe_load(read(compose_file))["services"])
