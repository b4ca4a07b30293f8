"""The member pods' security contexts (pure): the defaults, which meet the `restricted` Pod
Security Standard, what `spec.template.securityContext` (the pod's) and
`spec.template.containerSecurityContext` (the member container's) may set over them, and the
merge.

Defaults, for the member image (images/member/Dockerfile: `USER 10001:10001`, HOME and Spark's
local directories in /tmp):

    pod        runAsNonRoot true, runAsUser 10001, runAsGroup 10001, fsGroup 10001,
               seccompProfile RuntimeDefault
    container  allowPrivilegeEscalation false, capabilities drop [ALL],
               readOnlyRootFilesystem true (the builder mounts an emptyDir at /tmp, where the
               member, its JVM and Spark write)

A user's values merge over them key by key (objects such as `capabilities` or `seccompProfile`
merge too; lists and other values replace). Checked here, so that the spec, not the pod's
creation, is refused: the types and allowed values of each field, and the combinations the API
server or the kubelet would refuse (root with runAsNonRoot, a privileged container without
privilege escalation, a Localhost profile without its name).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

MEMBER_UID = 10001
"""The member image's user and group (images/member/Dockerfile `USER 10001:10001`)."""
TMP_VOLUME = "tmp"
TMP_PATH = "/tmp"

