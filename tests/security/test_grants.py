"""The grants `flow_grants` expands and `exactly acls` prints, against snapshots of what they
were before the grants became a table (runtime/grants.py): the same grants, in the same
order, and the same lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from exactly.acls import flow_grants
from exactly.acls_command import acls
from runtime import load_settings

_HERE = Path(__file__).parent
_BASE_ENV = {
    "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "source:9092",
    "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "target:9092",
}
# Each case's settings, topics and groups, and the grants flow_grants gave for them at
# c2631c1 (role, cluster, resource, name, operations, why, prefixed), in its order, and since
# then offset sync's and the validator's reads of <staging>.meta (the topics stage 1 took in;
# where a flow from latest starts).
_SNAPSHOT: dict[str, Any] = json.loads((_HERE / "flow_grants_snapshot.json").read_text())


@pytest.mark.parametrize("case", sorted(_SNAPSHOT))
def test_flow_grants_are_the_ones_before_the_table_in_the_same_order(case: str) -> None:
    snapshot = _SNAPSHOT[case]
    settings = load_settings({**_BASE_ENV, **snapshot["env"]})
    grants = flow_grants(settings, snapshot["source_topics"], snapshot["groups"])
    assert [
        [g.role, g.cluster, g.resource, g.name, list(g.operations), g.why, g.prefixed]
        for g in grants
    ] == snapshot["grants"]


def test_exactly_acls_prints_the_lines_it_printed_before_the_table() -> None:
    env = {**_BASE_ENV, "REPLICATION_TOPICS_INCLUDE": "orders.*", "REPLICATION_FLOW": "dr"}
    named = ["--topic", "orders", "--topic", "orders.eu", "--group", "billing"]
    named += ["--principal", "deduplicator=User:CN=stage 2"]
    printed = ""
    for extra in ([], ["--commands"]):
        done = CliRunner().invoke(acls, [*named, *extra], env=env)
        assert done.exit_code == 0, done.output
        printed += done.output
    assert printed == (_HERE / "acls_output_snapshot.txt").read_text()
