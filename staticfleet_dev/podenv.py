"""Pure parts of running a pod's first container as a local process: environment and command.

Everything here works on plain dicts shaped like the Kubernetes JSON (camelCase) and never talks
to the API; the local node (`staticfleet_dev.localnode`) fetches the ConfigMaps and Secrets
named by `referenced_sources` and passes their `data` in.

Semantics follow the kubelet (`makeEnvironmentVariables`, `expansion.Expand`):

- `envFrom` first, in order (ConfigMap/Secret, `prefix`, `optional`); keys that cannot be
  environment variable names (empty or containing `=`) are skipped.
- then `env` in order, later entries override earlier ones: literal `value` with `$(VAR)`
  expansion against the variables defined so far; `valueFrom.fieldRef`, `resourceFieldRef`,
  `configMapKeyRef`, `secretKeyRef` (Secret values are base64-decoded; `optional` honoured: an
  optional missing object or key leaves the variable unset).
- `$(VAR)` in `command` and `args` expands against the final container environment; `$$` is a
  literal `$`; an undefined `$(VAR)` stays as written.
- `resourceFieldRef` is approximated: limits fall back to the node's allocatable (cpu, memory)
  when the container sets none, requests fall back to 0, and only cpu, memory and
  ephemeral-storage are known.

Service-account credentials (the local node cannot mount the token volume, so it hands the pod a
kubeconfig instead): `token_service_account` decides whether the pod gets a token, as the
ServiceAccount admission plugin and the kubelet do; `token_request` is the TokenRequest body bound
to the pod; `service_account_kubeconfig` the kubeconfig written for it; `with_kubeconfig` points
`KUBECONFIG` at it unless the pod sets `KUBECONFIG` itself; `token_refresh_at` says when to renew.

The termination message file: a kubelet mounts one at the container's `terminationMessagePath`;
`with_termination_log` names the local node's stand-in in the member's
`TERMINATION_MESSAGE_PATH_ENV` instead (the member writes its termination message there).

Secret volumes (the only volumes this node projects): a process here cannot see anything at a
`mountPath`, so `secret_mounts` lists the first container's mounts of `secret` volumes, the node
writes each one's files (`secret_files`: every key, or the volume's `items` at their paths) into a
directory of the pod's own, and `with_mounts` points every environment value that names a path
under such a `mountPath` at that directory instead (e.g. the member's
`STATICFLEET_MEMBER_TOKEN_FILE`). Paths written literally into `command`/`args` are not rewritten.
The environment is resolved at each container start from the pod as last seen, so a restarted
container sees labels and annotations as they are then (a kubelet does the same).
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from member_contract import TERMINATION_MESSAGE_PATH_ENV

PYTHON_NAMES = frozenset({"python", "python3"})
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# What a kubelet asks for: the API server extends such tokens (to a year by default), so a
# long-lived client that reads its kubeconfig once keeps working, as it does in a cluster.
TOKEN_EXPIRATION_SECONDS = 3607
# The kubelet renews a projected token once 80% of its lifetime has passed.
TOKEN_REFRESH_FRACTION = 0.8


class ConfigError(Exception):
    """The container cannot be configured yet (kubelet: CreateContainerConfigError)."""


class NoEntrypoint(Exception):
    """The container has no `command`; with no image there is nothing else to run."""


@dataclass(frozen=True)
class PodContext:
    """What the node knows about where the pod runs."""

    node_name: str
    pod_ip: str
    host_ip: str = "127.0.0.1"
    node_cpu: str = "2"
    node_memory: str = "8Gi"
    node_ephemeral_storage: str = "100Gi"


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: `$$` -> `$`, undefined or unterminated references stay."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end == -1:
                    out.append(text[i:])
                    break
                name = text[i + 2:end]
                out.append(env[name] if name in env else text[i:end + 1])
                i = end + 1
                continue
            out.append(c + nxt)
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def referenced_sources(container: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """Names of the ConfigMaps and Secrets the container's environment refers to."""
    configmaps: set[str] = set()
    secrets: set[str] = set()
    for src in container.get("envFrom") or []:
        if src.get("configMapRef"):
            configmaps.add(src["configMapRef"].get("name", ""))
        if src.get("secretRef"):
            secrets.add(src["secretRef"].get("name", ""))
    for var in container.get("env") or []:
        vf = var.get("valueFrom") or {}
        if vf.get("configMapKeyRef"):
            configmaps.add(vf["configMapKeyRef"].get("name", ""))
        if vf.get("secretKeyRef"):
            secrets.add(vf["secretKeyRef"].get("name", ""))
    return configmaps, secrets


