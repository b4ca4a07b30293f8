"""The ConsumerGroup's spec, typed and parsed (pure): `model` (the typed spec and its parsing),
`kafka` (its `spec.kafka` section), `podsecurity` (the member pods' security contexts),
`autoscaling` (`spec.autoscaling`), over `bounds` (every field's maxLength, maxItems,
maxProperties or maximum, the CRD's), over `fields` (the typed field readers and `SpecError`).

It imports nothing else of the decisions: every other room reads the spec (`.importlinter`).
"""
