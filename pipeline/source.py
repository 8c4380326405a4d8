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
  ``partitionSize`` entries (``XSPLITORIGIN`` again): one Spark task each.
- ``read`` (executor) opens its own connection and pages through its range
  with ``XRANGEORIGIN ... COUNT readCount PACKED``, yielding one Arrow record
  batch per page.  ``PACKED`` answers the log's blocks as the region stores
  them (``crdt/blocks.py``) instead of formatting every entry: the region,
  which serves every task on one core, only copies bytes, and the tasks, which
  run in parallel, decode the blocks (the same ``crdt.blocks`` code), drop
  the deleted entries and those outside their range, and build the columns.

A restart from the checkpoint resumes at the committed cursors, so no entry is
skipped or read twice.  Every task reads from the region the offsets were
planned at (``url``): another region may not have received those entries yet.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from crdt.blocks import DELETED, SAMEFIELDS

from . import braid
from .braid import LogRange, Offsets

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

    @classmethod
    def parse(cls, options) -> "ReadOptions":
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
            partition_size=braid.positive_option(options.get("partitionSize", "100000"), "partitionSize"),
            read_count=braid.positive_option(options.get("readCount", "10000"), "readCount"),
        )


class BraidRange(InputPartition):
    """One Spark task: a range of one origin log (picklable, sent to an executor)."""

    def __init__(self, url: str, log_range: LogRange, read_count: int) -> None:
        super().__init__(log_range)
        self.url, self.range, self.read_count = url, log_range, read_count


def read_range(part: BraidRange) -> Iterator[pa.RecordBatch]:
    """Page through one origin log's range (runs on an executor, with its own connection)."""
    r = part.range
    lo, hi = braid.id_tuple(r.after), braid.id_tuple(r.upto)
    conn = braid.connect(part.url)
    try:
        after = r.after
        while True:
            blocks = conn.execute_command("XRANGEORIGIN", r.key, r.origin, "(" + after, r.upto,
                                          "COUNT", part.read_count, "PACKED")
            if not blocks:
                return
            cols, last = decode_page(blocks, lo, hi)
            if cols.ms:
                yield cols.record_batch(r.key, int(r.origin))
            if last is None or last >= hi:
                return
            after = "%d-%d" % last
    finally:
        conn.close()


class Columns:
    """One page of the reader, decoded block by block into flat arrays, turned into Arrow at once.

    Per entry, Python only walks the packed bytes and records integers: the ID's two
    halves, and where each value starts and ends in the page's bytes.  The strings
    are then cut by Arrow: the page's bytes seen as a string array whose offsets are
    every value's start and end (values, with the bytes between them as strings in
    between) from which a ``take`` keeps every other one; field names are indices
    into a small pool (a block's master fields once, other names as they come).
    """

    __slots__ = ("data", "ms", "seq", "bounds", "pairs", "names", "pool", "pool_index")

    def __init__(self) -> None:
        self.data: list[bytes] = []  # the blocks' bytes, in order
        self.ms, self.seq = array("q"), array("q")
        self.bounds = array("q")  # start, end of every value kept, in the blocks' bytes end to end
        self.pairs = array("i", [0])  # the map's offsets: field-value pairs so far, per entry
        self.names = array("i")  # every pair's field name, an index into ``pool``
        self.pool: list[bytes] = []
        self.pool_index: dict[bytes, int] = {}

    def name_indices(self, names) -> array:
        index = self.pool_index
        out = array("i")
        for name in names:
            k = index.get(name)
            if k is None:
                k = index[name] = len(self.pool)
                self.pool.append(name)
            out.append(k)
        return out

    def record_batch(self, key: str, origin: int) -> pa.RecordBatch:
        n = len(self.ms)
        data = pa.py_buffer(b"".join(self.data))
        bounds = pa.Array.from_buffers(pa.int64(), len(self.bounds), [None, pa.py_buffer(self.bounds)])
        # the values and the bytes between them, as one string array over the page's bytes
        spans = pa.Array.from_buffers(pa.large_string(), len(self.bounds) - 1, [None, bounds.buffers()[1], data])
        every_other = array("q", range(0, len(self.bounds), 2))
        values = spans.take(pa.Array.from_buffers(pa.int64(), len(every_other), [None, pa.py_buffer(every_other)]))
        values = values.cast(pa.string())
        values.validate(full=True)  # UTF-8, as pa.array(..., pa.string()) checks
        names = pa.Array.from_buffers(pa.int32(), len(self.names), [None, pa.py_buffer(self.names)])
        keys = pa.array(self.pool, pa.string()).take(names)
        offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(self.pairs)])
        fields = pa.MapArray.from_arrays(offsets, keys, values, type=ARROW_SCHEMA.field("fields").type)
        ms = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.ms)])
        seq = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.seq)])
        ids = pc.binary_join_element_wise(ms.cast(pa.string()), seq.cast(pa.string()), "-")
        return pa.RecordBatch.from_arrays([
            pa.repeat(pa.scalar(key, pa.string()), n),
            ids,
            pa.repeat(pa.scalar(origin, pa.int32()), n),
            fields,
            pc.multiply(ms, 1000).cast(ARROW_SCHEMA.field("timestamp").type),
        ], schema=ARROW_SCHEMA)


