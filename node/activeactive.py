"""This region's part in an Active-Active database.

It owns the region's causal log (crdt/causal.py) and replication hub
(node/transport/replication.py), publishes every replicated operation the region applies,
and holds what the multi-region resolver (crdt/resolve.py) reads: the ID mode, the
region's number and stride, and the causal log's version vector.  It sees the region
only through the keyspace (``Database``) and the settings: applying another region's
operation, and installing a full-resync image, are the region core's
(node/core.py), which it reaches through the hub's ``on_apply`` / ``install_image``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections import deque
from collections.abc import Callable

from crdt import ops
from crdt.causal import CausalLog, Envelope
from crdt.sync import LinkState

from . import opcodec
from .cluster_config import DB_SETTINGS, ClusterConfig, RegionSpec
from .transport.replication import ReplicationHub

log = logging.getLogger("braid.activeactive")

# Operations other regions must see; the rest (XSETID, consumers, the PEL) stay local.
REPLICATED = (ops.AddEntry, ops.Trim, ops.DeleteEntries, ops.DeleteKey, ops.CreateGroup,
              ops.DestroyGroup, ops.AckWatermark, ops.ConfigureIdmp, ops.RecordIdmp, ops.FlushKeys)


class ActiveActive:
    def __init__(self, db, config, cluster: ClusterConfig, me: RegionSpec) -> None:
        """``db``: the region's Database (node/db.py); ``config``: its settings."""
        self.db = db
        self.config = config
        self.cluster = cluster
        self.me = me
        self.mode = cluster.id_mode
        self.causal = CausalLog(me.number)
        c = cluster
        tls = None
        if c.tls is not None:  # TlsConfigError (a ValueError) names a file that cannot be used
            from .transport.tls import LinkCredentials

            tls = LinkCredentials(c.tls.ca, *c.tls.region_pair(me))
        # the region core sets on_apply and install_image (node/core.py)
        self.hub = ReplicationHub(me.number, c.cluster_id, c.database, c.token, self.causal, _not_attached,
                                  config, tls=tls, names={r.number: r.name for r in c.regions})
        # (operation-log record, causal-log length once it is safe): links send an
        # operation only after the record that holds it is durable (see durable())
        self._unsafe: deque[tuple[int, int]] = deque()
        self.hub.make_image = lambda: self.resync_image(int(time.time() * 1000))
        # a database setting tuned here that is also a server setting (appendfsync)
        self.on_setting: Callable[[str, str], None] = lambda name, value: None
        # FLUSHALL run by the region core as a client's (logged, replicated); returns how many
        # keys it removed; ValueError: not run (see flush_when_caught_up)
        self.flush_database: Callable[[], int] = _no_flush
        self.flushes_waiting = 0  # cluster-wide flushes waiting for operations (INFO crdt)
        # the backlog's size in bytes, counted as operations join it (see backlog_bytes)
        self._backlog_bytes = 0
        self._counted = (0, 0, None)  # (causal.base, causal.end, log[0]) when last counted

    @property
    def region(self) -> int:
        return self.me.number

    @property
    def stride(self) -> int:
        return self.cluster.stride

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str) -> None:
        """Listen on ``host`` (where the RESP port listens) and dial the peers."""
        from .transport.admin import AdminServicer

        await self.hub.serve(host, self.me.repl_port, extra=[AdminServicer(self)])
        if self.hub.tls is None:
            log.warning("links between regions and the admin service are PLAIN TEXT (tls = false in the "
                        "cluster file): the cluster token and every operation cross the network in clear; "
                        "use a [tls] table anywhere but a loopback playground")
        try:  # SIGHUP re-reads the certificate, key and CA bundle (as braid-admin tls reload does)
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._reload_on_signal)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (InProcessServer) or no signals here
        for peer in self.cluster.regions:
            if peer.number > self.me.number:  # the lower number dials
                self.hub.dial(peer.number, f"{peer.host}:{peer.repl_port}")

    async def stop(self) -> None:
        try:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
        await self.hub.stop()

    def reload_tls(self) -> dict:
        """Re-read this region's certificate, key and CA bundle; links handshake again.
        ValueError (TlsConfigError too): nothing changed."""
        return self.hub.reload_tls()

    def _reload_on_signal(self) -> None:
        try:
            self.reload_tls()
        except ValueError as e:
            log.error("SIGHUP: TLS credentials not reloaded (the ones in use stay): %s", e)

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

    def logged(self, record: int, end: int | None = None) -> None:
        """Record ``record`` of the operation log holds what the causal log has now (or up to
        absolute position ``end``: an operation of another region is logged before the causal
        log counts it)."""
        end = self.causal.end if end is None else end
        if self._unsafe and self._unsafe[-1][1] > end:
            end = self._unsafe[-1][1]  # a later record never holds less (a reader served inside an apply)
        if end > self.hub.sendable_upto():
            self._unsafe.append((record, end))

    def durable(self, record: int) -> None:
        """Records up to ``record`` are durable (per appendfsync): their operations may leave."""
        unsafe, upto = self._unsafe, None
        while unsafe and unsafe[0][0] <= record:
            upto = unsafe.popleft()[1]
        if upto is not None:
            self.hub.sendable = upto
            self.hub.wake()

    # ------------------------------------------------------------ backlog and full resync
    def trim_backlog(self, max_bytes: int, ttl_s: float, now: float, link_positions: list[int] | None = None) -> int:
        """Drop the oldest operations every peer acknowledged, and any past the backlog's size or age.

        A peer that still lacked one of the latter gets a full resync when it comes back.
        Never drops what has not left yet, nor what a connected link has not sent
        (``link_positions``: absolute causal-log positions of the running links; default
        the hub's).  Returns how many were dropped.
        """
        peers = [p.number for p in self.cluster.regions if p.number != self.region]
        acked = [self.hub.peer_acked.get(p, {}) for p in peers]
        log_, arrivals = self.causal.log, self.hub.arrivals
        size = self.backlog_bytes()
        positions = [link.position for link in self.hub.links.values()] if link_positions is None else link_positions
        # never what has not left yet, nor what a connected peer has not been sent
        stop = min([len(log_), self.hub.sendable_upto() - self.causal.base,
                    *(p - self.causal.base for p in positions)])
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
            log_ = self.causal.log
            self._backlog_bytes = size
            self._counted = (self.causal.base, self.causal.end, log_[0] if log_ else None)
        return k

    def backlog_bytes(self) -> int:
        """Bytes of the operations in the backlog.  Counted as they join it (each call adds
        the operations appended since the last), not summed over the whole backlog every
        second; counted again only when the log was trimmed or replaced elsewhere (a full
        resync, a snapshot load)."""
        causal = self.causal
        log_, base, end = causal.log, causal.base, causal.end
        counted_base, counted_end, first = self._counted
        if base != counted_base or end < counted_end or (counted_end > base and log_[0] is not first):
            counted_end, self._backlog_bytes = base, 0
        if counted_end < end:
            self._backlog_bytes += sum(len(e.op) for e in log_[counted_end - base:])
        self._counted = (base, end, log_[0] if log_ else None)
        return self._backlog_bytes

    def stable(self) -> dict[int, int]:
        """What every region of the database has applied (crdt/causal.py: causal stability)."""
        return self.causal.stable([r.number for r in self.cluster.regions], self.hub.peer_acked)

    def collect_garbage(self) -> int:
        """Drop delete contexts every region has seen (crdt/ops.py: collect_garbage)."""
        return ops.collect_garbage(self.db.keys, self.stable())

    def resync_image(self, now_ms: int) -> tuple[bytes, dict]:
        """This region's whole state and backlog, for a peer that lacks trimmed operations."""
        from .persistence import snapshot

        data = snapshot.encode(self.db.keys, self.causal, 0, now_ms, True, self.region)
        return data, dict(self.causal.vv)

    def adopt_image(self, data: bytes) -> list[Envelope] | None:
        """Take a peer's image as this region's replicated state; keep what is this region's own.

        An image is taken only while this region lacks operations its sender trimmed:
        when two peers send one at once, the second finds nothing missing and is
        refused (None), so the link starts again and catches up from the backlog
        instead of replacing what the first image brought.

        Consumer groups keep their region-local state (consumers, PEL, cursors) when the
        image has the same group (same creation).  Returns the operations this region held
        (its own among them): the caller applies again on top those the image lacks, so
        nothing is lost (``RegionCore.install_image``).
        """
        from .persistence import snapshot

        img = snapshot.decode(data)
        if not any(self.causal.vv.get(o, 0) < n for o, n in img.causal.floor.items()):
            log.info("refusing a full-resync image: nothing it holds is missing from the backlog")
            return None
        if LinkState.image_loses(img.causal.vv, self.causal.floor):
            # dropped here since the handshake: installing it would lose them (crdt/sync.py)
            log.error("refusing a full-resync image that lacks operations this region dropped from its "
                      "backlog (image %s, floor %s)", img.causal.vv, self.causal.floor)
            return None
        old_keys, old_log = self.db.keys, self.causal.log + list(self.causal.pending.values())
        new_keys = img.keys
        for key, s in new_keys.items():
            old = old_keys.get(key)
            for name, g in s.groups.items():
                og = old.groups.get(name) if old is not None else None
                _keep_local_group_state(g, og if og is not None and og.created_dot == g.created_dot else None)
        for key, floor in old_keys.id_floor.items():  # never mint an ID this region minted before
            if floor > new_keys.id_floor.get(key, (0, 0)):
                new_keys.id_floor[key] = floor
        self.db.keys = new_keys
        self.causal.take(img.causal)
        self._unsafe.clear()
        self.hub.log_replaced()
        return old_log

    # ------------------------------------------------------------ operations
    def publish(self, op: ops.Op) -> Envelope | None:
        """Send an operation this region applied; returns its envelope (None: it stays here).
        The operation log records the envelope's bytes: encoded once, for the wire and the file."""
        if isinstance(op, REPLICATED):
            return self.hub.issue(opcodec.encode(op))
        return None

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
            self.on_setting(name, value)

    # ------------------------------------------------------------ the cluster-wide flush
    async def flush_when_caught_up(self, database: str, context: dict[int, int], timeout_s: float,
                                   poll_s: float = 0.01) -> tuple[int, dict[int, int]]:
        """braid-admin flush: wait until this region has applied every operation ``context``
        counts (braid-admin sends the pointwise maximum of every region's version vector), then
        flush as a FLUSHALL sent here would.  Every entry acknowledged at any region before
        braid-admin read the vectors is then removed everywhere; writes concurrent with the
        flush survive (observed-remove).  Returns (keys removed, version vector after).
        ValueError: another database; FlushNotReady: still lacking operations at the deadline
        (nothing flushed)."""
        if database != self.cluster.database:
            raise ValueError(f"no database named {database!r} (this cluster's database is "
                             f"{self.cluster.database!r})")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if self.missing(context):
            self.flushes_waiting += 1
            try:
                while self.missing(context):
                    if loop.time() >= deadline:
                        raise FlushNotReady(f"nothing flushed: after {timeout_s:g}s region {self.me.name} still "
                                            f"lacks {self.describe_missing(context)}"
                                            + (" (its replication is paused)" if self.paused else ""))
                    await asyncio.sleep(poll_s)  # polled: operations arrive on this loop, between polls
            finally:
                self.flushes_waiting -= 1
        removed = self.flush_database()
        return removed, dict(self.causal.vv)

    def missing(self, context: dict[int, int]) -> dict[int, tuple[int, int]]:
        """Per origin: (operations applied here, operations ``context`` counts) where fewer."""
        vv = self.causal.vv
        return {o: (vv.get(o, 0), n) for o, n in context.items() if vv.get(o, 0) < n}

    def describe_missing(self, context: dict[int, int]) -> str:
        names = {r.number: r.name for r in self.cluster.regions}
        return ", ".join(f"operations {have + 1}..{want} of {names.get(o, f'region {o}')}"
                         for o, (have, want) in sorted(self.missing(context).items()))

    def cluster_toml(self) -> str:
        """The cluster file this region runs with, token left out."""
        return "\n".join(line for line in self.cluster.to_toml().splitlines() if not line.startswith("token"))

    # ------------------------------------------------------------ status (INFO crdt, braid-admin)
    def unstable_ops(self) -> dict[int, int]:
        """Per other region: how many operations applied here it is not yet known to have
        applied (crdt/causal.py's ``seen``).  Causal stability waits for the largest of
        these, and with it IDMP maps past their size and delete contexts (both kept until
        every region has applied what they guard)."""
        vv = self.causal.vv
        out = {}
        for r in self.cluster.regions:
            if r.number != self.region:
                view = self.causal.view(r.number, self.hub.peer_acked.get(r.number))
                out[r.number] = sum(max(n - view.get(o, 0), 0) for o, n in vv.items())
        return out

    def peer_lag(self, number: int, now: float) -> tuple[int, float]:
        """(operations held here that region ``number`` has not acknowledged, age in ms of the
        oldest of them), whatever its link's state: a running link's own count, else what the
        peer last acknowledged (kept across reconnections) against the backlog, so the lag of
        a paused or lost peer keeps growing (metrics, node/metrics.py).  Operations already
        trimmed from the backlog are not counted (the peer will get a full resync)."""
        link = self.hub.links.get(number)
        if link is not None and not self.hub.is_cut(number):
            return link.lag(now)
        acked = self.hub.peer_acked.get(number, {})
        log_, arrivals = self.causal.log, self.hub.arrivals
        behind, oldest = 0, None
        for i, e in enumerate(log_):
            if e.origin != number and e.n > acked.get(e.origin, 0):
                behind += 1
                if oldest is None:
                    oldest = i
        return behind, (now - arrivals[oldest]) * 1000 if oldest is not None else 0.0

    def metadata_sizes(self) -> dict:
        """What waits for causal stability: IDMP maps (keys holding them, producers, iids,
        dropped keys' maps included) and delete contexts."""
        keys = self.db.keys
        maps = [s.idmp for k in keys.idmp_keys() if (s := keys.get(k)) is not None and s.idmp.producers]
        maps += list(keys.idmp_kept.values())
        return {"idmp_keys": len(maps), "idmp_producers": sum(m.pids_tracked for m in maps),
                "idmp_iids_tracked": sum(m.iids_tracked for m in maps),
                "delete_contexts": len(keys.key_contexts) + len(keys.group_contexts)}

    def status(self) -> dict:
        """This region's replication state; field names are admin.proto's RegionStatus."""
        now = time.monotonic()
        unstable = self.unstable_ops()
        links = []
        for peer in self.cluster.regions:
            if peer.number == self.region:
                continue
            link = self.hub.links.get(peer.number)
            state = ("paused" if self.hub.is_cut(peer.number) else "down" if link is None
                     else "conflict" if link.conflict else "up")
            behind, age_ms = link.lag(now) if state == "up" else (0, 0.0)
            links.append({"peer": peer.name, "number": peer.number, "state": state,
                          "lag_ops": behind, "lag_ms": age_ms, "unstable_ops": unstable[peer.number]})
        return {
            "name": self.me.name, "number": self.region, "cluster_id": self.cluster.cluster_id,
            "database": self.cluster.database, "id_mode": self.mode, "paused": self.paused,
            "vv": dict(self.causal.vv), "pending": len(self.causal.pending), "links": links,
            "keys": len(self.db.keys), "refused_handshakes": self.hub.refused,
            "resp_address": f"{self.me.host}:{self.me.port}",
            "backlog_ops": len(self.causal.log), "backlog_trimmed": self.causal.base,
            "resyncs_sent": self.hub.resyncs_sent, "resyncs_received": self.hub.resyncs_received,
            "backlog_bytes": self.backlog_bytes(), **self.metadata_sizes(),
            "stability_held_by": [r.name for r in self.cluster.regions if unstable.get(r.number)],
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
            f"crdt_link_tls:{'mutual' if self.hub.tls is not None else 'off'}",
            f"crdt_denied_handshakes:{self.hub.denied}",
            f"crdt_backlog_ops:{st['backlog_ops']}",
            f"crdt_backlog_trimmed:{st['backlog_trimmed']}",
            f"crdt_backlog_bytes:{st['backlog_bytes']}",
            f"crdt_full_resyncs_sent:{st['resyncs_sent']}",
            f"crdt_full_resyncs_received:{st['resyncs_received']}",
            f"crdt_link_protocol_errors:{self.hub.protocol_errors}",
            f"crdt_link_stalls:{self.hub.stalls}",
            f"crdt_delete_contexts:{st['delete_contexts']}",
            f"crdt_idmp_keys:{st['idmp_keys']}",
            f"crdt_idmp_producers:{st['idmp_producers']}",
            f"crdt_idmp_iids_tracked:{st['idmp_iids_tracked']}",
            f"crdt_stability_held_by:{','.join(st['stability_held_by'])}",
            f"crdt_flushes_waiting:{self.flushes_waiting}",
        ]
        for link in st["links"]:
            line = f"crdt_peer_{link['number']}:name={link['peer']},link={link['state']}"
            if link["state"] == "up":
                line += f",lag_ops={link['lag_ops']},lag_ms={link['lag_ms']:.0f}"
            line += f",unstable_ops={link['unstable_ops']}"
            lines.append(line)
        return lines


class FlushNotReady(ValueError):
    """A cluster-wide flush whose region still lacked operations when its time was up."""


def _no_flush() -> int:
    raise ValueError("no region core runs commands for this region")


def _not_attached(env: Envelope) -> None:
    raise RuntimeError("no region core applies operations for this hub")


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
