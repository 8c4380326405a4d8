"""The Docker backend: ``braid-chaos run --backend docker`` against ``deploy/compose.yaml``.

It shares the workloads, nemesis and checkers with the process backend; only
how faults reach a region differs:

* kill: ``docker kill --signal SIGKILL`` then ``docker start`` (the volume keeps
  the region's log, as a crashed host's disk would).  Docker counts ``docker kill``
  as a stop on purpose, so the compose file's restart policy leaves the region
  down; should an engine restart it anyway, restarting a region that is running,
  or restarting, is a no-op;
* pause: ``docker pause`` / ``docker unpause`` (the cgroup freezer: SIGSTOP for
  a whole container);
* partition, bridge and long-partition: the regions' own link controls
  (``BRAID.REPLICATION PAUSE PEER``), which cut one link both ways (long-partition
  also bounds every backlog with ``CONFIG SET crdt-repl-backlog-size``);
* clock, disk-full, slow-fsync: ``DEBUG`` (the compose file starts regions with
  ``--enable-debug-command yes``).

The deployment outlives a run, so :meth:`DockerBackend.start` first undoes what an
interrupted run may have left (paused or stopped containers, cut links, DEBUG
faults) and deletes the previous run's keys everywhere: the checkers judge what
this run wrote, and entries, groups or IDMP records of the last one would read as
skipped deliveries and duplicates.

The compose file is the single source of truth: :class:`ComposePlan` reads the
region services, their published RESP ports and the cluster file they mount,
and :func:`check_deployment` checks that these agree (the tests run it on a
machine without a Docker engine).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import redis
import yaml

from node.activeactive.cluster_config import ClusterConfig, load

from .backends import DEBUG_FAULTS, Backend, LinkControls
from .workloads import CHURN, GROUPS, IDMP, LOG, TRIMMED, connect

RUN_KEYS = (LOG, IDMP, CHURN, TRIMMED, GROUPS)
READY_DEADLINE = 90.0  # seconds for a restarted region to serve and for the old keys to go

CONTAINER_RESP_PORT = 6379


@dataclass
class RegionService:
    name: str            # the compose service, which is also the region's name and host
    resp_port: int       # published on the host
    networks: list[str]
    volumes: list[str]


class ComposePlan:
    def __init__(self, compose_file: str) -> None:
        self.compose_file = compose_file
        with open(compose_file) as f:
            self.doc = yaml.safe_load(f)
        self.services = {name: self._service(name, svc) for name, svc in self.doc["services"].items()}
        self.cluster_file = self._cluster_file()
        self.cluster: ClusterConfig = load(self.cluster_file)

    def _service(self, name: str, svc: dict) -> RegionService:
        published = [p.split(":") for p in svc.get("ports", [])]
        resp = [int(host) for host, inner in published if int(inner) == CONTAINER_RESP_PORT]
        if not resp:
            raise ValueError(f"service {name} publishes no RESP port ({CONTAINER_RESP_PORT})")
        return RegionService(name, resp[0], list(svc.get("networks", [])), list(svc.get("volumes", [])))

    def _cluster_file(self) -> str:
        for svc in self.services.values():
            for volume in svc.volumes:
                source, _, target = volume.partition(":")
                if target.startswith("/etc/braid/cluster.toml"):
                    return os.path.normpath(os.path.join(os.path.dirname(self.compose_file), source))
        raise ValueError("no service mounts a cluster file at /etc/braid/cluster.toml")

    def addresses(self, host: str = "127.0.0.1") -> dict[int, tuple[str, int]]:
        return {r.number: (host, self.services[r.name].resp_port) for r in self.cluster.regions}


def check_deployment(compose_file: str) -> list[str]:
    """What disagrees between the compose file and the cluster file it mounts (empty: nothing)."""
    plan = ComposePlan(compose_file)
    problems = []
    names = {r.name for r in plan.cluster.regions}
    if names != set(plan.services):
        problems.append(f"services {sorted(plan.services)} are not the regions {sorted(names)}")
    for r in plan.cluster.regions:
        svc, spec = plan.doc["services"].get(r.name, {}), plan.services.get(r.name)
        if spec is None:
            continue
        if r.host != r.name:
            problems.append(f"region {r.name}: host {r.host!r} must be its service name")
        if r.port != CONTAINER_RESP_PORT:
            problems.append(f"region {r.name}: port {r.port} is not the container's RESP port {CONTAINER_RESP_PORT}")
        if r.repl_port not in {int(p.split(":")[1]) for p in svc.get("ports", [])}:
            problems.append(f"region {r.name}: repl_port {r.repl_port} is not published")
        command = svc.get("command", [])
        if "--region" not in command or command[command.index("--region") + 1] != r.name:
            problems.append(f"service {r.name} does not start region {r.name}")
        if r.name not in spec.networks or "wan" not in spec.networks:
            problems.append(f"service {r.name} must be on its own network and on wan (has {spec.networks})")
        if not any(v.endswith(":/data") for v in spec.volumes):
            problems.append(f"service {r.name} keeps no volume at /data")
    published = [s.resp_port for s in plan.services.values()]
    if len(set(published)) != len(published):
        problems.append(f"published RESP ports collide: {published}")
    return problems


class DockerBackend(LinkControls, Backend):
    faults = DEBUG_FAULTS | {"kill", "pause", "partition", "bridge", "long-partition"}

    def __init__(self, compose_file: str, cluster_file: str | None = None) -> None:
        self.plan = ComposePlan(compose_file)
        self.cluster_file = cluster_file or self.plan.cluster_file
        self.addresses = self.plan.addresses()
        self.names = {r.number: r.name for r in self.plan.cluster.regions}
        self.containers: dict[int, object] = {}

    def start(self) -> None:
        """Find the running deployment's containers (``docker compose up -d`` starts them)."""
        try:
            import docker
        except ImportError:
            raise SystemExit("braid-chaos: the Docker backend needs the docker package: "
                             "pip install 'braid[docker]'") from None
        try:
            client = docker.from_env()
            for number, name in self.names.items():
                found = client.containers.list(all=True, filters={"label": f"com.docker.compose.service={name}"})
                if not found:
                    raise SystemExit(f"braid-chaos: no container for service {name}: "
                                     f"docker compose -f {self.plan.compose_file} up -d --build")
                self.containers[number] = found[0]
        except docker.errors.DockerException as e:
            raise SystemExit(f"braid-chaos: cannot reach a Docker engine: {e}") from None
        self.heal_all()
        self._until(self._all_serving, "every region answers PING")
        self._until(self._previous_run_deleted, f"the previous run's keys ({', '.join(RUN_KEYS)}) are gone")

    def _until(self, done, what: str) -> None:
        deadline = time.monotonic() + READY_DEADLINE
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit(f"braid-chaos: the deployment is not ready after {READY_DEADLINE:.0f}s: "
                                 f"waiting until {what}")
            time.sleep(0.2)

    def _all_serving(self) -> bool:
        for address in self.addresses.values():
            c = connect(address)
            try:
                c.ping()
            except (redis.RedisError, OSError):
                return False
            finally:
                c.close()
        return True

    def _previous_run_deleted(self) -> bool:
        """DEL the run's keys at every region (each removes what it has observed) until none has any."""
        left = 0
        for address in self.addresses.values():
            c = connect(address)
            try:
                c.delete(*RUN_KEYS)
                left += c.exists(*RUN_KEYS)
            except (redis.RedisError, OSError):
                return False
            finally:
                c.close()
        return left == 0

    def kill(self, region: int) -> None:
        import docker

        try:
            self.containers[region].kill(signal="SIGKILL")
        except docker.errors.APIError as e:
            # between a crash and the restart policy's restart there is no process to kill
            if e.status_code != 409:
                raise

    def restart(self, region: int) -> None:
        import docker

        c = self.containers[region]
        c.reload()
        if c.status in ("running", "restarting"):
            return
        try:
            c.start()
        except docker.errors.APIError as e:
            # the restart policy started it since reload()
            if e.status_code != 409 and "already" not in str(e):
                raise

    def pause(self, region: int) -> None:
        self.containers[region].pause()

    def resume(self, region: int) -> None:
        c = self.containers[region]
        c.reload()
        if c.status == "paused":
            c.unpause()

    def heal_all(self) -> None:
        for region in self.containers:
            self.resume(region)
            self.restart(region)
        self.heal_network()
        for region in self.addresses:
            self.heal_region(region)
