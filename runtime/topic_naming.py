"""Topic naming: the destination name of each replicated topic, and the collision policy.

A source topic's destination name comes from the settings (the seed's one topic, the rename,
the template); two topics given one name, or one given a name of the flow's own topics
(runtime/names.py) or a name starting with __, is a DestinationCollisionError.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from runtime.errors import DestinationCollisionError
from runtime.settings_variables import variable_of
from runtime.values import TOPIC_PLACEHOLDER, check_topic_name, matches_any

if TYPE_CHECKING:
    from runtime.settings import Settings


def destination_topic(settings: Settings, source_topic: str) -> str | None:
    """The destination name of ``source_topic``, or None when it is not replicated.

    The exclude list wins; then the seed's one topic (renamed by
    KAFKA_CLUSTERS_DESTINATION_TOPIC) or the include list (renamed by
    REPLICATION_TOPICS_RENAME_PATTERN when it matches, then named by
    REPLICATION_DESTINATION_TOPIC; the same name by default). ValueError when that makes
    no valid topic name. Whether two topics' names collide: ``destination_names``.
    """
    if matches_any(settings.topics_exclude, source_topic):
        return None
    if settings.source.topic is not None:
        if source_topic != settings.source.topic:
            return None
        return settings.destination.topic or source_topic
    if source_topic.startswith("__") or not matches_any(settings.topics_include, source_topic):
        return None
    renamed = _renamed(settings, source_topic)
    destination = settings.topic_template.replace(TOPIC_PLACEHOLDER, renamed)
    # A long source name can make the templated one too long: say so, never truncate.
    return check_topic_name(destination)


def _renamed(settings: Settings, source_topic: str) -> str:
    """``source_topic`` renamed by REPLICATION_TOPICS_RENAME_PATTERN, or as it is."""
    if settings.rename_pattern is None or settings.rename_replacement is None:
        return source_topic
    match = settings.rename_pattern.fullmatch(source_topic)
    if match is None:
        return source_topic
    renamed = match.expand(settings.rename_replacement)
    try:
        return check_topic_name(renamed)
    except ValueError as exc:
        raise ValueError(
            f"{variable_of(type(settings), ('rename_pattern',))} renames {source_topic} "
            f"to an invalid name: {exc}"
        ) from None


def destination_names(
    settings: Settings,
    source_topics: Iterable[str],
    *,
    invalid: Callable[[str, ValueError], None] | None = None,
    established: Collection[str] = (),
    left_out: Callable[[str, DestinationCollisionError], None] | None = None,
) -> dict[str, str]:
    """The destination name of each of ``source_topics`` the settings replicate, by source
    name, in the order given.

    DestinationCollisionError (one line naming the source topics and the destination) when two
    of them get one destination name, or one gets a name of the flow's own topics
    (runtime/names.py) or one starting with __ (Kafka's internal topics): stage 2 would mix
    records of two topics in one, or write into what is not a copy. A name that is not a valid
    topic name raises ValueError, or goes to ``invalid`` (the topic left out) when given.

    With ``left_out`` (stage 1 at work), a colliding topic that is not ``established`` (already
    replicated) is left out and given to ``left_out`` instead: a topic created later under a
    clashing name cannot take the destination, nor stop the copying, of the one there first.
    Two newcomers that clash are both left out (neither has a claim); only a collision of two
    established topics (the naming settings changed under them) still raises.
    """
    names: dict[str, str] = {}
    for topic in dict.fromkeys(source_topics):
        try:
            destination = settings.destination_topic(topic)
        except ValueError as exc:
            if invalid is None:
                raise
            invalid(topic, exc)
            continue
        if destination is not None:
            names[topic] = destination
    kept = _without_collisions(settings, names, set(established), left_out)
    return {source: destination for source, destination in names.items() if source in kept}


def _without_collisions(
    settings: Settings,
    names: Mapping[str, str],
    established: set[str],
    left_out: Callable[[str, DestinationCollisionError], None] | None,
) -> set[str]:
    """The sources of ``names`` that keep their destination (``destination_names``)."""
    own = {name: what for what, name in settings.names.topics.items()}
    claimed: dict[str, str] = {}  # destination -> the source that has it
    kept: set[str] = set()
    # The established claim their names first, whatever the order of the names.
    for source in sorted(names, key=lambda source: source not in established):
        destination = names[source]
        error = _collision(settings, own, claimed.get(destination), source, destination)
        if error is None:
            claimed[destination] = source
            kept.add(source)
            continue
        if left_out is None or source in established:
            raise error
        left_out(source, error)
        other = claimed.get(destination)
        if other is not None and other not in established and other in kept:
            kept.discard(other)
            left_out(other, error)
    return kept


def _collision(
    settings: Settings, own: Mapping[str, str], other: str | None, source: str, destination: str
) -> DestinationCollisionError | None:
    """Why ``source`` may not be copied to ``destination`` (``other`` has it already), if so."""
    if destination in own:
        return DestinationCollisionError(
            _naming_variable(settings, [source], own[destination]),
            f"source topic {source} would be copied to {destination}, the flow's own "
            f"{own[destination]} topic: give it another destination name",
        )
    if destination.startswith("__"):
        return DestinationCollisionError(
            _naming_variable(settings, [source]),
            f"source topic {source} would be copied to {destination}: names starting with "
            "__ are Kafka's internal topics and the flows'",
        )
    if other is not None and other != source:
        first, second = sorted((other, source))
        return DestinationCollisionError(
            _naming_variable(settings, [first, second]),
            f"source topics {first} and {second} would both be copied to {destination}: "
            "one destination topic per source topic (rename them apart, or leave one out "
            f"with {variable_of(type(settings), ('topics_exclude',))})",
        )
    return None


def _naming_variable(settings: Settings, sources: list[str], flow_topic: str = "") -> str:
    """The variable that gave ``sources`` their destination name (``flow_topic``: the flow's
    topic it collides with)."""
    if settings.source.topic is not None:
        return variable_of(type(settings), ("destination", "topic"))
    pattern = settings.rename_pattern
    if pattern is not None and any(pattern.fullmatch(source) for source in sources):
        return variable_of(type(settings), ("rename_pattern",))
    if settings.topic_template != TOPIC_PLACEHOLDER:
        return variable_of(type(settings), ("topic_template",))
    if flow_topic in ("staging", "meta") and settings.staging_topic is not None:
        return variable_of(type(settings), ("staging_topic",))
    return variable_of(type(settings), ("topics_include",))
