"""Certificates and keys for the local environment: for the control plane a CA, the API server's
serving certificate, an admin client certificate in `system:masters` and the service-account key
pair (`generate`); for a Kafka broker's TLS listeners a CA, the broker's serving certificate and
client certificates (`generate_kafka`)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class CertFiles:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _sign(subject: x509.Name, public_key: ec.EllipticCurvePublicKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool,
          usages: list[x509.ObjectIdentifier] | None = None,
          sans: list[x509.GeneralName] | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(public_key).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def files_in(directory: Path) -> CertFiles:
    """Where `generate` writes (and later readers find) each file."""
    return CertFiles(*(directory / n for n in (
        "ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key",
        "sa.key", "sa.pub")))


def generate(directory: Path) -> CertFiles:
    """Write a fresh CA and the certificates the control plane needs into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    files = files_in(directory)
    ca_key = _key()
    ca_name = _name("staticfleet-local-ca")
    ca_cert = _sign(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True)
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(files.ca_key, ca_key)

    server_key = _key()
    sans: list[x509.GeneralName] = [
        x509.DNSName(n) for n in ("localhost", "kubernetes", "kubernetes.default",
                                  "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
    ]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "10.0.0.1")]
    server = _sign(_name("kube-apiserver"), server_key.public_key(), ca_name, ca_key, ca=False,
                   usages=[ExtendedKeyUsageOID.SERVER_AUTH], sans=sans)
    files.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    _write_key(files.server_key, server_key)

    admin_key = _key()
    admin = _sign(_name("staticfleet-admin", "system:masters"), admin_key.public_key(), ca_name,
                  ca_key, ca=False, usages=[ExtendedKeyUsageOID.CLIENT_AUTH])
    files.admin_cert.write_bytes(admin.public_bytes(serialization.Encoding.PEM))
    _write_key(files.admin_key, admin_key)

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(files.sa_key, sa_key)
    files.sa_pub.write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return files


@dataclass(frozen=True)
class KafkaTlsFiles:
    """PEM files for a broker's TLS listeners. `keystore` is the broker's key (PKCS#8, as Kafka's
    PEM key store wants it) followed by its certificate; `clients` maps a client's name (its
    certificate's only subject attribute, CN=<name>) to its certificate and key files."""

    ca_cert: Path
    keystore: Path
    clients: dict[str, tuple[Path, Path]]

    def client_pems(self, name: str) -> tuple[str, str]:
        """The certificate and key of client `name`, as PEM text."""
        cert, key = self.clients[name]
        return cert.read_text(), key.read_text()


def generate_kafka(directory: Path, clients: tuple[str, ...] = ()) -> KafkaTlsFiles:
    """Write a fresh CA, a broker certificate for 127.0.0.1 and localhost, and one client
    certificate per name in `clients` into `directory`. Two calls make two unrelated CAs: a
    client certificate of one is refused by a broker of the other."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("staticfleet-kafka-ca")
    ca_cert = _sign(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True)
    ca_path = directory / "kafka-ca.crt"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    broker_key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName("localhost"),
                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    broker = _sign(_name("kafka-broker"), broker_key.public_key(), ca_name, ca_key, ca=False,
                   usages=[ExtendedKeyUsageOID.SERVER_AUTH], sans=sans)
    keystore = directory / "kafka-broker.pem"
    keystore.write_bytes(
        broker_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
        + broker.public_bytes(serialization.Encoding.PEM))
    keystore.chmod(0o600)

    written: dict[str, tuple[Path, Path]] = {}
    for name in clients:
        key = _key()
        cert = _sign(_name(name), key.public_key(), ca_name, ca_key, ca=False,
                     usages=[ExtendedKeyUsageOID.CLIENT_AUTH])
        cert_path, key_path = directory / f"client-{name}.crt", directory / f"client-{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
        written[name] = (cert_path, key_path)
    return KafkaTlsFiles(ca_cert=ca_path, keystore=keystore, clients=written)
