"""MirrorMaker 2 in dedicated mode as a local Java process, the baseline of the pipeline bench.

    libs = ensure_mirrormaker()                     # Maven, once, into the localkafka cache
    with MirrorMaker2(libs, workdir, "mm2eos100", source, target, "bench-100",
                      exactly_once=True) as mm2:
        ...                                         # records arrive in mm2.destination_topic

The jars come from `deps/mirrormaker-pom.xml` (connect-mirror of the same Kafka release as
localkafka's brokers), resolved like localkafka resolves Kafka: `mvn dependency:copy-dependencies`
into a staging directory renamed into place only when complete, under a lock.

Every property below was checked against Kafka's own source (MirrorMakerConfig, MirrorSourceConfig,
DistributedConfig) and the geo-replication docs, not guessed; `exactly_once_evidence()` reads the
log to prove what mode actually ran.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from localkafka import die_with_parent, free_port, log_tail
from localkafka.install import KAFKA_VERSION, ensure_jars
from localkafka.node import java_executable

POM = Path(__file__).resolve().parents[1] / "deps" / "mirrormaker-pom.xml"
MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
# What Connect logs when a task fails for good (WorkerTask): it is not restarted by itself.
_TASK_KILLED = "Task is being killed and will not recover"
TARGET_ALIAS = "target"
_MAVEN_TIMEOUT_S = 900
_HEAP = "1g"
_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


def ensure_mirrormaker(version: str = KAFKA_VERSION) -> Path:
    """The directory of MirrorMaker's jars, resolved with Maven first if not cached yet."""
    return ensure_jars(POM, f"mirrormaker-{version}", version, f"connect-mirror-{version}.jar")


def mm2_properties(
    source_alias: str,
    source_bootstrap: str,
    target_bootstrap: str,
    topic: str,
    *,
    tasks: int,
    exactly_once: bool,
    rest_port: int,
    producer: dict[str, str],
    consume_batch: int,
    fetch_partition_bytes: int,
    pattern: str | None = None,
) -> dict[str, str]:
    """The dedicated-mode configuration of one flow `source_alias` -> target for one topic (or
    for every topic ``pattern`` matches, a regular expression).

    A fresh source alias per run gives fresh destination topics (the default replication policy
    names them `<alias>.<topic>`) and fresh internal topics (`mm2-offsets.<alias>.internal`, ...),
    so every run starts from the beginning of the source topic, as ours do.
    """
    src, tgt = source_alias, TARGET_ALIAS
    properties = {
        "clusters": f"{src}, {tgt}",
        f"{src}.bootstrap.servers": source_bootstrap,
        f"{tgt}.bootstrap.servers": target_bootstrap,
        f"{src}->{tgt}.enabled": "true",
        f"{src}->{tgt}.topics": pattern or re.escape(topic),
        "tasks.max": str(tasks),
        # Every topic MirrorMaker creates at the broker's default replication factor, as ours
        # are: 1 on a one-node cluster, 3 on a cluster of three (bench/clusters.py).
        "replication.factor": "-1",
        "checkpoints.topic.replication.factor": "-1",
        "heartbeats.topic.replication.factor": "-1",
        "offset.storage.replication.factor": "-1",
        "status.storage.replication.factor": "-1",
        "config.storage.replication.factor": "-1",
        # Only the copy is measured: no heartbeats (and so no target->source herder), no
        # checkpoints, group offset sync or offset syncs, which would cost CPU beside the copy.
        # The checkpoint connector refuses to start without them (it logs that, once): expected.
        # No offset-syncs.* property may be set then, or the source connector refuses too.
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "sync.group.offsets.enabled": "false",
        "emit.offset-syncs.enabled": "false",
        "refresh.groups.enabled": "false",
        "sync.topic.acls.enabled": "false",
        # Committed source records only, as our stage 1 reads them; also what exactly-once needs
        # (MirrorSourceConnector.exactlyOnceSupport answers UNSUPPORTED otherwise).
        f"{src}.consumer.isolation.level": "read_committed",
        # The batch our roles consume at once (CONSUME_BATCH in both loops) instead of 500.
        f"{src}.consumer.max.poll.records": str(consume_batch),
        # ... and stage 1's fetch size per partition, instead of 1 MiB.
        f"{src}.consumer.max.partition.fetch.bytes": str(fetch_partition_bytes),
        # KIP-710: the internal REST server, needed by exactly-once (task fencing across nodes);
        # on a free loopback port so it never meets anything else on this machine.
        "dedicated.mode.enable.internal.rest": "true",
        "listeners": f"http://127.0.0.1:{rest_port}",
    }
    # The producer settings of the plain loop and stage 1 (Connect's own defaults, in
    # Worker.baseProducerConfigs, are max.in.flight=1 and no idempotence: slower than ours for
    # reasons not in question here).
    for name, value in producer.items():
        properties[f"{tgt}.producer.{name}"] = value
    if exactly_once:
        # KIP-618 in dedicated mode: the worker of the herder that writes to `target` runs source
        # tasks with one transactional producer each, source offsets in the same transaction.
        properties[f"{tgt}.exactly.once.source.support"] = "enabled"
    return properties


