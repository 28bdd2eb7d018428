"""Credentials of the local control plane, generated fresh for each cluster.

One self-signed CA signs a serving certificate for 127.0.0.1/localhost (and, in a cluster with real
nodes, the host's address on the node bridge and the `kubernetes` Service's ClusterIP), used by the API
server, the controller manager and the scheduler. Clients (the tests, kubectl, helm, the controllers and
kwok) authenticate with one random bearer token of a `system:masters` user from a static token file; the
service-account tokens are signed with a separate RSA key. Real nodes get certificates from the same CA:
a client certificate per kubelet (`system:node:<name>` in `system:nodes`, what the Node authorizer and
NodeRestriction expect), one for kube-proxy and kube-router, the API server's client certificate towards
the kubelets, and a serving certificate per kubelet. The aggregation layer has a CA of its own (the
front proxy's): the API server proxies requests to an extension API server (the metrics adapter) with a
client certificate from it, which the extension server trusts through `extension-apiserver-authentication`.
Private files are written with mode 0600.

Imports: the standard library, cryptography and PyYAML.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMIN_USER = "mmd-admin"
CLUSTER_NAME = "mmd-local"
# The common name of the aggregation layer's client certificate (`--requestheader-allowed-names`).
FRONT_PROXY_CLIENT = "front-proxy-client"
_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Credentials:
    """Paths of the generated credential files."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        """Return the CA certificate (the kubeconfig's certificate-authority)."""
        return self.directory / "ca.crt"

    @property
    def serving_cert(self) -> Path:
        """Return the serving certificate for 127.0.0.1 and localhost."""
        return self.directory / "serving.crt"

    @property
    def serving_key(self) -> Path:
        """Return the serving certificate's private key."""
        return self.directory / "serving.key"

    @property
    def service_account_key(self) -> Path:
        """Return the private key that signs service-account tokens."""
        return self.directory / "service-account.key"

    @property
    def service_account_public_key(self) -> Path:
        """Return the public key that verifies service-account tokens."""
        return self.directory / "service-account.pub"

    @property
    def ca_key(self) -> Path:
        """Return the CA's private key (kept to issue the certificates of nodes added later)."""
        return self.directory / "ca.key"

    @property
    def front_proxy_ca_cert(self) -> Path:
        """Return the front proxy's CA (the API server's `--requestheader-client-ca-file`)."""
        return self.directory / "front-proxy-ca.crt"

    @property
    def front_proxy_ca_key(self) -> Path:
        """Return the front proxy CA's private key."""
        return self.directory / "front-proxy-ca.key"

    @property
    def front_proxy_client_cert(self) -> Path:
        """Return the client certificate the API server proxies to extension API servers with."""
        return self.directory / f"{FRONT_PROXY_CLIENT}.crt"

    @property
    def front_proxy_client_key(self) -> Path:
        """Return the front proxy client certificate's private key."""
        return self.directory / f"{FRONT_PROXY_CLIENT}.key"

    @property
    def token_file(self) -> Path:
        """Return the API server's static token file (token,user,uid,"groups")."""
        return self.directory / "tokens.csv"

    @property
    def admin_token(self) -> Path:
        """Return the file holding the admin bearer token."""
        return self.directory / "admin.token"

    def token(self) -> str:
        """Return the admin bearer token."""
        return self.admin_token.read_text().strip()


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_pair(
    cert_path: Path, key_path: Path, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> None:
    """A certificate (world-readable) and its private key (owner only), as PEM."""
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, _pem_key(key))


def _new_authority(
    common_name: str, now: datetime.datetime
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA certificate and its key."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_cert, ca_key


def generate_credentials(directory: Path, extra_addresses: tuple[str, ...] = ()) -> Credentials:
    """Create a cluster's credentials in `directory`.

    That is a CA, a serving certificate, a service-account key pair, the admin token, and the front
    proxy's CA and client certificate. The serving certificate holds 127.0.0.1 and `extra_addresses`
    (the API server's address for pods).
    """
    directory.mkdir(parents=True, exist_ok=True)
    credentials = Credentials(directory)
    now = datetime.datetime.now(datetime.UTC)

    ca_cert, ca_key = _new_authority(f"{CLUSTER_NAME}-ca", now)
    ca_name = ca_cert.subject

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(serving_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.DNSName("kubernetes.default.svc.cluster.local"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    *(x509.IPAddress(ipaddress.ip_address(address)) for address in extra_addresses),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(serving_key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_pair(credentials.ca_cert, credentials.ca_key, ca_cert, ca_key)
    _write_pair(credentials.serving_cert, credentials.serving_key, serving_cert, serving_key)
    front_proxy_cert, front_proxy_key = _new_authority(f"{CLUSTER_NAME}-front-proxy-ca", now)
    _write_pair(
        credentials.front_proxy_ca_cert, credentials.front_proxy_ca_key, front_proxy_cert, front_proxy_key
    )
    _issue(
        (credentials.front_proxy_ca_cert, credentials.front_proxy_ca_key),
        credentials.directory,
        FRONT_PROXY_CLIENT,
        common_name=FRONT_PROXY_CLIENT,
    )

    service_account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_private(credentials.service_account_key, _pem_key(service_account_key))
    credentials.service_account_public_key.write_bytes(
        service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )

    token = secrets.token_hex(32)
    _write_private(credentials.admin_token, f"{token}\n".encode())
    _write_private(credentials.token_file, f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'.encode())
    return credentials


def write_kubeconfig(path: Path, server: str, credentials: Credentials) -> None:
    """Write a kubeconfig for the admin user of the cluster at `server` (https://127.0.0.1:PORT)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority": str(credentials.ca_cert)},
            }
        ],
        "users": [{"name": ADMIN_USER, "user": {"token": credentials.token()}}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": ADMIN_USER}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }
    _write_private(path, yaml.safe_dump(config, sort_keys=False).encode())


def issue_certificate(
    credentials: Credentials,
    name: str,
    *,
    common_name: str,
    organization: str | None = None,
    addresses: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
) -> tuple[Path, Path]:
    """Issue `<name>.crt`/`<name>.key` from the cluster CA: a client or a serving certificate.

    With `addresses` or `dns_names` it serves them and its common name (as a DNS name). Returns the
    certificate and key paths.
    """
    return _issue(
        (credentials.ca_cert, credentials.ca_key),
        credentials.directory,
        name,
        common_name=common_name,
        organization=organization,
        addresses=addresses,
        dns_names=dns_names,
    )


def _issue(
    authority: tuple[Path, Path],
    directory: Path,
    name: str,
    *,
    common_name: str,
    organization: str | None = None,
    addresses: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
) -> tuple[Path, Path]:
    ca_key = serialization.load_pem_private_key(authority[1].read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(authority[0].read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if addresses or dns_names:
        names = [
            *(x509.DNSName(dns) for dns in dict.fromkeys((common_name, *dns_names))),
            *(x509.IPAddress(ipaddress.ip_address(a)) for a in addresses),
        ]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        usage = ExtendedKeyUsageOID.SERVER_AUTH
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH
    certificate = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False).sign(
        ca_key, hashes.SHA256()
    )
    cert_path = directory / f"{name}.crt"
    key_path = directory / f"{name}.key"
    _write_pair(cert_path, key_path, certificate, key)
    return cert_path, key_path


def write_certificate_kubeconfig(
    path: Path, server: str, credentials: Credentials, cert: Path, key: Path
) -> None:
    """Write a kubeconfig that authenticates to `server` with a client certificate (a node's)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority": str(credentials.ca_cert)},
            }
        ],
        "users": [{"name": "default", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": "default"}}],
        "current-context": CLUSTER_NAME,
    }
    _write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
