"""The test kit: what the tests, the benchmarks and the demo share to drive a running system.

- `poll`: waiting until something is true (`wait_for`), and polling in the background while
  acting (`Poller`);
- `kube`: kubectl against an API server, the CRDs, namespaces, the examples as objects;
- `groups`: ConsumerGroup objects (`consumer_group`), reading them back, what their status
  says (`ready_and_idle`, `rollout_complete`) and waiting on it (`start`, `wait_rollout`);
- `ledger`: what a group's rebalance ledger shows (`status.rebalanceLedger`, the rebalances
  by cause in the operator's metrics);
- `operator`: the operator as a real process (`OperatorProcess`), this checkout's or an
  earlier commit's (`Variant`, `worktree`);
- `memberwatch`: what the member processes of a namespace did while brokers restarted around
  them (`MemberWatch`: process restarts, partition owners, fetch stalls);
- `probe`: a bare confluent-kafka group member as a process, for broker-level tests;
- `consumers`: confluent-kafka consumers polled in a thread: a static member, and a consumer
  of a group's group.id that is none of its members (`ForeignConsumer`);
- `secured`: a broker with secured listeners and the credentials of each.

A wait that runs out raises AssertionError saying what it waited for and what it last saw, as
a test's assert would. The kit imports neither pytest nor the tests; the tests' fixtures stay
in tests/conftest.py.
"""
