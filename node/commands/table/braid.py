"""The descriptions of the commands node/commands/braid.py handles (BRAID.REPLICATION, BRAID.CONFIG).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe

describe("braid.replication", -2, "", "braid", group="server", since="0.1.0",
         summary="Controls this region's replication (Active-Active databases).")
describe("braid.replication|pause", -2, "admin noscript", "braid", since="0.1.0",
         summary="Stops all syncing of this region with the others, or with one peer (PEER name): writes stay local.",
         complexity="O(1)")
describe("braid.replication|resume", -2, "admin noscript", "braid", since="0.1.0",
         summary="Resumes syncing (all links, or the link to PEER name): the regions exchange what the other lacks.",
         complexity="O(1)")
describe("braid.replication|status", 2, "admin noscript", "braid", since="0.1.0",
         summary="This region's version vector and links, as INFO crdt reports them.",
         complexity="O(1)")
describe("braid.replication|cluster", 2, "admin noscript", "braid", since="0.1.0",
         summary="The cluster file this region runs with (token left out).",
         complexity="O(1)")
describe("braid.config", -2, "", "braid", group="server", since="0.1.0",
         summary="Database-level settings of an Active-Active region (set by braid-admin on every region).")
describe("braid.config|get", 3, "admin noscript", "braid", since="0.1.0",
         summary="BRAID.CONFIG GET crdt_xadd_id_uniqueness_mode",
         complexity="O(1)")
describe("braid.config|set", 4, "admin noscript", "braid", since="0.1.0",
         summary="BRAID.CONFIG SET crdt_xadd_id_uniqueness_mode strict|semi-strict|liberal, or appendfsync (also "
                 "recorded in this region's cluster file)",
         complexity="O(1)")
