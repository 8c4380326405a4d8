"""The Spark connector (pipeline/) against three real regions, on one local Spark session.

Spark starts once for the module (it is slow to start); every test uses its own
keys and checkpoint directories.  The master is ``local[2,4]``: two threads,
and a failed task is retried (up to 4 attempts), which the writer's retry
test needs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import redis

from node.testing import BraidProcess, LocalCluster, free_port, wait_until


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c


@pytest.fixture
def clients(cluster):
    cs = cluster.clients()
    yield cs
    for c in cs:
        c.close()


@pytest.fixture
def tmp_dir():
    d = tempfile.mkdtemp(prefix="braid-spark-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def url(cluster, region: int = 0) -> str:
    return f"redis://127.0.0.1:{cluster.procs[region].port}"


def add(conn, key: str, n: int, **fields) -> list[bytes]:
    pipe = conn.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(key, {"n": i, **fields})
    return pipe.execute()


def read_stream(spark, src: str, key: str, checkpoint: str, **options) -> list[list]:
    """One Trigger.AvailableNow run of the streaming reader; the (id, origin) rows of each micro-batch."""
    batches: list[list] = []
    reader = spark.readStream.format("braid").option("url", src)
    if key is not None:
        reader = reader.option("keys", key)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    query = (reader.load().writeStream
             .foreachBatch(lambda df, _bid: batches.append([(r.id, r.origin)
                                                            for r in df.select("id", "origin").collect()]))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    return batches


def test_batch_read_is_the_merged_stream_split_per_origin(spark, cluster, clients):
    for region, conn in enumerate(clients):
        add(conn, "batch", 700 + region, region=region + 1)
    cluster.sync_wait()
    df = (spark.read.format("braid").option("url", url(cluster)).option("keys", "batch")
          .option("partitionSize", "300").load())
    assert df.rdd.getNumPartitions() == 3 * 3  # three origin logs of 700-702 entries, in runs of 300
    rows = df.collect()
    expected = clients[0].xrange("batch")
    assert sorted((r.id.encode(), r.origin) for r in rows) == sorted(
        (eid, int(f[b"region"])) for eid, f in expected)
    sample = next(r for r in rows if r.id.encode() == expected[5][0])
    assert {k.encode(): v.encode() for k, v in sample.fields.items()} == expected[5][1]
    assert int(sample.timestamp.timestamp() * 1000) == int(sample.id.split("-")[0])
    assert sample.key == "batch"


def test_packed_pages_decode_to_exactly_the_entries_of_the_range():
    """The reader decodes XRANGEORIGIN ... PACKED (whole blocks of the region's log) itself:
    every range and page size gives exactly XRANGEORIGIN's live entries, fields and times."""
    from pipeline import braid
    from pipeline.braid import LogRange
    from pipeline.source import BraidRange, read_pages, read_range, read_task

    with BraidProcess(extra_args=["--appendonly", "no"]) as region:
        conn = region.client()
        conn.config_set("stream-node-max-entries", 10)  # many blocks: pages cut them
        ids = []
        for i in range(150):
            ms, seq = 1000 + i // 7, (i % 7) * 3 + (50 if i // 7 % 2 == 0 else 0)  # negative seq deltas
            fields = {"n": i, "v": "x" * (20000 if i == 40 else 200 if i % 9 == 0 else 3)}
            if i % 11 == 5:
                fields = {"other": i, "é": "ü"}  # not the block's master fields; UTF-8
            ids.append(conn.xadd("packed", fields, id=f"{ms}-{seq}"))
        conn.xdel("packed", *ids[3:6], ids[19], ids[30], ids[-1])  # a deleted block end, and the log's last
        for after, upto in [("0-0", "9999-0"), (ids[2].decode(), ids[-1].decode()), (ids[4].decode(), ids[30].decode()),
                            (ids[29].decode(), ids[31].decode()), (ids[60].decode(), ids[60].decode())]:
            expected = conn.execute_command("XRANGEORIGIN", "packed", 1, "(" + after, upto)
            for count in (1, 7, 1000):
                log_range = LogRange("packed", "1", after, upto, 0)
                rows = [row for batch in read_range(f"redis://127.0.0.1:{region.port}", log_range, count)
                        for row in batch.to_pylist()]
                assert [r["id"].encode() for r in rows] == [e[0] for e in expected], (after, upto, count)
                assert [[x for kv in r["fields"] for x in (kv[0].encode(), kv[1].encode())] for r in rows] == \
                    [e[1] for e in expected]
                epoch = datetime(1970, 1, 1, tzinfo=UTC)
                assert [(r["timestamp"] - epoch) // timedelta(milliseconds=1) for r in rows] == \
                    [int(r["id"].split("-")[0]) for r in rows]
                assert {(r["key"], r["origin"]) for r in rows} <= {("packed", 1)}
        # a task reads its ranges one after the other over one connection, also after a page left unread
        url = f"redis://127.0.0.1:{region.port}"
        whole = [e[0] for e in conn.execute_command("XRANGEORIGIN", "packed", 1, "-", "+")]
        task = BraidRange(url, [LogRange("packed", "1", "0-0", ids[30].decode(), 0),
                                LogRange("packed", "1", ids[30].decode(), ids[-1].decode(), 0)], 7)
        assert [r["id"].encode() for batch in read_task(task) for r in batch.to_pylist()] == whole
        reader = braid.connect(url)
        pages = read_pages(reader, task.ranges[0], 7)
        next(pages)
        pages.close()  # as when Spark stops reading: the next page was already asked for
        assert [r["id"].encode() for batch in read_pages(reader, task.ranges[1], 7)
                for r in batch.to_pylist()] == whole[len(whole) - len([i for i in whole if i > ids[30]]):]
        reader.close()
        conn.close()


def test_stream_resumes_from_checkpoint_without_skip_or_repeat(spark, cluster, clients, tmp_dir):
    first = add(clients[0], "resume", 2500)
    batches = read_stream(spark, url(cluster), "resume", tmp_dir, maxRowsPerBatch=1000)
    assert [len(b) for b in batches] == [1000, 1000, 500]  # admission control: ReadMaxRows
    second = add(clients[0], "resume", 300)
    again = read_stream(spark, url(cluster), "resume", tmp_dir, maxRowsPerBatch=1000)
    assert [len(b) for b in again] == [300]
    ids = [i for b in batches + again for i, _o in b]
    assert len(ids) == len(set(ids)) == 2800
    assert set(ids) == {e.decode() for e in first + second}


def test_late_arrivals_from_another_region_are_read_exactly_once(spark, cluster, clients, tmp_dir):
    r1, r2, _r3 = clients
    r2.execute_command("BRAID.REPLICATION", "PAUSE")
    try:
        late = add(r2, "late", 50, region=2)
        top_ms = int(late[-1].split(b"-")[0])
        early = [r1.xadd("late", {"region": 1}, id=str(top_ms + 100 + i)) for i in range(30)]
        first = read_stream(spark, url(cluster), "late", tmp_dir)
        assert sorted(i for b in first for i, _o in b) == sorted(e.decode() for e in early)
    finally:
        r2.execute_command("BRAID.REPLICATION", "RESUME")
    cluster.sync_wait()
    # region 2's entries now sit *below* what was read in the merged order...
    assert max(late) < min(early) and r1.xlen("late") == 80
    second = read_stream(spark, url(cluster), "late", tmp_dir)
    got = [(i, o) for b in second for i, o in b]
    # ...and the per-origin cursor still reads them, once
    assert sorted(got) == sorted((e.decode(), 2) for e in late)


def test_stream_reads_keys_by_pattern_and_new_keys_from_the_start(spark, cluster, clients, tmp_dir):
    add(clients[0], "pat:a", 10)
    first = read_stream(spark, url(cluster), None, tmp_dir, keyPattern="pat:*", startingPosition="latest")
    assert sum(map(len, first)) == 0
    add(clients[0], "pat:a", 3)
    add(clients[1], "pat:b", 4)
    cluster.sync_wait()
    second = read_stream(spark, url(cluster), None, tmp_dir, keyPattern="pat:*", startingPosition="latest")
    assert sorted(o for b in second for _i, o in b) == [1, 1, 1, 2, 2, 2, 2]


def stats(conn, key: str) -> list[dict]:
    return [{k.decode(): v.decode() for k, v in f.items()} for _id, f in conn.xrange(key)]


def test_writer_task_retry_adds_nothing_twice(spark, cluster, clients):
    from pyspark import TaskContext
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    def fail_first_attempt_midway(n):
        """Partition 0's first attempt dies at row 9000 (the rows before it reach its writer)."""
        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and n == 9000:
            raise RuntimeError("injected task failure")
        return n

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        n = F.udf(fail_first_attempt_midway, LongType(), useArrow=False)("id")
        df = spark.range(0, 20000, numPartitions=2).select(
            n.alias("n"), F.concat(F.lit("retry:"), (F.col("id") >= 10000).cast("int")).alias("stream"))
        (df.write.format("braid").option("url", url(cluster)).option("keyColumn", "stream")
         .option("batchSize", "100").option("statsKey", "retry-stats").mode("append").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    for part in range(2):
        entries = clients[0].xrange(f"retry:{part}")
        assert sorted(int(f[b"n"]) for _i, f in entries) == list(range(10000 * part, 10000 * (part + 1)))
    # the successful attempts' reports add up; what the failed attempt wrote was found again, not re-added
    [report] = stats(clients[0], "retry-stats")
    rows, written, duplicates = int(report["rows"]), int(report["written"]), int(report["duplicates"])
    assert rows == 20000 and written + duplicates == 20000

    def idmp(field: bytes) -> int:
        info = clients[0].execute_command("XINFO", "STREAM", "retry:0")
        return dict(zip(info[0::2], info[1::2], strict=True))[field]

    assert idmp(b"iids-added") == 10000
    # the failed attempt's writer may still be draining rows the retry already wrote: each is a duplicate
    wait_until(lambda: idmp(b"iids-duplicates") > 0, 30, what="the failed attempt's rows to be recognised")
    assert clients[0].xlen("retry:0") == 10000


def test_stream_writer_replayed_batch_adds_nothing_twice(spark, cluster, clients, tmp_dir):
    add(clients[0], "src", 1200)
    src = url(cluster)

    def run():
        q = (spark.readStream.format("braid").option("url", src).option("keys", "src")
             .option("maxRowsPerBatch", "500").load()
             .selectExpr("id AS source_id", "fields['n'] AS n")
             .writeStream.format("braid").option("url", src).option("key", "dst").option("statsKey", "dst-stats")
             .option("checkpointLocation", tmp_dir).trigger(availableNow=True).start())
        q.awaitTermination()
        return q

    query = run()
    assert clients[0].xlen("dst") == 1200
    # the query "crashed" after the sink wrote batch 2 but before Spark recorded it as committed
    last = max(int(n) for n in os.listdir(os.path.join(tmp_dir, "commits")) if n.isdigit())
    os.remove(os.path.join(tmp_dir, "commits", str(last)))
    for crc in (f".{last}.crc",):
        path = os.path.join(tmp_dir, "commits", crc)
        if os.path.exists(path):
            os.remove(path)
    again = run()
    assert again.id == query.id  # the producer id survives restarts (kept in the checkpoint)
    assert clients[0].xlen("dst") == 1200
    assert sorted(int(f[b"n"]) for _i, f in clients[0].xrange("dst")) == list(range(1200))
    reports = stats(clients[0], "dst-stats")
    assert [(r["batch"], r["rows"], r["written"], r["duplicates"]) for r in reports] == [
        ("0", "500", "500", "0"), ("1", "500", "500", "0"), ("2", "200", "200", "0"),
        ("2", "200", "0", "200")]


def test_batch_writer_rerun_with_same_producer_and_key_column(spark, cluster, clients):
    df = spark.createDataFrame([(f"kc:{i % 3}", i, None if i == 7 else float(i) / 2) for i in range(30)],
                               "stream string, n long, half double")

    def write():
        (df.write.format("braid").option("url", url(cluster)).option("keyColumn", "stream")
         .option("producerId", "nightly-2026-01-01").option("statsKey", "kc-stats").mode("append").save())

    write()
    write()
    lengths = [clients[0].xlen(f"kc:{j}") for j in range(3)]
    assert lengths == [10, 10, 10]
    entry = next(f for _i, f in clients[0].xrange("kc:1") if f[b"n"] == b"7")
    assert entry == {b"n": b"7"}  # a null column is left out
    assert entry != {} and next(f for _i, f in clients[0].xrange("kc:1") if f[b"n"] == b"1") == {
        b"n": b"1", b"half": b"0.5"}
    reports = [(r["rows"], r["written"], r["duplicates"]) for r in stats(clients[0], "kc-stats")]
    assert reports == [("30", "30", "0"), ("30", "0", "30")]


def test_reader_and_writer_over_tls(spark, tmp_dir):
    """A region serving only TLS (client certificates required): rediss:// with the TLS options."""
    from node.security.certs import create_cluster_certs

    made = create_cluster_certs(os.path.join(tmp_dir, "tls"), ["region-1"])
    tls_port = free_port()
    args = ["--port", "0", "--tls-port", str(tls_port), "--tls-cert-file", made.regions["region-1"][0],
            "--tls-key-file", made.regions["region-1"][1], "--tls-ca-cert-file", made.ca]
    options = {"url": f"rediss://127.0.0.1:{tls_port}", "tlsCaCert": made.ca, "tlsCert": made.client[0],
               "tlsKey": made.client[1]}

    def conn() -> redis.Redis:
        return redis.Redis(port=tls_port, ssl=True, ssl_ca_certs=made.ca, ssl_certfile=made.client[0],
                           ssl_keyfile=made.client[1], socket_timeout=30)

    def serving() -> bool:
        try:
            return conn().ping()
        except redis.ConnectionError:
            return False

    with BraidProcess(extra_args=args, ready=serving):
        (spark.range(0, 50).selectExpr("id AS n").write.format("braid").options(**options)
         .option("key", "secure").mode("append").save())
        rows = spark.read.format("braid").options(**options).option("keys", "secure").load().collect()
        assert sorted(int(r.fields["n"]) for r in rows) == list(range(50))
        assert conn().xlen("secure") == 50
        with pytest.raises(Exception, match="need a rediss:// url"):
            spark.read.format("braid").option("url", "redis://127.0.0.1:1").option("tlsCaCert", made.ca) \
                .option("keys", "secure").load().collect()


def test_bad_options_are_clear_errors(spark, cluster):
    with pytest.raises(Exception, match="keys .comma-separated. or keyPattern"):
        spark.read.format("braid").option("url", url(cluster)).load().collect()
    with pytest.raises(Exception, match="exactly one of option key"):
        spark.range(1).write.format("braid").option("url", url(cluster)).mode("append").save()
    with pytest.raises(Exception, match="maxRowsPerBatch must be a positive integer"):
        (spark.readStream.format("braid").option("keys", "k").option("maxRowsPerBatch", "0").load()
         .writeStream.format("console").start().awaitTermination(30))


def test_rides_totals_equal_the_reconciliation(spark, cluster, clients, tmp_dir):
    from pipeline.examples import rides

    urls = [url(cluster, i) for i in range(3)]
    posted = rides.produce(urls, range(0, 600))
    query = rides.start_streaming_job(spark, urls[0], tmp_dir, max_rows_per_batch=150)
    posted.update(rides.produce(urls, range(600, 1200), seed=1))
    wait_until(lambda: any(p["numInputRows"] for p in query.recentProgress), 120, what="a first batch")
    query.stop()  # the job killed mid-run
    cluster.sync_wait()
    # region 1 killed: the job goes on at region 2 from the same checkpoint (cursors are per origin log)
    cluster.procs[0].kill()
    try:
        posted.update(rides.produce(urls[1:], range(1200, 1500), seed=2, names=["region-2", "region-3"]))
        cluster.procs[0].restart()
        cluster.sync_wait()
        query = rides.start_streaming_job(spark, urls[1], tmp_dir, available_now=True)
        query.awaitTermination()
    finally:
        if cluster.procs[0].proc.poll() is not None:
            cluster.procs[0].restart()
    streamed = rides.streamed_totals(urls[1])
    nightly = rides.reconcile(spark, urls[1])
    assert streamed == nightly
    assert nightly[rides.ALL] == (sum(posted.values(), Decimal(0)), 1500)
    assert set(nightly) == {rides.ALL, "region-1", "region-2", "region-3"}
