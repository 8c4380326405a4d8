"""The descriptions of the commands node/commands/keys.py handles (DEL, UNLINK, EXISTS, TYPE, TTL,
PTTL, EXPIRETIME, PEXPIRETIME, PERSIST, RENAME, RENAMENX, COPY, KEYS, SCAN).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe, index, integer, key, ks, range_, token

describe("del", -2, "write", "keys", group="generic", since="1.0.0",
         summary="Deletes one or more keys.",
         complexity="O(N) where N is the number of keys that will be removed.",
         acl="keyspace", keys=[ks("RM DELETE", index(1), range_(-1, 1, 0))], braid="resolved")
describe("unlink", -2, "write fast", "keys", group="generic", since="4.0.0",
         summary="Asynchronously deletes one or more keys.",
         complexity="O(1) for each key removed regardless of its size.",
         acl="keyspace", keys=[ks("RM DELETE", index(1), range_(-1, 1, 0))], braid="resolved")
describe("exists", -2, "readonly fast", "keys", group="generic", since="1.0.0",
         summary="Determines whether one or more keys exist.",
         complexity="O(N) where N is the number of keys to check.",
         acl="keyspace", keys=[ks("RO", index(1), range_(-1, 1, 0))])
describe("type", 2, "readonly fast", "keys", group="generic", since="1.0.0",
         summary="Determines the type of value stored at a key.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO", index(1))])
describe("ttl", 2, "readonly fast", "keys", group="generic", since="1.0.0",
         summary="Returns the expiration time in seconds of a key.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))])
describe("pttl", 2, "readonly fast", "keys", group="generic", since="2.6.0",
         summary="Returns the expiration time in milliseconds of a key.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))])
describe("expiretime", 2, "readonly fast", "keys", group="generic", since="7.0.0",
         summary="Returns the expiration time of a key as a Unix timestamp.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))])
describe("pexpiretime", 2, "readonly fast", "keys", group="generic", since="7.0.0",
         summary="Returns the expiration time of a key as a Unix milliseconds timestamp.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RO ACCESS", index(1))])
describe("persist", 2, "write fast", "keys", group="generic", since="2.2.0",
         summary="Removes the expiration time of a key.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RW UPDATE", index(1))])
describe("rename", 3, "write", "keys", group="generic", since="1.0.0",
         summary="Renames a key and overwrites the destination.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RW ACCESS DELETE", index(1)), ks("OW UPDATE", index(2))], braid="resolved")
describe("renamenx", 3, "write fast", "keys", group="generic", since="1.0.0",
         summary="Renames a key only when the target key name doesn't exist.",
         complexity="O(1)",
         acl="keyspace", keys=[ks("RW ACCESS DELETE", index(1)), ks("OW INSERT", index(2))], braid="resolved")
describe("copy", -3, "write denyoom", "keys", group="generic", since="6.2.0",
         summary="Copies the value of a key to a new key.",
         complexity="O(N) worst case for collections, where N is the number of nested items. O(1) for string values.",
         acl="keyspace", keys=[ks("RO ACCESS", index(1)), ks("OW UPDATE", index(2))], braid="reads_entries",
         arguments=[
             key("source", 0),
             key("destination", 1),
             integer("destination-db", token="DB", optional=True),
             token("REPLACE", optional=True),
         ])
describe("keys", 2, "readonly", "keys", group="generic", since="1.0.0",
         summary="Returns all key names that match a pattern.",
         complexity="O(N) with N being the number of keys in the database",
         acl="keyspace dangerous")
describe("scan", -2, "readonly touches_arbitrary_keys", "keys", group="generic", since="2.8.0",
         summary="Iterates over the key names in the database.",
         complexity="O(1) for every call. O(N) for a complete iteration.",
         acl="keyspace")
