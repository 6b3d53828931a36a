"""What a chaos run is asked (``ChaosOptions``), what it runs (its role instances, clusters and
consumer groups), and what it found (``ChaosOutcome``, clean or not)."""

from __future__ import annotations

from dataclasses import dataclass, field

from exactly.harness.audit import AuditResult
from exactly.harness.failover import FailoverResult
from exactly.harness.traffic import TOPICS
from exactly.harness.verdict import Verdict
from exactly.roles import DEDUPLICATOR, OFFSETSYNC, REPLICATOR

DEDUPLICATORS = tuple(f"{DEDUPLICATOR}-{n}" for n in (1, 2))  # sharing the staging partitions
INSTANCES = (REPLICATOR, *DEDUPLICATORS, OFFSETSYNC)
CLUSTERS = ("source", "target")
FAILOVER_GROUP = "chaos-app"  # stops halfway on the source after the drain
FAILOVER_TOPIC = TOPICS[0].name
LIVE_GROUP = "chaos-live"  # consumes and commits on the source for the whole run
LIVE_TOPIC = TOPICS[1].name
GROUPS = (LIVE_GROUP, FAILOVER_GROUP)


@dataclass(frozen=True, slots=True)
class ChaosOptions:
    minutes: float = 10.0
    # None: one every 3 s of the window, as many as fit (chaos/plan.py, 200 in ten minutes).
    faults: int | None = None
    # Records/s produced to the source for the whole fault window: about 1.3 M in 10 minutes
    # when a source broker down about a fifth of the time is counted in.
    rate: float = 3000.0
    seed: int = 0
    drain_timeout_s: float = 300.0
    # Per cluster: 1 is a broker and a separate controller; several are combined
    # broker+controller nodes replicating every topic 3 times (localkafka/cluster.py).
    nodes: int = 1


@dataclass
class ChaosOutcome:
    verdict: Verdict | None = None
    failovers: dict[str, FailoverResult] = field(default_factory=dict)  # by group
    drained: dict[str, int | None] = field(default_factory=dict)  # role -> SIGTERM exit status
    failover_errors: dict[str, str] = field(default_factory=dict)  # by group: why not checked
    live_group: dict[str, int] = field(default_factory=dict)  # processed, commits, failed
    unhealed: dict[str, str] = field(default_factory=dict)  # network link -> why, after the window
    audit: AuditResult | None = None  # exactly validate --require-complete, the second verdict

    @property
    def clean(self) -> bool:
        return (
            self.verdict is not None
            and self.verdict.clean
            and self.audit is not None
            and self.audit.clean
            and set(self.failovers) == set(GROUPS)
            and all(result.exact for result in self.failovers.values())
            and bool(self.drained)
            and all(status == 0 for status in self.drained.values())
            # A link still cut or slowed after the window: the run ended in a world it was not
            # asked for, and what it proved under it is not the run's to claim.
            and not self.unhealed
        )
