"""The timeouts (pure): `rules` (how the session, heartbeat and poll timeouts are chosen from
the spec, the broker's bounds and the measurements), `inputs` (what the rules choose from: the
broker's bounds, the measurements, the rules' constants), `hysteresis` (how an automatic value
moves toward its need), `effective` (what they chose, in each
form it is written: client properties, group configs, status), `measurements` (what the
members measured, and the readers of it: their pods, their `/status`, `status.measurements`)
and `widening` (a KIP-848 group's session timeout raised while a rollout runs and set back
after it: its record in `status.timeouts.widening`, the hold before a stop).

The pass's step that puts the timeouts in force is `decisions.tuning`: it needs the members'
revision and the rollout, which sit above this room (`.importlinter`).
"""
