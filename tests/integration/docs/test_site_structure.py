"""The site is for users (issue 56 item 1): contributor material (design notes, the test
suite's notes) is neither in the navigation nor in the search index, and user pages say what
the product does now, without its history."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
DOCS = ROOT / "docs"
DRAFTS = DOCS / "changes"
NAV_PAGE = re.compile(r"^\s*-\s*(?:[^\n]*?:\s*)?([\w./-]+\.md)\s*$", re.M)
#: phrases that narrate history instead of describing the product
HISTORY = re.compile(
    r"\b(?:it|they|which|that|this) used to\b"
    r"|\bused to (?:be|fail|wait|make|drop|hang|allocate|write|retry|run|keep)\b|\bbefore this change\b"
    r"|\buntil now\b|\bpreviously\b|\bformerly\b|\bbefore the fix\b",
    re.I,
)


def nav_pages() -> list[str]:
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    return NAV_PAGE.findall(nav)


def user_pages() -> list[Path]:
    return [p for p in DOCS.rglob("*.md") if DRAFTS not in p.parents]


def test_every_nav_entry_is_a_page_and_none_is_contributor_material():
    pages = nav_pages()
    assert len(pages) > 40, pages
    assert not [p for p in pages if not (DOCS / p).is_file()]
    assert not [p for p in pages if p.startswith(("changes/", "contributing/"))]
    assert not [p for p in pages if re.search(r"(^|/)suite\d*\.md$", p)]


def test_contributor_notes_live_outside_the_site():
    notes = ROOT / "contributing" / "notes"
    assert (notes / "suite.md").is_file() and (notes / "layers.md").is_file()
    assert not list(DOCS.rglob("suite*.md")), "test-suite notes belong in contributing/"


def test_the_sections_of_the_site_are_there():
    nav = (ROOT / "mkdocs.yml").read_text()
    for section in (
        "Get started",
        "Concepts",
        "How-to guides",
        "Airflow provider",
        "Operations",
        "Reference",
    ):
        assert f"\n  - {section}:" in nav, section
    for page in (
        "get-started/airflow-tutorial.md",
        "concepts/glossary.md",
        "operations/checklist.md",
        "operations/compatibility.md",
        "operations/threat-model.md",
        "airflow/connections.md",
        "airflow/params.md",
        "airflow/ui-plugin.md",
        "airflow/assets-and-deadlines.md",
    ):
        assert page in nav_pages(), page


def test_user_pages_tell_no_history():
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in user_pages()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not found, "rewrite in the present tense:\n" + "\n".join(found)


def test_the_history_check_finds_history():
    assert HISTORY.search("the task used to fail with an AttributeError")
    assert HISTORY.search("snapshots written before this change are converted")
    assert not HISTORY.search("the key used to partition the stream")


def test_a_draft_is_kept_out_of_the_search_index():
    import importlib.util

    spec = importlib.util.spec_from_file_location("hooks", ROOT / "tools" / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    draft = SimpleNamespace(file=SimpleNamespace(src_uri="changes/kafka.md"), meta={})
    page = SimpleNamespace(file=SimpleNamespace(src_uri="how-to/kafka.md"), meta={})
    hooks.on_page_markdown("# x", page=draft)
    hooks.on_page_markdown("# x", page=page)
    assert draft.meta["search"]["exclude"] is True
    assert "search" not in page.meta


@pytest.mark.timeout(600)
def test_the_search_index_holds_only_user_pages(built_site):
    index = json.loads((built_site / "search" / "search_index.json").read_text())
    locations = {d["location"].split("#")[0] for d in index["docs"]}
    assert "get-started/airflow-tutorial/" in locations
    bad = sorted(loc for loc in locations if loc.startswith(("changes/", "contributing/")))
    assert not bad, bad
