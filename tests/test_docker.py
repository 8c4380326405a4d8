"""The compose deployment on a real Docker engine.

``deploy/docker/build.sh`` installs Docker if it is missing, starts ``dockerd`` if
no engine answers, makes the local base image once and builds ``braid:latest``;
a machine where Docker cannot start FAILS this module (it never skips).  Then
``deploy/compose.yaml`` comes up under its own project name, and the tests check
what an operator relies on: the regions replicate; a region killed with
``docker kill`` comes back on its volume, and one whose process dies is restarted
by the restart policy; ``docker stop`` (SIGTERM) keeps the last acknowledged
write; a region cut off the replication network with ``docker network
disconnect`` catches up after ``docker network connect``; and ``braid-chaos run
--backend docker`` passes.  The deployment is removed (``down -v``) at the end,
also when a test fails.

The first run on a machine pays for debootstrap and the image's dependencies
(minutes); later runs reuse the base image and Docker's layer cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import redis

from chaos.docker_backend import ComposePlan
from node.testing import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPOSE = os.path.join(ROOT, "deploy", "compose.yaml")
BUILD = os.path.join(ROOT, "deploy", "docker", "build.sh")
PROJECT = "braidtest"
# Debian's client matches Debian's engine; a newer client earlier on PATH may not
DOCKER = "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else (shutil.which("docker") or "docker")
READY = 90.0  # seconds: a deadline for polling, never a measured threshold


def run(*cmd: str, check: bool = True, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def compose(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    # docker-compose v1 is a Python program with Debian's docker library: a PYTHONPATH
    # that holds another version of that library must not reach it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return run("docker-compose", "-p", PROJECT, "-f", COMPOSE, *args, check=check, timeout=timeout, env=env)


def inspect(container: str, template: str) -> str:
    return run(DOCKER, "inspect", "-f", template, container).stdout.strip()


@pytest.fixture(scope="module")
def deployment():
    build = subprocess.run(["bash", BUILD], capture_output=True, text=True, timeout=1800)
    if build.returncode != 0:
        pytest.fail(f"deploy/docker/build.sh failed ({build.returncode}); Docker must run here:\n"
                    f"{build.stdout[-4000:]}\n{build.stderr[-4000:]}")
    compose("down", "-v", "--remove-orphans")  # what a run that was itself killed left behind
    try:
        compose("up", "-d", "--no-build")
        plan = ComposePlan(COMPOSE)
        containers = {r.name: compose("ps", "-q", r.name).stdout.strip() for r in plan.cluster.regions}
        assert all(containers.values()), containers
        for name, cid in containers.items():
            wait_until(lambda cid=cid: inspect(cid, "{{.State.Health.Status}}") == "healthy", READY, 0.5,
                       f"{name} healthy")
        yield Deployment(plan, containers)
    finally:
        logs = compose("logs", "--no-color", "--tail", "40", check=False)
        print(logs.stdout[-8000:])
        compose("down", "-v", "--remove-orphans", check=False)


class Deployment:
    def __init__(self, plan: ComposePlan, containers: dict[str, str]) -> None:
        self.plan = plan
        self.containers = containers
        self.ports = {r.name: plan.services[r.name].resp_port for r in plan.cluster.regions}
        wan = [n for n in inspect(containers["region-1"], "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}")
               .split() if n.endswith("_wan")]
        assert len(wan) == 1, wan
        self.wan = wan[0]

    def client(self, name: str) -> redis.Redis:
        return redis.Redis(port=self.ports[name], socket_timeout=5, decode_responses=True)

    def ids(self, name: str, key: str) -> list[str]:
        try:
            return [entry_id for entry_id, _ in self.client(name).xrange(key)]
        except redis.ConnectionError:
            return []  # a region coming back up

    def converged(self, key: str, expected: set[str]):
        return all(set(self.ids(name, key)) == expected for name in self.ports)

    def healthy(self, name: str) -> bool:
        return inspect(self.containers[name], "{{.State.Health.Status}}") == "healthy"

    def restart_cut_off(self, name: str, key: str, restart) -> None:
        """Cut ``name`` off the replication network, write there and elsewhere, ``restart()`` it:
        its own entry must be back (it can come only from its volume), and after ``docker
        network connect`` every region must hold both entries."""
        cid = self.containers[name]
        other = next(n for n in self.ports if n != name)
        run(DOCKER, "network", "disconnect", self.wan, cid)
        try:
            alone = self.client(name).xadd(key, {"at": name})
            elsewhere = self.client(other).xadd(key, {"at": other})
            restart()
            wait_until(lambda: self.healthy(name), READY, 0.5, f"{name} healthy after the restart")
            assert self.ids(name, key) == [alone]
            assert alone not in self.ids(other, key)
        finally:
            run(DOCKER, "network", "connect", "--alias", name, self.wan, cid)
        wait_until(lambda: self.converged(key, {alone, elsewhere}), READY, 0.2,
                   f"{name} and the others exchange what they missed")


def test_image_runs_as_a_user_and_answers_its_health_check(deployment):
    for name, cid in deployment.containers.items():
        assert run(DOCKER, "exec", cid, "id", "-u").stdout.strip() != "0", f"{name} runs as root"
        assert deployment.healthy(name)
        assert inspect(cid, "{{.HostConfig.RestartPolicy.Name}}") == "unless-stopped"


def test_regions_replicate(deployment):
    written = {deployment.client(name).xadd("replicate", {"from": name}) for name in deployment.ports}
    wait_until(lambda: deployment.converged("replicate", written), READY, 0.2, "three regions hold every entry")


def test_docker_kill_then_start_keeps_the_volume_and_catches_up(deployment):
    cid = deployment.containers["region-2"]

    def kill_and_start():
        started = inspect(cid, "{{.State.StartedAt}}")
        run(DOCKER, "kill", cid)

        # Docker counts `docker kill` as a stop on purpose (the restart policy leaves the
        # container down): it is started as an operator would; an engine that restarted
        # it anyway has done the same.
        def settled():
            status, since = inspect(cid, "{{.State.Status}} {{.State.StartedAt}}").split()
            return status if status == "exited" or (status == "running" and since != started) else None

        if wait_until(settled, READY, 0.2, "region-2 stopped or started again") == "exited":
            run(DOCKER, "start", cid)

    deployment.restart_cut_off("region-2", "killed", kill_and_start)


def test_a_dead_region_process_is_restarted_by_the_restart_policy(deployment):
    cid = deployment.containers["region-3"]
    restarts = int(inspect(cid, "{{.RestartCount}}"))
    # SIGKILL from the host, not through the engine: a crash, which the policy answers
    run("kill", "-KILL", inspect(cid, "{{.State.Pid}}"))
    wait_until(lambda: int(inspect(cid, "{{.RestartCount}}")) > restarts, READY, 0.2, "region-3 restarted")
    wait_until(lambda: deployment.healthy("region-3"), READY, 0.5, "region-3 healthy again")
    entry = deployment.client("region-3").xadd("crashed", {"n": 1})
    wait_until(lambda: deployment.converged("crashed", {entry}), READY, 0.2, "region-3 replicates again")


def test_sigterm_keeps_the_last_write_and_a_disconnected_region_catches_up(deployment):
    cid = deployment.containers["region-3"]

    def stop_and_start():
        run(DOCKER, "stop", cid, timeout=60)
        assert inspect(cid, "{{.State.ExitCode}}") == "0", "region-3 did not stop cleanly on SIGTERM"
        run(DOCKER, "start", cid)

    deployment.restart_cut_off("region-3", "stopped", stop_and_start)


def test_braid_chaos_docker_backend_passes(deployment, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "chaos.cli", "run", "--backend", "docker", "--compose-file", COMPOSE,
                           "--duration", "15", "--seed", "7", "--out", str(tmp_path / "report")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
    assert "PASS" in proc.stdout
    assert (tmp_path / "report" / "report.json").exists()
