"""The reader of ``format("braid")``: streaming (``readStream``) and batch (``read``).

Theory of operation
-------------------
An offset is one cursor per key and origin log (``pipeline/braid.py``), not one
ID per key as spark-redis keeps: under Active-Active an entry can reach the
region after entries of other regions with higher IDs were read, and only a
per-origin cursor is sure to read it.

- ``latestOffset`` (driver) asks the region for the top of every origin log
  (``XORIGINS``).  With a row limit (``maxRowsPerBatch``, Spark's admission
  control ``ReadMaxRows``) the budget is shared evenly by the logs that have
  something new, oldest cursor first, and ``XSPLITORIGIN`` turns each log's
  share into an end ID without reading the entries.  Under
  ``Trigger.AvailableNow`` the tops are captured once and never exceeded.
- ``partitions`` (driver) cuts each log's range into ranges of at most
  ``partitionSize`` entries (``XSPLITORIGIN`` again), and groups short ranges
  (of other keys and origin logs) into tasks of at most that many entries.
- ``read`` (executor) opens its own connection and pages through its range
  with ``XRANGEORIGIN ... COUNT readCount PACKED``, yielding one Arrow record
  batch per page.  ``PACKED`` answers the log's blocks as the region stores
  them (``crdt/blocks.py``) instead of formatting every entry: the region,
  which serves every task on one core, only copies bytes, and the tasks, which
  run in parallel, cut the blocks into columns, drop the deleted entries and
  those outside their range.  Only finding where each entry starts goes entry
  by entry (``crdt.blocks.entry_starts``, compiled); IDs and values are read
  for the whole page at once with numpy and Arrow, and no Python object is made
  per entry.  A page with entries of their own field names is decoded with
  ``crdt.blocks``' entry decoder instead.

A restart from the checkpoint resumes at the committed cursors, so no entry is
skipped or read twice.  Every task reads from the region the offsets were
planned at (``url``): another region may not have received those entries yet.

Sharded regions (``pipeline/shards.py``): the driver finds the region's shards at
``url`` (any shard's endpoint) and asks each key's questions (``SCAN``, ``XORIGINS``,
``XSPLITORIGIN``) at the shard that owns it; tasks are made per shard (a task reads
ranges of one shard's keys only, from that shard), and the offsets name the shard of
every key.  An unsharded region is one shard at ``url``: plans and offsets as above.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from crdt.blocks import DELETED, SAMEFIELDS, entry_starts, packed_entries

from . import braid
from . import shards as sharding
from .braid import LogRange, Offsets
from .shards import Shards

SCHEMA = "key string, id string, origin int, fields map<string,string>, timestamp timestamp"

# The Arrow form Spark expects of SCHEMA (pyspark's to_arrow_schema(..., timezone="UTC")).
ARROW_SCHEMA = pa.schema([
    ("key", pa.string()),
    ("id", pa.string()),
    ("origin", pa.int32()),
    ("fields", pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string()))),
    ("timestamp", pa.timestamp("us", tz="UTC")),
])


@dataclass(frozen=True)
class ReadOptions:
    url: str
    keys: tuple[str, ...]
    pattern: str | None
    starting: str
    ending: str
    max_rows_per_batch: int | None
    partition_size: int
    read_count: int
    shard_host: str = "announced"

    @classmethod
    def parse(cls, options) -> ReadOptions:
        keys = tuple(k.strip() for k in options.get("keys", "").split(",") if k.strip())
        pattern = options.get("keyPattern") or None
        if not keys and not pattern:
            raise ValueError("braid: name the streams to read with option keys (comma-separated) or keyPattern")
        limit = options.get("maxRowsPerBatch")
        return cls(
            url=braid.url_option(options),
            keys=keys, pattern=pattern,
            starting=options.get("startingPosition", "earliest"),
            ending=options.get("endingPosition", "latest"),
            max_rows_per_batch=braid.positive_option(limit, "maxRowsPerBatch") if limit is not None else None,
            partition_size=braid.positive_option(options.get("partitionSize", "500000"), "partitionSize"),
            read_count=braid.positive_option(options.get("readCount", "10000"), "readCount"),
            shard_host=sharding.shard_host_option(options),
        )


class BraidRange(InputPartition):
    """One Spark task: ranges of origin logs, read one after the other (picklable, sent to an executor)."""

    def __init__(self, url: str, ranges: LogRange | list[LogRange], read_count: int) -> None:
        ranges = [ranges] if isinstance(ranges, LogRange) else list(ranges)
        super().__init__(ranges)
        self.url, self.ranges, self.read_count = url, ranges, read_count


def tasks(url: str, ranges: list[LogRange], size: int, read_count: int) -> list[BraidRange]:
    """The planned ranges grouped into tasks of at most ``size`` entries, in order.

    A task has a fixed cost (about 0.1 s of CPU between the JVM and the Python
    worker, bench/README.md): the short ranges of many keys or origin logs are
    read by one task rather than one task each."""
    out: list[BraidRange] = []
    group: list[LogRange] = []
    rows = 0
    for r in ranges:
        if group and rows + r.rows > size:
            out.append(BraidRange(url, group, read_count))
            group, rows = [], 0
        group.append(r)
        rows += r.rows
    if group:
        out.append(BraidRange(url, group, read_count))
    return out


def read_task(part: BraidRange) -> Iterator[pa.RecordBatch]:
    """Every range of a task, over one connection (runs on an executor)."""
    conn = braid.connect(part.url)
    try:
        for r in part.ranges:
            yield from read_pages(conn, r, part.read_count)
    finally:
        conn.close()


def read_range(url: str, r: LogRange, read_count: int) -> Iterator[pa.RecordBatch]:
    """One origin log's range, with a connection of its own."""
    conn = braid.connect(url)
    try:
        yield from read_pages(conn, r, read_count)
    finally:
        conn.close()


