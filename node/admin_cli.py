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
    braid-admin region remove region-2 [--force] [--timeout 60]
    braid-admin region purge --region region-2
    braid-admin flush db db [--timeout 30] [--region region-1]
    braid-admin backup --dir DIR [--region region-2] [--force] [--timeout 600]

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

``region`` changes the membership (crdt/membership.py, node/membership_change.py):
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
operations of its own they hold (node/activeactive.py).  Each folder is written under
a temporary name and renamed once its checksum was checked.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
import tomllib

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from crdt.membership import FORCE_REMOVE, JOIN, LEAVE, LEAVING, REMOVE, REMOVED, Change, Member, Membership, \
    MembershipError

from .cluster_config import DB_SETTINGS, ClusterConfig, RegionSpec, load
from .membership_change import MembershipChangeError, agree, commit
from .persistence import aof, snapshot
from .transport.admin import AdminCallError, AdminClient, AdminTls, clients

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


# Calls that change nothing, asked again when a region is slow to answer: a region busy
# catching up (or a loaded machine) can miss one 5 s deadline without being down.
_READ_ONLY_CALLS = {"status": 2, "cluster_toml": 2}


def _call(cfg: ClusterConfig, r: RegionSpec, method: str, *args):
    attempts = _READ_ONLY_CALLS.get(method, 1)
    with _client(cfg, r) as c:
        for attempt in range(1, attempts + 1):
            try:
                return getattr(c, method)(*args)
            except AdminCallError as e:
                if e.timed_out and attempt < attempts:
                    continue
                raise _failure(r, e, f"no answer within {c.timeout:g} s, {attempts} times") from None


def _failure(r: RegionSpec, e: AdminCallError, timed_out: str) -> AdminError:
    """A failed call to region ``r`` as a sentence; ``timed_out``: what the deadline was."""
    if e.timed_out:
        return AdminError(f"region {r.name} at {r.host}:{r.repl_port} is unreachable ({timed_out})", True)
    if e.unreachable:
        return AdminError(f"region {r.name} at {r.host}:{r.repl_port} is unreachable", True)
    return AdminError(f"region {r.name} refused: {e}")


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
        regions = [RegionSpec(x["name"], x["number"], x["host"], x["port"], x["repl_port"],
                              status=x.get("status", "active"), frozen=x.get("frozen", 0)) for x in data["regions"]]
        return ClusterConfig(data["cluster_id"], data["database"], token, data["stride"], regions,
                             data.get("id_mode", "strict"), epoch=data.get("epoch", 1)), None
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


def _statuses(cfg: ClusterConfig, path: str | None = None) -> tuple[dict, list[str]]:
    """Status of every reachable member (by name), and a sentence per failure.  A region
    with a newer member list than ``cfg``'s updates it (and the file at ``path``), and the
    members it adds are asked too."""
    found, failures, asked = {}, [], set()
    while True:
        todo = [r for r in cfg.live_regions() if r.number not in asked]
        if not todo:
            return found, failures
        for r in todo:
            asked.add(r.number)
            try:
                found[r.name] = _call(cfg, r, "status")
            except AdminError as e:
                failures.append(str(e))
        newest = max(found.values(), key=lambda st: st.epoch, default=None)
        if newest is not None and newest.epoch > cfg.epoch:
            _take_members(cfg, newest)
            if path is not None:
                cfg.save(path)
        for name in [name for name in found if cfg.region(name).status == REMOVED]:
            del found[name]


def _take_members(cfg: ClusterConfig, st) -> None:
    """Record a region's member list (a RegionStatus) in ``cfg``."""
    m = Membership(cfg.stride, st.epoch, {x.number: Member(x.number, x.name, x.status) for x in st.members},
                   {x.number: x.frozen for x in st.members if x.status == REMOVED})
    cfg.take_membership(m, {x.number: (x.host, x.port, x.repl_port) for x in st.members})


