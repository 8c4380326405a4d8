"""``braid-admin``: administer an Active-Active database, in the style of rladmin.

Point it at the cluster file (``--cluster data/cluster.toml``, the default when it
exists) or at any region (``--host`` / ``--port``: the region tells the rest).

    braid-admin status
    braid-admin info db db
    braid-admin tune db db crdt_xadd_id_uniqueness_mode semi-strict
    braid-admin replication pause --region region-2
    braid-admin replication resume --region region-2
    braid-admin sync wait --timeout 30

It talks to the regions over RESP with Braid's BRAID.* commands.  ``tune``
changes every region and records the mode in the cluster file, so restarts keep it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import redis
from rich.console import Console
from rich.table import Table

from .cluster_config import ID_MODES, ClusterConfig, RegionSpec, load

DEFAULT_CLUSTER = os.path.join("data", "cluster.toml")


class AdminError(Exception):
    pass


def _client(r: RegionSpec) -> redis.Redis:
    return redis.Redis(host=r.host, port=r.port, socket_timeout=5, socket_connect_timeout=2, protocol=2)


def _status(r: RegionSpec) -> dict[str, str]:
    try:
        c = _client(r)
        text = c.execute_command("BRAID.REPLICATION", "STATUS").decode()
        c.close()
    except redis.RedisError as e:
        raise AdminError(f"region {r.name} at {r.host}:{r.port} is unreachable: {e}") from None
    return dict(line.split(":", 1) for line in text.splitlines())


def _cluster(args) -> tuple[ClusterConfig, str | None]:
    if args.host or args.port:
        import tomllib

        try:
            c = redis.Redis(host=args.host or "127.0.0.1", port=args.port or 7001, socket_timeout=5)
            text = c.execute_command("BRAID.REPLICATION", "CLUSTER").decode()
            c.close()
        except redis.RedisError as e:
            raise AdminError(f"cannot reach {args.host or '127.0.0.1'}:{args.port or 7001}: {e}") from None
        data = tomllib.loads(text)
        regions = [RegionSpec(x["name"], x["number"], x["host"], x["port"], x["repl_port"]) for x in data["regions"]]
        return ClusterConfig(data["cluster_id"], data["database"], "", data["stride"], regions,
                             data.get("id_mode", "strict")), None
    path = args.cluster or DEFAULT_CLUSTER
    try:
        return load(path), path
    except FileNotFoundError:
        raise AdminError(f"no cluster file at {path} (give --cluster FILE or --host/--port)") from None
    except ValueError as e:
        raise AdminError(f"{path}: {e}") from None


def _region(cfg: ClusterConfig, name: str) -> RegionSpec:
    try:
        return cfg.region(name)
    except ValueError as e:
        raise AdminError(str(e)) from None


def _check_db(cfg: ClusterConfig, db: str) -> None:
    if db != cfg.database:
        raise AdminError(f"no database named {db!r} (this cluster's database is {cfg.database!r})")


def cmd_status(args, cfg: ClusterConfig, path, console: Console) -> int:
    table = Table(title=f"cluster {cfg.cluster_id}, database {cfg.database}")
    for col in ("region", "number", "address", "mode", "replication", "version vector", "links"):
        table.add_column(col)
    failures = []
    for r in cfg.regions:
        try:
            st = _status(r)
        except AdminError as e:
            failures.append(str(e))
            table.add_row(r.name, str(r.number), f"{r.host}:{r.port}", "-", "unreachable", "-", "-")
            continue
        links = "; ".join(v for k, v in sorted(st.items()) if k.startswith("crdt_peer_"))
        table.add_row(r.name, str(r.number), f"{r.host}:{r.port}", st["crdt_xadd_id_uniqueness_mode"],
                      st["crdt_replication"], st["crdt_vv"] or "-", links)
    console.print(table)
    for failure in failures:
        print(f"braid-admin: {failure}", file=sys.stderr)
    return 1 if failures else 0


def cmd_info(args, cfg: ClusterConfig, path, console: Console) -> int:
    _check_db(cfg, args.db)
    console.print(f"database {cfg.database}: cluster {cfg.cluster_id}, {len(cfg.regions)} regions, "
                  f"crdt_xadd_id_uniqueness_mode {cfg.id_mode}, stride {cfg.stride}")
    for r in cfg.regions:
        c = _client(r)
        try:
            console.print(f"  {r.name} (number {r.number}) {r.host}:{r.port}: {c.dbsize()} keys")
        except redis.RedisError as e:
            console.print(f"  {r.name}: unreachable ({e})")
        finally:
            c.close()
    return 0


def cmd_tune(args, cfg: ClusterConfig, path, console: Console) -> int:
    _check_db(cfg, args.db)
    if args.setting != "crdt_xadd_id_uniqueness_mode":
        raise AdminError(f"unknown setting {args.setting!r} (known: crdt_xadd_id_uniqueness_mode)")
    if args.value not in ID_MODES:
        raise AdminError(f"crdt_xadd_id_uniqueness_mode must be one of: {', '.join(ID_MODES)}")
    unreachable = []
    for r in cfg.regions:
        try:
            c = _client(r)
            c.execute_command("BRAID.CONFIG", "SET", "crdt_xadd_id_uniqueness_mode", args.value)
            c.close()
        except redis.RedisError:
            unreachable.append(r.name)
    if path is not None:
        cfg.id_mode = args.value
        with open(path, "w") as f:
            f.write(cfg.to_toml())
    if unreachable:
        raise AdminError(f"set on the others, but unreachable: {', '.join(unreachable)} "
                         "(they take the mode from the cluster file when they restart)")
    console.print(f"crdt_xadd_id_uniqueness_mode is {args.value} on every region")
    return 0


def cmd_replication(args, cfg: ClusterConfig, path, console: Console) -> int:
    r = _region(cfg, args.region)
    try:
        c = _client(r)
        c.execute_command("BRAID.REPLICATION", args.action.upper())
        c.close()
    except redis.RedisError as e:
        raise AdminError(f"region {r.name} is unreachable: {e}") from None
    console.print(f"replication {'paused' if args.action == 'pause' else 'resumed'} at {r.name}")
    return 0


def cmd_sync(args, cfg: ClusterConfig, path, console: Console) -> int:
    deadline = time.monotonic() + args.timeout
    while True:
        reachable = []
        for r in cfg.regions:
            try:
                reachable.append(_status(r))
            except AdminError:
                pass
        if reachable and len({st["crdt_vv"] for st in reachable}) == 1 and \
                all(st["crdt_pending"] == "0" for st in reachable):
            console.print(f"in sync: {len(reachable)} reachable regions hold the same operations")
            return 0
        if time.monotonic() > deadline:
            raise AdminError(f"not in sync after {args.timeout:g}s")
        time.sleep(0.05)  # polling interval of a command-line wait


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="braid-admin", description="Administer a Braid Active-Active database.")
    ap.add_argument("--cluster", help=f"cluster file (default {DEFAULT_CLUSTER})")
    ap.add_argument("--host")
    ap.add_argument("--port", type=int)
    sub = ap.add_subparsers(dest="verb", required=True)
    sub.add_parser("status", help="regions, links, version vectors").set_defaults(fn=cmd_status)
    p = sub.add_parser("info", help="info db <db>")
    p.add_argument("what", choices=["db"])
    p.add_argument("db")
    p.set_defaults(fn=cmd_info)
    p = sub.add_parser("tune", help="tune db <db> crdt_xadd_id_uniqueness_mode <mode>")
    p.add_argument("what", choices=["db"])
    p.add_argument("db")
    p.add_argument("setting")
    p.add_argument("value")
    p.set_defaults(fn=cmd_tune)
    p = sub.add_parser("replication", help="replication pause|resume --region NAME")
    p.add_argument("action", choices=["pause", "resume"])
    p.add_argument("--region", required=True)
    p.set_defaults(fn=cmd_replication)
    p = sub.add_parser("sync", help="sync wait [--timeout S]")
    p.add_argument("action", choices=["wait"])
    p.add_argument("--timeout", type=float, default=30.0)
    p.set_defaults(fn=cmd_sync)
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
