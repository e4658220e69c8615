"""The reference docs answer a newcomer's questions in minutes (issue 42): ten questions, each
answered under one heading of one reference page (docs/*.md, not the journal) that the docs
site's nav (mkdocs.yml) lists; the reference pages and the README stay short."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List, Set

import pytest
import yaml
from conftest import ROOT

DOCS = ROOT / "docs"
REFERENCE_LIMIT = 120_000  # bytes: every docs/**/*.md outside docs/journal/, generated pages included
README_LIMIT = 10_000

# (question, page under docs/, the heading that answers it, exactly as written)
QUESTIONS = [
    ("How do I add a chip?", "extending.md", "## Add a chip"),
    ("How is an MoE decode step costed?", "model.md", "## MoE decode step"),
    ('What does "% of roofline" mean?', "model.md", "## % of roofline"),
    (
        "Which parameters are placeholders, and which figures do they move?",
        "claims.md",
        "## Placeholders and calibrated parameters",
    ),
    ("How accurate is validate per engine and chip?", "validation.md", "## Accuracy per engine and chip"),
    ("How do I run a sweep on a Dask cluster?", "sweeps.md", "## Run a sweep on a Dask cluster"),
    ("How do I add a paper's claim?", "claims.md", "## Add a paper's claim"),
    ("How is TTFT computed under continuous batching?", "model.md", "## TTFT under continuous batching"),
    ("How do I fit a chip from microbenchmarks?", "extending.md", "## Fit a chip from microbenchmarks"),
    ("How does KV spill to DDR on SN40L?", "capacity.md", "## KV spill to DDR on SN40L"),
]


def headings(path: Path) -> Set[str]:
    """The Markdown headings of a page (`#` to `######` lines outside fenced code), as written."""
    out, fence = set(), None
    for line in path.read_text(encoding="utf-8").splitlines():
        marker = re.match(r"^\s*(```|~~~)", line)
        if marker:
            fence = None if fence == marker.group(1) else fence or marker.group(1)
            continue
        if fence is None and re.match(r"^#{1,6} \S", line):
            out.add(line.rstrip())
    return out


def _pages(node) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for x in node:
            yield from _pages(x)
    elif isinstance(node, dict):
        for x in node.values():
            yield from _pages(x)


def nav_pages() -> Set[str]:
    """Every page path the nav of mkdocs.yml names (relative to docs/)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return {p for p in _pages(config["nav"]) if p.endswith(".md")}


def reference_pages() -> List[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).parts[0] != "journal")


def test_the_table_has_ten_distinct_questions():
    assert len(QUESTIONS) == 10
    assert len({q for q, _, _ in QUESTIONS}) == 10
    assert len({(p, h) for _, p, h in QUESTIONS}) == 10


@pytest.mark.parametrize("question, page, heading", QUESTIONS, ids=[q for q, _, _ in QUESTIONS])
def test_each_question_is_answered_under_a_heading_of_a_reference_page(question, page, heading):
    path = DOCS / page
    assert path.is_file(), f"{question}: docs/{page} does not exist"
    assert path in reference_pages(), f"{question}: docs/{page} is not a reference page"
    assert heading in headings(path), f"{question}: docs/{page} has no heading {heading!r}"
    assert page in nav_pages(), f"{question}: docs/{page} is not in mkdocs.yml's nav"


def test_every_reference_page_is_in_the_nav():
    missing = [
        str(p.relative_to(DOCS)) for p in reference_pages() if str(p.relative_to(DOCS)) not in nav_pages()
    ]
    assert missing == [], f"reference pages missing from mkdocs.yml's nav: {missing}"


def test_reference_pages_total_at_most_120_kb():
    sizes = {str(p.relative_to(DOCS)): p.stat().st_size for p in reference_pages()}
    total = sum(sizes.values())
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert total <= REFERENCE_LIMIT, (
        f"reference pages {total:,} bytes > {REFERENCE_LIMIT:,}; largest: {largest}"
    )


def test_readme_at_most_10_kb():
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_LIMIT, f"README.md {size:,} bytes > {README_LIMIT:,}"


def test_headings_reads_headings_outside_code_only(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n## Add a chip\n\n```bash\n## not a heading\n```\n\n#not one either\n")
    assert headings(page) == {"# Title", "## Add a chip"}
