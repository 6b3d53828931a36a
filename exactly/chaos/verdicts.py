"""How a chaos run ends: every role SIGTERMed (each must drain, exit 0), the record-by-record
verdict, and the second verdict on Spark (`exactly validate --require-complete`)."""

from __future__ import annotations

from pathlib import Path

from exactly.chaos.options import ChaosOutcome
from exactly.chaos.world import World
from exactly.harness.audit import AuditResult, run_audit
from exactly.harness.clusters import DemoClusters
from exactly.harness.progress import DemoView
from exactly.harness.traffic import INCLUDE_PATTERN, TOPICS, SampleTraffic
from exactly.harness.verdict import Verdict, judge, read_committed

_READ_TIMEOUT_S = 120.0
_ROLE_STOP_TIMEOUT_S = 60.0


def stop_roles(world: World, outcome: ChaosOutcome, view: DemoView) -> None:
    for name, instance in world.instances.items():
        status = instance.process.terminate(_ROLE_STOP_TIMEOUT_S)
        outcome.drained[name] = status
        if status != 0:
            view.say(
                f"{name} did not drain cleanly on SIGTERM (exit {status})\n"
                f"{instance.process.log_tail(15)}",
                style="bold red",
            )


def compare(clusters: DemoClusters, traffic: SampleTraffic | None, view: DemoView) -> Verdict:
    topics = [t.name for t in TOPICS]
    source = read_committed(clusters.source.bootstrap_servers, topics, _READ_TIMEOUT_S)
    destination = read_committed(clusters.target.bootstrap_servers, topics, _READ_TIMEOUT_S)
    verdict = judge(clusters.source.cluster_id, source, destination)
    aborted = traffic.counts.aborted if traffic is not None else 0
    view.show_verdict(verdict, aborted)
    return verdict


def audit_on_spark(
    clusters: DemoClusters, report_dir: Path, log_dir: Path, view: DemoView
) -> AuditResult:
    view.say("auditing on Spark: exactly validate --require-complete")
    result = run_audit(
        source=clusters.source.bootstrap_servers,
        destination=clusters.target.bootstrap_servers,
        include=INCLUDE_PATTERN,
        report_dir=report_dir,
        log_dir=log_dir,
    )
    view.say(
        f"{result.headline()} ({result.seconds:.0f} s; {result.report})",
        style="green" if result.clean else "bold red",
    )
    return result
