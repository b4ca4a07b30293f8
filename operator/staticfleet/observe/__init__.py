"""What the operator reads from (and sets on) outside Kubernetes: the Kafka cluster, through
the admin client, and the members' own `/status` endpoints, and what it asks of members
(`/leave`, `/rejoin`, `/activate`, `/drain`, with their group's bearer token).

* `kafkaadmin`: the admin clients, one per cluster configuration (`AdminPool`), and how a
  request's answer or failure becomes the operator's own errors (`KafkaUnavailable`, ...).
* `kafkareads`: what the operator reads from the cluster (the group, its lag, the topics, the
  brokers' timeout bounds) and the group configs it sets there.
* `memberhttp`: the members' HTTP endpoints: `/status` read, `/drain` and the other requests asked.

Everything here blocks; the service calls it from a worker thread.
"""
