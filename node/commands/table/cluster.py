"""The descriptions of the commands node/commands/cluster.py handles (CLUSTER, READONLY,
READWRITE, ASKING): Redis's, from its command JSON files.

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
Redis's newer subcommands of atomic slot migration and slot statistics (MIGRATION,
SYNCSLOTS, SLOT-STATS) are not described: Braid's slot map does not move.
"""

from __future__ import annotations

from node.commands.table.vocabulary import block, describe, integer, oneof, string, token

_TOPOLOGY = "no_async_loading admin stale"  # the flags of Redis's subcommands that change the topology
_NONDETERMINISTIC = ["nondeterministic_output"]


def _ranges() -> dict:
    return block("range", integer("start-slot"), integer("end-slot"), multiple=True)


describe("cluster", -2, "", "cluster", group="cluster", since="3.0.0",
         summary="A container for Redis Cluster commands.",
         complexity="Depends on subcommand.")
describe("cluster|addslots", -3, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Assigns new hash slots to a node.",
         complexity="O(N) where N is the total number of hash slot arguments",
         arguments=[integer("slot", multiple=True)])
describe("cluster|addslotsrange", -4, _TOPOLOGY, "cluster", since="7.0.0",
         summary="Assigns new hash slot ranges to a node.",
         complexity="O(N) where N is the total number of the slots between the start slot and end slot arguments.",
         arguments=[_ranges()])
describe("cluster|bumpepoch", 2, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Advances the cluster config epoch.",
         complexity="O(1)",
         tips=_NONDETERMINISTIC)
describe("cluster|count-failure-reports", 3, "admin stale", "cluster", since="3.0.0",
         summary="Returns the number of active failure reports active for a node.",
         complexity="O(N) where N is the number of failure reports",
         tips=_NONDETERMINISTIC,
         arguments=[string("node-id")])
describe("cluster|countkeysinslot", 3, "stale", "cluster", since="3.0.0",
         summary="Returns the number of keys in a hash slot.",
         complexity="O(1)",
         arguments=[integer("slot")])
describe("cluster|delslots", -3, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Sets hash slots as unbound for a node.",
         complexity="O(N) where N is the total number of hash slot arguments",
         arguments=[integer("slot", multiple=True)])
describe("cluster|delslotsrange", -4, _TOPOLOGY, "cluster", since="7.0.0",
         summary="Sets hash slot ranges as unbound for a node.",
         complexity="O(N) where N is the total number of the slots between the start slot and end slot arguments.",
         arguments=[_ranges()])
describe("cluster|failover", -2, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Forces a replica to perform a manual failover of its master.",
         complexity="O(1)",
         arguments=[oneof("options", token("FORCE"), token("TAKEOVER"), optional=True)])
describe("cluster|flushslots", 2, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Deletes all slots information from a node.",
         complexity="O(1)")
describe("cluster|forget", 3, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Removes a node from the nodes table.",
         complexity="O(1)",
         arguments=[string("node-id")])
describe("cluster|getkeysinslot", 4, "stale", "cluster", since="3.0.0",
         summary="Returns the key names in a hash slot.",
         complexity="O(N) where N is the number of requested keys",
         tips=_NONDETERMINISTIC,
         arguments=[integer("slot"), integer("count")])
describe("cluster|help", 2, "loading stale", "cluster", since="5.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)")
describe("cluster|info", 2, "stale", "cluster", since="3.0.0",
         summary="Returns information about the state of a node.",
         complexity="O(1)",
         tips=_NONDETERMINISTIC)
describe("cluster|keyslot", 3, "stale", "cluster", since="3.0.0",
         summary="Returns the hash slot for a key.",
         complexity="O(N) where N is the number of bytes in the key",
         arguments=[string("key")])
describe("cluster|links", 2, "stale", "cluster", since="7.0.0",
         summary="Returns a list of all TCP links to and from peer nodes.",
         complexity="O(N) where N is the total number of Cluster nodes",
         tips=_NONDETERMINISTIC)
