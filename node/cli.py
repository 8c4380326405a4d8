"""The ``braid`` command line: ``braid node`` runs one region, ``braid up`` a local cluster."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import sys
import threading
import time

from .cluster import down, restart, up
from .cluster_config import load
from .config import FSYNC_POLICIES, Config, ConfigError
from .persistence import rdb, snapshot
from .persistence.aof import examine, fsync_directory, plan_salvage, salvage
from .persistence.legacy import convert
from .persistence.oplog import mark_for_recovery, read_run_mark
from .persistence.promise import PromiseFileError
from .persistence.rdbfile import MAX_RDB_VERSION, REDIS_RDB_VERSIONS, STREAM_TYPES, RdbFileError, RdbFileReader, \
    RdbFileWriter, restore_payload, split_dump_payload, stream_type_for
from .persistence.replay import LoadError
from .persistence.snapshot import SnapshotError, list_snapshots
from .security.acl import AclFileError
from .security.certs import create_cluster_certs
from .security.tls import TlsConfigError
from .server import Server, run_server
from .supervision import EXIT_FAIL_STOP, oom_detail, ran_out_of_memory, release_memory_reserve, reserve_memory
from .transport.tls import TlsConfigError as LinkTlsError

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
    cluster = None
    if args.config:
        try:
            ccfg = load(args.config)
            me = ccfg.region(args.region or "")
        except (OSError, ValueError, KeyError) as e:
            print(f"braid node: {e}", file=sys.stderr)
            return 2
        cluster = (ccfg, me)
        args.port = me.port
        args.bind = args.bind or me.host  # a container binds 0.0.0.0 but is reached by its name
        if args.data_dir is None:  # the cluster file says where this region's data is
            args.data_dir = ccfg.region_data_dir(me)
    args.data_dir = args.data_dir or "./data"
    os.makedirs(args.data_dir, exist_ok=True)
    args.bind = args.bind or "127.0.0.1"
    cfg = Config(port=args.port, bind=args.bind, dir=os.path.abspath(args.data_dir))
    if cluster:  # the database's memory limit ([regions.config] may set another for one region)
        cfg.set("maxmemory", cluster[0].maxmemory)
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
    importer = _node_import(args, cfg) if args.import_rdb else None
    if isinstance(importer, int):
        return importer
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
    if importer is not None:
        importer.start()

    reserve_memory()  # given back when memory runs out, so that the fail-stop can log and close (supervision.py)
    try:
        status = asyncio.run(run_server(server, args.bind, int(cfg["port"]) or None))
    except Exception as e:
        if ran_out_of_memory(e):  # (a LoadError or OSError may say so too)
            return _ran_out_of_memory(server, e)
        if isinstance(e, LoadError):
            print(f"braid: {e}", file=sys.stderr)
            return 1
        if not isinstance(e, OSError):
            raise
        what = e.strerror or str(e)
        where = (f" on {args.bind}" if what.startswith(("tls-port", "metrics-port")) else "" if what.startswith("port 0")
                 else f" on {args.bind}:{args.port}")
        print(f"braid: cannot listen{where}: {what}", file=sys.stderr)
        return 1
    if server.failed is not None:
        print(f"braid: region {server.region} fail-stopped: {server.failed}; restart it (it replays its "
              f"append-only file and catches up from its peers)", file=sys.stderr)
    return status


def _ran_out_of_memory(server: Server, e: BaseException) -> int:
    """A region whose memory ran out in something that did not fail-stop it itself (loading its
    data, stopping after a fail-stop): said in its log; exit status 1 while it loaded its data
    (the data is fine: it needs more memory), else EXIT_FAIL_STOP (node/supervision.py)."""
    release_memory_reserve()  # first: what follows allocates
    loading = server.failed is None and bool(server.config["appendonly"]) and server.oplog is None
    doing = "loading the append-only file" if loading else "serving" if server.failed is None else "stopping"
    logging.getLogger("braid.server").critical("region %d ran out of memory while %s: %s", server.region, doing,
                                               oom_detail(e), exc_info=e)
    if loading:
        print(f"braid: out of memory while loading the append-only file in {server.config['dir']} (the file "
              "is not damaged: loading it needs more memory); start the region again with more", file=sys.stderr)
        return 1
    print(f"braid: region {server.region} fail-stopped: {server.failed or f'out of memory while {doing}'}; restart "
          "it (it replays its append-only file and catches up from its peers)", file=sys.stderr)
    return EXIT_FAIL_STOP


def _node_import(args: argparse.Namespace, cfg: Config):
    """`braid node --import FILE.rdb`: None when the data directory already holds data (a restart: the
    streams were imported before); else the thread that restores the file's streams once the region
    serves, through its own client port (reported on stdout); or an exit status: 2 for an unreadable
    file or no plain port."""
    log_dir = os.path.join(cfg["dir"], cfg["appenddirname"])
    if os.path.isdir(log_dir) and os.listdir(log_dir):
        print(f"braid node: --import {args.import_rdb}: not imported, the data directory holds data already",
              flush=True)
        return None
    if not int(cfg["port"]):
        print("braid node: --import needs the plain client port (--port)", file=sys.stderr)
        return 2
    try:
        job = _Import(args.import_rdb, 0, False)
    except OSError as e:
        print(f"braid node: --import {args.import_rdb}: {e.strerror or e}", file=sys.stderr)
        return 2
    except RdbFileError as e:
        print(f"braid node: --import {args.import_rdb}: not a valid RDB file: {e}", file=sys.stderr)
        return 2
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "*": "127.0.0.1"}.get(args.bind.split()[0], args.bind.split()[0])
    where = (host, int(cfg["port"]))

    def run() -> None:
        import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up

        client_args = argparse.Namespace(user=None, password=cfg["requirepass"] or None, tls=False, timeout=30.0)
        deadline = time.monotonic() + 60
        while True:  # until the region serves (it may be replaying its log first)
            try:
                client = _client(client_args, where)
                break
            except redis.ConnectionError as e:
                if time.monotonic() > deadline:
                    print(f"braid node: --import: the region did not answer: {e}", file=sys.stderr, flush=True)
                    return
                time.sleep(0.1)
            except redis.RedisError as e:
                print(f"braid node: --import: {e}", file=sys.stderr, flush=True)
                return
        try:
            job.restore(client)
        except redis.RedisError as e:
            print(f"braid node: --import: {e} (after {len(job.imported)} streams)", file=sys.stderr, flush=True)
            return
        finally:
            client.close()
        lines = [job.header(), *job.report(f"{where[0]}:{where[1]}"), *job.refusals()]
        print("\n".join(f"braid node: --import: {line}" for line in lines), flush=True)

    return threading.Thread(target=run, name="rdb-import", daemon=True)


def cmd_up(args: argparse.Namespace) -> int:
    return up(args)


def cmd_down(args: argparse.Namespace) -> int:
    return down(args)


def cmd_restart(args: argparse.Namespace) -> int:
    return restart(args)


def cmd_check_log(args: argparse.Namespace) -> int:
    """Check a log directory: its run mark, its segments and its snapshots; ``--fix`` salvages.

    Exit 0: clean, or fixed; 1: a torn tail left (without --fix); 2: damage left (without
    --fix), damage --fix must not cut, or a folder no region can start from even so."""
    directory = args.dir
    if not os.path.isdir(directory):
        print(f"braid check-log: {directory}: no such directory", file=sys.stderr)
        return 2
    mark = read_run_mark(directory)
    print(f"run mark: {_run_mark_meaning(mark)}")
    result = examine(directory, collect=False, closed_cleanly=mark == "clean")
    plan = plan_salvage(result)
    for seg in result.segments:
        last = seg.first_record + seg.records - 1
        span = f"records {seg.first_record}..{last}" if seg.records else "no records"
        damaged = f", then damage at offset {plan.offset}" if plan is not None and plan.path == seg.path else ""
        print(f"{os.path.basename(seg.path)}: {span} ({seg.records} records, {seg.size} bytes{damaged})")
    before = "" if plan is None else " before the damage"
    print(f"{len(result.segments)} segments{before}, last record {result.last_record}")
    status = 0
    if plan is None:
        print("log: clean")
    else:
        where = f"{plan.path} at offset {plan.offset} (record {plan.record})"
        if result.corrupt is None:
            print(f"torn tail: {plan.path} at offset {plan.offset}: {plan.reason} (record {plan.record})")
        else:
            print(f"braid check-log: damage: {where}: {plan.reason}", file=sys.stderr)
        if plan.refused is not None:
            print(f"braid check-log: {plan.refused}; nothing was cut", file=sys.stderr)
            status = 2
        else:
            _say_salvage(plan, done=args.fix)
            if args.fix:
                mark_for_recovery(directory)  # before the cut: a crash part-way still recovers
                salvage(plan)
                print(f"the log now ends at record {plan.record - 1}; run mark set to recover: the region's next "
                      "start treats its log as possibly missing operations its peers hold (a region of a cluster "
                      "takes them back before it takes writes; a standalone region has no peers: what was cut "
                      "is lost)")
            elif result.corrupt is None:
                print("run again with --fix to cut it (a start cuts it too, with aof-load-truncated yes)")
                status = 1
            else:
                print("nothing was changed; run again with --fix to salvage the log")
                status = 2
    bad = []
    for record, path in snapshot.list_snapshots(directory):
        name = os.path.basename(path)
        with open(path, "rb") as f:
            legacy = f.read(len(snapshot.LEGACY_MAGIC)) == snapshot.LEGACY_MAGIC
        if legacy:
            print(f"{name}: the old pickle format (format version 1), which a region does not load; "
                  f"`braid convert-snapshot {path}` converts it")
            continue
        try:
            header = snapshot.read_header(path)
            if header.record != record:
                raise snapshot.SnapshotError(f"the header says the state after record {header.record}, "
                                             f"the name record {record}")
        except (OSError, snapshot.SnapshotError) as e:
            print(f"braid check-log: damaged snapshot {name}: {e}", file=sys.stderr)
            bad.append(path)
            continue
        print(f"{name}: the state after record {record} ({os.path.getsize(path)} bytes): valid")
    for path in bad:
        if args.fix:
            aside = _aside_name(path + ".damaged")
            os.replace(path, aside)
            fsync_directory(directory)
            print(f"moved {os.path.basename(path)} aside to {os.path.basename(aside)}: a start no longer uses it")
        else:
            status = 2
    if bad and not args.fix:
        print(f"{len(bad)} damaged snapshot(s) left in place; --fix moves them aside")
    removed = {p for p, _ in plan.removed} if plan is not None and plan.refused is None else set()
    kept = [seg for seg in result.segments if seg.path not in removed]
    last = plan.record - 1 if plan is not None and plan.refused is None else result.last_record
    snapshots = [(record, path) for record, path in snapshot.list_snapshots(directory) if path not in bad]
    how, unusable = _start_from(snapshots, kept[0].first_record if kept else last + 1, last, bool(bad) and args.fix)
    if unusable is not None:
        print(f"braid check-log: {unusable}", file=sys.stderr)
        return 2
    if plan is not None and plan.refused is None and not args.fix:
        how = f"{'after --fix' if result.corrupt is not None else 'once the torn tail is cut'}, {how}"
    print(how)
    if status == 0:
        print("fixed" if args.fix and (bad or plan is not None) else "clean")
    return status


def _run_mark_meaning(mark: str | None) -> str:
    if mark is None:
        return "none (a new log, or one an older version wrote)"
    if mark == "clean":
        return ("clean (the last run closed cleanly and fsynced everything: a bad last record is damage, "
                "not a torn append)")
    if mark == "recover":
        return ("recover (the next start treats the log as possibly missing operations its peers hold, and a "
                "region of a cluster takes its own back from them before it takes writes)")
    return f"boot {mark} (the last run did not close cleanly; a torn last record is a crash during an append)"


def _say_salvage(plan, done: bool) -> None:
    """What a salvage drops: the bad record's segment from its offset, the files after it."""
    print(f"salvaged: kept every record before record {plan.record}, dropped {plan.dropped_bytes} bytes:" if done
          else f"--fix would keep every record before record {plan.record} and drop {plan.dropped_bytes} bytes:")
    if plan.cut is not None:
        path, offset, size = plan.cut
        print(f"  cut {size} bytes from {path} at offset {offset} "
              "(the first bad record and everything after it in that segment)")
    for path, size in plan.removed:
        print(f"  {'removed' if done else 'remove'} {path} ({size} bytes: the whole file; it follows the damage)")
    least = "" if plan.identified_all else "at least "
    print(f"  {least}{plan.identified} valid record(s) after the bad one could still be identified in what "
          f"{'was' if done else 'would be'} dropped")


