"""Transforms the tests and the benches give members by name (`module:function`): the kit is
installed with the project, so a member process imports them without a PYTHONPATH."""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import DataFrame

BATCH_CALL_S = 0.3


def latency_bound(df: DataFrame, context: Any) -> DataFrame:
    """The batch unchanged, after `BATCH_CALL_S` whatever its size: a member bound by a slow
    external call per batch (not by CPU), whose throughput grows with the member count on a
    machine of two cores."""
    time.sleep(BATCH_CALL_S)
    return df
