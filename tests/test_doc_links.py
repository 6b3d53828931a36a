"""Every relative link in the README and docs/ reaches a file of the repository, and every
`#anchor` a heading of the page it names: the pages link into each other, and a renamed page or
heading would otherwise leave a link pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# [text](target): the target up to the closing parenthesis; none of ours holds a space or ")".
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped (not - or _),
    spaces as hyphens; a repeated one gets -1, -2, ..."""
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in found:
            n += 1
            anchor = f"{slug}-{n}"
        found.add(anchor)
    return found


def reaches(linked: Path, anchor: str) -> bool:
    """Whether ``linked`` is a file or folder of the repository with the heading ``anchor``."""
    if not linked.exists() or ROOT not in [linked, *linked.parents]:
        return False
    return not anchor or (linked.suffix == ".md" and anchor in anchors(linked.read_text()))


def broken(path: Path) -> list[str]:
    """``page: target`` for every relative link of ``path`` that reaches nothing."""
    wrong = []
    for target in LINK.findall(FENCE.sub("", path.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        if not reaches((path.parent / file).resolve() if file else path, anchor):
            wrong.append(f"{path.relative_to(ROOT)}: {target}")
    return wrong


def test_every_relative_link_reaches_a_file_and_a_heading():
    assert len(documents()) > 10  # the README and the pages were found
    assert [line for path in documents() for line in broken(path)] == []


def test_anchors_are_made_as_github_makes_them():
    page = "# Offset sync: `exactly offsetsync`\n## Workers: `REPLICATION_WORKERS`\n## A b\n## A b"
    assert anchors(page) == {
        "offset-sync-exactly-offsetsync",
        "workers-replication_workers",
        "a-b",
        "a-b-1",
    }


def test_a_link_to_a_missing_page_or_heading_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "other.md").write_text("# Title\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#title) [gone](missing.md) [no heading](other.md#nothing) "
        "[outside](https://example.com) [here](#local)\n## Local\n"
    )
    assert broken(page) == ["page.md: missing.md", "page.md: other.md#nothing"]
