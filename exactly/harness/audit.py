"""The second verdict of the demo and of the chaos run: `exactly validate --require-complete`,
the Spark audit a user runs on their own clusters, run as a user types it once the pipeline has
drained.

It is independent of the first verdict (exactly/harness/verdict.py reads both sides in this
process): another reader (Spark's Java Kafka client), another matching (by the provenance
header), and its own report files beside the chaos report. A run is clean only when both are.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from localkafka import die_with_parent
from runtime.settings import role_environment

VALIDATION_REPORT = "validation-report.json"
VALIDATION_CHART = "validation-report.html"
_TIMEOUT_S = 900.0
# The headline always shows these of the validator report's totals, and any other finding
# that is not zero (a changed key, value, header or timestamp, a wrong partition, in flight).
_ALWAYS = ("missing", "duplicated", "out_of_order")
# outside_range: records outside the checked offsets or times, not a discrepancy.
_NOT_FINDINGS = frozenset({"matched", "source_records", "destination_records", "outside_range"})


@dataclass(frozen=True)
class AuditResult:
    exit_status: int | None  # None: it did not finish within the timeout
    seconds: float
    report: Path
    log: Path
    totals: dict[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return self.exit_status == 0

    def headline(self) -> str:
        if self.exit_status is None:
            return f"exactly validate did not finish in {_TIMEOUT_S:.0f} s (log: {self.log})"
        if not self.totals:
            return f"exactly validate exited {self.exit_status} without a report (log: {self.log})"
        others = [k for k, n in self.totals.items() if n and k not in (*_ALWAYS, *_NOT_FINDINGS)]
        found = ", ".join(f"{self.totals.get(kind, 0)} {kind}" for kind in (*_ALWAYS, *others))
        word = "CLEAN" if self.clean else f"NOT CLEAN (exit {self.exit_status})"
        return (
            f"exactly validate {word}: {self.totals.get('matched', 0)} of "
            f"{self.totals.get('source_records', 0)} source records matched, {found}"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "headline": self.headline(),
            "clean": self.clean,
            "exit_status": self.exit_status,
            "seconds": round(self.seconds, 1),
            "report": str(self.report),
            "totals": self.totals,
        }


def run_audit(
    *, source: str, destination: str, include: str, report_dir: Path, log_dir: Path
) -> AuditResult:
    """Audit every topic matching ``include`` between the two clusters, on local Spark."""
    report_dir.mkdir(parents=True, exist_ok=True)
    report = report_dir / VALIDATION_REPORT
    report.unlink(missing_ok=True)  # a report left by an earlier run must not answer for this
    log = log_dir / "validate.log"
    command = [
        *(sys.executable, "-m", "exactly", "validate"),
        *("--source", source, "--destination", destination, "--include", include),
        "--require-complete",
        *("--report", str(report), "--chart", str(report_dir / VALIDATION_CHART)),
    ]
    started = time.monotonic()
    with log.open("ab") as output:
        # The user's own KAFKA_* and REPLICATION_* exports must not point it elsewhere; it dies
        # with this process, as the roles and brokers do (nothing left running, ever).
        process = subprocess.Popen(
            command,
            env=role_environment({}),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
        )
        try:
            status: int | None = process.wait(_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            status = None
        except BaseException:  # Ctrl-C, SIGTERM: the Spark JVM goes too
            process.kill()
            process.wait()
            raise
    return AuditResult(status, time.monotonic() - started, report, log, _totals(report))


def _totals(report: Path) -> dict[str, int]:
    try:
        totals = json.loads(report.read_text())["totals"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {str(k): int(v) for k, v in totals.items() if isinstance(v, int)}
