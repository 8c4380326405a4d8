"""Where a region's keys are: its shards, found at the one endpoint the connector is given.

Theory of operation
-------------------
A sharded region splits its keys over shard processes by Redis Cluster hash slot
(docs/sharding.md); every shard answers ``CLUSTER SHARDS`` with the whole map (each shard's
slot ranges and endpoint) and ``-MOVED slot host:port`` for a key of another shard.  The
connector is given one endpoint (``url``, any shard), asks it for the map once, and then
talks to every shard at its own endpoint: the reader looks for keys (``SCAN``), asks for
the tops of their origin logs and plans their ranges at the shard that owns each key, and
every Spark task reads one shard's ranges from that shard; the writer sends each row to
the shard owning its key.  An unsharded region (or a standalone one) answers ``ERR This
instance has cluster support disabled``: it is one shard at ``url`` itself, and nothing
changes.

A database's slot map is fixed when it is created, so it is read once per reader (on the
driver) and once per writer task; a ``MOVED`` reply (a map read from a shard that was
wrong, or a database recreated behind the same endpoints) reads it again and sends the
request where the map now says.

Endpoints: a shard is reached at the host the map names for it (the region's ``host`` in
the cluster file) and its port (its TLS port when ``url`` is ``rediss://``), with
everything else of ``url`` (credentials, database, TLS parameters) kept.  Option
``shardHost=url`` keeps ``url``'s host instead, for when the names the cluster file gives
do not resolve where Spark runs (compose's published ports carry the shards' numbers on
the host machine).

Offsets stay one cursor per key and origin log (``pipeline/braid.py``): a key lives in
exactly one shard, so its cursors are that shard's.  For a sharded region the offset JSON
names the shard of every key: ``{"shards": {"0": {key: {origin: "ms-seq"}}, "1": {...}}}``
(every shard listed, keys and origins in order); an unsharded region's is
``{key: {origin: "ms-seq"}}`` as before.  Either form is read back (a checkpoint, a
``startingPosition``): a restart plans each key at the shard that owns it now, so it
resumes every shard where it stopped, also at another region of the database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.exceptions import MovedError

from node.region.slots import SLOTS, key_slot

from . import braid
from .braid import LogRange, Offsets

DISABLED = "cluster support disabled"  # an unsharded region's (and Redis's) answer to CLUSTER
SHARD_HOSTS = ("announced", "url")

T = TypeVar("T")


def shard_host_option(options) -> str:
    """The ``shardHost`` option: ``announced`` (default) or ``url``."""
    value = options.get("shardHost", "announced")
    if value not in SHARD_HOSTS:
        raise ValueError(f"braid: option shardHost is one of {', '.join(SHARD_HOSTS)}, got {value!r}")
    return value


@dataclass(frozen=True)
class Shard:
    """Shard ``number`` of the region, at ``url`` (an unsharded region: shard 0, every slot)."""

    number: int
    url: str
    slots: tuple[tuple[int, int], ...]


def with_address(url: str, host: str, port: int) -> str:
    """``url`` with its host and port replaced (scheme, credentials, path and query kept)."""
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    name = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{name}:{port}"))


def _fields(reply) -> dict[bytes, Any]:
    """A map of a reply: RESP3's dict, or RESP2's flat list of names and values."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[0::2], reply[1::2], strict=True))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_shards(reply, url: str, shard_host: str) -> list[Shard]:
    """``CLUSTER SHARDS`` -> the region's shards in its order, each at its endpoint."""
    tls = url.startswith("rediss://")
    own_host = urlsplit(url).hostname or "127.0.0.1"
    shards = []
    for number, entry in enumerate(reply):
        fields = _fields(entry)
        flat = [int(x) for x in fields[b"slots"]]
        node = _fields(fields[b"nodes"][0])
        ports = [node.get(b"tls-port"), node.get(b"port")] if tls else [node.get(b"port"), node.get(b"tls-port")]
        port = next(int(p) for p in ports if p)
        host = _text(node.get(b"endpoint") or node.get(b"ip"))
        if shard_host == "url" or host in ("", "?"):
            host = own_host
        shards.append(Shard(number, with_address(url, host, port), tuple(zip(flat[0::2], flat[1::2], strict=True))))
    return shards


def read_map(conn: redis.Redis, url: str, shard_host: str) -> list[Shard] | None:
    """The region's shards, asked at ``conn`` (the endpoint ``url``); None when it is unsharded."""
    try:
        reply = conn.execute_command("CLUSTER", "SHARDS")
    except redis.ResponseError as e:
        if DISABLED in str(e) or "unknown command" in str(e).lower():
            return None
        raise
    return parse_shards(reply, url, shard_host)


