"""The unified log of Rocket Rides on Spark and Braid.

Theory of operation
-------------------
- **Producer**: rides are posted to any region of the cluster as
  ``XADD rides IDMP rides-api <ride id> * id … distance … region …``.  The API
  may send a ride twice (double sends, after a timeout); IDMP makes
  the second send return the first entry's ID and add nothing, at any region.
- **Streaming job**: reads ``rides`` with ``format("braid")`` (one cursor per
  origin log, checkpointed), keeps the running total distance and ride count,
  overall and per region (one ``rollup``), and writes the totals back into a
  Braid stream (``rides-totals``) with the idempotent writer, every micro-batch
  in complete mode.  The latest entry of each scope is the current total.
  Distances are decimals, so sums do not depend on the order rows are added.
- **Reconciliation** (the nightly job): recomputes the totals in batch
  from the whole log and compares them with the streaming job's latest totals.
- **Foreign entries**: ``rides`` is an ordinary stream anyone may write to (the
  README's first XADD writes one without a region).  An entry without the
  example's fields (``id``, ``region``, a decimal ``distance``) is not a ride of
  this example: both jobs skip it, and the run says once how many it skipped.

Killing the streaming job, or the region it reads from, and starting it again
from its checkpoint (at any region: cursors are per origin log, which is the
same everywhere) gives the same totals: the source neither skips nor repeats
a ride, and a replayed batch's totals are suppressed by IDMP.

Run it against ``braid up``'s regions with ``braid pipeline rides`` (the regions
of ``data/cluster.toml`` when the current directory has one, else 7001-7003), or
with ``spark-submit pipeline/examples/rides.py --urls redis://host:7001,…``.

The run posts half the rides, stops the streaming job on purpose after its first
micro-batch, posts the other half and restarts the job from its checkpoint.
Spark logs the work a stop interrupts as errors (an aborted micro-batch write, a
query "terminated with error"), so those loggers are silenced around the
deliberate stops.  The checkpoint is a temporary
directory unless ``--checkpoint`` names one: removed when the totals agree, kept
(and named) when the run fails.  The check fails as soon as it cannot succeed:
the job's own exception, the job having stopped, or more rides counted than the
log holds.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from decimal import Decimal
from typing import cast

import redis

from node.activeactive.cluster_config import load
from pipeline.session import braid_session

RIDES = "rides"
TOTALS = "rides-totals"
ALL = "all"  # the scope of the overall total
PRODUCER = "rides-api"


def produce(urls: list[str], rides: range, double_send: float = 0.1, seed: int = 0,
            names: list[str] | None = None) -> dict:
    """Post rides round-robin over the regions, re-sending some as a retrying API would.

    ``names`` label the regions in the rides (default region-1, region-2, ... in
    ``urls`` order).  Returns {ride id: distance} of what was posted.
    """
    names = names or [f"region-{i + 1}" for i in range(len(urls))]
    rng = random.Random(seed)
    conns = [redis.Redis.from_url(u, protocol=2) for u in urls]
    posted = {}
    try:
        for n in rides:
            distance = Decimal(rng.randrange(1, 10000)) / 10
            region = n % len(conns)
            fields = {"id": n, "distance": str(distance), "region": names[region]}
            sends = 2 if rng.random() < double_send else 1
            for _ in range(sends):
                conns[region].execute_command("XADD", RIDES, "IDMP", PRODUCER, f"ride-{n}", "*",
                                              *[x for kv in fields.items() for x in kv])
            posted[n] = distance
    finally:
        for c in conns:
            c.close()
    return posted


def _parsed(df):
    """Every entry as (region, distance, is_ride): a ride has an id, a region and a decimal distance."""
    from pyspark.sql import functions as F  # pyspark: the optional pipeline extra, loaded by the job only

    fields = F.col("fields")
    distance = fields["distance"].try_cast("decimal(20,1)")
    is_ride = fields["id"].isNotNull() & fields["region"].isNotNull() & distance.isNotNull()
    return df.select(fields["region"].alias("region"), distance.alias("distance"), is_ride.alias("is_ride"))


def _rides(df):
    """The example's rides; any other entry of the stream is skipped."""
    return _parsed(df).where("is_ride").select("region", "distance")


