"""Which source topics stage 1 replicates, found anew every few seconds, and the policy for a
source topic deleted and recreated under its name (invariant 7: reported, never silently re-read
from its start nor skipped).

A topic is taken in only once its destination exists with the source's partition count (the
destination's partitions are the source's: stage 2 writes each record to its own partition).
Every round checks the destination names of all the matching topics together. A topic whose
destination name is another's (or one of the flow's own topics') is never copied: a topic the
flow has replicated keeps its name and goes on being copied, and a topic made later under a
clashing name is left out (an error line when it is first met, ``left_out`` for the gauge while it
lasts, and a record in the flow's meta topic) until the settings or the topics change. At
start-up a collision the flow has not met before is the settings' error (a new rename, a fresh
flow): stage 1 stops with DestinationCollisionError, exit 2, one line. One it has met (its
newcomer recorded as left out) is not: the restart goes on copying the others.

After start-up the rounds run on a thread of their own (replicator/discovery_thread.py) while
the copy loop's rebalance callback may ask ``describe``: one lock makes them take turns with the
admin clients, the FlowRecords and the state below, and each round's answer is published as one
``Discovered`` that is never changed afterwards, so a reader sees a whole round or the last one.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from replicator.errors import TopicSetupError
from replicator.flowrecords import FlowRecords
from replicator.topics import SourceTopic, describe_source_topics, ensure_destinations
from runtime import Settings, get_logger, kafka_error_of
from runtime.errors import DestinationCollisionError

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Discovered:
    """What one discovery round found, for the copy loop to apply."""

    topics: Mapping[str, SourceTopic]  # the source topics to copy
    # Source topics deleted and recreated under their name, held back by policy: why.
    recreated: Mapping[str, str]
    # Source topics not copied as their destination name collides: why.
    left_out: Mapping[str, str]


class TopicDiscovery:
    def __init__(
        self,
        settings: Settings,
        records: FlowRecords,
        source_admin: AdminClient,
        target_admin: AdminClient,
        destination_defaults: Mapping[str, str],
    ) -> None:
        self._settings = settings
        self._destination_defaults = destination_defaults
        self._records = records
        self._source_admin = source_admin
        self._target_admin = target_admin
        # The last round's answer, replaced whole (never changed in place): read without the lock.
        self.latest = Discovered(topics={}, recreated={}, left_out={})
        # Source topics deleted and recreated under their name, held back by policy: old id, new.
        self._recreated: dict[str, tuple[str, str]] = {}
        # Source topics not copied as their destination name collides: topic -> why.
        self._left_out: dict[str, str] = {}
        self._looked = False
        self._lock = threading.Lock()

    def refresh(self) -> Discovered | None:
        """Describe the source again; None (and the last answer kept) when it cannot be read.

        Two topics with one destination name end it at start-up only, when the flow has not met
        that collision before (DestinationCollisionError); afterwards the newcomer is left out.
        A missing ACL or refused credentials end it at any time: no later round mends them.
        """
        with self._lock:
            return self._refresh()

    def _refresh(self) -> Discovered | None:
        # Serves the admin clients' error callbacks (runtime.clients.RoleAdminClient), which
        # queue until a poll: every few seconds, not only while a start-up call fails.
        self._source_admin.poll(0)
        self._target_admin.poll(0)
        try:
            found = self._describe()
        except KafkaException as exc:
            log.warning("topic discovery failed", error=kafka_error_of(exc).str())
            return None
        changed = [
            topic
            for name, topic in found.items()
            if (known := self.latest.topics.get(name)) is None
            or known.partitions != topic.partitions
        ]
        not_ready = ensure_destinations(self._target_admin, changed, self._destination_defaults)
        for name, why in not_ready.items():
            log.warning("destination topic not ready; retrying", topic=name, error=str(why))
            topic = found.pop(name)
            if (known := self.latest.topics.get(name)) is not None:
                # The partitions the destination is ready for, but the id just described: a
                # topic recreated with another partition count is judged this round (invariant
                # 7), not published under the old topic's id until its destination is ready.
                found[name] = replace(known, topic_id=topic.topic_id)
        try:
            self._records.record_topic_ids(
                {t.name: topic_id for t in found.values() if (topic_id := self._new_id(t))}
            )
        except TopicSetupError as exc:
            # The target took no record in time (a broker restarting, writes below
            # min.insync.replicas): a failed round, like an unanswered describe, not an exit.
            # Nothing is published, so no topic is copied before its id is recorded
            # (invariant 7); the next round records it. A refusal is NotAuthorizedError: no
            # later round mends it, it ends the process.
            log.warning("topic discovery could not record topic ids", error=str(exc))
            return None
        return self._publish(found)

    def describe(self, names: Collection[str]) -> Discovered:
        """The answer for partitions of ``names`` just assigned, described now. Called in the
        copy loop's rebalance callback; it waits for the lock while a round is under way.

        Never the last round's answer alone (invariant 7): a topic deleted and recreated since
        that round is assigned under the same name, and a lane given the old topic's id would
        copy the new topic's records as the old one's continuation. A changed id is judged here
        as a round judges it: held back (the new lanes stop at once), or recorded under the
        policy replicate before any lane of it starts. A failed record raises TopicSetupError:
        nothing of the topic is copied before its id is recorded."""
        if not names:
            return self.latest  # an assignment that brings nothing new (a cooperative rejoin)
        with self._lock:
            found = {**self.latest.topics, **self._describe()}
            self._records.record_topic_ids(
                {
                    name: topic_id
                    for name in names
                    if name in found and (topic_id := self._new_id(found[name]))
                }
            )
            return self._publish(found)

    def _publish(self, topics: dict[str, SourceTopic]) -> Discovered:
        recreated = {
            topic: f"source topic id changed {old} -> {new}: deleted and recreated"
            for topic, (old, new) in self._recreated.items()
        }
        self.latest = Discovered(topics=topics, recreated=recreated, left_out=dict(self._left_out))
        return self.latest

    def _describe(self) -> dict[str, SourceTopic]:
        recorded = self._records.left_out_topics()
        left_out: dict[str, str] = {}

        def leave_out(topic: str, error: DestinationCollisionError) -> None:
            # At start-up the settings are what is new: a collision not met before is their
            # error. Once running (or one met before), the newcomer must not stop the others:
            # the restart would meet it again, a crash loop that copies nothing.
            if not self._looked and topic not in recorded:
                raise error
            left_out[topic] = str(error)

        found = describe_source_topics(
            self._source_admin,
            self._settings,
            established=self._records.replicated_topics(),
            left_out=leave_out,
        )
        self._looked = True
        for topic, why in left_out.items():
            if self._left_out.get(topic) != why:
                log.error(
                    "source topic not replicated: its destination name collides",
                    topic=topic,
                    error=why,
                )
            if topic not in recorded:
                self._records.record_left_out(topic, why)
        self._left_out = left_out
        return found

    def _new_id(self, topic: SourceTopic) -> str | None:
        """Invariant 7 for a topic recreated under its name: reported here, and the id to record
        returned (None: nothing to record); its running lanes, which hold the old topic's id,
        are the copy loop's to stop or end on (``replicator.stops.hold_recreated``). The round
        records every new id in one write (FlowRecords.record_topic_ids)."""
        current = topic.topic_id.hex()
        recorded = self._records.topic_id(topic.name)
        if recorded == current:
            return None
        replicate = self._settings.on_topic_recreated == "replicate"
        if recorded is None or replicate:
            if recorded is not None:
                log.warning(
                    "source topic was deleted and recreated; replicating the new one by policy",
                    topic=topic.name,
                    old_topic_id=recorded,
                    topic_id=current,
                )
            self._recreated.pop(topic.name, None)
            return current
        if topic.name not in self._recreated:
            log.error(
                "source topic was deleted and recreated; its partitions stay stopped "
                "(REPLICATION_ON_TOPIC_RECREATED=replicate goes on with the new one)",
                topic=topic.name,
                old_topic_id=recorded,
                topic_id=current,
            )
        self._recreated[topic.name] = (recorded, current)
        return None