def decode_secret_data(data: Mapping[str, str] | None) -> dict[str, str]:
    """Secret `data` (base64) as text; bytes that are not UTF-8 survive as surrogate escapes."""
    out: dict[str, str] = {}
    for key, value in (data or {}).items():
        try:
            raw = base64.b64decode(value or "", validate=True)
        except (binascii.Error, ValueError):
            raw = (value or "").encode()
        out[key] = raw.decode("utf-8", errors="surrogateescape")
    return out


_SUBSCRIPT = re.compile(r"^(metadata\.(?:labels|annotations))\[['\"]?(.*?)['\"]?\]$")


def field_ref_value(pod: Mapping[str, Any], path: str, ctx: PodContext) -> str:
    """The downward-API value of `fieldRef.fieldPath` (environment variable flavour)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = _SUBSCRIPT.match(path)
    if m:
        which = m.group(1).split(".")[1]
        return str((meta.get(which) or {}).get(m.group(2), ""))
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or ctx.node_name,
        "spec.serviceAccountName": spec.get("serviceAccountName") or "",
        "status.podIP": ctx.pod_ip,
        "status.podIPs": ctx.pod_ip,
        "status.hostIP": ctx.host_ip,
        "status.hostIPs": ctx.host_ip,
    }
    if path not in simple:
        raise ConfigError(f"unsupported fieldRef fieldPath {path!r}")
    return str(simple[path])


_SUFFIXES = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(text: str | int | float) -> Decimal:
    """A Kubernetes resource quantity ("500m", "1Gi", "2") as a Decimal."""
    m = _QUANTITY.match(str(text).strip())
    if not m:
        raise ConfigError(f"invalid quantity {text!r}")
    try:
        return Decimal(m.group(1)) * _SUFFIXES[m.group(2) or ""]
    except InvalidOperation as exc:
        raise ConfigError(f"invalid quantity {text!r}") from exc


def resource_field_value(container: Mapping[str, Any], ref: Mapping[str, Any],
                         ctx: PodContext) -> str:
    """`resourceFieldRef`, approximated (see the module docstring)."""
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    node_default = {"cpu": ctx.node_cpu, "memory": ctx.node_memory,
                    "ephemeral-storage": ctx.node_ephemeral_storage}
    if kind not in ("limits", "requests") or name not in node_default:
        raise ConfigError(f"unsupported resourceFieldRef resource {resource!r}")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(name)
    if value is None:
        value = node_default[name] if kind == "limits" else "0"
    divisor = parse_quantity(ref.get("divisor") or "1")
    if divisor <= 0:
        raise ConfigError(f"invalid divisor {ref.get('divisor')!r}")
    return str(math.ceil(parse_quantity(value) / divisor))


def _valid_env_name(name: str) -> bool:
    return bool(name) and "=" not in name and "\0" not in name


def resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any], *,
                configmaps: Mapping[str, Mapping[str, str]],
                secrets: Mapping[str, Mapping[str, str]],
                ctx: PodContext) -> dict[str, str]:
    """The container's environment as the kubelet would build it.

    `configmaps` maps a ConfigMap name to its `data`; `secrets` a Secret name to its (base64)
    `data`. A name missing from the mapping means the object does not exist. Raises ConfigError
    with the kubelet's wording when a non-optional source is missing.
    """
    ns = (pod.get("metadata") or {}).get("namespace", "")
    env: dict[str, str] = {}

    def source(kind: str, name: str) -> Mapping[str, str] | None:
        if kind == "ConfigMap":
            return configmaps.get(name)
        data = secrets.get(name)
        return None if data is None else decode_secret_data(data)

    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = src.get(key)
            if not ref:
                continue
            name = ref.get("name", "")
            data = source(kind, name)
            if data is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind.lower()} "{name}" not found')
            for k, v in data.items():
                if _valid_env_name(prefix + k):
                    env[prefix + k] = v

    for var in container.get("env") or []:
        name = var.get("name", "")
        vf = var.get("valueFrom")
        if not vf:
            env[name] = expand(str(var.get("value") or ""), env)
            continue
        if vf.get("fieldRef"):
            env[name] = field_ref_value(pod, vf["fieldRef"].get("fieldPath", ""), ctx)
        elif vf.get("resourceFieldRef"):
            env[name] = resource_field_value(container, vf["resourceFieldRef"], ctx)
        else:
            kind, key = (("ConfigMap", "configMapKeyRef") if vf.get("configMapKeyRef")
                         else ("Secret", "secretKeyRef"))
            ref = vf.get(key)
            if not ref:
                raise ConfigError(f"env {name}: unsupported valueFrom {sorted(vf)}")
            obj, item = ref.get("name", ""), ref.get("key", "")
            data = source(kind, obj)
            if data is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind.lower()} "{obj}" not found')
            if item not in data:
                if ref.get("optional"):
                    continue
                raise ConfigError(f"couldn't find key {item} in {kind} {ns}/{obj}")
            env[name] = data[item]
    return env


def build_command(container: Mapping[str, Any], env: Mapping[str, str], *,
                  python: str) -> list[str]:
    """`command + args` with `$(VAR)` expanded; a bare `python`/`python3` becomes `python`.

    Raises NoEntrypoint when there is no command: with no image there is no entrypoint.
    """
    command = [expand(str(c), env) for c in container.get("command") or []]
    if not command:
        raise NoEntrypoint("local node runs command only: spec.containers[0].command is "
                           "empty and there is no image to take an entrypoint from")
    args = [expand(str(a), env) for a in container.get("args") or []]
    if command[0] in PYTHON_NAMES:
        command[0] = python
    return command + args


def process_environment(base: Mapping[str, str], pod_env: Mapping[str, str], *,
                        bin_dir: str, hostname: str) -> dict[str, str]:
    """The process environment: the machine's, then HOSTNAME, then the pod's; `bin_dir` (the
    local node's interpreter directory) is put first on PATH so console scripts resolve to it."""
    env = dict(base)
    env["HOSTNAME"] = hostname
    env.update(pod_env)
    path = env.get("PATH") or os.defpath
    parts = [p for p in path.split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *parts])
    return env


