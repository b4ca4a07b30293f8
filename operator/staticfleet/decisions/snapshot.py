"""What one reconcile pass saw: the immutable input of `plan.decide`.

The service gathers a `Snapshot` (Kubernetes through the watch-backed pod index and the
ConsumerGroup body, Kafka through `observe`, the members through their `/status`); everything
the pass then does is decided from it and nothing else. A gather that could not finish (the
spec is invalid, Kafka does not answer, a Secret is missing) still yields a snapshot: its
`problem` says what stopped it, and `decide` turns that into a Degraded status.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from staticfleet.decisions import clusters
from staticfleet.decisions.conditions import DEGRADED, GROUP_ID_IN_USE
from staticfleet.decisions.memberreport import MemberReport
from staticfleet.decisions.settings import OperatorSettings
from staticfleet.decisions.spec.model import ConsumerGroupSpec


@dataclass(frozen=True)
class GroupMemberView:
    """One member of the group as the broker describes it."""

    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GroupView:
    """The group as the broker describes it right now."""

    state: str
    protocol: str
    members: tuple[GroupMemberView, ...] = ()
    epoch: int | None = None
    """A KIP-848 group's epoch as its ConsumerGroupDescribe gives it (None: a classic group,
    whose DescribeGroups answer has no generation, or a read that does not give it)."""

    def by_instance(self) -> dict[str, GroupMemberView]:
        return {m.instance_id: m for m in self.members if m.instance_id}

    def by_member_id(self) -> dict[str, GroupMemberView]:
        return {m.member_id: m for m in self.members}


@dataclass(frozen=True)
class Claimant:
    """A ConsumerGroup object that uses a Kafka group id on a cluster."""

    namespace: str
    name: str
    created: str
    """Its creationTimestamp (RFC 3339): the oldest claimant keeps the group id."""
    uid: str
    holding: bool = False
    """Its status says it reconciled onto this group id already (breaks a tie of seconds)."""
    servers: str = ""
    """Its `spec.kafka.bootstrapServers` as written: which cluster that is is decided when the
    claimants are compared (`same_cluster`), with the cluster ids known by then."""


NO_IDS: Mapping[str, str] = {}


def claim_key(bootstrap_servers: str, group_id: str,
              cluster_ids: Mapping[str, str] = NO_IDS) -> tuple[str, str]:
    """One Kafka group on one cluster, however its bootstrap list is written: the cluster's
    identity (`clusters.identity`: its id once a read said it, else its normalized address
    set) and the group id."""
    return clusters.identity(bootstrap_servers, cluster_ids), group_id


def group_id_of(body: Mapping[str, Any]) -> str:
    """The Kafka group id a ConsumerGroup object uses (spec.kafka.groupId, else its name)."""
    kafka = (body.get("spec") or {}).get("kafka") or {}
    return str(kafka.get("groupId") or body["metadata"]["name"])


def claim_of(body: Mapping[str, Any], cluster_ids: Mapping[str, str] = NO_IDS
             ) -> tuple[tuple[str, str], Claimant]:
    """The Kafka group a ConsumerGroup object uses (`claim_key`) and the object as its
    claimant: holding it when its status says it reconciled onto that group id and was not
    refused it."""
    meta = body["metadata"]
    servers = str(((body.get("spec") or {}).get("kafka") or {}).get("bootstrapServers") or "")
    key = claim_key(servers, group_id_of(body), cluster_ids)
    status = body.get("status") or {}
    refused = any(cond.get("type") == DEGRADED and cond.get("status") == "True"
                  and cond.get("reason") == GROUP_ID_IN_USE
                  for cond in status.get("conditions") or ())
    holding = status.get("groupId") == key[1] and not refused
    return key, Claimant(meta["namespace"], meta["name"], meta["creationTimestamp"],
                         meta["uid"], holding, servers)


def same_cluster(claimants: tuple[Claimant, ...], body: Mapping[str, Any],
                 cluster_ids: Mapping[str, str]) -> tuple[Claimant, ...]:
    """Those of `claimants` (objects on `body`'s group id) whose cluster is `body`'s: the same
    cluster id, or before it is known the same normalized address set."""
    own = claim_of(body, cluster_ids)[0]
    return tuple(c for c in claimants
                 if claim_key(c.servers, own[1], cluster_ids) == own
                 or c.uid == body["metadata"]["uid"])


def claim_label(key: tuple[str, str]) -> str:
    """The value of `names.KAFKA_GROUP_LABEL` for the Kafka group `key`: a label value (at most
    63 characters) that two objects share only when they use the same group (a hash; the
    objects a list by it returns are compared by their `claim_key` again)."""
    return hashlib.sha256("\n".join(key).encode()).hexdigest()[:48]


@dataclass(frozen=True)
class Problem:
    """Why gathering stopped: a Degraded reason (a `conditions` constant) and a message that
    says what to do; `retry_after_s` when looking again soon can help."""

    reason: str
    message: str
    retry_after_s: float | None = None


@dataclass(frozen=True)
class Snapshot:
    """One pass's view of a ConsumerGroup and everything it owns or talks to."""

    body: Mapping[str, Any]
    """The ConsumerGroup (metadata, spec and the status as the operator last wrote it)."""
    now: datetime
    spec: ConsumerGroupSpec | None = None
    problem: Problem | None = None
    pods: tuple[Mapping[str, Any], ...] = ()
    """Every member pod of the group, terminating ones included."""
    statuses: Mapping[str, MemberReport] = field(default_factory=dict)
    """Each answering member's `/status`, by pod uid (`memberhttp.parse_status`)."""
    slow_members: Mapping[str, str] = field(default_factory=dict)
    """Member pods (by uid) whose process took the connection but gave no whole `/status`
    within its deadline (or one over the size the operator reads), and what it did: the
    process is there and slow, which on its own is never a reason to replace it."""
    group: GroupView | None = None
    partitions: Mapping[str, int] | None = None
    """Partition count of each subscribed topic."""
    closed_by_pod: Mapping[str, datetime] = field(default_factory=dict)
    """When the process of each member pod that was stopped closed, by pod uid: from the pods
    still terminating and from what the pod watch saw of pods already gone."""
    final_batches: Mapping[str, datetime] = field(default_factory=dict)
    """When the process of each stopped member pod last finished a batch, from its own clock,
    by pod uid: its drain's answer (a drained process's /status is not read again) or its
    clean exit's report."""
    claimants: tuple[Claimant, ...] = ()
    """Every ConsumerGroup the operator watches that uses this group's Kafka group id on the
    same cluster, this one included."""
    broker_config: Mapping[str, int] | None = None
    """The broker's group-coordinator bounds (`observe.kafkareads.broker_bounds`) as it reports
    them."""
    group_session_ms: int | None = None
    """A KIP-848 group's session timeout (its group config consumer.session.timeout.ms) as the
    broker holds it: read on an operator process's first pass of the group, so a value an
    operator that stopped left behind is seen (`timeouts.widening`); None otherwise."""
    bounds_denied: str | None = None
    """Why the broker's bounds could not be read (the principal may not DescribeConfigs on the
    cluster); Kafka's default bounds stand in for them."""
    last_answers: Mapping[str, datetime] = field(default_factory=dict)
    """When each member pod's process (by uid) last answered /status, as this operator process
    saw it (this pass's answers included)."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Member pods (by name) the API server refused to create on an earlier pass, with its
    answer (a quota, Pod Security admission, a webhook), as the service remembers them."""
    refused_members: Mapping[str, str] = field(default_factory=dict)
    """Member pods other than standbys (a new member, a Recreate's replacement) the API server
    refused to create on an earlier pass, by name, with its answer: a Degraded problem."""
    lag: Mapping[tuple[str, int], int] | None = None
    """Each partition's lag as the broker sees it (end offset minus committed offset), for the
    partitions the group committed; None when it could not be read."""
    lag_age_s: float | None = None
    """How old the oldest figure in `lag` is, in seconds."""
    end_offsets: Mapping[tuple[str, int], tuple[float, int]] = field(default_factory=dict)
    """The subscribed partitions' end offsets as last read from the brokers: partition ->
    (seconds since that read, end offset)."""
    leaderless: frozenset[tuple[str, int]] = frozenset()
    """The subscribed partitions that have no leader now (the brokers' metadata says -1)."""
    member_token: str | None = field(default=None, repr=False)
    """The group's member token (the bearer token its members require on POST /leave, /rejoin
    and /activate): what the Secret `<cg>-member-token` holds, or, while that Secret (or its
    key) is missing, a new random one that the gather made for the plan to create it with."""
    member_token_missing: bool = False
    """The Secret `<cg>-member-token` or its key does not exist: the plan creates it."""
    settings: OperatorSettings = field(default_factory=OperatorSettings)
    """What the operator was started with (`settings`), the same for every group."""
    coordinator: int | None = None
    """The broker that coordinates the group, as its cluster's batched reads last found it
    (None: not known, or the cluster is read group by group)."""
    kafka_watched: bool = False
    """The group's describe came from its cluster's batched reads, which wake a pass when the
    group's answer changes (`observe.clusterreads`); not when its cluster is read group by
    group (`pace.kafka_watched`)."""

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation") or 0)

    @property
    def previous(self) -> Mapping[str, Any]:
        """The status the previous pass wrote."""
        return self.body.get("status") or {}
