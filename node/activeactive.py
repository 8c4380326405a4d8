"""This region's part in an Active-Active database.

It owns the region's causal log (crdt/causal.py) and replication hub
(node/transport/replication.py), publishes every replicated operation the region applies,
applies the operations other regions send (waking blocked readers), and gives
commands what the multi-region rules need: the ID mode, a deletion's context,
a group creation's dependencies.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from crdt import ops
from crdt.blocks import TrimSpec
from crdt.causal import CausalLog, Envelope
from crdt.ids import MAX_ID, MIN_ID, StreamID, decr

from . import opcodec
from .cluster_config import DB_SETTINGS, ClusterConfig, RegionSpec
from .transport.replication import ReplicationHub

if TYPE_CHECKING:
    from .server import Server

log = logging.getLogger("braid.activeactive")

# Operations other regions must see; the rest (XSETID, consumers, the PEL) stay local.
REPLICATED = (ops.AddEntry, ops.Trim, ops.DeleteEntries, ops.DeleteKey, ops.CreateGroup,
              ops.DestroyGroup, ops.AckWatermark, ops.ConfigureIdmp, ops.RecordIdmp)


class ActiveActive:
    def __init__(self, server: "Server", cluster: ClusterConfig, me: RegionSpec) -> None:
        self.server = server
        self.cluster = cluster
        self.me = me
        self.mode = cluster.id_mode
        self.causal = CausalLog(me.number)
        c = cluster
        self.hub = ReplicationHub(me.number, c.cluster_id, c.database, c.token, self.causal, self._on_apply)
        # (operation-log record, causal-log length once it is safe): links send an
        # operation only after the record that holds it is durable (see durable())
        self._unsafe: deque[tuple[int, int]] = deque()

    @property
    def region(self) -> int:
        return self.me.number

    @property
    def stride(self) -> int:
        return self.cluster.stride

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        from .transport.admin import AdminServicer

        await self.hub.serve(self.me.host, self.me.repl_port, extra=[AdminServicer(self)])
        for peer in self.cluster.regions:
            if peer.number > self.me.number:  # the lower number dials
                self.hub.dial(peer.number, f"{peer.host}:{peer.repl_port}")

    async def stop(self) -> None:
        await self.hub.stop()

    @property
    def paused(self) -> bool:
        return self.hub.paused

    def peer(self, name: str) -> RegionSpec:
        """Another region of the database, by name (ValueError names the known ones)."""
        spec = self.cluster.region(name)
        if spec.number == self.region:
            raise ValueError(f"{name!r} is this region, not a peer")
        return spec

    def pause(self, peer: str | None = None) -> None:
        """Stop all syncing of this region, or only its link to ``peer`` (writes stay local until resume)."""
        self.hub.pause(None if peer is None else self.peer(peer).number)

    def resume(self, peer: str | None = None) -> None:
        """Resume all links (``peer`` None) or the link to one peer."""
        self.hub.resume(None if peer is None else self.peer(peer).number)

    # ------------------------------------------------------------ the operation log
    def log_started(self) -> None:
        """Everything in the causal log now came from the loaded file: safe to send."""
        self.hub.sendable = len(self.causal.log)

    def logged(self, record: int) -> None:
        """Record ``record`` of the operation log holds what the causal log has now."""
        if len(self.causal.log) > self.hub.sendable_upto():
            self._unsafe.append((record, len(self.causal.log)))

    def durable(self, record: int) -> None:
        """Records up to ``record`` are durable (per appendfsync): their operations may leave."""
        unsafe, upto = self._unsafe, None
        while unsafe and unsafe[0][0] <= record:
            upto = unsafe.popleft()[1]
        if upto is not None:
            self.hub.sendable = upto
            self.hub.wake()

    # ------------------------------------------------------------ operations
    def publish(self, op: ops.Op) -> None:
        if isinstance(op, REPLICATED):
            self.hub.issue(opcodec.encode(op))

    def _on_apply(self, env: Envelope) -> None:
        try:
            op = opcodec.decode(env.op)
        except (ValueError, TypeError, KeyError) as e:  # never apply what cannot be read
            log.error("dropping an undecodable operation %s from region %d: %s", env.dot, env.origin, e)
            return
        server = self.server
        if server.oplog is not None and not server.replaying:
            server.oplog.log_remote(env)
            self.logged(server.oplog.last_record)  # relayed only once logged here
        self.server.db.apply_remote(op)
        self.server.serve_ready_keys()

    def context(self) -> dict[int, int]:
        """A deletion's context: this region's version vector including the deletion."""
        ctx = dict(self.causal.vv)
        ctx[self.region] = ctx.get(self.region, 0) + 1
        return ctx

    def creation(self) -> tuple[dict[int, int], tuple[int, int]]:
        """A group creation's dependencies and dot."""
        deps = dict(self.causal.vv)
        return deps, (self.region, deps.get(self.region, 0) + 1)

    # ------------------------------------------------------------ resolution
    @staticmethod
    def observed(s) -> dict[int, StreamID]:
        """The top of every origin log this region holds (deleted entries included)."""
        return {o: top for o, log_ in s.logs.items() if (top := log_.last_any()) is not None}

    @staticmethod
    def trim_cutoffs(s, spec: TrimSpec) -> dict[int, StreamID]:
        """A trim resolved into per-origin cutoffs over what this region holds.

        Active-Active trims are exact (``~`` may keep more, so removing precisely is
        allowed) and honour LIMIT; they never remove an entry this region has not seen.
        """
        if spec.maxlen is not None:
            excess = s.length - spec.maxlen
        else:
            excess = s.count_between(MIN_ID, decr(spec.minid) or MIN_ID) if spec.minid != MIN_ID else 0
        if spec.limit:
            excess = min(excess, spec.limit)
        cutoffs: dict[int, StreamID] = {}
        if excess <= 0:
            return cutoffs
        for n, (eid, origin, _flat) in enumerate(s.merged(MIN_ID, MAX_ID)):
            if n >= excess:
                break
            cutoffs[origin] = eid
        return cutoffs

    # ------------------------------------------------------------ database settings
    def tune(self, database: str, name: str, value: str) -> None:
        """Change a database setting here and in this region's cluster file (ValueError if invalid)."""
        if database != self.cluster.database:
            raise ValueError(f"no database named {database!r} (this cluster's database is "
                             f"{self.cluster.database!r})")
        if name not in DB_SETTINGS:
            raise ValueError(f"unknown database setting {name!r} (known: {', '.join(DB_SETTINGS)})")
        attr, choices = DB_SETTINGS[name]
        if value not in choices:
            raise ValueError(f"{name} must be one of: {', '.join(choices)}")
        before = getattr(self.cluster, attr)
        setattr(self.cluster, attr, value)
        try:
            self.cluster.save()  # first on disk, so that the setting survives a restart
        except OSError as e:
            setattr(self.cluster, attr, before)
            raise ValueError(f"cannot record the setting in {self.cluster.path}: {e.strerror}") from None
        if name == "crdt_xadd_id_uniqueness_mode":
            self.mode = value
        else:
            self.server.config.set(name, value)
            self.server.config_changed()

    def cluster_toml(self) -> str:
        """The cluster file this region runs with, token left out."""
        return "\n".join(line for line in self.cluster.to_toml().splitlines() if not line.startswith("token"))

    # ------------------------------------------------------------ status (INFO crdt, braid-admin)
    def status(self) -> dict:
        """This region's replication state; field names are admin.proto's RegionStatus."""
        now = time.monotonic()
        links = []
        for peer in self.cluster.regions:
            if peer.number == self.region:
                continue
            link = self.hub.links.get(peer.number)
            state = "paused" if self.hub.is_cut(peer.number) else "down" if link is None else "up"
            behind, age_ms = link.lag(now) if state == "up" else (0, 0.0)
            links.append({"peer": peer.name, "number": peer.number, "state": state,
                          "lag_ops": behind, "lag_ms": age_ms})
        return {
            "name": self.me.name, "number": self.region, "cluster_id": self.cluster.cluster_id,
            "database": self.cluster.database, "id_mode": self.mode, "paused": self.paused,
            "vv": dict(self.causal.vv), "pending": len(self.causal.pending), "links": links,
            "keys": len(self.server.db.keys), "refused_handshakes": self.hub.refused,
            "resp_address": f"{self.me.host}:{self.me.port}",
        }

    def info_lines(self) -> list[str]:
        st = self.status()
        lines = [
            f"crdt_region:{st['number']}",
            f"crdt_region_name:{st['name']}",
            f"crdt_cluster_id:{st['cluster_id']}",
            f"crdt_xadd_id_uniqueness_mode:{st['id_mode']}",
            f"crdt_replication:{'paused' if st['paused'] else 'active'}",
            "crdt_vv:" + ",".join(f"{o}={n}" for o, n in sorted(st["vv"].items())),
            f"crdt_pending:{st['pending']}",
            f"crdt_refused_handshakes:{st['refused_handshakes']}",
        ]
        for link in st["links"]:
            line = f"crdt_peer_{link['number']}:name={link['peer']},link={link['state']}"
            if link["state"] == "up":
                line += f",lag_ops={link['lag_ops']},lag_ms={link['lag_ms']:.0f}"
            lines.append(line)
        return lines
