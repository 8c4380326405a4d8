"""The descriptions of the commands node/commands/xread.py handles (XREAD, XREADGROUP).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import block, describe, integer, key, keyword, ks, range_, string, token

describe("xread", -4, "blocking readonly", "xread", group="stream", since="5.0.0",
         summary="Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a "
                 "message is available otherwise.",
         complexity="For each stream mentioned: O(N) with N being the number of elements being returned, it means that "
                    "XREAD-ing with a fixed COUNT is O(1).",
         acl="stream", keys=[ks("RO ACCESS", keyword("STREAMS", 1), range_(-1, 1, 2))], braid="reads_entries",
         history=[("8.10.0", "Added the `MAXCOUNT` and `MAXSIZE` options.")],
         arguments=[
             integer("count", token="COUNT", optional=True),
             integer("maxcount", token="MAXCOUNT", since="8.10.0", optional=True),
             integer("maxsize", token="MAXSIZE", since="8.10.0", optional=True),
             integer("milliseconds", token="BLOCK", optional=True),
             block("streams",
                 key("key", 0, multiple=True),
                 string("id", multiple=True),
                 token="STREAMS"),
         ])
describe("xreadgroup", -7, "blocking write", "xread", group="stream", since="5.0.0",
         summary="Returns new or historical messages from a stream for a consumer in a group. Blocks until a message "
                 "is available otherwise.",
         complexity="For each stream mentioned: O(M) with M being the number of elements returned. If M is constant "
                    "(e.g. always asking for the first 10 elements with COUNT), you can consider it O(1). On the other "
                    "side when XREADGROUP blocks, XADD will pay the O(N) time in order to serve the N clients blocked "
                    "on the stream getting new data.",
         acl="stream", keys=[ks("RO ACCESS", keyword("STREAMS", 4), range_(-1, 1, 2))], braid="logged_if_changed "
                                                                                              "reads_entries",
         history=[("8.4.0", "Added the `CLAIM` option."), ("8.10.0", "Added the `MAXCOUNT` and `MAXSIZE` options.")],
         arguments=[
             block("group-block",
                 string("group"),
                 string("consumer"),
                 token="GROUP"),
             integer("count", token="COUNT", optional=True),
             integer("maxcount", token="MAXCOUNT", since="8.10.0", optional=True),
             integer("maxsize", token="MAXSIZE", since="8.10.0", optional=True),
             integer("milliseconds", token="BLOCK", optional=True),
             integer("min-idle-time", token="CLAIM", since="8.4.0", optional=True),
             token("NOACK", optional=True),
             block("streams",
                 key("key", 0, multiple=True),
                 string("id", multiple=True),
                 token="STREAMS"),
         ])
