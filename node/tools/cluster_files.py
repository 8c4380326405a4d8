"""The files a local cluster (``braid up``, node/tools/cluster.py) keeps in its data directory: the
record of its processes (``cluster.pids``), the cluster file it writes or reuses
(``cluster.toml``), and the TLS settings ``braid up --tls`` writes into it.

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

from node.activeactive.cluster_config import LinkTls, load, local_cluster

PIDFILE = "cluster.pids"
CLUSTER_FILE = "cluster.toml"


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
    """Write a new cluster file, or keep the one whose regions' data is in the directory; the
    cluster's configuration, or None (refused).

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

