"""A real Kubernetes control plane on loopback: etcd, kube-apiserver (RBAC on) and
kube-controller-manager (garbage collector, namespace and service-account controllers, ...),
built from the Go module proxy by `staticfleet_dev.build`.

There is no kubelet and no scheduler; `staticfleet_dev.localnode` binds and runs pods.
"""

from __future__ import annotations

import base64
import ssl
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from staticfleet_dev import build, certs
from staticfleet_dev.procs import ProcessRecord, free_port, free_ports, spawn, stop, wait_until

SERVICE_CIDR = "10.0.0.0/24"


@dataclass
class ControlPlane:
    """The running control plane: where to reach it and what to stop."""

    workdir: Path
    server: str
    kubeconfig: Path
    records: list[ProcessRecord] = field(default_factory=list)

    def log_tails(self, lines: int = 30) -> str:
        from staticfleet_dev.tools import tail

        return "\n".join(f"--- {r.name} ({r.log}) ---\n{tail(Path(r.log), lines)}"
                         for r in self.records)


def write_kubeconfig(path: Path, server: str, files: certs.CertFiles) -> None:
    """An admin kubeconfig with the certificates inlined, so it can be copied anywhere."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "staticfleet-local",
        "clusters": [{"name": "staticfleet-local", "cluster": {
            "server": server, "certificate-authority-data": b64(files.ca_cert)}}],
        "users": [{"name": "staticfleet-admin", "user": {
            "client-certificate-data": b64(files.admin_cert),
            "client-key-data": b64(files.admin_key)}}],
        "contexts": [{"name": "staticfleet-local", "context": {
            "cluster": "staticfleet-local", "user": "staticfleet-admin",
            "namespace": "default"}}],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _https_ok(url: str, files: certs.CertFiles) -> bool:
    ctx = ssl.create_default_context(cafile=str(files.ca_cert))
    ctx.load_cert_chain(str(files.admin_cert), str(files.admin_key))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def start_control_plane(workdir: Path, timeout: float = 120.0) -> ControlPlane:
    """Start etcd, kube-apiserver and kube-controller-manager; return when the API is ready.

    On failure everything already started is stopped and the error carries the log tails.
    """
    etcd = build.etcd_bin() / "etcd"
    kbin = build.kubernetes_bin()
    workdir.mkdir(parents=True, exist_ok=True)
    files = certs.generate(workdir / "pki")
    logs = workdir / "logs"
    cp = ControlPlane(workdir=workdir, server="", kubeconfig=workdir / "admin.kubeconfig")
    try:
        etcd_port, peer_port = free_ports(2)
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        _p, rec = spawn("etcd", [
            str(etcd), "--name", "staticfleet", "--data-dir", str(workdir / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"staticfleet=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync=true", "--quota-backend-bytes", str(2 * 1024**3),
            "--log-level", "warn",
        ], log=logs / "etcd.log")
        cp.records.append(rec)
        wait_until(lambda: _http_ok(f"{etcd_url}/health"), rec=rec, timeout=timeout,
                   what="healthy")

        api_port = free_port()
        cp.server = f"https://127.0.0.1:{api_port}"
        _p, rec = spawn("kube-apiserver", [
            str(kbin / "kube-apiserver"),
            "--etcd-servers", etcd_url,
            "--cert-dir", str(workdir / "pki"),
            "--tls-cert-file", str(files.server_cert),
            "--tls-private-key-file", str(files.server_key),
            "--client-ca-file", str(files.ca_cert),
            "--secure-port", str(api_port),
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--authorization-mode", "RBAC",
            "--allow-privileged=true",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(files.sa_pub),
            "--service-account-signing-key-file", str(files.sa_key),
            "--enable-priority-and-fairness=false",
            "--storage-media-type", "application/vnd.kubernetes.protobuf",
            "--v", "1",
        ], log=logs / "kube-apiserver.log")
        cp.records.append(rec)
        wait_until(lambda: _https_ok(f"{cp.server}/readyz", files), rec=rec, timeout=timeout,
                   what="ready")
        write_kubeconfig(cp.kubeconfig, cp.server, files)

        _p, rec = spawn("kube-controller-manager", [
            str(kbin / "kube-controller-manager"),
            "--kubeconfig", str(cp.kubeconfig),
            "--authentication-kubeconfig", str(cp.kubeconfig),
            "--authorization-kubeconfig", str(cp.kubeconfig),
            "--leader-elect=false",
            "--secure-port", "0",
            "--service-account-private-key-file", str(files.sa_key),
            "--root-ca-file", str(files.ca_cert),
            "--cluster-signing-cert-file", str(files.ca_cert),
            "--cluster-signing-key-file", str(files.ca_key),
            "--use-service-account-credentials=false",
            "--controllers", "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,"
                             "-node-route-controller,-persistentvolume-binder,-attachdetach,"
                             "-persistentvolume-expander",
            "--concurrent-gc-syncs", "5",
            "--v", "1",
        ], log=logs / "kube-controller-manager.log")
        cp.records.append(rec)
        wait_until(lambda: _default_namespace_ready(cp), rec=rec, timeout=timeout,
                   what="serving (no default ServiceAccount created)")
    except BaseException:
        stop_control_plane(cp)
        raise
    return cp


def _default_namespace_ready(cp: ControlPlane) -> bool:
    """The service-account controller has created `default` in `default`: the KCM works."""
    files = certs.files_in(cp.workdir / "pki")
    return _https_ok(f"{cp.server}/api/v1/namespaces/default/serviceaccounts/default", files)


def stop_control_plane(cp: ControlPlane) -> None:
    """Stop in reverse order of start."""
    for rec in reversed(cp.records):
        stop(rec, grace=10.0)
