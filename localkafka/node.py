"""One Kafka JVM (a KRaft controller, a broker, or an older cluster's ZooKeeper) as a local
process rooted in one directory.

<node dir>/server.properties   its configuration
<node dir>/log4j2.properties   logging: everything to stdout, which goes to <role>.log
<node dir>/log4j.properties    the same for Kafka before 4.0 (log4j 1 / reload4j)
<node dir>/<role>.log          its output, appended across restarts (kept for post-mortems)
<node dir>/pid                 pid of the running process
<node dir>/data/               its log directory; a restart after SIGKILL reuses it
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from localkafka.errors import ClusterStartError, ClusterStateError
from localkafka.install import KafkaDistribution
from localkafka.processes import die_with_parent, log_tail

_KILL_WAIT_S = 10.0
_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka_request.name = kafka.request.logger
logger.kafka_request.level = WARN
"""
# Kafka before 4.0 logs through log4j 1 (reload4j from 3.2); its jars bring that binding beside
# ours, and SLF4J picks either: both are configured alike.
_LOG4J1 = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
"""
KAFKA_MAIN = "kafka.Kafka"
# The server Kafka's own zookeeper-server-start.sh runs, from the ZooKeeper jar that Kafka
# before 4.0 depends on.
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# Which of the JVM's compilers a node runs: "quick" (the default) stops at the first tier (C1);
# "full" is Java's own default (C1, then C2 for hot code), as a long-running production broker
# has it. Local clusters are fresh JVMs, two to six on a machine of few cores, each living for
# minutes: with "full" their compiler threads (C1 and C2) took 22-42 % of a target broker's CPU
# in a 1 MiB copy, competing with every process a test or bench times (docs/testing.md).
JIT_VARIABLE = "LOCALKAFKA_JIT"
_JIT_OPTIONS = {"quick": ["-XX:TieredStopAtLevel=1"], "full": []}


class KafkaNode:
    def __init__(self, directory: Path, role: str, heap: str, main_class: str = KAFKA_MAIN) -> None:
        self.directory = directory
        self.role = role
        self._heap = heap
        self._main_class = main_class
        self._process: subprocess.Popen[bytes] | None = None
        # Where the JVM writes the classes it loaded when it exits (classarchive.py), instead of
        # reading the distribution's archive.
        self.dump_classes_to: Path | None = None

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.role}.log"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def pid(self) -> int | None:
        """The pid of this node's running JVM, or None."""
        try:
            pid = int((self.directory / "pid").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if self._is_ours(pid) else None

    def is_running(self) -> bool:
        return self.pid is not None

    def write_config(self, properties: dict[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        (self.directory / "log4j2.properties").write_text(_LOG4J2)
        (self.directory / "log4j.properties").write_text(_LOG4J1)

    def format(self, distribution: KafkaDistribution, cluster_id: str) -> None:
        command = [
            java_executable(),
            *self._logging_options(),
            "-cp",
            distribution.classpath,
            "kafka.tools.StorageTool",
            "format",
            # The "=" form: a cluster id may start with "-", which a parser takes for an option.
            f"--cluster-id={cluster_id}",
            f"--config={self.properties_path}",
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        with open(self.log_path, "a") as log:
            log.write(result.stdout + result.stderr)
        if result.returncode != 0:
            raise ClusterStartError(f"formatting the {self.role} storage failed\n{self.log_tail()}")

    def launch(self, distribution: KafkaDistribution, *, tie_to_parent: bool) -> None:
        """Start the JVM without waiting for it to serve.

        With `tie_to_parent` the kernel SIGKILLs the JVM when the calling process dies, so a
        test session that is itself killed leaves no Kafka behind.
        """
        command = [
            java_executable(),
            f"-Xmx{self._heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            *jit_options(),
            *self._class_sharing(distribution),
            *self._logging_options(),
            "-cp",
            distribution.classpath,
            self._main_class,
            str(self.properties_path),
        ]
        with open(self.log_path, "ab") as log:
            log.write(
                f"\n=== localkafka: starting the {self.role} at {time.ctime()} ===\n".encode()
            )
            log.flush()
            # A session of its own: Ctrl-C in the user's terminal must not SIGINT the JVM behind
            # the back of whoever manages it.
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent() if tie_to_parent else None,
            )
        (self.directory / "pid").write_text(f"{self._process.pid}\n")

    def stop(self, timeout_s: float) -> None:
        """SIGTERM, then SIGKILL if the JVM has not exited within `timeout_s`."""
        self.finish_stop(self.request_stop(), timeout_s)

    def request_stop(self) -> int | None:
        """SIGTERM without waiting (a controlled shutdown); the pid to pass to `finish_stop`.

        Nodes of one cluster are asked together: one after the other, the last ones would wait
        for a controller quorum that the first ones took away."""
        pid = self.pid
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        return pid

    def finish_stop(self, pid: int | None, timeout_s: float) -> None:
        """Wait for the JVM asked to stop (`request_stop`); SIGKILL it past `timeout_s`."""
        if pid is None:
            return
        if not self._await_exit(pid, timeout_s):
            self.kill()
            return
        self._forget(pid)
        self._killed_marker.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, as a crash would, and wait until the process is gone."""
        pid = self.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not self._await_exit(pid, _KILL_WAIT_S):
            raise ClusterStateError(f"the {self.role} (pid {pid}) survived SIGKILL")
        self._killed_marker.write_text(f"{time.time()}\n")
        self._forget(pid)

    def signal(self, signum: int) -> None:
        """Send a signal to the running JVM (SIGSTOP/SIGCONT freeze and thaw it)."""
        pid = self.pid
        if pid is None:
            raise ClusterStateError(f"the {self.role} is not running")
        os.kill(pid, signum)

    def ended_uncleanly_at(self) -> float | None:
        """When the last run ended without a clean shutdown (SIGKILL, crash), or None.

        A pid file whose process is gone means it died on its own at an unknown time: now is
        the safe answer.
        """
        try:
            return float(self._killed_marker.read_text())
        except (FileNotFoundError, ValueError):
            pass
        return time.time() if (self.directory / "pid").is_file() and not self.pid else None

    def forget_unclean_end(self) -> None:
        self._killed_marker.unlink(missing_ok=True)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    @property
    def _killed_marker(self) -> Path:
        return self.directory / "killed_at"

    def _class_sharing(self, distribution: KafkaDistribution) -> list[str]:
        # A JVM that cannot use the archive (another Java, changed jars) ignores it silently
        # and loads its classes as without one.
        if self.dump_classes_to is not None:
            return [f"-XX:ArchiveClassesAtExit={self.dump_classes_to}"]
        archive = distribution.class_archive
        return [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []

    def _logging_options(self) -> list[str]:
        return [
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            f"-Dlog4j.configuration=file:{self.directory / 'log4j.properties'}",
        ]

    def _is_ours(self, pid: int) -> bool:
        # The pid file may outlive its process and the pid may be reused: only a live process
        # whose command line names our server.properties is ours. A zombie has an empty one.
        if self._process is not None and self._process.pid == pid:
            return self._process.poll() is None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return False
        return str(self.properties_path).encode() in cmdline

    def _await_exit(self, pid: int, timeout_s: float) -> bool:
        if self._process is not None and self._process.pid == pid:
            try:
                self._process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout_s
        while self._is_ours(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _forget(self, pid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            if (self.directory / "pid").read_text().strip() == str(pid):
                (self.directory / "pid").unlink()
        self._process = None


def jit_options() -> list[str]:
    """The JVM options for the compilers `LOCALKAFKA_JIT` names (`quick` when unset)."""
    chosen = os.environ.get(JIT_VARIABLE, "").strip() or "quick"
    try:
        return list(_JIT_OPTIONS[chosen])
    except KeyError:
        raise ClusterStartError(
            f"{JIT_VARIABLE}={chosen!r}: expected one of {', '.join(sorted(_JIT_OPTIONS))}"
        ) from None


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ClusterStartError("java is not on PATH (Java 17 or newer runs the Kafka broker)")
    return java
