"""TLS on the client port: redis-cli, redis-py and `braid up --tls` against real region processes.

Certificates come from node.security.certs (the cluster's CA, and for the refusals a
foreign CA and an expired certificate).  Each refusal is checked three ways: the client
gets nothing served, INFO counts it under its reason, the log names the peer's address;
and the region keeps serving.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import socket
import ssl
import subprocess
import sys

import pytest
import redis
from cryptography import x509

from node.security import certs
from node.testing import BraidProcess, free_port, free_port_base, port_is_free, wait_until

PING = b"*1\r\n$4\r\nPING\r\n"


# ------------------------------------------------------------------ certificates
class Certs:
    """The cluster's certificates plus odd ones, in one directory."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        made = certs.create_cluster_certs(directory, ["region-1"])
        self.ca = made.ca
        self.server = made.regions["region-1"]
        self.client = made.client
        ca = certs.load(made.ca, os.path.join(directory, "ca.key"))
        # the same region re-issued (a renewal: another serial), and with an encrypted key
        self.renewed = certs.issue(ca, "region-1", hosts=["localhost", "127.0.0.1"]).write(directory, "renewed")
        self.locked = certs.issue(ca, "region-1", hosts=["127.0.0.1"]).write(directory, "locked", b"s3cret")
        past = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
        self.expired = certs.issue(ca, "client", server=False, not_before=past,
                                   not_after=past + dt.timedelta(days=1)).write(directory, "expired")
        self.foreign = certs.issue(certs.make_ca("another CA"), "client", server=False).write(directory, "foreign")
        self.garbage = self._file("garbage.crt", b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n")

    def _file(self, name: str, data: bytes) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def node_args(self, tls_port: int, cert=None, auth: str | None = None) -> list[str]:
        crt, key = cert or self.server
        args = ["--tls-port", str(tls_port), "--tls-cert-file", crt, "--tls-key-file", key,
                "--tls-ca-cert-file", self.ca]
        return args + (["--tls-auth-clients", auth] if auth else [])

    def client_context(self, pair=None, ca: str | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=ca or self.ca)
        if pair is not None:
            ctx.load_cert_chain(*pair)
        return ctx


def serial_of(der: bytes) -> int:
    return x509.load_der_x509_certificate(der).serial_number


def file_serial(path: str) -> int:
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificate(f.read()).serial_number


class TlsNode(BraidProcess):
    """A region with a TLS port beside its plain port (or instead of it)."""

    def __init__(self, c: Certs, *, plain: bool = True, extra: list[str] = (), **kw) -> None:
        self.tls_port = free_port()
        self.certs = c
        self.plain = plain
        args = c.node_args(self.tls_port, **kw) + list(extra) + ([] if plain else ["--port", "0"])
        super().__init__(extra_args=args, ready=None if plain else self._tls_ready)

    def _tls_ready(self) -> bool:
        try:
            return tls_exchange(self.tls_port, self.certs.client_context(self.certs.client)).startswith(b"+PONG")
        except OSError:
            return False

    def tls_client(self, **kw) -> redis.Redis:
        c = self.certs
        kw.setdefault("ssl_certfile", c.client[0])
        kw.setdefault("ssl_keyfile", c.client[1])
        return redis.Redis(host="127.0.0.1", port=self.tls_port, ssl=True, ssl_ca_certs=c.ca, protocol=2,
                           socket_timeout=30, **kw)

    def tls_info(self) -> dict[str, int]:
        conn = self.client() if self.plain else self.tls_client()
        try:
            return {k: int(v) for k, v in conn.info("stats").items() if k.startswith("tls_")}
        finally:
            conn.close()

    def log_text(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


def tls_exchange(port: int, ctx: ssl.SSLContext, payload: bytes = PING, timeout: float = 10) -> bytes:
    """Connect, handshake, send, read one reply (raises what the handshake or the read raised)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(payload)
            return s.recv(1024)


def refused_attempt(port: int, ctx: ssl.SSLContext) -> tuple[int, bytes | Exception]:
    """A TLS attempt the region should refuse: (the client's local port, what it got)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    local = raw.getsockname()[1]
    try:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(PING)  # TLS 1.3: the server checks the client's certificate after the client's Finished
            got: bytes | Exception = s.recv(1024)
    except (ssl.SSLError, OSError) as e:
        got = e
    finally:
        raw.close()
    return local, got


@pytest.fixture(scope="module")
def tls_certs(tmp_path_factory):
    return Certs(str(tmp_path_factory.mktemp("tls")))


@pytest.fixture(scope="module")
def node(tls_certs):
    with TlsNode(tls_certs) as n:
        yield n


# ------------------------------------------------------------------ clients
def test_redis_cli_and_redis_py_over_tls(node, tls_certs):
    c = tls_certs
    cli = ["redis-cli", "--tls", "--cacert", c.ca, "--cert", c.client[0], "--key", c.client[1],
           "-p", str(node.tls_port)]
    added = subprocess.run(cli + ["XADD", "rides", "*", "id", "1"], capture_output=True, text=True, timeout=30)
    assert added.returncode == 0 and re.fullmatch(r"\d+-\d+\n", added.stdout), added
    r = node.tls_client()
    r.xadd("rides", {"id": "2"})
    assert [f[b"id"] for _i, f in r.xrange("rides")] == [b"1", b"2"]
    r.close()
    url = (f"rediss://127.0.0.1:{node.tls_port}/0?ssl_ca_certs={c.ca}"
           f"&ssl_certfile={c.client[0]}&ssl_keyfile={c.client[1]}")
    by_url = redis.Redis.from_url(url, socket_timeout=30)
    assert by_url.xlen("rides") == 2
    by_url.close()
    # the plain port serves the same region beside it
    plain = node.client()
    assert plain.xlen("rides") == 2
    assert plain.config_get("tls-port") == {"tls-port": str(node.tls_port)}
    plain.close()
    assert node.tls_info()["tls_handshakes"] >= 3


def test_port_0_closes_the_plain_port(tls_certs):
    with TlsNode(tls_certs, plain=False) as n:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", n.port), timeout=5).close()
        r = n.tls_client()
        assert r.config_get("port") == {"port": "0"}
        assert r.xadd("s", {"f": "v"})
        r.close()


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("kind", ["plaintext", "no_client_cert", "unknown_ca", "expired_cert"])
def test_refused_clients_are_counted_and_logged_and_the_region_keeps_serving(node, tls_certs, kind):
    c = tls_certs
    before = node.tls_info()
    if kind == "plaintext":
        with socket.create_connection(("127.0.0.1", node.tls_port), timeout=10) as s:
            local = s.getsockname()[1]
            s.sendall(PING)
            try:
                got: bytes | Exception = s.recv(1024)
            except ConnectionResetError:  # closed with the command unread
                got = b""
        assert got == b""  # no reply: the connection is closed
    else:
        pair = {"no_client_cert": None, "unknown_ca": c.foreign, "expired_cert": c.expired}[kind]
        local, got = refused_attempt(node.tls_port, c.client_context(pair))
        assert not (isinstance(got, bytes) and got.startswith(b"+PONG")), got
    failures = f"tls_handshake_failures_{kind}"
    wait_until(lambda: node.tls_info()[failures] == before[failures] + 1,
               10, what=f"the {kind} refusal counted")
    after = node.tls_info()
    assert after["tls_handshake_failures"] == before["tls_handshake_failures"] + 1
    assert after["tls_handshakes"] == before["tls_handshakes"]
    lines = [ln for ln in node.log_text().splitlines() if f"127.0.0.1:{local} refused" in ln]
    assert len(lines) == 1 and "WARNING" in lines[0], lines
    assert tls_exchange(node.tls_port, c.client_context(c.client)) == b"+PONG\r\n"


def test_a_stalled_handshake_blocks_nobody_and_is_dropped(node, tls_certs):
    before = node.tls_info()["tls_handshake_failures_timeout"]
    silent = socket.create_connection(("127.0.0.1", node.tls_port), timeout=30)
    halfway = socket.create_connection(("127.0.0.1", node.tls_port), timeout=30)
    halfway.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then nothing
    try:
        for _ in range(3):  # served while both stall
            assert tls_exchange(node.tls_port, tls_certs.client_context(tls_certs.client)) == b"+PONG\r\n"
        # both are closed at the handshake timeout, and counted
        assert silent.recv(1) == b"" and halfway.recv(1) == b""
        wait_until(lambda: node.tls_info()["tls_handshake_failures_timeout"] == before + 2, 10,
                   what="the stalled handshakes counted")
    finally:
        silent.close()
        halfway.close()


def test_auth_clients_optional_and_no(tls_certs):
    c = tls_certs
    with TlsNode(c, auth="optional") as n:
        assert tls_exchange(n.tls_port, c.client_context()) == b"+PONG\r\n"  # no certificate: fine
        assert tls_exchange(n.tls_port, c.client_context(c.client)) == b"+PONG\r\n"
        _local, got = refused_attempt(n.tls_port, c.client_context(c.foreign))  # one presented is checked
        assert not isinstance(got, bytes) or got == b""
        r = n.client()
        assert r.config_set("tls-auth-clients", "no")
        assert r.config_get("tls-auth-clients") == {"tls-auth-clients": "no"}
        assert tls_exchange(n.tls_port, c.client_context(c.foreign)) == b"+PONG\r\n"  # not even asked for
        with pytest.raises(redis.ResponseError, match="must be one of the following: no, yes, optional"):
            r.config_set("tls-auth-clients", "maybe")
        r.close()


# ------------------------------------------------------------------ settings
def test_config_set_reloads_the_certificate_for_new_connections_only(tls_certs):
    c = tls_certs
    with TlsNode(c) as n:
        old = n.tls_client(single_connection_client=True)
        assert old.ping()
        ctx = c.client_context(c.client)

        def served_serial() -> int:
            with socket.create_connection(("127.0.0.1", n.tls_port), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    return serial_of(s.getpeercert(binary_form=True))

        assert served_serial() == file_serial(c.server[0])
        admin = n.client()
        assert admin.execute_command("CONFIG", "SET", "tls-cert-file", c.renewed[0],
                                     "tls-key-file", c.renewed[1]) == b"OK"
        assert served_serial() == file_serial(c.renewed[0])
        assert old.xadd("kept", {"f": "v"}) and old.xlen("kept") == 1  # the established connection stays

        # bad files: Redis's reply, the log names the file, the certificate in use stays
        refusal = ("CONFIG SET failed (possibly related to argument 'tls-cert-file') - "
                   "Unable to update TLS configuration")
        missing = os.path.join(c.dir, "missing.crt")
        for cert, key, named in [(missing, c.renewed[1], missing), (c.garbage, c.renewed[1], c.garbage),
                                 (c.server[0], c.renewed[1], c.renewed[1])]:  # a key of another certificate
            with pytest.raises(redis.ResponseError, match=re.escape(refusal)):
                admin.execute_command("CONFIG", "SET", "tls-cert-file", cert, "tls-key-file", key)
            wait_until(lambda named=named: named in n.log_text(), 10, what=f"{named} named in the log")
            assert admin.config_get("tls-cert-file") == {"tls-cert-file": c.renewed[0]}
            assert served_serial() == file_serial(c.renewed[0])
        with pytest.raises(redis.ResponseError, match="possibly related to argument 'tls-key-file-pass'"):
            admin.config_set("tls-key-file-pass", "wrong")  # the key in use is not encrypted
        # an encrypted key with its password
        assert admin.execute_command("CONFIG", "SET", "tls-cert-file", c.locked[0], "tls-key-file", c.locked[1],
                                     "tls-key-file-pass", "s3cret") == b"OK"
        assert served_serial() == file_serial(c.locked[0])
        assert old.ping()
        old.close()
        admin.close()


def test_protocols_and_cipher_suites(tls_certs):
    c = tls_certs
    with TlsNode(c) as n:
        admin = n.client()
        ctx = c.client_context(c.client)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        assert admin.config_set("tls-protocols", "TLSv1.2")
        _local, got = refused_attempt(n.tls_port, ctx)
        assert isinstance(got, Exception)
        assert admin.config_set("tls-protocols", "TLSv1.2 TLSv1.3")
        with pytest.raises(redis.ResponseError, match="possibly related to argument 'tls-protocols'"):
            admin.config_set("tls-protocols", "SSLv3")
        assert admin.config_set("tls-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256")
        with socket.create_connection(("127.0.0.1", n.tls_port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                assert s.cipher()[0] == "TLS_CHACHA20_POLY1305_SHA256"
        with pytest.raises(redis.ResponseError, match="possibly related to argument 'tls-ciphersuites'"):
            admin.config_set("tls-ciphersuites", "NOT_A_SUITE")
        # session resumption (TLS 1.2 here: its sessions are the server's cache or its tickets)
        resuming = c.client_context(c.client)
        resuming.maximum_version = ssl.TLSVersion.TLSv1_2

        def reused_twice() -> list[bool]:
            session, out = None, []
            for _ in range(2):
                with socket.create_connection(("127.0.0.1", n.tls_port), timeout=10) as raw:
                    with resuming.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as s:
                        s.sendall(PING)
                        assert s.recv(1024) == b"+PONG\r\n"
                        out.append(s.session_reused)
                        session = s.session
            return out

        assert reused_twice() == [False, True]
        assert admin.config_set("tls-session-caching", "no")
        assert reused_twice() == [False, False]
        admin.close()


def _node_exit(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", "node", "--port", str(free_port()),
                           "--data-dir", str(tmp_path / "d"), *args], capture_output=True, text=True, timeout=60)


def test_bad_certificate_or_key_at_start_is_a_clear_error(tls_certs, tmp_path):
    c = tls_certs
    port = free_port()
    missing = os.path.join(c.dir, "nope.key")
    unreadable = c._file("unreadable.key", b"")
    os.chmod(unreadable, 0)
    cases = [
        (["--tls-cert-file", c.server[0], "--tls-key-file", missing], missing),
        (["--tls-cert-file", c.garbage, "--tls-key-file", c.server[1]], c.garbage),
        (["--tls-cert-file", c.locked[0], "--tls-key-file", c.locked[1]], c.locked[1]),  # no password
        (["--tls-cert-file", c.server[0], "--tls-key-file", c.renewed[1]], c.renewed[1]),  # not its key
    ]
    if os.geteuid() != 0:  # root reads any file
        cases.append((["--tls-cert-file", c.server[0], "--tls-key-file", unreadable], unreadable))
    for args, named in cases:
        res = _node_exit(["--tls-port", str(port), "--tls-ca-cert-file", c.ca, *args], tmp_path)
        assert res.returncode == 1, (args, res.stderr)
        assert named in res.stderr and "Traceback" not in res.stderr, res.stderr
    res = _node_exit(["--tls-port", str(port), "--tls-cert-file", c.server[0], "--tls-key-file", c.server[1]],
                     tmp_path)  # tls-auth-clients yes without a CA
    assert res.returncode == 1 and "tls-ca-cert-file" in res.stderr and "Traceback" not in res.stderr
    res = _node_exit(["--tls-port", "70000"], tmp_path)
    assert res.returncode == 2 and "--tls-port 70000" in res.stderr


# ------------------------------------------------------------------ against Redis
TLS_NAMES = ["tls-port", "tls-cert-file", "tls-key-file", "tls-key-file-pass", "tls-ca-cert-file",
             "tls-ca-cert-dir", "tls-auth-clients", "tls-protocols", "tls-ciphers", "tls-ciphersuites",
             "tls-prefer-server-ciphers", "tls-session-caching", "tls-session-cache-size",
             "tls-session-cache-timeout"]


def test_tls_settings_render_as_redis_renders_them(braid, ref):
    """Defaults, CONFIG SET's checks and replies of the TLS settings, next to Debian's redis-server
    (TLS off in both: CONFIG SET of a file is accepted without reading it, as Redis does)."""
    assert braid.config_get("tls-*") == {k: v for k, v in ref.config_get("tls-*").items() if k in TLS_NAMES}
    script = [("tls-auth-clients", "optional"), ("tls-auth-clients", "maybe"), ("tls-port", "70000"),
              ("tls-port", "abc"), ("tls-session-caching", "nope"), ("tls-session-cache-size", "-1"),
              ("tls-prefer-server-ciphers", "yes"), ("tls-protocols", "TLSv1.3"),
              ("tls-cert-file", "/nonexistent.crt"), ("tls-session-cache-timeout", "60")]
    for name, value in script:
        replies = []
        for conn in (braid, ref):
            try:
                replies.append(conn.execute_command("CONFIG", "SET", name, value))
            except redis.ResponseError as e:
                replies.append(str(e))
        assert replies[0] == replies[1], (name, value, replies)
    assert braid.config_get("tls-*") == {k: v for k, v in ref.config_get("tls-*").items() if k in TLS_NAMES}
    for conn in (braid, ref):  # back to the defaults for the next tests
        conn.config_set("tls-auth-clients", "yes")
        for name in ("tls-prefer-server-ciphers",):
            conn.config_set(name, "no")
        for name in ("tls-protocols", "tls-cert-file"):
            conn.config_set(name, "")
        conn.config_set("tls-session-cache-timeout", "300")


# ------------------------------------------------------------------ braid up --tls
def test_braid_up_tls_prints_redis_cli_lines_that_work(tmp_path):
    base = free_port_base(2, (0, 100, 200))
    data = str(tmp_path / "cluster")
    up = subprocess.run([sys.executable, "-m", "node", "up", "--tls", "--detach", "--regions", "2",
                         "--base-port", str(base), "--data-dir", data], capture_output=True, text=True, timeout=90)
    try:
        assert up.returncode == 0, up.stderr
        lines = [ln.split(": ", 1)[1] for ln in up.stdout.splitlines() if ln.strip().startswith("region-")
                 and "redis-cli --tls" in ln]
        assert len(lines) == 2, up.stdout
        assert os.path.exists(os.path.join(data, "tls", "ca.crt"))
        for i, line in enumerate(lines):
            argv = shlex.split(line)
            assert argv[-2:] == ["-p", str(base + 200 + i)]
            res = subprocess.run(argv + ["XADD", f"s{i}", "*", "f", "v"], capture_output=True, text=True, timeout=30)
            assert res.returncode == 0 and re.fullmatch(r"\d+-\d+\n", res.stdout), (line, res)
        # the links are mutual TLS: what region-1 took reaches region-2, and INFO says so
        second = shlex.split(lines[1])
        wait_until(lambda: subprocess.run(second + ["XLEN", "s0"], capture_output=True, text=True,
                                          timeout=30).stdout == "1\n", 30, what="s0 replicated over mutual TLS")
        info = subprocess.run(second + ["INFO", "crdt"], capture_output=True, text=True, timeout=30).stdout
        assert "crdt_link_tls:mutual" in info and "link=up" in info, info
        # the CA alone also connects (tls-auth-clients optional)
        simple = ["redis-cli", "--tls", "--cacert", os.path.join(data, "tls", "ca.crt"), "-p", str(base + 200)]
        assert subprocess.run(simple + ["PING"], capture_output=True, text=True, timeout=30).stdout == "PONG\n"
        from node.activeactive.cluster_config import load

        cfg = load(os.path.join(data, "cluster.toml"))
        assert (cfg.tls.ca, cfg.tls.cert_dir) == (os.path.join(data, "tls", "ca.crt"), os.path.join(data, "tls"))
        assert cfg.regions[1].config["tls-port"] == base + 201
        assert cfg.region_settings(cfg.regions[1])["tls-cert-file"] == os.path.join(data, "tls", "region-2.crt")
    finally:
        down = subprocess.run([sys.executable, "-m", "node", "down", "--data-dir", data], capture_output=True,
                              text=True, timeout=60)
        assert down.returncode == 0, down.stderr


def test_cluster_file_keeps_region_settings_and_the_links_choice(tmp_path):
    from node.activeactive.cluster_config import LinkTls, load, local_cluster

    cfg = local_cluster(2, 7001)
    cfg.regions[0].config = {"tls-port": 7201, "tls-cert-file": "tls/region-1.crt", "tls-auth-clients": "optional"}
    path = str(tmp_path / "cluster.toml")
    cfg.save(path)
    back = load(path)
    assert back.tls is None and back.regions[0].config == cfg.regions[0].config and back.regions[1].config == {}
    assert back.region_settings(back.regions[0])["tls-cert-file"] == str(tmp_path / "tls" / "region-1.crt")
    back.tls = LinkTls(str(tmp_path / "tls" / "ca.crt"), str(tmp_path / "tls"), str(tmp_path / "tls" / "admin.crt"),
                       str(tmp_path / "tls" / "admin.key"))
    back.save()
    assert load(path).tls == back.tls and load(path).regions[0].config == cfg.regions[0].config
    with open(path) as f:
        saved = f.read()
    with open(path, "a") as f:
        f.write('\n[regions.config]\n"tls-port" = 1.5\n')  # a setting that is neither a string nor a number
    with pytest.raises(ValueError, match="must be a string or an integer"):
        load(path)
    with open(path, "w") as f:  # a port per shard, in a database without shards
        f.write(saved + '\n[regions.config]\n"tls-port" = [1]\n')
    with pytest.raises(ValueError, match="may be a list only for a port setting"):
        load(path)


def test_braid_node_applies_the_cluster_files_region_settings(tls_certs, tmp_path):
    """A standalone check of [regions.config]: a bad value there is a clear error naming it."""
    from node.activeactive.cluster_config import local_cluster

    cfg = local_cluster(1, free_port())
    cfg.regions[0].config = {"tls-auth-clients": "sometimes"}
    path = str(tmp_path / "cluster.toml")
    cfg.save(path)
    res = subprocess.run([sys.executable, "-m", "node", "node", "--config", path, "--region", "region-1",
                          "--data-dir", str(tmp_path / "d")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "tls-auth-clients" in res.stderr and "Traceback" not in res.stderr


def test_no_port_at_all_is_refused(tmp_path):
    res = _node_exit(["--port", "0"], tmp_path)
    assert res.returncode == 1 and "configured to not listen anywhere" in res.stderr, res.stderr


def test_config_set_tls_port_moves_the_listener(tls_certs):
    c = tls_certs
    with TlsNode(c) as n:
        admin = n.client()
        old_port, new_port = n.tls_port, free_port()
        assert admin.config_set("tls-port", new_port)
        assert tls_exchange(new_port, c.client_context(c.client)) == b"+PONG\r\n"
        wait_until(lambda: port_is_free(old_port), 10, what="the old TLS port closed")
        with socket.socket() as busy:  # a port someone else holds: Redis's reply, the listener stays
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            with pytest.raises(redis.ResponseError, match=re.escape(
                    "(possibly related to argument 'tls-port') - Unable to listen on this port")):
                admin.config_set("tls-port", busy.getsockname()[1])
        assert admin.config_get("tls-port") == {"tls-port": str(new_port)}
        assert tls_exchange(new_port, c.client_context(c.client)) == b"+PONG\r\n"
        assert admin.config_set("tls-port", 0)  # TLS off: the plain port serves on
        wait_until(lambda: port_is_free(new_port), 10, what="the TLS port closed")
        assert admin.ping()
        admin.close()

