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

braid-admin coordinates the operator's changes (node/admin_cli.py); a joining region
coordinates its own activation once it caught up (node/activeactive.py).  The
ballot - (coordinator, a counter unique to it) - tells two proposals for the same
epoch apart: a voter promises one of them only, so two changes made at once
cannot both take effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from crdt.membership import FORCE_REMOVE, REMOVE, Change, Membership, Promise, Proposal

from .cluster_config import ClusterConfig
from .transport.admin import AdminCallError, AdminClient, AdminTls


class MembershipChangeError(Exception):
    """A change that did not take effect (nothing changed anywhere); the message says why."""


class Voter(Protocol):
    def promise(self, p: Proposal) -> Promise: ...
    def commit(self, p: Proposal, frozen: int) -> object: ...
    def abort(self, p: Proposal) -> None: ...


def agree(change: Change, current: Membership, voters: Mapping[int, Voter], ballot: tuple[int, int],
          names: Mapping[int, str]) -> tuple[Proposal, int, list[str]]:
    """Propose ``change`` to ``current`` (the coordinator's copy of the list) and have every
    voter agree.  Returns (the proposal, the frozen point, voters the commit did not reach,
    described).  MembershipError: the change cannot be made to ``current``;
    MembershipChangeError: a voter refused or could not be reached (aborted everywhere)."""
    p = current.propose(change, ballot)
    needed = current.voters(change)
    missing = [names.get(n, str(n)) for n in needed if n not in voters]
    if missing:
        raise MembershipChangeError(f"no way to reach {', '.join(missing)}")
    promised: list[int] = []
    held: list[int] = []
    refusal = ""
    for n in needed:
        try:
            answer = voters[n].promise(p)
        except AdminCallError as e:
            refusal = f"{names.get(n, n)} is {e}" if e.unreachable else f"{names.get(n, n)}: {e}"
            break
        if not answer.ok:
            refusal = f"{names.get(n, n)} refused: {answer.reason}"
            break
        promised.append(n)
        held.append(answer.held)
    if refusal:
        for n in promised:
            try:
                voters[n].abort(p)
            except AdminCallError:
                pass  # its promise lapses: it is refused when the next proposal finds it held
        raise MembershipChangeError(f"{refusal}; nothing changed")
    frozen = max(held, default=0) if change.kind in (REMOVE, FORCE_REMOVE) else 0
    return p, frozen, commit(p, frozen, voters, needed, names)


def commit(p: Proposal, frozen: int, voters: Mapping[int, Voter], needed, names: Mapping[int, str]) -> list[str]:
    """Send the commit of ``p`` (every voter promised it) to the voters ``needed``; returns
    those it did not reach, described.  Sending it again is safe: a voter that has it
    ignores it.  A commit that reached no voter has taken effect nowhere yet: each voter
    keeps its promise (on disk, across restarts) until this commit, an abort or - once it
    lapsed - another proposal comes, so the coordinator sends it again (node/admin_cli.py)."""
    unreached = []
    for n in needed:
        try:
            voters[n].commit(p, frozen)
        except AdminCallError as e:
            unreached.append(f"{names.get(n, n)} ({e})")
    return unreached


def clients(cfg: ClusterConfig, numbers, tls: tuple[bytes, bytes, bytes] | None,
            timeout: float = 5.0) -> dict[int, AdminClient]:
    """Admin clients of the regions ``numbers`` of ``cfg``; ``tls``: (CA, certificate, key) PEM."""
    out = {}
    for n in numbers:
        r = cfg.by_number(n)
        if r is None:
            continue
        t = None if tls is None else AdminTls(tls[0], tls[1], tls[2], r.name)
        out[n] = AdminClient(f"{r.host}:{r.repl_port}", cfg.token, timeout, t)
    return out


def member_lists(cfg: ClusterConfig, numbers, tls: tuple[bytes, bytes, bytes] | None,
                 timeout: float = 2.0) -> list[bytes]:
    """The member lists (handshake form) of the regions ``numbers`` that answer within
    ``timeout``, asked at once (blocking: run it off the event loop)."""
    from concurrent.futures import ThreadPoolExecutor

    targets = clients(cfg, numbers, tls, timeout)

    def ask(c: AdminClient) -> bytes | None:
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
    import json

    return json.dumps({"epoch": st.epoch, "stride": stride, "regions": [
        {"name": m.name, "number": m.number, "host": m.host, "port": m.port, "repl_port": m.repl_port,
         "status": m.status, "frozen": m.frozen} for m in st.members]}).encode()


def agree_with_regions(cfg: ClusterConfig, current: Membership, change: Change, ballot: tuple[int, int],
                       tls: tuple[bytes, bytes, bytes] | None) -> tuple[Proposal, int, list[str]]:
    """:func:`agree` over the admin service of every voter (blocking: run it off the event loop)."""
    voters = clients(cfg, current.live(), tls)
    try:
        return agree(change, current, voters, ballot, {r.number: r.name for r in cfg.regions})
    finally:
        for c in voters.values():
            c.close()
