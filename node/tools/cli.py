"""The ``braid`` command line: ``braid node`` runs one region, ``braid up`` a local cluster.

This module builds the parser and runs ``braid node``; the other subcommands live where their
work is: node/tools/cluster.py (``up``, ``down``, ``restart``), node/tools/cli_logs.py (``check-log``,
``convert-snapshot``), node/tools/import_export.py (``import``, ``export``), node/tools/cli_args.py (the
argument types they share).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

from node.activeactive.cluster_config import GROUP_LIST_FILE, ClusterConfig, RegionSpec, load, shard_dir
from node.interop.rdbfile import RdbFileError
from node.persistence.promise import PromiseFileError
from node.persistence.replay import LoadError
from node.region.config import FSYNC_POLICIES, Config, ConfigError
from node.region.slots import key_slot
from node.region.supervision import (
    EXIT_FAIL_STOP,
    oom_detail,
    ran_out_of_memory,
    release_memory_reserve,
    reserve_memory,
)
from node.runtime.server import Server, run_server
from node.security.acl import AclFileError
from node.security.certs import create_cluster_certs
from node.security.tls import TlsConfigError
from node.tools.cli_args import local_shards, port_number, shard_number
from node.tools.cli_logs import cmd_check_log, cmd_convert_snapshot
from node.tools.cluster import down, restart, up
from node.tools.import_export import RdbImport, add_rdb_commands, client_for
from node.tools.shards import run_shards
from node.transport.tls import LinkTlsError
from node.version import VERSION_TEXT

# `braid node --tls-port ...`: the client port's TLS settings, by their Redis names
TLS_OPTIONS = ("tls-port", "tls-cert-file", "tls-key-file", "tls-key-file-pass", "tls-ca-cert-file",
               "tls-ca-cert-dir", "tls-auth-clients", "tls-protocols", "tls-ciphers", "tls-ciphersuites",
               "tls-prefer-server-ciphers", "tls-session-caching", "tls-session-cache-size",
               "tls-session-cache-timeout")
TLS_HELP = {  # what each does, and its default (Redis's)
    "tls-port": "serve clients with TLS on this port (default 0: off)",
    "tls-cert-file": "the server certificate, PEM (needed with --tls-port)",
    "tls-key-file": "its private key, PEM (needed with --tls-port)",
    "tls-key-file-pass": "the private key's passphrase (default: none)",
    "tls-ca-cert-file": "CA bundle to check client certificates with (default: none)",
    "tls-ca-cert-dir": "directory of CA certificates to check client certificates with (default: none)",
    "tls-auth-clients": "yes: clients must present a certificate; optional: checked when given; no: not asked "
                        "(default yes)",
    "tls-protocols": "protocols allowed, e.g. \"TLSv1.2 TLSv1.3\" (default: both)",
    "tls-ciphers": "TLSv1.2 cipher list, OpenSSL syntax (default: OpenSSL's)",
    "tls-ciphersuites": "TLSv1.3 cipher suites, OpenSSL syntax (default: OpenSSL's)",
    "tls-prefer-server-ciphers": "yes: the server's cipher order wins (default no)",
    "tls-session-caching": "yes: clients may resume TLS sessions (default yes)",
    "tls-session-cache-size": "TLS sessions kept for resumption (default 20480)",
    "tls-session-cache-timeout": "seconds a cached TLS session stays valid (default 300)",
}


def _shard_port(value: str | int, shard: int) -> str | int:
    """A port option of a sharded region as given (shard 0's): shard K's is K above it (0: off stays off)."""
    try:
        port = int(str(value))
    except ValueError:
        return value  # (the setting's own check says what is wrong with it)
    return port + shard if port else port


def _dest(name: str) -> str:
    return name.replace("-", "_")


def _event_loop_policy() -> None:
    try:
        import uvloop  # optional by platform (not on Windows): imported where it is used, guarded
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def cmd_node(args: argparse.Namespace) -> int:
    # a crash in native code (a segmentation fault, an abort: gRPC's C core aborts when an allocation
    # fails) leaves every thread's Python stack on stderr, which is the region's log
    try:
        faulthandler.enable(all_threads=True)
    except (RuntimeError, ValueError, OSError, AttributeError):
        pass  # no stderr to write to (it is closed): nothing to leave them in
    who = f"braid node [shard-{args.shard}]" if args.shard is not None else "braid node"
    cluster = None
    sharded, shard = False, args.shard or 0
    if args.config:
        try:
            ccfg = load(args.config)
            me = ccfg.region(args.region or "")
        except (OSError, ValueError, KeyError) as e:
            print(f"{who}: {e}", file=sys.stderr)
            return 2
        sharded = ccfg.shards.sharded
        if sharded and args.shard is None:  # the region's supervisor: one child per shard (node/tools/shards.py)
            if args.import_rdb and _a_shard_imports(args, ccfg, me) and \
                    isinstance(_read_import(args.import_rdb, None), int):
                return 2  # (said why) a shard would import an unreadable file: none is started to fail on it
            return run_shards(args, ccfg, me)
        if shard >= ccfg.shards.count:
            print(f"{who}: --shard {shard}: " + (f"the database has {ccfg.shards.count} shards (0-"
                                                  f"{ccfg.shards.count - 1})" if sharded else
                                                  "the database is not sharded (no [shards] in the cluster file): "
                                                  "its only shard is 0"), file=sys.stderr)
            return 2
        ccfg = ccfg.shard_view(shard)  # this shard's ports for every region (the file as loaded, unsharded)
        me = ccfg.region(me.name)
        cluster = (ccfg, me)
        args.port = me.port
        args.bind = args.bind or me.host  # a container binds 0.0.0.0 but is reached by its name
        if args.data_dir is None:  # the cluster file says where this region's data is
            args.data_dir = ccfg.region_data_dir(me)
        if sharded:  # the region's folder holds one per shard
            args.data_dir = shard_dir(args.data_dir or "./data", ccfg.shards, shard)
            # this shard's group agrees its member list on its own: the list it kept is its group's
            ccfg.members_file = os.path.join(os.path.abspath(args.data_dir), GROUP_LIST_FILE)
            try:
                ccfg.load_group_list()
                me = ccfg.region(me.name)
            except (OSError, ValueError) as e:
                print(f"{who}: {e}", file=sys.stderr)
                return 2
            cluster = (ccfg, me)
    elif shard != 0:
        print(f"{who}: --shard {shard}: only a sharded database has more than one shard (--config FILE, whose "
              "[shards] count says how many); a region without one is shard 0", file=sys.stderr)
        return 2
    args.data_dir = args.data_dir or "./data"
    os.makedirs(args.data_dir, exist_ok=True)
    args.bind = args.bind or "127.0.0.1"
    cfg = Config(port=args.port, bind=args.bind, dir=os.path.abspath(args.data_dir))
    if cluster:  # the database's memory limit and fsync policy ([regions.config] may set others for one region)
        cfg.set("maxmemory", cluster[0].maxmemory)
        if cluster[0].appendfsync:
            cfg.set("appendfsync", cluster[0].appendfsync)
        for name, value in cluster[0].shard_settings(cluster[1]).items():
            try:  # the cluster file's [regions.config] (the command line's options come after it)
                cfg.set(name, cfg.parse(name, str(value).encode(), starting=True))
            except ConfigError as e:
                print(f"{who}: {args.config}: region {cluster[1].name}: {name} = {value!r}: {e}",
                      file=sys.stderr)
                return 2
    if args.requirepass:
        cfg.set("requirepass", args.requirepass)
    # the command line's options come after the file, when given
    if args.appendonly is not None:
        cfg.set("appendonly", args.appendonly == "yes")
    if args.enable_debug_command is not None:
        cfg.set("enable-debug-command", args.enable_debug_command)
    if args.appendfsync:
        cfg.set("appendfsync", args.appendfsync)
    given = [(name, getattr(args, _dest(name))) for name in TLS_OPTIONS if getattr(args, _dest(name)) is not None]
    for name, value in given:
        if name == "tls-port" and sharded:  # shard 0's: shard K's is K above it (as in the cluster file)
            value = _shard_port(value, shard)
        try:
            cfg.set(name, cfg.parse(name, str(value).encode(), starting=True))
        except ConfigError as e:
            print(f"{who}: --{name} {value}: {e}", file=sys.stderr)
            return 2
    if args.aclfile:
        cfg.set("aclfile", os.path.abspath(args.aclfile))
    if args.metrics_port is not None:  # sharded: shard K serves its metrics K ports above it
        cfg.set("metrics-port", _shard_port(args.metrics_port, shard) if sharded else args.metrics_port)
    who_short = f"braid [shard-{shard}]" if args.shard is not None else "braid"
    # a shard imports the keys of its own slots (each shard of the region reads the file)
    owners = cluster[0].shards.owners() if sharded and cluster is not None else None
    importer = _node_import(args, cfg, None if owners is None else (lambda key: owners[key_slot(key)] == shard),
                            who) if args.import_rdb else None
    if isinstance(importer, int):
        return importer
    try:
        server = Server(cfg, cluster=cluster)
    except AclFileError as e:  # as Redis: a broken ACL file stops the start, naming the line
        print(f"{who}: aborting startup because of ACL errors: {e}", file=sys.stderr)
        return 1
    except LinkTlsError as e:
        print(f"{who}: TLS between regions: {e}", file=sys.stderr)
        return 1
    except PromiseFileError as e:
        print(f"{who}: {e}", file=sys.stderr)
        return 1
    try:
        server.tls.check()  # a bad certificate or key: a clear error now, not a traceback later
    except TlsConfigError as e:
        print(f"{who}: {e}", file=sys.stderr)
        return 1
    _event_loop_policy()
    if importer is not None:
        importer.start()

    reserve_memory()  # given back when memory runs out, so that the fail-stop can log and close (supervision.py)
    try:
        status = asyncio.run(run_server(server, args.bind, int(cfg["port"]) or None))
    except Exception as e:
        if ran_out_of_memory(e):  # (a LoadError or OSError may say so too)
            return _ran_out_of_memory(server, e, who_short)
        if isinstance(e, LoadError):
            print(f"{who_short}: {e}", file=sys.stderr)
            return 1
        if not isinstance(e, OSError):
            raise
        what = e.strerror or str(e)
        where = (f" on {args.bind}" if what.startswith(("tls-port", "metrics-port"))
                 else "" if what.startswith("port 0") else f" on {args.bind}:{args.port}")
        print(f"{who_short}: cannot listen{where}: {what}", file=sys.stderr)
        return 1
    if server.core.failed is not None:
        print(f"{who_short}: region {server.core.region} fail-stopped: {server.core.failed}; restart it (it replays "
              f"its append-only file and catches up from its peers)", file=sys.stderr)
    return status


def _ran_out_of_memory(server: Server, e: BaseException, who: str = "braid") -> int:
    """A region whose memory ran out in something that did not fail-stop it itself (loading its
    data, stopping after a fail-stop): said in its log; exit status 1 while it loaded its data
    (the data is fine: it needs more memory), else EXIT_FAIL_STOP (node/region/supervision.py)."""
    release_memory_reserve()  # first: what follows allocates
    loading = server.core.failed is None and bool(server.core.config["appendonly"]) and server.core.oplog is None
    doing = "loading the append-only file" if loading else "serving" if server.core.failed is None else "stopping"
    logging.getLogger("braid.server").critical("region %d ran out of memory while %s: %s", server.core.region, doing,
                                               oom_detail(e), exc_info=e)
    if loading:
        print(f"{who}: out of memory while loading the append-only file in {server.core.config['dir']} (the file "
              "is not damaged: loading it needs more memory); start the region again with more", file=sys.stderr)
        return 1
    why = server.core.failed or f"out of memory while {doing}"
    print(f"{who}: region {server.core.region} fail-stopped: {why}; restart "
          "it (it replays its append-only file and catches up from its peers)", file=sys.stderr)
    return EXIT_FAIL_STOP


def _a_shard_imports(args: argparse.Namespace, ccfg: ClusterConfig, me: RegionSpec) -> bool:
    """Will a shard of this region run ``--import`` (its append-only folder holds nothing yet)?"""
    region_dir = os.path.abspath(args.data_dir or ccfg.region_data_dir(me) or "./data")
    logs = str(ccfg.shard_settings(me).get("appenddirname", "appendonlydir"))
    return any(not _holds_data(os.path.join(shard_dir(region_dir, ccfg.shards, k), logs))
               for k in range(ccfg.shards.count))


def _holds_data(log_dir: str) -> bool:
    """Does a region's (or shard's) append-only folder hold anything (then it never imports)?"""
    return os.path.isdir(log_dir) and bool(os.listdir(log_dir))


def _read_import(path: str, mine: Callable[[bytes], bool] | None, who: str = "braid node") -> RdbImport | int:
    """The file ``braid node --import`` names, read whole; or exit status 2, having said why not."""
    try:
        return RdbImport(path, 0, False, mine)
    except OSError as e:
        print(f"{who}: --import {path}: {e.strerror or e}", file=sys.stderr)
    except RdbFileError as e:
        print(f"{who}: --import {path}: not a valid RDB file: {e}", file=sys.stderr)
    return 2


def _node_import(args: argparse.Namespace, cfg: Config, mine: Callable[[bytes], bool] | None = None,
                 who: str = "braid node"):
    """`braid node --import FILE.rdb`: None when the data directory already holds data (a restart: the
    streams were imported before); else the thread that restores the file's streams once the region
    serves, through its own client port (reported on stdout); or an exit status: 2 for an unreadable
    file or no plain port."""
    if _holds_data(os.path.join(cfg["dir"], cfg["appenddirname"])):
        print(f"{who}: --import {args.import_rdb}: not imported, the data directory holds data already",
              flush=True)
        return None
    if not int(cfg["port"]):
        print(f"{who}: --import needs the plain client port (--port)", file=sys.stderr)
        return 2
    job = _read_import(args.import_rdb, mine, who)
    if isinstance(job, int):
        return job
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "*": "127.0.0.1"}.get(args.bind.split()[0], args.bind.split()[0])
    where = (host, int(cfg["port"]))

    def run() -> None:
        import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up

        client_args = argparse.Namespace(user=None, password=cfg["requirepass"] or None, tls=False, timeout=30.0)
        deadline = time.monotonic() + 60
        while True:  # until the region serves (it may be replaying its log first)
            try:
                client = client_for(client_args, where, follow_cluster=False)  # (its own keys only)
                break
            except redis.ConnectionError as e:
                if time.monotonic() > deadline:
                    print(f"{who}: --import: the region did not answer: {e}", file=sys.stderr, flush=True)
                    return
                time.sleep(0.1)
            except redis.RedisError as e:
                print(f"{who}: --import: {e}", file=sys.stderr, flush=True)
                return
        said_waiting = False
        try:
            while True:
                try:
                    job.restore(client)
                    break
                except redis.BusyLoadingError as e:  # LOADING: it takes writes once it caught up with its peers
                    if not said_waiting:
                        print(f"{who}: --import: waiting until the region takes writes ({e})", flush=True)
                        said_waiting = True
                    time.sleep(0.2)  # asking the region again; it does not say when it will take writes
        except redis.RedisError as e:
            print(f"{who}: --import: {e} (after {len(job.imported)} streams)", file=sys.stderr, flush=True)
            return
        finally:
            client.close()
        lines = [job.header(), *job.report(f"{where[0]}:{where[1]}"), *job.refusals()]
        print("\n".join(f"{who}: --import: {line}" for line in lines), flush=True)

    return threading.Thread(target=run, name="rdb-import", daemon=True)


def cmd_up(args: argparse.Namespace) -> int:
    return up(args)


def cmd_down(args: argparse.Namespace) -> int:
    return down(args)


def cmd_restart(args: argparse.Namespace) -> int:
    return restart(args)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from pipeline.examples import rides  # Spark is an optional dependency: only this command needs it

    return rides.main(args.args)


def cmd_certs(args: argparse.Namespace) -> int:
    regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    try:
        made = create_cluster_certs(args.dir, regions, hosts=hosts, days=args.days, force=args.force)
    except (ValueError, OSError) as e:
        print(f"braid certs: {e}", file=sys.stderr)
        return 2
    print(f"cluster CA: {made.ca}")
    for name, (crt, key) in made.regions.items():
        print(f"{name}: {crt} {key}")
    print(f"braid-admin: {made.admin[0]} {made.admin[1]}")
    print(f"applications: {made.client[0]} {made.client[1]}")
    return 0



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="braid", description="Braid: an Active-Active stream database")
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    parser.add_argument("--log-level", default="INFO", metavar="LEVEL",
                        help="DEBUG, INFO, WARNING or ERROR: the least severe messages logged (default INFO)")
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("node", help="run one region",
                       epilog="exit status: 0 after SHUTDOWN or a signal; 1 when the region cannot load its "
                              "data or its ACL file, listen, or use its TLS certificate, key or CA bundle; 2 for "
                              "a bad cluster file or region; 70 when the region fail-stopped (its state may be "
                              "wrong, or it ran out of memory; restarting it replays its log)")
    p.add_argument("--port", type=int, default=6380,
                   help="the client (RESP) port (default 6380; with --config, the region's port in the file)")
    p.add_argument("--bind", help="address to listen on (default: the region's host in the cluster file, "
                                  "else 127.0.0.1)")
    p.add_argument("--data-dir", help="where the region keeps its append-only files and snapshots (default: the "
                                      "cluster file's data_dir for the region, else ./data)")
    p.add_argument("--requirepass", default="", help="the default user's password (default: none)")
    p.add_argument("--aclfile", help="users and permissions, one 'user NAME RULES...' line each, as Redis's "
                                     "ACL file (ACL LOAD / ACL SAVE use it); users are per region")
    p.add_argument("--metrics-port", type=port_number, metavar="PORT",
                   help="serve Prometheus metrics at http://BIND:PORT/metrics (default: the cluster file's "
                        "[regions.config] metrics-port, else 0: off); shard K of a sharded region on PORT+K")
    p.add_argument("--config", help="cluster file (see deploy/cluster.example.toml)")
    p.add_argument("--region", help="this region's name in the cluster file")
    p.add_argument("--shard", type=shard_number, metavar="K",
                   help="run shard K of the region only (its ports and DATA_DIR/shard-K/; containers: one shard "
                        "each). Without it, a region of a sharded database ([shards] in the cluster file) runs as "
                        "a supervisor: one braid node --shard K process per shard, each restarted when it exits, "
                        "their log lines tagged shard-K on this process's output")
    p.add_argument("--appendonly", choices=["yes", "no"],
                   help="keep the operation log in DATA_DIR/appendonlydir (default: the cluster file's "
                        "[regions.config] appendonly, else yes)")
    p.add_argument("--enable-debug-command", choices=["no", "yes", "local"],
                   help="allow DEBUG's fault injection (clock skew, slow fsync, full disk), as chaos tests do; "
                        "local: from loopback connections only (default: the cluster file's [regions.config] "
                        "enable-debug-command, else no)")
    p.add_argument("--import", dest="import_rdb", metavar="FILE.rdb",
                   help="on a first start (nothing in the append-only directory yet), restore the streams of this "
                        "Redis RDB file once the region serves, as braid import does (the report goes to stdout); "
                        "an unreadable file stops the start. In an Active-Active database give it to one region: "
                        "the streams replicate")
    p.add_argument("--appendfsync", choices=FSYNC_POLICIES,
                   help="when the log reaches the disk (default: the cluster file's, else everysec)")
    tls = p.add_argument_group("TLS on the client port (Redis's settings; also CONFIG GET/SET and the cluster "
                               "file's [regions.config]); --port 0 turns the plain port off")
    for name in TLS_OPTIONS:
        tls.add_argument(f"--{name}", dest=_dest(name), metavar="VALUE", help=TLS_HELP[name])
    p.set_defaults(fn=cmd_node)

    p = sub.add_parser(
        "up", help="start a local cluster on loopback",
        description="Start a local cluster: one braid node process per region, on loopback, its data and node.log "
                    "in DATA_DIR/region-N/. In the foreground (the default) a region that dies is reported and "
                    "started again, and Ctrl-C stops them all; over a cluster that already runs in DATA_DIR it says "
                    "so (exit 0). With --shards N, each region's braid node runs its N shard processes "
                    "(data in DATA_DIR/region-N/shard-K/).",
        epilog="ports: region N (1, 2, ...) takes BASE+N-1 for clients (RESP), BASE+100+N-1 for replication "
               "(gRPC), with --tls, BASE+200+N-1 for TLS clients and, with --metrics, BASE+300+N-1 for Prometheus; "
               "shard K of it each of these +20*K. All are "
               "checked before anything starts. "
               "Restart one region: braid restart --region NAME; stop: braid down (both with the same --data-dir)")
    p.add_argument("--regions", type=int, default=3,
                   help="how many regions (1-15, default 3); 1 is a standalone region with Redis's own ID rules. "
                        "A data directory that holds a cluster restarts it as it is")
    p.add_argument("--shards", type=local_shards, default=1, metavar="N",
                   help="split each region's keys over N shard processes by hash slot (1-5, default 1: one "
                        "process per region); shard K of a region listens 20*K ports above shard 0 (clients, "
                        "replication and TLS alike). Connect with redis-cli -c or a cluster client")
    p.add_argument("--base-port", type=int, default=7001, metavar="BASE",
                   help="first client port (default 7001: clients on 7001.., replication on 7101.., TLS on 7201..)")
    p.add_argument("--data-dir", default="./data",
                   help="where the cluster file (cluster.toml), the record of its processes (cluster.pids) and each "
                        "region's data and log (region-N/) live (default ./data)")
    p.add_argument("--detach", action="store_true",
                   help="return once the regions serve (they run on; stop them with braid down)")
    p.add_argument("--tls", action="store_true",
                   help="certificates under DATA/tls/, TLS on a client port 200 above each plain one (kept on), "
                        "mutual TLS between regions")
    p.add_argument("--metrics", action="store_true",
                   help="each region serves Prometheus metrics on its client port + 300 (BASE+300..; shard K of it "
                        "+20*K), kept in the cluster file (metrics-port) for its later starts; the URLs are printed")
    p.add_argument("--add-region", nargs="?", const="", metavar="NAME",
                   help="grow the cluster running detached in --data-dir by one region (default name: the next "
                        "region-N; the next free ports after the others): braid-admin region add, then the new "
                        "region starts detached and joins (it takes writes once caught up). Shrink with "
                        "braid-admin region remove NAME, then braid down --region NAME")
    p.set_defaults(fn=cmd_up)

    p = sub.add_parser("down", help="stop the local cluster in --data-dir, however its regions were started",
                       description="Stop every region of the cluster in --data-dir: those braid up started "
                                   "(detached or in the foreground) and those restarted by hand. A process counts "
                                   "as a region of the cluster only when its command line says so (braid node with "
                                   "this cluster file, or a data directory in --data-dir): nothing else is "
                                   "signalled.")
    p.add_argument("--data-dir", default="./data", help="the cluster's data directory (default ./data)")
    p.add_argument("--region", metavar="NAME",
                   help="stop only this region (after braid-admin region remove NAME)")
    p.set_defaults(fn=cmd_down)

    p = sub.add_parser("restart", help="restart one region of the local cluster in --data-dir",
                       description="Stop the region if it runs (only a process that is that region of this "
                                   "cluster), start it again detached, logging to DATA_DIR/NAME/node.log, and wait "
                                   "until it answers. It replays its log and catches up from its peers. Under a "
                                   "foreground braid up, that braid up starts it again at once and keeps watching "
                                   "it (a restart asked for is not counted as a crash).")
    p.add_argument("--region", metavar="NAME", required=True, help="the region's name (region-1, region-2, ...)")
    p.add_argument("--data-dir", default="./data", help="the cluster's data directory (default ./data)")
    p.set_defaults(fn=cmd_restart)

    p = sub.add_parser("check-log", help="check an operation log directory: segments, snapshots, run mark",
                       description="Check the log directory of a stopped region (appendonlydir): every segment's "
                                   "records, every snapshot's checksum and header, the run mark. Exit 0: clean (or "
                                   "fixed), 1: a torn tail left, 2: damage left or a folder no region can start "
                                   "from.")
    p.add_argument("dir", help="the log directory")
    p.add_argument("--fix", action="store_true",
                   help="salvage without asking (as redis-check-aof --fix): keep every record before the first bad "
                        "one and cut the rest (later segments are removed), move damaged snapshots aside "
                        "(NAME.damaged), and mark the log so the next start takes this region's own operations back "
                        "from its peers; a standalone region loses what was cut")
    p.set_defaults(fn=cmd_check_log)

    p = sub.add_parser("convert-snapshot",
                       help="rewrite snapshots of the old pickle format in the current format (your own files only)")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="snapshot files (appendonlydir/snapshot-*.bsnap) or directories holding them; "
                        "each old file is kept as PATH.pickle-backup")
    p.set_defaults(fn=cmd_convert_snapshot)

    p = sub.add_parser("certs", help="make the certificates of a cluster (a CA, one per region, admin, client)")
    csub = p.add_subparsers(dest="certs_cmd", required=True)
    c = csub.add_parser("create", help="make a cluster CA (or reuse DIR's) and sign every certificate with it")
    c.add_argument("--dir", required=True, help="where to write ca.crt, <region>.crt/.key, admin.*, client.*")
    c.add_argument("--regions", required=True, help="comma-separated region names (the names the cluster file uses)")
    c.add_argument("--hosts", default="localhost,127.0.0.1",
                   help="host names and addresses clients use to reach the regions (subjectAltNames; "
                        "default localhost,127.0.0.1)")
    c.add_argument("--days", type=int, default=825, help="validity of the issued certificates (default 825)")
    c.add_argument("--force", action="store_true", help="re-issue certificates that already exist (keeps the CA)")
    c.set_defaults(fn=cmd_certs)

    add_rdb_commands(sub)

    p = sub.add_parser("pipeline", help="run an example Spark job (pip install '.[pipeline]')")
    p.add_argument("example", choices=["rides"],
                   help="rides: the Rocket Rides unified log (pipeline/examples/rides.py)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the example's own options (--help lists them)")
    p.set_defaults(fn=cmd_pipeline)

    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # (a sharded region's supervisor runs it per shard)
    shard = f"shard-{args.shard} " if getattr(args, "shard", None) is not None else ""  # one stream, every shard
    logging.basicConfig(level=args.log_level.upper(), format=f"%(asctime)s {shard}%(name)s %(levelname)s %(message)s")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
