"""``braid-admin``: administer an Active-Active database, in the style of rladmin.

Point it at the cluster file (``--cluster data/cluster.toml``, the default) or at
any region's gRPC port (``--host`` / ``--port``, with ``--token`` or ``$BRAID_TOKEN``):
the region tells the rest.

    braid-admin status
    braid-admin info db db
    braid-admin tune db db crdt_xadd_id_uniqueness_mode semi-strict
    braid-admin replication pause --region region-2 [--peer region-3]
    braid-admin replication resume --region region-2 [--peer region-3]
    braid-admin sync wait --timeout 30 [--reachable]
    braid-admin tls reload --region region-2
    braid-admin region add region-4 --host H --port 7004 --repl-port 7104 [--number N]
    braid-admin region add region-4 --host H --port 7004,7024 --repl-port 7104,7124   (2 shards)
    braid-admin region remove region-2 [--force] [--timeout 60]
    braid-admin region purge --region region-2
    braid-admin flush db db [--timeout 30] [--region region-1]
    braid-admin backup --dir DIR [--region region-2] [--force] [--timeout 600]
    braid-admin status --shard 1        (a sharded database: only shard 1 of every region)
    braid-admin acl setuser NAME RULE... | deluser NAME... | list | sync [--from REGION]   (node/tools/admin_acl.py)

It speaks the admin service of proto/admin.proto (node/transport/admin.py), which
every region serves on its replication port and guards with the cluster token and,
when the cluster file has a ``[tls]`` table, mutual TLS: braid-admin presents the
admin certificate the file names (``--tls-cert``/``--tls-key``/``--tls-ca`` override
it, and give it with ``--host``/``--port``) and checks that each region's certificate
names that region.
``status`` lays its tables out for the console's width (80 columns in a pipe): cells wrap rather
than end in an ellipsis, and the version vectors get a table of their own, one column per origin.
``sync wait`` waits for every member (``--all``, the default): one that does not answer fails
the wait at its deadline, named; ``--reachable`` waits only for those that answer.
``tune`` changes every region; each region records the setting in its own cluster
file, and braid-admin in the file it was given, so restarts keep it.

``region`` changes the membership (crdt/membership.py, node/activeactive/coordinator.py):
braid-admin coordinates each change - every voter must promise it, or nothing
changes anywhere - and records the new list in the file it was given; it first
learns the newest list from the regions, so a stale file is brought up to date.
``flush`` empties the whole database (as Redis Enterprise's ``crdb-cli crdb flush``):
every region must be reachable; braid-admin reads every region's version vector and
has one region (``--region``, default the first active member) wait until it
holds all of them, then flush as one observed-remove operation that every region
applies.  So it removes everything acknowledged at any region before the call, where a
FLUSHALL sent to one region removes only what that region had received.
``backup`` asks each member for a snapshot taken now (the Backup call: the region
fsyncs its log up to it first, then streams it in pieces) and writes ``DIR/<region>/``
as a region's data directory holds it: the snapshot, an empty log segment after its
record, and ``backup.json``.  A region started from it is an older copy of itself:
as at every start, it takes no writes until it has taken back from its peers the
operations of its own they hold (node/activeactive/recovery.py).  Each folder is written under
a temporary name and renamed once its checksum was checked.

A sharded database (docs/sharding.md): shard K of every region is a replication group of its
own, and ``status``, ``info``, ``tune``, ``replication``, ``sync``, ``tls``, ``flush`` and ``backup``
act on every group in turn (``--shard K``: on one), each group's part of the output under a heading
``shard K of N (slots ...)``, the exit status the worst of the groups' (node/tools/admin_shards.py).
``region add|remove|purge`` too: each group agrees the change on its own, shard 0's first, and a run
that did not finish in every group is finished by running it again (node/tools/admin_regions.py);
a new region gives one port and one repl port per shard (``--port 7004,7024 --repl-port 7104,7124``).

Where it lives: this module builds the parser and holds the commands that read or tune every
region (status, info, tune, replication, sync, tls, flush); node/tools/admin_regions.py the member-list
changes (region add/remove/purge), node/tools/admin_backup.py the backup, node/tools/admin_calls.py how
braid-admin reaches the regions (the cluster, TLS, calls, every member's status), node/tools/admin_shards.py
how a command runs on each shard group of a sharded database.
"""

