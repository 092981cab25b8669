"""Spark registers the `DefaultSource` of every importable `pyspark_*` module in each session:
with seglog installed, `spark.read.format("seglog")` works without calling register()."""

from seglog.spark.source import SeglogDataSource as DefaultSource

__all__ = ["DefaultSource"]
