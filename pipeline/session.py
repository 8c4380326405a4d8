"""A SparkSession for Braid jobs: ``format("braid")`` registered, quiet, small shuffles.

``master=None`` leaves the master to ``spark-submit`` (``--master spark://…``,
``k8s://…``, ``yarn``), or to Spark's default (``local[*]``) in a plain process.  Python workers use
this interpreter unless ``PYSPARK_PYTHON`` says otherwise, so the executors
find ``pipeline`` and its pinned dependencies (on a cluster, ship them with
``--py-files`` or the image and set ``PYSPARK_PYTHON`` there).
"""

from __future__ import annotations

import os
import sys

from . import register


def braid_session(app: str = "braid", master: str | None = None, conf: dict | None = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # pyspark: the optional pipeline extra; importing this module does not need it

    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    }
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