@dataclass(frozen=True)
class SecretMount:
    """A mount of a `secret` volume by the first container."""

    volume: str
    secret: str
    mount_path: str
    items: tuple[tuple[str, str], ...] | None = None
    """(key, path) pairs when the volume lists `items`; None: every key, as a file of its name."""
    optional: bool = False


def secret_mounts(pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[SecretMount]:
    """The container's mounts of `secret` volumes that this node projects (no `subPath`)."""
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    out = []
    for mount in container.get("volumeMounts") or []:
        secret = (volumes.get(mount.get("name")) or {}).get("secret")
        if not secret or mount.get("subPath") or mount.get("subPathExpr"):
            continue
        items = secret.get("items")
        out.append(SecretMount(
            volume=str(mount.get("name")), secret=str(secret.get("secretName") or ""),
            mount_path=str(mount.get("mountPath") or ""),
            items=None if items is None else tuple(
                (str(i.get("key")), str(i.get("path"))) for i in items),
            optional=bool(secret.get("optional"))))
    return out


def secret_files(mount: SecretMount, data: Mapping[str, str] | None) -> dict[str, str]:
    """The files of a projected Secret volume (relative path -> text) from the Secret's `data`
    (base64; None: the Secret does not exist). Raises ConfigError in the kubelet's words when a
    non-optional Secret or listed key is missing; an optional missing Secret has no files."""
    if data is None:
        if mount.optional:
            return {}
        raise ConfigError(f'MountVolume.SetUp failed for volume "{mount.volume}" : '
                          f'secret "{mount.secret}" not found')
    decoded = decode_secret_data(data)
    if mount.items is None:
        return {key: value for key, value in decoded.items() if _safe_path(key)}
    files = {}
    for key, path in mount.items:
        if key not in decoded:
            if mount.optional:
                continue
            raise ConfigError(f'MountVolume.SetUp failed for volume "{mount.volume}" : '
                              f"couldn't find key {key} in Secret {mount.secret}")
        if _safe_path(path):
            files[path] = decoded[key]
    return files


def _safe_path(path: str) -> bool:
    """A relative path that stays inside the volume (the API server refuses others too)."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and ".." not in parts and "" not in parts


def with_mounts(pod_env: Mapping[str, str], mounts: Mapping[str, str]) -> dict[str, str]:
    """The environment with each value that names a `mountPath` of `mounts` (mount path ->
    the local directory holding that volume), or a path under it, pointed at the local
    directory."""
    env = dict(pod_env)
    ordered = sorted(((m.rstrip("/") or "/", local) for m, local in mounts.items()),
                     key=lambda pair: -len(pair[0]))
    for name, value in env.items():
        for mount_path, local in ordered:
            if value == mount_path or value.startswith(mount_path + "/"):
                env[name] = local + value[len(mount_path):]
                break
    return env


def unsupported_notes(pod: Mapping[str, Any]) -> list[str]:
    """What the local node ignores in this pod, for the pod's status message."""
    spec = pod.get("spec") or {}
    notes: list[str] = []
    containers = spec.get("containers") or []
    if len(containers) > 1:
        notes.append("only the first container runs; ignored: "
                     + ", ".join(c.get("name", "?") for c in containers[1:]))
    if spec.get("initContainers"):
        notes.append("init containers are not run: "
                     + ", ".join(c.get("name", "?") for c in spec["initContainers"]))
    first = containers[0] if containers else {}
    projected = {m.volume for m in secret_mounts(pod, first)}
    mounts = [m for m in first.get("volumeMounts") or []
              if m.get("mountPath") != SERVICE_ACCOUNT_MOUNT and m.get("name") not in projected]
    if mounts:
        notes.append("volumes other than secret volumes are not supported; ignored "
                     "volumeMounts: "
                     + ", ".join(f"{m.get('name')}:{m.get('mountPath')}" for m in mounts))
    ignored = sorted(spec.get("securityContext") or {}) + sorted(
        f"{first.get('name', '?')}.{key}" for key in first.get("securityContext") or {})
    if ignored:
        notes.append("securityContext is not applied (the process runs as the local node's "
                     "user, with its capabilities, seccomp and a writable filesystem); ignored: "
                     + ", ".join(ignored))
    return notes


# --------------------------------------------------------------------------- service account

def token_service_account(pod: Mapping[str, Any]) -> str | None:
    """The ServiceAccount whose token the pod gets, or None.

    `spec.automountServiceAccountToken: false` means none; `true` means one. Unset, the
    ServiceAccount's own `automountServiceAccountToken` decides, and the API server's
    ServiceAccount admission plugin has already applied it: it adds the token volume, mounted at
    /var/run/secrets/kubernetes.io/serviceaccount, exactly when the token is wanted. So with the
    field unset, the pod gets a token when its first container has that mount.
    """
    spec = pod.get("spec") or {}
    automount = spec.get("automountServiceAccountToken")
    if automount is False:
        return None
    name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    if automount is True:
        return str(name)
    first = (spec.get("containers") or [{}])[0]
    mounted = any(m.get("mountPath", "").rstrip("/") == SERVICE_ACCOUNT_MOUNT
                  for m in first.get("volumeMounts") or [])
    return str(name) if mounted else None


def token_request(pod: Mapping[str, Any],
                  expiration_seconds: int = TOKEN_EXPIRATION_SECONDS) -> dict[str, Any]:
    """A TokenRequest bound to the pod (the token dies with the pod), default audiences."""
    meta = pod.get("metadata") or {}
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                        "name": meta.get("name", ""),
                                        "uid": meta.get("uid", "")}}}


