"""The member simulator: one process that answers for every member pod of a benchmark whose
pods run on fake nodes (kwok: Ready pods, no processes), as each member's process would.

Run it, then start the operator with its address (the only place that reads it; the chart never
sets it, docs/install.md "Operator settings")::

    python -m staticfleet_dev.membersim --kubeconfig PATH --listen 127.0.0.1:18080
    STATICFLEET_MEMBER_HTTP_VIA=127.0.0.1:18080 staticfleet operator run --all-namespaces

The operator then sends each member request (`GET /status`, `POST /drain`, `/activate`,
`/leave`, `/rejoin`) to the simulator, naming the pod's IP in `X-Staticfleet-Pod-IP`
(`staticfleet.observe.memberhttp.route_through`).

* `members`: the simulated processes (pure): phases moved by time and requests, the `/status`
  document and the answers, with the runtime's keys and refusals.
* `pods`: what a member pod and a member token Secret say (pure).
* `server`: the HTTP server (aiohttp, one event loop in a thread of its own) over the table,
  checking each POST against the group's token with the runtime's own check.
* `watch`: the member pods of every ConsumerGroup and the operator's Secrets, listed and
  watched from the API server.

`GET /_sim/stats` (no pod header) says how many members and tokens it knows and what it answered:
a bench waits on it until the simulator knows all its pods.
"""
