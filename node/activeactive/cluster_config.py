"""The cluster file: which regions form the database and how to reach them.

Example (``deploy/cluster.example.toml``)::

    cluster_id = "local"
    database = "db"
    token = "change-me"        # shared by the regions; a peer with another is refused
    stride = 16                # strict IDs: sequence ≡ region number (mod stride)
    maxmemory = "4gb"          # optional: each region's memory limit (0 or absent: none)

    [[regions]]
    name = "region-1"
    number = 1                 # 1 ≤ number < stride; it shows in strict IDs (110-1)
    host = "127.0.0.1"
    port = 7001                # RESP
    repl_port = 7101           # gRPC: replication and the admin service
    [regions.config]           # optional: server settings of this region, by their Redis names
    tls-port = 7201            # file names are relative to the cluster file's directory
    tls-cert-file = "tls/region-1.crt"
    tls-key-file = "tls/region-1.key"
    tls-ca-cert-file = "tls/ca.crt"

Links between regions and the admin service are mutual TLS or, said explicitly,
plain text; a file that says neither is refused::

    tls = false                # plain text (loopback playgrounds; braid node warns)

    [tls]                      # or mutual TLS (paths relative to this file's directory)
    ca = "tls/ca.crt"          # the CA bundle every region and braid-admin trust
    cert_dir = "tls"           # region R presents cert_dir/R.crt and cert_dir/R.key
    admin_cert = "tls/admin.crt"   # what braid-admin presents (default cert_dir/admin.crt)
    admin_key = "tls/admin.key"

Membership.  Regions are added and removed while the database runs
(``braid-admin region add/remove``, crdt/membership.py); every region records the
agreed list in its own cluster file: ``epoch`` counts the changes so far, and a
region's ``status`` is ``active`` (the default, not written), ``joining``,
``leaving`` or ``removed`` - a removed region stays in the file with ``frozen``, the
last of its operations the others accept, and its number is never used again::

    epoch = 3
    [[regions]]
    name = "region-3"
    number = 3
    status = "removed"
    frozen = 1234

A region's ``data_dir`` (``data_dir = "region-1"``, relative to the file) is where
``braid node --config FILE --region NAME`` keeps its data when no ``--data-dir`` is
given; ``braid up`` writes ``data_dir = "region-N"`` (a folder beside the file).  A
file without it falls back to ``NAME/`` beside the file when that folder exists (a
cluster ``braid up`` made before the field was written), else to ``./data``.

Shards.  A database may split its keys over several shards per region by hash slot
(docs/sharding.md): the ``[shards]`` table gives the count and, optionally, each shard's
slot ranges (the same in every region); each region then lists one client port and one
replication port per shard, and shard K of a region keeps its data in ``shard-K/`` of
the region's folder::

    [shards]
    count = 2
    slots = ["0-8191", "8192-16383"]   # default: equal contiguous ranges

    [[regions]]
    name = "region-1"
    number = 1
    host = "10.0.0.1"
    ports = [7001, 7002]               # RESP, shard K on ports[K]
    repl_ports = [7101, 7102]          # gRPC, shard K on repl_ports[K]
    [regions.config]
    tls-port = [7201, 7202]            # a port setting: one per shard (or N: shard K on N + K)

A shard runs on :meth:`ClusterConfig.shard_view`: the same file with every region's
``port``/``repl_port`` those of shard K - so a shard is a region server, and shard K of
every region forms one replication group as a whole region does without shards.  Each group
agrees its member list on its own, so a shard keeps its group's list in its data folder
(``members.json``, :attr:`ClusterConfig.members_file`) and starts from it; the file, written
by shard 0, records shard 0's group.  A member list carries each region's ports per shard.

A region may name its own pair instead (``tls_cert`` / ``tls_key`` in its
``[[regions]]`` entry).  ``ClusterConfig.tls`` is None for plain text, else a
:class:`LinkTls` with absolute paths; ``to_toml`` writes them back relative to the
file's directory.
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field

from crdt.membership import STATUSES, Member, Membership
from node.region.config import FSYNC_POLICIES, parse_memory
from node.region.routing import Shard, ShardRouting, node_id
from node.region.slots import SlotMap, parse_ranges

# settings of a region's [regions.config] that name files (relative to the cluster file)
FILE_SETTINGS = frozenset({"tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-ca-cert-dir", "aclfile"})
ID_MODES = ("strict", "semi-strict", "liberal")
# settings of a region's [regions.config] that name a port: each shard needs its own
PORT_SETTINGS = frozenset({"tls-port", "metrics-port"})
MAX_SHARDS = 64
MEMBER_STATUSES = ("active", "joining", "leaving", "removed")
# where a shard of a sharded database keeps its group's member list, in its data folder
GROUP_LIST_FILE = "members.json"


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"must be one of: {', '.join(choices)}")
        return value
    return check


def memory_value(value: object) -> int:
    """A memory amount as the file or braid-admin gives it: bytes, or Redis's units ("4gb")."""
    n = value if type(value) is int else parse_memory(str(value).encode())
    if n is None or n < 0:
        raise ValueError(f"must be a memory amount (bytes, or with a unit: 512mb, 4gb), not {value!r}")
    return n


