"""The runtime's configuration: read from the environment and config.json, validated at start.

Everything here is pure: `load_config(env, read_file)` takes the environment as a mapping and the
file reader as a callable, so tests run without a filesystem. A bad value raises `ConfigError`
whose message is one line: `<key>: <what is wrong>; <what to do>`.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from member_contract import (
    ACTIVATED_ENV,
    CONFIG_ENV,
    CONFIG_FILE_ENV,
    GROUP_INSTANCE_ID_ENV,
    HTTP_HOST_ENV,
    HTTP_PORT,
    HTTP_PORT_ENV,
    MECHANISM_CREDENTIALS,
    PATTERN_SUBSCRIPTION,
    POD_NAME_ENV,
    POD_NAMESPACE_ENV,
    SECRET_ENV,
    STANDBY_ENV,
)

# librdkafka properties the runtime sets itself; a config that sets them is refused.
RUNTIME_OWNED = (
    "bootstrap.servers", "group.id", "group.instance.id", "enable.auto.commit",
    "enable.auto.offset.store", "on_commit", "stats_cb", "error_cb",
)
PROTOCOLS = ("classic", "consumer")
REQUIRED_TIMEOUTS = {
    "classic": ("session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms"),
    "consumer": ("max.poll.interval.ms",),
}
BROKER_OWNED = {
    "session.timeout.ms": "the broker owns the session timeout (group config "
                          "consumer.session.timeout.ms, which the operator sets)",
    "heartbeat.interval.ms": "the broker owns the heartbeat interval (group config "
                             "consumer.heartbeat.interval.ms, which the operator sets)",
    "partition.assignment.strategy": "the broker assigns the partitions (its assignor, "
                                     "broker config group.consumer.assignors)",
}
"""Properties librdkafka refuses with group.protocol consumer (KIP-848), and who owns them."""
SINK_TYPES = ("kafka", "parquet", "null")
SPARK_MODES = ("local", "connect")
TRANSFORM_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class ConfigError(ValueError):
    """A configuration the runtime refuses: `<key>: <what is wrong>; <what to do>`."""


@dataclass(frozen=True)
class BatchLimits:
    max_records: int
    max_wait_ms: int
    max_bytes: int


@dataclass(frozen=True)
class SparkSettings:
    mode: str
    connect_url: str | None
    master: str
    conf: Mapping[str, str]


@dataclass(frozen=True)
class SinkSettings:
    type: str
    path: str | None
    topic: str | None


@dataclass(frozen=True)
class RetrySettings:
    attempts: int
    backoff_ms: int
    max_backoff_ms: int


@dataclass(frozen=True)
class RuntimeConfig:
    """The whole validated configuration of one member process."""

    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    namespace: str
    consumer: Mapping[str, str | int | float | bool]
    transform: str
    spark: SparkSettings
    batch: BatchLimits
    sink: SinkSettings
    dead_letter_topic: str | None
    retry: RetrySettings
    group_instance_id: str | None
    pod_name: str | None
    http_host: str
    http_port: int
    standby: bool = False
    """Start in standby (`STATICFLEET_STANDBY`): start Spark and warm it up, configure the
    consumer, but join the group only when the operator says so (POST /activate)."""
    pod_activated: bool = False
    """A standby pod the operator has activated (`STATICFLEET_ACTIVATED`, from the pod's
    `staticfleet.io/activated` annotation, read at each container start): this process is a
    restart of an activated member and joins the group directly, not in standby."""

    @property
    def member(self) -> str:
        """The `member` metric label: the instance id, else the pod name, else the group id."""
        return self.group_instance_id or self.pod_name or self.group_id

    @property
    def protocol(self) -> str:
        """`group.protocol`: classic, or consumer (KIP-848)."""
        return str(self.consumer.get("group.protocol", "classic"))

    @property
    def session_timeout_ms(self) -> int | None:
        """The client's session timeout; None with protocol consumer, where the broker owns it."""
        value = self.consumer.get("session.timeout.ms")
        return None if value is None else int(value)

    @property
    def max_poll_interval_ms(self) -> int:
        return int(self.consumer["max.poll.interval.ms"])

    def subscription(self) -> list[str]:
        """What to pass to `Consumer.subscribe`: topic names, or one regex anchored at both
        ends, `^(pattern)$`, so that it is a full match of the topic name for both protocols
        (docs/consumergroup.md, "Topic patterns"): librdkafka's classic consumer searches with
        POSIX `regexec` (a bare `^pattern` would be a prefix match), and for KIP-848 librdkafka
        sends `(^(pattern)$)` to the broker, whose RE2J matches the whole name. The operator
        counts the same topics (member_contract's `PATTERN_SUBSCRIPTION`)."""
        if self.topics is not None:
            return list(self.topics)
        assert self.topic_pattern is not None
        return [PATTERN_SUBSCRIPTION.format(pattern=self.topic_pattern)]


