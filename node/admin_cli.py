"""``braid-admin``: administer an Active-Active database, in the style of rladmin.

Point it at the cluster file (``--cluster data/cluster.toml``, the default) or at
any region's gRPC port (``--host`` / ``--port``, with ``--token`` or ``$BRAID_TOKEN``):
the region tells the rest.

    braid-admin status
    braid-admin info db db
    braid-admin tune db db crdt_xadd_id_uniqueness_mode semi-strict
    braid-admin replication pause --region region-2 [--peer region-3]
    braid-admin replication resume --region region-2 [--peer region-3]
    braid-admin sync wait --timeout 30
    braid-admin tls reload --region region-2
    braid-admin flush db db [--timeout 30] [--region region-1]

It speaks the admin service of proto/admin.proto (node/transport/admin.py), which
every region serves on its replication port and guards with the cluster token and,
when the cluster file has a ``[tls]`` table, mutual TLS: braid-admin presents the
admin certificate the file names (``--tls-cert``/``--tls-key``/``--tls-ca`` override
it, and give it with ``--host``/``--port``) and checks that each region's certificate
names that region.
``tune`` changes every region; each region records the setting in its own cluster
file, and braid-admin in the file it was given, so restarts keep it.
``flush`` empties the whole database (as Redis Enterprise's ``crdb-cli crdb flush``):
every region must be reachable; braid-admin reads every region's version vector and
has one region (``--region``, default the first of the cluster file) wait until it
holds all of them, then flush as one observed-remove operation that every region
applies.  So it removes everything acknowledged at any region before the call, where a
FLUSHALL sent to one region removes only what that region had received.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tomllib

from rich.console import Console
from rich.table import Table

from .cluster_config import DB_SETTINGS, ClusterConfig, RegionSpec, load
from .transport.admin import AdminCallError, AdminClient, AdminTls

DEFAULT_CLUSTER = os.path.join("data", "cluster.toml")


class AdminError(Exception):
    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


_TLS_FILES: dict[str, str] = {}  # ca, cert, key: the files braid-admin presents and trusts (empty: plain text)


def _read_tls(paths: dict[str, str]) -> dict[str, bytes]:
    out = {}
    for what, path in paths.items():
        try:
            with open(path, "rb") as f:
                out[what] = f.read()
        except OSError as e:
            raise AdminError(f"cannot read the TLS {what} file {path}: {e.strerror or e}") from None
    return out


def _tls(server_name: str | None) -> AdminTls | None:
    if not _TLS_FILES:
        return None
    pem = _read_tls(_TLS_FILES)
    return AdminTls(pem["ca"], pem["cert"], pem["key"], server_name)


def _client(cfg: ClusterConfig, r: RegionSpec) -> AdminClient:
    return AdminClient(f"{r.host}:{r.repl_port}", cfg.token, tls=_tls(r.name))


def _call(cfg: ClusterConfig, r: RegionSpec, method: str, *args):
    with _client(cfg, r) as c:
        try:
            return getattr(c, method)(*args)
        except AdminCallError as e:
            if e.unreachable:
                raise AdminError(f"region {r.name} at {r.host}:{r.repl_port} is unreachable", True) from None
            raise AdminError(f"region {r.name} refused: {e}") from None


def _use_tls(args, cfg: ClusterConfig | None) -> None:
    """The admin certificate: the cluster file's, each part overridable by an option."""
    _TLS_FILES.clear()
    given = {"ca": args.tls_ca, "cert": args.tls_cert, "key": args.tls_key}
    if cfg is not None and cfg.tls is not None:
        _TLS_FILES.update(ca=cfg.tls.ca, cert=cfg.tls.admin_cert, key=cfg.tls.admin_key)
    elif any(given.values()) and not all(given.values()):
        raise AdminError("mutual TLS needs --tls-ca, --tls-cert and --tls-key together")
    _TLS_FILES.update({k: v for k, v in given.items() if v})


def _cluster(args) -> tuple[ClusterConfig, str | None]:
    if args.host or args.port:
        token = args.token or os.environ.get("BRAID_TOKEN", "")
        address = f"{args.host or '127.0.0.1'}:{args.port or 7101}"
        _use_tls(args, None)
        # the first call checks the region's certificate against the host name dialed
        with AdminClient(address, token, tls=_tls(None)) as c:
            try:
                data = tomllib.loads(c.cluster_toml())
            except AdminCallError as e:
                raise AdminError(f"cannot administer {address}: {e} (is it a region's replication port, "
                                 "and the cluster token given with --token or $BRAID_TOKEN?)") from None
        regions = [RegionSpec(x["name"], x["number"], x["host"], x["port"], x["repl_port"]) for x in data["regions"]]
        return ClusterConfig(data["cluster_id"], data["database"], token, data["stride"], regions,
                             data.get("id_mode", "strict")), None
    path = args.cluster or DEFAULT_CLUSTER
    try:
        cfg = load(path)
        _use_tls(args, cfg)
        return cfg, path
    except FileNotFoundError:
        raise AdminError(f"no cluster file at {path} (give --cluster FILE or --host/--port)") from None
    except (ValueError, KeyError, tomllib.TOMLDecodeError) as e:
        raise AdminError(f"{path}: {e}") from None