def _aside_name(path: str) -> str:
    candidate, n = path, 1
    while os.path.exists(candidate):
        candidate, n = f"{path}.{n}", n + 1
    return candidate


def _start_from(snapshots: list[tuple[int, str]], first: int, last: int, moved: bool) -> tuple[str, str | None]:
    """How a start would load the folder - the log as kept (records ``first..last``), the valid
    ``snapshots`` (newest first) - as node/persistence/replay.py does: ``(how, None)``, or
    ``("", why it cannot)``.  ``moved``: damaged snapshots were moved aside."""
    for record, path in snapshots:
        if record + 1 < first:
            break  # the log no longer holds what follows this one, nor older ones
        name = os.path.basename(path)
        if record > last:
            return "", (f"{name} holds the state after record {record}, past the log's last record {last}: the "
                        "records between are missing, and a region cannot start from this folder; restore it from "
                        "its peers (a full resync) or from a backup")
        return (f"a start loads {name} and replays records {record + 1}..{last}" if last > record
                else f"a start loads {name} (no record after it)"), None
    if first > 1:
        lost = "with the damaged snapshot(s) moved aside no snapshot" if moved else "no valid snapshot"
        return "", (f"the log starts at record {first}: the records before it were compacted into a snapshot and "
                    f"{lost} holds them: the state before record {first} cannot be recovered from this folder; "
                    "restore the region from its peers (a full resync) or from a backup")
    return (f"a start replays the log, records 1..{last}" if last else "a start finds an empty log"), None


