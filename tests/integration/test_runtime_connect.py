"""The same transform through Spark Connect gives the same output as in a local session."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.spark_connect import ConnectServer
from tests.integration.runtime_spark_helpers import (
    produce,
    running,
    runtime_config,
    wait_committed_to_end,
)
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("dump_broker_log_on_failure")]


def totals(path: Path) -> dict[bytes, tuple[int, int]]:
    """Sum the per-batch count_by_key rows written under `path` (one directory per batch)."""
    table = ds.dataset(str(path), format="parquet").to_table()
    counts: Counter[bytes] = Counter()
    sizes: Counter[bytes] = Counter()
    for row in table.to_pylist():
        counts[row["key"]] += row["count"]
        sizes[row["key"]] += row["value_bytes"]
    return {k: (counts[k], sizes[k]) for k in counts}


def test_count_by_key_through_connect_matches_local(
        kafka: KafkaBroker, make_topic: Callable[..., str], spark_connect: ConnectServer,
        tmp_path: Path) -> None:
    topic = make_topic("in", 2)
    records = [(b"k%d" % (i % 5), b"x" * (i % 13), i % 2) for i in range(1000)]
    produce(kafka.bootstrap, topic, records)
    expected: dict[bytes, tuple[int, int]] = {}
    for key, value, _ in records:
        count, size = expected.get(key, (0, 0))
        expected[key] = (count + 1, size + len(value))
    modes = {
        "local": {"mode": "local", "connectUrl": None, "master": "local[2]", "conf": {}},
        "connect": {"mode": "connect", "connectUrl": spark_connect.url, "master": None,
                    "conf": {}},
    }
    groups = {mode: unique(f"g-{mode}") for mode in modes}
    configs = {mode: runtime_config(kafka.bootstrap, groups[mode], topic,
                                    sink={"type": "parquet", "path": str(tmp_path / mode)},
                                    transform="consumer_runtime.transforms:count_by_key",
                                    max_records=300, spark=spark)
               for mode, spark in modes.items()}
    with running(configs["local"], tmp_path / "local.log", None) as local, \
            running(configs["connect"], tmp_path / "connect.log", None) as connect:
        for mode, member in (("local", local), ("connect", connect)):
            wait_committed_to_end(kafka.bootstrap, groups[mode], topic, 2, member, timeout=400)
        connect_log = connect.text()
    assert "spark session (connect) ready" in connect_log
    assert totals(tmp_path / "connect") == totals(tmp_path / "local") == expected
    assert len(list((tmp_path / "connect").iterdir())) >= 2
