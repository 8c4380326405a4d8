"""CLUSTER, READONLY, READWRITE, ASKING: a shard as a node of a Redis Cluster (docs/sharding.md).

A region of a sharded database is, to its clients, a Redis Cluster whose primaries are the
region's shards, with no replicas (the other regions are the redundancy).  Every reply here
is fed from the shard's routing (``client.region.routing``: node/region/routing.py, built
from the cluster file's ``[shards]``) and its keyspace, in Redis's shapes, so ``redis-cli
-c``, redis-py's ``RedisCluster`` and ``redis-benchmark --cluster`` find the slots' owners
as they do on Redis.  Without routing (an unsharded database, a standalone region) every
subcommand, READONLY, READWRITE and ASKING answer Redis's ``ERR This instance has cluster
support disabled``, as Redis 8 does without ``cluster-enabled`` (KEYSLOT and HELP too).

Where Redis's reply depends on a cluster bus Braid does not have, the values are:

- the bus port of ``ip:port@cport`` in CLUSTER NODES: the client port plus 10,000, Redis's
  default (``CLUSTER_PORT_INCR``); nothing listens there;
- config epochs: every node's, ``cluster_current_epoch`` and ``cluster_my_epoch`` are the
  database's membership epoch (1 without one): the slot map has one version per database,
  so no two nodes ever claim a slot and no epoch has to tell them apart;
- CLUSTER NODES' ping-sent and pong-recv: 0 (no pings), every link ``connected``;
  ``cluster_state`` is ``ok`` and no slot is ever failing (the map is fixed and complete);
- replication-offset (CLUSTER SHARDS): this shard's causal-log end, 0 for its siblings
  (whose offset a shard does not learn); health: ``loading`` while this shard replays its
  log or refuses writes with LOADING (starting, joining), else ``online``; a sibling
  ``online``;
- the port shown for a node is its TLS port to a client connected over TLS, its plain port
  to the others (each falls back to the other when the node has only one), as Redis's
  ``clusterNodeClientPort``;
- CLUSTER LINKS: an empty list (no bus); REPLICAS/SLAVES of a known node: an empty list,
  COUNT-FAILURE-REPORTS: 0.

The subcommands that change the topology (ADDSLOTS, MEET, FAILOVER, SETSLOT...) answer an
error: the slot map is the cluster file's and changes only with a new database.
COUNTKEYSINSLOT and GETKEYSINSLOT walk the keyspace (Braid keeps no per-slot index).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from node.commands import command, subcommand
from node.commands.util import parse_int
from node.region.routing import client_port, over_tls
from node.region.slots import SLOTS, key_slot
from node.resp.encoder import ReplyError, Verbatim

if TYPE_CHECKING:
    from node.commands.context import Region
    from node.region.routing import Shard, ShardRouting
    from node.region.session import Session

DISABLED = "ERR This instance has cluster support disabled"
CLUSTER_PORT_INCR = 10000  # Redis's default distance from a node's client port to its bus port


def _routing(client: Session) -> ShardRouting:
    """This shard's routing, or Redis's error when the database is not sharded."""
    routing = client.region.routing
    if routing is None:
        raise ReplyError(DISABLED)
    return routing


def _ranges(shard: Shard) -> list[tuple[int, int]]:
    """A shard's slot ranges, adjacent ones joined (Redis walks the slots one by one)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(shard.slots):
        if out and out[-1][1] + 1 == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _epoch(region: Region) -> int:
    aa = region.aa
    return aa.membership.epoch if aa is not None else 1


def shard_id(region: Region, number: int) -> str:
    """The shard id of shard ``number`` (CLUSTER MYSHARDID): 40 hex digits naming its
    replication group, the same in every region (a node id names one region's shard)."""
    aa = region.aa
    base = aa.cluster.cluster_id if aa is not None else ""
    return hashlib.sha1(f"{base}/shard/{number}".encode()).hexdigest()


def _health(region: Region) -> bytes:
    """This shard's health in CLUSTER SHARDS: ``loading`` while it replays its log or refuses
    writes with LOADING (it is starting, or joining the database), else ``online``."""
    if region.replaying:
        return b"loading"
    aa = region.aa
    if aa is not None and not aa.writable and aa.write_refusal().startswith("LOADING"):
        return b"loading"
    return b"online"


def _node(routing: ShardRouting, node_id: bytes) -> Shard | None:
    """Redis's ``clusterLookupNode``: the shard of that exact id."""
    for s in routing.shards:
        if s.node_id.encode() == node_id:
            return s
    return None


