#!/usr/bin/env bash
# End-to-end check of staticfleet on a kind cluster, for machines with Docker.
#
#   e2e/kind/run.sh            # create the cluster, run the check, delete the cluster
#   KEEP_CLUSTER=1 e2e/kind/run.sh   # keep the cluster afterwards (and reuse it next time)
#
# Steps: create a kind cluster, build and load the operator and member images, start a Kafka
# broker (apache/kafka, KRaft) in the cluster, apply the CRD, helm install the chart, apply an
# example ConsumerGroup, produce records, trigger a rolling restart, and check that the group
# did not rebalance (status.rebalances of the ConsumerGroup and every member's own count).
#
# Needs: docker, kind, kubectl, helm. Settings (environment):
#   CLUSTER_NAME (staticfleet-e2e), NAMESPACE (staticfleet-e2e), OPERATOR_NAMESPACE
#   (staticfleet-system), KIND_NODE_IMAGE (kind's default), TIMEOUT_SECONDS (600),
#   RECORDS (2000), KEEP_CLUSTER (0).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"

CLUSTER_NAME="${CLUSTER_NAME:-staticfleet-e2e}"
NAMESPACE="${NAMESPACE:-staticfleet-e2e}"
OPERATOR_NAMESPACE="${OPERATOR_NAMESPACE:-staticfleet-system}"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-}"
TIMEOUT_SECONDS="${TIMEOUT_SECONDS:-600}"
RECORDS="${RECORDS:-2000}"
KEEP_CLUSTER="${KEEP_CLUSTER:-0}"
TAG="e2e"
OPERATOR_IMAGE="staticfleet/operator:${TAG}"
MEMBER_IMAGE="staticfleet/member:${TAG}"
GROUP="orders"
TOPIC="orders"
PARTITIONS=6
KAFKA_BIN="/opt/kafka/bin"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

require() {
  local tool="$1" hint="$2"
  command -v "${tool}" >/dev/null 2>&1 || die "'${tool}' is not on PATH: ${hint}"
}

check_tools() {
  require docker "install Docker (https://docs.docker.com/engine/install/) and start its daemon"
  require kind "install kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
  require kubectl "install kubectl (https://kubernetes.io/docs/tasks/tools/)"
  require helm "install Helm 3 (https://helm.sh/docs/intro/install/)"
  docker info >/dev/null 2>&1 || die "docker is installed but its daemon does not answer ('docker info' fails)"
}

kc() { kubectl --context "kind-${CLUSTER_NAME}" "$@"; }

dump_diagnostics() {
  log "diagnostics: operator log, events, broker log tail"
  kc -n "${OPERATOR_NAMESPACE}" logs deployment/staticfleet --tail=200 || true
  kc -n "${NAMESPACE}" get consumergroup "${GROUP}" -o yaml || true
  kc -n "${NAMESPACE}" get pods -o wide || true
  kc -n "${NAMESPACE}" get events --sort-by=.lastTimestamp || true
  kc -n "${NAMESPACE}" logs statefulset/kafka --tail=80 || true
}

on_exit() {
  local rc=$?
  if [[ ${rc} -ne 0 ]]; then
    dump_diagnostics
  fi
  if [[ "${KEEP_CLUSTER}" != "1" ]]; then
    log "deleting kind cluster ${CLUSTER_NAME} (KEEP_CLUSTER=1 keeps it)"
    kind delete cluster --name "${CLUSTER_NAME}" >/dev/null 2>&1 || true
  fi
  exit "${rc}"
}

# Poll `kubectl get` with a jsonpath until it prints the wanted value.
wait_for_jsonpath() {
  local what="$1" jsonpath="$2" want="$3" deadline=$((SECONDS + TIMEOUT_SECONDS)) got=""
  while ((SECONDS < deadline)); do
    got="$(kc -n "${NAMESPACE}" get "${what}" -o "jsonpath=${jsonpath}" 2>/dev/null || true)"
    [[ "${got}" == "${want}" ]] && return 0
    sleep 3
  done
  die "${what}: ${jsonpath} is '${got}', wanted '${want}' within ${TIMEOUT_SECONDS}s"
}

cg_field() { kc -n "${NAMESPACE}" get consumergroup "${GROUP}" -o "jsonpath=$1"; }

create_cluster() {
  if kind get clusters 2>/dev/null | grep -qx "${CLUSTER_NAME}"; then
    log "reusing kind cluster ${CLUSTER_NAME}"
    return
  fi
  local args=(create cluster --name "${CLUSTER_NAME}" --config "${HERE}/kind-config.yaml" --wait 120s)
  if [[ -n "${KIND_NODE_IMAGE}" ]]; then
    args+=(--image "${KIND_NODE_IMAGE}")
  fi
  log "creating kind cluster ${CLUSTER_NAME}"
  kind "${args[@]}"
}

build_images() {
  log "building ${OPERATOR_IMAGE} and ${MEMBER_IMAGE}"
  docker build -f "${REPO}/images/operator/Dockerfile" -t "${OPERATOR_IMAGE}" "${REPO}"
  docker build -f "${REPO}/images/member/Dockerfile" -t "${MEMBER_IMAGE}" "${REPO}"
  kind load docker-image --name "${CLUSTER_NAME}" "${OPERATOR_IMAGE}" "${MEMBER_IMAGE}"
}

