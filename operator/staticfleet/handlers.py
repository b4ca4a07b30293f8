"""Kopf handlers: thin. They keep an index of member pods, keep one daemon per ConsumerGroup that
runs `service.reconcile` whenever a pass is due, and wake it when something changes.

Level, not edge: every pass is the same whole pass. A pass is due when the ConsumerGroup's spec
(or its restart annotation) changed, when one of its member pods changed, when one of its other
children drifted from what the operator applied (someone changed or deleted it), when its Kafka
group's answer in its cluster's batched reads changed (`observe.clusterpool` tells
`Runner.wake_owners`: its state, members, assignments, coordinator, topics, or a describe that
fails), when the previous pass asked to look again (rollouts do, every second or so), and
otherwise after `RESYNC_S` (10 s) while the group is busy, or `REST_RESYNC_S` (60 s) once a pass
found it at rest (`decisions.pace`: nothing under way, nothing changed, nothing wrong; not
autoscaled). A group at rest so costs one pass, and one `/status` read per member, a minute: what
only its members' `/status` or the clock would show (a member that stops fetching, a timeout's
lowering) is seen at the latest then, or when the plan's deadline says (`Plan.deadline_s`).

Nothing is written at rest: the children the operator server-side-applies (ConfigMap, Service,
PodDisruptionBudget, and the NetworkPolicy when it makes one) are watched, as controller-runtime's
`Owns()` does, and `apply.Kube.noticed` tells the operator's own writes from drift; only drift
wakes the group, whose pass applies the child again. No timer re-applies them.

Cheap at scale: member pods come from a watch-backed Kopf index (no LIST per pass); the passes
run in a bounded thread pool, and one Kafka cluster's groups take at most `PER_CLUSTER` of its
workers, so a slow or dead cluster does not delay the groups of the others (a cluster is
known by its id once read, before by its normalized address set, `decisions.clusters`: two
spellings of one cluster share its workers). The watches filter
on the API server (kopf's `settings.watching.label_selectors`): member pods and the other
children by their labels (`OWNED_SELECTOR`), and for a sharded operator the ConsumerGroups by
its shard's selector (`decisions.shards`).

Sharded, a group whose label moves it to another shard leaves this shard's watch: the API
server sends a DELETED event though nothing was deleted. kopf forgets the object then but does
not stop its daemon (it stops daemons only for a deletion it sees coming, `deletionTimestamp`),
so `group_changed` marks the group's slot as left: its daemon ends after the pass under way,
clears `status.shard` (the new shard waits for that, `decisions.shards.handoff`) and forgets
what it kept of the group. It deletes nothing: the member pods run on for the new shard. A watch
that had to list again (HTTP 410) sends no DELETED for a group that left meanwhile, so each daemon
also reads its group back every `OWNERSHIP_CHECK_S` (5 minutes; at its next pass, so up to a rest
interval later) and stops the same way. The pod index is not sharded: every shard keeps every
member pod, so the pods of a group that arrives are known at once (a shard label copied onto
pods would lag behind the group's, and the new shard would see the group without its pods). Nor
is the children's watch: every shard sees every child, and `noticed` answers only for those it
applied, so only a group it holds wakes.

A ConsumerGroup deleted is held by the finalizer kopf puts on it for its daemon: the delete
handler (`forget`) waits for its last pass, sets back what it left on the broker (a KIP-848
group's session timeout widened mid-rollout, `service.release`), then forgets it.

A watch that had to list again sends no DELETED for a child deleted meanwhile (kopf does not
compare the new list with the old): every `CHILD_AUDIT_S` (5 minutes) one LIST per kind of child
(by `OWNED_SELECTOR`, in the watched namespaces) is held against what this operator applied
(`apply.Kube.missing`), and a child gone from it wakes its group, whose pass applies it again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from staticfleet import apply, service
from staticfleet.decisions import shards
from staticfleet.decisions.names import GROUP_LABEL, MANAGED_BY_LABEL, MANAGER
from staticfleet.decisions.settings import MEMBER_HTTP_VIA_ENV, OperatorSettings
from staticfleet.decisions.snapshot import Claimant, claim_of, group_id_of
from staticfleet.decisions.spec.model import (
    API_GROUP,
    API_VERSION,
    PLURAL,
    RESTARTED_AT_ANNOTATION,
)
from staticfleet.observe import clusterpool, kafkaadmin, memberhttp
from staticfleet.passes import REST_RESYNC_S, RESYNC_S, Key, Runner

SECRET_TTL_S = float(os.environ.get("STATICFLEET_SECRET_TTL_SECONDS", str(apply.SECRET_TTL_S)))
OWNED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGER},{GROUP_LABEL}"
"""The watches of the member pods and of the other children, filtered by the API server (the
handlers' `labels=` filter the same again, in the process)."""
OWNED: dict[str, Any] = {MANAGED_BY_LABEL: MANAGER, GROUP_LABEL: kopf.PRESENT}
CHILDREN = (("", "v1", "configmaps"), ("", "v1", "services"),
            ("policy", "v1", "poddisruptionbudgets"))
"""The children applied for every group, watched for drift (`child_changed`)."""
NETWORK_POLICIES = ("networking.k8s.io", "v1", "networkpolicies")
"""Applied, and watched, only when the operator makes NetworkPolicies (its RBAC has them only
then)."""
CHILD_AUDIT_S = float(os.environ.get("STATICFLEET_CHILD_AUDIT_SECONDS", "300"))
"""How often the children this operator applied are listed for one a relisted watch missed."""
RELEASE_RETRIES = 6

log = logging.getLogger("staticfleet")


def _plain(value: Any) -> Any:
    """Kopf's body views as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value




def _change_key(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a ConsumerGroup, when it changes, makes a pass due (not its status, but for the
    shard that holds it: a shard waiting for the group wakes when the previous one lets go)."""
    meta = body.get("metadata") or {}
    return (meta.get("generation"), (meta.get("annotations") or {}).get(RESTARTED_AT_ANNOTATION),
            meta.get("deletionTimestamp"), (body.get("status") or {}).get("shard"))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """kopf's settings and the clients the passes share. `memo.settings` and
    `memo.namespaces` come from `run.run_operator` (else the environment, all namespaces)."""
    ours: OperatorSettings = memo.get("settings") or OperatorSettings.from_env(os.environ)
    for resource in (("", "v1", "pods"), *CHILDREN):
        settings.watching.label_selectors[resource] = OWNED_SELECTOR
    if ours.member_ingress_from is not None:
        _watch_network_policies(settings)
    if (selector := shards.selector(ours.shard)) is not None:
        settings.watching.label_selectors[API_GROUP, PLURAL] = selector
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration")
    # Our own Events carry the decisions; Kopf posts only its warnings and errors.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    if ours.member_http_via is not None:
        log.warning("every member request goes to %s:%d, not to the member pods (%s: the "
                    "member simulator of a bench)", *ours.member_http_via, MEMBER_HTTP_VIA_ENV)
    memberhttp.route_through(ours.member_http_via)
    reads = clusterpool.ClusterReads(interval_s=RESYNC_S, rest_s=REST_RESYNC_S)
    memo.runner = Runner(service.Clients(
        kube=apply.Kube(apply.load_client(os.environ.get("KUBECONFIG")),
                        secret_ttl_s=SECRET_TTL_S),
        settings=ours, namespaces=memo.get("namespaces"), reads=reads))
    reads.on_change = memo.runner.wake_owners


@kopf.on.startup()
async def start_child_audit(memo: kopf.Memo, **_: Any) -> None:
    """The children's audit (`audit_children`), for as long as the operator runs."""
    kinds = [("v1", "ConfigMap"), ("v1", "Service"), ("policy/v1", "PodDisruptionBudget")]
    if memo.runner.clients.settings.member_ingress_from is not None:
        kinds.append(("networking.k8s.io/v1", "NetworkPolicy"))
    memo.child_audit = asyncio.create_task(audit_children(memo.runner, kinds, CHILD_AUDIT_S))


async def audit_children(runner: Runner, kinds: Sequence[tuple[str, str]],
                         every_s: float) -> None:
    """Every `every_s`: the children this operator applied that the API server no longer has
    (a deletion a relisted watch did not tell) wake their groups, whose passes apply them."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(every_s)
        try:
            gone = await loop.run_in_executor(
                runner.pool, runner.clients.kube.missing, kinds, OWNED_SELECTOR,
                runner.clients.namespaces)
        except (apply.ApplyError, RuntimeError) as exc:  # RuntimeError: the pool is closed
            log.warning("the audit of the groups' children could not list them: %s", exc)
            continue
        for drifted in gone:
            log.info("%s/%s: %s drifted (%s): its pass applies it again", *drifted.group,
                     drifted.child, drifted.why)
            runner.wake(drifted.group)


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    audit: asyncio.Task[None] | None = getattr(memo, "child_audit", None)
    if audit is not None:
        audit.cancel()
    runner: Runner | None = getattr(memo, "runner", None)
    if runner is not None:
        runner.close()


@kopf.index("", "v1", "pods", labels=OWNED)
async def member_pods(namespace: str | None, labels: Mapping[str, str], body: kopf.Body,
                      **_: Any) -> dict[Key, dict[str, Any]]:
    """Member pods by (namespace, ConsumerGroup), kept current by the pod watch; without their
    `managedFields`, which no pass reads (a few KiB a pod, 3,000 pods at 1,000 groups). Both
    indexes are coroutines: kopf runs a plain function in its thread pool, a hop per event, and
    at a restart every pod and group of the watch goes through them before any pass runs."""
    pod = _plain(body)
    pod["metadata"].pop("managedFields", None)
    return {(namespace or "", labels[GROUP_LABEL]): pod}


@kopf.index(API_GROUP, API_VERSION, PLURAL)
async def group_ids(body: kopf.Body, **_: Any) -> dict[str, Claimant]:
    """Every ConsumerGroup this operator watches by the Kafka group id it uses. Which of them
    are on the same cluster is decided in the pass (`snapshot.same_cluster`), with the cluster
    ids known then: an index keyed by the cluster would keep what was known at the object's
    last event. Sharded, that is this shard's; a pass adds the other shards' (`claims`)."""
    return {group_id_of(body): claim_of(body)[1]}


@kopf.on.event("", "v1", "pods", labels=OWNED)
async def member_pod_changed(namespace: str | None, labels: Mapping[str, str],
                             body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A member pod changed (ready, deleted, ...): its ConsumerGroup's pass is due. When its
    process closed is kept, because the pod may be gone before that pass."""
    memo.runner.memory.exits.note_closed(_plain(body))
    memo.runner.wake((namespace or "", labels[GROUP_LABEL]))


@kopf.on.event(*CHILDREN[0], labels=OWNED)
@kopf.on.event(*CHILDREN[1], labels=OWNED)
@kopf.on.event(*CHILDREN[2], labels=OWNED)
async def child_changed(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """A child the operator applies changed or went. When it no longer holds what was applied
    (someone changed a field the operator sets, or deleted it), its group's pass is due, and
    applies it again; the operator's own writes wake nothing."""
    drifted = memo.runner.clients.kube.noticed(event["object"], gone=event["type"] == "DELETED")
    if drifted is not None:
        log.info("%s/%s: %s drifted (%s): its pass applies it again", *drifted.group,
                 drifted.child, drifted.why)
        memo.runner.wake(drifted.group)


def _watch_network_policies(settings: kopf.OperatorSettings) -> None:
    """Watch the members' NetworkPolicies like the other children: only when the operator makes
    them (its RBAC may not let it watch them otherwise), so registered at startup, before the
    operator's watches start."""
    settings.watching.label_selectors[NETWORK_POLICIES] = OWNED_SELECTOR
    _register_network_policy_watch()


@functools.cache
def _register_network_policy_watch() -> None:
    """Once per process (a second registration would run the handler twice per event)."""
    kopf.on.event(*NETWORK_POLICIES, labels=OWNED)(child_changed)


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
async def group_changed(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo,
                        **_: Any) -> None:
    """The spec or the restart annotation changed: a pass is due (a status write is not). A
    DELETED event: the group is gone from this operator's watch (deleted, or no longer
    selected by its shard); its daemon stops."""
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    if event["type"] == "DELETED":
        memo.runner.gone(key, meta["uid"])
    elif memo.runner.seen.get(key) != _change_key(body):
        memo.runner.wake(key)


@kopf.daemon(API_GROUP, API_VERSION, PLURAL, cancellation_timeout=5.0)
async def keep_reconciled(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                          **kwargs: Any) -> None:
    """One ConsumerGroup's passes, for as long as this operator watches it."""
    runner: Runner = memo.runner
    index: kopf.Index[Key, dict[str, Any]] = kwargs["member_pods"]
    claims: kopf.Index[str, Claimant] = kwargs["group_ids"]
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    slot = runner.enter(key, meta["uid"])
    loop = asyncio.get_running_loop()
    plain = _plain(body)
    try:
        while not stopped and not slot.left:
            slot.wake.clear()
            plain = _plain(body)
            runner.seen[key] = _change_key(plain)
            first = not slot.acting and slot.waiting_since is None
            turn = runner.turn(slot, plain, loop.time())
            if turn.message and (turn.act or first):
                log.log(logging.WARNING if turn.act else logging.INFO, "%s/%s: %s", *key,
                        turn.message)
            if not turn.act:
                await _sleep(slot.wake, stopped, turn.wait_s)
                continue
            await runner.check(slot, plain, loop.time())
            if slot.left:
                break
            pods = list(index.get(key, []))
            claimants = tuple(claims.get(group_id_of(plain), []))
            slot.in_pass = True
            due = await runner.run(plain, pods, claimants, slot)
            slot.in_pass = False
            if due.at_rest != slot.resting:
                slot.resting = due.at_rest
                log.debug("%s/%s: next pass in %.0f s unless woken (%s)", *key, due.delay_s,
                          due.why)
            await _sleep(slot.wake, stopped, due.delay_s)
    finally:
        runner.leave(key, slot)
        await runner.let_go(plain, slot)


async def _sleep(wake: asyncio.Event, stopped: kopf.DaemonStopped, delay: float) -> None:
    """Until woken, stopped, or `delay` seconds passed."""

    async def until_stopped() -> None:
        await stopped.wait()

    waits = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(until_stopped())}
    try:
        await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


@kopf.on.delete(API_GROUP, API_VERSION, PLURAL, optional=True, retries=RELEASE_RETRIES)
async def forget(namespace: str | None, name: str, uid: str, body: kopf.Body, memo: kopf.Memo,
                 retry: int, **_: Any) -> None:
    """A ConsumerGroup deleted: what it left on the broker is set back (`Runner.release`: a
    widened session timeout) while the daemon's finalizer still holds it, then what the
    process kept of it is forgotten. A broker that does not answer is asked again
    `RELEASE_RETRIES` times, 5 s apart; then, or when its credentials are gone, the deletion
    goes on and the log says what was left behind."""
    if namespace is None:
        return
    runner: Runner = memo.runner
    try:
        done = await runner.release(_plain(body))
        if done is not None:
            log.info("%s/%s deleted: %s", namespace, name, done)
    except kafkaadmin.KafkaUnavailable as exc:
        if retry + 1 < RELEASE_RETRIES:
            raise kopf.TemporaryError(f"the broker did not answer: {exc}", delay=5.0) from exc
        log.warning("%s/%s deleted: its group's widened session timeout was not set back "
                    "(%s); set consumer.session.timeout.ms yourself", namespace, name, exc)
    except apply.ApplyError as exc:
        log.warning("%s/%s deleted: its group's widened session timeout was not set back, "
                    "its Kafka credentials cannot be read (%s)", namespace, name, exc)
    runner.forget(namespace, name, uid)
