"""What the operator reads from (and sets on) outside Kubernetes: the Kafka cluster, through
the admin client, and the members' own `/status` endpoints, and what it asks of members
(`/leave`, `/rejoin`, `/activate`, `/drain`, with their group's bearer token).

Every read of the world outside Kubernetes is here (the Kubernetes API is `apply`'s), in
layers (.importlinter, `observe-layers`):

* `lagreads`: each group's lag, from what the members report and, where they do not, from the
  brokers' offsets, read at most once per interval; how fresh a group's figures must be
  (`max_age_s`: a rollout in flight, an autoscaler) is decided next to that interval.
* `memberhttp`: the members' HTTP endpoints: `/status` read, `/drain` and the other requests asked.
* `clusterreads`: every registered group of one cluster read together, per interval: a few
  requests per coordinator (describes, committed offsets) and per partition leader (end
  offsets) for all groups, through kafka-python's client, in process (issue 37); what a pass
  takes from them, as fresh as it needs, and a thread per cluster that reads it every interval
  and tells the passes whose group changed (`clusterpool`); what they hold of a group and what
  of that is a change (`clusterheld`).
* `kafkareads`: what the operator reads from the cluster (the group, its committed and end
  offsets, the topics, the brokers' timeout bounds) and the group configs it sets there.
* `kafkaadmin`: the admin clients, one per cluster configuration (`AdminPool`), and how a
  request's answer or failure becomes the operator's own errors (`KafkaUnavailable`, ...).
* `coordinated`: the requests to a group's coordinator, made by a child process per cluster
  (librdkafka aborts the process on some of their failures).
* `clusteranswers` (what those reads' answers say, as the operator's types), `wire` (their
  requests, the versions kafka-python lacks from the wire kit `kafkawire.messages`, and a
  batch of them sent and awaited) and `clientsettings` (the wire kit's kafka-python settings
  for the admin client's configuration, as the operator's client).

Everything here blocks; the service calls it from a worker thread (and `clusterpool` from
its own threads).
"""
