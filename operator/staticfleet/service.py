"""One reconcile pass of a ConsumerGroup: observe, decide, apply, report.

The Kopf handlers call `reconcile` and nothing else. Observation goes through `observe`
(Kafka, members) and `apply.Kube` (Kubernetes); every decision is a pure function of
`staticfleet.decisions`; this module only wires them together, in this order:

1. parse the spec (an invalid spec becomes a condition, never a crash);
2. observe Kafka (bounds, partitions, the group), the member pods and their `/status`;
3. choose the timeouts, build the children, apply them, create missing members, remove
   members beyond `replicas` (highest ordinal first);
4. advance the rollout by at most one step;
5. rebuild the status from what was observed and return it with the Events to post.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from staticfleet import apply, metrics, observe, roller
from staticfleet.decisions import builders, conditions, timeouts
from staticfleet.decisions import status as status_decisions
from staticfleet.decisions.conditions import rfc3339, set_condition
from staticfleet.decisions.model import ConsumerGroupSpec, SpecError

BOUNDS_TTL_S = 300.0
MEMBER_PORT = builders.HTTP_PORT


@dataclass
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Outcome:
    """What a pass produced: the new status, Events to post, when to look again."""

    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None


@dataclass
class Deps:
    """Clients shared by all passes (made at operator startup, closed at cleanup)."""

    kube: apply.Kube
    admins: observe.AdminPool = field(default_factory=observe.AdminPool)
    bounds_cache: dict[str, tuple[float, dict[str, int]]] = field(default_factory=dict)
    http_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(8, thread_name_prefix="member-status"))
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    locks_guard: threading.Lock = field(default_factory=threading.Lock)

    def lock_for(self, uid: str) -> threading.Lock:
        with self.locks_guard:
            return self.locks.setdefault(uid, threading.Lock())


def reconcile(body: Mapping[str, Any], deps: Deps, now: datetime) -> Outcome:
    """One level-triggered pass over a ConsumerGroup `body`."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    old_status: dict[str, Any] = dict(body.get("status") or {})
    generation = int(meta.get("generation") or 0)
    pass_ = _Pass(body=body, deps=deps, now=now, old=old_status, generation=generation,
                  namespace=namespace, name=name)
    try:
        pass_.run()
    except SpecError as exc:
        pass_.degraded(conditions.INVALID_SPEC, f"spec.{exc.field_path}: {exc}", warn=True)
        metrics.RECONCILE_ERRORS.labels(namespace, name, "InvalidSpec").inc()
    except timeouts.TimeoutRuleError as exc:
        pass_.degraded(conditions.INVALID_TIMEOUTS, str(exc), warn=True)
        metrics.RECONCILE_ERRORS.labels(namespace, name, "InvalidTimeouts").inc()
    except observe.TopicMissing as exc:
        pass_.degraded("TopicMissing", str(exc), warn=True)
        pass_.requeue = 10.0
        metrics.RECONCILE_ERRORS.labels(namespace, name, "TopicMissing").inc()
    except observe.KafkaUnavailable as exc:
        pass_.degraded(conditions.KAFKA_UNREACHABLE, f"Kafka unreachable: {exc}", warn=True)
        pass_.requeue = _backoff(old_status)
        metrics.RECONCILE_ERRORS.labels(namespace, name, "KafkaUnreachable").inc()
    except apply.SecretMissing as exc:
        pass_.degraded("SecretMissing", f"{exc}: create it or fix the reference in "
                       "spec.kafka.security", warn=True)
        pass_.requeue = 15.0
        metrics.RECONCILE_ERRORS.labels(namespace, name, "SecretMissing").inc()
    except apply.ApplyError as exc:
        pass_.degraded("ApiError", f"the API server refused a request: {exc}", warn=True)
        pass_.requeue = _backoff(old_status)
        metrics.RECONCILE_ERRORS.labels(namespace, name, "ApiError").inc()
    return Outcome(status=pass_.status, events=pass_.events, requeue_after=pass_.requeue)


def _backoff(old_status: Mapping[str, Any]) -> float:
    """Retry delay that doubles while the same failure condition persists (cap 60 s)."""
    failures = int(old_status.get("consecutiveFailures") or 0)
    return float(min(60, 2 ** min(failures + 1, 6)))