def read_pages(conn, r: LogRange, read_count: int) -> Iterator[pa.RecordBatch]:
    """Page through one origin log's range: one Arrow record batch per page with live entries.

    The request for the next page goes out before this page is decoded: the region
    reads it while the task decodes and Spark takes the batch, instead of each
    waiting for the other."""
    lo, hi = braid.id_tuple(r.after), braid.id_tuple(r.upto)
    link = conn.connection_pool.get_connection()
    in_flight = False

    def ask(after: str) -> None:
        nonlocal in_flight
        link.send_command("XRANGEORIGIN", r.key, r.origin, "(" + after, r.upto, "COUNT", read_count, "PACKED")
        in_flight = True

    try:
        ask(r.after)
        while True:
            blocks = link.read_response()
            in_flight = False
            if not blocks:
                return
            last = last_id(blocks)
            more = last < hi
            if more:
                ask(f"{last[0]}-{last[1]}")
            page, _last = decode_page(blocks, lo, hi)
            if page.rows:
                yield page.record_batch(r.key, int(r.origin))
            if not more:
                return
    finally:
        if in_flight:  # Spark stopped reading (or an error) with a request sent: its reply is never read
            link.disconnect()
        conn.connection_pool.release(link)


def last_id(blocks: list) -> tuple[int, int]:
    """The last ID (deleted or not) a ``PACKED`` reply's blocks hold: where the next page starts."""
    first, fields, buf = blocks[-1]
    return packed_entries(braid.id_tuple(first), tuple(fields), buf)[-1][0]


class Page:
    """The live entries of one page in the range, as Arrow columns: IDs, and the field map's
    offsets, names and values."""

    __slots__ = ("rows", "ms", "seq", "offsets", "names", "values")

    def __init__(self, ms: pa.Array, seq: pa.Array, offsets: pa.Array, names: pa.Array, values: pa.Array) -> None:
        self.rows = len(ms)
        self.ms, self.seq, self.offsets, self.names, self.values = ms, seq, offsets, names, values

    def record_batch(self, key: str, origin: int) -> pa.RecordBatch:
        n, ms = self.rows, self.ms
        fields = pa.MapArray.from_arrays(self.offsets, self.names, self.values, type=ARROW_SCHEMA.field("fields").type)
        ids = pc.binary_join_element_wise(ms.cast(pa.string()), self.seq.cast(pa.string()), "-")
        return pa.RecordBatch.from_arrays([
            pa.repeat(pa.scalar(key, pa.string()), n),
            ids,
            pa.repeat(pa.scalar(origin, pa.int32()), n),
            fields,
            pc.multiply(ms, 1000).cast(ARROW_SCHEMA.field("timestamp").type),
        ], schema=ARROW_SCHEMA)


