"""How often a replication link sends: the pacing settings and how long an ack may wait.

What a frame costs (gRPC, protobuf, the peer's apply and its ack) is paid per frame, not per
operation, so a link sends at most one batch per ``crdt-repl-send-interval-ms`` and one ack
per ``crdt-repl-ack-interval-ms``, and operations and acks arriving meanwhile share the next
frame.  :class:`Pacing` holds those settings as a link reads them (at every batch, so CONFIG
SET applies at once); :class:`AckPace` says how long an ack may wait, by what it tells the
peer (node/activeactive/outbox.py applies it; node/activeactive/link.py says why, "Batching and
relaying").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# The defaults of the pacing settings (seconds; crdt-repl-send-interval-ms, -ack-interval-ms,
# -relay-delay-ms): a link sends at most one batch per SEND_INTERVAL and one ack per
# ACK_INTERVAL (the first at once after a quiet spell): operations and acks arriving
# meanwhile share the next frame.  A third region's operations are relayed only once the
# peer's acknowledgements of that region stood still for RELAY_DELAY (crdt.sync.RelayHold.due).
SEND_INTERVAL = 0.005
ACK_INTERVAL = 0.01
RELAY_DELAY = 0.05
# an ack that only tells a peer its own operations arrived waits this many ack intervals
# (Outbox.put_ack): the peer holds no relays of them, nothing of it waits for that ack
LAZY_ACK_FACTOR = 5
# an ack that lets a peer drop the relays it holds waits a relay delay divided by this
RELAY_ACKS_PER_DELAY = 3


class AckPace(enum.IntEnum):
    """How long an ack may wait after the previous one, by what it tells the peer (the lower,
    the sooner): of two waiting, the newer ack says all the older said, at the sooner pace."""

    WAITED = -1  # a client waits in WAIT for what it says (Ack.ack_wanted): at once
    PARTS = 0   # parts of a large operation or of a full resync arrived: one ack interval
    RELAYS = 1  # a third region's operations arrived: a third of the relay delay
    LAZY = 2    # only the peer's own operations arrived: LAZY_ACK_FACTOR ack intervals


@dataclass(frozen=True, slots=True)
class Pacing:
    """How a link paces its frames (seconds): read from the settings at every batch, so
    CONFIG SET applies at once."""

    send_interval: float = SEND_INTERVAL
    ack_interval: float = ACK_INTERVAL
    relay_delay: float = RELAY_DELAY

    @classmethod
    def from_config(cls, config) -> Pacing:
        return cls(int(config["crdt-repl-send-interval-ms"]) / 1000, int(config["crdt-repl-ack-interval-ms"]) / 1000,
                   int(config["crdt-repl-relay-delay-ms"]) / 1000)
