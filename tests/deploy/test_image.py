"""The images (Dockerfile) without a Docker engine: the `build` stage's own COPY and RUN steps,
run here into a temporary directory, give an install that runs every role command, leaves Spark
and Java out, is small and carries its licence and the connector's POM; the layers are ordered so
a source edit reinstalls no dependency; one public base image, no frontend image; the build
context holds what the steps copy; an optional CA bundle secret reaches pip and Maven and no
shipped image; and a pip user of `[validator]` is told a Maven command that works from the wheel
alone."""

from __future__ import annotations

import filecmp
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.deploy.dockerfile import (
    DOCKERFILE,
    DockerIgnore,
    Instruction,
    LocalBuild,
    context_files,
    copied_from_context,
    parse,
    stage,
    stage_chain,
    stage_instructions,
)
from tests.replication.processes import REPOSITORY_ROOT

pytestmark = pytest.mark.timeout(900)

LICENSE = REPOSITORY_ROOT / "LICENSE"
CONNECTOR_POM = REPOSITORY_ROOT / "validator" / "spark-kafka-connector.xml"
SHIPPED = ("exactly", "exactly-validator")
# What every pip RUN begins with: the CA bundle secret, when the build is given one, is what pip
# trusts (PIP_CERT) for that command only.
PIP_CA = "if [ -f /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi"
_KEYTOOL = shutil.which("keytool")


def _directory_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _image_paths(root: Path) -> dict[str, Path]:
    """Where the build stages' image paths live here."""
    return {
        "/src": root / "src",
        "/opt/exactly": root / "opt-exactly",
        "/requirements": root / "requirements",
    }


def _pyproject() -> dict:
    return tomllib.loads((REPOSITORY_ROOT / "pyproject.toml").read_text())