def decode_page(blocks: list, lo: tuple[int, int], hi: tuple[int, int]) -> tuple[Page, tuple[int, int] | None]:
    """A ``PACKED`` reply -> its live entries with lo < ID <= hi, and the last ID its blocks hold.

    Pages whose entries all use their block's master fields (what a stream written by
    one kind of producer holds) are cut into columns with whole-array operations
    (``_decode_columns``); other pages are decoded entry by entry (``_decode_entries``).
    Both read ``crdt/blocks.py``'s format with its own code; ``tests/test_pipeline.py``
    checks both against ``XRANGEORIGIN``'s entries."""
    firsts = [braid.id_tuple(first) for first, _fields, _buf in blocks]
    decoded = _decode_columns(blocks, firsts, lo, hi)
    return decoded if decoded is not None else _decode_entries(blocks, firsts, lo, hi)


_SMALL = 1 << 62  # IDs below this, plus any delta, fit numpy's int64 (an ID's halves are 64-bit unsigned)
_INT64_MAX = (1 << 63) - 1


def _uvarints(data: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The LEB128 varints starting at every index of ``at`` -> (values, index after each)."""
    v = data[at].astype(np.int64)
    after = at + 1
    more = np.flatnonzero(v >= 0x80)
    v &= 0x7F
    shift = 7
    while more.size:
        if shift > 56:
            raise ValueError("varint longer than 9 bytes")
        b = data[after[more]].astype(np.int64)
        v[more] |= (b & 0x7F) << shift
        after[more] += 1
        more = more[b >= 0x80]
        shift += 7
    return v, after


def _decode_columns(blocks: list, firsts: list[tuple[int, int]], lo: tuple[int, int],
                    hi: tuple[int, int]) -> tuple[Page, tuple[int, int] | None] | None:
    """The page cut into columns by numpy, or None when an entry has fields of its own
    (no SAMEFIELDS flag), the blocks' master fields differ in number, or an ID is too
    large for int64 arithmetic: the caller then decodes entry by entry.

    Only finding where each entry starts goes entry by entry (``entry_starts``,
    compiled with ``crdt.blocks``); the IDs, the deleted flags and every value's
    start and end are then read at once for all entries.  The values stay where
    they are in the page's bytes: an Arrow string array whose offsets are every
    value's start and end (values, and the length bytes between them) from which a
    ``take`` keeps every other element.

    This is the one reading of ``crdt/blocks.py``'s entry layout outside that module (the
    varints of the ID deltas and of the value lengths, read as whole arrays): a compiled
    walk in ``crdt.blocks`` that handed every ID delta and value bound over as Python ints
    measured 2-3 times slower on this path (2026-11-29, pages of 100,000 entries).
    ``tests/test_pipeline_decode.py`` checks it against ``crdt.blocks``' own decoder."""
    nf = len(blocks[0][1])
    if nf == 0 or any(len(fields) != nf for _first, fields, _buf in blocks) or \
            any(ms >= _SMALL or seq >= _SMALL for ms, seq in firsts):
        return None
    starts_list: list[int] = []
    counts, base = [], 0
    for _first, _fields, buf in blocks:
        counts.append(entry_starts(buf, nf, base, starts_list))
        base += len(buf)
    raw = b"".join(buf for _first, _fields, buf in blocks)
    data = np.frombuffer(raw, np.uint8)
    starts = np.array(starts_list, np.int64)
    flags = data[starts]
    if not (flags & SAMEFIELDS).all():
        return None
    block_of = np.repeat(np.arange(len(blocks)), counts)
    ms_delta, at = _uvarints(data, starts + 1)
    zigzag, at = _uvarints(data, at)
    if ms_delta.max() >= _SMALL or zigzag.max() >= _SMALL:
        return None
    ms = np.array([f[0] for f in firsts], np.int64)[block_of] + ms_delta
    seq = np.array([f[1] for f in firsts], np.int64)[block_of] + np.where(zigzag & 1, -((zigzag + 1) >> 1), zigzag >> 1)
    bounds = np.empty((len(starts), nf, 2), np.int64)  # every value's start and end in ``raw``
    for k in range(nf):
        length, at = _uvarints(data, at)
        bounds[:, k, 0] = at
        at += length
        bounds[:, k, 1] = at
    last = (int(ms[-1]), int(seq[-1]))
    lo_ms, lo_seq = min(lo[0], _INT64_MAX), min(lo[1], _INT64_MAX)
    hi_ms, hi_seq = min(hi[0], _INT64_MAX), min(hi[1], _INT64_MAX)
    keep = ((flags & DELETED) == 0) & ((ms > lo_ms) | ((ms == lo_ms) & (seq > lo_seq))) \
        & ((ms < hi_ms) | ((ms == hi_ms) & (seq <= hi_seq)))
    kept = np.flatnonzero(keep)
    # field names: each block's master fields, as indices into the page's distinct names
    pool: dict[bytes, int] = {}
    master = np.array([[pool.setdefault(f, len(pool)) for f in fields] for _first, fields, _buf in blocks], np.int32)
    names = pa.array(list(pool), pa.string()).take(pa.array(master[block_of[kept]].ravel()))
    # a page under 2 GiB takes 32-bit offsets: the string type Spark wants, without a cast
    wide = len(raw) >= 1 << 31
    edges = np.ascontiguousarray(bounds[kept].ravel(), np.int64 if wide else np.int32)
    if len(edges):
        spans = pa.Array.from_buffers(pa.large_string() if wide else pa.string(), len(edges) - 1,
                                      [None, pa.py_buffer(edges), pa.py_buffer(raw)])
        values = spans.take(pa.array(np.arange(0, len(edges), 2, dtype=np.int32))).cast(pa.string())
    else:
        values = pa.array([], pa.string())
    values.validate(full=True)  # UTF-8, as pa.array(..., pa.string()) checks
    offsets = pa.array(np.arange(0, nf * len(kept) + 1, nf, dtype=np.int32))
    return Page(pa.array(ms[kept]), pa.array(seq[kept]), offsets, names, values), last


