"""How `exactly demo` ends: the roles SIGTERMed (each drains and exits 0), the record-by-record
verdict, and the proof a user runs on their own clusters (`exactly validate` on Spark)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from exactly.harness.audit import VALIDATION_CHART, AuditResult, run_audit
from exactly.harness.clusters import DemoClusters
from exactly.harness.progress import DemoView
from exactly.harness.traffic import INCLUDE_PATTERN, TOPICS
from exactly.harness.verdict import Verdict, judge, read_committed
from runtime.role_process import RoleProcess

_ROLE_STOP_TIMEOUT_S = 30.0
_READ_TIMEOUT_S = 60.0


def stop_roles(roles: Mapping[str, RoleProcess], view: DemoView) -> None:
    view.say("stopping the three roles with SIGTERM (each drains and exits 0)")
    for role in roles:
        status = roles[role].terminate(_ROLE_STOP_TIMEOUT_S)
        if status == 0:
            view.say(f"{role} stopped cleanly (exit status 0)")
        elif status is None:
            view.say(
                f"{role} did not exit within {_ROLE_STOP_TIMEOUT_S:.0f} s of SIGTERM; "
                f"killed it. {roles[role].log_tail(15)}",
                style="bold red",
            )
        else:
            view.say(
                f"{role} exited with status {status}. {roles[role].log_tail(15)}",
                style="bold red",
            )


def compare(clusters: DemoClusters, aborted: int, view: DemoView) -> Verdict:
    view.say("comparing source and destination record by record (read_committed)")
    topics = [t.name for t in TOPICS]
    source = read_committed(clusters.source.bootstrap_servers, topics, _READ_TIMEOUT_S)
    destination = read_committed(clusters.target.bootstrap_servers, topics, _READ_TIMEOUT_S)
    verdict = judge(clusters.source.cluster_id, source, destination)
    view.show_verdict(verdict, aborted)
    return verdict


def audit_on_spark(clusters: DemoClusters, run_dir: Path, view: DemoView) -> AuditResult:
    """The proof a user runs on their own clusters: Spark reads both sides (its own Kafka
    client, pairing by the provenance header) and must agree with the verdict above."""
    view.say(
        "the Spark audit: exactly validate --require-complete on the flow (Spark local[*]), "
        f"log {run_dir / 'validate.log'}"
    )
    result = run_audit(
        source=clusters.source.bootstrap_servers,
        destination=clusters.target.bootstrap_servers,
        include=INCLUDE_PATTERN,
        report_dir=run_dir / "audit",
        log_dir=run_dir,
    )
    view.say(
        f"{result.headline()} ({result.seconds:.0f} s)",
        style="bold green" if result.clean else "bold red",
    )
    view.say(f"the audit's report: {result.report.with_name(VALIDATION_CHART)}")
    return result
