"""The merge plan's jar: the Java sources in validator/java/, compiled once with the JDK's
javac against the Spark jars pyspark ships and the Kafka client that Spark's Kafka connector
brings, and cached by the sources' hash (``make install`` builds it; so does the first audit
that finds none).

    python -m validator.merge_jar [JAR]     build it (to JAR), print its path

Java, not Python, because the merge runs on the executors: a jar travels with the job
(spark.jars), where Python code would need kafka-exactly and confluent-kafka installed on every
worker. Compiled here rather than shipped as a binary: the sources are the product, and a JDK is
on every machine that builds the validator (the image builds it in a stage of its own).
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pyspark

from runtime.cache import cache_root
from runtime.logs import get_logger
from validator.errors import MergeJarError
from validator.session import resolve_connector_hint

SOURCES = Path(__file__).with_name("java")
MERGE_CLASS = "io.kafkaexactly.validator.MergeJob"
JAR_PREFIX = "exactly-validator-merge"
# Where the jar records sources_digest() (MergeJob.sourcesDigest reads it).
DIGEST_RESOURCE = "io/kafkaexactly/validator/sources.digest"
# The Kafka client of spark-sql-kafka-0-10_2.13:4.0.0 (validator/spark-kafka-connector.xml).
_KAFKA_CLIENTS = Path(
    ".m2/repository/org/apache/kafka/kafka-clients/3.9.0", "kafka-clients-3.9.0.jar"
)
_JAVAC_TIMEOUT_S = 300
_log = get_logger("validator")


def merge_jar(spark_jars: str | None = None) -> Path:
    """The jar for the sources as they are, built first when the cache has none.

    ``spark_jars``: EXACTLY_SPARK_JARS (the connector as local files), where the Kafka client is
    looked for before the local Maven repository. MergeJarError when it cannot be built.
    """
    digest = sources_digest()
    jar = cache_root() / "validator" / f"{JAR_PREFIX}-{digest[:16]}.jar"
    if jar.exists():
        return jar
    _build(_sources(), jar, digest, _kafka_clients(spark_jars))
    return jar


def sources_digest() -> str:
    """What a merge jar must have been built from to be this driver's: the Java sources
    installed with it and the Spark it was compiled against (the jar records it,
    ``MergeJob.sourcesDigest``)."""
    digest = hashlib.sha256(pyspark.__version__.encode())
    for source in _sources():
        digest.update(source.relative_to(SOURCES).as_posix().encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def jar_named_in(spark_jars: str | None) -> bool:
    """Whether EXACTLY_SPARK_JARS already names a merge jar (the validator image's)."""
    return any(
        Path(path).name.startswith(JAR_PREFIX)
        for pattern in (spark_jars or "").split(",")
        if pattern.strip()
        for path in glob.glob(pattern.strip())
    )


def _build(sources: list[Path], jar: Path, digest: str, kafka_clients: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise MergeJarError("no javac on PATH (a JDK 17 builds the merge plan's jar)")
    spark_classpath = Path(pyspark.__file__).parent / "jars" / "*"
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="merge-jar-", dir=jar.parent) as tmp:
        classes = Path(tmp) / "classes"
        command = [
            javac,
            *("--release", "17", "-Xlint:all,-path,-serial", "-Werror"),
            *("-cp", f"{spark_classpath}{os.pathsep}{kafka_clients}"),
            *("-d", str(classes)),
            *map(str, sources),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=_JAVAC_TIMEOUT_S)
        if done.returncode != 0:
            raise MergeJarError(f"javac failed: {(done.stderr or done.stdout).strip()[-2000:]}")
        built = Path(tmp) / jar.name
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            archive.writestr(DIGEST_RESOURCE, digest)
            for path in sorted(classes.rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        # Renamed into place whole: a concurrent or killed build never leaves half a jar.
        os.replace(built, jar)
    _log.info("built the merge plan's jar", jar=str(jar))


def _kafka_clients(spark_jars: str | None) -> Path:
    if spark_jars:
        for pattern in spark_jars.split(","):
            for path in sorted(glob.glob(pattern.strip())):
                if Path(path).name.startswith("kafka-clients-"):
                    return Path(path)
    # Java takes the home directory from the user database, not $HOME (docs/design.md §9).
    homes = dict.fromkeys((Path.home(), Path(pwd.getpwuid(os.getuid()).pw_dir)))
    for home in homes:
        if (home / _KAFKA_CLIENTS).exists():
            return home / _KAFKA_CLIENTS
    raise MergeJarError(
        f"no Kafka client jar to compile against ({Path.home() / _KAFKA_CLIENTS}): "
        f"{resolve_connector_hint()}"
    )


def main(argv: list[str]) -> int:
    try:
        jar = merge_jar(os.environ.get("EXACTLY_SPARK_JARS"))
    except MergeJarError as exc:
        print(f"exactly: cannot build the validator's merge jar: {exc}", file=sys.stderr)
        return 1
    if argv:
        target = Path(argv[0])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(jar, target)
        jar = target
    print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