def _decode_entries(blocks: list, firsts: list[tuple[int, int]], lo: tuple[int, int],
                    hi: tuple[int, int]) -> tuple[Page, tuple[int, int] | None]:
    """The page decoded entry by entry with ``crdt.blocks``' own decoder (any entry layout)."""
    ms, seq, offsets = array("q"), array("q"), array("i", [0])
    names: list[bytes] = []
    values: list[bytes] = []
    last = None
    for (_first, fields, buf), first_id in zip(blocks, firsts, strict=True):
        for id_, flat, deleted, _offset in packed_entries(first_id, tuple(fields), buf):
            last = id_
            if deleted or not lo < id_ <= hi:
                continue
            ms.append(id_[0])
            seq.append(id_[1])
            names += flat[0::2]
            values += flat[1::2]
            offsets.append(len(names))
    keys, vals = pa.array(names, pa.string()), pa.array(values, pa.string())
    keys.validate(full=True)
    vals.validate(full=True)
    n = len(ms)
    return Page(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(ms)]),
                pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(seq)]),
                pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(offsets)]), keys, vals), last


def _position(shards: Shards, keys: list[str], text: str) -> Offsets:
    """earliest / latest / a JSON offset -> cursors."""
    if text == "earliest":
        return {}
    if text == "latest":
        return sharding.origin_tops(shards, keys)
    return braid.parse_offsets(text)


def shard_tasks(planned: list[tuple[sharding.Shard, list[LogRange]]], opts: ReadOptions) -> list[BraidRange]:
    """Each shard's ranges grouped into tasks that read from that shard."""
    return [task for shard, ranges in planned
            for task in tasks(shard.url, ranges, opts.partition_size, opts.read_count)]


