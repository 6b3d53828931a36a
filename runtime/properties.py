"""librdkafka properties passed through from the environment, checked by librdkafka itself.

    <CLUSTER>_PROPERTIES_<NAME>=value        NAME: the property upper-cased, dots as underscores
    <CLUSTER>_PROPERTIES_<NAME>_FILE=/path   the value is the file's contents (for secrets)

``KAFKA_CLUSTERS_SOURCE_PROPERTIES_SECURITY_PROTOCOL=SASL_SSL`` sets ``security.protocol``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, Producer

from runtime.broker_reach import librdkafka_line
from runtime.errors import ConfigError
from runtime.kafka_errors import kafka_error_of

PROPERTIES_INFIX = "PROPERTIES_"
FILE_SUFFIX = "_FILE"
MASK = "****"

_NAME_PATTERN = re.compile(r"[A-Z0-9]+(?:_[A-Z0-9]+)*")

# The few librdkafka properties spelt with underscores; every other "_" maps to ".".
_UNDERSCORED = {"log.level": "log_level", "enabled.events": "enabled_events"}

# librdkafka properties whose own name ends in ".file" (they hold a path): for them a trailing
# _FILE is part of the name; to read one of them from a file anyway, write ..._FILE_FILE.
_FILE_NAMED = frozenset(
    {
        "sasl.oauthbearer.assertion.file",
        "sasl.oauthbearer.assertion.private.key.file",
        "sasl.oauthbearer.assertion.jwt.template.file",
    }
)

# Substrings of a property name that mark its value as secret (see is_secret_property).
_SECRET_MARKERS = ("password", "secret", "passphrase", "key.pem", "oauthbearer.config")

# confluent_kafka sends librdkafka's logs here while a configuration is checked: a property
# meant for consumers makes a producer warn "will be ignored", which is no news to anyone.
_SILENT = logging.Logger("runtime.properties.check")
_SILENT.addHandler(logging.NullHandler())
_SILENT.disabled = True


# A cluster's properties go to every client of ours on that cluster, each written once for all:
# a consumer's property (say group.protocol) makes every producer of a start say at WARNING that
# it ignores it, and the other way round. That is the design, not news: said at DEBUG.
_OTHER_KIND = re.compile(
    r"is a (?:consumer|producer) property and will be ignored by this (?:producer|consumer) "
    r"instance"
)


def quiet_other_kind_properties(record: logging.LogRecord) -> bool:
    """A filter of ``LIBRDKAFKA_LOG``: a CONFWARN line about a property of the other kind of
    client becomes DEBUG, kept only where DEBUG is logged; passes every other line."""
    line = librdkafka_line(record)
    if line is None or line[0] != "CONFWARN" or not _OTHER_KIND.search(line[1]):
        return True
    record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
    return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def is_secret_property(name: str, *, from_file: bool) -> bool:
    """Whether a property's value must never be shown (``exactly config``, repr, errors).

    Secret: every value read from a ``_FILE``, and every property whose name contains
    password, secret, passphrase, key.pem or oauthbearer.config (sasl.password,
    ssl.key.password, ssl.keystore.password, ssl.key.pem, sasl.oauthbearer.config,
    sasl.oauthbearer.client.secret, sasl.oauthbearer.assertion.private.key.pem, ...).
    """
    return from_file or any(marker in name for marker in _SECRET_MARKERS)


@dataclass(frozen=True)
class ClientProperty:
    """One librdkafka property and the environment variable that set it."""

    variable: str
    name: str
    value: str = field(repr=False)
    secret: bool
    path: str | None = None  # the file it was read from, for a _FILE variable

    @property
    def shown(self) -> str:
        """The variable's value as errors may show it: the path, ``****``, or the value."""
        if self.path is not None:
            return self.path
        return MASK if self.secret else self.value


def is_property_variable(cluster: str, name: str) -> bool:
    """Whether ``name`` belongs to ``read_client_properties(cluster, ...)`` to judge."""
    return name.startswith(f"{cluster}_{PROPERTIES_INFIX}")


