"""Two workarounds every producer of ours needs, each written once.

- ``produce_when_room``: librdkafka raises ``BufferError`` when its local queue is full; the cure
  is to serve delivery reports (``poll``) and produce again.
- ``abort_or_replace``: an abort can fail where a new producer of the same ``transactional.id``
  would succeed (docs/design.md §9, librdkafka #4849); the new producer fences the old one and ends
  its transaction on the broker, so nothing of it becomes visible.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, Producer

from runtime.errors import FencedError
from runtime.kafka_errors import kafka_error_of, to_client_error
from runtime.logs import get_logger

log = get_logger("runtime.producing")

_FULL_QUEUE_POLL_S = 0.1


def produce_when_room(
    producer: Producer,
    topic: str,
    *,
    keep_waiting: Callable[[], bool] = lambda: True,
    **record: Any,  # what Producer.produce takes: key, value, partition, headers...
) -> bool:
    """Produce ``record`` to ``topic``, serving delivery reports while the local queue is full.

    Returns False, the record not produced, when ``keep_waiting()`` says to give up after a
    wait (stage 1 ends its session on a stall instead of waiting forever). A ``KafkaException``
    from ``produce`` propagates.
    """
    while True:
        try:
            producer.produce(topic, **record)
            return True
        except BufferError:
            producer.poll(_FULL_QUEUE_POLL_S)
            if not keep_waiting():
                return False


def abort_or_replace(
    producer: Producer, new_producer: Callable[[], Producer], timeout_s: float
) -> Producer:
    """Abort ``producer``'s open transaction; returns the producer to go on with.

    Flushes first (an abort after a flush succeeds, docs/design.md §9). If the abort still fails (or
    the broker stays away past ``timeout_s``), the producer is closed and ``new_producer()``'s
    is returned: its ``init_transactions`` fences the old one and aborts its transaction on the
    broker, so the transaction can never commit. Never a crash loop. A fenced producer is the
    exception: another instance owns our identity, and ``FencedError`` is raised.
    """
    try:
        producer.flush(timeout_s)
        producer.abort_transaction(timeout_s)
        return producer
    except KafkaException as exc:
        error = to_client_error(kafka_error_of(exc), "abort_transaction")
        if isinstance(error, FencedError):
            raise error from exc
        log.warning("abort failed; replacing the transactional producer", error=str(error))
        # Not close(): it flushes without a bound, and what it waited on (records in flight to
        # a broker answering nothing) times out only after message.timeout.ms, up to the
        # transaction timeout (60 s) with the loop standing still. The transaction is left to
        # the new producer's init_transactions, which aborts it on the broker.
        with contextlib.suppress(KafkaException):
            producer.purge()
            producer.flush(0)
        return new_producer()
