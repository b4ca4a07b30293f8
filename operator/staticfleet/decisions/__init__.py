"""Pure decisions: the typed model, child builders, timeouts, restart reasons and the roller's plan.

Nothing in this package does I/O, reads the clock or imports a Kubernetes, kopf or Kafka client
(enforced by `.importlinter`). Handlers parse a body with `model.ConsumerGroupSpec.from_body`,
call these functions with observations and `now`, and hand the results to the apply layer.
"""