class Shards:
    """The shards of the region at ``url``, with a connection to each (opened when first used)."""

    def __init__(self, url: str, shard_host: str = "announced") -> None:
        self.url, self.shard_host = url, shard_host
        self._conns: dict[str, redis.Redis] = {}
        self.refresh()

    def refresh(self) -> None:
        """(Re)read the slot map at ``url``."""
        found = read_map(self._connect(self.url), self.url, self.shard_host)
        self.sharded = found is not None
        self.shards = found if found is not None else [Shard(0, self.url, ((0, SLOTS - 1),))]
        owner = [0] * SLOTS  # slot -> shard number
        for s in self.shards:
            for a, b in s.slots:
                owner[a:b + 1] = [s.number] * (b - a + 1)
        self._owner = owner

    def _connect(self, url: str) -> redis.Redis:
        conn = self._conns.get(url)
        if conn is None:
            conn = self._conns[url] = braid.connect(url)
        return conn

    def conn(self, shard: Shard) -> redis.Redis:
        return self._connect(shard.url)

    def owner(self, key: str | bytes) -> Shard:
        """The shard holding ``key`` (an unsharded region's one shard)."""
        if not self.sharded:
            return self.shards[0]
        return self.shards[self._owner[key_slot(key.encode() if isinstance(key, str) else key)]]

    def split(self, offsets: Offsets) -> list[tuple[Shard, Offsets]]:
        """Every shard with the cursors of its keys."""
        parts: dict[int, Offsets] = {s.number: {} for s in self.shards}
        for key, origins in offsets.items():
            parts[self.owner(key).number][key] = origins
        return [(s, parts[s.number]) for s in self.shards]

    def retrying(self, fn: Callable[[], T]) -> T:
        """``fn()``, run once more on a map read again when a shard answers MOVED."""
        try:
            return fn()
        except MovedError:
            self.refresh()
            return fn()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


# ---------------------------------------------------------------- offsets that name the shard
def _origin_order(origin: str) -> tuple[int, str]:
    return len(origin), origin  # origin numbers in numeric order


def serialize(shards: Shards, offsets: Offsets) -> dict[str, Any]:
    """The offset Spark keeps: as it is for an unsharded region, grouped by shard otherwise
    (``braid.flatten`` reads either back)."""
    if not shards.sharded:
        return offsets
    return {"shards": {str(s.number): {key: {o: part[key][o] for o in sorted(part[key], key=_origin_order)}
                                       for key in sorted(part)}
                       for s, part in shards.split(offsets)}}


# ---------------------------------------------------------------- the reader's questions, per shard
def resolve_keys(shards: Shards, keys: Iterable[str], pattern: str | None) -> list[str]:
    """The named keys plus every stream matching ``pattern`` at any shard now, sorted."""
    if not shards.sharded:
        return braid.resolve_keys(shards.conn(shards.shards[0]), keys, pattern)
    found = set(keys)
    if pattern:
        for s in shards.shards:
            found.update(braid.resolve_keys(shards.conn(s), (), pattern))
    return sorted(found)


def origin_tops(shards: Shards, keys: list[str]) -> Offsets:
    """The top of every origin log of every key, each asked at its key's shard."""
    if not shards.sharded:
        return braid.origin_tops(shards.conn(shards.shards[0]), keys)
    tops: Offsets = {}
    for s, part in shards.split({key: {} for key in keys}):
        if part:
            tops.update(braid.origin_tops(shards.conn(s), list(part)))
    return tops


def split_runs(shards: Shards, start: Offsets, end: Offsets, logs: list[tuple[str, str]],
               size: int) -> list[list[tuple[str, int]]]:
    """``braid.split_runs`` with each log asked at its key's shard (results in ``logs``' order)."""
    if not shards.sharded:
        return braid.split_runs(shards.conn(shards.shards[0]), start, end, logs, size)
    by_shard: dict[int, list[int]] = {}
    for i, (key, _origin) in enumerate(logs):
        by_shard.setdefault(shards.owner(key).number, []).append(i)
    out: list[list[tuple[str, int]]] = [[] for _ in logs]
    for number, indexes in by_shard.items():
        runs = braid.split_runs(shards.conn(shards.shards[number]), start, end, [logs[i] for i in indexes], size)
        for i, r in zip(indexes, runs, strict=True):
            out[i] = r
    return out


def plan_ranges(shards: Shards, start: Offsets, end: Offsets, size: int) -> list[tuple[Shard, list[LogRange]]]:
    """Every shard's ranges between two offsets (``braid.plan_ranges`` at each shard)."""
    return [(s, braid.plan_ranges(shards.conn(s), start, part, size) if part else [])
            for s, part in shards.split(end)]