# Half a minute of pip installs into a fresh environment: in make test-slow, to keep the
# default suite inside its 20 minutes.
@pytest.mark.slow
def test_the_roles_image_install_runs_every_role_command_without_spark(tmp_path):
    paths = _image_paths(tmp_path)
    LocalBuild(paths, scratch=tmp_path / "scratch").build("build")
    venv = paths["/opt/exactly"]
    exactly = venv / "bin" / "exactly"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    listed = subprocess.run(
        [exactly, "--help"], env=env, capture_output=True, text=True, check=True
    ).stdout
    for command in ("run", "replicator", "deduplicator", "offsetsync", "validate", "config"):
        assert f"  {command} " in listed, listed
    for module in ("replicator", "deduplicator", "offsetsync", "exactly.supervise"):
        subprocess.run([venv / "bin" / "python", "-c", f"import {module}"], env=env, check=True)
    no_spark = subprocess.run(
        [venv / "bin" / "python", "-c", "import pyspark"], env=env, capture_output=True
    )
    assert no_spark.returncode != 0
    # The dependencies the layer before the sources installed are all the package needs.
    check = subprocess.run([venv / "bin" / "pip", "check"], env=env, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    size_mb = _directory_size(venv) / 1e6
    print(f"roles' install: {size_mb:.0f} MB in {venv}")
    # Spark alone is about 400 MB: an install near that size has brought it in.
    assert size_mb < 150, size_mb
    assert not any(venv.rglob("*.jar"))
    assert os.access(exactly, os.X_OK)
    # What the wheel carries: the licence's text and metadata, the connector's POM (the pip
    # [validator] user's one way to it).
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (dist,) = site.glob("kafka_exactly-*.dist-info")
    assert (dist / "licenses" / "LICENSE").read_bytes() == LICENSE.read_bytes()
    metadata = (dist / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata, metadata[:2000]
    assert "License-File: LICENSE" in metadata, metadata[:2000]
    assert (site / "validator" / "spark-kafka-connector.xml").read_bytes() == (
        CONNECTOR_POM.read_bytes()
    )


def test_the_licence_is_the_apache_license_2_0_unmodified():
    text = LICENSE.read_text()
    assert _pyproject()["project"]["license"] == "Apache-2.0"
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert "APPENDIX: How to apply the Apache License to your work." in text
    # Byte for byte the text the Apache Software Foundation publishes (LICENSE-2.0.txt, also
    # Debian's /usr/share/common-licenses/Apache-2.0).
    digest = hashlib.sha256(LICENSE.read_bytes()).hexdigest()
    assert digest == "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_requirements_layer_is_pyprojects_dependency_lists(tmp_path):
    paths = _image_paths(tmp_path)
    build = LocalBuild(paths, scratch=tmp_path / "scratch")
    (copy, requirements, *_) = stage_instructions("dependencies")
    assert copy.keyword == "COPY"
    assert "tomllib" in requirements.arguments
    build.copy(copy, "/")
    done = build.run(requirements)
    assert done.returncode == 0, done.stderr
    project = _pyproject()["project"]
    written = paths["/requirements"]
    assert (written / "roles.txt").read_text().splitlines() == project["dependencies"]
    assert (written / "validator.txt").read_text().splitlines() == (
        project["optional-dependencies"]["validator"]
    )


def _brings_sources(instruction: Instruction) -> bool:
    if instruction.keyword != "COPY":
        return False
    if instruction.flag("from") is not None:
        return instruction.flag("from") == "sources"
    return shlex.split(instruction.arguments)[:-1] != ["pyproject.toml"]


@pytest.mark.parametrize("target", ["build", "build-validator"])
def test_a_source_edit_reinstalls_no_dependency(target):
    steps = [i for s in stage_chain(target) for i in s.instructions]
    first_sources = next(n for n, i in enumerate(steps) if _brings_sources(i))
    before, after = steps[:first_sources], steps[first_sources:]
    # Before the sources: pyproject.toml alone from the context, and the dependency installs.
    assert [shlex.split(i.arguments)[:-1] for i in before if i.keyword == "COPY"] == [
        ["pyproject.toml"]
    ]
    installs = [i.arguments for i in before if "pip install" in i.arguments]
    assert any("--requirement /requirements/roles.txt" in i for i in installs), installs
    if target == "build-validator":
        assert any("--requirement /requirements/validator.txt" in i for i in installs), installs
    # After: the package alone, nothing it depends on.
    runs = [i.arguments for i in after if i.keyword == "RUN"]
    assert len(runs) == 1
    assert runs[0].endswith("pip install --no-cache-dir --quiet --no-deps /src")
    # Every package pyproject.toml builds is among the sources copied.
    found = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    packages = {p.rstrip("*") for p in found["include"]}
    copied = {Path(s).parts[0] for s in copied_from_context() if (REPOSITORY_ROOT / s).is_dir()}
    assert packages <= copied, packages - copied


def test_the_dockerfile_needs_one_public_base_image_and_no_frontend_image():
    text = DOCKERFILE.read_text()
    # A parser directive would make BuildKit fetch docker/dockerfile before the first step.
    assert not re.search(r"^#\s*syntax\s*=", text, re.IGNORECASE | re.MULTILINE)
    (default,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert re.fullmatch(r"python:3\.11[\d.]*-slim-bookworm", default), default
    names: set[str] = set()
    for s in parse():
        assert s.base in names | {"${PYTHON_IMAGE}", "scratch"}, (s.name, s.base)
        names.add(s.name or "")
    # Java and Maven from Debian, in a build-only stage on that base.
    (install, *_) = [i.arguments for i in stage_instructions("java-build") if i.keyword == "RUN"]
    assert "maven openjdk-17-jdk-headless" in install, install
    assert stage_chain("connector")[0].name == "java-build"


def test_the_build_context_holds_what_the_dockerfile_copies_and_not_the_checkout():
    ignore = DockerIgnore()
    sources = copied_from_context()
    assert sources, "no COPY from the build context"
    for source in sources:
        assert (REPOSITORY_ROOT / source).exists(), source
        assert not ignore.excluded(source), f".dockerignore leaves out {source}, which COPY takes"
        for file, excluded in context_files(source):
            # Inside the sources, only caches and build leftovers stay out.
            if excluded:
                relative = file.relative_to(REPOSITORY_ROOT)
                leftover = "__pycache__" in relative.parts or file.suffix in (".pyc", ".pyo")
                assert leftover or ".egg-info" in str(relative), relative
    for left_out in (".venv", ".git", "tests", "bench", "k8s", "artifacts", "deploy", "Makefile"):
        assert ignore.excluded(left_out), left_out
        assert ignore.excluded(f"{left_out}/anything/below"), left_out
    for cache in ("kafka_exactly.egg-info", "runtime/__pycache__/http.cpython-311.pyc"):
        assert ignore.excluded(cache), cache


def test_the_dockerignore_reading_follows_dockers_rules(tmp_path):
    """The reading the test above relies on, on the rules Docker's documentation gives."""
    rules = tmp_path / ".dockerignore"
    rules.write_text("# comment\n*\n!keep\n**/*.tmp\n")
    ignore = DockerIgnore(rules)
    assert ignore.excluded("anything")
    assert ignore.excluded("anything/below")
    assert not ignore.excluded("keep")
    assert not ignore.excluded("keep/deep/file.py")
    assert ignore.excluded("keep/file.tmp")
    assert ignore.excluded("keep/deep/file.tmp")
    # Without **, a pattern is anchored at the context's root.
    rules.write_text("*.md\n/build\n")
    ignore = DockerIgnore(rules)
    assert ignore.excluded("README.md")
    assert not ignore.excluded("docs/README.md")
    assert ignore.excluded("build/x")
    assert not ignore.excluded("src/build/x")


def _pip_runs() -> list[tuple[str, Instruction]]:
    return [
        (s.name or "", i)
        for s in parse()
        for i in s.instructions
        if i.keyword == "RUN" and "/opt/exactly/bin/pip" in i.arguments
    ]


@pytest.mark.parametrize("given", [True, False], ids=["secret given", "no secret"])
def test_every_pip_install_trusts_the_ca_bundle_secret_when_given(given, tmp_path):
    """Each pip RUN as the image runs it, pip replaced by a stand-in that writes down the
    PIP_CERT it is started with (what pip would trust)."""
    runs = _pip_runs()
    assert {name for name, _ in runs} == {
        "dependencies",
        "validator-dependencies",
        "build",
        "build-validator",
    }
    log = tmp_path / "pip-calls"
    stand_in = tmp_path / "pip"
    stand_in.write_text('#!/bin/sh\nprintf "%s|%s\\n" "${PIP_CERT:-none}" "$*" >> "$PIP_LOG"\n')
    stand_in.chmod(0o755)
    bundle = tmp_path / "ca-bundle.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    env = {k: v for k, v in os.environ.items() if k != "PIP_CERT"}
    build = LocalBuild(
        {**_image_paths(tmp_path), "/opt/exactly/bin/pip": stand_in},
        scratch=tmp_path / "scratch",
        secrets={"ca-bundle": bundle} if given else {},
        env={**env, "PIP_LOG": str(log)},
    )
    for name, run in runs:
        assert run.secret_mounts() == {"ca-bundle": "/run/secrets/ca-bundle"}, name
        assert " ".join(run.arguments.split()).startswith(PIP_CA + " && "), name
        log.unlink(missing_ok=True)
        done = build.run(run)
        assert done.returncode == 0, (name, done.stderr)
        (call,) = log.read_text().splitlines()
        cert, _, arguments = call.partition("|")
        assert cert == (str(bundle) if given else "none"), (name, call)
        assert arguments.startswith("install "), (name, call)


def _certificate(directory: Path, name: str) -> tuple[Path, str]:
    """A new self-signed CA certificate (PEM) and its SHA-256 fingerprint as keytool prints it."""
    pem, key = directory / f"{name}.pem", directory / f"{name}.key"
    new_ca = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subprocess.run(
        [*new_ca, "-subj", f"/CN={name}", "-keyout", key, "-out", pem],
        check=True,
        capture_output=True,
        timeout=60,
    )
    fingerprint = subprocess.run(
        ["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", pem],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return pem, fingerprint.strip().split("=", 1)[1]


def _keystore_with(store: Path, pem: Path, alias: str) -> None:
    assert _KEYTOOL is not None
    into = ["-storepass", "changeit", "-keystore", store]
    subprocess.run(
        [_KEYTOOL, "-importcert", "-noprompt", *into, "-alias", alias, "-file", pem],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _truststore_run() -> Instruction:
    (run,) = [i for i in stage_instructions("java-build") if i.secret_mounts()]
    return run


@pytest.mark.skipif(_KEYTOOL is None, reason="no keytool (a JDK) on this machine")
def test_the_ca_bundle_secret_lands_in_the_build_truststore_and_in_no_shipped_image(tmp_path):
    base, base_fingerprint = _certificate(tmp_path, "jdk-default")
    jdk_store = tmp_path / "jdk-cacerts"
    _keystore_with(jdk_store, base, "jdk-default")
    first, first_fingerprint = _certificate(tmp_path, "proxy-root")
    second, second_fingerprint = _certificate(tmp_path, "proxy-intermediate")
    # A bundle as distributions write them: comments between the certificates, one of them with
    # CRLF line ends.
    bundle = tmp_path / "ca-bundle.pem"
    bundle.write_text(
        "# proxy-root\n"
        + first.read_text()
        + "\n# proxy-intermediate\n"
        + second.read_text().replace("\n", "\r\n")
    )
    run = _truststore_run()
    for given in (True, False):
        trust = tmp_path / ("trust-given" if given else "trust-none")
        build = LocalBuild(
            {"/opt/build-trust": trust, "/etc/ssl/certs/java/cacerts": jdk_store},
            scratch=tmp_path / "scratch",
            secrets={"ca-bundle": bundle} if given else {},
        )
        done = build.run(run)
        assert done.returncode == 0, done.stdout + done.stderr
        listed = subprocess.run(
            [_KEYTOOL, "-list", "-keystore", trust / "cacerts", "-storepass", "changeit"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert base_fingerprint in listed, listed
        if given:
            assert first_fingerprint in listed, listed
            assert second_fingerprint in listed, listed
            assert "contains 3 entries" in listed, listed
            assert sorted(p.name for p in trust.iterdir()) == ["cacerts"]  # split files gone
        else:
            assert filecmp.cmp(trust / "cacerts", jdk_store, shallow=False)
    # Maven downloads with that truststore, in every stage built on java-build.
    (maven_opts,) = [i for i in stage_instructions("java-build") if i.keyword == "ENV"]
    assert "-Djavax.net.ssl.trustStore=/opt/build-trust/cacerts " in maven_opts.arguments
    # No shipped image is built on a stage that mounted the secret, or copies the truststore.
    for shipped in SHIPPED:
        for built_on in stage_chain(shipped):
            assert not any(i.secret_mounts() for i in built_on.instructions), built_on.name
        for copy in stage_instructions(shipped):
            if copy.keyword == "COPY" and copy.flag("from"):
                origin = stage(copy.flag("from") or "")
                source = shlex.split(copy.arguments)[0]
                assert not source.startswith(("/opt/build-trust", "/run/secrets")), copy
                assert origin.name != "java-build", copy


# Slow (about 20 s: Maven downloads through the truststore); `make test-slow` runs it, and
# `make test-images` builds the connector stage for real with the secret.
@pytest.mark.slow
@pytest.mark.skipif(_KEYTOOL is None, reason="no keytool (a JDK) on this machine")
def test_the_images_maven_trusts_the_build_truststore_and_only_it(tmp_path):
    """The connector stage's own mvn command with java-build's MAVEN_OPTS and a local repository
    of its own (so that it downloads): a truststore without the CA the registry's certificate
    chains to stops it at TLS; this machine's JDK truststore (what the build truststore is made
    of) lets it through. The POM is a small one: the point is the download, not the jars."""
    pom = tmp_path / "pom.xml"
    pom.write_text(
        "<project><modelVersion>4.0.0</modelVersion><groupId>t</groupId><artifactId>t"
        "</artifactId><version>1</version><packaging>pom</packaging><dependencies><dependency>"
        "<groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.16"
        "</version></dependency></dependencies></project>"
    )
    (copy_jars,) = [i for i in stage_instructions("connector") if i.keyword == "RUN"]
    (maven_opts,) = [i for i in stage_instructions("java-build") if i.keyword == "ENV"]
    stranger, _ = _certificate(tmp_path, "stranger")
    outcomes = {}
    for trust in ("stranger", "jdk"):
        store = tmp_path / trust / "cacerts"
        store.parent.mkdir()
        if trust == "jdk":
            shutil.copy(Path("/etc/ssl/certs/java/cacerts"), store)
        else:
            _keystore_with(store, stranger, "stranger")
        paths = {
            "/opt/build-trust": store.parent,
            "/deps/pom.xml": pom,
            "/opt/spark-jars": tmp_path / trust / "jars",
        }
        scratch = tmp_path / "scratch"
        maven_env = LocalBuild(paths, scratch=scratch).environment(maven_opts)
        build = LocalBuild(paths, scratch=scratch, env={**os.environ, **maven_env})
        command = copy_jars.arguments.replace(
            "mvn ", f"mvn -X -Dmaven.repo.local={tmp_path / trust / 'repository'} ", 1
        )
        outcomes[trust] = build.run(Instruction("RUN", (), command))
    if outcomes["jdk"].returncode != 0 and "PKIX" not in outcomes["jdk"].stdout:
        pytest.skip("Maven Central is not reachable from here")
    assert outcomes["jdk"].returncode == 0, outcomes["jdk"].stdout[-3000:]
    assert (tmp_path / "jdk" / "jars" / "slf4j-api-2.0.16.jar").exists()
    assert outcomes["stranger"].returncode != 0
    assert "PKIX path building failed" in outcomes["stranger"].stdout


def test_a_pip_user_of_the_validator_is_told_a_maven_command_that_needs_only_the_wheel(
    tmp_path, monkeypatch
):
    pytest.importorskip("pyspark")
    from validator import merge_jar, session
    from validator.errors import InputError, MergeJarError

    # Neither jar in the local Maven repository, as on a machine where only pip ran.
    monkeypatch.setattr(session, "_CONNECTOR_IN_M2", Path("no/such/connector.jar"))
    monkeypatch.setattr(merge_jar, "_KAFKA_CLIENTS", Path("no/such/kafka-clients.jar"))
    with pytest.raises(InputError) as connector:
        session._check_connector()
    with pytest.raises(MergeJarError) as clients:
        merge_jar._kafka_clients(None)
    commands = set()
    for error in (connector.value, clients.value):
        message = str(error)
        assert "deps/" not in message, message  # no checkout's path
        (command,) = re.findall(r"`(mvn [^`]+)`", message)
        commands.add(command)
    (command,) = commands
    argv = shlex.split(command)
    assert argv[:2] == ["mvn", "-f"], argv
    assert argv[3:] == ["dependency:resolve"], argv
    # The POM the package installs beside its code (the wheel carries it: the test above).
    named = Path(argv[2])
    assert named == Path(session.__file__).with_name("spark-kafka-connector.xml")
    assert named.read_bytes() == CONNECTOR_POM.read_bytes()
    # The command as printed, run from elsewhere (offline: this machine resolved it already).
    done = subprocess.run(
        [argv[0], "--offline", "--batch-mode", "--quiet", *argv[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The POM resolves the connector and the Kafka client the merge jar compiles against.
    listing = subprocess.run(
        ["mvn", "--offline", "--batch-mode", "-f", named, "dependency:list"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "org.apache.spark:spark-sql-kafka-0-10_2.13:jar:4.0.0" in listing, listing[-3000:]
    assert "org.apache.kafka:kafka-clients:jar:3.9.0" in listing, listing[-3000:]
