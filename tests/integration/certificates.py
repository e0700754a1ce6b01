"""Certificates for TLS tests, made with the `cryptography` package in a folder of the test's: a CA, a
server certificate for 127.0.0.1 and localhost signed by it, a client certificate signed by it, and a
client certificate signed by another CA (which mutual TLS must refuse)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Certificates:
    """PEM files: `ca` signs `server_cert` and `client_cert`; `stranger_cert` has a CA of its own."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _builder(subject: str, issuer: str, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (
        _builder(name, name, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    name: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    key = _key()
    builder = (
        _builder(name, ca_cert.subject.rfc4514_string().removeprefix("CN="), key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def _write(
    folder: Path, name: str, pair: tuple[x509.Certificate, ec.EllipticCurvePrivateKey]
) -> tuple[Path, Path]:
    cert, key = pair
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca("tcli test CA")
    ca_path, _ = _write(folder, "ca", ca)
    server_cert, server_key = _write(folder, "server", _leaf("localhost", ca, server=True))
    client_cert, client_key = _write(folder, "client", _leaf("tcli test client", ca, server=False))
    stranger_cert, stranger_key = _write(
        folder, "stranger", _leaf("stranger", _ca("another CA"), server=False)
    )
    return Certificates(
        ca_path, server_cert, server_key, client_cert, client_key, stranger_cert, stranger_key
    )
