"""What the connector asks a Braid region: origin logs, their tops, ranges of one log.

Theory of operation
-------------------
Offsets are plain JSON: ``{key: {origin: "ms-seq"}}``, the last ID read from
each origin log of each key (``"0-0"`` or absent: nothing read yet); a sharded
region's group the same cursors by the shard holding each key,
``{"shards": {"0": {key: {origin: "ms-seq"}}, ...}}`` (``pipeline/shards.py``).  Every
origin log only grows at its top (``node/commands/origins.py``), so "the
entries after the cursor" never skips an entry that reached the region late
and never repeats one.  This module is the only place that talks RESP for
the reader; it runs both on the driver (planning) and on executors (reading).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlencode

import redis

Offsets = dict[str, dict[str, str]]
NOTHING_READ = "0-0"


def positive_option(text: str, name: str) -> int:
    """A reader's or writer's option that must be a positive integer (ValueError names it)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"braid: option {name} must be a positive integer, got {text!r}")
    return value


def connect(url: str) -> redis.Redis:
    """A connection to the region at ``url`` (redis://host:port[/0], rediss:// for TLS)."""
    return redis.Redis.from_url(url, protocol=2, socket_timeout=120, socket_connect_timeout=30)


# reader and writer options for a rediss:// url -> redis-py's URL parameters
TLS_OPTIONS = {"tlsCaCert": "ssl_ca_certs", "tlsCert": "ssl_certfile", "tlsKey": "ssl_keyfile"}


def url_option(options) -> str:
    """The ``url`` option, with the TLS options (the CA to trust, a client certificate and key)
    added as redis-py's ``rediss://`` URL parameters, so executors connect with them too."""
    url = options.get("url", "redis://127.0.0.1:6379")
    extra = {param: options.get(name) for name, param in TLS_OPTIONS.items() if options.get(name)}
    if not extra:
        return url
    if not url.startswith("rediss://"):
        raise ValueError(f"braid: options {', '.join(TLS_OPTIONS)} need a rediss:// url, got {url!r}")
    return url + ("&" if "?" in url else "?") + urlencode(extra)


def id_tuple(id_: str | bytes) -> tuple[int, int]:
    if isinstance(id_, bytes):
        id_ = id_.decode()
    ms, _, seq = id_.partition("-")
    return int(ms), int(seq or 0)


def later(a: str, b: str) -> str:
    return a if id_tuple(a) >= id_tuple(b) else b


def earlier(a: str, b: str) -> str:
    return a if id_tuple(a) <= id_tuple(b) else b


def cursor(offsets: Offsets, key: str, origin: str) -> str:
    return offsets.get(key, {}).get(origin, NOTHING_READ)


def resolve_keys(conn: redis.Redis, keys: Iterable[str], pattern: str | None) -> list[str]:
    """The named keys plus every stream matching ``pattern`` now (SCAN), sorted."""
    found = set(keys)
    if pattern:
        for k in conn.scan_iter(match=pattern, count=1000, _type="stream"):
            found.add(k.decode())
    return sorted(found)


def origin_tops(conn: redis.Redis, keys: list[str]) -> Offsets:
    """The highest ID stored in every origin log of every key (XORIGINS, one round trip)."""
    pipe = conn.pipeline(transaction=False)
    for key in keys:
        pipe.execute_command("XORIGINS", key)
    tops: Offsets = {}
    for key, logs in zip(keys, pipe.execute(), strict=True):
        for log in logs:
            info = dict(zip(log[0::2], log[1::2], strict=True))
            if info[b"last-id"] != b"0-0":
                tops.setdefault(key, {})[str(info[b"origin"])] = info[b"last-id"].decode()
    return tops


def pending_logs(start: Offsets, end: Offsets) -> list[tuple[str, str]]:
    """(key, origin) pairs with entries after ``start`` up to ``end``, oldest cursor first."""
    logs = [(key, origin) for key, origins in end.items() for origin, top in origins.items()
            if id_tuple(top) > id_tuple(cursor(start, key, origin))]
    return sorted(logs, key=lambda ko: (id_tuple(cursor(start, *ko)), ko))


def split_runs(conn: redis.Redis, start: Offsets, end: Offsets, logs: list[tuple[str, str]],
               size: int) -> list[list[tuple[str, int]]]:
    """XSPLITORIGIN for each log's range (start, end]: [(last ID, rows), ...] per log."""
    pipe = conn.pipeline(transaction=False)
    for key, origin in logs:
        pipe.execute_command("XSPLITORIGIN", key, origin, "(" + cursor(start, key, origin),
                             end[key][origin], size)
    return [[(last.decode(), n) for last, n in runs] for runs in pipe.execute()]


@dataclass(frozen=True)
class LogRange:
    """Entries of one origin log with after < ID <= upto (about ``rows`` of them)."""

    key: str
    origin: str
    after: str
    upto: str
    rows: int


def plan_ranges(conn: redis.Redis, start: Offsets, end: Offsets, size: int) -> list[LogRange]:
    """Every log's range between two offsets, cut into ranges of at most ``size`` entries."""
    logs = pending_logs(start, end)
    ranges = []
    for (key, origin), runs in zip(logs, split_runs(conn, start, end, logs, size), strict=True):
        after = cursor(start, key, origin)
        for last, n in runs:
            ranges.append(LogRange(key, origin, after, last, n))
            after = last
    return ranges


def is_sharded(value: dict) -> bool:
    """Is ``value`` an offset of the sharded form, ``{"shards": {number: {key: {origin: id}}}}``?"""
    inner = value.get("shards") if len(value) == 1 else None
    return isinstance(inner, dict) and all(
        isinstance(part, dict) and all(isinstance(origins, dict) for origins in part.values())
        for part in inner.values())


def flatten(value: dict) -> Offsets:
    """An offset of either form -> one cursor per key and origin log (the unsharded form: itself)."""
    if not is_sharded(value):
        return value
    out: Offsets = {}
    for part in value["shards"].values():
        out.update(part)
    return out


def parse_offsets(text: str) -> Offsets:
    """A user-given offset: JSON ``{key: {origin: id}}`` (or grouped by shard), checked."""
    try:
        value = json.loads(text)
        if isinstance(value, dict) and is_sharded(value):
            value = flatten(value)
        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
            raise ValueError
        out = {str(k): {str(o): str(i) for o, i in v.items()} for k, v in value.items()}
        for origins in out.values():
            for id_ in origins.values():
                id_tuple(id_)
        return out
    except ValueError:
        raise ValueError(f"braid: an offset is JSON {{key: {{origin: \"ms-seq\"}}}} (or {{\"shards\": "
                         f"{{shard: {{key: {{origin: \"ms-seq\"}}}}}}}}), got {text!r}") from None
