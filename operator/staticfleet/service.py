"""One reconcile pass of a ConsumerGroup, in three steps: gather, decide, execute.

1. `gather` reads one immutable `Snapshot`: the ConsumerGroup (with the status this operator
   last wrote), its member pods (from the handlers' watch-backed index, no API request), the
   members' `/status`, and from Kafka the group, the subscribed topics' partition counts and
   the broker's timeout bounds (cached per cluster for `BOUNDS_TTL_S`), and the members' token
   from its Secret (cached as other Secrets are). While that Secret is missing, gather draws a
   new random token for the plan to create it with: randomness stays out of `decide`, and a
   token is made once (the next pass reads it back from the Secret).
2. `plan.decide(snapshot)` decides everything (pure, table-tested).
3. `execute` carries the plan out through `apply` and `observe`, in order: group configs,
   children, pod annotations, calls to members, pod creations, pod deletions; then the status
   (only when it changed), the Events, the metrics, and one log line per action with its
   reasons. It decides nothing; an action the
   API server or the broker refuses turns the pass into a Degraded one (`plan.degraded`).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from staticfleet import apply, failpoints, lagreads, metrics
from staticfleet.decisions import autoscaling, builders, kafkaclient
from staticfleet.decisions import conditions as c
from staticfleet.decisions.actions import Plan, summarize
from staticfleet.decisions.members.observed import (
    member_closed_at,
    member_last_batch_at,
    pod_ended,
    static_leave_event,
    still_running,
)
from staticfleet.decisions.names import ACTIVATED_ANNOTATION, member_token_secret_name
from staticfleet.decisions.plan import decide, degraded, without_nulls
from staticfleet.decisions.settings import OperatorSettings
from staticfleet.decisions.snapshot import Claimant, Problem, Snapshot
from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.kafka import SecretKeyRef
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.observe import kafkaadmin, kafkareads, memberhttp
from staticfleet.statuspatch import merge_patch

BOUNDS_TTL_S = 300.0
CLOSED_KEPT = 10000
WRITTEN_POD_TTL_S = 30.0
"""How long a pod this process created or deleted is taken as the API server answered, while
the watch has not shown that change yet."""
TOPIC_RETRY_S = 10.0
SECRET_RETRY_S = 15.0
COORDINATOR_RETRY_S = 1.0
ROLLOUT_LAG_AGE_S = 2.0
"""While members are in flight, the broker's figures of their group's lag are at most this old:
the roller takes lag 0 read after a member came back as its progress (`rollout.roller.progressed`);
a minute-old figure would hold the rollout back that long."""
AUTOSCALING_LAG_AGE_S = 15.0
"""With spec.autoscaling the broker's end offsets of the group's partitions are at most this
old: the lag is the larger of the members' own figure and the end offset minus their commit,
and the arrival rate is the end offsets' growth. `bench/autoscale.py --real` saw the members'
own figures (librdkafka's statistics) stay under half the target through a 4x load step while
the group fell about 20,000 records behind, which the broker showed once a member left."""
"""A moving coordinator is asked again soon (it answers within seconds), not with a backoff."""
MEMBER_PORT = builders.HTTP_PORT

log = logging.getLogger("staticfleet")


def _keep_latest(moments: dict[str, datetime]) -> None:
    """Forget all but the CLOSED_KEPT latest of `moments` (by pod uid); sorts only when over
    (the pod watch calls this on every pod event)."""
    if len(moments) <= CLOSED_KEPT:
        return
    for uid in sorted(moments, key=moments.__getitem__)[:len(moments) - CLOSED_KEPT]:
        del moments[uid]


@dataclass
class Deps:
    """Clients shared by all passes (made at operator startup, closed at cleanup)."""

    kube: apply.Kube
    settings: OperatorSettings = field(default_factory=OperatorSettings)
    admins: kafkaadmin.AdminPool = field(default_factory=kafkaadmin.AdminPool)
    lag_reads: lagreads.LagReads = field(default_factory=lagreads.LagReads)
    http_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(8, thread_name_prefix="member-status"))
    bounds: dict[str, tuple[float, tuple[dict[str, int], str | None]]] = field(
        default_factory=dict)
    written: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """The status this process last wrote, by ConsumerGroup uid (the watch may lag it)."""
    pods: dict[str, tuple[float, Mapping[str, Any]]] = field(default_factory=dict)
    """Member pods as this process last created or deleted them, by pod uid."""
    closed_by_pod: dict[str, datetime] = field(default_factory=dict)
    """When the process of a member pod being deleted closed, by pod uid: its drain's answer,
    or its exit as the pod watch saw it (the pod itself may be gone by the next pass)."""
    final_batches: dict[str, datetime] = field(default_factory=dict)
    """When a stopped process last finished a batch, by pod uid (its drain's answer or its
    clean exit's report)."""

    def note_closed(self, pod: Mapping[str, Any]) -> None:
        """A pod being deleted whose member process exited: when it closed and ended its last
        batch (`member_closed_at`, `member_last_batch_at`)."""
        closed = member_closed_at(pod)
        if closed is None:
            return
        uid = pod["metadata"]["uid"]
        last = member_last_batch_at(pod)
        with self.lock:
            known = self.closed_by_pod.get(uid)
            if known is None or closed < known:  # a drain's answer may have seen it first
                self.closed_by_pod[uid] = closed
                _keep_latest(self.closed_by_pod)
            if last is not None and uid not in self.final_batches:
                self.final_batches[uid] = last
                _keep_latest(self.final_batches)

    def note_drained(self, uid: str, at: datetime, last_batch_at: datetime | None = None) -> None:
        """The process of member pod `uid` answered a drain: its consumer closed `at`, after
        its last batch ended `last_batch_at` (both from its own clock). The answer is an
        answer: a process that drains for long is not silent (`InFlight.away_since`)."""
        with self.lock:
            self.closed_by_pod[uid] = at
            self.answers[uid] = max(at, self.answers.get(uid, at))
            _keep_latest(self.closed_by_pod)
            if last_batch_at is not None:
                self.final_batches[uid] = last_batch_at
                _keep_latest(self.final_batches)

    lock: threading.Lock = field(default_factory=threading.Lock)

    refused: dict[str, dict[str, tuple[str, bool]]] = field(default_factory=dict)
    """Pods the API server refused to create, by ConsumerGroup uid, then pod name: its answer
    and whether the pod was a standby."""
    tokens: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Each group's member tokens by ConsumerGroup uid, newest first: the one its Secret holds
    now and the one before, which members still hold until their mounted Secret is updated."""

    def member_tokens(self, owner_uid: str, current: str) -> tuple[str, ...]:
        """The tokens to try on the group's members: `current`, then the one before it."""
        with self.lock:
            known = self.tokens.get(owner_uid, ())
            if not known or known[0] != current:
                known = (current, *known[:1])
                self.tokens[owner_uid] = known
            return known
    answers: dict[str, datetime] = field(default_factory=dict)
    """When each member pod's process last answered /status, by pod uid."""

    def note_answers(self, uids: Sequence[str], pods: Sequence[Mapping[str, Any]],
                     now: datetime) -> dict[str, datetime]:
        """Record this pass's answers (each at its own read time, `_member_statuses`, else
        `now`); return the last answer of each of `pods` and of each process whose close is
        known (its pod may be gone, its last answer still dates its silence)."""
        with self.lock:
            for uid in uids:
                self.answers[uid] = max(now, self.answers.get(uid, now))
            if len(self.answers) > CLOSED_KEPT:
                for uid in sorted(self.answers, key=self.answers.__getitem__)[
                        :len(self.answers) - CLOSED_KEPT]:
                    del self.answers[uid]
            wanted = {p["metadata"]["uid"] for p in pods} | set(self.closed_by_pod)
            return {uid: at for uid, at in self.answers.items() if uid in wanted}

    def note_refusal(self, owner_uid: str, pod_name: str, message: str,
                     standby: bool = True) -> None:
        with self.lock:
            self.refused.setdefault(owner_uid, {})[pod_name] = (message[:600], standby)

    def refusals(self, owner_uid: str, pods: Sequence[Mapping[str, Any]],
                 standby: bool = True) -> dict[str, str]:
        """The refusals still unanswered of standby pods (or, `standby` False, of the
        others): a pod of that name exists now (the quota was raised) forgets its refusal."""
        names = {p["metadata"]["name"] for p in pods}
        with self.lock:
            mine = self.refused.get(owner_uid, {})
            for name in [n for n in mine if n in names]:
                del mine[name]
            return {name: said for name, (said, kind) in mine.items() if kind == standby}

    def forget(self, uid: str) -> None:
        with self.lock:
            self.written.pop(uid, None)
            self.refused.pop(uid, None)
            self.tokens.pop(uid, None)
        self.lag_reads.forget(uid)
        self.kube.forget(uid)

    def close(self) -> None:
        self.http_pool.shutdown(wait=False, cancel_futures=True)
        self.admins.close()
        self.kube.close()


def reconcile(body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], deps: Deps,
              now: datetime, claimants: tuple[Claimant, ...] = ()) -> Plan:
    """One level-triggered pass over the ConsumerGroup `body` with its member `pods`;
    `claimants`: every ConsumerGroup that uses the same Kafka group on the same cluster."""
    started = time.monotonic()
    snap, admin = gather(body, pods, deps, now, claimants)
    plan = decide(snap)
    return execute(snap, plan, admin, deps, started)


# --- gather ---------------------------------------------------------------------------------


def gather(body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], deps: Deps,
           now: datetime, claimants: tuple[Claimant, ...] = ()
           ) -> tuple[Snapshot, kafkaadmin.Admin | None]:
    """The snapshot of one pass, and the admin client of the group's cluster (to execute)."""
    uid = body["metadata"]["uid"]
    with deps.lock:
        written = deps.written.get(uid)
    if written is not None:
        body = {**body, "status": written}
    pods = _with_own_writes(body, pods, deps)
    base = Snapshot(body=body, now=now)
    try:
        spec = ConsumerGroupSpec.from_body(
            body, allow_testing=deps.settings.allow_testing_annotations)
    except SpecError as exc:
        return Snapshot(body=body, now=now, problem=Problem(c.INVALID_SPEC, str(exc))), None
    namespace = body["metadata"]["namespace"]
    conf: dict[str, str] = {}
    try:
        conf = _admin_conf(spec, namespace, deps.kube)
        admin = deps.admins.get(conf)
        broker_config, bounds_denied = _broker_config(admin, deps)
        if spec.kafka.topics is not None:
            topics = kafkareads.topics_seen(admin, spec.kafka.topics)
        else:
            topics = kafkareads.pattern_topics_seen(admin, spec.kafka.topic_pattern or "")
        partitions = topics.counts
        token, token_missing = _member_token(spec, deps.kube)
    except kafkareads.TopicMissing as exc:
        return _failed(base, spec, Problem(c.TOPIC_MISSING, str(exc), TOPIC_RETRY_S))
    except kafkaadmin.KafkaUnavailable as exc:
        return _failed(base, spec, kafka_problem(spec, exc, conf))
    except apply.SecretMissing as exc:
        return _failed(base, spec, Problem(
            c.SECRET_MISSING, str(exc),
            SECRET_RETRY_S))
    except apply.ApplyError as exc:
        return _failed(base, spec, Problem(
            c.API_ERROR, f"the API server refused a request: {exc}"))
    problem: Problem | None = None
    group = None
    try:
        group = kafkareads.describe_group(admin, spec.kafka.group_id, spec.membership.protocol)
    except kafkaadmin.CoordinatorMoving as exc:
        # The members keep serving and a handoff under way still needs its activation: the
        # pass goes on with what it sees of the pods, and steers only that (`plan.degraded`).
        problem = Problem(c.COORDINATOR_MOVING, (
            f"{exc} (a broker restarted or a leader election moved it); the members find the "
            "new coordinator by themselves, handoffs under way go on, nothing new starts until "
            "the group answers again"), COORDINATOR_RETRY_S)
    except kafkaadmin.KafkaUnavailable as exc:
        return _failed(base, spec, kafka_problem(spec, exc, conf))
    # A pod that ended runs no process; its address may already be another pod's.
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and not pod_ended(p)]
    for pod in pods:
        deps.note_closed(pod)
    with deps.lock:
        closed_by_pod = dict(deps.closed_by_pod)
        final_batches = dict(deps.final_batches)
    # Members being stopped are read too while their process runs: a warm handoff's processing
    # gap starts at the old process's last batch.
    running = live + [p for p in pods if still_running(p, closed_by_pod)]
    statuses = _member_statuses(running, deps)
    lag = None
    if group is not None:
        rolling = bool(((body.get("status") or {}).get("rollout") or {}).get("inFlight"))
        fresh = (ROLLOUT_LAG_AGE_S if rolling
                 else AUTOSCALING_LAG_AGE_S if spec.autoscaling is not None else None)
        lag = deps.lag_reads.lag(admin, spec.kafka.group_id, partitions, statuses.values(),
                                 known=group.state != "Dead", fresh_within_s=fresh, owner=uid)
    snap = Snapshot(body=body, now=now, spec=spec, pods=tuple(pods),
                    statuses=statuses, group=group, partitions=partitions,
                    closed_by_pod=closed_by_pod, final_batches=final_batches,
                    claimants=claimants, broker_config=broker_config,
                    bounds_denied=bounds_denied,
                    lag=lag.by_partition if lag is not None else None,
                    lag_age_s=lag.age_s if lag is not None else None,
                    end_offsets=lag.ends if lag is not None else {},
                    leaderless=topics.leaderless,
                    refused=deps.refusals(uid, pods),
                    refused_members=deps.refusals(uid, pods, standby=False),
                    last_answers=deps.note_answers(list(statuses), pods, now),
                    member_token=token, member_token_missing=token_missing, problem=problem,
                    settings=deps.settings)
    return snap, admin


