"""The roller (pure), one module per part, in the order they import each other
(`.importlinter`):

* `state`: its inputs and memory (`GroupObservation`, `RolloutLimits`, `RolloutState` in
  `status.rollout`);
* `gates`: its safety predicates; `steps`: the steps it may decide (and `Decided`);
* `warm`: a warm handoff's own steps;
* `roller`: when to restart whom (`next_step`); `record`: the state after a step
  (`record_step`, one row per step type);
* `effects`: the step as this pass's actions (`rollout_step`, one row per step type).

The "why" of a restart is `decisions.reasons`; the members it restarts are `members.observed`.
"""