# Settings of the database that braid-admin tunes on every region: name -> (attribute below,
# the check that turns the value given into the value kept, ValueError if it is not one)
DB_SETTINGS: dict[str, tuple[str, Callable[[str], object]]] = {
    "crdt_xadd_id_uniqueness_mode": ("id_mode", _one_of(ID_MODES)),
    "appendfsync": ("appendfsync", _one_of(FSYNC_POLICIES)),
    "maxmemory": ("maxmemory", memory_value),
}

# What each database setting does, for users (docs/settings.md is generated from it, with the
# server setting's own text for those that are also one).  Its key in the cluster file is its
# attribute's name in DB_SETTINGS.
DB_SETTING_DOCS: dict[str, str] = {
    "crdt_xadd_id_uniqueness_mode": (
        "Which IDs XADD takes: `strict` only `*` or a millisecond time, the sequence then carrying the region's "
        "number so that two regions never make the same ID; `semi-strict` also full IDs; `liberal` Redis's own "
        "rule (two regions may then add the same ID)."),
    "appendfsync": (
        "The cluster file's value is every region's at start (a region's `[regions.config]` or "
        "`--appendfsync` overrides it); `braid-admin tune` changes it at every region and in every region's file."),
    "maxmemory": (
        "The cluster file's value is every region's memory limit at start (a region's `[regions.config]` may set "
        "its own); `braid-admin tune` changes it at every region and in every region's file."),
}


TLS_CHOICE = ("say how regions talk: `tls = false` for plain text (loopback playgrounds only), "
              "or a [tls] table for mutual TLS (ca, cert_dir; see `braid certs create`)")


@dataclass(slots=True)
class RegionSpec:
    name: str
    number: int
    host: str
    port: int
    repl_port: int
    tls_cert: str | None = None  # this region's certificate, when not cert_dir/<name>.crt (absolute)
    tls_key: str | None = None
    # server settings of this region by their CONFIG GET names ([regions.config]), applied at
    # start after the defaults and before the command line's options; file names as written
    config: dict[str, str | int | list[int]] = field(default_factory=dict)
    status: str = "active"  # active | joining | leaving | removed (crdt/membership.py)
    frozen: int = 0         # removed: the last of its operations the other regions accept
    data_dir: str | None = None  # where its data lives (absolute), when the file says
    # a sharded database's endpoints, one per shard (empty: unsharded); ``port`` and
    # ``repl_port`` are then shard K's in the view of shard K (ClusterConfig.shard_view)
    ports: list[int] = field(default_factory=list)
    repl_ports: list[int] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.status != "removed"

    def shard_ports(self) -> list[int]:
        """The client port of each shard (one, unsharded)."""
        return self.ports or [self.port]


@dataclass(slots=True)
class LinkTls:
    """Mutual TLS on every replication and admin connection (absolute paths)."""

    ca: str            # the CA bundle: every CA whose certificates are accepted
    cert_dir: str      # region R's pair is cert_dir/R.crt, cert_dir/R.key unless its entry names one
    admin_cert: str    # braid-admin's client certificate (CN braid-admin)
    admin_key: str

    def region_pair(self, region: RegionSpec) -> tuple[str, str]:
        """The certificate and key ``region`` presents."""
        return (region.tls_cert or os.path.join(self.cert_dir, f"{region.name}.crt"),
                region.tls_key or os.path.join(self.cert_dir, f"{region.name}.key"))


