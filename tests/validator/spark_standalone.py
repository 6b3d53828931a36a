"""A standalone Spark cluster on loopback (a master, N workers) for tests that need executors.

    with standalone_spark(tmp_path / "spark") as spark:
        SparkSession.builder.master(spark.master_url)...   # in a subprocess: spark://127.0.0.1:P

The daemons are started with the `spark-class` launcher that the pyspark wheel ships, with
SPARK_HOME set to the pyspark package; no Spark distribution is needed. Every daemon's output goes
to `<log_dir>/<name>.log` (`master`, `worker-1`, ...), each worker's work dir (executor logs per
application) is `<log_dir>/worker-N`. When the block ends, whatever happened, every daemon and the
executors it launched are stopped: SIGTERM, then SIGKILL to its whole process group.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from localkafka import free_ports, log_tail
from localkafka.ports import CLUSTER_PORTS

logger = logging.getLogger(__name__)

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
LOOPBACK = "127.0.0.1"

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 5.0  # SIGTERM lets a worker kill its executors; SIGKILL after this
_POLL_S = 0.2
_HTTP_TIMEOUT_S = 2.0
_LOG_TAIL_LINES = 30

# Ports come from below the kernel's ephemeral range (32768-60999 here): between our probe and
# the JVM's bind, several seconds pass, and a port the OS picked for us from the ephemeral range
# can meanwhile become the source port of any outgoing connection on the machine.

# Daemon JVMs: a small heap (the default is 1g each, on a shared machine), and no port
# retries: Spark otherwise silently binds port+1 when a port is taken, and our URLs would lie.
_DAEMON_MEMORY = "512m"
_DAEMON_JAVA_OPTS = "-Dspark.port.maxRetries=0"

# A direct opener: an http_proxy in the environment must not swallow requests to loopback.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class StandaloneSpark:
    master_url: str  # spark://127.0.0.1:PORT, for SparkSession.builder.master()
    web_ui_url: str  # http://127.0.0.1:PORT, the master's web UI; `/json/` is its status
    log_dir: Path

    def status(self) -> dict[str, Any]:
        """The master's JSON status: workers, aliveworkers, activeapps, completedapps, ..."""
        status = _master_status(self.web_ui_url)
        if status is None:
            raise RuntimeError(f"the Spark master at {self.web_ui_url} does not answer")
        return status


