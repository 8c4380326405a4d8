"""What a region counts about the commands it runs: INFO's stats and commandstats
(:class:`Stats`) and the run-time histograms of the metrics endpoint (:class:`LatencyHistogram`).

Plain counters, no I/O and no lock: the region core adds to them on its way out of every
command, and whoever reads them (INFO, node/runtime/metrics.py) runs on the same thread."""

from __future__ import annotations

from bisect import bisect_left


class Stats:
    def __init__(self) -> None:
        self.reset()
        self.total_connections_received = 0
        self.rejected_connections = 0
        self.client_qbuf_limit_disconnections = 0  # clients closed for their input (query buffer)
        self.client_outbuf_limit_disconnections = 0  # and for replies they did not read

    def reset(self) -> None:
        self.total_commands_processed = 0
        self.total_error_replies = 0
        self.unexpected_error_replies = 0
        self.command_internal_errors = 0  # handlers that raised having changed nothing (answered ERR)
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.command_calls: dict[str, list[int]] = {}  # name -> [calls, usec, rejected, failed]
        self.error_codes: dict[str, int] = {}


class LatencyHistogram:
    """Durations counted into fixed buckets (upper bounds in nanoseconds), as a Prometheus
    histogram reads them (node/runtime/metrics.py).  Kept here, with no lock and no label
    lookup, because a command's own time is taken on its way out of :meth:`RegionCore.execute`:
    one bisect and two additions per call; whoever reads it runs on the same thread."""

    __slots__ = ("bounds_ns", "counts", "sum_ns")

    def __init__(self, bounds_s: tuple[float, ...]) -> None:
        self.bounds_ns = tuple(round(b * 1e9) for b in bounds_s)
        self.counts = [0] * (len(bounds_s) + 1)  # the last one: above every bound (+Inf)
        self.sum_ns = 0

    def observe_ns(self, ns: int) -> None:
        self.counts[bisect_left(self.bounds_ns, ns)] += 1
        self.sum_ns += ns