from __future__ import annotations

import argparse
import sys
import time

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from crdt.membership import REMOVED
from node.activeactive.cluster_config import DB_SETTINGS, ClusterConfig
from node.tools.admin_acl import add_acl_parser
from node.tools.admin_backup import cmd_backup
from node.tools.admin_calls import (
    DEFAULT_CLUSTER,
    TLS_FILES,
    AdminError,
    call,
    check_db,
    counted,
    open_cluster,
    region_named,
    shard_name,
    statuses,
)
from node.tools.admin_regions import cmd_region_add, cmd_region_purge, cmd_region_remove
from node.tools.admin_shards import add_shard_option, each_shard, heading, shard_views
from node.version import VERSION_TEXT


def _vv(st) -> str:
    return ",".join(f"{o}={n}" for o, n in sorted(st.vv.items())) or "-"


def _table(*columns: str) -> Table:
    """A table whose cells wrap (at spaces, else anywhere) rather than end in an ellipsis:
    what a user compares stays whole at 80 columns, in a terminal or a pipe."""
    table = Table()
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _vectors(cfg: ClusterConfig, found: dict, console: Console) -> tuple[str, Table]:
    """The version vectors, one row per member: a matrix (one column per origin region, so that the
    numbers to compare sit under each other) when it fits the console, else one line per member."""
    origins = sorted({o for st in found.values() for o in st.vv})
    members = [r for r in cfg.regions if r.live]
    matrix = _table("region", *(str(o) for o in origins), "pending")
    for r in members:
        st = found.get(r.name)
        cells = [str(st.vv.get(o, 0)) for o in origins] + [str(st.pending)] if st else \
            ["unreachable"] + [""] * len(origins)
        matrix.add_row(r.name, *cells)
    natural = Measurement.get(console, console.options.update_width(1 << 16), matrix).maximum  # unwrapped
    if natural <= console.width:
        return "version vectors: operations applied, by origin region number; pending: received, waiting for " \
               "their dependencies", matrix
    lines = _table("region", "version vector", "pending")
    for r in members:
        st = found.get(r.name)
        lines.add_row(r.name, *((" ".join(f"{o}={n}" for o, n in sorted(st.vv.items())) or "-", str(st.pending))
                                if st else ("unreachable", "")))
    return "version vectors: origin region number=operations applied; pending: received, waiting for their " \
           "dependencies", lines


def cmd_status(args, cfg: ClusterConfig, path, console: Console) -> int:
    return each_shard(args, cfg, path, console, _status)


