"""The Dockerfile read the way `docker build` reads it (stages, their instructions and flags, the
build context .dockerignore leaves), and a local build that runs a stage's own COPY and RUN steps
on this machine with the image's paths mapped to local ones, so that tests run the image's steps
rather than a copy of them. What it does not understand it refuses, so that a new kind of step in
the Dockerfile fails the tests until it is understood here too."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.replication.processes import REPOSITORY_ROOT

DOCKERFILE = REPOSITORY_ROOT / "Dockerfile"
DOCKERIGNORE = REPOSITORY_ROOT / ".dockerignore"
# Instructions that only describe the image: nothing to run or copy for them.
_METADATA = {"EXPOSE", "LABEL", "ENTRYPOINT", "CMD", "HEALTHCHECK", "STOPSIGNAL", "VOLUME"}


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: RUN, COPY, ...
    flags: tuple[tuple[str, str], ...]  # the leading --name=value words, in order
    arguments: str  # the rest

    def flag(self, name: str) -> str | None:
        values = [value for flag, value in self.flags if flag == name]
        assert len(values) <= 1, f"--{name} given twice: {self}"
        return values[0] if values else None

    def secret_mounts(self) -> dict[str, str]:
        """The secrets a RUN mounts, id to path in the image (BuildKit's default
        /run/secrets/<id> unless target= says otherwise)."""
        secrets = {}
        for name, value in self.flags:
            if name != "mount":
                continue
            options = dict(option.split("=", 1) for option in value.split(","))
            assert options.get("type") == "secret", f"a mount this build cannot run: {value}"
            target = options.get("target", options.get("dst", options.get("destination")))
            secrets[options["id"]] = target or f"/run/secrets/{options['id']}"
        return secrets


@dataclass(frozen=True)
class Stage:
    name: str | None
    base: str  # an image or an earlier stage's name
    instructions: tuple[Instruction, ...]


def _logical_lines(text: str) -> Iterator[str]:
    """Instructions as Docker joins them: comment lines dropped (also inside a continued
    instruction), a line ending in a backslash continued by the next."""
    pending = ""
    for line in text.splitlines():
        if line.strip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined = (pending + line).strip()
        pending = ""
        if joined:
            yield joined
    assert not pending.strip(), "the Dockerfile ends inside a continued instruction"


def _instruction(line: str) -> Instruction:
    keyword, _, rest = line.partition(" ")
    flags = []
    rest = rest.strip()
    while rest.startswith("--"):
        word, _, rest = rest.partition(" ")
        name, _, value = word[2:].partition("=")
        flags.append((name, value))
        rest = rest.strip()
    return Instruction(keyword.upper(), tuple(flags), rest)


def parse(path: Path = DOCKERFILE) -> list[Stage]:
    """Every stage, in order (global ARGs before the first FROM left out)."""
    stages: list[Stage] = []
    name: str | None = None
    base = ""
    body: list[Instruction] = []
    started = False
    for line in _logical_lines(path.read_text()):
        instruction = _instruction(line)
        if instruction.keyword == "FROM":
            if started:
                stages.append(Stage(name, base, tuple(body)))
            words = instruction.arguments.split()
            base = words[0]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            body, started = [], True
        elif started:
            body.append(instruction)
    if started:
        stages.append(Stage(name, base, tuple(body)))
    return stages


def stage(name: str, path: Path = DOCKERFILE) -> Stage:
    (found,) = [s for s in parse(path) if s.name == name] or [None]
    assert found is not None, f"no stage {name!r} in {path}"
    return found


def stage_chain(name: str, path: Path = DOCKERFILE) -> list[Stage]:
    """The stage and the stages it is built FROM, the first base first."""
    by_name = {s.name: s for s in parse(path) if s.name}
    chain = [stage(name, path)]
    while chain[0].base in by_name:
        chain.insert(0, by_name[chain[0].base])
    return chain


def stage_instructions(name: str, path: Path = DOCKERFILE) -> list[Instruction]:
    """The stage's own instructions (not its base stage's)."""
    return list(stage(name, path).instructions)


def stage_runs(name: str, path: Path = DOCKERFILE) -> list[str]:
    """The commands of the stage's own RUN instructions, without their flags."""
    runs = [i.arguments for i in stage_instructions(name, path) if i.keyword == "RUN"]
    assert runs, f"no RUN in stage {name!r} of {path}"
    return runs