def _uvarint(buf: bytes, i: int, v: int) -> tuple[int, int]:
    """The rest of a LEB128 varint whose first byte ``v`` (>= 0x80) was read; (value, next index)."""
    v &= 0x7F
    shift = 7
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, i
        shift += 7


def decode_page(blocks: list, lo: tuple[int, int], hi: tuple[int, int]) -> tuple[Columns, tuple[int, int] | None]:
    """A ``PACKED`` reply -> its live entries with lo < ID <= hi, and the last ID its blocks hold."""
    cols = Columns()
    cols.data = [block[2] for block in blocks]
    data = b"".join(cols.data)
    last, at = None, 0
    for first, fields, buf in blocks:
        last = decode_block(braid.id_tuple(first), tuple(fields), data, at, at + len(buf), lo, hi, cols) or last
        at += len(buf)
    return cols, last


def decode_block(first: tuple[int, int], fields: tuple, data: bytes, i: int, end: int,
                 lo: tuple[int, int], hi: tuple[int, int], cols: Columns) -> tuple[int, int] | None:
    """Add the live entries with lo < ID <= hi of the packed block in ``data[i:end]`` to ``cols``;
    return the block's last ID (None when empty).

    This reads ``crdt/blocks.py``'s entry format (``Block.decode``) straight into
    ``cols``.  ``tests/test_pipeline.py`` checks it against ``XRANGEORIGIN``'s entries.
    """
    ms_add, seq_add, pairs = cols.ms.append, cols.seq.append, cols.pairs
    bound, names = cols.bounds.append, cols.names
    master = cols.name_indices(fields)
    nf_range = range(len(fields))
    nf = len(fields)
    total = pairs[-1]
    pair_add = pairs.append
    fms, fseq = first
    above_lo = first > lo  # every entry of the block is then above lo
    hi_ms = hi[0]
    ms = seq = None
    while i < end:
        flags = data[i]
        v = data[i + 1]
        i += 2
        if v >= 0x80:
            v, i = _uvarint(data, i, v)
        ms = fms + v
        v = data[i]
        i += 1
        if v >= 0x80:
            v, i = _uvarint(data, i, v)
        seq = fseq + ((v >> 1) if not v & 1 else -((v + 1) >> 1))
        keep = (not flags & DELETED and (above_lo or (ms, seq) > lo)
                and (ms < hi_ms or (ms, seq) <= hi))
        if flags & SAMEFIELDS:
            if keep:
                for _ in nf_range:
                    m = data[i]
                    i += 1
                    if m >= 0x80:
                        m, i = _uvarint(data, i, m)
                    bound(i)
                    i += m
                    bound(i)
                names.extend(master)
                total += nf
                ms_add(ms)
                seq_add(seq)
                pair_add(total)
            else:
                for _ in nf_range:
                    m = data[i]
                    i += 1
                    if m >= 0x80:
                        m, i = _uvarint(data, i, m)
                    i += m
            continue
        n = data[i]
        i += 1
        if n >= 0x80:
            n, i = _uvarint(data, i, n)
        entry_names = []
        for _ in range(n):
            m = data[i]
            i += 1
            if m >= 0x80:
                m, i = _uvarint(data, i, m)
            entry_names.append(data[i:i + m])
            i += m
            m = data[i]
            i += 1
            if m >= 0x80:
                m, i = _uvarint(data, i, m)
            if keep:
                bound(i)
                bound(i + m)
            i += m
        if keep:
            names.extend(cols.name_indices(entry_names))
            total += n
            ms_add(ms)
            seq_add(seq)
            pair_add(total)
    return None if ms is None else (ms, seq)


