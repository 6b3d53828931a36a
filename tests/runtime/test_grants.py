"""``needs``: what a role names when a broker refuses it, read from the table of grants
(runtime/grants.py), is what each loop's ``_needs`` named before it read the table."""

from __future__ import annotations

from collections.abc import Collection

import pytest
from confluent_kafka import KafkaError

from runtime.grants import (
    CHANGELOG,
    DEDUPLICATOR_GROUP,
    DESTINATION_TOPIC,
    GRANTS,
    OFFSETSYNC_READER_GROUP,
    REPLICATOR_GROUP,
    SERIES,
    SOURCE,
    SOURCE_TOPIC,
    STAGING,
    TARGET,
    TRANSACTIONAL_ID_PREFIX,
    name_of,
    needs,
)
from runtime.kafka_errors import refusal
from runtime.names import FlowNames

NAMES = FlowNames("dr")
TRANSACTIONAL_ID = NAMES.deduplicator_transactional_id("instance-1")


def _deduplicator_needs_before(
    written: Collection[str], changelog_topic: str, *, writing: bool
) -> dict[str, tuple[str, str]]:
    """deduplicator/loop.py's ``_needs`` at c2631c1, its fields as arguments."""
    topics = sorted(set(written) | {changelog_topic})
    topic = ("WRITE", " or ".join(topics)) if writing else ("READ", NAMES.staging)
    return {
        "TRANSACTIONAL_ID": ("WRITE", TRANSACTIONAL_ID),
        "GROUP": ("READ", NAMES.deduplicator_group),
        "TOPIC": topic,
    }


def _replicator_reads_before(topic: str | None) -> dict[str, tuple[str, str]]:
    """replicator/loop.py's ``_source_reads`` at c2631c1."""
    return {
        "GROUP": ("READ", NAMES.replicator_group),
        "TOPIC": ("READ", topic or "(a source topic)"),
    }


def _deduplicator_needs(written: Collection[str], *, writing: bool) -> dict[str, tuple[str, str]]:
    """The call deduplicator/loop.py's ``_needs`` is to make."""
    topic: dict[str, str | Collection[str]] = (
        {DESTINATION_TOPIC: written, CHANGELOG: NAMES.changelog}
        if writing
        else {STAGING: NAMES.staging}
    )
    return needs(
        "deduplicator",
        TARGET,
        {
            TRANSACTIONAL_ID_PREFIX: TRANSACTIONAL_ID,
            DEDUPLICATOR_GROUP: NAMES.deduplicator_group,
            **topic,
        },
    )


@pytest.mark.parametrize("writing", [True, False])
@pytest.mark.parametrize("written", [set(), {"orders"}, {"payments", "orders", "a.orders"}])
def test_the_deduplicator_needs_what_its_loop_named(written: set[str], writing: bool) -> None:
    wanted = _deduplicator_needs(written, writing=writing)
    before = _deduplicator_needs_before(written, NAMES.changelog, writing=writing)
    assert list(wanted.items()) == list(before.items())  # the same, in the same order


@pytest.mark.parametrize("topic", [None, "orders"])
def test_the_replicator_needs_what_its_loop_named(topic: str | None) -> None:
    wanted = needs(
        "replicator",
        SOURCE,
        {REPLICATOR_GROUP: NAMES.replicator_group, SOURCE_TOPIC: topic or "(a source topic)"},
    )
    assert list(wanted.items()) == list(_replicator_reads_before(topic).items())


def test_a_refusal_names_what_the_table_says() -> None:
    wanted = _deduplicator_needs({"orders"}, writing=True)
    error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied")
    refused = refusal(error, TARGET, wanted)
    assert refused is not None
    assert "WRITE on TOPIC" in str(refused)
    assert f"{NAMES.changelog} or orders" in str(refused)


def test_a_kind_the_role_is_not_granted_is_refused_here() -> None:
    with pytest.raises(KeyError, match="deduplicator on the source"):
        needs("deduplicator", SOURCE, {STAGING: NAMES.staging})
    with pytest.raises(ValueError, match="WRITE and READ on TOPIC"):
        needs("deduplicator", TARGET, {CHANGELOG: NAMES.changelog, STAGING: NAMES.staging})


def test_each_role_has_one_row_of_a_kind_on_a_cluster_and_each_kind_a_name() -> None:
    keys = [(row.role, cluster, row.kind) for row in GRANTS for cluster in row.clusters]
    assert len(keys) == len(set(keys))  # needs reads the first
    for row in GRANTS:
        if row.kind not in SERIES:
            assert name_of(row.kind, NAMES)


def test_a_row_on_both_clusters_is_read_on_either_its_first_operation_without_read_or_write() -> (
    None
):
    for cluster in (SOURCE, TARGET):
        wanted = needs("offsetsync", cluster, {OFFSETSYNC_READER_GROUP: "a-group"})
        assert wanted == {"GROUP": ("DESCRIBE", "a-group")}
