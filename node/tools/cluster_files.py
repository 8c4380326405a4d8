"""The files a local cluster (``braid up``, node/tools/cluster.py) keeps in its data directory: the
record of its processes (``cluster.pids``), the cluster file it writes or reuses
(``cluster.toml``), the TLS and metrics settings ``braid up --tls`` / ``--metrics`` write into it,
and the mark ``braid restart`` leaves for a foreground ``braid up`` (``NAME.restart``).

The record holds ``pids``, ``ports`` and ``names`` (one per region, in order); in the
foreground also ``supervisor``, braid up's pid, and ``supervised``, the regions it restarts.
It is only a hint: which processes are the cluster's is read from the processes themselves
(node/tools/cluster_processes.py).  It is written whole to a temporary file, then renamed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from node.activeactive.cluster_config import LOCAL_SHARD_PORT_STEP, LinkTls, load, local_cluster

PIDFILE = "cluster.pids"
CLUSTER_FILE = "cluster.toml"
RESTART_MARK = "{}.restart"  # braid restart's word to the foreground braid up: that region's stop is asked for


def ask_restart(data_dir: str, name: str, pids: list[int]) -> None:
    """Tell the foreground braid up that region ``name``'s processes ``pids`` are stopped to be
    restarted: their exit is no crash (the pids tie the mark to them, so a mark left over never
    excuses another process's death)."""
    path = os.path.join(data_dir, RESTART_MARK.format(name))
    with open(path + ".tmp", "w") as f:
        f.write(" ".join(map(str, pids)))
    os.replace(path + ".tmp", path)


def restart_asked(data_dir: str, name: str, pid: int) -> bool:
    """Was process ``pid`` of region ``name`` stopped by ``braid restart``?  The mark is taken away."""
    path = os.path.join(data_dir, RESTART_MARK.format(name))
    try:
        with open(path) as f:
            marked = f.read().strip()
    except OSError:
        return False
    drop_restart_mark(data_dir, name)
    return str(pid) in marked.split()


def drop_restart_mark(data_dir: str, name: str) -> None:
    try:
        os.remove(os.path.join(data_dir, RESTART_MARK.format(name)))
    except FileNotFoundError:
        pass


def unsupervise(data_dir: str, name: str) -> None:
    """The foreground braid up no longer restarts ``name``: braid restart / down treat it as detached."""
    info = load_pids(data_dir)
    if info is not None and name in info.get("supervised", []):
        info["supervised"].remove(name)
        save_pids(data_dir, info)


def record_pid(data_dir: str, name: str, port: int, pid: int) -> None:
    info = load_pids(data_dir) or {"pids": [], "ports": [], "names": []}
    if name in info["names"]:
        info["pids"][info["names"].index(name)] = pid
    else:
        info["pids"].append(pid)
        info["ports"].append(port)
        info["names"].append(name)
    save_pids(data_dir, info)


def recorded_pid(data_dir: str, name: str) -> int | None:
    info = load_pids(data_dir)
    if info is None or name not in info["names"]:
        return None
    return info["pids"][info["names"].index(name)]


def load_pids(data_dir: str) -> dict | None:
    """The cluster's record: ``pids``, ``ports`` and ``names`` (one per region, in order); in the
    foreground also ``supervisor``, braid up's pid, and ``supervised``, the regions it restarts."""
    try:
        with open(os.path.join(data_dir, PIDFILE)) as f:
            info = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    info.setdefault("names", [f"region-{i}" for i in range(1, len(info["pids"]) + 1)])  # recorded before names were
    return info


def save_pids(data_dir: str, info: dict) -> None:
    path = os.path.join(data_dir, PIDFILE)
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)


def drop_from_record(data_dir: str, info: dict, name: str) -> None:
    i = info["names"].index(name)
    for field in ("pids", "ports", "names"):
        del info[field][i]
    save_pids(data_dir, info)


def forget_supervisor_record(data_dir: str) -> None:
    """Remove the foreground braid up's record (only its own)."""
    info = load_pids(data_dir)
    if info is not None and info.get("supervisor") == os.getpid():
        os.remove(os.path.join(data_dir, PIDFILE))


