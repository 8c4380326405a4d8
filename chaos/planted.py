"""Planted bugs: a region process started with one of Braid's rules broken on purpose.

``python -m chaos.planted BUG <braid arguments>`` patches the named rule, then
runs ``braid`` as usual.  The chaos suite uses it to prove its checkers can
fail (``braid-chaos run --bug BUG``); nothing here is imported by a normal
region.  Each bug names the checker that must catch it.
"""

from __future__ import annotations

import os
import sys


def _strict_dup() -> None:
    """Strict IDs minted without the region's number: two regions mint the same ID."""
    from crdt import idgen

    strict = idgen.strict
    idgen.strict = lambda last, now_ms, region, stride, wanted_ms=None: strict(last, now_ms, 0, stride, wanted_ms)


def _skip_late() -> None:
    """XREADGROUP ``>`` with one cursor for all origin logs: a late entry below it is skipped."""
    from crdt import groups
    from crdt.ids import MAX_ID, incr

    def read_one_cursor(s, g, consumer, count, noack, now):
        top = max([g.cursor(o) for o in s.logs] or [g.floor])  # the bug: one cursor for every log
        start = incr(top)
        out = []
        for eid, origin, flat in s.merged(start, MAX_ID) if start is not None else ():
            if count and len(out) >= count:
                break
            g.cursors[origin] = eid
            if eid > g.last_id:
                groups.advance(s, g, eid)
            if not noack:
                g.deliver(eid, consumer, now)
            out.append((eid, flat))
        return out

    groups.read_new_per_origin = read_one_cursor


def _lost_delete() -> None:
    """XDEL and trims from other regions are not applied here: the regions diverge."""
    from crdt import ops
    from node.region.db import Database

    apply_remote = Database.apply_remote

    def ignore_deletes(self, op):
        if not isinstance(op, (ops.DeleteEntries, ops.Trim)):
            apply_remote(self, op)

    Database.apply_remote = ignore_deletes


def _no_start_gate() -> None:
    """A region takes writes as soon as it starts, before its peers told it the last of its own
    operations they hold: started from an older copy of its folder (the restore fault), it mints
    again numbers its peers hold, and the regions keep different operations under them."""
    from node.activeactive.region import ActiveActive

    ActiveActive.recover_own_operations = lambda self, on_recovered, machine_crash=False: None


def _wait_counts_all() -> None:
    """WAIT counts every live peer, whether it acknowledged the writes or not: a write it confirmed
    may be held by no other region when its own is cut off and killed, and the forced removal of
    that region loses it."""
    from node.activeactive.region import ActiveActive

    def every_live_peer(self, n: int, on_disk: bool = False) -> int:
        return sum(1 for peer in self.membership.live() if peer != self.region)

    ActiveActive.regions_holding = every_live_peer


def _waitfor_at_once() -> None:
    """BRAID.WAITFOR answers 1 at once, whether the region applied the token's writes or not (the
    token is read as naming none): a client reading its own write there next may not find it."""
    from node.commands import waits

    waits.parse_token = lambda arg: {}


BUGS = {
    "strict-dup": (_strict_dup, "unique IDs"),
    "skip-late": (_skip_late, "XREADGROUP never skips"),
    "lost-delete": (_lost_delete, "convergence"),
    "no-start-gate": (_no_start_gate, "convergence"),
    "wait-counts-all": (_wait_counts_all, "forced removals"),
    "waitfor-at-once": (_waitfor_at_once, "read your writes"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BUGS:
        print(f"usage: python -m chaos.planted {{{','.join(BUGS)}}} <braid arguments>", file=sys.stderr)
        return 2
    # A bug is planted by replacing a rule's Python function; code compiled with mypyc calls
    # compiled functions directly, past the replacement, so a planted region runs the pure source
    # (chosen here, not at import: the chaos suite imports this module to list the bugs; the
    # variable too, for any process this one starts).
    os.environ["BRAID_PURE"] = "1"
    from node import build

    if build.use_source():  # imported before the switch above was made: the bug would not take effect
        print("chaos.planted: crdt was imported from its compiled build; run it as python -m chaos.planted",
              file=sys.stderr)
        return 2
    BUGS[argv[0]][0]()
    from node.tools import shards
    from node.tools.cli import main as braid

    bug = argv[0]  # a sharded region's supervisor starts its shards with the same bug planted
    shards.shard_command = lambda args, k: [sys.executable, "-m", "chaos.planted", bug, *args, "--shard", str(k)]

    return braid(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
