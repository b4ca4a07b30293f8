"""One reconcile pass of a ConsumerGroup, in three steps: gather, decide, execute.

1. `gather` reads one immutable `Snapshot`: the ConsumerGroup (with the status this operator
   last wrote), its member pods (from the handlers' watch-backed index, no API request), the
   members' `/status`, and from Kafka the group, the subscribed topics' partition counts,
   the broker's timeout bounds (cached per cluster, `memory.Caches`) and, on this process's
   first pass of a KIP-848 group, the group's session timeout as the broker holds it
   (`memory.SessionReads`), and the members' token from its Secret (`credentials`). While
   that Secret is missing, gather draws a new random token for the plan to create it with:
   randomness stays out of `decide`, and a token is made once (the next pass reads it back
   from the Secret). A sharded operator also lists the ConsumerGroups of other shards that use
   the same Kafka group (`claims`).
2. `plan.decide(snapshot)` decides everything (pure, table-tested).
3. `execute` carries the plan out through `apply` and `observe`, in order: group configs,
   children, pod annotations, calls to members, the warm handoffs' switches
   (`switchover`), pod creations, pod deletions; the status is written ahead of the first of
   these acts that leaves something outside the API server (the group configs, a member call,
   a switchover, a pod deletion: a journal to resume from); then the status (only when it
   changed), the Events, the metrics, and one log line per action with its reasons. It
   decides nothing; an action the API server or the broker refuses turns the pass into a
   Degraded one (`plan.degraded`).

A ConsumerGroup being deleted gets one more call, `release`: what it left on the broker (a
widened session timeout) is set back.

The clients the passes share are a `Clients`; what they remember between passes (own writes,
member exits, tokens, refusals, answers, caches) is a `memory.Memory`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from staticfleet import apply, claims, credentials, failpoints, kafkaview, metrics, switchover
from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Plan, summarize
from staticfleet.decisions.autoscaler import rules as autoscaler
from staticfleet.decisions.memberreport import MemberReport
from staticfleet.decisions.members.observed import pod_ended, still_running
from staticfleet.decisions.names import member_token_secret_name
from staticfleet.decisions.plan import decide, degraded, without_nulls
from staticfleet.decisions.settings import OperatorSettings
from staticfleet.decisions.snapshot import Claimant, Problem, Snapshot, same_cluster
from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts import widening
from staticfleet.memory import Memory
from staticfleet.observe import clusterpool, kafkaadmin, kafkareads, memberhttp, memberreads
from staticfleet.statuspatch import merge_patch

TOPIC_RETRY_S = 10.0
COORDINATOR_RETRY_S = 1.0
"""A moving coordinator is asked again soon (it answers within seconds), not with a backoff."""

log = logging.getLogger("staticfleet")


@dataclass
class Clients:
    """The clients shared by all passes, and the operator's settings (made at operator startup,
    closed at cleanup). What the passes remember is apart (`memory.Memory`)."""

    kube: apply.Kube
    settings: OperatorSettings = field(default_factory=OperatorSettings)
    namespaces: tuple[str, ...] | None = None
    """The namespaces the operator watches (None: all), where a sharded operator lists the
    other shards' ConsumerGroups."""
    admins: kafkaadmin.AdminPool = field(default_factory=kafkaadmin.AdminPool)
    reads: clusterpool.ClusterReads = field(default_factory=clusterpool.ClusterReads)
    """Every cluster's groups read together (issue 37), where kafka-python can: the group,
    its offsets and its topics, which the admin clients then read only where these did not."""
    member_reads: memberreads.MemberReads = field(
        default_factory=lambda: memberreads.MemberReads(_read_status))
    """Every group's member `/status` reads, on workers shared fairly between groups."""
    listings: claims.Listings = field(default_factory=claims.Listings)
    """Sharded: which groups the API server listed alone on their Kafka group, and when."""

    def forget(self, uid: str) -> None:
        """ConsumerGroup `uid` is deleted: the API client drops what it cached of it, the
        cluster's reads its group, the claim listings it."""
        self.kube.forget(uid)
        self.reads.forget(uid)
        self.listings.forget(uid)

    def close(self) -> None:
        self.member_reads.close()
        self.reads.close()
        self.admins.close()
        self.kube.close()