start_kafka() {
  log "starting Kafka in namespace ${NAMESPACE}"
  kc create namespace "${NAMESPACE}" --dry-run=client -o yaml | kc apply -f -
  kc -n "${NAMESPACE}" apply -f "${HERE}/kafka.yaml"
  kc -n "${NAMESPACE}" rollout status statefulset/kafka --timeout="${TIMEOUT_SECONDS}s"
  kc -n "${NAMESPACE}" exec kafka-0 -- "${KAFKA_BIN}/kafka-topics.sh" \
    --bootstrap-server localhost:9092 --create --if-not-exists \
    --topic "${TOPIC}" --partitions "${PARTITIONS}" --replication-factor 1
}

install_operator() {
  log "applying the CRD (server-side) and installing the chart"
  kc apply --server-side -f "${REPO}/crds/"
  kc wait --for condition=established --timeout=60s crd/consumergroups.staticfleet.io
  helm --kube-context "kind-${CLUSTER_NAME}" upgrade --install staticfleet "${REPO}/charts/staticfleet" \
    --namespace "${OPERATOR_NAMESPACE}" --create-namespace \
    --set image.repository=staticfleet/operator --set image.tag="${TAG}" \
    --set image.pullPolicy=IfNotPresent \
    --set "watchNamespaces={${NAMESPACE}}" \
    --wait --timeout "${TIMEOUT_SECONDS}s"
}

apply_group() {
  log "applying ConsumerGroup ${NAMESPACE}/${GROUP}"
  kc -n "${NAMESPACE}" apply -f "${HERE}/consumergroup.yaml"
  local replicas
  replicas="$(cg_field '{.spec.replicas}')"
  wait_for_jsonpath "consumergroup/${GROUP}" '{.status.readyReplicas}' "${replicas}"
}

produce() {
  log "producing ${RECORDS} records to ${TOPIC}"
  seq 1 "${RECORDS}" | sed 's/^/record-/' | kc -n "${NAMESPACE}" exec -i kafka-0 -- \
    "${KAFKA_BIN}/kafka-console-producer.sh" --bootstrap-server localhost:9092 --topic "${TOPIC}"
}

# The number of rebalances each member took part in, from its /status endpoint.
member_rebalances() {
  local pod
  for pod in $(kc -n "${NAMESPACE}" get pods -l "staticfleet.io/group=${GROUP}" -o name); do
    printf '%s ' "${pod#pod/}"
    kc -n "${NAMESPACE}" exec "${pod#pod/}" -c member -- python -c \
      'import json, os, urllib.request; u = "http://%s:%s/status" % (os.environ["STATICFLEET_HTTP_HOST"], os.environ["STATICFLEET_HTTP_PORT"]); print(json.load(urllib.request.urlopen(u, timeout=5))["rebalances"])'
  done
}

rollout_and_check() {
  local before_rebalances before_revision before_uids after_uids replicas deadline phase
  replicas="$(cg_field '{.spec.replicas}')"
  before_rebalances="$(cg_field '{.status.rebalances}')"
  before_revision="$(cg_field '{.status.currentRevision}')"
  before_uids="$(kc -n "${NAMESPACE}" get pods -l "staticfleet.io/group=${GROUP}" -o jsonpath='{.items[*].metadata.uid}')"
  log "rebalances before the rollout: ${before_rebalances:-0}; revision ${before_revision}"

  log "triggering a rolling restart (spec.rollout.restartNonce)"
  kc -n "${NAMESPACE}" patch consumergroup "${GROUP}" --type merge \
    -p "{\"spec\":{\"rollout\":{\"restartNonce\":\"e2e-$(date +%s)\"}}}"

  deadline=$((SECONDS + TIMEOUT_SECONDS))
  while ((SECONDS < deadline)); do
    phase="$(cg_field '{.status.rollout.phase}')"
    case "${phase}" in
      AtRisk | Stopped) die "the rollout went ${phase}: $(cg_field '{.status.rollout.reason}')" ;;
    esac
    if [[ "$(cg_field '{.status.currentRevision}')" != "${before_revision}" &&
      "$(cg_field '{.status.currentRevision}')" == "$(cg_field '{.status.updateRevision}')" &&
      "${phase}" == "Complete" &&
      "$(cg_field '{.status.readyReplicas}')" == "${replicas}" ]]; then
      break
    fi
    sleep 3
  done
  ((SECONDS < deadline)) || die "the rollout did not complete within ${TIMEOUT_SECONDS}s (phase ${phase:-none})"

  after_uids="$(kc -n "${NAMESPACE}" get pods -l "staticfleet.io/group=${GROUP}" -o jsonpath='{.items[*].metadata.uid}')"
  local uid
  for uid in ${before_uids}; do
    [[ " ${after_uids} " == *" ${uid} "* ]] && die "pod ${uid} was not restarted by the rollout"
  done

  local after_rebalances
  after_rebalances="$(cg_field '{.status.rebalances}')"
  log "rebalances after the rollout: ${after_rebalances:-0}"
  [[ "${after_rebalances:-0}" == "${before_rebalances:-0}" ]] ||
    die "the group rebalanced during the rollout (${before_rebalances:-0} -> ${after_rebalances:-0})"

  local line bad=0
  while read -r line; do
    log "member ${line}"
    [[ "${line##* }" == "0" ]] || bad=1
  done < <(member_rebalances)
  ((bad == 0)) || die "a member took part in a rebalance"
}

main() {
  check_tools
  trap on_exit EXIT
  create_cluster
  build_images
  start_kafka
  install_operator
  apply_group
  produce
  rollout_and_check
  log "PASS: rolling restart of ${NAMESPACE}/${GROUP} caused zero rebalances"
}

main "$@"
