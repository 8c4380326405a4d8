"""The descriptions of the commands node/commands/migrate.py handles (MIGRATE).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import (
         block,
         describe,
         index,
         integer,
         key,
         keyword,
         ks,
         oneof,
         range_,
         string,
         token,
)

describe("migrate", -6, "write", "migrate", group="generic", since="2.6.0",
         summary="Atomically transfers a key from one Redis instance to another.",
         complexity="This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target "
                    "instance. See the pages of these commands for time complexity. Also an O(N) data transfer between "
                    "the two instances is performed.",
         acl="keyspace dangerous",
         keys=[ks("RW ACCESS DELETE", index(3)),
               ks("RW ACCESS DELETE INCOMPLETE", keyword("KEYS", -2), range_(-1, 1, 0))], braid="resolved",
         history=[
             ("3.0.0", "Added the `COPY` and `REPLACE` options."),
             ("3.0.6", "Added the `KEYS` option."),
             ("4.0.7", "Added the `AUTH` option."),
             ("6.0.0", "Added the `AUTH2` option."),
         ],
         tips=["nondeterministic_output"],
         arguments=[
             string("host"),
             integer("port"),
             oneof("key-selector",
                 key("key", 0),
                 token('""', name="empty-string")),
             integer("destination-db"),
             integer("timeout"),
             token("COPY", since="3.0.0", optional=True),
             token("REPLACE", since="3.0.0", optional=True),
             oneof("authentication",
                 string("auth", token="AUTH", since="4.0.7"),
                 block("auth2",
                     string("username"),
                     string("password"),
                     token="AUTH2", since="6.0.0"),
                 optional=True),
             key("keys", 1, token="KEYS", since="3.0.6", optional=True, multiple=True),
         ])