def cmd_convert_snapshot(args: argparse.Namespace) -> int:
    """Exit 0: every file converted (or already current); 1: at least one could not be."""
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


# braid import / braid export: streams in and out of RDB files (node/persistence/rdbfile.py)

REPORT_NAMES = 5  # how many key names a report line shows


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), _port(port)


def _client(args: argparse.Namespace, where: tuple[str, int]):
    import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    password = args.password if args.password is not None else os.environ.get("REDISCLI_AUTH")
    # no retries: a RESTORE sent again after a lost reply would be reported as a key already there
    kw = dict(host=where[0], port=where[1], username=args.user, password=password, protocol=2,
              socket_timeout=args.timeout, socket_connect_timeout=args.timeout, retry=Retry(NoBackoff(), 0))
    if args.tls:
        kw.update(ssl=True, ssl_ca_certs=args.cacert, ssl_certfile=args.cert, ssl_keyfile=args.key)
        if args.insecure:
            kw.update(ssl_cert_reqs="none", ssl_check_hostname=False)
    client = redis.Redis(**kw)
    client.ping()  # a wrong address, password or certificate: one clear error before any work
    return client


def _names(keys: list[bytes]) -> str:
    shown = ", ".join(k.decode("utf-8", "backslashreplace") for k in keys[:REPORT_NAMES])
    return shown + (", ..." if len(keys) > REPORT_NAMES else "")