def _position(conn, keys: list[str], text: str) -> Offsets:
    """earliest / latest / a JSON offset -> cursors."""
    if text == "earliest":
        return {}
    if text == "latest":
        return braid.origin_tops(conn, keys)
    return braid.parse_offsets(text)


class BraidBatchReader(DataSourceReader):
    """``spark.read.format("braid")``: the entries between two positions, as a DataFrame."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[BraidRange]:
        opts = self.options
        conn = braid.connect(opts.url)
        try:
            keys = braid.resolve_keys(conn, opts.keys, opts.pattern)
            start = _position(conn, keys, opts.starting)
            end = _position(conn, keys, opts.ending)
            ranges = braid.plan_ranges(conn, start, end, opts.partition_size)
        finally:
            conn.close()
        return [BraidRange(opts.url, r, opts.read_count) for r in ranges]

    def read(self, partition: BraidRange) -> Iterator[pa.RecordBatch]:
        return read_range(partition)


class BraidStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("braid")``: micro-batches between per-origin cursors."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._conn = None
        self._available_now: Offsets | None = None  # Trigger.AvailableNow's target

    @property
    def conn(self):
        if self._conn is None:
            self._conn = braid.connect(self.options.url)
        return self._conn

    def _tops(self) -> Offsets:
        opts = self.options
        return braid.origin_tops(self.conn, braid.resolve_keys(self.conn, opts.keys, opts.pattern))

    def initialOffset(self) -> Offsets:
        opts = self.options
        if opts.starting == "earliest":
            return {}
        if opts.starting == "latest":
            return self._tops()
        return braid.parse_offsets(opts.starting)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_rows_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._tops()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        tops = self._available_now if self._available_now is not None else self._tops()
        end = _advance(start, tops)
        if isinstance(limit, ReadMaxRows):
            end = self._admit(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> Offsets:
        return self._tops()

    def _admit(self, start: Offsets, end: Offsets, max_rows: int) -> Offsets:
        """At most ``max_rows`` entries past ``start``: an even share per log with news."""
        logs = braid.pending_logs(start, end)[:max_rows]
        if not logs:
            return end
        share = max_rows // len(logs)
        admitted = {key: dict(origins) for key, origins in start.items()}
        for (key, origin), runs in zip(logs, braid.split_runs(self.conn, start, end, logs, share)):
            if runs:
                admitted.setdefault(key, {})[origin] = runs[0][0]
        return admitted

    def partitions(self, start: Offsets, end: Offsets) -> list[BraidRange]:
        opts = self.options
        ranges = braid.plan_ranges(self.conn, start, end, opts.partition_size)
        return [BraidRange(opts.url, r, opts.read_count) for r in ranges]

    def read(self, partition: BraidRange) -> Iterator[pa.RecordBatch]:
        return read_range(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: a stream is a log, entries stay for other readers."""

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _advance(start: Offsets, tops: Offsets) -> Offsets:
    """Every cursor moved up to its log's top; a log never moves back (a trim may lower a top)."""
    end = {key: dict(origins) for key, origins in start.items()}
    for key, origins in tops.items():
        mine = end.setdefault(key, {})
        for origin, top in origins.items():
            mine[origin] = braid.later(top, braid.cursor(start, key, origin))
    return end
