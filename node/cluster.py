"""``braid up`` / ``braid down``: run local regions as child processes.

Each region is a real ``braid node`` process with its own port and data
directory under ``--data-dir``.  ``braid up`` waits until every region answers
PING, prints how to connect, and then either stays in the foreground (Ctrl-C
stops the regions) or, with ``--detach``, records the process ids in
``<data-dir>/cluster.pids`` and returns; ``braid down`` stops them.

``--regions N`` (default 3) writes ``<data-dir>/cluster.toml`` (a fresh cluster
id and token, RESP on ``--base-port``.., gRPC replication 100 ports above, and
``tls = false``: plain-text links, on loopback only) and
starts each region with ``braid node --config cluster.toml --region NAME``;
``--regions 1`` starts a standalone region (Redis's own ID rules).

``--tls`` makes the cluster CA and the certificates under ``<data-dir>/tls/``
(``node.security.certs``), writes the links' ``[tls]`` table and, per region, TLS on
a client port 200 above the plain one (which stays on), and prints the
``redis-cli --tls`` line for each region.

Growing and shrinking a detached cluster.  ``braid up --add-region [NAME]`` adds a
region to the cluster running detached in ``--data-dir``: it picks the next free
ports after the existing regions (RESP one above the highest, gRPC 100 above that)
and, unless NAME is given, the next name ``region-N``; runs ``braid-admin region add``
against the cluster file (every member must be reachable, else nothing changes);
with TLS, signs the new region's certificate with the cluster's CA; then starts the
region detached (its data and ``node.log`` under ``<data-dir>/NAME/``), records its
pid beside the others and prints how to connect.  The region joins: it takes its
data from its peers and accepts writes once it has caught up (``braid-admin status``
shows it).  Shrinking is ``braid-admin region remove NAME`` (graceful: it stops taking
writes and hands over everything), then ``braid down --region NAME``, which stops that
region only.  ``<data-dir>/cluster.pids`` names the process of every region.  After
``braid down``, ``braid up`` restarts the cluster with its members of the moment
(the cluster file's epoch says they changed), whatever ``--regions`` says.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

PIDFILE = "cluster.pids"


def ping(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Does a server answer PING on this port?"""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _wait_ready(ports: list[int], procs: list[subprocess.Popen], deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    pending = set(ports)
    while pending:
        for p in procs:
            if p.poll() is not None:
                raise SystemExit(f"braid up: a region exited during start-up (code {p.returncode})")
        pending = {p for p in pending if not ping(p)}
        if pending and time.monotonic() > deadline:
            raise SystemExit(f"braid up: regions on ports {sorted(pending)} did not answer within {deadline_s:.0f}s")
        if pending:
            time.sleep(0.05)  # polling interval while waiting for sockets, not synchronisation


def _stop(pids: list[int], grace_s: float = 5.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _reuse_cluster(cluster_file: str, args: argparse.Namespace):
    """Write a new cluster file, or keep the one whose regions' data is in the directory; the
    cluster's configuration, or None (refused).

    The regions keep their append-only files under the data directory, so a second
    ``braid up`` restarts the same cluster (same id, token and settings); a cluster of
    another shape there is refused rather than mixed with it - unless its members were
    changed (``braid up --add-region``, ``braid-admin region remove``): then its
    members of the moment are restarted, whatever ``--regions`` says.
    """
    from .cluster_config import load, local_cluster

    wanted = local_cluster(args.regions, args.base_port)
    if getattr(args, "tls", False):
        with_tls(wanted, os.path.dirname(os.path.abspath(cluster_file)))
    if os.path.exists(cluster_file):
        try:
            held = load(cluster_file)
        except (OSError, ValueError, KeyError) as e:
            print(f"braid up: {cluster_file}: {e}", file=sys.stderr)
            return False
        shape = [(r.name, r.port, r.repl_port, r.config.get("tls-port")) for r in held.regions]
        if shape == [(r.name, r.port, r.repl_port, r.config.get("tls-port")) for r in wanted.regions]:
            print(f"restarting the cluster {held.cluster_id} kept in {os.path.dirname(cluster_file)}")
            return held
        if held.epoch > 1:  # grown or shrunk while it ran: its members are what it is now
            print(f"restarting the cluster {held.cluster_id} kept in {os.path.dirname(cluster_file)} (members "
                  f"changed since it was made: {', '.join(r.name for r in held.live_regions())})")
            return held
        tls = "with" if any(r.config.get("tls-port") for r in held.regions) else "without"
        print(f"braid up: {os.path.dirname(cluster_file)} holds another cluster ({len(held.regions)} regions from "
              f"port {held.regions[0].port if held.regions else '?'}, {tls} TLS): give another --data-dir or "
              f"remove it", file=sys.stderr)
        return None
    wanted.save(cluster_file)
    return wanted


TLS_DIR = "tls"  # under the data directory: the cluster CA and every certificate (braid up --tls)
TLS_PORT_OFFSET = 200  # a region's TLS client port: its plain port + 200


def tls_region_config(name: str, port: int) -> dict[str, str | int]:
    """A region's client-port TLS settings as ``braid up --tls`` writes them (paths relative to the
    data directory).  ``tls-auth-clients optional``: a client certificate is checked when one is
    presented, and ``redis-cli --tls --cacert`` alone also connects."""
    return {"tls-port": port + TLS_PORT_OFFSET, "tls-cert-file": f"{TLS_DIR}/{name}.crt",
            "tls-key-file": f"{TLS_DIR}/{name}.key", "tls-ca-cert-file": f"{TLS_DIR}/ca.crt",
            "tls-auth-clients": "optional"}


def with_tls(cfg, data_dir: str) -> None:
    """TLS everywhere in a local cluster file (kept in ``data_dir``): mutual TLS on the links,
    TLS on each client port."""
    from .cluster_config import LinkTls

    d = os.path.join(data_dir, TLS_DIR)
    cfg.tls = LinkTls(os.path.join(d, "ca.crt"), d, os.path.join(d, "admin.crt"), os.path.join(d, "admin.key"))
    for r in cfg.regions:
        r.config.update(tls_region_config(r.name, r.port))


def tls_connect_line(data_dir: str, port: int) -> str:
    d = os.path.join(data_dir, TLS_DIR)
    return (f"redis-cli --tls --cacert {d}/ca.crt --cert {d}/client.crt --key {d}/client.key "
            f"-p {port + TLS_PORT_OFFSET}")


def up(args: argparse.Namespace) -> int:
    if getattr(args, "add_region", None) is not None:
        return add_region(args)
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    if not 1 <= args.regions <= 15:
        print("braid up: --regions must be between 1 and 15", file=sys.stderr)
        return 2
    cluster_file = None
    names = [f"region-{i}" for i in range(1, args.regions + 1)]
    ports = [args.base_port + i for i in range(len(names))]
    tls = getattr(args, "tls", False)
    cmdline_tls: set[str] = set()  # regions whose TLS settings go on the command line
    if args.regions > 1:
        cluster_file = os.path.join(data_dir, "cluster.toml")
        cfg = _reuse_cluster(cluster_file, args)
        if cfg is None:
            return 1
        live = cfg.live_regions()
        names, ports, tls = [r.name for r in live], [r.port for r in live], cfg.tls is not None
        cmdline_tls = {r.name for r in live if tls and "tls-port" not in r.config}  # added by --add-region
    else:
        cmdline_tls = set(names) if tls else set()
    if tls:
        from .security.certs import create_cluster_certs

        try:  # an existing CA and certificates are kept (a restart, or new regions of the same CA)
            create_cluster_certs(os.path.join(data_dir, TLS_DIR), names)
        except (OSError, ValueError) as e:
            print(f"braid up: cannot make the certificates: {e}", file=sys.stderr)
            return 1
    for port in ports:
        if ping(port):
            print(f"braid up: port {port} is already serving (is a cluster running? try `braid down`)",
                  file=sys.stderr)
            return 1
    procs = []
    for name, port in zip(names, ports):
        rdir = os.path.join(data_dir, name)
        os.makedirs(rdir, exist_ok=True)
        log = open(os.path.join(rdir, "node.log"), "ab")
        extra = ["--config", cluster_file, "--region", name] if cluster_file else []
        if name in cmdline_tls:  # a standalone or added region: its TLS settings on the command line
            for key, value in tls_region_config(name, port).items():
                value = os.path.join(data_dir, value) if key.endswith("-file") else value
                extra += [f"--{key}", str(value)]
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "node", "node", "--port", str(port), "--data-dir", rdir, *extra],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=args.detach))
    try:
        _wait_ready(ports, procs)
    except SystemExit:
        _stop([p.pid for p in procs])
        raise
    title = f"Braid local cluster: {len(names)} region{'s' if len(names) > 1 else ''}"
    table = Table(title=title)
    for col in ("region", "port", "connect with", "log"):
        table.add_column(col)
    for name, port in zip(names, ports):
        table.add_row(name, str(port), f"redis-cli -p {port}", os.path.join(data_dir, name, "node.log"))
    console = Console()
    console.print(table)
    if tls:  # printed whole, never wrapped: each line is a command to copy
        print("TLS client ports (a client certificate is optional: `redis-cli --tls --cacert "
              f"{os.path.join(args.data_dir, TLS_DIR)}/ca.crt -p PORT` connects too):")
        for name, port in zip(names, ports):
            print(f"  {name}: {tls_connect_line(args.data_dir, port)}")
    if args.detach:
        _save_pids(data_dir, {"pids": [p.pid for p in procs], "ports": ports, "names": names})
        console.print(f"detached; stop with: braid down --data-dir {args.data_dir}")
        return 0
    console.print("press Ctrl-C to stop")
    try:
        while all(p.poll() is None for p in procs):
            try:
                procs[0].wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
    except KeyboardInterrupt:
        pass
    finally:
        _stop([p.pid for p in procs])
    console.print("stopped")
    return 0


