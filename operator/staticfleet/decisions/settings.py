"""The operator's own settings that decisions depend on: the same for every ConsumerGroup, read
once from the operator's environment at startup (the chart sets them), carried into each pass by
the `Snapshot`.

- `STATICFLEET_MEMBER_INGRESS_FROM`: a JSON list of NetworkPolicyPeer objects, the only sources
  admitted to a member's port (the operator's own pods, the Prometheus that scrapes the members).
  Set, the operator makes a NetworkPolicy beside each ConsumerGroup
  (`builders.build_member_network_policy`), in whatever namespace the group lives; unset, none.
- `STATICFLEET_ALLOW_TESTING_ANNOTATIONS`: `true` honours the test-only annotations
  (`model.TESTING_ANNOTATIONS`), which the tests and the benches use; the chart never sets it,
  so in production they are ignored and the status says so.
- `STATICFLEET_MEMBER_HTTP_VIA`: `host:port` of the member simulator (`staticfleet_dev.membersim`)
  that answers for every member pod: each request to a member (`/status`, `/drain`, `/leave`,
  `/rejoin`, `/activate`) goes there instead of to the pod's IP, which it names in a header
  (`observe.memberhttp.route_through`). For benches whose member pods run on fake nodes (kwok),
  where a pod's IP leads nowhere; the chart never sets it.
- `STATICFLEET_SHARD` (`--shard`) and `STATICFLEET_OTHER_SHARDS` (`--other-shards`, comma
  separated): the shard this operator is, and, on the default shard only, the named shards whose
  groups it leaves alone (`decisions.shards`). Unset: not sharded, every group.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from staticfleet.decisions.shards import Shard, ShardError

MEMBER_INGRESS_FROM_ENV = "STATICFLEET_MEMBER_INGRESS_FROM"
ALLOW_TESTING_ANNOTATIONS_ENV = "STATICFLEET_ALLOW_TESTING_ANNOTATIONS"
MEMBER_HTTP_VIA_ENV = "STATICFLEET_MEMBER_HTTP_VIA"
SHARD_ENV = "STATICFLEET_SHARD"
OTHER_SHARDS_ENV = "STATICFLEET_OTHER_SHARDS"


class SettingsError(RuntimeError):
    """A setting the operator cannot start with; the message names it (the command exits
    with it, before it watches anything)."""


@dataclass(frozen=True)
class OperatorSettings:
    """What the operator was started with (the defaults: no NetworkPolicy, no test switch, the
    members' own addresses)."""

    member_ingress_from: tuple[Mapping[str, Any], ...] | None = None
    """The NetworkPolicyPeers admitted to the members' port; None: the operator makes no
    NetworkPolicy."""
    allow_testing_annotations: bool = False
    """Honour the test-only annotations of a ConsumerGroup."""
    member_http_via: tuple[str, int] | None = None
    """(host, port) that answers every member request in place of the members (a bench's member
    simulator); None: each member at its pod IP."""
    shard: Shard | None = None
    """The ConsumerGroups this operator owns; None: every one (not sharded)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorSettings:
        """The settings of `environ` (the process environment); `SettingsError` when one
        cannot be read, so the operator does not start on a setting it would misread."""
        raw = environ.get(MEMBER_INGRESS_FROM_ENV, "").strip()
        peers: tuple[Mapping[str, Any], ...] | None = None
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError as exc:
                raise SettingsError(f"{MEMBER_INGRESS_FROM_ENV} is not JSON: {exc}") from None
            if not isinstance(parsed, list) or not all(
                    isinstance(p, dict) and p for p in parsed):
                raise SettingsError(f"{MEMBER_INGRESS_FROM_ENV} must be a JSON list of "
                                    "NetworkPolicyPeer objects (none of them empty)")
            peers = tuple(parsed)
        flag = environ.get(ALLOW_TESTING_ANNOTATIONS_ENV, "").strip().lower()
        if flag not in ("", "true", "false"):
            raise SettingsError(f"{ALLOW_TESTING_ANNOTATIONS_ENV} must be true or false, "
                                f"not {flag!r}")
        return cls(member_ingress_from=peers, allow_testing_annotations=flag == "true",
                   member_http_via=_address(environ.get(MEMBER_HTTP_VIA_ENV, "").strip()),
                   shard=_shard(environ))


def _address(raw: str) -> tuple[str, int] | None:
    """`host:port` as (host, port); None for ""; `SettingsError` for anything else."""
    if not raw:
        return None
    host, _, port = raw.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(f"{MEMBER_HTTP_VIA_ENV} must be host:port, not {raw!r}")
    return host, int(port)


def _shard(environ: Mapping[str, str]) -> Shard | None:
    name = environ.get(SHARD_ENV, "").strip()
    others = [o.strip() for o in environ.get(OTHER_SHARDS_ENV, "").split(",") if o.strip()]
    if not name:
        if others:
            raise SettingsError(f"{OTHER_SHARDS_ENV} (--other-shards) is set without "
                                f"{SHARD_ENV} (--shard): only the default shard names the others")
        return None
    try:
        return Shard.parse(name, others)
    except ShardError as exc:
        raise SettingsError(str(exc)) from None