def replace_paths(command: str, replacements: Mapping[str, str | Path]) -> str:
    """``command`` with each image path replaced by a local one where it stands as a path (not
    inside a longer name: /src does not touch /usr/src); in one pass, the longest first, so a
    replacement is never replaced again."""
    if not replacements:
        return command
    keys = sorted(replacements, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, keys)) + r")(?![\w.-])")
    return pattern.sub(lambda m: str(replacements[m.group(1)]), command)


def as_argv(command: str, replacements: Mapping[str, str | Path]) -> list[str]:
    """One RUN command as an argument list, its image paths replaced by local ones."""
    return shlex.split(replace_paths(command, replacements))


def copied_from_context(path: Path = DOCKERFILE) -> list[str]:
    """Every source a COPY takes from the build context (not --from another stage)."""
    return [
        source
        for s in parse(path)
        for i in s.instructions
        if i.keyword in ("COPY", "ADD") and i.flag("from") is None
        for source in shlex.split(i.arguments)[:-1]
    ]


class DockerIgnore:
    """.dockerignore as Docker reads it (moby/patternmatcher): patterns relative to the context
    root, `*` and `?` within one path segment, `**` across segments, `!` lets back in, the last
    matching pattern wins, and a pattern that matches a directory matches all below it."""

    def __init__(self, path: Path = DOCKERIGNORE) -> None:
        self.patterns: list[tuple[bool, re.Pattern[str]]] = []
        text = path.read_text() if path.exists() else ""
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            exclusion = line.startswith("!")
            cleaned = os.path.normpath(line[1:].strip() if exclusion else line).lstrip("/")
            self.patterns.append((exclusion, re.compile(_pattern_regex(cleaned))))

    def excluded(self, relative: str) -> bool:
        relative = os.path.normpath(relative)
        parents = relative.split("/")[:-1]
        matched = False
        for exclusion, regex in self.patterns:
            if exclusion != matched:
                continue  # only a pattern that could change the verdict is looked at
            match = regex.match(relative) is not None or any(
                regex.match("/".join(parents[: i + 1])) for i in range(len(parents))
            )
            if match:
                matched = not exclusion
        return matched


def _pattern_regex(pattern: str) -> str:
    regex, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*" and pattern[i + 1 : i + 2] == "*":
            i += 2
            if pattern[i : i + 1] == "/":
                i += 1
            regex += ".*" if i >= len(pattern) else "(.*/)?"
            continue
        if ch == "*":
            regex += "[^/]*"
        elif ch == "?":
            regex += "[^/]"
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            regex += re.escape(pattern[i])
        elif ch == "[":
            end = pattern.index("]", i)
            regex += pattern[i : end + 1]
            i = end
        else:
            regex += re.escape(ch)
        i += 1
    return regex + "$"


def context_files(source: str, context: Path = REPOSITORY_ROOT) -> Iterator[tuple[Path, bool]]:
    """The files under a COPY source in the checkout, each with whether .dockerignore leaves it
    out of the build context."""
    ignore = DockerIgnore(context / ".dockerignore")
    origin = context / source
    files = [origin] if origin.is_file() else sorted(p for p in origin.rglob("*") if p.is_file())
    for file in files:
        yield file, ignore.excluded(file.relative_to(context).as_posix())


