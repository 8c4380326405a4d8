"""Test helpers shipped with Braid (as trio ships its testing helpers).

- :class:`BraidProcess`: a real Braid region in a subprocess on a free
  loopback port (what users run, and what crash tests SIGKILL).
- :class:`RedisProcess`: Debian's ``redis-server`` beside it, for differential
  tests.
- :class:`InProcessServer`: a region on an event loop in a background thread,
  for fast command tests.
- :class:`RecordingTransport`: what a client connection writes, call by call,
  without a socket (for tests and measurements of the request path).

Start-up waits poll with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Self

import redis

from node.activeactive.cluster_config import ClusterConfig, LinkTls, RegionSpec, load, local_cluster, shard_dir
from node.region.config import Config
from node.region.core import RegionCore
from node.region.slots import key_slot
from node.runtime.server import Server
from node.security.certs import create_cluster_certs
from node.tools import admin_cli
from node.tools.cluster_processes import ping, writable


class _TestPorts:
    """Ports for test servers, handed out in turn from a window of this process's own.

    Asking the kernel for a free port (bind to port 0) and binding it later races twice: the
    kernel takes its outgoing connections' source ports from the same ephemeral range, and it
    hands the port just freed to the next test process that asks.  So ports come from below
    (or above) the ephemeral range, where only servers bind, each test process from a window
    of its own (``BRAID_TEST_PORTS=LOW-HIGH``, which ``make test`` sets per lane; else one
    chosen by the process id), and never the same port twice until the window wraps (from a
    place in it chosen by the process id, so a process a test starts begins elsewhere)."""

    WINDOW = 2000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window: tuple[int, int] | None = None
        self._next = 0

    @staticmethod
    def _default_window() -> tuple[int, int]:
        try:
            with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
                eph_low, eph_high = map(int, f.read().split())
        except (OSError, ValueError):
            eph_low, eph_high = 32768, 60999
        below, above = (10000, eph_low - 1), (eph_high + 1, 65535)
        low, high = max(below, above, key=lambda r: r[1] - r[0])
        windows = max(1, (high - low + 1) // _TestPorts.WINDOW)
        start = low + (os.getpid() % windows) * _TestPorts.WINDOW
        return start, min(high, start + _TestPorts.WINDOW - 1)

    def window(self) -> tuple[int, int]:
        if self._window is None:
            text = os.environ.get("BRAID_TEST_PORTS", "")
            if text:
                first, _, last = text.partition("-")
                self._window = (int(first), int(last))
            else:
                self._window = self._default_window()
            # a process started by a test (the chaos suite's runner, a bench) inherits the
            # window: start elsewhere in it than the test process does
            low, high = self._window
            self._next = low + (os.getpid() * 503) % max(1, high - low + 1)
        return self._window

    def take(self, span: int, offsets: tuple[int, ...] = (0,)) -> int:
        """A base such that base+offset .. base+offset+span-1 are free for every offset."""
        with self._lock:
            low, high = self.window()
            width = max(offsets) + span
            if width > high - low + 1:
                raise RuntimeError(f"test port window {low}-{high} is narrower than {width} ports")
            for _ in range(high - low + 1):
                if self._next + width - 1 > high:
                    self._next = low
                base, self._next = self._next, self._next + width
                if all(port_is_free(base + off + i) for off in offsets for i in range(span)):
                    return base
            raise RuntimeError(f"no free port range in the test port window {low}-{high}")


_test_ports = _TestPorts()


def free_port() -> int:
    return _test_ports.take(1)


def port_is_free(port: int) -> bool:
    """Can a server bind ``port`` on loopback right now?"""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port_base(span: int, offsets: tuple[int, ...] = (0, 100)) -> int:
    """A base port such that base+offset .. base+offset+span-1 are free for every offset
    (``braid up`` puts RESP at base, gRPC at base+100 and TLS at base+200)."""
    return _test_ports.take(span, offsets)


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free right now, none of them handed out before in this process
    (until its window wraps)."""
    return [_test_ports.take(1) for _ in range(n)]


def under_headings(out: str, headings: Sequence[str]) -> list[str]:
    """The output under each of ``headings`` (braid-admin's ``shard K of N (slots A-B)``), in
    order; each must stand once, in that order (what comes before the first is dropped)."""
    assert all(out.count(h) == 1 for h in headings), out
    starts = [out.index(h) for h in headings]
    assert starts == sorted(starts), out
    return [out[a:b] for a, b in zip(starts, [*starts[1:], len(out)], strict=True)]