def reuse_cluster(cluster_file: str, args: argparse.Namespace):
    """A new cluster (not written yet: braid up writes it once the ports are known free), or the one
    whose regions' data is in the directory; the cluster's configuration, or None (refused).

    The regions keep their append-only files under the data directory, so a second
    ``braid up`` restarts the same cluster (same id, token and settings); a cluster of
    another shape there is refused rather than mixed with it - unless its members were
    changed (``braid up --add-region``, ``braid-admin region remove``): then its
    members of the moment are restarted, whatever ``--regions`` says.
    """
    data_dir = os.path.dirname(os.path.abspath(cluster_file))
    wanted = local_cluster(args.regions, args.base_port, data_dir, shards=getattr(args, "shards", 1))
    if getattr(args, "tls", False):
        with_tls(wanted, os.path.dirname(os.path.abspath(cluster_file)))
    if os.path.exists(cluster_file):
        try:
            held = load(cluster_file)
        except (OSError, ValueError, KeyError) as e:
            print(f"braid up: {cluster_file}: {e}", file=sys.stderr)
            return None
        if any(r.data_dir is None for r in held.regions):  # a file written before regions named their folder
            for r in held.regions:
                r.data_dir = r.data_dir or os.path.join(data_dir, r.name)
            held.save(cluster_file)
        if held.shards.count != wanted.shards.count:  # (never changed by a membership change)
            print(f"braid up: {os.path.dirname(cluster_file)} holds a cluster of {_shards(held.shards.count)} per "
                  f"region ({cluster_file}), not {wanted.shards.count}: start it with --shards "
                  f"{held.shards.count}, give another --data-dir, or remove the folder to start afresh",
                  file=sys.stderr)
            return None
        shape = [(r.name, r.shard_ports(), r.repl_ports or [r.repl_port], r.config.get("tls-port"))
                 for r in held.regions]
        if shape == [(r.name, r.shard_ports(), r.repl_ports or [r.repl_port], r.config.get("tls-port"))
                     for r in wanted.regions]:
            print(f"restarting the cluster {held.cluster_id} kept in {os.path.dirname(cluster_file)}")
            return held
        if held.epoch > 1 and getattr(args, "tls", False) and held.tls is None:  # never quietly without it
            print(f"braid up: --tls: the cluster in {os.path.dirname(cluster_file)} was made without TLS (plain-text "
                  "links and client ports) and its members changed since, so braid up restarts it as it is: run "
                  "braid up without --tls to start it, or give another --data-dir for a new cluster with TLS",
                  file=sys.stderr)
            return None
        if held.epoch > 1:  # grown or shrunk while it ran: its members are what it is now
            print(f"restarting the cluster {held.cluster_id} kept in {os.path.dirname(cluster_file)} (members "
                  f"changed since it was made: {', '.join(r.name for r in held.live_regions())})")
            return held
        tls = "with" if any(r.config.get("tls-port") for r in held.regions) else "without"
        print(f"braid up: {os.path.dirname(cluster_file)} holds another cluster ({cluster_file}: "
              f"{len(held.regions)} regions from port {held.regions[0].port if held.regions else '?'}, {tls} TLS): "
              f"start it with the same --regions, --base-port and --tls, give another --data-dir, or remove the "
              f"folder to start afresh", file=sys.stderr)
        return None
    return wanted


METRICS_PORT_OFFSET = 300  # braid up --metrics: a region's Prometheus endpoint, its client port + 300


def with_metrics(cfg) -> bool:
    """Metrics on for every member that has none (``metrics-port`` in its ``[regions.config]``: its
    client port + METRICS_PORT_OFFSET, each shard's above its own); whether the file changed."""
    changed = False
    for r in cfg.live_regions():
        if not r.config.get("metrics-port"):
            r.config["metrics-port"] = ([p + METRICS_PORT_OFFSET for p in r.ports] if r.ports
                                        else r.port + METRICS_PORT_OFFSET)
            changed = True
    return changed


