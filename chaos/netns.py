"""Regions on separate hosts, on one machine: network namespaces and an emulated WAN.

A test helper shipped with Braid (used by ``tests/test_netns.py``,
``braid-chaos run --backend netns`` and ``bench/wan.py``).  It needs root (it
creates network namespaces, veth pairs and TUN devices).

Theory of operation
-------------------
:class:`NetnsCluster` gives every region its own network namespace, a host of
its own, and runs a real ``braid node`` process in it (``ip netns exec``).  In
each namespace there are two interfaces and nothing else:

* ``wan0``, a TUN device held by the delay line (:mod:`chaos.delayline`), a
  user-space process that carries the packets between regions after each
  link's one-way delay, with jitter, loss and a bandwidth cap, and drops them
  when a link is cut.  The region's inner address ``10.213.1.<n>`` is on it;
  the other regions reach it at its outer address ``10.213.2.<n>``, which the
  delay line translates (a one-to-one NAT, as a cloud's public addresses).
  The region binds ``0.0.0.0`` and the cluster file advertises the outer
  address: its bind address is not the address its peers dial, and the
  source address a peer's connection arrives from is the peer's outer
  address, not the one the peer's own interface carries.
* ``lan0``, a veth pair to the host's root namespace (``10.213.<128+slot>.<4n+2>``,
  the host's end ``…<4n+1>``): the region's clients.  Tests, workloads and
  ``braid-admin`` run in the root namespace and reach each region directly, as
  clients in the region's own data centre would (no WAN delay on that hop).
  A region has no route to another region's ``lan0``, and the root namespace
  does not forward, so replication can only cross the WAN.

Why a delay line and not a bridge: without ``netem`` a bridge cannot delay
packets; and a route through the root namespace would be subject to the
host's iptables FORWARD policy, which Docker sets to DROP.  Why packets and not
a TCP relay per link: the regions' own TCP stacks then see the latency, loss
and reordering (retransmissions, congestion windows, a SYN that goes
unanswered when a link is cut), as between real hosts.  The price is one
Python process moving every replication packet: about 8 % of a core at 1,000
replicated XADD/s (``bench/wan.py``), less at higher rates (larger batches).

Two cluster files are written in the work directory: ``cluster.toml``, the
one the regions run with (outer addresses), and ``clients.toml``, the same
cluster as the root namespace reaches it (the ``lan0`` addresses), for
``braid-admin`` and attaching tools.  Every port is the same in every region
(RESP 6379, replication 7379), as on separate hosts.

Everything made carries the prefix ``braidn`` (namespaces ``braidn<slot>r<n>``,
host ends of the veth pairs ``braidn<slot>v<n>``, TUN devices
``braidn<slot>t<n>`` until they move into their namespace).  ``stop()`` (also
run when ``start()`` fails, and on leaving the ``with`` block, Ctrl-C
included) kills the region processes, stops the delay line (its TUN devices go
with it) and deletes the namespaces (their veth pairs go with them).  After a
run that was killed outright, ``python -m chaos.netns cleanup`` removes the
leftovers: every process in a ``braidn`` namespace, the namespaces, and any
``braidn`` link.  ``python -m chaos.netns status`` lists them.  Nothing is
added to iptables; on the host itself only the veth ends and their ``/30``
routes appear, and ``/run/braid-netns.lock`` (the lock that gives concurrent
harnesses different slots) stays.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import redis

from node.activeactive.cluster_config import ClusterConfig, LinkTls, RegionSpec, local_cluster
from node.testing import wait_in_sync
from node.tools.cluster_processes import ping

from .backends import RegionProcess

PREFIX = "braidn"
NETWORK = "10.213."  # 10.213.0.0/16: checked unused on the host before the first slot is taken
RESP_PORT, REPL_PORT = 6379, 7379
LOCK_FILE = "/run/braid-netns.lock"
MAX_SLOTS = 64


class NetnsError(RuntimeError):
    """Namespaces cannot be made here (not root, no ``ip``, no TUN...), or a step failed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError as e:
        raise NetnsError("the `ip` command (iproute2) is needed for network namespaces") from e
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def inner_address(region: int) -> str:
    return f"{NETWORK}1.{region}"


def outer_address(region: int) -> str:
    return f"{NETWORK}2.{region}"


@dataclass
class LinkShape:
    """One direction of a WAN link: delay and jitter in seconds, loss a probability, rate in bytes/s (0: no cap)."""

    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    rate: float = 0.0
    down: bool = False

    def fields(self) -> dict:
        return {"delay": self.delay, "jitter": self.jitter, "loss": self.loss, "rate": self.rate, "down": self.down}