def _text(arg: bytes, limit: int | None = None) -> str:
    """An argument in an error, as Redis's ``%s`` of it: up to a NUL (and ``limit`` bytes)."""
    return arg.partition(b"\0")[0][:limit].decode("utf-8", "replace")


def _unknown_node(node_id: bytes) -> ReplyError:
    return ReplyError(f"ERR Unknown node {_text(node_id)}")


def _mine(routing: ShardRouting, slot: int) -> bool:
    """Does this shard own ``slot`` (Redis's ``clusterCanAccessKeysInSlot``)?"""
    return routing.owner(slot).number == routing.me


# ---------------------------------------------------------------- what clients read
@subcommand("cluster", "slots")
def cluster_slots(client: Session, argv: list[bytes]):
    routing = _routing(client)
    tls = over_tls(client)
    ranges = sorted((a, b, s.number) for s in routing.shards for a, b in _ranges(s))
    out = []
    for a, b, k in ranges:
        s = routing.shards[k]
        out.append([a, b, [s.host.encode(), client_port(s, tls), s.node_id.encode(), {}]])
    return out


@subcommand("cluster", "shards")
def cluster_shards(client: Session, argv: list[bytes]):
    routing = _routing(client)
    region = client.region
    out = []
    for s in routing.shards:
        node: dict[bytes, bytes | int] = {b"id": s.node_id.encode()}
        if s.port:
            node[b"port"] = s.port
        if s.tls_port:
            node[b"tls-port"] = s.tls_port
        host = s.host.encode()
        node[b"ip"] = host
        node[b"endpoint"] = host
        node[b"role"] = b"master"
        mine = s.number == routing.me
        aa = region.aa
        node[b"replication-offset"] = aa.causal.end if mine and aa is not None else 0
        node[b"health"] = _health(region) if mine else b"online"
        slots = [x for r in _ranges(s) for x in r]
        out.append({b"slots": slots, b"nodes": [node]})
    return out


@subcommand("cluster", "nodes")
def cluster_nodes(client: Session, argv: list[bytes]):
    routing = _routing(client)
    tls = over_tls(client)
    epoch = _epoch(client.region)
    lines = []
    for s in routing.shards:
        port = client_port(s, tls)
        flags = "myself,master" if s.number == routing.me else "master"
        slots = "".join(f" {a}-{b}" if a != b else f" {a}" for a, b in _ranges(s))
        lines.append(f"{s.node_id} {s.host}:{port}@{(s.port or s.tls_port) + CLUSTER_PORT_INCR} {flags} - 0 0 "
                     f"{epoch} connected{slots}\n")
    return Verbatim("".join(lines).encode())


@subcommand("cluster", "info")
def cluster_info(client: Session, argv: list[bytes]):
    routing = _routing(client)
    epoch = _epoch(client.region)
    nodes = len(routing.shards)
    lines = [
        "cluster_state:ok",
        f"cluster_slots_assigned:{SLOTS}",
        f"cluster_slots_ok:{SLOTS}",
        "cluster_slots_pfail:0",
        "cluster_slots_fail:0",
        f"cluster_known_nodes:{nodes}",
        f"cluster_size:{sum(1 for s in routing.shards if s.slots)}",
        f"cluster_current_epoch:{epoch}",
        f"cluster_my_epoch:{epoch}",
        # Redis lists a counter per type of bus message only once it is not 0: no bus, none
        "cluster_stats_messages_sent:0",
        "cluster_stats_messages_received:0",
        "total_cluster_links_buffer_limit_exceeded:0",
        # Redis 8.4's atomic slot migration: no slot ever moves
        "cluster_slot_migration_active_tasks:0",
        "cluster_slot_migration_active_trim_running:0",
        "cluster_slot_migration_active_trim_current_job_keys:0",
        "cluster_slot_migration_active_trim_current_job_trimmed:0",
        "cluster_slot_migration_stats_active_trim_started:0",
        "cluster_slot_migration_stats_active_trim_completed:0",
        "cluster_slot_migration_stats_active_trim_cancelled:0",
    ]
    return Verbatim("".join(line + "\r\n" for line in lines).encode())


@subcommand("cluster", "myid")
def cluster_myid(client: Session, argv: list[bytes]):
    routing = _routing(client)
    return routing.shards[routing.me].node_id.encode()


@subcommand("cluster", "myshardid")
def cluster_myshardid(client: Session, argv: list[bytes]):
    routing = _routing(client)
    return shard_id(client.region, routing.me).encode()


