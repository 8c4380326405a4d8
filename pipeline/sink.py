"""The writer of ``format("braid")``: every row an idempotent XADD, exactly once.

Theory of operation
-------------------
Each row becomes ``XADD key IDMP pid iid * column value ...`` (a fixed ``key``
or the value of ``keyColumn``; the other columns are the fields, nulls left
out).  IDMP (idempotent production: XADD … IDMP producer iid) makes a replay harmless: the region answers a known
(pid, iid) with the original entry's ID and adds nothing, and under
Active-Active the pair travels with the entry, so a retry at another region is
recognised too.

The pair names the row by where it sits in the query: the producer (the
streaming query's id, which survives restarts because it is kept in the
checkpoint; for a batch write ``producerId`` or one drawn per job), the batch
id, the partition and the row's position in it.  A task retry or a replayed
micro-batch recomputes the same partitions with the same rows, so every row
gets the same pair again.  A stream keeps at most ``IDMP-MAXSIZE`` iids per
producer (100 by default), so the pid also carries the row's block of
``idmpBlock`` positions: no producer ever holds more iids than a stream keeps,
and none is evicted before it expires (``IDMP-DURATION``, 100 s by default;
replays later than that are not recognised).

Rows go out in MULTI/EXEC transactions of ``batchSize`` XADDs, bracketed by
XLEN of every key they touch: nothing else runs inside a transaction, and an
XADD that adds an entry lengthens its stream by exactly one while a recognised
duplicate changes nothing, so ``rows - (XLEN after - XLEN before)`` is the
number of duplicates suppressed.  Each task reports rows written and
duplicates in its commit message; the driver logs the totals and, with
``statsKey``, appends them to a stream: one entry per committed execution of a
batch, so a replayed batch shows up again with its duplicates.

Sharded regions (``pipeline/shards.py``): each task reads the region's slot map at
``url`` and sends each row to the shard that owns its key's slot.  A transaction may
only touch one slot there (``CROSSSLOT`` otherwise), so a round trip carries, per
shard, one MULTI/EXEC per slot (with the XLEN of that slot's keys around its XADDs),
all of a shard's sent at once and the shards' one after the other; the count of
duplicates stays exact.  A slot whose transaction is answered ``MOVED`` (so it ran
nothing) is sent again where the map, read again, says; after three maps that still
disagree the task fails.  ``statsKey`` goes to its own shard.

Positions identify rows only if a replay sees each partition's rows in the
same order.  That holds for this connector's reader and deterministic plans;
for output whose order within a partition may vary (after a shuffle), name
``idColumns``: each partition is then sorted by them before rows are numbered.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import redis
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from redis.exceptions import MovedError

from node.region.slots import key_slot

from . import braid
from . import shards as sharding
from .shards import Shard, Shards

log = logging.getLogger("braid.pipeline")

QUERY_ID = "sql.streaming.queryId"  # Spark's local properties of a streaming task
BATCH_ID = "streaming.sql.batchId"


@dataclass(frozen=True)
class WriteOptions:
    url: str
    key: str | None
    key_column: str | None
    producer: str | None
    id_columns: tuple[str, ...]
    idmp_block: int
    batch_size: int
    stats_key: str | None
    shard_host: str = "announced"

    @classmethod
    def parse(cls, options, schema_names: list[str]) -> WriteOptions:
        key, key_column = options.get("key"), options.get("keyColumn")
        if (key is None) == (key_column is None):
            raise ValueError("braid: the writer needs exactly one of option key (a fixed stream) or keyColumn")
        if key_column is not None and key_column not in schema_names:
            raise ValueError(f"braid: keyColumn {key_column!r} is not a column of {schema_names}")
        id_columns = tuple(c.strip() for c in options.get("idColumns", "").split(",") if c.strip())
        for c in id_columns:
            if c not in schema_names:
                raise ValueError(f"braid: idColumns names {c!r}, not a column of {schema_names}")
        if len([c for c in schema_names if c != key_column]) == 0:
            raise ValueError("braid: nothing to write: every row needs at least one field column")
        return cls(
            url=braid.url_option(options),
            key=key, key_column=key_column,
            producer=options.get("producerId"),
            id_columns=id_columns,
            idmp_block=braid.positive_option(options.get("idmpBlock", "100"), "idmpBlock"),
            batch_size=braid.positive_option(options.get("batchSize", "1000"), "batchSize"),
            stats_key=options.get("statsKey"),
            shard_host=sharding.shard_host_option(options),
        )


@dataclass
class BraidWriteReport(WriterCommitMessage):
    """One task's outcome, sent to the driver."""

    producer: str
    batch: str
    partition: int
    rows: int
    written: int
    duplicates: int


