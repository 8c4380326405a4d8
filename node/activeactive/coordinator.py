"""Agreeing a membership change with every voter: the coordinator's side of crdt/membership.py.

Theory of operation
-------------------
A change (add, activate, leave, remove, force-remove a region) is proposed for the
next epoch and takes effect only once every voter promised it
(:meth:`crdt.membership.Membership.voters`: every live member, except the region a
forced removal removes).  The coordinator asks each voter for its promise through
the admin service; one refusal, or one voter that cannot be reached, aborts the
proposal at every voter that promised, and nothing changed anywhere.  With every
promise, it commits at every voter (a removal with the highest count of the removed
region's operations any voter held: the frozen point).  A commit that does not
reach a voter is not undone - the change was decided - and that voter adopts the
new list at its next handshake with any member; the coordinator reports it.

braid-admin coordinates the operator's changes (node/tools/admin_cli.py); a joining region
coordinates its own activation once it caught up (node/activeactive/region.py).  The
ballot - (coordinator, a counter unique to it) - tells two proposals for the same
epoch apart: a voter promises one of them only, so two changes made at once
cannot both take effect.

A coordinator that vanishes between the phases (killed, or it gave up sending a
commit no voter was up to take) leaves its change to the voters: a voter holding a
promise its coordinator left settles it (node/activeactive/region.py, with
:func:`standings`): it asks every voter where it stands on the proposal and
commits it when every voter holds its promise, aborts it when a voter never
promised it, or takes a newer list (crdt/membership.py, "Settling a promise its
coordinator left").  Every such change thus ends once its voters can all be asked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from crdt.membership import FORCE_REMOVE, REMOVE, Change, Membership, Promise, Proposal, Standing
from node.activeactive.cluster_config import ClusterConfig, per_shard_ports
from node.transport.admin_types import AdminCallError


class MembershipChangeError(Exception):
    """A change that has not taken effect; the message says why (and, when an abort missed a
    voter that promised, how the voters settle it)."""


class Voter(Protocol):
    def promise(self, p: Proposal) -> Promise: ...
    def commit(self, p: Proposal, frozen: int) -> object: ...
    def abort(self, p: Proposal) -> object: ...


class Region(Protocol):
    """A region's admin service as a coordinator or settling voter calls it (an
    ``AdminClient``, node/transport/admin.py)."""

    def promise(self, p: Proposal) -> Promise: ...
    def commit(self, p: Proposal, frozen: int) -> object: ...
    def abort(self, p: Proposal) -> object: ...
    def standing(self, p: Proposal) -> Standing: ...
    def status(self) -> object: ...
    def close(self) -> None: ...


# Opens clients of the admin service of some regions of a cluster: (cluster, region numbers,
# TLS (CA, certificate, key) PEM or None, timeout in seconds) -> {number: client}.  The
# region's is node.transport.admin.clients, given by whoever starts it (node/runtime/server.py), so
# this module and node/activeactive/region.py do not load gRPC.
Connect = Callable[[ClusterConfig, Iterable[int], tuple[bytes, bytes, bytes] | None, float], Mapping[int, Region]]


class Settler(Protocol):
    """Where a settling voter reaches a voter: itself, or another region's admin service."""

    def standing(self, p: Proposal) -> Standing: ...
    def commit(self, p: Proposal, frozen: int) -> object: ...


def agree(change: Change, current: Membership, voters: Mapping[int, Voter], ballot: tuple[int, int],
          names: Mapping[int, str]) -> tuple[Proposal, int, list[str]]:
    """Propose ``change`` to ``current`` (the coordinator's copy of the list) and have every
    voter agree.  Returns (the proposal, the frozen point, voters the commit did not reach,
    described).  MembershipError: the change cannot be made to ``current``;
    MembershipChangeError: a voter refused or could not be reached (aborted at every voter
    that promised, or settled by them: see :func:`standings`)."""
    p = current.propose(change, ballot)
    needed = current.voters(change)
    missing = [names.get(n, str(n)) for n in needed if n not in voters]
    if missing:
        raise MembershipChangeError(f"no way to reach {', '.join(missing)}")
    promised: list[int] = []
    held: list[int] = []
    refusal = ""
    unanswered: list[int] = []  # a voter whose answer never came: it may have promised
    for n in needed:
        try:
            answer = voters[n].promise(p)
        except AdminCallError as e:
            refusal = f"{names.get(n, n)} is {e}" if e.unreachable else f"{names.get(n, n)}: {e}"
            unanswered.append(n)
            break
        if not answer.ok:
            refusal = f"{names.get(n, n)} refused: {answer.reason}"
            break
        promised.append(n)
        held.append(answer.held)
    if refusal:
        missed = []
        for n in promised + unanswered:
            try:
                voters[n].abort(p)  # (one that never got the promise request will refuse it)
            except AdminCallError:
                missed.append(n)
        if not [n for n in missed if n in promised]:
            raise MembershipChangeError(f"{refusal}; nothing changed")
        # they keep the promise until they settle it with the other voters: a voter without it
        # makes them abort it; only if the abort reached no voter and the one whose answer was
        # lost had promised too does every voter hold it, and then they commit it
        may_commit = unanswered and len(missed) == len(promised) + len(unanswered)
        outcome = (f"it takes effect only if {names.get(unanswered[0], unanswered[0])} had promised it"
                   if may_commit else "they abort it")
        raise MembershipChangeError(
            f"{refusal}; not taken effect yet: the abort did not reach "
            f"{', '.join(names.get(n, str(n)) for n in missed if n in promised)}, which settle it with the "
            f"other voters once they can all be asked: {outcome}")
    frozen = max(held, default=0) if change.kind in (REMOVE, FORCE_REMOVE) else 0
    return p, frozen, commit(p, frozen, voters, needed, names)


