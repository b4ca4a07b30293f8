import json
from typing import Any

import pytest

from consumer_runtime.config import ConfigError, load_config, parse_config
from tests.unit.runtime.support import base

pytestmark = pytest.mark.unit


def env_with(cfg: Any, **extra: str) -> dict[str, str]:
    return {"STATICFLEET_CONFIG": json.dumps(cfg), **extra}


def test_contract_example_parses() -> None:
    cfg = load_config(env_with(base(), STATICFLEET_GROUP_INSTANCE_ID="orders-0",
                               POD_NAME="orders-0", POD_NAMESPACE="shop",
                               STATICFLEET_HTTP_HOST="127.0.0.5", STATICFLEET_HTTP_PORT="8081",
                               STATICFLEET_SASL_PASSWORD="s3cret"))
    assert cfg.group_instance_id == "orders-0"
    assert cfg.member == "orders-0"
    assert cfg.namespace == "shop"
    assert cfg.subscription() == ["orders"]
    assert (cfg.http_host, cfg.http_port) == ("127.0.0.5", 8081)
    assert cfg.session_timeout_ms == 30000 and cfg.max_poll_interval_ms == 300000
    assert cfg.consumer["sasl.password"] == "s3cret"
    assert cfg.spark.conf == {"spark.sql.shuffle.partitions": "4", "x.flag": "true"}
    assert cfg.batch.max_records == 10000 and cfg.retry.attempts == 3
    assert cfg.sink.path == "/data/out" and cfg.dead_letter_topic == "orders-dlq"


def test_empty_instance_id_means_dynamic_and_member_is_pod_name() -> None:
    cfg = load_config(env_with(base(), STATICFLEET_GROUP_INSTANCE_ID="  ", POD_NAME="orders-3"))
    assert cfg.group_instance_id is None
    assert cfg.member == "orders-3"


def test_pattern_subscription_is_anchored_at_both_ends() -> None:
    raw = base() | {"topics": None, "topicPattern": "orders\\..*"}
    assert parse_config(raw, {}).subscription() == ["^(orders\\..*)$"]


def test_config_file_is_read_when_env_json_is_absent() -> None:
    files = {"/etc/sf/config.json": json.dumps(base())}
    cfg = load_config({"STATICFLEET_CONFIG_FILE": "/etc/sf/config.json"}, files.__getitem__)
    assert cfg.group_id == "orders"


def test_unreadable_config_file_is_refused() -> None:
    def missing(path: str) -> str:
        raise FileNotFoundError(2, "No such file or directory")

    with pytest.raises(ConfigError, match=r"^STATICFLEET_CONFIG_FILE \(/nope\): cannot be read"):
        load_config({"STATICFLEET_CONFIG_FILE": "/nope"}, missing)


def test_no_config_at_all_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^STATICFLEET_CONFIG: not set; "):
        load_config({})


def test_bad_json_names_line_and_column() -> None:
    with pytest.raises(ConfigError, match=r"^STATICFLEET_CONFIG: not valid JSON \(.* line 1 "
                                          r"column \d+\); fix the JSON$"):
        load_config({"STATICFLEET_CONFIG": '{"groupId": '})


