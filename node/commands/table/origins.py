"""The descriptions of the commands node/commands/origins.py handles (XORIGINS, XRANGEORIGIN, XSPLITORIGIN).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe, index, ks

describe("xorigins", 2, "readonly fast", "origins", group="stream", since="0.1.0",
         summary="Lists a stream's origin logs (Braid): per origin region its number, live entries, first live ID and "
                 "highest ID stored.",
         complexity="O(R) with R being the number of origin regions.",
         acl="stream", keys=[ks("RO ACCESS", index(1))])
describe("xrangeorigin", -5, "readonly", "origins", group="stream", since="0.1.0",
         summary="Returns the entries of one origin region's log of a stream within a range of IDs (Braid).",
         complexity="O(N) with N being the number of elements being returned.",
         acl="stream", keys=[ks("RO ACCESS", index(1))])
describe("xsplitorigin", 6, "readonly", "origins", group="stream", since="0.1.0",
         summary="Cuts the entries of one origin region's log within a range of IDs into runs of at most size entries; "
                 "returns each run's last ID and length (Braid).",
         complexity="O(B + S) with B the number of blocks in the range and S the number of runs, plus decoding the "
                    "blocks where runs end.",
         acl="stream", keys=[ks("RO ACCESS", index(1))])
