"""The WAN delay line: a user-space router between the regions' network namespaces.

Theory of operation
-------------------
This machine's kernel has no ``netem`` qdisc, so the wide-area network between
regions is a small process instead (``python -m chaos.delayline``, started by
:mod:`chaos.netns`).  It opens one TUN device per region, and the harness moves
each device into its region's namespace, where it is the only route to the
other regions.  An IP packet a region sends to another region is read from the
sender's TUN file descriptor, held for the link's one-way delay and written to
the receiver's TUN device: it arrives on a real interface of the receiver's
kernel, whose TCP stack acknowledges, retransmits and congestion-controls as
over any network.  No namespace forwards packets and no bridge is involved, so
neither the kernel's forwarding path nor the host's iptables FORWARD chain
(which Docker sets to DROP) is on the way.

Addresses (``10.213.0.0/16``, see :mod:`chaos.netns`): region ``i`` has the
inner address ``10.213.1.i`` on its TUN device and is reached by the other
regions at its outer address ``10.213.2.i``.  The delay line is the one-to-one
NAT between them (as a cloud's elastic addresses): a packet from ``i`` to
``10.213.2.j`` leaves with source ``10.213.2.i`` and destination ``10.213.1.j``.
Both rewrites change one byte, the third octet, by the same amount in opposite
directions, so the one's-complement sums that the IP header and the TCP/UDP
checksums (whose pseudo-header holds both addresses) are made of do not change:
no checksum has to be recomputed.

Each directed link ``(src, dst)`` has a one-way ``delay`` (seconds), ``jitter``
(a uniform extra delay up to that many seconds, drawn per packet), ``loss`` (the
probability a packet is dropped), ``rate`` (bytes per second, or 0 for no cap:
a packet waits for the link to finish sending the ones before it, and is dropped
when more than ``QUEUE_S`` seconds of sending are queued, as a router's full
buffer) and ``down`` (every packet is dropped, also those already in flight:
a pulled cable).  Without jitter the departure times on a link only grow, and
the queue breaks ties by arrival, so packets keep their order; with jitter they
may be reordered, as on a real path.

Control: one JSON object per line on stdin, answered by one line on stdout
(``{"op": "set", "src": 1, "dst": 2, "delay": 0.04, ...}`` changes the given
fields of a link; ``{"op": "stats"}`` returns packets moved and dropped per
link).  End of stdin stops the delay line; its TUN devices vanish with it.
"""

from __future__ import annotations

import fcntl
import heapq
import json
import os
import random
import selectors
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
QUEUE_S = 0.5  # seconds of sending a capped link may queue before it drops (tail drop)
INNER, OUTER = 1, 2  # third octet of 10.213.x.i: the region's own address, and as others see it


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class Link:
    __slots__ = ("delay", "jitter", "loss", "rate", "down", "busy_until", "moved", "dropped")

    def __init__(self) -> None:
        self.delay = self.jitter = self.loss = 0.0
        self.rate = 0.0
        self.down = False
        self.busy_until = 0.0
        self.moved = self.dropped = 0


class DelayLine:
    def __init__(self, tuns: dict[int, str], seed: int = 0) -> None:
        self.fds = {region: open_tun(name) for region, name in tuns.items()}
        self.region_of = {fd: region for region, fd in self.fds.items()}
        self.links = {(a, b): Link() for a in tuns for b in tuns if a != b}
        self.queue: list = []  # (departure, arrival order, link, destination fd, packet)
        self.order = 0
        self.rng = random.Random(seed)

    def receive(self, fd: int, now: float) -> None:
        src = self.region_of[fd]
        while True:
            try:
                packet = bytearray(os.read(fd, 65536))
            except BlockingIOError:
                return
            # IPv4 from this region's inner address to another region's outer address, or dropped
            if len(packet) < 20 or packet[0] >> 4 != 4 or packet[14] != INNER or packet[15] != src:
                continue
            link = self.links.get((src, packet[19])) if packet[18] == OUTER else None
            if link is None:
                continue
            if link.down or (link.loss and self.rng.random() < link.loss):
                link.dropped += 1
                continue
            depart = now
            if link.rate:
                start = max(now, link.busy_until)
                if start - now > QUEUE_S:
                    link.dropped += 1
                    continue
                link.busy_until = depart = start + len(packet) / link.rate
            depart += link.delay + (self.rng.random() * link.jitter if link.jitter else 0.0)
            packet[14], packet[18] = OUTER, INNER  # the NAT (checksums stay valid: see above)
            self.order += 1
            heapq.heappush(self.queue, (depart, self.order, link, self.fds[packet[19]], bytes(packet)))

    def deliver(self, now: float) -> None:
        while self.queue and self.queue[0][0] <= now:
            _, _, link, fd, packet = heapq.heappop(self.queue)
            if link.down:
                link.dropped += 1
                continue
            try:
                os.write(fd, packet)
                link.moved += 1
            except OSError:  # the receiver's device queue is full: lost, as on a real network
                link.dropped += 1

    def control(self, line: str) -> dict:
        cmd = json.loads(line)
        if cmd["op"] == "set":
            link = self.links[(cmd["src"], cmd["dst"])]
            for name in ("delay", "jitter", "loss", "rate", "down"):
                if name in cmd:
                    setattr(link, name, cmd[name])
            return {"ok": True}
        if cmd["op"] == "stats":
            return {"ok": True, "links": {f"{a}-{b}": [link.moved, link.dropped]
                                          for (a, b), link in self.links.items()}}
        return {"ok": False, "error": f"unknown op {cmd['op']!r}"}

    def run(self, control_in, control_out) -> None:
        selector = selectors.DefaultSelector()
        for fd in self.fds.values():
            selector.register(fd, selectors.EVENT_READ)
        selector.register(control_in, selectors.EVENT_READ)
        buffered = b""
        while True:
            timeout = max(0.0, self.queue[0][0] - time.monotonic()) if self.queue else None
            for key, _ in selector.select(timeout):
                if key.fd in self.region_of:
                    self.receive(key.fd, time.monotonic())
                    continue
                chunk = os.read(control_in.fileno(), 65536)
                if not chunk:
                    return  # the harness is gone
                buffered += chunk
                while b"\n" in buffered:
                    line, buffered = buffered.split(b"\n", 1)
                    try:
                        reply = self.control(line.decode())
                    except (ValueError, KeyError, TypeError) as e:
                        reply = {"ok": False, "error": repr(e)}
                    control_out.write(json.dumps(reply) + "\n")
                    control_out.flush()
            self.deliver(time.monotonic())


def main(argv: list[str]) -> int:
    """``python -m chaos.delayline '{"tuns": {"1": "tun-name", ...}, "seed": 0}'``"""
    spec = json.loads(argv[0])
    line = DelayLine({int(r): name for r, name in spec["tuns"].items()}, spec.get("seed", 0))
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    try:
        line.run(sys.stdin, sys.stdout)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
