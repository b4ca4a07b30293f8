"""What one pass sees of its group on Kafka: the group's share of its cluster's batched reads
(`observe.clusterpool`) where they are fresh enough for this pass, else the group's own requests
(`observe.kafkareads`) through its cluster's admin client. `service.gather` asks here for the
group's topics and its describe; a fault of the batched reads costs a pass their savings only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from staticfleet.decisions.members.observed import pod_ready
from staticfleet.decisions.snapshot import GroupView
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.observe import (
    clusterheld,
    clusterpool,
    clusterreads,
    kafkaadmin,
    kafkareads,
    lagreads,
)

log = logging.getLogger("staticfleet")


def cluster_read(spec: ConsumerGroupSpec, conf: Mapping[str, str],
                 pods: Sequence[Mapping[str, Any]], rolling: bool, owner: str,
                 reads: clusterpool.ClusterReads
                 ) -> tuple[clusterreads.ClusterReader | None, clusterheld.GroupRead | None]:
    """The group's answers from its cluster's reads (`clusterpool`), as fresh as this pass
    needs them: its describe read again now while members are in flight (a rollout, a pod that
    is not Ready or is going, fewer or more pods than replicas). None where the cluster has no
    reader (its groups are read one by one meanwhile)."""
    try:
        return _read_together(spec, conf, pods, rolling, owner, reads)
    except Exception as exc:  # a fault of these reads costs this pass their savings only
        log.warning("%s/%s: the cluster's reads failed; the group is read alone: %r",
                    spec.namespace, spec.name, exc)
        return None, None


def _read_together(spec: ConsumerGroupSpec, conf: Mapping[str, str],
                   pods: Sequence[Mapping[str, Any]], rolling: bool, owner: str,
                   reads: clusterpool.ClusterReads
                   ) -> tuple[clusterreads.ClusterReader | None, clusterheld.GroupRead | None]:
    now = time.monotonic()
    reader = reads.reader(conf, now)
    if reader is None:
        return None, None
    kafka = spec.kafka
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    in_flight = rolling or len(live) != len(pods) or len(live) != spec.replicas or not all(
        pod_ready(p) for p in live)
    registration = clusterheld.Registration(
        kafka.group_id, spec.membership.protocol, tuple(kafka.topics or ()),
        None if kafka.topics is not None else kafka.topic_pattern or "",
        offsets_age_s=lagreads.max_age_s(rolling, spec.autoscaling is not None,
                                         lagreads.READ_INTERVAL_S + reader.interval_s))
    held = reads.group(reader, registration, now, clusterpool.describe_age_s(
        in_flight, reader.interval_s), owner)
    return reader, held


def topics(admin: kafkaadmin.Admin, spec: ConsumerGroupSpec,
           held: clusterheld.GroupRead | None) -> kafkareads.TopicsSeen:
    """The subscribed topics as the cluster's reads saw them, or, where they did not see them
    all, as the admin client's metadata shows them (which says what is missing)."""
    named = spec.kafka.topics
    if held is not None and held.topics is not None and not held.missing and (
            named is None or set(held.topics.counts) == set(named)):
        return held.topics
    if named is not None:
        return kafkareads.topics_seen(admin, named)
    return kafkareads.pattern_topics_seen(admin, spec.kafka.topic_pattern or "")


def described(admin: kafkaadmin.Admin, spec: ConsumerGroupSpec,
              held: clusterheld.GroupRead | None, seen_before: bool) -> GroupView:
    """The group as the cluster's reads described it. A coordinator that moved or is loading
    the group (its answer says so) is `CoordinatorMoving` at once for a group described before
    (`seen_before`: the status has its state): the pass goes on Degraded, and a coordinator
    outage costs no per-group requests. Otherwise, where the reads have no answer, the group's
    own describe (`kafkareads.describe_group`), which looks the coordinator up afresh and asks
    again for a few seconds before it says `CoordinatorMoving`: a new group's first answer on a
    fresh cluster is often COORDINATOR_NOT_AVAILABLE while the offsets topic is made (CI: a
    Warning CoordinatorMoving for a group created seconds after the broker started). A group
    the reads hold no answer for because its coordinator may be loading it
    (`Outcome.loading`) is `CoordinatorMoving` too: the per-group read would describe it
    without its members, which is what the reads' rule waits out."""
    group_id = spec.kafka.group_id
    described = held.described if held is not None else None
    if described is not None and described.outcome.view is not None:
        return described.outcome.view
    if described is not None and seen_before and (described.outcome.said_moving
                                                  or described.outcome.loading):
        # A coordinator that may be loading the group (its members vanished from one answer
        # to the next) gives a per-group read the same empty group: no fallback to that.
        raise kafkaadmin.CoordinatorMoving(
            f"describing group {group_id} at {admin.label}: {described.outcome.text}; the "
            "group's coordinator is moving")
    return kafkareads.describe_group(admin, group_id, spec.membership.protocol)
