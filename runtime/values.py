"""Parsers for the values of environment variables; each raises ValueError saying what is wrong."""

from __future__ import annotations

import ipaddress
import re

# Kafka's own rule for topic names (org.apache.kafka.common.internals.Topic).
TOPIC_NAME_MAX = 249
FLOW_NAME_MAX = 100  # leaves room for the suffixes of the topic and transactional ids derived
_LEGAL_CHARACTERS = re.compile(r"[a-zA-Z0-9._-]+")
_HOST = re.compile(r"[a-zA-Z0-9._-]+")


def split_list(text: str) -> list[str]:
    """Comma-separated entries, whitespace around each stripped; "" is the empty list."""
    if not text.strip():
        return []
    entries = [entry.strip() for entry in text.split(",")]
    for number, entry in enumerate(entries, start=1):
        if not entry:
            raise ValueError(f"entry {number} is empty (expected a comma-separated list)")
    return entries


def parse_bootstrap_servers(text: str) -> tuple[str, ...]:
    """``host:port[,host:port...]``; an IPv6 host in brackets: ``[::1]:9092``."""
    entries = split_list(text)
    if not entries:
        raise ValueError("is empty (expected a comma-separated list of host:port)")
    return tuple(_check_server(entry) for entry in entries)


def _check_server(entry: str) -> str:
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket:
            raise ValueError(f"entry {entry!r} has no closing bracket (expected [ipv6]:port)")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"entry {entry!r}: {host!r} is not an IPv6 address") from None
        if not rest.startswith(":"):
            raise ValueError(f"entry {entry!r} has no port (expected [ipv6]:port)")
        port = rest[1:]
    else:
        if entry.count(":") > 1:
            raise ValueError(f"entry {entry!r}: write an IPv6 address in brackets ([::1]:9092)")
        host, colon, port = entry.partition(":")
        if not colon:
            raise ValueError(f"entry {entry!r} has no port (expected host:port)")
        if not host:
            raise ValueError(f"entry {entry!r} has no host (expected host:port)")
        if not _HOST.fullmatch(host):
            raise ValueError(f"entry {entry!r}: {host!r} is not a host name or address")
    if not port.isascii() or not port.isdigit():
        raise ValueError(f"entry {entry!r}: port {port!r} is not a number")
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"entry {entry!r}: port {int(port)} is outside 1..65535")
    return entry


def check_topic_name(name: str) -> str:
    if not (
        0 < len(name) <= TOPIC_NAME_MAX
        and _LEGAL_CHARACTERS.fullmatch(name)
        and name not in (".", "..")
    ):
        raise ValueError(
            f"{name!r} is not a valid Kafka topic name "
            f'(1..{TOPIC_NAME_MAX} characters of a-z A-Z 0-9 . _ -, not "." or "..")'
        )
    return name


def check_flow_name(name: str) -> str:
    if not (0 < len(name) <= FLOW_NAME_MAX and _LEGAL_CHARACTERS.fullmatch(name)):
        raise ValueError(
            f"{name!r} is not a valid flow name (1..{FLOW_NAME_MAX} characters of "
            "a-z A-Z 0-9 . _ -, as it becomes part of topic names)"
        )
    return name


def parse_patterns(text: str) -> tuple[re.Pattern[str], ...]:
    """Comma-separated regular expressions (a comma inside one: write it as ``\\x2c``)."""
    patterns = []
    for entry in split_list(text):
        try:
            patterns.append(re.compile(entry))
        except re.error as exc:
            raise ValueError(
                f"expression {entry!r} is not a valid regular expression: {exc}"
            ) from None
    return tuple(patterns)


def parse_pattern(text: str) -> re.Pattern[str]:
    """One regular expression, the whole text (commas included)."""
    if not text:
        raise ValueError("is empty (expected a regular expression)")
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"is not a valid regular expression: {exc}") from None


def matches_any(patterns: tuple[re.Pattern[str], ...], name: str) -> bool:
    """Full match, as documented: ``orders`` does not match ``orders-eu``."""
    return any(pattern.fullmatch(name) for pattern in patterns)


TOPIC_PLACEHOLDER = "{topic}"


def check_topic_template(template: str) -> str:
    """A destination naming rule: text around exactly one ``{topic}``, e.g. ``dr.{topic}``."""
    if template.count(TOPIC_PLACEHOLDER) != 1:
        raise ValueError(
            f"must contain {TOPIC_PLACEHOLDER} exactly once (e.g. dr.{TOPIC_PLACEHOLDER})"
        )
    check_topic_name(template.replace(TOPIC_PLACEHOLDER, "x"))
    return template
