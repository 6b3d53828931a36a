"""The settings' cross-field checks: what no single variable can say is wrong on its own.

Each check raises ConfigError naming the variable to change; ``Settings``' validators call them
once every field is parsed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from runtime.errors import ConfigError
from runtime.settings_variables import render, variable_of
from runtime.values import FLOW_NAME_MAX

if TYPE_CHECKING:
    from runtime.settings import Settings


def check_one_way_to_pick_topics(settings: Settings) -> None:
    """The seed's one topic, or the include list: never both."""
    source_topic, destination_topic, include = (
        variable_of(type(settings), path)
        for path in (("source", "topic"), ("destination", "topic"), ("topics_include",))
    )
    if settings.destination.topic is not None and settings.source.topic is None:
        raise ConfigError(
            destination_topic,
            f"is set but {source_topic} is not: it names the copy of that one topic",
            settings.destination.topic,
        )
    if settings.source.topic is not None and settings.topics_include:
        raise ConfigError(
            include,
            f"cannot be combined with {source_topic}: use {source_topic} (and "
            f"{destination_topic}) for one topic, or {include} for many",
            render(settings.topics_include),
        )


def check_rename_is_whole(settings: Settings) -> None:
    """The rename's pattern and replacement together, not with the one topic, groups that exist."""
    pattern, replacement, source_topic, destination_topic = (
        variable_of(type(settings), path)
        for path in (
            ("rename_pattern",),
            ("rename_replacement",),
            ("source", "topic"),
            ("destination", "topic"),
        )
    )
    if settings.rename_pattern is None:
        if settings.rename_replacement is not None:
            raise ConfigError(
                replacement,
                f"is set but {pattern} is not: the two make the rename together",
                settings.rename_replacement,
            )
        return
    if settings.rename_replacement is None:
        raise ConfigError(
            pattern,
            f"is set but {replacement} is not: the two make the rename together",
            settings.rename_pattern.pattern,
        )
    if settings.source.topic is not None:
        raise ConfigError(
            pattern,
            f"cannot be combined with {source_topic}: the one topic's destination name is "
            f"{destination_topic}",
            settings.rename_pattern.pattern,
        )
    _check_replacement(settings.rename_pattern, settings.rename_replacement, pattern, replacement)


def _check_replacement(
    rename_pattern: re.Pattern[str], rename_replacement: str, pattern: str, replacement: str
) -> None:
    """ConfigError naming ``replacement`` when it is not one for ``rename_pattern``."""
    try:
        # Parses the replacement against the pattern's groups, even without a match.
        rename_pattern.sub(rename_replacement, "")
    except IndexError as exc:  # \g<name> of a group the pattern does not have
        raise ConfigError(
            replacement,
            f"refers to a group that {pattern} does not have: {exc}",
            rename_replacement,
        ) from None
    except re.error as exc:
        what = (
            f"refers to a group that {pattern} does not have"
            if "invalid group reference" in str(exc) or "unknown group name" in str(exc)
            else "is not a valid replacement"
        )
        raise ConfigError(replacement, f"{what}: {exc}", rename_replacement) from None


def check_commit_floor(settings: Settings) -> None:
    """Stage 2's commit floor is not above its commit interval."""
    # While records flow, the interval commits first: a floor above it would never hold, and
    # the bound on transactions it promises would be false.
    if settings.commit_min_interval_ms > settings.commit_interval_ms:
        floor, interval = (
            variable_of(type(settings), (name,))
            for name in ("commit_min_interval_ms", "commit_interval_ms")
        )
        raise ConfigError(
            floor,
            f"is above {interval}={settings.commit_interval_ms}: raise that as well",
            str(settings.commit_min_interval_ms),
        )


def check_room_for_workers(settings: Settings) -> None:
    """Every worker's name <identity>-<n> fits."""
    # Each worker is named <identity>-<n>: checked here, where the user's variable can be
    # named, rather than in a child that would reject a name the user never wrote.
    if settings.workers > 1 and settings.instance_id is not None:
        longest = f"{settings.instance_id}-{settings.workers}"
        if len(longest) > FLOW_NAME_MAX:
            instance_id, workers = (
                variable_of(type(settings), (name,)) for name in ("instance_id", "workers")
            )
            raise ConfigError(
                instance_id,
                f"is too long for {workers}={settings.workers}: its workers are "
                f"named <id>-<n> ({longest[:20]}...), at most {FLOW_NAME_MAX} characters",
                settings.instance_id,
            )
