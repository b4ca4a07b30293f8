"""`staticfleet demo`: a rolling restart of a static-membership consumer group, shown locally.

It brings up the local environment (broker, control plane, local node), installs the CRD, runs
the operator as a process registered with the environment (so `staticfleet env down` stops it),
creates the topic `orders` (12 partitions), produces a steady stream from a thread, applies the
example ConsumerGroup (examples/consumergroup.yaml, pointed at the local broker, Spark on one core,
Parquet under the environment's directory), waits until it is Ready, lets it consume for a while,
bumps `spec.rollout.restartNonce` and watches the rollout, lets it consume again, stops the
producer and waits until the group has committed every record. Then it reports, draws the
throughput per member (`demo-throughput.png` in the environment's directory; with `--down`, which
removes that directory, `<cache>/demo/<name>-throughput.png`) and either leaves everything running
or tears it down. The producer runs in the demo's process and stops with it: what is left running
is the environment, the operator and the (then idle) members.

The modules, pure ones first:
  group     the demo's ConsumerGroup: its namespace, name and topics, and the example pointed at
            the local environment
  samples   observed objects -> samples; samples -> records processed, throughput, restart spans
  plots     what the throughput and dashboard PNGs show (the operator's handoff figures, the
            dashboard's panels as Prometheus answers them), and drawing them
  report    the final report (the `--json` fields), its table, what it counts outside the status
  kube      kubectl, the CRD and the namespace, the operator process; `DemoFailed`
  progress  the printed lines and the seconds of each step (`Console`), and the watch that
            samples the group once a second (`Watcher`)
  run       `Demo`: the run as numbered steps
  main      `run_demo`, the entry point of `staticfleet demo`
"""
