"""What stage 1's copy loop needs granted, and the refusal that names it when an ACL is missing.

A refused authorization stops stage 1 with one line naming the ACL to grant (docs/security.md):
``runtime.refusal`` builds that line from ``wanted``, resource type -> (operation, name). These
are the loop's ``wanted``: reading the source as the replicator group, writing staging, read
from the one table of grants that ``exactly acls`` prints (runtime/grants.py).
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from runtime import NotAuthorizedError, raise_if_refused, refusal
from runtime.grants import REPLICATOR_GROUP, SOURCE, SOURCE_TOPIC, STAGING, TARGET, needs


def source_reads(group: str, topic: str | None) -> dict[str, tuple[str, str]]:
    """What stage 1's consumer needs granted on the source (``refusal``'s ``wanted``); ``topic``
    None when the error names no topic."""
    known = {REPLICATOR_GROUP: group, SOURCE_TOPIC: topic or "(a source topic)"}
    return needs("replicator", SOURCE, known)


def staging_writes(staging: str) -> dict[str, tuple[str, str]]:
    """What stage 1's producer needs granted on the target."""
    return needs("replicator", TARGET, {STAGING: staging})


def consumer_refusal(error: KafkaError, group: str) -> NotAuthorizedError | None:
    """A refused read of the source, reported by the consumer's error callback (no topic)."""
    return refusal(error, "source", source_reads(group, None))


def raise_if_read_refused(error: KafkaError, group: str, topic: str | None) -> None:
    """Raise the ``NotAuthorizedError`` of a consumed message's refused read, naming its topic."""
    raise_if_refused(error, "source", source_reads(group, topic))


def delivery_refusal(error: KafkaError, staging: str) -> NotAuthorizedError | None:
    """A refused write of an envelope to staging, reported by its delivery callback."""
    return refusal(error, "target", staging_writes(staging))