def reconcile(body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], clients: Clients,
              memory: Memory, now: datetime, claimants: tuple[Claimant, ...] = ()) -> Plan:
    """One level-triggered pass over the ConsumerGroup `body` with its member `pods`;
    `claimants`: every ConsumerGroup that uses the same Kafka group on the same cluster."""
    started = time.monotonic()
    snap, admin = gather(body, pods, clients, memory, now, claimants)
    plan = decide(snap)
    return execute(snap, plan, admin, clients, memory, started)


# --- gather ---------------------------------------------------------------------------------


def gather(body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], clients: Clients,
           memory: Memory, now: datetime, claimants: tuple[Claimant, ...] = ()
           ) -> tuple[Snapshot, kafkaadmin.Admin | None]:
    """The snapshot of one pass, and the admin client of the group's cluster (to execute)."""
    uid = body["metadata"]["uid"]
    written = memory.own.last_status(uid)
    if written is not None:
        body = {**body, "status": written}
    pods = memory.own.overlay(pods, uid)
    base = Snapshot(body=body, now=now, settings=clients.settings)
    try:
        spec = ConsumerGroupSpec.from_body(
            body, allow_testing=clients.settings.allow_testing_annotations)
    except SpecError as exc:
        return replace(base, problem=Problem(c.INVALID_SPEC, str(exc))), None
    namespace = body["metadata"]["namespace"]
    conf: dict[str, str] = {}
    rolling = bool(((body.get("status") or {}).get("rollout") or {}).get("inFlight"))
    try:
        conf = credentials.admin_conf(spec, namespace, clients.kube)
        admin = clients.admins.get(conf)
        broker_config, bounds_denied = memory.caches.broker_bounds(admin)
        # The cluster's id is known once its bounds were read (describing the cluster): the
        # claimants on the same cluster, however their lists are spelled.
        ids = clients.admins.identities()
        claimants = same_cluster(claimants, body, ids)
        if clients.settings.shard is not None:
            claimants = claims.across_shards(body, claimants, clients.kube, clients.namespaces,
                                             clients.listings, ids)
        group_session_ms = _group_session(admin, spec, uid, memory)
        reader, held = kafkaview.cluster_read(spec, conf, pods, rolling, uid, clients.reads)
        topics = kafkaview.topics(admin, spec, held)
        partitions = topics.counts
        token, token_missing = credentials.member_token(spec, clients.kube)
    except kafkareads.TopicMissing as exc:
        return _failed(base, spec, Problem(c.TOPIC_MISSING, str(exc), TOPIC_RETRY_S))
    except kafkaadmin.KafkaUnavailable as exc:
        return _failed(base, spec, credentials.kafka_problem(spec, exc, conf))
    except apply.SecretMissing as exc:
        return _failed(base, spec, Problem(
            c.SECRET_MISSING, str(exc),
            credentials.SECRET_RETRY_S))
    except apply.ApplyError as exc:
        return _failed(base, spec, Problem(
            c.API_ERROR, f"the API server refused a request: {exc}"))
    problem: Problem | None = None
    group = None
    try:
        group = kafkaview.described(admin, spec, held, seen_before=bool(
            (body.get("status") or {}).get("groupState")))
    except kafkaadmin.CoordinatorMoving as exc:
        # The members keep serving and a handoff under way still needs its activation: the
        # pass goes on with what it sees of the pods, and steers only that (`plan.degraded`).
        problem = Problem(c.COORDINATOR_MOVING, (
            f"{exc} (a broker restarted or a leader election moved it); the members find the "
            "new coordinator by themselves, handoffs under way go on, nothing new starts until "
            "the group answers again"), COORDINATOR_RETRY_S)
    except kafkaadmin.KafkaUnavailable as exc:
        return _failed(base, spec, credentials.kafka_problem(spec, exc, conf))
    # A pod that ended runs no process; its address may already be another pod's.
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and not pod_ended(p)]
    for pod in pods:
        memory.exits.note_closed(pod)
    closed_by_pod, final_batches = memory.exits.seen()
    # Members being stopped are read too while their process runs: a warm handoff's processing
    # gap starts at the old process's last batch.
    running = live + [p for p in pods if still_running(p, closed_by_pod)]
    statuses, slow = _member_statuses(running, clients, memory, uid)
    lag = None
    if group is not None:
        lag = memory.caches.lag_reads.lag(
            admin, spec.kafka.group_id, partitions, statuses.values(),
            known=group.state != "Dead", rolling=rolling,
            autoscaling=spec.autoscaling is not None, owner=uid,
            offsets=None if reader is None or held is None else clusterpool.GroupOffsets(
                reader, spec.kafka.group_id))
    snap = Snapshot(body=body, now=now, spec=spec, pods=tuple(pods),
                    statuses=statuses, slow_members=slow, group=group,
                    partitions=partitions,
                    closed_by_pod=closed_by_pod, final_batches=final_batches,
                    claimants=claimants, broker_config=broker_config,
                    bounds_denied=bounds_denied, group_session_ms=group_session_ms,
                    lag=lag.by_partition if lag is not None else None,
                    lag_age_s=lag.age_s if lag is not None else None,
                    end_offsets=lag.ends if lag is not None else {},
                    leaderless=topics.leaderless,
                    refused=memory.refusals.unanswered(uid, pods),
                    refused_members=memory.refusals.unanswered(uid, pods, standby=False),
                    last_answers=memory.note_answers(list(statuses), pods, now),
                    member_token=token, member_token_missing=token_missing, problem=problem,
                    settings=clients.settings, kafka_watched=reader is not None,
                    coordinator=held.coordinator if held is not None else None)
    return snap, admin


