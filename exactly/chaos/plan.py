"""The faults of one chaos run, drawn from a seed before the run starts.

A fault has a start, a target and a hold: a role instance SIGKILLed and restarted after the
hold, frozen (SIGSTOP) for the hold and woken, or restarted on an empty state directory; a
cluster's broker or controller SIGKILLed and started again after the hold; the network between
one role instance and one cluster slowed, throttled, reset or cut (chaos/network.py). Faults
overlap in time, never on one target: one thing cannot be killed while it is frozen, and a
cluster has one fault at a time (its broker or its controller). Every fault ends before the
fault window does, so that the run can drain and judge a healed system. The same seed gives the
same plan, so a failing run can be run again as it was.
"""

from __future__ import annotations

import enum
import random
from collections import Counter
from dataclasses import dataclass

from exactly.chaos.errors import ChaosError

# What a frozen role must outlast to become a zombie: the chaos roles' consumer session
# timeout (chaos/run.py sets it) and stage 2's transaction timeout (deduplicator/loop.py).
SESSION_TIMEOUT_S = 6.0
TRANSACTION_TIMEOUT_S = 60.0
# The clients' request timeout (librdkafka's default): a black hole must outlast it, so that
# requests time out on an open connection rather than fail on a closed one.
REQUEST_TIMEOUT_S = 30.0
# At most this many faults at once: more and nothing would move between them.
MAX_OVERLAPPING = 5
_ATTEMPTS = 500


class Kind(enum.StrEnum):
    KILL = "kill"  # SIGKILL a role instance; restarted after the hold
    PAUSE = "pause"  # SIGSTOP a role instance past its session timeout; SIGCONT after the hold
    WIPE = "wipe"  # SIGKILL a deduplicator, delete its state directory, restart after the hold
    BROKER = "broker"  # SIGKILL a cluster's broker; started again after the hold
    CONTROLLER = "controller"  # SIGKILL a cluster's controller; started again after the hold
    NETWORK = "network"  # a toxic between a role instance and a cluster; removed after the hold


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float  # from the start of the fault window
    kind: Kind
    target: str  # a role instance (replicator, deduplicator-1, ...), a cluster (source,
    # target), or for NETWORK a link between them (replicator@source)
    hold_s: float
    variant: str = ""  # NETWORK: latency, bandwidth, reset or blackhole

    @property
    def name(self) -> str:
        """How the fault is shown: "network blackhole replicator@target", "kill offsetsync"."""
        return " ".join(part for part in (self.kind.value, self.variant, self.target) if part)

    @property
    def ends_s(self) -> float:
        return self.at_s + self.hold_s

    @property
    def resource(self) -> str:
        """What the fault occupies: a cluster is one resource, broker and controller alike."""
        return self.target


# How often each kind is drawn once every kind has one fault. A broker or controller kill takes
# a whole local cluster away (one broker each, where production has three and a leader moves)
# for its hold plus a JVM start: drawn as often as the role faults, they kept each cluster down
# most of a run (36 broker and 42 controller kills in 10 minutes; the source took 300 625
# records in it at 2 000 a second). About one fault in ten of each kind here.
_WEIGHTS = {
    Kind.KILL: 3,
    Kind.PAUSE: 2,
    Kind.WIPE: 1,
    Kind.BROKER: 1,
    Kind.CONTROLLER: 1,
    Kind.NETWORK: 3,
}


@dataclass(frozen=True, slots=True)
class Targets:
    roles: tuple[str, ...]  # every role instance
    deduplicators: tuple[str, ...]  # those of them with a state directory
    clusters: tuple[str, ...]
    links: tuple[str, ...]  # every (role instance, cluster) path, as chaos/network.py names it

    def of(self, kind: Kind) -> tuple[str, ...]:
        if kind is Kind.WIPE:
            return self.deduplicators
        if kind in (Kind.BROKER, Kind.CONTROLLER):
            return self.clusters
        if kind is Kind.NETWORK:
            return self.links
        return self.roles


