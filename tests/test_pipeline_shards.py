"""The Spark connector (pipeline/) against a sharded database: two regions of two shards each.

Four real ``braid node`` processes, each one shard of a region run on the cluster file's
shard view (``ClusterConfig.shard_view``): with ``braid node --shard K`` where it has that
option, else through a small bootstrap that hands ``braid node`` the view (as
tests/test_admin_shards.py starts its database).  Spark starts once for the test session
(the same ``local[2,4]`` session as tests/test_pipeline.py's, which ``getOrCreate`` returns
when both modules run); every test uses keys of its own, chosen by hash slot so that both
shards hold some of them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pyarrow as pa
import pytest

from node.region.slots import key_slot
from node.testing import BraidProcess, ShardedCluster
from pipeline import braid
from pipeline.shards import Shards, parse_shards, serialize, with_address

REGIONS = ("region-1", "region-2")

class ShardedDatabase(ShardedCluster):
    """Two regions of two shards on loopback, each shard a process."""

    def __init__(self, shards: int = 2) -> None:
        super().__init__(len(REGIONS), shards, prefix="braid-spark-sharded-")

    def url(self, region: str, shard: int) -> str:
        return f"redis://127.0.0.1:{self.procs[(region, shard)].port}"

    def sync(self) -> None:
        """Until every shard group is in sync (braid-admin sync wait)."""
        code, _, err = self.admin("sync", "wait", "--timeout", "30")
        assert code == 0, err


@pytest.fixture(scope="module")
def db():
    d = ShardedDatabase().start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def tmp_dir():
    d = tempfile.mkdtemp(prefix="braid-spark-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write(db: ShardedDatabase, at: str, key: str, n: int, **fields) -> list[str]:
    """``n`` entries appended to ``key`` at region ``at``'s shard owning it; their IDs."""
    with db.client(at, db.owner(key)) as c:
        pipe = c.pipeline(transaction=False)
        for i in range(n):
            pipe.xadd(key, {"n": i, **fields})
        return [i.decode() for i in pipe.execute()]


