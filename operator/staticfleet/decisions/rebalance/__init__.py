"""The group's rebalances (pure), one module per part, in the order they import each other
(`.importlinter`):

* `count`: counting them from what one pass sees (the members' counters, the group's state
  and generation; `status.rebalances` and the credits of `status.stateCountedRebalances`);
* `planned`: the rebalances the operator makes on purpose (scale-down, rejoin) and which of
  those counted they explain; `causes`: why one happened (the rules, as rows);
* `ledger`: the rebalance ledger of the status (`status.rebalanceLedger`): each rebalance with
  its cause and the evidence for it, and the signs the passes note to find them.

Above the status, the rollout and the members, which `planned` and `ledger` read; below the
pass's pods and pace, which carry out a scale-down and wait for a planned rebalance to show.
"""
