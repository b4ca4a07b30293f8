"""kwok (sigs.k8s.io/kwok) for fleets too large to run as processes: fake Nodes whose pods
become Running and Ready without running anything, against the local control plane.

    from staticfleet_dev.kwok import manifests, process
    kwok = process.start_kwok(workdir, kubeconfig, nodes=30)
    pod["spec"].update(manifests.placement())   # or a ConsumerGroup's spec.template
    ...
    process.stop_kwok(kwok)

- Fake Nodes: kwok's conventions (annotation `kwok.x-k8s.io/node: fake`, label `type: kwok`,
  taint `kwok.x-k8s.io/node=fake:NoSchedule`), 110 pods each by default, a pod CIDR each on
  loopback (127.64.0.0/10), Leases renewed by kwok, so the node lifecycle controller keeps them.
- Pods: one that selects the fake Nodes and tolerates their taint (`manifests.placement()`;
  a ConsumerGroup says the same in `spec.template.nodeSelector` and `tolerations`, which the
  operator copies into its member pods) is bound by the binder, round robin over the Nodes
  with room, then kwok makes it Running and Ready with its own pod IP at once, and deletes it
  for good as soon as it is deleted. The local node leaves such pods alone (it binds only pods
  that no other Node could take). Nothing runs: no probes, no processes, no logs.

The modules, pure first:
  manifests  kwok's configuration and Stages, the fake Nodes, what a pod carries to go there
  binder     the binder of pods to the fake Nodes (a process: python -m staticfleet_dev.kwok.binder)
  process    start and stop kwok and the binder, create the Nodes, wait until they are Ready
"""