def _client_options(p: argparse.ArgumentParser, role: str) -> None:
    g = p.add_argument_group(f"connecting to the {role} (as redis-cli)")
    g.add_argument("--user", help="the ACL user to authenticate as (default: the default user)")
    g.add_argument("--password", help="the user's password (default: $REDISCLI_AUTH, else none)")
    g.add_argument("--tls", action="store_true", help="connect with TLS (the server's tls-port)")
    g.add_argument("--cacert", metavar="FILE", help="CA bundle to check the server's certificate with "
                                                    "(default: the system's)")
    g.add_argument("--cert", metavar="FILE", help="client certificate to present (tls-auth-clients yes)")
    g.add_argument("--key", metavar="FILE", help="the client certificate's private key")
    g.add_argument("--insecure", action="store_true", help="with --tls: do not check the server's certificate")
    g.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="connect and reply timeout (default 30)")


class _Import:
    """One import: the file's keys sorted into the streams to RESTORE and what is only reported."""

    def __init__(self, path: str, db: int, replace: bool) -> None:
        self.path, self.replace = path, replace
        self.reader = RdbFileReader.open(path)
        self.records = list(self.reader.keys())  # the whole file first: a corrupt one sends nothing
        now_ms = int(time.time() * 1000)
        self.skipped: dict[str, list[bytes]] = {}
        self.other_db: dict[int, list[bytes]] = {}
        self.expired, self.had_ttl, self.to_send = [], [], []
        self.imported, self.existed, self.failed = [], [], []
        for r in self.records:
            if r.rdb_type not in STREAM_TYPES:
                what = f"module value ({r.module_name})" if r.module_name else r.type_name
                self.skipped.setdefault(what, []).append(r.key)
            elif r.db != db:
                self.other_db.setdefault(r.db, []).append(r.key)
            elif r.expire_ms is not None and r.expire_ms <= now_ms:
                self.expired.append(r.key)
            else:
                if r.expire_ms is not None:
                    self.had_ttl.append(r.key)
                self.to_send.append(r)

    def restore(self, client) -> None:
        """RESTORE every stream, a hundred a round trip (a connection error propagates)."""
        extra = ("REPLACE",) if self.replace else ()
        for start in range(0, len(self.to_send), 100):
            batch = self.to_send[start:start + 100]
            pipe = client.pipeline(transaction=False)
            for r in batch:
                pipe.execute_command("RESTORE", r.key, 0, restore_payload(r.rdb_type, r.value, self.reader.version),
                                     *extra)
            for r, reply in zip(batch, pipe.execute(raise_on_error=False)):
                if not isinstance(reply, Exception):
                    self.imported.append(r.key)
                elif str(reply).startswith("Target key name already exists") or "BUSYKEY" in str(reply):
                    self.existed.append(r.key)
                else:
                    self.failed.append((r.key, str(reply)))

    def header(self) -> str:
        made_by = self.reader.aux.get(b"redis-ver", b"").decode("utf-8", "replace")
        return (f"{self.path}: RDB version {self.reader.version}" + (f", written by Redis {made_by}" if made_by else "")
                + f", {len(self.records)} keys")

    def report(self, where: str) -> list[str]:
        lines = [f"imported {len(self.imported)} streams into {where}"]
        if self.existed:
            lines.append(f"already there, not replaced (--replace replaces them): {len(self.existed)}: "
                         f"{_names(self.existed)}")
        if self.had_ttl:
            lines.append(f"had a TTL, imported without it (Braid's keys do not expire): {len(self.had_ttl)}: "
                         f"{_names(self.had_ttl)}")
        if self.expired:
            lines.append(f"expired when the file was written or since, not imported: {len(self.expired)}: "
                         f"{_names(self.expired)}")
        for db, keys in sorted(self.other_db.items()):
            lines.append(f"streams in database {db}, not imported (--db {db} imports them): {len(keys)}: "
                         f"{_names(keys)}")
        for what, keys in sorted(self.skipped.items()):
            lines.append(f"skipped, not streams: {what}: {len(keys)}: {_names(keys)}")
        if self.reader.functions:
            lines.append(f"skipped: {self.reader.functions} function libraries")
        if self.reader.module_aux:
            lines.append(f"skipped: module data of {', '.join(sorted(set(self.reader.module_aux)))}")
        return lines

    def refusals(self) -> list[str]:
        lines = [f"refused: {key.decode('utf-8', 'backslashreplace')}: {reason}"
                 for key, reason in self.failed[:REPORT_NAMES]]
        return lines + ([f"the server refused {len(self.failed)} streams"] if self.failed else [])