@subcommand("cluster", "keyslot")
def cluster_keyslot(client: Session, argv: list[bytes]):
    _routing(client)
    return key_slot(argv[2])


@subcommand("cluster", "countkeysinslot")
def cluster_countkeysinslot(client: Session, argv: list[bytes]):
    routing = _routing(client)
    slot = parse_int(argv[2])
    if not 0 <= slot < SLOTS:
        raise ReplyError("ERR Invalid slot")
    if not _mine(routing, slot):
        return 0
    return sum(1 for key in client.region.db.keys if key_slot(key) == slot)


@subcommand("cluster", "getkeysinslot")
def cluster_getkeysinslot(client: Session, argv: list[bytes]):
    routing = _routing(client)
    slot, count = parse_int(argv[2]), parse_int(argv[3])
    if not 0 <= slot < SLOTS or count < 0:
        raise ReplyError("ERR Invalid slot or number of keys")
    out: list[bytes] = []
    if count == 0 or not _mine(routing, slot):
        return out
    for key in client.region.db.keys:
        if key_slot(key) == slot:
            out.append(key)
            if len(out) == count:
                break
    return out


@subcommand("cluster", "links")
def cluster_links(client: Session, argv: list[bytes]):
    _routing(client)
    return []  # no cluster bus: no link


def _replicas(client: Session, argv: list[bytes]):
    if _node(_routing(client), argv[2]) is None:
        raise _unknown_node(argv[2])
    return []  # every shard is a primary without replicas


subcommand("cluster", "replicas")(_replicas)
subcommand("cluster", "slaves")(_replicas)


@subcommand("cluster", "count-failure-reports")
def cluster_count_failure_reports(client: Session, argv: list[bytes]):
    if _node(_routing(client), argv[2]) is None:
        raise _unknown_node(argv[2])
    return 0


@subcommand("cluster", "help")
def cluster_help(client: Session, argv: list[bytes]):
    _routing(client)
    return [
        f"{_text(argv[0]).upper()} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys in <slot>.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return key names stored by current node in a slot.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "MYID",
        "    Return the node id.",
        "MYSHARDID",
        "    Return the node's shard id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port@bus-port[,hostname]> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "REPLICAS <node-id>",
        "    Return <node-id> replicas.",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "SHARDS",
        "    Return information about slot range mappings and the nodes associated with them.",
        "COUNT-FAILURE-REPORTS <node-id>",
        "    Return number of failure reports for <node-id>.",
        "LINKS",
        "    Return information about all network links between this node and its peers.",
        "    Output format is an array where each array element is a map containing attributes of a link",
        "HELP",
        "    Print this help.",
    ]


# ---------------------------------------------------------------- what changes the topology
# name -> the argument counts Redis takes it with (beyond them: its syntax error); None: any
_TOPOLOGY: dict[str, tuple[int, ...] | None] = {
    "addslots": None, "addslotsrange": None, "delslots": None, "delslotsrange": None, "flushslots": None,
    "meet": (4, 5), "forget": None, "failover": (2, 3), "replicate": None, "reset": (2, 3), "setslot": None,
    "saveconfig": None, "bumpepoch": None, "set-config-epoch": None,
}


def _fixed_topology(client: Session, argv: list[bytes]):
    _routing(client)
    name = argv[1].decode("utf-8", "replace").lower()
    counts = _TOPOLOGY[name]
    if counts is not None and len(argv) not in counts:  # (Redis's addReplySubcommandSyntaxError)
        raise ReplyError(f"ERR unknown subcommand or wrong number of arguments for '{_text(argv[1], 128)}'. "
                         f"Try {_text(argv[0]).upper()} HELP.")
    raise ReplyError(f"ERR CLUSTER {name.upper()} is not supported: this database's slot map is set in its cluster "
                     "file ([shards]) and changes only with a new database (no online resharding yet)")


for _name in _TOPOLOGY:
    subcommand("cluster", _name)(_fixed_topology)


# ---------------------------------------------------------------- READONLY, READWRITE, ASKING
@command("readonly")
def readonly(client: Session, argv: list[bytes]):
    _routing(client)
    return "OK"  # every shard is a primary: reads are served as before


@command("readwrite")
def readwrite(client: Session, argv: list[bytes]):
    _routing(client)
    return "OK"


@command("asking")
def asking(client: Session, argv: list[bytes]):
    _routing(client)
    return "OK"  # no slot ever moves, so no -ASK is ever answered
