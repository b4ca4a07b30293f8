"""The demo's ConsumerGroup: where it lives and what it reads (namespace, name, topics and
partitions, the members' HTTP port), and the example it starts from
(examples/consumergroup.yaml) pointed at the local environment. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NAMESPACE = "staticfleet-demo"
GROUP = "orders"
TOPIC = "orders"
DLQ_TOPIC = "orders-dlq"
PARTITIONS = 12
EXAMPLE = "consumergroup.yaml"


def demo_group(example: Mapping[str, Any], *, bootstrap: str, members: int,
               output: Path) -> dict[str, Any]:
    """The example ConsumerGroup pointed at the local broker and topic, Spark on one core (to
    spare the machine), Parquet under `output`."""
    obj: dict[str, Any] = json.loads(json.dumps(example))
    spec = obj["spec"]
    obj["metadata"]["name"] = GROUP
    obj["metadata"]["namespace"] = NAMESPACE
    spec["replicas"] = members
    spec["kafka"]["bootstrapServers"] = bootstrap
    spec["kafka"]["topics"] = [TOPIC]
    spec["processing"]["spark"]["master"] = "local[1]"
    spec["processing"]["sink"] = {"type": "parquet", "path": str(output)}
    spec["processing"]["deadLetterTopic"] = DLQ_TOPIC
    return obj