def _totals(rides):
    from pyspark.sql import functions as F  # pyspark: the optional pipeline extra, loaded by the job only

    # grouping() tells the overall row from a region's, whatever the regions are called
    return (rides.rollup("region")
            .agg(F.sum("distance").alias("total_distance"), F.count(F.lit(1)).alias("rides"),
                 F.grouping("region").alias("overall"))
            .select(F.when(F.col("overall") == 1, F.lit(ALL)).otherwise(F.col("region")).alias("scope"),
                    F.col("total_distance").cast("string").alias("total_distance"),
                    F.col("rides")))


def start_streaming_job(spark, url: str, checkpoint: str, max_rows_per_batch: int = 2000,
                        available_now: bool = False):
    """The running totals: rides -> rollup -> rides-totals (idempotent writer)."""
    rides = (spark.readStream.format("braid").option("url", url).option("keys", RIDES)
             .option("maxRowsPerBatch", str(max_rows_per_batch)).load())
    writer = (_totals(_rides(rides)).coalesce(1).writeStream.format("braid").outputMode("complete")
              .option("url", url).option("key", TOTALS).option("idColumns", "scope")
              .option("statsKey", TOTALS + "-stats")
              .option("checkpointLocation", checkpoint).queryName("rides-totals"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="1 second")
    return writer.start()


def reconcile(spark, url: str) -> dict:
    """The nightly job: totals recomputed from the whole log, {scope: (distance, rides)}."""
    df = spark.read.format("braid").option("url", url).option("keys", RIDES).load()
    return {r.scope: (Decimal(r.total_distance), r.rides) for r in _totals(_rides(df)).collect()}


def foreign_entries(spark, url: str) -> int:
    """Entries of the stream that are not rides of this example (both jobs skip them)."""
    df = spark.read.format("braid").option("url", url).option("keys", RIDES).load()
    return _parsed(df).where("NOT is_ride").count()


def streamed_totals(url: str, after: str = "0-0") -> dict:
    """The streaming job's latest totals written after ID ``after``, {scope: (distance, rides)}."""
    conn = redis.Redis.from_url(url, protocol=2)
    try:
        latest = {}
        # redis-py's reply type covers every client setting; this one (no decode_responses) gives bytes
        entries = cast("list[tuple[bytes, dict[bytes, bytes]]]", conn.xrange(TOTALS, "(" + after, "+"))
        for _id, f in entries:
            latest[f[b"scope"].decode()] = (Decimal(f[b"total_distance"].decode()), int(f[b"rides"]))
        return latest
    finally:
        conn.close()


def totals_top(url: str) -> str:
    """The last ID of ``rides-totals`` now: a run reads only the totals its own job writes after it."""
    with redis.Redis.from_url(url, protocol=2) as conn:
        last = conn.xrevrange(TOTALS, count=1)
    return last[0][0].decode() if last else "0-0"


class JobFailed(Exception):
    """The streaming job cannot reach the expected totals (the message says why)."""


def _poll(predicate, timeout: float, what: str, query=None):
    """Wait for ``predicate`` to return something true; fail at once when ``query`` died."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if query is not None:
            _check_alive(query)
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.5)
    return value


def _check_alive(query) -> None:
    error = query.exception()
    if error is not None:
        raise JobFailed(f"the streaming job failed: {error}")
    if not query.isActive:
        raise JobFailed("the streaming job stopped before counting every ride")


# Where Spark logs the work a query's stop interrupts: the micro-batch write ("... is aborting",
# "... aborted") and the query itself ("terminated with error" when the stop lands in its planning).
STOP_LOGGERS = ("org.apache.spark.sql.execution.datasources.v2",
                "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution")


def _stop_quietly(spark, query) -> None:
    """Stop the query on purpose without Spark's ERROR lines about the micro-batch it interrupts."""
    jvm = spark.sparkContext._jvm
    configurator, level = jvm.org.apache.logging.log4j.core.config.Configurator, jvm.org.apache.logging.log4j.Level
    before = {name: jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel() for name in STOP_LOGGERS}
    for name in STOP_LOGGERS:
        configurator.setLevel(name, level.OFF)
    try:
        query.stop()
    finally:
        for name, was in before.items():
            configurator.setLevel(name, was)


def _logged_rides(urls: list[str]) -> int | None:
    """Rides in the log once every region holds the same number (replication caught up)."""
    lengths = set()
    for u in urls:
        with redis.Redis.from_url(u, protocol=2) as c:
            lengths.add(c.xlen(RIDES))
    return lengths.pop() if len(lengths) == 1 else None


def _wait_for_totals(query, url: str, after: str, expected: int, timeout: float) -> dict:
    """The streaming job's totals once its overall count reaches ``expected`` rides."""
    deadline = time.monotonic() + timeout
    while True:
        totals = streamed_totals(url, after)
        counted = totals.get(ALL, (0, 0))[1]
        if counted == expected:
            return totals
        if counted > expected:
            raise JobFailed(f"the streaming job counted {counted} rides, more than the {expected} in the log")
        _check_alive(query)
        if time.monotonic() > deadline:
            raise TimeoutError(f"the streaming job had counted {counted} of {expected} rides after {timeout:g}s "
                               f"(last progress: {query.lastProgress and query.lastProgress.get('timestamp')})")
        time.sleep(0.5)


def default_urls(cluster_file: str = os.path.join("data", "cluster.toml")) -> str:
    """The regions ``braid up`` started here (its cluster file), else the default ports 7001-7003."""
    if os.path.exists(cluster_file):
        return ",".join(f"redis://{r.host}:{r.port}" for r in load(cluster_file).live_regions())
    return "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="braid pipeline rides", description=__doc__.split("\n\n")[0])
    p.add_argument("--urls", help="the regions, comma-separated (the producer posts to all, the job reads the "
                                  "first; default: the regions of ./data/cluster.toml, else 7001-7003)")
    p.add_argument("--rides", type=int, default=20000, help="rides to post (default 20000)")
    p.add_argument("--checkpoint", help="the streaming job's checkpoint directory (default: a temporary one, "
                                        "removed when the run succeeds)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--timeout", type=float, default=300, help="seconds to wait for the job to catch up")
    args = p.parse_args(argv)
    urls = [u.strip() for u in (args.urls or default_urls()).split(",") if u.strip()]
    spark = braid_session("braid-rides", args.master)
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="braid-rides-")
    same = False
    try:
        same = _run(spark, urls, args, checkpoint)
    except (JobFailed, TimeoutError) as e:
        print(f"braid pipeline rides: {e}", file=sys.stderr)
    except redis.ConnectionError as e:
        print(f"braid pipeline rides: a region did not answer ({e}); is the cluster up? (--urls names the regions)",
              file=sys.stderr)
    finally:
        spark.stop()
        if same and args.checkpoint is None:
            shutil.rmtree(checkpoint, ignore_errors=True)
        elif not same:
            print(f"the streaming job's checkpoint is kept in {checkpoint}", file=sys.stderr)
    return 0 if same else 1