def braid_cli(*args: object, cwd: str | os.PathLike | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    """``braid ARGS...`` in a process of its own (the repository's code, as ``python -m node``)."""
    return subprocess.run([sys.executable, "-m", "node", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def interpreter_env(python: str) -> dict[str, str] | None:
    """The environment to run ``python -m node`` with: this one's for this interpreter; for
    another one (another release's virtual environment), this one without PYTHONPATH, which may
    name this checkout and would shadow the code installed there."""
    if python == sys.executable:
        return None
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def process_gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def ports_free(ports) -> bool:
    """No server listens on any of the ports (a client's TIME_WAIT does not count, as for the regions)."""
    for p in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def replication_status(client: redis.Redis) -> dict[str, str]:
    """A region's ``BRAID.REPLICATION STATUS`` (the ``INFO crdt`` fields) as a dict."""
    text = client.execute_command("BRAID.REPLICATION", "STATUS").decode()
    return dict(line.split(":", 1) for line in text.splitlines())


def wait_in_sync(clients: list[redis.Redis], timeout: float = 20.0) -> None:
    """Return when every region behind ``clients`` has applied the same operations and
    none waits for any (polling with a deadline); the clients are closed.  Holding the same
    numbers of operations is not enough: the digests of their histories must agree too."""
    def same() -> bool:
        states = [replication_status(c) for c in clients]
        return (len({st["crdt_vv"] for st in states}) == 1 and len({st["crdt_history"] for st in states}) == 1
                and all(st["crdt_pending"] == "0" for st in states))

    try:
        wait_until(same, timeout, what="regions in sync")
    finally:
        for c in clients:
            c.close()


def version_vector(status: dict[str, str]) -> dict[int, int]:
    """The ``crdt_vv`` field of a status, as origin -> operations applied."""
    return {int(o): int(n) for o, n in (p.split("=") for p in status["crdt_vv"].split(",") if p)}


class _ServerProcess:
    """A server subprocess on a free port, stopped with SIGTERM then SIGKILL."""

    name = "server"

    def __init__(self, port: int | None = None, data_dir: str | None = None) -> None:
        self.port = port or free_port()
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix=f"{self.name}-")
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.data_dir, f"{self.name}.log")

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> Self:
        os.makedirs(self.data_dir, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = proc = subprocess.Popen(self.argv(), stdout=self._log, stderr=subprocess.STDOUT,
                                            cwd=self.data_dir, env=self.env())

        def ready() -> bool:
            if proc.poll() is not None:
                with open(self.log_path, "rb") as f:
                    tail = f.read()[-2000:].decode("utf-8", "replace")
                raise RuntimeError(f"{self.name} exited with {proc.returncode}: {tail}")
            return self.answers()

        try:
            wait_until(ready, 30.0, what=f"{self.name} on port {self.port}")
        except TimeoutError:
            proc.kill()  # never leave a process that did not come up
            proc.wait(10)
            raise
        return self

    def env(self) -> dict[str, str] | None:
        """The process's environment (None: this one's)."""
        return None

    def answers(self) -> bool:
        """Is it serving yet (start() polls this)?"""
        return ping(self.port)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def client(self, **kw) -> redis.Redis:
        kw.setdefault("protocol", 2)
        kw.setdefault("socket_timeout", 30)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if getattr(self, "_log", None):
            self._log.close()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class BraidProcess(_ServerProcess):
    name = "braid"

    def __init__(self, port: int | None = None, data_dir: str | None = None,
                 cluster_file: str | None = None, region: str | None = None,
                 extra_args: Sequence[str] = (), ready: Callable[[], bool] | None = None,
                 python: str = sys.executable) -> None:
        super().__init__(port, data_dir)
        self.cluster_file, self.region = cluster_file, region
        self.extra_args = list(extra_args)  # e.g. ["--appendfsync", "always"]
        self.ready = ready  # what tells it serves, when not a PING on the plain port (e.g. `--port 0`)
        # the interpreter that runs `-m node`: another one (a virtual environment with another
        # release installed) runs that release; settable between a stop and a restart (an upgrade)
        self.python = python

    def env(self) -> dict[str, str] | None:
        return interpreter_env(self.python)

    def answers(self) -> bool:
        return self.ready() if self.ready is not None else super().answers()

    def argv(self) -> list[str]:
        extra: list[str] = []
        if self.cluster_file:
            assert self.region is not None, "a region of a cluster file is started by its name"
            extra = ["--config", self.cluster_file, "--region", self.region]
        return [self.python, "-m", "node", "--log-level", "WARNING", "node",
                "--port", str(self.port), "--data-dir", self.data_dir, *extra, *self.extra_args]

    def stop_keeping_data(self) -> None:
        """A clean shutdown (SIGTERM) that keeps the data directory, to restart() later."""
        own, self._own_dir = self._own_dir, False
        self.stop()
        self._own_dir = own

    def restart(self) -> Self:
        """Start again on the same port and data directory (after kill() or stop())."""
        if getattr(self, "_log", None):
            self._log.close()
        return self.start()

    def wait_writable(self, timeout: float = 30.0) -> Self:
        """Until the region takes writes: a region of a cluster takes none after it starts until
        every live peer told it the last of its own operations it holds (node/activeactive/region.py)."""
        host = getattr(self, "host", "127.0.0.1")  # a region in a network namespace has its own address
        wait_until(lambda: writable(self.port, host), timeout, what=f"{self.region or 'the region'} taking writes")
        return self


class ShardProcess(BraidProcess):
    """Shard ``shard`` of a region of a sharded cluster file: ``braid node --shard K``, given
    the region's folder; ``data_dir`` is where it keeps its data (``shard-K`` of that folder,
    node/activeactive/cluster_config.py's ``shard_dir``)."""

    def __init__(self, shard: int, port: int, data_dir: str, cluster_file: str, region: str,
                 extra_args: Sequence[str] = ()) -> None:
        super().__init__(port, data_dir, cluster_file, region, extra_args)
        self.shard = shard

    def argv(self) -> list[str]:
        argv = super().argv()
        argv[argv.index("--data-dir") + 1] = os.path.dirname(self.data_dir)
        return [*argv, "--shard", str(self.shard)]


class ShardedCluster:
    """``regions`` regions of ``shards`` shards on loopback, each shard a process
    (:class:`ShardProcess`) with its data in ``<dir>/<region>/shard-K``; ``tls``: links
    with mutual TLS, every shard of a region presenting the region's certificate."""

    def __init__(self, regions: int = 2, shards: int = 2, tls: bool = False, prefix: str = "braid-sharded-") -> None:
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.file = os.path.join(self.dir, "cluster.toml")
        self.config = local_cluster(regions, 0, shards=shards)
        if tls:
            certs = create_cluster_certs(os.path.join(self.dir, "tls"), [r.name for r in self.config.regions])
            self.config.tls = LinkTls(certs.ca, certs.directory, *certs.admin)
        self.procs: dict[tuple[str, int], ShardProcess] = {}

    def _place(self) -> None:
        n = self.config.shards.count
        ports = free_ports(2 * n * len(self.config.regions))
        for i, r in enumerate(self.config.regions):
            mine = ports[2 * n * i:2 * n * (i + 1)]
            r.ports, r.repl_ports = mine[:n], mine[n:]
            r.port, r.repl_port = r.ports[0], r.repl_ports[0]
        self.config.save(self.file)
        self.config = load(self.file)
        self.procs = {(r.name, k): ShardProcess(k, r.ports[k], shard_dir(os.path.join(self.dir, r.name),
                                                                          self.config.shards, k), self.file, r.name)
                      for r in self.config.regions for k in range(n)}

    def start(self, attempts: int = 3) -> Self:
        """Start every shard and wait until each takes writes (other free ports when one was
        taken meanwhile)."""
        for attempt in range(1, attempts + 1):
            self._place()
            try:
                for p in self.procs.values():
                    p.start()
                for p in self.procs.values():
                    p.wait_writable()
                return self
            except (RuntimeError, TimeoutError):
                self._stop_all()
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def _stop_all(self) -> None:
        for p in self.procs.values():
            p.stop()
        for r in self.config.regions:
            shutil.rmtree(os.path.join(self.dir, r.name), ignore_errors=True)

    def stop(self) -> None:
        self._stop_all()
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self, region: str, shard: int) -> redis.Redis:
        return self.procs[(region, shard)].client()

    def owner(self, key: str) -> int:
        """The shard that owns ``key``."""
        return self.config.shards.owners()[key_slot(key.encode())]

    def keys(self, prefix: str, per_shard: int) -> list[str]:
        """``per_shard`` keys ``prefix``N owned by each shard, in shard order."""
        out: list[str] = []
        for k in range(self.config.shards.count):
            out += [key for key in (f"{prefix}{i}" for i in range(10_000)) if self.owner(key) == k][:per_shard]
        return out

    def admin(self, *argv: str) -> tuple[int, str, str]:
        """braid-admin against this cluster's file, in this process: (exit status, stdout, stderr)."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = admin_cli.main(["--cluster", self.file, *argv])
        return code, out.getvalue(), err.getvalue()


class LocalCluster:
    """N regions of an Active-Active database as real processes on loopback.

    ``tls=True``: mutual TLS on every link and admin call, with a cluster CA and
    certificates made in ``<dir>/tls`` (``self.certs``); else plain text (``tls = false``).
    ``settings``: server settings every region gets from the cluster file's [regions.config];
    ``region_settings``: more of them for one region, by its name (files relative to :attr:`dir`).
    ``pythons``: the interpreter of some regions, by region name (another release's virtual
    environment: :class:`BraidProcess`'s ``python``); the others run this one.
    :meth:`start` returns once every region takes writes (its peers answered it), unless
    ``writable`` is False (a cluster whose links are meant to be refused)."""

    def __init__(self, regions: int = 3, extra_args: Sequence[str] = (), tls: bool = False,
                 writable: bool = True, settings: dict[str, str | int] | None = None,
                 region_settings: dict[str, dict[str, str | int]] | None = None,
                 pythons: Mapping[str, str] | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="braid-cluster-")
        self.config = local_cluster(regions, 0)
        self.certs = None
        if tls:
            self.certs = create_cluster_certs(os.path.join(self.dir, "tls"), [r.name for r in self.config.regions])
            self.config.tls = LinkTls(self.certs.ca, self.certs.directory, *self.certs.admin)
        self.file = os.path.join(self.dir, "cluster.toml")
        self.extra_args = list(extra_args)
        self.writable = writable
        self.settings = dict(settings or {})
        self.region_settings = dict(region_settings or {})
        self.pythons = dict(pythons or {})
        self.procs: list[BraidProcess] = []

    def _place(self) -> None:
        """Pick free ports for every region and write the cluster file."""
        ports = free_ports(2 * len(self.config.regions))
        self.config.regions = [RegionSpec(r.name, r.number, r.host, ports[2 * i], ports[2 * i + 1],
                                          tls_cert=r.tls_cert, tls_key=r.tls_key,
                                          config={**self.settings, **self.region_settings.get(r.name, {})})
                               for i, r in enumerate(self.config.regions)]
        self.config.save(self.file)
        self.procs = [BraidProcess(r.port, os.path.join(self.dir, r.name), self.file, r.name, self.extra_args,
                                   python=self.pythons.get(r.name, sys.executable))
                      for r in self.config.regions]

    def start(self, attempts: int = 3) -> LocalCluster:
        """Start every region; a port taken meanwhile by someone else means new ports and a retry."""
        attempt = 1
        while True:
            self._place()
            try:
                for p in self.procs:
                    p.start()
                for p in self.procs if self.writable else ():
                    p.wait_writable()
                return self
            except (RuntimeError, TimeoutError):
                for p in self.procs:
                    p.stop()  # never leave a started region behind
                for p in self.procs:
                    shutil.rmtree(p.data_dir, ignore_errors=True)
                if attempt == attempts:
                    raise
            attempt += 1

    def clients(self, **kw) -> list[redis.Redis]:
        return [p.client(**kw) for p in self.procs]

    def proc(self, name: str) -> BraidProcess:
        return next(p for p in self.procs if p.region == name)

    def admin(self, *argv: str) -> tuple[int, str]:
        """Run braid-admin against this cluster's file, in this process: (exit code, output)."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = admin_cli.main(["--cluster", self.file, *argv])
        return code, out.getvalue()

    def add_region(self, name: str, start: bool = True) -> BraidProcess:
        """``braid-admin region add`` a new region on free ports, then start it (it joins)."""
        port, repl_port = free_ports(2)
        if self.certs is not None:  # its certificate, from the cluster CA
            create_cluster_certs(self.certs.directory, [name])
        code, out = self.admin("region", "add", name, "--host", "127.0.0.1", "--port", str(port),
                               "--repl-port", str(repl_port))
        if code != 0:
            raise RuntimeError(f"braid-admin region add {name} failed: {out}")
        proc = BraidProcess(port, os.path.join(self.dir, f"{name}-{port}"), self.file, name, self.extra_args)
        self.procs.append(proc)
        return proc.start() if start else proc

    def sync_wait(self, timeout: float = 20.0) -> None:
        """Return when every region has applied the same operations (no sleeping)."""
        wait_in_sync(self.clients(), timeout)

    def links_wait(self, timeout: float = 20.0) -> None:
        """Return when every region reports its link to every other one ``up``.  A region that
        starts before its peers dials them again with backoff, so right after :meth:`start`
        some links may still be down (their operations arrive relayed): a benchmark of the
        steady state waits for this first."""
        clients = self.clients()
        try:
            wait_until(lambda: all(peer["link"] == "up" for c in clients
                                   for key, peer in c.info("crdt").items() if key.startswith("crdt_peer_")),
                       timeout, what="every replication link up")
        finally:
            for c in clients:
                c.close()

    def stop(self) -> None:
        for p in self.procs:
            p.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def flushed_clients(cluster: LocalCluster, **kw):
    """A client of every region of ``cluster``, after a FLUSHALL everyone applied; on the way
    out every region's links are resumed (a test may have paused some) and the clients closed."""
    clients = cluster.clients(**kw)
    clients[0].flushall()
    cluster.sync_wait()
    try:
        yield clients
    finally:
        for c in clients:
            c.execute_command("BRAID.REPLICATION", "RESUME")
            c.close()


class RedisProcess(_ServerProcess):
    name = "redis"

    def argv(self) -> list[str]:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed: `make deps` installs it "
                               "(Debian package redis-server)")
        return [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.data_dir, "--daemonize", "no"]


def cluster_of(regions: int, name: str = "local"):
    """A cluster file of regions 1..``regions`` for regions built in one process (no addresses:
    their links are never dialed), as the in-process benchmarks build them."""
    return ClusterConfig(name, "db", "token", 16,
                         [RegionSpec(f"region-{n}", n, "local", 0, 0) for n in range(1, regions + 1)])


def region_server(cluster=None, number: int = 1, log_dir: str | None = None) -> Server:
    """A :class:`node.runtime.server.Server` that is not listening: region ``number`` of ``cluster``
    (standalone when None), with its append-only file (``everysec``) in ``log_dir``, loaded and
    then appended to, or without one."""
    config = Config()
    config.set("appendonly", log_dir is not None)
    if log_dir is not None:
        config.set("dir", log_dir)
    server = Server(config) if cluster is None else \
        Server(config, region=number, cluster=(cluster, cluster.regions[number - 1]))
    server.open_log()
    every_peer_answered(server.core)
    return server


def every_peer_answered(core: RegionCore) -> None:
    """A region of a cluster in this process, which no peer dials: play the handshakes a started
    region waits for before it takes writes (node/activeactive/region.py), each peer holding none of its
    operations - as for a region whose peers all start with it."""
    aa = core.aa
    if aa is not None:
        for peer in aa.peers():
            if peer.number not in aa.hub.handshake_vv:
                aa.hub.handshook(peer.number, {})


class InProcessServer:
    """A region on an asyncio loop in a background thread (port 0 = any free port)."""

    def __init__(self, config=None) -> None:
        config = config or Config()
        self._own_dir = None
        if config["dir"] == ".":  # never write an append-only file into the caller's directory
            self._own_dir = tempfile.mkdtemp(prefix="braid-inproc-")
            config.set("dir", self._own_dir)
        self.server = Server(config)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0

    def start(self) -> InProcessServer:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self.server.start("127.0.0.1", 0), self.loop)
        fut.result(timeout=10)
        self.port = self.server.core.port
        return self

    def call(self, fn, *args):
        """Run ``fn(*args)`` on the server's loop (the only thread that may touch state)."""
        async def run():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=10)

    def client(self, **kw) -> redis.Redis:
        kw.setdefault("protocol", 2)
        kw.setdefault("socket_timeout", 30)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class RecordingTransport:
    """A transport that takes every write at once, as a socket with room does, and keeps
    each write call's bytes (``writes``) unless ``keep`` is False (then it only counts)."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self.writes: list[bytes] = []
        self.written = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if self.keep:
            self.writes.append(bytes(data))

    def writelines(self, pieces: list) -> None:
        self.write(b"".join(pieces))

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default=None):
        return default

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True
