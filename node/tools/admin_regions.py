"""``braid-admin region add|remove|purge``: the member-list changes braid-admin coordinates.

braid-admin asks every live member to promise the change, then commits it (the rules are
crdt/membership.py's, the calls node/activeactive/coordinator.py's): a voter that did not hear the
commit is asked again every ``COMMIT_RETRY_S`` for ``COMMIT_RETRY_FOR_S``, and a graceful
removal waits until the leaving region handed over everything it holds.

A sharded database (docs/sharding.md, "Membership and administration"): shard K of every region
is a replication group with a member list of its own, so each change is agreed group by group
with the same proposal, shard 0's group first (``each_shard``), each group's part of the output
under its heading.  Before acting on a group, braid-admin takes that group's own list (the newest
its regions answer with: :func:`_take_group_list`), not the cluster file's, which records shard
0's group; so a run that ended early in one group (braid-admin killed, a voter unreachable) is
finished by running it again: a group that has the change already says so and is left alone.
A join carries every shard's ports of the new region, so that every group records them.
"""

from __future__ import annotations

import secrets
import sys
import time

from rich.console import Console

from crdt.membership import FORCE_REMOVE, JOIN, LEAVE, LEAVING, REMOVE, REMOVED, Change, MembershipError
from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.activeactive.coordinator import MembershipChangeError, agree, commit
from node.tools.admin_calls import (
    AdminError,
    call,
    group_membership,
    member_endpoints,
    region_named,
    shard_name,
    statuses,
    tls_pem,
)
from node.tools.admin_shards import each_shard, shard_views
from node.transport.admin import clients


def _ballot() -> tuple[int, int]:
    return (0, secrets.randbits(62))  # braid-admin is no region: number 0, a counter unique to this run


def _agree(cfg: ClusterConfig, path: str | None, change: Change, console: Console) -> tuple[int, list[str]]:
    """Have every voter agree to ``change``; record it in ``cfg`` (and the file). Returns
    (frozen point, voters the commit did not reach)."""
    m = cfg.membership()
    voters = clients(cfg, m.live(), tls_pem())
    names = {r.number: r.name for r in cfg.regions}
    try:
        p, frozen, unreached = agree(change, m, voters, _ballot(), names)
        needed = m.voters(change)
        if needed and len(unreached) == len(needed):
            unreached = _commit_again(p, frozen, voters, needed, names, unreached)
    except (MembershipError, MembershipChangeError) as e:
        raise AdminError(str(e)) from None
    finally:
        for c in voters.values():
            c.close()
    m.record(p, frozen)
    cfg.take_membership(m, {change.number: change.endpoint} if change.endpoint else None)
    if path is not None:
        cfg.save(path)
    for u in unreached:
        print(f"braid-admin: the change was agreed, but its commit did not reach {u}: it learns the new "
              "list at its next handshake with any member", file=sys.stderr)
    return frozen, unreached


# Every voter promised, but the commit reached none of them (they all went down in between):
# the change has taken effect nowhere yet, and each voter keeps its promise (and a forced
# removal's hold), so it is sent again this often, for this long; after that the voters settle
# it among themselves once they are back (node/activeactive/membership.py, ActiveActive.left_promise).
COMMIT_RETRY_S = 1.0
COMMIT_RETRY_FOR_S = 60.0


def _commit_again(p, frozen, voters, needed, names, unreached: list[str]) -> list[str]:
    print(f"braid-admin: every voter promised the change, but its commit reached none of them "
          f"({'; '.join(unreached)}): sending it again until one has it (for up to {COMMIT_RETRY_FOR_S:g} s)",
          file=sys.stderr)
    deadline = time.monotonic() + COMMIT_RETRY_FOR_S
    while True:
        time.sleep(COMMIT_RETRY_S)
        unreached = commit(p, frozen, voters, needed, names)
        if len(unreached) < len(needed) or time.monotonic() >= deadline:
            break
    if len(unreached) == len(needed):
        raise MembershipChangeError(
            f"every voter promised the change, but none received its commit within {COMMIT_RETRY_FOR_S:g} s "
            f"({'; '.join(unreached)}): it has not taken effect yet. Each voter keeps its promise (a forced "
            "removal's voters take no more of that region's operations meanwhile), and once they all answer "
            "they complete it themselves: a voter asks the others and, every one holding the promise, commits "
            "it (braid-admin status shows the new epoch)")
    return unreached


