"""Stage 2's dead-letter path (docs/design.md §3.6, invariant 7): a staging record that is not an
envelope of this flow is kept, unchanged and with its reason, in the open transaction; or stage 2
stops there (REPLICATION_ON_BAD_ENVELOPE=stop)."""

from __future__ import annotations

from confluent_kafka import Message, Producer

from deduplicator.errors import DeduplicatorError
from deduplicator.transaction import Tally
from runtime import Settings, get_logger, produce_when_room

# The loop's logger: these lines kept the name they had when the loop dead-lettered.
log = get_logger("deduplicator.loop")


def dead_letter(
    settings: Settings,
    tally: Tally,
    producer: Producer,
    topic: str,
    message: Message,
    reason: str,
) -> None:
    """Invariant 7: a bad staging record is kept, with its reason, in the same transaction (the
    one ``producer`` has open), in the dead-letter ``topic``."""
    if settings.on_bad_envelope == "stop":
        raise DeduplicatorError(
            f"staging record at partition {message.partition()} offset {message.offset()}: {reason}"
        )
    tally.dead_letters += 1
    produce_when_room(
        producer,
        topic,
        value=message.value(),
        key=message.key(),
        headers=[
            ("exactly.reason", reason.encode()),
            ("exactly.staging", f"{message.partition()}/{message.offset()}".encode()),
        ],
    )
    log.error(
        "staging record dead-lettered",
        partition=message.partition(),
        offset=message.offset(),
        reason=reason,
    )