def _exception(after: list[str]) -> list[str]:
    """The exception a log line carries, from the lines after it up to the next log line: its
    message and each cause, not the stack frames."""
    messages = []
    for line in after:
        if line.startswith("["):  # the next log line: its event began there
            break
        if not line.lstrip().startswith(("at ", "...")):
            messages.append(line)
    return messages


class MirrorMaker2:
    """One dedicated MirrorMaker 2 JVM for one flow; killed on exit, whatever happened."""

    def __init__(
        self,
        libs: Path,
        workdir: Path,
        source_alias: str,
        source_bootstrap: str,
        target_bootstrap: str,
        topic: str,
        *,
        exactly_once: bool,
        tasks: int,
        producer: dict[str, str],
        consume_batch: int,
        fetch_partition_bytes: int,
        pattern: str | None = None,
        heap: str = _HEAP,
    ) -> None:
        self.libs = libs
        self.heap = heap
        self.workdir = workdir / source_alias
        self.source_alias = source_alias
        self.exactly_once = exactly_once
        self.destination_topic = f"{source_alias}.{topic}"
        self.properties = mm2_properties(
            source_alias,
            source_bootstrap,
            target_bootstrap,
            topic,
            tasks=tasks,
            exactly_once=exactly_once,
            rest_port=free_port(),
            producer=producer,
            consume_batch=consume_batch,
            fetch_partition_bytes=fetch_partition_bytes,
            pattern=pattern,
        )
        self.log_path = self.workdir / "mirrormaker.log"
        self._process: subprocess.Popen[bytes] | None = None
        self.launched = 0.0  # time.monotonic() of the latest start
        self._scanned = 0  # bytes of the log looked through by dead_task

    def start(self) -> MirrorMaker2:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "mm2.properties"
        config.write_text("".join(f"{k} = {v}\n" for k, v in self.properties.items()))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.log_path))
        command = [
            java_executable(),
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            str(self.libs / "*"),
            MAIN_CLASS,
            str(config),
        ]
        self.launched = time.monotonic()
        with open(self.workdir / "stdout.log", "ab") as out:
            # Its own session (Ctrl-C reaches only the bench, which stops it in order), and the
            # kernel SIGKILLs it if the bench dies: no MirrorMaker outlives the bench.
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would, and wait until it is gone."""
        if self._process is None:
            return
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait(30)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (its shutdown hook stops the herders), SIGKILL after `timeout_s`."""
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def dead_task(self) -> str | None:
        """The log line of a task Connect killed and will not restart (its partitions are not
        copied any more), with the lines after it (the exception that killed it, which Connect
        logs below that line), if one was logged since the last look."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._scanned)
                new = log.read()
        except FileNotFoundError:
            return None
        # Only whole lines: a line half written is looked at again with its end.
        whole = new[: new.rfind(b"\n") + 1]
        self._scanned += len(whole)
        lines = whole.decode(errors="replace").splitlines()
        for n, line in enumerate(lines):
            if _TASK_KILLED in line:
                return "\n".join([line, *_exception(lines[n + 1 :])])
        return None

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def stdout_tail(self, lines: int = 5) -> str:
        """The JVM's own last lines (an OutOfMemoryError is said there, not in the log)."""
        return log_tail(self.workdir / "stdout.log", lines)

    def exactly_once_evidence(self) -> tuple[str, int]:
        """What the log says ran: the worker's exactly.once.source.support, and how many
        producers were created with a transactional.id (one per task when exactly-once is on).
        """
        text = self.log_text()
        support = set(re.findall(r"exactly\.once\.source\.support = (\w+)", text))
        ids = set(re.findall(r"transactional\.id = (\S+)", text)) - {"null"}
        return ",".join(sorted(support)) or "?", len(ids)

    def __enter__(self) -> MirrorMaker2:
        if self._process is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()