def _load_pids(data_dir: str) -> dict | None:
    """The detached cluster's record: ``pids``, ``ports`` and ``names`` (one per region, in order)."""
    try:
        with open(os.path.join(data_dir, PIDFILE)) as f:
            info = json.load(f)
    except FileNotFoundError:
        return None
    info.setdefault("names", [f"region-{i}" for i in range(1, len(info["pids"]) + 1)])  # recorded before names were
    return info


def _save_pids(data_dir: str, info: dict) -> None:
    path = os.path.join(data_dir, PIDFILE)
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)


def _next_region_name(cfg) -> str:
    used = {r.name for r in cfg.regions}
    n = len(cfg.regions) + 1
    while f"region-{n}" in used:
        n += 1
    return f"region-{n}"


def add_region(args: argparse.Namespace) -> int:
    """``braid up --add-region [NAME]``: grow the detached cluster in ``--data-dir`` by one region."""
    import contextlib
    import io

    from . import admin_cli
    from .cluster_config import load

    data_dir = os.path.abspath(args.data_dir)
    cluster_file = os.path.join(data_dir, "cluster.toml")
    info = _load_pids(data_dir)
    if info is None or not os.path.exists(cluster_file):
        print(f"braid up: no detached cluster in {args.data_dir} to add a region to (start one with "
              f"`braid up --detach --data-dir {args.data_dir}`)", file=sys.stderr)
        return 1
    try:
        cfg = load(cluster_file)
    except (OSError, ValueError, KeyError) as e:
        print(f"braid up: {cluster_file}: {e}", file=sys.stderr)
        return 1
    name = args.add_region or _next_region_name(cfg)
    if any(r.name == name and r.live for r in cfg.regions):
        print(f"braid up: {name} is already a member of this cluster", file=sys.stderr)
        return 1
    # the next ports after every region the file ever listed (a removed region's may still be in use)
    port = max(r.port for r in cfg.regions) + 1
    repl_port = max(max(r.repl_port for r in cfg.regions) + 1, port + 100)
    for p in (port, repl_port, port + TLS_PORT_OFFSET if cfg.tls else port):
        if ping(p) or not _port_free(p):
            print(f"braid up: port {p} is in use: the new region needs it", file=sys.stderr)
            return 1
    extra: list[str] = []
    if cfg.tls is not None:
        from .security.certs import create_cluster_certs

        try:  # signed by the CA the cluster already trusts (it is kept)
            create_cluster_certs(os.path.join(data_dir, TLS_DIR), [name])
        except (OSError, ValueError) as e:
            print(f"braid up: cannot make the certificate of {name}: {e}", file=sys.stderr)
            return 1
        for key, value in tls_region_config(name, port).items():  # its client-port TLS, as the others have
            extra += [f"--{key}", os.path.join(data_dir, value) if key.endswith("-file") else str(value)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = admin_cli.main(["--cluster", cluster_file, "region", "add", name, "--host", "127.0.0.1",
                               "--port", str(port), "--repl-port", str(repl_port)])
    if code != 0:
        print(f"braid up: adding {name} failed: {err.getvalue().strip() or out.getvalue().strip()}", file=sys.stderr)
        return 1
    number = load(cluster_file).region(name).number
    rdir = os.path.join(data_dir, name)
    if os.path.isdir(rdir):  # a region of that name was here before (removed, then purged): start afresh
        import shutil

        shutil.rmtree(rdir)
    os.makedirs(rdir)
    log_path = os.path.join(rdir, "node.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "node", "node", "--port", str(port), "--data-dir", rdir,
             "--config", cluster_file, "--region", name, *extra],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    info = _load_pids(data_dir) or info
    info["pids"].append(proc.pid)
    info["ports"].append(port)
    info["names"].append(name)
    _save_pids(data_dir, info)
    try:
        _wait_ready([port], [proc])
    except SystemExit as e:
        print(f"{e} (see {log_path}; {name} stays a member: braid-admin --cluster {cluster_file} "
              f"region remove {name} --force)", file=sys.stderr)
        return 1
    console = Console()
    table = Table(title=f"{name} joined the cluster as region {number}")
    for col in ("region", "port", "connect with", "log"):
        table.add_column(col)
    table.add_row(name, str(port), f"redis-cli -p {port}", log_path)
    console.print(table)
    if cfg.tls is not None:
        print(f"  TLS: {tls_connect_line(args.data_dir, port)}")
    # printed whole, never wrapped: each line holds a command to copy
    print("It serves reads now and takes writes once it has caught up with its peers (until then writes "
          f"answer LOADING). Progress:\n  braid-admin --cluster {cluster_file} status\nTo remove it:\n"
          f"  braid-admin --cluster {cluster_file} region remove {name}\n"
          f"  braid down --region {name} --data-dir {args.data_dir}")
    return 0


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def down(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    info = _load_pids(data_dir)
    if info is None:
        print(f"braid down: no detached cluster recorded in {args.data_dir}", file=sys.stderr)
        return 1
    name = getattr(args, "region", None)
    if name is None:
        _stop(info["pids"])
        os.remove(os.path.join(data_dir, PIDFILE))
        print("stopped")
        return 0
    if name not in info["names"]:
        print(f"braid down: no region named {name!r} runs in {args.data_dir} "
              f"(running: {', '.join(info['names']) or 'none'})", file=sys.stderr)
        return 1
    i = info["names"].index(name)
    _stop([info["pids"][i]])
    for field in ("pids", "ports", "names"):
        del info[field][i]
    _save_pids(data_dir, info)
    print(f"stopped {name}")
    _warn_if_member(data_dir, name)
    return 0


def _warn_if_member(data_dir: str, name: str) -> None:
    """Stopping a region that is still a member only takes it down: the others wait for it."""
    from .cluster_config import load

    try:
        cfg = load(os.path.join(data_dir, "cluster.toml"))
    except (OSError, ValueError, KeyError):
        return
    if any(r.name == name and r.live for r in cfg.regions):
        print(f"braid down: {name} is still a member of the database (down, not removed): the others keep its "
              f"place; to shrink the cluster run braid-admin --cluster {os.path.join(data_dir, 'cluster.toml')} "
              f"region remove {name} [--force]", file=sys.stderr)
