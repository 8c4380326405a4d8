"""The Docker deployment files, checked without a Docker engine.

``deploy/compose.yaml`` must agree with the cluster file it mounts (service
names are region names and hosts, ports, one network and one volume per region
plus the shared replication network), and the Dockerfile's entry point must be
a command line ``braid node`` accepts.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
import yaml

from chaos.docker_backend import ComposePlan, DockerBackend, check_deployment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPOSE = os.path.join(ROOT, "deploy", "compose.yaml")
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
