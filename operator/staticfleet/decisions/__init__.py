"""Pure decisions: everything a reconcile pass decides, from what it gathered.

`plan.decide(snapshot) -> Plan` is the pass's one decision, in numbered steps, each in the module
that owns its subject:

* the input and the output: `snapshot` (what a pass saw), `settings` (what the operator was
  started with), `actions` (the `Plan` and its actions);
* the spec and the children: `model` (the typed spec and its parsing), `kafkaspec` (its
  `spec.kafka` section), `specfields` (the typed field readers and `SpecError`), `builders` and
  `podsecurity` (pods, ConfigMap, Service, PDB, Secret, NetworkPolicy), `kafkaclient` (how a
  client of the group's cluster connects);
* the timeouts: `timeouts` (the rules), `effectivetimeouts` (what they chose), `measurements`
  (what the members measured), `tuning` (the timeouts one pass puts in force);
* the members: `members` (each member as observed), `reasons` (why a member needs a restart),
  `pods` (pods to create, to delete, standbys to activate), `stalls` (members that stopped
  making progress), `problems` (what keeps the group from running);
* the rollout: `rollstate` (the roller's inputs and `status.rollout`), `gates` (its safety
  predicates), `rollout` (the roller: when to restart whom), `rollsteps` (the steps it decides),
  `rollwarm` (a warm handoff's own steps), `rollrecord` (the state after a step), `rollactions`
  (the roller's step as this pass's actions);
* rebalances: `rebalances` (counting them), `planned` (the ones the operator asks for: scale-down,
  rejoin), `scaling` (which ordinals exist, which go first);
* the status: `conditions` (types, reasons, helpers), `status` (the status and its conditions).

Nothing in this package does I/O, reads the clock or imports a Kubernetes, kopf or Kafka client
(enforced by `.importlinter`): time is the snapshot's `now`.
"""