class Wan:
    """The delay line process and every link's shape (thread-safe)."""

    def __init__(self, tuns: dict[int, str], seed: int = 0) -> None:
        self._lock = threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-m", "chaos.delayline",
                                      json.dumps({"tuns": tuns, "seed": seed})],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        if not ready:
            self.proc.wait(10)
            raise NetnsError(f"the delay line did not start (exit {self.proc.returncode}): is /dev/net/tun there?")
        self.base: dict[tuple[int, int], LinkShape] = {}

    def _call(self, **cmd) -> dict:
        with self._lock:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            reply = json.loads(self.proc.stdout.readline() or '{"ok": false, "error": "the delay line exited"}')
        if not reply.get("ok"):
            raise NetnsError(f"delay line: {reply.get('error')}")
        return reply

    def shape(self, src: int, dst: int, shape: LinkShape) -> None:
        self._call(op="set", src=src, dst=dst, **shape.fields())

    def set(self, src: int, dst: int, **fields) -> None:
        self._call(op="set", src=src, dst=dst, **fields)

    def stats(self) -> dict[str, list[int]]:
        """Packets moved and dropped per directed link ``"src-dst"``."""
        return self._call(op="stats")["links"]

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # end of its control input: the delay line exits
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc.stdout.close()


class NetnsRegion(RegionProcess):
    """A region process run in its namespace, served on its ``lan0`` address."""

    def __init__(self, netns: str, host: str, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.netns, self.host = netns, host

    def argv(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *super().argv()]

    def answers(self) -> bool:
        return ping(self.port, self.host)

    def client(self, **kw) -> redis.Redis:
        kw.setdefault("protocol", 2)
        kw.setdefault("socket_timeout", 30)
        return redis.Redis(host=self.host, port=self.port, **kw)


def _delay_of(delay, a: int, b: int) -> float:
    if isinstance(delay, dict):
        return float(delay.get((a, b), delay.get((b, a), 0.0)))
    return float(delay)


class NetnsCluster:
    """N regions, each in its own network namespace, joined by an emulated WAN.

    ``delay``: one-way seconds on every link, or ``{(a, b): seconds}`` per pair
    (both directions; e.g. ``{(1, 2): 0.03, (1, 3): 0.06, (2, 3): 0.09}``).
    ``jitter``, ``loss`` and ``bandwidth`` (bytes/s, 0 = none) apply to every link.
    ``tls=True``: mutual TLS between regions, certificates naming every address.
    The interface of :class:`node.testing.LocalCluster` (``clients()``,
    ``sync_wait()``, ``procs``, ``config``, ``file``) plus the WAN controls.
    """

    def __init__(self, regions: int = 3, delay=0.04, jitter: float = 0.0, loss: float = 0.0,
                 bandwidth: float = 0.0, tls: bool = False, extra_args: list[str] = (), workdir: str | None = None,
                 bug: str | None = None, seed: int = 0) -> None:
        if not 2 <= regions <= 15:
            raise ValueError("a namespace cluster has 2 to 15 regions")
        self.n, self.delay, self.jitter, self.loss, self.bandwidth = regions, delay, jitter, loss, bandwidth
        self.tls, self.extra_args, self.bug, self.seed = tls, list(extra_args), bug, seed
        self._own_dir = workdir is None
        self.dir = workdir or tempfile.mkdtemp(prefix="braid-netns-")
        self.slot: int | None = None
        self.namespaces: list[str] = []
        self.wan: Wan | None = None
        self.procs: list[NetnsRegion] = []
        self.config: ClusterConfig | None = None
        self.file = os.path.join(self.dir, "cluster.toml")  # what the regions run with
        self.client_file = os.path.join(self.dir, "clients.toml")  # the same, as reached from the host

    # ------------------------------------------------------------ addresses
    def netns(self, region: int) -> str:
        return f"{PREFIX}{self.slot}r{region}"

    def lan_address(self, region: int) -> str:
        return f"{NETWORK}{128 + self.slot}.{4 * region + 2}"

    @property
    def addresses(self) -> dict[int, tuple[str, int]]:
        """Region number -> (host, RESP port) as clients in the root namespace reach it."""
        return {r: (self.lan_address(r), RESP_PORT) for r in range(1, self.n + 1)}

    # ------------------------------------------------------------ setup
    def start(self) -> NetnsCluster:
        try:
            self._make_network()
            self._write_cluster_files()
            for r in self.config.regions:
                proc = NetnsRegion(self.netns(r.number), self.lan_address(r.number), RESP_PORT,
                                   os.path.join(self.dir, r.name), self.file, r.name,
                                   ["--bind", "0.0.0.0", *self.extra_args], bug=self.bug)
                self.procs.append(proc)
                proc.start()
            for proc in self.procs:  # as LocalCluster: once every region takes writes
                proc.wait_writable()
        except BaseException:
            self.stop()
            raise
        return self

    def _make_network(self) -> None:
        if os.geteuid() != 0:
            raise NetnsError("network namespaces need root")
        with open(LOCK_FILE, "w") as lock:  # two harnesses starting at once take different slots
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.slot = self._free_slot()
            self.namespaces = [self.netns(r) for r in range(1, self.n + 1)]
            for ns in self.namespaces:
                _ip("netns", "add", ns)
            for r, ns in enumerate(self.namespaces, 1):
                host_end = f"{PREFIX}{self.slot}v{r}"
                _ip("link", "add", host_end, "type", "veth", "peer", "name", "lan0", "netns", ns)
                _ip("addr", "add", f"{NETWORK}{128 + self.slot}.{4 * r + 1}/30", "dev", host_end)
                _ip("link", "set", host_end, "up")
                _ip("-n", ns, "addr", "add", f"{self.lan_address(r)}/30", "dev", "lan0")
                _ip("-n", ns, "link", "set", "lan0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
            tuns = {r: f"{PREFIX}{self.slot}t{r}" for r in range(1, self.n + 1)}
            self.wan = Wan(tuns, self.seed)
            for r, ns in enumerate(self.namespaces, 1):
                _ip("link", "set", tuns[r], "netns", ns)
                _ip("-n", ns, "link", "set", tuns[r], "name", "wan0")
                _ip("-n", ns, "addr", "add", f"{inner_address(r)}/32", "dev", "wan0")
                _ip("-n", ns, "link", "set", "wan0", "up")
                _ip("-n", ns, "route", "add", f"{NETWORK}2.0/24", "dev", "wan0", "src", inner_address(r))
        self.heal_network()

    def _free_slot(self) -> int:
        taken = {int(m) for m in re.findall(rf"^{PREFIX}(\d+)r\d+", _ip("netns", "list").stdout, re.M)}
        host = _ip("-4", "-o", "addr", "show").stdout + _ip("-4", "route", "show", "table", "all").stdout
        foreign = [line for line in host.splitlines() if NETWORK in line and PREFIX not in line]
        if foreign:
            raise NetnsError(f"{NETWORK}0.0/16 is already in use on this host ({foreign[0].strip()}): "
                             f"run `python -m chaos.netns cleanup` if a run was killed, else pick another range")
        for slot in range(MAX_SLOTS):
            if slot not in taken:
                return slot
        raise NetnsError(f"{MAX_SLOTS} namespace clusters are running")

    def _write_cluster_files(self) -> None:
        config = local_cluster(self.n, 0)
        config.regions = [RegionSpec(r.name, r.number, outer_address(r.number), RESP_PORT, REPL_PORT)
                          for r in config.regions]
        if self.tls:
            from node.security.certs import create_cluster_certs

            hosts = ["localhost", "127.0.0.1"] + [a for r in range(1, self.n + 1)
                                                  for a in (outer_address(r), inner_address(r), self.lan_address(r))]
            certs = create_cluster_certs(os.path.join(self.dir, "tls"), [r.name for r in config.regions], hosts=hosts)
            config.tls = LinkTls(certs.ca, certs.directory, *certs.admin)
        self.config = config
        config.save(self.file)
        clients = ClusterConfig(config.cluster_id, config.database, config.token, config.stride,
                                [RegionSpec(r.name, r.number, self.lan_address(r.number), r.port, r.repl_port)
                                 for r in config.regions], config.id_mode, config.appendfsync, tls=config.tls)
        clients.save(self.client_file)

    # ------------------------------------------------------------ the WAN
    def base_shape(self, src: int, dst: int) -> LinkShape:
        return LinkShape(_delay_of(self.delay, src, dst), self.jitter, self.loss, self.bandwidth)

    def links(self):
        return [(a, b) for a in range(1, self.n + 1) for b in range(1, self.n + 1) if a != b]

    def cut(self, a: int, b: int) -> None:
        """Pull the cable between regions a and b: every packet either way is dropped."""
        self.cut_one_way(a, b)
        self.cut_one_way(b, a)

    def cut_one_way(self, src: int, dst: int) -> None:
        """Drop every packet ``src`` sends ``dst`` (a one-way firewall; TCP stalls both ways)."""
        self.wan.set(src, dst, down=True)

    def impair(self, a: int, b: int, delay: float = 0.0, jitter: float = 0.0, loss: float = 0.0) -> None:
        """Add delay, jitter and loss on the link a-b, both ways (on top of its base shape)."""
        for src, dst in ((a, b), (b, a)):
            base = self.base_shape(src, dst)
            self.wan.set(src, dst, delay=base.delay + delay, jitter=base.jitter + jitter,
                         loss=1 - (1 - base.loss) * (1 - loss))

    def heal_network(self) -> None:
        """Every link back to its base shape, up."""
        for src, dst in self.links():
            self.wan.shape(src, dst, self.base_shape(src, dst))

    def rtt(self, a: int, b: int, samples: int = 3) -> float:
        """The smallest TCP connect time (one round trip) from region a's namespace to region b."""
        probe = ("import socket,time\nbest=9e9\n"
                 f"for _ in range({samples}):\n"
                 "    t=time.monotonic()\n"
                 f"    s=socket.create_connection(('{outer_address(b)}',{REPL_PORT}),timeout=10)\n"
                 "    best=min(best,time.monotonic()-t)\n    s.close()\nprint(best)")
        done = subprocess.run(["ip", "netns", "exec", self.netns(a), sys.executable, "-c", probe],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise NetnsError(f"rtt probe {a}->{b}: {done.stderr.strip()}")
        return float(done.stdout)

    # ------------------------------------------------------------ the LocalCluster interface
    def clients(self, **kw) -> list[redis.Redis]:
        return [p.client(**kw) for p in self.procs]

    def sync_wait(self, timeout: float = 30.0) -> None:
        wait_in_sync(self.clients(), timeout)

    # ------------------------------------------------------------ teardown
    def stop(self) -> None:
        for p in self.procs:
            try:
                if p.paused:
                    p.proc.send_signal(signal.SIGCONT)
                p.stop()
            except (OSError, subprocess.SubprocessError):
                pass
        if self.wan is not None:
            self.wan.close()
            self.wan = None
        for ns in self.namespaces:
            _remove_namespace(ns)
        if self.slot is not None:  # a host end left by a failed start whose namespace was never made
            for r in range(1, self.n + 1):
                _ip("link", "del", f"{PREFIX}{self.slot}v{r}", check=False)
        self.namespaces = []
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _remove_namespace(ns: str) -> None:
    """Kill what still runs in a namespace, then delete it (its interfaces go with it)."""
    for _ in range(50):
        pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)  # the killed processes leave the namespace: polled, bounded
    _ip("netns", "del", ns, check=False)


def leftovers(slot: int | None = None) -> dict[str, list[str]]:
    """Namespaces and links with the harness's prefix (of one slot, or of all) that exist now."""
    stem = PREFIX if slot is None else rf"{PREFIX}{slot}[rvt]"
    namespaces = re.findall(rf"^({stem}\S*)", _ip("netns", "list", check=False).stdout, re.M)
    links = re.findall(rf"^\d+: ({stem}[^@:\s]*)", _ip("-o", "link", "show", check=False).stdout, re.M)
    return {"namespaces": namespaces, "links": links}


def cleanup(slot: int | None = None) -> dict[str, list[str]]:
    """Remove every leftover of harness runs, or of one slot: processes in its namespaces, namespaces, links."""
    found = leftovers(slot)
    for ns in found["namespaces"]:
        _remove_namespace(ns)
    for link in found["links"]:
        _ip("link", "del", link, check=False)
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m chaos.netns cleanup [SLOT]`` / ``python -m chaos.netns status``"""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["cleanup"] and len(argv) <= 2 and all(a.isdigit() for a in argv[1:]):
        removed = cleanup(int(argv[1]) if len(argv) == 2 else None)
        print(f"removed {len(removed['namespaces'])} namespace(s) {' '.join(removed['namespaces'])}; "
              f"{len(removed['links'])} link(s) {' '.join(removed['links'])}")
        return 0
    if argv == ["status"]:
        found = leftovers()
        print(f"namespaces: {' '.join(found['namespaces']) or '-'}\nlinks: {' '.join(found['links']) or '-'}")
        return 0
    print("usage: python -m chaos.netns cleanup [SLOT] | status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
