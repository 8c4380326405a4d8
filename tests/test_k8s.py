"""The Kubernetes manifests (``deploy/k8s``), checked without a Kubernetes cluster.

Every overlay is rendered the way an operator applies it (``kubectl kustomize``, after
making its ``secrets/`` with ``braid certs create`` as docs/deploy.md says), every object
is validated against the Kubernetes schemas of a recent release (``kubernetes-validate``,
which ships them: no network), and the objects must agree with the cluster file their
ConfigMap carries, read with ``node.activeactive.cluster_config``: region names, ports, the host of
each region (its pod's stable DNS name, or the external name of its LoadBalancer), the
TLS files the ``[tls]`` table names and the Secret's keys mounted there, the token the
init container writes, and options ``braid node`` knows.

Sharded regions (docs/sharding.md): ``overlays/one-cluster-sharded`` and the three-cluster
overlays with ``components/two-shards`` added as docs/deploy.md says (made here in the
copy) run one container per shard in each region's pod; shard K's container must run
``--shard K`` on the ports of the cluster file's shard K (its ``ports[K]``, ``repl_ports[K]``),
serve metrics on 9121 + K, probe its own port, and be shard 0's container otherwise.  No
cluster runs here and the shards are not started: they are rendered, validated and
loaded.

``kubectl`` (client only: ``kubectl kustomize`` renders without a cluster) is the one on
PATH; the test fails, naming it, where there is none.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys

import kubernetes_validate
import pytest
import redis
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from node.activeactive.cluster_config import load
from node.testing import free_ports, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S = os.path.join(ROOT, "deploy", "k8s")
REGIONS = ["region-1", "region-2", "region-3"]
# overlay -> the regions it runs
THREE = {f"three-clusters/{r}": [r] for r in REGIONS}
THREE_SHARDED = {f"three-clusters-sharded/{r}": [r] for r in REGIONS}  # made by deploy_dir
OVERLAYS = {"one-cluster": REGIONS, **THREE, "one-cluster-sharded": REGIONS, **THREE_SHARDED}
SHARDS = "components/two-shards"
DEPLOY_DOC = os.path.join(ROOT, "docs", "deploy.md")
# the oldest Kubernetes release still commonly run, and the newest the schemas know
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
METRICS_PORT = 9121
VALIDATED: set[str] = set()  # objects already found valid, as JSON


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found on PATH: the manifests are rendered with `kubectl kustomize` (the client "
                    "alone; install it from your distribution or https://kubernetes.io/docs/tasks/tools/)")
    return found


def braid(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", *args], capture_output=True, text=True, check=True)


@pytest.fixture(scope="module")
def deploy_dir(tmp_path_factory) -> str:
    """A copy of deploy/k8s with every overlay's secrets/ made as docs/deploy.md says."""
    root = str(tmp_path_factory.mktemp("k8s") / "k8s")
    shutil.copytree(K8S, root, ignore=shutil.ignore_patterns("secrets"))
    one = os.path.join(root, "overlays", "one-cluster", "secrets")
    braid("certs", "create", "--dir", one, "--regions", ",".join(REGIONS))
    with open(os.path.join(one, "token"), "w") as f:
        f.write("token-of-one-cluster\n")
    tls = str(tmp_path_factory.mktemp("tls"))  # the operator's machine: the CA key stays there
    braid("certs", "create", "--dir", tls, "--regions", ",".join(REGIONS))
    for region in REGIONS:
        secrets = os.path.join(root, "overlays", "three-clusters", region, "secrets")
        os.makedirs(secrets)
        for name in ("ca.crt", f"{region}.crt", f"{region}.key"):
            shutil.copy(os.path.join(tls, name), secrets)
        with open(os.path.join(secrets, "token"), "w") as f:
            f.write("token-of-three-clusters\n")
    shard_three_clusters(os.path.join(root, "overlays"))
    return root


