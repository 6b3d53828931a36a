"""The sync cycle (docs/design.md §5): every interval, each selected source group's committed
offsets on replicated partitions are translated and committed to the group of the same name on
the target, when that group has no members there, and only forward.

Invariants a cycle keeps:
- A group with members on the target is never moved: it is skipped (and checkpointed), and the
  broker itself refuses an outside commit for a group that gains members meanwhile.
- Offsets on the target never move backwards: a partition whose target offset is already at or
  past the translation is left as it is, and one whose target offset the cluster did not tell
  (a group it does not list yet and does not answer for, a transaction of it pending) is not
  committed at all this cycle. Not listed is not "no offsets".
- Never beyond what stage 2 has committed: translations read the destination read_committed, so
  a group ahead of replication waits and is never guessed.
- A group or partition whose committed offset disappears from the source is forgotten, not
  reset: its target offsets stay where they are.
- A translation that does not change is not left to the target's memory: its target offset is
  looked at again every RECONFIRM_AFTER_S (an offset deleted or expired there is committed
  again) and committed again, unchanged, every RECOMMIT_AFTER_S (a group that never had members
  on the target keeps an offset offsets.retention.minutes after its last commit, 7 days by
  default; one that had members there loses all of them that long after it emptied, whatever
  is committed since, and is restored by the next look).
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from offsetsync.cache import CachedTranslations
from offsetsync.checkpoints import Checkpoint, CheckpointWriter
from offsetsync.clients import SyncClients
from offsetsync.collisions import Collisions, destination_or_none
from offsetsync.errors import NoOffsetsError, OffsetSyncError, StaleLeadershipError
from offsetsync.flow_meta import FlowTopics
from offsetsync.groups import GROUP_ACTIVE, GroupOffsets, is_idle, translated_metadata
from offsetsync.metrics import GROUP_STATES, OffsetSyncMetrics
from offsetsync.reading import Key
from offsetsync.source_ids import source_topic_ids
from offsetsync.translate import (
    BehindRetention,
    Request,
    Translated,
    Translation,
    Unavailable,
    Waiting,
)
from runtime import RetriableKafkaError, Settings, get_logger, translate_kafka_errors

log = get_logger("offsetsync")

_BEAT_EVERY_S = 10.0
_RECONNECT_AFTER = 3  # failed cycles in a row
# Groups a cycle takes at a time, fetched, translated and committed before the next are fetched.
# A group's offset waits for the next fetch of the group, then for what follows it in the same
# cycle: all of the cycle when every group is fetched first (lag p99 of about two cycles at 2,000
# groups, issue 34), one step of it here. A step costs a target listing (the checkpoints are
# flushed once a cycle).
GROUPS_PER_STEP = 250
# How long a group partition whose translation did not change is left alone: then its target
# offset is fetched again (a group whose offsets were deleted on the target, or expired there,
# is committed again within this), at one target fetch a group every 5 minutes.
RECONFIRM_AFTER_S = 300.0
# How long an unchanged offset goes without a commit of ours: a target keeps an idle group's
# offset offsets.retention.minutes (7 days by default) after its last commit, so a source group
# that stays caught up on a quiet partition would lose its target offset with nothing moving.
RECOMMIT_AFTER_S = 86_400.0

# (group, partition): a source partition or a destination partition, by context.
GroupPartition = tuple[str, Key]


@dataclass(frozen=True, slots=True)
class _Seen:
    offset: int
    monotonic: float
    wall_ms: int


@dataclass(frozen=True, slots=True)
class _Move:
    request: Request
    translated: Translated
    seen: _Seen


class OffsetSync:
    def __init__(
        self,
        settings: Settings,
        metrics: OffsetSyncMetrics,
        *,
        clients: SyncClients,
        reconnect: Callable[[], SyncClients],
        checkpoints: CheckpointWriter,
        source_cluster_id: str,
        should_stop: Callable[[], bool],
        wait: Callable[[float], object] = time.sleep,
        beat: Callable[[], None] = lambda: None,
        groups_per_step: int = GROUPS_PER_STEP,
        reconfirm_after_s: float = RECONFIRM_AFTER_S,
        recommit_after_s: float = RECOMMIT_AFTER_S,
    ) -> None:
        if groups_per_step < 1:
            raise ValueError(f"groups_per_step must be at least 1, not {groups_per_step}")
        self._settings = settings
        self._groups_per_step = groups_per_step
        self._reconfirm_after_s = reconfirm_after_s
        self._recommit_after_s = recommit_after_s
        self._next_step = 0  # where the next cycle starts, in steps (after a step that raised)
        self._should_stop = should_stop
        self._wait = wait
        self._beat = beat
        self._metrics = metrics
        self._clients = clients
        self._reconnect = reconnect
        self._checkpoints = checkpoints
        self._cluster_id = source_cluster_id
        self._failed_in_a_row = 0
        self._seen: dict[GroupPartition, _Seen] = {}  # by source partition
        self._committed: dict[GroupPartition, int] = {}  # by destination partition
        # When each of _committed was last seen on the target, and last committed by us.
        self._confirmed_at: dict[GroupPartition, float] = {}
        self._committed_at: dict[GroupPartition, float] = {}
        self._unnamed: set[str] = set()  # source topics without a valid destination name, warned
        self._checkpointed: dict[GroupPartition, int] = {}  # by destination partition
        self._behind: set[GroupPartition] = set()  # warned about, by source partition
        self._unknown: set[GroupPartition] = set()  # warned about, by destination partition
        self._translated: set[GroupPartition] = set()  # logged, by source partition
        self._waiting: dict[GroupPartition, float] = {}  # since (monotonic), by source partition
        self._waited: set[GroupPartition] = set()  # warned about, by source partition
        self._translations = CachedTranslations()
        self._flow_topics = FlowTopics(settings.names.meta)
        # As of this cycle's read of the meta topic: source topics stage 1 took in (with the id
        # it recorded), left out.
        self._replicated_now: dict[str, str] = {}
        self._left_out_now: set[str] = set()
        # Source topics stage 1 has not taken in yet: since when (monotonic), and those warned.
        self._untaken_since: dict[str, float] = {}
        self._untaken_warned: set[str] = set()
        self._untaken_met: set[str] = set()  # this cycle's
        self._left_out_warned: set[str] = set()  # source topics, while they stay left out
        # Source topics whose id differs from the recorded one: warned, and this cycle's.
        self._recreated_warned: set[str] = set()
        self._recreated_met: set[str] = set()
        self._collisions = Collisions(settings)
        # Partitions that could not be read, warned about while that lasts: (cluster, partition).
        self._unavailable: set[tuple[str, Key]] = set()
        self._stale: set[tuple[str, Key]] = set()  # this cycle's, of those

    def run(self) -> None:
        interval_s = self._settings.sync_interval_ms / 1000
        while not self._should_stop():
            started = time.monotonic()
            try:
                # runtime's one classification: a retriable error ends the cycle; any other
                # (credentials, ACLs, what we do not understand) ends the process, exit 1.
                with self._metrics.cycle_seconds.time(), translate_kafka_errors("sync cycle"):
                    self.cycle()
                self._failed_in_a_row = 0
            except RetriableKafkaError as exc:
                self._cycle_failed(exc.kafka_error.str())
            except OffsetSyncError as exc:
                self._cycle_failed(str(exc))
            self._beat()
            # Beat while waiting too: an interval longer than the liveness limit is no hang.
            deadline = started + interval_s
            while not self._should_stop() and (remaining := deadline - time.monotonic()) > 0:
                self._wait(min(remaining, _BEAT_EVERY_S))
                self._beat()

    def cycle(self) -> None:
        """One pass over every selected group, GROUPS_PER_STEP at a time: a step's moves are
        committed before the next step's offsets are fetched. The steps go by group name, in
        the same order every cycle (each group is fetched a cycle apart), except after a step
        that raised: the next cycle starts after it, so that an error that lasts costs its own
        step's groups, not those after it. A commit the target refused is raised once every
        step has run: it fails the cycle, not the groups after it."""
        self._clients.serve_callbacks()
        self._checkpoints.serve_callbacks()
        self._stale = set()
        self._untaken_met = set()
        self._recreated_met = set()
        self._collisions.cycle_started()
        self._refresh_flow_topics()
        listed = sorted(
            g for g in self._clients.source_groups.states() if self._settings.syncs_group(g)
        )
        steps = [
            listed[start : start + self._groups_per_step]
            for start in range(0, len(listed), self._groups_per_step)
        ]
        first = self._next_step % len(steps) if steps else 0
        steps = steps[first:] + steps[:first]
        states: dict[str, str] = {}
        answered: Counter[str] = Counter()
        partitions = to_move = 0
        refused: list[KafkaError] = []
        fetched_any = False
        for number, step in enumerate(steps):
            if number and self._should_stop():
                return  # SIGTERM: the steps left wait for the next start
            try:
                requests, fetched = self._source_offsets(step, first=not fetched_any)
                fetched_any = fetched_any or fetched
                moves = self._moves(requests, states, answered)
                partitions += len(requests)
                to_move += sum(len(m) for m in moves.values())
                if moves:
                    refused += self._apply(moves, states)
            except Exception:
                self._next_step = first + number + 1
                raise
            # Each step may wait out a timeout of its own (a fetch, a commit): the liveness limit
            # is for one step, not for all of them.
            self._beat()
        # Once a cycle, not once a step: while the checkpoint topic cannot be written (its
        # leader away), each flush waits out its whole timeout, and a lost checkpoint is a
        # missing note, not a reason to hold up the groups of the steps after it.
        self._checkpoints.flush()
        # Groups no longer listed at all: deleted on the source.
        self._forget_gone(
            {}, groups={g for g, _ in self._seen} - set(listed), listed=False, fetched={}
        )
        # Forgotten (offsets deleted): no more waiting. One whose fetch failed this cycle keeps
        # its seen offset, and its time waited with it.
        for key in self._waiting.keys() - self._seen.keys():
            self._stop_waiting(*key)
        # What a cycle saw, where an answer is silent (no group, waiting, nothing to move).
        log.debug(
            "sync cycle",
            groups=len(states),
            partitions=partitions,
            translated=answered["Translated"],
            waiting=answered["Waiting"],
            behind_retention=answered["BehindRetention"],
            no_source_partition=answered["none"],
            unavailable=answered["Unavailable"],
            to_move=to_move,
        )
        for state in GROUP_STATES:
            self._metrics.groups.labels(state).set(sum(s == state for s in states.values()))
        self._untaken_cycle_ended()
        # One no group has offsets on any more is forgotten: met again later, it is warned anew.
        self._recreated_warned &= self._recreated_met
        self._collisions.cycle_ended()
        if refused:
            raise KafkaException(refused[0])
        if self._stale:
            # Left out like a partition without a leader, but a client that stays out of date
            # (after a broker restart) is mended only by a new one: failed cycles make it.
            cluster, (topic, partition) = min(self._stale)
            raise StaleLeadershipError(
                f"{len(self._stale)} partitions answered that this client's idea of their "
                f"leader is out of date, {cluster} {topic}[{partition}] first"
            )

    def _moves(
        self,
        requests: dict[GroupPartition, Request],
        states: dict[str, str],
        answered: Counter[str],
    ) -> dict[str, dict[Key, _Move]]:
        """What one step translates and would commit, by group and destination partition."""
        translations = self._translations.translate(
            self._clients,
            set(requests.values()),
            self._cluster_id,
            header=self._settings.provenance_header,
        )
        moves: dict[str, dict[Key, _Move]] = defaultdict(dict)
        for (group, source_key), request in requests.items():
            states.setdefault(group, "synced")
            translation = translations.get(request)
            answered["none" if translation is None else type(translation).__name__] += 1
            self._readable_again(request, translation)
            if not isinstance(translation, Waiting | Unavailable):
                # Unavailable says nothing of replication: a wait goes on until it is told.
                self._stop_waiting(group, source_key)
            if isinstance(translation, Translated):
                destination_key = (request.destination_topic, request.partition)
                key = (group, destination_key)
                changed = self._committed.get(key) != translation.destination_offset
                if changed or self._reconfirm_due(key):
                    seen = self._seen[(group, source_key)]
                    moves[group][destination_key] = _Move(request, translation, seen)
            elif translation is not None:
                self._not_translatable(group, source_key, translation, states)
        return moves

    def _source_offsets(
        self, groups: list[str], *, first: bool
    ) -> tuple[dict[GroupPartition, Request], bool]:
        """The committed offset of each of ``groups`` (listed and selected) on each replicated
        partition, and whether any group's fetch was answered. Not one answered in the
        ``first`` step that asks: the client is taken for broken (NoOffsetsError). In a later
        step, the groups are left as for a failed fetch of each: the clients answered before."""
        now, now_ms = time.monotonic(), int(time.time() * 1000)
        requests: dict[GroupPartition, Request] = {}
        fetched = self._clients.source_groups.committed(groups)
        if groups and not fetched and first:
            raise NoOffsetsError(f"no selected group's offsets could be fetched ({len(groups)})")
        # Named once per topic, not once per group partition (24,000 a cycle at 2,000 groups of
        # 12 partitions: half a second of a cycle, py-spy).
        destinations = {
            topic: self._translatable_destination(topic)
            for topic in sorted({t for offsets in fetched.values() for t, _ in offsets.offsets})
        }
        for topic in self._held_back({t for t, d in destinations.items() if d}):
            destinations[topic] = None
        for group, offsets in fetched.items():
            for (topic, partition), committed in offsets.offsets.items():
                destination_topic = destinations[topic]
                if destination_topic is None:
                    continue
                if (topic, partition) in offsets.translated:
                    # An offset sync wrote it here (a flow into this cluster): the group has not
                    # consumed here since. Translated back, it would move the group on the
                    # cluster it came from, and two opposite flows would fight over it.
                    self._passed_back(group, (topic, partition))
                    continue
                # Its consumer's own again: a later mark is logged and counted anew.
                self._translated.discard((group, (topic, partition)))
                key = (group, (topic, partition))
                seen = self._seen.get(key)
                if seen is None or seen.offset != committed:
                    self._seen[key] = _Seen(committed, now, now_ms)
                requests[key] = Request(topic, destination_topic, partition, committed)
        self._forget_gone(requests, groups=set(groups), listed=True, fetched=fetched)
        return requests, bool(fetched)

    def _forget_gone(
        self,
        requests: dict[GroupPartition, Request],
        *,
        groups: Collection[str],
        listed: bool,
        fetched: Mapping[str, GroupOffsets],
    ) -> None:
        """Among ``groups`` (a step's, ``listed``; or those the listing left out), a group
        deleted on the source, or its offsets deleted: stop syncing it and leave its target
        offsets where they are (never reset them). A listed group whose offset fetch failed
        this cycle, or a partition the fetch could not tell, is kept as it was."""
        gone: dict[str, int] = {}
        for group, (topic, partition) in [
            key for key in self._seen if key[0] in groups and key not in requests
        ]:
            if listed and (group not in fetched or (topic, partition) in fetched[group].unknown):
                continue
            translated = group in fetched and (topic, partition) in fetched[group].translated
            del self._seen[(group, (topic, partition))]
            self._behind.discard((group, (topic, partition)))
            destination_topic = self._destination_of(topic)
            if destination_topic is not None:
                destination_key = (destination_topic, partition)
                for memo in (
                    self._committed,
                    self._confirmed_at,
                    self._committed_at,
                    self._checkpointed,
                ):
                    memo.pop((group, destination_key), None)
            if not translated:  # _passed_back said why
                gone[group] = gone.get(group, 0) + 1
        for group, partitions in sorted(gone.items()):
            log.info(
                "no committed offset on the source any more (the group or its offsets deleted, "
                "or not listed while its coordinator loads): not synced until it has one; its "
                "target offsets are left as they are",
                group=group,
                partitions=partitions,
            )

    def _destination_of(self, topic: str) -> str | None:
        """The destination name of a source topic; None when it is not replicated, or when its
        name makes no valid topic name (too long for its template): stage 1 leaves such a topic
        out, and a group's offsets on it are not translated, never the whole role stopped."""
        try:
            return self._settings.destination_topic(topic)
        except ValueError as exc:
            if topic not in self._unnamed:
                self._unnamed.add(topic)
                log.warning(
                    "a source topic without a valid destination name: not replicated, and "
                    "groups' offsets on it are not synced",
                    topic=topic,
                    error=str(exc),
                )
            return None

    def _translatable_destination(self, topic: str) -> str | None:
        """The destination a group's offsets on ``topic`` are translated onto; None when the
        flow does not replicate it, stage 1 left it out, or stage 1 has not taken it in yet."""
        destination = self._destination_of(topic)
        if destination is None or self._is_left_out(topic) or not self._taken_in(topic):
            return None
        return destination

    def _held_back(self, topics: set[str]) -> set[str]:
        """Among ``topics`` (stage 1 took them in), those not translated for what the source
        has now: recreated since, or sharing a destination with another topic taken in. One
        describe of the source a step, after the step's offsets were fetched."""
        related = self._collisions.related(topics, self._replicated_now.keys())
        current = source_topic_ids(self._clients.source_admin, related)
        return self._recreated_on_source(topics, current) | self._collisions.held_back(
            topics, current.keys()
        )

    def _recreated_on_source(self, topics: set[str], current: Mapping[str, str]) -> set[str]:
        """Among ``topics`` (stage 1 took them in), those the source has under another id than
        the one stage 1 recorded: deleted and recreated since, their groups' offsets are the new
        topic's while the copies are the old one's (offsetsync/source_ids.py). Asked after the
        step's offsets were fetched: an id read later that is still the recorded one means
        those offsets were committed on the recorded topic. Warned once while it lasts; a
        topic stage 1 then takes in under its new id (``replicate``) is synced again.
        ``current``: the source's ids now, of these topics and maybe others."""
        current = {topic: current[topic] for topic in topics if topic in current}
        recreated = {t for t in topics if t in current and current[t] != self._replicated_now[t]}
        for topic in sorted(recreated - self._recreated_warned):
            log.warning(
                "source topic deleted and recreated since stage 1 took it in: groups' offsets "
                "on it are not synced while stage 1 holds the new topic back "
                "(REPLICATION_ON_TOPIC_RECREATED)",
                topic=topic,
                recorded_topic_id=self._replicated_now[topic],
                topic_id=current[topic],
            )
        # Gone from the source since (not in ``current``): nothing is translated, nothing said.
        for topic in sorted((self._recreated_warned & current.keys()) - recreated):
            log.info("source topic's id is the one stage 1 recorded again", topic=topic)
        self._recreated_warned = (self._recreated_warned - current.keys()) | recreated
        self._recreated_met |= recreated
        return recreated

    def _refresh_flow_topics(self) -> None:
        """Stage 1's topics as the meta topic has them now; a topic no longer left out
        (renamed apart, or the other topic gone and this one replicated) is said so once."""
        self._flow_topics.refresh(self._clients.destination_reader)
        self._replicated_now = self._flow_topics.replicated()
        left_out = self._left_out_now = self._flow_topics.left_out()
        for topic in sorted(self._left_out_warned - left_out):
            log.info(
                "source topic no longer left out by stage 1: its offsets are synced", topic=topic
            )
        self._left_out_warned &= left_out
        # Taken in since: said here; the cycle's end forgets it (_untaken_cycle_ended).
        for topic in sorted(self._untaken_warned & self._replicated_now.keys()):
            log.info("source topic taken in by stage 1: its offsets are synced", topic=topic)
        self._untaken_warned -= self._replicated_now.keys()
        self._metrics.topics_left_out.set(len(left_out))

    def _is_left_out(self, topic: str) -> bool:
        """Whether stage 1 left ``topic`` out (its destination name collides with another's):
        its destination holds the other topic's copies, and a translation onto them would move
        the group there to a wrong place. Warned once while it lasts."""
        if topic not in self._left_out_now:
            return False
        if topic not in self._left_out_warned:
            self._left_out_warned.add(topic)
            log.warning(
                "source topic left out by stage 1 (its destination name collides with another "
                "topic's): groups' offsets on it are not synced",
                topic=topic,
                destination=destination_or_none(self._settings, topic),
            )
        return True

    def _taken_in(self, topic: str) -> bool:
        """Whether stage 1 recorded ``topic``'s id, as it does before it copies a record of it.
        Until then the topic may be one it will leave out when it next looks (it is stopped,
        crash-looping, or between two discovery rounds), and its destination may hold another
        topic's copies. Said once at INFO, and once at WARNING when it lasts as long as a group
        waiting for replication is warned about (no stage 1, or no grant to read its records)."""
        if topic in self._replicated_now:
            return True
        self._untaken_met.add(topic)
        now = time.monotonic()
        since = self._untaken_since.get(topic)
        meta = self._settings.names.meta
        if since is None:
            self._untaken_since[topic] = now
            log.info(
                "source topic not yet taken in by stage 1 (no topic id in the flow's meta "
                "topic): groups' offsets on it are synced once it is",
                topic=topic,
                meta_topic=meta,
            )
        elif (
            topic not in self._untaken_warned
            and now - since >= self._settings.sync_waiting_warn_ms / 1000
        ):
            self._untaken_warned.add(topic)
            log.warning(
                "source topic still not taken in by stage 1: groups' offsets on it are not "
                "synced (is stage 1 running, and may offset sync read the meta topic?)",
                topic=topic,
                meta_topic=meta,
                waited_s=round(now - since, 1),
            )
        return False

    def _untaken_cycle_ended(self) -> None:
        """The gauge of the topics not taken in that this cycle met; one no group has offsets
        on any more is forgotten, so that met again later it is said anew, not warned at once."""
        self._metrics.topics_not_taken_in.set(len(self._untaken_met))
        for topic in self._untaken_since.keys() - self._untaken_met:
            del self._untaken_since[topic]
        self._untaken_warned &= self._untaken_met

    def _readable_again(self, request: Request, translation: Translation | None) -> None:
        """A partition warned about as unavailable that answered: said once."""
        if isinstance(translation, Unavailable) or translation is None:
            return
        keys = [("source", (request.source_topic, request.partition))]
        if isinstance(translation, Translated | Waiting):  # the destination was read too
            keys.append(("target", (request.destination_topic, request.partition)))
        for cluster, key in keys:
            if (cluster, key) in self._unavailable:
                self._unavailable.discard((cluster, key))
                log.info(
                    "partition readable again: its groups' offsets are synced",
                    cluster=cluster,
                    topic=key[0],
                    partition=key[1],
                )

    def _reconfirm_due(self, key: GroupPartition) -> bool:
        """Whether an unchanged translation's target offset is to be looked at again."""
        since = time.monotonic() - self._confirmed_at.get(key, -math.inf)
        return since >= self._reconfirm_after_s

    def _passed_back(self, group: str, source_key: Key) -> None:
        if (group, source_key) not in self._translated:
            self._translated.add((group, source_key))
            self._metrics.passed_back.inc()
            log.info(
                "offset committed by an offset sync into the source (active-active): not "
                "translated back",
                group=group,
                topic=source_key[0],
                partition=source_key[1],
            )

    def _not_translatable(
        self, group: str, source_key: Key, translation: Translation, states: dict[str, str]
    ) -> None:
        if isinstance(translation, Waiting):
            if states[group] == "synced":
                states[group] = "waiting"
            self._still_waiting(group, source_key, translation)
        elif isinstance(translation, Unavailable):
            _hold(states, group, "unavailable")
            self._metrics.unavailable.labels(translation.cluster).inc()
            key = (translation.cluster, (translation.topic, translation.partition))
            if translation.stale:
                self._stale.add(key)
            if key not in self._unavailable:  # once a partition, not once a group partition
                self._unavailable.add(key)
                log.warning(
                    "partition could not be read: groups' offsets on it are not synced this "
                    "cycle (nothing committed for it); the others are, and the next cycle asks "
                    "again",
                    cluster=translation.cluster,
                    topic=translation.topic,
                    partition=translation.partition,
                    reason=translation.reason,
                )
        elif isinstance(translation, BehindRetention):
            _hold(states, group, "behind_retention")
            _warn_once(
                self._behind,
                group,
                source_key,
                "committed offset below the source's log start: the records it would read "
                "next are gone from the source, so it is not translated",
                committed=self._seen[(group, source_key)].offset,
                log_start=translation.log_start,
            )

    def _still_waiting(self, group: str, source_key: Key, waiting: Waiting) -> None:
        waited_s = time.monotonic() - self._waiting.setdefault(
            (group, source_key), time.monotonic()
        )
        if waited_s >= self._settings.sync_waiting_warn_ms / 1000:
            _warn_once(
                self._waited,
                group,
                source_key,
                "the copy of the group's next record is not committed on the destination yet: "
                "not synced until it is (stage 2 behind or stopped?)",
                committed=self._seen[(group, source_key)].offset,
                waiting_for=waiting.source_offset,
                waited_s=round(waited_s, 1),
            )

    def _stop_waiting(self, group: str, source_key: Key) -> None:
        self._waiting.pop((group, source_key), None)
        if (group, source_key) in self._waited:
            self._waited.discard((group, source_key))
            log.info(
                "the group waits no more for replication",
                group=group,
                topic=source_key[0],
                partition=source_key[1],
            )

    def _apply(
        self, moves: dict[str, dict[Key, _Move]], states: dict[str, str]
    ) -> list[KafkaError]:
        """Commit ``moves`` on the target where that is safe; the commits the target refused."""
        target_states = self._clients.target_groups.states()
        idle = [group for group in moves if is_idle(target_states.get(group))]
        for group in moves.keys() - set(idle):
            self._skip_active(group, moves[group].values(), states)
        current = self._target_offsets(idle, target_states.keys(), moves)
        now = time.monotonic()
        commits: dict[str, dict[Key, int]] = {}
        refreshes: set[GroupPartition] = set()  # committed again as they are (RECOMMIT_AFTER_S)
        again: set[GroupPartition] = set()  # an unchanged translation the target no longer holds
        gone: set[GroupPartition] = set()  # of those, no offset there at all
        for group in idle:
            for destination_key, move in moves[group].items():
                key = (group, destination_key)
                offset = move.translated.destination_offset
                if destination_key in current[group].unknown:
                    # Never backwards needs the offset that is there: not known, not committed.
                    self._target_unknown(group, destination_key, states)
                    continue
                self._unknown.discard(key)
                there = current[group].offsets.get(destination_key)
                unchanged = self._committed.get(key) == offset
                if there is not None and there >= offset:
                    # Already there, or further (the group read on the target meanwhile, or an
                    # operator moved it): never backwards.
                    if there > offset and not unchanged:  # counted once, not at every look
                        self._metrics.not_moved_back.inc()
                    self._committed[key] = offset
                    self._confirmed_at[key] = now
                    committed_at = self._committed_at.setdefault(key, now)
                    if there == offset and now - committed_at >= self._recommit_after_s:
                        refreshes.add(key)
                        commits.setdefault(group, {})[destination_key] = offset
                    continue
                if unchanged:  # gone from the target, or moved back there by hand
                    again.add(key)
                    if there is None:
                        gone.add(key)
                commits.setdefault(group, {})[destination_key] = offset
        if gone:
            log.warning(
                "offsets committed on the target earlier are gone from it (deleted, or expired "
                "by the target's offsets.retention.minutes): committed again",
                groups=len({group for group, _ in gone}),
                partitions=len(gone),
            )
        failures = []
        moved = 0
        metadata = translated_metadata(self._cluster_id)
        for group, outcomes in self._clients.target_groups.commit(commits, metadata).items():
            committed = 0
            for destination_key, error in outcomes.items():
                move = moves[group][destination_key]
                if error is None and (group, destination_key) in refreshes:
                    # The same offset, its commit renewed: no move, no news for a checkpoint.
                    self._committed_at[(group, destination_key)] = now
                    self._metrics.offsets_recommitted.labels("renewed").inc()
                elif error is None:
                    committed += 1
                    if (group, destination_key) in gone:
                        self._metrics.offsets_recommitted.labels("gone").inc()
                    restored = (group, destination_key) in again
                    self._committed_one(group, destination_key, move, restored=restored)
                elif error.code() in GROUP_ACTIVE:
                    self._skip_active(group, [move], states)
                else:
                    # Not on the target: "synced" would say it is.
                    _hold(states, group, "commit_refused")
                    failures.append(error)
            if committed:
                log.debug("offsets committed on the target", group=group, partitions=committed)
            moved += committed
        if moved:
            log.info("offsets committed on the target", groups=len(commits), partitions=moved)
        # Deliveries that failed are counted now; the cycle's flush waits for the rest.
        self._checkpoints.serve_callbacks()
        return failures

    def _target_offsets(
        self, idle: list[str], listed: Collection[str], moves: dict[str, dict[Key, _Move]]
    ) -> dict[str, GroupOffsets]:
        """Where each idle group that moves is on the target, as far as the target told."""
        groups = self._clients.target_groups
        current = groups.committed(g for g in idle if g in listed)
        # Not listed is not "no offsets": a group whose coordinator loads or moves is left out
        # of a listing without an error. Asked apart (ClusterGroups.committed_unlisted), so that
        # a group without an answer is read another way rather than left unknown.
        current.update(
            groups.committed_unlisted({g: moves[g].keys() for g in idle if g not in listed})
        )
        for group in idle:
            if group not in current:  # listed, but its fetch failed this cycle
                current[group] = GroupOffsets({}, frozenset(moves[group]))
        return current

    def _target_unknown(self, group: str, destination_key: Key, states: dict[str, str]) -> None:
        self._metrics.target_unknown.inc()
        _hold(states, group, "target_unknown")
        _warn_once(
            self._unknown,
            group,
            destination_key,
            "the target did not tell where the group is on this partition: not committed "
            "this cycle (never over an offset we do not know); the next cycle asks again",
        )

    def _committed_one(
        self, group: str, destination_key: Key, move: _Move, *, restored: bool
    ) -> None:
        key = (group, destination_key)
        self._committed[key] = move.translated.destination_offset
        self._confirmed_at[key] = self._committed_at[key] = time.monotonic()
        self._metrics.offsets_committed.inc()
        if not restored:
            # A restored offset was seen long ago: its age is not the sync's lag.
            self._metrics.lag.observe(time.monotonic() - move.seen.monotonic)
        self._checkpoint(group, move, committed=True)

    def _skip_active(self, group: str, moves: Iterable[_Move], states: dict[str, str]) -> None:
        """Members on the target: not moved; the translation goes to the checkpoint topic."""
        states[group] = "active_on_target"
        for move in moves:
            destination_key = (move.request.destination_topic, move.request.partition)
            if (
                self._checkpointed.get((group, destination_key))
                != move.translated.destination_offset
            ):
                self._checkpoint(group, move, committed=False)

    def _checkpoint(self, group: str, move: _Move, *, committed: bool) -> None:
        request, translated = move.request, move.translated
        self._checkpointed[(group, (request.destination_topic, request.partition))] = (
            translated.destination_offset
        )
        self._checkpoints.write(
            Checkpoint(
                group=group,
                source_topic=request.source_topic,
                topic=request.destination_topic,
                partition=request.partition,
                source_offset=request.committed,
                offset=translated.destination_offset,
                exact=translated.exact,
                committed=committed,
                seen_ms=move.seen.wall_ms,
                written_ms=int(time.time() * 1000),
            )
        )
        self._metrics.checkpoints.labels(str(committed).lower()).inc()

    def close(self) -> None:
        self._clients.close()

    def _cycle_failed(self, reason: str) -> None:
        self._metrics.cycle_failures.inc()
        self._failed_in_a_row += 1
        log.warning(
            "sync cycle failed; nothing more committed, the next cycle retries",
            error=reason,
            failed_in_a_row=self._failed_in_a_row,
        )
        if self._failed_in_a_row % _RECONNECT_AFTER == 0:
            # A client that keeps failing after a broker restart may never recover by itself
            # (offsetsync.clients): make all of them anew.
            log.warning("making the Kafka clients anew", failed_in_a_row=self._failed_in_a_row)
            self._metrics.reconnects.inc()
            self._clients.close()
            self._clients = self._reconnect()


def _hold(states: dict[str, str], group: str, state: str) -> None:
    """A group not synced this cycle shows why, unless it is active on the target (which says
    more: its consumers run there, so nothing is committed for it at all)."""
    if states[group] != "active_on_target":
        states[group] = state


def _warn_once(
    warned: set[GroupPartition], group: str, key: Key, message: str, **fields: Any
) -> None:
    """One warning per group and partition while the condition lasts (the caller forgets the
    pair when it clears), not one per cycle."""
    if (group, key) not in warned:
        warned.add((group, key))
        log.warning(message, group=group, topic=key[0], partition=key[1], **fields)