def _field_value(v) -> str | bytes:
    if isinstance(v, (str, bytes)):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=str, sort_keys=True)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


class IdempotentAppender:
    """One task's rows -> idempotent XADDs, counting what was written and what was a duplicate."""

    def __init__(self, opts: WriteOptions, producer: str, batch: str, partition: int) -> None:
        self.opts = opts
        self.prefix = f"{producer}:{batch}:{partition}"
        self.report = BraidWriteReport(producer, batch, partition, 0, 0, 0)
        self.shards = Shards(opts.url, opts.shard_host)
        self.conn = self.shards.conn(self.shards.shards[0])  # an unsharded region's one endpoint
        self.pending: list[tuple[str | bytes, list[str | bytes]]] = []

    def append(self, batches: Iterator[pa.RecordBatch]) -> BraidWriteReport:
        try:
            for rb in self._ordered(batches):
                self._append_batch(rb)
            self._flush()
        finally:
            self.shards.close()
        return self.report

    def _ordered(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Row order that a replay reproduces: as given, or sorted by idColumns."""
        if not self.opts.id_columns:
            return batches
        table = pa.Table.from_batches(list(batches))
        return table.sort_by([(c, "ascending") for c in self.opts.id_columns]).to_batches()

    def _append_batch(self, rb: pa.RecordBatch) -> None:
        opts = self.opts
        names = rb.schema.names
        columns = [rb.column(i).to_pylist() for i in range(rb.num_columns)]
        key_index = names.index(opts.key_column) if opts.key_column else None
        field_indexes = [i for i in range(len(names)) if i != key_index]
        for r in range(rb.num_rows):
            key = opts.key if key_index is None else _field_value(columns[key_index][r])
            assert key is not None  # WriteOptions.parse: option key when there is no keyColumn
            flat: list[str | bytes] = []
            for i in field_indexes:
                v = columns[i][r]
                if v is not None:
                    flat += (names[i], _field_value(v))
            self.pending.append((key, flat))
            if len(self.pending) >= opts.batch_size:
                self._flush()

    def _flush(self) -> None:
        rows, self.pending = self.pending, []
        if not rows:
            return
        if self.shards.sharded:
            self._flush_sharded(rows)
            return
        keys = list(dict.fromkeys(k for k, _ in rows))
        block = self.opts.idmp_block
        tx = self.conn.pipeline(transaction=True)
        for k in keys:
            tx.execute_command("XLEN", k)
        first = self.report.rows
        for n, (key, flat) in enumerate(rows, first):
            if not flat:  # every field null: nothing to add, but the position still counts
                continue
            tx.execute_command("XADD", key, "IDMP", f"{self.prefix}:{n // block}", str(n), "*", *flat)
        for k in keys:
            tx.execute_command("XLEN", k)
        replies = tx.execute()
        before, after = replies[:len(keys)], replies[-len(keys):]
        sent = sum(1 for _, flat in rows if flat)
        written = sum(after) - sum(before)
        self.report.rows += len(rows)
        self.report.written += written
        self.report.duplicates += sent - written

    def _flush_sharded(self, rows: list[tuple[str | bytes, list[str | bytes]]]) -> None:
        """The rows as one MULTI/EXEC per slot, each shard's in one round trip; a slot answered
        MOVED goes again where the map, read again, says."""
        block = self.opts.idmp_block
        first = self.report.rows
        self.report.rows += len(rows)
        # per slot: its rows' XADDs, each named by the row's position in the partition
        slots: dict[int, list[tuple]] = {}
        for n, (key, flat) in enumerate(rows, first):
            if flat:  # every field null: nothing to add, but the position still counts
                slots.setdefault(key_slot(key.encode() if isinstance(key, str) else key), []).append(
                    ("XADD", key, "IDMP", f"{self.prefix}:{n // block}", str(n), "*", *flat))
        for _attempt in range(3):
            by_shard: dict[int, list[int]] = {}
            for slot, adds in slots.items():
                by_shard.setdefault(self.shards.owner(adds[0][1]).number, []).append(slot)
            moved: dict[int, list[tuple]] = {}
            for number, owned in by_shard.items():
                shard = self.shards.shards[number]
                for slot, outcome in zip(owned, self._send(shard, [slots[s] for s in owned]), strict=True):
                    if isinstance(outcome, MovedError):
                        moved[slot] = slots[slot]
                    else:
                        sent, written = outcome
                        self.report.written += written
                        self.report.duplicates += sent - written
            if not moved:
                return
            self.shards.refresh()
            slots = moved
        raise RuntimeError(f"braid: slots {sorted(slots)[:10]} still answered MOVED after the slot map was read "
                           "three times")

    def _send(self, shard: Shard, groups: list[list[tuple]]) -> list[tuple[int, int] | MovedError]:
        """Each group (one slot's XADDs) as MULTI, XLEN of its keys, the XADDs, XLEN, EXEC, all in
        one round trip to ``shard``: per group (XADDs sent, entries added), or the MOVED it got."""
        commands: list[tuple] = []
        shapes = []
        for adds in groups:
            keys = list(dict.fromkeys(a[1] for a in adds))
            commands += [("MULTI",), *(("XLEN", k) for k in keys), *adds, *(("XLEN", k) for k in keys), ("EXEC",)]
            shapes.append((len(keys), len(adds)))
        conn = self.shards.conn(shard)
        link = conn.connection_pool.get_connection()
        try:
            link.send_packed_command(link.pack_commands(commands))
            out: list[tuple[int, int] | MovedError] = []
            for nkeys, nadds in shapes:
                error: redis.ResponseError | None = None
                reply = None
                for _ in range(2 * nkeys + nadds + 2):  # MULTI, each command's QUEUED, EXEC
                    try:
                        reply = link.read_response()
                    except redis.ResponseError as e:  # refused while queued (MOVED), then EXECABORT
                        error = error or e
                if isinstance(error, MovedError):
                    out.append(error)
                    continue
                if error is not None:
                    raise error
                assert isinstance(reply, list)
                failed = next((r for r in reply if isinstance(r, Exception)), None)
                if failed is not None:
                    raise failed
                out.append((nadds, sum(reply[-nkeys:]) - sum(reply[:nkeys])))
            return out
        except BaseException:
            link.disconnect()  # replies may be left unread
            raise
        finally:
            conn.connection_pool.release(link)


def _task_report(opts: WriteOptions, producer: str, batch: str, batches) -> BraidWriteReport:
    tc = TaskContext.get()
    assert tc is not None  # runs in a Spark task
    partition = tc.partitionId()
    return IdempotentAppender(opts, producer, batch, partition).append(batches)


def record_stats(opts: WriteOptions, reports: list, batch: str) -> None:
    """The driver's end of a batch: log the totals and, with statsKey, append them once."""
    reports = [m for m in reports if isinstance(m, BraidWriteReport)]
    if not reports:
        return
    rows = sum(m.rows for m in reports)
    written = sum(m.written for m in reports)
    duplicates = sum(m.duplicates for m in reports)
    producer = reports[0].producer
    log.info("braid writer %s batch %s: %d rows, %d written, %d duplicates suppressed",
             producer, batch, rows, written, duplicates)
    if opts.stats_key:
        stats_key = opts.stats_key
        shards = Shards(opts.url, opts.shard_host)
        try:
            shards.retrying(lambda: shards.conn(shards.owner(stats_key)).execute_command(
                "XADD", stats_key, "*", "producer", producer, "batch", batch, "rows", rows,
                "written", written, "duplicates", duplicates))
        finally:
            shards.close()


class BraidBatchWriter(DataSourceArrowWriter):
    """``df.write.format("braid")``: one producer id for the whole job, retries included."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.producer = opts.producer or f"spark-write-{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BraidWriteReport:
        return _task_report(self.opts, self.producer, "batch", iterator)

    def commit(self, messages: list) -> None:
        record_stats(self.opts, messages, "batch")


class BraidStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("braid")``: producer = the query id, iid from batch/partition/row."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BraidWriteReport:
        tc = TaskContext.get()
        assert tc is not None  # runs in a Spark task
        producer = self.opts.producer or tc.getLocalProperty(QUERY_ID)
        batch = tc.getLocalProperty(BATCH_ID)
        if producer is None or batch is None:
            raise RuntimeError("braid: a streaming write task without Spark's query or batch id")
        return _task_report(self.opts, producer, batch, iterator)

    def commit(self, messages: list, batchId: int) -> None:
        record_stats(self.opts, messages, str(batchId))
