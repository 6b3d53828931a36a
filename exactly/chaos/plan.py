"""The faults of one chaos run, drawn from a seed before the run starts.

A fault has a start, a target and a hold: a role instance SIGKILLed and restarted after the
hold, frozen (SIGSTOP) for the hold and woken, or restarted on an empty state directory; a
cluster's broker or controller SIGKILLed and started again after the hold; the network between
one role instance and one cluster slowed, throttled, reset or cut (chaos/network.py). Faults
overlap in time, never on one target: one thing cannot be killed while it is frozen, and a
cluster has one fault at a time (its broker or its controller; on a cluster of several nodes,
one node). Every fault ends before the fault window does, so that the run can drain and judge a
healed system. The same seed gives the same plan, so a failing run can be run again as it was.

How many: asked for (``--faults``), every one must fit or the plan is refused; by default one
every `DEFAULT_SPACING_S` of the window, of which the plan keeps as many as fit
(`default_fault_count`, ``fit=True``).
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import math
import random
from collections import Counter
from dataclasses import dataclass

from exactly.chaos.errors import ChaosError

# What a frozen role must outlast to become a zombie: the chaos roles' consumer session
# timeout (chaos/instances.py sets it) and stage 2's transaction timeout (deduplicator/loop.py).
SESSION_TIMEOUT_S = 6.0
TRANSACTION_TIMEOUT_S = 60.0
# The clients' request timeout (librdkafka's default): a black hole must outlast it, so that
# requests time out on an open connection rather than fail on a closed one.
REQUEST_TIMEOUT_S = 30.0
# At most this many faults at once: more and nothing would move between them.
MAX_OVERLAPPING = 5
# The default density: 200 faults in the default ten minutes.
DEFAULT_SPACING_S = 3.0
_ATTEMPTS = 500
# A restarted process is given a moment before the next fault on the same target.
_SLACK_S = 1.0

# Holds, drawn uniformly between the two bounds (seconds).
_ROLE_HOLD = (0.2, 5.0)  # kill, wipe
# Past the session timeout, so the group moves on and the frozen one wakes a zombie; in long
# runs some past the transaction timeout too, so the broker aborts for it.
_PAUSE_HOLD = (SESSION_TIMEOUT_S + 2.0, SESSION_TIMEOUT_S + 8.0)
_LONG_PAUSE_HOLD = (TRANSACTION_TIMEOUT_S + 5.0, TRANSACTION_TIMEOUT_S + 20.0)
# Past the 7 s in which localkafka holds back a crashed broker's successor (until the
# controller has fenced the dead one): a shorter hold would stall the fault loop. On a cluster
# of several nodes a controller is a broker too, and its successor waits alike.
_NODE_HOLD = (7.5, 12.0)
_CONTROLLER_HOLD = (2.0, 10.0)  # the separate controller JVM of a one-broker cluster
_NETWORK_HOLD = (3.0, 10.0)
_BLACKHOLE_HOLD = (REQUEST_TIMEOUT_S + 1.0, REQUEST_TIMEOUT_S + 6.0)
_HOLDS = (
    _ROLE_HOLD,
    _PAUSE_HOLD,
    _LONG_PAUSE_HOLD,
    _NODE_HOLD,
    _CONTROLLER_HOLD,
    _NETWORK_HOLD,
    _BLACKHOLE_HOLD,
)
_LONGEST_HOLD_S = max(high for _low, high in _HOLDS)


class Kind(enum.StrEnum):
    KILL = "kill"  # SIGKILL a role instance; restarted after the hold
    PAUSE = "pause"  # SIGSTOP a role instance past its session timeout; SIGCONT after the hold
    WIPE = "wipe"  # SIGKILL a deduplicator, delete its state directory, restart after the hold
    BROKER = "broker"  # SIGKILL a cluster's broker (one node); started again after the hold
    CONTROLLER = "controller"  # SIGKILL a cluster's (active) controller; started again after
    NETWORK = "network"  # a toxic between a role instance and a cluster; removed after the hold


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float  # from the start of the fault window
    kind: Kind
    target: str  # a role instance (replicator, deduplicator-1, ...), a cluster (source,
    # target), or for NETWORK a link between them (replicator@source)
    hold_s: float
    variant: str = ""  # NETWORK: latency, bandwidth, reset or blackhole
    # BROKER and CONTROLLER on a cluster of several nodes: the node to SIGKILL (for CONTROLLER
    # only when the active controller cannot be found, chaos/quorum.py); 0 on a one-broker
    # cluster, whose broker and controller are one JVM each.
    node: int = 0

    @property
    def name(self) -> str:
        """How the fault is shown: "network blackhole replicator@target", "kill offsetsync"."""
        return " ".join(part for part in (self.kind.value, self.variant, self.target) if part)

    @property
    def ends_s(self) -> float:
        return self.at_s + self.hold_s

    @property
    def resource(self) -> str:
        """What the fault occupies: a cluster is one resource, whichever node or JVM a fault
        takes from it."""
        return self.target


# How often each kind is drawn once every kind has one fault. A broker or controller kill takes
# a whole local cluster away (one broker each, where production has three and a leader moves)
# for its hold plus a JVM start: drawn as often as the role faults, they kept each cluster down
# most of a run (36 broker and 42 controller kills in 10 minutes; the source took 300 625
# records in it at 2 000 a second). About one fault in ten of each kind here; the same on
# clusters of three nodes, where a broker fault takes one node and leaders move.
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
    nodes: int = 1  # per cluster: with several, a broker fault SIGKILLs one of them (1..nodes)

    def of(self, kind: Kind) -> tuple[str, ...]:
        if kind is Kind.WIPE:
            return self.deduplicators
        if kind in (Kind.BROKER, Kind.CONTROLLER):
            return self.clusters
        if kind is Kind.NETWORK:
            return self.links
        return self.roles


def default_fault_count(window_s: float) -> int:
    """The faults a run asks for when not told: one every DEFAULT_SPACING_S (200 in ten
    minutes), at least one of each kind. Planned with ``fit=True``: a short window keeps as many
    of them as it holds."""
    return max(len(Kind), math.floor(window_s / DEFAULT_SPACING_S))


def plan_faults(
    seed: int, window_s: float, count: int, targets: Targets, *, fit: bool = False
) -> list[Fault]:
    """``count`` faults in ``window_s`` seconds, every kind at least once, ordered by start.

    Raises ChaosError when they do not fit (too many for the window). With ``fit`` (the default
    count), a fault that finds no place is left out instead, unless it is the last chance of its
    kind: the plan then holds as many of the ``count`` as the window does.
    """
    if count < len(Kind):
        raise ChaosError(f"--faults {count}: at least {len(Kind)}, one of each kind")
    rng = random.Random(seed)
    drawn = rng.choices(list(_WEIGHTS), weights=list(_WEIGHTS.values()), k=count - len(Kind))
    kinds = list(Kind) + drawn
    rng.shuffle(kinds)
    placed = _Placed()
    for i, kind in enumerate(kinds):
        try:
            placed.add(_place(rng, kind, window_s, targets, placed))
        except ChaosError:
            if not fit or (kind not in placed.kinds and kind not in kinds[i + 1 :]):
                raise
    return sorted(placed.faults, key=lambda fault: fault.at_s)


def count_by_kind(faults: list[Fault]) -> dict[str, int]:
    counts = Counter(fault.kind.value for fault in faults)
    return {kind.value: counts.get(kind.value, 0) for kind in Kind}


class _Placed:
    """The faults placed so far, by start, so that the few near a new one are found at once
    (a day-long window holds tens of thousands)."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.kinds: set[Kind] = set()
        self._starts: list[float] = []
        self._by_start: list[Fault] = []

    def add(self, fault: Fault) -> None:
        self.faults.append(fault)
        self.kinds.add(fault.kind)
        i = bisect.bisect(self._starts, fault.at_s)
        self._starts.insert(i, fault.at_s)
        self._by_start.insert(i, fault)

    def near(self, fault: Fault) -> list[Fault]:
        """Every placed fault that could overlap ``fault``, slack included, and a few more."""
        low = bisect.bisect_left(self._starts, fault.at_s - _LONGEST_HOLD_S - _SLACK_S)
        high = bisect.bisect_right(self._starts, fault.ends_s + _SLACK_S)
        return self._by_start[low:high]


