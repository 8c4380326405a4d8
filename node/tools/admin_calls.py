"""How ``braid-admin`` (node/tools/admin_cli.py) reaches the regions: the cluster it is pointed at (a
cluster file, or a region's port that tells the rest), the admin certificate it presents, calls
to one region and their failures as sentences, every member's status (taking a newer member
list a region reports).  The commands are in admin_cli.py, admin_regions.py and admin_backup.py.
"""

from __future__ import annotations

import os
import tomllib
from typing import Any

from crdt.membership import REMOVED, Member, Membership
from node.activeactive.cluster_config import ClusterConfig, RegionSpec, load
from node.region.slots import SlotMap, parse_ranges
from node.transport.admin import AdminCallError, AdminClient, AdminTls

DEFAULT_CLUSTER = os.path.join("data", "cluster.toml")

# a region's status reply, proto/admin_pb2.py's RegionStatus: the generated module declares its
# classes at run time, so there is no type to check them against (no stubs are generated)
RegionStatus = Any


class AdminError(Exception):
    """A command that failed, as a sentence; ``status``: braid-admin's exit status for it (1; 2 for
    what the options ask that this database cannot do)."""

    def __init__(self, message: str, unreachable: bool = False, status: int = 1) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        self.status = status


TLS_FILES: dict[str, str] = {}  # ca, cert, key: the files braid-admin presents and trusts (empty: plain text)
TLS_HOW = ("give --tls-ca, --tls-cert and --tls-key (the cluster's CA, the admin certificate and its key; braid up "
           "--tls makes them in DATA/tls/: ca.crt, admin.crt, admin.key) or a cluster file with [tls]")
TOKEN_WHENCE = "--token, else the cluster file's or $BRAID_TOKEN"


def read_tls(paths: dict[str, str]) -> dict[str, bytes]:
    out = {}
    for what, path in paths.items():
        try:
            with open(path, "rb") as f:
                out[what] = f.read()
        except OSError as e:
            raise AdminError(f"cannot read the TLS {what} file {path}: {e.strerror or e}") from None
    return out


def tls_for(server_name: str | None) -> AdminTls | None:
    if not TLS_FILES:
        return None
    pem = read_tls(TLS_FILES)
    return AdminTls(pem["ca"], pem["cert"], pem["key"], server_name)


def admin_client(cfg: ClusterConfig, r: RegionSpec) -> AdminClient:
    return AdminClient(f"{r.host}:{r.repl_port}", cfg.token, tls=tls_for(r.name))


# Calls that change nothing, asked again when a region is slow to answer: a region busy
# catching up (or a loaded machine) can miss one 5 s deadline without being down.
READ_ONLY_CALLS = {"status": 2, "cluster_toml": 2}


def call(cfg: ClusterConfig, r: RegionSpec, method: str, *args):
    attempts = READ_ONLY_CALLS.get(method, 1)
    with admin_client(cfg, r) as c:
        for attempt in range(1, attempts + 1):
            try:
                return getattr(c, method)(*args)
            except AdminCallError as e:
                if e.timed_out and attempt < attempts:
                    continue
                raise failure(r, e, f"no answer within {c.timeout:g} s, {attempts} times", cfg) from None


def shard_name(cfg: ClusterConfig, r: RegionSpec) -> str:
    """How a message names region ``r`` in ``cfg``: its name, and in a shard view of a sharded
    database, which shard of it."""
    return f"{r.name} shard {cfg.shard}" if cfg.shards.sharded else r.name


def failure(r: RegionSpec, e: AdminCallError, timed_out: str, cfg: ClusterConfig | None = None) -> AdminError:
    """A failed call to region ``r`` (of ``cfg``, the view of the shard called) as a sentence;
    ``timed_out``: what the deadline was."""
    name = r.name if cfg is None else shard_name(cfg, r)
    if e.tls_only:
        return AdminError(f"region {name} at {r.host}:{r.repl_port} answers only over TLS: {TLS_HOW}", True)
    if e.wrong_token:
        return AdminError(f"region {name} at {r.host}:{r.repl_port} refused the cluster token given "
                          f"({TOKEN_WHENCE}): it is not this cluster's")
    if e.timed_out:
        return AdminError(f"region {name} at {r.host}:{r.repl_port} is unreachable ({timed_out})", True)
    if e.unreachable:
        return AdminError(f"region {name} at {r.host}:{r.repl_port} is unreachable", True)
    return AdminError(f"region {name} refused: {e}")


def use_tls(args, cfg: ClusterConfig | None) -> None:
    """The admin certificate: the cluster file's, each part overridable by an option."""
    TLS_FILES.clear()
    given = {"ca": args.tls_ca, "cert": args.tls_cert, "key": args.tls_key}
    if cfg is not None and cfg.tls is not None:
        TLS_FILES.update(ca=cfg.tls.ca, cert=cfg.tls.admin_cert, key=cfg.tls.admin_key)
    elif any(given.values()) and not all(given.values()):
        raise AdminError("mutual TLS needs --tls-ca, --tls-cert and --tls-key together")
    TLS_FILES.update({k: v for k, v in given.items() if v})


