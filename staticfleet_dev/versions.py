"""Pinned versions of everything the local environment builds or downloads."""

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
HELM_VERSION = "v3.22.0"
PROMETHEUS_MODULE_VERSION = "v0.309.1"  # Go module version of Prometheus v3.9.1
KWOK_VERSION = "v0.8.0"  # sigs.k8s.io/kwok, built with `go install` (its go.mod: go 1.26.0)
