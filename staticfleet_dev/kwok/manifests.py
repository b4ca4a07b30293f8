"""What kwok is given, as plain data: its configuration (which Nodes it plays the kubelet of),
the Stages that move its Nodes and pods along, the fake Nodes, and what a pod (or a
ConsumerGroup's `template`) carries to be placed on them. Pure; `process` writes and starts it.

The conventions are kwok's documented ones, so a reader of kwok's docs recognises them: fake
Nodes are annotated `kwok.x-k8s.io/node: fake` (the annotation kwok is told to manage), labelled
`type: kwok`, and tainted `kwok.x-k8s.io/node=fake:NoSchedule`, so that only pods which select
them and tolerate the taint land there; nothing else (the local node's pods, a Kafka test's
pods) ever does.
"""

from __future__ import annotations

import ipaddress
from typing import Any

MANAGE_ANNOTATION = "kwok.x-k8s.io/node"
MANAGE_VALUE = "fake"
NODE_LABEL = "type"
NODE_LABEL_VALUE = "kwok"
TAINT = {"key": MANAGE_ANNOTATION, "value": MANAGE_VALUE, "effect": "NoSchedule"}

NODE_IP = "127.0.0.1"  # the host of every fake Node: this machine, as for the local node
POD_NETWORK = ipaddress.IPv4Network("127.64.0.0/10")
"""The fake Nodes' pod CIDRs, one /24 each (node i: the i-th /24), so every pod IP is unique
across Nodes. Loopback on purpose: Linux routes all of 127.0.0.0/8 to `lo`, so a connection to a
fake pod is refused at once (no process listens) instead of waiting for a timeout, and a test
may serve a fake member on a pod's address. Apart from the local node's pod IPs (127.0.1.x to
127.0.255.x, `staticfleet_dev.localnode.ids`)."""

NODE_LEASE_SECONDS = 40  # as a kubelet's; kwok renews each fake Node's Lease in kube-node-lease
DEFAULT_PODS_PER_NODE = 110  # a kubelet's default --max-pods
POD_PARALLELISM = 16
"""Pod stages kwok plays at once. kwok's default, 4, fell behind the binder with 3,000 pods
here (1,241 Ready of 1,897 bound 12 s in); with 16 Ready kept within 2 % of bound."""


def node_selector() -> dict[str, str]:
    """The label selector of the fake Nodes (a pod's `nodeSelector`)."""
    return {NODE_LABEL: NODE_LABEL_VALUE}


def toleration() -> dict[str, str]:
    """The toleration of the fake Nodes' taint."""
    return {"key": TAINT["key"], "operator": "Exists", "effect": TAINT["effect"]}


def placement() -> dict[str, Any]:
    """What a pod spec, or a ConsumerGroup's `spec.template`, carries to be placed on the fake
    Nodes: their node selector and the toleration of their taint (both plain Kubernetes)."""
    return {"nodeSelector": node_selector(), "tolerations": [toleration()]}


def node_name(prefix: str, index: int) -> str:
    return f"{prefix}{index}"


def pod_cidr(index: int) -> str:
    """The pod CIDR of fake Node `index`: the `index`-th /24 of POD_NETWORK."""
    subnets = 2 ** (24 - POD_NETWORK.prefixlen)
    if not 0 <= index < subnets:
        raise ValueError(f"fake Node index {index} outside 0..{subnets - 1}")
    base = int(POD_NETWORK.network_address) + index * 256
    return f"{ipaddress.IPv4Address(base)}/24"


def node(name: str, index: int, pods: int = DEFAULT_PODS_PER_NODE) -> dict[str, Any]:
    """Fake Node `index`: managed by kwok, selectable, tainted, with its own pod CIDR, room
    for `pods` pods (cpu and memory plenty: the bench counts pods, not resources)."""
    capacity = {"cpu": "64", "memory": "256Gi", "pods": str(pods),
                "ephemeral-storage": "1Ti"}
    cidr = pod_cidr(index)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {MANAGE_ANNOTATION: MANAGE_VALUE},
            "labels": {NODE_LABEL: NODE_LABEL_VALUE, "kubernetes.io/hostname": name,
                       "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "kubernetes.io/role": "agent"},
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "taints": [dict(TAINT)]},
        "status": {
            "capacity": capacity, "allocatable": dict(capacity),
            "addresses": [{"type": "InternalIP", "address": NODE_IP},
                          {"type": "Hostname", "address": name}],
        },
    }


