"""The per-cluster reads' kafka-python settings (`observe.clientsettings`): the wire kit's
translation of the operator's librdkafka configuration (tests/unit/test_kafkawire.py), as the
operator's client and at the reads' reconnect pace."""

from __future__ import annotations

import pytest

from kafkawire import settings as wirekit
from staticfleet.observe import clientsettings
from staticfleet.observe.clientsettings import CLIENT_ID, RECONNECT, client_settings

CONF = {"bootstrap.servers": "k1:9092", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}


def test_the_kits_settings_as_the_operators_client_at_the_reads_pace() -> None:
    settings = client_settings(CONF)
    assert settings == {**wirekit.client_settings(CONF, CLIENT_ID), **RECONNECT}
    assert settings["client_id"] == "staticfleet-operator"
    assert not settings["allow_auto_create_topics"]


def test_what_the_kit_refuses_is_the_reads_unsupported() -> None:
    """clusterreads and clusterpool catch `clientsettings.Unsupported`: the kit's, not a copy."""
    assert clientsettings.Unsupported is wirekit.Unsupported
    with pytest.raises(clientsettings.Unsupported, match=r"^ssl\.curves\.list: "):
        client_settings({**CONF, "ssl.curves.list": "X25519"})