def _all_reachable(cfg: ClusterConfig, path: str | None, what: str, but: int | None = None) -> dict:
    found, failures = statuses(cfg, path)
    missing = [r.name for r in cfg.live_regions() if r.name not in found and r.number != but]
    if missing:
        raise AdminError(f"{what} needs every member reachable; {', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not ({'; '.join(failures)}): nothing changed")
    return found


def _take_group_list(view: ClusterConfig, path: str | None) -> None:
    """Make ``view`` (shard K's) hold its group's own member list: the newest its regions answer
    with.  The cluster file records shard 0's group, and a change may have reached some groups
    only.  The file at ``path`` is brought up to date from shard 0's group."""
    found = []
    for r in view.live_regions():
        try:
            found.append(call(view, r, "status"))
        except AdminError:
            continue  # (a region the group does not know yet, or one that is down: the others tell)
    if not found:
        raise AdminError(f"no region of shard {view.shard}'s group answers: nothing changed in it")
    newest = max(found, key=lambda st: st.epoch)
    before = view.epoch
    view.keep_group_list(group_membership(view, newest), member_endpoints(newest))
    if path is not None and view.epoch != before:
        view.save(path)  # (shard 0's view only: the file records its group)


def _new_ports(args, cfg: ClusterConfig) -> tuple[list[int], list[int]]:
    """The new region's client and replication ports, one per shard (AdminError, exit status 2,
    when their count is not the database's shard count)."""
    n = cfg.shards.count
    for what, ports in (("--port", args.region_port), ("--repl-port", args.repl_port)):
        if len(ports) != n:
            raise AdminError(f"{what} {','.join(map(str, ports))}: this database has {n} shard(s), so the new "
                             f"region needs {n} port(s), one per shard, comma-separated (shard K listens on the "
                             "Kth)", status=2)
    return args.region_port, args.repl_port


def _new_number(args, cfg: ClusterConfig, views: list[ClusterConfig]) -> int:
    """The new region's number: the one a group already gave it (a run finished again), else
    ``--number``, else the lowest no group ever used."""
    for view in views:
        for r in view.live_regions():
            if r.name == args.name:
                if args.number is not None and args.number != r.number:
                    raise AdminError(f"{args.name} is region {r.number} in {shard_name(view, r)}'s group, not "
                                     f"{args.number}: finish adding it with --number {r.number}, or remove it")
                return r.number
    used = {r.number for view in views for r in view.regions}
    if args.number is not None:
        return args.number
    free = [n for n in range(1, cfg.stride) if n not in used]
    if not free:
        raise AdminError(f"every region number of this database is used: numbers go from 1 to {cfg.stride - 1} "
                         f"(strict IDs: the stride is {cfg.stride}) and a removed region's number is never "
                         "reused; this database cannot grow further (a new database with a larger stride can)")
    return free[0]


def _group_views(args, cfg: ClusterConfig, path: str | None) -> list[ClusterConfig]:
    """Each group's view with its own member list (sharded); ``cfg`` alone unsharded."""
    views = shard_views(args, cfg)
    for view in views:
        if cfg.shards.sharded:
            _take_group_list(view, path)
        else:
            statuses(view, path)  # (a newer member list than the file's is taken)
    return views


def _unfinished(cfg: ClusterConfig, code: int, what: str) -> int:
    if cfg.shards.sharded and code:
        print(f"braid-admin: {what} is not done in every shard group (each is named above): run the same command "
              "again to finish it; a group that has it already is left as it is", file=sys.stderr)
    return code


