"""The Spark session of one audit: `local[*]` by default, any master unchanged.

Under `spark-submit` the session already has its master, packages and resources from the
command line, and nothing here overrides them; run by `exactly validate` it gets the defaults
below. Spark's Kafka source comes from spark.jars.packages: Spark's resolver reads the local
Maven repository first, where `make install` resolved it (docs/design.md §9), so a run downloads
nothing.
"""

from __future__ import annotations

import logging
import os
import pwd
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from validator.errors import InputError

KAFKA_CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0"
DEFAULT_MASTER = "local[*]"
_UNDER_SPARK_SUBMIT = "PYSPARK_GATEWAY_PORT"  # set by spark-submit for the Python driver
_SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"  # pyspark's arguments to the spark-submit it runs
_CONNECTOR_IN_M2 = Path(
    ".m2/repository/org/apache/spark/spark-sql-kafka-0-10_2.13/4.0.0",
    "spark-sql-kafka-0-10_2.13-4.0.0.jar",
)
# The connector and the jars it needs, as a POM installed with the package (package data): a pip
# user has no checkout, so the hint names this file, not the repository's deps/ (a link to it).
CONNECTOR_POM = Path(__file__).with_name("spark-kafka-connector.xml")

# Only where the user (or spark-submit) has not set them.
_DEFAULTS = {
    "spark.app.name": "exactly-validate",
    "spark.jars.packages": KAFKA_CONNECTOR,
    # The driver is also the executor in local mode; the two sides are cached there.
    "spark.driver.memory": "2g",
    "spark.ui.enabled": "false",
    # Progress is ours (validator.progress): one line per phase, not a redrawn bar per stage.
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # Spark's default and the Kafka options that carry credentials (the JAAS line, a PEM
    # private key, java_client.py): none of their values in a log line or the event log.
    "spark.redaction.regex": (
        "(?i)secret|password|token|access[.]?key|jaas|keystore[.]key|PRIVATE KEY"
    ),
}


def spark_session(
    master: str | None,
    extra: Mapping[str, str],
    connector_jars: str | None = None,
    own_jars: Sequence[str] = (),
) -> SparkSession:
    """A SparkSession on ``master`` (None: spark-submit's, else local[*]), with the Kafka
    connector from ``connector_jars`` (local files, globs allowed) or else resolved by Spark
    from the local Maven repository, and ``own_jars`` (the merge plan's) on the driver's and
    the executors' classpath. Under spark-submit the driver's classpath is its command line's
    (--jars), and nothing here changes it."""
    under_spark_submit = _UNDER_SPARK_SUBMIT in os.environ
    if (master or ("" if under_spark_submit else DEFAULT_MASTER)).startswith("local"):
        # Everything in this process: loopback spares the hostname lookup and its warning. Never
        # for a cluster, whose executors must reach the driver at a routable address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if under_spark_submit:
        # spark-submit started the JVM with its command line as system properties; connect to it
        # first, so that SparkConf reads them and the checks below see what the user set.
        SparkContext._ensure_initialized()
    conf = SparkConf()
    if master is not None:
        conf.setMaster(master)
    elif not conf.contains("spark.master"):
        conf.setMaster(DEFAULT_MASTER)
    defaults = dict(_DEFAULTS)
    if connector_jars is not None:
        # Nothing to resolve when Spark starts, so no home directory to resolve it into: the
        # validator image runs as any user id.
        del defaults["spark.jars.packages"]
        defaults["spark.jars"] = ",".join([connector_jars, *own_jars])
    elif own_jars and not under_spark_submit:
        _submit_with_jars(own_jars)
    for key, value in {**defaults, **extra}.items():
        if not conf.contains(key):
            conf.set(key, value)
    if conf.get("spark.jars.packages") == KAFKA_CONNECTOR and not conf.contains("spark.jars"):
        _check_connector()
    session = SparkSession.builder.config(conf=conf).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    # py4j logs every connection it closes at INFO, through the root logger ours configured.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return session


def _submit_with_jars(jars: Sequence[str]) -> None:
    """``jars`` for the spark-submit that pyspark runs to start the JVM: there they join the
    resolved packages in the one class loader, the driver's and the executors'. Not spark.jars
    in the conf: pyspark sets its conf's list over the one spark-submit made of it and the
    packages, and the executors would have the merge jar without the Kafka client it calls."""
    args = os.environ.get(_SUBMIT_ARGS, "pyspark-shell")
    os.environ[_SUBMIT_ARGS] = f"--jars {shlex.quote(','.join(jars))} {args}"


def _check_connector() -> None:
    # Without it Spark's resolver tries the network, fails after a minute, and says so in a
    # page of Ivy output; one line now is kinder. Java (Maven, Spark's resolver) takes the home
    # directory from the user database, not from $HOME: look in both.
    homes = dict.fromkeys((Path.home(), Path(pwd.getpwuid(os.getuid()).pw_dir)))
    if not any((home / _CONNECTOR_IN_M2).exists() for home in homes):
        raise InputError(
            f"Spark's Kafka connector is not in the local Maven repository "
            f"({Path.home() / _CONNECTOR_IN_M2}): {resolve_connector_hint()}"
        )


def resolve_connector_hint() -> str:
    """What to run to put the connector into the local Maven repository: a command that needs
    only Maven and the installed package (what `make install` runs in a checkout)."""
    command = f"mvn -f {shlex.quote(str(CONNECTOR_POM))} dependency:resolve"
    return f"resolve it with Maven: `{command}` (in a checkout, `make install` does it)"