def _group_session(admin: kafkaadmin.Admin, spec: ConsumerGroupSpec, uid: str,
                   memory: Memory) -> int | None:
    """A KIP-848 group's session timeout as the broker holds it, on this process's first pass
    of the group (`memory.SessionReads`): None otherwise, or when it cannot be read now (asked
    again next pass; never again when the principal may not read it)."""
    if spec.membership.protocol != "consumer" or not memory.session_reads.wanted(uid):
        return None
    try:
        return kafkareads.group_session_timeout(admin, spec.kafka.group_id)
    except kafkareads.GroupConfigsDenied as exc:
        log.warning("%s: the group's session timeout cannot be read (%s): a widening an "
                    "earlier operator left unrecorded is not seen", spec.kafka.group_id, exc)
        memory.session_reads.note(uid)
    except kafkaadmin.KafkaUnavailable as exc:
        log.info("%s: the group's session timeout was not read, asked again next pass: %s",
                 spec.kafka.group_id, exc)
    return None


def _failed(base: Snapshot, spec: ConsumerGroupSpec,
            problem: Problem) -> tuple[Snapshot, None]:
    return replace(base, spec=spec, problem=problem), None


def _member_statuses(pods: Sequence[Mapping[str, Any]], clients: Clients, memory: Memory,
                     group: str = "") -> tuple[dict[str, MemberReport], dict[str, str]]:
    """Each running pod's `/status`, by pod uid (absent when it does not answer), and why each
    pod whose process took the connection but gave no answer in time is slow, by pod uid
    (`memberreads`: the group's reads share the workers fairly with every other group's)."""
    targets = {p["metadata"]["uid"]: ip for p in pods
               if (ip := (p.get("status") or {}).get("podIP"))}
    out: dict[str, MemberReport] = {}
    slow: dict[str, str] = {}
    for uid, (read, read_at) in clients.member_reads.read(group, targets).items():
        if read.status is not None:
            out[uid] = read.status
            memory.answers.note(uid, read_at)  # its own read time, not the pass's start
        elif read.slow is not None:
            slow[uid] = read.slow
    return out, slow


def _read_status(ip: str) -> memberhttp.StatusRead:
    """A member's `/status`, within its deadline."""
    return memberhttp.read_status(ip, memberhttp.MEMBER_PORT)


# --- execute --------------------------------------------------------------------------------


