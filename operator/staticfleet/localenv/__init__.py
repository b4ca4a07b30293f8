"""The embedded local environment: a real Kafka broker, a real Kubernetes control plane
and a local node that runs pods as processes.  For tests and the demo only."""
