"""Transforms shipped with the runtime. A transform is `function(df, context) -> DataFrame`.

`df` has the columns of `consumer_runtime.records.SCHEMA`: key, value (binary), topic, partition,
offset, timestamp, headers. The function must work on classic and Spark Connect DataFrames alike,
so it should use only the DataFrame API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


@dataclass(frozen=True)
class BatchContext:
    """What a transform may know about the batch it runs on."""

    group: str
    member: str
    batch_id: int
    partitions: tuple[tuple[str, int], ...]
    spark: Any


def identity(df: DataFrame, context: BatchContext) -> DataFrame:
    """The batch unchanged."""
    return df


def count_by_key(df: DataFrame, context: BatchContext) -> DataFrame:
    """Per key: how many records and how many value bytes the batch holds."""
    return df.groupBy("key").agg(
        F.count(F.lit(1)).alias("count"),
        F.coalesce(F.sum(F.length("value")), F.lit(0)).cast("long").alias("value_bytes"),
    )
