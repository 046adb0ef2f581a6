"""Self-signed TLS material for the fake API server, made once per process."""

from __future__ import annotations

import datetime
import functools
import ipaddress
import os
import tempfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: str, issuer: str, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _make_ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(common_name, common_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


CA_NAME = "nvke-fake-kubernetes-ca"
ADMIN = "kubernetes-admin"  # the client certificate's subject the fake authenticates, as a cluster admin


@functools.cache
def _ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    return _make_ca(CA_NAME)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@functools.cache
def client_material() -> tuple[str, str]:
    """(certificate PEM, key PEM) of the client certificate `ADMIN` the fake's CA signed: what Cluster
    API's kubeconfig Secrets hold for a cluster's admin."""
    ca_key, _ = _ca()
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(ADMIN, CA_NAME, key.public_key())
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return _pem(cert), _key_pem(key)


@functools.cache
def server_material() -> tuple[str, str, str]:
    """(CA bundle PEM, server certificate file, server key file) for 127.0.0.1 and localhost."""
    ca_key, ca_cert = _ca()
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder("kube-apiserver", CA_NAME, key.public_key())
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    folder = tempfile.mkdtemp(prefix="nvke-kubeapi-")
    cert_file, key_file = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
    with open(cert_file, "w") as f:
        f.write(_pem(cert))
    with open(key_file, "w") as f:
        f.write(_key_pem(key))
    return _pem(ca_cert), cert_file, key_file


# A CA that signed nothing here: configuring a client with it must fail the TLS handshake.
OTHER_CA_BUNDLE: str = _pem(_make_ca("some-other-ca")[1])