def configuration(pod_parallelism: int = POD_PARALLELISM) -> dict[str, Any]:
    """kwok's own settings: manage only the annotated Nodes (never the local node), renew
    their Leases (else the node lifecycle controller would find them gone and taint them),
    play `pod_parallelism` pod stages at once.

    kwok v0.8.0 applies its documented defaults only when no KwokConfiguration is given (a
    configuration from --config without nodeLeaseParallelism stops it at start: "node leases
    parallelism must be greater than 0"), so every knob that must not be zero is set here, to
    kwok's documented default unless said otherwise."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
        "options": {
            "manageNodesWithAnnotationSelector": f"{MANAGE_ANNOTATION}={MANAGE_VALUE}",
            "nodeLeaseDurationSeconds": NODE_LEASE_SECONDS,
            "nodeIP": NODE_IP,
            "cidr": str(POD_NETWORK),  # only for a Node without a pod CIDR
            "podPlayStageParallelism": pod_parallelism,
            "nodePlayStageParallelism": 4,
            "nodeLeaseParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
            "enablePodsOnNodeSyncListPager": True,
            "enablePodsOnNodeSyncStreamWatch": False,
        },
    }


# The templates are Go templates kwok renders against the object into a strategic merge patch
# of its status. NodeConditions, NodeIPsWith and PodIPsWith are kwok's template functions
# (PodIPsWith takes the next free address of the Node's pod CIDR).
_NODE_STATUS = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
nodeInfo:
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
  operatingSystem: linux
  architecture: amd64
"""

_POD_STATUS = """\
{{ $now := Now }}
{{ $host := NodeIPsWith .spec.nodeName }}
{{ $ips := PodIPsWith .spec.nodeName (or .spec.hostNetwork false)
     .metadata.uid .metadata.name .metadata.namespace }}
phase: Running
startTime: {{ $now | Quote }}
hostIP: {{ index $host 0 | Quote }}
hostIPs:
{{ range $host }}
- ip: {{ . | Quote }}
{{ end }}
podIP: {{ index $ips 0 | Quote }}
podIPs:
{{ range $ips }}
- ip: {{ . | Quote }}
{{ end }}
conditions:
{{ range $type := splitList " " "PodReadyToStartContainers Initialized ContainersReady Ready" }}
- type: {{ $type }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  containerID: {{ printf "kwok://%s" .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
"""


def _stage(name: str, kind: str, match: list[dict[str, Any]],
           steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
        "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind},
                 "selector": {"matchExpressions": match}, "steps": steps},
    }


def _cel(expression: str) -> dict[str, Any]:
    return {"cel": {"expression": expression}}


def _status_patch(template: str) -> dict[str, Any]:
    return {"patch": {"subresource": "status", "root": "status", "type": "strategic",
                      "template": template}}


def stages() -> list[dict[str, Any]]:
    """The Stages (kwok v0.8's `steps`, and CEL or jq selectors): a fake Node becomes Ready; a
    pod bound to one becomes Running and Ready at once (its own pod IP, every container
    running; readiness gates and probes are not played); a pod being deleted is deleted for
    good at once (no grace period is played: nothing runs).

    The Node's selector is jq: kwok's CEL environment knows the Node and its status but not
    the type of a condition, so `conditions.exists(c, c.type == ...)` does not compile."""
    not_ready = {"jq": {"key": '.status.conditions[]? | select(.type == "Ready") | .status',
                        "operator": "NotIn", "values": ["True"]}}
    return [
        _stage("staticfleet-node-ready", "Node", [not_ready], [_status_patch(_NODE_STATUS)]),
        _stage("staticfleet-pod-ready", "Pod",
               [_cel("!has(self.metadata.deletionTimestamp)"),
                _cel("self.status.phase == 'Pending'")],
               [_status_patch(_POD_STATUS)]),
        _stage("staticfleet-pod-delete", "Pod", [_cel("has(self.metadata.deletionTimestamp)")],
               [{"delete": True}]),
    ]


def config_documents(pod_parallelism: int = POD_PARALLELISM) -> list[dict[str, Any]]:
    """The documents of kwok's --config file: its configuration, then the Stages."""
    return [configuration(pod_parallelism), *stages()]