describe("cluster|meet", -4, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Forces a node to handshake with another node.",
         complexity="O(1)",
         history=[("4.0.0", "Added the optional `cluster_bus_port` argument.")],
         arguments=[string("ip"), integer("port"), integer("cluster-bus-port", optional=True, since="4.0.0")])
describe("cluster|myid", 2, "stale", "cluster", since="3.0.0",
         summary="Returns the ID of a node.",
         complexity="O(1)")
describe("cluster|myshardid", 2, "stale", "cluster", since="7.2.0",
         summary="Returns the shard ID of a node.",
         complexity="O(1)",
         tips=_NONDETERMINISTIC)
describe("cluster|nodes", 2, "stale", "cluster", since="3.0.0",
         summary="Returns the cluster configuration for a node.",
         complexity="O(N) where N is the total number of Cluster nodes",
         tips=_NONDETERMINISTIC)
describe("cluster|replicas", 3, "admin stale", "cluster", since="5.0.0",
         summary="Lists the replica nodes of a master node.",
         complexity="O(N) where N is the number of replicas.",
         tips=_NONDETERMINISTIC,
         arguments=[string("node-id")])
describe("cluster|replicate", 3, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Configure a node as replica of a master node.",
         complexity="O(1)",
         arguments=[string("node-id")])
describe("cluster|reset", -2, "admin stale noscript", "cluster", since="3.0.0",
         summary="Resets a node.",
         complexity="O(N) where N is the number of known nodes. The command may execute a FLUSHALL as a side "
                    "effect.",
         arguments=[oneof("reset-type", token("HARD"), token("SOFT"), optional=True)])
describe("cluster|saveconfig", 2, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Forces a node to save the cluster configuration to disk.",
         complexity="O(1)")
describe("cluster|set-config-epoch", 3, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Sets the configuration epoch for a new node.",
         complexity="O(1)",
         arguments=[integer("config-epoch")])
describe("cluster|setslot", -4, _TOPOLOGY, "cluster", since="3.0.0",
         summary="Binds a hash slot to a node.",
         complexity="O(1)",
         arguments=[integer("slot"),
                    oneof("subcommand",
                          string("importing", display="node-id", token="IMPORTING"),
                          string("migrating", display="node-id", token="MIGRATING"),
                          string("node", display="node-id", token="NODE"),
                          token("STABLE"))])
describe("cluster|shards", 2, "loading stale", "cluster", since="7.0.0",
         summary="Returns the mapping of cluster slots to shards.",
         complexity="O(N) where N is the total number of cluster nodes",
         tips=_NONDETERMINISTIC)
describe("cluster|slaves", 3, "admin stale", "cluster", since="3.0.0",
         summary="Lists the replica nodes of a master node.",
         complexity="O(N) where N is the number of replicas.",
         tips=_NONDETERMINISTIC,
         arguments=[string("node-id")])
describe("cluster|slots", 2, "loading stale", "cluster", since="3.0.0",
         summary="Returns the mapping of cluster slots to nodes.",
         complexity="O(N) where N is the total number of Cluster nodes",
         history=[("4.0.0", "Added node IDs."), ("7.0.0", "Added additional networking metadata field.")],
         tips=_NONDETERMINISTIC)
describe("readonly", 1, "fast loading stale", "cluster", group="cluster", since="3.0.0",
         summary="Enables read-only queries for a connection to a Redis Cluster replica node.",
         complexity="O(1)",
         acl="connection")
describe("readwrite", 1, "fast loading stale", "cluster", group="cluster", since="3.0.0",
         # (Redis's summary, its spelling included: COMMAND DOCS answers as Redis does)
         summary="Enables read-write queries for a connection to a Reids Cluster replica node.",
         complexity="O(1)",
         acl="connection")
describe("asking", 1, "fast", "cluster", group="cluster", since="3.0.0",
         summary="Signals that a cluster client is following an -ASK redirect.",
         complexity="O(1)",
         acl="connection")