def commit(p: Proposal, frozen: int, voters: Mapping[int, Voter], needed, names: Mapping[int, str]) -> list[str]:
    """Send the commit of ``p`` (every voter promised it) to the voters ``needed``; returns
    those it did not reach, described.  Sending it again is safe: a voter that has it
    ignores it.  A commit that reached no voter has taken effect nowhere yet: each voter
    keeps its promise (on disk, across restarts), so the coordinator sends it again
    (node/tools/admin_cli.py); if it gives up, the voters settle the change themselves once they
    can all be asked (:func:`standings`: every one holds the promise, so they commit it)."""
    unreached = []
    for n in needed:
        try:
            voters[n].commit(p, frozen)
        except AdminCallError as e:
            unreached.append(f"{names.get(n, n)} ({e})")
    return unreached


def standings(p: Proposal, numbers, voters: Mapping[int, Settler]) -> dict[int, Standing]:
    """Where each voter ``numbers`` of ``p`` stands on it (:meth:`Membership.standing`), for a
    voter settling ``p``; a voter not in ``voters`` or not answering is left out (the
    settlement then waits for it).  What the answers decide is :meth:`Membership.settle`."""
    out = {}
    for n in numbers:
        if n in voters:
            try:
                out[n] = voters[n].standing(p)
            except AdminCallError:
                continue
    return out


def standings_from_regions(connect: Connect, cfg: ClusterConfig, p: Proposal, numbers,
                           tls: tuple[bytes, bytes, bytes] | None) -> dict[int, Standing]:
    """:func:`standings` over the admin service of the regions ``numbers`` (blocking: run it
    off the event loop)."""
    targets = connect(cfg, numbers, tls, 5.0)
    try:
        return standings(p, numbers, targets)
    finally:
        for c in targets.values():
            c.close()


def commit_to_regions(connect: Connect, cfg: ClusterConfig, p: Proposal, frozen: int, numbers,
                      tls: tuple[bytes, bytes, bytes] | None) -> list[str]:
    """:func:`commit` of a settled ``p`` to the regions ``numbers`` over their admin service, as
    its coordinator would have sent it; returns those not reached, described (each commits
    it when it settles it itself, or takes the list at a handshake).  Blocking."""
    targets = connect(cfg, numbers, tls, 5.0)
    try:
        return commit(p, frozen, targets, list(targets), {r.number: r.name for r in cfg.regions})
    finally:
        for c in targets.values():
            c.close()


def member_lists(connect: Connect, cfg: ClusterConfig, numbers, tls: tuple[bytes, bytes, bytes] | None,
                 timeout: float = 2.0) -> list[bytes]:
    """The member lists (handshake form) of the regions ``numbers`` that answer within
    ``timeout``, asked at once (blocking: run it off the event loop)."""
    targets = connect(cfg, numbers, tls, timeout)

    def ask(c: Region) -> bytes | None:
        try:
            return status_blob(c.status(), cfg.stride)
        except AdminCallError:
            return None

    try:
        if not targets:
            return []
        with ThreadPoolExecutor(len(targets)) as pool:
            return [b for b in pool.map(ask, targets.values()) if b is not None]
    finally:
        for c in targets.values():
            c.close()


def status_blob(st, stride: int) -> bytes:
    """A region's member list (its admin Status) in the handshake's form."""
    return json.dumps({"epoch": st.epoch, "stride": stride, "regions": [
        {"name": m.name, "number": m.number, "host": m.host, "port": m.port, "repl_port": m.repl_port,
         "status": m.status, "frozen": m.frozen, **per_shard_ports(list(m.ports), list(m.repl_ports))}
        for m in st.members]}).encode()


def agree_with_regions(connect: Connect, cfg: ClusterConfig, current: Membership, change: Change,
                       ballot: tuple[int, int],
                       tls: tuple[bytes, bytes, bytes] | None) -> tuple[Proposal, int, list[str]]:
    """:func:`agree` over the admin service of every voter (blocking: run it off the event loop)."""
    voters = connect(cfg, current.live(), tls, 5.0)
    try:
        return agree(change, current, voters, ballot, {r.number: r.name for r in cfg.regions})
    finally:
        for c in voters.values():
            c.close()
