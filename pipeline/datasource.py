"""``format("braid")``: the Spark data source (Spark 4's Python Data Source API).

Register it once per session, then read and write Braid streams::

    from pipeline import register
    register(spark)
    df = spark.readStream.format("braid").option("url", "redis://host:7001").option("keys", "rides").load()

The reader is in ``pipeline/source.py``, the writer in ``pipeline/sink.py``;
the options are tabled in docs/pipeline.md ("Options").
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .sink import BraidBatchWriter, BraidStreamWriter, WriteOptions
from .source import SCHEMA, BraidBatchReader, BraidStreamReader, ReadOptions


class BraidDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "braid"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> BraidBatchReader:
        return BraidBatchReader(ReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> BraidStreamReader:
        return BraidStreamReader(ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> BraidBatchWriter:
        return BraidBatchWriter(WriteOptions.parse(self.options, schema.fieldNames()))

    def streamWriter(self, schema: StructType, overwrite: bool) -> BraidStreamWriter:
        return BraidStreamWriter(WriteOptions.parse(self.options, schema.fieldNames()))