@dataclass
class _Pass:
    body: Mapping[str, Any]
    deps: Deps
    now: datetime
    old: dict[str, Any]
    generation: int
    namespace: str
    name: str
    events: list[Event] = field(default_factory=list)
    requeue: float | None = None
    status: dict[str, Any] = field(default_factory=dict)

    # --- the pass --------------------------------------------------------------------------

    def run(self) -> None:
        spec = ConsumerGroupSpec.from_body(self.body)
        kube = self.deps.kube
        kube.check_secret_keys(self.namespace, _secret_refs(spec))
        admin = self.deps.admins.get(self._admin_conf(spec))
        bounds = self._bounds(spec, admin)
        partitions = self._partitions(spec, admin)
        group = self._describe(spec, admin)
        pods = kube.member_pods(self.namespace, self.name)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        statuses = self._member_statuses(live)

        measurements = self._measurements(pods, statuses)
        previous = timeouts.EffectiveTimeouts.from_status(self.old.get("timeouts"))
        effective = timeouts.compute_timeouts(
            protocol=spec.membership.protocol, explicit=spec.membership.timeouts,
            measurements=measurements, bounds=bounds, current=previous, now=self.now,
            margin_percent=spec.membership.auto_tuning.restart_margin_percent,
            auto_tuning=spec.membership.auto_tuning.enabled)
        self._note_timeout_changes(spec, previous, effective, admin)

        view = builders.member_spec_view(spec, effective)
        for child in (builders.build_config_map(spec, effective),
                      builders.build_headless_service(spec), builders.build_pdb(spec)):
            kube.apply(apply.adopt(child, self.body))

        plan = roller.Observed.collect(spec=spec, view=view, pods=pods, statuses=statuses,
                                       group=group, now=self.now,
                                       partitions=sum(partitions.values()))
        self._scale(spec, view, effective, plan)
        rebalances, counters = self._count_rebalances(group, pods, statuses)
        step = roller.advance(spec=spec, view=view, observed=plan, effective=effective,
                              measurements=measurements, old_status=self.old,
                              rebalances_now=rebalances, now=self.now)
        self._execute(step, plan)
        self.status = self._build_status(spec, effective, measurements, partitions, step,
                                         counters)
        self._metrics(spec, effective, plan, partitions, step)
        if step.requeue_after is not None:
            self.requeue = step.requeue_after

    # --- observation -----------------------------------------------------------------------

    def _admin_conf(self, spec: ConsumerGroupSpec) -> dict[str, str]:
        sec = spec.kafka.security
        conf = {"bootstrap.servers": spec.kafka.bootstrap_servers,
                "security.protocol": sec.protocol}
        if sec.sasl is not None:
            conf["sasl.mechanism"] = sec.sasl.mechanism
            conf["sasl.username"] = self.deps.kube.secret_value(
                self.namespace, sec.sasl.username.name, sec.sasl.username.key)
            conf["sasl.password"] = self.deps.kube.secret_value(
                self.namespace, sec.sasl.password.name, sec.sasl.password.key)
        if sec.tls is not None:
            for prop, ref in (("ssl.ca.pem", sec.tls.ca), ("ssl.certificate.pem", sec.tls.cert),
                              ("ssl.key.pem", sec.tls.key)):
                if ref is not None:
                    conf[prop] = self.deps.kube.secret_value(self.namespace, ref.name, ref.key)
        return conf

    def _bounds(self, spec: ConsumerGroupSpec, admin: Any) -> timeouts.BrokerBounds:
        key = spec.kafka.bootstrap_servers
        cached = self.deps.bounds_cache.get(key)
        if cached is None or time.monotonic() - cached[0] > BOUNDS_TTL_S:
            cached = (time.monotonic(), observe.broker_bounds(admin))
            self.deps.bounds_cache[key] = cached
        raw = cached[1]
        if spec.membership.protocol == "consumer":
            d = timeouts.BrokerBounds.consumer_defaults()
            return timeouts.BrokerBounds(
                min_session_ms=raw.get("group.consumer.min.session.timeout.ms", d.min_session_ms),
                max_session_ms=raw.get("group.consumer.max.session.timeout.ms", d.max_session_ms),
                min_heartbeat_ms=raw.get("group.consumer.min.heartbeat.interval.ms",
                                         d.min_heartbeat_ms),
                max_heartbeat_ms=raw.get("group.consumer.max.heartbeat.interval.ms",
                                         d.max_heartbeat_ms))
        d = timeouts.BrokerBounds.classic_defaults()
        return timeouts.BrokerBounds(
            min_session_ms=raw.get("group.min.session.timeout.ms", d.min_session_ms),
            max_session_ms=raw.get("group.max.session.timeout.ms", d.max_session_ms))

    def _partitions(self, spec: ConsumerGroupSpec, admin: Any) -> dict[str, int]:
        if spec.kafka.topics is not None:
            return observe.partition_counts(admin, list(spec.kafka.topics))
        return observe.matching_topics(admin, spec.kafka.topic_pattern or "")

    def _describe(self, spec: ConsumerGroupSpec, admin: Any) -> observe.GroupView:
        try:
            return observe.describe_group(admin, spec.kafka.group_id)
        except observe.KafkaUnavailable as exc:
            if observe.is_unknown_group(exc):
                return observe.GroupView(state="Dead", protocol=spec.membership.protocol)
            raise

    def _member_statuses(self, pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each running pod's `/status`, by pod uid (absent when it does not answer)."""
        targets = {p["metadata"]["uid"]: (p.get("status") or {}).get("podIP") for p in pods}
        futures = {uid: self.deps.http_pool.submit(observe.member_status, ip, MEMBER_PORT)
                   for uid, ip in targets.items() if ip}
        out: dict[str, dict[str, Any]] = {}
        for uid, fut in futures.items():
            answer = fut.result()
            if answer is not None:
                out[uid] = answer
        return out

    def _measurements(self, pods: list[dict[str, Any]],
                      statuses: Mapping[str, Mapping[str, Any]]) -> timeouts.Measurements:
        """Restart samples measured in rollouts, plus each member's own join latency."""
        recorded = status_decisions.measurements_from_status(self.old.get("measurements"))
        joins = [roller.join_latency_s(p, statuses.get(p["metadata"]["uid"])) for p in pods]
        join_samples = [j for j in joins if j is not None]
        batch = [float(s.get("batchSecondsMax") or 0) for s in statuses.values()]
        p99 = [float(s["batchSecondsP99"]) for s in statuses.values()
               if s.get("batchSecondsP99") is not None]
        return timeouts.Measurements(
            restart_seconds=(*recorded.restart_seconds, *join_samples),
            batch_seconds_max=max(batch) if batch else None,
            batch_seconds_p99=max(p99) if p99 else None)

    # --- actions ---------------------------------------------------------------------------

    def _note_timeout_changes(self, spec: ConsumerGroupSpec,
                              previous: timeouts.EffectiveTimeouts | None,
                              effective: timeouts.EffectiveTimeouts, admin: Any) -> None:
        changed = effective.changed_fields(previous)
        names = {timeouts.SESSION: "session", timeouts.HEARTBEAT: "heartbeat",
                 timeouts.MAX_POLL: "max_poll"}
        for f in changed:
            metrics.TIMEOUT_CHANGES.labels(self.namespace, self.name, names[f]).inc()
        if changed and previous is not None:
            detail = ", ".join(f"{f} {previous.value(f)} -> {effective.value(f)} ms"
                               for f in changed)
            why = "; ".join(effective.reasons)
            self.events.append(Event("Normal", conditions.TIMEOUTS_CHANGED, f"{detail}: {why}"))
        if spec.membership.protocol == "consumer" and (changed or previous is None):
            observe.set_group_timeouts(admin, spec.kafka.group_id, effective.session_timeout_ms,
                                       effective.heartbeat_interval_ms)

    def _scale(self, spec: ConsumerGroupSpec, view: Any, effective: timeouts.EffectiveTimeouts,
               plan: roller.Observed) -> None:
        """Create each missing member (same identity), remove ordinals beyond replicas."""
        kube = self.deps.kube
        for ordinal in range(spec.replicas):
            if plan.pod(ordinal) is None and not plan.terminating(ordinal):
                pod = apply.adopt(builders.build_member_pod(spec, ordinal, view), self.body)
                # The session timeout this member will join with: the broker holds it to this
                # value while it restarts later, whatever the spec says by then.
                pod["metadata"].setdefault("annotations", {})[roller.SESSION_ANNOTATION] = str(
                    effective.session_timeout_ms)
                if kube.create_pod(pod) is not None:
                    plan.created.append(ordinal)
        extra = sorted((o for o in plan.ordinals() if o >= spec.replicas), reverse=True)
        for ordinal in extra:
            leaving = plan.pod(ordinal)
            if leaving is not None:
                meta = leaving["metadata"]
                kube.delete_pod(self.namespace, meta["name"], meta["uid"])
                plan.removed.append(ordinal)
        if plan.removed:
            self.events.append(Event("Normal", conditions.SCALED_DOWN,
                                     f"removed members {sorted(plan.removed)} (highest first)"))
        if plan.created and self.old.get("replicas") is not None:
            self.events.append(Event("Normal", conditions.SCALED_UP,
                                     f"created members {sorted(plan.created)}"))

    def _execute(self, step: roller.Step, plan: roller.Observed) -> None:
        for ordinal in step.restart:
            pod = plan.pod(ordinal)
            if pod is None:
                continue
            self.deps.kube.delete_pod(self.namespace, pod["metadata"]["name"],
                                      pod["metadata"]["uid"])
        for ev in step.events:
            self.events.append(Event(ev[0], ev[1], ev[2]))
        for absence in step.absences:
            metrics.MEMBER_ABSENCE.labels(self.namespace, self.name).observe(absence)
        if step.finished_seconds is not None:
            metrics.ROLLOUT_DURATION.labels(self.namespace, self.name).observe(
                step.finished_seconds)
            metrics.ROLLOUTS.labels(self.namespace, self.name, step.state.phase).inc()

    def _count_rebalances(self, group: observe.GroupView, pods: list[dict[str, Any]],
                          statuses: Mapping[str, Mapping[str, Any]]
                          ) -> tuple[int, dict[str, int]]:
        """Rebalances so far: the members' own counters (a static member's rejoin is not
        one), and a group seen leaving Stable while no counter moved."""
        total = int(self.old.get("rebalances") or 0)
        seen: dict[str, int] = dict(self.old.get("memberRebalanceCounters") or {})
        deltas = []
        counters: dict[str, int] = {}
        for pod in pods:
            uid = pod["metadata"]["uid"]
            st = statuses.get(uid)
            if st is None:
                if uid in seen:
                    counters[uid] = seen[uid]
                continue
            value = int(st.get("rebalances") or 0)
            counters[uid] = value
            deltas.append(max(0, value - seen.get(uid, 0)) if uid in seen else value)
        increase = max(deltas, default=0)
        was_stable = self.old.get("groupState") == "Stable"
        if increase == 0 and was_stable and group.state in (
                "PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
            increase = 1
        if increase:
            metrics.REBALANCES.labels(self.namespace, self.name).inc(increase)
            ready = conditions.get_condition(self.old.get("conditions") or [], conditions.READY)
            if ready and ready.get("status") == "True":
                self.events.append(Event(
                    "Warning", conditions.UNEXPECTED_REBALANCE,
                    f"the group rebalanced ({increase}) while it was Ready; state {group.state}"))
            else:
                self.events.append(Event(
                    "Normal", conditions.REBALANCED,
                    f"the group rebalanced ({increase}) while forming; state {group.state}"))
        return total + increase, counters

    # --- status ----------------------------------------------------------------------------

    def _build_status(self, spec: ConsumerGroupSpec, effective: timeouts.EffectiveTimeouts,
                      measurements: timeouts.Measurements, partitions: Mapping[str, int],
                      step: roller.Step, counters: Mapping[str, int]) -> dict[str, Any]:
        total = sum(partitions.values()) if partitions else None
        conds = status_decisions.derive_conditions(
            self.old.get("conditions") or [], group=spec, observed=step.observation,
            rollout=step.state, timeouts=effective, partitions=total, now=self.now)
        before = conditions.get_condition(self.old.get("conditions") or [],
                                          conditions.IDLE_MEMBERS)
        idle = conditions.get_condition(conds, conditions.IDLE_MEMBERS)
        if idle and idle["status"] == "True" and (not before or before.get("status") != "True"):
            self.events.append(Event("Warning", conditions.MORE_MEMBERS_THAN_PARTITIONS,
                                     str(idle["message"])))
        recorded: dict[str, Any] = dict(self.old.get("measurements") or {})
        for absence in step.absences:
            recorded = status_decisions.record_restart(recorded, absence)
        if measurements.restart_seconds:
            recorded["firstAssignmentSecondsMax"] = round(max(measurements.restart_seconds), 3)
        if measurements.batch_seconds_max is not None:
            recorded["batchSecondsMax"] = measurements.batch_seconds_max
        status = status_decisions.build_status(
            group=spec, observed=step.observation, rollout=step.state,
            update_revision=step.state.revision or "", current_revision=self.old.get(
                "currentRevision"), timeouts=effective, partitions=total,
            measurements=recorded, conditions=conds)
        status.update({"groupId": spec.kafka.group_id, "memberRebalanceCounters": dict(counters),
                       "consecutiveFailures": 0, "lastReconciled": rfc3339(self.now)})
        return status

    def degraded(self, reason: str, message: str, *, warn: bool) -> None:
        """Keep what was observed before, mark Degraded, count the failure."""
        status = dict(self.old)
        conds = list(status.get("conditions") or [])
        before = conditions.get_condition(conds, conditions.DEGRADED)
        conds = set_condition(conds, conditions.DEGRADED, "True", reason, message, self.now,
                              self.generation)
        status["conditions"] = conds
        status["observedGeneration"] = self.generation
        status["consecutiveFailures"] = int(status.get("consecutiveFailures") or 0) + 1
        status["lastReconciled"] = rfc3339(self.now)
        self.status = status
        changed = (not before or before.get("status") != "True" or before.get("reason") != reason
                   or before.get("message") != message)
        if warn and changed:
            self.events.append(Event("Warning", reason, message))

    def _metrics(self, spec: ConsumerGroupSpec, effective: timeouts.EffectiveTimeouts,
                 plan: roller.Observed, partitions: Mapping[str, int], step: roller.Step) -> None:
        ns, name = self.namespace, self.name
        metrics.GROUP_MEMBERS.labels(ns, name, "desired").set(spec.replicas)
        metrics.GROUP_MEMBERS.labels(ns, name, "ready").set(plan.ready_count())
        total = sum(partitions.values())
        metrics.GROUP_PARTITIONS.labels(ns, name).set(total)
        metrics.IDLE_MEMBERS.labels(ns, name).set(max(0, spec.replicas - total) if total else 0)
        metrics.EFFECTIVE_TIMEOUT.labels(ns, name, "session").set(
            effective.session_timeout_ms / 1000)
        metrics.EFFECTIVE_TIMEOUT.labels(ns, name, "heartbeat").set(
            effective.heartbeat_interval_ms / 1000)
        metrics.EFFECTIVE_TIMEOUT.labels(ns, name, "max_poll").set(
            effective.max_poll_interval_ms / 1000)
        at_risk = conditions.get_condition(self.status.get("conditions") or [],
                                           conditions.ROLLOUT_AT_RISK)
        metrics.ROLLOUT_IN_PROGRESS.labels(ns, name).set(
            1 if step.state.phase in ("Rolling", "AtRisk") else 0)
        metrics.ROLLOUT_AT_RISK.labels(ns, name).set(
            1 if at_risk and at_risk.get("status") == "True" else 0)


def _secret_refs(spec: ConsumerGroupSpec) -> list[tuple[str, str]]:
    sec = spec.kafka.security
    refs = []
    if sec.sasl is not None:
        refs += [(sec.sasl.username.name, sec.sasl.username.key),
                 (sec.sasl.password.name, sec.sasl.password.key)]
    if sec.tls is not None:
        refs += [(r.name, r.key) for r in (sec.tls.ca, sec.tls.cert, sec.tls.key) if r]
    return refs
