"""The descriptions of the commands node/commands/waits.py handles: WAIT and WAITAOF (as
Redis describes them, counting other regions where Redis counts replicas), and Braid's
read-your-writes pair BRAID.TOKEN and BRAID.WAITFOR.

One :func:`~node.commands.table.vocabulary.describe` call per command; the package's
docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe, integer, string

_ALL_SHARDS_MIN = ["request_policy:all_shards", "response_policy:agg_min"]

describe("wait", 3, "blocking", "waits", group="generic", since="3.0.0",
         summary="Blocks until the asynchronous replication of all preceding write commands sent by the connection "
                 "is completed.",
         complexity="O(1)",
         acl="connection", tips=_ALL_SHARDS_MIN,
         arguments=[integer("numreplicas"), integer("timeout")])
describe("waitaof", 4, "blocking", "waits", group="generic", since="7.2.0",
         summary="Blocks until all of the preceding write commands sent by the connection are written to the "
                 "append-only file of the master and/or replicas.",
         complexity="O(1)",
         acl="connection", tips=_ALL_SHARDS_MIN,
         arguments=[integer("numlocal"), integer("numreplicas"), integer("timeout")])
describe("braid.token", 1, "fast", "waits", group="connection", since="0.2.0",
         summary="Returns this connection's read-your-writes token: the writes it made (and the tokens it waited "
                 "for), to pass to BRAID.WAITFOR at any region.",
         complexity="O(N) where N is the number of regions",
         acl="connection")
describe("braid.waitfor", 3, "blocking", "waits", group="connection", since="0.2.0",
         summary="Blocks until this region has applied every write a read-your-writes token names (1), or the "
                 "timeout in milliseconds passes (0).",
         complexity="O(N) where N is the number of regions",
         acl="connection",
         arguments=[string("token"), integer("timeout")])