def shard_three_clusters(overlays: str) -> None:
    """overlays/three-clusters-sharded: three-clusters with two shards per region, made as
    docs/deploy.md tells an operator to (the component in each region's kustomization, the
    cluster file's [shards] and ports lists); its secrets/ are three-clusters' own."""
    target = os.path.join(overlays, "three-clusters-sharded")
    shutil.copytree(os.path.join(overlays, "three-clusters"), target)
    for region in REGIONS:
        path = os.path.join(target, region, "kustomization.yaml")
        with open(path) as f:
            text = f.read()
        assert "\nresources:\n" in text
        with open(path, "w") as f:
            f.write(text.replace("\nresources:\n", f"\ncomponents:\n  - ../../../{SHARDS}\nresources:\n"))
    path = os.path.join(target, "common", "cluster.toml")
    with open(path) as f:
        text = f.read()
    text, n = re.subn(r"(?m)^port = 6379\nrepl_port = 7000$", "ports = [6379, 6380]\nrepl_ports = [7000, 7001]", text)
    assert n == len(REGIONS)
    text, n = re.subn(r"(?m)^\[\[regions\]\]", "[shards]\ncount = 2\n\n[[regions]]", text, count=1)
    assert n == 1
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture(scope="module")
def rendered(deploy_dir) -> dict[str, list[dict]]:
    out = {}
    for overlay in OVERLAYS:
        result = subprocess.run([kubectl(), "kustomize", os.path.join(deploy_dir, "overlays", overlay)],
                                capture_output=True, text=True)
        assert result.returncode == 0, f"{overlay} does not render: {result.stderr}"
        out[overlay] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return out


def objects(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name: str) -> dict:
    found = [d for d in objects(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_secrets_are_never_committed():
    with open(os.path.join(K8S, ".gitignore")) as f:
        assert "secrets/" in f.read().split()


def test_an_overlay_without_its_secrets_does_not_render(tmp_path):
    """An operator who skipped the certificates gets kustomize's error, not a deployment
    whose regions cannot start."""
    shutil.copytree(K8S, tmp_path / "k8s", ignore=shutil.ignore_patterns("secrets"))
    result = subprocess.run([kubectl(), "kustomize", str(tmp_path / "k8s" / "overlays" / "one-cluster")],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "secrets/token" in result.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_the_kubernetes_schemas(rendered, overlay):
    docs = rendered[overlay]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "Secret", "Service", "StatefulSet", "PodDisruptionBudget"} <= kinds
    for doc in docs:
        text = json.dumps(doc, sort_keys=True)
        if text in VALIDATED:  # the same object in another overlay (each validation reads megabytes of schema)
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{overlay}: {doc['kind']} {doc['metadata']['name']} is not valid for "
                            f"Kubernetes {version}: {e.message} at {'/'.join(map(str, e.path))}")
        VALIDATED.add(text)


@pytest.mark.parametrize("breakage", [
    lambda sts: sts["spec"].__setitem__("replicas", "one"),
    lambda sts: sts["spec"]["template"]["spec"]["containers"][0].__setitem__("ports", [{"containerPort": 6379,
                                                                                           "nmae": "resp"}]),
    lambda sts: sts["spec"]["template"]["spec"].__setitem__("volume", []),
])
def test_the_validation_finds_a_broken_statefulset(rendered, breakage):
    sts = yaml.safe_load(yaml.safe_dump(objects(rendered["one-cluster"], "StatefulSet")[0]))
    breakage(sts)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, K8S_VERSIONS[-1], strict=True)


def cluster_file(docs: list[dict], where) -> tuple[str, object]:
    """The ConfigMap's cluster file, written out and loaded as a region loads it."""
    (cm,) = objects(docs, "ConfigMap")
    where.mkdir(exist_ok=True)
    path = where / "cluster.toml"
    path.write_text(cm["data"]["cluster.toml"])
    return str(path), load(str(path))