def cmd_region_add(args, cfg: ClusterConfig, path, console: Console) -> int:
    ports, repl_ports = _new_ports(args, cfg)
    number = _new_number(args, cfg, _group_views(args, cfg, path))

    def add(args, view: ClusterConfig, path, console: Console) -> int:
        if view.shards.sharded:
            _take_group_list(view, path)
            known = view.by_number(number)
            if known is not None and known.name == args.name:
                console.print(f"{args.name} is already region {number} of this group (status {known.status}, "
                              f"membership epoch {view.epoch}): nothing to change", highlight=False)
                return 0
        _all_reachable(view, path, "adding a region")
        endpoint: tuple = (args.region_host, ports[view.shard], repl_ports[view.shard])
        if view.shards.sharded:
            endpoint += (tuple(ports), tuple(repl_ports))
        _agree(view, path, Change(JOIN, number, args.name, endpoint), console)
        console.print(f"{args.name} joined the {'group' if view.shards.sharded else 'database'} as region {number} "
                      f"(membership epoch {view.epoch}, status joining).", highlight=False)
        return 0

    code = _unfinished(cfg, each_shard(args, cfg, path, console, add), "adding the region")
    if code == 0:
        where = path or "the cluster file"
        console.print(f"Start it with: braid node --config {where} --region {args.name} --data-dir DIR\n"
                      + ("(one process per shard, each joining its group) " if cfg.shards.sharded else "")
                      + "It takes the data from its peers and accepts writes once it has caught up "
                      "(braid-admin status shows its progress).")
    return code


LEAVER_GRACE_S = 15.0  # a leaving region that stops answering is given up after this long


def _wait_handed_over(cfg: ClusterConfig, path, r: RegionSpec, timeout: float) -> int:
    """Wait until every other member holds all of leaving region ``r``'s operations; returns their count."""
    deadline = time.monotonic() + timeout
    lost_at = None  # since when the leaver does not answer: a busy region may miss a poll or two
    while True:
        found, _ = statuses(cfg, path)
        leaver = found.get(r.name)
        if leaver is None:
            now = time.monotonic()
            lost_at = now if lost_at is None else lost_at
            if now - lost_at >= LEAVER_GRACE_S or now > deadline:
                raise AdminError(f"{r.name} is leaving but unreachable: its operations cannot be handed over "
                                 f"(run this again when it is back, or remove it with --force)")
            time.sleep(0.5)
            continue
        lost_at = None
        total = leaver.vv.get(r.number, 0)
        behind = [f"{name} ({st.vv.get(r.number, 0)} of {total})" for name, st in found.items()
                  if name != r.name and st.vv.get(r.number, 0) < total]
        missing = [x.name for x in cfg.live_regions() if x.name not in found]
        if not behind and not missing:
            return total
        if time.monotonic() > deadline:
            raise AdminError(f"{r.name} is leaving (it takes no writes), but after {timeout:g}s not every member "
                             f"holds its operations: {', '.join(behind + [m + ' (unreachable)' for m in missing])}; "
                             "run this again to finish")
        time.sleep(0.05)  # polling interval of a command-line wait


def orphaned_operations(cfg: ClusterConfig, statuses: dict, removing: RegionSpec) -> list[tuple[RegionSpec, int]]:
    """Regions removed earlier whose operations up to their frozen point no member but
    ``removing`` is known to hold: (the region, the last of its operations a remaining member
    holds).  A forced removal of ``removing`` takes them with it (the remaining members
    converge without them).  ``statuses``: each reachable member's status by name."""
    remaining = [st for name, st in statuses.items() if name != removing.name]
    out = []
    for x in cfg.regions:
        if x.status != REMOVED or x.number == removing.number or not x.frozen:
            continue
        held = max((st.vv.get(x.number, 0) for st in remaining), default=0)
        if held < x.frozen:
            out.append((x, held))
    return out


