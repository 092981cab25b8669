"""seglog's PySpark data source (format `seglog`): see source.py, and the README's Spark
section. `register(spark)` makes the format known to a session; installing the package does
the same for every session (Spark finds the `pyspark_seglog` module)."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    from .source import SeglogDataSource

    spark.dataSource.register(SeglogDataSource)


__all__ = ["register"]