DEFAULT_POD: Mapping[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": MEMBER_UID,
    "runAsGroup": MEMBER_UID,
    "fsGroup": MEMBER_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
DEFAULT_CONTAINER: Mapping[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}

_MAX_ID = 2147483647


class SecurityContextError(ValueError):
    """A security context field the pods cannot carry; `field_path` names it."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field_path = field_path
        self.message = message


Check = Callable[[Any, str], None]


def _id(value: Any, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_ID:
        raise SecurityContextError(path, f"must be an integer from 0 to {_MAX_ID}, got {value!r}")


def _ids(value: Any, path: str) -> None:
    if not isinstance(value, list):
        raise SecurityContextError(path, "must be a list of integers")
    for i, item in enumerate(value):
        _id(item, f"{path}[{i}]")


def _bool(value: Any, path: str) -> None:
    if not isinstance(value, bool):
        raise SecurityContextError(path, f"must be true or false, got {value!r}")


def _string(value: Any, path: str) -> None:
    if not isinstance(value, str):
        raise SecurityContextError(path, f"must be a string, got {value!r}")


def _strings(value: Any, path: str) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SecurityContextError(path, "must be a list of non-empty strings")


def _enum(*choices: str) -> Check:
    def check(value: Any, path: str) -> None:
        if value not in choices:
            raise SecurityContextError(path, f"must be one of {', '.join(choices)}, "
                                       f"got {value!r}")
    return check


def _fields(fields: Mapping[str, Check], required: tuple[str, ...] = ()) -> Check:
    """An object of exactly these fields, each checked."""
    def check(value: Any, path: str) -> None:
        if not isinstance(value, Mapping):
            raise SecurityContextError(path, "must be an object")
        for key in required:
            if value.get(key) is None:
                raise SecurityContextError(f"{path}.{key}", "is required")
        for key, item in value.items():
            if key not in fields:
                raise SecurityContextError(
                    f"{path}.{key}", f"unknown field; known: {', '.join(sorted(fields))}")
            if item is not None:
                fields[key](item, f"{path}.{key}")
    return check


def _profile(value: Any, path: str) -> None:
    """seccompProfile / appArmorProfile: `localhostProfile` with type Localhost, and only then."""
    _fields({"type": _enum("RuntimeDefault", "Localhost", "Unconfined"),
             "localhostProfile": _string}, required=("type",))(value, path)
    if (value["type"] == "Localhost") != bool(value.get("localhostProfile")):
        raise SecurityContextError(f"{path}.localhostProfile",
                                   "is required with type Localhost, and only then")


def _sysctls(value: Any, path: str) -> None:
    if not isinstance(value, list):
        raise SecurityContextError(path, "must be a list of {name, value}")
    for i, item in enumerate(value):
        _fields({"name": _string, "value": _string}, required=("name", "value"))(
            item, f"{path}[{i}]")


_SELINUX = _fields({k: _string for k in ("level", "role", "type", "user")})

POD_FIELDS: Mapping[str, Check] = {
    "runAsNonRoot": _bool,
    "runAsUser": _id,
    "runAsGroup": _id,
    "fsGroup": _id,
    "fsGroupChangePolicy": _enum("OnRootMismatch", "Always"),
    "supplementalGroups": _ids,
    "seccompProfile": _profile,
    "appArmorProfile": _profile,
    "seLinuxOptions": _SELINUX,
    "sysctls": _sysctls,
}
CONTAINER_FIELDS: Mapping[str, Check] = {
    "allowPrivilegeEscalation": _bool,
    "capabilities": _fields({"add": _strings, "drop": _strings}),
    "privileged": _bool,
    "readOnlyRootFilesystem": _bool,
    "runAsNonRoot": _bool,
    "runAsUser": _id,
    "runAsGroup": _id,
    "procMount": _enum("Default", "Unmasked"),
    "seccompProfile": _profile,
    "appArmorProfile": _profile,
    "seLinuxOptions": _SELINUX,
}


def merged(defaults: Mapping[str, Any], user: Mapping[str, Any] | None) -> dict[str, Any]:
    """`user` over `defaults`: objects merge key by key, anything else replaces."""
    out: dict[str, Any] = {k: _copy(v) for k, v in defaults.items()}
    for key, value in (user or {}).items():
        if value is None:
            continue
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = _copy(value)
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value


def pod_context(user: Mapping[str, Any] | None) -> dict[str, Any]:
    """The member pod's `spec.securityContext`."""
    return merged(DEFAULT_POD, user)


def container_context(user: Mapping[str, Any] | None) -> dict[str, Any]:
    """The member container's `securityContext`."""
    return merged(DEFAULT_CONTAINER, user)


def parse(pod: Any, container: Any, path: str) -> tuple[Mapping[str, Any] | None,
                                                       Mapping[str, Any] | None]:
    """The user's two security contexts under `path` (`spec.template`), checked field by field
    and as the pods will carry them (merged over the defaults); None where absent."""
    pod_path, container_path = f"{path}.securityContext", f"{path}.containerSecurityContext"
    if pod is not None:
        _fields(POD_FIELDS)(pod, pod_path)
    if container is not None:
        _fields(CONTAINER_FIELDS)(container, container_path)
    _check_effective(pod_context(pod), container_context(container), pod_path, container_path)
    return (None if pod is None else _copy(pod),
            None if container is None else _copy(container))


def _check_effective(pod: Mapping[str, Any], container: Mapping[str, Any], pod_path: str,
                     container_path: str) -> None:
    """What the API server or the kubelet would refuse of the merged contexts."""
    non_root = container.get("runAsNonRoot", pod.get("runAsNonRoot"))
    user = container.get("runAsUser", pod.get("runAsUser"))
    if non_root and user == 0:
        where = container_path if "runAsUser" in container else pod_path
        raise SecurityContextError(f"{where}.runAsUser", (
            "0 is root, and runAsNonRoot is true (the default): the kubelet would refuse to "
            "start the member. Run as another user, or set runAsNonRoot false as well (the "
            "restricted Pod Security Standard refuses both root and runAsNonRoot false)"))
    escalation = container.get("allowPrivilegeEscalation")
    if escalation is False and container.get("privileged"):
        raise SecurityContextError(f"{container_path}.privileged", (
            "a privileged container needs allowPrivilegeEscalation true (the default is false)"))
    added = {str(c).upper().removeprefix("CAP_")
             for c in (container.get("capabilities") or {}).get("add") or ()}
    if escalation is False and "SYS_ADMIN" in added:
        raise SecurityContextError(f"{container_path}.capabilities.add", (
            "SYS_ADMIN needs allowPrivilegeEscalation true (the default is false)"))