def cmd_region_remove(args, cfg: ClusterConfig, path, console: Console) -> int:
    region_named(cfg, args.name)
    return _unfinished(cfg, each_shard(args, cfg, path, console, _remove), "the removal")


def _remove(args, cfg: ClusterConfig, path, console: Console) -> int:
    if cfg.shards.sharded:
        _take_group_list(cfg, path)
    r = region_named(cfg, args.name)
    if r.status == REMOVED:
        if cfg.shards.sharded:  # (a run finished again)
            console.print(f"{r.name} (region {r.number}) was already removed from this group (membership epoch "
                          f"{cfg.epoch}): nothing to change", highlight=False)
            return 0
        raise AdminError(f"{r.name} (region {r.number}) was already removed")
    if args.force:
        found = _all_reachable(cfg, path, "a forced removal", but=r.number)
        issued = max((link.peer_own_ops for st in found.values() for link in st.links if link.number == r.number),
                     default=0)
        orphaned = orphaned_operations(cfg, found, r)
        frozen, _ = _agree(cfg, path, Change(FORCE_REMOVE, r.number), console)
        lost = max(issued - frozen, 0)
        console.print(f"{r.name} (region {r.number}) was removed by force at membership epoch {cfg.epoch}: the "
                      f"others hold its operations up to {frozen} and keep them; {lost} operation(s) it was known "
                      f"to have made beyond that are lost (it may have made more since it was last heard from). "
                      f"If it comes back it is refused; wipe it with: braid-admin region purge --region {r.name}")
        for x, held in orphaned:
            console.print(f"{x.name} (removed earlier, frozen at {x.frozen}): no remaining member holds its "
                          f"operations {held + 1} to {x.frozen}; they are lost (the remaining members converge "
                          "without them)")
        return 0
    _all_reachable(cfg, path, "removing a region")
    if r.status != LEAVING:
        _agree(cfg, path, Change(LEAVE, r.number), console)
        console.print(f"{r.name} is leaving: it takes no more writes; waiting until every member holds its operations")
    total = _wait_handed_over(cfg, path, r, args.timeout)
    _agree(cfg, path, Change(REMOVE, r.number), console)
    console.print(f"{r.name} (region {r.number}) left the database at membership epoch {cfg.epoch}: every "
                  f"member holds its {total} operations. Its process may be stopped.")
    return 0


def cmd_region_purge(args, cfg: ClusterConfig, path, console: Console) -> int:
    if not [r for r in cfg.regions if r.name == args.region]:
        raise AdminError(f"no region named {args.region!r} in the cluster file")
    code = _unfinished(cfg, each_shard(args, cfg, path, console, _purge), "the purge")
    r = next((x for x in reversed(cfg.regions) if x.name == args.region), None)
    if code == 0 and r is not None:
        ports, repl_ports = (",".join(map(str, r.ports)), ",".join(map(str, r.repl_ports))) if r.ports else \
            (str(r.port), str(r.repl_port))
        console.print(f"To bring {r.name} back: braid-admin region add {r.name} --host {r.host} --port {ports} "
                      f"--repl-port {repl_ports}, then start it again with the updated cluster file (it gets a "
                      "new number)")
    return code


def _purge(args, cfg: ClusterConfig, path, console: Console) -> int:
    if cfg.shards.sharded:
        _take_group_list(cfg, path)
    found, failures = statuses(cfg, path)
    r = next((x for x in cfg.regions if x.name == args.region and x.status == REMOVED), None)
    if r is None:
        live = cfg.region(args.region)
        raise AdminError(f"{live.name} (region {live.number}) is {live.status}, not removed: remove it first "
                         f"(braid-admin region remove {live.name} [--force])")
    if not found:
        raise AdminError(f"no member is reachable to confirm that {r.name} was removed ({'; '.join(failures)})")
    call(cfg, r, "purge", cfg.membership_blob())
    console.print(f"{shard_name(cfg, r)} (region {r.number}) deleted its data and stopped.", highlight=False)
    return 0