def mounts(container: dict) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container["volumeMounts"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_manifests_agree_with_their_cluster_file(rendered, overlay, tmp_path):
    docs = rendered[overlay]
    _, cfg = cluster_file(docs, tmp_path)
    assert [r.name for r in cfg.regions] == REGIONS
    assert cfg.tls is not None, "regions talk mutual TLS in every overlay"
    (namespace,) = objects(docs, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    (secret,) = objects(docs, "Secret")
    secret_data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    statefulsets = objects(docs, "StatefulSet")
    services = objects(docs, "Service")
    assert sorted(s["metadata"]["name"] for s in statefulsets) == [f"braid-{r}" for r in OVERLAYS[overlay]]

    sharded = cfg.shards.sharded
    assert sharded == ("sharded" in overlay)
    for sts in statefulsets:
        pod = sts["spec"]["template"]
        spec = pod["spec"]
        containers = spec["containers"]
        # one container per shard, each shard K's container the region's as it runs shard K
        assert [c["name"] for c in containers] == (
            [f"shard-{k}" for k in range(cfg.shards.count)] if sharded else ["region"])
        regions = {c["env"][0]["value"] for c in containers}
        assert len(regions) == 1 and all(len(c["env"]) == 1 for c in containers)
        name = regions.pop()
        assert sts["metadata"]["name"] == f"braid-{name}"
        assert sts["spec"]["replicas"] == 1 and sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
        if sharded:  # one annotation names one port: Prometheus finds each shard's by its port's name
            assert "prometheus.io/port" not in pod["metadata"].get("annotations", {})
        else:
            assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
            assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(METRICS_PORT)
        for k, container in enumerate(containers):
            view = cfg.shard_view(k)
            region = view.region(name)
            assert container["env"] == [{"name": "BRAID_REGION", "value": region.name}]
            args = container["args"]
            option = {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--")}
            assert option["--region"] == "$(BRAID_REGION)" and option["--bind"] == "0.0.0.0"
            assert mounts(container)[option["--data-dir"]] == "data"  # shard K's data: shard-K/ of it
            assert int(option["--metrics-port"]) == METRICS_PORT  # shard K serves on it + K
            assert option.get("--shard") == (str(k) if sharded else None)
            if k:  # the same container as shard 0's but for what makes it shard K
                differs = {"name", "args", "ports", "startupProbe", "readinessProbe", "livenessProbe"}
                assert {f: v for f, v in container.items() if f not in differs} == \
                    {f: v for f, v in containers[0].items() if f not in differs}
                assert args == [a if a != "0" else str(k) for a in containers[0]["args"]]

            # the ports are the cluster file's for this shard
            suffix = f"-{k}" if k else ""
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            assert ports == {f"resp{suffix}": region.port, f"repl{suffix}": region.repl_port,
                             f"metrics{suffix}": METRICS_PORT + k}
            assert (region.port, region.repl_port) == ((region.ports[k], region.repl_ports[k]) if sharded
                                                       else (cfg.region(name).port, cfg.region(name).repl_port))
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                script = container[probe]["exec"]["command"][-1]
                assert f'("127.0.0.1", {region.port})' in script and b"PING" in script.encode(), probe
        all_ports = [p["containerPort"] for c in containers for p in c["ports"]]
        assert len(set(all_ports)) == len(all_ports), "the shards of a pod share its addresses"
        container = containers[0]
        region = cfg.region(name)
        args = container["args"]
        option = {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--")}

        # the cluster file the region reads is the one the init container writes
        config_dir = os.path.dirname(option["--config"])
        (init,) = spec["initContainers"]
        template, target, token_file = init["command"][3:]
        assert target == option["--config"]
        assert all(mounts(c)[config_dir] == mounts(init)[config_dir] for c in containers)
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes[mounts(init)[os.path.dirname(template)]]["configMap"]["name"] == \
            objects(docs, "ConfigMap")[0]["metadata"]["name"]
        token_volume = volumes[mounts(init)[os.path.dirname(token_file)]]["secret"]
        assert token_volume["secretName"] == secret["metadata"]["name"]
        assert {"key": "token", "path": os.path.basename(token_file)} in token_volume["items"]

        # TLS: the [tls] table's files, relative to the cluster file, are the Secret's keys mounted there
        tls_mount = {os.path.relpath(p, config_dir): n for p, n in mounts(container).items()
                     if p.startswith(config_dir + "/")}
        tls_volume = volumes[tls_mount[os.path.relpath(cfg.tls.cert_dir, str(tmp_path))]]["secret"]
        assert tls_volume["secretName"] == secret["metadata"]["name"]
        projected = {os.path.join(os.path.relpath(cfg.tls.cert_dir, str(tmp_path)), i["path"]): i["key"]
                     for i in tls_volume["items"]}
        needed = [cfg.tls.ca, *cfg.tls.region_pair(region)]
        assert sorted(projected) == sorted(os.path.relpath(p, str(tmp_path)) for p in needed), \
            "a region gets the CA bundle and its own pair, nothing else"
        for key in projected.values():
            assert key in secret_data, f"the Secret has no {key}"
        cert = x509.load_pem_x509_certificate(secret_data[f"{region.name}.crt"])
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == region.name

        # the host peers dial: the pod's stable DNS name, or the external name of its LoadBalancer
        headless = one(services, "Service", sts["spec"]["serviceName"])
        assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"]
        assert {p["port"] for p in headless["spec"]["ports"]} >= set(region.repl_ports or [region.repl_port])
        if overlay.startswith("one-cluster"):
            ns = namespace["metadata"]["name"]
            assert region.host == f"{sts['metadata']['name']}-0.{headless['metadata']['name']}.{ns}.svc.cluster.local"
        else:
            peer = one(services, "Service", f"braid-peer-{region.name}")
            assert peer["spec"]["type"] == "LoadBalancer"
            assert peer["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/hostname"] == region.host
            repl_ports = region.repl_ports or [region.repl_port]
            assert [(p["port"], p["targetPort"]) for p in peer["spec"]["ports"]] == \
                [(port, "repl" + (f"-{k}" if k else "")) for k, port in enumerate(repl_ports)]
            assert not region.host.endswith(".svc.cluster.local")

    # every Service selects the pod of exactly one region and reaches each of its shards; the
    # budget selects every region
    for svc in services:
        chosen = [s for s in statefulsets
                  if selects(svc["spec"]["selector"], s["spec"]["template"]["metadata"]["labels"])]
        assert len(chosen) == 1, f"Service {svc['metadata']['name']} selects {len(chosen)} regions"
        container_ports = {p["name"]: p["containerPort"]
                           for c in chosen[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(container_ports)
        assert all(p["port"] == container_ports[p["targetPort"]] for p in svc["spec"]["ports"])
        targets = {p["targetPort"] for p in svc["spec"]["ports"]}
        for what in ("repl", "resp"):
            if what in targets:  # a Service of one shard's port has every shard's
                assert {n for n in container_ports if n.split("-")[0] == what} <= targets, svc["metadata"]["name"]
    (pdb,) = objects(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert all(selects(pdb["spec"]["selector"]["matchLabels"], s["spec"]["template"]["metadata"]["labels"])
               for s in statefulsets)
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == \
        {namespace["metadata"]["name"]}


@pytest.mark.parametrize("overlay", ["one-cluster", "three-clusters/region-2", "one-cluster-sharded",
                                     "three-clusters-sharded/region-2"])
def test_the_init_container_writes_a_cluster_file_with_the_secret_token(rendered, overlay, tmp_path):
    """Its script, run as the pod runs it: the ConfigMap's file with the Secret's token,
    everything else unchanged, and a clear refusal of a template it cannot fill."""
    docs = rendered[overlay]
    path, template_cfg = cluster_file(docs, tmp_path / "template")
    (secret,) = objects(docs, "Secret")
    token_file = tmp_path / "token"
    token_file.write_bytes(base64.b64decode(secret["data"]["token"]))
    (init,) = objects(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["initContainers"]
    script = init["command"][2]
    (tmp_path / "etc").mkdir()
    target = tmp_path / "etc" / "cluster.toml"
    (tmp_path / "etc" / "tls").mkdir()
    subprocess.run([sys.executable, "-c", script, path, str(target), str(token_file)], check=True)
    cfg = load(str(target))
    assert cfg.token == token_file.read_text().strip() != template_cfg.token
    assert cfg.regions == template_cfg.regions and cfg.cluster_id == template_cfg.cluster_id
    assert cfg.tls.cert_dir == str(tmp_path / "etc" / "tls")
    # a sharded file keeps its slot map and its ports per shard, and they are the containers'
    assert cfg.shards == template_cfg.shards and cfg.shards.sharded == ("sharded" in overlay)
    for sts in objects(docs, "StatefulSet"):
        containers = sts["spec"]["template"]["spec"]["containers"]
        region = cfg.region(containers[0]["env"][0]["value"])
        assert len(containers) == cfg.shards.count
        if cfg.shards.sharded:
            assert [c["ports"][0]["containerPort"] for c in containers] == region.ports
            assert [c["ports"][1]["containerPort"] for c in containers] == region.repl_ports
            assert [cfg.shard_view(k).routing(region).owner(slot).port
                    for k in range(2) for slot in (0, 16383)] == [6379, 6380] * 2  # MOVED names the pod's ports

    token_file.write_text("\n")
    empty = subprocess.run([sys.executable, "-c", script, path, str(target), str(token_file)],
                           capture_output=True, text=True)
    assert empty.returncode != 0 and "empty" in empty.stderr
    token_file.write_text('a "quoted" token\\\n')
    subprocess.run([sys.executable, "-c", script, path, str(target), str(token_file)], check=True)
    assert load(str(target)).token == 'a "quoted" token\\'
    no_token = tmp_path / "no-token.toml"
    no_token.write_text(re.sub(r"(?m)^token\s*=.*$", "", (tmp_path / "template" / "cluster.toml").read_text()))
    missing = subprocess.run([sys.executable, "-c", script, str(no_token), str(target), str(token_file)],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "token line" in missing.stderr


@pytest.mark.parametrize("overlay", ["one-cluster", "one-cluster-sharded"])
def test_the_region_runs_with_options_braid_node_knows_and_least_privilege(rendered, overlay):
    help_text = braid("node", "--help").stdout
    # --shard K: the one shard a container runs (docs/sharding.md, "Processes and files")
    known = set(re.findall(r"--[a-z][a-z0-9-]*", help_text)) | {"--shard"}
    for sts in objects(rendered[overlay], "StatefulSet"):
        spec = sts["spec"]["template"]["spec"]
        containers = spec["containers"]
        for container in containers:
            assert container["command"] == ["braid"] and container["args"][0] == "node"
            options = {a for a in container["args"] if a.startswith("--")}
            assert options <= known, f"braid node does not know {options - known}"
        assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] != 0
        # an apply that changes every region's StatefulSet restarts none: the operator does, one at a time
        assert sts["spec"]["updateStrategy"]["type"] == "OnDelete"
        for c in (*containers, *spec["initContainers"]):
            assert c["securityContext"]["readOnlyRootFilesystem"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and "memory" in c["resources"]["limits"]
        # what a shard writes goes to volumes: its data, the cluster file braid-admin tune rewrites, /tmp
        for container in containers:
            writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
            assert {"/data", "/etc/braid", "/tmp"} <= writable


def test_the_pod_starts_a_region_its_probes_find_ready(rendered, tmp_path):
    """region-1's pod, laid out on this machine: the init container's cluster file, the
    Secret's files where the pod mounts them, the container's command; the readiness
    probe's own script must find the region ready, and the region links with mutual TLS.
    Only what cannot be the pod's here changes: directories under tmp_path, free loopback
    ports for the cluster file's (the peers' hosts loopback, where nothing answers), and
    the loopback address for --bind."""
    docs = rendered["one-cluster"]
    sts = one(docs, "StatefulSet", "braid-region-1")
    spec = sts["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (init,) = spec["initContainers"]
    (secret,) = objects(docs, "Secret")
    volumes = {v["name"]: v for v in spec["volumes"]}
    root = tmp_path / "pod"

    def here(path: str) -> str:
        return str(root) + path

    # the volumes, as the pod mounts them
    (cm,) = objects(docs, "ConfigMap")
    for mount in init["volumeMounts"] + container["volumeMounts"]:
        os.makedirs(here(mount["mountPath"]), exist_ok=True)
        volume = volumes.get(mount["name"], {})
        if "configMap" in volume:
            for key, text in cm["data"].items():
                (root / mount["mountPath"].lstrip("/") / key).write_text(text)
        if "secret" in volume:
            for item in volume["secret"]["items"]:
                (root / mount["mountPath"].lstrip("/") / item["path"]).write_bytes(
                    base64.b64decode(secret["data"][item["key"]]))
    subprocess.run([sys.executable, "-c", init["command"][2], *map(here, init["command"][3:])], check=True)

    args = [a.replace("$(BRAID_REGION)", "region-1") for a in container["args"]]
    config = here(args[args.index("--config") + 1])
    cfg = load(config)
    resp, repl, *peer_ports = free_ports(2 + 2 * (len(cfg.regions) - 1))
    pod_port = cfg.region("region-1").port
    for r in cfg.regions:
        r.host = "127.0.0.1"
        r.port, r.repl_port = (resp, repl) if r.name == "region-1" else (peer_ports.pop(), peer_ports.pop())
    cfg.save()
    options = {a: i for i, a in enumerate(args) if a.startswith("--")}
    args[options["--config"] + 1] = config
    args[options["--data-dir"] + 1] = here(args[options["--data-dir"] + 1])
    args[options["--bind"] + 1] = "127.0.0.1"
    args[options["--metrics-port"] + 1] = str(free_ports(1)[0])  # the pod's 9121 may be taken here
    log = tmp_path / "region.log"
    with open(log, "wb") as out:
        region = subprocess.Popen([sys.executable, "-m", "node", *args], stdout=out, stderr=subprocess.STDOUT)
    probe = container["readinessProbe"]["exec"]["command"]
    probe_script = probe[2].replace(f'("127.0.0.1", {pod_port})', f'("127.0.0.1", {resp})')

    def ready() -> bool:
        assert region.poll() is None, f"the region exited with {region.returncode}: {log.read_text()[-2000:]}"
        return subprocess.run([sys.executable, "-c", probe_script], capture_output=True).returncode == 0

    try:
        wait_until(ready, 30.0, what="the readiness probe")
        with redis.Redis(port=resp, socket_timeout=10) as r:
            assert r.xrange("rides") == []  # ready: it serves reads ...
            # ... and takes writes once its peers (none runs here) told it how much of its own they hold
            with pytest.raises(redis.exceptions.BusyLoadingError, match="waiting for region-2"):
                r.xadd("rides", {"km": "12"})
            crdt = r.info("crdt")
        assert crdt["crdt_link_tls"] == "mutual"
    finally:
        region.terminate()
        region.wait(30)
    assert region.returncode == 0  # SIGTERM, as Kubernetes stops a pod: a clean exit
    with open(config) as f:
        assert "token-of-one-cluster" in f.read()


def test_the_documented_scrape_job_finds_every_shard_s_metrics_port_and_nothing_else(rendered):
    """A sharded pod has no prometheus.io/port annotation (one port for several endpoints):
    the scrape job of docs/deploy.md keeps exactly the metrics ports of every overlay's pods."""
    with open(DEPLOY_DOC, encoding="utf-8") as f:
        blocks = re.findall(r"```yaml\n(.*?)```", f.read(), re.S)
    (job,) = [doc[0] for doc in map(yaml.safe_load, blocks) if isinstance(doc, list) and "job_name" in doc[0]]
    assert job["kubernetes_sd_configs"][0]["role"] == "pod"
    (keep,) = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert keep["source_labels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_name",
                                     "__meta_kubernetes_pod_container_port_name"]
    for overlay, docs in rendered.items():
        namespaces = {d["metadata"]["name"] for d in objects(docs, "Namespace")}
        assert namespaces <= set(job["kubernetes_sd_configs"][0]["namespaces"]["names"])
        for sts in objects(docs, "StatefulSet"):
            pod = sts["spec"]["template"]
            name = pod["metadata"]["labels"]["app.kubernetes.io/name"]
            for container in pod["spec"]["containers"]:
                for port in container["ports"]:
                    # Prometheus anchors the regex and joins the source labels with ";"
                    kept = re.fullmatch(keep["regex"], f"{name};{port['name']}") is not None
                    assert kept == port["name"].startswith("metrics"), (overlay, container["name"], port)
                    if kept:
                        assert port["containerPort"] == METRICS_PORT + int(port["name"].partition("-")[2] or 0)