def _vv(st) -> str:
    return ",".join(f"{o}={n}" for o, n in sorted(st.vv.items())) or "-"


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


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
    found, failures = _statuses(cfg, path)
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
                        _count(st.keys, "key"))
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
    _check_db(cfg, args.db)
    found, failures = _statuses(cfg, path)
    console.print(f"database {cfg.database}: cluster {cfg.cluster_id}, {len(cfg.live_regions())} regions, "
                  f"crdt_xadd_id_uniqueness_mode {cfg.id_mode}, stride {cfg.stride}, membership epoch {cfg.epoch}, "
                  f"maxmemory {cfg.maxmemory or 'none'}")
    for r in cfg.live_regions():
        st = found.get(r.name)
        detail = f"{_count(st.keys, 'key')}, {st.id_mode}, version vector {_vv(st)}" if st else "unreachable"
        console.print(f"  {r.name} (number {r.number}) {r.host}:{r.port}: {detail}")
    for failure in failures:
        print(f"braid-admin: {failure}", file=sys.stderr)
    return 1 if failures else 0


def cmd_tune(args, cfg: ClusterConfig, path, console: Console) -> int:
    _check_db(cfg, args.db)
    unreachable = []
    for r in cfg.live_regions():
        try:
            _call(cfg, r, "tune", args.db, args.setting, args.value)  # the region checks the setting
        except AdminError as e:
            if not e.unreachable:
                raise
            unreachable.append(r.name)
    if path is not None:
        attr, check = DB_SETTINGS[args.setting]
        setattr(cfg, attr, check(args.value))  # (every region took it: it is one)
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
            out.append(f"{_count(n, 'operation')} of {names.get(origin, f'region {origin}')} differ between {sides}")
    return out


def cmd_sync(args, cfg: ClusterConfig, path, console: Console) -> int:
    """Wait until the members hold the same operations: every member (the default, ``--all``), or only
    those that answer (``--reachable``).  An unreachable member is no member in sync: by default the wait
    goes on until the deadline (a restarting region may come back), then fails naming it."""
    deadline = time.monotonic() + args.timeout
    while True:
        found, _ = _statuses(cfg, path)
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
            why = [f"{name} lacks {_count(n, 'operation')} another member holds" for name, n in lacking.items()
                   if n]
            why += [f"{name} holds {_count(st.pending, 'operation')} waiting for their dependencies"
                    for name, st in found.items() if st.pending]
            if unreachable:
                why.append(f"unreachable: {', '.join(unreachable)}"
                           + ("" if args.reachable else " (--reachable waits only for the members that answer)"))
            raise AdminError(f"not in sync after {args.timeout:g}s: {'; '.join(why)}")
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


# ---------------------------------------------------------------- membership
def _ballot() -> tuple[int, int]:
    return (0, secrets.randbits(62))  # braid-admin is no region: number 0, a counter unique to this run


def _agree(cfg: ClusterConfig, path: str | None, change: Change, console: Console) -> tuple[int, list[str]]:
    """Have every voter agree to ``change``; record it in ``cfg`` (and the file). Returns
    (frozen point, voters the commit did not reach)."""
    m = cfg.membership()
    voters = clients(cfg, m.live(), _tls_tuple())
    names = {r.number: r.name for r in cfg.regions}
    try:
        p, frozen, unreached = agree(change, m, voters, _ballot(), names)
        needed = m.voters(change)
        if needed and len(unreached) == len(needed):
            unreached = _commit_again(p, frozen, voters, needed, names, unreached)
    except (MembershipError, MembershipChangeError) as e:
        raise AdminError(str(e)) from None
    finally:
        for c in voters.values():
            c.close()
    m.record(p, frozen)
    cfg.take_membership(m, {change.number: change.endpoint} if change.endpoint else None)
    if path is not None:
        cfg.save(path)
    for u in unreached:
        print(f"braid-admin: the change was agreed, but its commit did not reach {u}: it learns the new "
              "list at its next handshake with any member", file=sys.stderr)
    return frozen, unreached