def token_refresh_at(issued: float, expires: float) -> float:
    """When to renew a token valid from `issued` to `expires` (both unix seconds)."""
    return issued + TOKEN_REFRESH_FRACTION * max(0.0, expires - issued)


def service_account_kubeconfig(*, server: str, ca_data: str, token: str, namespace: str,
                               service_account: str) -> dict[str, Any]:
    """A kubeconfig for the pod: the API server and CA (base64 PEM) the node uses, the
    ServiceAccount's token as the user, the pod's namespace as the default namespace (what
    in-cluster clients read from the mounted `namespace` file)."""
    cluster: dict[str, Any] = {"server": server}
    if ca_data:
        cluster["certificate-authority-data"] = ca_data
    user = f"system:serviceaccount:{namespace}:{service_account}"
    return {"apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
            "clusters": [{"name": "in-cluster", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "in-cluster", "context": {
                "cluster": "in-cluster", "user": user, "namespace": namespace}}]}


def with_kubeconfig(pod_env: Mapping[str, str], path: str) -> dict[str, str]:
    """The pod's environment with KUBECONFIG=`path`, unless the pod sets KUBECONFIG itself."""
    env = dict(pod_env)
    env.setdefault("KUBECONFIG", path)
    return env


def with_termination_log(pod_env: Mapping[str, str], path: str) -> dict[str, str]:
    """The pod's environment with `TERMINATION_MESSAGE_PATH_ENV`=`path`, the file this node reads
    as the container's termination message (the node's, as the mount is the kubelet's)."""
    return {**pod_env, TERMINATION_MESSAGE_PATH_ENV: path}