def set_path(cfg: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node = cfg
    *parents, last = path.split("/")
    for p in parents:
        node = node[p]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return cfg


class _Delete:
    """The key is removed from the config (a sentinel with a stable repr: test ids must be the
    same in every pytest-xdist worker)."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETE = _Delete()

REFUSED = [
    ("groupId", "", r"^groupId: must be a non-empty string, got a string; set it$"),
    ("bootstrapServers", DELETE, r"^bootstrapServers: must be a non-empty string, got null"),
    ("topics", None, r"^topics: exactly one of topics and topicPattern must be set"),
    ("topics", [], r"^topics: must be a non-empty list of topic names, got a list"),
    ("topics", ["a", 3], r"^topics\[1\]: must be a non-empty string, got a number"),
    ("topicPattern", "(", r"^topics: exactly one of topics and topicPattern"),
    ("colour", "blue", r"^colour: not a known key; remove it \(known: bootstrapServers"),
    ("consumer", "x", r"^consumer: must be a JSON object, got a string"),
    ("consumer/enable.auto.commit", True,
     r"^consumer\.enable\.auto\.commit: set by the runtime itself; remove it$"),
    ("consumer/group.instance.id", "x", r"^consumer\.group\.instance\.id: set by the runtime"),
    ("consumer/session.timeout.ms", DELETE,
     r"^consumer\.session\.timeout\.ms: must be an integer >= 1, got null"),
    ("consumer/max.poll.interval.ms", "300000",
     r"^consumer\.max\.poll\.interval\.ms: must be an integer >= 1, got '300000'"),
    ("consumer/heartbeat.interval.ms", 30000,
     r"^consumer\.heartbeat\.interval\.ms: must be below session\.timeout\.ms \(30000 >= 30000\)"),
    ("consumer/fetch.min.bytes", [1], r"^consumer\.fetch\.min\.bytes: must be a string, number"),
    ("processing/transform", "nocolon",
     r"^processing\.transform: must read module:function, got 'nocolon'"),
    ("processing/spark/mode", "yarn",
     r"^processing\.spark\.mode: must be one of local, connect, got 'yarn'"),
    ("processing/spark/mode", "connect",
     r"^processing\.spark\.connectUrl: mode connect needs an sc:// URL, got None"),
    ("processing/spark/conf", {"a": None}, r"^processing\.spark\.conf\.a: must be a string"),
    ("processing/batch/maxRecords", 0,
     r"^processing\.batch\.maxRecords: must be an integer >= 1, got 0; fix the value$"),
    ("processing/batch/maxWaitMs", True,
     r"^processing\.batch\.maxWaitMs: must be an integer >= 0, got True"),
    ("processing/batch/size", 5, r"^processing\.batch\.size: not a known key"),
    ("processing/sink/type", "s3", r"^processing\.sink\.type: must be one of kafka, parquet, null"),
    ("processing/sink/path", None, r"^processing\.sink\.path: a parquet sink needs a path"),
    ("processing/retry/attempts", 0, r"^processing\.retry\.attempts: must be an integer >= 1"),
    ("processing/retry/maxBackoffMs", 100,
     r"^processing\.retry\.maxBackoffMs: below backoffMs \(100 < 500\); raise it$"),
    ("processing/deadLetterTopic", 7, r"^processing\.deadLetterTopic: must be a non-empty string"),
]


@pytest.mark.parametrize(("path", "value", "message"), REFUSED,
                         ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_bad_configuration_is_refused_with_one_line(path: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_config(set_path(base(), path, value), {})
    assert "\n" not in str(info.value)
    assert "; " in str(info.value)


def test_kafka_sink_needs_topic() -> None:
    raw = set_path(base(), "processing/sink", {"type": "kafka", "path": None, "topic": None})
    with pytest.raises(ConfigError, match=r"^processing\.sink\.topic: a kafka sink needs a topic"):
        parse_config(raw, {})


def test_bad_http_port_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^STATICFLEET_HTTP_PORT: must be a port number"):
        parse_config(base(), {"STATICFLEET_HTTP_PORT": "http"})


def test_defaults_when_optional_sections_are_absent() -> None:
    raw = base()
    for key in ("spark", "batch", "retry"):
        del raw["processing"][key]
    cfg = parse_config(raw, {})
    assert cfg.spark.mode == "local" and cfg.spark.master == "local[2]"
    assert (cfg.batch.max_records, cfg.batch.max_wait_ms) == (10000, 1000)
    assert (cfg.retry.attempts, cfg.retry.backoff_ms) == (3, 500)


def test_invalid_topic_pattern_is_refused() -> None:
    raw = base() | {"topics": None, "topicPattern": "orders("}
    with pytest.raises(ConfigError, match=r"^topicPattern: not a valid regular expression"):
        parse_config(raw, {})


def kip848() -> dict[str, Any]:
    """The consumer properties the operator sends with protocol consumer (KIP-848)."""
    cfg = base()
    cfg["consumer"] = {"max.poll.interval.ms": 300000, "group.protocol": "consumer",
                       "auto.offset.reset": "earliest", "security.protocol": "PLAINTEXT"}
    return cfg


def test_protocol_consumer_needs_no_session_timeout_nor_heartbeat() -> None:
    cfg = parse_config(kip848(), {})
    assert cfg.protocol == "consumer"
    assert cfg.session_timeout_ms is None and cfg.max_poll_interval_ms == 300000
    classic = parse_config(base(), {})
    assert classic.protocol == "classic" and classic.session_timeout_ms == 30000


BROKER_OWNED = [
    ("session.timeout.ms", 45000,
     "consumer.session.timeout.ms: not a client property with group.protocol consumer: the "
     "broker owns the session timeout (group config consumer.session.timeout.ms, which the "
     "operator sets); remove it"),
    ("heartbeat.interval.ms", 3000,
     "consumer.heartbeat.interval.ms: not a client property with group.protocol consumer: the "
     "broker owns the heartbeat interval (group config consumer.heartbeat.interval.ms, which the "
     "operator sets); remove it"),
    ("partition.assignment.strategy", "range",
     "consumer.partition.assignment.strategy: not a client property with group.protocol "
     "consumer: the broker assigns the partitions (its assignor, broker config "
     "group.consumer.assignors); remove it"),
]


@pytest.mark.parametrize(("key", "value", "message"), BROKER_OWNED,
                         ids=[k for k, _, _ in BROKER_OWNED])
def test_protocol_consumer_refuses_what_the_broker_owns(key: str, value: Any,
                                                        message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(set_path(kip848(), f"consumer/{key}", value), {})
    assert str(info.value) == message


def test_unknown_group_protocol_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^consumer\.group\.protocol: must be one of classic, "
                                          r"consumer, got 'share'; choose one$"):
        parse_config(set_path(base(), "consumer/group.protocol", "share"), {})


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_the_config_the_operator_builds_is_accepted(protocol: str) -> None:
    """Contract: what operator/staticfleet/decisions/builders.py puts in STATICFLEET_CONFIG."""
    from staticfleet.decisions.builders import runtime_config
    from staticfleet.decisions.spec.model import ConsumerGroupSpec
    from staticfleet.decisions.timeouts.effective import EffectiveTimeouts

    spec = ConsumerGroupSpec.from_body({
        "apiVersion": "staticfleet.io/v1alpha1", "kind": "ConsumerGroup",
        "metadata": {"name": "orders", "namespace": "shop", "generation": 1},
        "spec": {"replicas": 2, "kafka": {"bootstrapServers": "kafka:9092", "topics": ["o"]},
                 "template": {"image": "staticfleet/member:0.1.0"},
                 "membership": {"protocol": protocol}}})
    timeouts = EffectiveTimeouts(session_timeout_ms=45000, heartbeat_interval_ms=3000,
                                 max_poll_interval_ms=300000, sources={})
    raw = json.loads(json.dumps(runtime_config(spec, timeouts)))
    cfg = parse_config(raw, {"STATICFLEET_GROUP_INSTANCE_ID": "orders-0"})
    assert cfg.protocol == protocol
    assert cfg.session_timeout_ms == (45000 if protocol == "classic" else None)
    assert cfg.max_poll_interval_ms == 300000


@pytest.mark.parametrize(("standby", "activated", "expect"), [
    ("", "", (False, False)),
    ("true", "", (True, False)),  # a warm handoff's replacement, never activated: waits
    ("true", "true", (False, True)),  # its pod was activated: a restart joins directly
    ("", "true", (False, False)),  # not a standby pod: the mark changes nothing
    ("false", "1", (False, False)),
])
def test_a_standby_whose_pod_was_activated_is_not_a_standby(
        standby: str, activated: str, expect: tuple[bool, bool]) -> None:
    cfg = load_config(env_with(base(), STATICFLEET_STANDBY=standby,
                               STATICFLEET_ACTIVATED=activated))
    assert (cfg.standby, cfg.pod_activated) == expect


def test_a_bad_activation_mark_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^STATICFLEET_ACTIVATED: must be true or false"):
        load_config(env_with(base(), STATICFLEET_STANDBY="true", STATICFLEET_ACTIVATED="yes"))
