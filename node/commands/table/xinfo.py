"""The descriptions of the commands node/commands/xinfo.py handles (XINFO).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import block, describe, index, integer, key, ks, string, token

describe("xinfo", -2, "", "xinfo", group="stream", since="5.0.0",
         summary="A container for stream introspection commands.")
describe("xinfo|stream", -3, "readonly", "xinfo", since="5.0.0",
         summary="Returns information about a stream.",
         complexity="O(1)",
         acl="stream", keys=[ks("RO ACCESS", index(2))], braid="reads_entries",
         history=[
             ("6.0.0", "Added the `FULL` modifier."),
             ("7.0.0", "Added the `max-deleted-entry-id`, `entries-added`, `recorded-first-entry-id`, `entries-read` "
                       "and `lag` fields"),
             ("7.2.0", "Added the `active-time` field, and changed the meaning of `seen-time`."),
             ("8.6.0", "Added the `idmp-duration`, `idmp-maxsize`, `pids-tracked`, `iids-tracked`, `iids-added` and "
                       "`iids-duplicates` fields for IDMP tracking."),
         ],
         arguments=[
             key("key", 0),
             block("full-block",
                 token("FULL"),
                 integer("count", token="COUNT", optional=True),
                 optional=True),
         ])
describe("xinfo|groups", 3, "readonly", "xinfo", since="5.0.0",
         summary="Returns a list of the consumer groups of a stream.",
         complexity="O(1)",
         acl="stream", keys=[ks("RO ACCESS", index(2))],
         history=[("7.0.0", "Added the `entries-read` and `lag` fields")],
         arguments=[
             key("key", 0),
         ])
describe("xinfo|consumers", 4, "readonly", "xinfo", since="5.0.0",
         summary="Returns a list of the consumers in a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RO ACCESS", index(2))],
         history=[("7.2.0", "Added the `inactive` field, and changed the meaning of `idle`.")],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             string("group"),
         ])
describe("xinfo|help", 2, "loading stale", "xinfo", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="stream")