def load_config(env: Mapping[str, str],
                read_file: Callable[[str], str] = lambda p: Path(p).read_text()) -> RuntimeConfig:
    """Build the configuration from the environment; raise ConfigError on the first bad key."""
    raw = _config_json(env, read_file)
    return parse_config(raw, env)


def _config_json(env: Mapping[str, str], read_file: Callable[[str], str]) -> Any:
    text = env.get(CONFIG_ENV, "")
    source = CONFIG_ENV
    if not text.strip():
        path = env.get(CONFIG_FILE_ENV, "")
        if not path:
            raise ConfigError(f"{CONFIG_ENV}: not set; set it to the config JSON, or set "
                              f"{CONFIG_FILE_ENV} to a file holding it")
        source = f"{CONFIG_FILE_ENV} ({path})"
        try:
            text = read_file(path)
        except OSError as exc:
            raise ConfigError(f"{source}: cannot be read ({exc.strerror}); "
                              "point it to a readable config.json") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno} column "
                          f"{exc.colno}); fix the JSON") from None


def parse_config(raw: Any, env: Mapping[str, str]) -> RuntimeConfig:
    """Validate the decoded config.json plus the environment into a RuntimeConfig."""
    top = _object(raw, "config")
    _known(top, "", ("bootstrapServers", "groupId", "topics", "topicPattern", "namespace",
                     "consumer", "processing"))
    processing = _object(top.get("processing"), "processing")
    _known(processing, "processing.", ("transform", "spark", "batch", "sink", "deadLetterTopic",
                                       "retry"))
    topics, pattern = _subscription(top)
    instance_id = env.get(GROUP_INSTANCE_ID_ENV, "").strip() or None
    standby = _flag(env.get(STANDBY_ENV, ""), STANDBY_ENV)
    activated = _flag(env.get(ACTIVATED_ENV, ""), ACTIVATED_ENV)
    return RuntimeConfig(
        bootstrap_servers=_text(top.get("bootstrapServers"), "bootstrapServers"),
        group_id=_text(top.get("groupId"), "groupId"),
        topics=topics,
        topic_pattern=pattern,
        namespace=env.get(POD_NAMESPACE_ENV) or _text(top.get("namespace", "default"), "namespace"),
        consumer=_consumer(top.get("consumer"), env),
        transform=_transform(processing.get("transform")),
        spark=_spark(processing.get("spark", {"mode": "local"})),
        batch=_batch(processing.get("batch", {})),
        sink=_sink(processing.get("sink")),
        dead_letter_topic=_optional_text(processing.get("deadLetterTopic"),
                                         "processing.deadLetterTopic"),
        retry=_retry(processing.get("retry", {})),
        group_instance_id=instance_id,
        pod_name=env.get(POD_NAME_ENV) or None,
        http_host=env.get(HTTP_HOST_ENV) or "0.0.0.0",
        http_port=_port(env.get(HTTP_PORT_ENV, str(HTTP_PORT))),
        standby=standby and not activated,
        pod_activated=standby and activated,
    )


