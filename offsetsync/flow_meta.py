"""What offset sync learns from the flow's meta topic (docs/design.md §3.2): the source topics
stage 1 replicates (it records each one's topic id before it copies a record of it, invariant
7), and those it left out because their destination name collides with another's. A left-out
topic's destination holds the other topic's copies, so a group's offsets on it have no copies to
be translated to: translated anyway, they would move the group on the destination to where the
other topic's records are (the provenance header names a cluster, partition and offset, not a
topic). Only a recorded topic is translated: a topic stage 1 has not judged yet (stopped,
crash-looping, or not yet at its next discovery round) may be the one it will leave out; and
only while the source's topic of that name has the id recorded (offsetsync/source_ids.py)."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import Message

from offsetsync.reading import KEEP, ClusterReader
from runtime import get_logger

log = get_logger("offsetsync")

# Stage 1's keys (replicator/flowrecords.py; a role does not import another).
_LEFT_OUT_PREFIX = "left-out:"
_TOPIC_ID_PREFIX = "topic-id:"


class FlowTopics:
    """The meta topic read on, a cycle at a time, from where the last read ended."""

    def __init__(self, meta_topic: str) -> None:
        self._topic = meta_topic
        self._values: dict[str, Any] = {}
        self._position = 0

    def refresh(self, reader: ClusterReader) -> None:
        """Read what stage 1 recorded since the last read. A meta topic that is not there (no
        stage 1 of this flow has run) records no topic; one whose partition cannot be read
        this time keeps what was read before. Other errors fail the cycle: a topic is never
        translated for want of knowing whether it was left out."""
        key = (self._topic, 0)
        bounds = reader.bounds([key])
        if key not in bounds:
            return
        low, end = bounds[key]
        start = max(self._position, low)
        if start < end:
            reader.scan({key: (start, end)}, {key: _Records(self._values)})
        self._position = max(self._position, end)

    def replicated(self) -> dict[str, str]:
        """Source topics stage 1 took in, each with the topic id it recorded (hex)."""
        return {
            key.removeprefix(_TOPIC_ID_PREFIX): str(value.get("topic_id", ""))
            for key, value in self._values.items()
            if key.startswith(_TOPIC_ID_PREFIX) and isinstance(value, dict)
        }

    def left_out(self) -> set[str]:
        """Source topics recorded as left out and not replicated since (once the topic that
        held the destination name is gone, stage 1 takes the newcomer in and records its topic
        id; the left-out record stays)."""
        return {
            key.removeprefix(_LEFT_OUT_PREFIX)
            for key in self._values
            if key.startswith(_LEFT_OUT_PREFIX)
            and _TOPIC_ID_PREFIX + key.removeprefix(_LEFT_OUT_PREFIX) not in self._values
        }


class _Records:
    """Keeps the latest value of each key; a tombstone (or an empty value) forgets it."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def take(self, message: Message) -> int | None:
        raw_key, value = message.key(), message.value()
        if raw_key:
            key = raw_key.decode(errors="replace")
            parsed = _parsed(value)
            if parsed:
                self._values[key] = parsed
            else:
                self._values.pop(key, None)
        return KEEP

    def end(self) -> None:
        pass


def _parsed(value: bytes | None) -> Any:
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        log.warning("a record of the flow's meta topic that is not JSON: ignored")
        return None
