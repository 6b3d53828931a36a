"""Taking what a consumer has at hand, without waiting for a batch to fill.

librdkafka's batch consume (``Consumer.consume(n, timeout)``) returns when it has ``n``
messages or when the timeout expires, whichever is first: at a low rate every batch costs the
whole timeout, though its first message was ready at once. Both stages read with
`consume_ready` instead: it waits only while nothing at all is there, and returns the moment
something is, with everything already fetched (librdkafka prefetches in the background, so a
busy partition still yields full batches).
"""

from __future__ import annotations

from confluent_kafka import Consumer, Message


def consume_ready(consumer: Consumer, max_messages: int, wait_s: float) -> list[Message]:
    """Up to ``max_messages`` messages already fetched; if there are none, waits up to
    ``wait_s`` for the first and returns it with whatever arrived with it."""
    messages: list[Message] = consumer.consume(max_messages, 0)
    if messages:
        return messages
    messages = consumer.consume(1, wait_s)
    if messages and max_messages > 1:
        messages += consumer.consume(max_messages - 1, 0)
    return messages