# Every voter promised, but the commit reached none of them (they all went down in between):
# the change has taken effect nowhere yet, and each voter keeps its promise (and a forced
# removal's hold), so it is sent again this often, for this long; after that the voters settle
# it among themselves once they are back (node/activeactive.py, ActiveActive.left_promise).
COMMIT_RETRY_S = 1.0
COMMIT_RETRY_FOR_S = 60.0


def _commit_again(p, frozen, voters, needed, names, unreached: list[str]) -> list[str]:
    print(f"braid-admin: every voter promised the change, but its commit reached none of them "
          f"({'; '.join(unreached)}): sending it again until one has it (for up to {COMMIT_RETRY_FOR_S:g} s)",
          file=sys.stderr)
    deadline = time.monotonic() + COMMIT_RETRY_FOR_S
    while True:
        time.sleep(COMMIT_RETRY_S)
        unreached = commit(p, frozen, voters, needed, names)
        if len(unreached) < len(needed) or time.monotonic() >= deadline:
            break
    if len(unreached) == len(needed):
        raise MembershipChangeError(
            f"every voter promised the change, but none received its commit within {COMMIT_RETRY_FOR_S:g} s "
            f"({'; '.join(unreached)}): it has not taken effect yet. Each voter keeps its promise (a forced "
            "removal's voters take no more of that region's operations meanwhile), and once they all answer "
            "they complete it themselves: a voter asks the others and, every one holding the promise, commits "
            "it (braid-admin status shows the new epoch)")
    return unreached


def _tls_tuple() -> tuple[bytes, bytes, bytes] | None:
    if not _TLS_FILES:
        return None
    pem = _read_tls(_TLS_FILES)
    return pem["ca"], pem["cert"], pem["key"]


def _all_reachable(cfg: ClusterConfig, path: str | None, what: str, but: int | None = None) -> dict:
    found, failures = _statuses(cfg, path)
    missing = [r.name for r in cfg.live_regions() if r.name not in found and r.number != but]
    if missing:
        raise AdminError(f"{what} needs every member reachable; {', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not ({'; '.join(failures)}): nothing changed")
    return found


def cmd_region_add(args, cfg: ClusterConfig, path, console: Console) -> int:
    _all_reachable(cfg, path, "adding a region")
    used = {r.number for r in cfg.regions}
    number = args.number
    if number is None:
        free = [n for n in range(1, cfg.stride) if n not in used]
        if not free:
            raise AdminError(f"every region number of this database is used: numbers go from 1 to {cfg.stride - 1} "
                             f"(strict IDs: the stride is {cfg.stride}) and a removed region's number is never "
                             "reused; this database cannot grow further (a new database with a larger stride can)")
        number = free[0]
    change = Change(JOIN, number, args.name, (args.region_host, args.region_port, args.repl_port))
    _agree(cfg, path, change, console)
    where = path or "the cluster file"
    console.print(f"{args.name} joined the database as region {number} (membership epoch {cfg.epoch}, status "
                  f"joining).\nStart it with: braid node --config {where} --region {args.name} --data-dir DIR\n"
                  "It takes the data from its peers and accepts writes once it has caught up "
                  "(braid-admin status shows its progress).")
    return 0


LEAVER_GRACE_S = 15.0  # a leaving region that stops answering is given up after this long