@dataclass(slots=True)
class ClusterConfig:
    cluster_id: str
    database: str
    token: str
    stride: int = 16
    regions: list[RegionSpec] = field(default_factory=list)
    id_mode: str = "strict"  # crdt_xadd_id_uniqueness_mode: strict | semi-strict | liberal
    appendfsync: str = "everysec"  # always | everysec | no, for every region
    maxmemory: int = 0  # each region's memory limit in bytes (0: none); [regions.config] may override it
    path: str | None = None  # the file it was loaded from, rewritten when a setting changes
    tls: LinkTls | None = None  # None: plain-text links (the file says tls = false)
    epoch: int = 1  # membership changes agreed so far, plus one (crdt/membership.py)
    shards: SlotMap = field(default_factory=SlotMap)  # which shard owns which slots ([shards])
    shard: int = 0  # the shard this view is of (shard_view); 0 for the file as loaded
    # a shard of a sharded database: where it keeps its group's member list (its data folder's
    # GROUP_LIST_FILE), written with the file at every change and read back at its start
    members_file: str | None = None

    def shard_view(self, k: int) -> ClusterConfig:
        """The file as shard ``k`` of every region sees it: each region's ``port`` and
        ``repl_port`` are its shard k's (a shard is a region server of its own group)."""
        if not 0 <= k < self.shards.count:
            raise ValueError(f"shard {k} is not one of this database's {self.shards.count} (0-{self.shards.count - 1})")
        view = copy.deepcopy(self)
        view.shard = k
        if self.shards.sharded:
            for r in view.regions:
                r.port, r.repl_port = r.ports[k], r.repl_ports[k]
        return view

    def save(self, path: str | None = None) -> None:
        """Write the file (atomically: a reader never sees half of it); a shard also writes its
        group's member list (:attr:`members_file`), first."""
        if self.members_file is not None:
            _write_synced(self.members_file, self.membership_blob())
        path = path or self.path
        if path is None or self.shard != 0:
            return  # the shards of a region share its file: shard 0 keeps it
        tmp = f"{path}.{os.getpid()}.tmp"  # regions of a local cluster share one file
        with open(tmp, "w") as f:
            f.write(self.to_toml(os.path.dirname(os.path.abspath(path))))
        os.replace(tmp, path)

    def region(self, name: str) -> RegionSpec:
        """The region of that name: the member, or else the last removed one (a region purged
        and added again under a new number keeps its name)."""
        named = [r for r in self.regions if r.name == name]
        for r in named:
            if r.live:
                return r
        if named:
            return named[-1]
        known = ", ".join(r.name for r in self.regions if r.live)
        raise ValueError(f"no region named {name!r} in the cluster file (regions: {known})")

    def by_number(self, number: int) -> RegionSpec | None:
        for r in self.regions:
            if r.number == number:
                return r
        return None

    def live_regions(self) -> list[RegionSpec]:
        """Every member not removed (active, joining, leaving)."""
        return [r for r in self.regions if r.live]

    # ------------------------------------------------------------ membership
    def membership(self):
        """The member list this file records (crdt/membership.py)."""
        return Membership(self.stride, self.epoch, {r.number: Member(r.number, r.name, r.status) for r in self.regions},
                          {r.number: r.frozen for r in self.regions if not r.live})

    def take_membership(self, m, endpoints: dict[int, tuple] | None = None) -> None:
        """Record the list ``m`` (agreed, or adopted from a peer); ``endpoints``: (host, port,
        repl_port) of regions this file does not list yet - on a sharded database followed by
        their ports and repl ports, one per shard (port and repl_port are this view's shard's)."""
        endpoints = endpoints or {}
        missing = self.without_shard_ports(m, endpoints)
        if missing:  # (checked before a list is promised or adopted: the file could not record it)
            raise ValueError(missing)
        for number, member in sorted(m.members.items()):
            spec = self.by_number(number)
            if spec is None:
                host, port, repl_port, *per_shard = endpoints[number]
                ports, repl_ports = per_shard or ((), ())
                spec = RegionSpec(member.name, number, host, int(port), int(repl_port),
                                  ports=[int(x) for x in ports], repl_ports=[int(x) for x in repl_ports])
                self.regions.append(spec)
            spec.status = member.status
            spec.frozen = m.frozen.get(number, 0)
        self.epoch = m.epoch

    def without_shard_ports(self, m, endpoints: dict[int, tuple]) -> str:
        """'' when this file can record every member of ``m`` this view does not list yet, else
        why not: on a sharded database each needs a port and a repl port per shard (``endpoints``)."""
        for number, member in sorted(m.members.items()):
            if self.by_number(number) is not None:
                continue
            endpoint = endpoints.get(number, ())
            if len(endpoint) < 3:
                return f"region {member.name} is new to this region and its list does not say where it is"
            ports, repl_ports = (endpoint[3], endpoint[4]) if len(endpoint) == 5 else ((), ())
            if self.shards.sharded and not len(ports) == len(repl_ports) == self.shards.count:
                return (f"region {member.name} joins a database of {self.shards.count} shards without a port and a "
                        "repl port per shard")
        return ""

    def keep_group_list(self, m, endpoints: dict[int, tuple]) -> None:
        """Make ``m`` this view's member list, exactly: a shard group's own list (its member
        file, or its regions' answers to braid-admin), which may lack regions the cluster file
        lists (another group took a change this one has not)."""
        self.regions = [r for r in self.regions if r.number in m.members]
        self.take_membership(m, endpoints)

    def load_group_list(self) -> bool:
        """Take the group's member list this shard kept (:attr:`members_file`), when there is
        one; returns whether there was.  ValueError: it cannot be this database's list."""
        if self.members_file is None:
            return False
        try:
            with open(self.members_file, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            return False  # never changed since the database was made: the cluster file's list is the group's
        try:
            m, endpoints = membership_from_blob(blob, self.stride)
        except ValueError as e:
            raise ValueError(f"{self.members_file}: {e}") from None
        self.keep_group_list(m, endpoints)
        return True

    def drop_group_list(self) -> None:
        """Forget the group's member list this shard kept (a purged region: it comes back as a new member)."""
        if self.members_file is not None:
            try:
                os.remove(self.members_file)
            except FileNotFoundError:
                pass

    def membership_blob(self) -> bytes:
        """The member list with every region's address (and each shard's ports, sharded), as the
        handshake carries it."""
        return json.dumps({"epoch": self.epoch, "stride": self.stride, "regions": [
            {"name": r.name, "number": r.number, "host": r.host, "port": r.port, "repl_port": r.repl_port,
             "status": r.status, "frozen": r.frozen, **per_shard_ports(r.ports, r.repl_ports)}
            for r in self.regions]}, separators=(",", ":")).encode()

    def routing(self, region: RegionSpec) -> ShardRouting | None:
        """What this view's shard of ``region`` routes by (None: an unsharded database)."""
        if not self.shards.sharded:
            return None
        shards = []
        for k, ranges in enumerate(self.shards.ranges):
            settings = self.shard_view(k).shard_settings(region) if k != self.shard else self.shard_settings(region)
            shards.append(Shard(k, region.host, region.ports[k], int(settings.get("tls-port", 0) or 0),
                                node_id(self.cluster_id, region.number, k), ranges))
        return ShardRouting(self.shards, self.shard, shards)

    def shard_settings(self, region: RegionSpec) -> dict[str, str | int]:
        """:meth:`region_settings` for this view's shard: a port setting given per shard (a
        list) is this shard's, one given once is the first shard's, this shard's next to it."""
        out: dict[str, str | int] = {}
        for name, value in self.region_settings(region).items():
            if isinstance(value, list):
                out[name] = value[self.shard]
            elif name in PORT_SETTINGS and self.shards.sharded and isinstance(value, int) and value:
                out[name] = value + self.shard
            else:
                out[name] = value
        return out

    def validate(self) -> None:
        if self.id_mode not in ID_MODES:
            raise ValueError(f"id_mode must be one of {', '.join(ID_MODES)}")
        if self.appendfsync not in FSYNC_POLICIES:
            raise ValueError(f"appendfsync must be one of {', '.join(FSYNC_POLICIES)}")
        numbers = [r.number for r in self.regions]
        if len(set(numbers)) != len(numbers):
            raise ValueError("two regions share a number")
        names = [r.name for r in self.regions if r.live]
        if len(set(names)) != len(names):
            raise ValueError("two regions share a name")
        if self.epoch < 1:
            raise ValueError("epoch must be 1 or more")
        for r in self.regions:
            if not 1 <= r.number < self.stride:
                raise ValueError(f"region {r.name}: number must be between 1 and {self.stride - 1}")
            if r.status not in MEMBER_STATUSES:
                raise ValueError(f"region {r.name}: status must be one of {', '.join(MEMBER_STATUSES)}")
            count = self.shards.count
            if self.shards.sharded and not (len(r.ports) == len(r.repl_ports) == count):
                raise ValueError(f"region {r.name}: a database of {count} shards needs ports and repl_ports "
                                 f"with {count} ports each (one per shard)")
            for name, value in r.config.items():
                if isinstance(value, list) and (not self.shards.sharded or name not in PORT_SETTINGS
                                                or len(value) != count):
                    raise ValueError(f"region {r.name}: config {name} may be a list only for a port setting "
                                     f"({', '.join(sorted(PORT_SETTINGS))}), with one port per shard ({count})")


    def to_toml(self, base: str | None = None) -> str:
        """The file's text; paths relative to ``base`` (the file's directory) when given."""
        def path(p: str) -> str:
            return _quote(os.path.relpath(p, base) if base else p)

        lines = [f'cluster_id = "{self.cluster_id}"', f'database = "{self.database}"',
                 f'token = "{self.token}"', f"stride = {self.stride}", f'id_mode = "{self.id_mode}"',
                 f'appendfsync = "{self.appendfsync}"', f"epoch = {self.epoch}"]
        if self.maxmemory:
            lines.append(f"maxmemory = {self.maxmemory}")
        if self.tls is None:
            lines += ["tls = false  # plain-text links between regions: loopback playgrounds only", ""]
        else:
            t = self.tls
            lines += ["", "[tls]", f"ca = {path(t.ca)}", f"cert_dir = {path(t.cert_dir)}",
                      f"admin_cert = {path(t.admin_cert)}", f"admin_key = {path(t.admin_key)}", ""]
        if self.shards.sharded:  # (a table: after every top-level key)
            lines += ["[shards]", f"count = {self.shards.count}",
                      f"slots = {_toml_value(self.shards.describe())}", ""]
        for r in self.regions:
            lines += ["[[regions]]", f'name = "{r.name}"', f"number = {r.number}", f'host = "{r.host}"']
            if r.ports:
                lines += [f"ports = {_toml_value(r.ports)}", f"repl_ports = {_toml_value(r.repl_ports)}"]
            else:
                lines += [f"port = {r.port}", f"repl_port = {r.repl_port}"]
            if r.tls_cert:
                lines.append(f"tls_cert = {path(r.tls_cert)}")
            if r.tls_key:
                lines.append(f"tls_key = {path(r.tls_key)}")
            if r.data_dir:
                lines.append(f"data_dir = {path(r.data_dir)}")
            if r.status != "active":
                lines.append(f'status = "{r.status}"')
            if not r.live:
                lines.append(f"frozen = {r.frozen}")
            lines.append("")
            if r.config:
                lines += ["[regions.config]", *(f"{k} = {_toml_value(v)}" for k, v in r.config.items()), ""]
        return "\n".join(lines)

    def region_data_dir(self, region: RegionSpec) -> str | None:
        """Where ``region`` keeps its data when the command line does not say: the file's
        ``data_dir``, else ``NAME/`` beside the file when that folder exists; None: neither.
        (A shard keeps its own in ``shard-K/`` of it: :func:`shard_dir`.)"""
        if region.data_dir:
            return region.data_dir
        base = os.path.dirname(os.path.abspath(self.path)) if self.path else None
        if base and os.path.isdir(os.path.join(base, region.name)):
            return os.path.join(base, region.name)
        return None

    def region_settings(self, region: RegionSpec) -> dict[str, str | int | list[int]]:
        """A region's [regions.config], file names resolved against the cluster file's directory."""
        base = os.path.dirname(os.path.abspath(self.path)) if self.path else os.getcwd()
        return {name: (os.path.join(base, value) if name in FILE_SETTINGS and isinstance(value, str) and value
                       else value) for name, value in region.config.items()}


def membership_from_blob(blob: bytes, stride: int):
    """A peer's member list from its handshake: (Membership, endpoints of its regions).
    ValueError when it cannot be one of this database's lists."""
    try:
        data = json.loads(blob)
        epoch, regions = int(data["epoch"]), data["regions"]
        if int(data["stride"]) != stride:
            raise ValueError(f"its stride is {data['stride']}, this database's is {stride}")
        members, frozen = {}, {}
        endpoints: dict[int, tuple] = {}
        for r in regions:
            number, status = int(r["number"]), str(r["status"])
            if status not in STATUSES or not 1 <= number < stride or number in members:
                raise ValueError(f"region {r!r} cannot be a member")
            members[number] = Member(number, str(r["name"]), status)
            if status == "removed":
                frozen[number] = int(r.get("frozen", 0))
            endpoints[number] = (str(r["host"]), int(r["port"]), int(r["repl_port"]))
            if r.get("ports"):
                endpoints[number] += (tuple(int(x) for x in r["ports"]), tuple(int(x) for x in r["repl_ports"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"an unreadable member list: {e}") from None
    if epoch < 1:
        raise ValueError("an unreadable member list: epoch below 1")
    return Membership(stride, epoch, members, frozen), endpoints


def per_shard_ports(ports: list[int], repl_ports: list[int]) -> dict[str, list[int]]:
    """A member's per-shard ports as a member list carries them: none when unsharded."""
    return {"ports": list(ports), "repl_ports": list(repl_ports)} if ports else {}


def _write_synced(path: str, data: bytes) -> None:
    """Write ``path`` atomically and durably: a group's member list is a commit this shard
    promised to keep."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def shard_dir(region_dir: str, shards: SlotMap, k: int) -> str:
    """Where shard ``k`` of a region keeps its data: the region's folder itself unsharded."""
    return os.path.join(region_dir, f"shard-{k}") if shards.sharded else region_dir


def _toml_value(v: object) -> str:
    """A TOML scalar or list of them: a bare key or integer, else a basic string (JSON's
    escapes are TOML's)."""
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v), ensure_ascii=False)


def _region_config(region: dict) -> dict[str, str | int | list[int]]:
    table = region.get("config", {})
    if not isinstance(table, dict):
        raise ValueError(f"region {region.get('name')}: config must be a table of settings")
    out: dict[str, str | int | list[int]] = {}
    for name, value in table.items():
        if isinstance(value, bool):
            value = "yes" if value else "no"
        if isinstance(value, list) and all(type(x) is int for x in value):
            out[str(name).lower()] = value  # a port per shard (validate checks which settings)
            continue
        if not isinstance(value, (str, int)):
            raise ValueError(f"region {region.get('name')}: config {name} must be a string or an integer")
        out[str(name).lower()] = value
    return out


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _link_tls(data: dict, base: str) -> LinkTls | None:
    """The ``tls`` entry of a cluster file: False (plain text) or the [tls] table."""
    if "tls" not in data:
        raise ValueError(f"the cluster file does not say how regions talk: {TLS_CHOICE}")
    t = data["tls"]
    if t is False:
        return None
    if not isinstance(t, dict):
        raise ValueError(f"tls = {t!r} is not a choice: {TLS_CHOICE}")
    unknown = set(t) - {"ca", "cert_dir", "admin_cert", "admin_key"}
    if unknown:
        raise ValueError(f"[tls]: unknown setting(s) {', '.join(sorted(unknown))} "
                         "(known: ca, cert_dir, admin_cert, admin_key)")
    if "ca" not in t:
        raise ValueError("[tls] needs ca = \"<the cluster CA bundle>\"")

    def at(p) -> str:
        if not isinstance(p, str) or not p:
            raise ValueError(f"[tls]: {p!r} is not a path")
        return os.path.normpath(os.path.join(base, p))

    cert_dir = at(t.get("cert_dir", os.path.dirname(t["ca"]) or "."))
    return LinkTls(at(t["ca"]), cert_dir, at(t.get("admin_cert", os.path.join(cert_dir, "admin.crt"))),
                   at(t.get("admin_key", os.path.join(cert_dir, "admin.key"))))


def _file_memory(value: object) -> int:
    try:
        return memory_value(value)
    except ValueError as e:
        raise ValueError(f"maxmemory {e}") from None


def load(path: str) -> ClusterConfig:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    base = os.path.dirname(os.path.abspath(path))

    def pair(r: dict, key: str) -> str | None:
        return os.path.normpath(os.path.join(base, str(r[key]))) if r.get(key) else None

    shards = _slot_map(data.get("shards", {}))

    def endpoints(r: dict) -> tuple[int, int, list[int], list[int]]:
        if not shards.sharded:
            return int(r["port"]), int(r["repl_port"]), [], []
        ports, repl_ports = r.get("ports"), r.get("repl_ports")
        if not (isinstance(ports, list) and isinstance(repl_ports, list)
                and all(type(p) is int for p in ports + repl_ports)):
            raise ValueError(f"region {r.get('name')}: a sharded database lists ports = [...] and "
                             "repl_ports = [...], one per shard")
        return ports[0] if ports else 0, repl_ports[0] if repl_ports else 0, ports, repl_ports

    cfg = ClusterConfig(
        cluster_id=str(data["cluster_id"]), database=str(data.get("database", "db")),
        token=str(data["token"]), stride=int(data.get("stride", 16)),
        id_mode=str(data.get("id_mode", "strict")),
        appendfsync=str(data.get("appendfsync", "everysec")),
        maxmemory=_file_memory(data.get("maxmemory", 0)),
        regions=[RegionSpec(str(r["name"]), int(r["number"]), str(r.get("host", "127.0.0.1")),
                            *endpoints(r)[:2],
                            tls_cert=pair(r, "tls_cert"), tls_key=pair(r, "tls_key"), config=_region_config(r),
                            status=str(r.get("status", "active")), frozen=int(r.get("frozen", 0)),
                            data_dir=pair(r, "data_dir"), ports=endpoints(r)[2], repl_ports=endpoints(r)[3])
                 for r in data.get("regions", [])],
        path=path, tls=_link_tls(data, base), epoch=int(data.get("epoch", 1)), shards=shards,
    )
    cfg.validate()
    return cfg


def _slot_map(table: object) -> SlotMap:
    """The file's [shards] table (absent: one shard)."""
    if not isinstance(table, dict):
        raise ValueError("[shards] must be a table (count, slots)")
    count = table.get("count", 1)
    if type(count) is not int or not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"[shards] count must be a whole number from 1 to {MAX_SHARDS}, not {count!r}")
    slots = table.get("slots")
    if slots is None:
        return SlotMap.even(count)
    if not isinstance(slots, list) or len(slots) != count or not all(isinstance(x, str) for x in slots):
        raise ValueError(f"[shards] slots must list {count} strings of slot ranges (\"0-8191\"), one per shard")
    return SlotMap.of([parse_ranges(x) for x in slots])


