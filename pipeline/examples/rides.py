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

Killing the streaming job, or the region it reads from, and starting it again
from its checkpoint (at any region: cursors are per origin log, which is the
same everywhere) gives the same totals: the source neither skips nor repeats
a ride, and a replayed batch's totals are suppressed by IDMP.

Run it against ``braid up`` (regions on 7001-7003) with ``braid pipeline rides``,
or with ``spark-submit pipeline/examples/rides.py --urls redis://host:7001,…``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from decimal import Decimal

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
    import redis

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


def _rides(df):
    from pyspark.sql import functions as F

    return df.select(F.col("fields")["region"].alias("region"),
                     F.col("fields")["distance"].cast("decimal(20,1)").alias("distance"))


def _totals(rides):
    from pyspark.sql import functions as F

    return (rides.rollup("region")
            .agg(F.sum("distance").alias("total_distance"), F.count(F.lit(1)).alias("rides"))
            .select(F.coalesce(F.col("region"), F.lit(ALL)).alias("scope"),
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


def streamed_totals(url: str) -> dict:
    """The streaming job's latest totals, {scope: (distance, rides)}."""
    import redis

    conn = redis.Redis.from_url(url, protocol=2)
    try:
        latest = {}
        for _id, f in conn.xrange(TOTALS):
            latest[f[b"scope"].decode()] = (Decimal(f[b"total_distance"].decode()), int(f[b"rides"]))
        return latest
    finally:
        conn.close()


def _poll(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)
    return value


def _logged_rides(urls: list[str]) -> int | None:
    """Rides in the log once every region holds the same number (replication caught up)."""
    import redis

    lengths = set()
    for u in urls:
        with redis.Redis.from_url(u, protocol=2) as c:
            lengths.add(c.xlen(RIDES))
    return lengths.pop() if len(lengths) == 1 else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="braid pipeline rides", description=__doc__.split("\n\n")[0])
    p.add_argument("--urls", default="redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003",
                   help="the regions, comma-separated (the producer posts to all, the job reads the first)")
    p.add_argument("--rides", type=int, default=20000, help="rides to post")
    p.add_argument("--checkpoint", help="the streaming job's checkpoint directory (default: a temporary one)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--timeout", type=float, default=300, help="seconds to wait for the job to catch up")
    args = p.parse_args(argv)
    urls = [u.strip() for u in args.urls.split(",") if u.strip()]
    from pipeline.session import braid_session

    spark = braid_session("braid-rides", args.master)
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="braid-rides-")
    half = args.rides // 2
    first = int(time.time() * 1000)  # ride ids unique to this run: a rerun adds new rides
    print(f"posting {args.rides} rides to {len(urls)} regions, streaming from {urls[0]}")
    produce(urls, range(first, first + half))
    query = start_streaming_job(spark, urls[0], checkpoint)
    produce(urls, range(first + half, first + args.rides), seed=1)
    _poll(lambda: any(p["numInputRows"] for p in query.recentProgress), args.timeout, "a first batch")
    query.stop()
    print("streaming job stopped mid-run; restarting it from", checkpoint)
    query = start_streaming_job(spark, urls[0], checkpoint)
    try:
        logged = _poll(lambda: _logged_rides(urls), args.timeout, "the regions to converge")
        streamed = _poll(lambda: (t := streamed_totals(urls[0])).get(ALL, (0, 0))[1] == logged and t,
                         args.timeout, "the streaming job to count every ride")
    finally:
        query.stop()
    nightly = reconcile(spark, urls[0])
    print(f"{'scope':<12}{'streamed distance':>20}{'rides':>8}{'reconciled distance':>22}{'rides':>8}")
    for scope in sorted(nightly):
        s, r = streamed.get(scope, (None, None)), nightly[scope]
        print(f"{scope:<12}{s[0]!s:>20}{s[1]!s:>8}{r[0]!s:>22}{r[1]!s:>8}")
    same = streamed == nightly
    print("totals agree" if same else "TOTALS DIFFER")
    spark.stop()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
