"""Loaded by a role started with this directory on PYTHONPATH (tests only): the first
transactional producer of the process fails for good, as librdkafka fails one, after
TEST_PRODUCER_FAILS_AFTER records. Seen for real in a SIGTERM roll of a three-node target
("sequence desynchronization with broker", OUT_OF_ORDER_SEQUENCE_NUMBER), which no test can
bring about on purpose. Only the trigger is made up, in librdkafka's shape (probed against a
real broker: produce() then raises a bare _FATAL, flush and the transactional calls the cause);
everything after it is the real producer and the real cluster."""

from __future__ import annotations

import os
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException

_AFTER = int(os.environ.get("TEST_PRODUCER_FAILS_AFTER", "0"))
_CAUSE = KafkaError(
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    "ProduceRequest failed due to sequence desynchronization with broker (made by a test)",
    fatal=True,
)


class _FailingProducer(confluent_kafka.Producer):
    failed_one = False  # one producer of the process fails: its replacement must not

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self._watched = "transactional.id" in config and not _FailingProducer.failed_one
        self._produced = 0
        self._failed = False

    def _raise_if_failed(self) -> None:
        if self._failed:
            raise KafkaException(_CAUSE)

    def produce(self, *args: Any, **kwargs: Any) -> None:
        if self._failed:
            raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message"))
        if self._watched and not _FailingProducer.failed_one:
            self._produced += 1
            if self._produced > _AFTER:
                _FailingProducer.failed_one = self._failed = True
                raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message"))
        super().produce(*args, **kwargs)

    def flush(self, *args: Any) -> int:
        self._raise_if_failed()
        return super().flush(*args)

    def begin_transaction(self, *args: Any) -> None:
        self._raise_if_failed()
        super().begin_transaction(*args)

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self._raise_if_failed()
        super().send_offsets_to_transaction(*args)

    def commit_transaction(self, *args: Any) -> None:
        self._raise_if_failed()
        super().commit_transaction(*args)

    def abort_transaction(self, *args: Any) -> None:
        self._raise_if_failed()
        super().abort_transaction(*args)


if _AFTER:
    confluent_kafka.Producer = _FailingProducer  # type: ignore[misc]
