"""A cluster's librdkafka client configuration, translated for the Java client inside Spark's
Kafka source (kafka-clients 3.9.0 for pyspark 4.0.0).

Everything security needs travels inline, as option values, so no file has to exist on the
executors: the CA and the client certificate as PEM text (``ssl.truststore.certificates``,
``ssl.keystore.certificate.chain``), the private key as unencrypted PKCS#8 PEM — the one form
the Java client's PEM key store reads without a password — and SASL credentials as a JAAS line.

A security property that cannot be translated stops the audit with exit status 2 before Spark
starts: reading without it would connect differently from the roles (or not at all), and a
verdict on a connection the user did not configure is not one to give. Other properties
(tuning, logging) that the Java client spells differently are named in a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from runtime.logs import get_logger
from runtime.properties import PROPERTIES_INFIX
from validator.errors import InputError

# librdkafka properties that mean the same to the Java client.
_SAME_IN_JAVA = frozenset(
    {
        "allow.auto.create.topics",
        "client.id",
        "socket.connection.setup.timeout.ms",
        "request.timeout.ms",
        "reconnect.backoff.max.ms",
    }
)
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Read here and translated below (or, for the username and password, into the JAAS line).
_TRANSLATED = frozenset(
    {
        "bootstrap.servers",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.certificate.pem",
        "ssl.key.location",
        "ssl.key.pem",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)
# A property under one of these decides how (and whether) the client authenticates and whom it
# trusts: untranslated, it stops the audit rather than being left out.
_SECURITY_PREFIXES = ("ssl.", "sasl.", "enable.ssl.", "https.", "ssl_")
_WHY_NOT = {
    "GSSAPI": "Kerberos needs a keytab and krb5.conf on every executor; use a SCRAM, PLAIN or "
    "mutual TLS listener for the audit",
    "OAUTHBEARER": "OAUTHBEARER is not translated for the Java client yet; use a SCRAM, PLAIN "
    "or mutual TLS listener for the audit",
}
_log = get_logger("validator")


def java_options(cluster: Mapping[str, str], variable_prefix: str) -> dict[str, str]:
    """The ``kafka.``-prefixed Spark options for a librdkafka configuration (with
    ``bootstrap.servers``). ``variable_prefix`` (KAFKA_CLUSTERS_SOURCE) names the variables in
    errors. Raises InputError for what cannot be translated."""
    options = {"bootstrap.servers": cluster["bootstrap.servers"]}
    protocol = cluster.get("security.protocol", "plaintext").upper()
    options["security.protocol"] = protocol
    if protocol.startswith("SASL"):
        options |= _sasl(cluster, variable_prefix)
    if protocol.endswith("SSL"):
        options |= _ssl(cluster, variable_prefix)
    left_out = []
    for name, value in cluster.items():
        if name in _SAME_IN_JAVA:
            options[name] = value
        elif name in _TRANSLATED:
            continue
        elif name.startswith(_SECURITY_PREFIXES):
            raise InputError(
                f"{_variable(variable_prefix, name)}: {name} has no translation for the Java "
                "client of Spark's Kafka source, and the audit does not read without it"
            )
        else:
            left_out.append(name)
    if left_out:
        _log.warning(
            "client properties not passed to Spark's Kafka source: the Java client it uses names "
            "them differently, and they do not decide how it connects",
            properties=",".join(sorted(left_out)),
        )
    return {f"kafka.{name}": value for name, value in options.items()}


def _sasl(cluster: Mapping[str, str], prefix: str) -> dict[str, str]:
    mechanism = cluster.get("sasl.mechanism", cluster.get("sasl.mechanisms", "GSSAPI")).upper()
    module = _JAAS_MODULES.get(mechanism)
    if module is None:
        variable = _variable(prefix, "sasl.mechanism")
        reason = _WHY_NOT.get(mechanism, "not a mechanism the audit knows")
        raise InputError(f"{variable}={mechanism}: {reason}")
    if "sasl.username" not in cluster:
        raise InputError(f"{_variable(prefix, 'sasl.username')} is not set ({mechanism} needs it)")
    return {
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": (
            f"{module} required username={_jaas_string(cluster['sasl.username'])} "
            f"password={_jaas_string(cluster.get('sasl.password', ''))};"
        ),
    }


def _ssl(cluster: Mapping[str, str], prefix: str) -> dict[str, str]:
    options: dict[str, str] = {}
    ca = _pem(cluster, "ssl.ca", prefix)
    if ca is not None:
        options |= {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": ca}
    certificate = _pem(cluster, "ssl.certificate", prefix)
    key = _pem(cluster, "ssl.key", prefix)
    if (certificate is None) != (key is None):
        missing = "ssl.key.location" if key is None else "ssl.certificate.location"
        raise InputError(
            f"{_variable(prefix, missing)} is not set (a client certificate needs both)"
        )
    if certificate is not None and key is not None:
        key_variable = _variable(
            prefix, "ssl.key.pem" if "ssl.key.pem" in cluster else "ssl.key.location"
        )
        options |= {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": certificate,
            "ssl.keystore.key": _pkcs8(key, cluster.get("ssl.key.password"), key_variable),
        }
    algorithm = cluster.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("https", "none"):
        variable = _variable(prefix, "ssl.endpoint.identification.algorithm")
        raise InputError(f"{variable}={algorithm}: expected https or none")
    # librdkafka's "none" is the Java client's empty string; both default to https.
    options["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else "https"
    return options


def _pem(cluster: Mapping[str, str], stem: str, prefix: str) -> str | None:
    """The PEM text of ``<stem>.pem`` or of the file ``<stem>.location``, read here."""
    if f"{stem}.pem" in cluster:
        return cluster[f"{stem}.pem"]
    location = cluster.get(f"{stem}.location")
    if location is None:
        return None
    if stem == "ssl.ca" and location == "probe":
        return None  # the system's trust store: the JVM's own is used
    variable = _variable(prefix, f"{stem}.location")
    path = Path(location)
    # librdkafka takes a directory of CA certificates too: their concatenation is the bundle.
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    try:
        texts = [file.read_text() for file in files]
    except OSError as exc:
        raise InputError(f"{variable}: cannot read {location}: {exc.strerror}") from None
    except UnicodeDecodeError:
        # Never the bytes themselves in the message: they may be a key's.
        raise InputError(f"{variable}: {location} is not PEM text (DER?)") from None
    if path.is_dir():
        texts = [text for text in texts if "-----BEGIN CERTIFICATE-----" in text]
        if not texts:
            raise InputError(f"{variable}: no PEM certificate in the directory {location}")
    return "\n".join(text.strip() for text in texts) + "\n"


def _pkcs8(key: str, password: str | None, variable: str) -> str:
    """Any PEM private key librdkafka reads (PKCS#1, SEC1, PKCS#8, encrypted or not) as
    unencrypted PKCS#8: the Java PEM key store reads no other form without a password."""
    try:
        try:
            loaded = serialization.load_pem_private_key(
                key.encode(), password.encode() if password else None
            )
        except TypeError:
            # A password given for a key that is not encrypted: librdkafka ignores it too.
            loaded = serialization.load_pem_private_key(key.encode(), None)
    except (ValueError, TypeError) as exc:
        # Never the key itself, nor the password, in the message.
        raise InputError(
            f"{variable}: not a PEM private key this password opens ({type(exc).__name__})"
        ) from None
    return loaded.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _jaas_string(value: str) -> str:
    # Kafka's JaasConfig reads quoted strings with java.io.StreamTokenizer: it knows \\ and \"
    # (and \n, \r), not JSON's \uXXXX, so non-ASCII characters pass as they are.
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def _variable(prefix: str, name: str) -> str:
    return f"{prefix}_{PROPERTIES_INFIX}{name.upper().replace('.', '_')}"
