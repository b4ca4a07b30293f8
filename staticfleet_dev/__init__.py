"""The development environment, apart from the product: the embedded local environment (a real
Kafka broker, a real Kubernetes control plane and a local node that runs pods as processes), the
demo and its plot. For tests, benchmarks and the demo only: the operator (`staticfleet`) never
imports this package and the operator image does not ship it."""
