"""What a region reports of its Active-Active state: the status braid-admin reads (fields
named as admin.proto's ``RegionStatus``), the ``crdt_*`` lines of INFO crdt, and the figures
they are made of (each peer's lag, what waits for causal stability).

:class:`Status` is a part :class:`node.activeactive.region.ActiveActive` holds (``aa.report``):
it only reads, through :class:`Reported` (what the region and its other parts show: its
causal log, hub, member list, keyspace, counts), and changes nothing.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from crdt.causal import CausalLog
from crdt.membership import JOINING, Membership
from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.activeactive.lone_writes import LoneWrites

if TYPE_CHECKING:
    from node.activeactive.hub import ReplicationHub
    from node.region.db import Database


class Reported(Protocol):
    """What the status reads of the region (``ActiveActive`` and its parts)."""

    @property
    def me(self) -> RegionSpec: ...
    @property
    def region(self) -> int: ...
    @property
    def cluster(self) -> ClusterConfig: ...
    @property
    def mode(self) -> str: ...
    @property
    def causal(self) -> CausalLog: ...
    @property
    def hub(self) -> ReplicationHub: ...
    @property
    def db(self) -> Database: ...
    @property
    def membership(self) -> Membership: ...
    @property
    def lone(self) -> LoneWrites: ...
    @property
    def paused(self) -> bool: ...
    @property
    def writable(self) -> bool: ...
    @property
    def recovering(self) -> bool: ...
    @property
    def flushes_waiting(self) -> int: ...
    @property
    def membership_refused(self) -> int: ...
    @property
    def membership_dropped(self) -> int: ...
    def peers(self) -> list[RegionSpec]: ...
    def recovered(self) -> bool: ...
    def catch_up_progress(self) -> tuple[int, int]: ...
    def backlog_bytes(self) -> int: ...


class Status:
    """The reporting part of :class:`node.activeactive.region.ActiveActive`."""

    def __init__(self, aa: Reported) -> None:
        self.aa = aa

    def unstable_ops(self) -> dict[int, int]:
        """Per other region: how many operations applied here it is not yet known to have
        applied (crdt/causal.py's ``seen``).  Causal stability waits for the largest of
        these, and with it IDMP maps past their size and delete contexts (both kept until
        every region has applied what they guard)."""
        vv = self.aa.causal.vv
        out = {}
        for r in self.aa.peers():
            view = self.aa.causal.view(r.number, self.aa.hub.peer_reported.get(r.number))
            out[r.number] = sum(max(n - view.get(o, 0), 0) for o, n in vv.items())
        return out

    def peer_lag(self, number: int, now: float) -> tuple[int, float]:
        """(operations held here that region ``number`` has not acknowledged, age in ms of the
        oldest of them), whatever its link's state: a running link's own count, else what the
        peer last acknowledged (kept across reconnections) against the backlog, so the lag of
        a paused or lost peer keeps growing (metrics, node/runtime/metrics.py).  Operations already
        trimmed from the backlog are not counted (the peer will get a full resync)."""
        link = self.aa.hub.links.get(number)
        if link is not None and not self.aa.hub.is_cut(number):
            return link.lag(now)
        acked = self.aa.hub.peer_acked.get(number, {})
        log_, arrivals = self.aa.causal.log, self.aa.hub.arrivals
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
        keys = self.aa.db.keys
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
        for peer in self.aa.peers():
            link = self.aa.hub.links.get(peer.number)
            state = ("paused" if self.aa.hub.is_cut(peer.number) else "fork" if peer.number in self.aa.hub.forks
                     else "down" if link is None else "merging" if link.merging
                     else "conflict" if link.conflict else "up")
            behind, age_ms = self.peer_lag(peer.number, now)  # a paused or lost peer's lag keeps growing
            links.append({"peer": peer.name, "number": peer.number, "state": state,
                          "lag_ops": behind, "lag_ms": age_ms, "unstable_ops": unstable[peer.number],
                          "peer_own_ops": self.aa.hub.peer_acked.get(peer.number, {}).get(peer.number, 0)})
        held, target = self.aa.catch_up_progress()
        members = [{"name": r.name, "number": r.number, "status": r.status, "host": r.host, "port": r.port,
                    "repl_port": r.repl_port, "frozen": r.frozen, "ports": r.ports, "repl_ports": r.repl_ports}
                   for r in self.aa.cluster.regions]
        return {
            "name": self.aa.me.name, "number": self.aa.region, "cluster_id": self.aa.cluster.cluster_id,
            "database": self.aa.cluster.database, "id_mode": self.aa.mode, "paused": self.aa.paused,
            "vv": dict(self.aa.causal.vv), "pending": len(self.aa.causal.pending), "links": links,
            "keys": len(self.aa.db.keys), "refused_handshakes": self.aa.hub.refused,
            "resp_address": f"{self.aa.me.host}:{self.aa.me.port}",
            "backlog_ops": len(self.aa.causal.log), "backlog_trimmed": self.aa.causal.base,
            "resyncs_sent": self.aa.hub.resyncs_sent, "resyncs_received": self.aa.hub.resyncs_received,
            "backlog_bytes": self.aa.backlog_bytes(), **self.metadata_sizes(),
            "stability_held_by": [r.name for r in self.aa.peers() if unstable.get(r.number)],
            "epoch": self.aa.membership.epoch, "members": members, "writable": self.aa.writable,
            "catch_up_held": held, "catch_up_target": target, "membership_refused": self.aa.membership_refused,
            "membership_dropped": self.aa.membership_dropped,
            "heads": self.aa.causal.held_heads(), "history_forks": self.aa.hub.history_forks,
            "state_joins": self.aa.hub.joins,
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
            "crdt_history:" + ",".join(f"{o}={d:016x}" for o, d in sorted(st["heads"].items())),
            f"crdt_history_forks:{st['history_forks']}",
            f"crdt_pending:{st['pending']}",
            f"crdt_refused_handshakes:{st['refused_handshakes']}",
            f"crdt_link_tls:{'mutual' if self.aa.hub.tls is not None else 'off'}",
            f"crdt_denied_handshakes:{self.aa.hub.denied}",
            f"crdt_backlog_ops:{st['backlog_ops']}",
            f"crdt_backlog_trimmed:{st['backlog_trimmed']}",
            f"crdt_backlog_bytes:{st['backlog_bytes']}",
            f"crdt_full_resyncs_sent:{st['resyncs_sent']}",
            f"crdt_full_resyncs_received:{st['resyncs_received']}",
            f"crdt_state_joins:{st['state_joins']}",
            f"crdt_link_protocol_errors:{self.aa.hub.protocol_errors}",
            f"crdt_link_stalls:{self.aa.hub.stalls}",
            f"crdt_relayed_ops:{self.aa.hub.relayed}",
            f"crdt_duplicate_ops:{self.aa.hub.duplicates}",
            f"crdt_forgotten_waiting_ops:{self.aa.hub.forgotten_at_handshake}",
            f"crdt_frames_sent:{self.aa.hub.frames_sent}",
            f"crdt_frames_received:{self.aa.hub.frames_received}",
            f"crdt_delete_contexts:{st['delete_contexts']}",
            f"crdt_idmp_keys:{st['idmp_keys']}",
            f"crdt_idmp_producers:{st['idmp_producers']}",
            f"crdt_idmp_iids_tracked:{st['idmp_iids_tracked']}",
            f"crdt_stability_held_by:{','.join(st['stability_held_by'])}",
            f"crdt_membership_epoch:{st['epoch']}",
            f"crdt_member_status:{self.aa.membership.status(self.aa.region) or 'none'}",
            f"crdt_membership_refused:{st['membership_refused']}",
            f"crdt_membership_dropped_ops:{st['membership_dropped']}",
            f"crdt_flushes_waiting:{self.aa.flushes_waiting}",
            f"crdt_recovering:{int(self.aa.recovering and not self.aa.recovered())}",
            *self.aa.lone.info_lines(),
        ]
        if self.aa.membership.status(self.aa.region) == JOINING:
            lines.append(f"crdt_catch_up:{st['catch_up_held']}/{st['catch_up_target']}")
        for link in st["links"]:
            line = f"crdt_peer_{link['number']}:name={link['peer']},link={link['state']}"
            if link["state"] == "up":
                line += f",lag_ops={link['lag_ops']},lag_ms={link['lag_ms']:.0f}"
            line += f",unstable_ops={link['unstable_ops']}"
            lines.append(line)
        return lines
