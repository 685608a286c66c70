"""`make docs` fails on a broken anchor: the recipe's own command (the ``docs_build``
fixture) run on a two-page site, with the anchor validation mkdocs.yml sets, whose one link
names a heading the other page does not have. With ``--quiet`` beside ``--strict`` mkdocs
never sees the warning, and such a link passed."""

from __future__ import annotations

import os
import subprocess

import pytest


def _site(tmp_path, anchor: str):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# Home\n\nSee [the table](other.md#{anchor}).\n")
    (docs / "other.md").write_text("# Other\n\n## The table\n\nRows.\n")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\ndocs_dir: docs\nsite_dir: site\nnav:\n  - index.md\n  - other.md\n"
        "validation:\n  anchors: warn\n")
    return tmp_path / "mkdocs.yml"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("anchor, fails", [("the-table", False), ("the-old-table", True)])
def test_the_docs_recipe_fails_on_a_broken_anchor(tmp_path, docs_build, anchor, fails):
    assert "--strict" in docs_build
    config = _site(tmp_path, anchor)
    proc = subprocess.run([*docs_build, "-f", str(config)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=100, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert (proc.returncode != 0) is fails, proc.stderr[-2000:]
    if fails:
        assert "the-old-table" in proc.stderr
