"""The chaos run can fail: with the dedup rule or stage 1's commit order broken on purpose (a
mutant loaded into every role through `sitecustomize`), the same run that is clean with the real
code ends NOT CLEAN, and its verdict names what the mutant broke."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.chaos.test_chaos_run import TWO_MINUTE_RUN
from tests.commands import run_exactly

# Stage 2 writes a duplicate again instead of dropping it (invariant 4 broken).
DEDUP_RULE_MUTANT = """
import dataclasses
import deduplicator.rule as rule

_judge = rule.judge


def judge(state, envelope):
    verdict = _judge(state, envelope)
    if verdict.duplicates and not verdict.orphan and not verdict.stale:
        return dataclasses.replace(verdict, accepted=tuple(envelope.rows), duplicates=0)
    return verdict


rule.judge = judge
"""

# Stage 1 commits a source offset when its envelope is sent, not when staging acknowledged it
# (invariant 3 broken): records in flight when the target broker dies are committed, then lost.
COMMIT_ORDER_MUTANT = """
import replicator.lanes as lanes

_sent = lanes.Lane.sent


def sent(self, last_record, covers, now):
    self.committable = max(self.committable, covers + 1)
    return _sent(self, last_record, covers, now)


lanes.Lane.sent = sent
"""


@pytest.mark.chaos
@pytest.mark.kafka
@pytest.mark.parametrize(
    ("mutant", "finding"),
    [
        pytest.param(DEDUP_RULE_MUTANT, "duplicated", id="dedup-rule"),
        pytest.param(COMMIT_ORDER_MUTANT, "missing", id="commit-order"),
    ],
)
def test_a_broken_invariant_makes_the_chaos_run_fail(tmp_path: Path, mutant: str, finding: str):
    mutant_dir = tmp_path / "mutant"
    mutant_dir.mkdir()
    (mutant_dir / "sitecustomize.py").write_text(mutant)
    report_dir = tmp_path / "report"
    env = {
        **os.environ,
        "LOCALKAFKA_STATE_DIR": str(tmp_path / "state"),
        "PYTHONPATH": str(mutant_dir),
    }
    # The very run `make test` requires to be clean: its plan kills the replicator while the
    # target broker is down and envelopes wait for it; the dedup rule meets stage 1's re-reads
    # after every replicator kill.
    result = run_exactly(
        "chaos", *TWO_MINUTE_RUN, *("--report", str(report_dir)), env=env, timeout_s=900
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "CHAOS RUN NOT CLEAN" in output
    report = json.loads((report_dir / "chaos-report.json").read_text())
    timeline = report["fault_timeline"]

    def faults(kind: str, target: str) -> list[dict[str, float]]:
        return [f for f in timeline if (f["kind"], f["target"]) == (kind, target)]

    # The scenario the seed was chosen for: the replicator killed while the target is down.
    assert any(
        down["began_s"] < kill["began_s"] < down["ended_s"]
        for down in faults("broker", "target")
        for kill in faults("kill", "replicator")
    ), timeline
    assert report["clean"] is False
    assert report["verdict"][finding] > 0, report["verdict"]
