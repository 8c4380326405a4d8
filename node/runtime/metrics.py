"""A region's Prometheus endpoint: ``GET /metrics`` on ``metrics-port`` (0: off).

Theory of operation
-------------------
Almost every number is read at scrape time from counters the region already keeps
for ``INFO`` and ``braid-admin status``: the core's :class:`node.region.core.Stats`
(commands, errors, connections), the operation log (fsyncs, records and bytes not
yet on disk), ``ActiveActive.status()`` and ``peer_lag`` (links, lag, backlog,
resyncs, handshakes, IDMP maps, delete contexts), the supervisor (background
failures, fail-stop) and the TLS port's counters.  :class:`RegionCollector` turns
them into metric families when Prometheus asks; nothing is counted twice on the
hot path.  The only per-call work is the latency histograms of XADD, XREADGROUP
and XACK: ``RegionCore.execute`` already times every command, and adds the time to
a :class:`node.region.core.LatencyHistogram` (a bisect and two additions) when one is
registered for the command, which happens only when metrics are on.  Each fsync's
duration is handed to another histogram by the operation log.

Where it is served.  prometheus-client's own HTTP server answers in a thread of its
own, but the state it would read is the event loop's: dicts that change size while
a command runs (clients, per-command counters, the backlog), and reads that update
caches (``backlog_bytes``).  Reading them from another thread could raise or see a
half-done command.  So the endpoint is an asyncio server on the region's own event
loop: a scrape runs between two commands, sees one consistent state, and never
blocks the loop on I/O (a client that sends its request slowly only holds its own
connection, up to :data:`REQUEST_TIMEOUT_S`).  prometheus-client still does the
encoding (text format, or OpenMetrics when the scraper asks for it).

Shards.  A shard of a sharded database (docs/sharding.md) is a region server with an
endpoint of its own, and every series it exposes carries ``shard="K"`` (its number in
the slot map), the process's own ``process_*`` included: :class:`ShardLabel` adds it to
every sample of the collectors it wraps, so a collector never has to think of it.  An
unsharded region (``[shards]`` absent or ``count = 1``: ``cluster_enabled:0``) has no
such label and exposes exactly the series it always did, so the dashboards, alerts and
stored series of a database that does not shard are untouched; in PromQL a missing
label is the empty string, so ``shard=~"$shard"`` with ``.*`` matches both.

Counters restart from 0 with the region and with ``CONFIG RESETSTAT`` (Prometheus
treats a decrease as a reset).  The metric names, types and labels are listed in
docs/metrics.md; tests/test_metrics.py checks that list against a scrape.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.process_collector import ProcessCollector

from node.region.stats import LatencyHistogram

if TYPE_CHECKING:
    from node.region.core import RegionCore
from node.security.acl import DENIED_AUTH, DENIED_CHANNEL, DENIED_CMD, DENIED_KEY
from node.version import BRAID_VERSION, REDIS_COMPAT_VERSION

log = logging.getLogger("braid.metrics")

# commands whose run time is kept as a histogram (the stream's write, read-by-group and ack)
TIMED_COMMANDS = ("xadd", "xreadgroup", "xack")
COMMAND_BUCKETS_S = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
                     100e-3, 250e-3, 1.0)
FSYNC_BUCKETS_S = (0.5e-3, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0,
                   10.0)
LINK_STATES = ("up", "down", "paused", "merging", "conflict", "fork")
REQUEST_TIMEOUT_S = 10.0
MAX_REQUEST_BYTES = 16 * 1024


class RegionMetrics:
    """The metrics of one region (its :class:`node.region.core.RegionCore`, which the server
    drives) and their HTTP endpoint."""

    def __init__(self, server: RegionCore) -> None:
        self.server = server
        self.registry = CollectorRegistry(auto_describe=False)  # one per region: no process-wide state
        self.commands = {name: LatencyHistogram(COMMAND_BUCKETS_S) for name in TIMED_COMMANDS}
        server.latency.update(self.commands)
        self.fsync = LatencyHistogram(FSYNC_BUCKETS_S)
        if server.oplog is not None:
            server.oplog.on_fsync = self.fsync.observe_ns
        routing = server.routing  # None: an unsharded region
        self.shard: int | None = routing.me if routing is not None else None
        collectors = [RegionCollector(self), ProcessCollector(registry=None)]  # process_*: CPU, memory, fds
        if self.shard is not None:
            collectors = [ShardLabel(str(self.shard), collectors)]
        for collector in collectors:
            self.registry.register(collector)
        self._http: asyncio.base_events.Server | None = None
        self._serving: set[asyncio.Task] = set()  # one per open scrape connection (stop() ends them)
        self.port = 0

    def scrape(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition (body, content type) for an ``Accept`` header."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    # ------------------------------------------------------------ the endpoint
    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port``; OSError names ``metrics-port`` when it cannot."""
        try:
            self._http = await asyncio.start_server(self._serve, host, port, reuse_address=True,
                                                    limit=MAX_REQUEST_BYTES)
        except OSError as e:  # uvloop's strerror repeats the address: say only what went wrong
            reason = os.strerror(e.errno) if e.errno else e.strerror or str(e)
            raise OSError(e.errno, f"metrics-port {port}: {reason}") from None
        self.port = self._http.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", host, self.port)

    async def stop(self) -> None:
        if self._http is not None:
            self._http.close()
            for task in list(self._serving):
                task.cancel()  # a scraper still connected: its connection closes now
            if self._serving:
                await asyncio.wait(self._serving)
            await self._http.wait_closed()
            self._http = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # (a served connection runs in a task)
        self._serving.add(task)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            status, body, ctype = self._answer(head)
            writer.write(b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                         % (status.encode(), ctype.encode(), len(body)))
            if not head.startswith(b"HEAD "):
                writer.write(body)
            await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # a scraper that went away or sent no request: only its own connection ends
        finally:
            self._serving.discard(task)
            writer.close()

    def _answer(self, head: bytes) -> tuple[str, bytes, str]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "400 Bad Request", b"bad request\n", "text/plain"
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", b"GET /metrics\n", "text/plain"
        if target not in ("/metrics", "/"):
            return "404 Not Found", b"the metrics are at /metrics\n", "text/plain"
        accept = next((line.split(":", 1)[1].strip() for line in lines[1:]
                       if line.lower().startswith("accept:")), "")
        body, ctype = self.scrape(accept)
        return "200 OK", body, ctype