def read_client_properties(
    cluster: str, environ: Mapping[str, str], *, bootstrap_variable: str
) -> tuple[ClientProperty, ...]:
    """The properties set for ``cluster`` (``KAFKA_CLUSTERS_SOURCE``), each checked by librdkafka.

    Raises ConfigError naming the variable: malformed name, unreadable file, X and X_FILE both
    set, a property librdkafka does not know or a value it refuses.
    """
    prefix = f"{cluster}_{PROPERTIES_INFIX}"
    found: dict[str, ClientProperty] = {}
    for variable in sorted(name for name in environ if name.startswith(prefix)):
        name, from_file = _parse_variable(prefix, variable, bootstrap_variable)
        if name in found:
            first = found[name].variable
            raise ConfigError(variable, f"{first} sets the same property; keep one of the two")
        raw = environ[variable]
        if not _is_utf8(raw):
            # A byte that is not UTF-8 reaches Python as a lone surrogate, which librdkafka's
            # binding cannot pass on (a SystemError, not a message).
            raise ConfigError(variable, "the value is not UTF-8 text")
        if from_file:
            found[name] = ClientProperty(
                variable, name, _read_file(variable, raw), secret=True, path=raw
            )
        else:
            found[name] = ClientProperty(
                variable, name, raw, secret=is_secret_property(name, from_file=False)
            )
    properties = tuple(found.values())
    _check_with_librdkafka(cluster, properties)
    return properties


def _parse_variable(prefix: str, variable: str, bootstrap_variable: str) -> tuple[str, bool]:
    """The property ``variable`` sets, and whether its value is a file's path."""
    suffix = variable.removeprefix(prefix)
    if not _NAME_PATTERN.fullmatch(suffix):
        example = f"{prefix}SECURITY_PROTOCOL"
        raise ConfigError(
            variable,
            "malformed property variable: write the librdkafka property upper-cased, "
            f"dots as underscores (e.g. {example})",
        )
    name = _property_name(suffix)
    from_file = suffix.endswith(FILE_SUFFIX) and name not in _FILE_NAMED
    if from_file:
        name = _property_name(suffix.removesuffix(FILE_SUFFIX))
    if name in ("bootstrap.servers", "metadata.broker.list"):
        raise ConfigError(variable, f"set {bootstrap_variable} instead")
    if name == "logger":
        raise ConfigError(variable, "'logger' is a Python object, not a librdkafka property")
    return name, from_file


def _is_utf8(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _property_name(suffix: str) -> str:
    dotted = suffix.lower().replace("_", ".")
    return _UNDERSCORED.get(dotted, dotted)


def _read_file(variable: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(variable, f"cannot read the file: {exc.strerror}", path) from None
    except UnicodeDecodeError:
        raise ConfigError(variable, "the file is not UTF-8 text", path) from None


def _check_with_librdkafka(cluster: str, properties: tuple[ClientProperty, ...]) -> None:
    """Let librdkafka judge names and values: create a producer with them.

    A producer accepts consumer properties (it only logs that it ignores them) and still checks
    their values, so one client judges both kinds. No bootstrap servers: nothing connects.
    When librdkafka refuses, the blame goes to the property that fails alone the same way, else
    to the one its message names (ssl.key.pem is parsed only with security.protocol=ssl), else
    to the cluster's properties together (sasl.username and sasl.password must be set).
    """
    reason = _rejection(properties)
    if reason is None:
        return
    reason = _redact(reason, properties)
    blamed = _failing_alone(properties, reason) or _named_in(properties, reason)
    if blamed is None:
        raise ConfigError(f"{cluster}_{PROPERTIES_INFIX}*", f"rejected by librdkafka: {reason}")
    raise ConfigError(blamed.variable, f"rejected by librdkafka: {reason}", blamed.shown)


def _failing_alone(properties: tuple[ClientProperty, ...], reason: str) -> ClientProperty | None:
    for prop in properties:
        alone = _rejection([prop])
        if alone is not None and _redact(alone, properties) == reason:
            return prop
    return None


def _named_in(properties: tuple[ClientProperty, ...], reason: str) -> ClientProperty | None:
    for prop in properties:
        if f'"{prop.name}"' in reason or f"{prop.name} failed" in reason:
            return prop
    return None


def _redact(reason: str, properties: Iterable[ClientProperty]) -> str:
    """librdkafka may quote a value it refuses; a secret one must not reach the message."""
    return masked(reason, [prop.value for prop in properties if prop.secret])


def masked(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets`` in it shown as ``****``."""
    for secret in secrets:
        if secret:
            # As a whole word only: a secret "p" must not turn "property" into "****roperty".
            whole = rf"(?<!\w){re.escape(secret)}(?!\w)"
            text = re.sub(whole, MASK, text)
    return text


def _rejection(properties: Iterable[ClientProperty]) -> str | None:
    return librdkafka_refusal({prop.name: prop.value for prop in properties})


def librdkafka_refusal(config: Mapping[str, object]) -> str | None:
    """Why librdkafka refuses to make a client of ``config`` (unmasked), or None. Certificates,
    keys and CA files are loaded and checked against each other here; without bootstrap servers
    nothing connects and nothing is queued, and the client is dropped at once."""
    config = {name: value for name, value in config.items() if name != "bootstrap.servers"}
    config["logger"] = _SILENT
    try:
        Producer(config)
    except KafkaException as exc:
        return str(kafka_error_of(exc).str())
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None
