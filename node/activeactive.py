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
        self.hub.make_image = self.resync_image
        self.hub.install_image = self.install_image

    @property
    def region(self) -> int:
        return self.me.number

    @property
    def stride(self) -> int:
        return self.cluster.stride

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        from .transport.admin import AdminServicer

        # listen where the RESP port listens (--bind; by default the region's host)
        await self.hub.serve(self.server.config["bind"], self.me.repl_port, extra=[AdminServicer(self)])
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
        self._unsafe.clear()
        self.hub.sendable = self.causal.end

    def logged(self, record: int) -> None:
        """Record ``record`` of the operation log holds what the causal log has now."""
        if self.causal.end > self.hub.sendable_upto():
            self._unsafe.append((record, self.causal.end))

    def durable(self, record: int) -> None:
        """Records up to ``record`` are durable (per appendfsync): their operations may leave."""
        unsafe, upto = self._unsafe, None
        while unsafe and unsafe[0][0] <= record:
            upto = unsafe.popleft()[1]
        if upto is not None:
            self.hub.sendable = upto
            self.hub.wake()

    # ------------------------------------------------------------ backlog and full resync
    def trim_backlog(self, max_bytes: int, ttl_s: float, now: float) -> int:
        """Drop the oldest operations every peer acknowledged, and any past the backlog's size or age.

        A peer that still lacked one of the latter gets a full resync when it comes back.
        Returns how many were dropped.
        """
        peers = [p.number for p in self.cluster.regions if p.number != self.region]
        acked = [self.hub.peer_acked.get(p, {}) for p in peers]
        log_, arrivals = self.causal.log, self.hub.arrivals
        size = sum(len(e.op) for e in log_) if max_bytes else 0
        # never what has not left yet, nor what a connected peer has not been sent
        stop = min([len(log_), self.hub.sendable_upto() - self.causal.base,
                    *(link.position - self.causal.base for link in self.hub.links.values())])
        k = 0
        while k < stop:
            e = log_[k]
            acked_by_all = all(a.get(e.origin, 0) >= e.n for a in acked)
            too_big = max_bytes and size > max_bytes
            too_old = ttl_s and now - arrivals[k] > ttl_s
            if not (acked_by_all or too_big or too_old):
                break
            size -= len(e.op)
            k += 1
        if k:
            self.hub.trim(k)
        return k

    def stable(self) -> dict[int, int]:
        """What every region of the database has applied (crdt/causal.py: causal stability)."""
        return self.causal.stable([r.number for r in self.cluster.regions])

    def collect_garbage(self) -> int:
        """Drop delete contexts every region has seen (crdt/ops.py: collect_garbage)."""
        return ops.collect_garbage(self.server.db.keys, self.stable())

    def resync_image(self) -> tuple[bytes, dict]:
        """This region's whole state and backlog, for a peer that lacks trimmed operations."""
        from .persistence import snapshot

        data = snapshot.encode(self.server.db.keys, self.causal, 0, int(time.time() * 1000), True, self.region)
        return data, dict(self.causal.vv)

    def install_image(self, data: bytes) -> bool:
        """Take a peer's image as this region's replicated state; keep what is this region's own.

        An image is taken only while this region lacks operations its sender trimmed:
        when two peers send one at once, the second finds nothing missing and is
        refused (False), so the link starts again and catches up from the backlog
        instead of replacing what the first image brought.

        Consumer groups keep their region-local state (consumers, PEL, cursors) when the
        image has the same group (same creation); operations this region held that the
        image lacks (its own among them) are applied again on top, so nothing is lost.
        Then a snapshot makes the new state the base of the append-only file.
        """
        from .persistence import snapshot

        img = snapshot.decode(data)
        if not any(self.causal.vv.get(o, 0) < n for o, n in img.causal.floor.items()):
            log.info("refusing a full-resync image: nothing it holds is missing from the backlog")
            return False
        old_keys, old_log = self.server.db.keys, self.causal.log + list(self.causal.pending.values())
        new_keys = img.keys
        for key, s in new_keys.items():
            old = old_keys.get(key)
            for name, g in s.groups.items():
                og = old.groups.get(name) if old is not None else None
                _keep_local_group_state(g, og if og is not None and og.created_dot == g.created_dot else None)
        for key, floor in old_keys.id_floor.items():  # never mint an ID this region minted before
            if floor > new_keys.id_floor.get(key, (0, 0)):
                new_keys.id_floor[key] = floor
        self.server.db.keys = new_keys
        self.causal.take(img.causal)
        self._unsafe.clear()
        self.hub.log_replaced()
        for env in old_log:
            if env.n > self.causal.vv.get(env.origin, 0):
                self.hub.deliver(env)
        server = self.server
        if server.oplog is not None:
            server.save(force=True)  # the old log does not lead here: the new state is the base
            self.log_started()
        for key in list(new_keys):
            server.db.ready.add(key)
        server.serve_ready_keys()
        log.warning("installed a full-resync image: version vector %s", self.causal.vv)
        return True

    # ------------------------------------------------------------ operations
    def publish(self, op: ops.Op) -> Envelope | None:
        """Send an operation this region applied; returns its envelope (None: it stays here).
        The operation log records the envelope's bytes: encoded once, for the wire and the file."""
        if isinstance(op, REPLICATED):
            return self.hub.issue(opcodec.encode(op))
        return None

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
            server.schedule_log_write()
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
            "backlog_ops": len(self.causal.log), "backlog_trimmed": self.causal.base,
            "resyncs_sent": self.hub.resyncs_sent, "resyncs_received": self.hub.resyncs_received,
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
            f"crdt_backlog_ops:{st['backlog_ops']}",
            f"crdt_backlog_trimmed:{st['backlog_trimmed']}",
            f"crdt_full_resyncs_sent:{st['resyncs_sent']}",
            f"crdt_full_resyncs_received:{st['resyncs_received']}",
            f"crdt_delete_contexts:{len(self.server.db.keys.key_contexts) + len(self.server.db.keys.group_contexts)}",
        ]
        for link in st["links"]:
            line = f"crdt_peer_{link['number']}:name={link['peer']},link={link['state']}"
            if link["state"] == "up":
                line += f",lag_ops={link['lag_ops']},lag_ms={link['lag_ms']:.0f}"
            lines.append(line)
        return lines


def _keep_local_group_state(g, old) -> None:
    """A group from a resync image: its local half (consumers, PEL, cursors) is this region's."""
    from sortedcontainers import SortedDict

    from crdt.groups import ENTRIES_READ_UNKNOWN

    if old is None:  # new here: nobody read it in this region yet
        g.pel, g.consumers, g.cursors, g.acked_sent, g._stamps = SortedDict(), {}, {}, {}, 0
        g.last_id, g.entries_read = g.floor, ENTRIES_READ_UNKNOWN
        return
    g.pel, g.consumers, g.cursors, g.acked_sent, g._stamps = old.pel, old.consumers, old.cursors, old.acked_sent, old._stamps
    g.last_id, g.entries_read, g.floor = old.last_id, old.entries_read, old.floor
    for origin, mark in old.watermarks.items():
        if mark > g.watermarks.get(origin, (0, 0)):
            g.watermarks[origin] = mark
