"""Resolve the Apache Kafka jars with Maven into a cache outside the source tree.

The first call runs `mvn dependency:copy-dependencies` on the POM shipped with this package
(about 90 jars); later calls find the completed cache and return at once. A lock file keeps two
processes (a test session and `exactly kafka up` in another shell) from racing on the download,
and the directory is renamed into place only when complete, so a killed download never leaves a
half cache that looks whole.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from localkafka.errors import KafkaInstallError
from runtime.cache import cache_root

KAFKA_VERSION = "4.3.1"
_POM = Path(__file__).with_name("kafka-pom.xml")
_MAVEN_TIMEOUT_S = 900


@dataclass(frozen=True, slots=True)
class KafkaDistribution:
    version: str
    libs_dir: Path

    @property
    def classpath(self) -> str:
        return str(self.libs_dir / "*")

    @property
    def class_archive(self) -> Path:
        """The class-data-sharing archive of this version's JVM classes, once made
        (localkafka/classarchive.py)."""
        return self.libs_dir.parent / "classes.jsa"


def ensure_kafka(version: str = KAFKA_VERSION) -> KafkaDistribution:
    """Return the cached distribution, resolving it with Maven first if it is not there."""
    libs_dir = ensure_jars(_POM, f"kafka-{version}", version, f"kafka_2.13-{version}.jar")
    return KafkaDistribution(version, libs_dir)


def ensure_jars(pom: Path, name: str, version: str, witness: str) -> Path:
    """`<cache>/<name>/libs`: every jar `pom` names for `version`, resolved with Maven on the
    first call. `witness` is a jar that must be there, so a half cache never passes as whole."""
    root = cache_root()
    libs_dir = root / name / "libs"
    if _is_complete(libs_dir, witness):
        return libs_dir
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _is_complete(libs_dir, witness):
            _resolve(pom, version, libs_dir, witness)
    return libs_dir


def _is_complete(libs_dir: Path, witness: str) -> bool:
    return (libs_dir / witness).is_file() and (libs_dir / ".complete").is_file()


def _resolve(pom: Path, version: str, libs_dir: Path, witness: str) -> None:
    if shutil.which("mvn") is None:
        raise KafkaInstallError(f"Maven (mvn) is not on PATH; it is needed to fetch {witness}")
    libs_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".libs-", dir=libs_dir.parent))
    command = [
        "mvn",
        "--batch-mode",
        "--quiet",
        "-f",
        str(pom),
        f"-Dkafka.version={version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise KafkaInstallError(f"mvn did not finish within {_MAVEN_TIMEOUT_S} s") from exc
    if result.returncode != 0 or not (staging / witness).is_file():
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise KafkaInstallError(f"mvn could not resolve {pom.name} ({version}):\n{tail}")
    (staging / ".complete").touch()
    shutil.rmtree(libs_dir, ignore_errors=True)
    staging.rename(libs_dir)
