"""Member pods under the real API server's PodSecurity admission: a namespace that enforces the
`restricted` Pod Security Standard admits the pods the builder makes (members and warm-handoff
replacements, with the defaults and with a user's values merged over them), and refuses a member
pod without the defaults, so the admission really is what these tests ask.

Server-side dry runs: admission runs in full, nothing is stored, no process starts (the local
node does not apply securityContext at all; see staticfleet_dev/localnode).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from staticfleet.decisions.builders import build_member_pod, member_spec_view
from staticfleet.decisions.spec.model import ConsumerGroupSpec
from staticfleet.decisions.timeouts.effective import EffectiveTimeouts
from staticfleet_dev.testkit.kube import create_namespace, kubectl
from tests.support import unique

pytestmark = pytest.mark.integration

ENFORCE = "pod-security.kubernetes.io/enforce"
TIMEOUTS = EffectiveTimeouts(45000, 3000, 300000, sources={})


@pytest.fixture(scope="module")
def restricted(kubeconfig: Path) -> Iterator[str]:
    """One namespace enforcing `restricted` (latest) for the module: dry runs store nothing,
    so the cases cannot see each other."""
    name = unique("psa")
    create_namespace(kubeconfig, name)
    kubectl(kubeconfig, "label", "namespace", name, f"{ENFORCE}=restricted",
            f"{ENFORCE}-version=latest")
    yield name
    kubectl(kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


def member_pod(namespace: str, template: dict[str, Any] | None = None, *,
               standby: bool = False) -> dict[str, Any]:
    spec = ConsumerGroupSpec.from_body({
        "apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
        "metadata": {"name": "orders", "namespace": namespace, "generation": 1},
        "spec": {"replicas": 3,
                 "kafka": {"bootstrapServers": "kafka:9092", "topics": ["orders"]},
                 "template": {"image": "staticfleet/member:0.1.0", **(template or {})}}})
    return build_member_pod(spec, 1, member_spec_view(spec, TIMEOUTS), 45000, standby=standby)


def admitted(kubeconfig: Path, namespace: str, pod: dict[str, Any]) -> tuple[bool, str]:
    proc = kubectl(kubeconfig, "-n", namespace, "create", "--dry-run=server", "-o", "name",
                   "-f", "-", input=json.dumps(pod), check=False)
    return proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("template", "standby"), [
    (None, False),
    (None, True),
    ({"securityContext": {"runAsUser": 20000, "runAsGroup": 20000, "fsGroup": 20000},
      "containerSecurityContext": {"readOnlyRootFilesystem": False,
                                   "capabilities": {"add": ["NET_BIND_SERVICE"]}}}, False),
], ids=["member", "standby replacement", "the user's values over the defaults"])
def test_a_restricted_namespace_admits_the_member_pods(
        kubeconfig: Path, restricted: str, template: dict[str, Any] | None,
        standby: bool) -> None:
    ok, said = admitted(kubeconfig, restricted, member_pod(restricted, template,
                                                          standby=standby))
    assert ok, said


def without_defaults(pod: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    del out["spec"]["securityContext"]
    del out["spec"]["containers"][0]["securityContext"]
    return out


@pytest.mark.parametrize(("change", "refused_for"), [
    (without_defaults, ("allowPrivilegeEscalation", "runAsNonRoot", "seccompProfile")),
    (lambda pod: member_pod(pod["metadata"]["namespace"], {
        "containerSecurityContext": {"allowPrivilegeEscalation": True}}),
     ("allowPrivilegeEscalation != false",)),
    (lambda pod: member_pod(pod["metadata"]["namespace"], {
        "containerSecurityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}),
     ('unrestricted capabilities', "NET_ADMIN")),
], ids=["the same pod without the defaults", "a user's escalation", "a user's capability"])
def test_a_member_pod_that_does_not_meet_the_standard_is_refused(
        kubeconfig: Path, restricted: str, change: Any, refused_for: tuple[str, ...]) -> None:
    ok, said = admitted(kubeconfig, restricted, change(member_pod(restricted)))
    assert not ok, "admitted"
    assert 'violates PodSecurity "restricted:latest"' in said, said
    for what in refused_for:
        assert what in said, said