class ShardLabel:
    """Gives every sample of ``collectors`` the label ``shard``: a shard's whole exposition
    says which shard it is, whatever Prometheus's scrape configuration adds."""

    def __init__(self, shard: str, collectors: list) -> None:
        self.shard = shard
        self.collectors = collectors

    def collect(self):
        for collector in self.collectors:
            for family in collector.collect():
                family.samples = [s._replace(labels={**s.labels, "shard": self.shard}) for s in family.samples]
                yield family


def _histogram(name: str, doc: str, labels: list[str], rows) -> HistogramMetricFamily:
    """``rows``: (label values, LatencyHistogram) pairs."""
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, h in rows:
        cumulative, buckets = 0, []
        for bound, count in zip(h.bounds_ns, h.counts, strict=False):  # (counts has one more: +Inf)
            cumulative += count
            buckets.append((repr(bound / 1e9), cumulative))
        cumulative += h.counts[-1]
        buckets.append(("+Inf", cumulative))
        family.add_metric(values, buckets, h.sum_ns / 1e9)
    return family


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class RegionCollector:
    """Reads the region's counters when Prometheus scrapes (see the module's docstring).
    Runs on the event loop's thread, between two commands."""

    def __init__(self, metrics: RegionMetrics) -> None:
        self.metrics = metrics

    def collect(self):
        srv = self.metrics.server
        yield from self._region(srv)
        yield from self._commands(srv)
        yield from self._clients(srv)
        yield from self._persistence(srv)
        if srv.aa is not None:
            yield from self._replication(srv.aa)

    # ------------------------------------------------------------ the region
    def _region(self, srv: RegionCore):
        info = GaugeMetricFamily("braid_region_info", "This region: its number and name, Braid's version and "
                                 "the Redis release whose stream semantics it implements (always 1)",
                                 labels=["region", "region_name", "version", "redis_version"])
        aa = srv.aa
        info.add_metric([str(srv.region), aa.me.name if aa is not None else "", BRAID_VERSION,
                         REDIS_COMPAT_VERSION], 1)
        yield info
        yield _gauge("braid_uptime_seconds", "Seconds since the region started", time.time() - srv.start_time)
        yield _gauge("braid_fail_stopped", "1 once the region fail-stopped (its state may be wrong: restart it)",
                     int(srv.failed is not None))
        yield _counter("braid_background_failures", "Failures of background work: cron steps, long-lived "
                       "tasks, exceptions the event loop caught", srv.supervisor.failures)
        yield _gauge("braid_keys", "Keys (streams) in the keyspace", len(srv.db.keys))
        yield _gauge("braid_used_memory_bytes", "What the region holds in memory (INFO used_memory; maxmemory "
                     "limits it)", srv.memory.used())
        yield _gauge("braid_maxmemory_bytes", "The memory limit (0: none)", srv.memory.limit)
        yield _gauge("braid_over_maxmemory", "1 while used memory is past maxmemory (commands that add data are "
                     "refused with OOM; other regions' operations are still applied)",
                     int(bool(srv.memory.limit) and srv.memory.out_of_memory()))
        tls = srv.tls
        yield _counter("braid_tls_handshakes", "TLS handshakes completed on the client port",
                       tls.stats.handshakes if tls is not None else 0)
        failures = CounterMetricFamily("braid_tls_handshake_failures", "TLS handshakes that failed on the "
                                       "client port, by reason", labels=["reason"])
        if tls is not None:
            for reason, n in tls.stats.failures.items():
                failures.add_metric([reason], n)
        yield failures

    # ------------------------------------------------------------ commands
    def _commands(self, srv: RegionCore):
        st = srv.stats
        calls = CounterMetricFamily("braid_commands", "Commands run, by command name (subcommands as "
                                    "`container|sub`)", labels=["command"])
        failed = CounterMetricFamily("braid_command_errors", "Commands run that answered an error, by command "
                                     "name", labels=["command"])
        spent = CounterMetricFamily("braid_command_seconds", "Time spent running commands, by command name",
                                    labels=["command"])
        for name, (n, usec, _rejected, errors) in st.command_calls.items():
            calls.add_metric([name], n)
            failed.add_metric([name], errors)
            spent.add_metric([name], usec / 1e6)
        yield calls
        yield failed
        yield spent
        codes = CounterMetricFamily("braid_error_replies", "Error replies sent, by error code (the first word: "
                                    "ERR, WRONGTYPE, NOPERM...), rejected commands included", labels=["code"])
        for code, n in st.error_codes.items():
            codes.add_metric([code], n)
        yield codes
        yield _counter("braid_commands_processed", "Commands run (all names)", st.total_commands_processed)
        yield _counter("braid_command_internal_errors", "Commands whose handler raised having changed nothing "
                       "(answered ERR; a bug to report)", st.command_internal_errors)
        yield _histogram("braid_command_duration_seconds", "Time the region spent running a command (a blocked "
                         "read's wait is not included), for XADD, XREADGROUP and XACK", ["command"],
                         [([name], h) for name, h in self.metrics.commands.items()])
        acl = srv.acl
        denied = CounterMetricFamily("braid_acl_denied", "Commands and authentications refused by the users "
                                     "and permissions, by what was denied", labels=["reason"])
        for reason, which in (("auth", DENIED_AUTH), ("command", DENIED_CMD), ("key", DENIED_KEY),
                              ("channel", DENIED_CHANNEL)):
            denied.add_metric([reason], acl.denied[which])
        yield denied

    # ------------------------------------------------------------ clients
    def _clients(self, srv: RegionCore):
        st = srv.stats
        yield _gauge("braid_connected_clients", "Client connections open", len(srv.clients))
        yield _gauge("braid_blocked_clients", "Clients waiting in a blocking read (XREAD / XREADGROUP BLOCK)",
                     srv.blocking.count)
        yield _counter("braid_connections_received", "Client connections accepted", st.total_connections_received)
        yield _counter("braid_connections_rejected", "Client connections refused (maxclients)",
                       st.rejected_connections)
        closed = CounterMetricFamily("braid_client_buffer_disconnections", "Clients closed for what they held: "
                                     "their input (query buffer) or replies they did not read (output buffer)",
                                     labels=["buffer"])
        closed.add_metric(["query"], st.client_qbuf_limit_disconnections)
        closed.add_metric(["output"], st.client_outbuf_limit_disconnections)
        yield closed
        yield _counter("braid_net_input_bytes", "Bytes received from clients", st.net_input_bytes)
        yield _counter("braid_net_output_bytes", "Bytes sent to clients", st.net_output_bytes)

    # ------------------------------------------------------------ the operation log
    def _persistence(self, srv: RegionCore):
        oplog = srv.oplog
        if oplog is None:
            return  # appendonly no: there is no log
        yield _gauge("braid_aof_size_bytes", "Size of the append-only file (its segments)", oplog.size)
        yield _gauge("braid_aof_records_not_fsynced", "Records appended to the log and not yet on disk",
                     max(oplog.last_record - oplog.synced, 0))
        yield _gauge("braid_aof_bytes_not_fsynced", "Bytes appended to the log and not yet on disk",
                     max(oplog.file.appended_bytes - oplog.synced_bytes, 0))
        yield _counter("braid_aof_fsyncs", "fsyncs of the log that succeeded", oplog.fsyncs)
        yield _gauge("braid_aof_last_write_ok", "0 while writing or fsyncing the log fails (writes are refused "
                     "with MISCONF), else 1", int(oplog.error is None))
        yield _histogram("braid_aof_fsync_duration_seconds", "Time an fsync of the log took (with the directory's "
                         "when a segment was created)", [], [([], self.metrics.fsync)])
        yield _gauge("braid_snapshot_in_progress", "1 while a snapshot (BGSAVE) is being written", int(srv.saving))
        yield _gauge("braid_last_snapshot_timestamp_seconds", "When the last snapshot was written (Unix time)",
                     srv.last_save)
        yield _gauge("braid_last_snapshot_ok", "0 when the last snapshot failed, else 1", int(srv.last_bgsave_ok))
        yield _gauge("braid_changes_since_last_snapshot", "Changes to the keyspace since the last snapshot",
                     srv.db.dirty - srv.dirty_at_save)

    # ------------------------------------------------------------ Active-Active
    def _replication(self, aa):
        st = aa.status()
        now = time.monotonic()
        state = GaugeMetricFamily("braid_peer_link_state", "The link to each other region: 1 for its current "
                                  "state (up, down, paused, merging, conflict, fork), 0 for the others",
                                  labels=["peer", "state"])
        lag_ops = GaugeMetricFamily("braid_peer_lag_operations", "Operations held here that the peer has not "
                                    "acknowledged (grows while the link is down or paused)", labels=["peer"])
        lag_s = GaugeMetricFamily("braid_peer_lag_seconds", "Age of the oldest operation held here that the peer "
                                  "has not acknowledged (0 when it has them all)", labels=["peer"])
        unstable = GaugeMetricFamily("braid_peer_unstable_operations", "Operations applied here the peer is not "
                                     "yet known to have applied (causal stability waits for them)", labels=["peer"])
        for link in st["links"]:
            peer = link["peer"]
            for s in LINK_STATES:
                state.add_metric([peer, s], int(link["state"] == s))
            behind, age_ms = aa.peer_lag(link["number"], now)
            lag_ops.add_metric([peer], behind)
            lag_s.add_metric([peer], age_ms / 1000)
            unstable.add_metric([peer], link["unstable_ops"])
        yield state
        yield lag_ops
        yield lag_s
        yield unstable
        applied = CounterMetricFamily("braid_operations_applied", "Operations applied here, by origin region "
                                      "(the version vector)", labels=["origin"])
        # a region purged and added again keeps its name under a new number: the old one is told apart
        names = {r.number: r.name if r.live else f"{r.name} (removed, {r.number})" for r in aa.cluster.regions}
        for origin, n in st["vv"].items():
            applied.add_metric([names.get(origin, str(origin))], n)
        yield applied
        yield _gauge("braid_membership_epoch", "Membership changes agreed so far, plus one", st["epoch"])
        yield _counter("braid_membership_refused", "Handshakes refused because the peer is not a member "
                       "(never added, or removed)", st["membership_refused"])
        yield _counter("braid_membership_dropped_operations", "Operations of removed regions past their frozen "
                       "point, dropped", st["membership_dropped"])
        yield _counter("braid_forgotten_waiting_operations", "Operations of a peer that waited here for their "
                       "dependencies, forgotten when that peer handshook (it sends them again)",
                       aa.hub.forgotten_at_handshake)
        yield _gauge("braid_replication_paused", "1 while every link of this region is paused", int(st["paused"]))
        yield _gauge("braid_pending_operations", "Operations received that wait for the ones they depend on",
                     st["pending"])
        yield _gauge("braid_backlog_operations", "Operations kept for peers (the replication backlog)",
                     st["backlog_ops"])
        yield _gauge("braid_backlog_bytes", "Bytes of the operations in the replication backlog", st["backlog_bytes"])
        yield _gauge("braid_backlog_trimmed_operations", "Operations dropped from the backlog since the log began "
                     "(every peer had them, or past crdt-repl-backlog-size / -ttl)", st["backlog_trimmed"])
        yield _counter("braid_full_resyncs_sent", "Full resyncs (the whole state) sent to peers", st["resyncs_sent"])
        yield _counter("braid_full_resyncs_received", "Full resyncs received and installed", st["resyncs_received"])
        yield _counter("braid_state_joins", "Peers' states joined into this region's (both backlogs had dropped "
                       "operations the other lacked)", st["state_joins"])
        yield _counter("braid_history_forks", "Links found holding other operations than this region under the "
                       "same operation numbers (the regions differ until one withdraws its side or an operator "
                       "resolves it)", st["history_forks"])
        lone = aa.lone
        yield _gauge("braid_lone_writes", "1 while this region takes writes alone (crdt-lone-writes-after-ms): "
                     "what it applies stays here until every member has answered", int(lone.alone))
        yield _gauge("braid_lone_held_operations", "Operations this region applied alone, held", len(lone.ops))
        yield _counter("braid_lone_withdrawals", "Times this region withdrew the writes it took alone (a member "
                       "held other operations under their numbers)", lone.withdrawals)
        yield _counter("braid_lone_reissued_operations", "Withdrawn operations this region issued again under new "
                       "numbers", lone.reissued_ops)
        yield _counter("braid_handshakes_refused", "Link handshakes this region refused (wrong cluster, database, "
                       "token or certificate)", st["refused_handshakes"])
        yield _counter("braid_handshakes_denied", "Link handshakes peers refused to this region", aa.hub.denied)
        yield _counter("braid_link_protocol_errors", "Links closed because the peer broke the replication protocol",
                       aa.hub.protocol_errors)
        yield _counter("braid_link_stalls", "Links closed by the watchdog (no progress for "
                       "crdt-repl-stall-timeout-ms)", aa.hub.stalls)
        yield _gauge("braid_delete_contexts", "Delete contexts (DEL, XGROUP DESTROY) kept until every region "
                     "has seen them", st["delete_contexts"])
        yield _gauge("braid_idmp_keys", "Streams holding an IDMP map (dropped keys' maps included)", st["idmp_keys"])
        yield _gauge("braid_idmp_producers", "IDMP producers tracked", st["idmp_producers"])
        yield _gauge("braid_idmp_iids_tracked", "IDMP iids tracked", st["idmp_iids_tracked"])