def _status(args, cfg: ClusterConfig, path, console: Console) -> int:
    found, failures = statuses(cfg, path)
    regions = _table("region", "no.", "member", "client address", "state", "keys")
    details = _table("region", "id mode", "backlog (bytes)", "idmp iids", "delete contexts", "held by")
    links = _table("region", "peer", "state", "behind (ops)", "oldest (ms)", "unstable (ops)")
    for r in cfg.regions:
        st = found.get(r.name) if r.live else None
        if r.status == REMOVED:
            regions.add_row(r.name, str(r.number), r.status, f"{r.host}:{r.port}", f"frozen at {r.frozen}", "-")
            continue
        if st is None:
            regions.add_row(r.name, str(r.number), r.status, f"{r.host}:{r.port}", "unreachable", "-")
            continue
        member = r.status
        if st.catch_up_target and r.status == "joining":
            member += f" ({st.catch_up_held}/{st.catch_up_target} ops)"
        regions.add_row(r.name, str(r.number), member, st.resp_address, "paused" if st.paused else "active",
                        counted(st.keys, "key"))
        details.add_row(r.name, st.id_mode, str(st.backlog_bytes), str(st.idmp_iids_tracked),
                        str(st.delete_contexts), ", ".join(st.stability_held_by) or "-")
        for link in st.links:
            links.add_row(r.name, link.peer, link.state, str(link.lag_ops), f"{link.lag_ms:.0f}",
                          str(link.unstable_ops))
    heading, vectors = _vectors(cfg, found, console)
    for text, table in (
            (f"cluster {cfg.cluster_id}, database {cfg.database}, membership epoch {cfg.epoch}", regions),
            (heading, vectors),
            ("links: operations held here that the peer has not acknowledged (behind, and the age of the oldest), "
             "whatever the link's state; unstable: applied here, not known to be applied there", links),
            ("settings, and metadata kept until every region has applied what it guards (held by: the regions "
             "it waits for)", details)):
        console.print(text, highlight=False)
        console.print(table)
    forked = history_differences(found)
    for text in forked:  # the same numbers, other operations: named, whatever the vectors say
        console.print(f"histories differ: {text} (see docs/active-active.md, 'Histories and forks')", highlight=False)
    for failure in failures:
        print(f"braid-admin: {failure}", file=sys.stderr)
    return 1 if failures or forked else 0


def cmd_info(args, cfg: ClusterConfig, path, console: Console) -> int:
    check_db(cfg, args.db)
    views = shard_views(args, cfg)
    if not cfg.shards.sharded:
        found, failures = statuses(cfg, path)
        _info_header(cfg, console, "")
        return _info_regions(cfg, found, failures, console, "  ")
    # (each group's epoch is under its heading: the groups agree member-list changes one by one)
    _info_header(cfg, console, f", {cfg.shards.count} shards")
    worst = 0
    for view in views:
        found, failures = statuses(view, path)
        console.print(f"  {heading(view)}, membership epoch {view.epoch}:", highlight=False)
        worst = max(worst, _info_regions(view, found, failures, console, "    "))
    return worst


def _info_header(cfg: ClusterConfig, console: Console, shards: str) -> None:
    epoch = "" if shards else f", membership epoch {cfg.epoch}"
    console.print(f"database {cfg.database}: cluster {cfg.cluster_id}, {len(cfg.live_regions())} regions{shards}, "
                  f"crdt_xadd_id_uniqueness_mode {cfg.id_mode}, stride {cfg.stride}{epoch}, "
                  f"maxmemory {cfg.maxmemory or 'none'}")


def _info_regions(cfg: ClusterConfig, found: dict, failures: list[str], console: Console, indent: str) -> int:
    for r in cfg.live_regions():
        st = found.get(r.name)
        detail = f"{counted(st.keys, 'key')}, {st.id_mode}, version vector {_vv(st)}" if st else "unreachable"
        console.print(f"{indent}{r.name} (number {r.number}) {r.host}:{r.port}: {detail}")
    for failure in failures:
        print(f"braid-admin: {failure}", file=sys.stderr)
    return 1 if failures else 0


def cmd_tune(args, cfg: ClusterConfig, path, console: Console) -> int:
    check_db(cfg, args.db)
    unreachable = []
    views = shard_views(args, cfg)  # a setting of the database: every shard of every region
    for view in views:
        for r in view.live_regions():
            try:
                call(view, r, "tune", args.db, args.setting, args.value)  # the region checks the setting
            except AdminError as e:
                if not e.unreachable:
                    raise
                unreachable.append(shard_name(view, r))
    if path is not None:
        attr, check = DB_SETTINGS[args.setting]
        setattr(cfg, attr, check(args.value))  # (every region took it: it is one)
        cfg.save(path)
    if unreachable:
        raise AdminError(f"set on the others, but unreachable: {', '.join(unreachable)} "
                         "(set it again when they are back)")
    where = "" if not cfg.shards.sharded else f" (shard {views[0].shard})" if len(views) == 1 else \
        f" (all {cfg.shards.count} shards)"
    console.print(f"{args.setting} is {args.value} on every region{where}")
    return 0