def execute(snap: Snapshot, plan: Plan, admin: kafkaadmin.Admin | None, clients: Clients,
            memory: Memory, started: float) -> Plan:
    """Carry out `plan`; returns the plan that was carried out (a Degraded one when an action
    was refused). `started`: when the pass began (monotonic), for its duration metric."""
    body, kube = snap.body, clients.kube
    try:
        if plan.group_configs and admin is not None and snap.spec is not None:
            # Write ahead: the widening's record (raised, or set back) is in the status before
            # the broker is told, so an operator killed in between leaves a record whose
            # successor reads the broker's value on its first pass and sets it right
            # (`timeouts.widening`). A write the broker refuses makes the next pass read it too.
            group_id = snap.spec.kafka.group_id
            snap = _journal(snap, plan, kube, memory)
            failpoints.hit(failpoints.BEFORE_GROUP_CONFIGS)
            try:
                kafkareads.set_group_configs(admin, group_id, plan.group_configs)
            except kafkaadmin.KafkaUnavailable:
                memory.session_reads.forget(body["metadata"]["uid"])
                raise
        for child in plan.children:
            kube.apply(apply.adopt(child, body))
        for mark in plan.annotate:  # before the calls: a standby is marked, then activated
            kube.annotate_pod(snap.namespace, mark.name, mark.uid, mark.annotations)
        if plan.calls:
            # Write ahead: a scale-down's planned leave is in the status before the member is
            # asked, so the successor of an operator killed in between counts its rebalance as
            # planned, and asks again a member that does not say it is leaving
            # (`rebalance.planned`).
            snap = _journal(snap, plan, kube, memory)
            failpoints.hit(failpoints.BEFORE_MEMBER_CALLS)
        _ask_members(snap, plan, kube, memory)
        if plan.switchovers or plan.delete:
            # Write ahead: the handover is in the status before the old member is drained, and
            # a restart's in-flight record before its pod is deleted, so an operator that dies
            # (or a write that fails) after the act leaves a journal the next pass resumes
            # from: the roller finishes the switchover (`rollout.warm`), not a Preparing
            # handoff it would later fail, and counts the restart, not a pod gone missing.
            snap = _journal(snap, plan, kube, memory)
        switchover.switch_over(snap, plan, kube, memory)
        for new in plan.create:
            try:
                memory.own.wrote_pod(kube.create_pod(apply.adopt(new.pod, body)))
            except apply.ApplyError as exc:
                # A pod the API server refuses (a quota, Pod Security, a webhook) is
                # remembered and the rest of the plan goes on: a standby is the roller's to
                # handle next pass (a fallback), any other is a Degraded problem that quotes
                # the refusal (`problems.member_problems`) and is asked for again each pass.
                memory.refusals.note(body["metadata"]["uid"], new.pod["metadata"]["name"],
                                     str(exc), standby=new.standby)
                log.warning("%s/%s: the API server refused the %s pod %s: %s",
                            snap.namespace, snap.name, "standby" if new.standby else "member",
                            new.pod["metadata"]["name"], exc)
        for gone in plan.delete:
            memory.own.wrote_pod(kube.delete_pod(snap.namespace, gone.name, gone.uid))
            failpoints.hit(failpoints.AFTER_POD_DELETE)
        if plan.scale_to is not None and not kube.scale(body, plan.scale_to,
                                                        autoscaler.FIELD_MANAGER):
            log.info("%s/%s: not scaled to %d: spec.replicas changed meanwhile",
                     snap.namespace, snap.name, plan.scale_to)
            plan = _unscaled(snap, plan)
    except kafkaadmin.KafkaUnavailable as exc:  # only set_group_configs talks to Kafka here
        assert snap.spec is not None and admin is not None
        plan = degraded(snap, credentials.kafka_problem(snap.spec, exc, admin.conf))
    except apply.ApplyError as exc:
        plan = degraded(snap, Problem(c.API_ERROR, f"the API server refused a request: {exc}"))
    if snap.group_session_ms is not None and plan.metrics.error is None:
        # The broker's value was read and acted on: not read again by this process.
        memory.session_reads.note(body["metadata"]["uid"])
    prefix = f"{snap.namespace}/{snap.name}"
    for line in summarize(plan):
        log.info("%s: %s", prefix, line)
    _write_status(snap, plan, kube, memory)
    for event in plan.events:
        if event.reason == c.MEMBER_STATUS_SLOW and not memory.notices.due(
                body["metadata"]["uid"], event.reason, event.message):
            continue  # said already: the same members, slow the same way
        try:
            kube.post_event(body, event.type, event.reason, event.message)
        except apply.ApplyError as exc:
            log.warning("%s: could not post the Event %s: %s", prefix, event.reason, exc)
    metrics.export(snap.namespace, snap.name, plan.metrics, time.monotonic() - started)
    return plan


