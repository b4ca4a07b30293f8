"""The autoscaler (pure): `rules` (the replica count it decides on a rebalance budget,
`decide_autoscaling`, and who owns `spec.replicas`) over `load` (the figures it decides on, as
measured: each member's throughput and capacity, the backlog in seconds, the arrival rate).

Its spec is `spec.autoscaling`; `plan` takes its decision, and the service writes the count to
`spec.replicas` as `rules.FIELD_MANAGER`.
"""