def _member_token(spec: ConsumerGroupSpec, kube: apply.Kube) -> tuple[str, bool]:
    """The members' token as the group's Secret holds it, or a new random one while that
    Secret (or its key) is missing, for the plan to create it with; and whether it is missing."""
    held = kube.secret_key(spec.namespace, member_token_secret_name(spec),
                           builders.MEMBER_TOKEN_KEY)
    if held is not None:
        return held, False
    return secrets.token_urlsafe(32), True


def _with_own_writes(body: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
                     deps: Deps) -> list[Mapping[str, Any]]:
    """The member pods from the watch, with this process's own recent creations and deletions
    that the watch has not delivered yet (so a pass never creates or deletes a pod twice)."""
    owner = body["metadata"]["uid"]
    now = time.monotonic()
    with deps.lock:
        for uid in [u for u, (t, _) in deps.pods.items() if now - t > WRITTEN_POD_TTL_S]:
            del deps.pods[uid]
        mine = [p for _, p in deps.pods.values()
                if any(r.get("uid") == owner for r in p["metadata"].get("ownerReferences") or ())]
    return overlay_own_writes(pods, mine)


def overlay_own_writes(watched: Sequence[Mapping[str, Any]],
                       written: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`watched` pods, where a pod this process deleted still shows as live taken as deleted,
    plus pods it created that the watch does not list yet (unless one of that name is listed)."""
    mine = {p["metadata"]["uid"]: p for p in written}
    out = []
    for pod in watched:
        own = mine.pop(pod["metadata"]["uid"], None)
        if (own is not None and own["metadata"].get("deletionTimestamp")
                and not pod["metadata"].get("deletionTimestamp")):
            pod = own  # deleted by this process; the watch has not shown it yet
        out.append(pod)
    names = {p["metadata"]["name"] for p in out}
    out += [p for p in mine.values()
            if p["metadata"]["name"] not in names and not p["metadata"].get("deletionTimestamp")]
    return out


def _failed(base: Snapshot, spec: ConsumerGroupSpec,
            problem: Problem) -> tuple[Snapshot, None]:
    return Snapshot(body=base.body, now=base.now, spec=spec, problem=problem), None


def _admin_conf(spec: ConsumerGroupSpec, namespace: str, kube: apply.Kube) -> dict[str, str]:
    """The operator's own Kafka client configuration, credentials read from the Secrets. With
    `adminSecurity` the members' Secrets are looked up too: a missing one is named here rather
    than left to the pods' CreateContainerConfigError. SecretMissing says which field to fix."""
    def reader(path: str) -> Callable[[SecretKeyRef], str]:
        def value(ref: SecretKeyRef) -> str:
            try:
                return kube.secret_value(namespace, ref.name, ref.key)
            except apply.SecretMissing as exc:
                raise apply.SecretMissing(
                    f"{exc}: create it or fix the reference in {path}", exc.status) from None
        return value

    kafka = spec.kafka
    conf = kafkaclient.admin_conf(kafka, reader(kafka.operator_security_path))
    if kafka.admin_security is not None:
        members = reader("spec.kafka.security")
        for sp in kafkaclient.secret_properties(kafka.security):
            members(sp.ref)
    return conf


def kafka_problem(spec: ConsumerGroupSpec, exc: kafkaadmin.KafkaUnavailable,
                  conf: Mapping[str, str]) -> Problem:
    """Degraded for a cluster that did not answer, or that refused the operator's credentials
    or TLS handshake: then the message names the mechanism and the Secrets the credentials came
    from, and no secret value (any that the client's error might echo is redacted)."""
    security = spec.kafka.operator_security
    text = kafkaclient.redact(str(exc), kafkaclient.sensitive_values(security, dict(conf)))
    if not isinstance(exc, kafkaadmin.KafkaAuthFailed):
        return Problem(c.KAFKA_UNREACHABLE, f"Kafka unreachable: {text}")
    whose = ("the operator's own (spec.kafka.adminSecurity; the members use spec.kafka.security)"
             if spec.kafka.admin_security else "the members use the same credentials")
    return Problem(c.KAFKA_AUTHENTICATION_FAILED, (
        f"Kafka refused the {kafkaclient.mechanism(security)} connection made with "
        f"{kafkaclient.credentials(security)}: {text}; check those Secrets and the "
        f"principal on the brokers ({whose})"), SECRET_RETRY_S)


def _broker_config(admin: kafkaadmin.Admin, deps: Deps) -> tuple[dict[str, int], str | None]:
    """The cluster's group-coordinator bounds (cached), or none and why they cannot be read."""
    with deps.lock:
        cached = deps.bounds.get(admin.key)
    if cached is None or time.monotonic() - cached[0] > BOUNDS_TTL_S:
        try:
            read: tuple[dict[str, int], str | None] = (kafkareads.broker_bounds(admin), None)
        except kafkareads.BoundsDenied as exc:
            read = ({}, str(exc))
        cached = (time.monotonic(), read)
        with deps.lock:
            deps.bounds[admin.key] = cached
    return cached[1]


def _member_statuses(pods: Sequence[Mapping[str, Any]],
                     deps: Deps) -> dict[str, Mapping[str, Any]]:
    """Each running pod's `/status`, by pod uid (absent when it does not answer)."""
    try:
        futures = {p["metadata"]["uid"]: deps.http_pool.submit(_read_status, ip)
                   for p in pods if (ip := (p.get("status") or {}).get("podIP"))}
    except RuntimeError:  # the operator is shutting down: the pool is closed
        return {}
    out: dict[str, Mapping[str, Any]] = {}
    for uid, fut in futures.items():
        answer, read_at = fut.result()
        if answer is not None:
            out[uid] = answer
            with deps.lock:  # stamped with its own read time, not the pass's start
                deps.answers[uid] = max(read_at, deps.answers.get(uid, read_at))
    return out


def _read_status(ip: str) -> tuple[Mapping[str, Any] | None, datetime]:
    """A member's `/status` and when its answer came."""
    return memberhttp.read_member_status(ip, MEMBER_PORT), datetime.now(UTC)


# --- execute --------------------------------------------------------------------------------


def execute(snap: Snapshot, plan: Plan, admin: kafkaadmin.Admin | None, deps: Deps,
            started: float) -> Plan:
    """Carry out `plan`; returns the plan that was carried out (a Degraded one when an action
    was refused). `started`: when the pass began (monotonic), for its duration metric."""
    body, kube = snap.body, deps.kube
    try:
        if plan.group_configs and admin is not None and snap.spec is not None:
            kafkareads.set_group_configs(admin, snap.spec.kafka.group_id, plan.group_configs)
        for child in plan.children:
            kube.apply(apply.adopt(child, body))
        for mark in plan.annotate:  # before the calls: a standby is marked, then activated
            kube.annotate_pod(snap.namespace, mark.name, mark.uid, mark.annotations)
        _ask_members(snap, plan, deps)
        if plan.switchovers:
            # Write ahead: the handover is in the status before the old member is drained, so
            # an operator that dies (or a write that fails) between the drain and the old
            # pod's deletion leaves a journal the next pass resumes from (the roller finishes
            # the switchover: `rollout.warm`), not a Preparing handoff it would later fail.
            snap = _journal(snap, plan, deps)
        _switch_over(snap, plan, deps)
        for new in plan.create:
            try:
                _remember(deps, kube.create_pod(apply.adopt(new.pod, body)))
            except apply.ApplyError as exc:
                # A pod the API server refuses (a quota, Pod Security, a webhook) is
                # remembered and the rest of the plan goes on: a standby is the roller's to
                # handle next pass (a fallback), any other is a Degraded problem that quotes
                # the refusal (`problems.member_problems`) and is asked for again each pass.
                deps.note_refusal(body["metadata"]["uid"], new.pod["metadata"]["name"],
                                  str(exc), standby=new.standby)
                log.warning("%s/%s: the API server refused the %s pod %s: %s",
                            snap.namespace, snap.name, "standby" if new.standby else "member",
                            new.pod["metadata"]["name"], exc)
        for gone in plan.delete:
            _remember(deps, kube.delete_pod(snap.namespace, gone.name, gone.uid))
        if plan.scale_to is not None and not kube.scale(body, plan.scale_to,
                                                        autoscaling.FIELD_MANAGER):
            log.info("%s/%s: not scaled to %d: spec.replicas changed meanwhile",
                     snap.namespace, snap.name, plan.scale_to)
            plan = _unscaled(snap, plan)
    except kafkaadmin.KafkaUnavailable as exc:  # only set_group_configs talks to Kafka here
        assert snap.spec is not None and admin is not None
        plan = degraded(snap, kafka_problem(snap.spec, exc, admin.conf))
    except apply.ApplyError as exc:
        plan = degraded(snap, Problem(c.API_ERROR, f"the API server refused a request: {exc}"))
    prefix = f"{snap.namespace}/{snap.name}"
    for line in summarize(plan):
        log.info("%s: %s", prefix, line)
    _write_status(snap, plan, deps)
    for event in plan.events:
        try:
            kube.post_event(body, event.type, event.reason, event.message)
        except apply.ApplyError as exc:
            log.warning("%s: could not post the Event %s: %s", prefix, event.reason, exc)
    metrics.export(snap.namespace, snap.name, plan.metrics, time.monotonic() - started)
    return plan


def _ask_members(snap: Snapshot, plan: Plan, deps: Deps) -> None:
    """Tell members to leave the group, to rejoin it or to activate (a member that does not
    answer is deleted after `planned.LEAVE_WAIT_S`, or asked again after
    `planned.REJOIN_RETRY_S`), with the group's token, or the one before it for a member whose
    mounted Secret still holds that. A member that refuses both makes the next pass read the
    Secret again (someone may have written a token into it)."""
    if not plan.calls:
        return
    ips = {p["metadata"]["name"]: (p.get("status") or {}).get("podIP") for p in snap.pods}
    tokens = (deps.member_tokens(snap.body["metadata"]["uid"], snap.member_token)
              if snap.member_token else ())
    for call in plan.calls:
        refused = memberhttp.ask_member(ips.get(call.pod) or "", MEMBER_PORT, call.action, tokens)
        if refused is None:
            continue
        log.warning("%s/%s: member %d (pod %s) did not take %s: %s", snap.namespace,
                    snap.name, call.ordinal, call.pod, call.action, refused)
        if refused.status in (401, 403) and snap.spec is not None:
            deps.kube.forget_secret(snap.namespace,
                                    member_token_secret_name(snap.spec))


def _switch_over(snap: Snapshot, plan: Plan, deps: Deps) -> None:
    """Each warm handoff's switch (`actions.Switchover`): drain the old member; the moment it
    answers, mark the standby activated and activate it; then delete the old pod (whether the
    drain answered or not: a SIGTERM drains it too, and the standby is then activated once its
    close is seen). After an activation the deletion waits, up to `first_batch_wait_s`, for the
    replacement's first processed batch, so the old process's shutdown does not take CPU from
    that batch. The drain's answer is the old process's close, as the pod watch would have seen
    it, for the roller's next pass."""
    if not plan.switchovers:
        return
    kube = deps.kube
    ips = {p["metadata"]["name"]: (p.get("status") or {}).get("podIP") for p in snap.pods}
    tokens = (deps.member_tokens(snap.body["metadata"]["uid"], snap.member_token)
              if snap.member_token else ())
    prefix = f"{snap.namespace}/{snap.name}"
    for switch in plan.switchovers:
        old = switch.old
        began = time.monotonic()
        failpoints.hit(failpoints.BEFORE_DRAIN)
        drained = memberhttp.drain_member(ips.get(old.name) or "", MEMBER_PORT, tokens,
                                       switch.hold_ms, switch.wait_s)
        if isinstance(drained, memberhttp.Drained):
            answered = time.monotonic()
            failpoints.hit(failpoints.AFTER_DRAIN)
            deps.note_drained(old.uid, drained.drained_at, drained.last_batch_at)
            _post_leave_warning(snap, switch.ordinal, old.name, drained.static_leave, deps)
            kube.annotate_pod(snap.namespace, switch.standby, switch.standby_uid,
                              {ACTIVATED_ANNOTATION: "true"})
            refused = memberhttp.ask_member(ips.get(switch.standby) or "", MEMBER_PORT,
                                         "activate", tokens)
            failpoints.hit(failpoints.AFTER_ACTIVATION)
            log.info("%s: member %d drained in %.3f s, standby %s %s %.3f s after the drain "
                     "answered", prefix, switch.ordinal, answered - began, switch.standby,
                     "activated" if refused is None else f"refused the activation ({refused})",
                     time.monotonic() - answered)
            if refused is None and switch.first_batch_wait_s > 0:
                first = memberhttp.wait_first_batch(ips.get(switch.standby) or "", MEMBER_PORT,
                                                    switch.first_batch_wait_s)
                log.info("%s: deleting the old pod %s %s", prefix, old.name,
                         f"{first:.3f} s after the activation: the replacement processed its "
                         "first batch" if first is not None else
                         f"{switch.first_batch_wait_s:.1f} s after the activation: the "
                         "replacement has not processed a batch yet")
        else:
            log.warning("%s: member %d (pod %s) did not drain: %s; deleting it (it drains on "
                        "SIGTERM) and activating the standby once its process closed", prefix,
                        switch.ordinal, old.name, drained)
        _remember(deps, kube.delete_pod(snap.namespace, old.name, old.uid))
        failpoints.hit(failpoints.AFTER_DELETE)


def _post_leave_warning(snap: Snapshot, ordinal: int, pod: str,
                        leave: Mapping[str, Any] | None, deps: Deps) -> None:
    """A Warning when a drained member's static leave did not leave its instance id waiting
    for the replacement (`members.observed.static_leave_event`)."""
    warning = static_leave_event(ordinal, pod, leave)
    if warning is None:
        return
    reason, message = warning
    log.warning("%s/%s: %s", snap.namespace, snap.name, message)
    try:
        deps.kube.post_event(snap.body, "Warning", reason, message)
    except apply.ApplyError as exc:
        log.warning("%s/%s: could not post the Event %s: %s", snap.namespace, snap.name,
                    reason, exc)


def _unscaled(snap: Snapshot, plan: Plan) -> Plan:
    """The plan as it was carried out when the autoscaler's write did not take: the status keeps
    the autoscaler's previous memory (no change counted) and its Event is not posted."""
    status = {**plan.status, "autoscaling": snap.previous.get("autoscaling")}
    return replace(plan, status=without_nulls(status), scale_to=None, events=tuple(
        e for e in plan.events if e.reason not in autoscaling.CHANGE_REASONS))


def _remember(deps: Deps, pod: Mapping[str, Any] | None) -> None:
    if pod is not None:
        with deps.lock:
            deps.pods[pod["metadata"]["uid"]] = (time.monotonic(), pod)


def _journal(snap: Snapshot, plan: Plan, deps: Deps) -> Snapshot:
    """Write the plan's status before its switchovers; the snapshot as if that status had been
    read (a later refusal's Degraded status keeps the journal). Raises ApplyError when the
    status cannot be written: then no switchover starts."""
    if not _write_status(snap, plan, deps, raise_on_refusal=True):
        return snap
    return replace(snap, body={**snap.body, "status": without_nulls(dict(plan.status))})


def _write_status(snap: Snapshot, plan: Plan, deps: Deps,
                  raise_on_refusal: bool = False) -> bool:
    """Patch the status to the plan's (only what changed); whether a patch was written."""
    new = without_nulls(dict(plan.status))
    patch = merge_patch(snap.previous, new)
    if not patch:
        return False
    try:
        deps.kube.patch_status(snap.body, patch)
    except apply.ApplyError as exc:
        if raise_on_refusal:
            raise
        log.warning("%s/%s: could not write the status: %s", snap.namespace, snap.name, exc)
        return False
    with deps.lock:
        deps.written[snap.body["metadata"]["uid"]] = new
    return True
