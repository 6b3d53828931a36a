"""The fault plan: every kind, no target hit twice at once, healed before the window closes,
the same seed gives the same plan, and the default count fits any window."""

import dataclasses

import pytest

from exactly.chaos.errors import ChaosError
from exactly.chaos.plan import (
    MAX_OVERLAPPING,
    REQUEST_TIMEOUT_S,
    SESSION_TIMEOUT_S,
    Kind,
    Targets,
    default_fault_count,
    plan_faults,
)

ROLES = ("replicator", "deduplicator-1", "deduplicator-2", "offsetsync")
TARGETS = Targets(
    roles=ROLES,
    deduplicators=("deduplicator-1", "deduplicator-2"),
    clusters=("source", "target"),
    links=tuple(f"{role}@{cluster}" for role in ROLES for cluster in ("source", "target")),
)
THREE_NODES = dataclasses.replace(TARGETS, nodes=3)


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


def test_a_window_of_hours_is_planned_in_a_moment():
    """Each placement looks only at the faults near it (looking at all of them, these 7 200
    took 88 s here)."""
    hours = 6 * 60 * 60.0
    faults = plan_faults(3, hours, default_fault_count(hours), TARGETS, fit=True)
    assert len(faults) == 7_200


def test_the_default_count_is_200_for_ten_minutes_and_the_same_plan_as_asking_for_200():
    assert default_fault_count(600.0) == 200
    for seed in range(5):
        default = plan_faults(seed, 600.0, default_fault_count(600.0), TARGETS, fit=True)
        assert default == plan_faults(seed, 600.0, 200, TARGETS)


@pytest.mark.parametrize("targets", [TARGETS, THREE_NODES], ids=["one-node", "three-nodes"])
@pytest.mark.parametrize("minutes", [1, 1.5, 2, 3, 5, 7, 10, 30])
def test_the_default_count_fits_any_window(minutes, targets):
    """`exactly chaos --minutes 3` asked for 200 faults and exited 2 ("92 faults do not fit in
    180 s"); the default now scales with the window and keeps what fits."""
    window = minutes * 60.0
    wanted = default_fault_count(window)
    assert wanted == max(len(Kind), int(window // 3))
    for seed in range(40 if minutes <= 10 else 4):
        faults = plan_faults(seed, window, wanted, targets, fit=True)
        assert {fault.kind for fault in faults} == set(Kind)
        assert 0.8 * wanted <= len(faults) <= wanted
        assert all(fault.ends_s <= window for fault in faults)
        for i, fault in enumerate(faults):
            assert all(o.at_s >= fault.ends_s for o in faults[i + 1 :] if o.target == fault.target)
    if minutes >= 2:  # the three minutes: every one of the 60 fits
        assert len(plan_faults(0, window, wanted, targets, fit=True)) == wanted


def test_an_explicit_count_that_does_not_fit_is_refused_and_the_default_keeps_what_fits():
    with pytest.raises(ChaosError, match="faults do not fit in 180 s"):
        plan_faults(0, 180.0, 150, TARGETS)
    kept = plan_faults(0, 180.0, 150, TARGETS, fit=True)
    assert 60 < len(kept) < 150
    assert {fault.kind for fault in kept} == set(Kind)


def test_a_broker_fault_on_three_nodes_picks_one_node_by_the_seed():
    faults = plan_faults(4, 600.0, 200, THREE_NODES)
    nodes = [f for f in faults if f.kind in (Kind.BROKER, Kind.CONTROLLER)]
    assert {f.node for f in nodes} == {1, 2, 3}
    # A controller on three nodes is a broker too: its successor waits out the fence (7 s).
    assert all(f.hold_s >= 7.5 for f in nodes)
    # One node fault per cluster at a time, as on one broker.
    for i, fault in enumerate(nodes):
        assert all(o.at_s >= fault.ends_s for o in nodes[i + 1 :] if o.target == fault.target)
    assert plan_faults(4, 600.0, 200, THREE_NODES) == faults
    # One broker: no node to pick, and the plan is what it was before nodes existed.
    assert {f.node for f in plan_faults(4, 600.0, 200, TARGETS)} == {0}