def _wait_handed_over(cfg: ClusterConfig, path, r: RegionSpec, timeout: float) -> int:
    """Wait until every other member holds all of leaving region ``r``'s operations; returns their count."""
    deadline = time.monotonic() + timeout
    lost_at = None  # since when the leaver does not answer: a busy region may miss a poll or two
    while True:
        found, _ = _statuses(cfg, path)
        leaver = found.get(r.name)
        if leaver is None:
            now = time.monotonic()
            lost_at = now if lost_at is None else lost_at
            if now - lost_at >= LEAVER_GRACE_S or now > deadline:
                raise AdminError(f"{r.name} is leaving but unreachable: its operations cannot be handed over "
                                 f"(run this again when it is back, or remove it with --force)")
            time.sleep(0.5)
            continue
        lost_at = None
        total = leaver.vv.get(r.number, 0)
        behind = [f"{name} ({st.vv.get(r.number, 0)} of {total})" for name, st in found.items()
                  if name != r.name and st.vv.get(r.number, 0) < total]
        missing = [x.name for x in cfg.live_regions() if x.name not in found]
        if not behind and not missing:
            return total
        if time.monotonic() > deadline:
            raise AdminError(f"{r.name} is leaving (it takes no writes), but after {timeout:g}s not every member "
                             f"holds its operations: {', '.join(behind + [m + ' (unreachable)' for m in missing])}; "
                             "run this again to finish")
        time.sleep(0.05)  # polling interval of a command-line wait


def orphaned_operations(cfg: ClusterConfig, statuses: dict, removing: RegionSpec) -> list[tuple[RegionSpec, int]]:
    """Regions removed earlier whose operations up to their frozen point no member but
    ``removing`` is known to hold: (the region, the last of its operations a remaining member
    holds).  A forced removal of ``removing`` takes them with it (the remaining members
    converge without them).  ``statuses``: each reachable member's status by name."""
    remaining = [st for name, st in statuses.items() if name != removing.name]
    out = []
    for x in cfg.regions:
        if x.status != REMOVED or x.number == removing.number or not x.frozen:
            continue
        held = max((st.vv.get(x.number, 0) for st in remaining), default=0)
        if held < x.frozen:
            out.append((x, held))
    return out


def cmd_region_remove(args, cfg: ClusterConfig, path, console: Console) -> int:
    r = _region(cfg, args.name)
    if r.status == REMOVED:
        raise AdminError(f"{r.name} (region {r.number}) was already removed")
    if args.force:
        found = _all_reachable(cfg, path, "a forced removal", but=r.number)
        issued = max((link.peer_own_ops for st in found.values() for link in st.links if link.number == r.number),
                     default=0)
        orphaned = orphaned_operations(cfg, found, r)
        frozen, _ = _agree(cfg, path, Change(FORCE_REMOVE, r.number), console)
        lost = max(issued - frozen, 0)
        console.print(f"{r.name} (region {r.number}) was removed by force at membership epoch {cfg.epoch}: the "
                      f"others hold its operations up to {frozen} and keep them; {lost} operation(s) it was known "
                      f"to have made beyond that are lost (it may have made more since it was last heard from). "
                      f"If it comes back it is refused; wipe it with: braid-admin region purge --region {r.name}")
        for x, held in orphaned:
            console.print(f"{x.name} (removed earlier, frozen at {x.frozen}): no remaining member holds its "
                          f"operations {held + 1} to {x.frozen}; they are lost (the remaining members converge "
                          "without them)")
        return 0
    _all_reachable(cfg, path, "removing a region")
    if r.status != LEAVING:
        _agree(cfg, path, Change(LEAVE, r.number), console)
        console.print(f"{r.name} is leaving: it takes no more writes; waiting until every member holds its operations")
    total = _wait_handed_over(cfg, path, r, args.timeout)
    _agree(cfg, path, Change(REMOVE, r.number), console)
    console.print(f"{r.name} (region {r.number}) left the database at membership epoch {cfg.epoch}: every "
                  f"member holds its {total} operations. Its process may be stopped.")
    return 0


