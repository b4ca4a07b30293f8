"""Reading a ConsumerGroup body: typed readers of its plain-dict fields, each naming the
offending field in a `SpecError` (`spec.template.env[2].name: is required`).

`model` and `kafka` parse the spec's sections with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SpecError(ValueError):
    """The spec cannot be acted on. `field_path` names the field, e.g. `spec.template.env[2]`."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field_path = field_path
        self.message = message


def as_obj(value: Any, path: str, *, required: bool = False) -> Mapping[str, Any]:
    """`value` as an object: {} when it is absent (unless `required`)."""
    if value is None:
        if required:
            raise SpecError(path, "is required")
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(path, "must be an object")
    return value


def opt_str(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SpecError(f"{path}.{key}", "must be a string")
    return value


def req_str(obj: Mapping[str, Any], key: str, path: str) -> str:
    value = opt_str(obj, key, path)
    if not value:
        raise SpecError(f"{path}.{key}", "is required")
    return value


def int_or(
    obj: Mapping[str, Any],
    key: str,
    path: str,
    *,
    default: int,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """`obj[key]` as an integer within the bounds, `default` when it is absent."""
    value = opt_int(obj, key, path, minimum=minimum, maximum=maximum)
    return default if value is None else value


def opt_int(
    obj: Mapping[str, Any],
    key: str,
    path: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{path}.{key}", "must be an integer")
    if minimum is not None and value < minimum:
        raise SpecError(f"{path}.{key}", f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SpecError(f"{path}.{key}", f"must be at most {maximum}, got {value}")
    return value


def str_list(obj: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{path}.{key}", "must be a list of strings")
    return tuple(value)


def obj_list(obj: Mapping[str, Any], key: str, path: str) -> tuple[Mapping[str, Any], ...]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise SpecError(f"{path}.{key}", "must be a list of objects")
    return tuple(value)


def str_map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, str] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SpecError(f"{path}.{key}", "must be a map of strings to strings")
    return dict(value)



def choice(obj: Mapping[str, Any], key: str, path: str, choices: tuple[str, ...]) -> str:
    """`obj[key]`, one of `choices` (the first is the default)."""
    value = obj.get(key, choices[0])
    if value not in choices:
        raise SpecError(f"{path}.{key}", f"must be one of {', '.join(choices)}, got {value!r}")
    return str(value)