def _region(cfg: ClusterConfig, name: str) -> RegionSpec:
    try:
        return cfg.region(name)
    except ValueError as e:
        raise AdminError(str(e)) from None


def _check_db(cfg: ClusterConfig, db: str) -> None:
    if db != cfg.database:
        raise AdminError(f"no database named {db!r} (this cluster's database is {cfg.database!r})")


def _statuses(cfg: ClusterConfig) -> tuple[dict, list[str]]:
    """Status of every reachable region (by name), and a sentence per failure."""
    found, failures = {}, []
    for r in cfg.regions:
        try:
            found[r.name] = _call(cfg, r, "status")
        except AdminError as e:
            failures.append(str(e))
    return found, failures


def _vv(st) -> str:
    return ",".join(f"{o}={n}" for o, n in sorted(st.vv.items())) or "-"


def cmd_status(args, cfg: ClusterConfig, path, console: Console) -> int:
    regions = Table(title=f"cluster {cfg.cluster_id}, database {cfg.database}")
    for col in ("region", "address", "mode", "sync", "version vector", "pending", "keys", "backlog (bytes)",
                "idmp iids", "delete contexts", "stability held by"):
        regions.add_column(col, no_wrap=col in ("region", "address"))
    links = Table(title="links")
    for col in ("region", "peer", "state", "lag (ops)", "lag (ms)", "unstable (ops)"):
        links.add_column(col)
    found, failures = _statuses(cfg)
    for r in cfg.regions:
        st = found.get(r.name)
        if st is None:
            regions.add_row(f"{r.name} ({r.number})", f"{r.host}:{r.port}", "-", "unreachable",
                            *["-"] * 7)
            continue
        regions.add_row(f"{r.name} ({r.number})", st.resp_address, st.id_mode, "paused" if st.paused else "active",
                        _vv(st), str(st.pending), str(st.keys), str(st.backlog_bytes), str(st.idmp_iids_tracked),
                        str(st.delete_contexts), ",".join(st.stability_held_by) or "-")
        for link in st.links:
            up = link.state == "up"
            links.add_row(r.name, link.peer, link.state, str(link.lag_ops) if up else "-",
                          f"{link.lag_ms:.0f}" if up else "-", str(link.unstable_ops))
    console.print(regions)
    console.print(links)
    for failure in failures:
        print(f"braid-admin: {failure}", file=sys.stderr)
    return 1 if failures else 0


def cmd_info(args, cfg: ClusterConfig, path, console: Console) -> int:
    _check_db(cfg, args.db)
    console.print(f"database {cfg.database}: cluster {cfg.cluster_id}, {len(cfg.regions)} regions, "
                  f"crdt_xadd_id_uniqueness_mode {cfg.id_mode}, stride {cfg.stride}")
    found, failures = _statuses(cfg)
    for r in cfg.regions:
        st = found.get(r.name)
        detail = f"{st.keys} keys, {st.id_mode}, version vector {_vv(st)}" if st else "unreachable"
        console.print(f"  {r.name} (number {r.number}) {r.host}:{r.port}: {detail}")
    for failure in failures:
        print(f"braid-admin: {failure}", file=sys.stderr)
    return 1 if failures else 0


def cmd_tune(args, cfg: ClusterConfig, path, console: Console) -> int:
    _check_db(cfg, args.db)
    unreachable = []
    for r in cfg.regions:
        try:
            _call(cfg, r, "tune", args.db, args.setting, args.value)  # the region checks the setting
        except AdminError as e:
            if not e.unreachable:
                raise
            unreachable.append(r.name)
    if path is not None:
        setattr(cfg, DB_SETTINGS[args.setting][0], args.value)
        cfg.save(path)
    if unreachable:
        raise AdminError(f"set on the others, but unreachable: {', '.join(unreachable)} "
                         "(set it again when they are back)")
    console.print(f"{args.setting} is {args.value} on every region")
    return 0


def cmd_replication(args, cfg: ClusterConfig, path, console: Console) -> int:
    r = _region(cfg, args.region)
    if args.peer:
        _region(cfg, args.peer)
    _call(cfg, r, args.action, args.peer or "")
    what = f"the link {r.name} - {args.peer}" if args.peer else f"all links of {r.name}"
    console.print(f"replication {'paused' if args.action == 'pause' else 'resumed'}: {what}")
    return 0


