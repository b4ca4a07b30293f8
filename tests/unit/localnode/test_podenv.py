"""Environment resolution and command building for the local node, as tables."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from staticfleet_dev import podenv
from staticfleet_dev.podenv import ConfigError, NoEntrypoint, PodContext

pytestmark = pytest.mark.unit

CTX = PodContext(node_name="local-node", pod_ip="127.0.1.7", node_cpu="2", node_memory="4Gi")
POD: dict[str, Any] = {
    "metadata": {"name": "orders-0", "namespace": "ns1", "uid": "u-1",
                 "labels": {"app": "a", "staticfleet.io/ordinal": "0"},
                 "annotations": {"staticfleet.io/revision": "r1"}},
    "spec": {"nodeName": "local-node", "serviceAccountName": "sa"},
}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(("text", "env", "expected"), [
    ("plain", {}, "plain"),
    ("$(A)", {"A": "x"}, "x"),
    ("a-$(A)-$(B)", {"A": "1", "B": "2"}, "a-1-2"),
    ("$(MISSING)", {}, "$(MISSING)"),
    ("$$(A)", {"A": "x"}, "$(A)"),
    ("$$", {}, "$"),
    ("cost $5", {}, "cost $5"),
    ("$(A", {"A": "x"}, "$(A"),
    ("$()", {}, "$()"),
    ("end$", {}, "end$"),
    ("$(A)$(A)", {"A": "y"}, "yy"),
])
def test_expand(text: str, env: dict[str, str], expected: str) -> None:
    assert podenv.expand(text, env) == expected


@pytest.mark.parametrize(("path", "expected"), [
    ("metadata.name", "orders-0"),
    ("metadata.namespace", "ns1"),
    ("metadata.uid", "u-1"),
    ("metadata.labels['staticfleet.io/ordinal']", "0"),
    ("metadata.labels['absent']", ""),
    ("metadata.annotations['staticfleet.io/revision']", "r1"),
    ("spec.nodeName", "local-node"),
    ("spec.serviceAccountName", "sa"),
    ("status.podIP", "127.0.1.7"),
    ("status.hostIP", "127.0.0.1"),
])
def test_field_ref(path: str, expected: str) -> None:
    assert podenv.field_ref_value(POD, path, CTX) == expected


def test_field_ref_unsupported() -> None:
    with pytest.raises(ConfigError, match="unsupported fieldRef"):
        podenv.field_ref_value(POD, "status.phase", CTX)


@pytest.mark.parametrize(("resources", "ref", "expected"), [
    ({}, {"resource": "limits.cpu"}, "2"),
    ({}, {"resource": "limits.memory", "divisor": "1Mi"}, "4096"),
    ({}, {"resource": "requests.cpu"}, "0"),
    ({"limits": {"cpu": "500m"}}, {"resource": "limits.cpu"}, "1"),
    ({"limits": {"cpu": "1500m"}}, {"resource": "limits.cpu", "divisor": "1m"}, "1500"),
    ({"limits": {"memory": "1Gi"}}, {"resource": "requests.memory", "divisor": "1Mi"}, "1024"),
    ({"requests": {"memory": "64M"}}, {"resource": "requests.memory"}, "64000000"),
])
def test_resource_field(resources: dict[str, Any], ref: dict[str, str], expected: str) -> None:
    assert podenv.resource_field_value({"resources": resources}, ref, CTX) == expected


CONTAINER: dict[str, Any] = {
    "name": "member",
    "envFrom": [{"configMapRef": {"name": "cm-all"}, "prefix": "CM_"},
                {"secretRef": {"name": "sec-all"}}],
    "env": [
        {"name": "LIT", "value": "v-$(CM_K1)"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cm1", "key": "k"}}},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "pw"}}},
        {"name": "EMPTY"},
        {"name": "REF_LATER", "value": "$(AFTER)"},
        {"name": "AFTER", "value": "late"},
        {"name": "LIT", "value": "override"},
    ],
}
CONFIGMAPS = {"cm-all": {"K1": "one", "bad=key": "skipped"}, "cm1": {"k": "cm-value"}}
SECRETS = {"sec-all": {"S1": b64("sec-one")}, "s1": {"pw": b64("hunter2")}}


def test_resolve_env_full() -> None:
    env = podenv.resolve_env(POD, CONTAINER, configmaps=CONFIGMAPS, secrets=SECRETS, ctx=CTX)
    assert env == {
        "CM_K1": "one", "S1": "sec-one", "LIT": "override", "POD_NAME": "orders-0",
        "FROM_CM": "cm-value", "FROM_SECRET": "hunter2", "EMPTY": "",
        "REF_LATER": "$(AFTER)", "AFTER": "late",
    }
    # literal values expand against what was defined before them
    first = podenv.resolve_env(POD, {"env": CONTAINER["env"][:1], "envFrom": CONTAINER["envFrom"]},
                               configmaps=CONFIGMAPS, secrets=SECRETS, ctx=CTX)
    assert first["LIT"] == "v-one"


def _env_var(kind: str, name: str, key: str, optional: bool | None) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "key": key}
    if optional is not None:
        ref["optional"] = optional
    return {"name": "X", "valueFrom": {kind: ref}}


@pytest.mark.parametrize(("var", "outcome"), [
    (_env_var("configMapKeyRef", "cm1", "k", None), {"X": "cm-value"}),
    (_env_var("configMapKeyRef", "nope", "k", None), 'configmap "nope" not found'),
    (_env_var("configMapKeyRef", "nope", "k", True), {}),
    (_env_var("configMapKeyRef", "cm1", "nokey", None),
     "couldn't find key nokey in ConfigMap ns1/cm1"),
    (_env_var("configMapKeyRef", "cm1", "nokey", True), {}),
    (_env_var("secretKeyRef", "s1", "pw", False), {"X": "hunter2"}),
    (_env_var("secretKeyRef", "nope", "pw", None), 'secret "nope" not found'),
    (_env_var("secretKeyRef", "nope", "pw", True), {}),
    (_env_var("secretKeyRef", "s1", "nokey", None), "couldn't find key nokey in Secret ns1/s1"),
])
def test_key_refs(var: dict[str, Any], outcome: dict[str, str] | str) -> None:
    container = {"env": [var]}
    if isinstance(outcome, str):
        with pytest.raises(ConfigError) as err:
            podenv.resolve_env(POD, container, configmaps=CONFIGMAPS, secrets=SECRETS, ctx=CTX)
        assert str(err.value) == outcome
    else:
        assert podenv.resolve_env(POD, container, configmaps=CONFIGMAPS, secrets=SECRETS,
                                  ctx=CTX) == outcome


@pytest.mark.parametrize(("src", "outcome"), [
    ({"configMapRef": {"name": "missing"}}, 'configmap "missing" not found'),
    ({"configMapRef": {"name": "missing", "optional": True}}, {}),
    ({"secretRef": {"name": "missing"}}, 'secret "missing" not found'),
    ({"secretRef": {"name": "sec-all"}, "prefix": "P_"}, {"P_S1": "sec-one"}),
])
def test_env_from(src: dict[str, Any], outcome: dict[str, str] | str) -> None:
    container = {"envFrom": [src]}
    if isinstance(outcome, str):
        with pytest.raises(ConfigError, match=outcome):
            podenv.resolve_env(POD, container, configmaps=CONFIGMAPS, secrets=SECRETS, ctx=CTX)
    else:
        assert podenv.resolve_env(POD, container, configmaps=CONFIGMAPS, secrets=SECRETS,
                                  ctx=CTX) == outcome


def test_referenced_sources() -> None:
    assert podenv.referenced_sources(CONTAINER) == ({"cm-all", "cm1"}, {"sec-all", "s1"})


@pytest.mark.parametrize(("container", "env", "expected"), [
    ({"command": ["python", "-m", "x"]}, {}, ["/venv/bin/python", "-m", "x"]),
    ({"command": ["python3"], "args": ["-c", "$(CODE)"]}, {"CODE": "pass"},
     ["/venv/bin/python", "-c", "pass"]),
    ({"command": ["staticfleet", "run"], "args": ["--id", "$(ID)", "$$(ID)"]}, {"ID": "7"},
     ["staticfleet", "run", "--id", "7", "$(ID)"]),
    ({"command": ["/usr/bin/python3"]}, {}, ["/usr/bin/python3"]),
    ({"command": ["sh", "-c", "echo $HOME"]}, {}, ["sh", "-c", "echo $HOME"]),
])
def test_build_command(container: dict[str, Any], env: dict[str, str],
                       expected: list[str]) -> None:
    assert podenv.build_command(container, env, python="/venv/bin/python") == expected


@pytest.mark.parametrize("container", [{}, {"command": []}, {"args": ["x"]}])
def test_build_command_needs_command(container: dict[str, Any]) -> None:
    with pytest.raises(NoEntrypoint, match="local node runs command only"):
        podenv.build_command(container, {}, python="/venv/bin/python")


@pytest.mark.parametrize(("base", "pod_env", "path"), [
    ({"PATH": "/usr/bin:/bin"}, {}, "/venv/bin:/usr/bin:/bin"),
    ({"PATH": "/venv/bin:/usr/bin"}, {}, "/venv/bin:/usr/bin"),
    ({"PATH": "/usr/bin"}, {"PATH": "/opt/x"}, "/venv/bin:/opt/x"),
])
def test_process_environment(base: dict[str, str], pod_env: dict[str, str], path: str) -> None:
    env = podenv.process_environment({**base, "HOME": "/root"}, {**pod_env, "A": "1"},
                                     bin_dir="/venv/bin", hostname="orders-0")
    assert env["PATH"] == path
    assert env["HOSTNAME"] == "orders-0"
    assert env["A"] == "1" and env["HOME"] == "/root"


@pytest.mark.parametrize(("spec", "notes"), [
    ({"containers": [{"name": "a"}]}, []),
    ({"containers": [{"name": "a", "volumeMounts": [
        {"name": "kube-api-access-x", "mountPath": podenv.SERVICE_ACCOUNT_MOUNT}]}]}, []),
    ({"containers": [{"name": "a", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]},
     ["volumes other than secret volumes are not supported; ignored volumeMounts: data:/data"]),
    # A secret volume is projected (not ignored); the emptyDir beside it is.
    ({"volumes": [{"name": "tok", "secret": {"secretName": "s"}}, {"name": "tmp", "emptyDir": {}}],
      "containers": [{"name": "a", "volumeMounts": [{"name": "tok", "mountPath": "/var/tok"},
                                                    {"name": "tmp", "mountPath": "/tmp"}]}]},
     ["volumes other than secret volumes are not supported; ignored volumeMounts: tmp:/tmp"]),
    ({"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]},
     ["only the first container runs; ignored: b", "init containers are not run: i"]),
    ({"securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
      "containers": [{"name": "a", "securityContext": {"readOnlyRootFilesystem": True}}]},
     ["securityContext is not applied (the process runs as the local node's user, with its "
      "capabilities, seccomp and a writable filesystem); ignored: runAsNonRoot, runAsUser, "
      "a.readOnlyRootFilesystem"]),
])
def test_unsupported_notes(spec: dict[str, Any], notes: list[str]) -> None:
    assert podenv.unsupported_notes({"spec": spec}) == notes


# --- secret volumes --------------------------------------------------------------------------

TOKEN_POD = {"spec": {
    "volumes": [{"name": "member-token", "secret": {"secretName": "orders-member-token"}},
                {"name": "picked", "secret": {"secretName": "tls", "optional": True,
                                              "items": [{"key": "ca", "path": "certs/ca.pem"}]}},
                {"name": "tmp", "emptyDir": {}}],
    "containers": [{"name": "member", "volumeMounts": [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "member-token", "mountPath": "/var/run/secrets/staticfleet.io/member-token",
         "readOnly": True},
        {"name": "picked", "mountPath": "/etc/tls/"},
        {"name": "member-token", "mountPath": "/one/file", "subPath": "token"}]}]}}


def test_secret_mounts_are_the_secret_volumes_mounted_whole() -> None:
    mounts = podenv.secret_mounts(TOKEN_POD, TOKEN_POD["spec"]["containers"][0])
    assert mounts == [
        podenv.SecretMount("member-token", "orders-member-token",
                           "/var/run/secrets/staticfleet.io/member-token"),
        podenv.SecretMount("picked", "tls", "/etc/tls/", (("ca", "certs/ca.pem"),), True)]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(("mount", "data", "files"), [
    (podenv.SecretMount("v", "s", "/m"), {"token": b64("abc"), "other": b64("x")},
     {"token": "abc", "other": "x"}),
    (podenv.SecretMount("v", "s", "/m", (("ca", "certs/ca.pem"),)), {"ca": b64("PEM"), "k": ""},
     {"certs/ca.pem": "PEM"}),
    (podenv.SecretMount("v", "s", "/m", (("ca", "../escape"),)), {"ca": b64("PEM")}, {}),
    (podenv.SecretMount("v", "s", "/m", optional=True), None, {}),
    (podenv.SecretMount("v", "s", "/m", (("ca", "ca.pem"),), optional=True), {}, {}),
    (podenv.SecretMount("v", "s", "/m"), None,
     'MountVolume.SetUp failed for volume "v" : secret "s" not found'),
    (podenv.SecretMount("v", "s", "/m", (("ca", "ca.pem"),)), {},
     'MountVolume.SetUp failed for volume "v" : couldn\'t find key ca in Secret s'),
])
def test_secret_files(mount: podenv.SecretMount, data: dict[str, str] | None,
                      files: dict[str, str] | str) -> None:
    if isinstance(files, str):
        with pytest.raises(ConfigError, match=files):
            podenv.secret_files(mount, data)
    else:
        assert podenv.secret_files(mount, data) == files


def test_with_mounts_points_paths_under_a_mount_at_its_local_directory() -> None:
    env = {"STATICFLEET_MEMBER_TOKEN_FILE": "/var/run/secrets/staticfleet.io/member-token/token",
           "DIR": "/etc/tls", "DEEP": "/etc/tls/certs/ca.pem", "NEAR": "/etc/tlsx/a",
           "OTHER": "/tmp/x", "TEXT": "hello"}
    out = podenv.with_mounts(env, {"/var/run/secrets/staticfleet.io/member-token": "/w/v/tok",
                                   "/etc/tls/": "/w/v/picked"})
    assert out == {**env, "STATICFLEET_MEMBER_TOKEN_FILE": "/w/v/tok/token",
                   "DIR": "/w/v/picked", "DEEP": "/w/v/picked/certs/ca.pem"}