def cmd_region_purge(args, cfg: ClusterConfig, path, console: Console) -> int:
    named = [r for r in cfg.regions if r.name == args.region]
    if not named:
        raise AdminError(f"no region named {args.region!r} in the cluster file")
    found, failures = _statuses(cfg, path)
    r = next((x for x in cfg.regions if x.name == args.region and x.status == REMOVED), None)
    if r is None:
        live = cfg.region(args.region)
        raise AdminError(f"{live.name} (region {live.number}) is {live.status}, not removed: remove it first "
                         f"(braid-admin region remove {live.name} [--force])")
    if not found:
        raise AdminError(f"no member is reachable to confirm that {r.name} was removed ({'; '.join(failures)})")
    _call(cfg, r, "purge", cfg.membership_blob())
    console.print(f"{r.name} (region {r.number}) deleted its data and stopped. To bring it back: braid-admin region "
                  f"add {r.name} --host {r.host} --port {r.port} --repl-port {r.repl_port}, then start it again "
                  "with the updated cluster file (it gets a new number)")
    return 0


def cmd_flush(args, cfg: ClusterConfig, path, console: Console) -> int:
    _check_db(cfg, args.db)
    if not args.timeout > 0:
        raise AdminError("--timeout must be a positive number of seconds")
    found, failures = _statuses(cfg, path)
    active = [r for r in cfg.live_regions() if r.status == "active"]
    runner = _region(cfg, args.region) if args.region else (active or cfg.live_regions())[0]
    if failures:
        raise AdminError("nothing flushed: a flush of the whole database needs every region; "
                         + "; ".join(failures))
    context: dict[int, int] = {}  # every operation acknowledged anywhere so far
    for st in found.values():
        for origin, n in st.vv.items():
            context[origin] = max(context.get(origin, 0), n)
    done = _call(cfg, runner, "flush", args.db, context, args.timeout)
    covered = ",".join(f"{o}={n}" for o, n in sorted(context.items())) or "-"
    console.print(f"database {args.db} flushed at {done.region}: {_count(done.keys_removed, 'key')} removed there, "
                  f"covering every operation acknowledged before the call (version vector {covered}); "
                  f"the flush is at {_vv(done)} and every region removes the same as it applies it "
                  "(writes made meanwhile stay); `braid-admin sync wait` waits for that")
    return 0


BACKUP_MANIFEST = "backup.json"  # in each region's folder of a backup: what was taken, and when


def cmd_backup(args, cfg: ClusterConfig, path, console: Console) -> int:
    """A snapshot of every member (or of ``--region``), each written to ``DIR/<region>/`` in the
    layout of a region's data folder; every region that answers is backed up, and the exit status
    is 1 when any did not (named)."""
    if not args.timeout > 0:
        raise AdminError("--timeout must be a positive number of seconds")
    found, failures = _statuses(cfg, path)  # the newest member list, and who answers
    if args.region:
        r = _region(cfg, args.region)
        if not r.live:
            raise AdminError(f"{r.name} (region {r.number}) was removed from the database: it has nothing to back up")
        targets = [r]
    else:
        targets = cfg.live_regions()
    try:
        os.makedirs(args.dir, exist_ok=True)
    except OSError as e:
        raise AdminError(f"cannot create {args.dir}: {e.strerror or e}") from None
    present = [r.name for r in targets if os.path.lexists(os.path.join(args.dir, r.name))]
    if present and not args.force:
        # one directory per backup run: a restore of every region takes its regions from one run
        raise AdminError(f"{args.dir} already holds a backup of {', '.join(present)}: give a new directory for "
                         "each backup (or --force to replace those)")
    run = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    failed = []
    for r in targets:
        try:
            if r.name not in found:  # asked just now: not asked twice
                raise AdminError(next((f for f in failures if f.startswith(f"region {r.name} ")),
                                      f"region {r.name} did not answer"))
            info = _backup_region(cfg, r, args.dir, args.timeout, run)
        except AdminError as e:
            failed.append(r.name)
            print(f"braid-admin: backup of {r.name} failed: {e}", file=sys.stderr)
            continue
        vv = ",".join(f"{o}={n}" for o, n in sorted(info.vv.items())) or "-"
        console.print(f"{r.name} (region {r.number}): {info.size} bytes, record {info.record}, version vector "
                      f"{vv} -> {os.path.join(args.dir, r.name)}", highlight=False, soft_wrap=True)  # one line each
    done = len(targets) - len(failed)
    if failed:
        print(f"braid-admin: {done} of {_count(len(targets), 'region')} backed up in {args.dir}; failed: "
              f"{', '.join(failed)}", file=sys.stderr)
        return 1
    console.print(f"backup of {_count(done, 'region')} of database {cfg.database} (cluster {cfg.cluster_id}) in "
                  f"{args.dir}. To restore a region: stop it, replace the appendonlydir/ of its data directory with the "
                  "one in its folder here, start it (docs/deploy.md, \"Backups\")", highlight=False)
    return 0


