"""``braid-chaos run --backend netns``: the chaos suite against regions on separate hosts.

The regions run as in :class:`chaos.backends.ProcessBackend` (real ``braid
node`` processes; kill is SIGKILL and a restart on the same data, pause is
SIGSTOP), but each in its own network namespace behind the emulated WAN of
:mod:`chaos.netns`, with ``--wan-delay`` one way on every link.  Network faults
are cut in the network, by the delay line, not in a relay:

* partition and bridge: every packet between the two regions is dropped, in
  flight included (the regions' TCP connections time out or are reset by
  their keepalives, and new SYNs go unanswered);
* one-way: every packet one region sends the other is dropped (its stream
  stalls; so do the other direction's acknowledgements, as behind a real
  one-way firewall);
* link-faults: extra delay and jitter on every link, and the schedule's reset
  probability as packet loss (TCP retransmits; nothing is reset).
"""

from __future__ import annotations

import os

from .backends import DEBUG_FAULTS, NETWORK_FAULTS, PROCESS_FAULTS, ProcessBackend
from .netns import NetnsCluster


class NetnsBackend(ProcessBackend):
    faults = DEBUG_FAULTS | NETWORK_FAULTS | PROCESS_FAULTS

    def __init__(self, regions: int, workdir: str, fsync: str = "everysec", bug: str | None = None,
                 seed: int = 0, wan_delay: float = 0.04, wan_jitter: float = 0.0, wan_loss: float = 0.0) -> None:
        super().__init__(regions, workdir, fsync, bug, seed)
        self.cluster = NetnsCluster(regions, delay=wan_delay, jitter=wan_jitter, loss=wan_loss,
                                    extra_args=["--enable-debug-command", "yes", "--appendfsync", fsync],
                                    workdir=workdir, bug=bug, seed=seed)

    def start(self) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        self.cluster.start()
        self.config = self.cluster.config
        self.cluster_file = self.cluster.client_file  # reachable from here, for braid-admin and attaching
        self.procs = {spec.number: proc for spec, proc in zip(self.config.regions, self.cluster.procs, strict=True)}
        self.addresses = self.cluster.addresses

    def partition(self, a: int, b: int) -> None:
        self.cluster.cut(a, b)

    def hold(self, src: int, dst: int) -> None:
        self.cluster.cut_one_way(src, dst)

    def impair(self, a: int, b: int, delay_s: float = 0.0, jitter_s: float = 0.0, reset_p: float = 0.0) -> None:
        self.cluster.impair(a, b, delay=delay_s, jitter=jitter_s, loss=reset_p)

    def heal_network(self) -> None:
        self.cluster.heal_network()

    def stop(self) -> None:
        self.cluster.stop()