def _place(
    rng: random.Random, kind: Kind, window_s: float, targets: Targets, placed: _Placed
) -> Fault:
    for _ in range(_ATTEMPTS):
        variant = _variant(rng, window_s) if kind is Kind.NETWORK else ""
        hold = _hold(rng, kind, window_s, variant, targets.nodes)
        if hold >= window_s:
            continue
        at_s = rng.uniform(0.0, window_s - hold)
        fault = Fault(at_s, kind, rng.choice(targets.of(kind)), hold, variant)
        if _fits(fault, placed.near(fault)):
            if kind in (Kind.BROKER, Kind.CONTROLLER) and targets.nodes > 1:
                fault = dataclasses.replace(fault, node=rng.randint(1, targets.nodes))
            return fault
    raise ChaosError(
        f"{len(placed.faults) + 1} faults do not fit in {window_s:.0f} s (one target has one "
        f"fault at a time, at most {MAX_OVERLAPPING} at once): ask for fewer faults or more "
        "minutes"
    )


def _variant(rng: random.Random, window_s: float) -> str:
    # A black hole outlasts the request timeout; a window too short to hold one beside the
    # other faults gets the other three only.
    variants = ["latency", "bandwidth", "reset"]
    if window_s >= 3 * (REQUEST_TIMEOUT_S + 10.0):
        variants.append("blackhole")
    return rng.choice(variants)


def _hold(rng: random.Random, kind: Kind, window_s: float, variant: str, nodes: int) -> float:
    if variant == "blackhole":
        return rng.uniform(*_BLACKHOLE_HOLD)
    if kind is Kind.NETWORK:
        return rng.uniform(*_NETWORK_HOLD)
    if kind is Kind.PAUSE:
        if window_s >= 5 * TRANSACTION_TIMEOUT_S and rng.random() < 0.25:
            return rng.uniform(*_LONG_PAUSE_HOLD)
        return rng.uniform(*_PAUSE_HOLD)
    if kind is Kind.BROKER or (kind is Kind.CONTROLLER and nodes > 1):
        return rng.uniform(*_NODE_HOLD)
    if kind is Kind.CONTROLLER:
        return rng.uniform(*_CONTROLLER_HOLD)
    return rng.uniform(*_ROLE_HOLD)


def _fits(fault: Fault, candidates: list[Fault]) -> bool:
    def overlaps(other: Fault) -> bool:
        return fault.at_s < other.ends_s + _SLACK_S and other.at_s < fault.ends_s + _SLACK_S

    near = [other for other in candidates if overlaps(other)]
    if any(other.resource == fault.resource for other in near):
        return False
    # The most faults active at once while this one is: the count only rises at a start.
    starts = [fault.at_s] + [o.at_s for o in near if fault.at_s <= o.at_s < fault.ends_s]
    return all(sum(o.at_s <= t < o.ends_s for o in near) < MAX_OVERLAPPING for t in starts)
