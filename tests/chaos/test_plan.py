"""The fault plan: every kind, no target hit twice at once, healed before the window closes,
and the same seed gives the same plan."""

import pytest

from exactly.chaos.errors import ChaosError
from exactly.chaos.plan import (
    MAX_OVERLAPPING,
    REQUEST_TIMEOUT_S,
    SESSION_TIMEOUT_S,
    Kind,
    Targets,
    plan_faults,
)

ROLES = ("replicator", "deduplicator-1", "deduplicator-2", "offsetsync")
TARGETS = Targets(
    roles=ROLES,
    deduplicators=("deduplicator-1", "deduplicator-2"),
    clusters=("source", "target"),
    links=tuple(f"{role}@{cluster}" for role in ROLES for cluster in ("source", "target")),
)


@pytest.mark.parametrize("seed", range(20))
def test_a_ten_minute_plan_of_200_faults_keeps_its_rules(seed):
    faults = plan_faults(seed, 600.0, 200, TARGETS)
    assert len(faults) == 200
    assert {fault.kind for fault in faults} == set(Kind)
    assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
    for fault in faults:
        assert fault.at_s >= 0
        assert fault.ends_s <= 600.0
        assert fault.target in TARGETS.of(fault.kind)
        if fault.kind is Kind.PAUSE:
            assert fault.hold_s > SESSION_TIMEOUT_S  # long enough to wake a zombie
        if fault.kind is Kind.NETWORK:
            assert fault.variant in ("latency", "bandwidth", "reset", "blackhole")
        else:
            assert fault.variant == ""
        if fault.variant == "blackhole":
            assert fault.hold_s > REQUEST_TIMEOUT_S  # requests time out on open connections
    for i, fault in enumerate(faults):
        same_target = [o for o in faults[i + 1 :] if o.target == fault.target]
        assert all(o.at_s >= fault.ends_s for o in same_target), fault

    # Several faults overlap, but never more than the cap.
    def active(t):
        return sum(f.at_s <= t < f.ends_s for f in faults)

    assert {f.variant for f in faults if f.kind is Kind.NETWORK} == {
        "latency",
        "bandwidth",
        "reset",
        "blackhole",
    }
    # A cluster outage (the local clusters have one broker) is rarer than a role's fault, but
    # each cluster loses its broker several times.
    outages = [f for f in faults if f.kind in (Kind.BROKER, Kind.CONTROLLER)]
    assert len(outages) <= 0.3 * len(faults)
    for cluster in TARGETS.clusters:
        assert sum(f.kind is Kind.BROKER and f.target == cluster for f in faults) >= 3
    peaks = [active(f.at_s) for f in faults]
    assert max(peaks) >= 2
    assert max(peaks) <= MAX_OVERLAPPING


def test_the_same_seed_gives_the_same_plan_and_another_seed_another():
    assert plan_faults(7, 120.0, 30, TARGETS) == plan_faults(7, 120.0, 30, TARGETS)
    assert plan_faults(7, 120.0, 30, TARGETS) != plan_faults(8, 120.0, 30, TARGETS)


def test_too_many_faults_for_the_window_is_an_error_that_says_so():
    with pytest.raises(ChaosError, match="do not fit in 30 s"):
        plan_faults(1, 30.0, 200, TARGETS)
    with pytest.raises(ChaosError, match="one of each kind"):
        plan_faults(1, 600.0, 3, TARGETS)
