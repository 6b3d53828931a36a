"""librdkafka settings as the Java client of Spark's Kafka source gets them: credentials inline,
keys as PKCS#8, and whatever cannot be translated refused by its variable's name."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from localkafka.security import make_credentials
from validator.errors import EXIT_BAD_INPUT, InputError
from validator.java_client import java_options

PREFIX = "KAFKA_CLUSTERS_SOURCE"


def test_scram_credentials_become_a_jaas_line_escaped_as_the_java_client_reads_it():
    options = java_options(
        {
            "bootstrap.servers": "b:9093",
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": 'p"w\\é',
        },
        PREFIX,
    )
    assert options["kafka.bootstrap.servers"] == "b:9093"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="p\\"w\\\\é";'
    )
    assert options["kafka.ssl.endpoint.identification.algorithm"] == "https"
    assert "kafka.ssl.truststore.type" not in options  # no CA given: the JVM's own trust store


def test_a_private_ca_and_a_client_certificate_travel_inline(tmp_path: Path):
    credentials = make_credentials(tmp_path / "security", users=("replicator",))
    options = java_options(
        {
            "bootstrap.servers": "b:9094",
            "security.protocol": "SSL",
            "ssl.ca.location": str(credentials.ca_path),
            "ssl.certificate.location": str(credentials.certificate_path("replicator")),
            "ssl.key.location": str(credentials.key_path("replicator")),
            "ssl.endpoint.identification.algorithm": "none",
        },
        PREFIX,
    )
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.certificates"] == credentials.ca_path.read_text()
    assert options["kafka.ssl.keystore.type"] == "PEM"
    assert options["kafka.ssl.keystore.certificate.chain"] == (
        credentials.certificate_path("replicator").read_text()
    )
    assert options["kafka.ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert options["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert not any(".location" in name for name in options)  # nothing read on the executors


def test_an_encrypted_pkcs1_key_becomes_the_unencrypted_pkcs8_the_java_key_store_reads():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pkcs1 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.BestAvailableEncryption(b"s3cret"),
    ).decode()
    assert "BEGIN RSA PRIVATE KEY" in pkcs1
    cluster = {
        "bootstrap.servers": "b:9094",
        "security.protocol": "SSL",
        "ssl.certificate.pem": "-----BEGIN CERTIFICATE-----\n...",
        "ssl.key.pem": pkcs1,
        "ssl.key.password": "s3cret",
    }
    pkcs8 = java_options(cluster, PREFIX)["kafka.ssl.keystore.key"]
    loaded = serialization.load_pem_private_key(pkcs8.encode(), None)
    assert loaded.private_numbers() == key.private_numbers()  # type: ignore[union-attr]

    with pytest.raises(InputError) as wrong:
        java_options({**cluster, "ssl.key.password": "wrong"}, PREFIX)
    assert "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SSL_KEY_PEM" in str(wrong.value)
    assert "wrong" not in str(wrong.value)
    assert "PRIVATE KEY" not in str(wrong.value)


@pytest.mark.parametrize(
    ("extra", "variable"),
    [
        ({"sasl.mechanism": "GSSAPI"}, "SASL_MECHANISM=GSSAPI: Kerberos"),
        ({"sasl.mechanism": "OAUTHBEARER"}, "SASL_MECHANISM=OAUTHBEARER"),
        ({"sasl.mechanism": "PLAIN"}, "SASL_USERNAME is not set"),
        (
            {"sasl.mechanism": "PLAIN", "sasl.username": "u", "ssl.crl.location": "/crl.pem"},
            "SSL_CRL_LOCATION: ssl.crl.location has no translation",
        ),
        (
            {"sasl.mechanism": "PLAIN", "sasl.username": "u", "ssl.certificate.pem": "x"},
            "SSL_KEY_LOCATION is not set",
        ),
        (
            {"sasl.mechanism": "PLAIN", "sasl.username": "u", "ssl.ca.location": "/nowhere.pem"},
            "SSL_CA_LOCATION: cannot read /nowhere.pem",
        ),
    ],
)
def test_what_cannot_be_translated_stops_the_audit_naming_its_variable(extra, variable):
    with pytest.raises(InputError) as refused:
        java_options(
            {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", **extra}, PREFIX
        )
    assert refused.value.exit_status == EXIT_BAD_INPUT
    assert f"KAFKA_CLUSTERS_SOURCE_PROPERTIES_{variable}" in str(refused.value)


def test_tuning_the_java_client_does_not_share_is_named_in_a_warning(caplog):
    options = java_options(
        {"bootstrap.servers": "b:9092", "client.id": "audit", "statistics.interval.ms": "1000"},
        PREFIX,
    )
    assert options == {
        "kafka.bootstrap.servers": "b:9092",
        "kafka.security.protocol": "PLAINTEXT",
        "kafka.client.id": "audit",
    }
    [warning] = caplog.records
    assert "not passed to Spark's Kafka source" in warning.getMessage()
    assert "statistics.interval.ms" in str(vars(warning))


def test_a_ca_directory_and_a_password_for_a_key_that_needs_none_work_as_in_librdkafka(
    tmp_path: Path,
):
    credentials = make_credentials(tmp_path / "security", users=("validator",))
    cas = tmp_path / "cas"
    cas.mkdir()
    (cas / "ours.pem").write_text(credentials.ca_path.read_text())
    (cas / "README").write_text("not a certificate")
    options = java_options(
        {
            "bootstrap.servers": "b:9094",
            "security.protocol": "SSL",
            "ssl.ca.location": str(cas),
            "ssl.certificate.location": str(credentials.certificate_path("validator")),
            "ssl.key.location": str(credentials.key_path("validator")),
            "ssl.key.password": "ignored: the key is not encrypted",
        },
        PREFIX,
    )
    assert options["kafka.ssl.truststore.certificates"].strip() == (
        credentials.ca_path.read_text().strip()
    )
    assert options["kafka.ssl.keystore.key"] == credentials.key_path("validator").read_text()