def cmd_sync(args, cfg: ClusterConfig, path, console: Console) -> int:
    deadline = time.monotonic() + args.timeout
    while True:
        found, _ = _statuses(cfg)
        reachable = list(found.values())
        if reachable and len({_vv(st) for st in reachable}) == 1 and all(st.pending == 0 for st in reachable):
            console.print(f"in sync: {len(reachable)} reachable regions hold the same operations")
            return 0
        if time.monotonic() > deadline:
            raise AdminError(f"not in sync after {args.timeout:g}s")
        time.sleep(0.05)  # polling interval of a command-line wait


def cmd_tls(args, cfg: ClusterConfig, path, console: Console) -> int:
    r = _region(cfg, args.region)
    if not _TLS_FILES:
        raise AdminError("this cluster's links are plain text (tls = false): there are no certificates to reload")
    st = _call(cfg, r, "reload_tls")
    console.print(f"{r.name} reloaded its TLS credentials: certificate serial {st.cert_serial} "
                  f"({', '.join(st.cert_names)}), valid until {st.cert_not_after}, "
                  f"{st.ca_certificates} CA(s) trusted; its links handshake again")
    return 0


def cmd_flush(args, cfg: ClusterConfig, path, console: Console) -> int:
    _check_db(cfg, args.db)
    if not args.timeout > 0:
        raise AdminError("--timeout must be a positive number of seconds")
    runner = _region(cfg, args.region) if args.region else cfg.regions[0]
    found, failures = _statuses(cfg)
    if failures:
        raise AdminError("nothing flushed: a flush of the whole database needs every region; "
                         + "; ".join(failures))
    context: dict[int, int] = {}  # every operation acknowledged anywhere so far
    for st in found.values():
        for origin, n in st.vv.items():
            context[origin] = max(context.get(origin, 0), n)
    done = _call(cfg, runner, "flush", args.db, context, args.timeout)
    covered = ",".join(f"{o}={n}" for o, n in sorted(context.items())) or "-"
    console.print(f"database {args.db} flushed at {done.region}: {done.keys_removed} keys removed there, "
                  f"covering every operation acknowledged before the call (version vector {covered}); "
                  f"the flush is at {_vv(done)} and every region removes the same as it applies it "
                  "(writes made meanwhile stay); `braid-admin sync wait` waits for that")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="braid-admin", description="Administer a Braid Active-Active database.")
    ap.add_argument("--cluster", help=f"cluster file (default {DEFAULT_CLUSTER})")
    ap.add_argument("--host", help="a region's host (with --port: its replication port)")
    ap.add_argument("--port", type=int)
    ap.add_argument("--token", help="the cluster token, with --host/--port (default $BRAID_TOKEN)")
    ap.add_argument("--tls-ca", help="CA bundle to check regions' certificates with (default: the cluster file's)")
    ap.add_argument("--tls-cert", help="certificate braid-admin presents (default: the cluster file's admin_cert)")
    ap.add_argument("--tls-key", help="its key (default: the cluster file's admin_key)")
    sub = ap.add_subparsers(dest="verb", required=True)
    sub.add_parser("status", help="regions, links, version vectors").set_defaults(fn=cmd_status)
    p = sub.add_parser("info", help="info db <db>")
    p.add_argument("what", choices=["db"])
    p.add_argument("db")
    p.set_defaults(fn=cmd_info)
    p = sub.add_parser("tune", help="tune db <db> crdt_xadd_id_uniqueness_mode|appendfsync <value>")
    p.add_argument("what", choices=["db"])
    p.add_argument("db")
    p.add_argument("setting")
    p.add_argument("value")
    p.set_defaults(fn=cmd_tune)
    p = sub.add_parser("replication", help="replication pause|resume --region NAME [--peer NAME]")
    p.add_argument("action", choices=["pause", "resume"])
    p.add_argument("--region", required=True)
    p.add_argument("--peer", help="only the link between --region and this region")
    p.set_defaults(fn=cmd_replication)
    p = sub.add_parser("sync", help="sync wait [--timeout S]")
    p.add_argument("action", choices=["wait"])
    p.add_argument("--timeout", type=float, default=30.0)
    p.set_defaults(fn=cmd_sync)
    p = sub.add_parser("tls", help="tls reload --region NAME: re-read the region's certificate, key and CA bundle")
    p.add_argument("action", choices=["reload"])
    p.add_argument("--region", required=True)
    p.set_defaults(fn=cmd_tls)
    p = sub.add_parser("flush", help="flush db <db> [--timeout S] [--region NAME]: empty the whole database "
                                     "at every region (each must be reachable)")
    p.add_argument("what", choices=["db"])
    p.add_argument("db")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="how long the region may wait for operations it lacks (default 30)")
    p.add_argument("--region", help="the region that runs the flush (default: the first of the cluster file)")
    p.set_defaults(fn=cmd_flush)
    args = ap.parse_args(argv)
    console = Console()
    try:
        cfg, path = _cluster(args)
        return args.fn(args, cfg, path, console)
    except AdminError as e:
        print(f"braid-admin: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