def _run(spark, urls: list[str], args, checkpoint: str) -> bool:
    half = args.rides // 2
    first = int(time.time() * 1000)  # ride ids unique to this run: a rerun adds new rides
    print(f"posting {args.rides} rides to {len(urls)} regions, streaming from {urls[0]}")
    after = totals_top(urls[0])  # totals of earlier runs are not this run's
    produce(urls, range(first, first + half))
    query = start_streaming_job(spark, urls[0], checkpoint)
    try:
        _poll(lambda: any(p["numInputRows"] for p in query.recentProgress), args.timeout, "a first batch", query)
    finally:
        _stop_quietly(spark, query)
    print("streaming job stopped mid-run on purpose; posting the other half, then restarting it from its "
          "checkpoint", checkpoint)
    produce(urls, range(first + half, first + args.rides), seed=1)
    query = start_streaming_job(spark, urls[0], checkpoint)
    try:
        _poll(lambda: _logged_rides(urls), args.timeout, "the regions to converge")
        nightly = reconcile(spark, urls[0])  # the log is complete: what the streaming job must reach
        streamed = _wait_for_totals(query, urls[0], after, nightly.get(ALL, (0, 0))[1], args.timeout)
    finally:
        _stop_quietly(spark, query)
    skipped = foreign_entries(spark, urls[0])
    if skipped:
        print(f"skipped {skipped} {'entry' if skipped == 1 else 'entries'} of {RIDES!r} without the example's "
              f"fields (id, region, a decimal distance): not rides of this example")
    print(f"{'scope':<12}{'streamed distance':>20}{'rides':>8}{'reconciled distance':>22}{'rides':>8}")
    for scope in sorted(nightly):
        s, r = streamed.get(scope, (None, None)), nightly[scope]
        print(f"{scope:<12}{s[0]!s:>20}{s[1]!s:>8}{r[0]!s:>22}{r[1]!s:>8}")
    same = streamed == nightly
    print("totals agree" if same else "TOTALS DIFFER")
    return same


if __name__ == "__main__":
    sys.exit(main())
