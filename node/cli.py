"""The ``braid`` command line: ``braid node`` runs one region, ``braid up`` a local cluster."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from .config import Config, ConfigError
from .security.tls import TlsConfigError
from .server import Server, run_server

# `braid node --tls-port ...`: the client port's TLS settings, by their Redis names
TLS_OPTIONS = ("tls-port", "tls-cert-file", "tls-key-file", "tls-key-file-pass", "tls-ca-cert-file",
               "tls-ca-cert-dir", "tls-auth-clients", "tls-protocols", "tls-ciphers", "tls-ciphersuites",
               "tls-prefer-server-ciphers", "tls-session-caching", "tls-session-cache-size",
               "tls-session-cache-timeout")


def _dest(name: str) -> str:
    return name.replace("-", "_")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return port


def _event_loop_policy() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def cmd_node(args: argparse.Namespace) -> int:
    cluster = None
    if args.config:
        from .cluster_config import load

        try:
            ccfg = load(args.config)
            me = ccfg.region(args.region or "")
        except (OSError, ValueError, KeyError) as e:
            print(f"braid node: {e}", file=sys.stderr)
            return 2
        cluster = (ccfg, me)
        args.port = me.port
        args.bind = args.bind or me.host  # a container binds 0.0.0.0 but is reached by its name
    os.makedirs(args.data_dir, exist_ok=True)
    args.bind = args.bind or "127.0.0.1"
    cfg = Config(port=args.port, bind=args.bind, dir=os.path.abspath(args.data_dir))
    for name, value in (cluster[0].region_settings(cluster[1]) if cluster else {}).items():
        try:  # the cluster file's [regions.config] (the command line's options come after it)
            cfg.set(name, cfg.parse(name, str(value).encode(), starting=True))
        except ConfigError as e:
            print(f"braid node: {args.config}: region {cluster[1].name}: {name} = {value!r}: {e}", file=sys.stderr)
            return 2
    if args.requirepass:
        cfg.set("requirepass", args.requirepass)
    cfg.set("appendonly", args.appendonly == "yes")
    cfg.set("enable-debug-command", args.enable_debug_command)
    fsync = args.appendfsync or (cluster[0].appendfsync if cluster else None)
    if fsync:
        cfg.set("appendfsync", fsync)
    given = [(name, getattr(args, _dest(name))) for name in TLS_OPTIONS if getattr(args, _dest(name)) is not None]
    for name, value in given:
        try:
            cfg.set(name, cfg.parse(name, str(value).encode(), starting=True))
        except ConfigError as e:
            print(f"braid node: --{name} {value}: {e}", file=sys.stderr)
            return 2
    if args.aclfile:
        cfg.set("aclfile", os.path.abspath(args.aclfile))
    if args.metrics_port is not None:
        cfg.set("metrics-port", args.metrics_port)
    from .persistence.promise import PromiseFileError
    from .security.acl import AclFileError
    from .transport.tls import TlsConfigError as LinkTlsError

    try:
        server = Server(cfg, cluster=cluster)
    except AclFileError as e:  # as Redis: a broken ACL file stops the start, naming the line
        print(f"braid node: aborting startup because of ACL errors: {e}", file=sys.stderr)
        return 1
    except LinkTlsError as e:
        print(f"braid node: TLS between regions: {e}", file=sys.stderr)
        return 1
    except PromiseFileError as e:
        print(f"braid node: {e}", file=sys.stderr)
        return 1
    try:
        server.tls.check()  # a bad certificate or key: a clear error now, not a traceback later
    except TlsConfigError as e:
        print(f"braid node: {e}", file=sys.stderr)
        return 1
    _event_loop_policy()
    from .persistence.replay import LoadError

    try:
        status = asyncio.run(run_server(server, args.bind, int(cfg["port"]) or None))
    except LoadError as e:
        print(f"braid: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        what = e.strerror or str(e)
        where = (f" on {args.bind}" if what.startswith(("tls-port", "metrics-port")) else "" if what.startswith("port 0")
                 else f" on {args.bind}:{args.port}")
        print(f"braid: cannot listen{where}: {what}", file=sys.stderr)
        return 1
    if server.failed is not None:
        print(f"braid: region {server.region} fail-stopped: {server.failed}; restart it (it replays its "
              f"append-only file and catches up from its peers)", file=sys.stderr)
    return status


def cmd_up(args: argparse.Namespace) -> int:
    from .cluster import up
    return up(args)


def cmd_down(args: argparse.Namespace) -> int:
    from .cluster import down
    return down(args)


def cmd_check_log(args: argparse.Namespace) -> int:
    """Exit 0: clean (or torn tail cut with --fix); 1: torn tail left; 2: corrupt, nothing changed."""
    from .persistence.aof import CorruptLog, scan, truncate_torn

    if not os.path.isdir(args.dir):
        print(f"braid check-log: {args.dir}: no such directory", file=sys.stderr)
        return 2
    try:
        result = scan(args.dir, collect=False)
    except CorruptLog as e:
        print(f"braid check-log: {e}", file=sys.stderr)
        print("braid check-log: the damage is not a torn tail; nothing was changed", file=sys.stderr)
        return 2
    for seg in result.segments:
        last = seg.first_record + seg.records - 1
        span = f"records {seg.first_record}..{last}" if seg.records else "no records"
        print(f"{os.path.basename(seg.path)}: {span} ({seg.records} records, {seg.size} bytes)")
    print(f"{len(result.segments)} segments, last record {result.last_record}")
    if result.torn is None:
        print("clean")
        return 0
    path, offset = result.torn
    print(f"torn tail: {path} at offset {offset}: {result.torn_reason}")
    if not args.fix:
        print("run again with --fix to cut it")
        return 1
    cut = truncate_torn(result)
    print(f"cut {cut} bytes from {path} at offset {offset}")
    return 0


def cmd_convert_snapshot(args: argparse.Namespace) -> int:
    """Exit 0: every file converted (or already current); 1: at least one could not be."""
    from .persistence.legacy import convert
    from .persistence.snapshot import SnapshotError, list_snapshots

    paths = []
    for path in args.paths:  # a directory: every snapshot in it
        paths += [p for _r, p in reversed(list_snapshots(path))] if os.path.isdir(path) else [path]
    failed = 0
    for path in paths:
        try:
            done = convert(path)
        except (OSError, SnapshotError) as e:
            print(f"braid convert-snapshot: {path}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            failed += 1
            continue
        if done is None:
            print(f"{path}: already in the current format")
        else:
            print(f"{path}: converted (the old file is kept as {done[1]})")
    return 1 if failed else 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    from pipeline.examples import rides  # Spark is an optional dependency: only this command needs it

    return rides.main(args.args)


def cmd_certs(args: argparse.Namespace) -> int:
    from node.security.certs import create_cluster_certs

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
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("node", help="run one region",
                       epilog="exit status: 0 after SHUTDOWN or a signal; 1 when the region cannot load its "
                              "data or its ACL file, listen, or use its TLS certificate, key or CA bundle; 2 for "
                              "a bad cluster file or region; 70 when the region fail-stopped (its state may be "
                              "wrong; restarting it replays its log)")
    p.add_argument("--port", type=int, default=6380)
    p.add_argument("--bind", help="address to listen on (default: the region's host in the cluster file, "
                                  "else 127.0.0.1)")
    p.add_argument("--data-dir", default="./data")
    p.add_argument("--requirepass", default="", help="the default user's password")
    p.add_argument("--aclfile", help="users and permissions, one 'user NAME RULES...' line each, as Redis's "
                                     "ACL file (ACL LOAD / ACL SAVE use it); users are per region")
    p.add_argument("--metrics-port", type=_port, metavar="PORT",
                   help="serve Prometheus metrics at http://BIND:PORT/metrics (default: the cluster file's "
                        "[regions.config] metrics-port, else 0: off)")
    p.add_argument("--config", help="cluster file (see deploy/cluster.example.toml)")
    p.add_argument("--region", help="this region's name in the cluster file")
    p.add_argument("--appendonly", choices=["yes", "no"], default="yes",
                   help="keep the operation log in DATA_DIR/appendonlydir (default yes)")
    p.add_argument("--enable-debug-command", choices=["no", "yes", "local"], default="no",
                   help="allow DEBUG's fault injection (clock skew, slow fsync, full disk): chaos tests")
    p.add_argument("--appendfsync", choices=["always", "everysec", "no"],
                   help="when the log reaches the disk (default: the cluster file's, else everysec)")
    tls = p.add_argument_group("TLS on the client port (Redis's settings; also CONFIG GET/SET and the cluster "
                               "file's [regions.config]); --port 0 turns the plain port off")
    for name in TLS_OPTIONS:
        tls.add_argument(f"--{name}", dest=_dest(name), metavar="VALUE")
    p.set_defaults(fn=cmd_node)

    p = sub.add_parser("up", help="start a local cluster on loopback")
    p.add_argument("--regions", type=int, default=3)
    p.add_argument("--base-port", type=int, default=7001)
    p.add_argument("--data-dir", default="./data")
    p.add_argument("--detach", action="store_true", help="return once the regions serve")
    p.add_argument("--tls", action="store_true",
                   help="certificates under DATA/tls/, TLS on a client port 200 above each plain one (kept on), "
                        "mutual TLS between regions")
    p.add_argument("--add-region", nargs="?", const="", metavar="NAME",
                   help="grow the cluster running detached in --data-dir by one region (default name: the next "
                        "region-N; the next free ports after the others): braid-admin region add, then the new "
                        "region starts detached and joins (it takes writes once caught up). Shrink with "
                        "braid-admin region remove NAME, then braid down --region NAME")
    p.set_defaults(fn=cmd_up)

    p = sub.add_parser("down", help="stop a cluster started with `braid up --detach`")
    p.add_argument("--data-dir", default="./data")
    p.add_argument("--region", metavar="NAME",
                   help="stop only this region (after braid-admin region remove NAME)")
    p.set_defaults(fn=cmd_down)

    p = sub.add_parser("check-log", help="check an operation log directory (and cut a torn tail)")
    p.add_argument("dir", help="the log directory")
    p.add_argument("--fix", action="store_true", help="cut a torn tail record")
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
                   help="host names and addresses clients use to reach the regions (subjectAltNames)")
    c.add_argument("--days", type=int, default=825, help="validity of the issued certificates (default 825)")
    c.add_argument("--force", action="store_true", help="re-issue certificates that already exist (keeps the CA)")
    c.set_defaults(fn=cmd_certs)

    p = sub.add_parser("pipeline", help="run an example Spark job (pip install '.[pipeline]')")
    p.add_argument("example", choices=["rides"], help="rides: the Rocket Rides unified log (pipeline/examples/rides.py)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the example's own options (--help lists them)")
    p.set_defaults(fn=cmd_pipeline)

    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
