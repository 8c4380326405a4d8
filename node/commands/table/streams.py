"""The descriptions of the commands node/commands/streams.py handles (XADD, XRANGE, XREVRANGE, XLEN,
XDEL, XDELEX, XTRIM, XSETID, XCFGSET, XIDMP, XIDMPRECORD).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import block, describe, index, integer, key, ks, oneof, string, token

describe("xadd", -5, "write denyoom fast", "streams", group="stream", since="5.0.0",
         summary="Appends a new message to a stream. Creates the key if it doesn't exist.",
         complexity="O(1) when adding a new entry, O(N) when trimming where N being the number of entries evicted.",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="resolved",
         history=[
             ("6.2.0", "Added the `NOMKSTREAM` option, `MINID` trimming strategy and the `LIMIT` option."),
             ("7.0.0", "Added support for the `<ms>-*` explicit ID form."),
             ("8.2.0", "Added the `KEEPREF`, `DELREF` and `ACKED` options."),
         ],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             token("NOMKSTREAM", since="6.2.0", optional=True),
             oneof("condition",
                 token("KEEPREF"),
                 token("DELREF"),
                 token("ACKED"),
                 optional=True),
             oneof("idmp",
                 block("idmpauto-with-pid",
                     token("IDMPAUTO", name="idmpauto-token"),
                     string("pid", display="producer-id")),
                 block("idmp-with-pid-iid",
                     token("IDMP", name="idmp-token"),
                     string("pid", display="producer-id"),
                     string("iid", display="idempotent-id")),
                 optional=True),
             block("trim",
                 oneof("strategy",
                     token("MAXLEN"),
                     token("MINID", since="6.2.0")),
                 oneof("operator",
                     token("=", name="equal"),
                     token("~", name="approximately"),
                     optional=True),
                 string("threshold"),
                 integer("count", token="LIMIT", since="6.2.0", optional=True),
                 optional=True),
             oneof("id-selector",
                 token("*", name="auto-id"),
                 string("id")),
             block("data",
                 string("field"),
                 string("value"),
                 multiple=True),
         ])
describe("xrange", -4, "readonly", "streams", group="stream", since="5.0.0",
         summary="Returns the messages from a stream within a range of IDs.",
         complexity="O(N) with N being the number of elements being returned.",
         acl="stream", keys=[ks("RO ACCESS", index(1))], braid="reads_entries",
         history=[("6.2.0", "Added exclusive ranges.")],
         arguments=[
             key("key", 0),
             string("start"),
             string("end"),
             integer("count", token="COUNT", optional=True),
         ])
describe("xrevrange", -4, "readonly", "streams", group="stream", since="5.0.0",
         summary="Returns the messages from a stream within a range of IDs in reverse order.",
         complexity="O(N) with N being the number of elements returned.",
         acl="stream", keys=[ks("RO ACCESS", index(1))], braid="reads_entries",
         history=[("6.2.0", "Added exclusive ranges.")],
         arguments=[
             key("key", 0),
             string("end"),
             string("start"),
             integer("count", token="COUNT", optional=True),
         ])
describe("xlen", 2, "readonly fast", "streams", group="stream", since="5.0.0",
         summary="Return the number of messages in a stream.",
         complexity="O(1)",
         acl="stream", keys=[ks("RO", index(1))],
         arguments=[
             key("key", 0),
         ])
describe("xdel", -3, "write fast", "streams", group="stream", since="5.0.0",
         summary="Returns the number of messages after removing them from a stream.",
         complexity="O(1) for each single item to delete in the stream, regardless of the stream size.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="resolved",
         arguments=[
             key("key", 0),
             string("id", multiple=True),
         ])
describe("xdelex", -5, "write fast", "streams", group="stream", since="8.2.0",
         summary="Deletes one or multiple entries from the stream.",
         complexity="O(1) for each single item to delete in the stream, regardless of the stream size.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="resolved reads_entries",
         arguments=[
             key("key", 0),
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
describe("xtrim", -4, "write", "streams", group="stream", since="5.0.0",
         summary="Deletes messages from the beginning of a stream.",
         complexity="O(N), with N being the number of evicted entries. Constant times are very small however, since "
                    "entries are organized in macro nodes containing multiple entries that can be released with a "
                    "single deallocation.",
         acl="stream", keys=[ks("RW DELETE", index(1))], braid="resolved",
         history=[
             ("6.2.0", "Added the `MINID` trimming strategy and the `LIMIT` option."),
             ("8.2.0", "Added the `KEEPREF`, `DELREF` and `ACKED` options."),
         ],
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
             block("trim",
                 oneof("strategy",
                     token("MAXLEN"),
                     token("MINID", since="6.2.0")),
                 oneof("operator",
                     token("=", name="equal"),
                     token("~", name="approximately"),
                     optional=True),
                 string("threshold"),
                 integer("count", token="LIMIT", since="6.2.0", optional=True),
                 oneof("condition",
                     token("KEEPREF"),
                     token("DELREF"),
                     token("ACKED"),
                     optional=True)),
         ])
describe("xsetid", -3, "write denyoom fast", "streams", group="stream", since="5.0.0",
         summary="An internal command for replicating stream values.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="resolved",
         history=[("7.0.0", "Added the `entries_added` and `max_deleted_entry_id` arguments.")],
         arguments=[
             key("key", 0),
             string("last-id"),
             integer("entries-added", token="ENTRIESADDED", since="7.0.0", optional=True),
             string("max-deleted-id", token="MAXDELETEDID", since="7.0.0", optional=True),
         ])
describe("xcfgset", -2, "write fast", "streams", group="stream", since="8.6.0",
         summary="Sets the IDMP configuration parameters for a stream.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="resolved",
         arguments=[
             key("key", 0),
             block("idmp-duration-block",
                 token("IDMP-DURATION", name="idmp-duration-token"),
                 integer("duration"),
                 optional=True),
             block("idmp-maxsize-block",
                 token("IDMP-MAXSIZE", name="idmp-maxsize-token"),
                 integer("maxsize"),
                 optional=True),
         ])
describe("xidmp", -2, "", "streams", group="stream", since="8.6.0",
         summary="Braid alias (the IDMP proposal's spelling) for a stream's IDMP settings: XIDMP CFGSET / CFGGET.")
describe("xidmp|cfgset", -4, "write fast", "streams", since="8.6.0",
         summary="Alias of XCFGSET: XIDMP CFGSET key [DURATION seconds] [MAXSIZE entries].",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(2))], braid="resolved")
describe("xidmp|cfgget", -3, "readonly fast", "streams", since="8.6.0",
         summary="XIDMP CFGGET key [DURATION] [MAXSIZE]: the stream's IDMP settings as a map (both when no option is "
                 "named).",
         complexity="O(1)",
         acl="stream", keys=[ks("RO ACCESS", index(2))])
describe("xidmp|help", 2, "loading stale", "streams", since="8.6.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)",
         acl="stream")
describe("xidmprecord", 5, "write denyoom fast", "streams", group="stream", since="8.6.0",
         summary="Records IDMP metadata (producer id and idempotent id) for an existing stream entry.",
         complexity="O(1)",
         acl="stream", keys=[ks("RW UPDATE", index(1))], braid="resolved",
         arguments=[
             key("key", 0),
             string("pid"),
             string("iid"),
             string("stream-id"),
         ])
