# Two images from one file (docs/deploy.md), built by BuildKit (Docker's builder since 23.0;
# DOCKER_BUILDKIT=1 before) from one public base image and Debian's packages:
#   docker build --target exactly -t kafka-exactly .
#       the roles: `exactly run` (every role of a flow, supervised), `exactly replicator`,
#       `exactly deduplicator`, `exactly offsetsync`. No Java, no Spark.
#   docker build --target exactly-validator -t kafka-exactly-validator .
#       `exactly validate`: adds Java 17, pyspark, Spark's Kafka connector and the merge plan's
#       jar, resolved and built here so that a run downloads and compiles nothing and needs no
#       home directory (any user id).
# Behind a proxy that inspects TLS, give the build the CA bundle (PEM) that holds the proxy's CA
# as the secret `ca-bundle`; pip and Maven then trust it, and no image that ships keeps it:
#   docker build --secret id=ca-bundle,src=/etc/ssl/certs/ca-certificates.crt \
#       --target exactly -t kafka-exactly .
# (the same for exactly-validator). Without the secret the build trusts the base image's CAs.
# apt needs no CA: it reads deb.debian.org over HTTP and checks the packages' signatures.
# No `# syntax=` line: with one, BuildKit fetches that frontend image on every build, and an
# offline or air-gapped build stops there; the builder's own frontend reads all of this file.
# The install steps below are the ones tests/deploy/test_image.py runs outside Docker; the jar
# list is what validator/spark-kafka-connector.xml resolves.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# The sources alone: each build copies them from here after its dependencies' layers, so that a
# source edit reinstalls only the package itself (.dockerignore keeps the rest of the checkout out
# of the build context).
FROM scratch AS sources
COPY pyproject.toml README.md LICENSE /src/
COPY envelope /src/envelope
COPY runtime /src/runtime
COPY localkafka /src/localkafka
COPY exactly /src/exactly
COPY replicator /src/replicator
COPY deduplicator /src/deduplicator
COPY offsetsync /src/offsetsync
COPY validator /src/validator

# The dependencies as pyproject.toml states them, from pyproject.toml alone: only a change to it
# rebuilds these layers. Each pip RUN mounts the optional CA bundle; the mount and PIP_CERT live
# for that command only, no layer keeps them.
FROM ${PYTHON_IMAGE} AS dependencies
COPY pyproject.toml /src/pyproject.toml
RUN python3 -c 'import pathlib, sys, tomllib; \
        project = tomllib.loads(pathlib.Path(sys.argv[1]).read_text())["project"]; \
        out = pathlib.Path(sys.argv[2]); out.mkdir(); \
        (out / "roles.txt").write_text("\n".join(project["dependencies"]) + "\n"); \
        (out / "validator.txt").write_text( \
            "\n".join(project["optional-dependencies"]["validator"]) + "\n")' \
        /src/pyproject.toml /requirements
RUN --mount=type=secret,id=ca-bundle \
    if [ -f /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && python3 -m venv /opt/exactly \
    && /opt/exactly/bin/pip install --no-cache-dir --quiet --requirement /requirements/roles.txt

FROM dependencies AS validator-dependencies
RUN --mount=type=secret,id=ca-bundle \
    if [ -f /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && /opt/exactly/bin/pip install --no-cache-dir --quiet --requirement /requirements/validator.txt

# --no-deps: the dependencies are in the layers above. pip still fetches setuptools to build the
# package (build isolation), hence the CA bundle here too.
FROM dependencies AS build
COPY --from=sources /src /src
RUN --mount=type=secret,id=ca-bundle \
    if [ -f /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && /opt/exactly/bin/pip install --no-cache-dir --quiet --no-deps /src

FROM validator-dependencies AS build-validator
COPY --from=sources /src /src
RUN --mount=type=secret,id=ca-bundle \
    if [ -f /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && /opt/exactly/bin/pip install --no-cache-dir --quiet --no-deps /src

# Java 17 and Maven for the two build-only stages below (the connector's jars, the merge plan's
# jar): Debian's packages on the same base, so the whole file needs one public image. The slim
# base has no /usr/share/man/man1, where the JDK's postinst links its manual pages (it fails
# without the directory).
FROM ${PYTHON_IMAGE} AS java-build
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install --yes --no-install-recommends maven openjdk-17-jdk-headless \
    && rm -rf /var/lib/apt/lists/*
# The truststore Maven downloads with (MAVEN_OPTS): the JDK's, plus each certificate of the CA
# bundle when the build is given one. Only this stage holds it; the shipped images take jars from
# the stages built on it, never this file. keytool imports one certificate per call (about half a
# second each), so the bundle is split first.
RUN --mount=type=secret,id=ca-bundle \
    mkdir -p /opt/build-trust \
    && cp /etc/ssl/certs/java/cacerts /opt/build-trust/cacerts \
    && if [ -f /run/secrets/ca-bundle ]; then \
        mkdir /opt/build-trust/split \
        && awk '/-----BEGIN CERTIFICATE-----/ { file = sprintf("/opt/build-trust/split/%03d.pem", ++n) } \
                file { print > file } \
                /-----END CERTIFICATE-----/ { close(file); file = "" }' /run/secrets/ca-bundle \
        && for pem in /opt/build-trust/split/*.pem; do \
            keytool -importcert -noprompt -storepass changeit -keystore /opt/build-trust/cacerts \
                -alias "build-ca-${pem##*/}" -file "$pem" > /dev/null || exit 1; \
        done \
        && rm -r /opt/build-trust/split; \
    fi
ENV MAVEN_OPTS="-Djavax.net.ssl.trustStore=/opt/build-trust/cacerts -Djavax.net.ssl.trustStorePassword=changeit"

FROM java-build AS connector
COPY validator/spark-kafka-connector.xml /deps/pom.xml
RUN mvn --batch-mode --quiet -f /deps/pom.xml dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory=/opt/spark-jars

# The merge plan's jar (validator/merge_jar.py): compiled with javac against the Spark jars
# pyspark ships and the connector's Kafka client. The validator image has a JRE only.
FROM java-build AS merge-jar
COPY --from=build-validator /opt/exactly /opt/exactly
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
# /healthz on METRICS_PORT (runtime/http.py): 200 while the process is live, 503 when it must be
# restarted; refused or 503 makes Python exit 1. Python because the image has no curl; the
# address is loopback, which METRICS_HOST's default (0.0.0.0) includes. docker-compose.yml runs
# the same command (tests/deploy/test_deployment_files.py checks both).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('METRICS_PORT', '9464'), timeout=4)"]
ENTRYPOINT ["exactly"]
CMD ["run"]

FROM ${PYTHON_IMAGE} AS exactly-validator
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
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
