"""``braid-admin`` on a sharded database (docs/sharding.md): shard K of every region forms a
replication group of its own, administered as a whole unsharded database is - through the admin
service on each region's shard K replication port, that is on the cluster file's shard view
(:meth:`ClusterConfig.shard_view`).  So a command acts on each group in turn (or on the one
``--shard K`` names), prints each group's part under a heading, and ends with the worst of the
groups' exit statuses.  An unsharded database is one group and gets no heading: its output is
what it was before shards.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from rich.console import Console

from node.activeactive.cluster_config import ClusterConfig
from node.region.slots import format_ranges
from node.tools.admin_calls import AdminError

# a command run on one group: (args, the group's view of the cluster file, the file, console) -> exit status
Command = Callable[[argparse.Namespace, ClusterConfig, "str | None", Console], int]


def add_shard_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", type=int, metavar="K",
                   help="a sharded database: only shard K of the regions (default: every shard, one after another)")


def shard_views(args: argparse.Namespace, cfg: ClusterConfig) -> list[ClusterConfig]:
    """The groups a command acts on: ``cfg`` itself for an unsharded database, else the view of
    each shard (only ``--shard``'s when given).  AdminError (exit status 2) for a shard that is
    not one of the database's."""
    k = getattr(args, "shard", None)
    if k is not None:
        if not cfg.shards.sharded and k != 0:
            raise AdminError(f"--shard {k}: this database is not sharded (its one shard is 0)", status=2)
        try:
            view = cfg.shard_view(k)
        except ValueError as e:
            raise AdminError(f"--shard {k}: {e}", status=2) from None
        return [view] if cfg.shards.sharded else [cfg]
    if not cfg.shards.sharded:
        return [cfg]
    return [cfg.shard_view(k) for k in range(cfg.shards.count)]


def heading(view: ClusterConfig) -> str:
    """What names a group above its part of the output."""
    return f"shard {view.shard} of {view.shards.count} (slots {format_ranges(list(view.shards.ranges[view.shard]))})"


def each_shard(args: argparse.Namespace, cfg: ClusterConfig, path: str | None, console: Console,
               command: Command) -> int:
    """Run ``command`` on every group ``shard_views`` gives, each under its heading on a sharded
    database; a group whose command fails is named (the others still run).  Returns the worst
    exit status of the groups."""
    views = shard_views(args, cfg)
    if not cfg.shards.sharded:
        return command(args, cfg, path, console)
    worst = 0
    for view in views:
        console.print(heading(view), highlight=False)
        try:
            worst = max(worst, command(args, view, path, console))
        except AdminError as e:
            print(f"braid-admin: shard {view.shard}: {e}", file=sys.stderr)
            worst = max(worst, e.status)
    return worst

