"""The descriptions of the commands node/commands/dump.py handles (DUMP, RESTORE, RESTORE-ASKING).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from typing import Any

from node.commands.table.vocabulary import describe, index, integer, key, ks, string, token

describe("dump", 2, "readonly", "dump", group="generic", since="2.6.0",
         summary="Returns a serialized representation of the value stored at a key.",
         complexity="O(1) to access the key and additional O(N*M) to serialize it, where N is the number of Redis "
                    "objects composing the value and M their average size. For small string values the time complexity "
                    "is thus O(1)+O(1*M) where M is small, so simply O(1).",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))], braid="reads_entries",
         tips=["nondeterministic_output"],
         arguments=[
             key("key", 0),
         ])
# RESTORE-ASKING is RESTORE for a cluster's MIGRATE: the same arguments and history
_RESTORE_DOCS: dict[str, Any] = dict(
    history=[
        ("3.0.0", "Added the `REPLACE` modifier."),
        ("5.0.0", "Added the `ABSTTL` modifier."),
        ("5.0.0", "Added the `IDLETIME` and `FREQ` options."),
    ],
    arguments=[
        key("key", 0),
        integer("ttl"),
        string("serialized-value"),
        token("REPLACE", since="3.0.0", optional=True),
        token("ABSTTL", since="5.0.0", optional=True),
        integer("seconds", token="IDLETIME", since="5.0.0", optional=True),
        integer("frequency", token="FREQ", since="5.0.0", optional=True),
    ],
)
describe("restore", -4, "write denyoom", "dump", group="generic", since="2.6.0",
         summary="Creates a key from the serialized representation of a value.",
         complexity="O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is "
                    "the number of Redis objects composing the value and M their average size. For small string values "
                    "the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set "
                    "values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).",
         acl="keyspace dangerous", keys=[ks("OW UPDATE", index(1))], **_RESTORE_DOCS)
describe("restore-asking", -4, "write denyoom asking", "dump", group="server", since="3.0.0",
         summary="An internal command for migrating keys in a cluster.",
         complexity="O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is "
                    "the number of Redis objects composing the value and M their average size. For small string values "
                    "the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set "
                    "values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).",
         acl="keyspace dangerous", keys=[ks("OW UPDATE", index(1))], **_RESTORE_DOCS)
