"""kafka-python's client settings for the operator's own Kafka connection, from the librdkafka
configuration the admin client takes (`credentials.admin_conf`): the wire kit's translation
(`kafkawire.settings`: the same servers, security protocol, SASL mechanism, credentials and
TLS material), as the operator's client and at the per-cluster reads' reconnect pace, so the
reads (`clusterreads`) connect as the admin client does, as the same principal.

A setting kafka-python cannot honour raises `Unsupported` (the kit's): the cluster's reads are
then made per group by the admin client, never with weaker settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafkawire.settings import Unsupported
from kafkawire.settings import client_settings as kafkawire_settings

__all__ = ["CLIENT_ID", "Unsupported", "client_settings"]

CLIENT_ID = "staticfleet-operator"
"""The admin client's client.id too: the brokers' request logs count both as the operator."""

RECONNECT = {"reconnect_backoff_ms": 100, "reconnect_backoff_max_ms": 2000}
"""How soon the reads' client connects again to a broker that went away."""


def client_settings(conf: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python's `KafkaClient` settings for the librdkafka configuration `conf`."""
    return {**kafkawire_settings(conf, CLIENT_ID), **RECONNECT}
