"""The cluster file: which regions form the database and how to reach them.

Example (``deploy/cluster.example.toml``)::

    cluster_id = "local"
    database = "db"
    token = "change-me"        # shared by the regions; a peer with another is refused
    stride = 16                # strict IDs: sequence ≡ region number (mod stride)

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

``tls = false`` or a ``[tls]`` table says how the regions' links run (kept as written here).
"""

from __future__ import annotations

import json
import os
import secrets
import tomllib
from dataclasses import dataclass, field


# settings naming files: a cluster file's [regions.config] gives them relative to its own directory
FILE_SETTINGS = frozenset({"tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-ca-cert-dir", "aclfile"})
ID_MODES = ("strict", "semi-strict", "liberal")
FSYNC_POLICIES = ("always", "everysec", "no")
# Settings of the database that braid-admin tunes on every region: name -> (attribute below, values)
DB_SETTINGS = {
    "crdt_xadd_id_uniqueness_mode": ("id_mode", ID_MODES),
    "appendfsync": ("appendfsync", FSYNC_POLICIES),
}


@dataclass(slots=True)
class RegionSpec:
    name: str
    number: int
    host: str
    port: int
    repl_port: int
    # server settings of this region by their CONFIG GET names ([regions.config]), applied at
    # start after the defaults and before the command line's options; file names as written
    config: dict[str, str | int] = field(default_factory=dict)


@dataclass(slots=True)
class ClusterConfig:
    cluster_id: str
    database: str
    token: str
    stride: int = 16
    regions: list[RegionSpec] = field(default_factory=list)
    id_mode: str = "strict"  # crdt_xadd_id_uniqueness_mode: strict | semi-strict | liberal
    appendfsync: str = "everysec"  # always | everysec | no, for every region
    path: str | None = None  # the file it was loaded from, rewritten when a setting changes
    # links between regions: False for `tls = false`, the [tls] table as written, or None
    # when the file says neither
    tls: dict | bool | None = None

    def save(self, path: str | None = None) -> None:
        """Write the file (atomically: a reader never sees half of it)."""
        path = path or self.path
        if path is None:
            return
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            f.write(self.to_toml())
        os.replace(tmp, path)

    def region(self, name: str) -> RegionSpec:
        for r in self.regions:
            if r.name == name:
                return r
        known = ", ".join(r.name for r in self.regions)
        raise ValueError(f"no region named {name!r} in the cluster file (regions: {known})")

    def region_settings(self, region: RegionSpec) -> dict[str, str | int]:
        """A region's [regions.config], file names resolved against the cluster file's directory."""
        base = os.path.dirname(os.path.abspath(self.path)) if self.path else os.getcwd()
        return {name: (os.path.join(base, value) if name in FILE_SETTINGS and isinstance(value, str) and value
                       else value) for name, value in region.config.items()}

    def validate(self) -> None:
        if self.id_mode not in ID_MODES:
            raise ValueError(f"id_mode must be one of {', '.join(ID_MODES)}")
        if self.appendfsync not in FSYNC_POLICIES:
            raise ValueError(f"appendfsync must be one of {', '.join(FSYNC_POLICIES)}")
        numbers = [r.number for r in self.regions]
        if len(set(numbers)) != len(numbers):
            raise ValueError("two regions share a number")
        for r in self.regions:
            if not 1 <= r.number < self.stride:
                raise ValueError(f"region {r.name}: number must be between 1 and {self.stride - 1}")

    def to_toml(self) -> str:
        lines = [f'cluster_id = "{self.cluster_id}"', f'database = "{self.database}"',
                 f'token = "{self.token}"', f"stride = {self.stride}", f'id_mode = "{self.id_mode}"',
                 f'appendfsync = "{self.appendfsync}"', ""]
        if self.tls is False:
            lines += ["tls = false", ""]
        elif isinstance(self.tls, dict):
            lines += ["[tls]", *(f"{k} = {_toml_value(v)}" for k, v in self.tls.items()), ""]
        for r in self.regions:
            lines += ["[[regions]]", f'name = "{r.name}"', f"number = {r.number}", f'host = "{r.host}"',
                      f"port = {r.port}", f"repl_port = {r.repl_port}", ""]
            if r.config:
                lines += ["[regions.config]", *(f"{k} = {_toml_value(v)}" for k, v in r.config.items()), ""]
        return "\n".join(lines)


def _toml_value(v: object) -> str:
    """A TOML scalar: a bare key or integer, else a basic string (JSON's escapes are TOML's)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v), ensure_ascii=False)


def load(path: str) -> ClusterConfig:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    cfg = ClusterConfig(
        cluster_id=str(data["cluster_id"]), database=str(data.get("database", "db")),
        token=str(data["token"]), stride=int(data.get("stride", 16)),
        id_mode=str(data.get("id_mode", "strict")),
        appendfsync=str(data.get("appendfsync", "everysec")),
        regions=[RegionSpec(str(r["name"]), int(r["number"]), str(r.get("host", "127.0.0.1")),
                            int(r["port"]), int(r["repl_port"]), _region_config(r))
                 for r in data.get("regions", [])],
        path=path,
        tls=data.get("tls"),
    )
    if cfg.tls is not None and cfg.tls is not False and not isinstance(cfg.tls, dict):
        raise ValueError("tls must be false or a [tls] table")
    cfg.validate()
    return cfg


def _region_config(region: dict) -> dict[str, str | int]:
    table = region.get("config", {})
    if not isinstance(table, dict):
        raise ValueError(f"region {region.get('name')}: config must be a table of settings")
    out: dict[str, str | int] = {}
    for name, value in table.items():
        if isinstance(value, bool):
            value = "yes" if value else "no"
        if not isinstance(value, (str, int)):
            raise ValueError(f"region {region.get('name')}: config {name} must be a string or an integer")
        out[str(name).lower()] = value
    return out


def local_cluster(regions: int, base_port: int) -> ClusterConfig:
    """The cluster ``braid up`` starts: regions on loopback, RESP on base_port.., gRPC on base_port+100.."""
    cfg = ClusterConfig("local-" + secrets.token_hex(4), "db", secrets.token_hex(16), 16, [
        RegionSpec(f"region-{i}", i, "127.0.0.1", base_port + i - 1, base_port + 100 + i - 1)
        for i in range(1, regions + 1)
    ], tls=False)
    cfg.validate()
    return cfg