class BraidBatchReader(DataSourceReader):
    """``spark.read.format("braid")``: the entries between two positions, as a DataFrame."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[BraidRange]:
        opts = self.options
        shards = Shards(opts.url, opts.shard_host)

        def plan() -> list[tuple[sharding.Shard, list[LogRange]]]:
            keys = sharding.resolve_keys(shards, opts.keys, opts.pattern)
            start = _position(shards, keys, opts.starting)
            end = _position(shards, keys, opts.ending)
            return sharding.plan_ranges(shards, start, end, opts.partition_size)

        try:
            planned = shards.retrying(plan)
        finally:
            shards.close()
        return shard_tasks(planned, opts)

    def read(self, partition: BraidRange) -> Iterator[pa.RecordBatch]:
        return read_task(partition)


class BraidStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("braid")``: micro-batches between per-origin cursors.

    Spark hands back the offsets this reader returned (in the checkpoint's form, which
    names the shards of a sharded region: ``pipeline/shards.py``); inside, offsets are
    one cursor per key and origin log (``braid.flatten``)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._shards: Shards | None = None  # found when first needed: the reader is pickled before
        self._available_now: Offsets | None = None  # Trigger.AvailableNow's target

    @property
    def shards(self) -> Shards:
        if self._shards is None:
            self._shards = Shards(self.options.url, self.options.shard_host)
        return self._shards

    def _tops(self) -> Offsets:
        opts, shards = self.options, self.shards

        def tops() -> Offsets:
            return sharding.origin_tops(shards, sharding.resolve_keys(shards, opts.keys, opts.pattern))

        return shards.retrying(tops)

    def initialOffset(self) -> dict:
        opts = self.options
        if opts.starting == "earliest":
            start: Offsets = {}
        elif opts.starting == "latest":
            start = self._tops()
        else:
            start = braid.parse_offsets(opts.starting)
        return sharding.serialize(self.shards, start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_rows_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._tops()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start = braid.flatten(start)
        tops = self._available_now if self._available_now is not None else self._tops()
        end = _advance(start, tops)
        if isinstance(limit, ReadMaxRows):
            end = self._admit(start, end, limit.max_rows)
        return sharding.serialize(self.shards, end)

    def reportLatestOffset(self) -> dict:
        return sharding.serialize(self.shards, self._tops())

    def _admit(self, start: Offsets, end: Offsets, max_rows: int) -> Offsets:
        """At most ``max_rows`` entries past ``start``: an even share per log with news."""
        logs = braid.pending_logs(start, end)[:max_rows]
        if not logs:
            return end
        share = max_rows // len(logs)
        admitted = {key: dict(origins) for key, origins in start.items()}
        shards = self.shards
        split = shards.retrying(lambda: sharding.split_runs(shards, start, end, logs, share))
        for (key, origin), runs in zip(logs, split, strict=True):
            if runs:
                admitted.setdefault(key, {})[origin] = runs[0][0]
        return admitted

    def partitions(self, start: dict, end: dict) -> list[BraidRange]:
        opts, shards = self.options, self.shards
        first, last = braid.flatten(start), braid.flatten(end)
        return shard_tasks(shards.retrying(lambda: sharding.plan_ranges(shards, first, last, opts.partition_size)),
                           opts)

    def read(self, partition: BraidRange) -> Iterator[pa.RecordBatch]:
        return read_task(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: a stream is a log, entries stay for other readers."""

    def stop(self) -> None:
        if self._shards is not None:
            self._shards.close()
            self._shards = None


def _advance(start: Offsets, tops: Offsets) -> Offsets:
    """Every cursor moved up to its log's top; a log never moves back (a trim may lower a top)."""
    end = {key: dict(origins) for key, origins in start.items()}
    for key, origins in tops.items():
        mine = end.setdefault(key, {})
        for origin, top in origins.items():
            mine[origin] = braid.later(top, braid.cursor(start, key, origin))
    return end