@dataclass
class LocalBuild:
    """A stage built on this machine: the host stands in for the base image, ``paths`` maps each
    image path the steps use to a local one (a path with no mapping is refused for COPY; in a RUN
    it stays as it is), ``secrets`` the build secrets given (by id; the others are absent)."""

    paths: Mapping[str, Path]
    scratch: Path  # the working directory where the image's has no mapping; absent secrets
    secrets: Mapping[str, Path] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    dockerfile: Path = DOCKERFILE
    context: Path = REPOSITORY_ROOT
    timeout_s: float = 900
    built: set[str] = field(default_factory=set)

    def build(self, target: str) -> None:
        """Every step of ``target`` and of the stages it is built from or copies from."""
        if target in self.built:
            return
        env = dict(self.env)
        workdir = "/"
        for current in stage_chain(target, self.dockerfile):
            for instruction in current.instructions:
                if instruction.keyword == "COPY":
                    self.copy(instruction, workdir)
                elif instruction.keyword == "RUN":
                    done = self.run(instruction, workdir, env)
                    assert done.returncode == 0, (instruction, done.stdout, done.stderr)
                elif instruction.keyword == "WORKDIR":
                    workdir = os.path.join(workdir, instruction.arguments)
                elif instruction.keyword == "ENV":
                    env.update(self.environment(instruction))
                else:
                    assert instruction.keyword in _METADATA, f"cannot build {instruction}"
            if current.name:
                self.built.add(current.name)

    def local(self, image_path: str) -> Path:
        for prefix in sorted(self.paths, key=len, reverse=True):
            if image_path == prefix or image_path.startswith(prefix.rstrip("/") + "/"):
                return Path(self.paths[prefix]) / image_path[len(prefix) :].lstrip("/")
        raise AssertionError(f"no local path for the image's {image_path}")

    def copy(self, instruction: Instruction, workdir: str) -> None:
        unknown = {name for name, _ in instruction.flags} - {"from", "chown", "chmod", "link"}
        assert not unknown, f"COPY flags this build cannot follow: {instruction}"
        *sources, destination = shlex.split(instruction.arguments)
        into_directory = destination.endswith("/") or len(sources) > 1
        destination = os.path.join(workdir, destination)
        from_stage = instruction.flag("from")
        if from_stage is not None:
            self.build(from_stage)
        for source in sources:
            assert not set(source) & set("*?["), f"COPY wildcards are not followed: {source}"
            origin = self.local(source) if from_stage is not None else self.context / source
            target = self.local(destination)
            # A directory's contents land in the destination, not the directory itself.
            if into_directory and not origin.is_dir():
                target = target / origin.name
            if from_stage is not None:
                if origin.resolve() != target.resolve():
                    _copy_any(origin, target)
                continue
            for file, excluded in context_files(source, self.context):
                if not excluded:
                    placed = target if file == origin else target / file.relative_to(origin)
                    placed.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(file, placed)

    def run(
        self, instruction: Instruction, workdir: str = "/", env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """One RUN as /bin/sh -c runs it in the image (Docker's shell form), with the image's
        paths and the mounted secrets mapped; the result, not checked."""
        unknown = {name for name, _ in instruction.flags} - {"mount"}
        assert not unknown, f"RUN flags this build cannot follow: {instruction}"
        replacements: dict[str, str | Path] = dict(self.paths)
        for secret, target in instruction.secret_mounts().items():
            # An absent secret's path must not exist even where this machine has /run/secrets.
            absent = self.scratch / "absent-secrets" / secret
            replacements[target] = self.secrets.get(secret, absent)
        try:
            cwd = self.local(workdir)
        except AssertionError:
            cwd = self.scratch
        cwd.mkdir(parents=True, exist_ok=True)
        return subprocess.run(
            ["/bin/sh", "-c", replace_paths(instruction.arguments, replacements)],
            cwd=cwd,
            env=dict(self.env if env is None else env),
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
        )

    def environment(self, instruction: Instruction) -> dict[str, str]:
        """An ENV instruction's variables (KEY=value form), their image paths mapped."""
        pairs = [word.split("=", 1) for word in shlex.split(instruction.arguments)]
        assert all(len(pair) == 2 for pair in pairs), f"ENV without `=`: {instruction}"
        # $VAR is expanded by the builder from the image's environment, which this has not.
        assert not any("$" in value for _, value in pairs), f"ENV with $: {instruction}"
        return {name: replace_paths(value, self.paths) for name, value in pairs}


def _copy_any(origin: Path, target: Path) -> None:
    if origin.is_dir():
        shutil.copytree(origin, target, dirs_exist_ok=True, symlinks=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(origin, target)