def metrics_ports(cfg, name: str) -> list[int]:
    """Region ``name``'s Prometheus ports, one per shard, as its processes read them from the cluster
    file ([]: metrics off)."""
    ports = []
    for k in range(cfg.shards.count):
        view = cfg.shard_view(k)
        port = int(view.shard_settings(view.region(name)).get("metrics-port", 0) or 0)
        if port:
            ports.append(port)
    return ports


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
    d = os.path.join(data_dir, TLS_DIR)
    cfg.tls = LinkTls(os.path.join(d, "ca.crt"), d, os.path.join(d, "admin.crt"), os.path.join(d, "admin.key"))
    for r in cfg.regions:
        r.config.update(tls_region_config(r.name, r.port))
        if r.ports:  # sharded: each shard's TLS port 200 above its own plain one
            r.config["tls-port"] = [p + TLS_PORT_OFFSET for p in r.ports]


def tls_connect_line(data_dir: str, port: int, cluster: bool = False) -> str:
    """``redis-cli`` over TLS to the region (``cluster``: a sharded one, following MOVED) on plain ``port``."""
    d = os.path.join(data_dir, TLS_DIR)
    return (f"redis-cli --tls --cacert {d}/ca.crt --cert {d}/client.crt --key {d}/client.key "
            f"{'-c ' if cluster else ''}-p {port + TLS_PORT_OFFSET}")


def _shards(n: int) -> str:
    return f"{n} shard{'s' if n > 1 else ''}"


def next_region_name(cfg) -> str:
    used = {r.name for r in cfg.regions}
    n = len(cfg.regions) + 1
    while f"region-{n}" in used:
        n += 1
    return f"region-{n}"


def next_region_ports(cfg) -> tuple[list[int], list[int]]:
    """The client and replication ports of a region added to a local cluster, one per shard:
    shard 0's client port one above the highest shard-0 port the file ever listed (a removed
    region's may still be in use), its replication port one above the highest listed and at
    least 100 above it, shard K's ``LOCAL_SHARD_PORT_STEP``·K above those (as ``braid up
    --shards`` lays them out).  ValueError when one of them, or its TLS or metrics port, is a
    port the file already gives a region (too many regions for the shard step)."""
    port = max(r.port for r in cfg.regions) + 1
    repl_port = max(max(r.repl_port for r in cfg.regions) + 1, port + 100)
    steps = [LOCAL_SHARD_PORT_STEP * k for k in range(cfg.shards.count)]
    ports, repl_ports = [port + s for s in steps], [repl_port + s for s in steps]
    listed = {p for r in cfg.regions for p in (*r.shard_ports(), *(r.repl_ports or [r.repl_port]))}
    listed |= {p + offset for r in cfg.regions for p in r.shard_ports()
               for offset in (TLS_PORT_OFFSET, METRICS_PORT_OFFSET)}
    mine = {*ports, *repl_ports, *(p + offset for p in ports for offset in (TLS_PORT_OFFSET, METRICS_PORT_OFFSET))}
    clash = sorted(mine & listed)
    if clash:
        raise ValueError(f"the next region's ports ({', '.join(map(str, ports))} for clients, "
                         f"{', '.join(map(str, repl_ports))} for replication) meet ports of the regions the cluster "
                         f"file lists ({', '.join(map(str, clash))}): add it with ports of your choosing "
                         "(braid-admin region add) and start it with braid node")
    return ports, repl_ports


def added_region_settings(cfg, name: str, metrics: bool) -> bool:
    """The settings of region ``name``, just added to a local cluster, that its processes read
    from the cluster file: its metrics ports when ``metrics`` (each shard's above its own client
    port), and on a sharded database with TLS its client TLS (each shard's TLS port above its own
    plain one; a region of one process takes TLS on its command line instead, as ``braid up``
    gives it).  Whether ``cfg`` changed."""
    r = cfg.region(name)
    before = dict(r.config)
    if metrics:
        r.config["metrics-port"] = [p + METRICS_PORT_OFFSET for p in r.ports] if r.ports \
            else r.port + METRICS_PORT_OFFSET
    if cfg.tls is not None and r.ports:
        r.config.update(tls_region_config(name, r.port))
        r.config["tls-port"] = [p + TLS_PORT_OFFSET for p in r.ports]
    return r.config != before
