"""The report's longest stall and what it began under, from made-up samples and timelines, and
what makes a run clean."""

from __future__ import annotations

from exactly.chaos.options import GROUPS, ChaosOutcome
from exactly.chaos.report import AFTERMATH_S, Stall, longest_stall, stall_causes
from exactly.harness.audit import AuditResult
from exactly.harness.failover import FailoverResult
from exactly.harness.verdict import PartitionVerdict, Verdict


def _samples(flat: range, end: int = 60) -> list[dict[str, float]]:
    """One a second; the destination gains 100 a second, except in ``flat``; the source is
    always ahead."""
    samples, destination = [], 0
    for t in range(end + 1):
        if t not in flat:
            destination += 100
        samples.append({"t": float(t), "committed": 1_000_000.0, "destination": destination})
    return samples


def test_the_longest_stall_is_the_longest_flat_stretch_while_behind():
    samples = _samples(range(21, 46))
    samples[5:9] = [{**s, "destination": samples[4]["destination"]} for s in samples[5:9]]
    assert longest_stall(samples) == Stall(20.0, 45.0)
    assert longest_stall(samples).seconds == 25.0  # type: ignore[union-attr]


def test_a_destination_that_has_caught_up_is_not_stalled():
    caught_up = [{"t": float(t), "committed": 500.0, "destination": 500.0} for t in range(30)]
    assert longest_stall(caught_up) is None
    assert longest_stall([]) is None


TIMELINE = [
    # Long over when the stall began: not named.
    {"kind": "kill", "target": "replicator", "variant": "", "began_s": 2.0, "ended_s": 4.0},
    # Ended 8 s before it began: named as just ended.
    {
        "kind": "network",
        "target": "deduplicator-1@target",
        "variant": "latency",
        "began_s": 6.0,
        "ended_s": 12.0,
    },
    # Active when it began.
    {
        "kind": "broker",
        "target": "target",
        "variant": "",
        "began_s": 19.5,
        "ended_s": 29.0,
        "node": 2,
        "hit": "node 2",
    },
    # Began within a sample of its last gain: the halt came somewhere in that second.
    {"kind": "pause", "target": "deduplicator-1", "variant": "", "began_s": 20.8, "ended_s": 32.0},
    # Skipped: never happened.
    {"kind": "network", "target": "offsetsync@source", "began_s": 20.0, "skipped": "healing"},
    # Began during it.
    {"kind": "kill", "target": "offsetsync", "variant": "", "began_s": 30.0, "ended_s": 31.0},
    {"kind": "wipe", "target": "deduplicator-2", "variant": "", "began_s": 40.0, "ended_s": 41.0},
    {"kind": "kill", "target": "offsetsync", "variant": "", "began_s": 42.0, "ended_s": 43.0},
    # After it: not named.
    {"kind": "kill", "target": "replicator", "variant": "", "began_s": 50.0, "ended_s": 51.0},
]
ROLES = {
    "replicator": {"unexpected_exits": [{"t": 3.0, "status": 1}]},
    "deduplicator-2": {"unexpected_exits": [{"t": 25.0, "status": 1}]},
    "offsetsync": {"unexpected_exits": []},
}


def test_the_stall_names_the_faults_it_began_under():
    causes = stall_causes(Stall(20.0, 45.0), TIMELINE, ROLES)
    assert [f["fault"] for f in causes["active_when_it_began"]] == [
        "broker target (node 2)",
        "pause deduplicator-1",
    ]
    assert causes["active_when_it_began"][0]["hit"] == "node 2"
    assert [f["fault"] for f in causes["ended_just_before"]] == [
        "network latency deduplicator-1@target"
    ]
    assert causes["role_exits"] == [{"role": "deduplicator-2", "t": 25.0, "status": 1}]
    assert causes["faults_during"] == 3
    assert causes["faults_during_by_target"] == {"offsetsync": 2, "deduplicator-2": 1}
    assert (causes["began_s"], causes["ended_s"], causes["seconds"]) == (20.0, 45.0, 25.0)
    assert causes["cause"] == (
        "longest stall 25.0 s, from 20.0 s to 45.0 s: "
        "active when it began: broker target (node 2) [19.5-29.0 s], "
        "pause deduplicator-1 [20.8-32.0 s]; "
        "ended just before: network latency deduplicator-1@target (8.0 s before); "
        "roles exited by themselves: deduplicator-2 at 25.0 s (exit 1); "
        "3 more faults began during it (offsetsync 2, deduplicator-2 1)"
    )


def test_a_fault_still_active_when_the_run_failed_counts_as_active():
    never_ended = [{"kind": "broker", "target": "source", "began_s": 5.0, "node": 3}]
    causes = stall_causes(Stall(20.0, 30.0), never_ended, {})
    assert causes["active_when_it_began"] == [
        {"fault": "broker source (node 3)", "began_s": 5.0, "ended_s": None}
    ]
    assert "broker source (node 3) [5.0-? s]" in causes["cause"]


def test_a_stall_with_no_fault_near_its_start_says_so():
    causes = stall_causes(Stall(100.0, 130.0), TIMELINE, ROLES)
    assert causes["active_when_it_began"] == causes["ended_just_before"] == []
    assert causes["role_exits"] == []
    assert causes["cause"] == (
        "longest stall 30.0 s, from 100.0 s to 130.0 s: no fault active when it began, none "
        f"ended in the {AFTERMATH_S:.0f} s before"
    )


def test_a_link_left_unhealed_makes_the_run_unclean(tmp_path):
    """Every verdict clean, but one network link's toxics never came off: not clean."""
    outcome = ChaosOutcome(
        verdict=Verdict([PartitionVerdict("orders", 0, source=100, destination=100, matched=100)]),
        failovers={group: FailoverResult(12, 100, 50, 0, 0, True) for group in GROUPS},
        drained={"replicator": 0, "deduplicator": 0},
        audit=AuditResult(0, 1.0, tmp_path / "report.json", tmp_path / "audit.log"),
    )
    assert outcome.clean
    outcome.unhealed = {"deduplicator-2@net": "toxiproxy refused: connection reset"}
    assert not outcome.clean
