"""What a replication frame may hold and how operations are written into one: the link's
limits (:class:`LinkLimits`, with the gRPC options they make) and the conversions of an
envelope to protobuf and of a batch to its packed (MessagePack) form and back.

Theory of operation
-------------------
Frames are bounded by bytes, never by a count: a Batch holds envelopes up to a
budget (``crdt-repl-frame-bytes``, 1 MB), and an operation larger than that
travels alone as Fragment parts, joined on the receiving end and checked part by
part (one operation at a time, the same dot, offsets in order, a total no larger
than the largest operation a client could make here: ``client-query-buffer-limit``
or ``proto-max-bulk-len``, plus 1 MB of encoding).  Both ends set gRPC's message
limit to ``crdt-repl-max-message`` (8 MB) and tell each other theirs in the
handshake; the budget toward a peer is at most half of either limit, so no frame
is ever refused for its size and an entry as large as ``proto-max-bulk-len``
replicates.  Compression: gRPC's gzip is off (it would compress every message,
and a 64 MB random value costs seconds per hop at ~30 MB/s); a Batch of 1 KB or
more is zlib-compressed at level 1 (in a worker thread from 64 KB) and sent as
``batch_zlib`` when that is smaller (a smaller batch on the event loop: the
hand-off would cost more than the compression), decompressed on arrival with a bound (the
message limit), so small operations still travel compressed; fragments and
full-resync pieces go as they are.  Packed batches: building a Batch of nested protobuf
messages and reading one back cost each end ~100 and ~140 µs of CPU for 60 small operations
(``python -m bench.frames``), so toward a peer whose handshake says it reads them
(``packed_batches``) a batch goes as one MessagePack array (``packed``, ``packed_zlib``:
:func:`pack_batch`), which costs a third of that to build and half to read; every region
reads both forms, so regions of two versions still replicate during a rolling upgrade.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from crdt.causal import Envelope, envelopes_of
from crdt.sync import ProtocolError
from node.persistence import safe_encode
from proto import replication_pb2

# protoc's generated module builds its message classes at run time and ships no type stubs
# (proto/build.py writes no .pyi): to a type checker its messages are Any
pb: Any = replication_pb2

GRPC_DEFAULT_MESSAGE = 4 * 1024 * 1024  # what a peer that does not state its limit accepts
MIN_BUDGET = 16 * 1024  # a frame budget below this is raised to it (parts must carry data)
COMPRESS_FROM = 1024    # Batches smaller than this are not worth compressing
COMPRESS_INLINE = 64 * 1024  # ...and smaller than this are compressed on the event loop
FRAME_HEADER = 64       # bytes a Resync piece takes besides its data (an upper bound)


@dataclass(frozen=True, slots=True)
class LinkLimits:
    """The settings a link runs with (node/region/config.py's ``crdt-repl-*`` rows)."""

    frame_bytes: int = 1024 * 1024                  # operation bytes per frame
    max_message: int = 8 * 1024 * 1024              # gRPC's message limit, both ways
    max_op: int = 1024**3 + 1024 * 1024             # the largest operation accepted from a peer
    max_image: int = 8 * 1024**3                    # the largest full-resync image accepted
    keepalive_ms: int = 5000
    keepalive_timeout_ms: int = 5000
    stall_timeout_ms: int = 30000                   # 0: no watchdog
    max_pending_ops: int = 100000                   # operations waiting for their dependencies
    max_pending_bytes: int = 2 * 1024**3

    @classmethod
    def from_config(cls, config) -> LinkLimits:
        # a peer's operation is a command's arguments, re-encoded: as large as either limit allows
        argv = max(int(config["client-query-buffer-limit"]), int(config["proto-max-bulk-len"]))
        return cls(int(config["crdt-repl-frame-bytes"]), int(config["crdt-repl-max-message"]),
                   argv + 1024 * 1024, int(config["crdt-repl-max-image-size"]),
                   int(config["crdt-repl-keepalive-ms"]), int(config["crdt-repl-keepalive-timeout-ms"]),
                   int(config["crdt-repl-stall-timeout-ms"]), int(config["crdt-repl-pending-max-ops"]),
                   int(config["crdt-repl-pending-max-bytes"]))

    @property
    def frame_cap(self) -> int:
        """The largest frame body (a batch's envelopes, a part, a piece) a peer may send here."""
        return self.max_message // 2

    def budget(self, peer_max_message: int) -> int:
        """Bytes per frame toward a peer: this region's budget, at most half of either limit."""
        peer = peer_max_message or GRPC_DEFAULT_MESSAGE
        return max(MIN_BUDGET, min(self.frame_bytes, self.frame_cap, peer // 2))

    @property
    def handshake_timeout(self) -> float:
        return max(1.0, (self.keepalive_ms + self.keepalive_timeout_ms) / 1000)

    def _common_options(self) -> list[tuple[str, int]]:
        return [("grpc.max_send_message_length", self.max_message),
                ("grpc.max_receive_message_length", self.max_message),
                ("grpc.keepalive_time_ms", self.keepalive_ms),
                ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
                ("grpc.http2.ping_timeout_ms", self.keepalive_timeout_ms),  # newer gRPC times pings by this one
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0)]  # an idle stream keeps pinging

    def server_options(self) -> list[tuple[str, int]]:
        # peers ping every keepalive_ms: never count that as abuse (no GOAWAY "too many pings")
        return [*self._common_options(),
                ("grpc.http2.min_recv_ping_interval_without_data_ms", max(1, self.keepalive_ms // 2)),
                ("grpc.http2.max_ping_strikes", 0)]

    def channel_options(self) -> list[tuple[str, int]]:
        return self._common_options()


def to_proto(env: Envelope) -> pb.Envelope:
    m = pb.Envelope(origin=env.origin, n=env.n, op=env.op)
    deps = m.deps  # filled in place: cheaper than building a dict for the constructor to copy
    for o, n in env.deps:
        deps[o] = n
    return m



# bounds are protobuf's (uint32 regions, uint64 counters); deps as a map, so a region named
# twice means what it means in protobuf's map (the last one), and sorting gives the pairs.
_U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)]
_U64 = Annotated[int, msgspec.Meta(ge=0)]  # msgspec reads integers up to 2**64 - 1
_pack = safe_encode.encoder()  # not Encoder().encode: it crashes the process when an allocation fails
_unpack = msgspec.msgpack.Decoder(list[tuple[_U32, _U64, dict[_U32, _U64], bytes]]).decode


def pack_batch(envelopes: list[Envelope]) -> bytes:
    return _pack([(e.origin, e.n, dict(e.deps), e.op) for e in envelopes])


def unpack_batch(raw: bytes) -> list[Envelope]:
    try:
        rows = _unpack(raw)
    except msgspec.MsgspecError as e:
        raise ProtocolError(f"an unreadable packed batch: {e}") from None
    return envelopes_of(rows)


def from_proto(m: pb.Envelope) -> Envelope:
    return Envelope(m.origin, m.n, tuple(sorted(m.deps.items())), bytes(m.op))
