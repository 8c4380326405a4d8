"""The descriptions of the commands node/commands/groups.py handles (XGROUP, XACK, XACKDEL, XNACK,
XPENDING, XCLAIM, XAUTOCLAIM).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import block, describe, index, integer, key, ks, oneof, string, token, unix_time

describe("xgroup", -2, "", "groups", group="stream", since="5.0.0",
         summary="A container for consumer groups commands.")
describe("xgroup|create", -5, "write denyoom", "groups", since="5.0.0",
         summary="Creates a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW INSERT", index(2))], braid="resolved",
         history=[("7.0.0", "Added the `entries_read` named argument.")],
         arguments=[
             key("key", 0),
             string("group"),
             oneof("id-selector",
                 string("id"),
                 token("$", name="new-id")),
             token("MKSTREAM", optional=True),
             integer("entriesread", token="ENTRIESREAD", optional=True),
         ])
describe("xgroup|setid", -5, "write", "groups", since="5.0.0",
         summary="Sets the last-delivered ID of a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(2))],
         history=[("7.0.0", "Added the optional `entries_read` argument.")],
         arguments=[
             key("key", 0),
             string("group"),
             oneof("id-selector",
                 string("id"),
                 token("$", name="new-id")),
             integer("entriesread", token="ENTRIESREAD", optional=True),
         ])
describe("xgroup|destroy", 4, "write", "groups", since="5.0.0",
         summary="Destroys a consumer group.",
         complexity="O(N) where N is the number of entries in the group's pending entries list (PEL).",
         acl="stream", keys=[ks("RW DELETE", index(2))], braid="resolved",
         arguments=[
             key("key", 0),
             string("group"),
         ])
describe("xgroup|createconsumer", 5, "write denyoom", "groups", since="6.2.0",
         summary="Creates a consumer in a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW INSERT", index(2))],
         arguments=[
             key("key", 0),
             string("group"),
             string("consumer"),
         ])
describe("xgroup|delconsumer", 5, "write", "groups", since="5.0.0",
         summary="Deletes a consumer from a consumer group.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW DELETE", index(2))],
         arguments=[
             key("key", 0),
             string("group"),
             string("consumer"),
         ])
describe("xgroup|help", 2, "loading stale", "groups", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="stream")
describe("xack", -4, "write fast", "groups", group="stream", since="5.0.0",
         summary="Returns the number of messages that were successfully acknowledged by the consumer group member of a "
                 "stream.",
         complexity="O(1) for each message ID processed.",
         acl="stream", keys=[ks("RW UPDATE", index(1))],
         arguments=[
             key("key", 0),
             string("group"),
             string("id", multiple=True),
         ])
describe("xackdel", -6, "write fast", "groups", group="stream", since="8.2.0",
         summary="Acknowledges and conditionally deletes one or multiple entries for a stream consumer group.",
         complexity="O(1) for each entry ID processed.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="reads_entries",
         arguments=[
             key("key", 0),
             string("group"),
             oneof("condition",
                 token("KEEPREF"),
                 token("DELREF"),
                 token("ACKED"),
                 optional=True),
             block("ids",
                 integer("numids"),
                 string("id", multiple=True),
                 token="IDS"),
         ])
describe("xnack", -7, "write fast", "groups", group="stream", since="8.8.0",
         summary="Releases pending messages back to the group's PEL without acknowledging them, making them available "
                 "for re-delivery.",
         complexity="O(1) for each message ID processed.",
         acl="stream", keys=[ks("RW UPDATE", index(1))],
         arguments=[
             key("key", 0),
             string("group"),
             oneof("mode",
                 token("SILENT"),
                 token("FAIL"),
                 token("FATAL")),
             block("ids",
                 integer("numids"),
                 string("id", multiple=True),
                 token="IDS"),
             integer("count", token="RETRYCOUNT", optional=True),
             token("FORCE", optional=True),
         ])
describe("xpending", -3, "readonly", "groups", group="stream", since="5.0.0",
         summary="Returns the information and entries from a stream consumer group's pending entries list.",
         complexity="O(N) with N being the number of elements returned, so asking for a small fixed number of entries "
                    "per call is O(1). O(M), where M is the total number of entries scanned when used with the IDLE "
                    "filter. When the command returns just the summary and the list of consumers is small, it runs in "
                    "O(1) time; otherwise, an additional O(N) time for iterating every consumer.",
         acl="stream", keys=[ks("RO ACCESS", index(1))],
         history=[("6.2.0", "Added the `IDLE` option and exclusive range intervals.")],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             string("group"),
             block("filters",
                 integer("min-idle-time", token="IDLE", since="6.2.0", optional=True),
                 string("start"),
                 string("end"),
                 integer("count"),
                 string("consumer", optional=True),
                 optional=True),
         ])
describe("xclaim", -6, "write fast", "groups", group="stream", since="5.0.0",
         summary="Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a "
                 "consumer group member.",
         complexity="O(log N) with N being the number of messages in the PEL of the consumer group.",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="reads_entries",
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             string("group"),
             string("consumer"),
             string("min-idle-time"),
             string("id", multiple=True),
             integer("ms", token="IDLE", optional=True),
             unix_time("unix-time-milliseconds", token="TIME", optional=True),
             integer("count", token="RETRYCOUNT", optional=True),
             token("FORCE", optional=True),
             token("JUSTID", optional=True),
             string("lastid", token="LASTID", optional=True),
         ])
describe("xautoclaim", -6, "write fast", "groups", group="stream", since="6.2.0",
         summary="Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered "
                 "to as consumer group member.",
         complexity="O(1) if COUNT is small.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="reads_entries",
         history=[
             ("7.0.0", "Added an element to the reply array, containing deleted entries the command cleared from the "
                       "PEL"),
         ],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             string("group"),
             string("consumer"),
             string("min-idle-time"),
             string("start"),
             integer("count", token="COUNT", optional=True),
             token("JUSTID", optional=True),
         ])
