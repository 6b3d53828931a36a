"""Where a flow that starts from ``latest`` begins: the time stage 1 recorded when the flow
first started, read from the flow's meta topic on the target.

Such a flow copies what the source took after that time and leaves the history before it
(REPLICATION_START_FROM=latest, docs/configuration.md). Audited from the start of the source,
every record of that history would be ``missing``. The audit cuts both sides there instead,
as ``--since`` does: by timestamp, with ListOffsets, the same question stage 1 asked to find
where each partition starts.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from runtime.settings import Settings
from validator.errors import InputError
from validator.sample import destination_reader

_TIMEOUT_S = 30.0
# Stage 1's key (replicator/flowrecords.py; a role does not import another).
_STARTED_KEY = b"started"
_NO_TOPIC = (
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
)


def flow_started_at_ms(settings: Settings) -> int | None:
    """When the flow first started (epoch ms), or None when stage 1 has not recorded it (the
    flow never ran, so there is no history it left out)."""
    topic = settings.names.meta
    consumer = destination_reader(settings, {"enable.partition.eof": True})
    try:
        low, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=_TIMEOUT_S)
        if end <= low:
            return None
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        started: int | None = None
        deadline = time.monotonic() + _TIMEOUT_S
        while time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.2):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    return started
                if error is not None:
                    raise KafkaException(error)
                if message.key() == _STARTED_KEY and message.value():
                    started = int(json.loads(message.value())["at_ms"])
        raise InputError(f"could not read {topic} within {_TIMEOUT_S:g} s")
    except KafkaException as exc:
        if exc.args[0].code() in _NO_TOPIC:
            return None
        denied = exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        raise InputError(
            f"REPLICATION_START_FROM=latest: the flow's start is recorded in {topic}, which "
            f"could not be read ({exc.args[0].str()}): "
            + ("grant the validator READ on it, or give --since" if denied else "give --since")
        ) from None
    finally:
        consumer.close()
