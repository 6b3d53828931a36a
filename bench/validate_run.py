"""`exactly validate --plan PLAN` run as a user would, for bench/validator_vs_consumer.py: its
wall time, its report, and the resident memory of its driver (the Python process and Spark's JVM),
sampled, with each process's own high-water mark."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import say
from localkafka import process_tree
from runtime.settings import role_environment

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_EVERY_S = 0.2
PYTHON_DRIVER, JVM = "python driver", "jvm"
_KIB = 1024


def validate_plan(settings: dict[str, str], out: Path, count: int, plan: str) -> dict:
    """Run `exactly validate --plan PLAN` as a user would, sampling its memory; its numbers as a
    dict."""
    out.mkdir(parents=True)
    report_path, log_path = out / "report.json", out / "validate.log"
    command = [
        sys.executable,
        "-m",
        "exactly",
        "validate",
        "--report",
        str(report_path),
        "--chart",
        str(out / "report.html"),
        "--plan",
        plan,
    ]
    with log_path.open("w") as log:
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            env=role_environment(settings),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        memory = TreeMemory(process.pid)
        try:
            while process.poll() is None:
                memory.sample()
                time.sleep(SAMPLE_EVERY_S)
        finally:
            if process.poll() is None:
                # SIGTERM unwinds through spark.stop(), which takes Spark's JVM with it.
                process.terminate()
                process.wait(60)
        wall = time.monotonic() - started
    output = log_path.read_text()
    # Its progress lines, one per phase with the seconds the one before took: where time went.
    for line in output.splitlines():
        if line.startswith("exactly validate:"):
            say(f"  {line}")
    say(f"validate --plan {plan} exited {process.returncode} after {wall:.1f} s")
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    totals = report["totals"] if report else None
    if process.returncode != 0 or totals is None or totals["matched"] != count:
        print(output[-4000:], file=sys.stderr)
        raise SystemExit(
            f"validate: exit status {process.returncode}, wanted 0 with {count} matched; "
            f"totals: {json.dumps(totals)}"
        )
    planned = {topic["plan"] for topic in report["topics"]} if report else set()
    if plan == "auto" and planned != {"merge"}:
        raise SystemExit(f"validate: the merge did not prove the clean copy (plans: {planned})")
    return {
        "validate_wall_seconds": round(wall, 2),
        "validate_report_seconds": report["seconds"] if report else None,
        "validate_totals": totals,
        **memory.summary(),
    }


@dataclass
class TreeMemory:
    """Resident memory of a process and all its descendants, sampled: the peak of their sum,
    and per process its peak sample and its own high-water mark (VmHWM, kept by the kernel, so
    it also catches what happened between two samples)."""

    root: int
    peak_sum_kib: int = 0
    peak_kib: dict[int, int] = field(default_factory=dict)
    hwm_kib: dict[int, int] = field(default_factory=dict)
    role: dict[int, str] = field(default_factory=dict)

    def sample(self) -> None:
        total = 0
        for pid in process_tree(self.root):
            status = _status(pid)
            if status is None or "VmRSS" not in status:
                continue  # gone, or a zombie
            rss = _kib(status["VmRSS"])
            total += rss
            self.peak_kib[pid] = max(self.peak_kib.get(pid, 0), rss)
            self.hwm_kib[pid] = _kib(status.get("VmHWM", "0 kB"))
            # Again each time: spark-submit's shell scripts exec into the JVM under one pid.
            self.role[pid] = self._role(pid, status.get("Name", ""))
        self.peak_sum_kib = max(self.peak_sum_kib, total)

    def _role(self, pid: int, name: str) -> str:
        if pid == self.root:
            return PYTHON_DRIVER
        if name == "java":
            return JVM  # Spark's, and briefly its launcher's (the smaller one)
        if name.startswith("python"):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                return name
            return "python worker" if b"pyspark" in command else name
        return name

    def summary(self) -> dict:
        def largest(role: str, of: dict[int, int]) -> int | None:
            values = [of[pid] for pid, r in self.role.items() if r == role]
            return round(max(values) / _KIB) if values else None

        return {
            "peak_rss_sum_mib": round(self.peak_sum_kib / _KIB),
            "peak_rss_python_driver_mib": largest(PYTHON_DRIVER, self.peak_kib),
            "hwm_python_driver_mib": largest(PYTHON_DRIVER, self.hwm_kib),
            "peak_rss_jvm_mib": largest(JVM, self.peak_kib),
            "hwm_jvm_mib": largest(JVM, self.hwm_kib),
            "processes": [
                {
                    "role": self.role[pid],
                    "peak_rss_mib": round(peak / _KIB),
                    "hwm_mib": round(self.hwm_kib[pid] / _KIB),
                }
                for pid, peak in sorted(self.peak_kib.items(), key=lambda item: -item[1])
            ],
        }


def _status(pid: int) -> dict[str, str] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _kib(value: str) -> int:
    return int(value.split()[0])  # "123456 kB"
