"""The local node: a small stand-in for a kubelet, for tests and demos only.

Run it as::

    python -m staticfleet_dev.localnode --kubeconfig PATH --node-name local-node \\
        --log-dir DIR

It registers a Node (Ready, capacity cpu 2 / the machine's memory / 110 pods, InternalIP
127.0.0.1, labels kubernetes.io/hostname, kubernetes.io/os=linux, kubernetes.io/arch), renews
its Lease in `kube-node-lease` and its Ready condition's heartbeat every 10 s, binds pending pods
to itself (there is no kube-scheduler) and runs each pod's first container as a local process.
SIGTERM (or SIGINT) stops every pod process (SIGTERM, grace capped by --shutdown-grace, SIGKILL)
and exits; the pod objects are left as they are.

Supported
- Scheduling: pods with no `spec.nodeName` and the default scheduler are bound (pods/binding).
  `nodeSelector` and required node affinity (`matchExpressions` In/NotIn/Exists/DoesNotExist/
  Gt/Lt, `matchFields` metadata.name) are checked against the node's labels; a pod that does not
  fit stays Pending with PodScheduled=False, reason Unschedulable (written only onto the pod's
  version as seen: resourceVersion precondition), unless another Node of the cluster could take
  it (Ready, not cordoned, its NoSchedule/NoExecute taints tolerated, selector and affinity
  matched; Nodes listed at most every 2 s): such a pod is left alone for whatever places pods
  there, e.g. kwok's fake nodes and their binder (`staticfleet_dev.kwok`).
- Pod IPs: each pod gets its own loopback address from 127.0.1.2 upwards (lowest free, reused
  after deletion; Linux routes all of 127.0.0.0/8 to `lo`, so processes bind them as they are).
  Addresses are unique on the machine, also across several local nodes (one per environment):
  each is held as a lock file in `--ip-lock-dir` (default `$TMPDIR/staticfleet-localnode-ips`),
  and addresses with a listening socket (per /proc/net/tcp) are skipped.
  `status.podIP(s)`; `hostIP` 127.0.0.1. Many pods can each listen on 8080.
- The first container only: `command + args` with `$(VAR)` expansion. There is no image, so a
  container without `command` waits with reason NoImageEntrypoint. A bare `python`/`python3` as
  the command is replaced by the local node's own interpreter (`sys.executable`), and that
  interpreter's directory is put first on PATH, so console scripts of the same virtualenv (e.g.
  `staticfleet`) resolve to it.
- Environment: the machine's environment (without KUBECONFIG: the node's credentials never
  leak into a pod), then HOSTNAME=<pod name>, then the pod's: literal
  values, fieldRef (metadata.name/namespace/uid/labels['x']/annotations['x'], spec.nodeName,
  spec.serviceAccountName, status.podIP(s), status.hostIP(s)), resourceFieldRef (approximated),
  configMapKeyRef, secretKeyRef, envFrom; see `staticfleet_dev.podenv`. A missing
  non-optional ConfigMap/Secret/key leaves the container Waiting with reason
  CreateContainerConfigError; it is retried every 2 s. The environment is resolved at each
  container start from the pod as last seen, so a container restarted in place sees the
  labels and annotations of then, as with a kubelet.
- Termination message: a kubelet mounts a file at `terminationMessagePath`; this node cannot,
  so it gives each container start an empty file of its own
  (`<log-dir>/work/<namespace>_<pod>_<uid>/termination-log`), names it in
  `STATICFLEET_TERMINATION_MESSAGE_PATH`, and at the exit reads it (at most 4 KiB) into
  `state.terminated.message`; with nothing written, `FallbackToLogsOnError` keeps the end of
  the run's log for a failed container.
- Working directory: `workingDir` if set, else `<log-dir>/work/<namespace>_<pod>_<uid>`.
- In-cluster credentials as a kubeconfig: a kubelet mounts the ServiceAccount token at
  /var/run/secrets/kubernetes.io/serviceaccount; this node cannot mount, so for a pod that gets a
  token (`automountServiceAccountToken` not false: true, or unset with the token volume the
  ServiceAccount admission plugin adds) it requests one through the TokenRequest API
  (`serviceaccounts/<spec.serviceAccountName, default "default">/token`, bound to the pod by
  name and uid, expirationSeconds 3607 as a kubelet asks), writes `token`, `ca.crt`,
  `namespace` and a `kubeconfig`
  (server and CA = those of this node's own kubeconfig, user = the token, default namespace = the
  pod's) to `<log-dir>/work/<namespace>_<pod>_<uid>/serviceaccount/` (mode 0600), and sets
  `KUBECONFIG` to that kubeconfig unless the pod sets `KUBECONFIG` itself. Clients that prefer
  in-cluster config fall back to it (KUBERNETES_SERVICE_HOST is not set). The token is renewed
  (files replaced atomically) once 80% of its lifetime has passed, as the kubelet does; a client
  that read the kubeconfig once keeps the old token until it reloads it (kopf re-logs in on
  401). Container restarts keep the current token. A failed TokenRequest (no such
  ServiceAccount) leaves the container waiting in ContainerCreating with the error as message,
  retried every 2 s.
- Secret volumes (`secret`, mounted whole: no `subPath`): a process here cannot see a file at a
  `mountPath`, so the node writes the volume's files (every key of the Secret, or its `items` at
  their paths; mode 0600) to `<log-dir>/work/<namespace>_<pod>_<uid>/volumes/<volume>/` before
  the container starts, and rewrites each environment value that names the `mountPath` or a
  path under it to point there (so `STATICFLEET_MEMBER_TOKEN_FILE=/var/run/secrets/...` names
  the projected file); paths written literally into `command`/`args` are not rewritten. A
  missing non-optional Secret or listed key leaves the container in ContainerCreating with the
  kubelet's message (`MountVolume.SetUp failed for volume ...`), retried every 2 s. While the pod
  runs, its Secrets are read every 5 s and changed files replaced in place, atomically (a
  kubelet takes up to about a minute); a Secret deleted meanwhile leaves the files as they were,
  as with a kubelet. Container restarts keep the files.
- Probes (startup, readiness, liveness): httpGet (port by number or by container port name,
  host defaults to the pod IP, path, scheme, headers; 200-399 is success), tcpSocket and exec
  (run locally with the container's environment), with initialDelaySeconds, periodSeconds,
  timeoutSeconds, successThreshold and failureThreshold as in Kubernetes. No readiness probe:
  Ready once started. A failed liveness or startup probe restarts the container. grpc probes are
  not supported and count as success.
- restartPolicy: Always restarts after any exit, OnFailure after a non-zero exit, Never leaves the
  pod Succeeded/Failed. Restart back-off is 1 s, 2 s, 4 s ... capped at 30 s (the kubelet's 10 s
  base and 5 min cap are too slow for tests), reset after a container ran for 60 s.
- Status (pods/status, strategic merge patch with the pod's UID as a precondition as the kubelet
  sends it, so a deleted pod's status never lands on a new pod of its name; sent only when it
  changes): phase,
  containerStatuses (ready, started, restartCount, state/lastState with reasons), conditions
  PodReadyToStartContainers, Initialized, ContainersReady, Ready (readinessGates honoured),
  PodScheduled, startTime, and a message listing what this node ignores in the pod.
- Deletion: on `deletionTimestamp` the process group gets SIGTERM, then SIGKILL after
  `deletionGracePeriodSeconds` (else spec.terminationGracePeriodSeconds, else 30); the final
  container state is written and the pod is deleted with grace 0 and a UID precondition (a new
  pod with the same name is never touched). A pod that disappears without that (force deletion)
  gets SIGTERM and SIGKILL after 2 s (the kubelet's minimum grace).
- A terminal phase set by another (an eviction, or a test that plays one through pods/status):
  as a kubelet, the node keeps the pod's phase, reason and message, stops its container for good
  (SIGTERM, SIGKILL after the pod's grace period) and adds the final container state.
- Restarting the local node: pods already bound to it that are not Succeeded/Failed get a new
  process (restartCount continues from the pod's status; the pod IP is kept when still free).
- Output: stdout and stderr of every run go to `<log-dir>/<namespace>_<pod>_<uid>.log`, appended
  across restarts, with a marker line at each start and exit.

Not supported: images, volumes other than Secret volumes (their volumeMounts, and those with a
`subPath`, are ignored and named in the pod's status message), securityContext (the process
runs as the node's own user with its capabilities, no seccomp profile and a writable
filesystem; the fields set are named in the message, and a member pod's /tmp emptyDir is the
machine's /tmp), init and sidecar containers (ignored, named in the message),
containers after the first, resource limits and fit, taints/tolerations (the local node has no
taints; those of other nodes count only for leaving a pod alone), pod (anti-)affinity,
preferred node affinity, hostNetwork/ports (everything is on loopback anyway), service
environment variables (so no KUBERNETES_SERVICE_HOST; credentials come as a kubeconfig, above),
pod resize, ephemeral containers, logs/exec
through the API.

The modules, pure ones first:
  ids         time stamps, node labels, pod keys, pod IP addresses (IpPool)
  lifecycle   restart policy and back-off, exit codes, grace periods
  scheduling  whether this node binds a pod, why it cannot run it, whether another can
  probes      probe specs and their thresholds; running one probe (I/O)
  podstatus   the pod status this node reports, and the patch that sets it
  api         its own small client of the API server (raw JSON) and ApiError
  worker      PodWorker: one pod's process, probes, credentials, Secret volumes, status and
              deletion
  node        LocalNode (registration, heartbeat, pod watch, binding, shutdown) and main()
The operator's rule that only `staticfleet.apply` talks to the Kubernetes API does not cover this
package: the local node plays the kubelet and has its own client (`api`).
"""
