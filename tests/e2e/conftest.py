"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from staticfleet_dev.kafka import KafkaBroker
from staticfleet_dev.stream import SteadyProducer


@pytest.fixture
def stream(kafka: KafkaBroker, make_topic: Callable[..., str]) -> Iterator[dict[str, Any]]:
    """An input topic fed 100 records/s for the whole test, and an output topic."""
    topic, out = make_topic("in", 6), make_topic("out", 6)
    producer = SteadyProducer(kafka.bootstrap, topic, rate=100).start()
    yield {"topic": topic, "out": out, "producer": producer}
    producer.stop()
