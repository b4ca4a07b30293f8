"""The member process: a static Kafka consumer that processes its batches on Spark.

Layout: pure modules (`config`, `records`, `buffer`, `delivery`, `metrics`' Telemetry and its
Prometheus `series`) hold the decisions and run without a broker; `member` is the Kafka poll
loop (`leaving` its ways out of the group and back in, `rebalancing` its rebalance callbacks,
`inflight` the batch in the worker), `processing` the retry and poison-isolation policy around
one batch, `spark` the session and the batch run, `sinks` where results go, `http` the
endpoints, `main` the wiring.

Long batches: one batch is processed at a time in a worker thread while the poll loop keeps
calling the consumer. The loop gathers the next batch meanwhile; once that one is full it waits
for the worker up to 2 s (min(2 s, max.poll.interval.ms / 4)), then pauses the assigned
partitions and keeps polling (nothing is fetched, callbacks are served, librdkafka's
max.poll.interval.ms timer is reset), so a batch may run longer than max.poll.interval.ms without
the member leaving the group. When the worker finishes, the loop commits that batch's offsets
synchronously, hands over the next batch and resumes the partitions. Offsets are committed only
after the sink accepted the batch (at-least-once). See docs/runtime.md.
"""