def cmd_import(args: argparse.Namespace) -> int:
    """Exit 0: every stream of the database was restored (or reported as already there, expired...);
    1: the server could not be reached or refused a stream; 2: the file is unreadable or not a valid RDB."""
    import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up

    try:
        job = _Import(args.file, args.db, args.replace)
    except OSError as e:
        print(f"braid import: {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    except RdbFileError as e:
        print(f"braid import: {args.file}: not a valid RDB file: {e} (nothing was imported)", file=sys.stderr)
        return 2
    print(job.header())
    where = f"{args.into[0]}:{args.into[1]}"
    try:
        client = _client(args, args.into)
    except redis.RedisError as e:
        print(f"braid import: {where}: {e}", file=sys.stderr)
        return 1
    try:
        job.restore(client)
    except redis.RedisError as e:
        print(f"braid import: {where}: {e} (after {len(job.imported)} streams)", file=sys.stderr)
        return 1
    finally:
        client.close()
    print("\n".join(job.report(where)))
    for line in job.refusals():
        print(f"braid import: {line}", file=sys.stderr)
    return 1 if job.failed else 0


def cmd_export(args: argparse.Namespace) -> int:
    """Exit 0: the file is written; 1: the server could not be reached or a stream could not be
    written in the asked version; 2: the file could not be written."""
    import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up

    version = args.rdb_version if args.rdb_version is not None else REDIS_RDB_VERSIONS.get(args.for_redis)
    if version is not None:
        try:
            stream_type_for(version)
            if version > MAX_RDB_VERSION:
                raise ValueError(f"RDB version {version} is newer than this build writes ({MAX_RDB_VERSION})")
        except ValueError as e:
            print(f"braid export: {e}", file=sys.stderr)
            return 2
    where = f"{args.source[0]}:{args.source[1]}"
    try:
        client = _client(args, args.source)
    except redis.RedisError as e:
        print(f"braid export: {where}: {e}", file=sys.stderr)
        return 1
    try:
        return _export(args, client, version, where)
    finally:
        client.close()


def _export(args: argparse.Namespace, client, version: int | None, where: str) -> int:
    import redis  # redis-py: only the client subcommands need it, not `braid node`'s start-up

    try:
        names = sorted(set(client.scan_iter(count=1000, _type="stream")))  # SCAN may return a key twice
        made_by = client.info("server").get("redis_version", "")
    except redis.RedisError as e:
        print(f"braid export: {where}: {e}", file=sys.stderr)
        return 1
    directory = os.path.dirname(os.path.abspath(args.file))
    tmp = os.path.join(directory, f".{os.path.basename(args.file)}.tmp-{os.getpid()}")
    written = vanished = 0
    try:
        with open(tmp, "wb") as out:
            writer = None
            for name, payload in _dumps(client, names):
                if payload is None:  # deleted since the SCAN
                    vanished += 1
                    continue
                try:
                    rdb_type, value, dump_version = split_dump_payload(payload)
                    if rdb_type not in STREAM_TYPES:
                        raise ValueError(f"DUMP answered a value of RDB type {rdb_type}, not a stream")
                except ValueError as e:
                    raise _ExportError(f"{name.decode('utf-8', 'backslashreplace')}: {e}") from None
                if writer is None:  # the first DUMP's version, unless one was asked for
                    writer = _export_writer(out, version or dump_version, made_by, len(names))
                if rdb_type > stream_type_for(writer.version):
                    value = _reencode(name, rdb_type, value, stream_type_for(writer.version))
                    rdb_type = stream_type_for(writer.version)
                writer.key(name, rdb_type, value)
                written += 1
            if writer is None:
                writer = _export_writer(out, version or MAX_RDB_VERSION, made_by, 0)
            writer.end()
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, args.file)
    except (redis.RedisError, _ExportError) as e:
        _remove(tmp)
        print(f"braid export: {where}: {e} (nothing was written to {args.file})", file=sys.stderr)
        return 1
    except OSError as e:
        _remove(tmp)
        print(f"braid export: {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"exported {written} streams from {where} to {args.file} (RDB version {writer.version})")
    if vanished:
        print(f"{vanished} streams were deleted during the export")
    return 0


class _ExportError(Exception):
    pass


def _dumps(client, names: list[bytes]):
    """(name, DUMP payload or None) for each name, a hundred DUMPs a round trip."""
    for start in range(0, len(names), 100):
        batch = names[start:start + 100]
        pipe = client.pipeline(transaction=False)
        for name in batch:
            pipe.dump(name)
        yield from zip(batch, pipe.execute())


def _export_writer(out, version: int, made_by: str, keys: int):
    writer = RdbFileWriter(out, version)
    writer.begin({"redis-ver": made_by or "0.0.0", "redis-bits": 64, "ctime": int(time.time()), "used-mem": 0,
                  "aof-base": 0})
    writer.select_db(0, keys)
    return writer


def _reencode(name: bytes, rdb_type: int, value: bytes, target: int) -> bytes:
    """A stream value in an older encoding (what an older Redis loads), through Braid's stream codec."""
    try:
        stream = rdb.read_stream_value(rdb.Reader(value), rdb_type)
        return rdb.write_stream_value(stream, target)
    except ValueError as e:
        raise _ExportError(f"{name.decode('utf-8', 'backslashreplace')}: cannot re-encode it: {e}") from None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# braid export --for-redis: the releases rdbfile.REDIS_RDB_VERSIONS maps to an RDB version (spelled out here so
# that the command line does not load the RDB codec)
FOR_REDIS = ("5.0", "6.0", "6.2", "7.0", "7.2", "7.4", "8.0", "8.2", "8.4", "8.6", "8.8", "8.10")


def add_rdb_commands(sub) -> None:
    """Register `braid import` and `braid export` on ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser("import", help="load the streams of a Redis RDB file into a server (RESTORE)",
                       description="Read a Redis RDB file (written by Redis 5 to 8.10) and RESTORE each of its streams "
                                   "into the server at --into, as DUMP/RESTORE would carry them (entries, consumer "
                                   "groups, pending entries, consumers, idempotent-producer state, NACKed entries). "
                                   "Keys of other types, streams of other databases and expired streams are skipped and "
                                   "reported. In an Active-Active database each RESTORE replicates to every region.",
                       epilog="exit status: 0 when every stream was imported or reported (already there, expired, "
                              "another database); 1 when the server could not be reached or refused a stream; 2 when "
                              "the file cannot be read or is not a valid RDB file (the offset and the reason are "
                              "printed; nothing is imported)")
    p.add_argument("file", metavar="FILE.rdb", help="the RDB file (e.g. a Redis's dump.rdb after SAVE)")
    p.add_argument("--into", type=_host_port, required=True, metavar="HOST:PORT",
                   help="the server to restore the streams into (a Braid region's client port)")
    p.add_argument("--replace", action="store_true",
                   help="replace streams that already exist (RESTORE ... REPLACE); without it they are kept and "
                        "reported")
    p.add_argument("--db", type=int, default=0, metavar="N",
                   help="import the streams of database N of the file (default 0)")
    _client_options(p, "server at --into")
    p.set_defaults(fn=cmd_import)

    p = sub.add_parser("export", help="write the streams of a server to an RDB file that redis-server loads",
                       description="SCAN the streams of the server at --from, DUMP each and write them as database "
                                   "0 of an RDB file. The file is written beside FILE and renamed over it when "
                                   "complete. Each stream is as of its own DUMP: streams written during the export "
                                   "may or may not be in the file.",
                       epilog="exit status: 0 when the file is written; 1 when the server could not be reached or a "
                              "stream could not be written in the asked RDB version; 2 when the file cannot be "
                              "written")
    p.add_argument("file", metavar="FILE.rdb", help="the RDB file to write (replaced when complete)")
    p.add_argument("--from", dest="source", type=_host_port, required=True, metavar="HOST:PORT",
                   help="the server whose streams to export (a Braid region's client port)")
    versions = p.add_mutually_exclusive_group()
    versions.add_argument("--rdb-version", type=int, metavar="N",
                         help="the file's RDB version, 9 to 15 (default: the version of the server's DUMP payloads); "
                              "streams are re-encoded in the newest encoding that version carries")
    versions.add_argument("--for-redis", choices=FOR_REDIS, metavar="VERSION",
                         help=f"write the RDB version this Redis release loads ({', '.join(FOR_REDIS)}; "
                              f"7.0: version 10, 8.6: 13, 8.8: 14, 8.10: 15)")
    _client_options(p, "server at --from")
    p.set_defaults(fn=cmd_export)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="braid", description="Braid: an Active-Active stream database")
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
    p.add_argument("--metrics-port", type=_port, metavar="PORT",
                   help="serve Prometheus metrics at http://BIND:PORT/metrics (default: the cluster file's "
                        "[regions.config] metrics-port, else 0: off)")
    p.add_argument("--config", help="cluster file (see deploy/cluster.example.toml)")
    p.add_argument("--region", help="this region's name in the cluster file")
    p.add_argument("--appendonly", choices=["yes", "no"], default="yes",
                   help="keep the operation log in DATA_DIR/appendonlydir (default yes)")
    p.add_argument("--enable-debug-command", choices=["no", "yes", "local"], default="no",
                   help="allow DEBUG's fault injection (clock skew, slow fsync, full disk), as chaos tests do; "
                        "local: from loopback connections only (default no)")
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
                    "so (exit 0).",
        epilog="ports: region N (1, 2, ...) takes BASE+N-1 for clients (RESP), BASE+100+N-1 for replication "
               "(gRPC) and, with --tls, BASE+200+N-1 for TLS clients; all are checked before anything starts. "
               "Restart one region: braid restart --region NAME; stop: braid down (both with the same --data-dir)")
    p.add_argument("--regions", type=int, default=3,
                   help="how many regions (1-15, default 3); 1 is a standalone region with Redis's own ID rules. "
                        "A data directory that holds a cluster restarts it as it is")
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
                                   "foreground braid up, that braid up starts it again.")
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
    p.add_argument("example", choices=["rides"], help="rides: the Rocket Rides unified log (pipeline/examples/rides.py)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the example's own options (--help lists them)")
    p.set_defaults(fn=cmd_pipeline)

    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
