"""Pure decisions: everything a reconcile pass decides, from what it gathered.

`plan.decide(snapshot) -> Plan` is the pass's one decision, in numbered steps, each in the module
that owns its subject. The subjects with several modules are rooms (subpackages); the modules of
the pass stay here. From the bottom up (the order `.importlinter` holds: a module imports only
what stands below it):

* `spec/`: the typed spec and its parsing (`model`, its sections `kafka`, `podsecurity`,
  `autoscaling`, the bounds of every field in `bounds`, the field readers and `SpecError` in
  `fields`);
* `names` (the member pod's contract with the cluster: labels, annotations, names), `reasons`
  (why a member needs a restart), and the pass's input and output: `snapshot` (what a pass
  saw), `settings` (what the operator was started with), `actions` (the `Plan` and its
  actions), `kafkaclient` (how a client of the group's cluster connects);
* `timeouts/`: `rules` (how they are chosen), `effective` (what they chose), `measurements`
  (what the members measured);
* `builders`: the children (pods, ConfigMap, Service, PDB, Secret, NetworkPolicy);
* `members/`: `observed` (each member as observed), `problems` (what keeps the group from
  running), `stalls` (members that stopped making progress);
* `rollout/`: the roller (`state`, `gates`, `steps`, `warm`, `roller`, `record`, `effects`; its
  own map is its `__init__`);
* `status` (the status and its conditions), `tuning` (the timeouts one pass puts in force),
  `autoscaler/`: `rules` (the replica count it decides) and `load` (the figures it decides on);
* `rebalance/`: `count` (counting them), `planned` (the rebalances the operator asks for:
  scale-down, rejoin), `causes` (why a rebalance happened: the rules, as rows) and `ledger`
  (the rebalance ledger of the status: each rebalance with its cause and evidence);
* `pods` (pods to create, to delete, standbys to activate), `pace` (whether the group is at
  rest after a pass, and when the next one is due), and `plan` over them all;
* beneath everything: `conditions` (types, reasons, helpers), `scaling` (which ordinals exist,
  which go first), `drift` (whether a child still holds what the operator applied to it),
  `clusters` (which Kafka cluster a bootstrap list names, however it is spelled), `settings`,
  and under `settings` `shards` (which ConsumerGroups a sharded operator owns, and when it may
  take one over).

Nothing in this package does I/O, reads the clock or imports a Kubernetes, kopf or Kafka client
(enforced by `.importlinter`): time is the snapshot's `now`.
"""
