"""What a replication hub (node/activeactive/hub.py) works with, given when it is built: the
region's side it hands what arrives to (:class:`RegionSide`; :class:`Callbacks` makes one of
plain functions, for a hub no region core drives), the member list's :class:`Gate`, and
:class:`Watcher`, which sees what is applied and issued (the simulation's checks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from crdt.causal import Envelope


def nothing() -> None:
    pass


def nothing_said(_why: str) -> None:
    return None


def no_image(_digests: bool) -> tuple[bytes, dict[int, int]]:
    raise ConnectionError("this region cannot take part in a full resync")


def no_taking(_data: bytes) -> bool:
    raise ConnectionError("this region cannot take part in a full resync")


class RegionSide(Protocol):
    """What the hub calls into the region that applies operations (node/region/core.py's
    ``RegionCore``, which ActiveActive hands to the hub it builds)."""

    def apply_remote(self, env: Envelope) -> None:
        """Apply and log one envelope the causal log delivers (see :meth:`ReplicationHub.deliver`)."""

    def apply_remote_run(self, run: list[Envelope]) -> None:
        """Apply a run of envelopes ready in order, in one call; a failure's ``applied`` says how
        many of them were applied (see :meth:`ReplicationHub.deliver_batch`)."""

    def remote_batch_applied(self) -> None:
        """A link handed a whole received batch to the causal log (the region wakes its blocked
        readers once per batch, not once per operation; ``in_batch`` is true meanwhile)."""

    def peer_frame_arrives(self) -> None:
        """A link is about to handle a frame of operations from its peer, not an ack (the region
        offers its core to other runnable processes first)."""

    def replication_progressed(self) -> None:
        """A peer's ack raised what it is known to hold or to have on disk (the region serves
        the clients waiting in WAIT or WAITAOF: node/region/waits.py)."""

    def install_image(self, data: bytes) -> bool:
        """Take a peer's full-resync image as the region's state (False: refused)."""

    def join_image(self, data: bytes) -> bool:
        """Join a peer's image into the region's state (False: refused)."""

    def fail_stop(self, reason: str) -> None:
        """Stop the region: a link found two histories of a third region (see :meth:`history_forked`)."""


@dataclass
class Callbacks:
    """A :class:`RegionSide` made of plain functions, for a hub no region core drives (tests,
    benchmarks): ``apply`` applies each envelope (a run one by one), the rest default to doing
    nothing or, for images, to refusing to take part in a full resync."""

    apply: Callable[[Envelope], None]
    install: Callable[[bytes], bool] = no_taking
    join: Callable[[bytes], bool] = no_taking
    frame_arrives: Callable[[], None] = nothing
    batch_applied: Callable[[], None] = nothing
    foreign_fork: Callable[[str], None] = nothing_said

    def apply_remote(self, env: Envelope) -> None:
        self.apply(env)

    def apply_remote_run(self, run: list[Envelope]) -> None:
        for k, env in enumerate(run):
            try:
                self.apply(env)
            except Exception as e:
                e.__dict__["applied"] = k  # how many of the run were applied (crdt/causal.py counts those)
                raise

    def remote_batch_applied(self) -> None:
        self.batch_applied()

    def peer_frame_arrives(self) -> None:
        self.frame_arrives()

    def replication_progressed(self) -> None:
        pass

    def install_image(self, data: bytes) -> bool:
        return self.install(data)

    def join_image(self, data: bytes) -> bool:
        return self.join(data)

    def fail_stop(self, reason: str) -> None:
        self.foreign_fork(reason)


class Gate(Protocol):
    """What the hub asks at handshakes and per operation: the region's member list
    (node/activeactive/membership.py's ``MembershipGate``)."""

    def hello(self) -> tuple[int, bytes]:
        """(epoch, member list) a Hello or Welcome carries."""

    def check_peer(self, peer: int, epoch: int, blob: bytes) -> str:
        """At a handshake: '' to go on, else why the peer is refused."""

    def refused(self) -> None:
        """Count a handshake refused for membership."""

    def admits_all(self, envs: list[Envelope]) -> bool:
        """Whether every one of ``envs`` may be applied."""

    def admits(self, env: Envelope) -> str:
        """'' apply it; 'drop'; 'behind' (the peer has a newer member list)."""


class Watcher(Protocol):
    """Sees what the hub applies and issues, as it happens (the simulation's membership checks,
    chaos/sim/region.py); see :meth:`ReplicationHub.watch`."""

    def applying(self, env: Envelope) -> None:
        """Called before the region applies ``env``, another region's operation."""

    def issuing(self) -> None:
        """Called before the hub stamps an operation of this region's own."""
