"""Checkpoint records: every translation offset sync decides on, in a compacted topic on the
target (``FlowNames.checkpoints``), readable with any consumer (JSON).

One record per group and destination partition whenever its translation changes: committed to
the group on the target, or not because the group has members there (then the checkpoint is
where an operator, or a consumer that seeks by itself, finds the translated offset). The key
keeps the latest per group and partition after compaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from runtime.clients import LIBRDKAFKA_LOG
from runtime.producing import produce_when_room
from runtime.topics import ensure_topic

_FLUSH_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    group: str
    source_topic: str
    topic: str  # on the destination
    partition: int
    source_offset: int  # the group's committed offset on the source
    offset: int  # its translation on the destination
    exact: bool  # by provenance header (True) or by timestamp alone
    committed: bool  # written to the group on the target; False: the group has members there
    seen_ms: int  # when offset sync first saw the source commit (wall clock)
    written_ms: int  # when it decided (wall clock): after the target commit when committed

    def key(self) -> bytes:
        return json.dumps([self.group, self.topic, self.partition]).encode()

    def value(self) -> bytes:
        # Not dataclasses.asdict, which copies each field deeply: a cycle writes one checkpoint
        # per group partition it moved, and at 2,000 groups x 12 partitions asdict took about
        # 8 % of offset sync's time (py-spy, bench/offsetsync_lag.py --groups 2000).
        fields = {name: getattr(self, name) for name in _FIELDS}
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def from_value(cls, value: bytes) -> Checkpoint:
        return cls(**json.loads(value))


_FIELDS = tuple(field.name for field in dataclass_fields(Checkpoint))


class CheckpointWriter:
    """Writes checkpoints with an idempotent producer; failures are counted, never fatal: a lost
    checkpoint is a missing note, and the group's offsets are what they are on the target."""

    def __init__(
        self,
        client_config: dict[str, str],
        admin: AdminClient,
        topic: str,
        on_failure: Callable[[KafkaError], None],
        *,
        stats_cb: Callable[[str], None] | None = None,
    ) -> None:
        ensure_topic(admin, NewTopic(topic, 1, -1, config={"cleanup.policy": "compact"}))
        config: dict[str, object] = {
            **client_config,
            "enable.idempotence": True,
            "linger.ms": 5,
            # Only a failure is news (on_failure): a report for every delivered checkpoint cost
            # a Python call each, 24,000 a cycle at 2,000 groups.
            "delivery.report.only.error": True,
            "logger": LIBRDKAFKA_LOG,
        }
        if stats_cb is not None:
            config.update({"statistics.interval.ms": 1000, "stats_cb": stats_cb})
        self._producer = Producer(config)
        self._topic = topic
        self._on_failure = on_failure

    def write(self, checkpoint: Checkpoint) -> None:
        # Deliveries are served by the cycle's flush, or here while the local queue is full:
        # a poll per record cost twice the produce itself (py-spy, 24,000 checkpoints a cycle at
        # 2,000 groups, bench/offsetsync_lag.py).
        produce_when_room(
            self._producer,
            self._topic,
            value=checkpoint.value(),
            key=checkpoint.key(),
            on_delivery=self._delivered,
        )

    def serve_callbacks(self) -> None:
        """Deliveries and statistics: a cycle that writes nothing would leave them queued."""
        self._producer.poll(0)

    def flush(self) -> None:
        self._producer.flush(_FLUSH_TIMEOUT_S)

    def close(self) -> None:
        self.flush()

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._on_failure(error)
