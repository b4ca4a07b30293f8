"""The Kafka wire kit: what both images need to talk to Kafka through kafka-python's client,
written once. The operator's per-cluster reads (`staticfleet.observe.wire`,
`staticfleet.observe.clientsettings`) and the member's static leave and group view
(`consumer_runtime.staticleave`, `consumer_runtime.groupview`) import it; both images ship it
beside their own package, as they ship `member_contract`.

* `messages`: Kafka's error codes the callers tell apart, and the request and response
  structs kafka-python 2.x lacks (FindCoordinator v4, DescribeGroups v5, ConsumerGroupDescribe
  v0, OffsetFetch v8, ConsumerGroupHeartbeat v1), with the decoders of the assignments they
  carry.
* `settings`: kafka-python's client settings from a librdkafka configuration: the servers,
  the security protocol, one row per SASL mechanism of the member contract, the TLS context
  (key material from memory, never a disk) and the OAUTHBEARER token provider (OIDC client
  credentials). What kafka-python cannot honour is refused (`Unsupported`), never dropped.

It imports kafka-python, the standard library and `member_contract`, nothing else (an
import-linter contract, and tests/unit/test_kafkawire.py for "nothing else"): neither image
may bring the other's code, or a client it does not install, with it.
"""