def _ask_members(snap: Snapshot, plan: Plan, kube: apply.Kube, memory: Memory) -> None:
    """Tell members to leave the group, to rejoin it or to activate (a member that does not
    answer is deleted after `rebalance.planned.LEAVE_WAIT_S`, or asked again after
    `rebalance.planned.REJOIN_RETRY_S`), with the group's token, or the one before it for a
    member whose mounted Secret still holds that. A member that refuses both makes the next
    pass read the Secret again (someone may have written a token into it)."""
    if not plan.calls:
        return
    ips, tokens = switchover.addresses(snap), switchover.tokens(snap, memory)
    for call in plan.calls:
        refused = memberhttp.ask_member(ips.get(call.pod, ""), memberhttp.MEMBER_PORT,
                                        call.action, tokens)
        if refused is None:
            continue
        log.warning("%s/%s: member %d (pod %s) did not take %s: %s", snap.namespace,
                    snap.name, call.ordinal, call.pod, call.action, refused)
        if refused.status in (401, 403) and snap.spec is not None:
            kube.forget_secret(snap.namespace, member_token_secret_name(snap.spec))


def _unscaled(snap: Snapshot, plan: Plan) -> Plan:
    """The plan as it was carried out when the autoscaler's write did not take: the status keeps
    the autoscaler's previous memory (no change counted) and its Event is not posted."""
    status = {**plan.status, "autoscaling": snap.previous.get("autoscaling")}
    return replace(plan, status=without_nulls(status), scale_to=None, events=tuple(
        e for e in plan.events if e.reason not in autoscaler.CHANGE_REASONS))


def _journal(snap: Snapshot, plan: Plan, kube: apply.Kube, memory: Memory) -> Snapshot:
    """Write the plan's status before its group configs, member calls, switchovers and pod
    deletions; the snapshot as if that status had been read (a later refusal's Degraded status
    keeps the journal; a second journal of the same pass writes nothing). Raises ApplyError
    when the status cannot be written: then no config is set, no member called, no switchover
    starts and no pod is deleted."""
    if not _write_status(snap, plan, kube, memory, raise_on_refusal=True):
        return snap
    return replace(snap, body={**snap.body, "status": without_nulls(dict(plan.status))})


def _write_status(snap: Snapshot, plan: Plan, kube: apply.Kube, memory: Memory,
                  raise_on_refusal: bool = False) -> bool:
    """Patch the status to the plan's (only what changed); whether a patch was written."""
    new = without_nulls(dict(plan.status))
    patch = merge_patch(snap.previous, new)
    if not patch:
        return False
    try:
        kube.patch_status(snap.body, patch)
    except apply.ApplyError as exc:
        if raise_on_refusal:
            raise
        log.warning("%s/%s: could not write the status: %s", snap.namespace, snap.name, exc)
        return False
    memory.own.wrote_status(snap.body["metadata"]["uid"], new)
    return True


# --- deletion -------------------------------------------------------------------------------


def release(body: Mapping[str, Any], clients: Clients, memory: Memory) -> str | None:
    """A ConsumerGroup being deleted (its last pass over): set back on the broker what it left
    there, a KIP-848 group's session timeout widened mid-rollout (`widening.left_behind`, from
    the status this process last wrote, else the body's). Returns what was done (None:
    nothing). Raises KafkaUnavailable when the broker does not answer, apply.ApplyError (or
    SecretMissing) when the client credentials cannot be read."""
    uid = body["metadata"]["uid"]
    status = memory.own.last_status(uid) or body.get("status") or {}
    record = widening.Widening.from_status((status.get("timeouts") or {}).get("widening"))
    if record is None:
        return None
    try:
        spec = ConsumerGroupSpec.from_body(
            body, allow_testing=clients.settings.allow_testing_annotations)
    except SpecError:
        return None
    if spec.membership.protocol != "consumer":
        return None
    admin = clients.admins.get(credentials.admin_conf(spec, body["metadata"]["namespace"],
                                                      clients.kube))
    group = spec.kafka.group_id
    observed = None
    if not record.raised:
        try:
            observed = kafkareads.group_session_timeout(admin, group)
        except kafkareads.GroupConfigsDenied:
            return None
    value = widening.left_behind(record, observed)
    if value is None:
        return None
    kafkareads.set_group_configs(admin, group, {kafkareads.GROUP_SESSION_CONFIG: str(value)})
    return (f"set group {group}'s session timeout back to the tuned {value} ms (the widening "
            f"was {record.state}, {record.session_timeout_ms} ms)")
