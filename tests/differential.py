"""The differential harness: send the same commands to Braid and to Redis, compare.

Replies are read raw (hiredis), so types and error texts are compared exactly.
Before comparing, a few fields that cannot match are normalised; every such
rule is in :data:`NORMALISE` with its reason, in one place.
"""

from __future__ import annotations

import socket

import hiredis


class Err(Exception):
    """An error reply (hiredis builds these)."""

    def __eq__(self, other):
        return isinstance(other, Err) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))

    def __repr__(self):
        return f"Err({str(self)!r})"


class RawClient:
    """A minimal RESP2 client returning replies exactly as sent."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.reader = hiredis.Reader(replyError=Err)

    def call(self, *args) -> object:
        self.send(args)
        return self.receive(1)[0]

    def send(self, *commands) -> None:
        """Send commands (each a sequence of arguments) at once: a pipeline; receive() reads
        their replies."""
        parts = []
        for args in commands:
            parts.append(b"*%d\r\n" % len(args))
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                parts.append(b"$%d\r\n%b\r\n" % (len(a), a))
        self.sock.sendall(b"".join(parts))

    def receive(self, n: int) -> list:
        replies = []
        while len(replies) < n:
            reply = self.reader.gets()
            if reply is not False:
                replies.append(reply)
                continue
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            self.reader.feed(data)
        return replies

    def close(self) -> None:
        self.sock.close()


# Fields whose values legitimately differ, by reason:
NORMALISE = {
    # XINFO STREAM: Redis reports its radix tree's internal node count; Braid
    # indexes blocks differently (radix-tree-keys, the number of blocks, matches).
    "radix-tree-nodes": "internal rax node count",
    # Redis 8.6 fields that Redis 7.0 (the reference server) does not have.
    "idmp-duration": "8.6 only", "idmp-maxsize": "8.6 only", "pids-tracked": "8.6 only",
    "iids-tracked": "8.6 only", "iids-added": "8.6 only", "iids-duplicates": "8.6 only",
    "nacked-count": "8.8+ only",
    # XINFO CONSUMERS / FULL: times depend on when each server ran the command;
    # "inactive" and "active-time" are Redis 7.2+ fields.
    "idle": "timing", "seen-time": "timing", "active-time": "7.2+ and timing",
    "inactive": "7.2+ and timing",
}


def _flat_map(reply: list) -> dict:
    return {reply[i]: reply[i + 1] for i in range(0, len(reply), 2)}


# Redis 7.2 made XCLAIM / XAUTOCLAIM create their consumer even when nothing is
# claimed; Redis 7.0 creates it only on a claim.  Braid follows 8.6, so after
# either command has run, consumers with nothing pending are left out of the
# comparison (explicit tests check the 8.6 behaviour on Braid directly).
CLAIMERS = {"xclaim", "xautoclaim"}


def _drop_idle_consumers(consumers: list) -> list:
    out = []
    for c in consumers:
        d = c if isinstance(c, dict) else None
        pending = d.get("pending", d.get("pel-count")) if d else None
        if d is not None and pending in (0, []) and d.get("pel-count", 0) == 0:
            continue
        out.append(c)
    return out


def normalise(argv: list, reply: object, claimed: bool = False) -> object:
    """Make a reply comparable across servers (see NORMALISE and CLAIMERS)."""
    reply = _normalise(argv, reply)
    if not claimed:
        return reply
    name = str(argv[0]).lower()
    sub = str(argv[1]).lower() if len(argv) > 1 else ""
    if name == "xinfo" and sub == "consumers" and isinstance(reply, list):
        return _drop_idle_consumers(reply)
    if name == "xinfo" and sub == "stream" and isinstance(reply, dict) and isinstance(reply.get("groups"), list):
        for g in reply["groups"]:
            if isinstance(g, dict):
                g["consumers"] = _drop_idle_consumers(g.get("consumers", []))
    if name == "xinfo" and sub == "groups" and isinstance(reply, list):
        for g in reply:
            if isinstance(g, dict):
                g.pop("consumers", None)
    return reply


def _normalise(argv: list, reply: object) -> object:
    name = str(argv[0]).lower()
    sub = str(argv[1]).lower() if len(argv) > 1 else ""
    if name == "xinfo" and isinstance(reply, list):
        if sub == "stream":
            return _strip_map(reply)
        if sub in ("consumers", "groups"):
            return [_strip_map(r) if isinstance(r, list) else r for r in reply]
    if name == "xpending" and len(argv) > 3 and isinstance(reply, list):
        # extended form: [id, consumer, idle-ms, deliveries]
        return [[r[0], r[1], "idle", r[3]] if isinstance(r, list) and len(r) == 4 else r
                for r in reply]
    return reply


def _strip_map(reply: list) -> object:
    if len(reply) % 2:
        return reply
    m = _flat_map(reply)
    out = {}
    for k, v in m.items():
        key = k.decode() if isinstance(k, bytes) else k
        if key in NORMALISE:
            continue
        if key == "groups" and isinstance(v, list):
            v = [_strip_group(g) for g in v]
        elif key == "consumers" and isinstance(v, list):
            v = [_strip_map(c) if isinstance(c, list) else c for c in v]
        elif key == "pending" and isinstance(v, list):
            # FULL pending entries carry delivery times
            v = [[p[0], *(["t"] if len(p) in (3, 4) else []), *p[-1:]] if isinstance(p, list) else p for p in v]
        out[key] = v
    return out


def _strip_group(g):
    return _strip_map(g) if isinstance(g, list) else g


class Pair:
    """Braid and the reference Redis, driven in lock step."""

    def __init__(self, braid_port: int, redis_port: int) -> None:
        self.braid = RawClient(braid_port)
        self.redis = RawClient(redis_port)
        self.claimed = False

    def run(self, *argv) -> tuple[object, object]:
        name = str(argv[0]).lower()
        if name in ("flushall", "flushdb"):
            self.claimed = False
        b = normalise(list(argv), self.braid.call(*argv), self.claimed)
        r = normalise(list(argv), self.redis.call(*argv), self.claimed)
        if name in CLAIMERS:
            self.claimed = True
        return b, r

    def check(self, *argv) -> object:
        b, r = self.run(*argv)
        assert b == r, f"{' '.join(map(str, argv))}\n  braid: {b!r}\n  redis: {r!r}"
        return b

    def close(self) -> None:
        self.braid.close()
        self.redis.close()
