"""Transforms the runtime loads by name in the integration tests (`module:function`)."""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

POISON = b"POISON"


def slow_identity(df: DataFrame, context: Any) -> DataFrame:
    """The batch unchanged, after 1.5 s: long enough to be killed in the middle of a batch."""
    time.sleep(1.5)
    return df


def slower_than_max_poll(df: DataFrame, context: Any) -> DataFrame:
    """The batch unchanged, after 7 s: longer than a max.poll.interval.ms of 6 s."""
    time.sleep(7.0)
    return df


def reject_poison(df: DataFrame, context: Any) -> DataFrame:
    """Fails the Spark job when a record's value is POISON, like a parser meeting bad input."""
    check = F.when(F.col("value") == F.lit(POISON), F.raise_error(F.lit("poison record")))
    return df.filter(check.otherwise(F.lit(True)))


WARM_UP_TOPIC = "staticfleet-warm-up"


def fail_on_real_records(df: DataFrame, context: Any) -> DataFrame:
    """Passes the runtime's warm-up (its made-up records) and fails the Spark job on every
    real record: a revision that starts, gets standby-ready, and cannot process."""
    check = F.when(F.col("topic") != F.lit(WARM_UP_TOPIC),
                   F.raise_error(F.lit("cannot parse a real record")))
    return df.filter(check.otherwise(F.lit(True)))

