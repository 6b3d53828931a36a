# syntax=docker/dockerfile:1
# Two images from one file (README "Deploy"):
#   docker build --target exactly -t kafka-exactly .
#       the roles: `exactly run` (every role of a flow, supervised), `exactly replicator`,
#       `exactly deduplicator`, `exactly offsetsync`. No Java, no Spark.
#   docker build --target exactly-validator -t kafka-exactly-validator .
#       `exactly validate`: adds Java 17, pyspark, Spark's Kafka connector and the merge plan's
#       jar, resolved and built here so that a run downloads and compiles nothing and needs no
#       home directory (any user id).
# The install steps below are the ones tests/deploy/test_image.py runs in a fresh virtual
# environment; the jar list is what deps/spark-kafka-connector.xml resolves.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY envelope ./envelope
COPY runtime ./runtime
COPY localkafka ./localkafka
COPY exactly ./exactly
COPY replicator ./replicator
COPY deduplicator ./deduplicator
COPY offsetsync ./offsetsync
COPY validator ./validator
RUN python -m venv /opt/exactly
RUN /opt/exactly/bin/pip install --no-cache-dir --quiet /src

FROM build AS build-validator
RUN /opt/exactly/bin/pip install --no-cache-dir --quiet '/src[validator]'

FROM maven:3.9.9-eclipse-temurin-17 AS connector
COPY deps/spark-kafka-connector.xml /deps/pom.xml
RUN mvn --batch-mode --quiet -f /deps/pom.xml dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory=/opt/spark-jars

# The merge plan's jar (validator/merge_jar.py): compiled with javac against the Spark jars
# pyspark ships and the connector's Kafka client. The validator image has a JRE only.
FROM build-validator AS merge-jar
RUN apt-get update \
    && apt-get install --yes --no-install-recommends openjdk-17-jdk-headless \
    && rm -rf /var/lib/apt/lists/*
COPY --from=connector /opt/spark-jars /opt/spark-jars
RUN EXACTLY_SPARK_JARS='/opt/spark-jars/*.jar' /opt/exactly/bin/python -m validator.merge_jar \
        /opt/merge-jar/exactly-validator-merge.jar

FROM ${PYTHON_IMAGE} AS exactly
# A user of its own, no login, no home: the state directory is the only place it writes.
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin exactly \
    && mkdir -p /var/lib/exactly && chown 10001:10001 /var/lib/exactly
COPY --from=build /opt/exactly /opt/exactly
ENV PATH=/opt/exactly/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    STATE_DIR=/var/lib/exactly/state
WORKDIR /var/lib/exactly
VOLUME /var/lib/exactly
USER 10001:10001
# METRICS_PORT (9464): `exactly run` serves its own there and the roles the next three ports.
EXPOSE 9464 9465 9466 9467
ENTRYPOINT ["exactly"]
CMD ["run"]

FROM ${PYTHON_IMAGE} AS exactly-validator
RUN apt-get update \
    && apt-get install --yes --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin exactly \
    && mkdir -p /var/lib/exactly && chown 10001:10001 /var/lib/exactly
COPY --from=build-validator /opt/exactly /opt/exactly
COPY --from=connector /opt/spark-jars /opt/spark-jars
COPY --from=merge-jar /opt/merge-jar/exactly-validator-merge.jar /opt/spark-jars/
ENV PATH=/opt/exactly/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    EXACTLY_SPARK_JARS=/opt/spark-jars/*.jar
# The report and chart land in the working directory (mount one to keep them).
WORKDIR /var/lib/exactly
USER 10001:10001
ENTRYPOINT ["exactly"]
CMD ["validate"]
