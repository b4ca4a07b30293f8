"""`spec.kafka.topicPattern` (issue 46): one meaning, a full match of the topic name, matched
in linear time. The spec parser refuses, with what to do, a pattern the engines would read
differently; the operator's matcher (`decisions.spec.kafka.topic_matcher`, RE2) agrees with
glibc's POSIX `regexec` on the members' subscription, which is what a classic member's
librdkafka runs (its shared library imports `regcomp`/`regexec` from glibc). The KIP-848 side
(the broker's RE2J) and both protocols on a real broker: tests/integration/test_topic_pattern.py.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import pytest

from consumer_runtime.config import parse_config
from member_contract import PATTERN_SUBSCRIPTION
from staticfleet.decisions.spec.fields import SpecError
from staticfleet.decisions.spec.kafka import TOPIC_PATTERN_MAX_LENGTH, parse, topic_matcher
from tests.unit.runtime.support import base as runtime_base

NAMES = ("orders", "orders-eu", "orders-us", "xorders", "orders.eu", "orders_1", "order",
         "a", "aa", "aaa", "_", "b", "d", "1", "12", "Orders", "eu-orders", "orders-eu-2")
AGREED = ("orders", "orders-.*", "orders-(eu|us)", "(x)?orders", "orders|xorders", "orders.*",
          "[[:alpha:]]+", "[a-z_]+", "[^x].*", "[]a]x", "a{2}", "a{1,}", "a{1,2}", "[0-9]+",
          "orders\\.eu", "^orders$", "(orders)-.+", "orders-[[:alnum:]]+", ".*-eu",
          "[[:alpha:]_]+", "[^]a]*", "(a+)*", "(orders|xorders)(-eu)?")


def glibc_search(regex: str, name: str) -> bool:
    """glibc's `regexec` on `regex` (REG_EXTENDED | REG_NOSUB, as librdkafka's rdregex.c)."""
    libc = ctypes.CDLL("libc.so.6")
    compiled = ctypes.create_string_buffer(256)  # regex_t is 64 bytes on x86-64 glibc
    assert libc.regcomp(compiled, regex.encode(), 1 | 8) == 0, f"glibc refused {regex!r}"
    try:
        return bool(libc.regexec(compiled, name.encode(), 0, None, 0) == 0)
    finally:
        libc.regfree(compiled)


def kafka(pattern: str) -> dict[str, str]:
    return {"bootstrapServers": "k:9092", "topicPattern": pattern}


@pytest.mark.parametrize("pattern", AGREED)
def test_the_operator_counts_what_a_classic_member_subscribes_to(pattern: str) -> None:
    parse(kafka(pattern), "g")
    subscription = PATTERN_SUBSCRIPTION.format(pattern=pattern)
    assert {n for n in NAMES if topic_matcher(pattern)(n)} == {
        n for n in NAMES if glibc_search(subscription, n)}


@pytest.mark.parametrize("pattern", AGREED)
def test_a_member_takes_every_pattern_the_operator_takes(pattern: str) -> None:
    raw = runtime_base() | {"topics": None, "topicPattern": pattern}
    assert parse_config(raw, {}).subscription() == [PATTERN_SUBSCRIPTION.format(pattern=pattern)]


def test_the_old_subscription_was_a_prefix_search() -> None:
    """What main subscribed to (`"^" + pattern`) took every topic the pattern prefixes."""
    assert [n for n in NAMES if glibc_search("^orders", n)] == [
        "orders", "orders-eu", "orders-us", "orders.eu", "orders_1", "orders-eu-2"]
    assert [n for n in NAMES if topic_matcher("orders")(n)] == ["orders"]


@pytest.mark.parametrize(("pattern", "says"), [
    ("", "is empty; write a pattern, or list the topics in spec.kafka.topics"),
    ("orders-(", "is not a POSIX extended regular expression as RE2 reads it (missing )"),
    ("orders-\\d+", "(invalid escape sequence: \\d); there is no \\d, \\w, \\s, \\b or (?...): "
     "write [0-9]"),
    ("(?:orders)", "is not a POSIX extended regular expression as RE2 reads it"),
    ("(?i)orders", "is not a POSIX extended regular expression as RE2 reads it"),
    ("(?<=x)orders", "is not a POSIX extended regular expression as RE2 reads it"),
    ("orders-[a\\-z]", "has a backslash inside a bracket expression at 9: a classic member's "
     "POSIX regex reads it as a literal, RE2 as an escape; write the characters themselves"),
    ("a{,3}", "has a { at 1 that is not a repetition {n}, {n,} or {n,m}"),
    ("orders{", "has a { at 6 that is not a repetition"),
    ("a{1001}", "invalid repetition size"),
    ("orders-a+*", "has two repetition operators in a row at 9, which POSIX leaves undefined"),
    ("orders-.*?", "has two repetition operators in a row at 9"),
    ("a{2}{3}", "has two repetition operators in a row at 4"),
    ("o" * (TOPIC_PATTERN_MAX_LENGTH + 1), "is 257 characters long, longer than the 256 "
     "allowed; shorten it"),
])
def test_a_pattern_the_engines_read_differently_is_refused(pattern: str, says: str) -> None:
    with pytest.raises(SpecError) as err:
        parse(kafka(pattern), "g")
    assert err.value.field_path == "spec.kafka.topicPattern"
    assert says in str(err.value), str(err.value)


def test_where_the_engines_differ_they_do() -> None:
    """The refusals above are not taste: glibc reads these otherwise than RE2 would."""
    assert glibc_search("^(orders-\\d)$", "orders-d") and not glibc_search(
        "^(orders-\\d)$", "orders-1")
    assert glibc_search("^([a\\-z])$", "_")     # a range from \\ to z
    assert glibc_search("^(a{,3})$", "aa")     # RE2: the literal text a{,3}


def test_the_longest_pattern_is_accepted() -> None:
    parse(kafka("o" * TOPIC_PATTERN_MAX_LENGTH), "g")


def test_a_catastrophic_pattern_is_matched_in_linear_time() -> None:
    """`([a-z._-]+)+X` against a 34-character name: minutes of backtracking in Python's `re`
    (holding the GIL), microseconds in RE2. Both of the operator's matches run (the cluster's
    whole read and the per-group fallback), in a child process with a deadline, so that on a
    backtracking engine this fails instead of hanging."""
    probe = textwrap.dedent("""
        from types import SimpleNamespace
        from staticfleet.observe import kafkareads
        from staticfleet.observe.clusterheld import Registration
        from staticfleet.observe.clusterreads import ClusterReader, _Topics
        from staticfleet.observe.clusteranswers import TopicsAnswer
        name = "orders.eu-north.payments-confirmed"
        assert len(name) == 34
        pattern = "([a-z._-]+)+X"
        reader = object.__new__(ClusterReader)
        reader.topics = _Topics(0.0, TopicsAnswer({name: 1, "ordersX": 1}, {}), True)
        print(reader._names(Registration("g", pattern=pattern)))
        pool = SimpleNamespace(check=lambda *a: None, record=lambda *a: None)
        one = {0: SimpleNamespace(leader=1)}
        topics = {n: SimpleNamespace(partitions=one) for n in (name, "ordersX")}
        client = SimpleNamespace(list_topics=lambda timeout: SimpleNamespace(topics=topics))
        admin = SimpleNamespace(pool=pool, key="k", bootstrap="k:9092", client=client)
        print(sorted(kafkareads.pattern_topics_seen(admin, pattern).counts))
    """)
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=20, env={"PYTHONPATH": ":".join(sys.path)})
    except subprocess.TimeoutExpired:
        pytest.fail("matching ([a-z._-]+)+X against a 34-character topic name took over 20 s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["['ordersX']"] * 2, done.stdout
