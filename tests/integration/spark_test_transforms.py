"""Transforms the runtime loads by name in the integration tests (`module:function`)."""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

POISON = b"POISON"


def slow_identity(df: DataFrame, context: Any) -> DataFrame:
    """The batch unchanged, after 1.5 s: long enough to be killed in the middle of a batch.
    The runtime's warm-up batches (made up, of no partition) pass at once."""
    if context.partitions:
        time.sleep(1.5)
    return df


def slower_than_max_poll(df: DataFrame, context: Any) -> DataFrame:
    """The batch unchanged, after 7 s: longer than a max.poll.interval.ms of 6 s. The
    runtime's warm-up batches (made up, of no partition: three rounds of them before the first
    real batch) pass at once."""
    if context.partitions:
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



_first_real_batch_done = False


def slow_first_real_batch(df: DataFrame, context: Any) -> DataFrame:
    """The batch unchanged; the process's first batch of real records (after the runtime's
    warm-up) takes `SLOW_FIRST_BATCH_S` seconds (env, default 120): a cold JVM meeting a
    backlog, longer than the stall detector's 60 s bound for a fresh process."""
    global _first_real_batch_done
    import os

    if not _first_real_batch_done and df.filter(F.col("topic") != F.lit(WARM_UP_TOPIC)).count():
        _first_real_batch_done = True
        time.sleep(float(os.environ.get("SLOW_FIRST_BATCH_S", "120")))
    return df


def fail_on_real_records_in_member_0(df: DataFrame, context: Any) -> DataFrame:
    """`fail_on_real_records` in the process of member 0 (instance id `<group>-0`) only, the
    identity elsewhere: a revision the roller takes to on member 1 and that fails on member 0,
    the second member it restarts."""
    import os

    if os.environ.get("STATICFLEET_GROUP_INSTANCE_ID", "").endswith("-0"):
        return fail_on_real_records(df, context)
    return df
