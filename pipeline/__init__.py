"""Braid's Spark connector and example jobs.

- ``pipeline.datasource.BraidDataSource``: ``format("braid")`` for
  ``spark.read`` / ``readStream`` (``pipeline/source.py``) and ``df.write`` /
  ``writeStream`` (``pipeline/sink.py``).
- ``pipeline.shards``: a sharded region's shards, found at one endpoint.
- ``pipeline.session``: a SparkSession with the source registered.
- ``pipeline.examples.rides``: the Rocket Rides unified log on Spark.

Importing this package does not import pyspark; :func:`register` does.
"""

from __future__ import annotations

# First, in the driver and in Spark's Python workers: which build of the compiled modules
# this process runs (BRAID_PURE=1, a stale build; node/build.py)
import node.build  # noqa: F401


def register(spark) -> None:
    """Make ``format("braid")`` available in ``spark``."""
    from .datasource import BraidDataSource  # imports pyspark (optional): importing this package must not

    spark.dataSource.register(BraidDataSource)
