"""`make docs` fails on a broken anchor (mkdocs.yml's ``validation`` and ``--strict``): the
recipe's own command, as `make -n docs` prints it, run on a two-page site whose one link
names a heading the other page does not have. With ``--quiet`` beside ``--strict`` mkdocs
never sees the warning, and such a link passed."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
from repo_paths import REPO_ROOT


def _docs_command() -> list[str]:
    """The recipe's mkdocs command, its variable assignments left out, its program made
    absolute (it is relative to the repository)."""
    out = subprocess.run(["make", "-s", "-n", "docs"], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    [line] = [ln for ln in out.splitlines() if "mkdocs build" in ln]
    program, *args = [w for w in shlex.split(line) if not re.match(r"[A-Z0-9_]+=", w)]
    return [str(REPO_ROOT / program), *args]


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
def test_the_docs_recipe_fails_on_a_broken_anchor(tmp_path, anchor, fails):
    cmd = _docs_command()
    assert "--strict" in cmd
    config = _site(tmp_path, anchor)
    proc = subprocess.run([*cmd, "-f", str(config)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=100, env={"NO_MKDOCS_2_WARNING": "1",
                                                       "PATH": "/usr/bin:/bin"})
    assert (proc.returncode != 0) is fails, proc.stderr[-2000:]
    if fails:
        assert "the-old-table" in proc.stderr