def plan_faults(seed: int, window_s: float, count: int, targets: Targets) -> list[Fault]:
    """``count`` faults in ``window_s`` seconds, every kind at least once, ordered by start.

    Raises ChaosError when they do not fit (too many for the window).
    """
    if count < len(Kind):
        raise ChaosError(f"--faults {count}: at least {len(Kind)}, one of each kind")
    rng = random.Random(seed)
    drawn = rng.choices(list(_WEIGHTS), weights=list(_WEIGHTS.values()), k=count - len(Kind))
    kinds = list(Kind) + drawn
    rng.shuffle(kinds)
    faults: list[Fault] = []
    for kind in kinds:
        faults.append(_place(rng, kind, window_s, targets, faults))
    return sorted(faults, key=lambda fault: fault.at_s)


def count_by_kind(faults: list[Fault]) -> dict[str, int]:
    counts = Counter(fault.kind.value for fault in faults)
    return {kind.value: counts.get(kind.value, 0) for kind in Kind}


def _place(
    rng: random.Random, kind: Kind, window_s: float, targets: Targets, placed: list[Fault]
) -> Fault:
    for _ in range(_ATTEMPTS):
        variant = _variant(rng, window_s) if kind is Kind.NETWORK else ""
        hold = _hold(rng, kind, window_s, variant)
        if hold >= window_s:
            continue
        at_s = rng.uniform(0.0, window_s - hold)
        fault = Fault(at_s, kind, rng.choice(targets.of(kind)), hold, variant)
        if _fits(fault, placed):
            return fault
    raise ChaosError(
        f"{len(placed) + 1} faults do not fit in {window_s:.0f} s (one target has one fault at "
        f"a time, at most {MAX_OVERLAPPING} at once): ask for fewer faults or more minutes"
    )


def _variant(rng: random.Random, window_s: float) -> str:
    # A black hole outlasts the request timeout; a window too short to hold one beside the
    # other faults gets the other three only.
    variants = ["latency", "bandwidth", "reset"]
    if window_s >= 3 * (REQUEST_TIMEOUT_S + 10.0):
        variants.append("blackhole")
    return rng.choice(variants)


def _hold(rng: random.Random, kind: Kind, window_s: float, variant: str = "") -> float:
    if variant == "blackhole":
        return rng.uniform(REQUEST_TIMEOUT_S + 1.0, REQUEST_TIMEOUT_S + 6.0)
    if kind is Kind.NETWORK:
        return rng.uniform(3.0, 10.0)
    if kind is Kind.PAUSE:
        # Past the session timeout, so the group moves on and the frozen one wakes a zombie;
        # in long runs some past the transaction timeout too, so the broker aborts for it.
        if window_s >= 5 * TRANSACTION_TIMEOUT_S and rng.random() < 0.25:
            return rng.uniform(TRANSACTION_TIMEOUT_S + 5.0, TRANSACTION_TIMEOUT_S + 20.0)
        return rng.uniform(SESSION_TIMEOUT_S + 2.0, SESSION_TIMEOUT_S + 8.0)
    if kind is Kind.BROKER:
        # Past the 7 s in which localkafka holds back a crashed broker's successor (until the
        # controller has fenced the dead one): a shorter hold would stall the fault loop.
        return rng.uniform(7.5, 12.0)
    if kind is Kind.CONTROLLER:
        return rng.uniform(2.0, 10.0)
    return rng.uniform(0.2, 5.0)


def _fits(fault: Fault, placed: list[Fault]) -> bool:
    def overlaps(other: Fault) -> bool:
        # A second of slack: a restarted process is given a moment before the next fault.
        return fault.at_s < other.ends_s + 1.0 and other.at_s < fault.ends_s + 1.0

    near = [other for other in placed if overlaps(other)]
    if any(other.resource == fault.resource for other in near):
        return False
    # The most faults active at once while this one is: the count only rises at a start.
    starts = [fault.at_s] + [o.at_s for o in near if fault.at_s <= o.at_s < fault.ends_s]
    return all(sum(o.at_s <= t < o.ends_s for o in near) < MAX_OVERLAPPING for t in starts)
