"""What a consume error at a message means for stage 1, by policy (invariant 7).

A refused read stops stage 1 naming the ACL; the consumer's own fatal error (our static member
fenced) is handed back for the copy loop to decide; records lost to retention or a record the
client cannot deliver stop their partition; a broker's error answer to a fetch, which the client
asks again from the same position, is counted and the partition goes on; any other fatal error
ends the process.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Message

from replicator.access import raise_if_read_refused
from replicator.lanes import Lane
from replicator.metrics import ReplicatorMetrics
from replicator.stops import stop, stop_for_data_loss
from runtime import ErrorClass, classify, get_logger, member_fenced

# The copy loop's logger: this line was the loop's, and a log query selects on its logger name.
log = get_logger("replicator.loop")

# At most one warning per partition this often while a broker keeps refusing its fetches (each
# refusal is counted): librdkafka asks again every fetch.error.backoff.ms (500 ms).
REFETCH_WARN_EVERY_S = 60.0


def on_message_error(
    consumer: Consumer,
    metrics: ReplicatorMetrics,
    lanes: Mapping[tuple[str, int], Lane],
    group: str,
    message: Message,
    error: KafkaError,
) -> KafkaError | None:
    """Handle ``error``, consumed in place of a record of ``message``'s partition; returns it
    when it is the consumer's fenced member, None otherwise."""
    # Before the partition is taken for one with an unreadable record:
    raise_if_read_refused(error, group, message.topic())
    if member_fenced(error):
        # librdkafka gives a consumer's fatal error as a message: for the loop to decide.
        return error
    if error.code() == KafkaError._AUTO_OFFSET_RESET and message.topic() is not None:
        stop_for_data_loss(consumer, metrics, lanes.get((message.topic(), message.partition())))
        return None
    lane = lanes.get((message.topic(), message.partition()))
    offset = message.offset()
    if lane is not None and offset is not None and offset >= 0 and not lane.stopped:
        if _fetched_again(error):
            metrics.client_errors.labels("source", error.name()).inc()
            now = time.monotonic()
            if now - lane.refetch_warned_at >= REFETCH_WARN_EVERY_S:
                lane.refetch_warned_at = now
                log.warning(
                    "source fetch refused; fetched again",
                    topic=lane.topic,
                    partition=lane.partition,
                    offset=offset,
                    error=f"{error.name()}: {error.str()}",
                )
            return None
        # A record librdkafka cannot deliver (bad compression, bad CRC): it moves past
        # that batch, and going on would leave a silent gap. Stop the partition instead.
        detail = f"{error.name()}: {error.str()}"
        stop(consumer, metrics, lane, "unreadable_record", detail, offset=offset)
        return None
    if classify(error) is ErrorClass.FATAL:
        raise KafkaException(error)
    log.warning(
        "consume error", topic=message.topic(), partition=message.partition(), error=error.str()
    )
    return None


def _fetched_again(error: KafkaError) -> bool:
    """A broker's error code for one partition's fetch: librdkafka keeps the partition's fetch
    position and asks again after a back-off (rdkafka_fetcher.c, the errors it passes to the
    application), so nothing is passed over and stopping would stall a partition for a
    transient answer. The client's own codes (negative: a batch it could not decode) moved past
    a batch. A record too large to fetch is asked again for ever: it stops, naming it."""
    code: int = error.code()
    return code > 0 and code != KafkaError.MSG_SIZE_TOO_LARGE