class _Daemon:
    """One spark-class JVM, leader of its own process group (it may fork executor JVMs)."""

    def __init__(self, name: str, args: Sequence[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        with self.log_path.open("wb") as log:
            # A session of its own: killpg reaches the executors a worker forks, never pytest.
            self.process = subprocess.Popen(
                [str(SPARK_CLASS), *args],
                env=env,
                cwd=log_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def exit_code(self) -> int | None:
        """Its exit code once it has exited (reaps it); None while it runs."""
        return self.process.poll()

    def has_exited(self) -> bool:
        """Whether it has exited, without reaping it (WNOWAIT): see signal_group."""
        if self.process.returncode is not None:
            return True
        info = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return info is not None

    def signal_group(self, signum: int) -> None:
        # Only while the leader is unreaped (running or a zombie) does its pid, and so the group
        # id, still belong to us; after the reap the number could name someone else's group.
        if self.process.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)

    def log_tail(self) -> str:
        return log_tail(self.log_path, _LOG_TAIL_LINES)


@contextmanager
def standalone_spark(
    log_dir: Path,
    workers: int = 2,
    cores_per_worker: int = 1,
    memory_per_worker: str = "1g",
) -> Iterator[StandaloneSpark]:
    """A master and `workers` workers on 127.0.0.1, all registered (ALIVE) when this yields."""
    log_dir = Path(log_dir).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    master_port, master_ui_port, *worker_ui_ports = free_ports(
        2 + workers, CLUSTER_PORTS, host=LOOPBACK
    )
    spark = StandaloneSpark(
        master_url=f"spark://{LOOPBACK}:{master_port}",
        web_ui_url=f"http://{LOOPBACK}:{master_ui_port}",
        log_dir=log_dir,
    )
    started_at = time.monotonic()
    daemons: list[_Daemon] = []
    try:
        master_args = ["--host", LOOPBACK, "--port", str(master_port)]
        master_args += ["--webui-port", str(master_ui_port)]
        daemons.append(_Daemon("master", [MASTER_CLASS, *master_args], _env(log_dir), log_dir))
        # Workers started before the master listens back off for 5-15 s before they retry
        # registering: waiting for the master first is the faster way.
        _wait_until(spark, daemons, lambda status: True, "the master to answer")
        for n, ui_port in enumerate(worker_ui_ports, start=1):
            work_dir = log_dir / f"worker-{n}"
            work_dir.mkdir(exist_ok=True)
            args = [WORKER_CLASS, "--host", LOOPBACK, "--cores", str(cores_per_worker)]
            args += ["--memory", memory_per_worker, "--webui-port", str(ui_port)]
            args += ["--work-dir", str(work_dir), spark.master_url]
            daemons.append(_Daemon(f"worker-{n}", args, _env(log_dir, work_dir), log_dir))
        _wait_until(
            spark,
            daemons,
            lambda status: _alive_workers(status) == workers,
            f"{workers} ALIVE workers",
        )
        logger.info(
            "spark standalone ready master_url=%s web_ui_url=%s workers=%d seconds=%.1f",
            spark.master_url,
            spark.web_ui_url,
            workers,
            time.monotonic() - started_at,
        )
        yield spark
    finally:
        _stop(daemons)


def _env(log_dir: Path, work_dir: Path | None = None) -> dict[str, str]:
    # Without the caller's SPARK_* / PYSPARK_* (a SPARK_CONF_DIR or SPARK_HOME from a developer's
    # shell would change what the daemons load); SPARK_HOME is the pyspark package itself.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_LOG_DIR=str(log_dir),
        SPARK_DAEMON_MEMORY=_DAEMON_MEMORY,
        SPARK_DAEMON_JAVA_OPTS=_DAEMON_JAVA_OPTS,
    )
    if work_dir is not None:
        env["SPARK_WORKER_DIR"] = str(work_dir)
    return env


def _master_status(web_ui_url: str) -> dict[str, Any] | None:
    """The master's /json/ status, or None while it does not answer (yet)."""
    try:
        with _HTTP.open(f"{web_ui_url}/json/", timeout=_HTTP_TIMEOUT_S) as response:
            return json.loads(response.read())
    except (OSError, ValueError):  # refused, reset, timed out; a half-started UI's non-JSON
        return None


def _alive_workers(status: dict[str, Any]) -> int:
    return sum(worker.get("state") == "ALIVE" for worker in status.get("workers", []))


def _wait_until(
    spark: StandaloneSpark,
    daemons: Sequence[_Daemon],
    ready: Callable[[dict[str, Any]], bool],
    what: str,
    timeout_s: float = READY_TIMEOUT_S,
) -> None:
    """Poll the master's status until `ready(status)`; fail at once if a daemon exits."""
    deadline = time.monotonic() + timeout_s
    status: dict[str, Any] | None = None
    while True:
        for daemon in daemons:
            code = daemon.exit_code()
            if code is not None:
                raise RuntimeError(
                    f"{daemon.name} exited with {code} while waiting for {what}.\n"
                    f"{_log_tails(daemons)}"
                )
        status = _master_status(spark.web_ui_url)
        if status is not None:
            if status.get("url") != spark.master_url:
                raise RuntimeError(
                    f"{spark.web_ui_url} is not our master: it reports {status.get('url')!r}, "
                    f"not {spark.master_url!r}.\n{_log_tails(daemons)}"
                )
            if ready(status):
                return
        if time.monotonic() > deadline:
            seen = "no answer" if status is None else f"{_alive_workers(status)} ALIVE workers"
            raise RuntimeError(
                f"timed out after {timeout_s:.0f} s waiting for {what} ({seen}).\n"
                f"{_log_tails(daemons)}"
            )
        time.sleep(_POLL_S)


def _log_tails(daemons: Sequence[_Daemon]) -> str:
    return "\n".join(daemon.log_tail() for daemon in daemons)


def _stop(daemons: Sequence[_Daemon]) -> None:
    """SIGTERM every group, give them STOP_GRACE_S, SIGKILL whatever is left, reap them all."""
    for daemon in daemons:
        daemon.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    try:
        while time.monotonic() < deadline and not all(d.has_exited() for d in daemons):
            time.sleep(_POLL_S)
    finally:
        # Also after a clean exit: an executor JVM a worker left behind is still in its group.
        for daemon in daemons:
            daemon.signal_group(signal.SIGKILL)
        for daemon in daemons:
            daemon.process.wait()
