"""What `exactly demo` is asked (``DemoOptions``) and what it found (``DemoOutcome``)."""

from __future__ import annotations

from dataclasses import dataclass

from exactly.harness.audit import AuditResult
from exactly.harness.failover import FailoverResult
from exactly.harness.verdict import Verdict


@dataclass(frozen=True, slots=True)
class DemoOptions:
    duration_s: float = 45.0  # of sample traffic; the whole demo takes about 30 s more
    records_per_second: float = 250.0
    catch_up_timeout_s: float = 90.0
    # Clusters with secured listeners: the roles reach the source over SASL_SSL and the target
    # over mutual TLS, each as its own user with only its ACLs (docs/security.md).
    secure: bool = False
    # The second verdict, Spark's: `exactly validate --require-complete` on the demo's flow.
    audit: bool = True
    # Nodes per cluster: 3 replicates as production does, and a target node is killed too.
    nodes: int = 1


@dataclass(frozen=True, slots=True)
class DemoOutcome:
    """Clean only when both are: the record-by-record verdict and the consumer-group failover."""

    verdict: Verdict
    failover: FailoverResult | None  # None: not run (the destination did not catch up)
    audit: AuditResult | None = None  # None: skipped (--no-audit)

    @property
    def clean(self) -> bool:
        audited = self.audit is None or self.audit.clean
        return self.verdict.clean and self.failover is not None and self.failover.exact and audited