def _flag(value: str, key: str) -> bool:
    text = value.strip().lower()
    if text in ("", "false", "0"):
        return False
    if text in ("true", "1"):
        return True
    raise ConfigError(f"{key}: must be true or false, got {value!r}; fix the pod's environment")


def _object(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: must be a JSON object, got {_kind(value)}; "
                          "see docs/contracts.md for its fields")
    return value


def _known(obj: Mapping[str, Any], prefix: str, known: tuple[str, ...]) -> None:
    for key in obj:
        if key not in known:
            raise ConfigError(f"{prefix}{key}: not a known key; remove it (known: "
                              f"{', '.join(known)})")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: must be a non-empty string, got {_kind(value)}; set it")
    return value


def _optional_text(value: Any, key: str) -> str | None:
    return None if value is None else _text(value, key)


def _integer(value: Any, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        shown = repr(value) if isinstance(value, int | float | str) else _kind(value)
        raise ConfigError(f"{key}: must be an integer >= {minimum}, got {shown}; fix the value")
    return value


def _subscription(top: Mapping[str, Any]) -> tuple[tuple[str, ...] | None, str | None]:
    topics, pattern = top.get("topics"), top.get("topicPattern")
    if (topics is None) == (pattern is None):
        raise ConfigError("topics: exactly one of topics and topicPattern must be set; set one "
                          "and make the other null")
    if pattern is not None:
        pattern = _text(pattern, "topicPattern")
        try:
            # A syntax check only: the operator refuses what the engines that match it read
            # differently (staticfleet/decisions/spec/kafka.py); POSIX classes ([[:alpha:]])
            # are a FutureWarning to Python's re, which never matches with it here.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"topicPattern: not a valid regular expression ({exc}); "
                              "fix the pattern") from None
        return None, pattern
    if not isinstance(topics, list) or not topics:
        raise ConfigError(f"topics: must be a non-empty list of topic names, got "
                          f"{_kind(topics)}; list at least one topic")
    return tuple(_text(t, f"topics[{i}]") for i, t in enumerate(topics)), None


def _consumer(value: Any, env: Mapping[str, str]) -> dict[str, str | int | float | bool]:
    props = _object(value, "consumer")
    for key, item in props.items():
        if key in RUNTIME_OWNED:
            raise ConfigError(f"consumer.{key}: set by the runtime itself; remove it")
        if not isinstance(item, str | int | float | bool):
            raise ConfigError(f"consumer.{key}: must be a string, number or boolean, got "
                              f"{_kind(item)}; fix the value")
    protocol = props.get("group.protocol", "classic")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"consumer.group.protocol: must be one of {', '.join(PROTOCOLS)}, got "
                          f"{protocol!r}; choose one")
    if protocol == "consumer":
        for key, owner in BROKER_OWNED.items():
            if key in props:
                raise ConfigError(f"consumer.{key}: not a client property with group.protocol "
                                  f"consumer: {owner}; remove it")
    for key in REQUIRED_TIMEOUTS[protocol]:
        _integer(props.get(key), f"consumer.{key}", 1)
    if protocol == "classic":
        session, heartbeat = props["session.timeout.ms"], props["heartbeat.interval.ms"]
        if heartbeat >= session:
            raise ConfigError(f"consumer.heartbeat.interval.ms: must be below session.timeout.ms "
                              f"({heartbeat} >= {session}); set it to about a third of the "
                              "session timeout")
    merged: dict[str, str | int | float | bool] = dict(props)
    for env_key, prop in SECRET_ENV.items():
        if env.get(env_key):
            merged[prop] = env[env_key]
    if merged.get("sasl.oauthbearer.method") == "oidc":
        for env_key in MECHANISM_CREDENTIALS["OAUTHBEARER"]:
            if SECRET_ENV[env_key] not in merged:
                raise ConfigError(f"{env_key}: not set, and OAUTHBEARER (oidc) needs it; the "
                                  "operator sets it from spec.kafka.security.sasl.oauthbearer")
    return merged