def cmd_replication(args, cfg: ClusterConfig, path, console: Console) -> int:
    region_named(cfg, args.region)  # (an unknown name is told once, not per shard)
    if args.peer:
        region_named(cfg, args.peer)
    return each_shard(args, cfg, path, console, _replication)


def _replication(args, cfg: ClusterConfig, path, console: Console) -> int:
    r = region_named(cfg, args.region)
    if args.peer:
        region_named(cfg, args.peer)
    call(cfg, r, args.action, args.peer or "")
    what = f"the link {r.name} - {args.peer}" if args.peer else f"all links of {r.name}"
    console.print(f"replication {'paused' if args.action == 'pause' else 'resumed'}: {what}")
    return 0


def history_differences(found: dict) -> list[str]:
    """Where members holding as many operations of an origin hold different ones: per origin and
    number of operations, the groups of members by their history digest (RegionStatus.heads)."""
    out = []
    names = {st.number: name for name, st in found.items()}
    by_point: dict[tuple[int, int], dict[int, list[str]]] = {}
    for name, st in found.items():
        for origin, digest in st.heads.items():
            by_point.setdefault((origin, st.vv.get(origin, 0)), {}).setdefault(digest, []).append(name)
    for (origin, n), groups in sorted(by_point.items()):
        if len(groups) > 1:
            sides = " / ".join(f"{', '.join(sorted(members))} (digest {digest:016x})"
                               for digest, members in sorted(groups.items(), key=lambda g: sorted(g[1])))
            out.append(f"{counted(n, 'operation')} of {names.get(origin, f'region {origin}')} differ between {sides}")
    return out


def cmd_sync(args, cfg: ClusterConfig, path, console: Console) -> int:
    """Wait until the members hold the same operations: every member (the default, ``--all``), or only
    those that answer (``--reachable``).  An unreachable member is no member in sync: by default the wait
    goes on until the deadline (a restarting region may come back), then fails naming it.  A sharded
    database is in sync when every shard group is: each is waited for in turn, all by one deadline."""
    args.deadline = time.monotonic() + args.timeout
    return each_shard(args, cfg, path, console, _sync)


def _sync(args, cfg: ClusterConfig, path, console: Console) -> int:
    deadline = args.deadline
    while True:
        found, _ = statuses(cfg, path)
        unreachable = [r.name for r in cfg.live_regions() if r.name not in found]
        newest: dict[int, int] = {}
        for st in found.values():
            for origin, n in st.vv.items():
                newest[origin] = max(newest.get(origin, 0), n)
        lacking = {name: sum(n - st.vv.get(o, 0) for o, n in newest.items()) for name, st in found.items()}
        agreed = bool(found) and not any(lacking.values()) and not any(st.pending for st in found.values())
        forked = history_differences(found)
        if forked:  # the same numbers, other operations: waiting cannot heal it
            raise AdminError(f"not in sync: {'; '.join(forked)} (see docs/active-active.md, 'Histories and forks')")
        if agreed and not unreachable:
            console.print(f"in sync: all {len(found)} members hold the same operations", highlight=False)
            return 0
        if agreed and args.reachable:
            console.print(f"in sync: the {len(found)} reachable members hold the same operations; not waited for "
                          f"(unreachable): {', '.join(unreachable)}", highlight=False)
            return 0
        if time.monotonic() > deadline:
            why = [f"{name} lacks {counted(n, 'operation')} another member holds" for name, n in lacking.items()
                   if n]
            why += [f"{name} holds {counted(st.pending, 'operation')} waiting for their dependencies"
                    for name, st in found.items() if st.pending]
            if unreachable:
                why.append(f"unreachable: {', '.join(unreachable)}"
                           + ("" if args.reachable else " (--reachable waits only for the members that answer)"))
            raise AdminError(f"not in sync after {args.timeout:g}s: {'; '.join(why)}")
        time.sleep(0.05)  # polling interval of a command-line wait


