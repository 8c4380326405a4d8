"""``braid-admin acl``: users and permissions defined once for the whole database.

    braid-admin acl setuser alice on '>s3cret' '~rides:*' +@read
    braid-admin acl deluser alice [bob ...]
    braid-admin acl list
    braid-admin acl sync [--from region-1]

Redis's ACL (docs/security.md) is kept by each region; these commands make the same change at
every region - every shard of each, on a sharded database - through the admin service
(the ChangeAcl call, node/security/acl_shared.py), so a user is the same everywhere:

- a change goes out in two rounds: every region first checks it (the same parser ACL SETUSER
  uses, against the users it has), and only when none refused does any region make it.  A rule
  one region refuses changes no region.  Each region then makes the whole change in one step
  (all of a user's rules at once), saved to its ACL file first when it has one.
- a region that does not answer is named and the exit status is 1; the others are changed,
  and ``acl sync`` brings it in line once it is back (``acl list`` shows it differing).
- ``acl sync`` makes every region's user list the one most regions hold (``--from``: the one
  that region holds), replaced in one step at each region that differs.

The ACL LOG, and users set with ACL SETUSER at one region, stay that region's.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from rich.console import Console
from rich.markup import escape

from node.activeactive.cluster_config import ClusterConfig, RegionSpec
from node.security.acl_shared import DELUSER, REPLACE, SETUSER, AclChange
from node.tools.admin_calls import AdminError, call, counted, region_named, shard_name
from node.tools.admin_shards import shard_views

SYNC_HINT = "run `braid-admin acl sync` once it is back to give it the same users"

# a region's answer to AclUsers and ChangeAcl (proto/admin.proto's AclState: no type stubs are generated)
AclState = Any

# one region, or one shard of a region on a sharded database: where a change is made
Target = tuple[ClusterConfig, RegionSpec]


def targets(args: argparse.Namespace, cfg: ClusterConfig) -> list[Target]:
    """Every live region, and on a sharded database every shard of each (users are checked by each)."""
    return [(view, r) for view in shard_views(args, cfg) for r in view.live_regions()]


def _arg_bytes(value: str) -> bytes:
    return value.encode("utf-8", "surrogateescape")  # (what argparse decoded from the command line)


def _text(line: bytes) -> str:
    return line.decode("utf-8", "surrogateescape")


def change_everywhere(args: argparse.Namespace, cfg: ClusterConfig, change: AclChange,
                      where: list[Target] | None = None) -> tuple[list[tuple[str, AclState]], list[str]]:
    """Check ``change`` at every target (``where``, default all), then make it at each that
    answered.  Returns ((name, AclState) of each changed, sentences for those not changed);
    AdminError when a region refused the change at the check (then nothing changed anywhere)."""
    where = targets(args, cfg) if where is None else where
    unreachable: list[str] = []
    refused: list[str] = []
    ready: list[Target] = []
    for view, r in where:
        try:
            call(view, r, "change_acl", change, True)
            ready.append((view, r))
        except AdminError as e:
            (unreachable if e.unreachable else refused).append(f"{shard_name(view, r)}: {e}" if not e.unreachable
                                                               else shard_name(view, r))
    if refused:
        raise AdminError("no region changed: " + "; ".join(refused))
    if not ready:
        raise AdminError(f"no region changed: none answered (unreachable: {', '.join(unreachable)})", True)
    done: list[tuple[str, AclState]] = []
    failed = [f"unreachable: {', '.join(unreachable)}; {SYNC_HINT}"] if unreachable else []
    for view, r in ready:
        try:
            done.append((shard_name(view, r), call(view, r, "change_acl", change)))
        except AdminError as e:
            failed.append(f"{e}; {SYNC_HINT}" if e.unreachable else f"{e} (nothing changed there; `braid-admin acl "
                                                                   "sync` tries again)")
    return done, failed


def _saved(done: list[tuple[str, AclState]]) -> str:
    """Where the users were kept: the ACL files, or memory only (lost at restart)."""
    in_memory = [name for name, st in done if not st.aclfile]
    if not in_memory:
        return "saved to each region's ACL file"
    if len(in_memory) == len(done):
        return "kept in memory (no region has an ACL file: a restart forgets them; `braid-admin acl sync` " \
               "restores them)"
    return f"saved to the ACL files; kept in memory only at {', '.join(in_memory)} (no ACL file there)"


def _finish(console: Console, what: str, done: list[tuple[str, AclState]], failed: list[str]) -> int:
    noun = "region shard" if any(" shard " in name for name, _ in done) else "region"
    console.print(f"{what} at {counted(len(done), noun)} ({', '.join(name for name, _ in done)}), "
                  f"{_saved(done)}", highlight=False)
    for sentence in failed:
        print(f"braid-admin: not changed: {sentence}", file=sys.stderr)
    return 1 if failed else 0


def cmd_acl_setuser(args, cfg: ClusterConfig, path, console: Console) -> int:
    if not args.rules:
        raise AdminError("acl setuser NAME RULE...: give at least one rule (on, >password, ~pattern, +@category...)",
                         status=2)
    change = AclChange(SETUSER, name=args.name, rules=[_arg_bytes(rule) for rule in args.rules])
    done, failed = change_everywhere(args, cfg, change)
    return _finish(console, f"user {escape(args.name)} set", done, failed)


def cmd_acl_deluser(args, cfg: ClusterConfig, path, console: Console) -> int:
    if "default" in args.names:
        raise AdminError("the 'default' user cannot be removed", status=2)
    done, failed = change_everywhere(args, cfg, AclChange(DELUSER, names=list(args.names)))
    existed = [name for name, st in done if st.removed]
    what = f"{', '.join(args.names)} deleted" + ("" if existed else " (no region had them)")
    return _finish(console, escape(what), done, failed)


def users_everywhere(args, cfg: ClusterConfig) -> tuple[dict[str, tuple[bytes, ...]], list[str]]:
    """Each answering target's users (ACL LIST lines), by its name; the unreachable ones' names."""
    found: dict[str, tuple[bytes, ...]] = {}
    unreachable: list[str] = []
    for view, r in targets(args, cfg):
        try:
            found[shard_name(view, r)] = tuple(call(view, r, "acl_users").users)
        except AdminError as e:
            if not e.unreachable:
                raise
            unreachable.append(shard_name(view, r))
    return found, unreachable


def _differences(mine: tuple[bytes, ...], reference: tuple[bytes, ...]) -> str:
    """How a user list differs from the reference one, by user."""
    def by_name(lines: tuple[bytes, ...]) -> dict[str, bytes]:
        return {_text(line).split(" ", 2)[1]: line for line in lines}
    have, want = by_name(mine), by_name(reference)
    parts = [f"lacks {n}" for n in want if n not in have] + [f"also has {n}" for n in have if n not in want]
    parts += [f"{n} has other rules" for n in want if n in have and have[n] != want[n]]
    return ", ".join(parts)


def cmd_acl_list(args, cfg: ClusterConfig, path, console: Console) -> int:
    found, unreachable = users_everywhere(args, cfg)
    groups = Counter(found.values())
    if groups:
        reference = groups.most_common(1)[0][0]
        holders = [name for name, users in found.items() if users == reference]
        where = "every region" if len(holders) == len(found) and not unreachable else ", ".join(holders)
        console.print(f"users at {where}:", highlight=False)
        for line in reference:
            console.print(f"  {escape(_text(line))}", highlight=False)
        for name, users in found.items():
            if users != reference:
                console.print(f"{name} differs ({_differences(users, reference)}):", highlight=False)
                for line in users:
                    console.print(f"  {escape(_text(line))}", highlight=False)
    differ = len(groups) > 1
    if differ:
        print("braid-admin: the regions' users differ: `braid-admin acl sync` makes them the same (--from REGION: "
              "that region's)", file=sys.stderr)
    if unreachable:
        print(f"braid-admin: unreachable: {', '.join(unreachable)} (their users are not known)", file=sys.stderr)
    return 1 if differ or unreachable else 0


def cmd_acl_sync(args, cfg: ClusterConfig, path, console: Console) -> int:
    found, unreachable = users_everywhere(args, cfg)
    if args.source:
        source = region_named(cfg, args.source)
        first = targets(args, cfg)[0][0]  # (on a sharded database: the region's first shard)
        name = shard_name(first, source)
        if name not in found:
            raise AdminError(f"--from {args.source}: the region is unreachable, nothing changed", True)
        reference = found[name]
    else:
        ranked = Counter(found.values()).most_common()
        if not ranked:
            raise AdminError(f"no region answered (unreachable: {', '.join(unreachable)})", True)
        if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
            tied = [", ".join(n for n, users in found.items() if users == lines) for lines, _ in ranked[:2]]
            raise AdminError("nothing changed: as many regions hold one user list as another (" + " / ".join(tied)
                             + "): say which to take with --from REGION", status=2)
        reference, name = ranked[0][0], "the most regions"
    stale = [(view, r) for view, r in targets(args, cfg) if found.get(shard_name(view, r), reference) != reference]
    failed = [f"unreachable: {', '.join(unreachable)}; {SYNC_HINT}"] if unreachable else []
    if not stale:
        console.print(f"the users are the same at every region that answered ({counted(len(found), 'region')})",
                      highlight=False)
        for sentence in failed:
            print(f"braid-admin: not synced: {sentence}", file=sys.stderr)
        return 1 if failed else 0
    done, more = change_everywhere(args, cfg, AclChange(REPLACE, lines=list(reference)), stale)
    return _finish(console, f"users made those of {name}", done, failed + more)


def add_acl_parser(sub) -> None:
    """``braid-admin acl ...``, on braid-admin's subcommand parsers ``sub``."""
    p = sub.add_parser("acl", help="acl setuser|deluser|list|sync: users and permissions, the same at every region",
                       description="Users and permissions (Redis's ACL rules) defined once for the whole database: "
                                   "each change is checked at every region (every shard of each) before any "
                                   "region makes it, then made at each in one step and saved to its ACL file if it "
                                   "has one. A region that does not answer is named (exit status 1); `acl sync` "
                                   "gives it the same users once it is back. The ACL LOG stays per region.")
    asub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = asub.add_parser("setuser", help="setuser NAME RULE...: create or change a user at every region, all its rules "
                                        "in one step (as one ACL SETUSER)")
    q.add_argument("name", help="the user")
    q.add_argument("rules", nargs=argparse.REMAINDER, help="Redis's rules: on, off, >password, nopass, ~pattern, "
                                                           "%%R~pattern, +@category, -command, (selector), reset...")
    q.set_defaults(fn=cmd_acl_setuser)
    q = asub.add_parser("deluser", help="deluser NAME...: delete users at every region (their clients are closed)")
    q.add_argument("names", nargs="+", metavar="NAME", help="the users")
    q.set_defaults(fn=cmd_acl_deluser)
    q = asub.add_parser("list", help="list: the users, and each region whose users differ",
                        epilog="exit status 1 when the regions' users differ or a region is unreachable")
    q.set_defaults(fn=cmd_acl_list)
    q = asub.add_parser("sync", help="sync [--from REGION]: make every region's users the same (the list most "
                                     "regions hold, or REGION's)")
    q.add_argument("--from", dest="source", metavar="REGION",
                   help="take this region's users (default: the user list most regions hold)")
    q.set_defaults(fn=cmd_acl_sync)