def _backup_region(cfg: ClusterConfig, r: RegionSpec, directory: str, timeout: float, run: str):
    """Take region ``r``'s snapshot and put it at ``directory/<name>`` once complete and checked
    (a temporary folder beside it until then); returns its BackupInfo."""
    final = os.path.join(directory, r.name)
    tmp = tempfile.mkdtemp(prefix=f".{r.name}.partial-", dir=directory)
    try:
        info = _receive_backup(cfg, r, tmp, timeout)
        manifest = {"cluster_id": info.cluster_id, "database": info.database, "region": info.region,
                    "number": info.number, "record": info.record, "vv": {str(o): n for o, n in sorted(info.vv.items())},
                    "bytes": info.size, "epoch": info.epoch, "log_dir": info.log_dir, "run": run,
                    "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        _write_durably(os.path.join(tmp, BACKUP_MANIFEST), (json.dumps(manifest, indent=2) + "\n").encode())
        aof.fsync_directory(tmp)
        if os.path.lexists(final):  # --force: the older backup goes only once this one is complete
            old = tempfile.mkdtemp(prefix=f".{r.name}.replaced-", dir=directory)
            os.replace(final, os.path.join(old, r.name))
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        aof.fsync_directory(directory)
        return info
    except OSError as e:
        raise AdminError(f"cannot write the backup of {r.name} in {directory}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # a failure's partial folder (gone already on success)


def _receive_backup(cfg: ClusterConfig, r: RegionSpec, folder: str, timeout: float):
    """Stream region ``r``'s snapshot into ``folder`` in the layout of its data folder (no run
    mark: a region's every start takes back from its peers what its folder lacks); check it."""
    info, out, received = None, None, 0
    with _client(cfg, r) as c:
        try:
            for chunk in c.backup(timeout):
                if chunk.WhichOneof("part") == "info":
                    info = chunk.info
                    if info.number != r.number or info.cluster_id != cfg.cluster_id:
                        raise AdminError(f"the region at {r.host}:{r.repl_port} is region {info.number} of cluster "
                                         f"{info.cluster_id!r}, not {r.name} (region {r.number}) of "
                                         f"{cfg.cluster_id!r}")
                    log_dir = info.log_dir or "appendonlydir"
                    if os.path.basename(log_dir) != log_dir or log_dir in (".", ".."):
                        raise AdminError(f"region {r.name} names its log directory {log_dir!r}, not a folder name")
                    log_dir = os.path.join(folder, log_dir)
                    os.makedirs(log_dir)
                    out = open(os.path.join(log_dir, snapshot.file_name(info.record)), "wb")
                elif out is None:
                    raise AdminError(f"region {r.name} sent data before saying what it is")
                else:
                    out.write(chunk.data)
                    received += len(chunk.data)
            if out is None:
                raise AdminError(f"region {r.name} ended the backup before sending anything")
            out.flush()
            os.fsync(out.fileno())
        except AdminCallError as e:
            raise _failure(r, e, f"not complete within {timeout:g} s; --timeout gives it longer") from None
        finally:
            if out is not None:
                out.close()
    if received != info.size:
        raise AdminError(f"region {r.name} sent {received} bytes of a {info.size}-byte snapshot")
    try:
        header = snapshot.read_header(out.name)
    except snapshot.SnapshotError as e:
        raise AdminError(f"the snapshot of {r.name} is not valid once written ({out.name}): {e}") from None
    if header.record != info.record or header.region != info.number or not header.active_active:
        raise AdminError(f"the snapshot of {r.name} holds record {header.record} of region {header.region}, "
                         f"not record {info.record} of region {info.number}")
    # the log continues after the snapshot's record: an empty segment says where (a log without
    # any segment would start again at record 1, below the snapshot)
    _write_durably(os.path.join(log_dir, aof.segment_name(info.record + 1)), b"")
    return info


def _write_durably(path: str, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="braid-admin", description="Administer a Braid Active-Active database: "
                                 "talk to its regions through their admin service (gRPC, the replication port).",
                                 epilog="exit status: 0 on success; 1 when a region is unreachable or refuses, "
                                        "or the command fails (the reason is printed); 2 for bad options")
    ap.add_argument("--cluster", metavar="FILE", help=f"the cluster file (default {DEFAULT_CLUSTER}); "
                                                      "ignored with --host/--port")
    ap.add_argument("--host", help="talk to the region at this host instead of reading a cluster file: it "
                                   "tells the rest (default 127.0.0.1 when only --port is given)")
    ap.add_argument("--port", type=int, help="that region's replication (gRPC) port (default 7101 when only "
                                             "--host is given)")
    ap.add_argument("--token", help="the cluster token, with --host/--port (default $BRAID_TOKEN)")
    ap.add_argument("--tls-ca", metavar="FILE",
                    help="CA bundle to check regions' certificates with (default: the cluster file's)")
    ap.add_argument("--tls-cert", metavar="FILE",
                    help="certificate braid-admin presents (default: the cluster file's admin_cert)")
    ap.add_argument("--tls-key", metavar="FILE", help="its private key (default: the cluster file's admin_key)")
    sub = ap.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    sub.add_parser("status", help="every member, its version vector, links and the operations each is behind",
                   description="Every member (state, address, keys), the version vectors (operations applied, "
                               "by origin region), every link and the operations its peer has not acknowledged "
                               "(also while paused or down), and the metadata waiting for causal stability. "
                               "Exit status 1 when a member is unreachable (it is listed as such).").set_defaults(
        fn=cmd_status)
    p = sub.add_parser("info", help="info db DB: the database's settings and each region's keys and vector")
    p.add_argument("what", choices=["db"], help="db: the database")
    p.add_argument("db", help="the database's name (the cluster file's database)")
    p.set_defaults(fn=cmd_info)
    p = sub.add_parser("tune", help="tune db DB SETTING VALUE: change a database setting at every region "
                                    "(crdt_xadd_id_uniqueness_mode, appendfsync, maxmemory)")
    p.add_argument("what", choices=["db"], help="db: the database")
    p.add_argument("db", help="the database's name")
    p.add_argument("setting", help="crdt_xadd_id_uniqueness_mode (strict, semi-strict, liberal), appendfsync "
                                   "(always, everysec, no) or maxmemory (bytes or 512mb, 4gb; 0: no limit)")
    p.add_argument("value", help="the new value; every region and the cluster file record it")
    p.set_defaults(fn=cmd_tune)
    p = sub.add_parser("replication", help="replication pause|resume --region NAME [--peer NAME]: cut or restore "
                                           "a region's links")
    p.add_argument("action", choices=["pause", "resume"], help="pause: cut the links (both ways); resume: "
                                                               "restore them (the peers catch up)")
    p.add_argument("--region", required=True, help="the region whose links to pause or resume")
    p.add_argument("--peer", help="only the link between --region and this region (default: all its links)")
    p.set_defaults(fn=cmd_replication)
    p = sub.add_parser("sync", help="sync wait [--timeout S] [--reachable]: wait until every member holds the "
                                    "same operations",
                       description="Wait until the members hold the same operations (the same version vector, "
                                   "nothing waiting for its dependencies). By default every member must answer: "
                                   "an unreachable one makes the wait fail at the deadline, naming it.",
                       epilog="exit status: 0 when in sync; 1 when not in sync by the deadline (the members "
                              "behind and the unreachable ones are named)")
    p.add_argument("action", choices=["wait"], help="wait: poll the members until they agree or time runs out")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long to wait (default 30)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--all", dest="reachable", action="store_false",
                       help="every member must answer and agree (the default)")
    which.add_argument("--reachable", action="store_true",
                       help="wait only for the members that answer; unreachable ones are named, not waited for")
    p.set_defaults(fn=cmd_sync, reachable=False)  # not --all's own default (True, as a store_false)
    p = sub.add_parser("tls", help="tls reload --region NAME: re-read the region's certificate, key and CA bundle")
    p.add_argument("action", choices=["reload"], help="reload: the region re-reads its TLS files; its links "
                                                      "handshake again")
    p.add_argument("--region", required=True, help="the region that reloads")
    p.set_defaults(fn=cmd_tls)
    p = sub.add_parser("region", help="region add|remove|purge: change the database's members")
    rsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = rsub.add_parser("add", help="add NAME --host H --port P --repl-port R [--number N]: a new member (it "
                                    "joins, catches up, then takes writes)")
    q.add_argument("name", help="the new region's name")
    # dest: braid-admin's own --host/--port say which region to talk to
    q.add_argument("--host", dest="region_host", required=True, help="the new region's host")
    q.add_argument("--port", dest="region_port", type=int, required=True, help="its RESP (client) port")
    q.add_argument("--repl-port", type=int, required=True, help="its gRPC port (replication and admin)")
    q.add_argument("--number", type=int, help="its region number (default: the lowest never used)")
    q.set_defaults(fn=cmd_region_add)
    q = rsub.add_parser("remove", help="remove NAME [--force]: gracefully, or at once when it is unreachable")
    q.add_argument("name", help="the member to remove")
    q.add_argument("--force", action="store_true",
                   help="do not wait for it: its operations no other member holds are lost (default: hand them "
                        "over first)")
    q.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long to wait for the hand-over (default 60)")
    q.set_defaults(fn=cmd_region_remove)
    q = rsub.add_parser("purge", help="purge --region NAME: wipe a removed region's data (it stops)")
    q.add_argument("--region", required=True, help="the removed region to wipe")
    q.set_defaults(fn=cmd_region_purge)
    p = sub.add_parser("flush", help="flush db DB [--timeout S] [--region NAME]: empty the whole database "
                                     "at every region (each must be reachable)")
    p.add_argument("what", choices=["db"], help="db: the database")
    p.add_argument("db", help="the database's name")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long the region may wait for operations it lacks (default 30)")
    p.add_argument("--region", help="the region that runs the flush (default: the first active member)")
    p.set_defaults(fn=cmd_flush)
    p = sub.add_parser("backup", help="backup --dir DIR [--region NAME] [--force]: a snapshot of every region "
                                      "(or one), written to DIR/<region>/",
                       description="Ask every member (or --region) for a snapshot taken now, as SAVE takes one, and "
                                   "write each to DIR/<region>/ in the layout of a region's data directory, checked "
                                   "once written. A region started from it first takes back from its peers what it "
                                   "lacks. The cluster file and the certificates are not in it: keep them too.",
                       epilog="exit status: 0 when every region was backed up; 1 when any was not (each is "
                              "named; the others are written)")
    p.add_argument("--dir", required=True, help="where to write: one folder per region (a new directory for each "
                                                "backup, so that a restore takes every region from one run)")
    p.add_argument("--region", help="back up only this region (default: every member)")
    p.add_argument("--force", action="store_true",
                   help="replace a backup of the same region already in DIR (default: refuse, naming it)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="how long one region's snapshot may take to arrive (default 600)")
    p.set_defaults(fn=cmd_backup)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        cfg, path = _cluster(args)
        return args.fn(args, cfg, path, console)
    except AdminError as e:
        print(f"braid-admin: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
