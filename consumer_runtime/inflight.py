"""The batch in flight: the one batch the worker processes while the poll loop
(consumer_runtime/member.py) goes on polling, and the partitions revoked or lost while it ran
(consumer_runtime/rebalancing.py), whose offsets are then not committed.
"""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass, field

from consumer_runtime.processing import Outcome
from consumer_runtime.records import Batch
from consumer_runtime.records import TopicPartition as TP


@dataclass
class InFlight:
    batch_id: int
    records: Batch
    future: cf.Future[Outcome]
    started: float
    excluded: set[TP] = field(default_factory=set)
    """Partitions revoked or lost while the batch ran: their offsets are not committed."""

    def touches(self, partitions: set[TP]) -> bool:
        return not partitions.isdisjoint(self.records.ranges)