def open_cluster(args) -> tuple[ClusterConfig, str | None]:
    if args.host or args.port:
        token = args.token or os.environ.get("BRAID_TOKEN", "")
        address = f"{args.host or '127.0.0.1'}:{args.port or 7101}"
        use_tls(args, None)
        # the first call checks the region's certificate against the host name dialed
        with AdminClient(address, token, tls=tls_for(None)) as c:
            try:
                data = tomllib.loads(c.cluster_toml())
            except AdminCallError as e:
                if e.tls_only:
                    raise AdminError(f"the region at {address} answers only over TLS: {TLS_HOW}") from None
                if e.wrong_token:
                    raise AdminError(f"the region at {address} refused the cluster token given (--token, else "
                                     "$BRAID_TOKEN): it is not this cluster's") from None
                raise AdminError(f"cannot administer {address}: {e} (is it a region's replication port, "
                                 "and the cluster token given with --token or $BRAID_TOKEN?)") from None
        try:
            shards = slot_map(data.get("shards", {}))
            regions = []
            for x in data["regions"]:
                port, repl_port, ports, repl_ports = endpoints(x, shards)
                regions.append(RegionSpec(x["name"], x["number"], x["host"], port, repl_port, ports=ports,
                                          repl_ports=repl_ports, status=x.get("status", "active"),
                                          frozen=x.get("frozen", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise AdminError(f"{address} sent a cluster file braid-admin cannot read: {e}") from None
        return ClusterConfig(data["cluster_id"], data["database"], token, data["stride"], regions,
                             data.get("id_mode", "strict"), epoch=data.get("epoch", 1), shards=shards), None
    path = args.cluster or DEFAULT_CLUSTER
    try:
        cfg = load(path)
        use_tls(args, cfg)
        if args.token:  # the one asked for is used, whatever the file says (a wrong one is refused)
            cfg.token = args.token
        return cfg, path
    except FileNotFoundError:
        raise AdminError(f"no cluster file at {path} (give --cluster FILE or --host/--port)") from None
    except (ValueError, KeyError, tomllib.TOMLDecodeError) as e:
        raise AdminError(f"{path}: {e}") from None


def slot_map(table: dict) -> SlotMap:
    """A region's ``[shards]`` table, as its cluster file holds it (absent: one shard)."""
    count = int(table.get("count", 1))
    if "slots" not in table:
        return SlotMap.even(count)
    return SlotMap.of([parse_ranges(x) for x in table["slots"]])


def endpoints(region: dict, shards: SlotMap) -> tuple[int, int, list[int], list[int]]:
    """A region entry's port and repl_port (shard 0's when sharded), and its per-shard lists."""
    if not shards.sharded:
        return region["port"], region["repl_port"], [], []
    ports, repl_ports = list(region["ports"]), list(region["repl_ports"])
    if not len(ports) == len(repl_ports) == shards.count:
        raise ValueError(f"region {region['name']} lists {len(ports)} ports and {len(repl_ports)} repl_ports for "
                         f"{shards.count} shards")
    return ports[0], repl_ports[0], ports, repl_ports


def region_named(cfg: ClusterConfig, name: str) -> RegionSpec:
    try:
        return cfg.region(name)
    except ValueError as e:
        raise AdminError(str(e)) from None


def check_db(cfg: ClusterConfig, db: str) -> None:
    if db != cfg.database:
        raise AdminError(f"no database named {db!r} (this cluster's database is {cfg.database!r})")


def statuses(cfg: ClusterConfig, path: str | None = None) -> tuple[dict[str, RegionStatus], list[str]]:
    """Status of every reachable member (by name), and a sentence per failure.  A region
    with a newer member list than ``cfg``'s updates it (and the file at ``path``), and the
    members it adds are asked too."""
    found: dict[str, RegionStatus] = {}
    failures: list[str] = []
    asked: set[int] = set()
    while True:
        todo = [r for r in cfg.live_regions() if r.number not in asked]
        if not todo:
            return found, failures
        for r in todo:
            asked.add(r.number)
            try:
                found[r.name] = call(cfg, r, "status")
            except AdminError as e:
                failures.append(str(e))
        newest = max(found.values(), key=lambda st: st.epoch, default=None)
        unknown = [] if newest is None or not cfg.shards.sharded else \
            [x.name for x in newest.members if cfg.by_number(x.number) is None and len(x.ports) != cfg.shards.count]
        if newest is not None and unknown:  # (a region of a version that did not send per-shard ports)
            failures.append(f"region {newest.name} shard {cfg.shard} lists members without a port and a repl port "
                            f"per shard ({', '.join(unknown)}): not recorded; add them to the file with theirs")
        elif newest is not None and newest.epoch > cfg.epoch:
            take_members(cfg, newest)
            if path is not None:
                cfg.save(path)
        for name in [name for name in found if cfg.region(name).status == REMOVED]:
            del found[name]


def take_members(cfg: ClusterConfig, st: RegionStatus) -> None:
    """Record a region's member list (a RegionStatus) in ``cfg``."""
    cfg.take_membership(group_membership(cfg, st), member_endpoints(st))


def member_endpoints(st: RegionStatus) -> dict[int, tuple]:
    """Where each member of a region's list (a RegionStatus) is, as ``ClusterConfig.take_membership``
    takes it: (host, port, repl_port), and each shard's ports on a sharded database."""
    return {x.number: (x.host, x.port, x.repl_port) + ((tuple(x.ports), tuple(x.repl_ports)) if x.ports else ())
            for x in st.members}


def group_membership(cfg: ClusterConfig, st: RegionStatus) -> Membership:
    """A region's member list (a RegionStatus) as crdt/membership.py keeps it."""
    return Membership(cfg.stride, st.epoch, {x.number: Member(x.number, x.name, x.status) for x in st.members},
                      {x.number: x.frozen for x in st.members if x.status == REMOVED})


def tls_pem() -> tuple[bytes, bytes, bytes] | None:
    if not TLS_FILES:
        return None
    pem = read_tls(TLS_FILES)
    return pem["ca"], pem["cert"], pem["key"]


def counted(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"