def _transform(value: Any) -> str:
    text = _text(value, "processing.transform")
    if not TRANSFORM_RE.match(text):
        raise ConfigError(f"processing.transform: must read module:function, got {text!r}; "
                          "e.g. consumer_runtime.transforms:identity")
    return text


def _spark(value: Any) -> SparkSettings:
    spark = _object(value, "processing.spark")
    _known(spark, "processing.spark.", ("mode", "connectUrl", "master", "conf"))
    mode = spark.get("mode", "local")
    if mode not in SPARK_MODES:
        raise ConfigError(f"processing.spark.mode: must be one of {', '.join(SPARK_MODES)}, got "
                          f"{mode!r}; choose one")
    url = _optional_text(spark.get("connectUrl"), "processing.spark.connectUrl")
    if mode == "connect" and (url is None or not url.startswith("sc://")):
        raise ConfigError(f"processing.spark.connectUrl: mode connect needs an sc:// URL, got "
                          f"{url!r}; set it, e.g. sc://spark-connect:15002")
    conf = _object(spark.get("conf") or {}, "processing.spark.conf")
    for key, item in conf.items():
        if not isinstance(item, str | int | float | bool):
            raise ConfigError(f"processing.spark.conf.{key}: must be a string, number or "
                              f"boolean, got {_kind(item)}; fix the value")
    return SparkSettings(
        mode=mode, connect_url=url,
        master=_text(spark.get("master") or "local[2]", "processing.spark.master"),
        conf={k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in conf.items()},
    )


def _batch(value: Any) -> BatchLimits:
    batch = _object(value, "processing.batch")
    _known(batch, "processing.batch.", ("maxRecords", "maxWaitMs", "maxBytes"))
    return BatchLimits(
        max_records=_integer(batch.get("maxRecords", 10000), "processing.batch.maxRecords", 1),
        max_wait_ms=_integer(batch.get("maxWaitMs", 1000), "processing.batch.maxWaitMs", 0),
        max_bytes=_integer(batch.get("maxBytes", 64 * 1024 * 1024), "processing.batch.maxBytes",
                           1),
    )


def _sink(value: Any) -> SinkSettings:
    sink = _object(value, "processing.sink")
    _known(sink, "processing.sink.", ("type", "path", "topic"))
    kind = sink.get("type")
    if kind not in SINK_TYPES:
        raise ConfigError(f"processing.sink.type: must be one of {', '.join(SINK_TYPES)}, got "
                          f"{kind!r}; choose one")
    path = _optional_text(sink.get("path"), "processing.sink.path")
    topic = _optional_text(sink.get("topic"), "processing.sink.topic")
    if kind == "parquet" and path is None:
        raise ConfigError("processing.sink.path: a parquet sink needs a path; set it to the "
                          "output directory")
    if kind == "kafka" and topic is None:
        raise ConfigError("processing.sink.topic: a kafka sink needs a topic; set it to the "
                          "output topic")
    return SinkSettings(type=kind, path=path, topic=topic)


def _retry(value: Any) -> RetrySettings:
    retry = _object(value, "processing.retry")
    _known(retry, "processing.retry.", ("attempts", "backoffMs", "maxBackoffMs"))
    settings = RetrySettings(
        attempts=_integer(retry.get("attempts", 3), "processing.retry.attempts", 1),
        backoff_ms=_integer(retry.get("backoffMs", 500), "processing.retry.backoffMs", 0),
        max_backoff_ms=_integer(retry.get("maxBackoffMs", 10000),
                                "processing.retry.maxBackoffMs", 0),
    )
    if settings.max_backoff_ms < settings.backoff_ms:
        raise ConfigError(f"processing.retry.maxBackoffMs: below backoffMs "
                          f"({settings.max_backoff_ms} < {settings.backoff_ms}); raise it")
    return settings


def _port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise ConfigError(f"{HTTP_PORT_ENV}: must be a port number 0-65535, got "
                          f"{value!r}; fix the environment")
    return int(value)