def cmd_tls(args, cfg: ClusterConfig, path, console: Console) -> int:
    region_named(cfg, args.region)
    if not TLS_FILES:
        raise AdminError("this cluster's links are plain text (tls = false): there are no certificates to reload")
    return each_shard(args, cfg, path, console, _tls)


def _tls(args, cfg: ClusterConfig, path, console: Console) -> int:
    r = region_named(cfg, args.region)
    st = call(cfg, r, "reload_tls")
    console.print(f"{r.name} reloaded its TLS credentials: certificate serial {st.cert_serial} "
                  f"({', '.join(st.cert_names)}), valid until {st.cert_not_after}, "
                  f"{st.ca_certificates} CA(s) trusted; its links handshake again")
    return 0


def cmd_flush(args, cfg: ClusterConfig, path, console: Console) -> int:
    check_db(cfg, args.db)
    if not args.timeout > 0:
        raise AdminError("--timeout must be a positive number of seconds")
    plans, failures = [], []
    for view in shard_views(args, cfg):  # every shard group answers before any is flushed
        found, failed = statuses(view, path)
        active = [r for r in view.live_regions() if r.status == "active"]
        runner = region_named(view, args.region) if args.region else (active or view.live_regions())[0]
        failures += failed
        context: dict[int, int] = {}  # every operation acknowledged anywhere so far
        for st in found.values():
            for origin, n in st.vv.items():
                context[origin] = max(context.get(origin, 0), n)
        plans.append((view, runner, context))
    if failures:
        raise AdminError("nothing flushed: a flush of the whole database needs every region; "
                         + "; ".join(failures))
    if not cfg.shards.sharded:
        _flush(args, *plans[0], console)
        return 0
    failed = []
    for view, runner, context in plans:
        console.print(heading(view), highlight=False)
        try:
            _flush(args, view, runner, context, console)
        except AdminError as e:
            print(f"braid-admin: shard {view.shard}: {e}", file=sys.stderr)
            failed.append(str(view.shard))
    if failed:
        print(f"braid-admin: shard(s) {', '.join(failed)} not flushed (the others are): run the flush again, "
              f"with --shard K for each", file=sys.stderr)
    return 1 if failed else 0


def _flush(args, cfg: ClusterConfig, runner, context: dict[int, int], console: Console) -> None:
    done = call(cfg, runner, "flush", args.db, context, args.timeout)
    covered = ",".join(f"{o}={n}" for o, n in sorted(context.items())) or "-"
    console.print(f"database {args.db} flushed at {done.region}: {counted(done.keys_removed, 'key')} removed there, "
                  f"covering every operation acknowledged before the call (version vector {covered}); "
                  f"the flush is at {_vv(done)} and every region removes the same as it applies it "
                  "(writes made meanwhile stay); `braid-admin sync wait` waits for that")


