"""`exactly validate` as a user runs it: a process, its exit status, its output and its report."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.settings import role_environment
from tests.replication.processes import REPOSITORY_ROOT
from validator.merge_jar import merge_jar
from validator.session import KAFKA_CONNECTOR

SPARK_SUBMIT_MASTER = "local[2]"


@dataclass(frozen=True)
class Validation:
    status: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None
    chart: Path

    def examples(self, kind: str) -> list[dict[str, Any]]:
        assert self.report is not None, self.stderr
        return self.report["examples"].get(kind, [])


def run_validate(
    env: dict[str, str],
    out_dir: Path,
    *args: str,
    timeout_s: float = 300,
    spark_submit: bool = False,
) -> Validation:
    """`exactly validate`, or with ``spark_submit`` the same job given to Spark's own launcher
    (`spark-submit --master local[2] --packages <connector> --jars <merge jar>
    validator/submit.py`), as a Spark user would."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report, chart = out_dir / "report.json", out_dir / "report.html"
    if spark_submit:
        command = [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            SPARK_SUBMIT_MASTER,
            "--packages",
            KAFKA_CONNECTOR,
            # The merge plan's jar, as docs/validation.md tells a spark-submit user to pass it.
            "--jars",
            str(merge_jar()),
            str(REPOSITORY_ROOT / "validator" / "submit.py"),
        ]
        env = {**env, "PYSPARK_PYTHON": sys.executable}
    else:
        command = [sys.executable, "-m", "exactly", "validate"]
    done = subprocess.run(
        [*command, "--report", str(report), "--chart", str(chart), *args],
        env=role_environment(env),
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return Validation(
        done.returncode,
        done.stdout,
        done.stderr,
        json.loads(report.read_text()) if report.exists() else None,
        chart,
    )
