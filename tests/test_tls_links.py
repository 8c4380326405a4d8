"""Mutual TLS between regions and on the admin service: a real three-region cluster
(processes, gRPC, TLS), rogue regions that must be refused, certificate rotation while
writes flow, a CA move, and cluster files or certificates that cannot be used."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading

import grpc
import pytest
import redis
from cryptography import x509

from node.activeactive.cluster_config import LinkTls, load
from node.security import certs
from node.testing import (
    BraidProcess,
    LocalCluster,
    free_port,
    free_ports,
    replication_status,
    version_vector,
    wait_until,
)
from proto import replication_pb2 as rpb
from proto import replication_pb2_grpc as rpb_grpc


def links_up(cluster) -> bool:
    states = []
    for c in cluster.clients():
        states += [v for k, v in replication_status(c).items() if k.startswith("crdt_peer_")]
        c.close()
    return all("link=up" in v for v in states)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3, tls=True) as c:
        wait_until(lambda: links_up(c), 20, what="every link up")
        yield c


@pytest.fixture
def regions(cluster):
    clients = cluster.clients()
    yield clients
    for c in clients:
        c.close()


def admin(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--cluster", cluster.file, *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})


def refused(client) -> int:
    return int(replication_status(client)["crdt_refused_handshakes"])


def served_certificate(cluster, name: str) -> x509.Certificate:
    """The certificate a region presents on its replication port now (Python's ssl, as a peer would)."""
    spec = cluster.config.region(name)
    ctx = ssl.create_default_context(cafile=cluster.certs.ca)
    ctx.load_cert_chain(*cluster.certs.regions["region-1"])
    with socket.create_connection((spec.host, spec.repl_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=name) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def region_log(cluster, index: int) -> str:
    return _read(cluster.procs[index].log_path)


# ------------------------------------------------------------------ a cluster under mTLS
def test_writes_replicate_and_braid_admin_works_over_mutual_tls(cluster, regions):
    ids = [r.xadd("tls:stream", {"from": str(i)}) for i, r in enumerate(regions)]
    cluster.sync_wait()
    for r in regions:
        assert sorted(e[0] for e in r.xrange("tls:stream")) == sorted(ids)
        assert replication_status(r)["crdt_link_tls"] == "mutual"
    res = admin(cluster, "status")
    assert res.returncode == 0, res.stderr
    assert len(re.findall(r"│ up +│", res.stdout)) == 6, res.stdout  # every link of every region
    assert "unreachable" not in res.stdout
    with open(cluster.file) as f:
        text = f.read()
    assert "[tls]" in text and 'ca = "tls/ca.crt"' in text  # relative to the file's directory


def test_braid_admin_needs_the_admin_certificate_or_a_regions(cluster, regions):
    before = refused(regions[0])
    res = admin(cluster, "--tls-cert", cluster.certs.client[0], "--tls-key", cluster.certs.client[1], "status")
    assert res.returncode == 1
    assert "neither braid-admin's nor a region's" in res.stderr
    assert refused(regions[0]) > before
    as_region = admin(cluster, "--tls-cert", cluster.certs.regions["region-3"][0],
                      "--tls-key", cluster.certs.regions["region-3"][1], "info", "db", "db")
    assert as_region.returncode == 0, as_region.stderr  # a region's certificate is accepted


def test_braid_admin_checks_the_region_name(cluster, tmp_path):
    """A region answering with a certificate of another name is not the region braid-admin meant."""
    cfg = load(cluster.file)
    r1, r2 = cfg.regions[0], cfg.regions[1]
    cfg.regions[0] = dataclasses.replace(r1, repl_port=r2.repl_port)  # "region-1" points at region-2
    cfg.tls = dataclasses.replace(cfg.tls)
    path = tmp_path / "misdirected.toml"
    cfg.save(str(path))
    res = subprocess.run([sys.executable, "-m", "node.tools.admin_cli", "--cluster", str(path), "info", "db", "db"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "region region-1" in res.stderr and "TLS handshake failed" in res.stderr


def test_braid_admin_at_a_host_and_port_with_its_certificate(cluster):
    r = cluster.config.regions[1]
    base = [sys.executable, "-m", "node.tools.admin_cli", "--host", r.host, "--port", str(r.repl_port),
            "--token", cluster.config.token]
    tls = ["--tls-ca", cluster.certs.ca, "--tls-cert", cluster.certs.admin[0], "--tls-key", cluster.certs.admin[1]]
    res = subprocess.run([*base, *tls, "info", "db", "db"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "region-3 (number 3)" in res.stdout
    plain = subprocess.run([*base, "info", "db", "db"], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 1 and "answers only over TLS: give --tls-ca, --tls-cert and --tls-key" in plain.stderr
    partial = subprocess.run([*base, "--tls-ca", cluster.certs.ca, "status"], capture_output=True, text=True,
                             timeout=60)
    assert partial.returncode == 1 and "--tls-ca, --tls-cert and --tls-key together" in partial.stderr


def test_a_region_checks_the_name_on_the_certificate_of_the_region_it_dials():
    """Region-2 holds a valid certificate of the cluster CA, but for another name: region-1,
    dialing it as region-2, refuses it."""
    cluster = LocalCluster(2, tls=True, writable=False)
    ca = certs.load(cluster.certs.ca, os.path.join(cluster.certs.directory, "ca.key"))
    impostor = certs.issue(ca, "region-9", hosts=list(certs.DEFAULT_HOSTS)).write(cluster.certs.directory, "impostor")
    cluster.config.regions[1].tls_cert, cluster.config.regions[1].tls_key = impostor
    with cluster:
        r1, r2 = cluster.clients()
        # (region-2 also asks region-1 for its member list at start, with the same certificate:
        # that admin call is refused and counted too, so wait for the dial's own refusal)
        wait_until(lambda: "the certificate of the region dialed as region-2 was refused" in region_log(cluster, 0),
                   20, what="region-1 refusing region-2's certificate")
        assert refused(r1) > 0
        assert "Hostname Verification" in region_log(cluster, 0)
        # never hearing from region-2, region-1 does not know how much of its own region-2 holds
        with pytest.raises(redis.exceptions.BusyLoadingError, match="waiting for region-2"):
            r1.xadd("unseen", {"f": "v"})
        assert "link=down" in replication_status(r1)["crdt_peer_2"]
        assert r2.exists("unseen") == 0
        r1.close()
        r2.close()


# ------------------------------------------------------------------ rogue regions
def _rogue_file(cluster, tmp_path, case: str) -> str:
    """A cluster file for a process posing as region-1 (it dials regions 2 and 3)."""
    forged = dataclasses.replace(cluster.config)
    me = dataclasses.replace(forged.regions[0], port=free_port(), repl_port=free_port())
    ca = certs.load(cluster.certs.ca, os.path.join(cluster.certs.directory, "ca.key"))
    if case == "plain-text":
        forged.tls = None
    else:
        trusted = str(tmp_path / "trusted.crt")
        with open(trusted, "wb") as f:  # the rogue trusts the cluster's CA, so only its own certificate fails
            f.write(ca.cert_pem())
        if case == "another-ca":
            foreign = certs.make_ca("Some other CA")
            with open(trusted, "ab") as f:
                f.write(foreign.cert_pem())
            pair = certs.issue(foreign, "region-1", hosts=["127.0.0.1"]).write(str(tmp_path), "rogue")
        elif case == "expired":
            now = dt.datetime.now(dt.UTC)
            pair = certs.issue(ca, "region-1", hosts=["127.0.0.1"], not_before=now - dt.timedelta(days=30),
                               not_after=now - dt.timedelta(days=1)).write(str(tmp_path), "rogue")
        else:  # "another-region": region-2's own valid certificate, claiming region-1
            pair = cluster.certs.regions["region-2"]
        me = dataclasses.replace(me, tls_cert=pair[0], tls_key=pair[1])
        forged.tls = LinkTls(trusted, cluster.certs.directory, *cluster.certs.admin)
    forged.regions = [me, *forged.regions[1:]]
    path = str(tmp_path / "rogue.toml")
    forged.save(path)
    return path


REASONS = {"another-ca": "certificate refused: unable to get local issuer certificate",
           "expired": "certificate refused: certificate has expired",
           "another-region": "cannot speak for region-1",
           "plain-text": "plain text on a TLS port"}


@pytest.mark.parametrize("case", list(REASONS))
def test_a_rogue_region_is_refused_and_nothing_it_sends_is_applied(cluster, regions, tmp_path, case):
    r1, r2, r3 = regions
    cluster.sync_wait()
    before = [refused(r) for r in (r2, r3)]
    vv_before = version_vector(replication_status(r2))
    path = _rogue_file(cluster, tmp_path, case)
    with BraidProcess(load(path).regions[0].port, str(tmp_path / "rogue"), path, "region-1") as rogue:
        c = rogue.client()
        wait_until(lambda: refused(r2) > before[0] and refused(r3) > before[1], 20,
                   what="regions 2 and 3 refusing the rogue")
        # refused by every peer, it never hears how much of its own they hold: it takes no write
        with pytest.raises(redis.exceptions.BusyLoadingError, match="waiting for region-2, region-3"):
            c.xadd(f"forged:{case}", {"f": "v"})
        c.close()
    for index in (1, 2):
        text = region_log(cluster, index)
        assert "refused a connection from 127.0.0.1:" in text and REASONS[case] in text
    cluster.sync_wait()
    assert all(r.exists(f"forged:{case}") == 0 for r in regions)
    assert version_vector(replication_status(r2)) == vv_before  # nothing of origin 1 but region-1's own
    assert all(version_vector(replication_status(r)) == vv_before for r in regions)


def test_a_certificate_of_region_2_cannot_pose_as_region_3(cluster, regions):
    """Straight to region-1's port with region-2's valid certificate, a Hello claiming region 3."""
    r1 = regions[0]
    before, vv_before = refused(r1), version_vector(replication_status(r1))
    spec = cluster.config.regions[0]
    crt, key = cluster.certs.regions["region-2"]
    with open(cluster.certs.ca, "rb") as f:
        ca = f.read()
    with open(crt, "rb") as f, open(key, "rb") as k:
        credentials = grpc.ssl_channel_credentials(ca, k.read(), f.read())
    hello = rpb.Frame(hello=rpb.Hello(cluster_id=cluster.config.cluster_id, database=cluster.config.database,
                                      region=3, token=cluster.config.token, max_message=8 << 20))
    forged = rpb.Frame(batch=rpb.Batch(envelopes=[rpb.Envelope(origin=3, n=10**6, op=b"x")]))
    with grpc.secure_channel(f"{spec.host}:{spec.repl_port}", credentials,
                             options=[("grpc.ssl_target_name_override", "region-1")]) as channel:
        with pytest.raises(grpc.RpcError) as e:
            list(rpb_grpc.ReplicationStub(channel).Sync(iter([hello, forged]), timeout=10))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "cannot speak for region-3" in e.value.details()
    assert refused(r1) == before + 1
    assert version_vector(replication_status(r1)) == vv_before


def test_a_local_process_skipping_the_tls_port_has_no_identity(cluster, regions):
    """The gRPC server behind the TLS port listens on loopback; a call straight to it is refused."""
    r1 = regions[0]
    pid = cluster.procs[0].pid
    out = subprocess.run(["ss", "-Htlnp"], capture_output=True, text=True).stdout
    ports = [int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines() if f"pid={pid}," in line]
    spec = cluster.config.regions[0]
    backend = [p for p in ports if p not in (spec.port, spec.repl_port)]
    assert len(backend) == 1, out
    before = refused(r1)
    hello = rpb.Frame(hello=rpb.Hello(cluster_id=cluster.config.cluster_id, database=cluster.config.database,
                                      region=2, token=cluster.config.token))
    with grpc.insecure_channel(f"127.0.0.1:{backend[0]}") as channel:
        with pytest.raises(grpc.RpcError) as e:
            list(rpb_grpc.ReplicationStub(channel).Sync(iter([hello]), timeout=10))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "did not come through this region's TLS port" in e.value.details()
    assert refused(r1) == before + 1


# ------------------------------------------------------------------ rotation
def _writer(clients, stop: threading.Event, acked: list, errors: list) -> None:
    i = 0
    while not stop.is_set():
        c = clients[i % len(clients)]
        try:
            acked.append(c.xadd("rotation", {"i": str(i)}))
        except Exception as e:  # noqa: BLE001 (a failed write is reported, and would fail the test)
            errors.append(e)
        i += 1


def test_rotating_a_certificate_while_writes_flow_loses_nothing(cluster, regions):
    ca = certs.load(cluster.certs.ca, os.path.join(cluster.certs.directory, "ca.key"))
    old = served_certificate(cluster, "region-2").serial_number
    writers = [cluster.procs[0].client(), cluster.procs[1].client()]
    stop, acked, errors = threading.Event(), [], []
    thread = threading.Thread(target=_writer, args=(writers, stop, acked, errors))
    thread.start()
    try:
        wait_until(lambda: len(acked) > 50, 20, what="writes before the rotation")
        fresh = certs.issue(ca, "region-2", hosts=list(certs.DEFAULT_HOSTS))
        fresh.write(cluster.certs.directory, "region-2")  # replaces the files in place (atomically)
        res = admin(cluster, "tls", "reload", "--region", "region-2")
        assert res.returncode == 0, res.stderr
        assert format(fresh.cert.serial_number, "x") in res.stdout.replace("\n", "")
        assert served_certificate(cluster, "region-2").serial_number == fresh.cert.serial_number != old
        # SIGHUP does the same for region-3
        fresh3 = certs.issue(ca, "region-3", hosts=list(certs.DEFAULT_HOSTS))
        fresh3.write(cluster.certs.directory, "region-3")
        os.kill(cluster.procs[2].pid, signal.SIGHUP)
        wait_until(lambda: served_certificate(cluster, "region-3").serial_number == fresh3.cert.serial_number,
                   20, what="region-3 serving its new certificate")
        mark = len(acked)
        wait_until(lambda: len(acked) > mark + 50, 20, what="writes after the rotation")
    finally:
        stop.set()
        thread.join(30)
        for w in writers:
            w.close()
    assert not errors
    cluster.sync_wait()
    for r in regions:
        held = {e[0] for e in r.xrange("rotation")}
        assert set(acked) <= held, f"{len(set(acked) - held)} acknowledged writes missing"
    wait_until(lambda: links_up(cluster), 20, what="every link up again after the rotation")


def test_a_reload_with_a_broken_certificate_keeps_the_one_in_use(cluster, regions, tmp_path):
    path = cluster.certs.regions["region-3"][0]
    with open(path, "rb") as f:
        good = f.read()
    serving = served_certificate(cluster, "region-3").serial_number
    try:
        with open(path, "wb") as f:
            f.write(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        res = admin(cluster, "tls", "reload", "--region", "region-3")
        assert res.returncode == 1
        assert "not a PEM certificate" in res.stderr and path in res.stderr
    finally:
        with open(path, "wb") as f:
            f.write(good)
    assert served_certificate(cluster, "region-3").serial_number == serving
    regions[2].xadd("after-broken-reload", {"f": "v"})
    cluster.sync_wait()
    assert all(r.xlen("after-broken-reload") == 1 for r in regions)


def test_moving_to_a_new_ca_through_a_two_ca_bundle():
    """Trust both CAs everywhere, re-issue every certificate from the new one, drop the old one."""
    with LocalCluster(3, tls=True) as cluster:
        d = cluster.certs.directory
        old_ca = certs.load(cluster.certs.ca, os.path.join(d, "ca.key"))
        new_ca = certs.make_ca("Braid cluster CA (next)")
        clients = cluster.clients()

        def reload_all(how: str) -> None:
            for i, r in enumerate(cluster.config.regions):
                if how == "admin":
                    res = admin(cluster, "tls", "reload", "--region", r.name)
                    assert res.returncode == 0, res.stderr
                else:
                    before = len(region_log(cluster, i).splitlines())
                    os.kill(cluster.procs[i].pid, signal.SIGHUP)
                    wait_until(lambda i=i, b=before: "reloaded the TLS certificate" in
                               "\n".join(region_log(cluster, i).splitlines()[b:]), 20, what="SIGHUP reload")

        def writes_replicate(key: str) -> None:
            for c in clients:
                c.xadd(key, {"f": "v"})
            cluster.sync_wait()
            assert all(c.xlen(key) == 3 for c in clients)

        # 1. both CAs in the bundle
        with open(cluster.certs.ca, "wb") as f:
            f.write(old_ca.cert_pem() + new_ca.cert_pem())
        reload_all("admin")
        writes_replicate("step-1")
        # 2. every certificate (braid-admin's too) re-issued by the new CA
        for r in cluster.config.regions:
            certs.issue(new_ca, r.name, hosts=list(certs.DEFAULT_HOSTS)).write(d, r.name)
        certs.issue(new_ca, certs.ADMIN_NAME, server=False).write(d, "admin")
        reload_all("sighup")
        writes_replicate("step-2")
        # 3. the old CA leaves the bundle
        with open(cluster.certs.ca, "wb") as f:
            f.write(new_ca.cert_pem())
        reload_all("admin")
        writes_replicate("step-3")
        for r in cluster.config.regions:
            assert served_certificate(cluster, r.name).issuer == new_ca.cert.subject
        # a certificate of the old CA is refused now
        stale = certs.issue(old_ca, "region-1", hosts=["127.0.0.1"])
        ctx = ssl.create_default_context(cadata=new_ca.cert_pem().decode())
        stale_dir = os.path.join(cluster.dir, "stale")
        os.makedirs(stale_dir)
        ctx.load_cert_chain(*stale.write(stale_dir, "region-1"))
        before = refused(clients[1])
        spec = cluster.config.regions[1]
        with socket.create_connection((spec.host, spec.repl_port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="region-2") as tls:
                with pytest.raises((ssl.SSLError, ConnectionError)):
                    tls.sendall(b"x")
                    tls.recv(1)  # TLS 1.3: the server's verdict on the client certificate arrives after
        wait_until(lambda: refused(clients[1]) > before, 10, what="the old CA's certificate refused")
        for c in clients:
            c.close()


# ------------------------------------------------------------------ cluster files and certificate files
def _node(path: str, region: str = "region-1", data_dir: str | None = None) -> subprocess.CompletedProcess:
    data_dir = data_dir or os.path.join(os.path.dirname(path), "data")
    return subprocess.run([sys.executable, "-m", "node", "node", "--config", path, "--region", region,
                           "--data-dir", data_dir], capture_output=True, text=True, timeout=60)


def _plain_file(tmp_path, tls_line: str) -> str:
    a, b, c, d = free_ports(4)
    text = (f'cluster_id = "c"\ntoken = "t"\n{tls_line}\n'
            f'[[regions]]\nname = "region-1"\nnumber = 1\nport = {a}\nrepl_port = {b}\n'
            f'[[regions]]\nname = "region-2"\nnumber = 2\nport = {c}\nrepl_port = {d}\n')
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("tls_line", ["", "tls = true", 'tls = "yes"'])
def test_a_cluster_file_that_does_not_say_how_regions_talk_is_refused(tmp_path, tls_line):
    res = _node(_plain_file(tmp_path, tls_line))
    assert res.returncode == 2
    assert "tls = false" in res.stderr and "[tls]" in res.stderr


def test_plain_text_links_are_a_warning_at_start(tmp_path):
    path = _plain_file(tmp_path, "tls = false")
    spec = load(path).regions[0]
    with BraidProcess(spec.port, str(tmp_path / "r1"), path, "region-1") as p:
        wait_until(lambda: "PLAIN TEXT" in _read(p.log_path), 10, what="the warning")
        assert "WARNING" in _read(p.log_path)


def _tls_file(tmp_path, case: str) -> tuple[str, str]:
    made = certs.create_cluster_certs(str(tmp_path / "tls"), ["region-1", "region-2"])
    crt, key = made.regions["region-1"]
    if case == "missing-key":
        os.remove(key)
        expected = f"cannot read the private key {key}"
    elif case == "malformed-cert":
        with open(crt, "w") as f:
            f.write("this is not a certificate\n")
        expected = f"{crt}: not a PEM certificate"
    elif case == "malformed-key":
        with open(key, "w") as f:
            f.write("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        expected = f"{key}: not a usable private key"
    elif case == "key-of-another-certificate":
        os.replace(made.regions["region-2"][1], key)
        expected = f"{key} is not the key of the certificate {crt}"
    elif case == "ca-is-a-directory":
        os.remove(made.ca)
        os.mkdir(made.ca)
        expected = f"cannot read the CA bundle {made.ca}"
    else:  # malformed CA bundle
        with open(made.ca, "w") as f:
            f.write("garbage")
        expected = f"{made.ca}: not a PEM CA bundle"
    path = _plain_file(tmp_path, '[tls]\nca = "tls/ca.crt"\ncert_dir = "tls"\n')
    return path, expected


@pytest.mark.parametrize("case", ["missing-key", "malformed-cert", "malformed-key", "key-of-another-certificate",
                                  "ca-is-a-directory", "malformed-ca"])
def test_unusable_certificate_files_are_a_clear_error_at_start(tmp_path, case):
    path, expected = _tls_file(tmp_path, case)
    res = _node(path)
    assert res.returncode == 1, res.stderr
    assert "TLS between regions" in res.stderr and expected in res.stderr


def test_the_tls_table_round_trips_with_paths_relative_to_the_file(tmp_path):
    path = _plain_file(tmp_path, '[tls]\nca = "pki/bundle.pem"\ncert_dir = "pki"\n'
                                 'admin_cert = "admin/a.crt"\nadmin_key = "admin/a.key"\n')
    text = _read(path).replace('repl_port', 'tls_cert = "own/r1.crt"\ntls_key = "own/r1.key"\nrepl_port', 1)
    with open(path, "w") as f:
        f.write(text)
    cfg = load(path)
    base = str(tmp_path)
    assert cfg.tls == LinkTls(f"{base}/pki/bundle.pem", f"{base}/pki", f"{base}/admin/a.crt", f"{base}/admin/a.key")
    assert cfg.tls.region_pair(cfg.regions[0]) == (f"{base}/own/r1.crt", f"{base}/own/r1.key")
    assert cfg.tls.region_pair(cfg.regions[1]) == (f"{base}/pki/region-2.crt", f"{base}/pki/region-2.key")
    cfg.save(str(tmp_path / "again.toml"))
    again = load(str(tmp_path / "again.toml"))
    assert again.tls == cfg.tls and again.regions == cfg.regions
    assert 'ca = "pki/bundle.pem"' in (tmp_path / "again.toml").read_text()
