"""A SparkSession for Braid jobs: ``format("braid")`` registered, quiet, small shuffles.

Quiet: a job's own lines are not mixed with Spark's console output.  The driver this process
starts logs errors only from its start (pipeline/log4j2.properties), shows no stage progress bars,
and run locally binds to the loopback address (``SPARK_LOCAL_IP``: no warning that the host name
resolves to one); py4j's Python logger says nothing below a warning.  A job given its own
``spark.driver.extraJavaOptions`` (or run by ``spark-submit``, whose driver is already running)
keeps its logging.

``master=None`` leaves the master to ``spark-submit`` (``--master spark://…``,
``k8s://…``, ``yarn``), or to Spark's default (``local[*]``) in a plain process.  Python workers use
this interpreter unless ``PYSPARK_PYTHON`` says otherwise, so the executors
find ``pipeline`` and its pinned dependencies (on a cluster, ship them with
``--py-files`` or the image and set ``PYSPARK_PYTHON`` there).
"""

from __future__ import annotations

import logging
import os
import sys

from . import register

LOG4J2_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


def braid_session(app: str = "braid", master: str | None = None, conf: dict | None = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local driver: no loopback-address warning
    logging.getLogger("py4j").setLevel(logging.WARNING)  # (its INFO: each connection it closes)
    from pyspark.sql import SparkSession  # pyspark: the optional pipeline extra; importing this module does not need it

    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J2_FILE}",
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
