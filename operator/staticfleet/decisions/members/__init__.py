"""The members (pure): `observed` (each member as observed from its pod, the broker's group and
its `/status`: `ObservedMember`, `MemberTable`), `problems` (what keeps the group from running)
and `stalls` (members that stopped making progress, and their restart).

Below the rollout, which decides from the observed members (`.importlinter`).
"""
