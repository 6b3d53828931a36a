"""The credentials of a secured local cluster: a private CA, the broker's certificate, and for
each user a SCRAM password and a client certificate, all made for this cluster and kept in its
directory (``<dir>/security/``, readable by its owner only).

The broker's key and certificate are a PKCS#12 key store (``ssl.keystore.type=PKCS12``, with a
password: Kafka before 3.0 refuses a PEM key store whose key has none, and no Java reads a PEM
key encrypted the way ``cryptography`` encrypts it). Everything else is PEM: the CA the broker
trusts (``ssl.truststore.type=PEM``) and what the clients read with ``ssl.ca.location`` /
``ssl.certificate.location`` / ``ssl.key.location``. Neither keytool nor an openssl command line
is needed, only Python's ``cryptography``.

A user is one principal on both secured listeners: ``User:<name>`` authenticated by SCRAM on
SASL_SSL, and by a client certificate whose CN is ``<name>`` on SSL (the broker maps the
certificate's DN to its CN).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The super-user the tools use on the secured listeners; ANONYMOUS (the PLAINTEXT listener's
# principal, loopback only) is the other: readiness, topic creation and ACL grants use it.
ADMIN_USER = "admin"
# One principal per role and one for the audit, so each can be granted only what it needs.
USERS = (ADMIN_USER, "replicator", "deduplicator", "offsetsync", "validator")
SCRAM_MECHANISM = "SCRAM-SHA-512"
_VALID_FOR = datetime.timedelta(days=3650)


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where one cluster's credentials are: ``<dir>/security``."""

    directory: Path

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key_path(self) -> Path:
        """The CA's private key: what signs a renewed certificate (``renewed_certificate``)."""
        return self.directory / "ca.key"

    @property
    def broker_keystore_path(self) -> Path:
        """The broker's private key and certificate chain, PKCS#12."""
        return self.directory / "broker-keystore.p12"

    @property
    def broker_keystore_password(self) -> str:
        """The key store's password, which is also its key's (``ssl.key.password``)."""
        return (self.directory / "broker-keystore.password").read_text().strip()

    def certificate_path(self, user: str) -> Path:
        return self.directory / f"{user}.pem"

    def key_path(self, user: str) -> Path:
        return self.directory / f"{user}.key"

    def password_path(self, user: str) -> Path:
        return self.directory / f"{user}.password"

    def password(self, user: str) -> str:
        return self.password_path(user).read_text().strip()

    def exists(self) -> bool:
        return self.ca_path.is_file()


def make_credentials(directory: Path, users: tuple[str, ...] = USERS) -> Credentials:
    """A new CA (its key kept, to sign renewals), the broker's certificate (for 127.0.0.1 and
    localhost) and, for each user, a client certificate and a random SCRAM password, written
    into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)  # private keys and passwords: the owner's only
    credentials = Credentials(directory)
    ca_key, ca_name = _make_ca(credentials)
    _make_broker_keystore(credentials, ca_key, ca_name)
    for user in users:
        _make_user(credentials, user, ca_key, ca_name)
    return credentials


def _make_ca(credentials: Credentials) -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    """The cluster's private CA, its certificate written to ``ca.pem``."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localkafka test CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(credentials.ca_path, ca.public_bytes(serialization.Encoding.PEM))
    _write(credentials.ca_key_path, _pkcs8(ca_key))
    return ca_key, ca_name


def _make_broker_keystore(
    credentials: Credentials, ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name
) -> None:
    """The broker's key and certificate as a PKCS#12 key store, and its password."""
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker = (
        _builder(_subject("localhost"), ca_name, broker_key)
        .add_extension(
            # Both names a client may dial: librdkafka and the Java client verify the host.
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    keystore_password = secrets.token_urlsafe(24)
    _write(credentials.directory / "broker-keystore.password", keystore_password.encode() + b"\n")
    _write(
        credentials.broker_keystore_path,
        pkcs12.serialize_key_and_certificates(
            b"broker",
            broker_key,
            broker,
            None,
            serialization.BestAvailableEncryption(keystore_password.encode()),
        ),
    )


def _make_user(
    credentials: Credentials, user: str, ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name
) -> None:
    """One user's client certificate, its key and a random SCRAM password."""
    certificate, key = _client_certificate(user, ca_key, ca_name, _VALID_FOR)
    _write(credentials.certificate_path(user), certificate)
    _write(credentials.key_path(user), key)
    _write(credentials.password_path(user), secrets.token_urlsafe(24).encode() + b"\n")


def renewed_certificate(
    credentials: Credentials, user: str, valid_for: datetime.timedelta
) -> tuple[bytes, bytes]:
    """A new client certificate for ``user`` from the cluster's CA, valid from five minutes ago
    for ``valid_for`` from now, and its new key: PEM, as a certificate manager renews one."""
    ca_key = serialization.load_pem_private_key(credentials.ca_key_path.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca = x509.load_pem_x509_certificate(credentials.ca_path.read_bytes())
    return _client_certificate(user, ca_key, ca.subject, valid_for)


def _client_certificate(
    user: str, ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, valid_for: datetime.timedelta
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        _builder(_subject(user), ca_name, key, valid_for)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    # PKCS#8: the form both librdkafka and the Java client's PEM key store read.
    return certificate.public_bytes(serialization.Encoding.PEM), _pkcs8(key)


def _subject(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    valid_for: datetime.timedelta = _VALID_FOR,
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + valid_for)
    )


def _pkcs8(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