# where braid up puts shard K of a region: its ports this far from shard 0's
LOCAL_SHARD_PORT_STEP = 20


def local_cluster(regions: int, base_port: int, data_dir: str | None = None, shards: int = 1) -> ClusterConfig:
    """The cluster ``braid up`` starts: regions on loopback, RESP on base_port.., gRPC on base_port+100..;
    with ``data_dir`` (the folder of the cluster file), region-N's data in ``data_dir/region-N``.
    With ``shards``, shard K of a region listens LOCAL_SHARD_PORT_STEP·K ports above shard 0."""
    def spec(i: int) -> RegionSpec:
        port, repl = base_port + i - 1, base_port + 100 + i - 1
        r = RegionSpec(f"region-{i}", i, "127.0.0.1", port, repl,
                       data_dir=os.path.join(data_dir, f"region-{i}") if data_dir else None)
        if shards > 1:
            step = [LOCAL_SHARD_PORT_STEP * k if base_port else 0 for k in range(shards)]
            r.ports, r.repl_ports = [port + s for s in step], [repl + s for s in step]
        return r

    cfg = ClusterConfig("local-" + secrets.token_hex(4), "db", secrets.token_hex(16), 16,
                        [spec(i) for i in range(1, regions + 1)], shards=SlotMap.even(shards))
    cfg.validate()
    return cfg