def port_list(value: str) -> list[int]:
    """``7004`` or, one per shard, ``7004,7024``."""
    try:
        ports = [int(p) for p in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port or a comma-separated list of ports") from None
    if not all(0 < p < 65536 for p in ports):
        raise argparse.ArgumentTypeError(f"{value!r}: a port is a number from 1 to 65535")
    return ports


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="braid-admin", description="Administer a Braid Active-Active database: "
                                 "talk to its regions through their admin service (gRPC, the replication port).",
                                 epilog="exit status: 0 on success; 1 when a region is unreachable or refuses, "
                                        "or the command fails (the reason is printed); 2 for bad options; on a "
                                        "sharded database, the worst of its shard groups' statuses")
    ap.add_argument("--version", action="version", version=VERSION_TEXT)
    ap.add_argument("--cluster", metavar="FILE", help=f"the cluster file (default {DEFAULT_CLUSTER}); "
                                                      "ignored with --host/--port")
    ap.add_argument("--host", help="talk to the region at this host instead of reading a cluster file: it "
                                   "tells the rest (default 127.0.0.1 when only --port is given)")
    ap.add_argument("--port", type=int, help="that region's replication (gRPC) port (default 7101 when only "
                                             "--host is given)")
    ap.add_argument("--token", help="the cluster token (default: the cluster file's; with --host/--port, "
                                    "$BRAID_TOKEN)")
    ap.add_argument("--tls-ca", metavar="FILE",
                    help="CA bundle to check regions' certificates with (default: the cluster file's)")
    ap.add_argument("--tls-cert", metavar="FILE",
                    help="certificate braid-admin presents (default: the cluster file's admin_cert)")
    ap.add_argument("--tls-key", metavar="FILE", help="its private key (default: the cluster file's admin_key)")
    sub = ap.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    p = sub.add_parser("status", help="every member, its version vector, links and the operations each is behind",
                       description="Every member (state, address, keys), the version vectors (operations applied, "
                                   "by origin region), every link and the operations its peer has not acknowledged "
                                   "(also while paused or down), and the metadata waiting for causal stability; "
                                   "on a sharded database, for each shard under its heading. "
                                   "Exit status 1 when a member is unreachable (it is listed as such).")
    add_shard_option(p)
    p.set_defaults(fn=cmd_status)
    p = sub.add_parser("info", help="info db DB: the database's settings and each region's keys and vector")
    p.add_argument("what", choices=["db"], help="db: the database")
    p.add_argument("db", help="the database's name (the cluster file's database)")
    add_shard_option(p)
    p.set_defaults(fn=cmd_info)
    p = sub.add_parser("tune", help="tune db DB SETTING VALUE: change a database setting at every region "
                                    "(crdt_xadd_id_uniqueness_mode, appendfsync, maxmemory)")
    p.add_argument("what", choices=["db"], help="db: the database")
    p.add_argument("db", help="the database's name")
    p.add_argument("setting", help="crdt_xadd_id_uniqueness_mode (strict, semi-strict, liberal), appendfsync "
                                   "(always, everysec, no) or maxmemory (bytes or 512mb, 4gb; 0: no limit)")
    p.add_argument("value", help="the new value; every region and the cluster file record it")
    add_shard_option(p)
    p.set_defaults(fn=cmd_tune)
    p = sub.add_parser("replication", help="replication pause|resume --region NAME [--peer NAME]: cut or restore "
                                           "a region's links")
    p.add_argument("action", choices=["pause", "resume"], help="pause: cut the links (both ways); resume: "
                                                               "restore them (the peers catch up)")
    p.add_argument("--region", required=True, help="the region whose links to pause or resume")
    p.add_argument("--peer", help="only the link between --region and this region (default: all its links)")
    add_shard_option(p)
    p.set_defaults(fn=cmd_replication)
    p = sub.add_parser("sync", help="sync wait [--timeout S] [--reachable]: wait until every member holds the "
                                    "same operations",
                       description="Wait until the members hold the same operations (the same version vector, "
                                   "nothing waiting for its dependencies). By default every member must answer: "
                                   "an unreachable one makes the wait fail at the deadline, naming it.",
                       epilog="exit status: 0 when in sync (every shard group, on a sharded database); 1 when "
                              "not in sync by the deadline (the members "
                              "behind and the unreachable ones are named)")
    p.add_argument("action", choices=["wait"], help="wait: poll the members until they agree or time runs out")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long to wait (default 30)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--all", dest="reachable", action="store_false",
                       help="every member must answer and agree (the default)")
    which.add_argument("--reachable", action="store_true",
                       help="wait only for the members that answer; unreachable ones are named, not waited for")
    add_shard_option(p)
    p.set_defaults(fn=cmd_sync, reachable=False)  # not --all's own default (True, as a store_false)
    p = sub.add_parser("tls", help="tls reload --region NAME: re-read the region's certificate, key and CA bundle")
    p.add_argument("action", choices=["reload"], help="reload: the region re-reads its TLS files; its links "
                                                      "handshake again")
    p.add_argument("--region", required=True, help="the region that reloads")
    add_shard_option(p)
    p.set_defaults(fn=cmd_tls)
    p = sub.add_parser("region", help="region add|remove|purge: change the database's members")
    rsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = rsub.add_parser("add", help="add NAME --host H --port P --repl-port R [--number N]: a new member (it "
                                    "joins, catches up, then takes writes)")
    q.add_argument("name", help="the new region's name")
    # dest: braid-admin's own --host/--port say which region to talk to
    q.add_argument("--host", dest="region_host", required=True, help="the new region's host")
    q.add_argument("--port", dest="region_port", type=port_list, required=True,
                   help="its RESP (client) port; a sharded database: one per shard, comma-separated (P0,P1,...)")
    q.add_argument("--repl-port", type=port_list, required=True,
                   help="its gRPC port (replication and admin); a sharded database: one per shard, comma-separated")
    q.add_argument("--number", type=int, help="its region number (default: the lowest never used)")
    add_shard_option(q)
    q.set_defaults(fn=cmd_region_add)
    q = rsub.add_parser("remove", help="remove NAME [--force]: gracefully, or at once when it is unreachable")
    q.add_argument("name", help="the member to remove")
    q.add_argument("--force", action="store_true",
                   help="do not wait for it: its operations no other member holds are lost (default: hand them "
                        "over first)")
    q.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long to wait for the hand-over (default 60)")
    add_shard_option(q)
    q.set_defaults(fn=cmd_region_remove)
    q = rsub.add_parser("purge", help="purge --region NAME: wipe a removed region's data (it stops)")
    q.add_argument("--region", required=True, help="the removed region to wipe")
    add_shard_option(q)
    q.set_defaults(fn=cmd_region_purge)
    p = sub.add_parser("flush", help="flush db DB [--timeout S] [--region NAME]: empty the whole database "
                                     "at every region (each must be reachable)")
    p.add_argument("what", choices=["db"], help="db: the database")
    p.add_argument("db", help="the database's name")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long the region may wait for operations it lacks (default 30)")
    p.add_argument("--region", help="the region that runs the flush (default: the first active member)")
    add_shard_option(p)
    p.set_defaults(fn=cmd_flush)
    p = sub.add_parser("backup", help="backup --dir DIR [--region NAME] [--force]: a snapshot of every region "
                                      "(or one), written to DIR/<region>/",
                       description="Ask every member (or --region) for a snapshot taken now, as SAVE takes one, and "
                                   "write each to DIR/<region>/ in the layout of a region's data directory, checked "
                                   "once written. A region started from it first takes back from its peers what it "
                                   "lacks. On a sharded database, each shard of a region to DIR/<region>/shard-K/, "
                                   "as the region's data directory holds it. The cluster file and the certificates "
                                   "are not in it: keep them too.",
                       epilog="exit status: 0 when every region was backed up; 1 when any was not (each is "
                              "named; the others are written)")
    p.add_argument("--dir", required=True, help="where to write: one folder per region (a new directory for each "
                                                "backup, so that a restore takes every region from one run)")
    p.add_argument("--region", help="back up only this region (default: every member)")
    p.add_argument("--force", action="store_true",
                   help="replace a backup of the same region already in DIR (default: refuse, naming it)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="how long one region's snapshot may take to arrive (default 600)")
    add_shard_option(p)
    p.set_defaults(fn=cmd_backup)
    add_acl_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        cfg, path = open_cluster(args)
        return args.fn(args, cfg, path, console)
    except AdminError as e:
        print(f"braid-admin: {e}", file=sys.stderr)
        return e.status


if __name__ == "__main__":
    sys.exit(main())