def read_stream(spark, url: str, checkpoint: str, **options) -> list[list[tuple[str, str, int, int]]]:
    """One Trigger.AvailableNow run of the streaming reader: per micro-batch, its rows as
    (key, id, origin, Spark partition)."""
    from pyspark.sql import functions as F

    batches: list[list] = []
    reader = spark.readStream.format("braid").option("url", url)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    query = (reader.load().writeStream
             .foreachBatch(lambda df, _bid: batches.append(
                 [(r.key, r.id, r.origin, r.p)
                  for r in df.select("key", "id", "origin", F.spark_partition_id().alias("p")).collect()]))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    return batches


def last_offset(checkpoint: str) -> dict:
    """The end offset of the checkpoint's last planned micro-batch, as Spark keeps it."""
    folder = os.path.join(checkpoint, "offsets")
    last = max(int(n) for n in os.listdir(folder) if n.isdigit())
    with open(os.path.join(folder, str(last))) as f:
        return json.loads(f.read().splitlines()[-1])


def test_a_stream_reads_every_entry_of_both_shards_once_with_its_origin(spark, db, tmp_dir):
    keys = db.keys("rd:", 2)
    assert [db.owner(k) for k in keys] == [0, 0, 1, 1]
    expected = set()
    for j, key in enumerate(keys):
        for number, region in enumerate(REGIONS, 1):
            expected |= {(key, i, number) for i in write(db, region, key, 60 + 17 * j + number, region=number)}
    db.sync()
    # one endpoint, the second shard of region-1: the reader finds the first one itself
    batches = read_stream(spark, db.url("region-1", 1), tmp_dir, keyPattern="rd:*", partitionSize=50)
    rows = [row for b in batches for row in b]
    assert len(rows) == len(expected) and {(k, i, o) for k, i, o, _p in rows} == expected
    # every task read one shard's keys (from that shard), and each shard's logs were cut into several
    shards_of_task: dict[tuple[int, int], set[int]] = {}
    for b, batch in enumerate(batches):
        for key, _i, _o, p in batch:
            shards_of_task.setdefault((b, p), set()).add(db.owner(key))
    assert all(len(s) == 1 for s in shards_of_task.values()), shards_of_task
    tasks_per_shard = [sum(1 for s in shards_of_task.values() if s == {k}) for k in (0, 1)]
    assert min(tasks_per_shard) >= 2, tasks_per_shard
    # the checkpoint's offset names the shard of every key, with a cursor per origin log
    offset = last_offset(tmp_dir)
    assert set(offset) == {"shards"} and set(offset["shards"]) == {"0", "1"}
    for shard, cursors in offset["shards"].items():
        assert sorted(cursors) == [k for k in keys if db.owner(k) == int(shard)]
        for key, origins in cursors.items():
            assert origins == {str(o): max((i for k, i, oo in expected if k == key and oo == o), key=braid.id_tuple)
                               for o in (1, 2)}
    # the batch reader, pointed at the other region's first shard, returns the same entries
    df = (spark.read.format("braid").option("url", db.url("region-2", 0)).option("keys", ",".join(keys))
          .option("partitionSize", "1000").load())
    assert df.rdd.getNumPartitions() == 2  # one task per shard: short ranges of one shard share a task
    assert {(r.key, r.id, r.origin) for r in df.collect()} == expected


def test_a_restart_from_the_checkpoint_resumes_every_shard(spark, db, tmp_dir):
    keys = db.keys("rs:", 1)
    first = {k: write(db, "region-1", k, 250) for k in keys}
    batches = read_stream(spark, db.url("region-1", 0), tmp_dir, keys=",".join(keys), maxRowsPerBatch=200)
    assert [len(b) for b in batches] == [200, 200, 100]  # the row limit is shared by both shards' logs
    assert sorted((k, i) for b in batches for k, i, _o, _p in b) == sorted(
        (k, i) for k, ids in first.items() for i in ids)
    # region-2's shard 1 is cut off: what it writes reaches region-1 only after the next run
    late_shard = 1
    with db.client("region-2", late_shard) as paused:
        paused.execute_command("BRAID.REPLICATION", "PAUSE")
        try:
            late = write(db, "region-2", keys[late_shard], 40, region=2)
            top = max(int(i.split("-")[0]) for i in late)
            with db.client("region-1", late_shard) as c:  # region-1's own later entries, with higher IDs
                later = [c.xadd(keys[late_shard], {"n": 0}, id=str(top + 1000 + i)).decode() for i in range(5)]
            second = {k: write(db, "region-1", k, 30) for k in keys}
            again = read_stream(spark, db.url("region-1", 1), tmp_dir, keys=",".join(keys), maxRowsPerBatch=200)
        finally:
            paused.execute_command("BRAID.REPLICATION", "RESUME")
    got = [row for b in again for row in b]
    assert sorted((k, i) for k, i, _o, _p in got) == sorted(
        [(k, i) for k, ids in second.items() for i in ids] + [(keys[late_shard], i) for i in later])
    db.sync()
    # region-2's entries now sit below what was read in shard 1's merged order; its cursor still reads them,
    # once, and the job goes on at region-2 from the same checkpoint
    last = read_stream(spark, db.url("region-2", 0), tmp_dir, keys=",".join(keys), maxRowsPerBatch=200)
    assert sorted((k, i, o) for b in last for k, i, o, _p in b) == sorted((keys[late_shard], i, 2) for i in late)
    everything = [(k, i) for run in (batches, again, last) for b in run for k, i, _o, _p in b]
    assert len(everything) == len(set(everything)) == sum(len(owner_holds(db, k)) for k in keys) == 605
    assert read_stream(spark, db.url("region-1", 0), tmp_dir, keys=",".join(keys)) == []  # nothing new


def owner_holds(db: ShardedDatabase, key: str, region: str = "region-1") -> list[dict]:
    """``key``'s entries at its shard, after checking the other shard does not hold the key."""
    slot = key_slot(key.encode())
    for k in range(db.config.shards.count):
        with db.client(region, k) as c:
            count = c.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
            assert count == (1 if k == db.owner(key) else 0), (key, k)
    with db.client(region, db.owner(key)) as c:
        return [{f.decode(): v.decode() for f, v in fields.items()} for _i, fields in c.xrange(key)]


def test_the_batch_writer_sends_each_row_to_the_shard_of_its_key(spark, db):
    keys = db.keys("wr:", 3)
    rows = [(keys[i % len(keys)], i) for i in range(600)]
    df = spark.createDataFrame(rows, "stream string, n long")

    def save() -> None:
        (df.write.format("braid").option("url", db.url("region-1", 0)).option("keyColumn", "stream")
         .option("producerId", "sharded-nightly").option("batchSize", "64")
         .option("statsKey", "wr-stats").mode("append").save())

    save()
    for key in keys:
        assert sorted(int(e["n"]) for e in owner_holds(db, key)) == [n for k, n in rows if k == key]
    [report] = owner_holds(db, "wr-stats")
    assert (report["rows"], report["written"], report["duplicates"]) == ("600", "600", "0")
    save()  # a rerun of the same producer adds nothing, and says so
    assert sum(len(owner_holds(db, key)) for key in keys) == 600
    reports = owner_holds(db, "wr-stats")
    assert [(r["rows"], r["written"], r["duplicates"]) for r in reports] == [("600", "600", "0"), ("600", "0", "600")]
    db.sync()
    for key in keys:  # and the other region's shard of the same number has them
        assert len(owner_holds(db, key, "region-2")) == 100


def test_a_stream_from_both_shards_into_both_shards(spark, db, tmp_dir):
    """Sharded reader into the sharded writer: every entry copied once, each copy at its own key's shard."""
    # one key of each shard whose copy is at the other shard
    candidates = db.keys("cp:", 50)
    keys = [next(k for k in candidates if (db.owner(k), db.owner(f"copy-{k}")) == pair) for pair in ((0, 1), (1, 0))]
    for j, key in enumerate(keys):
        write(db, "region-1", key, 100 + j)
    url = db.url("region-2", 1)
    db.sync()
    query = (spark.readStream.format("braid").option("url", url).option("keys", ",".join(keys))
             .option("maxRowsPerBatch", "150").load()
             .selectExpr("concat('copy-', key) AS stream", "id AS source", "fields['n'] AS n")
             .writeStream.format("braid").option("url", url).option("keyColumn", "stream")
             .option("checkpointLocation", tmp_dir).trigger(availableNow=True).start())
    query.awaitTermination()
    copies = [f"copy-{k}" for k in keys]
    for j, (key, copy) in enumerate(zip(keys, copies, strict=True)):
        entries = owner_holds(db, copy, "region-2")
        assert sorted(int(e["n"]) for e in entries) == list(range(100 + j))
        with db.client("region-2", db.owner(key)) as c:
            assert {e["source"] for e in entries} == {i.decode() for i, _f in c.xrange(key)}


def test_a_writer_with_a_stale_slot_map_follows_moved(db):
    """A task whose map sends every row to the wrong shard is answered MOVED, reads the map
    again and writes each row once, where its key belongs."""
    from pipeline.sink import IdempotentAppender, WriteOptions

    keys = db.keys("mv:", 2)
    opts = WriteOptions.parse({"url": db.url("region-1", 1), "keyColumn": "stream", "batchSize": "7"},
                              ["stream", "n"])
    appender = IdempotentAppender(opts, "stale-map", "0", 0)
    right = list(appender.shards._owner)
    appender.shards._owner = [1 - k for k in right]  # every slot: the other shard
    batch = pa.RecordBatch.from_pydict({"stream": [keys[i % 4] for i in range(40)], "n": list(range(40))})
    report = appender.append(iter([batch]))
    assert (report.rows, report.written, report.duplicates) == (40, 40, 0)
    assert appender.shards._owner == right
    for j, key in enumerate(keys):
        assert sorted(int(e["n"]) for e in owner_holds(db, key)) == list(range(j, 40, 4))


def test_an_unsharded_region_is_one_shard_with_offsets_as_before():
    with BraidProcess(extra_args=["--appendonly", "no"]) as region:
        url = f"redis://127.0.0.1:{region.port}"
        shards = Shards(url)
        try:
            assert not shards.sharded and [(s.number, s.url) for s in shards.shards] == [(0, url)]
            offsets = {"b": {"2": "5-0", "1": "7-0"}, "a": {}}
            assert serialize(shards, offsets) is offsets
        finally:
            shards.close()


def test_the_slot_map_and_sharded_offsets_are_read_as_written():
    reply = [[b"slots", [0, 99, 200, 8191], b"nodes", [[b"id", b"a" * 40, b"port", 7001, b"tls-port", 7401,
                                                        b"ip", b"10.0.0.1", b"endpoint", b"region-1.local",
                                                        b"role", b"master", b"health", b"online"]]],
             [b"slots", [100, 199, 8192, 16383], b"nodes", [[b"id", b"b" * 40, b"port", 7002, b"ip", b"10.0.0.1",
                                                             b"endpoint", b"?", b"role", b"master"]]]]
    url = "rediss://user:pw@gateway:7001/0?ssl_ca_certs=%2Fca.crt"
    shards = parse_shards(reply, url, "announced")
    assert [(s.number, s.url, s.slots) for s in shards] == [
        (0, "rediss://user:pw@region-1.local:7401/0?ssl_ca_certs=%2Fca.crt", ((0, 99), (200, 8191))),
        (1, "rediss://user:pw@gateway:7002/0?ssl_ca_certs=%2Fca.crt", ((100, 199), (8192, 16383)))]
    plain = parse_shards(reply, "redis://localhost:7001", "url")
    assert [s.url for s in plain] == ["redis://localhost:7001", "redis://localhost:7002"]
    assert with_address("redis://[::1]:1", "::1", 7003) == "redis://[::1]:7003"
    # the sharded form of an offset reads back as the cursors it groups; the unsharded one as itself
    sharded = {"shards": {"0": {"a": {"1": "5-0"}}, "1": {"b": {"1": "6-1", "2": "7-2"}}}}
    assert braid.parse_offsets(json.dumps(sharded)) == {"a": {"1": "5-0"}, "b": {"1": "6-1", "2": "7-2"}}
    assert braid.parse_offsets('{"shards": {"1": "5-0"}}') == {"shards": {"1": "5-0"}}  # a stream named shards
    with pytest.raises(ValueError, match="an offset is JSON"):
        braid.parse_offsets('{"shards": {"0": {"a": {"1": "x"}}}}')
