"""Every citation of the design points at something docs/design.md has.

The code argues for exactly-once in comments that cite "docs/design.md §N" and "invariant N";
the argument itself lives in docs/design.md. A renumbered section, a dropped invariant or a
citation of the old out-of-tree DESIGN.md would leave a comment pointing at nothing, and this
test names each such place by file and line. It also keeps the document honest about its tests:
every `tests/...py::test_name` it names must exist.

The document's headings are the contract: a section is `## N. Title`, an invariant is
`### Invariant N — Title`.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
# The code the type checker reads (every product package and bench/), and the tests.
PACKAGES = (*tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"], "tests")
# Files outside the packages whose comments or prose cite the design.
OTHER_FILES = ("Makefile", "pyproject.toml", "README.md", "Dockerfile", "docker-compose.yml")

SECTION_HEADING = re.compile(r"^## (\d+)\. \S", re.MULTILINE)
INVARIANT_HEADING = re.compile(r"^### Invariant (\d+) — \S", re.MULTILINE)
SECTION_CITATION = re.compile(r"docs/design\.md\s*§\s*(\d+)", re.IGNORECASE)
# "invariant 3", "Invariants 5 and 6", "invariants 1-3", "invariants 4, 5 or 6".
INVARIANT_CITATION = re.compile(
    r"\binvariants?\s+(\d+(?:\s*(?:,|\band\b|\bor\b|-|\u2013)\s*\d+)*)\b", re.IGNORECASE
)
# A citation of the design by section that does not go through docs/design.md: the old
# out-of-tree "DESIGN.md §N", "DESIGN §N", or a bare "design.md §N".
STALE_CITATION = re.compile(r"(?<!docs/)\bdesign(?:\.md)?\s*§", re.IGNORECASE)
TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)")


def scanned_files() -> list[Path]:
    """Every file whose comments may cite the design, this one excepted (it spells them out)."""
    files = [
        path
        for package in PACKAGES
        for pattern in ("*.py", "*.xml")  # the XML: the POMs' comments
        for path in sorted((ROOT / package).rglob(pattern))
    ]
    files += sorted((ROOT / "docs").glob("*.md"))
    files += [ROOT / name for name in OTHER_FILES if (ROOT / name).is_file()]
    this = Path(__file__).resolve()
    return [path for path in files if path.resolve() != this]


def numbers(cited: str) -> set[int]:
    """The invariant numbers of one citation: "4", "5 and 6", "1-3" (a range)."""
    found: set[int] = set()
    for part in re.split(r"\s*(?:,|\band\b|\bor\b)\s*", cited, flags=re.IGNORECASE):
        span = re.fullmatch(r"(\d+)\s*[-\u2013]\s*(\d+)", part)
        if span:
            found.update(range(int(span.group(1)), int(span.group(2)) + 1))
        else:
            found.add(int(part))
    return found


def citations(text: str) -> list[tuple[int, str, set[int]]]:
    """(line, kind, numbers) of every section and invariant citation in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in SECTION_CITATION.finditer(line):
            found.append((number, "section", {int(match.group(1))}))
        for match in INVARIANT_CITATION.finditer(line):
            found.append((number, "invariant", numbers(match.group(1))))
    return found


def design_headings() -> tuple[set[int], set[int]]:
    text = DESIGN.read_text()
    sections = {int(n) for n in SECTION_HEADING.findall(text)}
    invariants = {int(n) for n in INVARIANT_HEADING.findall(text)}
    return sections, invariants


def unresolved(
    files: list[Path], sections: set[int], invariants: set[int], root: Path = ROOT
) -> list[str]:
    """``file:line: what`` for every citation the design does not have (paths from ``root``)."""
    missing = []
    for path in files:
        where = path.relative_to(root)
        for line, kind, cited in citations(path.read_text(errors="replace")):
            have = sections if kind == "section" else invariants
            for n in sorted(cited - have):
                what = f"§{n}" if kind == "section" else f"invariant {n}"
                missing.append(f"{where}:{line}: cites {what}, which docs/design.md does not have")
    return missing


def test_the_design_numbers_its_sections_and_invariants_without_gaps():
    sections, invariants = design_headings()
    assert sections == set(range(1, max(sections) + 1)), sorted(sections)
    assert invariants == set(range(1, max(invariants) + 1)), sorted(invariants)
    text = DESIGN.read_text()
    assert len(INVARIANT_HEADING.findall(text)) == len(invariants), "an invariant heading repeats"


def test_every_citation_names_a_section_or_invariant_the_design_has():
    files = scanned_files()
    assert len(files) > 100  # the packages were found, not an empty tree
    missing = unresolved(files, *design_headings())
    assert not missing, "\n".join(missing)


def test_no_citation_of_the_design_bypasses_docs_design_md():
    stale = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in scanned_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if STALE_CITATION.search(line)
    ]
    assert not stale, "cite docs/design.md §N instead:\n" + "\n".join(stale)


def test_every_test_the_design_names_exists():
    named = TEST_REFERENCE.findall(DESIGN.read_text())
    assert len(named) > 20
    absent = [
        f"{file}::{name}"
        for file, name in sorted(set(named))
        if not (ROOT / file).is_file()
        or not re.search(rf"^def {name}\(", (ROOT / file).read_text(), re.MULTILINE)
    ]
    assert not absent, "docs/design.md names tests that do not exist:\n" + "\n".join(absent)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("docs/design.md §4, invariants 1-3", [("section", {4}), ("invariant", {1, 2, 3})]),
        ("(invariants 5 and 6)", [("invariant", {5, 6})]),
        ("Invariant 3 / say it", [("invariant", {3})]),
        ("invariants 4, 5 or 6", [("invariant", {4, 5, 6})]),
        ("Invariants a cycle keeps: the broken_invariant test", []),
    ],
)
def test_citations_are_read_in_every_form_the_code_uses(line, expected):
    assert [(kind, cited) for _, kind, cited in citations(line)] == expected


def test_a_citation_the_design_lacks_is_named_by_file_and_line(tmp_path):
    cites = tmp_path / "cites.py"
    cites.write_text("# fine: docs/design.md §3, invariant 5\n# wrong: docs/design.md §99\n")
    assert unresolved([cites], *design_headings(), root=tmp_path) == [
        "cites.py:2: cites §99, which docs/design.md does not have"
    ]
    assert STALE_CITATION.search("see DESIGN.md §9") is not None
    assert STALE_CITATION.search("see DESIGN §9") is not None
    assert STALE_CITATION.search("see docs/design.md §9") is None
